//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.
