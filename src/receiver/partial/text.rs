//! The text repairs of the lenient OTLP/JSON decoding ([`super::decode_json_partial`]):
//! what serde_json refuses while parsing the whole body, rewritten so the body parses and
//! the fault stays with the value that held it. Invalid UTF-8 and lone surrogate escapes
//! become U+FFFD ([`sanitize_json_text`]); a number out of the f64 range, which serde_json
//! refuses for the whole body (`number out of range`), becomes a marked string
//! ([`mark_out_of_range_numbers`]) that [`find_marked`] finds again: the span holding one
//! is left out alone, as a span with the same number written in a string is, and one
//! outside every span refuses the request as before.

use serde_json::Value;

/// The first character of a string [`mark_out_of_range_numbers`] wrote: a noncharacter,
/// used only in a body that holds none (neither its UTF-8 bytes nor an escape of it).
const MARK: char = '\u{FDD0}';

/// `bytes` as JSON text serde_json reads: each run of invalid UTF-8 becomes U+FFFD, and each
/// `\uD800`–`\uDFFF` escape that is not half of a valid surrogate pair becomes `\uFFFD` (the
/// same six bytes, so nothing moves). Returns the text and how many were replaced.
pub fn sanitize_json_text(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut replaced = 0;
    let mut text: Vec<u8> = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.to_vec(),
        Err(_) => {
            let mut out = Vec::with_capacity(bytes.len() + 16);
            for chunk in bytes.utf8_chunks() {
                out.extend_from_slice(chunk.valid().as_bytes());
                if !chunk.invalid().is_empty() {
                    out.extend_from_slice("\u{FFFD}".as_bytes());
                    replaced += 1;
                }
            }
            out
        }
    };
    let hex = |b: &[u8]| -> Option<u16> {
        let s = std::str::from_utf8(b).ok()?;
        u16::from_str_radix(s, 16).ok()
    };
    let escape_at = |text: &[u8], at: usize| -> Option<u16> {
        (text.get(at) == Some(&b'\\') && text.get(at + 1) == Some(&b'u'))
            .then(|| hex(text.get(at + 2..at + 6)?))
            .flatten()
    };
    let (mut in_string, mut at) = (false, 0);
    while at < text.len() {
        match text[at] {
            b'"' => {
                in_string = !in_string;
                at += 1;
            }
            b'\\' if in_string => match escape_at(&text, at) {
                Some(0xD800..=0xDBFF) => {
                    if matches!(escape_at(&text, at + 6), Some(0xDC00..=0xDFFF)) {
                        at += 12;
                    } else {
                        text[at + 2..at + 6].copy_from_slice(b"FFFD");
                        replaced += 1;
                        at += 6;
                    }
                }
                Some(0xDC00..=0xDFFF) => {
                    text[at + 2..at + 6].copy_from_slice(b"FFFD");
                    replaced += 1;
                    at += 6;
                }
                // Any other escape: the backslash and the escaped character.
                _ => at += 2,
            },
            _ => at += 1,
        }
    }
    (text, replaced)
}

/// `text` with each JSON number whose value is out of the f64 range (`1e400`, `-1e999`,
/// 400 digits: serde_json refuses them, `number out of range`) written as a string of
/// [`MARK`] and the number, and how many. Text inside strings is left alone, and so is a
/// token that is not a JSON number (serde_json refuses the body for it). A text that
/// already holds the mark is returned unchanged (0): its numbers refuse the body as before.
pub fn mark_out_of_range_numbers(text: Vec<u8>) -> (Vec<u8>, usize) {
    let mut utf8 = [0; 4];
    let mark = MARK.encode_utf8(&mut utf8).as_bytes();
    let escaped = |w: &[u8]| w.eq_ignore_ascii_case(b"\\ufdd0");
    if memchr::memmem::find(&text, mark).is_some() || text.windows(6).any(escaped) {
        return (text, 0);
    }
    let (mut out, mut marked) = (Vec::new(), 0);
    let (mut copied, mut at, mut in_string) = (0, 0, false);
    while at < text.len() {
        match text[at] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => at += 1,
            b'-' | b'0'..=b'9' if !in_string => {
                let end = text[at..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(text.len(), |len| at + len);
                let token = &text[at..end];
                if is_json_number(token) && out_of_range(token) {
                    out.extend_from_slice(&text[copied..at]);
                    out.push(b'"');
                    out.extend_from_slice(mark);
                    out.extend_from_slice(token);
                    out.push(b'"');
                    copied = end;
                    marked += 1;
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    if marked == 0 {
        return (text, 0);
    }
    out.extend_from_slice(&text[copied..]);
    (out, marked)
}

/// Whether `token` is a JSON number (RFC 8259 §6): `-? (0 | [1-9][0-9]*) (. [0-9]+)?
/// ([eE] [+-]? [0-9]+)?`.
fn is_json_number(token: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let rest = token.strip_prefix(b"-").unwrap_or(token);
    let int = digits(rest);
    if int == 0 || (int > 1 && rest[0] == b'0') {
        return false;
    }
    let mut rest = &rest[int..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = digits(fraction);
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    if let Some(exponent) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let exponent = exponent
            .strip_prefix(b"+")
            .or_else(|| exponent.strip_prefix(b"-"))
            .unwrap_or(exponent);
        let n = digits(exponent);
        return n > 0 && n == exponent.len();
    }
    rest.is_empty()
}

/// Whether the JSON number `token` rounds to an infinite f64 (serde_json's `number out of
/// range`; one that rounds to 0 is read as 0).
fn out_of_range(token: &[u8]) -> bool {
    std::str::from_utf8(token)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .is_some_and(f64::is_infinite)
}

/// The first string [`mark_out_of_range_numbers`] wrote in `value`: its path from `value`
/// (`.attributes[0].value.doubleValue`) and the
/// number. Recurses as deep as `value` nests (bounded by the parse:
/// [`crate::otlp::json::shape::MAX_DEPTH`]).
pub fn find_marked(value: &Value) -> Option<(String, String)> {
    match value {
        Value::String(s) => s
            .strip_prefix(MARK)
            .map(|number| (String::new(), number.to_owned())),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            find_marked(item).map(|(path, number)| (format!("[{i}]{path}"), number))
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            find_marked(item).map(|(path, number)| (format!(".{key}{path}"), number))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_and_invalid_utf8_are_replaced_in_place() {
        let (text, n) = sanitize_json_text(
            br#"{"a":"x\ud800y","b":"\ud83d\ude00","c":"\\ud800","d":"\udc00"}"#,
        );
        assert_eq!(n, 2);
        assert_eq!(
            std::str::from_utf8(&text).ok(),
            Some(r#"{"a":"x\uFFFDy","b":"\ud83d\ude00","c":"\\ud800","d":"\uFFFD"}"#)
        );
        let (text, n) = sanitize_json_text(b"{\"a\":\"\xff\xfe ok\"}");
        assert_eq!(n, 2);
        assert_eq!(
            String::from_utf8(text).ok().as_deref(),
            Some("{\"a\":\"\u{FFFD}\u{FFFD} ok\"}")
        );
    }

    #[test]
    fn numbers_out_of_range_are_marked_and_found_again() {
        let digits = "1".repeat(400);
        let text = format!(
            r#"{{"a":[1e400, -1E+999, 1e308, 1e-400, "1e400", "\"1e400"],"b":{{"c":{digits}}}}}"#
        );
        let (marked, n) = mark_out_of_range_numbers(text.clone().into_bytes());
        assert_eq!(n, 3);
        let m = MARK;
        assert_eq!(
            String::from_utf8(marked.clone()).ok(),
            Some(format!(
                r#"{{"a":["{m}1e400", "{m}-1E+999", 1e308, 1e-400, "1e400", "\"1e400"],"b":{{"c":"{m}{digits}"}}}}"#
            ))
        );
        let value: Value = serde_json::from_slice(&marked).unwrap_or_default();
        assert_eq!(
            find_marked(&value),
            Some((".a[0]".to_owned(), "1e400".to_owned()))
        );
        assert_eq!(
            find_marked(&value["b"]),
            Some((".c".to_owned(), digits.clone()))
        );
        // Not JSON numbers: serde_json still refuses the body for them.
        for bad in ["01e400", "1.e400", "-e400"] {
            let text = format!(r#"{{"a":{bad}}}"#).into_bytes();
            assert_eq!(mark_out_of_range_numbers(text.clone()), (text, 0), "{bad}");
        }
        // A body that holds the mark already is left as it is.
        let text = "[1e400, \"\u{FDD0}\"]".as_bytes().to_vec();
        assert_eq!(mark_out_of_range_numbers(text.clone()), (text, 0));
        let text = br#"[1e400, "\uFdD0"]"#.to_vec();
        assert_eq!(mark_out_of_range_numbers(text.clone()), (text, 0));
    }
}
