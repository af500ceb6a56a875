//! Synthetic `loop.detected` spans (DESIGN §5): when a detection is completed by a span
//! that was forwarded with an earlier request (a late span re-orders the run and the
//! replay finds a loop ending on a span already sent), the completing span can no longer
//! be annotated, so a small child span carrying the same `loop.*` attributes is forwarded
//! in its place, in the request being processed (same admission slot and forward queue as
//! its spans: it is delivered, refused or retried with them, never dropped on its own).

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, ResourceSpans, ScopeSpans, Span};
use sha2::{Digest, Sha256};

use crate::annotate::{loop_attributes, EVENT_NAME};
use crate::fingerprint::Fingerprint;
use crate::registry::RunDetection;

/// Instrumentation scope name of synthetic spans.
pub const SCOPE_NAME: &str = "loopwatch";

/// One `resource_spans` entry per completing span of `detections` (each detection with
/// the span that completed it; several detections of one span make one synthetic span),
/// in order of first appearance. Each holds one span:
///
/// - `trace_id` = the completing span's, `parent_span_id` = the completing span's id,
///   `span_id` = the first 8 bytes of SHA-256 over a tag, the trace_id, the completing
///   span_id and each detection's (profile, pattern): derived, so a re-delivery carries
///   the same id;
/// - `name` = `loop.detected`, kind internal, start = end = the detection time (the
///   completing span's end, ns since the Unix epoch);
/// - attributes = the `loop.*` attributes [`crate::annotate::annotate_span`] would have
///   written on the completing span;
/// - scope `loopwatch` with the crate version; resource = `service.name` of the completing
///   span's resource when known (the rest of that resource was forwarded with it).
pub fn synthetic_spans(
    detections: &[&RunDetection],
    short_fingerprint: &dyn Fn(&Fingerprint) -> String,
) -> Vec<ResourceSpans> {
    let mut groups: Vec<Vec<&RunDetection>> = Vec::new();
    for d in detections {
        match groups
            .iter_mut()
            .find(|g| g[0].trace_id == d.trace_id && g[0].span_id == d.span_id)
        {
            Some(group) => group.push(d),
            None => groups.push(vec![d]),
        }
    }
    groups
        .iter()
        .filter_map(|group| {
            let (attributes, time) = loop_attributes(group, short_fingerprint)?;
            let first = group[0];
            let span = Span {
                trace_id: first.trace_id.to_vec(),
                span_id: span_id_of(group),
                parent_span_id: first.span_id.to_vec(),
                name: EVENT_NAME.to_string(),
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: time,
                end_time_unix_nano: time,
                attributes,
                ..Span::default()
            };
            let resource = Resource {
                attributes: first
                    .service_name
                    .iter()
                    .map(|name| KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(Value::StringValue(name.to_string())),
                        }),
                        ..KeyValue::default()
                    })
                    .collect(),
                ..Resource::default()
            };
            Some(ResourceSpans {
                resource: Some(resource),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    spans: vec![span],
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            })
        })
        .collect()
}

/// The derived span_id of a group's synthetic span (never all-zero, which OTLP reads as
/// "no span_id").
fn span_id_of(group: &[&RunDetection]) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(b"loopwatch synthetic span\0");
    hasher.update(&group[0].trace_id);
    hasher.update([0u8]);
    hasher.update(&group[0].span_id);
    for d in group {
        hasher.update([0u8]);
        hasher.update(d.profile.name.as_bytes());
        hasher.update([0u8]);
        hasher.update(d.detection.pattern.as_str().as_bytes());
    }
    let digest = hasher.finalize();
    let mut id = digest[..8].to_vec();
    if id.iter().all(|b| *b == 0) {
        id[7] = 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::{Detection, Pattern, ProfileSettings, Severity};
    use std::sync::Arc;

    fn detection(span: u8, profile: ProfileSettings, pattern: Pattern) -> RunDetection {
        RunDetection {
            profile_index: 0,
            profile: Arc::new(profile),
            detection: Arc::new(Detection {
                pattern,
                tool_names: vec![Arc::from("search")],
                count: 3,
                window: 10,
                severity: Severity::Warn,
                fingerprints: vec![[7; 32]],
                members: vec![0, 1, 2],
                call: Some(3),
                response: None,
                budget: None,
                evidence: Default::default(),
            }),
            run_key: Arc::from("run"),
            trace_id: [1; 16].as_slice().into(),
            span_id: [span; 8].as_slice().into(),
            span_ids: Arc::new([[span; 8].as_slice().into()]),
            time_unix_nano: 4_000 + u64::from(span),
            occurrence: 1,
            service_name: Some(Arc::from("agent")),
            agent_name: None,
        }
    }

    #[test]
    fn one_child_span_per_completing_span_with_the_loop_attributes() {
        let a = detection(2, ProfileSettings::nudge(), Pattern::RepeatedResult);
        let b = detection(2, ProfileSettings::stop(), Pattern::RepeatedCall);
        let c = detection(5, ProfileSettings::nudge(), Pattern::RepeatedResult);
        let short = |_: &Fingerprint| "00112233aabbccdd".to_string();
        let out = synthetic_spans(&[&a, &b, &c], &short);
        assert_eq!(out.len(), 2);
        let span = &out[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_id, vec![1; 16]);
        assert_eq!(span.parent_span_id, vec![2; 8]);
        assert_eq!(span.name, "loop.detected");
        assert_eq!(
            (span.start_time_unix_nano, span.end_time_unix_nano),
            (4_002, 4_002)
        );
        let (attributes, _) = loop_attributes(&[&a, &b], &short).unwrap();
        assert_eq!(span.attributes, attributes);
        let scope = out[0].scope_spans[0].scope.as_ref().unwrap();
        assert_eq!(scope.name, "loopwatch");
        assert_eq!(scope.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            crate::otlp::service_name(out[0].resource.as_ref()),
            Some("agent")
        );
        // Derived ids: the same detections give the same id, other detections another.
        let again = synthetic_spans(&[&a, &b], &short);
        assert_eq!(again[0].scope_spans[0].spans[0].span_id, span.span_id);
        let other = &out[1].scope_spans[0].spans[0];
        assert_eq!(other.parent_span_id, vec![5; 8]);
        assert_ne!(other.span_id, span.span_id);
        assert_eq!(span.span_id.len(), 8);
        assert!(synthetic_spans(&[], &short).is_empty());
    }
}
