//! The canonicalisation the streaming writer replaced, kept as the test oracle: parse into
//! a `serde_json::Value`, copy it without the volatile keys, and let the RFC 8785 crate
//! (`serde_json_canonicalizer`) write it. The property tests in the parent module check
//! that the streaming path produces the same bytes, hence the same fingerprints.

use std::collections::HashSet;

use serde_json::Value;

use super::canonical::BIG_INT_TAG;
use super::{within_limits, write_raw_json, ByteSink, RAW_TAG};
use crate::conventions::event::Payload;

/// 2^53: integers at or beyond this magnitude are not exact as doubles.
const EXACT_DOUBLE_LIMIT: u64 = 1 << 53;

/// The tagged canonical bytes of `payload`, computed through `Value` and the crate.
pub(super) fn canonical_bytes(
    payload: &Payload,
    drop: &HashSet<String>,
    max_depth: usize,
    max_bytes: usize,
) -> Vec<u8> {
    let canonical = |value: &Value| canonical_value(value, drop, max_depth, max_bytes);
    let bytes = match payload {
        Payload::Json(value) => {
            return canonical(value).unwrap_or_else(|| {
                let mut out = ByteSink(RAW_TAG.to_vec());
                write_raw_json(value, &mut out);
                out.0
            });
        }
        Payload::Text(text) => text.as_bytes(),
        Payload::Bytes(bytes) => bytes.as_slice(),
    };
    let value = match decode(bytes, max_bytes) {
        Some(value) => Some(value),
        None if bytes.len() <= max_bytes => std::str::from_utf8(bytes)
            .ok()
            .map(|t| Value::String(t.to_owned())),
        None => None,
    };
    value.and_then(|v| canonical(&v)).unwrap_or_else(|| {
        let mut out = RAW_TAG.to_vec();
        out.extend_from_slice(bytes);
        out
    })
}

fn decode(bytes: &[u8], max_bytes: usize) -> Option<Value> {
    if bytes.len() > max_bytes {
        return None;
    }
    match serde_json::from_slice::<Value>(bytes).ok()? {
        Value::String(inner) => match serde_json::from_str::<Value>(&inner) {
            Ok(value) => Some(value),
            Err(_) => Some(Value::String(inner)),
        },
        value => Some(value),
    }
}

fn canonical_value(
    value: &Value,
    drop: &HashSet<String>,
    max_depth: usize,
    max_bytes: usize,
) -> Option<Vec<u8>> {
    if !within_limits(value, max_depth, max_bytes) {
        return None;
    }
    let mut big_ints = false;
    let stripped = strip(value, drop, &mut big_ints);
    if big_ints {
        let tagged = tag_big_ints(&stripped);
        let mut out = BIG_INT_TAG.to_vec();
        out.extend(serde_json_canonicalizer::to_vec(&tagged).ok()?);
        Some(out)
    } else {
        serde_json_canonicalizer::to_vec(&stripped).ok()
    }
}

fn is_big_int(n: &serde_json::Number) -> bool {
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => u >= EXACT_DOUBLE_LIMIT,
        (None, Some(i)) => i.unsigned_abs() >= EXACT_DOUBLE_LIMIT,
        (None, None) => false,
    }
}

/// Copy of `value` without the `drop` keys (reference `_strip`).
fn strip(value: &Value, drop: &HashSet<String>, big_ints: &mut bool) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !drop.contains(key.as_str()))
                .map(|(key, item)| (key.clone(), strip(item, drop, big_ints)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| strip(item, drop, big_ints))
                .collect(),
        ),
        Value::Number(n) => {
            *big_ints |= is_big_int(n);
            value.clone()
        }
        _ => value.clone(),
    }
}

/// Strings `s` → `"s" + s`, integers with |n| ≥ 2^53 → `"n" + digits`.
fn tag_big_ints(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), tag_big_ints(item)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(tag_big_ints).collect()),
        Value::String(s) => Value::String(format!("s{s}")),
        Value::Number(n) if is_big_int(n) => Value::String(format!("n{n}")),
        _ => value.clone(),
    }
}
