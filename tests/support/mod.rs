//! Helpers shared by the four integration test binaries (`tests/detect.rs`,
//! `tests/serve.rs`, `tests/signals.rs`, `tests/process.rs`), each of which declares
//! `mod support;` once. Fixtures are in `tests/fixtures/`.
//!
//! Every binary uses only some of these helpers, hence `dead_code` is allowed here.
#![allow(dead_code)]

/// The attack suite's helpers (issue 31): the binary with a config file, its RSS, looping
/// tool calls, decoded-cost bombs.
pub mod attack;
/// A memory cgroup for a spawned server (peak usage, OOM kills), or `/proc` where none
/// can be made.
pub mod cgroup;
/// A loopwatch in-process fed with every corpus run, for the fleet and Prometheus tests.
pub mod corpus_server;
/// A TCP proxy that can be cut and restored: the fault suite's outage.
pub mod cut_proxy;
/// A real OTLP/gRPC downstream that records what it accepts.
pub mod downstream;
/// The fault suite's load and its span-id bookkeeping.
pub mod fault_load;
/// What the fuzz targets run; also the library of the `fuzz/` crate.
pub mod fuzz;
/// The attack suite's hostile clients: stalled streams and bodies, over-deep attributes,
/// timed liveness probes.
pub mod hostile;
/// OTLP ≤ 0.18 protobuf (`instrumentation_library_spans`).
pub mod legacy;
/// The external tools the operations tests drive (helm, kubectl, promtool, Chromium).
pub mod ops;
/// Receiver and forwarder helpers: corpus files, compressed bodies, a recording sink.
pub mod receiver;
/// Certificates made in the test (rcgen) and a one-span request.
pub mod security;
/// `loopwatch serve` as a child process.
pub mod serve_process;
/// The whole server in-process on port 0, the admin API, an OpenMetrics parser.
pub mod server;
/// Signal helpers: the Redis and NATS addresses, retry settings, a signal builder.
pub mod signals;
/// A downstream that counts spans by id and can flap (refuse, stall), for soak tests.
pub mod span_sink;
/// The corpus and oracle scenarios as OTLP requests, span builders, `loopwatch scan`.
pub mod spans;
