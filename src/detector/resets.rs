//! Edit-and-retry is work (issue 29 item 4). Running the same test again after a new edit
//! is debugging; running it again with nothing changed in between, or after the same edit
//! again, is a loop. So repeated_call and repeated_result count a call's occurrences only
//! after the latest call in the window that changed state with new arguments: a call with
//! [`CallTraits::WRITES`] or [`CallTraits::MOVES`] that did not fail (no error status, and
//! no result that reads as a failure, [`CallTraits::OUTCOME`] on a state change: "Your
//! changes have NOT been applied") and whose tool and shape ([`CallTraits::shape`]: its
//! arguments with digits left out) no other state change in the window has. An edit repeated, or repeated with only a number changed (a port, a
//! line, an attempt counter), is the same edit again, and neither of its copies counts:
//! the agent is cycling, not debugging.

use super::{CallRecord, CallTraits};

/// The index in `window` from which occurrences of its last call count (0: all of them).
pub(crate) fn counted_from(window: &[CallRecord]) -> usize {
    let Some(before) = window.len().checked_sub(1).map(|n| &window[..n]) else {
        return 0;
    };
    if !before.iter().any(|r| r.traits.mutates()) {
        return 0; // most windows: no state change at all
    }
    for (i, r) in before.iter().enumerate().rev() {
        let failed = r.traits.has(CallTraits::ERROR) || r.traits.has(CallTraits::OUTCOME);
        if !r.traits.mutates() || failed {
            continue;
        }
        let repeated = window.iter().enumerate().any(|(j, other)| {
            j != i
                && other.traits.mutates()
                && other.traits.shape() == r.traits.shape()
                && other.tool_name == r.tool_name
        });
        if !repeated {
            return i + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::rec;

    fn edit(index: usize, arg: u8, shape: u16) -> CallRecord {
        let mut r = rec(index, "edit", arg, 0);
        r.traits = CallTraits::with_flags(CallTraits::WRITES);
        r.traits.set_shape(shape);
        r
    }

    #[test]
    fn a_new_edit_resets_a_repeated_one_does_not() {
        let test = |i| rec(i, "test", 1, 7);
        // test, edit A, test, edit B, test: counted after edit B
        let w = vec![test(0), edit(1, 2, 10), test(2), edit(3, 3, 11), test(4)];
        assert_eq!(counted_from(&w), 4);
        // test, edit A, test, edit A' (same shape), test: every test counts
        let w = vec![test(0), edit(1, 2, 10), test(2), edit(3, 3, 10), test(4)];
        assert_eq!(counted_from(&w), 0);
        // no edit: all count
        assert_eq!(counted_from(&[test(0), test(1)]), 0);
        // a failed edit changes nothing, nor one whose result reads as a failure
        let mut failed = edit(1, 2, 12);
        failed.traits.set(CallTraits::ERROR, true);
        assert_eq!(counted_from(&[test(0), failed, test(2)]), 0);
        let mut rejected = edit(1, 2, 12);
        rejected.traits.set(CallTraits::OUTCOME, true);
        assert_eq!(counted_from(&[test(0), rejected, test(2)]), 0);
        // the last call being the same edit again makes the earlier one no reset
        let w = vec![edit(0, 2, 10), test(1), edit(2, 2, 10)];
        assert_eq!(counted_from(&w), 0);
    }
}
