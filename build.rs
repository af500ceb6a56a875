//! Compiles `proto/loopwatch/v1/signals.proto` (DESIGN §6) and `guard.proto` (the
//! pre-execution check) with `tonic-prost-build`.
//!
//! `PROTOC` is pointed at the binary from `protoc-bin-vendored` unless the
//! environment already sets it, so a fresh machine needs no system `protoc`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        std::env::set_var("PROTOC", protoc);
    }
    println!("cargo:rerun-if-changed=proto/loopwatch/v1/signals.proto");
    println!("cargo:rerun-if-changed=proto/loopwatch/v1/guard.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(
            &[
                "proto/loopwatch/v1/signals.proto",
                "proto/loopwatch/v1/guard.proto",
            ],
            &["proto"],
        )?;
    Ok(())
}
