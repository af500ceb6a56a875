//! [`Text`]: a string field of a span view, checked as UTF-8 when it is read rather than
//! when the view is built.
//!
//! A request's spans carry many attributes that no reader asks for (framework bookkeeping,
//! prompts of spans that are not tool calls, schemas). Checking every key and string value
//! as the view was built was 15 % of the span path on the recorded corpus
//! (`benches/instructions.rs` `wire`, timed natively with the check skipped); now only the
//! texts a reader looks at are checked, and a key lookup compares bytes.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use once_cell::race::OnceBox;

/// An attribute key or string value of a [`super::SpanView`]: the bytes as received
/// (borrowed from the request or from a decoded `Span`), read as UTF-8 each time it is read
/// (`Deref<Target = str>`, [`Text::as_str`]). Bytes that are not UTF-8 read lossily (U+FFFD
/// for each invalid sequence, as `String::from_utf8_lossy`); that copy is made on the first
/// read and kept (`once_cell`'s `OnceBox`: one pointer, so a view stays as small as with a
/// `Cow<str>`, and `Sync`, as a request's views are shared between threads).
#[derive(Clone, Default)]
pub struct Text<'a> {
    bytes: &'a [u8],
    /// The lossy reading of bytes that are not UTF-8 (never set for valid ones).
    lossy: OnceBox<String>,
}

impl<'a> Text<'a> {
    /// A text of `bytes`, unchecked until read.
    pub fn new(bytes: &'a [u8]) -> Self {
        Text {
            bytes,
            lossy: OnceBox::new(),
        }
    }

    /// The bytes as received.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The text: the bytes when they are UTF-8 (checked with `simdutf8`, SIMD on long
    /// texts), else their lossy reading.
    pub fn as_str(&self) -> &str {
        match simdutf8::basic::from_utf8(self.bytes) {
            Ok(text) => text,
            Err(_) => self
                .lossy
                .get_or_init(|| Box::new(String::from_utf8_lossy(self.bytes).into_owned())),
        }
    }

    /// The text as a `Cow` that outlives the view when the bytes are UTF-8 (borrowed from
    /// what the view borrows), owned (lossy) when they are not.
    pub fn to_cow(&self) -> Cow<'a, str> {
        match simdutf8::basic::from_utf8(self.bytes) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => Cow::Owned(self.as_str().to_owned()),
        }
    }

    /// True when the bytes are those of `key`, without checking them (bytes equal to a
    /// `str`'s are UTF-8). The test every attribute lookup makes; unlike `==` it does not
    /// match invalid bytes whose lossy reading equals a `key` holding U+FFFD.
    pub fn is(&self, key: &str) -> bool {
        self.bytes == key.as_bytes()
    }

    /// The text after `prefix` when the bytes start with `prefix`'s (only then is the text
    /// read, so a scan of every key for a prefix checks only the keys that have it). As
    /// with [`Text::is`], a `prefix` holding U+FFFD never matches a lossy reading.
    pub fn strip_prefix(&self, prefix: &str) -> Option<&str> {
        if !self.bytes.starts_with(prefix.as_bytes()) {
            return None;
        }
        // The prefix's bytes are UTF-8 and kept as they are by a lossy reading.
        self.as_str().get(prefix.len()..)
    }

    /// True when the bytes start with `prefix`'s, without reading the text.
    pub fn starts_with(&self, prefix: &str) -> bool {
        self.bytes.starts_with(prefix.as_bytes())
    }

    /// True when the bytes end with `suffix`'s, without reading the text.
    pub fn ends_with(&self, suffix: &str) -> bool {
        self.bytes.ends_with(suffix.as_bytes())
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Self {
        Text::new(text.as_bytes())
    }
}

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Texts are equal when they read the same (lossy readings included).
impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes || self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for Text<'_> {
    fn eq(&self, other: &str) -> bool {
        self.is(other) || self.as_str() == other
    }
}

impl PartialEq<&str> for Text<'_> {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_bytes_read_as_they_are() {
        let text = Text::new(b"gen_ai.tool.name");
        assert_eq!(text.as_str(), "gen_ai.tool.name");
        assert!(matches!(text.to_cow(), Cow::Borrowed("gen_ai.tool.name")));
        assert!(text.is("gen_ai.tool.name"));
        assert!(!text.is("gen_ai.tool"));
        assert_eq!(text, "gen_ai.tool.name");
        assert!(text.lossy.get().is_none(), "valid text is never copied");
    }

    #[test]
    fn invalid_bytes_read_lossily_once() {
        let text = Text::new(b"a\xffb\xc3");
        assert_eq!(text.as_str(), "a\u{fffd}b\u{fffd}");
        assert_eq!(&*text, String::from_utf8_lossy(b"a\xffb\xc3"));
        let first = text.as_str().as_ptr();
        assert_eq!(text.as_str().as_ptr(), first, "the lossy copy is kept");
        assert_eq!(
            text.to_cow(),
            Cow::<str>::Owned("a\u{fffd}b\u{fffd}".into())
        );
        // `==` compares readings; `is` compares bytes.
        assert_eq!(text, "a\u{fffd}b\u{fffd}");
        assert!(!text.is("a\u{fffd}b\u{fffd}"));
        assert_eq!(text, Text::from("a\u{fffd}b\u{fffd}"));
        assert_ne!(text, Text::from("ab"));
    }

    #[test]
    fn prefixes_are_tested_on_the_bytes() {
        let text = Text::new(b"llm.output_messages.0.message.content");
        assert_eq!(
            text.strip_prefix("llm.output_messages."),
            Some("0.message.content")
        );
        assert_eq!(text.strip_prefix("llm.input_messages."), None);
        assert!(text.starts_with("llm.") && !text.starts_with("gen_ai."));
        assert!(text.ends_with(".content") && !text.ends_with(".role"));
        // Invalid bytes after the prefix read lossily.
        let invalid = Text::new(b"gen_ai.\xffx");
        assert_eq!(invalid.strip_prefix("gen_ai."), Some("\u{fffd}x"));
    }

    #[test]
    fn a_text_is_as_small_as_a_cow() {
        // A request's views hold one key and usually one text per attribute: a text that
        // grew would grow every view of the request.
        assert_eq!(std::mem::size_of::<Text>(), std::mem::size_of::<Cow<str>>());
        assert_eq!(std::mem::size_of::<super::super::KeyValueView>(), 56);
    }

    #[test]
    fn prints_as_its_reading() {
        let text = Text::new(b"x\xff");
        assert_eq!(format!("{text}|{text:?}"), "x\u{fffd}|\"x\u{fffd}\"");
        assert_eq!(Text::default().as_str(), "");
    }
}
