//! The server side of `/ui` through the running server (port 0).
//!
//! - Login: the login form instead of a bare 401, `POST /ui/login` → a session cookie
//!   (HttpOnly, SameSite=Strict, Path=/, Secure with `__Host-` under TLS) that the admin
//!   API takes for reads, never for writes; logout, session expiry (`[ui] session_ttl`) and
//!   the cap on sessions; the bearer token unchanged.
//! - The run drill-down `GET /v1/runs/{run_key}` and the filters of `/v1/runs` and
//!   `/v1/fleet`, against the corpus run's spans and `expected.json`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::security::Pki;
use crate::support::server::test_config;
use reqwest::header::{HeaderMap, COOKIE, LOCATION, SET_COOKIE, WWW_AUTHENTICATE};
use reqwest::redirect::Policy;
use reqwest::{Client, StatusCode};

const TOKEN: &str = "ui-session-test-token-5f1c";

fn client() -> Client {
    Client::builder().redirect(Policy::none()).build().unwrap()
}

async fn server(ttl: Option<&str>) -> loopwatch::server::RunningServer {
    let mut config = test_config(None);
    config.admin.auth_token = Some(TOKEN.into());
    if let Some(ttl) = ttl {
        config.ui.session_ttl = humantime::parse_duration(ttl).unwrap();
    }
    loopwatch::server::start(config)
        .await
        .expect("server starts")
}

/// `POST /ui/login` with `token` and `next` (form-encoded).
async fn login(client: &Client, base: &str, token: &str, next: &str) -> reqwest::Response {
    client
        .post(format!("{base}/ui/login"))
        .form(&[("token", token), ("next", next)])
        .send()
        .await
        .expect("POST /ui/login")
}

/// The `name=value` of a `Set-Cookie` header, and the header itself.
fn set_cookie(headers: &HeaderMap) -> (String, String) {
    let value = headers
        .get(SET_COOKIE)
        .expect("Set-Cookie")
        .to_str()
        .unwrap()
        .to_string();
    let pair = value.split(';').next().unwrap().trim().to_string();
    (pair, value)
}

/// Status of `method path` with `cookie` (a `name=value` pair) and/or a bearer token.
async fn status(
    client: &Client,
    method: reqwest::Method,
    url: String,
    cookie: Option<&str>,
    bearer: Option<&str>,
) -> StatusCode {
    let mut req = client.request(method, url);
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("request").status()
}

fn base(admin: SocketAddr) -> String {
    format!("http://{admin}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_cookie_reads_logout_and_the_bearer_token() {
    let server = server(None).await;
    let base = base(server.admin_addr.unwrap());
    let c = client();
    let get = |path: &str, cookie: Option<&str>| {
        let (c, url, cookie) = (
            c.clone(),
            format!("{base}{path}"),
            cookie.map(str::to_string),
        );
        async move { status(&c, reqwest::Method::GET, url, cookie.as_deref(), None).await }
    };

    // Without credentials: the page is the login form (401, HTML), the API a bare 401.
    let page = c
        .get(format!(
            "{base}/ui?service=checkout&agent=%22%3E%3Cscript%3E"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 401);
    assert_eq!(page.headers()[WWW_AUTHENTICATE], "Bearer");
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"<form id="login" class="login" method="post" action="/ui/login">"#));
    assert!(html.contains(r#"name="token" type="password""#));
    // The view asked for comes back after login; what it echoes is escaped.
    assert!(
        html.contains(r#"name="next" value="/ui?service=checkout&amp;agent=%22%3E%3Cscript%3E""#)
    );
    assert!(!html.contains(TOKEN));
    let (status_api, body) = {
        let r = c.get(format!("{base}/v1/runs")).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    };
    assert_eq!(
        (status_api.as_u16(), body.as_str()),
        (401, "missing or wrong token\n")
    );
    assert_eq!(
        get("/ui/app.css", None).await,
        200,
        "the form's style is open"
    );
    assert_eq!(get("/ui/app.js", None).await, 401);
    assert_eq!(get("/healthz", None).await, 200);
    assert_eq!(get("/ui/login", None).await, 200, "the login page itself");

    // A wrong token: the form again with the error, no cookie.
    let wrong = login(&c, &base, "not-the-token", "/ui").await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get(SET_COOKIE).is_none());
    assert!(wrong.text().await.unwrap().contains("Wrong token."));
    let prefix = login(&c, &base, &TOKEN[..TOKEN.len() - 1], "/ui").await;
    assert_eq!(prefix.status(), 401, "a prefix of the token is wrong");
    // A token in the query string is never read.
    let in_url = c
        .get(format!("{base}/ui/login?token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert!(in_url.headers().get(SET_COOKIE).is_none());

    // The right token: 303 back to the view asked for, and the session cookie.
    let ok = login(&c, &base, TOKEN, "/ui?service=checkout").await;
    assert_eq!(ok.status(), 303);
    assert_eq!(ok.headers()[LOCATION], "/ui?service=checkout");
    let (cookie, header) = set_cookie(ok.headers());
    let id = cookie.strip_prefix("loopwatch_session=").expect(&header);
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{header}"
    );
    assert!(!header.contains(TOKEN));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(header.contains(attribute), "{attribute}: {header}");
    }
    assert!(!header.contains("Secure"), "plain HTTP: {header}");
    // Never a redirect off the page.
    let away = login(&c, &base, TOKEN, "https://evil.example/").await;
    assert_eq!(away.headers()[LOCATION], "/ui");
    let (other_cookie, _) = set_cookie(away.headers());
    assert_ne!(other_cookie, cookie, "a new session per login");

    // The cookie reads: the page, its files and the API it calls.
    let page = c
        .get(format!("{base}/ui"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains(r#"<body data-auth="on">"#));
    for path in [
        "/ui/app.js",
        "/ui/run.js",
        "/v1/runs",
        "/v1/summary",
        "/v1/fleet",
        "/v1/signals",
        "/metrics",
    ] {
        assert_eq!(
            get(path, Some(&cookie)).await,
            200,
            "{path} with the cookie"
        );
    }
    assert_eq!(
        get("/v1/runs/unknown-run", Some(&cookie)).await,
        404,
        "past the check"
    );
    assert_eq!(
        get("/ui/login", Some(&cookie)).await,
        303,
        "logged in: to the page"
    );
    // ... but never writes: approve, deny and check need the bearer token.
    for path in ["/v1/runs/r/approve", "/v1/runs/r/deny", "/v1/check"] {
        let url = format!("{base}{path}");
        assert_eq!(
            status(&c, reqwest::Method::POST, url.clone(), Some(&cookie), None).await,
            401,
            "{path} with the cookie"
        );
        assert_ne!(
            status(&c, reqwest::Method::POST, url, None, Some(TOKEN)).await,
            401,
            "{path} with the bearer token"
        );
    }
    // A made-up or altered session id is nothing.
    let forged = format!("loopwatch_session={}", "ab".repeat(32));
    assert_eq!(get("/v1/runs", Some(&forged)).await, 401);
    assert_eq!(
        get("/v1/runs", Some(&format!("loopwatch_session={TOKEN}"))).await,
        401,
        "the token is no session id"
    );
    // Bearer access for API clients is unchanged.
    assert_eq!(
        status(
            &c,
            reqwest::Method::GET,
            format!("{base}/v1/runs"),
            None,
            Some(TOKEN)
        )
        .await,
        200
    );

    // Logout ends that session (and only it) and deletes the cookie.
    let out = c
        .post(format!("{base}/ui/logout"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()[LOCATION], "/ui");
    let (cleared, header) = set_cookie(out.headers());
    assert_eq!(cleared, "loopwatch_session=");
    assert!(header.contains("Max-Age=0"), "{header}");
    assert_eq!(get("/v1/runs", Some(&cookie)).await, 401, "logged out");
    assert_eq!(get("/ui", Some(&cookie)).await, 401, "the form again");
    assert_eq!(
        get("/v1/runs", Some(&other_cookie)).await,
        200,
        "the other session lives"
    );

    // Sessions are bounded: 256 more logins end the oldest one.
    for _ in 0..loopwatch::admin::session::MAX_SESSIONS {
        assert_eq!(login(&c, &base, TOKEN, "/ui").await.status(), 303);
    }
    assert_eq!(
        get("/v1/runs", Some(&other_cookie)).await,
        401,
        "the oldest session ended"
    );
    let newest = set_cookie(login(&c, &base, TOKEN, "/ui").await.headers()).0;
    assert_eq!(get("/v1/runs", Some(&newest)).await, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire() {
    let server = server(Some("2s")).await;
    let base = base(server.admin_addr.unwrap());
    let c = client();
    let ok = login(&c, &base, TOKEN, "/ui").await;
    let (cookie, header) = set_cookie(ok.headers());
    assert!(header.contains("Max-Age=2"), "{header}");
    let get = |path: &str| {
        let (c, url, cookie) = (c.clone(), format!("{base}{path}"), cookie.clone());
        async move { status(&c, reqwest::Method::GET, url, Some(&cookie), None).await }
    };
    assert_eq!(get("/v1/runs").await, 200);
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(get("/v1/runs").await, 401, "expired");
    assert_eq!(get("/ui").await, 401, "the login form again");
    server.shutdown().await.unwrap();

    // An out-of-range lifetime is refused at load, naming the key.
    let err = loopwatch::config::Config::from_toml("[ui]\nsession_ttl = \"0s\"\n").unwrap_err();
    assert!(err.to_string().contains("ui.session_ttl"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_tls_the_cookie_is_secure_and_host_only() {
    let pki = Pki::new();
    let mut config = test_config(None);
    config.admin.auth_token = Some(TOKEN.into());
    config.admin.tls = pki.server_tls(false);
    let server = loopwatch::server::start(config)
        .await
        .expect("server starts");
    let port = server.admin_addr.unwrap().port();
    let c = Client::builder()
        .redirect(Policy::none())
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&Pki::read(&pki.ca)).unwrap())
        .build()
        .unwrap();
    let base = format!("https://127.0.0.1:{port}");
    let ok = login(&c, &base, TOKEN, "/ui").await;
    assert_eq!(ok.status(), 303);
    let (cookie, header) = set_cookie(ok.headers());
    assert!(cookie.starts_with("__Host-loopwatch_session="), "{header}");
    for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(header.contains(attribute), "{attribute}: {header}");
    }
    assert!(!header.contains("Domain"), "{header}");
    let runs = status(
        &c,
        reqwest::Method::GET,
        format!("{base}/v1/runs"),
        Some(&cookie),
        None,
    )
    .await;
    assert_eq!(runs, 200);
    // The plain name is not the session cookie here.
    let plain = cookie.replacen("__Host-", "", 1);
    let runs = status(
        &c,
        reqwest::Method::GET,
        format!("{base}/v1/runs"),
        Some(&plain),
        None,
    )
    .await;
    assert_eq!(runs, 401);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_page_is_open_and_login_is_moot() {
    let server = loopwatch::server::start(test_config(None)).await.unwrap();
    let base = base(server.admin_addr.unwrap());
    let c = client();
    let page = c.get(format!("{base}/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .unwrap()
        .contains(r#"<body data-auth="off">"#));
    let moot = login(&c, &base, "anything", "/ui").await;
    assert_eq!(moot.status(), 303);
    assert!(moot.headers().get(SET_COOKIE).is_none());
    assert_eq!(
        c.get(format!("{base}/ui/nope.js"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    server.shutdown().await.unwrap();
}

/// (start, end) ns of every span of `requests`, by lowercase hex span id.
fn span_times(
    requests: &[opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest],
) -> std::collections::HashMap<String, (u64, u64)> {
    requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|s| {
            (
                hex::encode(&s.span_id),
                (s.start_time_unix_nano, s.end_time_unix_nano),
            )
        })
        .collect()
}

/// First 16 hex chars of hex HMAC-SHA256(key, SHA-256(tool ‖ 0x00 ‖ RFC 8785 args)) (DESIGN §3).
fn short_fingerprint(key: &str, tool: &str, args: &serde_json::Value) -> String {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    let mut sha = Sha256::new();
    sha.update(tool.as_bytes());
    sha.update([0u8]);
    sha.update(
        serde_json_canonicalizer::to_string(args)
            .unwrap()
            .as_bytes(),
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(&sha.finalize());
    hex::encode(mac.finalize().into_bytes())[..16].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_drill_down_and_filters() {
    use crate::support::server::{export_all, get, get_json, run_requests, trace_id_of};
    use serde_json::{json, Value};
    const RUN: &str = "pydantic-ai/v5-default/s1_stuck_repeat";
    const OTHER: &str = "strands/default/s4_healthy";
    const KEY: &str = "ui-api-test-fingerprint-key";
    let mut config = test_config(None);
    config.detection.fingerprint_key = Some(KEY.into());
    config.ui.trace_url = Some("http://127.0.0.1:16686/trace/{trace_id}".into());
    let server = loopwatch::server::start(config)
        .await
        .expect("server starts");
    let admin = server.admin_addr.unwrap();
    let requests = run_requests(RUN);
    let other = run_requests(OTHER);
    export_all(server.grpc_addr, &requests).await;
    export_all(server.grpc_addr, &other).await;
    let trace = trace_id_of(&requests[0]);
    let other_trace = trace_id_of(&other[0]);

    let (status, body) = get(admin, &format!("/v1/runs/{trace}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("example.com"),
        "argument content in the drill-down: {body}"
    );
    let run: Value = serde_json::from_str::<Value>(&body).unwrap()["data"].clone();
    assert_eq!(run["run_key"], trace.as_str());
    assert_eq!(run["tool_calls"], 6);
    assert_eq!(run["looping"], true);
    assert_eq!(
        run["traces"],
        json!([{"trace_id": trace, "url": format!("http://127.0.0.1:16686/trace/{trace}")}])
    );
    assert_eq!(run["steps_omitted"], 0);

    // Steps: every kept span in start order, with that span's own times.
    let times = span_times(&requests);
    let steps = run["steps"].as_array().unwrap();
    let mut previous = 0;
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["index"], i + 1);
        let span = step["span_id"].as_str().unwrap();
        let (start, end) = times[span];
        assert_eq!(step["start_time_unix_nano"], start, "{step}");
        assert_eq!(step["end_time_unix_nano"], end, "{step}");
        assert_eq!(step["trace_id"], trace.as_str());
        assert!(start >= previous, "start order");
        previous = start;
    }
    let calls: Vec<&Value> = steps.iter().filter(|s| s["kind"] == "tool_call").collect();
    assert_eq!(calls.len(), 6);
    let args = short_fingerprint(
        KEY,
        "fetch_url",
        &json!({"limit": 1, "url": "https://example.com/a"}),
    );
    for (n, call) in calls.iter().enumerate() {
        assert_eq!(call["call"], n + 1);
        assert_eq!(call["tool_name"], "fetch_url");
        assert_eq!(
            call["arguments"],
            args.as_str(),
            "the keyed short fingerprint"
        );
        assert_eq!(
            call["result"], calls[0]["result"],
            "the same error each time"
        );
        assert!(call["result"].as_str().is_some_and(|r| r.len() == 16));
    }
    assert!(
        steps.iter().any(|s| s["kind"] == "text_response"),
        "the final answer"
    );

    // Detections as expected.json has them, each with why it fired.
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/corpus/expected.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut want: Vec<(String, String, String, u64, u64)> = Vec::new();
    for profile in ["nudge", "stop"] {
        let mut seen = 0;
        for d in expected[RUN][profile].as_array().unwrap() {
            seen += 1;
            want.push((
                profile.into(),
                d["pattern"].as_str().unwrap().into(),
                d["severity"].as_str().unwrap().into(),
                d["call"].as_u64().unwrap(),
                seen,
            ));
        }
    }
    let detections = run["detections"].as_array().unwrap();
    let mut got: Vec<(String, String, String, u64, u64)> = detections
        .iter()
        .map(|d| {
            (
                d["profile"].as_str().unwrap().into(),
                d["pattern"].as_str().unwrap().into(),
                d["severity"].as_str().unwrap().into(),
                d["call"].as_u64().unwrap(),
                d["occurrence"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let (kill_index, kill) = detections
        .iter()
        .enumerate()
        .find(|(_, d)| d["severity"] == "kill")
        .unwrap();
    assert_eq!(
        kill["reason"],
        "fetch_url returned the same result 6 times in a row for the same arguments"
    );
    assert_eq!(kill["budget"], false);
    let call_spans: Vec<&Value> = calls.iter().map(|c| &c["span_id"]).collect();
    let members: Vec<&Value> = kill["span_ids"].as_array().unwrap().iter().collect();
    assert_eq!(members, call_spans, "the six calls formed the kill");
    assert_eq!(kill["span_id"], calls[5]["span_id"], "completed by call 6");
    for call in &calls {
        assert!(
            call["detections"]
                .as_array()
                .unwrap()
                .contains(&json!(kill_index)),
            "{call}"
        );
    }
    // What each step did in each profile: `loopwatch explain`'s verdicts.
    let stop = |call: &Value| call["verdicts"]["stop"].as_str().unwrap().to_string();
    assert!(
        stop(calls[5]).starts_with("FIRED repeated_result kill"),
        "{}",
        stop(calls[5])
    );
    assert!(
        stop(calls[0]).starts_with("below threshold: repeated_call 1/"),
        "{}",
        stop(calls[0])
    );
    assert!(calls[2]["verdicts"]["nudge"]
        .as_str()
        .unwrap()
        .starts_with("FIRED repeated_result warn"));

    // limit: the latest steps only.
    let last_two = get_json(admin, &format!("/v1/runs/{trace}?limit=2")).await["data"].clone();
    assert_eq!(last_two["steps_omitted"], steps.len() - 2);
    assert_eq!(
        last_two["steps"].as_array().unwrap()[..],
        steps[steps.len() - 2..]
    );
    // Errors in the API's JSON shape.
    let (status, body) = get(admin, "/v1/runs/no-such-run").await;
    assert_eq!(status, 404);
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("no-such-run"));
    for bad in ["limit=many", "foo=1"] {
        assert_eq!(
            get(admin, &format!("/v1/runs/{trace}?{bad}")).await.0,
            400,
            "{bad}"
        );
    }

    // Filters by service and agent: /v1/runs and /v1/fleet.
    let service = run["service_name"].as_str().unwrap().to_string();
    let other_run = get_json(admin, &format!("/v1/runs/{other_trace}")).await["data"].clone();
    let other_service = other_run["service_name"].as_str().unwrap().to_string();
    assert_ne!(
        service, other_service,
        "the two fixtures come from different services"
    );
    let keys = |v: Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_key"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(keys(get_json(admin, "/v1/runs").await).len(), 2);
    assert_eq!(
        keys(get_json(admin, &format!("/v1/runs?service={service}")).await),
        vec![trace.clone()]
    );
    assert_eq!(
        keys(get_json(admin, &format!("/v1/runs?service={other_service}")).await),
        vec![other_trace.clone()]
    );
    assert!(keys(get_json(admin, "/v1/runs?service=nope").await).is_empty());
    let agent = run["agent_name"].as_str().unwrap_or("unknown").to_string();
    assert!(
        keys(get_json(admin, &format!("/v1/runs?service={service}&agent={agent}")).await)
            .contains(&trace)
    );
    assert!(
        keys(get_json(admin, &format!("/v1/runs?service={service}&agent=nope")).await).is_empty()
    );
    let fleet = get_json(admin, &format!("/v1/fleet?service={service}")).await;
    assert_eq!(
        (
            fleet["last_window"]["runs"].as_u64(),
            fleet["last_window"]["loop_runs"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(fleet["kills_by_reason"], json!({"repeated_result": 1}));
    let buckets = fleet["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 60);
    assert_eq!(
        buckets
            .iter()
            .map(|b| b["kills"].as_u64().unwrap())
            .sum::<u64>(),
        1
    );
    let services: Vec<&str> = fleet["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        services.contains(&service.as_str()) && services.contains(&other_service.as_str()),
        "{services:?}"
    );
    let calm = get_json(admin, &format!("/v1/fleet?service={other_service}")).await;
    assert_eq!(
        (
            calm["last_window"]["runs"].as_u64(),
            calm["last_window"]["loop_runs"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(calm["kills_by_reason"], json!({}));
    let all = get_json(admin, "/v1/fleet").await;
    assert_eq!(all["last_window"]["runs"], 2);
    assert_eq!(get(admin, "/v1/fleet?bogus=1").await.0, 400);
    server.shutdown().await.unwrap();

    // Without [ui] trace_url the trace has no link; a template without {trace_id} is refused.
    let server = loopwatch::server::start(test_config(None)).await.unwrap();
    export_all(server.grpc_addr, &requests).await;
    let plain = get_json(server.admin_addr.unwrap(), &format!("/v1/runs/{trace}")).await;
    assert_eq!(
        plain["data"]["traces"],
        json!([{"trace_id": trace, "url": null}])
    );
    server.shutdown().await.unwrap();
    let err = loopwatch::config::Config::from_toml(
        "[ui]\ntrace_url = \"https://jaeger.example/trace/\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("ui.trace_url") && err.contains("{trace_id}"),
        "{err}"
    );
}
