//! A parsed value's JSON as it is (not canonical): the size and depth check that decides
//! whether a value is fingerprinted whole, and its compact JSON in its own key order. Both
//! iterate with an explicit stack, so any depth is safe.

use serde_json::Value;

use super::Sink;

/// True when `value` nests at most `max_depth` arrays/objects and its JSON size estimate
/// stays within `max_bytes`. Iterative: safe on any depth.
pub(super) fn within_limits(value: &Value, max_depth: usize, max_bytes: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    let mut size = 0usize;
    while let Some((value, depth)) = stack.pop() {
        size = size.saturating_add(match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                if depth >= max_depth {
                    return false;
                }
                stack.extend(items.iter().map(|item| (item, depth + 1)));
                items.len() + 2
            }
            Value::Object(map) => {
                if depth >= max_depth {
                    return false;
                }
                let keys: usize = map.keys().map(|k| k.len() + 4).sum();
                stack.extend(map.values().map(|item| (item, depth + 1)));
                keys + 2
            }
        });
        if size > max_bytes {
            return false;
        }
    }
    true
}

/// Compact JSON of `value` in its own key order, written with an explicit stack (no
/// recursion, so any depth is safe).
pub(super) fn write_raw_json(value: &Value, sink: &mut impl Sink) {
    enum Item<'a> {
        Value(&'a Value),
        Key(&'a str),
        Literal(&'static [u8]),
    }
    let mut stack = vec![Item::Value(value)];
    while let Some(item) = stack.pop() {
        match item {
            Item::Literal(bytes) => sink.put(bytes),
            Item::Key(key) => {
                write_json_string(key, sink);
                sink.put(b":");
            }
            Item::Value(Value::Null) => sink.put(b"null"),
            Item::Value(Value::Bool(b)) => sink.put(if *b { b"true" } else { b"false" }),
            Item::Value(Value::Number(n)) => sink.put(n.to_string().as_bytes()),
            Item::Value(Value::String(s)) => write_json_string(s, sink),
            Item::Value(Value::Array(items)) => {
                sink.put(b"[");
                stack.push(Item::Literal(b"]"));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Item::Value(item));
                    if i > 0 {
                        stack.push(Item::Literal(b","));
                    }
                }
            }
            Item::Value(Value::Object(map)) => {
                sink.put(b"{");
                stack.push(Item::Literal(b"}"));
                let entries: Vec<_> = map.iter().collect();
                for (i, (key, item)) in entries.into_iter().enumerate().rev() {
                    stack.push(Item::Value(item));
                    stack.push(Item::Key(key));
                    if i > 0 {
                        stack.push(Item::Literal(b","));
                    }
                }
            }
        }
    }
}

fn write_json_string(s: &str, sink: &mut impl Sink) {
    // Serialising a `&str` cannot fail.
    match serde_json::to_vec(s) {
        Ok(bytes) => sink.put(&bytes),
        Err(_) => sink.put(s.as_bytes()),
    }
}
