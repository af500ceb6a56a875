//! `loopwatch serve` as a child process: started with JSON logs, ready once it prints its
//! `loopwatch listening` line.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// Spawns `command` (a `loopwatch serve … --log-format json`) with stderr piped, streams its
/// stderr lines into the returned receiver, and waits up to 20 s for the start-up line.
/// Returns the child, that line's `fields` (listener addresses: `grpc`, `http`, `admin`)
/// and the receiver of the lines after it. Panics (killing the child) when it never starts.
pub fn spawn_until_listening(mut command: Command) -> (Child, Json, Receiver<String>) {
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
