//! Compiles `proto/loopwatch/v1/signals.proto` (DESIGN §6) and `guard.proto` (the
//! pre-execution check) with `tonic-prost-build`.
//!
//! `PROTOC` is pointed at the binary from `protoc-bin-vendored` unless the
//! environment already sets it, so a fresh machine needs no system `protoc`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    // `loopwatch_build_info{revision}`: the git revision, when built from a checkout.
    let revision = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LOOPWATCH_REVISION={revision}");
    // Only paths that exist: a missing one would rerun this script on every build.
    for path in [".git/HEAD", ".git/refs/heads"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        std::env::set_var("PROTOC", protoc);
    }
    println!("cargo:rerun-if-changed=proto/loopwatch/v1/signals.proto");
    println!("cargo:rerun-if-changed=proto/loopwatch/v1/guard.proto");
    tonic_prost_build::configure()
        // tonic-prost's codec, but a request that does not decode is INVALID_ARGUMENT.
        .codec_path("crate::net::grpc_codec::Codec")
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
