//! `scan` of OTLP export files that hold several requests: JSON lines (the OTLP file
//! exporter specification; the Collector's `file` exporter by default), length-prefixed
//! protobuf (its `format: proto`), each message zstd-compressed (its `compression: zstd`),
//! and whole files gzip- or zstd-compressed. Each must give exactly what the corpus run's
//! folder of one-request files gives.

use crate::support;

use std::io::Write;
use std::path::Path;

use crate::support::spans::{
    corpus_expected, corpus_files, expected_keys, key_of, loopwatch, scan_json,
};
use serde_json::Value as Json;

fn length_prefixed(messages: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for message in messages {
        out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        out.extend_from_slice(message);
    }
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

/// One line per request, each request's JSON on one line.
fn json_lines(files: &[std::path::PathBuf]) -> Vec<u8> {
    let mut out = Vec::new();
    for file in files {
        let value: Json = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        out.extend_from_slice(value.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// Every way of writing the run's requests into one file: (file name, bytes).
fn single_file_forms(run: &str) -> Vec<(&'static str, Vec<u8>)> {
    let pb: Vec<Vec<u8>> = corpus_files(run, "pb")
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    let jsonl = json_lines(&corpus_files(run, "json"));
    let framed = length_prefixed(&pb);
    let framed_zstd = length_prefixed(&pb.iter().map(|m| zstd(m)).collect::<Vec<_>>());
    let json_messages: Vec<Vec<u8>> = corpus_files(run, "json")
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    vec![
        ("traces.jsonl", jsonl.clone()),
        // Pretty-printed requests one after the other, not one per line.
        ("traces.json", json_messages.concat()),
        ("traces.ndjson.gz", gzip(&jsonl)),
        ("traces.jsonl.zst", zstd(&jsonl)),
        ("traces.pb", framed.clone()),
        ("traces.binpb.gz", gzip(&framed)),
        ("traces.pb", framed_zstd),
        (
            "traces.json",
            length_prefixed(&json_messages.iter().map(|m| zstd(m)).collect::<Vec<_>>()),
        ),
    ]
}

fn scan_file(dir: &Path, name: &str, bytes: &[u8]) -> Vec<Json> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let detections = scan_json("", &path);
    std::fs::remove_file(&path).unwrap();
    detections
}

#[test]
fn export_files_of_several_requests_scan_like_their_folder() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (run, expected) in corpus_expected() {
        if corpus_files(&run, "pb").len() < 2 {
            continue;
        }
        let folder = scan_json("", &support::spans::fixtures().join("corpus").join(&run));
        let nudge: Vec<_> = folder
            .iter()
            .filter(|d| d["profile"] == "nudge")
            .map(key_of)
            .collect();
        assert_eq!(
            nudge,
            expected_keys(&expected, "nudge"),
            "{run}: the folder"
        );
        // Every form for the first runs with detections, JSON lines for every run.
        let forms = single_file_forms(&run);
        let forms = if checked < 4 && !folder.is_empty() {
            checked += 1;
            &forms[..]
        } else {
            &forms[..1]
        };
        for (name, bytes) in forms {
            assert_eq!(scan_file(dir.path(), name, bytes), folder, "{run}: {name}");
        }
    }
    assert_eq!(checked, 4, "runs of several requests with detections");
}

#[test]
fn a_bad_request_in_a_file_is_named_by_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let run = "pydantic-ai/v5-default/s1_stuck_repeat";
    let mut jsonl = json_lines(&corpus_files(run, "json"));
    jsonl.extend_from_slice(
        b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"0102\"}]}]}]}\n",
    );
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, &jsonl).unwrap();
    let out = loopwatch().arg("scan").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let position = corpus_files(run, "json").len() + 1;
    assert!(
        stderr.contains(&format!("request {position} of the file")) && stderr.contains("traceId"),
        "{stderr}"
    );
    // A length-prefixed file cut inside its last request (a Collector `file` export still
    // being written) names that request.
    let messages: Vec<Vec<u8>> = corpus_files("langchain/openinference/s1_stuck_repeat", "pb")
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    let framed = length_prefixed(&messages);
    let cut = dir.path().join("cut.pb");
    std::fs::write(&cut, &framed[..framed.len() - 10]).unwrap();
    let out = loopwatch().arg("scan").arg(&cut).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "request {} of the file is cut short",
            messages.len()
        )),
        "{stderr}"
    );
    // Empty files hold no request, protobuf or JSON.
    for name in ["empty.pb", "empty.json"] {
        let empty = dir.path().join(name);
        std::fs::write(&empty, b"").unwrap();
        let out = loopwatch().arg("scan").arg(&empty).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(stderr.contains("scanned 0 request(s)"), "{name}: {stderr}");
    }
    // A file that is no export file is named with what is read.
    let other = dir.path().join("traces.txt");
    std::fs::write(&other, b"{}").unwrap();
    let out = loopwatch().arg("scan").arg(&other).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("expected .pb, .binpb, .json, .jsonl or .ndjson"),
        "{stderr}"
    );
}

#[test]
fn replay_sends_every_request_of_a_json_lines_file() {
    let run = corpus_expected()
        .into_iter()
        .map(|(run, _)| run)
        .find(|run| corpus_files(run, "pb").len() >= 3)
        .expect("a corpus run of three requests or more");
    let files = corpus_files(&run, "json");
    let spans: usize = files
        .iter()
        .map(|f| {
            let request = loopwatch::cli::scan::read_request(f).unwrap();
            loopwatch::otlp::span_count(&request) as usize
        })
        .sum();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    std::fs::write(&path, json_lines(&files)).unwrap();
    let (mut child, listening, _lines) =
        support::serve_process::spawn_until_listening(support::serve_process::serve_command(None));
    let grpc = listening["grpc"].as_str().unwrap().to_string();
    let admin = listening["admin"].as_str().unwrap().to_string();
    let out = loopwatch()
        .args(["replay", "--endpoint", &format!("http://{grpc}")])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(&format!("sent {} request(s) from 1 file(s)", files.len())),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(support::serve_process::scrape(&admin));
    assert!(
        metrics.contains(&format!("loopwatch_spans_received_total {spans}\n")),
        "{spans} spans not in:\n{metrics}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
