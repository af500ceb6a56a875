//! The one-pass path of canonicalisation: JSON text read once, left to right, straight into
//! its canonical bytes in a reused buffer, with no tree and no copy of a string that holds
//! no escape (its input bytes are already canonical). `serde_json` is used only to unescape
//! a whole text that is one JSON string holding escapes (string-wrapped JSON).
//!
//! It covers the shapes tool arguments and results take: object keys without escapes,
//! each key once per object; integers of at most 15 digits (below 2^53, written as their
//! digits); other numbers of at most 40 characters whose exponent has at most 3 digits
//! (parsed by `str::parse::<f64>`, correctly rounded as `serde_json`'s `float_roundtrip`,
//! written by `ryu-js`); nesting below `max_depth` and below 100. Objects whose keys are
//! already in order (RFC 8785 §3.2.3, UTF-16 code units) and hold no volatile key are
//! written as they are read; others are reordered in place once closed.
//!
//! Whatever falls outside those shapes, or is not JSON as `serde_json` reads it, makes it
//! return `None` without deciding anything: the caller then takes the tree path
//! (`tree.rs`, `canonical.rs`), which handles every input. So this path only has to be
//! right for what it accepts, and the property tests (`streaming_tests.rs`) check that
//! against the RFC 8785 crate. The one exception, decided here, is text (or the content
//! of a text that is one JSON string) whose first non-blank byte cannot start a JSON value:
//! it is not JSON, hence the string it spells.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashSet;

use super::canonical::{escape, find_special, string, Limits};

/// serde_json stops at 128 levels; the tree path decides anything deeper than this.
const MAX_NESTING: usize = 100;
/// Numbers longer than this (characters) are left to the tree path.
const MAX_NUMBER_LEN: usize = 40;
/// A scratch buffer larger than this (bytes) is released after use.
const MAX_KEPT_CAPACITY: usize = 64 * 1024;

/// Buffers reused across calls on one thread.
#[derive(Default)]
pub(super) struct Scratch {
    out: Vec<u8>,
    members: Vec<Member>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch buffers (taken out for the call, so a nested call
/// gets fresh ones), keeping them for the next call unless they grew large.
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    let mut scratch = SCRATCH
        .try_with(|cell| cell.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)))
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let result = f(&mut scratch);
    if scratch.out.capacity() <= MAX_KEPT_CAPACITY
        && scratch.members.capacity() <= MAX_KEPT_CAPACITY / 16
    {
        let _ = SCRATCH.try_with(|cell| {
            if let Ok(mut kept) = cell.try_borrow_mut() {
                *kept = scratch;
            }
        });
    }
    result
}

/// The canonical bytes of `text` read as the parent module reads text (a string that is
/// JSON is the value it encodes; text that is not JSON is the string it spells), without
/// the `drop` keys; `None` when the tree path must decide. The bytes borrow `scratch`.
pub(super) fn canonical_text<'s>(
    text: &str,
    drop: &HashSet<String>,
    limits: Limits,
    scratch: &'s mut Scratch,
) -> Option<&'s [u8]> {
    scratch.out.clear();
    scratch.members.clear();
    // Canonical text is about as long as its input: grow once, not by doubling.
    scratch.out.reserve(text.len() + 16);
    let bytes = text.as_bytes();
    let start = skip_blank(bytes, 0);
    match bytes.get(start) {
        Some(b'"') => {
            // A JSON string: one further level of JSON inside it is unwrapped.
            let inner = string_content(text, start)?;
            let inner = inner.as_ref();
            let inner_start = skip_blank(inner.as_bytes(), 0);
            if inner
                .as_bytes()
                .get(inner_start)
                .is_some_and(|&b| starts_value(b))
            {
                read_value(inner, drop, limits, scratch)?;
            } else {
                spelled(inner, limits, &mut scratch.out)?;
            }
        }
        Some(&b) if starts_value(b) => read_value(text, drop, limits, scratch)?,
        _ => spelled(text, limits, &mut scratch.out)?,
    }
    Some(&scratch.out)
}

/// Text that is not JSON: the JSON string it spells, within the size limit.
fn spelled(text: &str, limits: Limits, out: &mut Vec<u8>) -> Option<()> {
    (text.len().saturating_add(2) <= limits.max_bytes).then_some(())?;
    string("", text, out);
    Some(())
}

/// The unescaped content of the JSON string at `start`, when it is the whole text (bar
/// blanks); `None` otherwise.
fn string_content(text: &str, start: usize) -> Option<std::borrow::Cow<'_, str>> {
    let bytes = text.as_bytes();
    let end = find_special(bytes, start + 1);
    match bytes.get(end) {
        Some(b'"') if skip_blank(bytes, end + 1) == bytes.len() => {
            Some(std::borrow::Cow::Borrowed(&text[start + 1..end]))
        }
        Some(b'\\') => serde_json::from_str::<String>(text)
            .ok()
            .map(std::borrow::Cow::Owned),
        _ => None,
    }
}

/// Reads one JSON value filling `text` (bar blanks) into `scratch.out`.
fn read_value(
    text: &str,
    drop: &HashSet<String>,
    limits: Limits,
    scratch: &mut Scratch,
) -> Option<()> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        pos: skip_blank(text.as_bytes(), 0),
        out: &mut scratch.out,
        members: &mut scratch.members,
        volatile: Volatile::new(drop),
        max_depth: limits.max_depth.min(MAX_NESTING),
        size: 0,
    };
    reader.value(0)?;
    reader.skip_blank();
    (reader.pos == reader.bytes.len() && reader.size <= limits.max_bytes).then_some(())
}

/// At most this many volatile keys are compared byte for byte; a longer list is hashed.
const FEW_VOLATILE_KEYS: usize = 16;

/// The volatile keys, with a cheap first test (which key lengths occur). A key whose length
/// occurs is compared byte for byte with each of a few keys (8 by default: cheaper than
/// hashing it, and no UTF-8 check), or looked up in the set when there are more.
struct Volatile<'d> {
    set: &'d HashSet<String>,
    /// The keys as bytes, when there are at most [`FEW_VOLATILE_KEYS`].
    few: Option<smallvec::SmallVec<[&'d [u8]; FEW_VOLATILE_KEYS]>>,
    /// Bit `n` set when a key of `n` bytes (`n` < 63) is in the set; bit 63 for longer.
    lengths: u64,
}

impl<'d> Volatile<'d> {
    fn new(set: &'d HashSet<String>) -> Self {
        let lengths = set.iter().fold(0, |acc, key| acc | length_bit(key.len()));
        let few =
            (set.len() <= FEW_VOLATILE_KEYS).then(|| set.iter().map(|k| k.as_bytes()).collect());
        Volatile { set, few, lengths }
    }

    /// `key` is a key's bytes as read.
    fn contains(&self, key: &[u8]) -> bool {
        self.lengths & length_bit(key.len()) != 0
            && match &self.few {
                Some(keys) => keys.contains(&key),
                None => std::str::from_utf8(key).is_ok_and(|key| self.set.contains(key)),
            }
    }
}

fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

/// One object member as written: `out[start..end]` is `"key":value`; the key is
/// `text[key.0..key.1]` (it holds no escape, so its text is its value).
#[derive(Clone, Copy, Debug)]
struct Member {
    start: usize,
    end: usize,
    key: (usize, usize),
    volatile: bool,
}

struct Reader<'t, 'o, 'd> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    out: &'o mut Vec<u8>,
    /// Members of the objects being read, innermost last.
    members: &'o mut Vec<Member>,
    volatile: Volatile<'d>,
    max_depth: usize,
    /// The parent module's JSON size estimate (`within_limits`), before keys are dropped.
    size: usize,
}

impl Reader<'_, '_, '_> {
    fn value(&mut self, depth: usize) -> Option<()> {
        match *self.bytes.get(self.pos)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string(),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn skip_blank(&mut self) {
        self.pos = skip_blank(self.bytes, self.pos);
    }

    fn add_size(&mut self, bytes: usize) {
        self.size = self.size.saturating_add(bytes);
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes
            .get(self.pos..)?
            .starts_with(word)
            .then_some(())?;
        self.pos += word.len();
        self.out.extend_from_slice(word);
        self.add_size(5);
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        (depth < self.max_depth).then_some(())?;
        self.pos += 1;
        self.out.push(b'[');
        self.skip_blank();
        let mut count = 0;
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
        } else {
            loop {
                if count > 0 {
                    self.out.push(b',');
                }
                self.value(depth + 1)?;
                count += 1;
                self.skip_blank();
                match self.bytes.get(self.pos)? {
                    b',' => {
                        self.pos += 1;
                        self.skip_blank();
                    }
                    b']' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.out.push(b']');
        self.add_size(count + 2);
        Some(())
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        (depth < self.max_depth).then_some(())?;
        self.pos += 1;
        self.out.push(b'{');
        let body = self.out.len();
        let first = self.members.len();
        let mut in_order = true;
        let mut any_volatile = false;
        self.skip_blank();
        self.add_size(2);
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
        } else {
            loop {
                let key = self.key()?;
                if self.members.len() > first {
                    let last = self.members[self.members.len() - 1].key;
                    match key_order(&self.bytes[last.0..last.1], &self.bytes[key.0..key.1]) {
                        Ordering::Less => {}
                        // A repeated key: the tree path keeps the last one.
                        Ordering::Equal => return None,
                        Ordering::Greater => in_order = false,
                    }
                    self.out.push(b',');
                }
                let start = self.out.len();
                self.out.extend_from_slice(&self.bytes[key.0 - 1..=key.1]);
                self.out.push(b':');
                self.value(depth + 1)?;
                let volatile = self.volatile.contains(&self.bytes[key.0..key.1]);
                any_volatile |= volatile;
                self.members.push(Member {
                    start,
                    end: self.out.len(),
                    key,
                    volatile,
                });
                self.skip_blank();
                match self.bytes.get(self.pos)? {
                    b',' => {
                        self.pos += 1;
                        self.skip_blank();
                    }
                    b'}' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        if !in_order || any_volatile {
            self.reorder(first, body, in_order)?;
        }
        self.members.truncate(first);
        self.out.push(b'}');
        Some(())
    }

    /// A member's key and the colon after it: the key's text range (no escapes).
    fn key(&mut self) -> Option<(usize, usize)> {
        (self.bytes.get(self.pos)? == &b'"').then_some(())?;
        let start = self.pos + 1;
        let end = find_special(self.bytes, start);
        (self.bytes.get(end)? == &b'"').then_some(())?;
        self.add_size(end - start + 4);
        self.pos = skip_blank(self.bytes, end + 1);
        (self.bytes.get(self.pos)? == &b':').then_some(())?;
        self.pos = skip_blank(self.bytes, self.pos + 1);
        Some((start, end))
    }

    /// Rewrites the members of the object whose body starts at `out[body]` sorted by key
    /// and without volatile keys; `None` on a repeated key.
    fn reorder(&mut self, first: usize, body: usize, in_order: bool) -> Option<()> {
        let bytes = self.bytes;
        let members = &mut self.members[first..];
        if !in_order {
            let key = |m: &Member| &bytes[m.key.0..m.key.1];
            members.sort_unstable_by(|a, b| key_order(key(a), key(b)));
            if members.windows(2).any(|w| key(&w[0]) == key(&w[1])) {
                return None;
            }
        }
        let tail = self.out.len();
        for (i, member) in members.iter().filter(|m| !m.volatile).enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.extend_from_within(member.start..member.end);
        }
        let len = self.out.len() - tail;
        self.out.copy_within(tail.., body);
        self.out.truncate(body + len);
        Some(())
    }
}

/// RFC 8785 §3.2.3 key order of two keys' UTF-8 bytes: by UTF-16 code units. Byte order
/// agrees with it where the first difference is between two ASCII bytes (or one key is a
/// prefix of the other); otherwise both are decoded (lossily: keys read from a `str` at
/// ASCII boundaries are valid UTF-8).
fn key_order(x: &[u8], y: &[u8]) -> Ordering {
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i].is_ascii() && y[i].is_ascii() => x[i].cmp(&y[i]),
        Some(_) => {
            let (a, b) = (String::from_utf8_lossy(x), String::from_utf8_lossy(y));
            a.encode_utf16().cmp(b.encode_utf16())
        }
    }
}

/// JSON whitespace (RFC 8259 `ws`): space, tab, line feed, carriage return.
fn skip_blank(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// True when `b` can start a JSON value.
fn starts_value(b: u8) -> bool {
    matches!(
        b,
        b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
    )
}

mod scalars;
#[cfg(test)]
mod tests;
