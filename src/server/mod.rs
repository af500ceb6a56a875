//! `loopwatch serve`, in stages: build (engine, signals, forwarder, span path), bind (every
//! listener, so a port in use fails start-up), run (receivers and admin as [`Stage`]s, each a
//! `JoinSet`; the first task that ends on its own stops the process with its error), stop
//! (receivers, then the forwarder's drain, then the signal sinks, then admin, each with its
//! own `shutdown.drain_timeout` deadline). A `CancellationToken` is the stop signal.

pub mod lifecycle;
pub mod reload;
pub mod security;
pub mod startup;

mod process;

pub use process::{init_logging, shutdown_signal};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::detector::Severity;
use crate::engine::Engine;
use crate::forward::Forwarder;
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, SpanSink};
use crate::receiver::grpc::GrpcReceiver;
use crate::receiver::stats::ReceiverStats;
use crate::server::lifecycle::{on_own_thread, Stage};
use crate::signals::SignalHub;
use tokio_util::sync::CancellationToken;

/// A started server: its bound addresses and handles (tests start it on port 0).
pub struct RunningServer {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub admin_addr: Option<SocketAddr>,
    pub engine: Arc<Engine>,
    pub signals: SignalHub,
    pub receiver_stats: Arc<ReceiverStats>,
    /// What `/metrics` renders from (config reloads are counted here).
    pub metrics: Arc<Metrics>,
    /// Cancelled when the server stops: asked to, or because a serving task failed.
    cancel: CancellationToken,
    done: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Stops the server (as SIGTERM would) and waits for the drain to finish.
    ///
    /// # Errors
    /// The serving task that failed (if one stopped the server), acknowledged spans that
    /// were not delivered before the drain deadline, or a receiver that failed while draining.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.cancel.cancel();
        self.done.await.context("server task panicked")?
    }

    /// Resolves once the server is stopping (asked to, or a serving task failed).
    pub async fn stopping(&self) {
        self.cancel.cancelled().await;
    }
}

/// Runs `loopwatch serve` until `shutdown` resolves. With a `reload` source (the
/// `--config` file), the detection config is reloaded on SIGHUP and when the file changes
/// ([`reload`]).
pub async fn run(
    config: Config,
    reload: Option<reload::ReloadSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let summary = crate::server::startup::StartupSummary::of(&config)?;
    let running = config.clone();
    let server = start(config).await?;
    if let Some(source) = reload {
        let cancel = server.cancel.clone();
        tokio::spawn(reload::watch(
            source,
            running,
            server.engine.clone(),
            server.metrics.clone(),
            async move { cancel.cancelled().await },
        ));
    }
    tracing::info!(
        grpc = %server.grpc_addr,
        http = %server.http_addr,
        admin = %server
            .admin_addr
            .map_or_else(|| "off".to_string(), |a| a.to_string()),
        downstream = %summary.downstream,
        sinks = %summary.sinks,
        profiles = %summary.profiles,
        "loopwatch listening"
    );
    tokio::select! {
        _ = shutdown => tracing::info!("shutdown requested: no longer accepting; draining"),
        _ = server.stopping() => {}
    }
    server.shutdown().await
}

/// Binds every listener and starts all tasks. Errors: a listener that cannot be bound,
/// an invalid config.
pub async fn start(config: Config) -> anyhow::Result<RunningServer> {
    let engine = Arc::new(Engine::from_config(&config)?);
    let edges = crate::server::security::Edges::from_config(&config).map_err(anyhow::Error::msg)?;
    let nofile = crate::net::listen::fd::raise_nofile_limit();
    crate::net::listen::fd::check_connection_budget(
        nofile,
        2 * config.receiver.connections.max_connections + config.admin.connections.max_connections,
    );
    if config
        .detection
        .fingerprint_key
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        tracing::warn!(
            "no detection.fingerprint_key configured: drew a random key; external fingerprints are stable only for the life of this process"
        );
    }
    if config.signals.webhook.url.is_some() && config.signals.webhook.secret.is_none() {
        tracing::warn!(
            sink = "webhook",
            "signals.webhook.secret is not set: webhook posts carry no X-Loopwatch-Signature, so the receiver cannot tell them from forged ones"
        );
    }
    let metrics = Arc::new(Metrics::default());
    let signals = SignalHub::start(config.signals.clone());

    let forwarder = match config
        .exporter
        .endpoint
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        Some(endpoint) => {
            tracing::info!(endpoint, "forwarding to the downstream OTLP endpoint");
            let forwarder = match Forwarder::start(&config.exporter) {
                Err(e @ crate::forward::ForwardError::Store(_)) => return Err(e.into()),
                started => started.with_context(|| format!("exporter.endpoint {endpoint:?}"))?,
            };
            metrics.forward_queue_capacity.store(
                config.exporter.queue_capacity as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            metrics.forward_queue_max_bytes.store(
                config.exporter.queue.max_bytes as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            let latency = metrics.clone();
            forwarder.stats().set_latency_hook(Arc::new(move |l| {
                latency.forward_latency.observe(l.export.as_secs_f64())
            }));
            Some(forwarder)
        }
        None => {
            tracing::info!("no exporter.endpoint: detect-only, spans are not forwarded");
            None
        }
    };

    let resource_limits = Arc::new(crate::ingest::limits::Limits::new(&config.limits));
    if let Some(hard) = resource_limits.memory.hard_limit_bytes() {
        tracing::info!(
            hard_limit_mib = hard >> 20,
            soft_limit_mib = resource_limits.memory.soft_limit_bytes().unwrap_or(0) >> 20,
            "memory limiter on (limits.memory_mib)"
        );
    }
    let pipeline = Arc::new(Pipeline {
        engine: engine.clone(),
        forward: forwarder.as_ref().map(|f| f.queue()),
        signals: Some(signals.clone()),
        metrics: metrics.clone(),
        limits: resource_limits.clone(),
        reports: Arc::new(crate::pipeline::reporter::ReportQueue::new(
            crate::pipeline::reporter::REPORT_QUEUE_CAPACITY,
        )),
        log_sampling: Arc::new(crate::pipeline::log_sampling::DetectionLogSampler::new(
            &config.log.sampling,
        )),
    });
    let reporter = pipeline.spawn_reporter();
    let sink: Arc<dyn SpanSink> = pipeline.clone();
    let receiver_stats = Arc::new(ReceiverStats::default());
    let options = config.receiver.options();

    let grpc_listener = TcpListener::bind(config.receiver.grpc_listen)
        .await
        .with_context(|| format!("receiver.grpc_listen {}", config.receiver.grpc_listen))?;
    let http_listener = TcpListener::bind(config.receiver.http_listen)
        .await
        .with_context(|| format!("receiver.http_listen {}", config.receiver.http_listen))?;
    let admin_listener = match config.admin.listen.as_str() {
        "" => None,
        addr => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("admin.listen {addr}"))?,
        ),
    };
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    let admin_addr = admin_listener
        .as_ref()
        .map(|l| l.local_addr())
        .transpose()?;

    let (stop, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let grpc = GrpcReceiver::new(sink.clone(), options.clone(), receiver_stats.clone())
        .add_service(crate::signals::grpc::signals_service_until(
            signals.clone(),
            stop.subscribe(),
        ))
        .add_service(crate::guard::grpc::guard_service(engine.clone()));
    let limits = &config.receiver.connections;
    let grpc_incoming = crate::net::listen::spawn_accept(
        "receiver.grpc",
        grpc_listener,
        edges.grpc_tls.clone(),
        limits,
        metrics.listener("receiver.grpc"),
        stopped(),
    );
    // Run stage 1: the receivers. Any of them ending before shutdown stops the process.
    let mut receivers = Stage::new("receivers");
    receivers.spawn("receiver.grpc", {
        let (limits, edge, stop) = (limits.clone(), edges.grpc_edge(), stopped());
        async move {
            grpc.serve_incoming(grpc_incoming, &limits, edge, stop)
                .await
        }
    });
    let http_incoming = crate::net::listen::spawn_accept(
        "receiver.http",
        http_listener,
        edges.http_tls.clone(),
        limits,
        metrics.listener("receiver.http"),
        stopped(),
    );
    let http_app = crate::net::auth::protect_receiver(
        crate::receiver::http_router(sink.clone(), options, receiver_stats.clone()),
        edges.receiver_auth.clone(),
    );
    receivers.spawn("receiver.http", {
        let (limits, stop) = (limits.clone(), stopped());
        async move {
            crate::net::listen::http::serve_router(http_incoming, http_app, &limits, stop).await
        }
    });
    edges.spawn_reloaders(&stopped);
    let admin_state = AdminState {
        engine: engine.clone(),
        signals: signals.clone(),
        metrics: metrics.clone(),
        receiver_stats: receiver_stats.clone(),
        forwarder: forwarder.as_ref().map(|f| f.stats()),
        forward_queue: forwarder.as_ref().map(|f| f.queue()),
        exporter_health: forwarder.as_ref().and_then(|f| f.health()),
        ready: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        limits: Some(resource_limits.clone()),
        reports: Some(pipeline.reports.clone()),
        log_sampling: Some(pipeline.log_sampling.clone()),
        auth: edges.admin_auth.clone().map(|token| {
            Arc::new(admin::access::AdminAuth::new(
                token,
                edges.admin_tls.is_some(),
                config.ui.session_ttl,
            ))
        }),
        trace_url: config.ui.trace_url(),
    };
    let telemetry = crate::telemetry::Telemetry::start(&config.telemetry, admin_state.clone())
        .context("telemetry.endpoint")?;
    let ready = admin_state.ready.clone();
    // Run stage 2: the admin listener and housekeeping; stopped last, so /readyz answers
    // 503 while the span path drains.
    let mut admin = Stage::new("admin");
    if let Some(l) = admin_listener {
        let auth = admin_state.auth.clone();
        let app = admin::access::protect(admin::router(admin_state), auth);
        let limits = config.admin.connections.clone();
        let tls = edges.admin_tls.clone();
        let stats = metrics.listener("admin");
        let (accept_stop, stop) = (stopped(), stopped());
        // Its own thread and runtime (issue 31 item 2): /healthz and /readyz answer however
        // busy the OTLP receivers keep the main runtime's workers.
        let served = on_own_thread("loopwatch-admin", l, move |listener| async move {
            let incoming = crate::net::listen::spawn_accept(
                "admin",
                listener,
                tls,
                &limits,
                stats,
                accept_stop,
            );
            crate::net::listen::http::serve_router(incoming, app, &limits, stop).await
        })?;
        admin.spawn("admin", served);
    }

    // Idle-run eviction.
    {
        let engine = engine.clone();
        let fleet_metrics = metrics.clone();
        let ttl = config.registry.idle_ttl;
        let mut stop_rx = stop.subscribe();
        admin.spawn("run sweeper", async move {
            let period = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {
                        // Fleet view first: it learns runs before they are evicted.
                        fleet_metrics.fleet.sample(&engine.registry, crate::metrics::fleet::now_unix());
                        let evicted = engine.registry.evict_idle(Instant::now());
                        if evicted > 0 {
                            tracing::debug!(evicted, "evicted idle runs");
                        }
                    }
                    _ = stop_rx.wait_for(|s| *s) => break,
                }
            }
            Ok::<(), std::convert::Infallible>(())
        });
    }

    let drain_timeout = config.shutdown.drain_timeout;
    let done_engine = engine.clone();
    let done_signals = signals.clone();
    let cancel = CancellationToken::new();
    let done_cancel = cancel.clone();
    let done = tokio::spawn(async move {
        // Running until asked to stop, or until a serving task ends on its own.
        let failure = tokio::select! {
            _ = done_cancel.cancelled() => None,
            err = receivers.failed() => Some(err),
            err = admin.failed() => Some(err),
        };
        if let Some(err) = &failure {
            tracing::error!(error = %format!("{err:#}"), "a serving task stopped: shutting down");
        }
        done_cancel.cancel();
        ready.store(false, std::sync::atomic::Ordering::Relaxed);
        let _ = stop.send(true);
        // Stop stage 1: receivers stop accepting and finish in-flight requests within their
        // deadline (a client stalled mid-request must not keep the process from draining).
        let receivers_drained = receivers.drain(drain_timeout).await;
        // Then the detections they queued are logged and signalled, within the deadline.
        pipeline.reports.close();
        if tokio::time::timeout(drain_timeout, reporter).await.is_err() {
            tracing::warn!(
                unreported = pipeline.reports.len(),
                "detection reports not all logged and signalled before the drain deadline"
            );
        }
        let (info, warn, kill) = pipeline.reports.dropped();
        if info + warn + kill > 0 {
            tracing::warn!(info, warn, kill, "detection reports dropped (queue full)");
        }
        // Stop stage 2: the forwarder wakes its retries and drains within its deadline.
        let lost = match forwarder {
            Some(forwarder) => forwarder.shutdown(drain_timeout).await.undelivered_spans,
            None => 0,
        };
        // Stop stage 3: signals flush best-effort within theirs.
        done_signals.shutdown(drain_timeout).await;
        // Stop stage 4: self-telemetry exports its last values.
        if let Some(telemetry) = telemetry {
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        // Stop stage 5: admin and housekeeping.
        let _ = admin.drain(drain_timeout).await;
        // Last, so a reporter still running past the drain deadline is summed up too.
        let (info, warn, kill) = pipeline.log_sampling.take_unreported();
        for (severity, count) in Severity::ALL.into_iter().zip([info, warn, kill]) {
            if count > 0 {
                crate::pipeline::log_suppressed(severity, count);
            }
        }
        let stats = &done_engine.stats;
        tracing::info!(
            spans = stats.spans_seen.load(std::sync::atomic::Ordering::Relaxed),
            tool_calls = stats.tool_calls.load(std::sync::atomic::Ordering::Relaxed),
            annotated = stats
                .spans_annotated
                .load(std::sync::atomic::Ordering::Relaxed),
            "loopwatch stopped"
        );
        if let Some(err) = failure {
            return Err(err);
        }
        if lost > 0 {
            anyhow::bail!(
                "{lost} acknowledged span(s) were not delivered downstream before the drain deadline (shutdown.drain_timeout = {})",
                humantime::format_duration(drain_timeout)
            );
        }
        // Receivers that outlived the deadline were aborted (their clients retry); a
        // receiver that failed while draining is reported.
        match receivers_drained {
            Err(err) if !err.to_string().contains("did not finish") => Err(err),
            _ => Ok(()),
        }
    });

    Ok(RunningServer {
        grpc_addr,
        http_addr,
        admin_addr,
        engine,
        signals,
        receiver_stats,
        metrics,
        cancel,
        done,
    })
}
