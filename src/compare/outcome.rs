//! When a compared result counts as an outcome (for `repeated_outcome`): it says something
//! (letters outside markup, or an error) and, for a call that writes, reads as a failure.

use std::sync::OnceLock;

use regex::Regex;

use super::{echo, json_scan, CommandEffect, Comparer};

impl Comparer {
    /// True when `text` (a compared result) counts as an outcome: at least
    /// `min_outcome_letters` letters outside markup, and, for a call that writes, an error
    /// or a result that reads as a failure. For JSON see [`Comparer::is_json_outcome`].
    pub fn is_outcome(&self, text: &str, error: bool, effect: Option<CommandEffect>) -> bool {
        let min = self.config.min_outcome_letters;
        let says_something = error && !text.trim().is_empty() || echo::letters(text, min) >= min;
        says_something && (error || effect != Some(CommandEffect::Writes) || is_failure(text))
    }

    /// [`Comparer::is_outcome`] of a JSON result (text or structured): its letters are those
    /// of its string values (keys are structure: `{"status":"success","data":[]}` says
    /// one word).
    pub fn is_json_outcome(&self, json: &str, effect: Option<CommandEffect>) -> bool {
        let min = self.config.min_outcome_letters;
        let mut letters = 0;
        json_scan::each_value(json, |value| {
            letters += echo::letters(&value, min - letters.min(min));
            letters < min
        });
        letters >= min && (effect != Some(CommandEffect::Writes) || is_failure(json))
    }

    /// [`Comparer::is_json_outcome`] of `value` serialised, read from the value itself: its
    /// string values in the order they serialise, the text written only for a write's
    /// failure check.
    pub fn is_value_outcome(
        &self,
        value: &serde_json::Value,
        effect: Option<CommandEffect>,
    ) -> bool {
        let min = self.config.min_outcome_letters;
        let mut letters = 0;
        each_string_value(value, &mut |text| {
            letters += echo::letters(text, min - letters.min(min));
            letters < min
        });
        letters >= min && (effect != Some(CommandEffect::Writes) || is_failure(&json_text(value)))
    }
}

/// Calls `f` with each string value of `value` (keys left out) in serialisation order,
/// until it returns false; false when it did.
fn each_string_value(value: &serde_json::Value, f: &mut impl FnMut(&str) -> bool) -> bool {
    match value {
        serde_json::Value::String(text) => f(text),
        serde_json::Value::Array(items) => items.iter().all(|item| each_string_value(item, f)),
        serde_json::Value::Object(members) => {
            members.values().all(|member| each_string_value(member, f))
        }
        _ => true,
    }
}

/// `value` as compact JSON text (what its `Display` writes), written straight into bytes
/// rather than through a formatter (serialising a `Value` cannot fail: its keys are strings).
pub(super) fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Bytes at the start of a result read by [`is_failure`]: a failure says so first; further
/// in, the words are data (a file shown after an edit holds `throws Exception`).
pub const FAILURE_PREFIX: usize = 240;

/// True when a result reads as a failure: an error word in its first [`FAILURE_PREFIX`]
/// bytes:
/// error, failed, not found, no such, invalid, cannot, unable, denied, exception,
/// traceback, usage:, syntax, unexpected, missing, unknown, not allowed, rejected, timed out,
/// no match(es), no result(s), nothing found, could not / did not find, does not exist.
pub fn is_failure(text: &str) -> bool {
    static FAILURE: OnceLock<Regex> = OnceLock::new();
    let regex = FAILURE.get_or_init(|| {
        Regex::new(
            r"(?i)\b(?:error|errors|fail|failed|failure|not found|no such|invalid|cannot|can't|unable|denied|refused|exception|traceback|usage:|syntax|unexpected|missing|unknown|not allowed|forbidden|rejected|timed out|no match|no matches|no results?|nothing found|(?:could|did)(?: not|n't) find|(?:does|do) not exist|(?:doesn't|don't) exist)\b",
        )
        .expect("failure regex compiles")
    });
    let mut end = text.len().min(FAILURE_PREFIX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    regex.is_match(&text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON values whose strings are error words, short words, quotes and backslashes.
    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1000i64..1000).prop_map(Value::from),
            "(error|failed|ok|Not found|[a-z \"\\\\\u{e9}\u{1F600}]{0,12})".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn a_value_is_an_outcome_as_its_text_is(value in json_value(), writes in proptest::bool::ANY) {
            let comparer = Comparer::default();
            let text = value.to_string();
            proptest::prop_assert_eq!(json_text(&value), text.clone());
            let effect = if writes { CommandEffect::Writes } else { CommandEffect::Reads };
            for effect in [Some(effect), None] {
                proptest::prop_assert_eq!(
                    comparer.is_value_outcome(&value, effect),
                    comparer.is_json_outcome(&text, effect)
                );
            }
        }
    }

    #[test]
    fn outcomes_need_letters_and_writes_need_a_failure() {
        let c = Comparer::default();
        assert!(!c.is_outcome(
            "<returncode>0</returncode>\n<output>\n</output>",
            false,
            None
        ));
        assert!(!c.is_outcome("OK", false, None));
        assert!(c.is_outcome("boom", true, None));
        let writes = Some(CommandEffect::Writes);
        assert!(!c.is_outcome("File updated successfully, all good", false, writes));
        assert!(c.is_outcome("Error: the edit introduced a syntax error", false, writes));
        assert!(!c.is_json_outcome(r#"{"status":"success","data":[]}"#, None));
        assert!(c.is_json_outcome(r#"{"error": "Reservation not found"}"#, None));
    }
}
