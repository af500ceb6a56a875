//! `loopwatch scan … | head`: the reader goes away before scan writes; scan ends quietly
//! with exit 0 (it panicked with exit 101 on the broken pipe). The same for `check-config`.

use std::io::Read;
use std::process::{Command, Stdio};

/// Runs `loopwatch ARGS` with its stdout's read end closed at once; its exit code and stderr.
fn into_a_closed_pipe(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .args(args)
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
    (child.wait().unwrap().code(), stderr)
}

#[test]
fn scan_into_a_closed_pipe_exits_zero_without_a_panic() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/pydantic-ai");
    for format in ["json", "table"] {
        // Scan reads the whole corpus before its first write.
        let (code, stderr) = into_a_closed_pipe(&[
            "scan".as_ref(),
            "--format".as_ref(),
            format.as_ref(),
            corpus.as_os_str(),
        ]);
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
        assert_eq!(code, Some(0), "{format}: {stderr}");
        assert!(stderr.contains("scanned 16 request(s)"), "{stderr}");
    }
}

#[test]
fn check_config_into_a_closed_pipe_exits_zero_without_a_panic() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let (code, stderr) = into_a_closed_pipe(&["check-config".as_ref(), example.as_os_str()]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, Some(0), "{stderr}");
}
