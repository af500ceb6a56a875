//! Fingerprints (DESIGN §3): canonical JSON (RFC 8785) after volatile keys are removed,
//! hashed with SHA-256; external form is an HMAC-SHA256 under `fingerprint_key`.
//!
//! Canonicalisation of a [`Payload`] (the rules of `tests/fixtures/oracle/reference.py`,
//! `canonical`/`_decode`/`_strip`):
//! - [`Payload::Text`] that parses as JSON is the value it encodes; when that value is a
//!   string that parses as JSON again, it is that value (one further level of unwrapping).
//!   [`Payload::Bytes`] holding UTF-8 JSON is read the same way. [`Payload::Json`] is taken
//!   as-is.
//! - Keys named in the volatile set are removed from objects at any depth.
//! - The value is written in RFC 8785 (JCS) form, so key order and number spelling (`1`,
//!   `1.0`, `1e0`) never matter, while array order, types and code points do. It is
//!   written without intermediate strings: text in the common shapes in one pass into a
//!   reused buffer hashed in one call (`fast.rs`), anything else from a borrowed tree of
//!   the input (`canonical.rs`, `tree.rs`). The bytes are those `serde_json_canonicalizer`
//!   writes for the parsed, stripped `Value` (`reference.rs`, checked by property tests).
//!
//! Deviations from plain JCS, each documented where it is implemented:
//! - **Big integers**: JCS writes every number as an IEEE-754 double, so 9007199254740993
//!   and 9007199254740992 would collide. A value holding an integer with |n| ≥ 2^53 (as the
//!   reference, which keeps Python ints exact and only folds integral floats below 2^53) is
//!   encoded under a separate tag: every string `s` becomes `"s" + s` and every such
//!   integer becomes the string `"n" + digits` before JCS. Integers outside the 64-bit range
//!   are parsed by `serde_json` as doubles and so compare as doubles (known limit).
//! - **Text that is not JSON** is, as in the reference's `_decode`, the string it spells:
//!   `abc` and `"abc"` (quoted JSON) are one value, canonicalised as the JSON string.
//! - **Raw hashing**: bytes that are not UTF-8, payloads larger than `max_bytes` and
//!   structured values nested deeper than `max_depth` are hashed as their raw bytes (a
//!   structured value: its compact JSON, written without recursion) under a raw tag. Tags
//!   start with a NUL byte, which no JCS text starts with, so a raw payload never collides
//!   with a canonical one. Values nested 65..128 deep are canonicalised by the reference
//!   but hashed raw here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::conventions::event::{CallStatus, Payload};

mod canonical;
mod fast;
mod matching;
mod recent;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod streaming_tests;
mod tree;

pub use matching::{MatchHash, MatchingKey};
pub use recent::RecentFingerprints;

use canonical::{write_canonical, Limits};
use tree::Tree;

/// A SHA-256 digest.
pub type Fingerprint = [u8; 32];

/// Prefix of a payload hashed as raw bytes (unparsable, oversized or too deep).
const RAW_TAG: &[u8] = b"\0raw\0";

/// Fingerprinting settings (DESIGN §3 defaults).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FingerprintConfig {
    /// Object keys removed at any depth from tool-call arguments (exact names).
    pub volatile_keys: Vec<String>,
    /// Object keys removed at any depth from tool results (exact names).
    pub result_volatile_keys: Vec<String>,
    /// Extra argument keys removed for one tool name (exact tool name → key names).
    pub tool_volatile_keys: BTreeMap<String, Vec<String>>,
    /// Payloads larger than this (bytes; for structured values an estimate of their JSON
    /// size) are hashed raw.
    pub max_bytes: usize,
    /// Values nested deeper than this (arrays/objects) are hashed raw.
    pub max_depth: usize,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect();
        FingerprintConfig {
            volatile_keys: keys(&[
                "timestamp",
                "request_id",
                "trace_id",
                "span_id",
                "nonce",
                "now",
                "_ts",
                "correlation_id",
            ]),
            result_volatile_keys: keys(&["tool_call_id"]),
            tool_volatile_keys: BTreeMap::new(),
            max_bytes: 1024 * 1024,
            max_depth: 64,
        }
    }
}

/// Computes call and result fingerprints.
#[derive(Clone, Debug)]
pub struct Fingerprinter {
    volatile_keys: HashSet<String>,
    result_volatile_keys: HashSet<String>,
    /// Per tool: the full set of volatile argument keys (defaults ∪ the tool's extras).
    tool_volatile_keys: HashMap<String, HashSet<String>>,
    max_bytes: usize,
    max_depth: usize,
    /// The key of the matching hashes ([`MatchingKey::process`] unless set).
    matching: MatchingKey,
}

impl Default for Fingerprinter {
    fn default() -> Self {
        Fingerprinter::new(&FingerprintConfig::default())
    }
}

impl Fingerprinter {
    /// A fingerprinter applying `config`.
    pub fn new(config: &FingerprintConfig) -> Self {
        let volatile_keys: HashSet<String> = config.volatile_keys.iter().cloned().collect();
        let tool_volatile_keys = config
            .tool_volatile_keys
            .iter()
            .map(|(tool, extra)| {
                let mut keys = volatile_keys.clone();
                keys.extend(extra.iter().cloned());
                (tool.clone(), keys)
            })
            .collect();
        Fingerprinter {
            volatile_keys,
            result_volatile_keys: config.result_volatile_keys.iter().cloned().collect(),
            tool_volatile_keys,
            max_bytes: config.max_bytes,
            max_depth: config.max_depth,
            matching: MatchingKey::process().clone(),
        }
    }

    /// SHA-256(tool_name ‖ 0x00 ‖ canonical arguments).
    pub fn call_fingerprint(&self, tool_name: &str, arguments: &Payload) -> Fingerprint {
        self.call_fingerprint_with(tool_name, arguments, self.call_volatile_keys(tool_name))
    }

    /// The volatile keys removed from `tool_name`'s arguments: its `[[tools]]` list, else
    /// the global one.
    fn call_volatile_keys(&self, tool_name: &str) -> &HashSet<String> {
        self.tool_volatile_keys
            .get(tool_name)
            .unwrap_or(&self.volatile_keys)
    }

    /// A hasher fed the call fingerprint's prefix: `tool_name ‖ 0x00`.
    fn call_hasher(tool_name: &str) -> Sha256 {
        let mut hasher = Sha256::new();
        hasher.update(tool_name.as_bytes());
        hasher.update([0u8]);
        hasher
    }

    /// As [`Fingerprinter::call_fingerprint`], removing exactly `volatile_keys` (a
    /// `[[tools]]` entry's list: the global keys and its own).
    pub fn call_fingerprint_with(
        &self,
        tool_name: &str,
        arguments: &Payload,
        volatile_keys: &HashSet<String>,
    ) -> Fingerprint {
        let mut hasher = Self::call_hasher(tool_name);
        self.feed_canonical(arguments, volatile_keys, &mut hasher);
        hasher.finalize().into()
    }

    /// [`Fingerprinter::call_fingerprint`] (or, with `volatile_keys`,
    /// [`Fingerprinter::call_fingerprint_with`]) of `normalize(arguments)` when that gives
    /// a value, else of `arguments`, where `normalize` reads arguments a framework recorded
    /// in another syntax (the conventions' Python literals:
    /// `conventions::wrappers::python_literal_arguments`) and returns `None` for text that
    /// is JSON already.
    ///
    /// Arguments that are a JSON object or array (text whose first byte past JSON
    /// whitespace is `{` or `[`) are fingerprinted by the one-pass path first: what it
    /// accepts is JSON as `serde_json` reads it ([`fast`]), which `normalize` leaves as it
    /// is, so `normalize` runs only for the rest and such arguments are parsed once, not
    /// once to tell whether they are JSON and again to fingerprint them.
    pub fn call_fingerprint_normalized(
        &self,
        tool_name: &str,
        arguments: &Payload,
        volatile_keys: Option<&HashSet<String>>,
        normalize: impl FnOnce(&Payload) -> Option<Payload>,
    ) -> Fingerprint {
        let mut hasher = Self::call_hasher(tool_name);
        self.feed_call_normalized(tool_name, arguments, volatile_keys, normalize, &mut hasher);
        hasher.finalize().into()
    }

    /// Feeds the canonical arguments of [`Fingerprinter::call_fingerprint_normalized`]
    /// (not the `tool_name ‖ 0x00` prefix) to `sink`.
    fn feed_call_normalized(
        &self,
        tool_name: &str,
        arguments: &Payload,
        volatile_keys: Option<&HashSet<String>>,
        normalize: impl FnOnce(&Payload) -> Option<Payload>,
        sink: &mut impl Sink,
    ) {
        let drop = volatile_keys.unwrap_or_else(|| self.call_volatile_keys(tool_name));
        if let Payload::Text(text) = arguments {
            let json_container = text
                .trim_start_matches([' ', '\t', '\n', '\r'])
                .starts_with(['{', '[']);
            if json_container && self.feed_one_pass(text, drop, sink) {
                return;
            }
        }
        match normalize(arguments) {
            Some(normalized) => self.feed_canonical(&normalized, drop, sink),
            None => self.feed_canonical(arguments, drop, sink),
        }
    }

    /// SHA-256(status ‖ 0x00 ‖ canonical result or error message), status `ok`/`error`;
    /// an error is the hash of its message whether or not a result was captured. `None`
    /// when the call succeeded but its result was not captured (reference `rfp`).
    pub fn result_fingerprint(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
    ) -> Option<Fingerprint> {
        self.result_fingerprint_with(status, result, &self.result_volatile_keys)
    }

    /// As [`Fingerprinter::result_fingerprint`], removing exactly `volatile_keys`.
    pub fn result_fingerprint_with(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
        volatile_keys: &HashSet<String>,
    ) -> Option<Fingerprint> {
        let mut hasher = Sha256::new();
        self.feed_result(status, result, volatile_keys, &mut hasher)
            .then(|| hasher.finalize().into())
    }

    /// Feeds what [`Fingerprinter::result_fingerprint_with`] hashes (`status ‖ 0x00 ‖ …`)
    /// to `sink`; false, with nothing fed, for a success whose result was not captured.
    fn feed_result(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
        volatile_keys: &HashSet<String>,
        sink: &mut impl Sink,
    ) -> bool {
        match (status, result) {
            (CallStatus::Error { message }, _) => {
                sink.put(b"error\0");
                sink.put(message.as_bytes());
            }
            (CallStatus::Ok, None) => return false,
            (CallStatus::Ok, Some(result)) => {
                sink.put(b"ok\0");
                self.feed_canonical(result, volatile_keys, sink);
            }
        }
        true
    }

    /// The tagged canonical bytes of `payload` (JCS text, or a tag + raw/big-int form).
    /// Exposed for diagnostics and tests.
    pub fn canonical_bytes(&self, payload: &Payload, volatile_keys: &HashSet<String>) -> Vec<u8> {
        let mut out = ByteSink(Vec::new());
        self.feed_canonical(payload, volatile_keys, &mut out);
        out.0
    }

    fn limits(&self) -> Limits {
        Limits {
            max_depth: self.max_depth,
            max_bytes: self.max_bytes,
        }
    }

    /// Feeds the canonical form of `text` by the one-pass path ([`fast`]) when it takes
    /// the text (within `max_bytes`, a shape it covers); false, with nothing fed, when not.
    fn feed_one_pass(&self, text: &str, drop: &HashSet<String>, sink: &mut impl Sink) -> bool {
        text.len() <= self.max_bytes
            && fast::with_scratch(|scratch| {
                fast::canonical_text(text, drop, self.limits(), scratch)
                    .map(|canonical| sink.put(canonical))
            })
            .is_some()
    }

    fn feed_canonical(&self, payload: &Payload, drop: &HashSet<String>, sink: &mut impl Sink) {
        let limits = self.limits();
        let bytes = match payload {
            Payload::Json(value) => {
                // Checked before the tree is built: building it recurses.
                let done = within_limits(value, self.max_depth, self.max_bytes)
                    && write_canonical(&mut Tree::from_value(value), drop, limits, sink);
                if !done {
                    sink.put(RAW_TAG);
                    write_raw_json(value, sink);
                }
                return;
            }
            Payload::Text(text) => text.as_bytes(),
            Payload::Bytes(bytes) => bytes.as_slice(),
        };
        // Common shapes take the one-pass path; it leaves anything else to the tree.
        let text = match payload {
            Payload::Text(text) => Some(text.as_str()),
            _ => std::str::from_utf8(bytes).ok(),
        };
        if text.is_some_and(|text| self.feed_one_pass(text, drop, sink)) {
            return;
        }
        let done = bytes.len() <= self.max_bytes
            && match Tree::parse(bytes) {
                // One further level of string-wrapped JSON is unwrapped (reference
                // `_decode`); a string that does not parse again is itself.
                Some(tree) if tree.is_string() => match Tree::parse(tree.str_at(0).as_bytes()) {
                    Some(mut inner) => write_canonical(&mut inner, drop, limits, sink),
                    None => write_canonical(&mut { tree }, drop, limits, sink),
                },
                Some(mut tree) => write_canonical(&mut tree, drop, limits, sink),
                // Reference `_decode`: text that is not JSON is the string it spells, so
                // `abc` and `"abc"` are one value.
                None => std::str::from_utf8(bytes)
                    .is_ok_and(|text| write_canonical(&mut Tree::string(text), drop, limits, sink)),
            };
        if !done {
            sink.put(RAW_TAG);
            sink.put(bytes);
        }
    }
}

/// SHA-256 of [`normalize_text`]`(text)`: what repeated_text compares (two responses are
/// the same text when their fingerprints are equal).
pub fn text_fingerprint(text: &str) -> Fingerprint {
    Sha256::digest(normalize_text(text).as_bytes()).into()
}

/// Lower-cases, collapses whitespace runs to one space and trims (reference `norm_text`:
/// `re.sub(r"\s+", " ", t.strip().lower())`). Whitespace is Python's `str.isspace`, i.e.
/// Unicode White_Space plus U+001C..U+001F.
pub fn normalize_text(text: &str) -> String {
    let is_space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    text.split(is_space)
        .filter(|part| !part.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A key for the external form of fingerprints: lowercase hex HMAC-SHA256 (DESIGN §3), so
/// a short argument cannot be recovered by hashing guesses.
#[derive(Clone)]
pub struct FingerprintKey {
    /// HMAC-SHA256 keyed once (the padded key's two blocks already hashed), cloned per use.
    keyed: Hmac<Sha256>,
    /// Tells this key's entries apart in [`RECENT_SHORT`] (unique per key made; a clone is
    /// the same key and shares it).
    id: u64,
}

/// Keys made so far: the next [`FingerprintKey::id`].
static NEXT_KEY_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Short fingerprints remembered per thread.
const RECENT_SHORT_LEN: usize = 8;

/// (key id, fingerprint, first 8 bytes of the MAC).
type RememberedShort = (u64, Fingerprint, [u8; 8]);

thread_local! {
    /// The last [`RECENT_SHORT_LEN`] short MACs this thread computed, filled round-robin
    /// (the next slot, then the slots). A loop annotates each of its spans, and signals
    /// each detection, with the same one or two fingerprints.
    static RECENT_SHORT: std::cell::RefCell<(usize, [Option<RememberedShort>; RECENT_SHORT_LEN])> =
        const { std::cell::RefCell::new((0, [None; RECENT_SHORT_LEN])) };
}

impl fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintKey(<redacted>)")
    }
}

impl FingerprintKey {
    /// A key from configured bytes (any length, as HMAC allows).
    pub fn new(key: &[u8]) -> Self {
        // HMAC accepts keys of any length: `new_from_slice` cannot fail for it.
        let keyed = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        let id = NEXT_KEY_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        FingerprintKey { keyed, id }
    }

    /// A random 32-byte key, for when no `fingerprint_key` is configured (external
    /// fingerprints are then stable only for the life of the process).
    pub fn random() -> Self {
        Self::new(&rand::random::<[u8; 32]>())
    }

    /// Lowercase hex (64 chars) of HMAC-SHA256(key, fingerprint).
    pub fn hex(&self, fingerprint: &Fingerprint) -> String {
        crate::otlp::lower_hex(&self.mac(fingerprint))
    }

    /// The short external form: the first 16 hex chars of [`FingerprintKey::hex`].
    pub fn short(&self, fingerprint: &Fingerprint) -> String {
        crate::otlp::lower_hex(&self.short_mac(fingerprint))
    }

    /// [`FingerprintKey::short`] held inline (no allocation), as signals carry it.
    pub fn short_compact(&self, fingerprint: &Fingerprint) -> compact_str::CompactString {
        crate::otlp::compact_hex(&self.short_mac(fingerprint))
    }

    /// The first 8 bytes of the MAC of `fingerprint`, remembered per thread for the last few
    /// fingerprints ([`RECENT_SHORT`]): a loop storm asks for the same ones over and over.
    fn short_mac(&self, fingerprint: &Fingerprint) -> [u8; 8] {
        let remembered = RECENT_SHORT.with_borrow(|(_, recent)| {
            recent
                .iter()
                .flatten()
                .find_map(|(id, fp, short)| (*id == self.id && fp == fingerprint).then_some(*short))
        });
        if let Some(short) = remembered {
            return short;
        }
        let mut short = [0u8; 8];
        short.copy_from_slice(&self.mac(fingerprint)[..8]);
        RECENT_SHORT.with_borrow_mut(|(next, recent)| {
            recent[*next] = Some((self.id, *fingerprint, short));
            *next = (*next + 1) % RECENT_SHORT_LEN;
        });
        short
    }

    fn mac(&self, fingerprint: &Fingerprint) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(fingerprint);
        mac.finalize().into_bytes().into()
    }
}

/// Where canonical bytes go: a hasher or a buffer.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

struct ByteSink(Vec<u8>);

impl Sink for ByteSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// True when `value` nests at most `max_depth` arrays/objects and its JSON size estimate
/// stays within `max_bytes`. Iterative: safe on any depth.
fn within_limits(value: &Value, max_depth: usize, max_bytes: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    let mut size = 0usize;
    while let Some((value, depth)) = stack.pop() {
        size = size.saturating_add(match value {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 24,
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                if depth >= max_depth {
                    return false;
                }
                stack.extend(items.iter().map(|item| (item, depth + 1)));
                items.len() + 2
            }
            Value::Object(map) => {
                if depth >= max_depth {
                    return false;
                }
                let keys: usize = map.keys().map(|k| k.len() + 4).sum();
                stack.extend(map.values().map(|item| (item, depth + 1)));
                keys + 2
            }
        });
        if size > max_bytes {
            return false;
        }
    }
    true
}

/// Compact JSON of `value` in its own key order, written with an explicit stack (no
/// recursion, so any depth is safe).
fn write_raw_json(value: &Value, sink: &mut impl Sink) {
    enum Item<'a> {
        Value(&'a Value),
        Key(&'a str),
        Literal(&'static [u8]),
    }
    let mut stack = vec![Item::Value(value)];
    while let Some(item) = stack.pop() {
        match item {
            Item::Literal(bytes) => sink.put(bytes),
            Item::Key(key) => {
                write_json_string(key, sink);
                sink.put(b":");
            }
            Item::Value(Value::Null) => sink.put(b"null"),
            Item::Value(Value::Bool(b)) => sink.put(if *b { b"true" } else { b"false" }),
            Item::Value(Value::Number(n)) => sink.put(n.to_string().as_bytes()),
            Item::Value(Value::String(s)) => write_json_string(s, sink),
            Item::Value(Value::Array(items)) => {
                sink.put(b"[");
                stack.push(Item::Literal(b"]"));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Item::Value(item));
                    if i > 0 {
                        stack.push(Item::Literal(b","));
                    }
                }
            }
            Item::Value(Value::Object(map)) => {
                sink.put(b"{");
                stack.push(Item::Literal(b"}"));
                let entries: Vec<_> = map.iter().collect();
                for (i, (key, item)) in entries.into_iter().enumerate().rev() {
                    stack.push(Item::Value(item));
                    stack.push(Item::Key(key));
                    if i > 0 {
                        stack.push(Item::Literal(b","));
                    }
                }
            }
        }
    }
}

fn write_json_string(s: &str, sink: &mut impl Sink) {
    // Serialising a `&str` cannot fail.
    match serde_json::to_vec(s) {
        Ok(bytes) => sink.put(&bytes),
        Err(_) => sink.put(s.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn call(args: Payload) -> Fingerprint {
        Fingerprinter::default().call_fingerprint("read_file", &args)
    }

    fn text(s: &str) -> Payload {
        Payload::Text(s.to_string())
    }

    #[test]
    fn json_string_object_and_bytes_are_one_value() {
        let object = call(Payload::Json(json!({"path": "a.txt", "n": 1})));
        assert_eq!(object, call(text(r#"{"n": 1, "path": "a.txt"}"#)));
        assert_eq!(
            object,
            call(Payload::Bytes(br#"{"path":"a.txt","n":1.0}"#.to_vec()))
        );
        // one further level of string-wrapped JSON is unwrapped
        assert_eq!(object, call(text(r#""{\"path\": \"a.txt\", \"n\": 1}""#)));
        assert_ne!(object, call(text(r#"{"path": "b.txt", "n": 1}"#)));
    }

    #[test]
    fn canonical_form_is_jcs() {
        let fp = Fingerprinter::default();
        let keys = HashSet::new();
        let bytes = fp.canonical_bytes(&text(r#"{"b": [1e0, 2.50], "a": "é"}"#), &keys);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"{"a":"é","b":[1,2.5]}"#
        );
    }

    #[test]
    fn call_fingerprint_is_sha256_of_tool_nul_canonical() {
        let got = call(Payload::Json(json!({"b": 1, "a": 2})));
        let want: Fingerprint = Sha256::digest(b"read_file\0{\"a\":2,\"b\":1}").into();
        assert_eq!(got, want);
        let other =
            Fingerprinter::default().call_fingerprint("write_file", &text(r#"{"a":2,"b":1}"#));
        assert_ne!(got, other);
    }

    #[test]
    fn number_spelling_does_not_matter() {
        let one = call(text("[1]"));
        assert_eq!(one, call(text("[1.0]")));
        assert_eq!(one, call(text("[1e0]")));
        assert_eq!(one, call(text("[10E-1]")));
        assert_ne!(one, call(text("[2]")));
    }

    #[test]
    fn big_integers_do_not_collide() {
        let a = call(text(r#"{"id": 9007199254740993}"#));
        let b = call(text(r#"{"id": 9007199254740992}"#));
        assert_ne!(a, b);
        assert_ne!(
            call(text("-9007199254740993")),
            call(text("-9007199254740992"))
        );
        // a big integer is not the string of its digits, nor the double of its value
        assert_ne!(b, call(text(r#"{"id": "n9007199254740992"}"#)));
        assert_ne!(b, call(text(r#"{"id": 9007199254740992.0}"#)));
        assert_eq!(a, call(Payload::Json(json!({"id": 9007199254740993u64}))));
        // below 2^53 an integer is its double
        assert_eq!(
            call(text("9007199254740991")),
            call(text("9007199254740991.0"))
        );
    }

    #[test]
    fn types_and_array_order_matter() {
        assert_ne!(
            call(Payload::Json(json!(1))),
            call(Payload::Json(json!("1")))
        );
        assert_ne!(call(text(r#"{"a": 1}"#)), call(text(r#"{"a": "1"}"#)));
        assert_ne!(call(text("[1, 2]")), call(text("[2, 1]")));
        assert_ne!(call(text(r#"{"a": null}"#)), call(text("{}")));
    }

    #[test]
    fn volatile_keys_ignored_at_any_depth() {
        let base = call(text(r#"{"q": {"x": [ {"y": 1} ]}}"#));
        let noisy = r#"{"timestamp": 5, "q": {"request_id": "r", "x": [ {"y": 1, "nonce": 7} ]}}"#;
        assert_eq!(base, call(text(noisy)));
        // results have their own set: `timestamp` stays, `tool_call_id` goes
        let fp = Fingerprinter::default();
        let ok = CallStatus::Ok;
        let r1 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "tool_call_id": "a"}"#)));
        let r2 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "tool_call_id": "b"}"#)));
        assert_eq!(r1, r2);
        let t1 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "timestamp": 1}"#)));
        let t2 = fp.result_fingerprint(&ok, Some(&text(r#"{"v": 1, "timestamp": 2}"#)));
        assert_ne!(t1, t2);
    }

    #[test]
    fn per_tool_volatile_keys() {
        let mut config = FingerprintConfig::default();
        config
            .tool_volatile_keys
            .insert("search".into(), vec!["page_token".into()]);
        let fp = Fingerprinter::new(&config);
        let a = fp.call_fingerprint("search", &text(r#"{"q": "x", "page_token": 1}"#));
        let b = fp.call_fingerprint(
            "search",
            &text(r#"{"q": "x", "page_token": 2, "nonce": 3}"#),
        );
        assert_eq!(a, b);
        let c = fp.call_fingerprint("other", &text(r#"{"q": "x", "page_token": 1}"#));
        let d = fp.call_fingerprint("other", &text(r#"{"q": "x", "page_token": 2}"#));
        assert_ne!(c, d);
    }

    #[test]
    fn unparsable_text_is_the_string_it_spells() {
        let fp = Fingerprinter::default();
        let keys = HashSet::new();
        let canonical = fp.canonical_bytes(&text("not json {"), &keys);
        assert_eq!(canonical, br#""not json {""#.to_vec());
        // reference `_decode`: `abc` and the JSON string `"abc"` are one value
        assert_eq!(call(text("abc")), call(text(r#""abc""#)));
        assert_ne!(call(text("abc")), call(text("abd")));
        assert_ne!(call(text("not json {")), call(text("not json  {")));
        assert_eq!(
            call(text("bare value")),
            call(Payload::Bytes(b"bare value".to_vec()))
        );
        assert_ne!(
            call(Payload::Bytes(vec![0xff, 0xfe])),
            call(Payload::Bytes(vec![0xff]))
        );
    }

    #[test]
    fn deep_nesting_hashes_raw_without_overflow() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let a = call(text(&deep));
        let shallower = format!("{}{}", "[".repeat(9_999), "]".repeat(9_999));
        assert_ne!(a, call(text(&shallower)));
        // a structured value of that depth: walked without recursion
        let mut value = Value::Array(vec![]);
        for _ in 1..10_000 {
            value = Value::Array(vec![value]);
        }
        let payload = Payload::Json(value);
        let fp = Fingerprinter::default();
        let b = fp.call_fingerprint("read_file", &payload);
        assert_eq!(b, fp.call_fingerprint("read_file", &payload));
        assert!(fp
            .canonical_bytes(&payload, &HashSet::new())
            .starts_with(RAW_TAG));
        // deep text does not parse (serde_json stops at 128 levels): it is the string
        // it spells, which differs from the raw-tagged structured value
        assert_ne!(a, b);
        // dropping a 10 000-deep serde_json::Value recurses; leak the test's copy instead
        std::mem::forget(payload);
        // beyond max_depth (64) but parsable: raw, distinct from the canonical form
        let fp = Fingerprinter::default();
        let nested = format!("{}{}", "[".repeat(70), "]".repeat(70));
        assert!(fp
            .canonical_bytes(&text(&nested), &HashSet::new())
            .starts_with(RAW_TAG));
    }

    #[test]
    fn oversized_arguments_hash_raw() {
        let big = format!(r#"{{"data": "{}"}}"#, "x".repeat(2 * 1024 * 1024));
        let fp = Fingerprinter::default();
        assert!(fp
            .canonical_bytes(&text(&big), &HashSet::new())
            .starts_with(RAW_TAG));
        let mut other = big.clone();
        other.replace_range(10..11, "y");
        assert_ne!(call(text(&big)), call(text(&other)));
        let json = Payload::Json(json!({"data": "x".repeat(2 * 1024 * 1024)}));
        assert!(fp
            .canonical_bytes(&json, &HashSet::new())
            .starts_with(RAW_TAG));
    }

    #[test]
    fn result_fingerprints_follow_reference_rfp() {
        let fp = Fingerprinter::default();
        let err = CallStatus::Error {
            message: "boom".into(),
        };
        let want: Fingerprint = Sha256::digest(b"error\0boom").into();
        assert_eq!(fp.result_fingerprint(&err, None), Some(want));
        assert_eq!(
            fp.result_fingerprint(&err, Some(&text("anything"))),
            Some(want)
        );
        assert_eq!(fp.result_fingerprint(&CallStatus::Ok, None), None);
        let null: Fingerprint = Sha256::digest(b"ok\0null").into();
        assert_eq!(
            fp.result_fingerprint(&CallStatus::Ok, Some(&Payload::Json(Value::Null))),
            Some(null)
        );
        // an ok result that is the error message's text is not the error
        assert_ne!(
            fp.result_fingerprint(&CallStatus::Ok, Some(&text("boom"))),
            Some(want)
        );
    }

    #[test]
    fn normalize_text_matches_reference() {
        assert_eq!(normalize_text("  Hello\t\n  WORLD  "), "hello world");
        assert_eq!(normalize_text("a\u{1f}b\u{a0}c"), "a b c");
        assert_eq!(normalize_text(""), "");
        assert_eq!(normalize_text("   "), "");
    }

    #[test]
    fn remembered_short_forms_are_never_another_keys_or_fingerprints() {
        // Twelve fingerprints (more than are remembered) under two keys of equal bytes
        // and one of other bytes, asked for in an order that revisits each.
        let keys = [
            FingerprintKey::new(b"secret"),
            FingerprintKey::new(b"secret"),
            FingerprintKey::new(b"other"),
        ];
        let fps: Vec<Fingerprint> = (0..12u8).map(|i| call(text(&format!("[{i}]")))).collect();
        for round in 0..3 {
            for (i, fp) in fps.iter().enumerate() {
                for key in &keys {
                    let expected = &key.hex(fp)[..16];
                    assert_eq!(key.short(fp), expected, "round {round}, fingerprint {i}");
                    assert_eq!(key.short_compact(fp), expected);
                    assert_eq!(key.clone().short(fp), expected);
                }
                assert_eq!(keys[0].short(fp), keys[1].short(fp));
                assert_ne!(keys[0].short(fp), keys[2].short(fp));
            }
        }
    }

    #[test]
    fn external_form_is_keyed_hmac() {
        let key = FingerprintKey::new(b"secret");
        let fp = call(text("{}"));
        let hex = key.hex(&fp);
        assert_eq!(hex.len(), 64);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(key.short(&fp), hex[..16]);
        assert_eq!(key.short_compact(&fp), hex[..16]);
        let mut manual = <Hmac<Sha256> as Mac>::new_from_slice(b"secret").unwrap();
        manual.update(&fp);
        assert_eq!(hex, hex::encode(manual.finalize().into_bytes()));
        assert_ne!(hex, FingerprintKey::new(b"other").hex(&fp));
        assert_ne!(hex, FingerprintKey::random().hex(&fp));
        assert_ne!(hex, hex::encode(fp));
        // RFC 4231 test case 2
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(!format!("{key:?}").contains("secret"));
    }

    /// Arbitrary JSON values (no big integers: those are covered above).
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1000i64..1000).prop_map(|n| json!(n)),
            (-1000.0f64..1000.0).prop_map(|f| json!(f)),
            "[a-z\u{e9}\u{1F600} ]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `value` as JSON with object keys in reverse order and integral numbers
    /// spelled as floats (`2` → `2.0`).
    fn respell(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let parts: Vec<String> = map
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{}: {}", json!(k), respell(v)))
                    .collect();
                format!("{{ {} }}", parts.join(" , "))
            }
            Value::Array(items) => {
                format!(
                    "[{}]",
                    items.iter().map(respell).collect::<Vec<_>>().join(", ")
                )
            }
            Value::Number(n) if n.is_i64() => format!("{n}.0"),
            Value::Number(n) => n.as_f64().map(|f| format!("{f:e}")).unwrap_or_default(),
            other => other.to_string(),
        }
    }

    /// Inserts volatile keys into every object of `value`.
    fn add_volatile(value: &Value, salt: u32) -> Value {
        match value {
            Value::Object(map) => {
                let mut out: serde_json::Map<String, Value> = map
                    .iter()
                    .map(|(k, v)| (k.clone(), add_volatile(v, salt)))
                    .collect();
                out.insert("timestamp".into(), json!(salt));
                out.insert("request_id".into(), json!(format!("req-{salt}")));
                Value::Object(out)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| add_volatile(v, salt)).collect())
            }
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn key_order_and_number_spelling_never_change_it(value in json_value()) {
            let direct = call(Payload::Json(value.clone()));
            prop_assert_eq!(direct, call(Payload::Text(respell(&value))));
        }

        #[test]
        fn string_object_and_bytes_agree(value in json_value()) {
            let encoded = value.to_string();
            let direct = call(Payload::Json(value.clone()));
            prop_assert_eq!(direct, call(Payload::Text(encoded.clone())));
            prop_assert_eq!(direct, call(Payload::Bytes(encoded.into_bytes())));
        }

        #[test]
        fn volatile_keys_never_change_it(value in json_value(), salt in any::<u32>()) {
            let noisy = add_volatile(&value, salt);
            prop_assert_eq!(call(Payload::Json(value)), call(Payload::Json(noisy)));
        }

        #[test]
        fn big_integers_are_exact(a in (1u64 << 53)..u64::MAX, b in (1u64 << 53)..u64::MAX) {
            let fa = call(Payload::Text(format!("[{a}]")));
            let fb = call(Payload::Text(format!("[{b}]")));
            prop_assert_eq!(a == b, fa == fb);
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,64}") {
            let _ = call(Payload::Text(s.clone()));
            prop_assert_eq!(normalize_text(&normalize_text(&s)), normalize_text(&s));
        }
    }
}
