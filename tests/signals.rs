//! Signals: the Redis, NATS, webhook, gRPC `Watch` and HTTP polling sinks against real
//! servers on loopback, a sink that is down or cut, signals through the running server,
//! and a real agent stopped by them (`examples/stop-a-looping-agent`).
//!
//! Each file of `tests/signals/` is a module of this one test binary (one link per edit, not
//! one per file); `cargo test --test signals signals::NAME::` runs one file's tests. Shared
//! helpers are in `tests/support/`.

mod support;

mod signals {
    mod down;
    mod example_agent;
    mod faults;
    mod grpc;
    mod http;
    mod nats;
    mod redis;
    mod server;
    mod storm;
    mod webhook;
}
