//! The `/ui` page in a real headless Chromium (Debian's `chromium`): while `replay` sends
//! the corpus to a running loopwatch, the page is loaded (its script polls the admin API)
//! until the looping pydantic-ai run shows up among the latest loops with its repeated
//! call (tool name and short fingerprint, never the arguments) and the per-agent loop-rate
//! chart has a line; then a screenshot is saved to
//! `$CARGO_TARGET_TMPDIR/ui-screenshot.png` (the test artifact; docs/api.md shows a copy,
//! `docs/ui.png`).

mod ops_support;
mod server_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ops_support::{repo, tool};
use server_support::{run_requests, test_config, trace_id_of};

/// The looping run the page must show: `fetch_url` six times with the same arguments and
/// the same error.
const LOOPING_RUN: &str = "pydantic-ai/v5-default/s1_stuck_repeat";
/// Its arguments contain this; the page must never show argument content.
const ARGUMENT_TEXT: &str = "example.com/a";

/// Runs Chromium headless on a fresh profile with the flags it needs as root, letting the
/// page's script run for `budget_ms` of virtual time.
fn chromium(binary: &Path, profile: &Path, budget_ms: u32, extra: &[&str], url: &str) -> String {
    let out = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn ui_shows_a_replayed_loop_in_headless_chromium() {
    let Some(browser) = tool("chromium", &[], "loads /ui") else {
        return;
    };
    let server = loopwatch::server::start(test_config(None))
        .await
        .expect("server starts");
    let admin = server.admin_addr.unwrap();
    let url = format!("http://{admin}/ui");
    let looping_trace = trace_id_of(&run_requests(LOOPING_RUN)[0]);

    // The whole corpus, one request every 100 ms, while the page is loaded.
    let endpoint = format!("http://{}", server.grpc_addr);
    let corpus = repo().join("tests/fixtures/corpus");
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(corpus.join("expected.json")).unwrap())
            .unwrap();
    let runs: Vec<PathBuf> = expected.keys().map(|run| corpus.join(run)).collect();
    let files: Vec<PathBuf> = loopwatch::cli::scan::request_files(&runs).unwrap();
    let replay = tokio::spawn(async move {
        loopwatch::cli::replay::replay(&endpoint, &files, Duration::from_millis(100)).await
    });

    let profile = tempfile::tempdir().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (dom, loaded_during_replay) = loop {
        let dom = {
            let (b, p, u) = (browser.clone(), profile.path().to_path_buf(), url.clone());
            tokio::task::spawn_blocking(move || chromium(&b, &p, 3000, &["--dump-dom"], &u))
                .await
                .unwrap()
        };
        let shows_loop = dom.contains(&format!(
            "data-trace-id=\"{looping_trace}\" data-pattern=\"repeated_result\" data-severity=\"kill\""
        ));
        if shows_loop {
            break (dom, !replay.is_finished());
        }
        assert!(
            Instant::now() < deadline,
            "the loop of {looping_trace} never appeared in /ui:\n{dom}"
        );
    };
    let sent = replay.await.unwrap().expect("replay");
    assert!(sent > 40, "replayed {sent} requests");
    eprintln!("loop shown while the replay was still running: {loaded_during_replay}");

    // The loop row: the tool, a short fingerprint, step numbers; no argument content.
    let row_start = dom
        .find(&format!("data-trace-id=\"{looping_trace}\""))
        .unwrap();
    let row = &dom[row_start..row_start + dom[row_start..].find("</tr>").unwrap()];
    assert!(row.contains("fetch_url"), "{row}");
    let fp_at = row.find("data-fingerprint=\"").expect("a repeated call") + 18;
    let fp = &row[fp_at..fp_at + 16];
    assert!(fp.chars().all(|c| c.is_ascii_hexdigit()), "{row}");
    assert!(row.contains("at steps 1, 2, 3, 4, 5, 6"), "{row}");
    assert!(!dom.contains(ARGUMENT_TEXT), "argument content on the page");
    // The fleet cards and the loop-rate chart are filled in.
    assert!(dom.contains("data-loaded=\"true\""));
    assert!(dom.contains("class=\"agent-line\""), "no chart line");
    assert!(dom.contains("data-pattern=\"repeated_result\">repeated_result: "));

    // The screenshot artifact.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    {
        let (b, p, u) = (browser.clone(), profile.path().to_path_buf(), url.clone());
        tokio::task::spawn_blocking(move || {
            chromium(&b, &p, 3000, &[&arg, "--window-size=1280,1100"], &u)
        })
        .await
        .unwrap();
    }
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
    server.shutdown().await.unwrap();
}
