//! A loopwatch started in-process (ports 0) forwarding to a test downstream, with a
//! webhook sink pointed at a closed port (so sink failures show in the metrics), fed with
//! every corpus run.

use std::time::Duration;

use loopwatch::server::RunningServer;

use crate::support::downstream::Downstream;
use crate::support::server::{export_all, run_requests, test_config};

/// Every corpus run name in `expected.json`.
pub fn corpus_runs() -> Vec<String> {
    crate::support::spans::corpus_expected()
        .into_iter()
        .map(|(run, _)| run)
        .collect()
}

/// Starts the server; the downstream must stay alive as long as the server forwards.
pub async fn start() -> (RunningServer, Downstream) {
    let (downstream, addr) = Downstream::start(false).await;
    let mut config = test_config(Some(addr));
    // Nothing listens on port 9 of loopback: every delivery attempt fails.
    config.signals.webhook.url = Some("http://127.0.0.1:9/loopwatch".into());
    config.signals.webhook.timeout = Duration::from_millis(200);
    config.signals.retry.initial_backoff = Duration::from_millis(20);
    config.signals.retry.max_backoff = Duration::from_millis(200);
    let server = loopwatch::server::start(config)
        .await
        .expect("server starts");
    (server, downstream)
}

/// Sends every corpus run (each run's requests in order).
pub async fn feed_corpus(server: &RunningServer) -> usize {
    let runs = corpus_runs();
    for run in &runs {
        export_all(server.grpc_addr, &run_requests(run)).await;
    }
    runs.len()
}
