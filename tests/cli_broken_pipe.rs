//! `loopwatch scan … | head`: the reader goes away before scan writes; scan ends quietly
//! with exit 0 (it panicked with exit 101 on the broken pipe).

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn scan_into_a_closed_pipe_exits_zero_without_a_panic() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/pydantic-ai");
    for format in ["json", "table"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
            .args(["scan", "--format", format])
            .arg(&corpus)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end at once: scan reads the whole corpus before its first write.
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
        assert_eq!(status.code(), Some(0), "{format}: {stderr}");
        assert!(stderr.contains("scanned 16 request(s)"), "{stderr}");
    }
}

#[test]
fn check_config_into_a_closed_pipe_exits_zero_without_a_panic() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .arg("check-config")
        .arg(&example)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
}
