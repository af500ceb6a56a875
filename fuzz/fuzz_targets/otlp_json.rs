//! `cargo +nightly fuzz run otlp_json`: see `loopwatch_fuzz::json_input`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    loopwatch_fuzz::json_input(data);
});
