//! The data path: building send WQEs in the SQ ring, receive WQEs in the RQ/SRQ, ringing
//! doorbells, and reading CQEs. No locks, no allocation, no panics, no atomic
//! read-modify-write: work-request ids live in per-queue rings of plain (relaxed) atomics so a
//! poller on another thread can read them; everything else is owned by whoever holds `&mut`.
//!
//! Ordering follows the hardware contract: WQE stores, `dma_wmb`, doorbell record, `dma_wmb`,
//! the 64-bit doorbell (first 8 bytes of the last WQE's control segment) to the UAR's BlueFlame
//! register (alternating halves). Polling: one load of the CQE's `op_own`, the ownership check
//! against the consumer counter, `dma_rmb`, then the copy; the consumer index goes to the CQ
//! doorbell record. Device-written indices are masked before use.
//!
//! This is one of the driver's `unsafe` modules (the QP table's raw pointers).

use crate::backend::Backend;
use crate::dma::{DmaMemory, dma_rmb, dma_wmb};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Send WQE opcodes (PRM values).
pub mod opcode {
    /// NOP.
    pub const NOP: u8 = 0x00;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// SEND.
    pub const SEND: u8 = 0x0a;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare and swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch and add.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// `fm_ce_se` flags of the control segment.
pub mod flags {
    /// Generate a CQE.
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Solicited event.
    pub const SOLICITED: u8 = 1 << 1;
    /// Fence: wait for outstanding READ/atomic before this WQE.
    pub const FENCE: u8 = 4 << 5;
}

/// One scatter/gather element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// The remote side of an RDMA or atomic operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remote {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

// SAFETY: the raw pointers of SendQueue, RecvQueue and CqRing point into DMA buffers owned by
// the same QP/CQ object that owns the writer; moving the writer to another thread moves the
// exclusive right to write (or read) that ring with it.
unsafe impl<B: Backend> Send for SendQueue<B> {}
// SAFETY: as above.
unsafe impl Send for RecvQueue {}
// SAFETY: as above.
unsafe impl Send for CqRing {}

/// Everything a send WQE can carry.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    /// Work-request id returned in the completion.
    pub wr_id: u64,
    /// PRM opcode.
    pub opcode: u8,
    /// `fm_ce_se` flags.
    pub flags: u8,
    /// Immediate data (already in wire order as a u32 value).
    pub imm: u32,
    /// Remote address for RDMA / atomics.
    pub remote: Remote,
    /// Atomic operands: swap/add, compare.
    pub atomic: (u64, u64),
    /// Gather list.
    pub sges: &'a [Sge],
    /// Inline data instead of the gather list.
    pub inline: Option<&'a [u8]>,
    /// UD address vector (48 bytes, as the hardware reads it).
    pub av: Option<&'a [u8; 48]>,
}

/// Why a post was refused (ibverbs errno in parentheses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The queue has no room (ENOMEM).
    QueueFull,
    /// More SGEs than the queue was created for (EINVAL).
    TooManySges,
    /// Inline data larger than the queue allows (EINVAL).
    InlineTooLarge,
    /// The WQE would exceed the maximum WQE size (EINVAL).
    WqeTooLarge,
}

/// One SQ slot: the work-request id of the WQE starting at that WQEBB and the SQ head after
/// it (bits 30:0; bit 31 = signaled).
#[derive(Debug, Default)]
pub struct SqSlot {
    wr_id: AtomicU64,
    head: AtomicU32,
}

/// Work-request id rings of one QP (SQ by WQEBB index, RQ by WQE index), readable by a poller
/// on any thread. Sizes are powers of two, fixed at creation; indices are masked.
#[derive(Debug)]
pub struct WrRing {
    sq: Box<[SqSlot]>,
    sq_mask: u32,
    /// SQ tail: WQEBBs retired by completions (own cache line: the poller writes it).
    sq_tail: CachePadded<AtomicU32>,
    rq: Box<[AtomicU64]>,
    rq_mask: u32,
    /// RQ tail: receive WQEs completed.
    rq_tail: CachePadded<AtomicU32>,
    /// The QP (or SRQ) number.
    pub qpn: u32,
}

impl WrRing {
    /// Rings for `sq_bbs` WQEBBs and `rq_wqes` receive WQEs (each rounded up to a power of two).
    pub fn new(qpn: u32, sq_bbs: usize, rq_wqes: usize) -> WrRing {
        let sq_n = sq_bbs.max(1).next_power_of_two();
        let rq_n = rq_wqes.max(1).next_power_of_two();
        WrRing {
            sq: (0..sq_n).map(|_| SqSlot::default()).collect(),
            sq_mask: (sq_n - 1) as u32,
            sq_tail: CachePadded::new(AtomicU32::new(0)),
            rq: (0..rq_n).map(|_| AtomicU64::new(0)).collect(),
            rq_mask: (rq_n - 1) as u32,
            rq_tail: CachePadded::new(AtomicU32::new(0)),
            qpn,
        }
    }

    #[inline(always)]
    fn sq_slot(&self, idx: u32) -> &SqSlot {
        // SAFETY: `sq` has `sq_mask + 1` entries (a power of two) and the index is masked.
        unsafe { self.sq.get_unchecked((idx & self.sq_mask) as usize) }
    }

    #[inline(always)]
    fn rq_slot(&self, idx: u32) -> &AtomicU64 {
        // SAFETY: `rq` has `rq_mask + 1` entries (a power of two) and the index is masked.
        unsafe { self.rq.get_unchecked((idx & self.rq_mask) as usize) }
    }

    /// A requester completion for the WQE at `wqe_counter`: its wr_id; the SQ space up to it is
    /// free again (unsignaled WQEs before it complete with it).
    #[inline(always)]
    pub fn complete_send(&self, wqe_counter: u16) -> u64 {
        let slot = self.sq_slot(wqe_counter as u32);
        let head = slot.head.load(Ordering::Acquire) & 0x7fff_ffff;
        self.sq_tail.store(head, Ordering::Release);
        slot.wr_id.load(Ordering::Relaxed)
    }

    /// A responder completion for the receive WQE at `wqe_counter`: its wr_id; one receive WQE
    /// is free again.
    #[inline(always)]
    pub fn complete_recv(&self, wqe_counter: u16) -> u64 {
        let wr_id = self.rq_slot(wqe_counter as u32).load(Ordering::Acquire);
        let t = self.rq_tail.load(Ordering::Relaxed);
        self.rq_tail.store(t.wrapping_add(1), Ordering::Release);
        wr_id
    }
}

/// A WQE for [`SendQueue::write_simple`]: at most one SGE, no inline data, no atomics.
#[derive(Clone, Copy, Debug)]
pub struct SimpleWqe {
    /// Work-request id.
    pub wr_id: u64,
    /// PRM opcode (SEND, SEND_IMM, RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ).
    pub opcode: u8,
    /// `fm_ce_se` flags.
    pub fm_ce_se: u8,
    /// Immediate data.
    pub imm: u32,
    /// Remote address for RDMA.
    pub remote: Option<Remote>,
    /// The SGE (length 0: none).
    pub sge: Sge,
}

/// Where an SQ lives and what it accepts.
#[derive(Clone, Copy, Debug)]
pub struct SqGeometry {
    /// QP number.
    pub qpn: u32,
    /// Byte offset of the SQ in the QP buffer.
    pub sq_offset: usize,
    /// log2 of the number of WQEBBs.
    pub log_bbs: u32,
    /// UAR index of the doorbell.
    pub uar_index: u32,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes per WQE.
    pub max_inline: u32,
}

/// The send queue writer of one QP.
pub struct SendQueue<B: Backend> {
    backend: Arc<B>,
    /// Start of the SQ in the QP buffer (validated at creation to hold the whole ring).
    base: *mut u8,
    qpn: u32,
    sq_offset: usize,
    /// WQEBBs in the ring (power of two).
    bbs: u32,
    /// Producer counter in WQEBBs.
    cur_post: u32,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes per WQE.
    pub max_inline: u32,
    bf_offset: usize,
    uar_offset: usize,
    ring: Arc<WrRing>,
    /// Signal every WQE (sq_sig_all).
    pub sig_all: bool,
    /// Last ctrl dwords of the chain being posted (for the doorbell).
    last_ctrl: u64,
}

fn ds_count(w: &SendWqe<'_>) -> u32 {
    let mut ds = 1; // ctrl
    if w.av.is_some() {
        ds += 3;
    }
    match w.opcode {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => ds += 1,
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => ds += 2,
        _ => {}
    }
    match w.inline {
        Some(d) if !d.is_empty() => ds += (d.len() as u32 + 4).div_ceil(16),
        Some(_) => {}
        None => ds += w.sges.iter().filter(|s| s.length != 0).count() as u32,
    }
    ds
}

impl<B: Backend> SendQueue<B> {
    /// A writer for the SQ described by `geo` in `buf`, doorbells through `backend`. The
    /// buffer must outlive the writer (the QP owns both) and hold the whole ring.
    pub fn new(
        backend: Arc<B>,
        buf: &DmaMemory,
        geo: SqGeometry,
        ring: Arc<WrRing>,
    ) -> Result<SendQueue<B>, PostError> {
        let bytes = 64usize << geo.log_bbs;
        if geo.sq_offset.checked_add(bytes).is_none_or(|e| e > buf.len()) || ring.sq.len() < (1 << geo.log_bbs) {
            return Err(PostError::WqeTooLarge);
        }
        // SAFETY: in bounds (checked above); only the address is computed here.
        let base = unsafe { buf.as_ptr().add(geo.sq_offset) };
        Ok(SendQueue {
            backend,
            base,
            qpn: geo.qpn,
            sq_offset: geo.sq_offset,
            bbs: 1 << geo.log_bbs,
            cur_post: 0,
            max_sge: geo.max_sge,
            max_inline: geo.max_inline,
            bf_offset: 0,
            uar_offset: (geo.uar_index as usize) << 12,
            ring,
            sig_all: false,
            last_ctrl: 0,
        })
    }

    /// WQEBBs free for posting.
    #[inline]
    pub fn free_bbs(&self) -> u32 {
        self.bbs - self.cur_post.wrapping_sub(self.ring.sq_tail.load(Ordering::Acquire))
    }

    /// The producer counter (WQEBBs).
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// Resets the producer state (QP back to RESET).
    pub fn reset(&mut self) {
        self.cur_post = 0;
        self.ring.sq_tail.store(0, Ordering::Release);
        self.bf_offset = 0;
    }

    #[inline]
    fn seg_off(&self, bb: u32, seg16: u32) -> usize {
        // 16-byte segment `seg16` of the WQE starting at WQEBB `bb`, wrapping at the ring end.
        let abs = (bb & (self.bbs - 1)) as usize * 64 + seg16 as usize * 16;
        self.sq_offset + abs % (self.bbs as usize * 64)
    }

    /// Fast path: one RC WQE of at most one SGE, no inline data, no atomic operands (SEND,
    /// SEND_IMM, RDMA_WRITE(_IMM), RDMA_READ): one WQEBB written with one bounds check.
    #[inline(always)]
    pub fn write_simple(&mut self, buf: &DmaMemory, w: SimpleWqe) -> Result<(), PostError> {
        let SimpleWqe { wr_id, opcode, fm_ce_se, imm, remote, sge } = w;
        let bb = self.cur_post;
        if bb.wrapping_sub(self.ring.sq_tail.load(Ordering::Acquire)) >= self.bbs {
            return Err(PostError::QueueFull);
        }
        let fm_ce_se = fm_ce_se | if self.sig_all { flags::CQ_UPDATE } else { 0 };
        let has_sge = (sge.length != 0) as u32;
        let ds = 1 + remote.is_some() as u32 + has_sge;
        let ctrl_hi = ((((bb & 0xffff) << 8) | opcode as u32) as u64) << 32 | ((self.qpn << 8) | ds) as u64;
        let ctrl_lo = ((fm_ce_se as u64) << 32) | imm as u64;
        let data = [((sge.length as u64) << 32) | sge.lkey as u64, sge.addr];
        let words = match remote {
            Some(r) => [ctrl_hi, ctrl_lo, r.addr, (r.rkey as u64) << 32, data[0], data[1]],
            None => [ctrl_hi, ctrl_lo, data[0], data[1], 0, 0],
        };
        let idx = (bb & (self.bbs - 1)) as usize;
        let _ = buf;
        // SAFETY: the ring [base, base + 64 * bbs) lies in the QP buffer (checked in `new`, and
        // the QP keeps the buffer alive); idx < bbs; the WQEBB is 8-byte aligned.
        unsafe {
            let p = self.base.add(idx * 64).cast::<u64>();
            for (k, w) in words.iter().enumerate() {
                p.add(k).write_volatile(w.to_be());
            }
        }
        let signaled = fm_ce_se & flags::CQ_UPDATE != 0;
        let slot = self.ring.sq_slot(bb);
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.head.store((bb.wrapping_add(1) & 0x7fff_ffff) | ((signaled as u32) << 31), Ordering::Release);
        self.cur_post = bb.wrapping_add(1);
        self.last_ctrl = ctrl_hi;
        Ok(())
    }

    /// Writes one WQE into the ring (no doorbell). Call [`SendQueue::ring_doorbell`] after the
    /// last WQE of a chain.
    #[inline]
    pub fn write_wqe(&mut self, buf: &DmaMemory, w: &SendWqe<'_>) -> Result<(), PostError> {
        if w.inline.is_none() && w.sges.len() > self.max_sge as usize {
            return Err(PostError::TooManySges);
        }
        if let Some(d) = w.inline
            && d.len() > self.max_inline as usize
        {
            return Err(PostError::InlineTooLarge);
        }
        let ds = ds_count(w);
        if ds > 63 {
            return Err(PostError::WqeTooLarge);
        }
        let nbb = ds.div_ceil(4);
        if nbb > self.free_bbs() {
            return Err(PostError::QueueFull);
        }
        let bb = self.cur_post;
        let mut fm_ce_se = w.flags;
        if self.sig_all {
            fm_ce_se |= flags::CQ_UPDATE;
        }
        // Control segment.
        let dw0 = ((bb & 0xffff) << 8) | w.opcode as u32;
        let dw1 = (self.qpn << 8) | ds;
        let ctrl_hi = ((dw0 as u64) << 32) | dw1 as u64;
        let ctrl_lo = ((fm_ce_se as u64) << 32) | w.imm as u64;
        let o = self.seg_off(bb, 0);
        buf.write_u64_be_at(o, ctrl_hi);
        buf.write_u64_be_at(o + 8, ctrl_lo);
        let mut seg = 1;
        if let Some(av) = w.av {
            for i in 0..3 {
                let o = self.seg_off(bb, seg + i);
                let c = i as usize * 16;
                buf.write_u64_be_at(o, u64::from_be_bytes(av[c..c + 8].try_into().unwrap_or_default()));
                buf.write_u64_be_at(o + 8, u64::from_be_bytes(av[c + 8..c + 16].try_into().unwrap_or_default()));
            }
            seg += 3;
        }
        match w.opcode {
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                let o = self.seg_off(bb, seg);
                buf.write_u64_be_at(o, w.remote.addr);
                buf.write_u64_be_at(o + 8, (w.remote.rkey as u64) << 32);
                seg += 1;
                if matches!(w.opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                    let o = self.seg_off(bb, seg);
                    buf.write_u64_be_at(o, w.atomic.0);
                    buf.write_u64_be_at(o + 8, w.atomic.1);
                    seg += 1;
                }
            }
            _ => {}
        }
        match w.inline {
            Some(d) if !d.is_empty() => {
                // byte_count | INLINE flag, then the data, 16-byte segments, wrapping.
                let total = 4 + d.len();
                let mut tmp = [0u8; 16];
                let mut done = 0usize;
                let mut s = seg;
                while done < total {
                    let n = (total - done).min(16);
                    for (k, b) in tmp.iter_mut().enumerate().take(n) {
                        let pos = done + k;
                        *b = if pos < 4 { (0x8000_0000u32 | d.len() as u32).to_be_bytes()[pos] } else { d[pos - 4] };
                    }
                    for b in tmp.iter_mut().skip(n) {
                        *b = 0;
                    }
                    let o = self.seg_off(bb, s);
                    buf.write_u64_be_at(o, u64::from_be_bytes(tmp[..8].try_into().unwrap_or_default()));
                    buf.write_u64_be_at(o + 8, u64::from_be_bytes(tmp[8..].try_into().unwrap_or_default()));
                    done += n;
                    s += 1;
                }
            }
            Some(_) => {}
            None => {
                for sge in w.sges.iter().filter(|s| s.length != 0) {
                    let o = self.seg_off(bb, seg);
                    buf.write_u64_be_at(o, ((sge.length as u64) << 32) | sge.lkey as u64);
                    buf.write_u64_be_at(o + 8, sge.addr);
                    seg += 1;
                }
            }
        }
        let signaled = fm_ce_se & flags::CQ_UPDATE != 0;
        let slot = self.ring.sq_slot(bb);
        slot.wr_id.store(w.wr_id, Ordering::Relaxed);
        slot.head.store((bb.wrapping_add(nbb) & 0x7fff_ffff) | ((signaled as u32) << 31), Ordering::Release);
        self.cur_post = bb.wrapping_add(nbb);
        self.last_ctrl = ctrl_hi;
        Ok(())
    }

    /// Publishes the WQEs written since the last doorbell: doorbell record, then the UAR
    /// doorbell with the last WQE's first 8 bytes.
    #[inline]
    pub fn ring_doorbell(&mut self, dbr: &DmaMemory) {
        dma_wmb();
        dbr.write_u32_be_at(4, self.cur_post & 0xffff);
        dma_wmb();
        self.backend.write64(self.uar_offset + 0x800 + self.bf_offset, self.last_ctrl);
        self.bf_offset ^= 256;
    }
}

/// The receive queue writer of one QP (or an SRQ).
pub struct RecvQueue {
    /// Start of the queue in its buffer (validated at creation).
    base: *mut u8,
    wqes: u32,
    stride_shift: u32,
    /// Max SGEs per receive WQE.
    pub max_sge: u32,
    head: u32,
    ring: Arc<WrRing>,
    /// SRQ WQEs start with a 16-byte next segment.
    srq: bool,
}

impl RecvQueue {
    /// A writer for 2^`log_wqes` WQEs of 2^`stride_shift` bytes at `offset` of `buf` (which
    /// must outlive the writer and hold the whole queue).
    pub fn new(
        buf: &DmaMemory,
        offset: usize,
        log_wqes: u32,
        stride_shift: u32,
        ring: Arc<WrRing>,
        srq: bool,
    ) -> Result<RecvQueue, PostError> {
        let bytes = (1usize << log_wqes) << stride_shift;
        if offset.checked_add(bytes).is_none_or(|e| e > buf.len())
            || stride_shift < 4
            || ring.rq.len() < (1 << log_wqes)
        {
            return Err(PostError::WqeTooLarge);
        }
        let per = (1u32 << stride_shift) / 16 - srq as u32;
        // SAFETY: in bounds (checked above); only the address is computed here.
        let base = unsafe { buf.as_ptr().add(offset) };
        Ok(RecvQueue { base, wqes: 1 << log_wqes, stride_shift, max_sge: per, head: 0, ring, srq })
    }

    /// Resets the producer state (QP back to RESET).
    pub fn reset(&mut self) {
        self.head = 0;
        self.ring.rq_tail.store(0, Ordering::Release);
    }

    /// Writes one receive WQE (no doorbell record update yet).
    #[inline]
    pub fn write_wqe(&mut self, buf: &DmaMemory, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        if sges.len() > self.max_sge as usize {
            return Err(PostError::TooManySges);
        }
        if self.head.wrapping_sub(self.ring.rq_tail.load(Ordering::Acquire)) >= self.wqes {
            return Err(PostError::QueueFull);
        }
        let _ = buf;
        let idx = self.head & (self.wqes - 1);
        // SAFETY: the queue [base, base + wqes << stride_shift) lies in the buffer (checked in
        // `new`; the owner keeps the buffer alive); idx < wqes; at most max_sge SGEs (checked
        // above) plus the terminator fit the stride; 16-byte aligned.
        unsafe {
            let mut p =
                self.base.add(((idx as usize) << self.stride_shift) + if self.srq { 16 } else { 0 }).cast::<u64>();
            // Zero-length SGEs are skipped (a zero byte count would end the scatter list).
            let mut written = 0usize;
            for s in sges.iter().filter(|s| s.length != 0) {
                p.write_volatile((((s.length as u64) << 32) | s.lkey as u64).to_be());
                p.add(1).write_volatile(s.addr.to_be());
                p = p.add(2);
                written += 1;
            }
            if written < self.max_sge as usize {
                // Terminator: byte_count 0, invalid lkey.
                p.write_volatile(0x100u64.to_be());
                p.add(1).write_volatile(0);
            }
        }
        self.ring.rq_slot(self.head).store(wr_id, Ordering::Release);
        self.head = self.head.wrapping_add(1);
        Ok(())
    }

    /// Publishes the posted WQEs through the doorbell record (offset 0 for a QP's RQ; the SRQ's
    /// counter also sits at offset 0 of its record).
    #[inline]
    pub fn ring_doorbell(&self, dbr: &DmaMemory) {
        dma_wmb();
        dbr.write_u32_be_at(0, self.head & 0xffff);
    }
}

/// A CQE as read from the ring: a copy of its `op_own` byte and its last five 8-byte words
/// (no reference into device memory), decoded on demand so unused fields cost nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    op_own: u8,
    w2: u64,
    w4: u64,
    w5: u64,
    w6: u64,
    w7: u64,
}

impl Cqe {
    /// CQE opcode (op_own >> 4).
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }
    /// Local QPN.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        (self.w7 >> 32) as u32 & 0xff_ffff
    }
    /// For requester CQEs: the send WQE opcode (sop_drop_qpn[31:24]).
    #[inline(always)]
    pub fn wqe_opcode(&self) -> u8 {
        (self.w7 >> 56) as u8
    }
    /// WQE counter.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        (self.w7 >> 16) as u16
    }
    /// Byte count.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.w5 as u32
    }
    /// Immediate data / invalidated rkey.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.w4 as u32
    }
    /// flags_rqpn: source QPN (UD), SL, GRH indication.
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        (self.w2 >> 32) as u32
    }
    /// SRQ number (low 24 bits of srqn_uidx).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        (self.w4 >> 32) as u32 & 0xff_ffff
    }
    /// Error syndrome (error CQEs).
    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        self.w6 as u8
    }
    /// Vendor error syndrome (error CQEs).
    #[inline(always)]
    pub fn vendor_syndrome(&self) -> u8 {
        (self.w6 >> 8) as u8
    }
    /// Solicited event flag.
    #[inline(always)]
    pub fn solicited(&self) -> bool {
        self.op_own & 2 != 0
    }
}

/// The consumer side of a CQ ring.
pub struct CqRing {
    base: *const u8,
    log_size: u32,
    ci: u32,
}

impl CqRing {
    /// A consumer for 2^`log_size` CQEs in `buf` (which must outlive it and hold the ring).
    pub fn new(buf: &DmaMemory, log_size: u32) -> Option<CqRing> {
        if (64usize << log_size) > buf.len() {
            return None;
        }
        Some(CqRing { base: buf.as_ptr(), log_size, ci: 0 })
    }

    /// A consumer over a new ring (after a resize) continuing at consumer counter `ci`.
    pub fn resume(buf: &DmaMemory, log_size: u32, ci: u32) -> Option<CqRing> {
        CqRing::new(buf, log_size).map(|r| CqRing { ci, ..r })
    }

    /// log2 of the number of CQEs.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// Consumer counter.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Reads the next CQE if the device produced one.
    #[inline]
    pub fn next_cqe(&mut self) -> Option<Cqe> {
        let ci = self.ci;
        let off = ((ci & ((1u32 << self.log_size) - 1)) as usize) * 64;
        // SAFETY: the ring [base, base + 64 << log_size) lies in the CQ buffer (checked in
        // `new`; the CQ owns the buffer); off + 64 <= ring size; CQEs are 64-byte aligned.
        let op_own = unsafe { self.base.add(off + 63).read_volatile() };
        // Valid when the opcode is not INVALID (15) and the owner bit matches this pass.
        if op_own >= 0xf0 || (op_own as u32 ^ (ci >> self.log_size)) & 1 != 0 {
            return None;
        }
        dma_rmb();
        // SAFETY: as above; five aligned 8-byte loads at 0x18..0x40 of the CQE.
        let [w2, w4, w5, w6, w7] = unsafe {
            let p = self.base.add(off + 0x18).cast::<u64>();
            [0usize, 1, 2, 3, 4].map(|k| u64::from_be(p.add(k).read_volatile()))
        };
        let cqe = Cqe { op_own, w2, w4, w5, w6, w7 };
        self.ci = self.ci.wrapping_add(1);
        Some(cqe)
    }

    /// Publishes the consumer index in the CQ doorbell record.
    #[inline]
    pub fn update_ci(&self, dbr: &DmaMemory) {
        dbr.write_u32_be_at(0, self.ci & 0xff_ffff);
    }

    /// Arms the CQ: doorbell record word 1, then the UAR CQ doorbell. `sn` is the arm sequence
    /// number (incremented per event received).
    pub fn arm<B: Backend>(&self, backend: &B, dbr: &DmaMemory, uar: u32, cqn: u32, sn: u32, solicited_only: bool) {
        let cmd = if solicited_only { 1 << 24 } else { 0 };
        let hi = ((sn & 3) << 28) | cmd | (self.ci & 0xff_ffff);
        dbr.write_u32_be_at(4, hi);
        dma_wmb();
        backend.write64(((uar as usize) << 12) + 0x20, ((hi as u64) << 32) | cqn as u64);
    }
}

type Leaf = [AtomicPtr<WrRing>; 4096];

/// What keeps leaves and rings alive.
#[derive(Default)]
struct Keep {
    leaves: Vec<Box<Leaf>>,
    rings: Vec<Arc<WrRing>>,
}

/// The device-wide QPN → work-request ring table, read without locks by pollers.
///
/// Two levels of 4096 pointers. Rings are kept alive by `keep` until the table itself is
/// dropped, so a pointer read by a poller never dangles, even while a QP is being destroyed.
pub struct QpTable {
    dir: Box<[AtomicPtr<Leaf>]>,
    keep: Mutex<Keep>,
}

impl Default for QpTable {
    fn default() -> Self {
        QpTable {
            dir: (0..4096).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            keep: Mutex::new(Keep::default()),
        }
    }
}

impl std::fmt::Debug for QpTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpTable").finish_non_exhaustive()
    }
}

impl QpTable {
    /// Inserts (control path).
    pub fn insert(&self, ring: Arc<WrRing>) {
        let qpn = ring.qpn & 0xff_ffff;
        let mut keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
        let hi = (qpn >> 12) as usize;
        let mut leaf = self.dir[hi].load(Ordering::Acquire);
        if leaf.is_null() {
            let mut b: Box<Leaf> = Box::new(std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())));
            leaf = &mut *b as *mut _;
            keep.leaves.push(b);
            self.dir[hi].store(leaf, Ordering::Release);
        }
        let ptr = Arc::as_ptr(&ring) as *mut WrRing;
        keep.rings.push(ring);
        // SAFETY: `leaf` points into a box owned by `keep.leaves`, alive as long as the table.
        unsafe { (*leaf)[(qpn & 0xfff) as usize].store(ptr, Ordering::Release) };
    }

    /// Removes (control path); the ring stays alive until the table drops.
    pub fn remove(&self, qpn: u32) {
        let _keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
        let leaf = self.dir[((qpn >> 12) & 0xfff) as usize].load(Ordering::Acquire);
        if !leaf.is_null() {
            // SAFETY: as in `insert`.
            unsafe { (*leaf)[(qpn & 0xfff) as usize].store(std::ptr::null_mut(), Ordering::Release) };
        }
    }

    /// Looks a QP's rings up (data path: two loads, no lock).
    #[inline]
    pub fn get(&self, qpn: u32) -> Option<&WrRing> {
        let leaf = self.dir.get(((qpn >> 12) & 0xfff) as usize)?.load(Ordering::Acquire);
        if leaf.is_null() {
            return None;
        }
        // SAFETY: leaves and rings are owned by `keep` until the table drops; the returned
        // reference is bounded by `&self`.
        let p = unsafe { (*leaf)[(qpn & 0xfff) as usize].load(Ordering::Acquire) };
        // SAFETY: as above.
        if p.is_null() { None } else { Some(unsafe { &*p }) }
    }
}
