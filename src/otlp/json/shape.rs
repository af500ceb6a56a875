//! One pass over the bytes of an OTLP/JSON body before it is parsed: how deep it nests, how
//! many spans and values it holds, and what decoding it will allocate. The receiver applies
//! `limits.max_spans_per_request` and `limits.max_values_per_request` and counts the
//! request's decoded bytes from it, before a `serde_json::Value` is built (issue 31 item 1
//! for OTLP/JSON: a 25 KB gzip body of 1.2 M empty attributes decoded to ~850 MB while it
//! was counted at 6× its 13 MB); and [`parse`] reads a body past serde_json's recursion
//! limit only once this pass has found it within [`MAX_DEPTH`], so no input can overflow
//! the stack.
//!
//! The pass follows JSON's grammar for strings (quotes and backslash escapes) and
//! structure (`{`, `[`, `,`, `:`, `]`, `}`), and nothing else: for any text serde_json
//! accepts it sees the same nesting, and on text serde_json refuses it never sees less
//! nesting than serde_json reaches before it stops. Keys are compared once unescaped.

use serde_json::Value;

use crate::otlp::wire::{reader::RECURSION_LIMIT, ReadLimits};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, Span};

/// The deepest nesting of JSON objects and arrays read: `2 × 100 + 1`. A message at depth
/// `k` of prost's recursion budget (the protobuf reader's [`RECURSION_LIMIT`], 100) is a
/// JSON object at most `2k + 1` deep (the request's object, then per level a message's
/// object and the array of a repeated field), so every request the protobuf path accepts
/// fits, spans nested too deep for prost included (those are left out alone, as over
/// protobuf: [`super::nesting`]); a body nested deeper is refused whole.
pub const MAX_DEPTH: usize = 2 * RECURSION_LIMIT as usize + 1;

/// What [`scan`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// The deepest nesting of objects and arrays (`{}` is 1).
    pub depth: usize,
    /// Elements of `spans` arrays, as written (`limits.max_spans_per_request`).
    pub spans: usize,
    /// Elements of `attributes`, `events`, `links` and `values` arrays, as written, at any
    /// depth (`limits.max_values_per_request`, see [`scan`]).
    pub values: usize,
    /// An upper bound of the heap bytes decoding the body takes at its peak (see
    /// [`Cost::bytes`]).
    pub decoded_bytes: usize,
}

/// Why [`scan`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Objects and arrays nested deeper than [`MAX_DEPTH`].
    #[error(
        "JSON nested deeper than {limit} levels (the OTLP/JSON form of the protobuf \
         recursion limit of {RECURSION_LIMIT})"
    )]
    TooDeep {
        /// The cap.
        limit: usize,
    },
    /// More spans than allowed.
    #[error("request holds more than {limit} spans")]
    TooManySpans {
        /// The cap.
        limit: usize,
    },
    /// More values than allowed.
    #[error("request holds more than {limit} attribute values")]
    TooManyValues {
        /// The cap.
        limit: usize,
    },
}

/// What the elements of an array are counted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    No,
    Span,
    Value,
}

/// An open object or array.
#[derive(Debug)]
enum Frame {
    Object {
        members: usize,
        /// What the current member's key makes the elements of an array value.
        key: Counted,
        expect_key: bool,
    },
    Array {
        counted: Counted,
        elements: usize,
        /// An element started since the last `,`.
        seen: bool,
    },
}

/// Scans `bytes` (see the module docs) and stops at the first cap passed: nesting deeper
/// than [`MAX_DEPTH`], more `spans` elements than `limits.max_spans`, or more values than
/// `limits.max_values`. Values are counted as the protobuf reader counts them (every
/// attribute, event, array and kvlist element: `attributes`, `events` and `values`
/// arrays), and also the links and the resource, scope and link attributes, which the
/// protobuf reader validates without building but OTLP/JSON decoding builds like the rest.
/// Counted as written: an element the decoding later drops (a duplicate key, an unknown
/// field named `values`) counts too.
///
/// # Errors
/// [`ShapeError`] for the first cap passed.
pub fn scan(bytes: &[u8], limits: ReadLimits) -> Result<Shape, ShapeError> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut shape = Shape::default();
    let mut cost = Cost::default();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => {
                at += 1;
                continue;
            }
            b',' => {
                match stack.last_mut() {
                    Some(Frame::Array { seen, .. }) => *seen = false,
                    Some(Frame::Object { expect_key, .. }) => *expect_key = true,
                    None => {}
                }
                at += 1;
                continue;
            }
            b']' | b'}' => {
                if let Some(frame) = stack.pop() {
                    cost.close(&frame);
                }
                at += 1;
                continue;
            }
            _ => {}
        }
        // A key, the start of a value, or a byte inside a number or literal.
        let mut array_of = Counted::No;
        match stack.last_mut() {
            Some(Frame::Object {
                members,
                key,
                expect_key,
            }) if *expect_key && byte == b'"' => {
                let end = string_end(bytes, at);
                *key = classify(&bytes[at..end]);
                *members += 1;
                *expect_key = false;
                cost.string(end - at);
                at = end;
                continue;
            }
            Some(Frame::Object { key, .. }) => array_of = *key,
            // The first byte of an element.
            Some(Frame::Array {
                counted,
                elements,
                seen,
            }) if !*seen => {
                *seen = true;
                *elements += 1;
                match counted {
                    Counted::Span => {
                        shape.spans += 1;
                        if shape.spans > limits.max_spans {
                            return Err(ShapeError::TooManySpans {
                                limit: limits.max_spans,
                            });
                        }
                    }
                    Counted::Value => {
                        shape.values += 1;
                        if shape.values > limits.max_values {
                            return Err(ShapeError::TooManyValues {
                                limit: limits.max_values,
                            });
                        }
                    }
                    Counted::No => {}
                }
            }
            Some(Frame::Array { .. }) => {}
            None => {}
        }
        match byte {
            b'{' | b'[' => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ShapeError::TooDeep { limit: MAX_DEPTH });
                }
                stack.push(if byte == b'{' {
                    Frame::Object {
                        members: 0,
                        key: Counted::No,
                        expect_key: true,
                    }
                } else {
                    Frame::Array {
                        counted: array_of,
                        elements: 0,
                        seen: false,
                    }
                });
                shape.depth = shape.depth.max(stack.len());
                at += 1;
            }
            b'"' => {
                let end = string_end(bytes, at);
                cost.string(end - at);
                at = end;
            }
            _ => at += 1,
        }
    }
    // Unclosed containers (serde_json refuses the text) are costed as if closed.
    for frame in stack.iter().rev() {
        cost.close(frame);
    }
    cost.spans = shape.spans;
    cost.values = shape.values;
    cost.text = bytes.len();
    shape.decoded_bytes = cost.bytes();
    Ok(shape)
}

/// The index just past the string starting with the quote at `start` (the end of `bytes`
/// when it is not closed): a backslash escapes the byte after it.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => return at + 1,
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    bytes.len()
}

/// What a key (quotes included, as written) makes the elements of its array value.
fn classify(quoted: &[u8]) -> Counted {
    let inner = &quoted[1..quoted.len().saturating_sub(1).max(1)];
    let unescaped;
    let key: &[u8] = if inner.contains(&b'\\') {
        // An escaped key is read as serde_json reads it; one it refuses is refused later.
        match serde_json::from_slice::<String>(quoted) {
            Ok(key) => {
                unescaped = key;
                unescaped.as_bytes()
            }
            Err(_) => return Counted::No,
        }
    } else {
        inner
    };
    match key {
        b"spans" => Counted::Span,
        b"attributes" | b"events" | b"links" | b"values" => Counted::Value,
        _ => Counted::No,
    }
}

/// Bytes one element of a `Vec` is counted at in [`Cost::bytes`]: the largest of the
/// prost messages an element of a counted array decodes to.
fn prost_element_bytes() -> usize {
    use std::mem::size_of;
    [
        size_of::<KeyValue>(),
        size_of::<AnyValue>(),
        size_of::<span::Event>(),
        size_of::<span::Link>(),
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

/// The heap a body's decoding allocates at its peak, from what [`scan`] counted: the
/// `serde_json::Value` tree and the prost request built from it are alive together (the
/// typed decoding consumes the tree, but frees an array's buffer only at its end), and the
/// lenient decoding of a request with an unreadable span copies the text once more.
#[derive(Debug, Default)]
struct Cost {
    /// `serde_json::Map` (a `BTreeMap`) nodes, in bytes.
    maps: usize,
    /// `Vec<Value>` buffers, in bytes.
    arrays: usize,
    /// Key and string allocations, in bytes.
    strings: usize,
    spans: usize,
    values: usize,
    text: usize,
}

/// `size_of::<serde_json::Value>()`.
const VALUE_BYTES: usize = 32;
/// A `BTreeMap<String, Value>` leaf node (11 keys of 24 bytes, 11 values of 32, the parent
/// link, index and length: 632 bytes) with the allocator's header, rounded up. Measured
/// in `tests/detect/json_memory.rs`.
const MAP_LEAF_BYTES: usize = 656;
/// An internal node: a leaf and 12 child links.
const MAP_INTERNAL_BYTES: usize = MAP_LEAF_BYTES + 96;
/// What one heap allocation costs beyond its bytes (glibc: an 8-byte header, 16-byte
/// granularity, 32 bytes at least).
const ALLOCATION_OVERHEAD: usize = 24;

impl Cost {
    /// Counts one string (quotes included): its bytes as written, which are at least its
    /// decoded length, and one allocation.
    fn string(&mut self, quoted_len: usize) {
        if quoted_len > 2 {
            self.strings += quoted_len - 2 + ALLOCATION_OVERHEAD;
        }
    }

    /// Counts a closed object or array. Every object is counted one leaf node, empty ones
    /// too (normalizing fills a `KeyValue`'s omitted `key` and an `arrayValue`'s
    /// `values`); past 11 members a `BTreeMap` splits nodes into halves, so an object of
    /// `m` members has at most `⌈m/5⌉` leaves and a fifth as many internal nodes. An array
    /// of `n` elements is a `Vec<Value>` grown by doubling from 4.
    fn close(&mut self, frame: &Frame) {
        match *frame {
            Frame::Object { members, .. } if members <= 11 => self.maps += MAP_LEAF_BYTES,
            Frame::Object { members, .. } => {
                let leaves = members.div_ceil(5);
                self.maps += leaves * MAP_LEAF_BYTES + (leaves / 5 + 1) * MAP_INTERNAL_BYTES;
            }
            Frame::Array { elements: 0, .. } => {}
            Frame::Array { elements, .. } => {
                self.arrays +=
                    elements.next_power_of_two().max(4) * VALUE_BYTES + ALLOCATION_OVERHEAD;
            }
        }
    }

    /// The bytes counted: the `Value` tree (maps, arrays, strings), the prost request
    /// (each span `size_of::<Span>()` and each counted value the largest element message,
    /// both twice for the slack of the vectors holding them, plus the strings again:
    /// hex ids and the normalizer's paths are new allocations), and a copy of the text.
    fn bytes(&self) -> usize {
        let value_tree = self.maps + self.arrays + self.strings;
        let prost = 2 * self.spans * std::mem::size_of::<Span>()
            + 2 * self.values * prost_element_bytes()
            + self.strings;
        value_tree + prost + self.text
    }
}

/// Parses `bytes` into a [`Value`], reading past serde_json's recursion limit of 128 up to
/// [`MAX_DEPTH`], which [`scan`] checks first without recursing (a body nested deeper is
/// refused before serde_json reads it).
///
/// # Errors
/// The nesting, or serde_json's error, as text.
pub fn parse(bytes: &[u8]) -> Result<Value, String> {
    scan(bytes, ReadLimits::NONE).map_err(|e| e.to_string())?;
    parse_unchecked_depth(bytes).map_err(|e| e.to_string())
}

/// serde_json's parse without its recursion limit; only for text [`scan`] has checked.
fn parse_unchecked_depth(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    use serde::Deserialize;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.disable_recursion_limit();
    let value = Value::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

#[cfg(test)]
mod tests;
