//! The receive queue and the SRQ: receive WQEs (an SRQ's reused through its free list, in
//! completion order) and their doorbell record.

use super::*;

/// The data segment that ends a receive scatter list shorter than the WQE: byte count 0 and
/// the invalid lkey.
const TERMINATOR: Sge = Sge::new(0, 0, wqe_consts::INVALID_LKEY);

/// The receive queue writer of one QP (or an SRQ).
///
/// A QP's RQ completes in order, so it is a ring: WQE `head & mask` is next, and each
/// completion frees the oldest. An SRQ's WQEs complete in any order (several QPs consume them),
/// so, as the device does, it is a linked list through each WQE's `next_wqe_index`: posting
/// takes the list's head, and completed WQEs (flagged by the poller in the [`WrRing`]) are
/// linked back at its tail. The tail WQE is never posted, so the device never follows a link
/// the poster is changing. An SRQ post always takes [`RecvQueue::write_wqe`].
pub struct RecvQueue {
    /// The first WQE's scatter list (an SRQ WQE's follows its 16-byte next segment).
    base: *mut u8,
    /// Producer counter.
    head: u32,
    /// Where the known free space ends (refreshed from the tail when `head` reaches it); held
    /// at `head` while the queue is closed, so the fast path needs no other check.
    limit: u32,
    /// Closed: posts are refused (the QP is in RESET).
    closed: bool,
    /// WQEs in the queue minus one (a power of two minus one).
    mask: usize,
    /// Bytes per WQE (a power of two).
    stride: usize,
    /// Whether a one-SGE WQE needs a terminating entry (room for more than one SGE).
    terminate_one: bool,
    /// The WQE-id slots (`mask + 1` of them, kept alive by `ring`).
    slots: *const AtomicU64,
    /// WQEs retired by completions (in `ring`).
    tail: *const AtomicU32,
    /// The receive counter of the doorbell record (dword 0; in `_mem`).
    dbr: *mut u32,
    ring: Arc<WrRing>,
    /// The free list, for an SRQ.
    srq: Option<SrqFreeList>,
    /// The memory `base` and `dbr` point into, kept alive by the writer (never read through).
    _mem: Arc<dyn QueueMemory>,
    /// Max SGEs per receive WQE.
    pub max_sge: u32,
}

/// An SRQ's free WQEs: the list from `head` to `tail` through the WQEs' next segments.
#[derive(Clone, Copy, Debug)]
struct SrqFreeList {
    /// The next WQE to post.
    head: u32,
    /// The last WQE of the list (not posted while it is the tail).
    tail: u32,
    /// Where the next search for completed WQEs starts.
    scan: u32,
}

impl RecvQueue {
    /// A writer for 2^`log_wqes` WQEs of 2^`stride_shift` bytes at `offset` of `mem`'s buffer
    /// (which must hold the whole queue), its counter in `mem`'s doorbell record. The writer
    /// keeps `mem` alive.
    pub fn new(
        mem: Arc<dyn QueueMemory>,
        offset: usize,
        log_wqes: u32,
        stride_shift: u32,
        ring: Arc<WrRing>,
        srq: bool,
    ) -> Result<RecvQueue, PostError> {
        let (buf, dbr) = (mem.buf(), mem.dbr());
        let bytes = (1usize << log_wqes) << stride_shift;
        if offset.checked_add(bytes).is_none_or(|e| e > buf.len())
            || (1usize << stride_shift) < DS_BYTES
            || (srq && (1usize << stride_shift) < wqe_srq_next_seg::SIZE + DS_BYTES)
            || bytes > u32::MAX as usize
            || ring.rq.len() < (1 << log_wqes)
            || (srq && ring.srq_done.len() != 1 << log_wqes)
            || dbr.len() < qp_dbr::recv_counter + 4
        {
            return Err(PostError::WqeTooLarge);
        }
        // Data segments per WQE (an SRQ WQE starts with its next segment).
        let per = ((1usize << stride_shift) / DS_BYTES) as u32 - srq as u32;
        // SAFETY: in bounds (checked above: an SRQ stride holds the next segment and an SGE);
        // only the address is computed here.
        let base = unsafe { buf.as_ptr().add(offset + if srq { wqe_srq_next_seg::SIZE } else { 0 }) };
        Ok(RecvQueue {
            base,
            head: 0,
            // An SRQ keeps `limit` at `head`, so its posts leave the fast path.
            limit: if srq { 0 } else { 1 << log_wqes },
            closed: false,
            mask: (1 << log_wqes) - 1,
            stride: 1 << stride_shift,
            terminate_one: per > 1,
            slots: ring.rq.as_ptr(),
            tail: &*ring.rq_tail as *const AtomicU32,
            // SAFETY: the receive counter lies in `dbr` (checked above); address only.
            dbr: unsafe { dbr.as_ptr().add(qp_dbr::recv_counter) }.cast::<u32>(),
            srq: srq.then(|| SrqFreeList { head: 0, tail: (1 << log_wqes) - 1, scan: 0 }),
            ring,
            _mem: mem,
            max_sge: per,
        })
    }

    /// Resets the producer state and closes the queue (QP back to RESET).
    pub fn reset(&mut self) {
        self.head = 0;
        self.ring.rq_tail.store(0, Ordering::Release);
        self.close();
    }

    /// Closes the queue: posts fail with [`PostError::Closed`] until [`RecvQueue::open`].
    pub fn close(&mut self) {
        self.closed = true;
        self.limit = self.head;
    }

    /// Opens the queue for posts.
    pub fn open(&mut self) {
        self.closed = false;
        self.limit = if self.srq.is_some() { self.head } else { self.fresh_limit() };
    }

    #[inline(always)]
    fn fresh_limit(&self) -> u32 {
        // SAFETY: `tail` points into `ring`, which this writer keeps alive.
        unsafe { (*self.tail).load(Ordering::Acquire) }.wrapping_add(self.mask as u32 + 1)
    }

    /// Room for one more WQE (refreshing the known limit from the tail if needed).
    #[inline(always)]
    fn reserve(&mut self) -> Result<(), PostError> {
        if self.head == self.limit {
            if self.closed {
                return Err(PostError::Closed);
            }
            self.limit = self.fresh_limit();
            if self.head == self.limit {
                return Err(PostError::QueueFull);
            }
        }
        Ok(())
    }

    /// The scatter list of WQE `index` (masked).
    #[inline(always)]
    fn wqe_at(&self, index: usize) -> *mut u64 {
        // SAFETY: the queue [base, base + (mask + 1) * stride) lies in the buffer (checked in
        // `new`; the writer keeps the buffer alive); the index is masked; 16-byte aligned.
        unsafe { self.base.add((index & self.mask) * self.stride).cast::<u64>() }
    }

    /// The scatter list of the WQE at `head`.
    #[inline(always)]
    fn wqe(&self) -> *mut u64 {
        self.wqe_at(self.head as usize)
    }

    /// Records `wr_id` for WQE `index` (masked) and moves the producer counter on.
    #[inline(always)]
    fn record_at(&mut self, index: usize, wr_id: u64) {
        // SAFETY: `slots` has mask + 1 entries kept alive by `ring`; the index is masked.
        unsafe { &*self.slots.add(index & self.mask) }.store(wr_id, Ordering::Release);
        self.head = self.head.wrapping_add(1);
    }

    /// Records `wr_id` for the WQE at `head` and moves on.
    #[inline(always)]
    fn record(&mut self, wr_id: u64) {
        self.record_at(self.head as usize, wr_id);
    }

    /// The `next_wqe_index` field of SRQ WQE `index` (masked).
    #[inline(always)]
    fn srq_next(&self, index: u32) -> *mut u16 {
        let seg = (index as usize & self.mask) * self.stride;
        // SAFETY: an SRQ's `base` is its first WQE plus the next segment (see `new`), so the
        // next segment of WQE `index` starts `wqe_srq_next_seg::SIZE` before its scatter list,
        // inside the queue; `next_wqe_index` is a 2-aligned field of it.
        unsafe { self.base.add(seg).sub(wqe_srq_next_seg::SIZE).add(wqe_srq_next_seg::next_wqe_index).cast::<u16>() }
    }

    /// Takes the SRQ's next free WQE: the list's head, unless the head is its tail (then the
    /// WQEs the poller has completed are linked back first).
    fn srq_take(&mut self, mut list: SrqFreeList) -> Result<usize, PostError> {
        if list.head == list.tail {
            self.srq_relink(&mut list);
            if list.head == list.tail {
                self.srq = Some(list);
                return Err(PostError::QueueFull);
            }
        }
        let index = list.head;
        // SAFETY: `srq_next` is inside the queue (see there); the poster wrote it last.
        list.head = u16::from_be(unsafe { self.srq_next(index).read_volatile() }) as u32 & self.mask as u32;
        self.srq = Some(list);
        Ok(index as usize)
    }

    /// Links the completed SRQ WQEs back at the list's tail, searching from where the last
    /// search stopped: completions mostly come in posting order, so a search usually stops at
    /// the first WQE not yet completed after finding some.
    fn srq_relink(&self, list: &mut SrqFreeList) {
        let mut found = false;
        for _ in 0..=self.mask {
            let index = list.scan & self.mask as u32;
            let Some(done) = self.ring.srq_done.get(index as usize) else { return };
            if !done.load(Ordering::Acquire) {
                if found {
                    return;
                }
                list.scan = list.scan.wrapping_add(1);
                continue;
            }
            done.store(false, Ordering::Relaxed);
            // SAFETY: `srq_next` is inside the queue; the tail WQE is not posted, so the device
            // does not read its link (see the type's docs). The doorbell record's barrier
            // orders this store before the device learns of the next post.
            unsafe { self.srq_next(list.tail).write_volatile((index as u16).to_be()) };
            list.tail = index;
            list.scan = list.scan.wrapping_add(1);
            found = true;
        }
    }

    /// Fast path: writes one receive WQE with one non-empty SGE if the queue has room known
    /// without reading the tail; `false` (nothing written) otherwise, for
    /// [`RecvQueue::write_wqe`] to decide. No doorbell record update yet.
    #[inline(always)]
    pub fn try_write_one(&mut self, wr_id: u64, sge: &Sge) -> bool {
        if sge.is_empty() || self.head == self.limit {
            return false;
        }
        let p = self.wqe();
        // SAFETY: `p` is the WQE's scatter list (see `wqe`); a stride holds at least one SGE,
        // and a second entry whenever `terminate_one` is set.
        unsafe {
            let [w0, w1] = sge.wire();
            p.write_volatile(w0);
            p.add(1).write_volatile(w1);
            if self.terminate_one {
                let [t0, t1] = TERMINATOR.wire();
                p.add(DATA_WORDS).write_volatile(t0);
                p.add(DATA_WORDS + 1).write_volatile(t1);
            }
        }
        self.record(wr_id);
        true
    }

    /// Writes one receive WQE (no doorbell record update yet).
    #[inline]
    pub fn write_wqe(&mut self, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        if sges.len() > self.max_sge as usize {
            return Err(PostError::TooManySges);
        }
        let index = match self.srq {
            Some(list) => self.srq_take(list)?,
            None => {
                self.reserve()?;
                self.head as usize
            }
        };
        let mut p = self.wqe_at(index);
        // SAFETY: `p` is the WQE's scatter list (see `wqe`); at most max_sge SGEs (checked
        // above) plus the terminator fit the stride.
        unsafe {
            // Zero-length SGEs are skipped (a zero byte count would end the scatter list).
            let mut written = 0usize;
            for s in sges.iter().filter(|s| !s.is_empty()) {
                let [w0, w1] = s.wire();
                p.write_volatile(w0);
                p.add(1).write_volatile(w1);
                p = p.add(DATA_WORDS);
                written += 1;
            }
            if written < self.max_sge as usize {
                let [t0, t1] = TERMINATOR.wire();
                p.write_volatile(t0);
                p.add(1).write_volatile(t1);
            }
        }
        self.record_at(index, wr_id);
        if self.srq.is_some() {
            self.limit = self.head; // keeps SRQ posts off the fast path
        }
        Ok(())
    }

    /// Publishes the posted WQEs through the doorbell record (dword 0, for a QP's RQ and an
    /// SRQ alike).
    #[inline(always)]
    pub fn ring_doorbell(&self) {
        let counter = (self.head & DBR_COUNTER_MASK).to_be();
        dma_wmb();
        // SAFETY: `dbr` points at dword 0 of the doorbell record (checked in `new`; the
        // writer keeps it alive); 4-byte aligned.
        unsafe { self.dbr.write_volatile(counter) };
    }
}
