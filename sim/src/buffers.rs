//! Byte buffers the device reuses: frames, gathered WQE payloads, and WQEs of more than one
//! WQEBB.
//!
//! A frame is built into a buffer taken here (or, from a UDP wire, copied into one), crosses
//! the in-process fabric by move, and after the receiving device has handled it, its buffer
//! comes back here; a SEND or WRITE's gathered payload does the same when its WQE completes,
//! and a long WQE once it is parsed. With run to completion the thread that rings
//! a doorbell usually also handles the frames it caused, so a thread's own list of spare
//! buffers serves it without allocation once warm. The list is per thread (no lock) and
//! bounded in count and in buffer size, so it never holds more than
//! `SPARE_BUFFERS * SPARE_BUFFER_BYTES`.

use std::cell::RefCell;

/// Spare buffers a thread keeps at most.
pub const SPARE_BUFFERS: usize = 128;
/// The largest buffer kept (a jumbo frame); larger ones are freed.
pub const SPARE_BUFFER_BYTES: usize = 10 * 1024;

thread_local! {
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer: a spare one if this thread has one, else a new (unallocated) one.
pub(crate) fn take() -> Vec<u8> {
    SPARE.with_borrow_mut(|s| s.pop()).unwrap_or_default()
}

/// Gives `buf` back for reuse (dropped if the list is full, or the buffer too small to be
/// worth keeping or too large to keep).
pub(crate) fn give(mut buf: Vec<u8>) {
    if buf.capacity() < 64 || buf.capacity() > SPARE_BUFFER_BYTES {
        return;
    }
    buf.clear();
    SPARE.with_borrow_mut(|s| {
        if s.len() < SPARE_BUFFERS {
            s.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_empty_with_its_allocation() {
        let mut b = Vec::with_capacity(1500);
        b.extend_from_slice(&[7u8; 100]);
        let p = b.as_ptr();
        give(b);
        let again = take();
        assert!(again.is_empty());
        assert_eq!((again.as_ptr(), again.capacity()), (p, 1500));
        assert_eq!(take().capacity(), 0, "one given, one taken: the next is new");
    }

    #[test]
    fn the_list_is_bounded_in_count_and_size() {
        give(Vec::with_capacity(SPARE_BUFFER_BYTES + 1));
        assert_eq!(take().capacity(), 0, "too large to keep");
        for _ in 0..SPARE_BUFFERS + 10 {
            give(Vec::with_capacity(256));
        }
        let mut kept = 0;
        while take().capacity() > 0 {
            kept += 1;
        }
        assert_eq!(kept, SPARE_BUFFERS);
    }
}
