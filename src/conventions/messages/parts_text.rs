//! Tool-call message parts read straight from a message list's JSON text: only the parts
//! asked for are built, the rest of the conversation is skipped (an inference span's
//! `gen_ai.input.messages` holds the whole conversation so far, and building it as a
//! `serde_json::Value` for a handful of parts cost a tenth of the span path on recorded
//! traffic).
//!
//! The answer is the one [`crate::conventions::messages::parts`] reads from the same text parsed as a
//! `serde_json::Value`: the same parts, and `None` exactly when that parse fails. Where
//! skipping could accept what that parse refuses ([`crate::conventions::json::skip`]), the whole value
//! is built instead; bytes that are not UTF-8 are not JSON.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::conventions::json::skip::skipping_is_exact;

/// One part of the wanted type: its `id`, `name` and the wanted field (`arguments` of a
/// `tool_call`, `response` of a `tool_call_response`), each as the last occurrence of its
/// key holds it (as `serde_json::Map` keeps it).
#[derive(Clone, Debug, PartialEq)]
pub struct TextPart {
    /// `id`, when a string.
    pub id: Option<String>,
    /// `name`, when a string.
    pub name: Option<String>,
    /// The wanted field's value.
    pub field: Option<Json>,
}

/// The parts of type `part_type` in the message list (or single message) in `text`, in
/// message order, with field `field`; `None` when `text` is not JSON.
pub fn parts_in_text(text: &str, part_type: &str, field: &str) -> Option<Vec<TextPart>> {
    let wanted = Wanted { part_type, field };
    if !skipping_is_exact(text.as_bytes()) {
        let messages: Json = serde_json::from_str(text).ok()?;
        return Some(parts_in_value_for(&messages, wanted));
    }
    let mut parts = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer
        .deserialize_any(Messages {
            wanted,
            out: &mut parts,
        })
        .ok()?;
    deserializer.end().ok()?;
    Some(parts)
}

/// As [`parts_in_text`] for JSON held as bytes (an OTLP `bytesValue`); `None` when they are
/// not UTF-8 JSON.
pub fn parts_in_bytes(bytes: &[u8], part_type: &str, field: &str) -> Option<Vec<TextPart>> {
    parts_in_text(std::str::from_utf8(bytes).ok()?, part_type, field)
}

/// The same parts from a message list already built as JSON.
pub fn parts_in_value(messages: &Json, part_type: &str, field: &str) -> Vec<TextPart> {
    parts_in_value_for(messages, Wanted { part_type, field })
}

fn parts_in_value_for(messages: &Json, wanted: Wanted) -> Vec<TextPart> {
    let list = match messages {
        Json::Array(list) => list.as_slice(),
        one => std::slice::from_ref(one),
    };
    list.iter()
        .filter_map(|m| m.get("parts").and_then(Json::as_array))
        .flatten()
        .filter(|p| p.get("type").and_then(Json::as_str) == Some(wanted.part_type))
        .map(|p| TextPart {
            id: p.get("id").and_then(Json::as_str).map(str::to_owned),
            name: p.get("name").and_then(Json::as_str).map(str::to_owned),
            field: p.get(wanted.field).cloned(),
        })
        .collect()
}

#[derive(Clone, Copy)]
struct Wanted<'w> {
    part_type: &'w str,
    field: &'w str,
}

/// Visits whatever a value is; scalars and unwanted containers yield `T::default()`.
macro_rules! other_values_hold_nothing {
    ($out:ty) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<$out, E> {
            Ok(<$out>::default())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<$out, E> {
            Ok(<$out>::default())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<$out, E> {
            Ok(<$out>::default())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<$out, E> {
            Ok(<$out>::default())
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<$out, E> {
            Ok(<$out>::default())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<$out, E> {
            Ok(<$out>::default())
        }
    };
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The top level: a list of messages, or one message.
struct Messages<'o, 'w> {
    wanted: Wanted<'w>,
    out: &'o mut Vec<TextPart>,
}

impl<'de> Visitor<'de> for Messages<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message list")
    }

    other_values_hold_nothing!(());

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(parts) = seq.next_element_seed(Message(self.wanted))? {
            self.out.extend(parts);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.out.extend(Message(self.wanted).visit_map(map)?);
        Ok(())
    }
}

/// One message: the wanted parts of its (last) `parts` list.
#[derive(Clone, Copy)]
struct Message<'w>(Wanted<'w>);

impl<'de> DeserializeSeed<'de> for Message<'_> {
    type Value = Vec<TextPart>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<TextPart>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Message<'_> {
    type Value = Vec<TextPart>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message")
    }

    other_values_hold_nothing!(Vec<TextPart>);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<TextPart>, A::Error> {
        drain_seq(seq).map(|()| Vec::new())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<TextPart>, A::Error> {
        let mut parts = Vec::new();
        while let Some(key) = map.next_key_seed(Key(&["parts"]))? {
            match key {
                Some(_) => parts = map.next_value_seed(Parts(self.0))?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(parts)
    }
}

/// A `parts` value: the wanted parts when it is a list.
#[derive(Clone, Copy)]
struct Parts<'w>(Wanted<'w>);

impl<'de> DeserializeSeed<'de> for Parts<'_> {
    type Value = Vec<TextPart>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<TextPart>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Parts<'_> {
    type Value = Vec<TextPart>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of message parts")
    }

    other_values_hold_nothing!(Vec<TextPart>);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<TextPart>, A::Error> {
        let mut parts = Vec::new();
        while let Some(part) = seq.next_element_seed(Part(self.0))? {
            parts.extend(part);
        }
        Ok(parts)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<TextPart>, A::Error> {
        drain_map(map).map(|()| Vec::new())
    }
}

/// One part: kept when its (last) `type` is the wanted one.
#[derive(Clone, Copy)]
struct Part<'w>(Wanted<'w>);

impl<'de> DeserializeSeed<'de> for Part<'_> {
    type Value = Option<TextPart>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Option<TextPart>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Part<'_> {
    type Value = Option<TextPart>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message part")
    }

    other_values_hold_nothing!(Option<TextPart>);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<TextPart>, A::Error> {
        drain_seq(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<TextPart>, A::Error> {
        let string = |value: Json| match value {
            Json::String(s) => Some(s),
            _ => None,
        };
        let mut wanted_type = false;
        let mut part = TextPart {
            id: None,
            name: None,
            field: None,
        };
        let keys = ["type", "id", "name", self.0.field];
        while let Some(key) = map.next_key_seed(Key(&keys))? {
            match key {
                Some(0) => wanted_type = map.next_value::<Json>()? == self.0.part_type,
                Some(1) => part.id = string(map.next_value()?),
                Some(2) => part.name = string(map.next_value()?),
                Some(_) => part.field = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(wanted_type.then_some(part))
    }
}

/// An object key: its index in the given names, `None` for any other key. Not allocated.
struct Key<'k>(&'k [&'k str]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|name| *name == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// What the `Value` path reads from `text`.
    fn through_value(text: &[u8], part_type: &str, field: &str) -> Option<Vec<TextPart>> {
        let messages: Json = serde_json::from_slice(text).ok()?;
        Some(parts_in_value(&messages, part_type, field))
    }

    fn both(text: &str) {
        for (part_type, field) in [
            ("tool_call", "arguments"),
            ("tool_call_response", "response"),
        ] {
            assert_eq!(
                parts_in_text(text, part_type, field),
                through_value(text.as_bytes(), part_type, field),
                "{text:.80}"
            );
        }
    }

    #[test]
    fn reads_the_parts_a_value_holds() {
        let text = json!([
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
            {"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": [1, 2.5]}},
                {"type": "tool_call", "name": "no_id"},
                {"type": "tool_call", "id": 7, "name": ["x"], "arguments": "raw"}
            ]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "ok"}]},
            "stray", 3, null, [1], {"parts": "not a list"}, {"parts": [1, "x", [2]]}
        ])
        .to_string();
        assert_eq!(
            parts_in_text(&text, "tool_call", "arguments"),
            Some(vec![
                TextPart {
                    id: Some("c1".into()),
                    name: Some("f".into()),
                    field: Some(json!({"a": [1, 2.5]})),
                },
                TextPart {
                    id: None,
                    name: Some("no_id".into()),
                    field: None,
                },
                TextPart {
                    id: None,
                    name: None,
                    field: Some(json!("raw")),
                },
            ])
        );
        both(&text);
    }

    #[test]
    fn last_duplicate_key_wins_as_in_a_value() {
        both(r#"[{"parts": [{"type": "tool_call", "id": "a"}], "parts": []}]"#);
        both(r#"[{"parts": [{"type": "x", "id": "a", "type": "tool_call", "id": 1, "id": "b"}]}]"#);
        both(r#"{"parts": [{"type": "tool_call", "id": "c", "type": "text"}]}"#);
    }

    #[test]
    fn what_skipping_would_accept_is_refused_as_a_value_refuses_it() {
        let deep = format!("[{}{}]", "[".repeat(140), "]".repeat(140));
        for text in [
            deep.as_str(),
            r#"[{"parts": [], "x": "\ud800"}]"#,
            r#"[{"parts": [{"type": "tool_call", "id": "\ud83d\ude00"}]}]"#,
            "[1, 2",
            r#"[1, {"arguments": 1000E0000000000298}]"#,
            "[] x",
            "[\"a\u{1}\"]",
            "",
        ] {
            both(text);
        }
        assert_eq!(parts_in_text(&deep, "tool_call", "arguments"), None);
        let invalid_utf8 = b"[{\"parts\": [], \"x\": \"\xff\"}]";
        assert_eq!(
            parts_in_bytes(invalid_utf8, "tool_call", "arguments"),
            through_value(invalid_utf8, "tool_call", "arguments")
        );
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            prop::sample::select(vec![
                "tool_call",
                "tool_call_response",
                "text",
                "id",
                "",
                "c1"
            ])
            .prop_map(|s| json!(s)),
        ];
        let keys = vec![
            "parts",
            "type",
            "id",
            "name",
            "arguments",
            "response",
            "role",
            "x",
        ];
        crate::conventions::test_support::json_value(leaf, keys)
    }

    proptest! {
        #[test]
        fn agrees_with_the_value_path(value in json_value(), cut in 0usize..400, byte in any::<u8>()) {
            let text = value.to_string();
            both(&text);
            // A mutated text: one byte replaced (often no longer JSON).
            let mut bytes = text.into_bytes();
            if !bytes.is_empty() {
                let at = cut % bytes.len();
                bytes[at] = byte;
                for (part_type, field) in [("tool_call", "arguments"), ("tool_call_response", "response")] {
                    prop_assert_eq!(
                        parts_in_bytes(&bytes, part_type, field),
                        through_value(&bytes, part_type, field)
                    );
                }
            }
        }
    }
}
