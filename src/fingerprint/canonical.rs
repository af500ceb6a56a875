//! RFC 8785 (JCS) canonical JSON written straight into a [`Sink`] (the SHA-256 hasher),
//! without building intermediate strings: the same bytes `serde_json_canonicalizer` writes
//! for the stripped value (and, for values holding big integers, for the tagged value; see
//! the parent module's docs).
//!
//! Two passes over a [`Tree`]:
//! 1. **plan**: the parent module's limits (nesting ≤ `max_depth`, JSON size estimate ≤
//!    `max_bytes`, both on the value *before* volatile keys are removed, as a `Value` map
//!    holds it: duplicate keys keep the last), whether a kept integer has |n| ≥ 2^53, and
//!    each object's members sorted by the UTF-16 code units of their keys (RFC 8785
//!    §3.2.3), duplicates and volatile keys left out.
//! 2. **write**: numbers as ECMAScript writes doubles (`ryu-js`, RFC 8785 §3.2.2.3),
//!    strings with the escapes of RFC 8785 §3.2.2.2 (`\"`, `\\`, `\b` `\f` `\n` `\r` `\t`,
//!    other controls `\u00xx`, everything else verbatim).
//!
//! Recursion depth is bounded by the nesting of the tree: `serde_json` stops parsing text
//! at 128 levels, and a structured value is checked against `max_depth` before its tree is
//! built.

use std::collections::HashSet;

use super::tree::{Node, Tree};
use super::Sink;

/// 2^53: integers at or beyond this magnitude are not exact as doubles.
const EXACT_DOUBLE_LIMIT: u64 = 1 << 53;
/// Prefix of a value holding integers with |n| ≥ 2^53 (tagged JCS, parent module docs).
pub(super) const BIG_INT_TAG: &[u8] = b"\0jcs-bigint\0";

/// The parent module's size and depth limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) max_depth: usize,
    pub(super) max_bytes: usize,
}

/// Writes the canonical form of `tree` without the `drop` keys into `sink`. Returns
/// `false`, having written nothing, when the value is too deep or too large (the caller
/// then hashes it raw).
pub(super) fn write_canonical(
    tree: &mut Tree<'_>,
    drop: &HashSet<String>,
    limits: Limits,
    sink: &mut impl Sink,
) -> bool {
    if tree.nodes.is_empty() {
        return false;
    }
    let mut plan = Plan {
        drop,
        limits,
        size: 0,
        big_ints: false,
        members: Vec::new(),
    };
    if plan.visit(tree, 0, 0, true).is_none() {
        return false;
    }
    let mut out = Buffered::new(sink);
    let writer = Writer {
        tree,
        members: &plan.members,
        tagged: plan.big_ints,
    };
    if plan.big_ints {
        out.put(BIG_INT_TAG);
    }
    writer.value(0, &mut out);
    out.flush();
    true
}

/// Pass 1: limits, big integers, sorted member lists.
struct Plan<'d> {
    drop: &'d HashSet<String>,
    limits: Limits,
    /// The JSON size estimate of the parent module's `within_limits`.
    size: usize,
    big_ints: bool,
    /// Value-node indices of object members, one sorted range per object (the key is the
    /// node before its value).
    members: Vec<u32>,
}

impl Plan<'_> {
    fn add(&mut self, bytes: usize) -> Option<()> {
        self.size = self.size.saturating_add(bytes);
        (self.size <= self.limits.max_bytes).then_some(())
    }

    /// Plans the subtree at `idx` (nesting `depth`, `kept` when no enclosing key is
    /// volatile); `None` when a limit is exceeded.
    fn visit(&mut self, tree: &mut Tree<'_>, idx: usize, depth: usize, kept: bool) -> Option<()> {
        match tree.nodes[idx] {
            Node::Null | Node::Bool(_) => self.add(5),
            Node::U64(u) => {
                self.big_ints |= kept && u >= EXACT_DOUBLE_LIMIT;
                self.add(24)
            }
            Node::I64(i) => {
                self.big_ints |= kept && i.unsigned_abs() >= EXACT_DOUBLE_LIMIT;
                self.add(24)
            }
            Node::F64(_) => self.add(24),
            Node::Str(_) | Node::Unescaped { .. } => self.add(tree.str_at(idx).len() + 2),
            Node::Array { end } => {
                if depth >= self.limits.max_depth {
                    return None;
                }
                let mut child = idx + 1;
                let mut count = 0;
                while child < end {
                    self.visit(tree, child, depth + 1, kept)?;
                    child = tree.skip(child);
                    count += 1;
                }
                self.add(count + 2)
            }
            Node::Object { end, .. } => {
                if depth >= self.limits.max_depth {
                    return None;
                }
                let start = self.members.len();
                let mut key = idx + 1;
                while key < end {
                    self.members.push(index(key + 1));
                    key = tree.skip(key + 1);
                }
                let tree_ref: &Tree<'_> = tree;
                let members = &mut self.members[start..];
                // Stable: of equal keys the last stays last, and is the one kept.
                members.sort_by(|a, b| {
                    let (a, b) = (
                        tree_ref.str_at(*a as usize - 1),
                        tree_ref.str_at(*b as usize - 1),
                    );
                    a.encode_utf16().cmp(b.encode_utf16())
                });
                let mut kept_len = 0;
                for i in 0..members.len() {
                    let last_of_key = members.get(i + 1).is_none_or(|next| {
                        tree_ref.str_at(*next as usize - 1)
                            != tree_ref.str_at(members[i] as usize - 1)
                    });
                    if last_of_key {
                        members[kept_len] = members[i];
                        kept_len += 1;
                    }
                }
                self.members.truncate(start + kept_len);
                let mut keys_size = 2usize;
                for i in start..start + kept_len {
                    let key = tree.str_at(self.members[i] as usize - 1);
                    keys_size = keys_size.saturating_add(key.len() + 4);
                }
                self.add(keys_size)?;
                // Volatile keys count towards the limits but are left out of the list.
                let mut written = start;
                for i in start..start + kept_len {
                    let value = self.members[i] as usize;
                    let volatile = self.drop.contains(tree.str_at(value - 1));
                    self.visit(tree, value, depth + 1, kept && !volatile)?;
                    if !volatile {
                        self.members[written] = index(value);
                        written += 1;
                    }
                }
                // Nested objects appended their own ranges after ours; ours is the prefix
                // `start..written` of what was kept (the tail of it is unused).
                if let Node::Object { members, .. } = &mut tree.nodes[idx] {
                    *members = (index(start), index(written - start));
                }
                Some(())
            }
        }
    }
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Pass 2: the canonical bytes.
struct Writer<'t, 'a> {
    tree: &'t Tree<'a>,
    members: &'t [u32],
    /// Big-integer encoding: strings `s` → `"s" + s`, big integers → `"n" + digits`.
    tagged: bool,
}

impl Writer<'_, '_> {
    fn value(&self, idx: usize, out: &mut Buffered<'_, impl Sink>) {
        match self.tree.nodes[idx] {
            Node::Null => out.put(b"null"),
            Node::Bool(b) => out.put(if b { b"true" } else { b"false" }),
            Node::U64(u) if self.tagged && u >= EXACT_DOUBLE_LIMIT => big_int(u, out),
            Node::I64(i) if self.tagged && i.unsigned_abs() >= EXACT_DOUBLE_LIMIT => {
                big_int(i, out)
            }
            Node::U64(u) => number(u as f64, out),
            Node::I64(i) => number(i as f64, out),
            Node::F64(f) => number(f, out),
            Node::Str(_) | Node::Unescaped { .. } => {
                let tag = if self.tagged { "s" } else { "" };
                string(tag, self.tree.str_at(idx), out);
            }
            Node::Array { end } => {
                out.put(b"[");
                let mut child = idx + 1;
                while child < end {
                    if child > idx + 1 {
                        out.put(b",");
                    }
                    self.value(child, out);
                    child = self.tree.skip(child);
                }
                out.put(b"]");
            }
            Node::Object {
                members: (start, len),
                ..
            } => {
                out.put(b"{");
                let range = start as usize..start as usize + len as usize;
                for (i, value) in self.members[range].iter().enumerate() {
                    if i > 0 {
                        out.put(b",");
                    }
                    let value = *value as usize;
                    string("", self.tree.str_at(value - 1), out);
                    out.put(b":");
                    self.value(value, out);
                }
                out.put(b"}");
            }
        }
    }
}

/// A finite double as ECMAScript's `Number.prototype.toString` writes it.
fn number(value: f64, out: &mut impl Sink) {
    if value.is_finite() {
        out.put(ryu_js::Buffer::new().format_finite(value).as_bytes());
    }
}

/// A big integer in the tagged encoding: the JSON string `"n" + digits`.
fn big_int(value: impl std::fmt::Display, out: &mut impl Sink) {
    use std::io::Write;
    let mut digits = [0u8; 24];
    let mut cursor = std::io::Cursor::new(&mut digits[..]);
    // 20 digits and a sign fit.
    let _ = write!(cursor, "{value}");
    let len = cursor.position() as usize;
    out.put(b"\"n");
    out.put(&digits[..len]);
    out.put(b"\"");
}

/// `"` + `tag` + `s` escaped + `"` (RFC 8785 §3.2.2.2, as `serde_json` escapes).
pub(super) fn string(tag: &str, s: &str, out: &mut impl Sink) {
    out.put(b"\"");
    out.put(tag.as_bytes());
    let bytes = s.as_bytes();
    // Most strings need no escape: one scan, eight bytes at a time, and one copy.
    let mut run = 0;
    let mut at = find_special(bytes, 0);
    while let Some(&b) = bytes.get(at) {
        out.put(&bytes[run..at]);
        escape(b, out);
        run = at + 1;
        at = find_special(bytes, run);
    }
    out.put(&bytes[run..]);
    out.put(b"\"");
}

/// The RFC 8785 §3.2.2.2 escape of `"`, `\` or a control byte (< 0x20): the short forms
/// `\"` `\\` `\b` `\f` `\n` `\r` `\t`, else `\u00xx` in lowercase hex. Any other byte is
/// written as it is.
pub(super) fn escape(b: u8, out: &mut impl Sink) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.put(b"\\\""),
        b'\\' => out.put(b"\\\\"),
        0x08 => out.put(b"\\b"),
        0x0c => out.put(b"\\f"),
        b'\n' => out.put(b"\\n"),
        b'\r' => out.put(b"\\r"),
        b'\t' => out.put(b"\\t"),
        0x00..=0x1f => out.put(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
        _ => out.put(&[b]),
    }
}

/// Batches the many small pieces of canonical JSON into fewer hasher updates.
struct Buffered<'s, S: Sink> {
    sink: &'s mut S,
    buf: [u8; 512],
    len: usize,
}

impl<'s, S: Sink> Buffered<'s, S> {
    fn new(sink: &'s mut S) -> Self {
        Buffered {
            sink,
            buf: [0; 512],
            len: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buf.len() {
            self.flush();
            if bytes.len() >= self.buf.len() {
                self.sink.put(bytes);
                return;
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn flush(&mut self) {
        if self.len > 0 {
            self.sink.put(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

impl<S: Sink> Sink for Buffered<'_, S> {
    fn put(&mut self, bytes: &[u8]) {
        Buffered::put(self, bytes);
    }
}

/// The index of the first `"`, `\` or control byte (< 0x20) at or after `at`, or
/// `bytes.len()`. Eight bytes at a time.
pub(super) fn find_special(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let hits = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if hits != 0 {
            return at + (hits.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&b) = bytes.get(at) {
        if b < 0x20 || b == b'"' || b == b'\\' {
            return at;
        }
        at += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_bytes_are_found_in_any_lane() {
        for len in 0..20 {
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = special;
                    assert_eq!(find_special(&bytes, 0), at);
                }
            }
            let mut plain = vec![0x7f_u8; len];
            plain.extend("é€".bytes());
            assert_eq!(find_special(&plain, 0), plain.len());
        }
    }
}
