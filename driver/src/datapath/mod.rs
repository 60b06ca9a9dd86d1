//! The data path: building send WQEs in the SQ ring, receive WQEs in the RQ/SRQ, ringing
//! doorbells, and reading CQEs. No locks, no allocation, no panics, no atomic
//! read-modify-write: work-request ids live in per-queue rings of plain (relaxed) atomics so a
//! poller on another thread can read them; everything else is owned by whoever holds `&mut`.
//!
//! Ordering follows the hardware contract: WQE stores, `dma_wmb`, doorbell record, `dma_wmb`,
//! the 64-bit doorbell (first 8 bytes of the last WQE's control segment) to the UAR's BlueFlame
//! register (alternating halves). Polling: one load of the CQE's `op_own`, the ownership check
//! against the consumer counter, `dma_rmb`, then loads of only the fields the completion needs;
//! the consumer index goes to the CQ doorbell record once per poll. Device-written indices are
//! masked before use.
//!
//! Shape of the fast paths: each queue resolves its pointers (ring, id slots, tail, doorbell
//! record, BlueFlame register) at creation; a chain of WQEs or a poll works on a short-lived
//! cursor ([`SqChain`], [`CqCursor`]) whose state stays in registers and goes back to the queue
//! at the end; the free space is known from a cached limit, so the tail (written by the poller)
//! is read only when the limit is reached; [`Sge`] is stored in the data segment's byte order,
//! so posting copies it. Callers keep the general cases (SGE lists, inline data, atomics, UD,
//! full queues) out of line, so the short loops make no calls.
//!
//! Polling has two shapes. [`CqRing::take_requester`] is the straight-line one for a poll that
//! finds nothing or one requester success: the ring keeps the head CQE's address and owner bit
//! beside the consumer counter (two loads to look), and the poller's [`QpCache`] is keyed by
//! the CQE's whole `sop_drop_qpn` dword ([`SopDropQpn`]: QP and send opcode), so a hit also
//! answers what the completion's opcode is. [`CqCursor::take_requesters`] takes runs of
//! requester successes for batches, with a [`QpCache`] checked once per poll.
//!
//! This module holds what the queues share (the layouts' word shifts, SGEs, the work-request
//! rings, the queue memory); each queue has a module of its own: `sq`, `rq`, `cq` and
//! `qp_table`. Together they are one of the driver's `unsafe` modules (raw pointers into the
//! queues' DMA buffers and the QP table).

use crate::backend::Backend;
use crate::dma::{DmaMemory, dma_rmb, dma_wmb};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use umlx_hwdesc::enums::CqeOpcode;
use umlx_hwdesc::plain::{
    CqeOpOwn, cq as cq_consts, cq_dbr, cqe64, err_cqe, qp_dbr, uar, wqe as wqe_consts, wqe_atomic_seg, wqe_av,
    wqe_ctrl_seg, wqe_data_seg, wqe_inline_seg, wqe_raddr_seg, wqe_srq_next_seg,
};
use umlx_hwdesc::{U32, U64};
use zerocopy::IntoBytes;

mod cq;
mod qp_table;
mod rq;
mod sq;

pub use cq::{CqCursor, CqRing, Cqe, CqeRef, HeadTaken, NextCqe, SopDropQpn};
pub use qp_table::{Pinned, QpCache, QpTable};
pub use rq::RecvQueue;
pub use sq::{SendQueue, SendWqe, SimpleFields, SimpleWqeSource, SqChain, SqGeometry};

// ---------------------------------------------------------------------------------------------
// The adapter's layouts as the data path stores and loads them. Every offset, size and bit here
// is taken from hwdesc; the fast paths store 8-byte words, so the packing of fields into a word
// is computed from hwdesc's offsets by `be_shift` (a layout change in hwdesc moves the shifts
// or fails the asserts below, never leaves a second copy behind).
// ---------------------------------------------------------------------------------------------

/// The shift that places a `size`-byte field at byte offset `off` of a structure inside the
/// 8-byte word starting at byte `word`, when the word is stored big-endian.
const fn be_shift(word: usize, off: usize, size: usize) -> u32 {
    assert!(off >= word && off + size <= word + 8, "field outside the word");
    (8 * (word + 8 - off - size)) as u32
}

/// Send WQE basic block (WQEBB) size and its log2.
const WQEBB: usize = wqe_consts::SEND_WQE_BB;
const WQEBB_SHIFT: u32 = wqe_consts::SEND_WQE_SHIFT;
/// The 16-byte unit of WQE segments (the control segment's DS count counts these).
const DS_BYTES: usize = wqe_consts::SEND_WQE_DS;
/// Segments (DS units) per WQEBB.
const DS_PER_BB: u32 = (WQEBB / DS_BYTES) as u32;
/// 8-byte words of the control segment and of the remote address segment.
const CTRL_WORDS: usize = wqe_ctrl_seg::SIZE / 8;
const RADDR_WORDS: usize = wqe_raddr_seg::SIZE / 8;
/// 8-byte words of a data segment.
const DATA_WORDS: usize = wqe_data_seg::SIZE / 8;
/// Control segment, first word: `opmod_idx_opcode` and `qpn_ds`.
const CTRL_IDX_OPCODE_SHIFT: u32 = be_shift(0, wqe_ctrl_seg::opmod_idx_opcode, 4);
const CTRL_QPN_DS_SHIFT: u32 = be_shift(0, wqe_ctrl_seg::qpn_ds, 4);
/// The WQE index in `opmod_idx_opcode`.
const WQE_INDEX_MASK: u32 = wqe_consts::WQE_CTRL_WQE_INDEX_MASK;
/// Control segment, second word: `fm_ce_se` and `imm`.
const CTRL_FM_CE_SE_SHIFT: u32 = be_shift(8, wqe_ctrl_seg::fm_ce_se, 1);
const CTRL_IMM_SHIFT: u32 = be_shift(8, wqe_ctrl_seg::imm, 4);
/// Remote address segment: `raddr` is the first word, `rkey` in the second.
const RADDR_RKEY_SHIFT: u32 = be_shift(8, wqe_raddr_seg::rkey, 4);
/// Data segment, first word: `byte_count` and `lkey`; `addr` is the second word.
const DATA_BYTE_COUNT_SHIFT: u32 = be_shift(0, wqe_data_seg::byte_count, 4);
const DATA_LKEY_SHIFT: u32 = be_shift(0, wqe_data_seg::lkey, 4);
/// The largest DS count the control segment holds.
const MAX_DS: u32 = wqe_consts::WQE_CTRL_DS_MASK;
/// Segments of the UD address vector.
const AV_DS: u32 = (wqe_av::SIZE / DS_BYTES) as u32;
/// CQE size and its log2; the byte holding opcode and owner.
const CQE_SIZE: usize = cqe64::SIZE;
const CQE_SHIFT: u32 = CQE_SIZE.trailing_zeros();
const CQE_OP_OWN: usize = cqe64::op_own;
/// `op_own` bits: the owner bit and the opcode field.
const CQE_OWNER_MASK: u8 = cq_consts::CQE_OWNER_MASK;
const CQE_OPCODE_MASK: u8 = CqeOpcode::INVALID.0 << cq_consts::CQE_OPCODE_SHIFT;
/// 24-bit QP, SRQ and CQ numbers and counters in CQEs and doorbells.
const NUM_MASK_24: u32 = cq_consts::NUM_MASK_24;
/// Counters in the QP doorbell record (`& 0xffff` of the producer counters).
const DBR_COUNTER_MASK: u32 = umlx_hwdesc::plain::dbr::WQ_COUNTER_MASK;

const _: () = {
    // The fast paths test ownership and opcode together: the owner is bit 0, REQ is opcode 0,
    // INVALID fills the opcode field.
    assert!(CQE_OWNER_MASK == 1 && CQE_OP_OWN + 1 == CQE_SIZE && CqeOpcode::REQ.0 == 0);
    assert!(CQE_OPCODE_MASK.count_ones() == 4 && CQE_OPCODE_MASK.leading_zeros() == 0);
    assert!(CQE_SIZE.is_power_of_two() && WQEBB == 1 << WQEBB_SHIFT);
    assert!(wqe_ctrl_seg::SIZE == DS_BYTES && wqe_raddr_seg::SIZE == DS_BYTES);
    assert!(wqe_data_seg::SIZE == DS_BYTES && wqe_atomic_seg::SIZE == DS_BYTES);
    assert!(wqe_data_seg::addr == 8 && wqe_raddr_seg::raddr == 0, "8-byte fields stored as one word");
    assert!(wqe_srq_next_seg::SIZE == DS_BYTES);
    assert!(qp_dbr::SIZE == 8 && cq_dbr::SIZE == 8);
};

/// The send WQE opcodes the data path posts, as `u8` for the control segment (values from
/// hwdesc's [`WqeOpcode`](umlx_hwdesc::enums::WqeOpcode)).
pub mod opcode {
    use umlx_hwdesc::enums::WqeOpcode;
    /// NOP.
    pub const NOP: u8 = WqeOpcode::NOP.0;
    /// RDMA WRITE.
    pub const RDMA_WRITE: u8 = WqeOpcode::RDMA_WRITE.0;
    /// RDMA WRITE with immediate.
    pub const RDMA_WRITE_IMM: u8 = WqeOpcode::RDMA_WRITE_IMM.0;
    /// SEND.
    pub const SEND: u8 = WqeOpcode::SEND.0;
    /// SEND with immediate.
    pub const SEND_IMM: u8 = WqeOpcode::SEND_IMM.0;
    /// RDMA READ.
    pub const RDMA_READ: u8 = WqeOpcode::RDMA_READ.0;
    /// Atomic compare and swap.
    pub const ATOMIC_CS: u8 = WqeOpcode::ATOMIC_CS.0;
    /// Atomic fetch and add.
    pub const ATOMIC_FA: u8 = WqeOpcode::ATOMIC_FA.0;
}

/// `fm_ce_se` flags of the control segment (hwdesc's `plain::wqe` values).
pub mod flags {
    use umlx_hwdesc::plain::wqe;
    /// Generate a CQE.
    pub const CQ_UPDATE: u8 = wqe::WQE_CTRL_CQ_UPDATE;
    /// Solicited event.
    pub const SOLICITED: u8 = wqe::WQE_CTRL_SOLICITED;
    /// Fence: wait for outstanding READ/atomic before this WQE.
    pub const FENCE: u8 = wqe::WQE_CTRL_FENCE;
}

/// One scatter/gather element (`struct ibv_sge`: address, length, lkey), held as the mlx5
/// data segment the device reads (byte count, lkey, address; big-endian). It is built once, by
/// [`Sge::new`] or a memory region, and copied into WQEs as it is: posting swaps no bytes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C, align(16))]
pub struct Sge {
    /// The 16 bytes in device order, as two native words (their memory bytes are the wire's).
    seg: [u64; 2],
}

impl Sge {
    /// The element for `length` bytes at `addr`, accessed with `lkey`.
    #[inline]
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Sge {
        let w0 = ((length as u64) << DATA_BYTE_COUNT_SHIFT) | ((lkey as u64) << DATA_LKEY_SHIFT);
        Sge { seg: [w0.to_be(), addr.to_be()] }
    }

    /// Address.
    #[inline]
    pub const fn addr(&self) -> u64 {
        u64::from_be(self.seg[1])
    }

    /// Length in bytes.
    #[inline]
    pub const fn length(&self) -> u32 {
        (u64::from_be(self.seg[0]) >> DATA_BYTE_COUNT_SHIFT) as u32
    }

    /// Local key.
    #[inline]
    pub const fn lkey(&self) -> u32 {
        (u64::from_be(self.seg[0]) >> DATA_LKEY_SHIFT) as u32
    }

    /// Whether the length is zero (such an element is left out of WQEs: a zero byte count
    /// would end a scatter list, or mean 2 GiB in a gather list).
    #[inline(always)]
    pub const fn is_empty(&self) -> bool {
        // The byte count's four bytes in memory, whatever the host order.
        let w = self.seg[0].to_ne_bytes();
        let b = wqe_data_seg::byte_count;
        u32::from_ne_bytes([w[b], w[b + 1], w[b + 2], w[b + 3]]) == 0
    }

    /// The data segment's two 8-byte words as they go to memory.
    #[inline(always)]
    pub const fn wire(&self) -> [u64; 2] {
        self.seg
    }
}

impl std::fmt::Debug for Sge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sge")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("length", &self.length())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .finish()
    }
}

/// The remote side of an RDMA or atomic operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remote {
    /// Remote address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

// SAFETY: the raw pointers of SendQueue, RecvQueue and CqRing point into the queue memory
// (`QueueMemory`, `Send + Sync`) and the `WrRing` that each holds an `Arc` of; the writer (or
// reader) is the only one that accesses that ring through them, so moving it to another thread
// moves the exclusive right to write (or read) the ring with it.
unsafe impl<B: Backend> Send for SendQueue<B> {}
// SAFETY: as above.
unsafe impl Send for RecvQueue {}
// SAFETY: as above.
unsafe impl Send for CqRing {}

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
    /// The queue is closed: its QP is in RESET (EINVAL).
    Closed,
}

/// One SQ slot: the work-request id of the WQE starting at that WQEBB and the SQ head after
/// it.
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
    /// For an SRQ: per WQE, set by the completion and cleared when the poster links the WQE
    /// back into the free list (an SRQ's WQEs complete in any order). Empty for a QP.
    srq_done: Box<[AtomicBool]>,
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
            srq_done: Box::new([]),
            qpn,
        }
    }

    /// Rings for an SRQ of `wqes` receive WQEs (a power of two): its WQEs are reused in the
    /// order they complete, through a free list (see [`RecvQueue`]).
    pub fn new_srq(srqn: u32, wqes: usize) -> WrRing {
        let mut r = WrRing::new(srqn, 1, wqes);
        r.srq_done = (0..r.rq.len()).map(|_| AtomicBool::new(false)).collect();
        r
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
        let head = slot.head.load(Ordering::Acquire);
        self.sq_tail.store(head, Ordering::Release);
        slot.wr_id.load(Ordering::Relaxed)
    }

    /// A responder completion for the receive WQE at `wqe_counter`: its wr_id; one receive WQE
    /// is free again.
    #[inline(always)]
    pub fn complete_recv(&self, wqe_counter: u16) -> u64 {
        let wr_id = self.rq_slot(wqe_counter as u32).load(Ordering::Acquire);
        if let Some(done) = self.srq_done.get((wqe_counter as u32 & self.rq_mask) as usize) {
            // An SRQ: this WQE, whichever it is, can be relinked (the poster's free list).
            done.store(true, Ordering::Release);
        } else {
            let t = self.rq_tail.load(Ordering::Relaxed);
            self.rq_tail.store(t.wrapping_add(1), Ordering::Release);
        }
        wr_id
    }
}

/// Send flags as ibverbs numbers them (`IBV_SEND_*`); the SQ turns them into `fm_ce_se`.
pub mod send_flags {
    /// IBV_SEND_FENCE.
    pub const FENCE: u32 = 1;
    /// IBV_SEND_SIGNALED.
    pub const SIGNALED: u32 = 2;
    /// IBV_SEND_SOLICITED.
    pub const SOLICITED: u32 = 4;
}

/// Where a hardware queue lives: its ring buffer and its doorbell record. The queue writers
/// and the CQ reader ([`SendQueue`], [`RecvQueue`], [`CqRing`]) keep raw pointers into both and
/// hold an `Arc` of the memory beside them, so safe code cannot free a buffer a queue still
/// writes or reads. The `Arc` is only ownership: the data path never calls through it.
///
/// # Safety
///
/// An implementation returns the same memory from every call of `buf` and of `dbr`, and that
/// memory stays allocated and in place for as long as the value lives (a queue computes its
/// pointers once, at creation, and uses them until it drops its `Arc`).
pub unsafe trait QueueMemory: Send + Sync + 'static {
    /// The queue buffer (WQEs or CQEs).
    fn buf(&self) -> &DmaMemory;
    /// The doorbell record.
    fn dbr(&self) -> &DmaMemory;
}

// SAFETY: both buffers are fields of the value, never replaced, and unmapped and freed only
// when it drops.
unsafe impl<B: Backend> QueueMemory for crate::objects::QueueMem<B> {
    fn buf(&self) -> &DmaMemory {
        &self.buf
    }
    fn dbr(&self) -> &DmaMemory {
        &self.dbr
    }
}

// SAFETY: the new ring is a field of the value; the doorbell record belongs to the CQ's
// original memory, which the value keeps alive through its `Arc`. Neither is ever replaced.
unsafe impl<B: Backend> QueueMemory for crate::objects::ResizedCqMem<B> {
    fn buf(&self) -> &DmaMemory {
        &self.buf
    }
    fn dbr(&self) -> &DmaMemory {
        &self.orig.dbr
    }
}

/// A queue buffer and a doorbell record owned together outside any device object (tests,
/// tools that drive the data path by hand).
#[derive(Debug)]
pub struct PlainQueueMemory {
    buf: DmaMemory,
    dbr: DmaMemory,
}

impl PlainQueueMemory {
    /// Owns `buf` and `dbr` as one queue's memory.
    pub fn new(buf: DmaMemory, dbr: DmaMemory) -> Arc<PlainQueueMemory> {
        Arc::new(PlainQueueMemory { buf, dbr })
    }
}

// SAFETY: both buffers are fields of the value, never replaced, and freed only when it drops.
unsafe impl QueueMemory for PlainQueueMemory {
    fn buf(&self) -> &DmaMemory {
        &self.buf
    }
    fn dbr(&self) -> &DmaMemory {
        &self.dbr
    }
}
