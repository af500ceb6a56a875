//! The buffers an export's short parts are gathered into ([`super::client`]), kept per
//! thread and reused by later exports of the thread.
//!
//! An annotated 1000-span request is hundreds of short parts, gathered into one chunk of
//! about its own size (430 KB in the load generator's loop-heavy traffic). A fresh buffer
//! per export was allocated, faulted in page by page and returned to the kernel when
//! freed (glibc trims the top of a thread's heap), so the page faults cost more than the
//! copy. Once HTTP/2 has written and dropped every chunk frozen from a kept buffer, a
//! later export of the thread writes into the same memory again.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers whose storage is larger than this are not kept (a gRPC request is at most
/// 4 MiB by default; requests that large are rare and keep allocating).
pub const MAX_KEPT_BYTES: usize = 1024 * 1024;

/// Buffers a thread keeps: several exports are in flight at once (`exporter.concurrency`),
/// and a buffer is reusable only once HTTP/2 has written and dropped its chunks, so the
/// last buffer alone was still in use at the next export most of the time.
pub const KEPT_PER_THREAD: usize = 4;

thread_local! {
    /// This thread's kept gather buffers, empty, each sharing its storage with the chunks
    /// frozen from it until they are dropped.
    static KEPT: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `capacity` bytes: one of this thread's kept buffers that
/// no live chunk shares and that is large enough, else a new one.
pub fn take(capacity: usize) -> BytesMut {
    if capacity <= MAX_KEPT_BYTES {
        let reused = KEPT.with_borrow_mut(|kept| {
            let free = kept.iter_mut().position(|b| b.try_reclaim(capacity))?;
            Some(kept.swap_remove(free))
        });
        if let Some(buffer) = reused {
            return buffer;
        }
    }
    BytesMut::with_capacity(capacity)
}

/// Keeps `buffer` (whose bytes were split off and frozen, so it is empty) for a later
/// [`take`] on this thread, unless it was larger than [`MAX_KEPT_BYTES`]. With
/// [`KEPT_PER_THREAD`] kept already, the one kept first goes (its memory is freed once its
/// chunks are).
pub fn keep(buffer: BytesMut, capacity: usize) {
    debug_assert!(buffer.is_empty());
    if capacity > MAX_KEPT_BYTES {
        return;
    }
    KEPT.with_borrow_mut(|kept| {
        if kept.len() >= KEPT_PER_THREAD {
            kept.remove(0);
        }
        kept.push(buffer);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    /// Fills a buffer of `len` bytes from [`take`], freezes it and keeps the buffer:
    /// what one export does. Returns the chunk.
    fn export(len: usize, byte: u8) -> bytes::Bytes {
        let mut buffer = take(len);
        buffer.put_bytes(byte, len);
        let chunk = buffer.split().freeze();
        keep(buffer, len);
        chunk
    }

    #[test]
    fn a_buffer_is_reused_once_its_chunks_are_dropped() {
        let first = export(4096, 1);
        // The first chunk is alive (HTTP/2 has not written it yet): new memory.
        let second = export(4096, 2);
        assert_ne!(second.as_ptr(), first.as_ptr());
        let second_address = second.as_ptr();
        assert_eq!(first, vec![1u8; 4096], "the live chunk is untouched");

        // Every chunk of the second buffer dropped: the next export writes its memory,
        // though the first is kept too (still in use).
        drop(second);
        let third = export(4000, 3);
        assert_eq!(third.as_ptr(), second_address);
        assert_eq!(third, vec![3u8; 4000]);
        assert_eq!(first, vec![1u8; 4096], "an older chunk is still untouched");
    }

    #[test]
    fn a_thread_keeps_a_few_buffers() {
        let live: Vec<_> = (0..KEPT_PER_THREAD as u8 + 2)
            .map(|i| export(64, i))
            .collect();
        assert_eq!(KEPT.with_borrow(Vec::len), KEPT_PER_THREAD);
        // The ones kept are the last ones: the first two went when the pool was full.
        let kept: Vec<_> = live[2..].iter().map(|chunk| chunk.as_ptr()).collect();
        drop(live);
        let reused = take(64);
        assert!(kept.contains(&reused.as_ptr()));
        assert_eq!(KEPT.with_borrow(Vec::len), KEPT_PER_THREAD - 1);
    }

    #[test]
    fn a_smaller_buffer_or_a_large_request_allocates() {
        let small = export(100, 1);
        let small_address = small.as_ptr();
        drop(small);
        let larger = export(10_000, 2);
        assert_ne!(larger.as_ptr(), small_address);
        assert_eq!(larger, vec![2u8; 10_000]);

        drop(larger);
        let large = take(MAX_KEPT_BYTES + 1);
        assert!(large.capacity() > MAX_KEPT_BYTES);
        keep(large, MAX_KEPT_BYTES + 1);
        // The large one was not kept.
        assert!(KEPT.with_borrow(|kept| kept.iter().all(|b| b.capacity() <= MAX_KEPT_BYTES)));
    }
}
