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
//! overflows therefore passes [`MAGAZINE`] buffers to a shared depot, and an empty list takes
//! as many from there before it allocates: one lock per magazine, not per buffer (the magazine
//! and depot design of Bonwick and Adams' allocator). A thread that runs a device only now
//! and then (a device's engine) passes all its spare buffers to the depot when it goes idle
//! (`release`): kept in its list, they would be lost to the threads that run the data path,
//! which would allocate new ones in their place until the idle list filled.
//!
//! Everything is bounded: a buffer is kept only up to [`SPARE_BUFFER_BYTES`] (more than any
//! frame or WQE); a thread keeps at most [`SPARE_BUFFERS`] buffers and
//! [`SPARE_BYTES`] of capacity; the depot at most [`DEPOT_BUFFERS`] and
//! [`DEPOT_BYTES`]. Together they cover what a send queue holds back: a posted SEND or WRITE
//! keeps its inline data until its ACK, so a window of several hundred requests returns
//! several hundred buffers at one ACK (past a thread's own list, into the depot) and takes
//! them again as it refills. A thread's list is kept short because it fills only slowly (from
//! the buffers other threads took): a long one showed as resident memory still growing
//! millions of messages after a warm-up. The lists themselves are allocated whole, when a
//! thread that runs devices starts (`prepare_thread`) or else on their first use, so that
//! moving buffers between them never allocates.

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
/// Buffers the depot keeps at most.
pub const DEPOT_BUFFERS: usize = 64 * MAGAZINE;
/// The most capacity the depot's buffers hold together.
pub const DEPOT_BYTES: usize = 8 * 1024 * 1024;
/// Buffers of [`NEW_BUFFER_BYTES`] the depot is stocked with when it is made (128 KiB), as a
/// NIC driver fills its buffer pool before it starts: the frames a stream has in flight at
/// once (a window of requests, their ACKs, the frames queued at a receiver) then come from
/// the pool, not the allocator, even the first time the stream gets that deep.
pub const DEPOT_STOCK: usize = 512;

/// Spare buffers and their total capacity, at most `limit` of them and `limit_bytes`
/// together: a thread's list, or the depot.
struct Spare {
    list: Vec<Vec<u8>>,
    bytes: usize,
    limit: usize,
    limit_bytes: usize,
}

impl Spare {
    /// A thread's list.
    const fn thread() -> Spare {
        Spare { list: Vec::new(), bytes: 0, limit: SPARE_BUFFERS, limit_bytes: SPARE_BYTES }
    }

    /// The depot.
    const fn depot() -> Spare {
        Spare { list: Vec::new(), bytes: 0, limit: DEPOT_BUFFERS, limit_bytes: DEPOT_BYTES }
    }

    /// Whether `buf` fits beside the buffers kept.
    fn has_room(&self, buf: &Vec<u8>) -> bool {
        self.list.len() < self.limit && self.bytes + buf.capacity() <= self.limit_bytes
    }

    /// Keeps `buf` if it fits (else frees it); the list is allocated whole first.
    fn keep(&mut self, buf: Vec<u8>) {
        if self.has_room(&buf) {
            self.allocate();
            self.bytes += buf.capacity();
            self.list.push(buf);
        }
    }

    /// Allocates the list whole, if not yet, its memory written once (empty entries, then
    /// dropped): a list that gets deeper later than it ever was before touches no new page
    /// then. Whether it allocated it now.
    fn allocate(&mut self) -> bool {
        if self.list.capacity() != 0 {
            return false;
        }
        self.list.reserve_exact(self.limit);
        self.list.resize_with(self.limit, Vec::new);
        self.list.clear();
        true
    }

    /// Allocates the depot and stocks it with [`DEPOT_STOCK`] new buffers, if not yet.
    fn make_depot(&mut self) {
        if self.allocate() {
            for _ in 0..DEPOT_STOCK {
                self.keep(Vec::with_capacity(NEW_BUFFER_BYTES));
            }
        }
    }

    /// Moves the last `n` buffers (at most) to `to`: those that do not fit there are freed.
    fn pass(&mut self, n: usize, to: &mut Spare) {
        for buf in self.list.drain(self.list.len() - n.min(self.list.len())..) {
            self.bytes -= buf.capacity();
            to.keep(buf);
        }
    }

    /// A spare buffer, from this list or (when it is empty) from a magazine of `depot`.
    fn take(&mut self, depot: &Mutex<Spare>) -> Option<Vec<u8>> {
        if self.list.is_empty() {
            lock(depot).pass(MAGAZINE, self);
        }
        let b = self.list.pop()?;
        self.bytes -= b.capacity();
        Some(b)
    }

    /// Passes every buffer of this list to `depot`.
    fn release(&mut self, depot: &Mutex<Spare>) {
        if !self.list.is_empty() {
            self.pass(self.list.len(), &mut lock(depot));
        }
    }

    /// Keeps `buf` (whose capacity is worth keeping): in this list, after passing a magazine
    /// to `depot` if the list is full.
    #[inline]
    fn give(&mut self, buf: Vec<u8>, depot: &Mutex<Spare>) {
        // The usual case, a list with room in its allocation, in a few instructions.
        if self.has_room(&buf) && self.list.len() < self.list.capacity() {
            self.bytes += buf.capacity();
            self.list.push(buf);
        } else {
            self.give_past_room(buf, depot);
        }
    }

    /// [`Spare::give`] to a list that is full or not yet allocated.
    #[cold]
    fn give_past_room(&mut self, buf: Vec<u8>, depot: &Mutex<Spare>) {
        if !self.has_room(&buf) {
            self.pass(MAGAZINE, &mut lock(depot));
        }
        self.keep(buf);
    }
}

fn lock(depot: &Mutex<Spare>) -> std::sync::MutexGuard<'_, Spare> {
    depot.lock().unwrap_or_else(|e| e.into_inner())
}

static DEPOT: Mutex<Spare> = Mutex::new(Spare::depot());

thread_local! {
    static SPARE: RefCell<Spare> = const { RefCell::new(Spare::thread()) };
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

/// Allocates this thread's list and the depot (stocked with [`DEPOT_STOCK`] buffers), if not
/// yet: for a thread about to run a device, so that its first frames on the data path
/// allocate nothing.
pub(crate) fn prepare_thread() {
    SPARE.with_borrow_mut(Spare::allocate);
    lock(&DEPOT).make_depot();
}

/// Passes this thread's spare buffers to the depot (a thread going idle: the module doc).
pub(crate) fn release() {
    SPARE.with_borrow_mut(|s| s.release(&DEPOT));
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
        let (mut s, depot) = (Spare::thread(), Mutex::new(Spare::depot()));
        SPARE.with_borrow_mut(|t| std::mem::swap(t, &mut s));
        give(Vec::with_capacity(SPARE_BUFFER_BYTES + 1));
        give(Vec::with_capacity(63));
        give(Vec::with_capacity(SPARE_BUFFER_BYTES));
        SPARE.with_borrow_mut(|t| std::mem::swap(t, &mut s));
        assert_eq!(s.list.len(), 1, "only the 64 KiB one (a 64 KiB payload's) is kept");
        assert_eq!(s.take(&depot).map(|b| b.capacity()), Some(SPARE_BUFFER_BYTES));
    }

    /// `n` buffers of `cap` bytes given to `s`.
    fn give_n(s: &mut Spare, depot: &Mutex<Spare>, n: usize, cap: usize) {
        for _ in 0..n {
            s.give(Vec::with_capacity(cap), depot);
        }
    }

    #[test]
    fn a_full_list_passes_magazines_to_the_depot_which_is_bounded() {
        let (mut s, depot) = (Spare::thread(), Mutex::new(Spare::depot()));
        give_n(&mut s, &depot, SPARE_BUFFERS, 256);
        assert_eq!((s.list.len(), s.bytes), (SPARE_BUFFERS, SPARE_BUFFERS * 256));
        assert!(lock(&depot).list.is_empty());
        give_n(&mut s, &depot, 1, 256);
        assert_eq!(s.list.len(), SPARE_BUFFERS - MAGAZINE + 1);
        let d = lock(&depot);
        assert_eq!((d.list.len(), d.bytes), (MAGAZINE, MAGAZINE * 256));
        drop(d);
        give_n(&mut s, &depot, DEPOT_BUFFERS + 3 * MAGAZINE, 256);
        let d = lock(&depot);
        assert_eq!((d.list.len(), d.bytes), (DEPOT_BUFFERS, DEPOT_BUFFERS * 256));
        assert_eq!(d.list.capacity(), DEPOT_BUFFERS, "allocated whole, once");
        assert!(s.list.len() <= SPARE_BUFFERS);
        assert_eq!(s.list.capacity(), SPARE_BUFFERS);
    }

    #[test]
    fn a_list_and_the_depot_are_bounded_in_capacity() {
        let (mut s, depot) = (Spare::thread(), Mutex::new(Spare::depot()));
        give_n(&mut s, &depot, 4 * DEPOT_BYTES / SPARE_BUFFER_BYTES, SPARE_BUFFER_BYTES);
        assert!(s.bytes <= SPARE_BYTES && s.bytes + SPARE_BUFFER_BYTES > SPARE_BYTES, "{}", s.bytes);
        let d = lock(&depot);
        assert!(d.bytes <= DEPOT_BYTES && d.bytes + SPARE_BUFFER_BYTES > DEPOT_BYTES, "{}", d.bytes);
        assert_eq!(d.bytes, d.list.iter().map(Vec::capacity).sum::<usize>());
    }

    #[test]
    fn an_idle_thread_passes_all_its_buffers_to_the_depot_for_others() {
        let (mut idle, depot) = (Spare::thread(), Mutex::new(Spare::depot()));
        give_n(&mut idle, &depot, 10, 300);
        idle.release(&depot);
        assert_eq!((idle.list.len(), idle.bytes), (0, 0));
        assert_eq!(idle.list.capacity(), SPARE_BUFFERS, "the list stays allocated for its next run");
        let d = lock(&depot);
        assert_eq!((d.list.len(), d.bytes), (10, 3000));
        drop(d);
        // Another thread's empty list takes them instead of allocating.
        let mut busy = Spare::thread();
        for _ in 0..10 {
            assert_eq!(busy.take(&depot).map(|b| b.capacity()), Some(300));
        }
        assert!(busy.take(&depot).is_none());
    }

    #[test]
    fn the_depot_is_made_once_stocked_and_serves_a_new_thread_without_allocating() {
        let depot = Mutex::new(Spare::depot());
        lock(&depot).make_depot();
        let d = lock(&depot);
        assert_eq!((d.list.len(), d.bytes), (DEPOT_STOCK, DEPOT_STOCK * NEW_BUFFER_BYTES));
        assert_eq!(d.list.capacity(), DEPOT_BUFFERS);
        let stocked: Vec<*const u8> = d.list.iter().map(|b| b.as_ptr()).collect();
        drop(d);
        let mut fresh = Spare::thread();
        let b = fresh.take(&depot).expect("a stocked buffer");
        assert!(stocked.contains(&b.as_ptr()), "taken from the stock, not allocated");
        assert_eq!(fresh.list.len(), MAGAZINE - 1, "a whole magazine moved to the thread");
        lock(&depot).make_depot();
        assert_eq!(lock(&depot).list.len(), DEPOT_STOCK - MAGAZINE, "made once: not stocked again");
    }

    #[test]
    fn buffers_given_on_one_thread_are_taken_on_another() {
        let depot = Mutex::new(Spare::depot());
        let mut giver = Spare::thread();
        give_n(&mut giver, &depot, SPARE_BUFFERS + 1, 512);
        let mut taker = Spare::thread();
        for _ in 0..MAGAZINE {
            assert_eq!(taker.take(&depot).map(|b| (b.len(), b.capacity())), Some((0, 512)));
        }
        assert!(taker.take(&depot).is_none(), "one magazine was in the depot");
        assert_eq!((taker.bytes, lock(&depot).bytes), (0, 0));
    }
}
