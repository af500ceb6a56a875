//! The process around `serve`: the `tracing` subscriber (`log.level`, `log.format`) and
//! the stop signals (SIGTERM, SIGINT) that start a graceful shutdown.

use std::future::Future;

use crate::config::{LogConfig, LogFormat};

/// Installs the `tracing` subscriber: `RUST_LOG` if set, else `log.level`; text or JSON lines.
pub fn init_logging(log: &LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match log.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A future that resolves on SIGTERM or SIGINT. The handlers are registered when this is
/// called, not when the future is first polled: call it (inside the runtime) before the
/// server says it is listening, so a SIGTERM sent right after that line (a supervisor, a
/// test) is a graceful shutdown and never the default action, which kills the process
/// before it drains. Where a handler cannot be registered, that signal keeps its default
/// action.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).ok();
        let mut interrupt = signal(SignalKind::interrupt()).ok();
        async move {
            tokio::select! {
                _ = received(term.as_mut()) => {},
                _ = received(interrupt.as_mut()) => {},
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves when `signal` is received; never when it could not be registered.
#[cfg(unix)]
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
