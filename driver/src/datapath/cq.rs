//! The CQ ring: CQEs read in place (the owner check, then only the fields a completion needs),
//! the consumer index and the CQ doorbell record, and the poll cursor.

use super::*;

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
    pub(super) fn key(self) -> u64 {
        self.0 as u64
    }
}

/// A cache key no CQE has.
pub(super) const NO_SOP_DROP_QPN: u64 = u64::MAX;

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
