//! Large requests are read and processed off the worker thread's queue: a request of a few
//! hundred kilobytes (a whole conversation in `gen_ai.input.messages`, a batch of a long
//! run) takes milliseconds on the span path, and every request queued on the same tokio
//! worker would wait that long behind it (issue 8: heavy work off the tokio workers, p99
//! added latency).

use tokio::runtime::{Handle, RuntimeFlavor};

/// Requests of at least this many (decompressed) bytes run under
/// [`tokio::task::block_in_place`]. Such a request costs milliseconds, against tens of
/// microseconds for handing the worker's other tasks to another thread; smaller requests
/// run inline. At 64 KiB a quarter of the recorded corpus requests took the hand-off and
/// the span path lost about a tenth of its spans per CPU-second; at 256 KiB only the
/// largest (a long conversation's message attributes) do.
pub const HEAVY_REQUEST_BYTES: usize = 256 * 1024;

/// Runs `work` for a request of `bytes` bytes: inline when it is small or the runtime is
/// not multi-threaded (block_in_place needs one); otherwise in `block_in_place`, so the
/// tasks queued on this worker move to another thread while it runs.
pub fn run_request<T>(bytes: usize, work: impl FnOnce() -> T) -> T {
    let multi_thread =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if bytes >= HEAVY_REQUEST_BYTES && multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Whether a task spawned on the same (single) worker runs while `work` for a request
    /// of `bytes` bytes waits for it.
    fn other_tasks_run_meanwhile(bytes: usize) -> bool {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let (tx, rx) = mpsc::channel();
            let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(async move {
                let _ = started_rx.await;
                let _ = tx.send(());
            });
            tokio::spawn(async move {
                run_request(bytes, || {
                    let _ = started_tx.send(());
                    rx.recv_timeout(Duration::from_secs(2)).is_ok()
                })
            })
            .await
            .expect("task")
        })
    }

    #[test]
    fn a_heavy_request_lets_the_worker_queue_move_on() {
        assert!(other_tasks_run_meanwhile(HEAVY_REQUEST_BYTES));
        assert!(
            !other_tasks_run_meanwhile(HEAVY_REQUEST_BYTES - 1),
            "a small request runs inline: the other task waits for it"
        );
    }

    #[test]
    fn without_a_multi_thread_runtime_work_runs_inline() {
        assert_eq!(run_request(HEAVY_REQUEST_BYTES, || 7), 7);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert_eq!(runtime.block_on(async { run_request(usize::MAX, || 8) }), 8);
    }
}
