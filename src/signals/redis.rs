//! Redis sink (DESIGN §6): `PUBLISH <channel> <json>`, and for action `kill` also
//! `SET <key_prefix><trace_id> <json> EX <ttl>` so a runtime can poll a flag.
//!
//! Both commands go in one `MULTI`/`EXEC`, so a retried delivery never leaves a flag
//! without its publish or publishes twice because the `SET` failed. A batch of up to
//! [`BATCH`] signals goes in one pipelined `MULTI`/`EXEC` (one round trip), so a loop storm
//! of thousands of kills is delivered in a few dozen round trips.

/// Signals per pipelined `MULTI`/`EXEC`.
pub const BATCH: usize = 256;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::config::RedisSinkConfig;
use super::sink::{DeliveryError, Sink};
use super::Signal;

/// Timeout of one connection attempt and of one command's response.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Delivers signals to Redis through a [`ConnectionManager`] (reconnects on I/O errors).
pub struct RedisSink {
    url: String,
    config: RedisSinkConfig,
    connection: Option<ConnectionManager>,
}

impl RedisSink {
    /// A sink for `url` (e.g. `redis://127.0.0.1:6379`); connects on the first delivery.
    pub fn new(url: String, config: RedisSinkConfig) -> Self {
        Self {
            url,
            config,
            connection: None,
        }
    }

    fn connection(&mut self) -> Result<&mut ConnectionManager, DeliveryError> {
        if self.connection.is_none() {
            let client = match self
                .config
                .tls
                .redis_certificates()
                .map_err(|e| DeliveryError::Retryable(format!("signals.redis.tls: {e}")))?
            {
                Some(certificates) => {
                    redis::Client::build_with_tls(self.url.as_str(), certificates)
                }
                None => redis::Client::open(self.url.as_str()),
            }
            .map_err(|e| DeliveryError::Retryable(format!("redis url: {e}")))?;
            // No internal reconnect retries: the hub's backoff owns retrying.
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_connection_timeout(Some(IO_TIMEOUT))
                .set_response_timeout(Some(IO_TIMEOUT));
            let manager = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|e| DeliveryError::Retryable(format!("redis connect: {e}")))?;
            self.connection = Some(manager);
        }
        self.connection
            .as_mut()
            .ok_or_else(|| DeliveryError::Retryable("redis connection missing".to_owned()))
    }
}

impl Sink for RedisSink {
    const NAME: &'static str = "redis";

    /// `PING`.
    async fn check(&mut self) -> Result<(), DeliveryError> {
        let connection = self.connection()?;
        match redis::cmd("PING").query_async::<()>(connection).await {
            Ok(()) => Ok(()),
            Err(error) => {
                if error.is_connection_refusal() || error.is_connection_dropped() {
                    self.connection = None;
                }
                Err(DeliveryError::Retryable(format!("redis: {error}")))
            }
        }
    }

    async fn deliver(&mut self, signal: &Signal) -> Result<(), DeliveryError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        self.add(&mut pipe, signal)?;
        self.send(pipe).await
    }

    const BATCH: usize = BATCH;

    async fn deliver_batch(&mut self, signals: &[Arc<Signal>]) -> Result<(), DeliveryError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for signal in signals {
            self.add(&mut pipe, signal)?;
        }
        self.send(pipe).await
    }
}

impl RedisSink {
    /// Adds `signal`'s commands to `pipe`: `SET … EX` for a kill, then `PUBLISH`.
    fn add(&self, pipe: &mut redis::Pipeline, signal: &Signal) -> Result<(), DeliveryError> {
        let json = serde_json::to_string(signal)
            .map_err(|e| DeliveryError::Rejected(format!("signal to JSON: {e}")))?;
        if signal.action == super::Action::Kill {
            let key = format!("{}{}", self.config.key_prefix, signal.trace_id);
            let ttl = self.config.kill_ttl.as_secs().max(1);
            pipe.set_ex(key, &json, ttl).ignore();
        }
        pipe.publish(&self.config.channel, &json).ignore();
        Ok(())
    }

    async fn send(&mut self, pipe: redis::Pipeline) -> Result<(), DeliveryError> {
        let connection = self.connection()?;
        match pipe.query_async::<()>(connection).await {
            Ok(()) => Ok(()),
            Err(error) => {
                // Drop a connection that failed to connect so the next attempt starts fresh.
                if error.is_connection_refusal() || error.is_connection_dropped() {
                    self.connection = None;
                }
                Err(DeliveryError::Retryable(format!("redis: {error}")))
            }
        }
    }
}
