//! A bounded FIFO whose items belong to `N` classes ranked by what a full queue gives up
//! last, shared by the detection report queue (`pipeline::reporter`: info, warn, kill)
//! and each signal sink's queue (`signals::sink`: warn, kill).
//!
//! Items leave in arrival order across classes. A full queue makes room by dropping the
//! oldest item of the lowest non-empty class not above the arriving item's; when every
//! queued item ranks above it, the arriving item is refused. Each class is its own FIFO,
//! entries tagged with their arrival number, so both the drop and the next item are found
//! at a front, never by a scan (a full queue of a signal sink that is down during a loop
//! storm is mostly kills, and a scan past them under the lock cost every arriving signal).
//! Not synchronised: the owner holds it under its lock.

use std::collections::VecDeque;

/// What [`ClassQueue::push`] did with an item.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed<T> {
    /// Queued; nothing dropped.
    Queued,
    /// Queued, after dropping `item`, the oldest of `class`, to make room.
    Evicted { class: usize, item: T },
    /// Not queued: the queue is full of items of higher classes. Here is the item back.
    Refused(T),
}

/// Bounded FIFO of items in `N` classes (0 = dropped first); see the module docs.
#[derive(Debug)]
pub struct ClassQueue<T, const N: usize> {
    capacity: usize,
    /// One FIFO per class, entries tagged with their arrival number.
    queues: [VecDeque<(u64, T)>; N],
    next: u64,
}

impl<T, const N: usize> ClassQueue<T, N> {
    /// An empty queue holding at most `capacity` items (at least 1).
    pub fn new(capacity: usize) -> Self {
        ClassQueue {
            capacity: capacity.max(1),
            queues: std::array::from_fn(|_| VecDeque::new()),
            next: 0,
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// True when no item is waiting.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// Queues `item` of `class` (below `N`), dropping by the policy of the module docs when
    /// full.
    pub fn push(&mut self, class: usize, item: T) -> Pushed<T> {
        let pushed = if self.len() >= self.capacity {
            let evicted = (0..=class).find_map(|c| {
                let (_, item) = self.queues[c].pop_front()?;
                Some(Pushed::Evicted { class: c, item })
            });
            match evicted {
                Some(evicted) => evicted,
                None => return Pushed::Refused(item),
            }
        } else {
            Pushed::Queued
        };
        self.queues[class].push_back((self.next, item));
        self.next += 1;
        pushed
    }

    /// Queues `item` of `class` whatever the capacity (the owner bounds the queue itself,
    /// with [`ClassQueue::evict_for`]); returns its arrival number, for
    /// [`ClassQueue::get_mut`].
    pub fn push_unbounded(&mut self, class: usize, item: T) -> u64 {
        let seq = self.next;
        self.queues[class].push_back((seq, item));
        self.next += 1;
        seq
    }

    /// The arrival number the next pushed item gets.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Takes out the oldest item of the lowest non-empty class not above `class`, with its
    /// class: what a full queue gives up for an arriving item of `class`.
    pub fn evict_for(&mut self, class: usize) -> Option<(usize, T)> {
        (0..=class.min(N - 1)).find_map(|c| self.queues[c].pop_front().map(|(_, item)| (c, item)))
    }

    /// The queued item of `class` that arrived as number `seq`, if it is still queued.
    pub fn get_mut(&mut self, class: usize, seq: u64) -> Option<&mut T> {
        let queue = self.queues.get_mut(class)?;
        let at = queue.binary_search_by_key(&seq, |(n, _)| *n).ok()?;
        queue.get_mut(at).map(|(_, item)| item)
    }

    /// Items of `class` waiting.
    pub fn len_of(&self, class: usize) -> usize {
        self.queues.get(class).map_or(0, VecDeque::len)
    }

    /// The oldest item, in arrival order across classes.
    pub fn pop_front(&mut self) -> Option<T> {
        let (_, class) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(c, queue)| queue.front().map(|(n, _)| (*n, c)))
            .min()?;
        self.queues[class].pop_front().map(|(_, item)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain<const N: usize>(queue: &mut ClassQueue<&'static str, N>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.pop_front()).collect()
    }

    #[test]
    fn items_leave_in_arrival_order_across_classes() {
        let mut queue = ClassQueue::<_, 3>::new(10);
        for (class, item) in [(2, "k1"), (0, "i1"), (1, "w1"), (0, "i2"), (2, "k2")] {
            assert_eq!(queue.push(class, item), Pushed::Queued);
        }
        assert_eq!(queue.len(), 5);
        assert_eq!(drain(&mut queue), ["k1", "i1", "w1", "i2", "k2"]);
        assert!(queue.is_empty());
    }

    #[test]
    fn a_full_queue_drops_the_oldest_of_the_lowest_class_not_above_the_arriving_one() {
        let mut queue = ClassQueue::<_, 3>::new(3);
        queue.push(2, "k1");
        queue.push(1, "w1");
        queue.push(0, "i1");
        // A warn arriving: the info goes, though older items rank higher.
        assert_eq!(
            queue.push(1, "w2"),
            Pushed::Evicted {
                class: 0,
                item: "i1"
            }
        );
        // An info arriving with nothing of its class queued is refused.
        assert_eq!(queue.push(0, "i2"), Pushed::Refused("i2"));
        // A kill arriving: the oldest warn goes, from between the kills' arrivals.
        assert_eq!(
            queue.push(2, "k2"),
            Pushed::Evicted {
                class: 1,
                item: "w1"
            }
        );
        assert_eq!(
            queue.push(2, "k3"),
            Pushed::Evicted {
                class: 1,
                item: "w2"
            }
        );
        // Only kills: a kill arriving pushes out the oldest kill.
        assert_eq!(
            queue.push(2, "k4"),
            Pushed::Evicted {
                class: 2,
                item: "k1"
            }
        );
        assert_eq!(drain(&mut queue), ["k2", "k3", "k4"]);
    }

    #[test]
    fn unbounded_pushes_are_found_by_arrival_number_and_evicted_lowest_class_first() {
        let mut queue = ClassQueue::<_, 2>::new(1);
        let k1 = queue.push_unbounded(1, "k1");
        let w1 = queue.push_unbounded(0, "w1");
        let k2 = queue.push_unbounded(1, "k2");
        assert_eq!(queue.len(), 3);
        assert_eq!(queue.len_of(1), 2);
        if let Some(item) = queue.get_mut(1, k2) {
            *item = "k2'";
        }
        assert_eq!(queue.get_mut(0, k1), None, "k1 is a kill");
        assert_eq!(queue.get_mut(0, w1).map(|w| *w), Some("w1"));
        assert_eq!(queue.evict_for(0), Some((0, "w1")));
        assert_eq!(
            queue.evict_for(0),
            None,
            "no warn left to give up for a warn"
        );
        assert_eq!(queue.evict_for(1), Some((1, "k1")));
        assert_eq!(drain(&mut queue), ["k2'"]);
    }

    #[test]
    fn capacity_is_at_least_one() {
        let mut queue = ClassQueue::<_, 2>::new(0);
        assert_eq!(queue.push(0, "a"), Pushed::Queued);
        assert_eq!(
            queue.push(0, "b"),
            Pushed::Evicted {
                class: 0,
                item: "a"
            }
        );
        assert_eq!(drain(&mut queue), ["b"]);
    }
}
