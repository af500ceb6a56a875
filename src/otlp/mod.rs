//! Small helpers over the OTLP protobuf types (`opentelemetry-proto`): attribute lookup,
//! AnyValue → JSON, id formatting, and the wire-level names both edges use (service and
//! method paths, [`rpc_status`] for `google.rpc` status details).

pub mod json;
pub mod wire;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use opentelemetry_proto::tonic::trace::v1::Span;

pub mod rpc_status;
pub mod view;

/// Fully-qualified gRPC service name of the OTLP trace service.
pub const TRACE_SERVICE_NAME: &str = "opentelemetry.proto.collector.trace.v1.TraceService";
/// HTTP/2 path of the OTLP/gRPC `Export` method (receiver and forwarder).
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// OTLP/HTTP path for traces.
pub const TRACES_PATH: &str = "/v1/traces";

/// Number of spans in a request.
pub fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter())
        .map(|ss| ss.spans.len() as u64)
        .sum()
}

/// The value of attribute `key`, if present (first occurrence wins).
pub fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

/// The string value of attribute `key`, if present and a `stringValue`.
pub fn attr_str<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attributes, key)?.value.as_ref()? {
        Value::StringValue(s) => Some(s.as_str()),
        _ => None,
    }
}

/// `service.name` of a resource, if set.
pub fn service_name(resource: Option<&Resource>) -> Option<&str> {
    resource.and_then(|r| attr_str(&r.attributes, "service.name"))
}

/// Maps an AnyValue to JSON: kvlist → object, array → array, bytes → array of numbers
/// is *not* used (bytes map to a string of lowercase hex), ints and doubles → numbers
/// (non-finite doubles → null), empty → null.
pub fn any_value_to_json(value: &AnyValue) -> serde_json::Value {
    use serde_json::Value as J;
    match value.value.as_ref() {
        None | Some(Value::StringValueStrindex(_)) => J::Null,
        Some(Value::StringValue(s)) => J::String(s.clone()),
        Some(Value::BoolValue(b)) => J::Bool(*b),
        Some(Value::IntValue(i)) => J::from(*i),
        Some(Value::DoubleValue(d)) => serde_json::Number::from_f64(*d).map_or(J::Null, J::Number),
        Some(Value::BytesValue(b)) => J::String(hex::encode(b)),
        Some(Value::ArrayValue(a)) => J::Array(a.values.iter().map(any_value_to_json).collect()),
        Some(Value::KvlistValue(kv)) => J::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value.as_ref().map_or(J::Null, any_value_to_json),
                    )
                })
                .collect(),
        ),
    }
}

/// Lowercase hex of an id (trace_id, span_id); empty string for an empty id.
pub fn hex_id(id: &[u8]) -> String {
    lower_hex(id)
}

/// Lowercase hex of `bytes` (two characters per byte), written into one buffer of its
/// final size (`hex::encode` builds the string a character at a time, which showed in
/// per-detection profiles).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    match hex::encode_to_slice(bytes, &mut out) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => unreachable!("the buffer holds two characters per byte"),
    }
}

/// [`lower_hex`] as a [`compact_str::CompactString`]: up to 12 bytes (24 characters: a
/// span_id, a short fingerprint) without an allocation.
pub fn compact_hex(bytes: &[u8]) -> compact_str::CompactString {
    let mut buffer = [0u8; 64];
    match buffer.get_mut(..bytes.len() * 2) {
        Some(out) => match hex::encode_to_slice(bytes, out) {
            // Hex digits are ASCII.
            Ok(()) => std::str::from_utf8(out).map_or_else(|_| lower_hex(bytes).into(), Into::into),
            Err(_) => lower_hex(bytes).into(),
        },
        None => lower_hex(bytes).into(),
    }
}

/// True when `trace_id` is a valid W3C/OTLP trace id: 16 bytes, not all zero.
pub fn is_valid_trace_id(trace_id: &[u8]) -> bool {
    trace_id.len() == 16 && trace_id.iter().any(|b| *b != 0)
}

/// Builders the unit tests of several modules share.
#[cfg(test)]
pub(crate) mod test_support {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};

    /// A span attribute `key` = `value`.
    pub fn kv(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lower_hex_is_hex_encode() {
        for bytes in [
            &[][..],
            &[0],
            &[0xab, 0x01, 0xff],
            &[7; 16],
            &(0..=255).collect::<Vec<u8>>(),
        ] {
            assert_eq!(super::lower_hex(bytes), hex::encode(bytes));
        }
        assert_eq!(super::hex_id(&[0xde, 0xad, 0xbe, 0xef]), "deadbeef");
    }
}
