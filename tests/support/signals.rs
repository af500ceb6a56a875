//! Shared helpers of the `signals_*` integration tests (real servers, no mocks).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use loopwatch::signals::Action;
use loopwatch::signals::{signal_id, RetryConfig, Signal, SIGNAL_SCHEMA};

pub const REDIS_ADDR: &str = "127.0.0.1:6379";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const NATS_ADDR: &str = "127.0.0.1:4222";
pub const NATS_URL: &str = "nats://127.0.0.1:4222";

/// A name unique to this process and call, for channels, prefixes and streams.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{name}_{}_{nanos}", std::process::id())
}

/// True when `addr` accepts TCP. When it does not: panics if env `CI` is set, else
/// prints why the test is skipped and returns false.
pub async fn service_up(addr: &str) -> bool {
    let connect = tokio::net::TcpStream::connect(addr);
    let up = matches!(
        tokio::time::timeout(Duration::from_secs(2), connect).await,
        Ok(Ok(_))
    );
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "{addr} is unreachable and CI is set: this test needs the real server"
        );
        eprintln!("SKIPPED: {addr} is unreachable (set CI=1 to make this a failure)");
    }
    up
}

/// Short backoff so retry tests finish quickly.
pub fn fast_retry() -> RetryConfig {
    RetryConfig {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
    }
}

/// A complete signal; `n` makes its id, time and span ids distinct.
pub fn signal(run_key: &str, n: u32, action: Action, service_name: Option<&str>) -> Signal {
    let trace_id = format!(
        "{:032x}",
        u128::from(n) + 0xabc0_0000_0000_0000_0000_0000_0000_0000
    );
    let profile = match action {
        Action::Kill | Action::RequireApproval => "stop",
        Action::Warn => "nudge",
    };
    Signal {
        schema: SIGNAL_SCHEMA.into(),
        id: signal_id(run_key, profile, "repeated_call", &[], n),
        occurrence: n,
        severity: match action {
            Action::Kill | Action::RequireApproval => loopwatch::signals::Severity::Kill,
            Action::Warn => loopwatch::signals::Severity::Warn,
        },
        time_unix_nano: 1_700_000_000_000_000_000 + u64::from(n),
        trace_id: trace_id.into(),
        run_key: run_key.into(),
        service_name: service_name.map(Into::into),
        agent_name: Some("researcher".into()),
        profile: profile.into(),
        action,
        pattern: "repeated_call".into(),
        tool_names: smallvec::smallvec!["read_file".into()],
        count: 5,
        window: 10,
        fingerprints: smallvec::smallvec!["0123456789abcdef".into()],
        span_ids: vec![
            format!("{:016x}", n).into(),
            format!("{:016x}", n + 1).into(),
        ],
        first_span_id: format!("{:016x}", n).into(),
        message: format!("read_file was called 5 times with the same arguments (#{n})"),
    }
}

/// Polls `check` every 10 ms until it returns true or `timeout` passes; returns its last value.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Keys of Redis starting with `prefix` (SCAN over the whole keyspace).
pub async fn redis_key_list(
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut all = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(redis)
            .await
            .unwrap();
        all.extend(keys);
        if next == 0 {
            return all;
        }
        cursor = next;
    }
}

/// How many keys of Redis start with `prefix`.
pub async fn redis_keys(redis: &mut redis::aio::MultiplexedConnection, prefix: &str) -> u64 {
    redis_key_list(redis, prefix).await.len() as u64
}

/// Messages of `stream` on subjects matching `filter` (0 before the stream exists).
pub async fn stream_messages(
    jetstream: &async_nats::jetstream::Context,
    stream: &str,
    filter: &str,
) -> u64 {
    let Ok(stream) = jetstream.get_stream(stream).await else {
        return 0;
    };
    match stream.info_with_subjects(filter).await {
        Ok(subjects) => {
            let counts: Vec<_> = futures::StreamExt::collect(subjects).await;
            counts
                .into_iter()
                .filter_map(Result::ok)
                .map(|(_, n)| n as u64)
                .sum()
        }
        Err(_) => 0,
    }
}

/// Deletes the Redis keys starting with `prefix` and the JetStream stream `stream`.
pub async fn cleanup_sinks(
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    jetstream: &async_nats::jetstream::Context,
    stream: &str,
) {
    for keys in redis_key_list(redis, prefix).await.chunks(10_000) {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(redis)
            .await
            .unwrap();
    }
    let _ = jetstream.delete_stream(stream).await;
}
