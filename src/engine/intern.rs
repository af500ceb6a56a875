//! Shared `Arc<str>`s for names that recur across spans and runs (tool, agent and
//! service names): every call of `read_file` points at one allocation instead of its own copy, so a
//! kept tool call holds a pointer, not a string (issue 8 item 4).
//!
//! Each kept name carries its [`NameClass`] (shell tool, state-changing tool), read once
//! when the name is first kept instead of at every call.
//!
//! Bounded: at most `capacity` distinct names are kept for the life of the process; past
//! it, a new name gets its own allocation (correct, just not shared), so a client sending
//! random names cannot grow it without bound. And every name is cut to [`MAX_NAME_BYTES`]:
//! a name is copied into run state, detections, signals, `loop.*` attributes and metric
//! labels, so a client sending a 200 KB `service.name` or tool name would otherwise
//! multiply it into hundreds of megabytes and into forwarded spans larger than the
//! downstream accepts. Fingerprints are computed from the call as recorded, not from these
//! names.

use std::sync::Arc;

use dashmap::DashMap;

use crate::compare::NameClass;

/// Names kept by default: far more distinct tool and agent names than a fleet has.
pub const DEFAULT_CAPACITY: usize = 4096;

/// Longest name kept, in bytes (UTF-8; longer names are cut at a character boundary and end
/// in `…`): 256, four times the 64 characters the OpenAI and Anthropic APIs allow a tool name.
pub const MAX_NAME_BYTES: usize = 256;

/// `name` within [`MAX_NAME_BYTES`]: itself, or its start cut at a character boundary
/// followed by `…` (3 bytes), 256 bytes at most.
pub fn bounded_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= MAX_NAME_BYTES {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut end = MAX_NAME_BYTES - '…'.len_utf8();
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", &name[..end]))
}

/// A bounded set of shared names.
#[derive(Debug)]
pub struct Interner {
    /// foldhash: looked up for every tool call (SipHash showed in the per-span profile).
    names: DashMap<Arc<str>, NameClass, foldhash::fast::RandomState>,
    capacity: usize,
}

impl Default for Interner {
    fn default() -> Self {
        Interner::new(DEFAULT_CAPACITY)
    }
}

impl Interner {
    /// An empty interner keeping at most `capacity` names.
    pub fn new(capacity: usize) -> Self {
        Interner {
            names: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            capacity,
        }
    }

    /// The shared `Arc<str>` equal to `name` (a new one, kept if there is room).
    pub fn get(&self, name: &str) -> Arc<str> {
        self.get_classed(name).0
    }

    /// [`Interner::get`] with the name's [`NameClass`] (read now when the name is not kept).
    /// A name over [`MAX_NAME_BYTES`] is kept and returned cut ([`bounded_name`]).
    pub fn get_classed(&self, name: &str) -> (Arc<str>, NameClass) {
        let name = &*bounded_name(name);
        if let Some(shared) = self.names.get(name) {
            return (shared.key().clone(), *shared.value());
        }
        let fresh: Arc<str> = Arc::from(name);
        let class = NameClass::of(name);
        if self.names.len() < self.capacity {
            self.names.insert(fresh.clone(), class);
        }
        (fresh, class)
    }

    /// Names kept.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no name is kept.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_at_a_character_boundary() {
        let interner = Interner::new(4);
        assert_eq!(&*interner.get("read_file"), "read_file");
        let exact = "a".repeat(MAX_NAME_BYTES);
        assert_eq!(&*interner.get(&exact), exact);
        // 'é' is two bytes: the cut must not split one.
        let long = format!("x{}", "é".repeat(200_000));
        let cut = interner.get(&long);
        assert!(cut.len() <= MAX_NAME_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(long.starts_with(cut.trim_end_matches('…')));
        assert_eq!(
            cut.len(),
            1 + 2 * 126 + 3,
            "as many whole characters as fit"
        );
        // The same long name again shares the kept allocation.
        assert!(Arc::ptr_eq(&cut, &interner.get(&long)));
    }

    #[test]
    fn equal_names_share_one_allocation_up_to_the_capacity() {
        let interner = Interner::new(2);
        let a = interner.get("read_file");
        let b = interner.get("read_file");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "read_file");
        interner.get("grep");
        let c = interner.get("edit_file");
        let d = interner.get("edit_file");
        assert_eq!(c, d);
        assert!(!Arc::ptr_eq(&c, &d), "past the capacity names are not kept");
        assert_eq!(interner.len(), 2);
        assert_eq!(
            interner.get_classed("edit_file").1,
            NameClass::of("edit_file")
        );
        assert!(interner.get_classed("run_shell").1.shell);
        assert!(interner.get_classed("grep").1 == NameClass::default());
    }
}
