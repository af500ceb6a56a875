//! OTLP ≤ 0.18 protobuf for tests: `ResourceSpans.instrumentation_library_spans` (field
//! 1000, `InstrumentationLibrarySpans`: the message `ScopeSpans` became, with
//! `instrumentation_library` as field 1 where `scope` is now, of the same `name` and
//! `version`), as opentelemetry-proto v0.9–v0.18 defined it and the Collector still reads it
//! (`pdata/internal/otlp/traces.go`, `MigrateTraces`). opentelemetry-proto 0.33 no longer has
//! the field, so these test-only messages define it.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message;

/// `ExportTraceServiceRequest` with the pre-1.0 field.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LegacyRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<LegacyResourceSpans>,
}

/// `ResourceSpans` with `instrumentation_library_spans` (1000).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LegacyResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
    #[prost(message, repeated, tag = "1000")]
    pub instrumentation_library_spans: Vec<ScopeSpans>,
}

/// `request` as an OTLP ≤ 0.18 exporter encodes it: every `scope_spans` entry under field
/// 1000 instead.
pub fn to_legacy_bytes(request: &ExportTraceServiceRequest) -> Vec<u8> {
    LegacyRequest {
        resource_spans: request
            .resource_spans
            .iter()
            .map(|rs| LegacyResourceSpans {
                resource: rs.resource.clone(),
                scope_spans: Vec::new(),
                schema_url: rs.schema_url.clone(),
                instrumentation_library_spans: rs.scope_spans.clone(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// `bytes` decoded with field 1000 read as the Collector's `MigrateTraces` reads it (as
/// `scope_spans` when there are none), and whether any span was under field 1000.
pub fn decode_migrated(bytes: &[u8]) -> (ExportTraceServiceRequest, bool) {
    let legacy = LegacyRequest::decode(bytes).expect("a valid legacy request");
    let mut any_legacy = false;
    let request = ExportTraceServiceRequest {
        resource_spans: legacy
            .resource_spans
            .into_iter()
            .map(|rs| {
                let scope_spans = if rs.scope_spans.is_empty() {
                    any_legacy |= !rs.instrumentation_library_spans.is_empty();
                    rs.instrumentation_library_spans
                } else {
                    rs.scope_spans
                };
                ResourceSpans {
                    resource: rs.resource,
                    scope_spans,
                    schema_url: rs.schema_url,
                }
            })
            .collect(),
    };
    (request, any_legacy)
}
