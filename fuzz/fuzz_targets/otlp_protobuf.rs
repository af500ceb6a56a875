//! `cargo +nightly fuzz run otlp_protobuf`: see `loopwatch_fuzz::protobuf_input`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    loopwatch_fuzz::protobuf_input(data);
});
