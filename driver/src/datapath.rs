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
//! requester successes for batches, with a [`BoundQpCache`] checked once per poll.
//!
//! This is one of the driver's `unsafe` modules (raw pointers into the queues' DMA buffers and
//! the QP table).

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
/// hwdesc's [`WqeOpcode`]).
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

/// Everything a send WQE can carry.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    /// Work-request id returned in the completion.
    pub wr_id: u64,
    /// PRM opcode.
    pub opcode: u8,
    /// [`send_flags`] bits (FENCE, SIGNALED, SOLICITED).
    pub send_flags: u32,
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
    pub av: Option<&'a [u8; wqe_av::SIZE]>,
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
    /// Signal every WQE (`sq_sig_all`).
    pub sig_all: bool,
    /// Size of each of the two buffers of the BlueFlame register the doorbell alternates
    /// between ([`crate::hca::Caps::bf_buf_size`], from the cap `log_bf_reg_size`).
    pub bf_buf_size: usize,
}

/// Whether a BlueFlame buffer size is one the doorbell can alternate by: a power of two of at
/// least 8 bytes whose two buffers, from the first register at [`uar::BF_OFFSET`], stay in the
/// UAR page (toggling the offset's bit for it moves between them).
const fn bf_buf_size_fits(size: usize) -> bool {
    size.is_power_of_two() && size >= 8 && uar::BF_OFFSET & size == 0 && uar::BF_OFFSET + 2 * size <= uar::UAR_PAGE_SIZE
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

/// `fm_ce_se` for each combination of the three [`send_flags`] bits, with `sig_all` forcing
/// CQ_UPDATE.
const fn fm_ce_se_table(sig_all: bool) -> [u8; 8] {
    let mut t = [0u8; 8];
    let mut f = 0;
    while f < 8 {
        let mut v = 0;
        if f as u32 & send_flags::FENCE != 0 {
            v |= flags::FENCE;
        }
        if f as u32 & send_flags::SIGNALED != 0 || sig_all {
            v |= flags::CQ_UPDATE;
        }
        if f as u32 & send_flags::SOLICITED != 0 {
            v |= flags::SOLICITED;
        }
        t[f] = v;
        f += 1;
    }
    t
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

/// The send queue writer of one QP.
///
/// The fields the fast path touches come first and are raw pointers resolved at creation (the
/// ring, its WQE-id slots and tail, the doorbell record, the BlueFlame register), so posting a
/// WQE follows no pointer chains. The memory they point into is held by the writer
/// ([`QueueMemory`]), as is the [`WrRing`].
pub struct SendQueue<B: Backend> {
    /// Start of the SQ in the QP buffer (validated at creation to hold the whole ring).
    base: *mut u8,
    /// Producer counter in WQEBBs.
    cur_post: u32,
    /// WQEBBs in the ring minus one (the ring is a power of two).
    mask: u32,
    /// `qpn << 8`: the control segment's second dword without its DS count.
    qpn_ds: u32,
    /// `fm_ce_se` by the low three send-flag bits (sig_all folded in).
    fm_ce_se: [u8; 8],
    /// The same, placed in the control segment's second 8 bytes as stored (big-endian).
    fm_ce_se_word: [u64; 8],
    /// The WQE-id slots of the ring (`mask + 1` of them, kept alive by `ring`).
    slots: *const SqSlot,
    /// WQEBBs retired by completions (in `ring`).
    tail: *const AtomicU32,
    /// Where the known free space ends (refreshed from the tail only when `cur_post` gets
    /// there: the tail is another thread's cache line).
    limit: u32,
    /// The first 8 bytes of the last WQE written, as stored: the doorbell value.
    last_ctrl: u64,
    /// A batch is open ([`SendQueue::hold_doorbell`]): finished chains ring no doorbell, and
    /// the batch is published or discarded as a whole. Where it started: the producer counter
    /// and `last_ctrl` then.
    held: Option<(u32, u64)>,
    /// The SQ counter of the doorbell record (dword 1; in `_mem`).
    dbr: *mut u32,
    /// Whether the backend lets stores reach the UAR page's BlueFlame registers directly
    /// (then `bf` is an address), or doorbells go through [`Backend::write64`] (then `bf` is
    /// a BAR0 offset).
    bf_direct: bool,
    /// The BlueFlame buffer the next doorbell goes to: a pointer into the UAR page, or (not
    /// `bf_direct`) a BAR0 offset held as an address without provenance. The UAR page is
    /// page-aligned and the two buffers differ in one bit (`bf_buf_size`), so toggling that bit
    /// moves between them in either form.
    bf: *mut u8,
    /// Where `bf` starts (the first buffer of the UAR's first BlueFlame register).
    bf_start: *mut u8,
    /// The BlueFlame buffer size: `bf` toggles by it.
    bf_buf_size: usize,
    backend: Arc<B>,
    ring: Arc<WrRing>,
    /// The memory `base` and `dbr` point into, kept alive by the writer (never read through).
    _mem: Arc<dyn QueueMemory>,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes per WQE.
    pub max_inline: u32,
}

/// The WQE's size in 16-byte segments: control, address vector, remote address, atomic
/// operands, then the inline data (behind its 4-byte header) or one data segment per SGE.
fn ds_count(w: &SendWqe<'_>) -> u32 {
    let mut ds = 1; // ctrl
    if w.av.is_some() {
        ds += AV_DS;
    }
    match w.opcode {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => ds += 1,
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => ds += 2,
        _ => {}
    }
    match w.inline {
        Some(d) if !d.is_empty() => ds += (d.len() + wqe_inline_seg::SIZE).div_ceil(DS_BYTES) as u32,
        Some(_) => {}
        None => ds += w.sges.iter().filter(|s| !s.is_empty()).count() as u32,
    }
    ds
}

impl<B: Backend> SendQueue<B> {
    /// A writer for the SQ described by `geo` in `mem`'s buffer (which must hold the whole
    /// ring), its producer counter in `mem`'s doorbell record, doorbells through `backend`. The
    /// writer keeps `mem` alive.
    pub fn new(
        backend: Arc<B>,
        mem: Arc<dyn QueueMemory>,
        geo: SqGeometry,
        ring: Arc<WrRing>,
    ) -> Result<SendQueue<B>, PostError> {
        let (buf, dbr) = (mem.buf(), mem.dbr());
        let bytes = WQEBB << geo.log_bbs;
        if geo.sq_offset.checked_add(bytes).is_none_or(|e| e > buf.len())
            || ring.sq.len() < (1 << geo.log_bbs)
            || dbr.len() < 8
            || geo.log_bbs > 16
            || !bf_buf_size_fits(geo.bf_buf_size)
        {
            return Err(PostError::WqeTooLarge);
        }
        // SAFETY: in bounds (checked above); only the address is computed here.
        let base = unsafe { buf.as_ptr().add(geo.sq_offset) };
        // SAFETY: the send counter lies in `dbr` (checked above); address only.
        let dbr_sq = unsafe { dbr.as_ptr().add(qp_dbr::send_counter) }.cast::<u32>();
        let uar_offset = geo.uar_index as usize * uar::UAR_PAGE_SIZE;
        // (A page that is not page-aligned breaks the backend's contract: doorbells then go
        // through `write64`.)
        let page = backend.doorbell_page(uar_offset).filter(|p| p.as_ptr().addr() % uar::UAR_PAGE_SIZE == 0);
        let bf_direct = page.is_some();
        let bf_start = match page {
            // SAFETY: BF_OFFSET is inside the UAR page; address only.
            Some(p) => unsafe { p.as_ptr().add(uar::BF_OFFSET) },
            None => std::ptr::without_provenance_mut(uar_offset + uar::BF_OFFSET),
        };
        Ok(SendQueue {
            base,
            cur_post: 0,
            mask: (1 << geo.log_bbs) - 1,
            qpn_ds: geo.qpn << wqe_consts::WQE_CTRL_QPN_SHIFT,
            fm_ce_se: fm_ce_se_table(geo.sig_all),
            fm_ce_se_word: fm_ce_se_table(geo.sig_all).map(|f| ((f as u64) << CTRL_FM_CE_SE_SHIFT).to_be()),
            slots: ring.sq.as_ptr(),
            tail: &*ring.sq_tail as *const AtomicU32,
            limit: 1 << geo.log_bbs,
            last_ctrl: 0,
            held: None,
            dbr: dbr_sq,
            bf_direct,
            bf: bf_start,
            bf_start,
            bf_buf_size: geo.bf_buf_size,
            backend,
            ring,
            _mem: mem,
            max_sge: geo.max_sge,
            max_inline: geo.max_inline,
        })
    }

    #[inline(always)]
    fn tail(&self) -> u32 {
        // SAFETY: `tail` points into `ring`, which this writer keeps alive.
        unsafe { (*self.tail).load(Ordering::Acquire) }
    }

    /// The producer counter at which the ring is full, as of the last retired WQE.
    #[inline(always)]
    fn fresh_limit(&self) -> u32 {
        self.tail().wrapping_add(self.mask + 1)
    }

    /// WQEBBs free for posting.
    #[inline]
    pub fn free_bbs(&self) -> u32 {
        self.mask + 1 - self.cur_post.wrapping_sub(self.tail())
    }

    /// The producer counter (WQEBBs).
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// Resets the producer state (QP back to RESET).
    pub fn reset(&mut self) {
        self.cur_post = 0;
        self.limit = self.mask + 1;
        self.last_ctrl = 0;
        self.held = None;
        self.ring.sq_tail.store(0, Ordering::Release);
        self.bf = self.bf_start;
    }

    /// Records the WQE at `bb` spanning `nbb` WQEBBs: its wr_id and where the SQ head will be
    /// once it completes.
    #[inline(always)]
    fn record(&mut self, bb: u32, nbb: u32, wr_id: u64) {
        let next = bb.wrapping_add(nbb);
        // SAFETY: `slots` has `mask + 1` entries kept alive by `ring`; the index is masked.
        let slot = unsafe { &*self.slots.add((bb & self.mask) as usize) };
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.head.store(next, Ordering::Release);
        self.cur_post = next;
    }

    /// Opens a batch (the new post-send API's `ibv_wr_start`): the chains posted until
    /// [`SendQueue::release_doorbell`] are written but not published, so that the device sees
    /// them all at once, or none of them after [`SendQueue::discard_held`]. Nothing if a batch
    /// is open already.
    pub fn hold_doorbell(&mut self) {
        if self.held.is_none() {
            self.held = Some((self.cur_post, self.last_ctrl));
        }
    }

    /// Closes the batch and publishes what it wrote with one doorbell.
    pub fn release_doorbell(&mut self) {
        if let Some((start, _)) = self.held.take()
            && self.cur_post != start
        {
            self.ring_doorbell();
        }
    }

    /// Closes the batch and drops what it wrote: the producer state goes back to where the
    /// batch started (the device never saw those WQEs; the next posts overwrite them).
    pub fn discard_held(&mut self) {
        if let Some((start, last_ctrl)) = self.held.take() {
            self.cur_post = start;
            self.last_ctrl = last_ctrl;
        }
    }

    /// Starts posting a chain: the producer state moves into the returned [`SqChain`] (kept in
    /// registers while the chain is written) and comes back, with the doorbell, in
    /// [`SqChain::finish`].
    #[inline(always)]
    pub fn begin(&mut self) -> SqChain<'_, B> {
        let bb = self.cur_post;
        SqChain { limit: self.limit, bb, start: bb, last_ctrl: self.last_ctrl, sq: self }
    }

    /// Stores one 16-byte segment, as laid out in `seg`, at 16-byte segment `seg16` of the WQE
    /// starting at WQEBB `bb`, wrapping at the ring's end.
    #[inline(always)]
    fn put_seg(&self, bb: u32, seg16: u32, seg: &[u8; DS_BYTES]) {
        let (w0, w1) = seg.split_at(8);
        self.put_seg_words(
            bb,
            seg16,
            u64::from_ne_bytes(w0.try_into().unwrap_or_default()),
            u64::from_ne_bytes(w1.try_into().unwrap_or_default()),
        );
    }

    /// Stores a 16-byte segment given as its two 8-byte words as they lie in memory.
    #[inline(always)]
    fn put_seg_words(&self, bb: u32, seg16: u32, w0: u64, w1: u64) {
        let ring_bytes = (self.mask as usize + 1) << WQEBB_SHIFT;
        let off = (((bb & self.mask) as usize) << WQEBB_SHIFT).wrapping_add(seg16 as usize * DS_BYTES) % ring_bytes;
        // SAFETY: the ring [base, base + ring_bytes) lies in the QP buffer (checked in `new`;
        // the writer keeps the buffer alive); `off` is a multiple of 16 below `ring_bytes` (a
        // multiple of 64), so both 8-byte stores are in the ring and aligned.
        unsafe {
            let p = self.base.add(off).cast::<u64>();
            p.write_volatile(w0);
            p.add(1).write_volatile(w1);
        }
    }

    /// Writes one WQE into the ring (no doorbell). Call [`SendQueue::ring_doorbell`] after the
    /// last WQE of a chain.
    #[inline]
    pub fn write_wqe(&mut self, w: &SendWqe<'_>) -> Result<(), PostError> {
        if w.inline.is_none() && w.sges.len() > self.max_sge as usize {
            return Err(PostError::TooManySges);
        }
        if let Some(d) = w.inline
            && d.len() > self.max_inline as usize
        {
            return Err(PostError::InlineTooLarge);
        }
        let ds = ds_count(w);
        if ds > MAX_DS {
            return Err(PostError::WqeTooLarge);
        }
        let nbb = ds.div_ceil(DS_PER_BB);
        if nbb > self.free_bbs() {
            return Err(PostError::QueueFull);
        }
        self.limit = self.fresh_limit();
        let bb = self.cur_post;
        let ctrl = wqe_ctrl_seg {
            opmod_idx_opcode: U32::new(
                ((bb & WQE_INDEX_MASK) << wqe_consts::WQE_CTRL_WQE_INDEX_SHIFT) | w.opcode as u32,
            ),
            qpn_ds: U32::new(self.qpn_ds | ds),
            fm_ce_se: self.fm_ce_se[(w.send_flags & 7) as usize],
            imm: U32::new(w.imm),
            ..Default::default()
        };
        let ctrl: [u8; DS_BYTES] = zerocopy::transmute!(ctrl);
        self.put_seg(bb, 0, &ctrl);
        self.last_ctrl = u64::from_ne_bytes(ctrl[..8].try_into().unwrap_or_default());
        let mut seg = 1;
        if let Some(av) = w.av {
            for (i, part) in av.chunks_exact(DS_BYTES).enumerate() {
                self.put_seg(bb, seg + i as u32, part.try_into().unwrap_or(&[0; DS_BYTES]));
            }
            seg += AV_DS;
        }
        match w.opcode {
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                let raddr = wqe_raddr_seg {
                    raddr: U64::new(w.remote.addr),
                    rkey: U32::new(w.remote.rkey),
                    ..Default::default()
                };
                self.put_seg(bb, seg, &zerocopy::transmute!(raddr));
                seg += 1;
                if matches!(w.opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                    let atomic = wqe_atomic_seg { swap_add: U64::new(w.atomic.0), compare: U64::new(w.atomic.1) };
                    self.put_seg(bb, seg, &zerocopy::transmute!(atomic));
                    seg += 1;
                }
            }
            _ => {}
        }
        match w.inline {
            Some(d) if !d.is_empty() => {
                // The inline header, then the data, in 16-byte segments (wrapping with the ring).
                let header = wqe_inline_seg { byte_count: U32::new(wqe_consts::INLINE_SEG | d.len() as u32) };
                let header = header.as_bytes();
                // The first segment: the header and the data's first bytes (zero-padded).
                let (head, rest) = d.split_at(d.len().min(DS_BYTES - header.len()));
                let mut part = [0u8; DS_BYTES];
                part[..header.len()].copy_from_slice(header);
                part[header.len()..header.len() + head.len()].copy_from_slice(head);
                self.put_seg(bb, seg, &part);
                seg += 1;
                // The rest, 16 bytes a segment, the last one zero-padded.
                for chunk in rest.chunks(DS_BYTES) {
                    let mut part = [0u8; DS_BYTES];
                    part[..chunk.len()].copy_from_slice(chunk);
                    self.put_seg(bb, seg, &part);
                    seg += 1;
                }
            }
            Some(_) => {}
            None => {
                for sge in w.sges.iter().filter(|s| !s.is_empty()) {
                    let [w0, w1] = sge.wire();
                    self.put_seg_words(bb, seg, w0, w1);
                    seg += 1;
                }
            }
        }
        self.record(bb, nbb, w.wr_id);
        Ok(())
    }

    /// Publishes the WQEs written since the last doorbell: the doorbell record, then the
    /// BlueFlame register with the first 8 bytes of the last WQE.
    #[inline(always)]
    pub fn ring_doorbell(&mut self) {
        // Everything read before the barriers (which the compiler treats as touching all memory).
        let (counter, ctrl, bf) = ((self.cur_post & DBR_COUNTER_MASK).to_be(), self.last_ctrl, self.bf);
        dma_wmb();
        // SAFETY: `dbr` points at dword 1 of the QP's doorbell record (checked in `new`; the
        // writer keeps it alive); 4-byte aligned.
        unsafe { self.dbr.write_volatile(counter) };
        dma_wmb();
        // The next doorbell goes to the other buffer; noted first, so that the register write
        // is the last thing done (nothing is kept across a backend's call).
        let size = self.bf_buf_size;
        self.bf = bf.map_addr(|a| a ^ size);
        if self.bf_direct {
            // SAFETY: the backend keeps the UAR page mapped while it lives (this writer holds
            // it); `bf` is one of the first BlueFlame register's two buffers in that page
            // (`bf_buf_size_fits` was checked in `new`), 8-byte aligned.
            unsafe { bf.cast::<u64>().write_volatile(ctrl) }
        } else {
            self.backend.write64(bf.addr(), u64::from_be(ctrl));
        }
    }
}

/// The fields of a simple send WQE besides its opcode, flags and SGE, as
/// [`SqChain::put_simple_from`] reads them: each where the WQE takes it. A binding hands its own
/// request (libibverbs.so.1 its `struct ibv_send_wr`), read in place, so that none of them is
/// kept in a register across the post's checks; [`SimpleFields`] holds them as values.
pub trait SimpleWqeSource {
    /// The work request ID.
    fn wr_id(&self) -> u64;
    /// The immediate, as the 32 wire bits (read only for an opcode with one).
    fn imm(&self) -> u32;
    /// The remote address and R_Key (read only for an RDMA opcode).
    fn remote(&self) -> Remote;
}

/// A [`SimpleWqeSource`] of values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimpleFields {
    /// The work request ID.
    pub wr_id: u64,
    /// The immediate (0 for an opcode without one).
    pub imm: u32,
    /// The remote address and R_Key (unused for a SEND).
    pub remote: Remote,
}

impl SimpleWqeSource for SimpleFields {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    #[inline(always)]
    fn imm(&self) -> u32 {
        self.imm
    }
    #[inline(always)]
    fn remote(&self) -> Remote {
        self.remote
    }
}

/// A chain of send WQEs being written (see [`SendQueue::begin`]). Dropping it without
/// [`SqChain::finish`] leaves the written WQEs unposted: the next chain overwrites them.
pub struct SqChain<'q, B: Backend> {
    sq: &'q mut SendQueue<B>,
    /// Producer counter.
    bb: u32,
    /// Where the known free space ends (refreshed from the tail when `bb` reaches it).
    limit: u32,
    /// The producer counter when the chain started.
    start: u32,
    /// The first 8 bytes of the last WQE written, as stored.
    last_ctrl: u64,
}

impl<B: Backend> SqChain<'_, B> {
    /// Whether the ring has room for one more WQEBB, as far as known without reading the
    /// tail (see [`SqChain::write_simple`] for the refreshing check).
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.bb != self.limit
    }

    /// WQEBBs known free without reading the tail.
    #[inline(always)]
    pub fn room(&self) -> u32 {
        self.limit.wrapping_sub(self.bb)
    }

    /// [`SqChain::put_simple`] after making sure of room (reading the tail if needed).
    #[inline(always)]
    pub fn write_simple(
        &mut self,
        wr_id: u64,
        opcode: u8,
        send_flags: u32,
        imm: u32,
        remote: Option<Remote>,
        sge: &Sge,
    ) -> Result<(), PostError> {
        if self.bb == self.limit {
            self.limit = self.sq.fresh_limit();
            self.sq.limit = self.limit;
            if self.bb == self.limit {
                return Err(PostError::QueueFull);
            }
        }
        self.put_simple(wr_id, opcode, send_flags, imm, remote, sge);
        Ok(())
    }

    /// Fast path: one WQE with one SGE, no inline data, no atomic operands, no address vector
    /// (an RC SEND, SEND_IMM, RDMA_WRITE(_IMM) or RDMA_READ), in a ring known to have room
    /// ([`SqChain::has_room`]; without room the WQE would overwrite one not yet completed).
    /// `send_flags` holds the [`send_flags`] bits; `imm` is the immediate as the 32 wire bits.
    /// A zero-length SGE is left out (a zero byte count would mean 2 GiB).
    #[inline(always)]
    pub fn put_simple(&mut self, wr_id: u64, opcode: u8, send_flags: u32, imm: u32, remote: Option<Remote>, sge: &Sge) {
        let has_remote = remote.is_some();
        let fields = SimpleFields { wr_id, imm, remote: remote.unwrap_or_default() };
        self.put_simple_from(opcode, send_flags, true, has_remote, sge, &fields);
    }

    /// [`SqChain::put_simple`] with the work request ID, immediate and remote address read from
    /// `src` where the WQE takes each: the immediate only when `has_imm` (else 0), the remote
    /// address only when `has_remote`.
    #[inline(always)]
    pub fn put_simple_from(
        &mut self,
        opcode: u8,
        send_flags: u32,
        has_imm: bool,
        has_remote: bool,
        sge: &Sge,
        src: &impl SimpleWqeSource,
    ) {
        let sq = &*self.sq;
        let bb = self.bb;
        let ds = 1 + has_remote as u32 + !sge.is_empty() as u32;
        let idx_opcode = ((bb & WQE_INDEX_MASK) << wqe_consts::WQE_CTRL_WQE_INDEX_SHIFT) | opcode as u32;
        let ctrl0 = ((idx_opcode as u64) << CTRL_IDX_OPCODE_SHIFT) | ((sq.qpn_ds | ds) as u64) << CTRL_QPN_DS_SHIFT;
        // Byte swapping distributes over OR: the flags word is stored pre-swapped.
        let imm = if has_imm { src.imm() } else { 0 };
        let ctrl1_be = sq.fm_ce_se_word[(send_flags & 7) as usize] | ((imm as u64) << CTRL_IMM_SHIFT).to_be();
        self.last_ctrl = ctrl0.to_be();
        let idx = (bb & sq.mask) as usize;
        // SAFETY: the ring [base, base + 64 * (mask + 1)) lies in the QP buffer (checked in
        // `SendQueue::new`; the queue keeps the buffer alive); idx <= mask; WQEBBs are 64-byte
        // aligned. `slots` has mask + 1 entries, kept alive by the queue's `ring`.
        unsafe {
            let p = sq.base.add(idx << WQEBB_SHIFT).cast::<u64>();
            p.write_volatile(self.last_ctrl);
            p.add(1).write_volatile(ctrl1_be);
            let d = if has_remote {
                let r = src.remote();
                let ra = p.add(CTRL_WORDS);
                ra.write_volatile(r.addr.to_be());
                ra.add(1).write_volatile(((r.rkey as u64) << RADDR_RKEY_SHIFT).to_be());
                ra.add(RADDR_WORDS)
            } else {
                p.add(CTRL_WORDS)
            };
            let [w0, w1] = sge.wire();
            d.write_volatile(w0);
            d.add(1).write_volatile(w1);
            let slot = &*sq.slots.add(idx);
            slot.wr_id.store(src.wr_id(), Ordering::Relaxed);
            slot.head.store(bb.wrapping_add(1), Ordering::Release);
        }
        self.bb = bb.wrapping_add(1);
    }

    /// Runs `f` on the queue itself with the chain's producer state synced in and out: for
    /// WQEs built by the caller through [`SendQueue::write_wqe`].
    #[inline(always)]
    pub fn with_queue<R>(&mut self, f: impl FnOnce(&mut SendQueue<B>) -> R) -> R {
        self.sq.cur_post = self.bb;
        self.sq.limit = self.limit;
        self.sq.last_ctrl = self.last_ctrl;
        let r = f(self.sq);
        self.bb = self.sq.cur_post;
        self.limit = self.sq.limit;
        self.last_ctrl = self.sq.last_ctrl;
        r
    }

    /// Ends the chain: the producer state goes back to the queue and, if any WQE was written,
    /// the doorbell rings once (unless a batch holds it: [`SendQueue::hold_doorbell`]).
    #[inline(always)]
    pub fn finish(self) {
        // (`limit` is written back where it changes.)
        self.sq.cur_post = self.bb;
        self.sq.last_ctrl = self.last_ctrl;
        if self.bb != self.start && self.sq.held.is_none() {
            self.sq.ring_doorbell();
        }
    }
}

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

/// A CQE as read from the ring: a copy of the fields a completion can need (no reference into
/// device memory), read through hwdesc's [`cqe64`] and [`err_cqe`] offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    op_own: u8,
    flags_rqpn: u32,
    srqn_uidx: u32,
    imm_inval_pkey: u32,
    byte_cnt: u32,
    vendor_err_synd: u8,
    syndrome: u8,
    sop_drop_qpn: u32,
    wqe_counter: u16,
}

impl Cqe {
    /// CQE opcode (`op_own` bits 7:4).
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own >> cq_consts::CQE_OPCODE_SHIFT
    }
    /// Local QPN.
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn & NUM_MASK_24
    }
    /// For requester CQEs: the send WQE opcode (`sop_drop_qpn` bits 31:24).
    #[inline(always)]
    pub fn wqe_opcode(&self) -> u8 {
        (self.sop_drop_qpn >> cq_consts::SOP_WQE_OPCODE_SHIFT) as u8
    }
    /// WQE counter.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        self.wqe_counter
    }
    /// Byte count.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.byte_cnt
    }
    /// Immediate data / invalidated rkey.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.imm_inval_pkey
    }
    /// flags_rqpn: source QPN (UD), SL, GRH indication.
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.flags_rqpn
    }
    /// SRQ number (low 24 bits of srqn_uidx).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.srqn_uidx & NUM_MASK_24
    }
    /// Error syndrome (error CQEs).
    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        self.syndrome
    }
    /// Vendor error syndrome (error CQEs).
    #[inline(always)]
    pub fn vendor_syndrome(&self) -> u8 {
        self.vendor_err_synd
    }
    /// Solicited event flag.
    #[inline(always)]
    pub fn solicited(&self) -> bool {
        CqeOpOwn::from_bits(self.op_own).solicited()
    }
}

/// The consumer side of a CQ ring.
pub struct CqRing {
    base: *const u8,
    /// CQEs in the ring minus one (a power of two minus one).
    mask: u32,
    log_size: u32,
    ci: u32,
    /// The CQE at `ci` and the owner bit it has when the device has written it on this pass
    /// (bit `log_size` of `ci`): kept with `ci` so that looking at the head costs two loads.
    head: *const u8,
    owner: u8,
    /// The consumer-index word of the CQ doorbell record.
    dbr: *mut u32,
    /// The memory `base`, `head` and `dbr` point into, kept alive by the reader (never read
    /// through).
    _mem: Arc<dyn QueueMemory>,
}

/// A CQE the device has handed over (ownership checked, read barrier passed), read field by
/// field with volatile loads: no copy of fields a completion does not need, no reference into
/// device memory. Valid until the ring's consumer index moves past it.
#[derive(Clone, Copy)]
pub struct CqeRef<'r> {
    p: *const u8,
    op_own: u8,
    _ring: std::marker::PhantomData<&'r ()>,
}

/// A CQE's `sop_drop_qpn` dword as it lies in memory: for a requester CQE the send WQE's
/// opcode (bits 31:24) and the QPN (bits 23:0). Compared as is, without byte swapping: equal
/// values are the same opcode on the same QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SopDropQpn(u32);

impl SopDropQpn {
    /// The dword of a CQE for `qpn` (its low 24 bits) and `wqe_opcode`.
    pub fn new(wqe_opcode: u8, qpn: u32) -> SopDropQpn {
        SopDropQpn((((wqe_opcode as u32) << cq_consts::SOP_WQE_OPCODE_SHIFT) | (qpn & NUM_MASK_24)).to_be())
    }

    /// The QPN.
    #[inline(always)]
    pub fn qpn(self) -> u32 {
        u32::from_be(self.0) & NUM_MASK_24
    }

    /// The send WQE opcode (requester CQEs).
    #[inline(always)]
    pub fn wqe_opcode(self) -> u8 {
        (u32::from_be(self.0) >> cq_consts::SOP_WQE_OPCODE_SHIFT) as u8
    }

    /// As a cache key: no `SopDropQpn` equals [`NO_SOP_DROP_QPN`].
    #[inline(always)]
    fn key(self) -> u64 {
        self.0 as u64
    }
}

/// A cache key no CQE has.
const NO_SOP_DROP_QPN: u64 = u64::MAX;

impl CqeRef<'_> {
    /// The big-endian dword at `off` (one of hwdesc's 4-byte CQE fields) as a number.
    #[inline(always)]
    fn be32(&self, off: usize) -> u32 {
        u32::from_be(self.raw32(off))
    }

    /// The dword at `off` as it lies in memory.
    #[inline(always)]
    fn raw32(&self, off: usize) -> u32 {
        // SAFETY: `p` is a 64-byte aligned CQE inside the ring (see `peek_at` and
        // `CqCursor::take_requesters`), which outlives this reference; every call site passes
        // the offset of a 4-byte, 4-aligned hwdesc CQE field.
        unsafe { self.p.add(off).cast::<u32>().read_volatile() }
    }

    /// The byte at `off` (a one-byte hwdesc CQE field).
    #[inline(always)]
    fn byte(&self, off: usize) -> u8 {
        // SAFETY: as in `raw32`; `off` is inside the CQE.
        unsafe { self.p.add(off).read_volatile() }
    }

    /// CQE opcode (`op_own` bits 7:4).
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own >> cq_consts::CQE_OPCODE_SHIFT
    }

    /// Local QPN (low 24 bits of `sop_drop_qpn`).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        self.be32(cqe64::sop_drop_qpn) & NUM_MASK_24
    }

    /// The `sop_drop_qpn` dword as it lies in the CQE (see [`SopDropQpn`]).
    #[inline(always)]
    pub fn sop_drop_qpn(&self) -> SopDropQpn {
        SopDropQpn(self.raw32(cqe64::sop_drop_qpn))
    }

    /// For requester CQEs: the send WQE opcode (the first byte of `sop_drop_qpn`).
    #[inline(always)]
    pub fn wqe_opcode(&self) -> u8 {
        self.byte(cqe64::sop_drop_qpn)
    }

    /// WQE counter.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        // SAFETY: as in `raw32`; `wqe_counter` is a 2-byte, 2-aligned field of the CQE.
        u16::from_be(unsafe { self.p.add(cqe64::wqe_counter).cast::<u16>().read_volatile() })
    }

    /// Byte count.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.be32(cqe64::byte_cnt)
    }

    /// flags_rqpn: source QPN (UD), SL, GRH indication.
    #[inline(always)]
    pub fn flags_rqpn(&self) -> u32 {
        self.be32(cqe64::flags_rqpn)
    }

    /// SRQ number (low 24 bits of srqn_uidx).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.be32(cqe64::srqn_uidx) & NUM_MASK_24
    }

    /// The sender's QP number (UD responder CQEs; `flags_rqpn` bits 23:0).
    #[inline(always)]
    pub fn src_qp(&self) -> u32 {
        self.flags_rqpn() & NUM_MASK_24
    }

    /// The received service level (responder CQEs).
    #[inline(always)]
    pub fn sl(&self) -> u8 {
        ((self.flags_rqpn() >> cq_consts::FLAGS_RQPN_SL_SHIFT) & cq_consts::FLAGS_RQPN_SL_MASK) as u8
    }

    /// Whether the received packet carried a GRH (responder CQEs).
    #[inline(always)]
    pub fn has_grh(&self) -> bool {
        (self.flags_rqpn() >> cq_consts::FLAGS_RQPN_GRH_SHIFT) & cq_consts::FLAGS_RQPN_GRH_MASK != 0
    }

    /// Whether this is a responder CQE of a message that carried immediate data.
    #[inline(always)]
    pub fn with_imm(&self) -> bool {
        matches!(CqeOpcode(self.opcode()), CqeOpcode::RESP_WR_IMM | CqeOpcode::RESP_SEND_IMM)
    }

    /// Immediate data / invalidated rkey.
    #[inline(always)]
    pub fn imm(&self) -> u32 {
        self.be32(cqe64::imm_inval_pkey)
    }

    /// The whole CQE decoded (for the paths that need most of it).
    #[inline]
    pub fn copy(&self) -> Cqe {
        Cqe {
            op_own: self.op_own,
            flags_rqpn: self.flags_rqpn(),
            srqn_uidx: self.be32(cqe64::srqn_uidx),
            imm_inval_pkey: self.imm(),
            byte_cnt: self.byte_cnt(),
            vendor_err_synd: self.byte(err_cqe::vendor_err_synd),
            syndrome: self.byte(err_cqe::syndrome),
            sop_drop_qpn: self.be32(cqe64::sop_drop_qpn),
            wqe_counter: self.wqe_counter(),
        }
    }
}

impl CqRing {
    /// A consumer for 2^`log_size` CQEs in `mem`'s buffer, publishing its index in `mem`'s
    /// doorbell record. The reader keeps `mem` alive.
    pub fn new(mem: Arc<dyn QueueMemory>, log_size: u32) -> Option<CqRing> {
        let (buf, dbr) = (mem.buf(), mem.dbr());
        if log_size > 24 || (CQE_SIZE << log_size) > buf.len() || dbr.len() < cq_dbr::SIZE {
            return None;
        }
        let base = buf.as_ptr().cast_const();
        // SAFETY: the consumer-index word lies in `dbr` (checked above); address only.
        let (mask, dbr) = ((1 << log_size) - 1, unsafe { dbr.as_ptr().add(cq_dbr::set_ci) }.cast::<u32>());
        Some(CqRing { base, mask, log_size, ci: 0, head: base, owner: 0, dbr, _mem: mem })
    }

    /// A consumer over a new ring (after a resize) continuing at consumer counter `ci`.
    pub fn resume(mem: Arc<dyn QueueMemory>, log_size: u32, ci: u32) -> Option<CqRing> {
        let mut r = CqRing::new(mem, log_size)?;
        r.set_ci(ci);
        Some(r)
    }

    /// Moves the consumer counter to `ci`, and the head CQE and owner bit with it.
    #[inline(always)]
    fn set_ci(&mut self, ci: u32) {
        self.ci = ci;
        // SAFETY: the index is masked, so the CQE lies in the ring (see `CqRing::new`).
        self.head = unsafe { self.base.add(((ci & self.mask) as usize) << CQE_SHIFT) };
        self.owner = pass_owner(ci, self.mask);
    }

    /// log2 of the number of CQEs.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// Consumer counter.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Starts consuming: the consumer state moves into the returned [`CqCursor`] (kept in
    /// registers while polling) and comes back, with the doorbell record, in
    /// [`CqCursor::finish`].
    #[inline(always)]
    pub fn cursor(&mut self) -> CqCursor<'_> {
        CqCursor { base: self.base, mask: self.mask, ci: self.ci, start: self.ci, ring: self }
    }

    /// The CQE at the consumer index, sorted for the poll fast path (one load of the owner
    /// byte; the read barrier is passed for a requester success).
    #[inline(always)]
    fn head(&self) -> CqHead<'_> {
        let p = self.head;
        // SAFETY: `head` is the CQE at `ci`, inside the ring checked in `CqRing::new` (the
        // reader keeps the buffer alive; see `set_ci` and `advance`); its op_own byte.
        let op_own = unsafe { p.add(CQE_OP_OWN).read_volatile() };
        if is_requester_success(op_own, self.owner) {
            dma_rmb();
            return CqHead::RequesterSuccess(CqeRef { p, op_own, _ring: std::marker::PhantomData });
        }
        if is_written(op_own, self.owner) { CqHead::Other } else { CqHead::Empty }
    }

    /// The poll fast path: if the head CQE is a requester success, shows it to `f` with a
    /// view of the CQE after it, and if `f` takes it (returns true), consumes it and publishes
    /// the consumer index in the doorbell record. The ring's next state is worked out before
    /// `f` runs, so it stays in registers across `f`'s stores.
    #[inline(always)]
    pub fn take_requester(&mut self, f: impl FnOnce(CqeRef<'_>, NextCqe<'_>) -> bool) -> HeadTaken {
        let cqe = match self.head() {
            CqHead::RequesterSuccess(cqe) => cqe,
            CqHead::Empty => return HeadTaken::Empty,
            CqHead::Other => return HeadTaken::Other,
        };
        let ci = self.ci.wrapping_add(1);
        let wrap = ci & self.mask == 0;
        // SAFETY: when the head is not the ring's last CQE, the next one is in the ring.
        let next = if wrap { self.base } else { unsafe { cqe.p.add(CQE_SIZE) } };
        let owner = self.owner ^ wrap as u8;
        if !f(cqe, NextCqe { p: next, owner, _ring: std::marker::PhantomData }) {
            return HeadTaken::Declined;
        }
        self.ci = ci;
        self.head = next;
        self.owner = owner;
        self.update_ci();
        HeadTaken::Taken
    }

    /// After MODIFY_CQ has resized the CQ: copies the CQEs not yet polled from this ring's
    /// buffer `old` into the new ring `new` (2^`new_log` CQEs), up to the device's RESIZE_CQ
    /// CQE, each with the owner bit of its new place. Old CQE `i` goes to new slot `i + 1`
    /// (the marker's slot counts as consumed), so a consumer resuming at the returned counter
    /// (the consumer counter plus one) meets the copies first, then the device's new CQEs. `None` if no RESIZE_CQ CQE follows
    /// the unpolled ones (the device did not resize).
    pub fn carry_over(&self, old: &DmaMemory, new: &DmaMemory, new_log: u32) -> Option<u32> {
        let mut i = self.ci;
        let (old_mask, new_mask) = (self.mask, (1u32 << new_log).checked_sub(1)?);
        for _ in 0..=old_mask {
            let off = ((i & old_mask) as usize) << CQE_SHIFT;
            let op_own = old.read_u8(off + CQE_OP_OWN).ok()?;
            if !is_written(op_own, pass_owner(i, old_mask)) {
                return None; // no valid CQE: the marker must come first
            }
            if CqeOpcode(op_own >> cq_consts::CQE_OPCODE_SHIFT) == CqeOpcode::RESIZE_CQ {
                return Some(self.ci.wrapping_add(1));
            }
            let j = i.wrapping_add(1);
            let mut e = [0u8; CQE_SIZE];
            old.read_bytes(off, &mut e).ok()?;
            e[CQE_OP_OWN] = (e[CQE_OP_OWN] & !CQE_OWNER_MASK) | pass_owner(j, new_mask);
            new.write_bytes(((j & new_mask) as usize) << CQE_SHIFT, &e).ok()?;
            i = j;
        }
        None
    }

    /// CQEs written and not yet polled, given the device's producer counter (QUERY_CQ).
    pub fn unpolled(&self, producer_counter: u32) -> u32 {
        producer_counter.wrapping_sub(self.ci) & NUM_MASK_24
    }

    /// Publishes the consumer index in the CQ doorbell record.
    #[inline(always)]
    pub fn update_ci(&self) {
        // SAFETY: `dbr` points at dword 0 of the CQ's doorbell record (checked in `new`; the
        // reader keeps it alive); 4-byte aligned.
        unsafe { self.dbr.write_volatile((self.ci & NUM_MASK_24).to_be()) }
    }

    /// Arms the CQ: doorbell record word 1, then the UAR CQ doorbell. `sn` is the arm sequence
    /// number (incremented per event received).
    pub fn arm<B: Backend>(&self, backend: &B, uar: u32, cqn: u32, sn: u32, solicited_only: bool) {
        let cmd = if solicited_only { uar::CQ_DB_REQ_NOT_SOL } else { uar::CQ_DB_REQ_NOT };
        let hi = ((sn & 3) << uar::CQ_DB_SN_SHIFT) | cmd | (self.ci & NUM_MASK_24);
        // SAFETY: as in `update_ci`; the record's arm word (`dbr` points at its set_ci word).
        unsafe { self.dbr.byte_sub(cq_dbr::set_ci).byte_add(cq_dbr::arm).write_volatile(hi.to_be()) };
        dma_wmb();
        // The UAR's CQ doorbell: the arm value, then the CQ number (`MLX5_CQ_DOORBELL`).
        backend.write64(
            uar as usize * uar::UAR_PAGE_SIZE + uar::CQ_DOORBELL,
            ((hi as u64) << 32) | (cqn & NUM_MASK_24) as u64,
        );
    }
}

/// What `CqRing::head` found at the consumer index.
enum CqHead<'r> {
    /// No CQE: the device has not written one there on this pass.
    Empty,
    /// A requester success (CQE opcode 0).
    RequesterSuccess(CqeRef<'r>),
    /// Any other CQE (responder, error, resize): see [`CqCursor::peek`].
    Other,
}

/// What [`CqRing::take_requester`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadTaken {
    /// No CQE at the head.
    Empty,
    /// A CQE other than a requester success at the head: not shown.
    Other,
    /// A requester success the caller did not take.
    Declined,
    /// A requester success taken and consumed.
    Taken,
}

/// The CQE after the head, as [`CqRing::take_requester`] shows it.
pub struct NextCqe<'r> {
    p: *const u8,
    owner: u8,
    _ring: std::marker::PhantomData<&'r ()>,
}

impl NextCqe<'_> {
    /// Whether the device has not written it yet.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        // SAFETY: `p` is a CQE of the ring (see `take_requester`); its op_own byte.
        let op_own = unsafe { self.p.add(CQE_OP_OWN).read_volatile() };
        !is_written(op_own, self.owner)
    }
}

/// The owner bit a CQE has when the device has written it on the pass over a ring of
/// `mask + 1` CQEs that consumer counter `ci` is in (bit log2(mask + 1) of the counter).
#[inline(always)]
fn pass_owner(ci: u32, mask: u32) -> u8 {
    (ci & (mask + 1) != 0) as u8
}

/// Whether a CQE whose `op_own` byte is `op_own` is a requester success the device has
/// written on the pass whose owner bit is `owner`: opcode 0 and that owner bit (bits 7:4 and 0
/// against it).
#[inline(always)]
fn is_requester_success(op_own: u8, owner: u8) -> bool {
    (op_own ^ owner) & (CQE_OPCODE_MASK | CQE_OWNER_MASK) == 0
}

/// Whether a CQE whose `op_own` byte is `op_own` has been written by the device on the pass
/// whose owner bit is `owner`. Both tests in one compare: rotated right by one, an owner
/// mismatch lands in bit 7 and the opcode in bits 6:3, so a written CQE (owner matches, opcode
/// not INVALID, 15) is below INVALID rotated the same way (0x78).
#[inline(always)]
fn is_written(op_own: u8, owner: u8) -> bool {
    (op_own ^ owner).rotate_right(1) < CQE_OPCODE_MASK.rotate_right(1)
}

/// The CQE at counter `ci` of the ring at `base` (`mask + 1` CQEs), if the device has produced
/// it: valid when its opcode is not INVALID (15) and its owner bit matches this pass over the
/// ring (bit log2(mask + 1) of the counter).
#[inline(always)]
fn peek_at<'r>(base: *const u8, mask: u32, ci: u32) -> Option<CqeRef<'r>> {
    // SAFETY: `base` and `mask` come from a `CqRing`, whose ring [base, base + 64 * (mask + 1))
    // lies in the CQ buffer (checked in `CqRing::new`; the ring keeps the buffer alive); the index is
    // masked; CQEs are 64-byte aligned.
    let p = unsafe { base.add(((ci & mask) as usize) << CQE_SHIFT) };
    // SAFETY: as above; the CQE's op_own byte.
    let op_own = unsafe { p.add(CQE_OP_OWN).read_volatile() };
    if !is_written(op_own, pass_owner(ci, mask)) {
        return None;
    }
    dma_rmb();
    Some(CqeRef { p, op_own, _ring: std::marker::PhantomData })
}

/// A CQ being polled (see [`CqRing::cursor`]).
pub struct CqCursor<'r> {
    ring: &'r mut CqRing,
    base: *const u8,
    mask: u32,
    ci: u32,
    start: u32,
}

impl<'r> CqCursor<'r> {
    /// Takes requester successes (the common case) into `out`, one entry each, while `take`
    /// accepts them (it fills the entry, or returns false to leave that CQE unconsumed): at
    /// most `out.len()`, and not past the ring's end, so the owner bit stays fixed and the next
    /// CQE is 64 bytes on. Returns how many were taken; stops at any other CQE (see
    /// [`CqCursor::peek`]).
    #[inline(always)]
    pub fn take_requesters<T>(&mut self, out: &mut [T], mut take: impl FnMut(CqeRef<'_>, &mut T) -> bool) -> usize {
        let index = self.ci & self.mask;
        let n = ((self.mask - index) as usize + 1).min(out.len());
        let pass = pass_owner(self.ci, self.mask);
        // SAFETY: index <= mask, so the CQE lies in the ring (see `peek_at`); the loop below
        // visits n CQEs from it, which end at or before the ring's end.
        let mut p = unsafe { self.base.add((index as usize) << CQE_SHIFT) };
        let start = p;
        for w in &mut out[..n] {
            // SAFETY: p is one of the n CQEs (see above); its op_own byte.
            let op_own = unsafe { p.add(CQE_OP_OWN).read_volatile() };
            // Opcode 0 and the owner bit of this pass: op_own's bits 7:4 and 0 against it.
            if !is_requester_success(op_own, pass) {
                break;
            }
            dma_rmb();
            if !take(CqeRef { p, op_own, _ring: std::marker::PhantomData }, w) {
                break;
            }
            // SAFETY: at most one past the last of the n CQEs: the ring's end at most.
            p = unsafe { p.add(CQE_SIZE) };
        }
        let taken = (p as usize - start as usize) >> CQE_SHIFT;
        self.ci = self.ci.wrapping_add(taken as u32);
        taken
    }

    /// The CQE at the consumer index, if the device has produced it. Does not consume it.
    #[inline(always)]
    pub fn peek(&self) -> Option<CqeRef<'_>> {
        peek_at(self.base, self.mask, self.ci)
    }

    /// Consumes the CQE [`CqCursor::peek`] returned.
    #[inline(always)]
    pub fn advance(&mut self) {
        self.ci = self.ci.wrapping_add(1);
    }

    /// Ends polling: the consumer index goes back to the ring and, if it moved, to the CQ
    /// doorbell record.
    #[inline(always)]
    pub fn finish(self) {
        self.ring.set_ci(self.ci);
        if self.ci != self.start {
            self.ring.update_ci();
        }
    }
}

type Leaf = [AtomicPtr<WrRing>; 4096];

/// One of the two number spaces of a [`QpTable`]: QPs (requester and responder completions
/// name their QP) and SRQs (a responder completion of a QP on an SRQ names the SRQ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Space {
    Qp,
    Srq,
}

/// Two levels of 4096 pointers: 24-bit number → ring.
struct Dir {
    dir: Box<[AtomicPtr<Leaf>]>,
}

impl Dir {
    fn new() -> Dir {
        Dir { dir: (0..4096).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() }
    }

    /// The slot of `num` (24 bits), if its leaf exists. Data path: one load.
    #[inline(always)]
    fn slot(&self, num: u32) -> Option<&AtomicPtr<WrRing>> {
        let leaf = self.dir.get(((num >> 12) & 0xfff) as usize)?.load(Ordering::Acquire);
        // SAFETY: a non-null leaf is owned by the table's `Keep::leaves` and freed only when
        // the table drops; the reference is bounded by `&self`.
        (!leaf.is_null()).then(|| unsafe { &(*leaf)[(num & 0xfff) as usize] })
    }
}

/// A poller's announcement ([`QpCache`]): odd while it is inside a poll (a [`Pinned`] is
/// alive), even outside. Written only by its poller.
#[derive(Debug, Default)]
struct PollerSlot {
    seq: CachePadded<AtomicU64>,
}

/// Every poller of the process (the registry is process-wide, so a poll pinned once protects
/// lookups in any table): a slot is dropped from the list once its [`QpCache`] is gone.
static POLLERS: Mutex<Vec<Arc<PollerSlot>>> = Mutex::new(Vec::new());

fn pollers() -> std::sync::MutexGuard<'static, Vec<Arc<PollerSlot>>> {
    POLLERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the poller of `slot` is still there: its [`QpCache`] holds one reference and
/// [`POLLERS`] the other.
fn poller_alive(slot: &std::sync::Weak<PollerSlot>) -> bool {
    slot.strong_count() > 1
}

/// A removed ring that a poller inside a poll may still be reading: freed once each poller in
/// `waits` has moved on from the poll it was in (its counter is no longer the one recorded).
struct Retired {
    _ring: Arc<WrRing>,
    waits: Vec<(std::sync::Weak<PollerSlot>, u64)>,
}

/// What the table owns, changed on the control path under its lock.
#[derive(Default)]
struct Keep {
    leaves: Vec<Box<Leaf>>,
    live: std::collections::BTreeMap<(Space, u32), Arc<WrRing>>,
    retired: Vec<Retired>,
    /// Rings kept forever because the process-wide barrier was unavailable (see `retire`).
    kept: Vec<Arc<WrRing>>,
}

/// The device-wide table of work-request rings, by QP number and by SRQ number, read
/// without locks by pollers.
///
/// # Reclaiming removed rings
///
/// Pollers read the table with no lock and no atomic read-modify-write: each poll is bracketed
/// by a [`Pinned`] ([`QpCache::pin`]), which stores an odd counter in the poller's own slot
/// before its first lookup and an even one (release) after its last use of a ring. Removing a
/// ring (control path, under the table's lock) unlinks it, then issues a process-wide memory
/// barrier (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs a full barrier on every
/// CPU running one of the process's threads), then reads every poller's counter: a poller
/// seen outside a poll cannot have the ring (a poll it starts later sees the unlinked slot and
/// the new stamp), and one seen inside a poll is waited for until its counter moves. The ring
/// is freed when nobody is waited for; pending rings are looked at again at every insertion,
/// removal and [`QpTable::reclaim`]. The barrier is what spares the poll path a store-load
/// fence (an asymmetric fence, as Linux's userspace RCU and folly do). Where the barrier is not
/// available (kernels before 4.14, some seccomp profiles), removed rings are kept until the
/// table drops, as before this scheme (see [`QpTable::reclaims`]).
pub struct QpTable {
    qps: Dir,
    srqs: Dir,
    keep: Mutex<Keep>,
    /// A stamp taken from [`STAMPS`] at creation and at every removal, so no two tables and no
    /// two moments between removals share one: a [`QpCache`] with another stamp may come from
    /// another table or name a QP that is gone (or whose number was reused).
    stamp: AtomicU64,
}

/// The source of [`QpTable`] stamps: it only grows (by one per table created or ring removed;
/// 2^64 of those will not happen), and 0 is never handed out.
static STAMPS: AtomicU64 = AtomicU64::new(1);

fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

impl Default for QpTable {
    fn default() -> Self {
        QpTable {
            qps: Dir::new(),
            srqs: Dir::new(),
            keep: Mutex::new(Keep::default()),
            stamp: AtomicU64::new(next_stamp()),
        }
    }
}

impl std::fmt::Debug for QpTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpTable").finish_non_exhaustive()
    }
}

/// A memory barrier on every CPU running a thread of this process (and on this one), through
/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`; false if the kernel refuses it (the process
/// registers for it once, at the first call).
fn process_barrier() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // (linux/membarrier.h: MEMBARRIER_CMD_PRIVATE_EXPEDITED and its registration.)
    const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
    let registered = *REGISTERED.get_or_init(|| {
        // SAFETY: membarrier takes no pointers; registration only changes this process's state.
        unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
    });
    // SAFETY: as above; the command only orders memory.
    registered && unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0, 0) } == 0
}

impl QpTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Keep> {
        self.keep.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dir(&self, space: Space) -> &Dir {
        match space {
            Space::Qp => &self.qps,
            Space::Srq => &self.srqs,
        }
    }

    /// Inserts a QP's rings (control path). A ring already there under the same number is
    /// removed first.
    pub fn insert(&self, ring: Arc<WrRing>) {
        self.put(Space::Qp, ring);
    }

    /// Inserts an SRQ's rings (control path), as [`QpTable::insert`].
    pub fn insert_srq(&self, ring: Arc<WrRing>) {
        self.put(Space::Srq, ring);
    }

    /// Removes a QP's rings (control path); they are freed once no poller can be reading them.
    pub fn remove(&self, qpn: u32) {
        self.take(Space::Qp, qpn);
    }

    /// Removes an SRQ's rings (control path), as [`QpTable::remove`].
    pub fn remove_srq(&self, srqn: u32) {
        self.take(Space::Srq, srqn);
    }

    fn put(&self, space: Space, ring: Arc<WrRing>) {
        let num = ring.qpn & NUM_MASK_24;
        let mut keep = self.lock();
        let dir = self.dir(space);
        let hi = (num >> 12) as usize;
        if dir.dir[hi].load(Ordering::Acquire).is_null() {
            let mut b: Box<Leaf> = Box::new(std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())));
            let leaf = &mut *b as *mut Leaf;
            keep.leaves.push(b);
            dir.dir[hi].store(leaf, Ordering::Release);
        }
        let ptr = Arc::as_ptr(&ring).cast_mut();
        let old = keep.live.insert((space, num), ring);
        if let Some(slot) = dir.slot(num) {
            slot.store(ptr, Ordering::Release);
        }
        match old {
            Some(old) => self.retire(&mut keep, old),
            None => Self::sweep(&mut keep),
        }
    }

    fn take(&self, space: Space, num: u32) {
        let num = num & NUM_MASK_24;
        let mut keep = self.lock();
        let Some(old) = keep.live.remove(&(space, num)) else { return };
        if let Some(slot) = self.dir(space).slot(num) {
            slot.store(std::ptr::null_mut(), Ordering::Release);
        }
        self.retire(&mut keep, old);
    }

    /// `ring` has just been unlinked: a new stamp (the pollers' caches forget it), the
    /// process-wide barrier, and the pollers inside a poll to wait for (see the type's docs).
    fn retire(&self, keep: &mut Keep, ring: Arc<WrRing>) {
        self.stamp.store(next_stamp(), Ordering::Release);
        if !process_barrier() {
            keep.kept.push(ring);
            return;
        }
        let mut all = pollers();
        all.retain(|p| Arc::strong_count(p) > 1); // a dropped QpCache polls no more
        let waits = all
            .iter()
            .filter_map(|p| {
                let seq = p.seq.load(Ordering::Acquire);
                (seq & 1 == 1).then(|| (Arc::downgrade(p), seq))
            })
            .collect();
        drop(all);
        keep.retired.push(Retired { _ring: ring, waits });
        Self::sweep(keep);
    }

    /// Frees the retired rings no poller can be reading any more.
    fn sweep(keep: &mut Keep) {
        keep.retired.retain_mut(|r| {
            // A poller whose counter moved has ended the poll it was in (the acquire load pairs
            // with the release store that ended it, so its reads of the ring came first).
            r.waits.retain(|(p, seq)| {
                poller_alive(p) && p.upgrade().is_some_and(|p| p.seq.load(Ordering::Acquire) == *seq)
            });
            !r.waits.is_empty()
        });
    }

    /// Frees the removed rings no poller can be reading any more (also done at every insertion
    /// and removal); returns how many removed rings are still held.
    pub fn reclaim(&self) -> usize {
        let mut keep = self.lock();
        Self::sweep(&mut keep);
        keep.retired.len() + keep.kept.len()
    }

    /// Rings the table holds: those inserted and not removed, and those removed but not yet
    /// freed (see [`QpTable::reclaim`]).
    pub fn retained(&self) -> usize {
        let keep = self.lock();
        keep.live.len() + keep.retired.len() + keep.kept.len()
    }

    /// Whether removed rings are freed (the process-wide barrier is available), or kept until
    /// the table drops.
    pub fn reclaims(&self) -> bool {
        process_barrier()
    }
}

/// A poller's state between polls (kept by a CQ, as rdma-core's `cur_rsc` is within one): its
/// registration as a poller (see [`QpTable`]'s reclaiming), and the last requester CQE's QP and
/// send opcode it found, valid for the table it came from while no ring has been removed from
/// it since, which the table's stamp tells.
pub struct QpCache {
    stamp: u64,
    /// A [`SopDropQpn`] key, or [`NO_SOP_DROP_QPN`].
    word: u64,
    ring: *const WrRing,
    slot: Arc<PollerSlot>,
}

// SAFETY: the pointer is only dereferenced inside a `Pinned` after the stamp has been checked
// against the table in hand; moving the cache between threads moves no access (the slot is
// only written by whoever holds the cache mutably).
unsafe impl Send for QpCache {}

impl Default for QpCache {
    /// A new poller, registered (control path: takes the registry's lock).
    fn default() -> Self {
        let slot = Arc::new(PollerSlot::default());
        let mut all = pollers();
        all.retain(|p| Arc::strong_count(p) > 1);
        all.push(slot.clone());
        // Stamp 0 is never a table's.
        QpCache { stamp: 0, word: NO_SOP_DROP_QPN, ring: std::ptr::null(), slot }
    }
}

impl std::fmt::Debug for QpCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpCache").field("stamp", &self.stamp).finish_non_exhaustive()
    }
}

impl QpCache {
    /// Starts a poll of `table`: announces it (see [`QpTable`]'s reclaiming). Lookups go
    /// through the returned [`Pinned`], whose references end with it. Two stores in all (here
    /// and when it drops), no fence.
    #[inline(always)]
    pub fn pin<'p>(&'p mut self, table: &'p QpTable) -> Pinned<'p> {
        let seq = self.slot.seq.load(Ordering::Relaxed).wrapping_add(1);
        self.slot.seq.store(seq, Ordering::Relaxed);
        // The store above comes before every load of the table in program order; the remover's
        // process-wide barrier makes it visible to the remover if any of these loads could see
        // a ring it unlinks.
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        let stamp = table.stamp.load(Ordering::Acquire);
        let valid = self.stamp == stamp;
        Pinned {
            word: if valid { self.word } else { NO_SOP_DROP_QPN },
            ring: self.ring,
            stamp,
            changed: !valid,
            cache: self,
            table,
            seq,
        }
    }
}

/// A poll in progress ([`QpCache::pin`]): lookups in the table, whose rings stay allocated until
/// it ends (drop).
pub struct Pinned<'p> {
    cache: &'p mut QpCache,
    table: &'p QpTable,
    /// The poller's counter during the poll (odd).
    seq: u64,
    /// The cache as checked against the table's stamp at the start of the poll (the word is
    /// [`NO_SOP_DROP_QPN`] if it was not valid), and what the poll learns.
    stamp: u64,
    word: u64,
    ring: *const WrRing,
    /// Whether `stamp`, `word` or `ring` differ from the cache's.
    changed: bool,
}

impl<'p> Pinned<'p> {
    /// The cached QP's rings if `word` is the one cached (the stamp was checked by
    /// [`QpCache::pin`]): one compare, no lookup.
    #[inline(always)]
    pub fn hit(&self, word: SopDropQpn) -> Option<&WrRing> {
        if word.key() != self.word {
            return None;
        }
        // SAFETY: `ring` was set with `word` by a lookup in the table whose stamp is `stamp`
        // (`learn`), and `pin` found the table's stamp unchanged (or this poll learnt it); the
        // stamp is unique to that table and changes at every removal, so the ring was in this
        // table when this poll started, and removed rings are freed only after the polls under
        // way end (see `QpTable`).
        Some(unsafe { &*self.ring })
    }

    /// Looks up the QP of `word` after a [`Pinned::hit`] missed, and makes the cache remember
    /// it (off the fast path).
    #[cold]
    #[inline(never)]
    pub fn learn(&mut self, word: SopDropQpn) -> Option<&WrRing> {
        // The stamp first: a removal after it leaves the cache with a stamp that is too old.
        let stamp = self.table.stamp.load(Ordering::Acquire);
        let p = self.table.qps.slot(word.qpn())?.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        (self.stamp, self.word, self.ring, self.changed) = (stamp, word.key(), p, true);
        // SAFETY: a ring found in the table during this poll stays allocated until the poll
        // ends (see `QpTable`); the reference is bounded by `&self`.
        Some(unsafe { &*p })
    }

    /// A QP's rings (data path: two loads).
    #[inline]
    pub fn qp(&self, qpn: u32) -> Option<&WrRing> {
        self.find(Space::Qp, qpn)
    }

    /// An SRQ's rings (data path: two loads).
    #[inline]
    pub fn srq(&self, srqn: u32) -> Option<&WrRing> {
        self.find(Space::Srq, srqn)
    }

    #[inline(always)]
    fn find(&self, space: Space, num: u32) -> Option<&WrRing> {
        let p = self.table.dir(space).slot(num)?.load(Ordering::Acquire);
        // SAFETY: as in `learn`.
        if p.is_null() { None } else { Some(unsafe { &*p }) }
    }
}

impl Drop for Pinned<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let c = &mut *self.cache;
        if self.changed {
            (c.stamp, c.word, c.ring) = (self.stamp, self.word, self.ring);
        }
        // Release: every read of a ring in this poll comes before a remover sees the poll end.
        c.slot.seq.store(self.seq.wrapping_add(1), Ordering::Release);
    }
}
