//! loopwatch: an OpenTelemetry sidecar that detects AI-agent tool-call loops.
//!
//! Pipeline (DESIGN §1): receiver → extract ([`conventions`]) → [`registry`] →
//! [`detector`] (pure, synchronous) → [`annotate`] → [`forward`], with [`signals`] on the side.
//!
//! Layout: every import points down. [`receiver`] → [`ingest`] (the receiver ↔ span-path
//! contract) ← [`pipeline`] (the span path) → [`forward`]; OTLP wire helpers live in
//! [`otlp`], config sections beside their [`config`] parent or their component.

pub mod annotate;
pub mod api;
pub mod api_query;
pub mod auth;
pub mod budget;
pub mod class_queue;
pub mod config;
pub mod conventions;
pub mod detector;
pub mod engine;
pub mod event;
pub mod explain;
pub mod exposition;
pub mod fingerprint;
pub mod fleet;
pub mod forward;
pub mod ingest;
pub mod intern;
pub mod lifecycle;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod otlp;
pub mod otlp_json;
pub mod pipeline;
pub mod receiver;
pub mod registry;
pub mod replay;
pub mod report;
pub mod retry;
pub mod run_key;
pub mod scan;
pub mod security;
pub mod server;
pub mod signals;
pub mod startup;
pub mod synthetic;
pub mod telemetry;
pub mod tls;
pub mod ui;
pub mod wire;
