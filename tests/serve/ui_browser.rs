//! The `/ui` page in a real headless Chromium (Debian's `chromium` and `chromium-driver`),
//! driven over WebDriver (`fantoccini`) the way an operator uses it: with `admin.auth_token`
//! set, `/ui` shows the login form; the token is typed in and submitted; while `replay`
//! sends the corpus, the looping pydantic-ai run shows up among the runs (filtered to
//! looping ones, the filter kept in the URL) and on the time axis; the runs table is
//! updated in place (the same row element across polls); a click opens the run's
//! drill-down with its calls, its kill detection with why it fired and the link to the
//! trace (`[ui] trace_url`); logout ends the session. Screenshots go to
//! `$CARGO_TARGET_TMPDIR/ui.png` and `ui-run.png`, and to `docs/ui.png` and
//! `docs/ui-run.png` when `UPDATE_SCREENSHOTS=1`. A missing browser or driver fails the
//! test under `CI`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::ops::{repo, tool};
use crate::support::server::{run_requests, test_config, trace_id_of};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// The looping run the page must show: `fetch_url` six times with the same arguments and
/// the same error.
const LOOPING_RUN: &str = "pydantic-ai/v5-default/s1_stuck_repeat";
/// Its arguments contain this; the page must never show argument content.
const ARGUMENT_TEXT: &str = "example.com/a";
const TOKEN: &str = "browser-test-admin-token-93b2";
const TRACE_URL: &str = "http://127.0.0.1:16686/trace/{trace_id}";

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_driver(binary: &Path) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = reqwest::get(format!("{}/status", driver.url)).await;
        if ready.is_ok_and(|r| r.status().is_success()) {
            return driver;
        }
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--hide-scrollbars", "--window-size=1440,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session in headless Chromium")
}

/// Runs `script` (a function body returning a value) until it returns something other than
/// `null` or `false`, at most `secs` seconds; panics naming `what` with the page's DOM.
async fn until(client: &Client, what: &str, secs: u64, script: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let value = client.execute(script, vec![]).await.expect("script");
        if !matches!(value, Value::Null | Value::Bool(false)) {
            return value;
        }
        if Instant::now() > deadline {
            let dom = client.source().await.unwrap_or_default();
            panic!("{what}: not within {secs} s. The page:\n{dom}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn js(client: &Client, script: &str) -> Value {
    client.execute(script, vec![]).await.expect("script")
}

/// Saves a PNG screenshot as `name` in the test's target directory and, with
/// `UPDATE_SCREENSHOTS=1`, in `docs/`.
async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.expect("screenshot");
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000,
        "{name}: {} bytes",
        png.len()
    );
    let artifact = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&artifact, &png).unwrap();
    eprintln!("screenshot: {}", artifact.display());
    if std::env::var("UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        std::fs::write(repo().join("docs").join(name), &png).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_logs_in_sees_a_loop_and_opens_its_drill_down() {
    let Some(chromium) = tool("chromium", &[], "the /ui browser test") else {
        return;
    };
    let Some(chromedriver) = tool("chromedriver", &[], "drives chromium over WebDriver") else {
        return;
    };
    let mut config = test_config(None);
    config.admin.auth_token = Some(TOKEN.into());
    config.ui.trace_url = Some(TRACE_URL.into());
    let server = loopwatch::server::start(config)
        .await
        .expect("server starts");
    let base = format!("http://{}", server.admin_addr.unwrap());
    let looping = trace_id_of(&run_requests(LOOPING_RUN)[0]);

    // The whole corpus, one request every 100 ms, while the page is in use.
    let endpoint = format!("http://{}", server.grpc_addr);
    let corpus = repo().join("tests/fixtures/corpus");
    let expected: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(corpus.join("expected.json")).unwrap())
            .unwrap();
    let runs: Vec<PathBuf> = expected.keys().map(|run| corpus.join(run)).collect();
    let files: Vec<PathBuf> = loopwatch::cli::scan::request_files(&runs).unwrap();
    let replay = tokio::spawn(async move {
        loopwatch::cli::replay::replay(&endpoint, &files, Duration::from_millis(100)).await
    });

    let driver = start_driver(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let client = browser(&driver, &chromium, profile.path()).await;

    // 1. The page asks for the token (a form, not a bare 401), and keeps the view asked for.
    client.goto(&format!("{base}/ui?looping=1")).await.unwrap();
    let form = client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("form#login"))
        .await
        .unwrap();
    assert_eq!(form.attr("method").await.unwrap().as_deref(), Some("post"));
    assert_eq!(client.title().await.unwrap(), "loopwatch · log in");
    client
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    client
        .find(Locator::Css("form#login button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &client,
        "the page after login",
        20,
        "return document.body.dataset.loaded === 'true'",
    )
    .await;
    let url = client.current_url().await.unwrap();
    assert_eq!(
        url.as_str(),
        format!("{base}/ui?looping=1"),
        "back to the view asked for"
    );
    assert!(!url.as_str().contains(TOKEN), "the token never in a URL");
    // The session cookie: HttpOnly (no script reads it), SameSite=Strict, not the token.
    let cookies = client.get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "loopwatch_session")
        .unwrap_or_else(|| panic!("no session cookie: {cookies:?}"));
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(session.same_site(), Some(cookie::SameSite::Strict));
    assert_eq!(session.path(), Some("/"));
    assert_ne!(session.value(), TOKEN);
    assert_eq!(session.value().len(), 64);
    assert_eq!(js(&client, "return document.cookie").await, json!(""));

    // 2. The looping run appears, with only looping runs listed (the URL's filter).
    let row = format!("#runs tr[data-run-key=\"{looping}\"]");
    until(
        &client,
        "the looping run among the runs",
        90,
        &format!("return document.querySelector('{row}[data-looping=\"true\"]') !== null"),
    )
    .await;
    assert_eq!(
        js(&client, "return [...document.querySelectorAll('#runs tbody tr')].every(r => r.dataset.looping === 'true')").await,
        json!(true)
    );
    assert_eq!(
        js(
            &client,
            "return document.getElementById('f-looping').checked"
        )
        .await,
        json!(true)
    );
    let sent = replay.await.unwrap().expect("replay");
    assert!(sent > 40, "replayed {sent} requests");
    // The time axis: the current minute's bucket has runs, loop runs and kills.
    let bucket = until(&client, "kills on the time axis", 20,
        "const b = [...document.querySelectorAll('#chart g.bucket')].find(g => +g.dataset.kills > 0); \
         return b ? [+b.dataset.runs, +b.dataset.loopRuns, +b.dataset.kills] : null").await;
    let counts: Vec<u64> = serde_json::from_value(bucket).unwrap();
    assert!(
        counts[0] >= counts[1] && counts[1] > 0 && counts[2] > 0,
        "{counts:?}"
    );
    let loop_runs = until(
        &client,
        "the loop runs card",
        10,
        "const n = +document.getElementById('loops-last').textContent; return n > 0 ? n : null",
    )
    .await;
    assert!(
        loop_runs.as_u64() >= Some(counts[1]),
        "the window holds the bucket"
    );

    // 3. The service filter narrows the list and goes into the URL.
    let service = js(
        &client,
        &format!("return document.querySelector('{row} td.service').textContent"),
    )
    .await;
    let service = service.as_str().unwrap().to_string();
    client
        .find(Locator::Css("#f-service"))
        .await
        .unwrap()
        .select_by_value(&service)
        .await
        .unwrap();
    until(
        &client,
        "the service filter in the URL",
        10,
        &format!(
            "return new URLSearchParams(location.search).get('service') === {}",
            json!(service)
        ),
    )
    .await;
    until(&client, "only that service's runs", 10, &format!(
        "const rows = [...document.querySelectorAll('#runs tbody tr')]; \
         return rows.length > 0 && rows.every(r => r.querySelector('td.service').textContent === {})",
        json!(service)
    ))
    .await;
    client
        .find(Locator::Css("#f-service"))
        .await
        .unwrap()
        .select_by_value("")
        .await
        .unwrap();
    until(
        &client,
        "the filter cleared",
        10,
        "return !location.search.includes('service=')",
    )
    .await;

    // 4. Live updates change the page in place: the same row and chart across polls.
    js(&client, &format!(
        "document.querySelector('{row}').__kept = 1; document.querySelector('#chart svg').__kept = 1; \
         window.__status = document.getElementById('status').textContent; return true"
    ))
    .await;
    until(&client, "two more polls", 10,
        "const s = document.getElementById('status').textContent; \
         if (s !== window.__status) { window.__polls = (window.__polls || 0) + 1; window.__status = s; } \
         return window.__polls >= 2").await;
    assert_eq!(
        js(&client, &format!(
            "return [document.querySelector('{row}').__kept, document.querySelector('#chart svg').__kept]"
        ))
        .await,
        json!([1, 1]),
        "a poll replaced the row or the chart instead of updating it"
    );
    client.set_window_size(1440, 1200).await.unwrap();
    screenshot(&client, "ui.png").await;

    // 5. The drill-down: calls in order, the kill with why it fired, the trace link.
    client
        .find(Locator::Css(&row))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &client,
        "the run's drill-down",
        15,
        &format!("return document.querySelector('#run[data-loaded=\"{looping}\"]') !== null"),
    )
    .await;
    assert!(client
        .current_url()
        .await
        .unwrap()
        .as_str()
        .contains(&format!("run={looping}")));
    let kill = js(&client, "const d = document.querySelector('#run-detections li[data-pattern=\"repeated_result\"][data-severity=\"kill\"][data-profile=\"stop\"]'); return d && d.textContent").await;
    let kill = kill.as_str().expect("the kill detection").to_string();
    assert!(
        kill.contains("occurrence 1") && kill.contains("at call 6"),
        "{kill}"
    );
    assert!(
        kill.contains("fetch_url returned the same result 6 times in a row for the same arguments"),
        "{kill}"
    );
    let link = js(&client, "const a = document.querySelector('#run-traces a.trace-link'); return [a.href, a.rel, a.target, a.hidden]").await;
    assert_eq!(
        link,
        json!([
            TRACE_URL.replace("{trace_id}", &looping),
            "noopener noreferrer",
            "_blank",
            false
        ])
    );
    let calls = js(&client, "return [...document.querySelectorAll('#run-steps tbody tr[data-kind=\"tool_call\"]')].map(r => [r.dataset.call, r.cells[3].textContent, r.cells[4].textContent])").await;
    let calls: Vec<(String, String, String)> = serde_json::from_value(calls).unwrap();
    assert_eq!(
        calls.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5", "6"]
    );
    assert!(
        calls
            .iter()
            .all(|c| c.1 == "fetch_url" && c.2.len() == 16 && c.2 == calls[0].2),
        "{calls:?}"
    );
    assert_eq!(
        js(
            &client,
            "return document.getElementById('run-profile').value"
        )
        .await,
        json!("stop")
    );
    let fired = js(&client, "const r = document.querySelector('#run-steps tr.fired'); return r && [r.dataset.call, r.querySelector('td.why').textContent]").await;
    let fired: (String, String) = serde_json::from_value(fired).unwrap();
    assert_eq!(fired.0, "6");
    assert!(
        fired.1.starts_with("FIRED repeated_result kill"),
        "{}",
        fired.1
    );
    assert!(
        !client.source().await.unwrap().contains(ARGUMENT_TEXT),
        "argument content on the page"
    );
    js(
        &client,
        "document.querySelector('.split').scrollIntoView(); return true",
    )
    .await;
    screenshot(&client, "ui-run.png").await;

    // 6. The view is a link: opening the URL again shows the same run.
    let linked = client.current_url().await.unwrap();
    client.goto(linked.as_str()).await.unwrap();
    until(
        &client,
        "the linked drill-down",
        15,
        &format!("return document.querySelector('#run[data-loaded=\"{looping}\"]') !== null"),
    )
    .await;

    // The verdicts of another profile: nudge warned at calls 3 and 6.
    client
        .find(Locator::Css("#run-profile"))
        .await
        .unwrap()
        .select_by_value("nudge")
        .await
        .unwrap();
    let warned = until(
        &client,
        "nudge's verdicts",
        10,
        "const rows = [...document.querySelectorAll('#run-steps tr.fired')]; \
         return location.search.includes('profile=nudge') && rows.length === 2 && rows.map(r => r.dataset.call)",
    )
    .await;
    assert_eq!(warned, json!(["3", "6"]));
    // Closing the drill-down takes the run out of the URL.
    client
        .find(Locator::Css("#run-close"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        &client,
        "the drill-down closed",
        10,
        "return document.getElementById('run').hidden && !location.search.includes('run=')",
    )
    .await;

    // 7. Logout: the form again, and the API refuses the old session.
    client
        .find(Locator::Css("#logout button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("form#login"))
        .await
        .unwrap();
    let status = js(&client, "const x = new XMLHttpRequest(); x.open('GET', '/v1/runs', false); x.send(); return x.status").await;
    assert_eq!(status, json!(401));
    client.close().await.unwrap();
    drop(driver);
    server.shutdown().await.unwrap();
}
