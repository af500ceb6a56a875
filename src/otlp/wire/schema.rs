//! The OTLP trace schema as the wire reader needs it: which field of which message has
//! which wire type, and a validating walk that accepts exactly what prost's decoding of
//! `ExportTraceServiceRequest` accepts, except that strings need not be valid UTF-8
//! (they are read lossily; issue 9 item 5: a bad string never costs the request).
//!
//! Field numbers are those of opentelemetry-proto's `trace/v1`, `common/v1` and
//! `resource/v1` messages.

use std::ops::Range;

use prost::encoding::WireType;

use super::reader::{Fields, WireError};

/// `ResourceSpans.instrumentation_library_spans` (OTLP ≤ 0.18: `InstrumentationLibrarySpans`,
/// renamed `ScopeSpans` in 0.19, deprecated, removed from the protos in 1.0): the same
/// message as `ScopeSpans` under field number 1000 (its `instrumentation_library`, field 1,
/// has the `name` and `version` of `InstrumentationScope`). Not in [`Msg::field`]: prost
/// skips it unread, and so does the validating walk; [`super::WireRequest`] reads its spans
/// for detection only when the `ResourceSpans` has no `scope_spans`, as the Collector still
/// does (open-telemetry/opentelemetry-collector `pdata/internal/otlp/traces.go`,
/// `MigrateTraces`: `DeprecatedScopeSpans`, proto id 1000 in
/// `internal/cmd/pdatagen/internal/pdata/ptrace_package.go`).
pub const INSTRUMENTATION_LIBRARY_SPANS: u32 = 1000;

/// An OTLP message type of the trace export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// `ExportTraceServiceRequest`
    Request,
    /// `ResourceSpans`
    ResourceSpans,
    /// `Resource`
    Resource,
    /// `EntityRef`
    EntityRef,
    /// `ScopeSpans`
    ScopeSpans,
    /// `InstrumentationScope`
    Scope,
    /// `Span`
    Span,
    /// `Span.Event`
    Event,
    /// `Span.Link`
    Link,
    /// `Status`
    Status,
    /// `KeyValue`
    KeyValue,
    /// `AnyValue`
    AnyValue,
    /// `ArrayValue`
    ArrayValue,
    /// `KeyValueList`
    KeyValueList,
}

/// What a known field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// varint (`int32`, `int64`, `uint32`, `bool`, enums)
    Varint,
    /// `fixed64`, `double`
    Fixed64,
    /// `fixed32`
    Fixed32,
    /// `string` or `bytes`
    Len,
    /// A nested message.
    Message(Msg),
}

impl Kind {
    fn wire_type(self) -> WireType {
        match self {
            Kind::Varint => WireType::Varint,
            Kind::Fixed64 => WireType::SixtyFourBit,
            Kind::Fixed32 => WireType::ThirtyTwoBit,
            Kind::Len | Kind::Message(_) => WireType::LengthDelimited,
        }
    }
}

impl Msg {
    /// The message's name in the OTLP protos (for errors).
    pub fn name(self) -> &'static str {
        match self {
            Msg::Request => "ExportTraceServiceRequest",
            Msg::ResourceSpans => "ResourceSpans",
            Msg::Resource => "Resource",
            Msg::EntityRef => "EntityRef",
            Msg::ScopeSpans => "ScopeSpans",
            Msg::Scope => "InstrumentationScope",
            Msg::Span => "Span",
            Msg::Event => "Span.Event",
            Msg::Link => "Span.Link",
            Msg::Status => "Status",
            Msg::KeyValue => "KeyValue",
            Msg::AnyValue => "AnyValue",
            Msg::ArrayValue => "ArrayValue",
            Msg::KeyValueList => "KeyValueList",
        }
    }

    /// The kind of field `number`, or `None` for a field the schema does not know
    /// (skipped, as prost skips unknown fields).
    pub fn field(self, number: u32) -> Option<Kind> {
        use Kind::*;
        Some(match (self, number) {
            (Msg::Request, 1) => Message(Msg::ResourceSpans),
            (Msg::ResourceSpans, 1) => Message(Msg::Resource),
            (Msg::ResourceSpans, 2) => Message(Msg::ScopeSpans),
            (Msg::ResourceSpans, 3) => Len,
            (Msg::Resource, 1) => Message(Msg::KeyValue),
            (Msg::Resource, 2) => Varint,
            (Msg::Resource, 3) => Message(Msg::EntityRef),
            (Msg::EntityRef, 1..=4) => Len,
            (Msg::ScopeSpans, 1) => Message(Msg::Scope),
            (Msg::ScopeSpans, 2) => Message(Msg::Span),
            (Msg::ScopeSpans, 3) => Len,
            (Msg::Scope, 1 | 2) => Len,
            (Msg::Scope, 3) => Message(Msg::KeyValue),
            (Msg::Scope, 4) => Varint,
            (Msg::Span, 1..=5) => Len,
            (Msg::Span, 6) => Varint,
            (Msg::Span, 7 | 8) => Fixed64,
            (Msg::Span, 9) => Message(Msg::KeyValue),
            (Msg::Span, 10 | 12 | 14) => Varint,
            (Msg::Span, 11) => Message(Msg::Event),
            (Msg::Span, 13) => Message(Msg::Link),
            (Msg::Span, 15) => Message(Msg::Status),
            (Msg::Span, 16) => Fixed32,
            (Msg::Event, 1) => Fixed64,
            (Msg::Event, 2) => Len,
            (Msg::Event, 3) => Message(Msg::KeyValue),
            (Msg::Event, 4) => Varint,
            (Msg::Link, 1..=3) => Len,
            (Msg::Link, 4) => Message(Msg::KeyValue),
            (Msg::Link, 5) => Varint,
            (Msg::Link, 6) => Fixed32,
            (Msg::Status, 2) => Len,
            (Msg::Status, 3) => Varint,
            (Msg::KeyValue, 1) => Len,
            (Msg::KeyValue, 2) => Message(Msg::AnyValue),
            (Msg::KeyValue, 3) => Varint,
            (Msg::AnyValue, 1 | 7) => Len,
            (Msg::AnyValue, 2 | 3 | 8) => Varint,
            (Msg::AnyValue, 4) => Fixed64,
            (Msg::AnyValue, 5) => Message(Msg::ArrayValue),
            (Msg::AnyValue, 6) => Message(Msg::KeyValueList),
            (Msg::ArrayValue, 1) => Message(Msg::AnyValue),
            (Msg::KeyValueList, 1) => Message(Msg::KeyValue),
            _ => return None,
        })
    }
}

/// Checks one field of `msg` against the schema. For a nested message, returns its range
/// and the budget to check it with; `budget` is prost's recursion budget at `msg`.
pub fn check_field(
    msg: Msg,
    field: &super::reader::Field,
    budget: u32,
) -> Result<Option<(Msg, Range<usize>, u32)>, WireError> {
    match msg.field(field.number) {
        None => {
            // prost's skip_field checks the recursion limit before skipping.
            if budget == 0 {
                return Err(WireError::RecursionLimit);
            }
            Ok(None)
        }
        Some(kind) => {
            if field.wire_type != kind.wire_type() {
                return Err(WireError::WireType {
                    message: msg.name(),
                    field: field.number,
                    expected: kind.wire_type(),
                    actual: field.wire_type,
                });
            }
            match kind {
                Kind::Message(inner) => {
                    if budget == 0 {
                        return Err(WireError::RecursionLimit);
                    }
                    let range = field.len_range().unwrap_or(0..0);
                    Ok(Some((inner, range, budget - 1)))
                }
                _ => Ok(None),
            }
        }
    }
}

/// Validates the message `msg` in `buf[range]` and everything nested in it. `budget` is
/// prost's recursion budget at this message ([`super::reader::RECURSION_LIMIT`] for a request).
pub fn check(msg: Msg, buf: &[u8], range: Range<usize>, budget: u32) -> Result<(), WireError> {
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        if let Some((inner, range, budget)) = check_field(msg, &field, budget)? {
            check(inner, buf, range, budget)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::wire::reader::RECURSION_LIMIT;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue};
    use prost::Message;

    fn request_check(buf: &[u8]) -> Result<(), WireError> {
        check(Msg::Request, buf, 0..buf.len(), RECURSION_LIMIT)
    }

    #[test]
    fn wrong_wire_type_on_a_known_field_names_it() {
        // resource_spans (1) as a varint
        let err = request_check(&[0x08, 0x01]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ExportTraceServiceRequest.1 has wire type Varint, expected LengthDelimited"
        );
        assert!(ExportTraceServiceRequest::decode(&[0x08u8, 0x01][..]).is_err());
    }

    #[test]
    fn unknown_fields_are_skipped_like_prost() {
        let buf = [0x10, 0x01, 0x1a, 0x01, 0x00];
        assert_eq!(request_check(&buf), Ok(()));
        assert!(ExportTraceServiceRequest::decode(&buf[..]).is_ok());
    }

    /// An AnyValue nested `depth` arrays deep, as the `value` of a resource attribute.
    fn nested(depth: usize) -> Vec<u8> {
        let mut value = AnyValue {
            value: Some(any_value::Value::IntValue(1)),
        };
        for _ in 0..depth {
            value = AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![value],
                })),
            };
        }
        let request = ExportTraceServiceRequest {
            resource_spans: vec![opentelemetry_proto::tonic::trace::v1::ResourceSpans {
                resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                    attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                        key: "k".into(),
                        value: Some(value),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        request.encode_to_vec()
    }

    #[test]
    fn recursion_limit_is_prosts() {
        // Find prost's boundary and check we agree on both sides of it.
        let limit = (1..80)
            .find(|d| ExportTraceServiceRequest::decode(nested(*d).as_slice()).is_err())
            .expect("prost refuses some depth below 80 arrays");
        assert_eq!(request_check(&nested(limit - 1)), Ok(()));
        assert_eq!(
            request_check(&nested(limit)),
            Err(WireError::RecursionLimit)
        );
    }
}
