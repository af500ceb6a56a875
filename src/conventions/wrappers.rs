//! What frameworks wrap around tool arguments and results, removed before fingerprinting
//! so one call reads the same whichever span (or framework) recorded it.
//!
//! Arguments: a Python literal dict or list (LangChain's `input_str`, OpenInference's
//! `input.value` for LangChain tools: `{'query': 'x'}`) is read as the JSON it spells.
//!
//! Results, outermost first, up to [`MAX_LAYERS`] layers:
//! - LangChain's callback output `{"output": X}` (the only key) → `X`;
//! - a LangChain `ToolMessage`, as JSON (`{"type":"tool","data":{…}}` or flat
//!   `{"type":"tool","content":…,"tool_call_id":…}`) or as its Python `str()` form
//!   (`content='…' name='…' tool_call_id='…'`) → its `content`, unless its `status` is
//!   `error` (then the message minus `tool_call_id` and `id`, which are per call);
//! - an MCP `CallToolResult` (`{"content":[…],"isError":false}`, MCP specification
//!   "Tool result") whose content parts are all `text` → the texts joined with `\n`;
//!   with other parts → the content list; `isError: true` is left whole (an error is
//!   not the same result as a success with the same text).
//!
//! A value no rule applies to is returned unchanged (same [`Payload`]), so fingerprints of
//! every other shape stay as they were.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::{Map, Value as Json};

use super::json::skip::skipping_is_exact;
use crate::conventions::event::Payload;

/// Wrapper layers removed at most (a ToolMessage inside a callback output is two).
pub const MAX_LAYERS: usize = 4;

/// Arguments with a Python-literal dict or list read as JSON; anything else unchanged.
pub fn normalize_arguments(payload: Payload) -> Payload {
    python_literal_arguments(&payload).unwrap_or(payload)
}

/// The JSON a Python-literal dict or list spells (text that is not JSON itself); `None`
/// for anything else, which [`normalize_arguments`] leaves unchanged.
pub fn python_literal_arguments(payload: &Payload) -> Option<Payload> {
    let Payload::Text(text) = payload else {
        return None;
    };
    let t = text.trim_start();
    if (t.starts_with('{') || t.starts_with('[')) && !is_json(text) {
        return python_literal(text).map(Payload::Json);
    }
    None
}

/// True when `text` parses as a `serde_json::Value`, checked without building it when
/// skipping agrees with building ([`super::json::skip`]).
fn is_json(text: &str) -> bool {
    if skipping_is_exact(text.as_bytes()) {
        serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    } else {
        serde_json::from_str::<Json>(text).is_ok()
    }
}

/// A result with framework wrappers removed (see module docs); unchanged when none applies.
pub fn normalize_result(payload: Payload) -> Payload {
    let outer = match &payload {
        Payload::Json(value) => unwrap_once(value),
        // Most results are no wrapper: their top-level keys tell, without building them.
        Payload::Text(text) if text.trim_start().starts_with('{') && !may_wrap(text) => None,
        _ => as_json(&payload).and_then(|value| unwrap_once(&value)),
    };
    let Some(mut value) = outer else {
        return payload;
    };
    for _ in 1..MAX_LAYERS {
        match unwrap_once(&value) {
            Some(inner) => value = inner,
            None => break,
        }
    }
    Payload::Json(value)
}

/// False when the JSON object in `text` is surely no wrapper [`unwrap_once`] removes: its
/// top-level keys are neither `output` alone, nor include a `type` of `"tool"`, nor are
/// `content` with MCP `CallToolResult` keys. Reads the keys without building the values;
/// text that is not a JSON object is no wrapper either (`as_json` reads nothing from it).
fn may_wrap(text: &str) -> bool {
    // Every wrapper spells `"output"`, `"tool"` or `"content"` (unless its keys or values
    // are escaped): text with none of them and no backslash is no wrapper, unparsed.
    // The searchers are built once: building one costs more than a short search.
    static WORDS: LazyLock<[Finder<'static>; 3]> =
        LazyLock::new(|| [b"\"output\"".as_slice(), b"\"tool\"", b"\"content\""].map(Finder::new));
    let bytes = text.as_bytes();
    let [output, tool, content] = &*WORDS;
    let named = |word: &Finder| word.find(bytes).is_some();
    if memchr::memchr(b'\\', bytes).is_none() && !named(output) && !named(tool) && !named(content) {
        return false;
    }
    serde_json::from_str::<WrapperShape>(text).is_ok_and(|shape| shape.may_wrap)
}

/// What [`may_wrap`] learns from an object's top-level keys.
struct WrapperShape {
    may_wrap: bool,
}

impl<'de> serde::Deserialize<'de> for WrapperShape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ShapeVisitor)
    }
}

struct ShapeVisitor;

/// A top-level key, compared without allocating.
enum ShapeKey {
    Output,
    Type,
    Content,
    /// `isError`, `structuredContent`, `_meta`: the other `CallToolResult` keys.
    CallToolResult,
    Other,
}

impl<'de> serde::Deserialize<'de> for ShapeKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = ShapeKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<ShapeKey, E> {
                Ok(match key {
                    "output" => ShapeKey::Output,
                    "type" => ShapeKey::Type,
                    "content" => ShapeKey::Content,
                    "isError" | "structuredContent" | "_meta" => ShapeKey::CallToolResult,
                    _ => ShapeKey::Other,
                })
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> serde::de::Visitor<'de> for ShapeVisitor {
    type Value = WrapperShape;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<WrapperShape, A::Error> {
        use serde::de::IgnoredAny;
        let (mut output_only, mut tool_type, mut content, mut call_tool_result_keys) =
            (true, false, false, true);
        let mut keys = 0usize;
        while let Some(key) = map.next_key::<ShapeKey>()? {
            keys += 1;
            output_only &= matches!(key, ShapeKey::Output);
            call_tool_result_keys &= matches!(key, ShapeKey::Content | ShapeKey::CallToolResult);
            match key {
                ShapeKey::Type => tool_type |= map.next_value::<Json>()? == "tool",
                ShapeKey::Content => {
                    content = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(WrapperShape {
            may_wrap: (keys > 0 && output_only) || tool_type || (content && call_tool_result_keys),
        })
    }
}

/// The JSON a payload holds when it is a JSON object or a string that may be a wrapper.
fn as_json(payload: &Payload) -> Option<Json> {
    match payload {
        Payload::Json(v) => Some(v.clone()),
        Payload::Text(t) => {
            let trimmed = t.trim_start();
            if trimmed.starts_with('{') {
                serde_json::from_str(t).ok()
            } else if trimmed.starts_with("content=") {
                Some(Json::String(t.clone()))
            } else {
                None
            }
        }
        Payload::Bytes(_) => None,
    }
}

fn unwrap_once(value: &Json) -> Option<Json> {
    match value {
        Json::Object(o) => {
            if o.len() == 1 {
                if let Some(inner) = o.get("output") {
                    return Some(parse_string(inner));
                }
            }
            tool_message(o).or_else(|| call_tool_result(o))
        }
        Json::String(s) => tool_message_repr(s),
        _ => None,
    }
}

/// A string holding JSON is that JSON (one level), else it stays a string.
fn parse_string(value: &Json) -> Json {
    if let Json::String(s) = value {
        let t = s.trim_start();
        if t.starts_with('{') || t.starts_with('[') {
            if let Ok(v) = serde_json::from_str(s) {
                return v;
            }
        }
    }
    value.clone()
}

/// A LangChain `ToolMessage` serialised with `dumpd` or flat.
fn tool_message(o: &Map<String, Json>) -> Option<Json> {
    if o.get("type").and_then(Json::as_str) != Some("tool") {
        return None;
    }
    let message = match o.get("data") {
        Some(Json::Object(data)) => data,
        _ => o,
    };
    message.get("tool_call_id")?;
    Some(tool_message_value(message))
}

fn tool_message_value(message: &Map<String, Json>) -> Json {
    let status = message.get("status").and_then(Json::as_str);
    if status.is_none_or(|s| s == "success") {
        if let Some(content) = message.get("content") {
            return content.clone();
        }
    }
    let mut kept = message.clone();
    kept.remove("tool_call_id");
    kept.remove("id");
    Json::Object(kept)
}

/// An MCP `CallToolResult` that is not an error: its text parts joined, else its content.
fn call_tool_result(o: &Map<String, Json>) -> Option<Json> {
    let content = o.get("content")?.as_array()?;
    let known = |k: &str| matches!(k, "content" | "isError" | "structuredContent" | "_meta");
    if !o.keys().all(|k| known(k)) || o.get("isError").and_then(Json::as_bool) == Some(true) {
        return None;
    }
    if !content
        .iter()
        .all(|part| part.get("type").and_then(Json::as_str).is_some())
    {
        return None;
    }
    let texts: Option<Vec<&str>> = content
        .iter()
        .map(|part| {
            (part.get("type").and_then(Json::as_str) == Some("text"))
                .then(|| part.get("text").and_then(Json::as_str))
                .flatten()
        })
        .collect();
    Some(match texts {
        Some(texts) if !texts.is_empty() => Json::String(texts.join("\n")),
        _ => Json::Array(content.clone()),
    })
}

/// Arguments recorded by a function decorator as `{"args": [], "kwargs": {…}}` (Langfuse
/// `@observe`, Traceloop `@tool`): with no positional arguments, the keyword arguments.
pub fn decorator_arguments(payload: Payload) -> Payload {
    let Some(Json::Object(o)) = as_json(&payload) else {
        return payload;
    };
    let empty_args = o
        .get("args")
        .is_some_and(|a| a.as_array().is_some_and(Vec::is_empty));
    match o.get("kwargs") {
        Some(kwargs @ Json::Object(_)) if empty_args && o.len() == 2 => {
            Payload::Json(kwargs.clone())
        }
        _ => payload,
    }
}

/// A `ToolMessage`'s Python `str()`: `content='…' name='…' tool_call_id='…'` (pydantic's
/// repr arguments: `field=repr(value)` separated by spaces).
fn tool_message_repr(text: &str) -> Option<Json> {
    let fields = repr_fields(text)?;
    if !fields.contains_key("content") || !fields.contains_key("tool_call_id") {
        return None;
    }
    Some(tool_message_value(&fields))
}

/// Parses `a='x' b=None c={'k': 1}` into a map; `None` unless the whole text is such
/// fields with Python-literal values.
fn repr_fields(text: &str) -> Option<Map<String, Json>> {
    let mut fields = Map::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let name = &rest[..eq];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let after = &rest[eq + 1..];
        // The value ends at the first space after which `name=` follows and the prefix
        // parses as a literal (values may contain spaces inside quotes and brackets).
        let (value, tail) = split_value(after)?;
        fields.insert(name.to_owned(), value);
        rest = tail.trim_start();
    }
    Some(fields)
}

fn split_value(text: &str) -> Option<(Json, &str)> {
    let candidates = text
        .char_indices()
        .filter(|(_, c)| *c == ' ')
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()));
    for end in candidates {
        let tail = &text[end..];
        let next_is_field = tail.is_empty() || is_field_start(tail.trim_start());
        if !next_is_field {
            continue;
        }
        if let Some(value) = python_literal(&text[..end]) {
            return Some((value, tail));
        }
    }
    None
}

fn is_field_start(text: &str) -> bool {
    let name_len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    name_len > 0 && text[name_len..].starts_with('=')
}

/// The deepest bracket nesting [`python_literal`] parses. Tool inputs as LangChain
/// records them (a dict of arguments) nest two or three levels.
pub const MAX_LITERAL_DEPTH: usize = 6;

/// The deepest nesting of `(`, `[` and `{` in `text`, outside quoted strings (`'…'` and
/// `"…"`, with backslash escapes); unbalanced closers are ignored.
fn literal_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for &byte in text.as_bytes() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == q {
                    quote = None;
                }
            }
            None => match byte {
                b'\'' | b'"' => quote = Some(byte),
                b'(' | b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b')' | b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    deepest
}

/// A Python literal (`ast.literal_eval` syntax, via `py_literal`) as JSON: dict → object
/// (keys as their string, or their Python repr when not strings), tuple/list/set → array,
/// int → number (outside 64 bits: its decimal string), float → number (non-finite →
/// null), bytes → lowercase hex, None → null. `None` when the text is not a literal.
///
/// Text nested deeper than [`MAX_LITERAL_DEPTH`] brackets is not parsed (`None`): the
/// parser backtracks, and its time doubles with each level (about 1 ms at depth 6, a
/// second at depth 16), so without the cap one span attribute could hold a worker.
pub fn python_literal(text: &str) -> Option<Json> {
    let text = text.trim();
    if literal_depth(text) > MAX_LITERAL_DEPTH {
        return None;
    }
    let value: py_literal::Value = text.parse().ok()?;
    Some(literal_to_json(&value))
}

fn literal_to_json(value: &py_literal::Value) -> Json {
    use py_literal::Value as P;
    match value {
        P::String(s) => Json::String(s.clone()),
        P::Bytes(b) => Json::String(hex::encode(b)),
        P::Integer(i) => {
            let digits = i.to_string();
            digits
                .parse::<i64>()
                .map(Json::from)
                .or_else(|_| digits.parse::<u64>().map(Json::from))
                .unwrap_or(Json::String(digits))
        }
        P::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        P::Complex(c) => Json::String(format!("{c}")),
        P::Tuple(items) | P::List(items) | P::Set(items) => {
            Json::Array(items.iter().map(literal_to_json).collect())
        }
        P::Dict(pairs) => Json::Object(
            pairs
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        P::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (key, literal_to_json(v))
                })
                .collect(),
        ),
        P::Boolean(b) => Json::Bool(*b),
        P::None => Json::Null,
    }
}

#[cfg(test)]
mod tests;
