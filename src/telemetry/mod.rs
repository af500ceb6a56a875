//! Self-telemetry over OTLP (`[telemetry]`, issue 10): loopwatch's own metrics, the same
//! instruments as `/metrics`, exported with the OpenTelemetry SDK (`opentelemetry_sdk`,
//! `opentelemetry-otlp` over gRPC) to `telemetry.endpoint` every `telemetry.interval`.
//! Names follow the Collector's style (`loopwatch.spans.received`, unit `{span}`; label
//! `service_name` becomes the attribute `service.name`). Off by default; an endpoint that
//! is loopwatch's own OTLP listener is refused (its metrics would come back in as spans
//! to inspect… and, worse, a tracing loop).
//!
//! Observable instruments read the counters the rest of the process keeps (receiver,
//! engine, registry, forwarder, signal sinks, fleet) at each collection, as `/metrics`
//! does at each scrape.

pub mod config;
mod instruments;
mod observable;

use std::sync::Arc;

use crate::admin::AdminState;
pub use crate::telemetry::config::{TelemetryConfig, TelemetryConfigError};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::Resource;

/// Running self-telemetry: flushes and stops on [`Telemetry::shutdown`].
pub struct Telemetry {
    provider: SdkMeterProvider,
}

impl Telemetry {
    /// Starts the periodic OTLP export when `telemetry.endpoint` is set (`Ok(None)`
    /// otherwise). Call inside the tokio runtime. Errors: the exporter cannot be built.
    pub fn start(
        config: &TelemetryConfig,
        state: AdminState,
    ) -> Result<Option<Telemetry>, opentelemetry_otlp::ExporterBuildError> {
        let Some(endpoint) = config.enabled_endpoint() else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(config.timeout)
            .build()?;
        let reader = opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .with_interval(config.interval)
        .build();
        let resource = Resource::builder()
            .with_service_name("loopwatch")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        instruments::register(&provider.meter("loopwatch"), &Arc::new(state));
        tracing::info!(endpoint, interval = ?config.interval, "self-telemetry: exporting loopwatch metrics over OTLP");
        Ok(Some(Telemetry { provider }))
    }

    /// Exports once more and stops.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "self-telemetry shutdown");
        }
    }
}
