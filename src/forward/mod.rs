//! Forwarding to the downstream OTLP/gRPC exporter endpoint: bounded queue, retries with
//! backoff on OTLP-retryable codes, drain on shutdown.
