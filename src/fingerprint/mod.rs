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

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::conventions::event::{CallStatus, Payload};
use raw::{within_limits, write_raw_json};

mod canonical;
mod external;
mod fast;
mod matching;
mod raw;
mod recent;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod streaming_tests;
mod tree;

pub use external::FingerprintKey;
pub use matching::{MatchHash, MatchingKey};
pub use recent::RecentFingerprints;

use canonical::{write_canonical, Limits};
use tree::Tree;

/// A SHA-256 digest.
pub type Fingerprint = [u8; 32];

/// True when `text`'s first byte past JSON whitespace opens an object or array (whether
/// the rest is JSON is for a parser to say).
pub fn opens_container(text: &str) -> bool {
    text.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with(['{', '['])
}

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
            if opens_container(text) && self.feed_one_pass(text, drop, sink) {
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

    /// [`Fingerprinter::result_fingerprint_with`] of a successful call whose result is
    /// `text`, when `text` is a JSON object or array that the one-pass path reads (which
    /// reads only JSON as `serde_json` does); `None` for anything else (not JSON, or a
    /// shape or size left to the general path). `volatile_keys` `None` = the configured
    /// `result_volatile_keys`. Tells a JSON result apart and fingerprints it in one parse.
    pub fn json_result_fingerprint(
        &self,
        text: &str,
        volatile_keys: Option<&HashSet<String>>,
    ) -> Option<Fingerprint> {
        if !opens_container(text) {
            return None;
        }
        let mut hasher = Sha256::new();
        hasher.update(b"ok\0");
        let drop = volatile_keys.unwrap_or(&self.result_volatile_keys);
        self.feed_one_pass(text, drop, &mut hasher)
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

#[cfg(test)]
mod tests;
