//! `cargo +nightly fuzz run wire`: see `loopwatch_fuzz::wire_input` (the zero-copy reader
//! and in-place annotation against prost).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    loopwatch_fuzz::wire_input(data);
});
