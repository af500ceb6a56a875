//! Retrying a delivery: whether a failure is worth retrying, and how long to wait.
//! Shared by the forwarder ([`crate::forward`]) and the signal sinks ([`crate::signals`]).
//!
//! Classification follows the OTLP/gRPC spec ("Failures" table): `CANCELLED`,
//! `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE` and `DATA_LOSS` are
//! retryable; `RESOURCE_EXHAUSTED` only when the server sent a `google.rpc.RetryInfo` (it can
//! recover); every other code the server answers is final. A failure raised locally by the
//! transport (connection refused, reset or broken mid-request: tonic reports those as
//! `UNKNOWN`/`INTERNAL` with the transport error as source) never reached the server's
//! handler, so it is retryable whatever its code.
//!
//! Waits grow exponentially, `d = min(max, initial · 2ⁿ)`, and each is drawn at random in
//! `[d/2, d]`: the jitter stays inside the cap. A server-requested delay (`RetryInfo`) replaces
//! the computed wait for that attempt but is capped at `max` too, so a hostile or confused
//! server cannot park a request for hours.

use std::time::{Duration, Instant};

use rand::Rng;
use tonic::Code;
use tonic_types::StatusExt;

/// What to do after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again; `after` is the server's `RetryInfo` delay if it sent one.
    Retry {
        /// Server-requested delay, replacing the backoff for this attempt (still capped).
        after: Option<Duration>,
    },
    /// The failure is final: drop and count.
    DoNotRetry,
}

/// The retry decision for a status the server answered with `code`, given the `RetryInfo`
/// delay it carried (if any).
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

/// True when `status` was raised by the local transport (it carries the transport error as
/// its source) rather than sent by the server in `grpc-status`.
pub fn is_transport_failure(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some()
}

/// [`classify`] applied to a gRPC status: transport failures are retryable; otherwise the
/// code decides, reading `RetryInfo` from the status details (`grpc-status-details-bin`).
pub fn classify_status(status: &tonic::Status) -> RetryDecision {
    if is_transport_failure(status) {
        return RetryDecision::Retry { after: None };
    }
    classify(status.code(), retry_info_delay(status))
}

/// The `google.rpc.RetryInfo` delay of a status, if it carries a valid one.
pub fn retry_info_delay(status: &tonic::Status) -> Option<Duration> {
    status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
}

/// Backoff settings: first wait, largest wait, and the total time after which a delivery is
/// given up (`None`: retry until delivered or shut down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Nominal first wait.
    pub initial: Duration,
    /// Largest wait, server-requested ones included.
    pub max: Duration,
    /// Give up once waiting would pass this much time since the first attempt.
    pub max_elapsed: Option<Duration>,
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): random in `[d/2, d]` with
    /// `d = min(max, initial · 2^attempt)`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        let full = self
            .initial
            .saturating_mul(factor)
            .min(self.max.max(self.initial));
        let half = full / 2;
        let spread = u64::try_from((full - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rand::rng().random_range(0..=spread))
    }

    /// A schedule for one delivery, starting now.
    pub fn start(&self) -> Backoff {
        Backoff {
            policy: *self,
            attempt: 0,
            deadline: self.max_elapsed.map(|e| Instant::now() + e),
        }
    }
}

/// The retry schedule of one delivery.
#[derive(Clone, Debug)]
pub struct Backoff {
    policy: RetryPolicy,
    attempt: u32,
    deadline: Option<Instant>,
}

impl Backoff {
    /// The wait before the next attempt (`server_hint` replaces the computed wait, capped at
    /// the policy's `max`), or `None` when waiting would pass the max elapsed time.
    pub fn next_delay(&mut self, server_hint: Option<Duration>) -> Option<Duration> {
        let delay = match server_hint {
            Some(hint) => hint.min(self.policy.max),
            None => self.policy.delay(self.attempt),
        };
        self.attempt = self.attempt.saturating_add(1);
        match self.deadline {
            Some(deadline) if Instant::now() + delay > deadline => None,
            _ => Some(delay),
        }
    }

    /// Retries scheduled so far.
    pub fn attempts(&self) -> u32 {
        self.attempt
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
            let two = Some(Duration::from_secs(2));
            let with_info = classify(code, two);
            if retryable.contains(&n) {
                assert_eq!(plain, RetryDecision::Retry { after: None }, "{code:?}");
                assert_eq!(with_info, RetryDecision::Retry { after: two }, "{code:?}");
            } else if code == Code::ResourceExhausted {
                assert_eq!(plain, RetryDecision::DoNotRetry);
                assert_eq!(with_info, RetryDecision::Retry { after: two });
            } else {
                assert_eq!(plain, RetryDecision::DoNotRetry, "{code:?}");
                assert_eq!(with_info, RetryDecision::DoNotRetry, "{code:?}");
            }
        }
    }

    #[test]
    fn classify_status_reads_retry_info() {
        let delay = Duration::from_millis(250);
        let status = tonic::Status::with_error_details(
            Code::ResourceExhausted,
            "busy",
            tonic_types::ErrorDetails::with_retry_info(Some(delay)),
        );
        assert_eq!(retry_info_delay(&status), Some(delay));
        assert_eq!(
            classify_status(&status),
            RetryDecision::Retry { after: Some(delay) }
        );
        let bare = tonic::Status::resource_exhausted("busy");
        assert_eq!(classify_status(&bare), RetryDecision::DoNotRetry);
    }

    #[test]
    fn transport_failures_are_retryable_whatever_the_code() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let broken = tonic::Status::from_error(Box::new(io));
        assert_eq!(broken.code(), Code::Unknown);
        assert!(is_transport_failure(&broken));
        assert_eq!(
            classify_status(&broken),
            RetryDecision::Retry { after: None }
        );
        // the same code sent by the server is final
        let answered = tonic::Status::unknown("handler failed");
        assert!(!is_transport_failure(&answered));
        assert_eq!(classify_status(&answered), RetryDecision::DoNotRetry);
    }

    #[test]
    fn delays_grow_with_jitter_inside_the_cap() {
        let policy = RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            max_elapsed: None,
        };
        for _ in 0..200 {
            let nominal = [100u64, 200, 400, 400, 400, 400];
            for (attempt, n) in nominal.iter().enumerate() {
                let ms = policy.delay(attempt as u32).as_millis() as u64;
                assert!(ms >= n / 2 && ms <= *n, "attempt {attempt}: {ms} vs {n}");
            }
            assert!(policy.delay(u32::MAX) <= Duration::from_millis(400));
        }
    }

    #[test]
    fn server_hints_are_capped_and_elapsed_time_gives_up() {
        let policy = RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(30),
            max_elapsed: Some(Duration::from_secs(60)),
        };
        let mut b = policy.start();
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            b.next_delay(Some(Duration::from_secs(3600))),
            Some(Duration::from_secs(30)),
            "an hour asked by the server is capped at max"
        );
        assert_eq!(b.attempts(), 2);
        let short = RetryPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(1),
            max_elapsed: Some(Duration::from_millis(10)),
        };
        assert_eq!(short.start().next_delay(None), None);
        let forever = RetryPolicy {
            max_elapsed: None,
            ..short
        };
        assert!(forever.start().next_delay(None).is_some());
    }
}
