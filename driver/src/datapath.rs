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

/// Work-request id rings of one QP (SQ by WQEBB index, RQ by WQE index), readable by a poller
/// on any thread.
#[derive(Debug)]
pub struct WrRing {
    /// wr_id of the WQE starting at each SQ WQEBB.
    pub sq_wr_id: Box<[AtomicU64]>,
    /// For each SQ WQEBB that starts a WQE: the SQ head after it (retire point) and whether it
    /// was signaled (bit 31).
    pub sq_head: Box<[AtomicU32]>,
    /// SQ tail: WQEBBs retired by completions.
    pub sq_tail: AtomicU32,
    /// wr_id of each RQ WQE.
    pub rq_wr_id: Box<[AtomicU64]>,
    /// RQ tail: receive WQEs completed.
    pub rq_tail: AtomicU32,
    /// The QP number.
    pub qpn: u32,
}

impl WrRing {
    /// Rings for `sq_bbs` WQEBBs and `rq_wqes` receive WQEs.
    pub fn new(qpn: u32, sq_bbs: usize, rq_wqes: usize) -> WrRing {
        WrRing {
            sq_wr_id: (0..sq_bbs.max(1)).map(|_| AtomicU64::new(0)).collect(),
            sq_head: (0..sq_bbs.max(1)).map(|_| AtomicU32::new(0)).collect(),
            sq_tail: AtomicU32::new(0),
            rq_wr_id: (0..rq_wqes.max(1)).map(|_| AtomicU64::new(0)).collect(),
            rq_tail: AtomicU32::new(0),
            qpn,
        }
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
    /// A writer for the SQ described by `geo`, doorbells through `backend`.
    pub fn new(backend: Arc<B>, geo: SqGeometry, ring: Arc<WrRing>) -> SendQueue<B> {
        SendQueue {
            backend,
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
        }
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
        buf.write_u64s_be_at(self.sq_offset + idx * 64, &words);
        let signaled = fm_ce_se & flags::CQ_UPDATE != 0;
        if let (Some(w), Some(h)) = (self.ring.sq_wr_id.get(idx), self.ring.sq_head.get(idx)) {
            w.store(wr_id, Ordering::Relaxed);
            h.store((bb.wrapping_add(1) & 0x7fff_ffff) | ((signaled as u32) << 31), Ordering::Release);
        }
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
        let idx = (bb & (self.bbs - 1)) as usize;
        let signaled = fm_ce_se & flags::CQ_UPDATE != 0;
        self.ring.sq_wr_id[idx].store(w.wr_id, Ordering::Relaxed);
        self.ring.sq_head[idx]
            .store((bb.wrapping_add(nbb) & 0x7fff_ffff) | ((signaled as u32) << 31), Ordering::Release);
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
    offset: usize,
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
    /// A writer for 2^`log_wqes` WQEs of 2^`stride_shift` bytes at `offset` of the buffer.
    pub fn new(offset: usize, log_wqes: u32, stride_shift: u32, ring: Arc<WrRing>, srq: bool) -> RecvQueue {
        let per = (1u32 << stride_shift) / 16 - srq as u32;
        RecvQueue { offset, wqes: 1 << log_wqes, stride_shift, max_sge: per, head: 0, ring, srq }
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
        let idx = self.head & (self.wqes - 1);
        let base = self.offset + ((idx as usize) << self.stride_shift);
        let mut o = base + if self.srq { 16 } else { 0 };
        for s in sges {
            buf.write_u64s_be_at(o, &[((s.length as u64) << 32) | s.lkey as u64, s.addr]);
            o += 16;
        }
        if sges.len() < self.max_sge as usize {
            // Terminator: byte_count 0, invalid lkey.
            buf.write_u64s_be_at(o, &[0x100, 0]);
        }
        if let Some(w) = self.ring.rq_wr_id.get(idx as usize) {
            w.store(wr_id, Ordering::Release);
        }
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

/// A CQE as read from the ring (a copy; no reference into device memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// CQE opcode (op_own >> 4).
    pub opcode: u8,
    /// Local QPN.
    pub qpn: u32,
    /// For requester CQEs: the send WQE opcode (sop_drop_qpn[31:24]).
    pub wqe_opcode: u8,
    /// WQE counter.
    pub wqe_counter: u16,
    /// Byte count.
    pub byte_cnt: u32,
    /// Immediate / invalidated rkey.
    pub imm: u32,
    /// flags_rqpn: source QPN (UD), GRH indication.
    pub flags_rqpn: u32,
    /// SRQ number (low 24 bits).
    pub srqn: u32,
    /// Error syndrome (error CQEs).
    pub syndrome: u8,
    /// Vendor error syndrome (error CQEs).
    pub vendor_syndrome: u8,
    /// Solicited event flag.
    pub solicited: bool,
}

/// The consumer side of a CQ ring.
pub struct CqRing {
    log_size: u32,
    ci: u32,
}

impl CqRing {
    /// A consumer for 2^`log_size` CQEs.
    pub fn new(log_size: u32) -> CqRing {
        CqRing { log_size, ci: 0 }
    }

    /// Consumer counter.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Reads the next CQE if the device produced one.
    #[inline]
    pub fn next(&mut self, buf: &DmaMemory) -> Option<Cqe> {
        let n = 1u32 << self.log_size;
        let off = ((self.ci & (n - 1)) as usize) * 64;
        let op_own = buf.read_u8_at(off + 63);
        if op_own >> 4 == 0xf || (op_own & 1) as u32 != (self.ci >> self.log_size) & 1 {
            return None;
        }
        dma_rmb();
        let [w2, w4, w5, w6, w7] = buf.read_u64s_be_at::<5>(off + 0x18);
        let opcode = op_own >> 4;
        let err = opcode == 13 || opcode == 14;
        let sop = (w7 >> 32) as u32;
        let cqe = Cqe {
            opcode,
            qpn: sop & 0xff_ffff,
            wqe_opcode: (sop >> 24) as u8,
            wqe_counter: (w7 >> 16) as u16,
            byte_cnt: w5 as u32,
            imm: w4 as u32,
            flags_rqpn: (w2 >> 32) as u32,
            srqn: (w4 >> 32) as u32 & 0xff_ffff,
            syndrome: if err { (w6 & 0xff) as u8 } else { 0 },
            vendor_syndrome: if err { ((w6 >> 8) & 0xff) as u8 } else { 0 },
            solicited: op_own & 2 != 0,
        };
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
