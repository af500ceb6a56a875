//! NATS sink (DESIGN §6): subject `<prefix>.<action>.<service>`.
//!
//! With `jetstream = true` the stream (`<prefix>.>`) is created when absent and each
//! signal is published through JetStream awaiting the ack, with `Nats-Msg-Id` = the
//! signal id so the stream's duplicate window drops re-deliveries. Without JetStream the
//! publish is flushed to the server (at-most-once, like core NATS).
//!
//! Signals go in batches of up to [`BATCH`]: every publish of the batch is sent, then their
//! JetStream acks are awaited together (core NATS: one flush), so a storm costs a round
//! trip per batch, not per signal. A batch with any failure is retried whole; JetStream's
//! duplicate window keeps one copy of each signal.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use bytes::Bytes;

use super::config::NatsSinkConfig;
use super::sink::{DeliveryError, Sink};
use super::Signal;

/// Timeout of connecting, of a flush and of a JetStream ack (of a batch's acks).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Signals per batch.
pub const BATCH: usize = 256;

/// `service_name` as one subject token: `.`, `*`, `>` and whitespace become `_`;
/// absent or empty becomes `unknown`.
pub fn service_token(service_name: Option<&str>) -> String {
    match service_name {
        Some(name) if !name.is_empty() => name
            .chars()
            .map(|c| {
                if c == '.' || c == '*' || c == '>' || c.is_whitespace() {
                    '_'
                } else {
                    c
                }
            })
            .collect(),
        _ => "unknown".to_owned(),
    }
}

/// The subject of `signal`: `<prefix>.<action>.<service token>` (`action` is `warn` or
/// `kill`, an enum, so it can never turn into a wildcard; the service is sanitized).
pub fn subject(prefix: &str, signal: &Signal) -> String {
    format!(
        "{prefix}.{}.{}",
        signal.action.as_str(),
        service_token(signal.service_name.as_deref())
    )
}

/// Delivers signals to NATS; connects (and ensures the stream) on first delivery.
pub struct NatsSink {
    url: String,
    config: NatsSinkConfig,
    connection: Option<Connection>,
}

enum Connection {
    Core(async_nats::Client),
    JetStream(jetstream::Context),
}

impl NatsSink {
    /// A sink for `url` (e.g. `nats://127.0.0.1:4222`).
    pub fn new(url: String, config: NatsSinkConfig) -> Self {
        Self {
            url,
            config,
            connection: None,
        }
    }

    async fn connect(&self) -> Result<Connection, DeliveryError> {
        let options = async_nats::ConnectOptions::new().connection_timeout(IO_TIMEOUT);
        let client = self
            .config
            .tls
            .nats_options(options, self.config.tls_first)
            .map_err(|e| DeliveryError::Retryable(format!("signals.nats.tls: {e}")))?
            .connect(self.url.as_str())
            .await
            .map_err(|e| DeliveryError::Retryable(format!("nats connect: {e}")))?;
        if !self.config.jetstream {
            return Ok(Connection::Core(client));
        }
        let context = jetstream::new(client);
        let stream = stream_config(&self.config);
        context.get_or_create_stream(stream).await.map_err(|e| {
            DeliveryError::Retryable(format!("nats stream {}: {e}", self.config.stream))
        })?;
        Ok(Connection::JetStream(context))
    }
}

/// The JetStream stream the sink creates when absent: subjects `<subject_prefix>.>`, and
/// `stream_max_age` / `stream_max_bytes` as its limits (0: none; JetStream's -1).
fn stream_config(config: &NatsSinkConfig) -> jetstream::stream::Config {
    let max_bytes = match i64::try_from(config.stream_max_bytes) {
        Ok(0) | Err(_) => -1,
        Ok(bytes) => bytes,
    };
    jetstream::stream::Config {
        name: config.stream.clone(),
        subjects: vec![format!("{}.>", config.subject_prefix)],
        max_age: config.stream_max_age,
        max_bytes,
        discard: jetstream::stream::DiscardPolicy::Old,
        ..Default::default()
    }
}

impl Sink for NatsSink {
    const NAME: &'static str = "nats";

    /// Connects (and, with JetStream, ensures the stream), as the first delivery would.
    async fn check(&mut self) -> Result<(), DeliveryError> {
        if self.connection.is_none() {
            self.connection = Some(self.connect().await?);
        }
        Ok(())
    }

    async fn deliver(&mut self, signal: &Signal) -> Result<(), DeliveryError> {
        self.deliver_all(std::slice::from_ref(&signal)).await
    }

    const BATCH: usize = BATCH;

    async fn deliver_batch(&mut self, signals: &[Arc<Signal>]) -> Result<(), DeliveryError> {
        let signals: Vec<&Signal> = signals.iter().map(|s| s.as_ref()).collect();
        self.deliver_all(&signals).await
    }
}

impl NatsSink {
    /// Publishes `signals` in order (JetStream: every publish sent, then every ack awaited
    /// together; core: one flush).
    async fn deliver_all(&mut self, signals: &[&Signal]) -> Result<(), DeliveryError> {
        let mut messages = Vec::with_capacity(signals.len());
        for signal in signals {
            let payload = Bytes::from(
                serde_json::to_vec(signal)
                    .map_err(|e| DeliveryError::Rejected(format!("signal to JSON: {e}")))?,
            );
            messages.push((
                subject(&self.config.subject_prefix, signal),
                payload,
                &signal.id,
            ));
        }
        if self.connection.is_none() {
            self.connection = Some(self.connect().await?);
        }
        match &self.connection {
            Some(Connection::Core(client)) => {
                for (subject, payload, _) in messages {
                    client
                        .publish(subject, payload)
                        .await
                        .map_err(|e| DeliveryError::Retryable(format!("nats publish: {e}")))?;
                }
                flush_core(client).await
            }
            Some(Connection::JetStream(context)) => {
                let mut acks = Vec::with_capacity(messages.len());
                for (subject, payload, id) in messages {
                    let message = PublishMessage::build().payload(payload).message_id(id);
                    let ack = context.send_publish(subject, message).await.map_err(|e| {
                        DeliveryError::Retryable(format!("nats jetstream publish: {e}"))
                    })?;
                    acks.push(ack.into_future());
                }
                match tokio::time::timeout(IO_TIMEOUT, futures::future::join_all(acks)).await {
                    Ok(results) => match results.into_iter().find_map(Result::err) {
                        None => Ok(()),
                        Some(e) => {
                            Err(DeliveryError::Retryable(format!("nats jetstream ack: {e}")))
                        }
                    },
                    Err(_) => Err(DeliveryError::Retryable(
                        "nats jetstream ack timed out".to_owned(),
                    )),
                }
            }
            None => Err(DeliveryError::Retryable(
                "nats connection missing".to_owned(),
            )),
        }
    }
}

async fn flush_core(client: &async_nats::Client) -> Result<(), DeliveryError> {
    match tokio::time::timeout(IO_TIMEOUT, client.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(DeliveryError::Retryable(format!("nats flush: {e}"))),
        Err(_) => Err(DeliveryError::Retryable("nats flush timed out".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_token_replaces_invalid_characters() {
        assert_eq!(
            service_token(Some("billing.agent v2*>")),
            "billing_agent_v2__"
        );
        assert_eq!(service_token(Some("checkout")), "checkout");
        assert_eq!(service_token(Some("")), "unknown");
        assert_eq!(service_token(None), "unknown");
    }
}
