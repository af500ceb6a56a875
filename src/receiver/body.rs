//! Reading a request body under the receivers' slow-client rules (issue 31 item 2): the body
//! is read **before** the request takes a forward-queue slot, within
//! `receiver.body_read_timeout`, at no less than `receiver.body_min_rate` bytes per second
//! once [`MIN_RATE_GRACE`] has passed, each frame counted against the decoded-bytes budget as
//! it arrives. A client that sends one byte and stalls holds no slot and no budget to speak
//! of, and is cut off within the deadline; a slow body is refused retryably
//! (`UNAVAILABLE` / 503), so a client that is merely slow retries.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::error::ReceiveError;
use crate::ingest::limits::DecodedBytes;

/// How long a body may take before the minimum rate applies: a small request arrives in
/// one go, and a large one gets this long to get going.
pub const MIN_RATE_GRACE: Duration = Duration::from_secs(2);

/// The rules one body is read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRules {
    /// Most bytes the body may hold (as sent, before decompression).
    pub max_bytes: usize,
    /// The whole body must arrive within this.
    pub timeout: Duration,
    /// After [`MIN_RATE_GRACE`], at least this many bytes per second on average (0 = off).
    pub min_rate: u64,
    /// How long a frame may wait for room in the decoded-bytes budget.
    pub budget_wait: Duration,
}

/// Reads `body` whole under `rules`, counting its bytes in `budget` as they arrive: the
/// frames joined into one buffer of the body's size (one frame: that frame, not copied).
///
/// # Errors
/// As [`read_body_chunks`].
pub async fn read_body<B>(
    body: B,
    rules: &BodyRules,
    budget: &mut DecodedBytes,
) -> Result<Bytes, ReceiveError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let chunks = read_body_chunks(body, rules, budget).await?;
    Ok(crate::annotate::wire::joined(&chunks))
}

/// Reads `body` whole under `rules`, counting its bytes in `budget` as they arrive, and
/// returns its data frames as received (none empty; no copy: the gRPC receiver hands them
/// on to tonic, which copies them once into its message buffer).
///
/// # Errors
/// [`ReceiveError::TooLarge`] past `max_bytes`, [`ReceiveError::BodyTimeout`] /
/// [`ReceiveError::BodyTooSlow`] for a slow client, [`ReceiveError::Refused`] with
/// `InFlightLimit` when the budget stays full, [`ReceiveError::Body`] when the connection
/// fails.
pub async fn read_body_chunks<B>(
    body: B,
    rules: &BodyRules,
    budget: &mut DecodedBytes,
) -> Result<Vec<Bytes>, ReceiveError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let start = Instant::now();
    let deadline = start + rules.timeout;
    tokio::pin!(body);
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut received: usize = 0;
    loop {
        // Wake at the deadline, or when the minimum rate is next due to be checked.
        let elapsed = start.elapsed();
        let wake = if rules.min_rate > 0 && elapsed < MIN_RATE_GRACE {
            (start + MIN_RATE_GRACE).min(deadline)
        } else if rules.min_rate > 0 {
            (Instant::now() + Duration::from_millis(500)).min(deadline)
        } else {
            deadline
        };
        let frame = match tokio::time::timeout_at(wake, body.frame()).await {
            Ok(None) => break,
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) => return Err(ReceiveError::Body(e.to_string())),
            Err(_) => {
                check_pace(start, received, rules)?;
                continue;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if data.is_empty() {
            continue;
        }
        received = received.saturating_add(data.len());
        if received > rules.max_bytes {
            return Err(ReceiveError::TooLarge {
                limit: rules.max_bytes,
            });
        }
        if !budget.grow(data.len(), rules.budget_wait).await {
            return Err(ReceiveError::Refused(
                crate::ingest::AcceptError::InFlightLimit,
            ));
        }
        chunks.push(data);
        check_pace(start, received, rules)?;
    }
    Ok(chunks)
}

/// Fails when the deadline passed or, after the grace, the average rate is below the
/// minimum.
fn check_pace(start: Instant, received: usize, rules: &BodyRules) -> Result<(), ReceiveError> {
    let elapsed = start.elapsed();
    if elapsed >= rules.timeout {
        return Err(ReceiveError::BodyTimeout {
            timeout: rules.timeout,
        });
    }
    if rules.min_rate > 0 && elapsed >= MIN_RATE_GRACE {
        let expected = rules.min_rate as f64 * elapsed.as_secs_f64();
        if (received as f64) < expected {
            return Err(ReceiveError::BodyTooSlow {
                min_rate: rules.min_rate,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    fn rules(timeout_ms: u64, min_rate: u64) -> BodyRules {
        BodyRules {
            max_bytes: 1 << 20,
            timeout: Duration::from_millis(timeout_ms),
            min_rate,
            budget_wait: Duration::from_millis(10),
        }
    }

    /// A body that sends `chunks` (bytes, then a pause) and then ends, or stalls for ever.
    fn body(
        chunks: Vec<(&'static [u8], u64)>,
        stall: bool,
    ) -> impl hyper::body::Body<Data = Bytes, Error = std::io::Error> {
        let stream = async_stream(chunks, stall);
        StreamBody::new(stream)
    }

    fn async_stream(
        chunks: Vec<(&'static [u8], u64)>,
        stall: bool,
    ) -> impl futures::Stream<Item = Result<hyper::body::Frame<Bytes>, std::io::Error>> {
        futures::stream::unfold((chunks.into_iter(), stall), |(mut it, stall)| async move {
            match it.next() {
                Some((data, pause)) => {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    Some((
                        Ok(hyper::body::Frame::data(Bytes::from_static(data))),
                        (it, stall),
                    ))
                }
                None if stall => {
                    std::future::pending::<()>().await;
                    None
                }
                None => None,
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_whole_body_is_joined_and_counted() {
        let mut budget = DecodedBytes::none();
        let read = read_body(
            body(vec![(b"abc", 0), (b"de", 10)], false),
            &rules(1000, 0),
            &mut budget,
        )
        .await;
        assert_eq!(read.ok(), Some(Bytes::from_static(b"abcde")));
        assert_eq!(budget.used_bytes(), 5);
        let chunks = read_body_chunks(
            body(vec![(b"abc", 0), (b"", 0), (b"de", 10)], false),
            &rules(1000, 0),
            &mut budget,
        )
        .await;
        assert_eq!(
            chunks.ok(),
            Some(vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")])
        );
        let one = body(vec![(b"one", 0)], false);
        let read = read_body(one, &rules(1000, 0), &mut budget).await;
        assert_eq!(read.ok(), Some(Bytes::from_static(b"one")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out_and_a_slow_one_is_cut() {
        let mut budget = DecodedBytes::none();
        let stalled = read_body(body(vec![(b"a", 0)], true), &rules(5_000, 0), &mut budget).await;
        assert!(
            matches!(stalled, Err(ReceiveError::BodyTimeout { .. })),
            "{stalled:?}"
        );
        let slow = read_body(
            body(vec![(b"a", 0), (b"b", 1500), (b"c", 1500)], true),
            &rules(60_000, 1024),
            &mut budget,
        )
        .await;
        assert!(
            matches!(slow, Err(ReceiveError::BodyTooSlow { min_rate: 1024 })),
            "{slow:?}"
        );
        let big = read_body(
            body(vec![(&[0; 100], 0)], false),
            &BodyRules {
                max_bytes: 10,
                ..rules(1000, 0)
            },
            &mut budget,
        )
        .await;
        assert!(matches!(big, Err(ReceiveError::TooLarge { limit: 10 })));
    }
}
