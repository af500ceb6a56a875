//! Arguments echoed in results: `cd: fastjson/: No such file or directory`,
//! `No matches found for "X" in /repo`. The words of a call's arguments are masked in its
//! result (`<arg>`), so the same outcome for different arguments reads the same.
//!
//! The words are each string value of the arguments (3 to [`MAX_WORD`] bytes, with a
//! letter) and, for a one-line value with balanced quotes and at most [`MAX_SPLIT_WORDS`]
//! shell words (a command line, a query; not prose or a script), each of its words. A word is masked where it stands
//! alone: a word that starts or ends with a letter or digit must not continue one in the
//! result (`deser` is not masked inside `deserializer`).

use std::borrow::Cow;

use memchr::memmem;

/// Longest argument word masked, in bytes.
pub const MAX_WORD: usize = 200;

/// Values with more shell words than this (prose, scripts) are masked only whole.
pub const MAX_SPLIT_WORDS: usize = 8;

/// Most words masked per call (the longest first).
pub const MAX_WORDS: usize = 16;

/// The placeholder of a masked argument word.
pub const PLACEHOLDER: &str = "<arg>";

/// The words of `arguments` (text as captured) to mask, longest first (see the module
/// docs). JSON arguments give their string values (keys are not echoed as such); other text
/// is one value.
pub fn argument_words(arguments: &str) -> Vec<String> {
    let trimmed = arguments.trim_start();
    if trimmed.starts_with(['{', '[']) {
        words_of_values(
            super::json_scan::string_values(trimmed)
                .into_iter()
                .map(|s| s.value.into_owned())
                .collect(),
        )
    } else {
        words_of_values(vec![arguments.to_string()])
    }
}

/// [`argument_words`] of a structured value.
pub fn value_words(value: &serde_json::Value) -> Vec<String> {
    let mut values = Vec::new();
    string_values(value, &mut values);
    words_of_values(values)
}

fn string_values(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| string_values(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| string_values(v, out)),
        _ => {}
    }
}

pub(super) fn words_of_values(values: Vec<String>) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let keep = |w: &str| (3..=MAX_WORD).contains(&w.len()) && w.chars().any(char::is_alphabetic);
    for value in values {
        let whole = value.trim();
        if keep(whole) {
            words.push(whole.to_string());
        }
        if whole.contains('\n') || !super::shell::quotes_balance(whole) {
            continue;
        }
        let split = super::shell::words(whole);
        if split.len() > 1 && split.len() <= MAX_SPLIT_WORDS {
            words.extend(split.into_iter().filter(|w| keep(w)));
        }
    }
    words.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    words.dedup();
    words.truncate(MAX_WORDS);
    words
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with each of `words` (longest first) replaced by [`PLACEHOLDER`] where it stands
/// alone; borrowed when none occurs.
pub fn mask<'t>(text: &'t str, words: &[String]) -> Cow<'t, str> {
    let mut out = Cow::Borrowed(text);
    for word in words {
        let finder = memmem::Finder::new(word.as_bytes());
        let haystack = out.as_bytes();
        let starts_word = word.starts_with(is_word_char);
        let ends_word = word.ends_with(is_word_char);
        let mut cuts = Vec::new();
        for at in finder.find_iter(haystack) {
            let end = at + word.len();
            let before = out[..at].chars().next_back();
            let after = out[end..].chars().next();
            let continues_before = starts_word && before.is_some_and(is_word_char);
            let continues_after = ends_word && after.is_some_and(is_word_char);
            let alone = !(continues_before || continues_after);
            if alone && cuts.last().is_none_or(|&(_, last_end)| at >= last_end) {
                cuts.push((at, end));
            }
        }
        if cuts.is_empty() {
            continue;
        }
        let mut masked = String::with_capacity(out.len());
        let mut from = 0;
        for (at, end) in cuts {
            masked.push_str(&out[from..at]);
            masked.push_str(PLACEHOLDER);
            from = end;
        }
        masked.push_str(&out[from..]);
        out = Cow::Owned(masked);
    }
    out
}

/// Letters of `text` outside markup tags (`<returncode>`, `</output>`, `<arg>`: a `<`, up
/// to 40 characters without whitespace or `<`, a `>`), counted up to `limit`: how much a
/// result says, to tell an outcome from an empty or trivially short success.
pub fn letters(text: &str, limit: usize) -> usize {
    let bytes = text.as_bytes();
    let mut count = 0;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'<' {
            if let Some(after) = tag_end(&text[i + 1..]) {
                i += 1 + after;
                continue;
            }
        }
        // ASCII decided from the byte; other characters decoded.
        let (alphabetic, len) = if b.is_ascii() {
            (b.is_ascii_alphabetic(), 1)
        } else {
            let c = text[i..].chars().next().unwrap_or_default();
            (c.is_alphabetic(), c.len_utf8())
        };
        if alphabetic {
            count += 1;
            if count >= limit {
                return count;
            }
        }
        i += len;
    }
    count
}

/// The bytes of `rest` (what follows a `<`) up to and including the `>` that closes a
/// markup tag: within 41 characters, before any whitespace or `<`; `None` when none does.
fn tag_end(rest: &str) -> Option<usize> {
    rest.char_indices()
        .take(41)
        .find(|&(_, c)| c == '>' || c == '<' || c.is_whitespace())
        .filter(|&(_, c)| c == '>')
        .map(|(at, _)| at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_of_commands_and_values() {
        assert_eq!(
            argument_words(r#"{"command": "cd fastjson/"}"#),
            ["cd fastjson/", "fastjson/"]
        );
        let words = argument_words(r#"{"command": "find_file \"custom key\" deser"}"#);
        assert!(words.contains(&"custom key".to_string()), "{words:?}");
        assert!(words.contains(&"deser".to_string()), "{words:?}");
        // prose is masked whole only: its common words stay in the result
        let prose =
            "DISCUSSION\nThe errors persist. Let us check the syntax of the file once more.";
        assert_eq!(argument_words(prose).len(), 1);
        // prose typed as a command (an apostrophe leaves a quote open) is not split either
        assert_eq!(
            argument_words("The EOF and syntax error persist. Let's retry.").len(),
            1
        );
        // numbers alone are not words
        assert!(argument_words(r#"{"line": "527"}"#).is_empty());
    }

    #[test]
    fn masking_where_a_word_stands_alone() {
        let words = argument_words(r#"{"command": "find_file \"custom key\" deser"}"#);
        assert_eq!(
            mask(
                r#"No matches found for "custom key" in /repo/deser"#,
                &words
            ),
            r#"No matches found for "<arg>" in /repo/<arg>"#
        );
        let other = argument_words(r#"{"command": "find_file \"custom key\" access"}"#);
        assert_eq!(
            mask(
                r#"No matches found for "custom key" in /repo/access"#,
                &other
            ),
            mask(
                r#"No matches found for "custom key" in /repo/deser"#,
                &words
            )
        );
        assert_eq!(mask("a deserializer", &["deser".into()]), "a deserializer");
        assert!(matches!(mask("nothing here", &words), Cow::Borrowed(_)));
    }

    #[test]
    fn letters_outside_tags() {
        let empty = "<returncode>0</returncode>\n<output>\n</output>";
        assert_eq!(letters(empty, 100), 0);
        assert_eq!(letters("<arg>: command not found", 100), 15);
        assert_eq!(letters("a < b and c > d", 100), 7);
        assert_eq!(letters("abcdef", 3), 3);
    }

    /// `letters` as first written (char by char), for checking the byte-wise one.
    fn letters_as_first_written(text: &str, limit: usize) -> usize {
        let mut count = 0;
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c == '<' {
                let tag_end = rest[1..]
                    .char_indices()
                    .take(41)
                    .find(|&(_, c)| c == '>' || c == '<' || c.is_whitespace())
                    .filter(|&(_, c)| c == '>');
                if let Some((at, _)) = tag_end {
                    rest = &rest[at + 2..];
                    continue;
                }
            }
            if c.is_alphabetic() {
                count += 1;
                if count >= limit {
                    return count;
                }
            }
            rest = &rest[c.len_utf8()..];
        }
        count
    }

    proptest::proptest! {
        #[test]
        fn letters_equal_the_first_written(text in "([<>/ a-z0-9\u{e9}\u{3b1}\u{2003}\u{4e00}_=\n]|\\PC)*", limit in 0usize..40) {
            proptest::prop_assert_eq!(letters(&text, limit), letters_as_first_written(&text, limit));
        }
    }
}
