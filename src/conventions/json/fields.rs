//! A few top-level fields of a JSON object's text, read without building the rest: the
//! LangChain callback context that OpenLLMetry records on tool spans ([`crate::conventions::frameworks::openllmetry`])
//! holds the call's arguments or result beside tags, metadata and kwargs that are never
//! used, and building all of it as a `serde_json::Value` was a sixth of the largest
//! LangChain requests of the corpus.
//!
//! The answer is the one parsing the text as a `serde_json::Value` gives: the same fields
//! (the last of repeated keys, as `serde_json::Map` keeps it), and `None` exactly when that
//! parse fails or is no object. Where skipping could accept what that parse refuses
//! ([`crate::conventions::json::skip`]), the whole value is built instead.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::conventions::json::skip::skipping_is_exact;

/// The fields of JSON object `text`: whether it has the key `marker`, and the value of
/// each of `fields` (in that order; `None` where absent). `None` when `text` is not a JSON
/// object.
pub fn object_fields(
    text: &str,
    fields: &[&str],
    marker: &str,
) -> Option<(bool, Vec<Option<Json>>)> {
    if !skipping_is_exact(text.as_bytes()) {
        let Json::Object(map) = serde_json::from_str::<Json>(text).ok()? else {
            return None;
        };
        let values = fields.iter().map(|f| map.get(*f).cloned()).collect();
        return Some((map.contains_key(marker), values));
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let found = deserializer
        .deserialize_any(ObjectFields { fields, marker })
        .ok()?;
    deserializer.end().ok()?;
    found
}

struct ObjectFields<'f> {
    fields: &'f [&'f str],
    marker: &'f str,
}

impl<'de> Visitor<'de> for ObjectFields<'_> {
    type Value = Option<(bool, Vec<Option<Json>>)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut marked = false;
        let mut values = vec![None; self.fields.len()];
        while let Some(key) = map.next_key::<String>()? {
            marked |= key == self.marker;
            match self.fields.iter().position(|f| *f == key) {
                Some(i) => values[i] = Some(map.next_value::<Json>()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some((marked, values)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const FIELDS: [&str; 2] = ["inputs", "input_str"];

    /// The answer through a whole `serde_json::Value`.
    fn through_value(text: &str) -> Option<(bool, Vec<Option<Json>>)> {
        match serde_json::from_str::<Json>(text).ok()? {
            Json::Object(map) => Some((
                map.contains_key("kwargs"),
                FIELDS.iter().map(|f| map.get(*f).cloned()).collect(),
            )),
            _ => None,
        }
    }

    #[test]
    fn reads_the_fields_and_the_marker() {
        let text = r#"{"input_str":"{'q': 1}","tags":["a"],"metadata":{"step":3},"inputs":{"q":1},"kwargs":{}}"#;
        assert_eq!(
            object_fields(text, &FIELDS, "kwargs"),
            Some((true, vec![Some(json!({"q": 1})), Some(json!("{'q': 1}"))]))
        );
        // The last of repeated keys, as serde_json's map keeps it.
        let repeated = r#"{"inputs":1,"inputs":2}"#;
        assert_eq!(
            object_fields(repeated, &FIELDS, "kwargs"),
            through_value(repeated)
        );
        for not_an_object in ["[1]", "\"x\"", "3", "null", "{", "{} x", ""] {
            assert_eq!(
                object_fields(not_an_object, &FIELDS, "kwargs"),
                None,
                "{not_an_object}"
            );
        }
        // What skipping would accept and building refuses: a lone surrogate, deep nesting.
        for refused in [
            r#"{"inputs":"\ud800"}"#,
            &format!("{{\"x\":{}1{}}}", "[".repeat(130), "]".repeat(130)),
        ] {
            assert_eq!(object_fields(refused, &FIELDS, "kwargs"), None);
        }
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|n| json!(n)),
            "[a-z\\\\\"{}]{0,4}".prop_map(|s| json!(s)),
        ];
        let keys = vec!["inputs", "input_str", "kwargs", "tags", "x"];
        crate::conventions::test_support::json_value(leaf, keys)
    }

    proptest! {
        #[test]
        fn agrees_with_the_value_path(value in json_value(), cut in 0usize..300, byte in any::<u8>()) {
            let text = value.to_string();
            prop_assert_eq!(object_fields(&text, &FIELDS, "kwargs"), through_value(&text));
            // A mutated text: one byte replaced (often no longer JSON, or not UTF-8: skipped).
            let mut bytes = text.into_bytes();
            if !bytes.is_empty() {
                let at = cut % bytes.len();
                bytes[at] = byte;
                if let Ok(text) = std::str::from_utf8(&bytes) {
                    prop_assert_eq!(object_fields(text, &FIELDS, "kwargs"), through_value(text));
                }
            }
        }
    }
}
