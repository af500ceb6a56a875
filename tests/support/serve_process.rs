//! `loopwatch serve` as a child process: started with JSON logs, ready once it prints its
//! `loopwatch listening` line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// `loopwatch serve` with its three listeners on loopback port 0 and JSON logs, forwarding
/// to `downstream` when given.
/// `RUST_LOG` and `LOOPWATCH_*` variables of the test's environment are not passed on.
pub fn serve_command(downstream: Option<SocketAddr>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loopwatch"));
    command.env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("LOOPWATCH_") {
            command.env_remove(k);
        }
    }
    command.args([
        "serve",
        "--grpc-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]);
    if let Some(downstream) = downstream {
        command.args(["--exporter-endpoint", &format!("http://{downstream}")]);
    }
    command
}

/// The admin listener's `/metrics` text.
pub async fn scrape(admin: &str) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Spawns `command` with stderr piped; returns the child and the receiver of its stderr
/// lines, every one from the first.
pub fn spawn_with_lines(mut command: Command) -> (Child, Receiver<String>) {
    let mut child = command
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, lines)
}

/// Spawns `command` (a `loopwatch serve … --log-format json`) with stderr piped, streams its
/// stderr lines into the returned receiver, and waits up to 20 s for the start-up line.
/// Returns the child, that line's `fields` (listener addresses: `grpc`, `http`, `admin`)
/// and the receiver of the lines after it. Panics (killing the child) when it never starts.
pub fn spawn_until_listening(command: Command) -> (Child, Json, Receiver<String>) {
    let (child, lines) = spawn_with_lines(command);
    wait_listening(child, lines)
}

/// Waits up to 20 s for the start-up line of `child` (spawned by [`spawn_with_lines`]);
/// as [`spawn_until_listening`].
pub fn wait_listening(
    mut child: Child,
    lines: Receiver<String>,
) -> (Child, Json, Receiver<String>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
            if line.contains("loopwatch listening") {
                let v: Json = serde_json::from_str(&line).unwrap();
                return (child, v["fields"].clone(), lines);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("loopwatch serve did not start");
}
