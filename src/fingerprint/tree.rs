//! A borrowed JSON tree for canonicalisation: one flat, pre-order `Vec` of nodes whose
//! strings point into the input text (or into the `serde_json::Value` they came from), so
//! reading a payload allocates no string unless it holds escapes.
//!
//! Text is read by `serde_json`'s own deserializer (only the visitor is ours), so what
//! parses, how numbers are read (u64 / i64 / f64, `float_roundtrip`), the 128-level nesting
//! limit and the trailing-characters check are exactly those of `serde_json::from_slice`
//! into a `Value`. Duplicate object keys are kept here; the canonical writer keeps the last
//! one, as a `Value` map does.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// One JSON value. Containers record where their subtree ends (the index after their last
/// descendant); an object's children alternate key (a string node) and value.
#[derive(Clone, Copy, Debug)]
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    /// A string without escapes, borrowed from the input.
    Str(&'a str),
    /// An unescaped string, `start..end` of [`Tree::text`].
    Unescaped {
        start: usize,
        end: usize,
    },
    Array {
        end: usize,
    },
    /// `members` is filled by the canonical writer's planning pass: a range of its member
    /// list (sorted, deduplicated, volatile keys left out).
    Object {
        end: usize,
        members: (u32, u32),
    },
}

/// A JSON value as flat nodes; the root is node 0.
#[derive(Debug, Default)]
pub(super) struct Tree<'a> {
    pub(super) nodes: Vec<Node<'a>>,
    /// Unescaped copies of strings that held escapes.
    text: String,
}

impl<'a> Tree<'a> {
    /// The tree of `bytes` as JSON text; `None` when `serde_json::from_slice::<Value>` would
    /// fail on them.
    pub(super) fn parse(bytes: &'a [u8]) -> Option<Self> {
        let mut tree = Tree {
            nodes: Vec::with_capacity(bytes.len() / 8 + 1),
            text: String::new(),
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        NodeSeed { tree: &mut tree }.deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(tree)
    }

    /// A tree holding one string.
    pub(super) fn string(text: &'a str) -> Self {
        Tree {
            nodes: vec![Node::Str(text)],
            text: String::new(),
        }
    }

    /// The tree of a structured value, strings borrowed from it. Recursive: callers bound
    /// the depth first.
    pub(super) fn from_value(value: &'a Value) -> Self {
        let mut tree = Tree::default();
        tree.push_value(value);
        tree
    }

    fn push_value(&mut self, value: &'a Value) {
        match value {
            Value::Null => self.nodes.push(Node::Null),
            Value::Bool(b) => self.nodes.push(Node::Bool(*b)),
            Value::Number(n) => self.nodes.push(match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Node::U64(u),
                (None, Some(i)) => Node::I64(i),
                // Without `arbitrary_precision` every number is one of the three.
                (None, None) => Node::F64(n.as_f64().unwrap_or_default()),
            }),
            Value::String(s) => self.nodes.push(Node::Str(s)),
            Value::Array(items) => {
                let at = self.open(Node::Array { end: 0 });
                items.iter().for_each(|item| self.push_value(item));
                self.close(at);
            }
            Value::Object(map) => {
                let at = self.open(Node::Object {
                    end: 0,
                    members: (0, 0),
                });
                for (key, item) in map {
                    self.nodes.push(Node::Str(key));
                    self.push_value(item);
                }
                self.close(at);
            }
        }
    }

    fn open(&mut self, node: Node<'a>) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn close(&mut self, at: usize) {
        let len = self.nodes.len();
        match &mut self.nodes[at] {
            Node::Array { end } | Node::Object { end, .. } => *end = len,
            _ => {}
        }
    }

    fn push_unescaped(&mut self, s: &str) {
        let start = self.text.len();
        self.text.push_str(s);
        self.nodes.push(Node::Unescaped {
            start,
            end: self.text.len(),
        });
    }

    /// The text of a string node (`""` for other nodes).
    pub(super) fn str_at(&self, idx: usize) -> &str {
        match self.nodes[idx] {
            Node::Str(s) => s,
            Node::Unescaped { start, end } => &self.text[start..end],
            _ => "",
        }
    }

    /// True when the root is a string.
    pub(super) fn is_string(&self) -> bool {
        matches!(
            self.nodes.first(),
            Some(Node::Str(_) | Node::Unescaped { .. })
        )
    }

    /// The index after the subtree rooted at `idx`.
    pub(super) fn skip(&self, idx: usize) -> usize {
        match self.nodes[idx] {
            Node::Array { end } | Node::Object { end, .. } => end,
            _ => idx + 1,
        }
    }
}

/// Pushes the nodes of one value onto the tree.
struct NodeSeed<'t, 'a> {
    tree: &'t mut Tree<'a>,
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.tree.nodes.push(Node::Null);
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.tree.nodes.push(Node::Bool(v));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.tree.nodes.push(Node::U64(v));
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        // As `Value`: a non-negative i64 is a PosInt.
        self.tree.nodes.push(match u64::try_from(v) {
            Ok(u) => Node::U64(u),
            Err(_) => Node::I64(v),
        });
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.tree.nodes.push(Node::F64(v));
        Ok(())
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        self.tree.nodes.push(Node::Str(v));
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.tree.push_unescaped(v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let at = self.tree.open(Node::Array { end: 0 });
        while seq
            .next_element_seed(NodeSeed {
                tree: &mut *self.tree,
            })?
            .is_some()
        {}
        self.tree.close(at);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let at = self.tree.open(Node::Object {
            end: 0,
            members: (0, 0),
        });
        while map
            .next_key_seed(NodeSeed {
                tree: &mut *self.tree,
            })?
            .is_some()
        {
            map.next_value_seed(NodeSeed {
                tree: &mut *self.tree,
            })?;
        }
        self.tree.close(at);
        Ok(())
    }
}
