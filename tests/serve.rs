//! The server on loopback port 0: the OTLP receivers, admission, bad input, forwarding
//! to a real downstream, the wire path, the admin API, the `/ui` fleet page (also in a
//! real headless Chromium), the pre-execution check, self-telemetry and `/metrics`, TLS
//! and tokens.
//!
//! Each file of `tests/serve/` is a module of this one test binary (one link per edit, not
//! one per file); `cargo test --test serve serve::NAME::` runs one file's tests. Shared
//! helpers are in `tests/support/`.

mod support;

mod serve {
    mod admin_api;
    mod admission;
    mod bad_input;
    mod e2e;
    mod fleet_view;
    mod forward;
    mod guard_api;
    mod id_lengths;
    mod process_metrics;
    mod receiver_grpc;
    mod receiver_http;
    mod security;
    mod synthetic_span;
    mod telemetry_otlp;
    mod ui_api;
    mod ui_browser;
    mod wire_path;
}
