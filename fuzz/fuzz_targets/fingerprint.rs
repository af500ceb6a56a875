//! `cargo +nightly fuzz run fingerprint`: see `loopwatch_fuzz::fingerprint_input`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    loopwatch_fuzz::fingerprint_input(data);
});
