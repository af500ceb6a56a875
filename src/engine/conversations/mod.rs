//! The tool-call parts of conversations already read, so that an inference span reads only
//! what its conversation gained since the run's previous inference span (DESIGN §8).
//!
//! An inference span's `gen_ai.input.messages` holds the whole conversation so far (GenAI
//! semconv v1.37), so turn n repeats the n − 1 turns before it: reading every turn's parts
//! from the whole text, and fingerprinting them again, costs a run O(n²) and was a fifth of
//! the span path on recorded traffic. When a message list `[m1, …, mk]` was read, its
//! elements' text (`[m1, …, mk` without the closing bracket) is remembered by trace_id as
//! its length and a hash, with the parts read from it. A later list of the same trace that
//! starts with those bytes and continues with `, mk+1, …]` has the remembered parts
//! followed by the parts of `[mk+1, …]`, which is all that is read; the answer is the one
//! reading the whole text gives, because a message list's parts are its messages' parts
//! in order, and the text is JSON exactly when the remembered elements (JSON before) and
//! the new ones are.
//!
//! The hash is XXH3-128 with a seed drawn at start: a remembered prefix is taken for
//! another text only when both have the same length and hash (accidental collisions
//! 2⁻¹²⁸; a sender that found one could only change the joins of its own trace). Bounded:
//! [`MAX_PER_TRACE`] conversations per trace, at most `max_parts` parts in all (least
//! recently used traces dropped first); a conversation of more than `max_parts / 4` parts
//! is read whole every time.

use std::sync::{Mutex, PoisonError};

use lru::LruCache;
use smallvec::SmallVec;

use crate::registry::ToolCallPart;

/// Conversations remembered per trace (a trace with several agents holds several).
pub const MAX_PER_TRACE: usize = 4;

/// Parts remembered in all, by default (~100 bytes each).
pub const DEFAULT_MAX_PARTS: usize = 65_536;

/// A remembered message list: the length and hash of its elements' text, its parts.
#[derive(Clone)]
struct Known {
    elements_len: usize,
    elements_hash: u128,
    parts: std::sync::Arc<[ToolCallPart]>,
}

struct Traces {
    by_trace: LruCache<[u8; 16], SmallVec<[Known; 1]>, foldhash::fast::RandomState>,
    parts: usize,
}

/// Remembered conversations by trace_id; see the module docs.
pub struct Conversations {
    traces: Mutex<Traces>,
    seed: u64,
    max_parts: usize,
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations::new(DEFAULT_MAX_PARTS)
    }
}

impl Conversations {
    /// Remembers at most `max_parts` parts in all (0: nothing, every list is read whole).
    pub fn new(max_parts: usize) -> Conversations {
        Conversations {
            traces: Mutex::new(Traces {
                by_trace: LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default()),
                parts: 0,
            }),
            seed: rand::random(),
            max_parts,
        }
    }

    /// The parts of message-list JSON `text` on an inference span of trace `trace_id`, as
    /// `read` finds them in a message list's text (`None`: not JSON), reading only what
    /// follows a list of the same trace read before. `None` exactly when `read(text)` is.
    pub fn parts(
        &self,
        trace_id: &[u8],
        text: &str,
        read: impl Fn(&str) -> Option<Vec<ToolCallPart>>,
    ) -> Option<Vec<ToolCallPart>> {
        let (Ok(trace), Some(elements_len)) = (<[u8; 16]>::try_from(trace_id), elements_end(text))
        else {
            return read(text);
        };
        let known: SmallVec<[Known; MAX_PER_TRACE]> = self
            .lock()
            .by_trace
            .get(&trace)
            .map(|list| list.iter().cloned().collect())
            .unwrap_or_default();
        let continued = known
            .iter()
            .filter(|k| k.elements_len <= elements_len)
            .filter(|k| self.hash(&text[..k.elements_len]) == k.elements_hash)
            .find_map(|k| Some((k, continuation(k, text, &read)?)));
        let (parts, superseded) = match continued {
            // The same list again.
            Some((k, parts)) if k.elements_len == elements_len => return Some(parts),
            Some((k, parts)) => (parts, Some(k.elements_hash)),
            None => (read(text)?, None),
        };
        if self.max_parts > 0 && parts.len() <= self.max_parts / 4 {
            let known = Known {
                elements_len,
                elements_hash: self.hash(&text[..elements_len]),
                parts: parts.as_slice().into(),
            };
            self.remember(trace, known, superseded);
        }
        Some(parts)
    }

    /// Remembers `known` for `trace` in place of the list it continues (`superseded`, by
    /// hash), else beside the others (the oldest dropped beyond [`MAX_PER_TRACE`]); then
    /// drops least recently used traces while more than `max_parts` parts are held.
    fn remember(&self, trace: [u8; 16], known: Known, superseded: Option<u128>) {
        let mut traces = self.lock();
        let added = known.parts.len();
        let list = traces.by_trace.get_or_insert_mut(trace, SmallVec::new);
        let replaced = superseded
            .and_then(|hash| list.iter().position(|k| k.elements_hash == hash))
            .or_else(|| (list.len() >= MAX_PER_TRACE).then_some(0));
        let removed = replaced.map_or(0, |i| list.remove(i).parts.len());
        list.push(known);
        traces.parts = traces.parts + added - removed;
        while traces.parts > self.max_parts {
            let Some((_, dropped)) = traces.by_trace.pop_lru() else {
                break;
            };
            traces.parts -= dropped.iter().map(|k| k.parts.len()).sum::<usize>();
        }
    }

    fn hash(&self, bytes: &str) -> u128 {
        xxhash_rust::xxh3::xxh3_128_with_seed(bytes.as_bytes(), self.seed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Traces> {
        self.traces.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parts remembered in all (for tests and bounds).
    pub fn remembered_parts(&self) -> usize {
        self.lock().parts
    }
}

/// JSON whitespace (RFC 8259 §2).
const WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// Where the elements of a message list end: the length of `text` without its closing
/// bracket and the whitespace around it, when `text` is `[` … `]` with at least one
/// element's worth of text inside; `None` otherwise (one message, or not a list).
fn elements_end(text: &str) -> Option<usize> {
    let body = text.trim_end_matches(WHITESPACE).strip_suffix(']')?;
    let elements = body.trim_end_matches(WHITESPACE);
    let inside = elements.trim_start_matches(WHITESPACE).strip_prefix('[')?;
    (!inside.trim_start_matches(WHITESPACE).is_empty()).then_some(elements.len())
}

/// The parts of `text`, which starts with `known`'s elements: `known`'s parts followed by
/// those `read` finds in the elements after them; `None` when `text` does not continue
/// the list there (or what follows is not JSON: the caller then reads the whole text).
fn continuation(
    known: &Known,
    text: &str,
    read: &impl Fn(&str) -> Option<Vec<ToolCallPart>>,
) -> Option<Vec<ToolCallPart>> {
    let rest = text[known.elements_len..].trim_start_matches(WHITESPACE);
    if let Some(after) = rest.strip_prefix(']') {
        // The same list again.
        return after
            .trim_start_matches(WHITESPACE)
            .is_empty()
            .then(|| known.parts.to_vec());
    }
    let added = rest.strip_prefix(',')?;
    let mut parts = known.parts.to_vec();
    parts.extend(read(&format!("[{added}"))?);
    Some(parts)
}

#[cfg(test)]
mod tests;
