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

/// True when the decimal `-?int.fraction` (JSON number syntax, no exponent; the digits
/// before and after the point) is already in its RFC 8785 form (ECMAScript
/// `Number.prototype.toString` of the nearest double): `fraction` not ending in `0`, at
/// most 15 significant digits, and at least 1e-6 in magnitude. Such a decimal is the
/// shortest one that reads back as its double (any two decimals of ≤ 15 significant digits
/// are distinct doubles), and ECMAScript writes numbers from 1e-6 to 1e21 in plain decimal
/// notation, so parsing and formatting it would write the same bytes.
fn written_canonically(int: &[u8], fraction: &[u8]) -> bool {
    if fraction.last().is_none_or(|&d| d == b'0') {
        return false;
    }
    let significant = if int == b"0" {
        let zeros = fraction.iter().take_while(|&&d| d == b'0').count();
        // 0.000001 (five zeros) is 1e-6, the smallest written without an exponent
        if zeros > 5 {
            return false;
        }
        fraction.len() - zeros
    } else {
        int.len() + fraction.len()
    };
    significant <= 15
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

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// RFC 8259 number grammar, as `serde_json` enforces it.
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        if self.bytes[self.pos] == b'-' {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.bytes.get(self.pos)? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let int_end = self.pos;
        let mut integer = true;
        let mut fraction = None;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            let fraction_start = self.pos;
            (self.digits() > 0).then_some(())?;
            fraction = Some(fraction_start..self.pos);
            integer = false;
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            (1..=3).contains(&self.digits()).then_some(())?;
            integer = false;
            fraction = None;
        }
        self.add_size(24);
        if integer {
            // Below 10^15 < 2^53: exact as a double, which ECMAScript writes as its
            // digits; `-0` is `0`. Longer integers may be big (tagged encoding).
            (int_end - int_start <= 15).then_some(())?;
            if &self.bytes[int_start..int_end] == b"0" {
                self.out.push(b'0');
            } else {
                self.out.extend_from_slice(&self.bytes[start..int_end]);
            }
            return Some(());
        }
        let plain_decimal = fraction.map(|f| (&self.bytes[int_start..int_end], &self.bytes[f]));
        if plain_decimal.is_some_and(|(int, fraction)| written_canonically(int, fraction)) {
            self.out.extend_from_slice(&self.bytes[start..self.pos]);
            return Some(());
        }
        (self.pos - start <= MAX_NUMBER_LEN).then_some(())?;
        let spelled = &self.text[start..self.pos];
        let value: f64 = spelled.parse().ok()?;
        // Out of range is an error for serde_json; an underflow to zero is left to it too.
        let underflow = value == 0.0
            && spelled
                .bytes()
                .take_while(|b| !matches!(b, b'e' | b'E'))
                .any(|b| (b'1'..=b'9').contains(&b));
        (value.is_finite() && !underflow).then_some(())?;
        self.out
            .extend_from_slice(ryu_js::Buffer::new().format_finite(value).as_bytes());
        Some(())
    }

    /// A string value: copied as it is when it holds no escape, else re-escaped.
    fn string(&mut self) -> Option<()> {
        let open = self.pos;
        let end = find_special(self.bytes, open + 1);
        match self.bytes.get(end)? {
            b'"' => {
                self.out.extend_from_slice(&self.bytes[open..=end]);
                self.add_size(end - open + 1);
                self.pos = end + 1;
                Some(())
            }
            b'\\' => self.escaped_string(open, end),
            _ => None,
        }
    }

    /// A string holding escapes, from its opening quote at `open`; `first` is the first
    /// backslash. Writes RFC 8785 §3.2.2.2 escapes; counts the unescaped length.
    fn escaped_string(&mut self, open: usize, first: usize) -> Option<()> {
        self.out.extend_from_slice(&self.bytes[open..first]);
        let mut len = first - open - 1;
        let mut at = first;
        loop {
            match *self.bytes.get(at)? {
                b'"' => break,
                b'\\' => {}
                _ => return None,
            }
            let code = match *self.bytes.get(at + 1)? {
                b'"' => u32::from(b'"'),
                b'\\' => u32::from(b'\\'),
                b'/' => u32::from(b'/'),
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => u32::from(b'\n'),
                b'r' => u32::from(b'\r'),
                b't' => u32::from(b'\t'),
                b'u' => {
                    let (code, used) = self.unicode_escape(at)?;
                    at += used - 2;
                    code
                }
                _ => return None,
            };
            at += 2;
            let c = char::from_u32(code)?;
            len += c.len_utf8();
            match u8::try_from(code) {
                Ok(b) if b < 0x20 || b == b'"' || b == b'\\' => escape(b, &mut *self.out),
                _ => self
                    .out
                    .extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
            }
            let run_end = find_special(self.bytes, at);
            self.out.extend_from_slice(self.bytes.get(at..run_end)?);
            len += run_end - at;
            at = run_end;
        }
        self.out.push(b'"');
        self.add_size(len + 2);
        self.pos = at + 1;
        Some(())
    }

    /// The code point of the `\u` escape at `at` (a surrogate pair counts as one) and the
    /// bytes it spans; `None` for a lone surrogate, which `serde_json` refuses.
    fn unicode_escape(&self, at: usize) -> Option<(u32, usize)> {
        let unit = |at: usize| -> Option<u32> {
            let hex = std::str::from_utf8(self.bytes.get(at + 2..at + 6)?).ok()?;
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit())
                .then(|| u32::from_str_radix(hex, 16).ok())?
        };
        let high = unit(at)?;
        match high {
            0xdc00..=0xdfff => None,
            0xd800..=0xdbff => {
                (self.bytes.get(at + 6..at + 8)? == b"\\u").then_some(())?;
                let low = unit(at + 6)?;
                (0xdc00..=0xdfff)
                    .contains(&low)
                    .then(|| (0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00), 12))
            }
            _ => Some((high, 6)),
        }
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

#[cfg(test)]
mod tests;
