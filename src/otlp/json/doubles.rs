//! `double` fields in OTLP/JSON as ProtoJSON writes them: a JSON number, or a string.
//!
//! ProtoJSON (protobuf.dev, "ProtoJSON Format", float/double row): "JSON value will be a
//! number or one of the special string values "NaN", "Infinity", and "-Infinity". Either
//! numbers or strings are accepted. Exponent notation is also accepted." Go's `protojson`
//! (protocolbuffers/protobuf-go `encoding/protojson/decode.go`, `unmarshalFloat`) reads a
//! string as one of the three names, or as exactly one JSON number with no whitespace
//! around it; the Collector writes the three names for non-finite doubles
//! (open-telemetry/opentelemetry-collector `pdata/internal/json/stream.go`,
//! `Stream.WriteFloat64`). The OTLP trace schema has one `double` field: `AnyValue.double_value`,
//! at any depth (span, event, link, resource and scope attributes, inside `arrayValue` and
//! `kvlistValue`).
//!
//! `opentelemetry-proto`'s serde types read a double only as a JSON number, and a JSON
//! number cannot be NaN or infinite. So a number in a string becomes a JSON number in
//! [`super::normalize`] ([`read_string`]), and a non-finite one is taken out of the value
//! before the typed decoding ([`NonFinite::take`]: its place remembered, a 0 left in its
//! stead) and put back into the decoded request afterwards ([`NonFinite::restore`]).

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use serde_json::{Map, Value};

use crate::otlp::ExportTraceServiceRequest;

/// What a string in a `double` field reads as.
#[derive(Debug, Clone, PartialEq)]
pub enum DoubleString {
    /// `"NaN"`, `"Infinity"` or `"-Infinity"`.
    NonFinite(f64),
    /// A JSON number in a string (`"1.5"`, `"-0"`, `"1e3"`): always finite.
    Number(serde_json::Number),
}

/// Reads the string `s` of a `double` field as ProtoJSON allows it (see the module docs):
/// `None` for anything else (`"nan"`, `" 1"`, `"1e400"`, `""`), which the typed decoder
/// then refuses.
pub fn read_string(s: &str) -> Option<DoubleString> {
    match s {
        "NaN" => return Some(DoubleString::NonFinite(f64::NAN)),
        "Infinity" => return Some(DoubleString::NonFinite(f64::INFINITY)),
        "-Infinity" => return Some(DoubleString::NonFinite(f64::NEG_INFINITY)),
        _ => {}
    }
    // serde_json skips whitespace around a value; ProtoJSON does not allow it here.
    if s.trim() != s {
        return None;
    }
    // A JSON number only: a string, `null` or `true` inside the string is no double, and
    // serde_json refuses a number out of the f64 range (as Go's `protojson` does).
    serde_json::from_str(s).ok().map(DoubleString::Number)
}

/// One step of the path from the request to an `AnyValue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A field, by its lowerCamelCase JSON name.
    Field(&'static str),
    /// An element of a repeated field.
    Index(usize),
}

/// The non-finite doubles of a request taken out of its JSON value: where each was (the
/// path to its `AnyValue`) and its value.
#[derive(Debug, Default, PartialEq)]
pub struct NonFinite(Vec<(Vec<Step>, f64)>);

/// Field names of the messages that hold attributes, down to the `KeyValue` lists.
const ATTRIBUTES: &str = "attributes";

impl NonFinite {
    /// Takes the `"NaN"` / `"Infinity"` / `"-Infinity"` `doubleValue`s out of `value`, a
    /// request in canonical form (after [`super::normalize`]), leaving the number 0 in
    /// their place for the typed decoder.
    pub fn take(value: &mut Value) -> NonFinite {
        let mut found = NonFinite::default();
        let mut path = Vec::new();
        in_list(
            value,
            "resourceSpans",
            &mut path,
            &mut found,
            |rs, path, found| {
                if let Some(resource) = rs.get_mut("resource") {
                    path.push(Step::Field("resource"));
                    if let Value::Object(resource) = resource {
                        key_values(resource, path, found);
                    }
                    path.pop();
                }
                in_list_of(rs, "scopeSpans", path, found, |ss, path, found| {
                    if let Some(Value::Object(scope)) = ss.get_mut("scope") {
                        path.push(Step::Field("scope"));
                        key_values(scope, path, found);
                        path.pop();
                    }
                    in_list_of(ss, "spans", path, found, |span, path, found| {
                        key_values(span, path, found);
                        for nested in ["events", "links"] {
                            in_list_of(span, nested, path, found, |m, path, found| {
                                key_values(m, path, found)
                            });
                        }
                    });
                });
            },
        );
        found
    }

    /// True when nothing was taken.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Puts the values [`NonFinite::take`] took back into `request`, decoded from the
    /// value they were taken from.
    pub fn restore(self, request: &mut ExportTraceServiceRequest) {
        for (path, double) in self.0 {
            if let Some(value) = locate(request, &path) {
                // Another member of the oneof read after `doubleValue` wins, as it does
                // over a numeric `doubleValue`.
                if let Some(any_value::Value::DoubleValue(d)) = &mut value.value {
                    *d = double;
                }
            }
        }
    }
}

type Visit = fn(&mut Map<String, Value>, &mut Vec<Step>, &mut NonFinite);

/// Calls `visit` on every object of the array `field` of the object `value`.
fn in_list(
    value: &mut Value,
    field: &'static str,
    path: &mut Vec<Step>,
    found: &mut NonFinite,
    visit: impl Fn(&mut Map<String, Value>, &mut Vec<Step>, &mut NonFinite),
) {
    if let Value::Object(object) = value {
        in_list_of(object, field, path, found, visit);
    }
}

fn in_list_of(
    object: &mut Map<String, Value>,
    field: &'static str,
    path: &mut Vec<Step>,
    found: &mut NonFinite,
    visit: impl Fn(&mut Map<String, Value>, &mut Vec<Step>, &mut NonFinite),
) {
    let Some(Value::Array(items)) = object.get_mut(field) else {
        return;
    };
    path.push(Step::Field(field));
    for (i, item) in items.iter_mut().enumerate() {
        if let Value::Object(item) = item {
            path.push(Step::Index(i));
            visit(item, path, found);
            path.pop();
        }
    }
    path.pop();
}

/// The `attributes` of a message: each `KeyValue`'s `value`.
fn key_values(message: &mut Map<String, Value>, path: &mut Vec<Step>, found: &mut NonFinite) {
    let visit: Visit = |kv, path, found| {
        if let Some(Value::Object(value)) = kv.get_mut("value") {
            path.push(Step::Field("value"));
            any_value(value, path, found);
            path.pop();
        }
    };
    in_list_of(message, ATTRIBUTES, path, found, visit);
}

fn any_value(value: &mut Map<String, Value>, path: &mut Vec<Step>, found: &mut NonFinite) {
    if let Some(double) = value.get_mut("doubleValue") {
        if let Some(DoubleString::NonFinite(d)) = double.as_str().and_then(read_string) {
            *double = Value::from(0);
            found.0.push((path.clone(), d));
        }
    }
    if let Some(Value::Object(array)) = value.get_mut("arrayValue") {
        path.push(Step::Field("arrayValue"));
        in_list_of(array, "values", path, found, any_value);
        path.pop();
    }
    if let Some(Value::Object(kvlist)) = value.get_mut("kvlistValue") {
        path.push(Step::Field("kvlistValue"));
        let visit: Visit = |kv, path, found| {
            if let Some(Value::Object(value)) = kv.get_mut("value") {
                path.push(Step::Field("value"));
                any_value(value, path, found);
                path.pop();
            }
        };
        in_list_of(kvlist, "values", path, found, visit);
        path.pop();
    }
}

/// The `AnyValue` at `path` in the decoded request.
fn locate<'r>(
    request: &'r mut ExportTraceServiceRequest,
    path: &[Step],
) -> Option<&'r mut AnyValue> {
    use Step::{Field, Index};
    let [Field("resourceSpans"), Index(r), rest @ ..] = path else {
        return None;
    };
    let rs = request.resource_spans.get_mut(*r)?;
    match rest {
        [Field("resource"), Field(ATTRIBUTES), rest @ ..] => {
            in_key_values(&mut rs.resource.as_mut()?.attributes, rest)
        }
        [Field("scopeSpans"), Index(s), rest @ ..] => {
            let ss = rs.scope_spans.get_mut(*s)?;
            match rest {
                [Field("scope"), Field(ATTRIBUTES), rest @ ..] => {
                    in_key_values(&mut ss.scope.as_mut()?.attributes, rest)
                }
                [Field("spans"), Index(i), rest @ ..] => {
                    let span = ss.spans.get_mut(*i)?;
                    match rest {
                        [Field(ATTRIBUTES), rest @ ..] => in_key_values(&mut span.attributes, rest),
                        [Field("events"), Index(e), Field(ATTRIBUTES), rest @ ..] => {
                            in_key_values(&mut span.events.get_mut(*e)?.attributes, rest)
                        }
                        [Field("links"), Index(l), Field(ATTRIBUTES), rest @ ..] => {
                            in_key_values(&mut span.links.get_mut(*l)?.attributes, rest)
                        }
                        _ => None,
                    }
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// `[i, "value", ...]` in a `KeyValue` list.
fn in_key_values<'r>(list: &'r mut [KeyValue], path: &[Step]) -> Option<&'r mut AnyValue> {
    let [Step::Index(i), Step::Field("value"), rest @ ..] = path else {
        return None;
    };
    in_any_value(list.get_mut(*i)?.value.as_mut()?, rest)
}

fn in_any_value<'r>(value: &'r mut AnyValue, path: &[Step]) -> Option<&'r mut AnyValue> {
    use any_value::Value as V;
    if path.is_empty() {
        return Some(value);
    }
    match (path, &mut value.value) {
        (
            [Step::Field("arrayValue"), Step::Field("values"), Step::Index(i), rest @ ..],
            Some(V::ArrayValue(array)),
        ) => in_any_value(array.values.get_mut(*i)?, rest),
        (
            [Step::Field("kvlistValue"), Step::Field("values"), rest @ ..],
            Some(V::KvlistValue(kvlist)),
        ) => in_key_values(&mut kvlist.values, rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_protojson_allows_for_a_double() {
        let read = |s: &str| read_string(s);
        assert!(matches!(read("NaN"), Some(DoubleString::NonFinite(d)) if d.is_nan()));
        assert_eq!(
            read("Infinity"),
            Some(DoubleString::NonFinite(f64::INFINITY))
        );
        assert_eq!(
            read("-Infinity"),
            Some(DoubleString::NonFinite(f64::NEG_INFINITY))
        );
        let number = |s: &str| match read(s) {
            Some(DoubleString::Number(n)) => n.as_f64(),
            _ => None,
        };
        assert_eq!(number("1.5"), Some(1.5));
        assert_eq!(number("-2e3"), Some(-2000.0));
        assert_eq!(number("7"), Some(7.0));
        assert!(number("-0").is_some_and(|z| z == 0.0 && z.is_sign_negative()));
        for refused in [
            "", "nan", "inf", "+Inf", "-Inf", "infinity", " 1.5", "1.5 ", "1,5", "0x10", "+1",
            ".5", "1.", "01", "1e400", "\"1\"", "null", "true", "[1]", "1 2",
        ] {
            assert_eq!(read(refused), None, "{refused:?}");
        }
    }
}
