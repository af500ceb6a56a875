//! The string values of a JSON text, each with the key it sits under, without building the
//! value: a scan from quote to quote (escapes decoded only where a value has them). Text
//! that is not JSON gives whatever quoted strings it holds; nothing here fails.

use std::borrow::Cow;

/// A string value and the object key it belongs to (`None` at the top level or in an array
/// at the top level; an array inside an object takes the object's key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringValue<'a> {
    pub key: Option<Cow<'a, str>>,
    pub value: Cow<'a, str>,
}

/// The string values of `text` in order (see the module docs).
pub fn string_values(text: &str) -> Vec<StringValue<'_>> {
    let mut out = Vec::new();
    let mut key: Option<Cow<str>> = None;
    // Keys of the enclosing objects, for values in arrays.
    let mut stack: Vec<Option<Cow<str>>> = Vec::new();
    scan(text, |piece| {
        match piece {
            Piece::Key(string) => key = Some(string),
            Piece::Value(value) => out.push(StringValue {
                key: key.clone(),
                value,
            }),
            Piece::Open(b'{') => stack.push(key.take()),
            Piece::Open(_) => stack.push(key.clone()),
            Piece::Close => key = stack.pop().flatten(),
        }
        true
    });
    out
}

/// Calls `f` with each string value of `text` in order (keys left out), without collecting
/// them, until `f` returns false.
pub fn each_value<'a>(text: &'a str, mut f: impl FnMut(Cow<'a, str>) -> bool) {
    scan(text, |piece| match piece {
        Piece::Value(value) => f(value),
        _ => true,
    });
}

/// What [`scan`] meets: a string before a `:`, another string, `{` or `[`, `}` or `]`.
enum Piece<'a> {
    Key(Cow<'a, str>),
    Value(Cow<'a, str>),
    Open(u8),
    Close,
}

/// Walks `text` from quote to quote, calling `f` with each [`Piece`] until it returns false
/// or a string does not close.
fn scan<'a>(text: &'a str, mut f: impl FnMut(Piece<'a>) -> bool) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let piece = match bytes[i] {
            b'"' => {
                let Some((string, end)) = string_at(text, i) else {
                    return;
                };
                i = end;
                let mut j = i;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if bytes.get(j) == Some(&b':') {
                    i = j + 1;
                    Piece::Key(string)
                } else {
                    Piece::Value(string)
                }
            }
            open @ (b'{' | b'[') => {
                i += 1;
                Piece::Open(open)
            }
            b'}' | b']' => {
                i += 1;
                Piece::Close
            }
            // `,` (in an array the key stays; in an object the next key replaces it) and
            // everything else between strings.
            _ => {
                i += 1;
                continue;
            }
        };
        if !f(piece) {
            return;
        }
    }
}

/// The JSON string starting at the quote `start`: its decoded value and the index after
/// its closing quote; `None` when it does not close.
fn string_at(text: &str, start: usize) -> Option<(Cow<'_, str>, usize)> {
    let bytes = text.as_bytes();
    let mut i = start + 1;
    let mut escaped = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                escaped = true;
                i += 2;
                continue;
            }
            b'"' => {
                let raw = &text[start..=i];
                let value = if escaped {
                    Cow::Owned(
                        serde_json::from_str::<String>(raw)
                            .unwrap_or_else(|_| raw[1..raw.len() - 1].to_string()),
                    )
                } else {
                    Cow::Borrowed(&text[start + 1..i])
                };
                return Some((value, i + 1));
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(Option<String>, String)> {
        string_values(text)
            .into_iter()
            .map(|s| (s.key.map(Cow::into_owned), s.value.into_owned()))
            .collect()
    }

    #[test]
    fn values_with_their_keys() {
        assert_eq!(
            pairs(
                r#"{"command": "ls \"a b\"", "n": 3, "opts": {"x": "y"}, "cmd": ["bash", "-lc"]}"#
            ),
            [
                (Some("command".into()), "ls \"a b\"".into()),
                (Some("x".into()), "y".into()),
                (Some("cmd".into()), "bash".into()),
                (Some("cmd".into()), "-lc".into()),
            ]
        );
        assert_eq!(
            pairs(r#"["a", "b"]"#),
            [(None, "a".into()), (None, "b".into())]
        );
        assert_eq!(pairs("plain text"), []);
        assert_eq!(pairs(r#"{"a": "unclosed"#), []);
        let mut seen = Vec::new();
        each_value(r#"{"k": "a", "l": ["b", "c"], "m": "d"}"#, |v| {
            seen.push(v.into_owned());
            seen.len() < 3
        });
        assert_eq!(seen, ["a", "b", "c"]);
        assert_eq!(
            pairs(r#"{"a": "\u00e9t\u00e9"}"#),
            [(Some("a".into()), "été".into())]
        );
    }
}
