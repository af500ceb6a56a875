//! Whether a decoded OTLP/JSON request nests its messages within prost's recursion budget
//! (the protobuf reader's [`RECURSION_LIMIT`], 100), as the protobuf it is forwarded as
//! will be decoded: every message below the request counts one level (`ResourceSpans` 1,
//! `ScopeSpans` 2, `Span` 3, its `KeyValue` 4, `AnyValue` 5, then an `ArrayValue` and its
//! `AnyValue` 2 more per level, a `KeyValueList`, its `KeyValue` and `AnyValue` 3), an
//! empty message as much as a full one. The protobuf path leaves a span nested deeper out
//! alone (`message nested deeper than the recursion limit of 100`) and refuses a request
//! whose resource or scope is; OTLP/JSON does the same with these checks, so neither path
//! accepts what the other refuses, and nothing is forwarded that a prost downstream could
//! not decode.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};

use crate::otlp::wire::reader::RECURSION_LIMIT;

/// The levels left for a span's own chain (the span included): the budget less
/// `ResourceSpans` and `ScopeSpans` above it.
const SPAN_LEFT: u32 = RECURSION_LIMIT - 2;

/// Whether `span` nests within the budget at its place in a request.
pub fn span_fits(span: &Span) -> bool {
    let left = SPAN_LEFT;
    let inner = left - 1;
    key_values_fit(&span.attributes, inner)
        && span
            .events
            .iter()
            .all(|e| inner >= 1 && key_values_fit(&e.attributes, inner - 1))
        && span
            .links
            .iter()
            .all(|l| inner >= 1 && key_values_fit(&l.attributes, inner - 1))
}

/// Whether the resource and the scopes of `resource_spans` nest within the budget (its
/// spans are checked with [`span_fits`]).
pub fn outside_spans_fit(resource_spans: &ResourceSpans) -> bool {
    // Below `ResourceSpans` (1): the resource at 2 and the scope spans at 2, their scope at 3.
    let below = RECURSION_LIMIT - 1;
    let resource_fits = |resource: &Resource| key_values_fit(&resource.attributes, below - 1);
    resource_spans.resource.as_ref().is_none_or(resource_fits)
        && resource_spans.scope_spans.iter().all(|ss| {
            ss.scope
                .as_ref()
                .is_none_or(|scope| key_values_fit(&scope.attributes, below - 2))
        })
}

/// `KeyValue`s entered with `left` levels left (each takes one, its value one more).
fn key_values_fit(key_values: &[KeyValue], left: u32) -> bool {
    key_values.iter().all(|kv| {
        left >= 1
            && kv
                .value
                .as_ref()
                .is_none_or(|value| any_value_fits(value, left - 1))
    })
}

/// An `AnyValue` entered with `left` levels left. Recurses at most `left` deep.
fn any_value_fits(value: &AnyValue, left: u32) -> bool {
    if left == 0 {
        return false;
    }
    let inner = left - 1;
    match &value.value {
        Some(any_value::Value::ArrayValue(array)) => {
            inner >= 1 && array.values.iter().all(|v| any_value_fits(v, inner - 1))
        }
        Some(any_value::Value::KvlistValue(list)) => {
            inner >= 1 && key_values_fit(&list.values, inner - 1)
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::wire::WireRequest;
    use bytes::Bytes;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use opentelemetry_proto::tonic::trace::v1::{span as otlp_span, ScopeSpans};
    use prost::Message;

    fn array(depth: usize) -> AnyValue {
        let mut value = AnyValue {
            value: Some(any_value::Value::StringValue("leaf".into())),
        };
        for _ in 0..depth {
            value = AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![value],
                })),
            };
        }
        value
    }

    fn kvlist(depth: usize) -> AnyValue {
        let mut value = AnyValue::default();
        for _ in 0..depth {
            value = AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![KeyValue {
                        key: "k".into(),
                        value: Some(value),
                        ..Default::default()
                    }],
                })),
            };
        }
        value
    }

    fn attribute(value: AnyValue) -> Vec<KeyValue> {
        vec![KeyValue {
            key: "d".into(),
            value: Some(value),
            ..Default::default()
        }]
    }

    /// Whether the protobuf reader reads the span (not left out) and the resource.
    fn protobuf_reads(span: &Span, resource: Option<Resource>) -> bool {
        let request = crate::otlp::ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource,
                scope_spans: vec![ScopeSpans {
                    spans: vec![span.clone()],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        WireRequest::read(Bytes::from(request.encode_to_vec()))
            .is_ok_and(|read| read.rejected().is_empty())
    }

    /// The checks agree with the protobuf reader at every depth around the limit, for
    /// arrays and kvlists in span, event and link attributes and in the resource: an array
    /// fits 47 levels deep in a span attribute (5 + 2 × 47 = 99 messages; 48 would be 101),
    /// a kvlist 31 (5 + 3 × 31 = 98).
    #[test]
    fn agrees_with_the_protobuf_reader_at_the_limit() {
        let mut last_fitting = Vec::new();
        for (name, make) in [
            ("array", array as fn(usize) -> AnyValue),
            ("kvlist", kvlist),
        ] {
            for place in ["span", "event", "link", "resource"] {
                let mut fitting = 0;
                for depth in 20..60 {
                    let attributes = attribute(make(depth));
                    let mut span = Span::default();
                    let mut resource = None;
                    match place {
                        "span" => span.attributes = attributes,
                        "event" => {
                            span.events = vec![otlp_span::Event {
                                attributes,
                                ..Default::default()
                            }]
                        }
                        "link" => {
                            span.links = vec![otlp_span::Link {
                                attributes,
                                ..Default::default()
                            }]
                        }
                        _ => {
                            resource = Some(Resource {
                                attributes,
                                ..Default::default()
                            })
                        }
                    }
                    let rs = ResourceSpans {
                        resource: resource.clone(),
                        ..Default::default()
                    };
                    let ours = span_fits(&span) && outside_spans_fit(&rs);
                    assert_eq!(
                        ours,
                        protobuf_reads(&span, resource),
                        "{name} {depth} deep in {place}"
                    );
                    if ours {
                        fitting = depth;
                    }
                }
                last_fitting.push((name, place, fitting));
            }
        }
        assert_eq!(
            last_fitting,
            [
                ("array", "span", 47),
                ("array", "event", 47),
                ("array", "link", 47),
                ("array", "resource", 48),
                ("kvlist", "span", 31),
                ("kvlist", "event", 31),
                ("kvlist", "link", 31),
                ("kvlist", "resource", 32),
            ]
        );
    }
}
