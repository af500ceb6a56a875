//! When skipping a JSON value (serde's `IgnoredAny`) accepts exactly what building it as a
//! `serde_json::Value` accepts. Skipping checks the syntax, string escapes and control
//! characters as building does, but not three things building refuses: nesting of 128
//! levels or more, `\uD800`–`\uDFFF` escapes (a lone surrogate), and numbers out of `f64`
//! range (`1e400`, or an integer of 310 digits). Readers that skip what they do not need
//! ([`crate::conventions::messages::parts_text`], [`crate::conventions::wrappers`]) build the whole value instead when
//! the text could hold any of those.

/// serde_json's nesting limit: a `Value` this deep fails to parse.
const SERDE_JSON_DEPTH: usize = 128;

/// Digits in a row from which an integer might not fit an `f64` (`f64::MAX` has 309).
const LONG_NUMBER_DIGITS: usize = 300;

/// True when skipping `text` (UTF-8 JSON text, or not JSON at all) accepts it exactly when
/// building a `serde_json::Value` from it does. Conservative: false for any text that could
/// hold one of the three differences, whether it does or not.
pub fn skipping_is_exact(text: &[u8]) -> bool {
    let openings = text.iter().filter(|b| matches!(b, b'[' | b'{')).count();
    openings < SERDE_JSON_DEPTH
        && !memchr::memchr_iter(b'\\', text).any(|at| {
            text.get(at + 1) == Some(&b'u') && matches!(text.get(at + 2), Some(b'd' | b'D'))
        })
        && !may_hold_a_huge_number(text)
}

/// True when some number outside strings has an exponent or [`LONG_NUMBER_DIGITS`] digits
/// (the only numbers that can overflow an `f64`).
fn may_hold_a_huge_number(text: &[u8]) -> bool {
    let (mut at, mut digits) = (0, 0usize);
    let mut previous = b' ';
    while let Some(&byte) = text.get(at) {
        if byte == b'"' {
            // Jump over the string: most of a message list's bytes are inside strings.
            at = string_end(text, at + 1);
            previous = b'"';
            digits = 0;
            continue;
        }
        if matches!(byte, b'e' | b'E') && (previous.is_ascii_digit() || previous == b'.') {
            return true;
        }
        digits = if byte.is_ascii_digit() { digits + 1 } else { 0 };
        if digits >= LONG_NUMBER_DIGITS {
            return true;
        }
        previous = byte;
        at += 1;
    }
    false
}

/// The index just past the closing quote of the string whose content starts at `from`
/// (the text's end when it is not closed).
fn string_end(text: &[u8], mut from: usize) -> usize {
    while let Some(found) = memchr::memchr2(b'"', b'\\', &text[from.min(text.len())..]) {
        let at = from + found;
        if text[at] == b'"' {
            return at + 1;
        }
        from = at + 2; // an escape: skip the escaped byte
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    fn agree(text: &str) -> bool {
        serde_json::from_str::<IgnoredAny>(text).is_ok()
            == serde_json::from_str::<Value>(text).is_ok()
    }

    #[test]
    fn each_difference_is_caught() {
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        let long = format!("[1{}]", "0".repeat(320));
        for text in [
            deep.as_str(),
            r#"["\ud800"]"#,
            "[1e400]",
            "[1.5E+999]",
            long.as_str(),
        ] {
            assert!(!agree(text), "a real difference: {text:.30}");
            assert!(!skipping_is_exact(text.as_bytes()), "{text:.30}");
        }
    }

    proptest::proptest! {
        /// Where the check says skipping is exact, it is: on JSON texts with one byte
        /// replaced (a digit by `e`, a quote by a backslash, …).
        #[test]
        fn exact_means_agreeing(
            numbers in proptest::collection::vec(-1e6f64..1e6, 0..4),
            integers in proptest::collection::vec(proptest::prelude::any::<i64>(), 0..4),
            words in proptest::collection::vec("[a-z0-9\\\\\"]{0,6}", 0..4),
            at in 0usize..200,
            byte in proptest::prelude::any::<u8>(),
        ) {
            let mut bytes = serde_json::json!({"n": numbers, "i": integers, "w": words}).to_string().into_bytes();
            let at = at % bytes.len();
            bytes[at] = byte;
            if let Ok(text) = std::str::from_utf8(&bytes) {
                if skipping_is_exact(text.as_bytes()) {
                    proptest::prop_assert!(agree(text), "{}", text);
                }
            }
        }
    }

    #[test]
    fn strings_end_at_their_unescaped_quote() {
        for text in [r#"["a\"b", 1e400]"#, r#"["a\\", 1e400]"#, r#"["", 1E999]"#] {
            assert!(!skipping_is_exact(text.as_bytes()), "{text}");
        }
        for text in [
            r#"["1e400 \" 1e400"]"#,
            r#"["a\\\"1e9"]"#,
            r#"["unclosed 1e9"#,
        ] {
            assert!(skipping_is_exact(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn ordinary_text_is_exact_and_strings_do_not_count() {
        for text in [
            r#"[{"id": "5e2a", "n": 12, "x": -0.5, "s": "1e400 \"2E9\" \\"}]"#,
            r#"{"a": [1, 2, {"b": null}], "c": "\u00e9"}"#,
            "not json",
        ] {
            assert!(skipping_is_exact(text.as_bytes()), "{text}");
            assert!(agree(text), "{text}");
        }
    }
}
