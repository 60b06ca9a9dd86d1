//! Byte buffers the device reuses: frames, the inline data of send WQEs, and WQEs of more than
//! one WQEBB.
//!
//! A frame is built into a buffer taken here (or, from a UDP wire, copied into one), crosses
//! the in-process fabric by move, and after the receiving device has handled it, its buffer
//! comes back here; a send WQE's inline data does the same when its WQE completes, and a long
//! WQE once it is parsed. (A payload in host memory is read into each frame as it is built:
//! it takes no buffer of its own.)
//!
//! Each thread keeps its own list of spare buffers (no lock). With run to completion the
//! thread that rings a doorbell usually also handles the frames it caused, so its list serves
//! it; but not always: a doorbell that finds a device busy leaves its frames to the thread
//! that holds it, so buffers taken on one thread are often given back on another. A list that
//! overflows therefore passes a magazine of [`MAGAZINE`] buffers to a shared depot, and an
//! empty list takes a whole magazine from there before it allocates: one lock per magazine,
//! not per buffer (the magazine and depot design of Bonwick and Adams' allocator).
//!
//! Everything is bounded: a buffer is kept only up to [`SPARE_BUFFER_BYTES`] (more than any
//! frame or WQE); a thread keeps at most [`SPARE_BUFFERS`] buffers and
//! [`SPARE_BYTES`] of capacity; the depot at most [`DEPOT_MAGAZINES`] magazines and
//! [`DEPOT_BYTES`]. Together they cover what a send queue holds back: a posted SEND or WRITE
//! keeps its inline data until its ACK, so a window of several hundred requests returns
//! several hundred buffers at one ACK (past a thread's own list, into the depot) and takes
//! them again as it refills. A thread's list is kept short because it fills only slowly (from
//! the buffers other threads took): a long one showed as resident memory still growing
//! millions of messages after a warm-up.

use std::cell::RefCell;
use std::sync::Mutex;

/// Spare buffers a thread keeps at most.
pub const SPARE_BUFFERS: usize = 256;
/// The largest buffer kept; larger ones are freed.
pub const SPARE_BUFFER_BYTES: usize = 64 * 1024;
/// The smallest buffer kept: smaller ones are freed.
pub const SPARE_BUFFER_MIN_BYTES: usize = 64;
/// The capacity of a new buffer (when no spare one is left): more than the smallest kept, so
/// that a buffer made for a short frame (an ACK: 62 bytes) is kept too, not made again for
/// each.
pub const NEW_BUFFER_BYTES: usize = 256;
/// The most capacity a thread's spare buffers hold together.
pub const SPARE_BYTES: usize = 2 * 1024 * 1024;
/// Buffers moved between a thread and the depot at a time.
pub const MAGAZINE: usize = 64;
/// Magazines the depot keeps at most.
pub const DEPOT_MAGAZINES: usize = 64;
/// The most capacity the depot's buffers hold together.
pub const DEPOT_BYTES: usize = 8 * 1024 * 1024;

/// Buffers and their total capacity: a thread's list, or a magazine.
#[derive(Default)]
struct Spare {
    list: Vec<Vec<u8>>,
    bytes: usize,
}

/// Full magazines given up by threads with too many spare buffers.
#[derive(Default)]
struct Depot {
    magazines: Vec<Spare>,
    bytes: usize,
}

impl Spare {
    /// The last `n` buffers, as a magazine.
    fn split_off(&mut self, n: usize) -> Spare {
        let list = self.list.split_off(self.list.len() - n.min(self.list.len()));
        let bytes = list.iter().map(Vec::capacity).sum();
        self.bytes -= bytes;
        Spare { list, bytes }
    }

    /// A spare buffer, from this list or (when it is empty) from a magazine of `depot`.
    fn take(&mut self, depot: &Mutex<Depot>) -> Option<Vec<u8>> {
        if self.list.is_empty() {
            let mut d = lock(depot);
            let m = d.magazines.pop()?;
            d.bytes -= m.bytes;
            drop(d);
            self.bytes += m.bytes;
            self.list.extend(m.list);
        }
        let b = self.list.pop()?;
        self.bytes -= b.capacity();
        Some(b)
    }

    /// Keeps `buf` (whose capacity is worth keeping): in this list, after passing a magazine
    /// to `depot` if the list is full. Freed if the depot is full too.
    fn give(&mut self, buf: Vec<u8>, depot: &Mutex<Depot>) {
        let cap = buf.capacity();
        if self.list.len() >= SPARE_BUFFERS || self.bytes + cap > SPARE_BYTES {
            let m = self.split_off(MAGAZINE);
            let mut d = lock(depot);
            if d.magazines.len() < DEPOT_MAGAZINES && d.bytes + m.bytes <= DEPOT_BYTES {
                d.bytes += m.bytes;
                d.magazines.push(m);
            }
        }
        if self.list.len() < SPARE_BUFFERS && self.bytes + cap <= SPARE_BYTES {
            self.bytes += cap;
            self.list.push(buf);
        }
    }
}

fn lock(depot: &Mutex<Depot>) -> std::sync::MutexGuard<'_, Depot> {
    depot.lock().unwrap_or_else(|e| e.into_inner())
}

static DEPOT: Mutex<Depot> = Mutex::new(Depot { magazines: Vec::new(), bytes: 0 });

thread_local! {
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare { list: Vec::new(), bytes: 0 }) };
}

/// An empty buffer: a spare one if this thread or the depot has one, else a new one of
/// [`NEW_BUFFER_BYTES`].
pub(crate) fn take() -> Vec<u8> {
    let mut b = take_stale();
    b.clear();
    b
}

/// [`take`] for a writer that writes every byte it keeps (the frame builder): a spare buffer
/// still holds the bytes of its last use, so that sizing it for the next frame of that size
/// costs no zeroing.
pub(crate) fn take_stale() -> Vec<u8> {
    SPARE.with_borrow_mut(|s| s.take(&DEPOT)).unwrap_or_else(|| Vec::with_capacity(NEW_BUFFER_BYTES))
}

/// Gives `buf` back for reuse (freed if it is too small to be worth keeping or too large to
/// keep, or if this thread's list and the depot are full).
pub(crate) fn give(buf: Vec<u8>) {
    if (SPARE_BUFFER_MIN_BYTES..=SPARE_BUFFER_BYTES).contains(&buf.capacity()) {
        SPARE.with_borrow_mut(|s| s.give(buf, &DEPOT));
    }
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
        give(again);
        let mut stale = Vec::with_capacity(1500);
        stale.extend_from_slice(&[9u8; 200]);
        give(stale);
        let again = take_stale();
        assert_eq!((again.len(), again.capacity()), (200, 1500), "its bytes left for a writer of every byte");
        assert!(again.iter().all(|&b| b == 9));
    }

    #[test]
    fn buffers_too_small_or_too_large_are_not_kept() {
        let (mut s, depot) = (Spare::default(), Mutex::new(Depot::default()));
        SPARE.with_borrow_mut(|t| std::mem::swap(t, &mut s));
        give(Vec::with_capacity(SPARE_BUFFER_BYTES + 1));
        give(Vec::with_capacity(63));
        give(Vec::with_capacity(SPARE_BUFFER_BYTES));
        SPARE.with_borrow_mut(|t| std::mem::swap(t, &mut s));
        assert_eq!(s.list.len(), 1, "only the 64 KiB one (a 64 KiB payload's) is kept");
        assert_eq!(s.take(&depot).map(|b| b.capacity()), Some(SPARE_BUFFER_BYTES));
    }

    /// `n` buffers of `cap` bytes given to `s`.
    fn give_n(s: &mut Spare, depot: &Mutex<Depot>, n: usize, cap: usize) {
        for _ in 0..n {
            s.give(Vec::with_capacity(cap), depot);
        }
    }

    #[test]
    fn a_full_list_passes_magazines_to_the_depot_which_is_bounded() {
        let (mut s, depot) = (Spare::default(), Mutex::new(Depot::default()));
        give_n(&mut s, &depot, SPARE_BUFFERS, 256);
        assert_eq!((s.list.len(), s.bytes), (SPARE_BUFFERS, SPARE_BUFFERS * 256));
        assert!(lock(&depot).magazines.is_empty());
        give_n(&mut s, &depot, 1, 256);
        assert_eq!(s.list.len(), SPARE_BUFFERS - MAGAZINE + 1);
        let d = lock(&depot);
        assert_eq!((d.magazines.len(), d.bytes), (1, MAGAZINE * 256));
        drop(d);
        give_n(&mut s, &depot, (DEPOT_MAGAZINES + 3) * MAGAZINE, 256);
        let d = lock(&depot);
        assert_eq!(d.magazines.len(), DEPOT_MAGAZINES);
        assert!(d.magazines.iter().all(|m| m.list.len() == MAGAZINE && m.bytes == MAGAZINE * 256));
        assert!(s.list.len() <= SPARE_BUFFERS);
    }

    #[test]
    fn a_list_and_the_depot_are_bounded_in_capacity() {
        let (mut s, depot) = (Spare::default(), Mutex::new(Depot::default()));
        give_n(&mut s, &depot, 4 * DEPOT_BYTES / SPARE_BUFFER_BYTES, SPARE_BUFFER_BYTES);
        assert!(s.bytes <= SPARE_BYTES && s.bytes + SPARE_BUFFER_BYTES > SPARE_BYTES, "{}", s.bytes);
        let d = lock(&depot);
        assert!(d.bytes <= DEPOT_BYTES && d.bytes + MAGAZINE * SPARE_BUFFER_BYTES > DEPOT_BYTES, "{}", d.bytes);
        assert_eq!(d.bytes, d.magazines.iter().map(|m| m.list.iter().map(Vec::capacity).sum::<usize>()).sum());
    }

    #[test]
    fn buffers_given_on_one_thread_are_taken_on_another() {
        let depot = Mutex::new(Depot::default());
        let mut giver = Spare::default();
        give_n(&mut giver, &depot, SPARE_BUFFERS + 1, 512);
        let mut taker = Spare::default();
        for _ in 0..MAGAZINE {
            assert_eq!(taker.take(&depot).map(|b| (b.len(), b.capacity())), Some((0, 512)));
        }
        assert!(taker.take(&depot).is_none(), "one magazine was in the depot");
        assert_eq!((taker.bytes, lock(&depot).bytes), (0, 0));
    }
}
