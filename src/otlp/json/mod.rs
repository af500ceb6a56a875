//! OTLP/JSON as the protobuf JSON mapping defines it, for every JSON entry point (`scan`,
//! `replay`, the OTLP/HTTP receiver): one decoder.
//!
//! The protobuf JSON mapping (protobuf.dev, "ProtoJSON format") lets a parser accept both
//! the lowerCamelCase JSON name and the original proto field name (`resourceSpans` and
//! `resource_spans`), enum values as their name (`SPAN_KIND_SERVER`) or their number, and
//! 64-bit integers as strings or numbers; OTLP/JSON adds hex trace and span ids and says
//! receivers ignore unknown fields. `opentelemetry-proto`'s serde types read only the
//! lowerCamelCase names and numeric enums, so [`normalize`] rewrites a parsed
//! [`serde_json::Value`] to that canonical form first, walking the OTLP trace schema
//! (a table of messages below), and counts the fields it does not know. The typed
//! decoding (hex ids, 64-bit strings, AnyValue) stays with `opentelemetry-proto`.
//!
//! Names OTLP renamed before 1.0 are read under their new name, as the Collector read them
//! while both existed: `instrumentationLibrarySpans` (OTLP ≤ 0.18) as `scopeSpans` and its
//! `instrumentationLibrary` as `scope`, when the message has no value under the new name.
//! Dropping them as unknown fields would drop every span of an old export.
//!
//! A `double` may be a string ([`doubles`]: `"NaN"`, `"Infinity"`, `"-Infinity"`, or a
//! number in a string); the typed decoder reads only numbers, so [`normalize`] turns a
//! number in a string into a number and counts the non-finite ones, which
//! [`doubles::NonFinite`] carries past the typed decoding.

pub mod doubles;
pub mod nesting;
pub mod shape;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{Map, Value};

/// What a field of a message holds.
#[derive(Clone, Copy)]
enum Kind {
    /// A scalar, a string or bytes (left to the typed decoder).
    Scalar,
    /// A `double`: a number, or a string ProtoJSON allows ([`doubles::read_string`]).
    Double,
    /// A nested message (or a repeated one: a JSON array of them).
    Message(&'static [Field]),
    /// An enum: name → number.
    Enum(&'static [(&'static str, i64)]),
    /// An `AnyValue` (nested messages inside).
    AnyValue,
    /// A field OTLP renamed: its values are messages of the given schema, moved to the
    /// named (lowerCamelCase) field when the message has no value of that field.
    Renamed(&'static str, &'static [Field]),
}

/// One field: lowerCamelCase JSON name, proto name, what it holds.
type Field = (&'static str, &'static str, Kind);

const SPAN_KIND: &[(&str, i64)] = &[
    ("SPAN_KIND_UNSPECIFIED", 0),
    ("SPAN_KIND_INTERNAL", 1),
    ("SPAN_KIND_SERVER", 2),
    ("SPAN_KIND_CLIENT", 3),
    ("SPAN_KIND_PRODUCER", 4),
    ("SPAN_KIND_CONSUMER", 5),
];

const STATUS_CODE: &[(&str, i64)] = &[
    ("STATUS_CODE_UNSET", 0),
    ("STATUS_CODE_OK", 1),
    ("STATUS_CODE_ERROR", 2),
];

const KEY_VALUE: &[Field] = &[
    ("key", "key", Kind::Scalar),
    ("value", "value", Kind::AnyValue),
    ("keyStrindex", "key_strindex", Kind::Scalar),
];

const ARRAY_VALUE: &[Field] = &[("values", "values", Kind::AnyValue)];
const KEY_VALUE_LIST: &[Field] = &[("values", "values", Kind::Message(KEY_VALUE))];

const ANY_VALUE: &[Field] = &[
    ("stringValue", "string_value", Kind::Scalar),
    ("boolValue", "bool_value", Kind::Scalar),
    ("intValue", "int_value", Kind::Scalar),
    ("doubleValue", "double_value", Kind::Double),
    ("arrayValue", "array_value", Kind::Message(ARRAY_VALUE)),
    ("kvlistValue", "kvlist_value", Kind::Message(KEY_VALUE_LIST)),
    ("bytesValue", "bytes_value", Kind::Scalar),
    ("stringValueStrindex", "string_value_strindex", Kind::Scalar),
];

const ENTITY_REF: &[Field] = &[
    ("schemaUrl", "schema_url", Kind::Scalar),
    ("type", "type", Kind::Scalar),
    ("idKeys", "id_keys", Kind::Scalar),
    ("descriptionKeys", "description_keys", Kind::Scalar),
];

const RESOURCE: &[Field] = &[
    ("attributes", "attributes", Kind::Message(KEY_VALUE)),
    (
        "droppedAttributesCount",
        "dropped_attributes_count",
        Kind::Scalar,
    ),
    ("entityRefs", "entity_refs", Kind::Message(ENTITY_REF)),
];

const SCOPE: &[Field] = &[
    ("name", "name", Kind::Scalar),
    ("version", "version", Kind::Scalar),
    ("attributes", "attributes", Kind::Message(KEY_VALUE)),
    (
        "droppedAttributesCount",
        "dropped_attributes_count",
        Kind::Scalar,
    ),
];

const STATUS: &[Field] = &[
    ("message", "message", Kind::Scalar),
    ("code", "code", Kind::Enum(STATUS_CODE)),
];

const EVENT: &[Field] = &[
    ("timeUnixNano", "time_unix_nano", Kind::Scalar),
    ("name", "name", Kind::Scalar),
    ("attributes", "attributes", Kind::Message(KEY_VALUE)),
    (
        "droppedAttributesCount",
        "dropped_attributes_count",
        Kind::Scalar,
    ),
];

const LINK: &[Field] = &[
    ("traceId", "trace_id", Kind::Scalar),
    ("spanId", "span_id", Kind::Scalar),
    ("traceState", "trace_state", Kind::Scalar),
    ("attributes", "attributes", Kind::Message(KEY_VALUE)),
    (
        "droppedAttributesCount",
        "dropped_attributes_count",
        Kind::Scalar,
    ),
    ("flags", "flags", Kind::Scalar),
];

const SPAN: &[Field] = &[
    ("traceId", "trace_id", Kind::Scalar),
    ("spanId", "span_id", Kind::Scalar),
    ("traceState", "trace_state", Kind::Scalar),
    ("parentSpanId", "parent_span_id", Kind::Scalar),
    ("flags", "flags", Kind::Scalar),
    ("name", "name", Kind::Scalar),
    ("kind", "kind", Kind::Enum(SPAN_KIND)),
    ("startTimeUnixNano", "start_time_unix_nano", Kind::Scalar),
    ("endTimeUnixNano", "end_time_unix_nano", Kind::Scalar),
    ("attributes", "attributes", Kind::Message(KEY_VALUE)),
    (
        "droppedAttributesCount",
        "dropped_attributes_count",
        Kind::Scalar,
    ),
    ("events", "events", Kind::Message(EVENT)),
    ("droppedEventsCount", "dropped_events_count", Kind::Scalar),
    ("links", "links", Kind::Message(LINK)),
    ("droppedLinksCount", "dropped_links_count", Kind::Scalar),
    ("status", "status", Kind::Message(STATUS)),
];

const SCOPE_SPANS: &[Field] = &[
    ("scope", "scope", Kind::Message(SCOPE)),
    ("spans", "spans", Kind::Message(SPAN)),
    ("schemaUrl", "schema_url", Kind::Scalar),
];

/// `InstrumentationLibrarySpans` (OTLP ≤ 0.18, renamed `ScopeSpans` in 0.19; field 1000 of
/// `ResourceSpans` until OTLP 1.0 removed it): the same fields under older names.
const INSTRUMENTATION_LIBRARY_SPANS: &[Field] = &[
    (
        "instrumentationLibrary",
        "instrumentation_library",
        Kind::Renamed("scope", SCOPE),
    ),
    ("spans", "spans", Kind::Message(SPAN)),
    ("schemaUrl", "schema_url", Kind::Scalar),
];

const RESOURCE_SPANS: &[Field] = &[
    ("resource", "resource", Kind::Message(RESOURCE)),
    ("scopeSpans", "scope_spans", Kind::Message(SCOPE_SPANS)),
    ("schemaUrl", "schema_url", Kind::Scalar),
    (
        "instrumentationLibrarySpans",
        "instrumentation_library_spans",
        Kind::Renamed("scopeSpans", INSTRUMENTATION_LIBRARY_SPANS),
    ),
];

/// `ExportTraceServiceRequest`.
const REQUEST: &[Field] = &[(
    "resourceSpans",
    "resource_spans",
    Kind::Message(RESOURCE_SPANS),
)];

/// Fields a request carried that OTLP does not define (ignored, as OTLP requires).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownFields {
    /// How many unknown fields, at any depth.
    pub count: u64,
    /// Path of the first one, e.g. `resourceSpans[0].scopeSpans[0].spans[1].foo`.
    pub first: Option<String>,
}

impl UnknownFields {
    fn record(&mut self, path: &str, key: &str) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            });
        }
    }
}

/// Senders remembered for "warn once" (past this, new senders are counted, not named).
const MAX_WARNED_SENDERS: usize = 1024;

/// Counts unknown OTLP/JSON fields (`loopwatch_otlp_json_unknown_fields_total`) and logs
/// a warning naming the first unknown field once per sender, so a misconfigured sender is
/// visible without a log line per request.
#[derive(Debug, Default)]
pub struct UnknownFieldLog {
    total: AtomicU64,
    warned: Mutex<HashSet<String>>,
}

impl UnknownFieldLog {
    /// Records the unknown fields of one request from `sender` (e.g. its `User-Agent`).
    pub fn record(&self, sender: &str, unknown: &UnknownFields) {
        if unknown.count == 0 {
            return;
        }
        self.total.fetch_add(unknown.count, Ordering::Relaxed);
        let first_time = match self.warned.lock() {
            Ok(mut warned) if warned.len() < MAX_WARNED_SENDERS => warned.insert(sender.to_owned()),
            _ => false,
        };
        if first_time {
            tracing::warn!(
                sender,
                field = unknown.first.as_deref().unwrap_or(""),
                count = unknown.count,
                "OTLP/JSON request has fields OTLP does not define; they are ignored \
                 (warned once per sender, counted in loopwatch_otlp_json_unknown_fields_total)"
            );
        }
    }

    /// Unknown fields seen so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// What [`normalize`] found besides the canonical form.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Normalized {
    /// The unknown fields it removed.
    pub unknown: UnknownFields,
    /// `doubleValue`s left as `"NaN"`, `"Infinity"` or `"-Infinity"` (a JSON number
    /// cannot hold them): take them out with [`doubles::NonFinite::take`] before the
    /// typed decoding when there are any.
    pub non_finite_doubles: u64,
}

/// Why a JSON value is not an OTLP/JSON trace request at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotOtlp {
    #[error("an OTLP/JSON ExportTraceServiceRequest is a JSON object")]
    NotAnObject,
    #[error("no OTLP field in the object (found `{0}`; expected `resourceSpans`)")]
    NoOtlpField(String),
}

/// Rewrites `value` in place to canonical OTLP/JSON (lowerCamelCase names, numeric enums,
/// numbers in strings of `double` fields as numbers) and removes unknown fields, returning
/// what was removed and how many non-finite doubles are left as strings.
///
/// Errors: the value is not an object, or it is an object with fields but none of them is
/// an OTLP field (e.g. `{"foo":1}`): such a body would otherwise read as an empty request.
/// `{}` is an empty request. A known field with a value of the wrong JSON type is left
/// for the typed decoder to report.
pub fn normalize(value: &mut Value) -> Result<Normalized, NotOtlp> {
    let Value::Object(object) = value else {
        return Err(NotOtlp::NotAnObject);
    };
    let mut found = Normalized::default();
    let known_before = object
        .keys()
        .filter(|k| field(REQUEST, k).is_some())
        .count();
    if known_before == 0 {
        if let Some(first) = object.keys().next() {
            return Err(NotOtlp::NoOtlpField(first.clone()));
        }
    }
    normalize_message(object, REQUEST, "", &mut found);
    Ok(found)
}

fn field<'a>(schema: &'a [Field], key: &str) -> Option<&'a Field> {
    schema
        .iter()
        .find(|(camel, proto, _)| key == *camel || key == *proto)
}

fn normalize_message(
    object: &mut Map<String, Value>,
    schema: &'static [Field],
    path: &str,
    found: &mut Normalized,
) {
    let entries = std::mem::take(object);
    let mut renamed = Vec::new();
    for (key, mut value) in entries {
        let Some((camel, _, kind)) = field(schema, &key) else {
            found.unknown.record(path, &key);
            continue;
        };
        if value.is_null() {
            // ProtoJSON: `null` is the field's default value, as if it were absent.
            continue;
        }
        let here = if path.is_empty() {
            (*camel).to_owned()
        } else {
            format!("{path}.{camel}")
        };
        if let Kind::Renamed(new_name, fields) = *kind {
            normalize_value(&mut value, Kind::Message(fields), &here, found);
            renamed.push((new_name, value));
            continue;
        }
        normalize_value(&mut value, *kind, &here, found);
        // When both spellings are present, the first one read wins (as for duplicates).
        object.entry(*camel).or_insert(value);
    }
    fill_omitted_defaults(object, schema);
    // An old name is read only when the new one is absent or empty, as the Collector's
    // `MigrateTraces` did while OTLP carried both (a sender in transition wrote both).
    for (new_name, value) in renamed {
        let empty = |v: &Value| v.is_null() || v.as_array().is_some_and(Vec::is_empty);
        if object.get(new_name).is_none_or(empty) {
            object.insert(new_name.to_owned(), value);
        }
    }
}

/// Writes the fields a ProtoJSON writer leaves out when they hold their default value and
/// that `opentelemetry-proto`'s serde types require: `values` of an `ArrayValue` or a
/// `KeyValueList` (Go's `protojson` and the Collector write an empty list as
/// `{"arrayValue":{}}`) and the `key` of a `KeyValue` (an empty key is left out).
fn fill_omitted_defaults(object: &mut Map<String, Value>, schema: &'static [Field]) {
    if std::ptr::eq(schema, ARRAY_VALUE) || std::ptr::eq(schema, KEY_VALUE_LIST) {
        object
            .entry("values")
            .or_insert_with(|| Value::Array(Vec::new()));
    } else if std::ptr::eq(schema, KEY_VALUE) {
        object
            .entry("key")
            .or_insert_with(|| Value::String(String::new()));
    }
}

fn normalize_value(value: &mut Value, kind: Kind, path: &str, found: &mut Normalized) {
    match (kind, value) {
        (Kind::Scalar | Kind::Renamed(..), _) => {}
        (Kind::Double, value) => {
            // Any other string is left for the typed decoder to refuse, naming the field.
            match value.as_str().and_then(doubles::read_string) {
                Some(doubles::DoubleString::Number(number)) => *value = Value::Number(number),
                Some(doubles::DoubleString::NonFinite(_)) => found.non_finite_doubles += 1,
                None => {}
            }
        }
        (Kind::Enum(names), value) => {
            if let Some(number) = value
                .as_str()
                .and_then(|s| names.iter().find(|(n, _)| *n == s))
                .map(|(_, n)| *n)
            {
                *value = Value::from(number);
            }
        }
        (Kind::Message(schema), Value::Object(object)) => {
            normalize_message(object, schema, path, found)
        }
        (Kind::AnyValue, Value::Object(object)) => {
            normalize_message(object, ANY_VALUE, path, found)
        }
        (Kind::Message(_) | Kind::AnyValue, Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                normalize_value(item, kind, &format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
