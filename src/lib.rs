//! loopwatch: an OpenTelemetry sidecar that detects AI-agent tool-call loops.
//!
//! Modules in pipeline order (DESIGN §1); every import points down this list, never up
//! (`tests/process/layout.rs` checks it):
//! receiver → [`ingest`] → [`pipeline`] (extract with [`conventions`], fingerprint, keep
//! per-run state in [`registry`], detect with [`detector`], annotate with [`annotate`]; all of
//! it driven by [`engine`]) → [`forward`], with [`signals`] on the side.

/// The admin HTTP API and the fleet page.
pub mod admin;
/// `loop.*` attributes and synthetic spans written onto the spans that complete detections.
pub mod annotate;
/// The offline commands: `scan`, `explain`, `replay`.
pub mod cli;
/// Configuration: defaults, file, environment and flags layered into one `Config`.
pub mod config;
/// Reading tool calls and model responses from spans, per framework convention.
pub mod conventions;
/// The loop detectors: pure, synchronous, per-run state machines.
pub mod detector;
/// The detection path shared by `serve` and `scan`: spans → events → detections → edits.
pub mod engine;
/// Fingerprints of arguments and results (canonical JSON, HMAC-SHA256 for export).
pub mod fingerprint;
/// Forwarding every span downstream: exporter client, queue, retries.
pub mod forward;
/// The pre-execution check (`POST /v1/check`, `Guard/Check`) and approvals of paused runs.
pub mod guard;
/// What the receivers hand the span path, and the limits on admitting it.
pub mod ingest;
/// Prometheus metrics, their exposition and the fleet aggregates.
pub mod metrics;
/// Network edges shared by every listener and client: TLS, auth, retry, listener limits.
pub mod net;
/// OTLP types and helpers, OTLP/JSON, and the protobuf wire reader of the span path.
pub mod otlp;
/// The span path behind the receivers: engine, forwarder and signals wired together.
pub mod pipeline;
/// The OTLP/gRPC and OTLP/HTTP receivers.
pub mod receiver;
/// Per-run state: each run's events in span start order, joins, eviction.
pub mod registry;
/// `loopwatch serve`: building, binding, running and stopping the server.
pub mod server;
/// Loop signals and their sinks (Redis, NATS, webhook, gRPC Watch, HTTP polling).
pub mod signals;
/// loopwatch's own metrics over OTLP.
pub mod telemetry;
