//! Stages of the server's life (build, bind, run, stop): each running stage is a named
//! [`Stage`], a `JoinSet` of tasks that should run until the process stops. The first task
//! of any stage that ends on its own (an error, or a listener that returned) is a failure
//! that stops the whole process with a clear error; on shutdown each stage is drained with
//! its own deadline, then aborted. Modelled on rotel's `init/agent.rs` (a cancellation token
//! and a join set per stage). A stage task that must not share the main runtime's workers
//! runs on a thread and runtime of its own ([`on_own_thread`]).

use std::future::Future;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// What a stage task returns: its name and how it ended.
pub type TaskResult = (&'static str, anyhow::Result<()>);

/// A named group of long-running tasks, drained together.
pub struct Stage {
    name: &'static str,
    tasks: JoinSet<TaskResult>,
}

impl Stage {
    /// An empty stage called `name` (used in logs and errors).
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            tasks: JoinSet::new(),
        }
    }

    /// Spawns `task`, called `name`, into this stage.
    pub fn spawn<E>(
        &mut self,
        name: &'static str,
        task: impl Future<Output = Result<(), E>> + Send + 'static,
    ) where
        E: Into<anyhow::Error> + 'static,
    {
        self.tasks
            .spawn(async move { (name, task.await.map_err(Into::into)) });
    }

    /// Tasks still running.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task runs.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Resolves when a task ends before it was asked to (never, for an empty stage): the
    /// error names the stage and the task. Cancel-safe (use in `select!`).
    pub async fn failed(&mut self) -> anyhow::Error {
        match self.tasks.join_next().await {
            Some(ended) => self.describe(ended),
            None => std::future::pending().await,
        }
    }

    fn describe(&self, ended: Result<TaskResult, tokio::task::JoinError>) -> anyhow::Error {
        match ended {
            Ok((task, Ok(()))) => {
                anyhow::anyhow!("{}: {task} stopped unexpectedly", self.name)
            }
            Ok((task, Err(e))) => e.context(format!("{}: {task} failed", self.name)),
            Err(e) => anyhow::anyhow!("{}: a task panicked or was aborted: {e}", self.name),
        }
    }

    /// Waits up to `deadline` for every task to finish (they were told to stop), then aborts
    /// the rest.
    ///
    /// # Errors
    /// The first task that failed while draining (named), or a timeout naming how many
    /// tasks were aborted.
    pub async fn drain(mut self, deadline: Duration) -> anyhow::Result<()> {
        let mut first_error = None;
        let finished = tokio::time::timeout(deadline, async {
            while let Some(ended) = self.tasks.join_next().await {
                if let Ok((_, Ok(()))) = ended {
                    continue;
                }
                let err = self.describe(ended);
                tracing::error!(stage = self.name, error = %format!("{err:#}"), "task failed while draining");
                first_error.get_or_insert(err);
            }
        })
        .await;
        if finished.is_err() {
            let left = self.tasks.len();
            tracing::warn!(
                stage = self.name,
                tasks = left,
                ?deadline,
                "stage did not finish before its drain deadline; aborting its tasks"
            );
            self.tasks.abort_all();
            while self.tasks.join_next().await.is_some() {}
            return Err(first_error.unwrap_or_else(|| {
                anyhow::anyhow!(
                    "{}: {left} task(s) did not finish within {}",
                    self.name,
                    humantime::format_duration(deadline)
                )
            }));
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Runs `serve` on a thread of its own with a one-thread runtime, on `listener` moved to
/// that runtime (so its readiness is driven there, not by the main runtime's workers);
/// returns a future of its result for the caller's stage.
///
/// # Errors
/// When the thread, its runtime or the listener's move cannot be set up.
pub(super) fn on_own_thread<F, Fut>(
    name: &'static str,
    listener: TcpListener,
    serve: F,
) -> anyhow::Result<impl Future<Output = anyhow::Result<()>> + Send + 'static>
where
    F: FnOnce(TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = std::io::Result<()>> + 'static,
{
    let listener = listener.into_std().context("admin listener")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .context("admin runtime")?;
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let outcome = runtime.block_on(async move {
                let listener = TcpListener::from_std(listener)?;
                serve(listener).await
            });
            let _ = done.send(outcome);
        })
        .context("admin thread")?;
    Ok(async move {
        match result.await {
            Ok(outcome) => outcome.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow::anyhow!("{name} thread ended without a result")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_task_to_end_is_the_failure_and_names_itself() {
        let mut stage = Stage::new("receivers");
        stage.spawn(
            "receiver.grpc",
            std::future::pending::<anyhow::Result<()>>(),
        );
        stage.spawn("receiver.http", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err::<(), _>(std::io::Error::other("accept: too many open files"))
        });
        let err = tokio::time::timeout(Duration::from_secs(2), stage.failed())
            .await
            .unwrap_or_else(|_| panic!("no failure reported"));
        assert_eq!(
            format!("{err:#}"),
            "receivers: receiver.http failed: accept: too many open files"
        );
        assert_eq!(stage.len(), 1);
        let mut quiet = Stage::new("admin");
        quiet.spawn("admin", async { Ok::<(), std::io::Error>(()) });
        let err = quiet.failed().await;
        assert_eq!(err.to_string(), "admin: admin stopped unexpectedly");
    }

    #[tokio::test]
    async fn drain_waits_then_aborts_at_its_deadline() {
        let mut stage = Stage::new("receivers");
        stage.spawn("quick", async { Ok::<(), std::io::Error>(()) });
        assert!(stage.drain(Duration::from_secs(1)).await.is_ok());

        let mut stuck = Stage::new("receivers");
        stuck.spawn(
            "stalled client",
            std::future::pending::<anyhow::Result<()>>(),
        );
        let started = std::time::Instant::now();
        let err = stuck.drain(Duration::from_millis(50)).await.err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("receivers: 1 task(s) did not finish within 50ms")
        );
    }

    #[tokio::test]
    async fn an_empty_stage_never_fails() {
        let mut stage = Stage::new("admin");
        let waited = tokio::time::timeout(Duration::from_millis(30), stage.failed()).await;
        assert!(waited.is_err());
        assert!(stage.is_empty());
    }
}
