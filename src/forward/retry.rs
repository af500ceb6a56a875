//! When to retry an export, and how long to wait.
//!
//! Classification follows the OTLP/gRPC spec ("Failures" table): `CANCELLED`,
//! `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE` and `DATA_LOSS` are
//! retryable; `RESOURCE_EXHAUSTED` only when the server sent a `google.rpc.RetryInfo`
//! (it can recover); every other code is final. A server-sent `RetryInfo` delay is honoured.

use std::time::{Duration, Instant};

use rand::Rng;
use tonic::Code;

use crate::otlp::rpc_status::retry_delay;

/// What to do after a failed export attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again; `after` is the server's `RetryInfo` delay if it sent one.
    Retry {
        /// Server-requested delay, overriding the backoff for this attempt.
        after: Option<Duration>,
    },
    /// The failure is final: drop the request and count it.
    DoNotRetry,
}

/// The retry decision for `code`, given the `RetryInfo` delay the status carried (if any).
pub fn classify(code: Code, retry_info: Option<Duration>) -> RetryDecision {
    match code {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => RetryDecision::Retry { after: retry_info },
        Code::ResourceExhausted => match retry_info {
            Some(after) => RetryDecision::Retry { after: Some(after) },
            None => RetryDecision::DoNotRetry,
        },
        Code::Ok
        | Code::Unknown
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::Unimplemented
        | Code::Internal
        | Code::Unauthenticated => RetryDecision::DoNotRetry,
    }
}

/// [`classify`] applied to a status, reading `RetryInfo` from its details.
pub fn classify_status(status: &tonic::Status) -> RetryDecision {
    classify(status.code(), retry_delay(status.details()))
}

/// Exponential backoff with ±50 % jitter, capped per wait and in total elapsed time.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    deadline: Instant,
}

impl Backoff {
    /// Starts a schedule now: first wait around `initial`, doubling up to `max`, giving up
    /// once `max_elapsed` would be exceeded.
    pub fn new(initial: Duration, max: Duration, max_elapsed: Duration) -> Self {
        Self {
            next: initial,
            max,
            deadline: Instant::now() + max_elapsed,
        }
    }

    /// The wait before the next attempt (`server_hint` wins when given), or `None` when
    /// waiting would pass the max elapsed time.
    pub fn next_delay(&mut self, server_hint: Option<Duration>) -> Option<Duration> {
        let delay = match server_hint {
            Some(hint) => hint,
            None => {
                let jitter = rand::rng().random_range(0.5..1.5);
                let d = self.next.mul_f64(jitter);
                self.next = self.next.saturating_mul(2).min(self.max);
                d
            }
        };
        (Instant::now() + delay <= self.deadline).then_some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every gRPC code, by number (0..=16), with the OTLP spec's answer.
    #[test]
    fn classification_covers_every_code() {
        let retryable = [1, 4, 10, 11, 14, 15]; // CANCELLED .. DATA_LOSS
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert_eq!(code as i32, n, "tonic maps {n} to itself");
            let plain = classify(code, None);
            let with_info = classify(code, Some(Duration::from_secs(2)));
            if retryable.contains(&n) {
                assert_eq!(plain, RetryDecision::Retry { after: None }, "{code:?}");
                assert_eq!(
                    with_info,
                    RetryDecision::Retry {
                        after: Some(Duration::from_secs(2))
                    },
                    "{code:?}"
                );
            } else if code == Code::ResourceExhausted {
                assert_eq!(plain, RetryDecision::DoNotRetry);
                assert_eq!(
                    with_info,
                    RetryDecision::Retry {
                        after: Some(Duration::from_secs(2))
                    }
                );
            } else {
                assert_eq!(plain, RetryDecision::DoNotRetry, "{code:?}");
                assert_eq!(with_info, RetryDecision::DoNotRetry, "{code:?}");
            }
        }
    }

    #[test]
    fn classify_status_reads_retry_info() {
        use crate::otlp::rpc_status::status_details_with_retry;
        let details =
            status_details_with_retry(Code::ResourceExhausted, "busy", Duration::from_millis(250));
        let status = tonic::Status::with_details(Code::ResourceExhausted, "busy", details);
        assert_eq!(
            classify_status(&status),
            RetryDecision::Retry {
                after: Some(Duration::from_millis(250))
            }
        );
        let bare = tonic::Status::resource_exhausted("busy");
        assert_eq!(classify_status(&bare), RetryDecision::DoNotRetry);
    }

    #[test]
    fn backoff_grows_caps_and_gives_up() {
        let mut b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(400),
            Duration::from_secs(60),
        );
        let waits: Vec<Duration> = (0..5).filter_map(|_| b.next_delay(None)).collect();
        assert_eq!(waits.len(), 5);
        // nominal 100, 200, 400, 400, 400 with ±50 % jitter
        let nominal = [100u64, 200, 400, 400, 400];
        for (w, n) in waits.iter().zip(nominal) {
            let ms = w.as_millis() as u64;
            assert!(ms >= n / 2 && ms <= n * 3 / 2, "{ms} vs {n}");
        }
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(b.next_delay(Some(Duration::from_secs(61))), None);
        let mut short = Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_millis(10),
        );
        assert_eq!(short.next_delay(None), None);
    }
}
