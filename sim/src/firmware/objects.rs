//! The objects the firmware creates and destroys: UARs, PDs, transport domains, Q counters,
//! EQs, CQs, MKeys, SRQs and QPs, with their commands, their state checks and the event and
//! completion machinery (EQE writing with owner bits, EQ and CQ arming, completion events).
//!
//! Queue buffers are described by page lists (PAS) with a page size relative to 4 KiB; the
//! device reaches them through the IOMMU only when it uses them, so a buffer the driver forgot to
//! map is an IOMMU fault at use (a CQ error event, an error CQE or a lost EQE), not at creation.
//! The QP buffer holds the RQ first and the SQ right after it (SQ offset = RQ size), as both the
//! Linux driver and rdma-core lay it out.

use super::caps::limits;
use super::exec::{CmdResult, bad_param, need_in, out};
use super::{CmdFail, DataPath, Hca, syndrome as sy};
use std::collections::{BTreeMap, BTreeSet};
use umlx_hwdesc::Field;
use umlx_hwdesc::enums::{
    ArmRqOpMod, CmdOpcode, CmdStatus, CqErrorSyndrome, CqModifyFields, CqState, CqStatus, CqeOpcode, EqState, EqStatus,
    EventType, MkcAccessMode, ModifyCqOpMod, QpOptParam, QpServiceType, QpState, RqType, SrqState,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain;
use umlx_hwdesc::plain::page;

/// A queue buffer: page list and page size.
#[derive(Clone, Debug, Default)]
pub struct QueueBuf {
    /// Page addresses (IOVAs).
    pub pas: Vec<u64>,
    /// log2 of the page size in bytes.
    pub page_shift: u32,
    /// Byte offset of the queue start inside the first page.
    pub offset: u64,
}

impl QueueBuf {
    /// IOVA of byte `off` of the queue, if the page list covers it.
    pub fn iova(&self, off: u64) -> Option<u64> {
        let off = off + self.offset;
        let page = (off >> self.page_shift) as usize;
        let p = *self.pas.get(page)?;
        Some(p + (off & ((1u64 << self.page_shift) - 1)))
    }

    /// Bytes from byte `off` of the queue to the end of its page: how far a DMA from `off`
    /// may run at one IOVA.
    pub fn contiguous_from(&self, off: u64) -> u64 {
        let size = 1u64 << self.page_shift;
        size - ((off + self.offset) & (size - 1))
    }
}

/// An event queue.
#[derive(Clone, Debug)]
pub struct Eq {
    /// EQ number.
    pub eqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// UAR index of its doorbells.
    pub uar: u32,
    /// MSI-X vector.
    pub intr: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Subscribed event types (four 64-bit masks).
    pub mask: [u64; 4],
    /// Entries written so far.
    pub producer: u32,
    /// Consumer counter from the last doorbell.
    pub consumer: u32,
    /// Whether the next EQE raises the interrupt.
    pub armed: bool,
    /// Overrun ignore.
    pub oi: bool,
    /// Whether the EQ overran (entries are dropped afterwards).
    pub overrun: bool,
}

/// A pending arm of a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqArm {
    /// Only solicited completions (and errors) raise the event.
    pub solicited_only: bool,
    /// Arm sequence number (2 bits).
    pub sn: u8,
    /// Consumer index at arming.
    pub ci: u32,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// UAR index of the arm doorbell.
    pub uar: u32,
    /// EQ for completion events.
    pub eqn: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Doorbell record address.
    pub dbr: u64,
    /// Overrun ignore.
    pub oi: bool,
    /// CQEs written.
    pub producer: u32,
    /// Current arm.
    pub arm: Option<CqArm>,
    /// Set after an overrun or a fault: the CQ accepts no more CQEs.
    pub error: bool,
    /// Moderation: period and max count (stored for QUERY_CQ).
    pub moderation: (u16, u16),
}

/// A memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// Index (`plain::mkey::index` of the key).
    pub index: u32,
    /// Variant byte (`plain::mkey::variant` of the key).
    pub variant: u8,
    /// PD.
    pub pd: u32,
    /// Local write.
    pub lw: bool,
    /// Remote read.
    pub rr: bool,
    /// Remote write.
    pub rw: bool,
    /// Remote atomic.
    pub atomic: bool,
    /// Start virtual address.
    pub start: u64,
    /// Length in bytes (ignored with `length64`).
    pub len: u64,
    /// Covers the whole address space.
    pub length64: bool,
    /// log2 of the MTT page size (absolute).
    pub page_shift: u32,
    /// MTT entries (address | flags).
    pub mtt: Vec<u64>,
    /// The raw mkc, for QUERY_MKEY.
    pub mkc: Vec<u8>,
}

impl Mkey {
    /// The 32-bit key.
    pub fn key(&self) -> u32 {
        plain::mkey::key(self.index, self.variant)
    }
}

/// Why an MKey refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MkeyError {
    /// No such key (index or variant).
    BadKey,
    /// Key belongs to another PD.
    BadPd,
    /// Access outside `[start, start + len)`.
    OutOfBounds,
    /// Access right missing.
    NoAccess,
}

/// Rights an access needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Local read (gather for a send).
    LocalRead,
    /// Local write (scatter of a receive or READ response).
    LocalWrite,
    /// Remote read.
    RemoteRead,
    /// Remote write.
    RemoteWrite,
    /// Remote atomic.
    RemoteAtomic,
}

impl Mkey {
    /// Translates `va..va+len`: calls `each(iova, len)` for the IOVA range of each of its
    /// pages, in order, after checking the key's bounds and rights (each page's own rights just
    /// before its call: on an error, the pages before it were visited).
    pub(crate) fn visit(
        &self,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
        mut each: impl FnMut(u64, u64),
    ) -> Result<(), MkeyError> {
        if pd != self.pd {
            return Err(MkeyError::BadPd);
        }
        let ok = match access {
            Access::LocalRead => true,
            Access::LocalWrite => self.lw,
            Access::RemoteRead => self.rr,
            Access::RemoteWrite => self.rw && self.lw,
            Access::RemoteAtomic => self.atomic && self.lw,
        };
        if !ok {
            return Err(MkeyError::NoAccess);
        }
        if len == 0 {
            return Ok(());
        }
        let end = va.checked_add(len).ok_or(MkeyError::OutOfBounds)?;
        if !self.length64 && (va < self.start || end > self.start.saturating_add(self.len)) {
            return Err(MkeyError::OutOfBounds);
        }
        let ps = 1u64 << self.page_shift;
        let first_page = self.start >> self.page_shift;
        let mut cur = va;
        while cur < end {
            let idx = ((cur >> self.page_shift) - first_page) as usize;
            let entry = *self.mtt.get(idx).ok_or(MkeyError::OutOfBounds)?;
            let need_write = matches!(access, Access::LocalWrite | Access::RemoteWrite | Access::RemoteAtomic);
            if entry & plain::mkey::MTT_READ == 0 || (need_write && entry & plain::mkey::MTT_WRITE == 0) {
                return Err(MkeyError::NoAccess);
            }
            let base = entry & plain::mkey::MTT_PTAG_MASK;
            let in_page = cur & (ps - 1);
            let n = (ps - in_page).min(end - cur);
            each(base + in_page, n);
            cur += n;
        }
        Ok(())
    }
}

/// A list whose first `N` items are held inline: a short list (the common case on the data
/// path) costs no allocation; a longer one moves to a vector.
#[derive(Clone, Debug)]
pub(crate) struct InlineList<T: Copy + Default, const N: usize> {
    inline: [T; N],
    n: usize,
    /// All the items once there are more than fit inline.
    spilled: Vec<T>,
}

impl<T: Copy + Default, const N: usize> Default for InlineList<T, N> {
    fn default() -> Self {
        Self::filled_with(T::default())
    }
}

impl<T: Copy + Default, const N: usize> InlineList<T, N> {
    /// An empty list whose unused inline slots hold `fill`: a constant, so that a descriptor
    /// holding one is written in place instead of being assembled on the stack and copied.
    pub(crate) const fn filled_with(fill: T) -> Self {
        InlineList { inline: [fill; N], n: 0, spilled: Vec::new() }
    }

    /// Appends `item`.
    pub(crate) fn push(&mut self, item: T) {
        if self.spilled.is_empty() {
            if let Some(slot) = self.inline.get_mut(self.n) {
                *slot = item;
                self.n += 1;
                return;
            }
            self.spilled.extend_from_slice(&self.inline);
        }
        self.spilled.push(item);
    }

    /// Empties the list, keeping any spilled vector's allocation.
    pub(crate) fn clear(&mut self) {
        self.n = 0;
        self.spilled.clear();
    }

    /// The last item.
    fn last_mut(&mut self) -> Option<&mut T> {
        if self.spilled.is_empty() { self.inline.get_mut(..self.n)?.last_mut() } else { self.spilled.last_mut() }
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for InlineList<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        if self.spilled.is_empty() { self.inline.get(..self.n).unwrap_or(&[]) } else { &self.spilled }
    }
}

/// The IOVA chunks (address, length) an MKey range maps to, contiguous ones merged: the first
/// four inline, so that the common range within one page or one contiguous mapping costs no
/// allocation.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunks(InlineList<(u64, u64), 4>);

impl Chunks {
    /// Appends `len` bytes at `iova` (merged into the last chunk when they continue it).
    pub(crate) fn push(&mut self, iova: u64, len: u64) {
        if let Some((a, l)) = self.0.last_mut()
            && *a + *l == iova
        {
            *l += len;
            return;
        }
        self.0.push((iova, len));
    }
}

impl std::ops::Deref for Chunks {
    type Target = [(u64, u64)];
    fn deref(&self) -> &[(u64, u64)] {
        &self.0
    }
}

/// A shared receive queue.
#[derive(Clone, Debug)]
pub struct Srq {
    /// SRQ number.
    pub srqn: u32,
    /// PD.
    pub pd: u32,
    /// CQ (for XRC; stored).
    pub cqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// log2 of the WQE stride in bytes.
    pub stride_shift: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Doorbell record.
    pub dbr: u64,
    /// Limit watermark; armed when non-zero.
    pub lwm: u32,
    /// WQEs consumed so far (the head of the linked list).
    pub consumed: u32,
    /// Next WQE index to consume.
    pub head: u32,
    /// Error state (catastrophic).
    pub error: bool,
}

/// A queue pair.
#[derive(Clone, Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Service type.
    pub st: QpServiceType,
    /// State.
    pub state: QpState,
    /// The QP context as last written (create + modify), for attributes and QUERY_QP.
    pub ctx: Vec<u8>,
    /// PD.
    pub pd: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// SRQ, if the RQ is an SRQ.
    pub srqn: Option<u32>,
    /// UAR of the SQ doorbell.
    pub uar: u32,
    /// Buffer (RQ then SQ).
    pub buf: QueueBuf,
    /// log2 RQ entries.
    pub log_rq_size: u32,
    /// log2 RQ stride in bytes.
    pub rq_stride_shift: u32,
    /// log2 SQ size in WQEBBs (None: no SQ).
    pub log_sq_size: Option<u32>,
    /// Zero-length RQ.
    pub no_rq: bool,
    /// Doorbell record address.
    pub dbr: u64,
    /// SQ WQEBB counter the device has fetched up to.
    pub sq_fetched: u16,
    /// RQ WQEs consumed.
    pub rq_consumed: u32,
    /// Last SQ doorbell value (WQE counter) seen.
    pub sq_doorbell: u16,
    /// Whether a send doorbell rang while another run held the transport: that run serves
    /// the send queue before it puts the transport back.
    pub sq_rang: bool,
    /// Transport state (requester and responder), owned by `crate::transport`; boxed so that
    /// the transport takes it out and puts it back as a pointer. `None` only while taken.
    pub transport: Option<Box<crate::transport::QpTransport>>,
    /// Whether the transport's timers watch this QP (it is in their set of timed QPs): kept
    /// here so that handing a packet to the QP changes that set only when this changes.
    pub timed: bool,
}

impl Qp {
    /// A context field.
    pub fn get(&self, f: Field) -> u64 {
        f.get(&self.ctx)
    }

    /// Byte offset of the SQ in the QP buffer.
    pub fn sq_offset(&self) -> u64 {
        if self.no_rq || self.srqn.is_some() { 0 } else { (1u64 << self.log_rq_size) << self.rq_stride_shift }
    }
}

/// A Q counter set.
#[derive(Clone, Copy, Debug, Default)]
pub struct QCounter {
    /// Receive WQEs missing when a message arrived (RNR).
    pub out_of_buffer: u32,
    /// Out-of-sequence packets received.
    pub out_of_sequence: u32,
    /// Duplicate requests received.
    pub duplicate_request: u32,
    /// RNR NAKs received.
    pub rnr_nak_retry_err: u32,
    /// Packet sequence errors (NAK) received.
    pub packet_seq_err: u32,
    /// Local ACK timeouts.
    pub local_ack_timeout_err: u32,
    /// RDMA WRITE requests received.
    pub rx_write_requests: u32,
    /// RDMA READ requests received.
    pub rx_read_requests: u32,
    /// Atomic requests received.
    pub rx_atomic_requests: u32,
    /// Transport retries exceeded.
    pub resp_local_length_error: u32,
}

/// An object the data path changes (a QP, a CQ, an EQ, an SRQ), under a lock of its own: what
/// lets threads that run the data path at once work on different queues. A command, which has
/// the device to itself, reaches it without taking the lock ([`Locked::get_mut`]).
#[derive(Debug)]
pub struct Locked<T>(std::sync::Mutex<T>);

impl<T> Locked<T> {
    /// `value` under its own lock.
    pub fn new(value: T) -> Locked<T> {
        Locked(std::sync::Mutex::new(value))
    }

    /// The object, to a holder of the whole device: no lock is taken.
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The object, locked. A thread that panicked while holding it left it as it was; the
    /// model goes on with that rather than refusing every later access.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A table of objects indexed by their number, as the adapter keeps its QP, CQ and MKey
/// contexts: object `n` is in slot `n - first`, so a lookup on the data path is an index, not a
/// search, and the lowest free number is the first empty slot. Numbers below `first` (never
/// allocated: CQ and MKey numbers start at 1, QPNs at 0x100, past the special QPs) are never
/// held. Iterates in ascending number, as the ordered map it replaced did.
#[derive(Debug)]
pub struct ObjectTable<T> {
    first: u32,
    slots: Vec<Option<T>>,
    live: usize,
}

impl<T> ObjectTable<T> {
    /// An empty table whose lowest number is `first`.
    pub const fn starting_at(first: u32) -> ObjectTable<T> {
        ObjectTable { first, slots: Vec::new(), live: 0 }
    }

    fn slot(&self, n: u32) -> Option<usize> {
        n.checked_sub(self.first).map(|i| i as usize)
    }

    /// Object `n`.
    #[inline]
    pub fn get(&self, n: &u32) -> Option<&T> {
        self.slots.get(self.slot(*n)?)?.as_ref()
    }

    /// Object `n`, to change.
    #[inline]
    pub fn get_mut(&mut self, n: &u32) -> Option<&mut T> {
        let i = self.slot(*n)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// Whether object `n` exists.
    pub fn contains_key(&self, n: &u32) -> bool {
        self.get(n).is_some()
    }

    /// Puts in `make(n)` as object `n`, the lowest number without an object, and returns `n`;
    /// `None` (and `make` not called) when that number is not below `limit`. The table hands
    /// out every number it holds, as the adapter allocates its QPNs, CQNs and MKey indices.
    pub fn add(&mut self, limit: u64, make: impl FnOnce(u32) -> T) -> Option<u32> {
        let i = self.slots.iter().position(Option::is_none).unwrap_or(self.slots.len());
        let n = u64::from(self.first) + i as u64;
        let n = if n < limit { u32::try_from(n).ok()? } else { return None };
        match self.slots.get_mut(i) {
            Some(slot) => *slot = Some(make(n)),
            None => self.slots.push(Some(make(n))),
        }
        self.live += 1;
        Some(n)
    }

    /// Takes object `n` out.
    pub fn remove(&mut self, n: &u32) -> Option<T> {
        let i = self.slot(*n)?;
        let old = self.slots.get_mut(i)?.take();
        if old.is_some() {
            self.live -= 1;
            // Empty slots at the end are let go of, so that the table is no longer than its
            // highest object needs.
            while self.slots.last().is_some_and(Option::is_none) {
                self.slots.pop();
            }
        }
        old
    }

    /// How many objects the table holds.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The objects, in ascending number.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }
}

impl<T> ObjectTable<Locked<T>> {
    /// Object `n`, to a holder of the whole device (no lock taken).
    #[inline]
    pub fn object_mut(&mut self, n: &u32) -> Option<&mut T> {
        self.get_mut(n).map(Locked::get_mut)
    }

    /// Object `n`, locked.
    #[inline]
    pub fn lock(&self, n: &u32) -> Option<std::sync::MutexGuard<'_, T>> {
        self.get(n).map(Locked::lock)
    }
}

/// Every object table.
#[derive(Debug)]
pub struct Objects {
    /// Allocated UAR indices.
    pub uars: BTreeSet<u32>,
    /// PDs.
    pub pds: BTreeSet<u32>,
    /// Transport domains.
    pub tds: BTreeSet<u32>,
    /// Q counters.
    pub qcounters: BTreeMap<u32, QCounter>,
    /// EQs.
    pub eqs: BTreeMap<u32, Locked<Eq>>,
    /// CQs.
    pub cqs: ObjectTable<Locked<Cq>>,
    /// MKeys by index.
    pub mkeys: ObjectTable<Mkey>,
    /// SRQs.
    pub srqs: BTreeMap<u32, Locked<Srq>>,
    /// QPs.
    pub qps: ObjectTable<Locked<Qp>>,
    /// Next variant byte seed for MKeys (the driver chooses the variant; kept for stats).
    pub mkeys_created: u64,
    /// MKeys destroyed so far: a translation made earlier holds while this is unchanged (a
    /// responder translates a multi-packet WRITE once, at its first packet).
    pub mkeys_destroyed: u64,
    /// Device-wide transport state (outbound frames, timers, counters).
    pub xport: crate::transport::HcaTransport,
}

impl Default for Objects {
    fn default() -> Objects {
        Objects {
            uars: BTreeSet::new(),
            pds: BTreeSet::new(),
            tds: BTreeSet::new(),
            qcounters: BTreeMap::new(),
            eqs: BTreeMap::new(),
            cqs: ObjectTable::starting_at(FIRST_CQN),
            mkeys: ObjectTable::starting_at(FIRST_MKEY_INDEX),
            srqs: BTreeMap::new(),
            qps: ObjectTable::starting_at(FIRST_QPN),
            mkeys_created: 0,
            mkeys_destroyed: 0,
            xport: crate::transport::HcaTransport::default(),
        }
    }
}

/// The first CQ number the firmware gives.
const FIRST_CQN: u32 = 1;
/// The first MKey index the firmware gives.
const FIRST_MKEY_INDEX: u32 = 1;
/// The first QPN the firmware gives (those below are the special QPs').
const FIRST_QPN: u32 = 0x100;

/// Picks the lowest free number in `first..limit`.
fn alloc_num(used: impl Fn(u32) -> bool, first: u32, limit: u64) -> Option<u32> {
    (first as u64..limit).map(|n| n as u32).find(|&n| !used(n))
}

fn be64(input: &[u8], off: usize) -> u64 {
    input.get(off..off + 8).map(|b| u64::from_be_bytes(b.try_into().unwrap_or_default())).unwrap_or(0)
}

fn read_pas(op: u16, input: &[u8], start_bytes: usize, n: usize) -> Result<Vec<u64>, CmdFail> {
    need_in(op, input, start_bytes + 8 * n)?;
    let pas: Vec<u64> = (0..n).map(|i| be64(input, start_bytes + 8 * i)).collect();
    if pas.iter().any(|&p| p & 0xfff != 0) {
        return Err(bad_param(op, sy::BAD_PAGE_ADDRESS));
    }
    Ok(pas)
}

fn res_state(op: u16, reason: u16) -> CmdFail {
    CmdFail::new(CmdStatus::BAD_RES_STATE_ERR, op, reason)
}

fn bad_res(op: u16) -> CmdFail {
    CmdFail::new(CmdStatus::BAD_RES_ERR, op, sy::NO_SUCH_OBJECT)
}

fn no_res(op: u16) -> CmdFail {
    CmdFail::new(CmdStatus::NO_RES_ERR, op, sy::NO_RESOURCES)
}

fn qp_state_err(op: u16) -> CmdFail {
    CmdFail::new(CmdStatus::BAD_QP_STATE_ERR, op, sy::BAD_QP_STATE)
}

/// Number of pages of `1 << page_shift` bytes a queue of `bytes` bytes starting at `offset` spans.
fn pages_for(bytes: u64, page_shift: u32, offset: u64) -> usize {
    (offset + bytes).div_ceil(1u64 << page_shift) as usize
}

// Every QP modify command shares the layout of RST2INIT_QP.
const _: () = {
    assert!(init2rtr_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(rtr2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(rts2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(sqerr2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(init2init_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(sqd2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(init2rtr_qp_in::opt_param_mask.offset_bits == rst2init_qp_in::opt_param_mask.offset_bits);
    assert!(qp_2err_in::qpn.offset_bits == rst2init_qp_in::qpn.offset_bits);
    assert!(qp_2rst_in::qpn.offset_bits == rst2init_qp_in::qpn.offset_bits);
};

/// Optional-parameter mask bits (PRM `opt_param_mask`, declared in hwdesc).
mod opt {
    use umlx_hwdesc::enums::QpOptParam as P;
    pub const RRE: u32 = P::RRE.0;
    pub const RAE: u32 = P::RAE.0;
    pub const RWE: u32 = P::RWE.0;
    pub const PKEY_INDEX: u32 = P::PKEY_INDEX.0;
    pub const Q_KEY: u32 = P::Q_KEY.0;
    pub const RNR_TIMEOUT: u32 = P::RNR_TIMEOUT.0;
}

/// What a transition copies from the command's QPC: (field, None = always, Some(bit) = when
/// that optional-parameter bit is set).
fn transition_fields(op: CmdOpcode, st: QpServiceType) -> Vec<(Field, Option<u32>)> {
    let ads = qpc::primary_address_path;
    let p = |f: Field| ads.inner(f);
    let ud = st == QpServiceType::UD;
    match op {
        CmdOpcode::RST2INIT_QP | CmdOpcode::INIT2INIT_QP => {
            let always = op == CmdOpcode::RST2INIT_QP;
            let a = |b: u32| if always { None } else { Some(b) };
            let mut v = vec![(p(ads::vhca_port_num), None), (p(ads::pkey_index), a(opt::PKEY_INDEX))];
            if ud {
                v.push((qpc::q_key, a(opt::Q_KEY)));
            } else {
                v.extend([(qpc::rre, a(opt::RRE)), (qpc::rwe, a(opt::RWE)), (qpc::rae, a(opt::RAE))]);
            }
            v
        }
        CmdOpcode::INIT2RTR_QP => {
            if ud {
                vec![
                    (qpc::mtu, None),
                    (qpc::log_msg_max, None),
                    (qpc::q_key, Some(opt::Q_KEY)),
                    (p(ads::pkey_index), Some(opt::PKEY_INDEX)),
                ]
            } else {
                vec![
                    (qpc::mtu, None),
                    (qpc::log_msg_max, None),
                    (qpc::remote_qpn, None),
                    (qpc::next_rcv_psn, None),
                    (qpc::min_rnr_nak, None),
                    (qpc::log_rra_max, None),
                    (qpc::primary_address_path, None),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        CmdOpcode::RTR2RTS_QP => {
            if ud {
                vec![(qpc::next_send_psn, None), (qpc::q_key, Some(opt::Q_KEY))]
            } else {
                vec![
                    (qpc::next_send_psn, None),
                    (qpc::retry_count, None),
                    (qpc::rnr_retry, None),
                    (qpc::log_sra_max, None),
                    (p(ads::ack_timeout), None),
                    (qpc::min_rnr_nak, Some(opt::RNR_TIMEOUT)),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        // The optional parameters of these transitions (QpOptParam::allowed) hold no timeout,
        // retry count or path: those bits are refused before this table is read.
        CmdOpcode::RTS2RTS_QP | CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP => {
            if ud {
                vec![(qpc::q_key, Some(opt::Q_KEY))]
            } else {
                vec![
                    (qpc::min_rnr_nak, Some(opt::RNR_TIMEOUT)),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        _ => vec![],
    }
}

/// Copies `f` from the command QPC (at `src_off` bits) into the QP context.
fn copy_field(dst: &mut [u8], src: &[u8], src_base: Field, f: Field) {
    if f.width_bits <= 64 {
        f.set(dst, src_base.inner(f).get(src));
    } else if let (Some(s), Some(d)) = (src_base.inner(f).bytes(src), f.bytes_mut(dst)) {
        d.copy_from_slice(s);
    }
}

impl Hca {
    /// Dispatches the commands that create, query, modify and destroy objects.
    pub(crate) fn execute_object_cmd(&mut self, op: CmdOpcode, op_mod: u16, input: &[u8]) -> CmdResult {
        if let Some(r) = self.execute_vport_cmd(op, input) {
            return r;
        }
        let r = match op {
            CmdOpcode::ALLOC_UAR => self.cmd_alloc_uar(),
            CmdOpcode::DEALLOC_UAR => self.cmd_dealloc_uar(input),
            CmdOpcode::ALLOC_PD => self.cmd_alloc_pd(),
            CmdOpcode::DEALLOC_PD => self.cmd_dealloc_pd(input),
            CmdOpcode::ALLOC_TRANSPORT_DOMAIN => self.cmd_alloc_td(),
            CmdOpcode::DEALLOC_TRANSPORT_DOMAIN => self.cmd_dealloc_td(input),
            CmdOpcode::ALLOC_Q_COUNTER => self.cmd_alloc_q_counter(),
            CmdOpcode::DEALLOC_Q_COUNTER => self.cmd_dealloc_q_counter(input),
            CmdOpcode::QUERY_Q_COUNTER => self.cmd_query_q_counter(input),
            CmdOpcode::CREATE_EQ => self.cmd_create_eq(input),
            CmdOpcode::DESTROY_EQ => self.cmd_destroy_eq(input),
            CmdOpcode::QUERY_EQ => self.cmd_query_eq(input),
            CmdOpcode::CREATE_CQ => self.cmd_create_cq(input),
            CmdOpcode::DESTROY_CQ => self.cmd_destroy_cq(input),
            CmdOpcode::QUERY_CQ => self.cmd_query_cq(input),
            CmdOpcode::MODIFY_CQ => self.cmd_modify_cq(input, op_mod),
            CmdOpcode::CREATE_MKEY => self.cmd_create_mkey(input),
            CmdOpcode::DESTROY_MKEY => self.cmd_destroy_mkey(input),
            CmdOpcode::QUERY_MKEY => self.cmd_query_mkey(input),
            CmdOpcode::CREATE_SRQ => self.cmd_create_srq(input),
            CmdOpcode::DESTROY_SRQ => self.cmd_destroy_srq(input),
            CmdOpcode::QUERY_SRQ => self.cmd_query_srq(input),
            CmdOpcode::ARM_RQ => self.cmd_arm_rq(input, op_mod),
            CmdOpcode::CREATE_QP => self.cmd_create_qp(input),
            CmdOpcode::DESTROY_QP => self.cmd_destroy_qp(input),
            CmdOpcode::QUERY_QP => self.cmd_query_qp(input),
            CmdOpcode::RST2INIT_QP
            | CmdOpcode::INIT2INIT_QP
            | CmdOpcode::INIT2RTR_QP
            | CmdOpcode::RTR2RTS_QP
            | CmdOpcode::RTS2RTS_QP
            | CmdOpcode::SQERR2RTS_QP
            | CmdOpcode::SQD_RTS_QP
            | CmdOpcode::QP_2ERR
            | CmdOpcode::QP_2RST => self.cmd_modify_qp(op, input),
            _ => Err(CmdFail::new(CmdStatus::BAD_OP_ERR, op.0, 0)),
        };
        if r.is_ok() {
            self.update_regular_demand();
        }
        r
    }

    /// Regular page demand from the object counts (ICM in chunks).
    fn update_regular_demand(&mut self) {
        let o = &self.objects;
        let chunks = |n: usize, per: usize, pages: u32| (n.div_ceil(per) as u32) * pages;
        let demand = chunks(o.qps.len(), 16, 4)
            + chunks(o.cqs.len(), 64, 2)
            + chunks(o.mkeys.len(), 128, 2)
            + chunks(o.srqs.len(), 16, 2)
            + chunks(o.eqs.len(), 16, 1);
        if demand != self.pages.regular {
            self.pages.regular = demand;
            self.rebalance_pages();
        }
    }

    // ---- UAR, PD, TD, Q counters ----

    fn cmd_alloc_uar(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_UAR.0;
        let limit = (super::BAR0_SIZE >> 12).min(1 << limits::LOG_MAX_UAR);
        let uars = &self.objects.uars;
        let n = alloc_num(|n| uars.contains(&n), super::FIRST_UAR_INDEX, limit).ok_or_else(|| no_res(op))?;
        self.objects.uars.insert(n);
        let mut o = out(alloc_uar_out::SIZE_BYTES);
        alloc_uar_out::uar.set(&mut o, n as u64);
        Ok(o)
    }

    fn cmd_dealloc_uar(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_UAR.0;
        need_in(op, input, dealloc_uar_in::SIZE_BYTES)?;
        let n = dealloc_uar_in::uar.get(input) as u32;
        if !self.objects.uars.contains(&n) {
            return Err(bad_res(op));
        }
        let o = &self.objects;
        if o.eqs.values().any(|e| e.lock().uar == n)
            || o.cqs.values().any(|c| c.lock().uar == n)
            || o.qps.values().any(|q| q.lock().uar == n)
        {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.uars.remove(&n);
        Ok(out(dealloc_uar_out::SIZE_BYTES))
    }

    fn cmd_alloc_pd(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_PD.0;
        let pds = &self.objects.pds;
        let n = alloc_num(|n| pds.contains(&n), 1, 1 << limits::LOG_MAX_PD).ok_or_else(|| no_res(op))?;
        self.objects.pds.insert(n);
        let mut o = out(alloc_pd_out::SIZE_BYTES);
        alloc_pd_out::pd.set(&mut o, n as u64);
        Ok(o)
    }

    fn cmd_dealloc_pd(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_PD.0;
        need_in(op, input, dealloc_pd_in::SIZE_BYTES)?;
        let n = dealloc_pd_in::pd.get(input) as u32;
        if !self.objects.pds.contains(&n) {
            return Err(bad_res(op));
        }
        let o = &self.objects;
        if o.qps.values().any(|q| q.lock().pd == n)
            || o.mkeys.values().any(|m| m.pd == n)
            || o.srqs.values().any(|s| s.lock().pd == n)
        {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.pds.remove(&n);
        Ok(out(dealloc_pd_out::SIZE_BYTES))
    }

    fn cmd_alloc_td(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_TRANSPORT_DOMAIN.0;
        let tds = &self.objects.tds;
        let n = alloc_num(|n| tds.contains(&n), 1, 1 << limits::LOG_MAX_TRANSPORT_DOMAIN).ok_or_else(|| no_res(op))?;
        self.objects.tds.insert(n);
        let mut o = out(alloc_transport_domain_out::SIZE_BYTES);
        alloc_transport_domain_out::transport_domain.set(&mut o, n as u64);
        Ok(o)
    }

    fn cmd_dealloc_td(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_TRANSPORT_DOMAIN.0;
        need_in(op, input, dealloc_transport_domain_in::SIZE_BYTES)?;
        let n = dealloc_transport_domain_in::transport_domain.get(input) as u32;
        if !self.objects.tds.remove(&n) {
            return Err(bad_res(op));
        }
        Ok(out(dealloc_transport_domain_out::SIZE_BYTES))
    }

    fn cmd_alloc_q_counter(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_Q_COUNTER.0;
        let qc = &self.objects.qcounters;
        let n = alloc_num(|n| qc.contains_key(&n), 1, 256).ok_or_else(|| no_res(op))?;
        self.objects.qcounters.insert(n, QCounter::default());
        let mut o = out(alloc_q_counter_out::SIZE_BYTES);
        alloc_q_counter_out::counter_set_id.set(&mut o, n as u64);
        Ok(o)
    }

    fn cmd_dealloc_q_counter(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_Q_COUNTER.0;
        need_in(op, input, dealloc_q_counter_in::SIZE_BYTES)?;
        let n = dealloc_q_counter_in::counter_set_id.get(input) as u32;
        if self.objects.qcounters.remove(&n).is_none() {
            return Err(bad_res(op));
        }
        Ok(out(dealloc_q_counter_out::SIZE_BYTES))
    }

    fn cmd_query_q_counter(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_Q_COUNTER.0;
        need_in(op, input, query_q_counter_in::SIZE_BYTES)?;
        let n = query_q_counter_in::counter_set_id.get(input) as u32;
        let clear = query_q_counter_in::clear.get(input) != 0;
        let Some(c) = self.objects.qcounters.get_mut(&n) else { return Err(bad_res(op)) };
        let mut o = out(query_q_counter_out::SIZE_BYTES);
        use query_q_counter_out as q;
        q::out_of_buffer.set(&mut o, c.out_of_buffer as u64);
        q::out_of_sequence.set(&mut o, c.out_of_sequence as u64);
        q::duplicate_request.set(&mut o, c.duplicate_request as u64);
        q::rnr_nak_retry_err.set(&mut o, c.rnr_nak_retry_err as u64);
        q::packet_seq_err.set(&mut o, c.packet_seq_err as u64);
        q::local_ack_timeout_err.set(&mut o, c.local_ack_timeout_err as u64);
        q::rx_write_requests.set(&mut o, c.rx_write_requests as u64);
        q::rx_read_requests.set(&mut o, c.rx_read_requests as u64);
        q::rx_atomic_requests.set(&mut o, c.rx_atomic_requests as u64);
        if clear {
            *c = QCounter::default();
        }
        Ok(o)
    }

    // ---- EQ ----

    fn cmd_create_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_EQ.0;
        need_in(op, input, create_eq_in::SIZE_BYTES)?;
        let ctx = create_eq_in::eq_context_entry;
        let log_size = ctx.inner(eqc::log_eq_size).get(input) as u32;
        let uar = ctx.inner(eqc::uar_page).get(input) as u32;
        let intr = ctx.inner(eqc::intr).get(input) as u32;
        let log_page = ctx.inner(eqc::log_page_size).get(input);
        let page_offset = ctx.inner(eqc::page_offset).get(input);
        if log_size as u64 > limits::LOG_MAX_EQ_SZ || log_page > 18 || page_offset != 0 {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if !self.objects.uars.contains(&uar) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        if intr >= self.cfg.num_msix {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(log_page);
        let npages = pages_for((plain::eqe::SIZE as u64) << log_size, page_shift, 0);
        let pas = read_pas(op, input, create_eq_in::SIZE_BYTES, npages)?;
        let mut mask = [0u64; 4];
        for (i, m) in mask.iter_mut().enumerate() {
            *m = create_eq_in::event_bitmask.elem(i).get(input);
        }
        let eqs = &self.objects.eqs;
        let eqn = alloc_num(|n| eqs.contains_key(&n), 0, 1 << limits::LOG_MAX_EQ).ok_or_else(|| no_res(op))?;
        let oi = ctx.inner(eqc::oi).get(input) != 0;
        self.objects.eqs.insert(
            eqn,
            Locked::new(Eq {
                eqn,
                log_size,
                uar,
                intr,
                buf: QueueBuf { pas, page_shift, offset: 0 },
                mask,
                producer: 0,
                consumer: 0,
                armed: false,
                oi,
                overrun: false,
            }),
        );
        let mut o = out(create_eq_out::SIZE_BYTES);
        create_eq_out::eq_number.set(&mut o, eqn as u64);
        Ok(o)
    }

    fn cmd_destroy_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_EQ.0;
        need_in(op, input, destroy_eq_in::SIZE_BYTES)?;
        let eqn = destroy_eq_in::eq_number.get(input) as u32;
        if !self.objects.eqs.contains_key(&eqn) {
            return Err(bad_res(op));
        }
        if self.objects.cqs.values().any(|c| c.lock().eqn == eqn) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.eqs.remove(&eqn);
        Ok(out(destroy_eq_out::SIZE_BYTES))
    }

    fn cmd_query_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_EQ.0;
        need_in(op, input, query_eq_in::SIZE_BYTES)?;
        let eqn = query_eq_in::eq_number.get(input) as u32;
        let Some(eq) = self.objects.eqs.get_mut(&eqn).map(Locked::get_mut) else { return Err(bad_res(op)) };
        let mut o = out(query_eq_out::SIZE_BYTES + 8 * eq.buf.pas.len());
        let ctx = query_eq_out::eq_context_entry;
        ctx.inner(eqc::log_eq_size).set(&mut o, eq.log_size as u64);
        ctx.inner(eqc::uar_page).set(&mut o, eq.uar as u64);
        ctx.inner(eqc::intr).set(&mut o, eq.intr as u64);
        ctx.inner(eqc::log_page_size).set(&mut o, page::log_page_size(eq.buf.page_shift));
        ctx.inner(eqc::oi).set(&mut o, eq.oi as u64);
        ctx.inner(eqc::st).set(&mut o, if eq.armed { EqState::ARMED } else { EqState::FIRED }.0 as u64);
        ctx.inner(eqc::status).set(&mut o, if eq.overrun { EqStatus::EQ_WRITE_FAILURE } else { EqStatus::OK }.0 as u64);
        ctx.inner(eqc::consumer_counter).set(&mut o, (eq.consumer & plain::cq::NUM_MASK_24) as u64);
        ctx.inner(eqc::producer_counter).set(&mut o, (eq.producer & plain::cq::NUM_MASK_24) as u64);
        // QUERY_EQ carries one 64-bit mask (event types 0..63), not CREATE_EQ's four.
        query_eq_out::event_bitmask.set(&mut o, eq.mask[0]);
        for (i, p) in eq.buf.pas.iter().enumerate() {
            let off = query_eq_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    /// Writes an EQE of `ty` on the lowest-numbered EQ subscribed to it
    /// ([`DataPath::post_event`]).
    pub(crate) fn post_event(&mut self, ty: EventType, sub_type: u8, data: &plain::EqeData) -> bool {
        self.data_path(|dp| dp.post_event(ty, sub_type, data))
    }

    /// UAR + 0x40 / 0x48: EQ consumer index update, with or without arming.
    pub(crate) fn eq_doorbell(&mut self, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let Some(eq) = self.objects.eqs.get_mut(&eqn).map(Locked::get_mut) else {
            self.stats.bad_doorbells += 1;
            return;
        };
        if eq.uar != uar {
            self.stats.bad_doorbells += 1;
            return;
        }
        // The doorbell carries 24 bits; extend against the producer.
        let full = (eq.producer & !plain::cq::NUM_MASK_24) | ci;
        eq.consumer = if full > eq.producer { full.wrapping_sub(1 << 24) } else { full };
        if arm {
            if eq.consumer != eq.producer {
                let v = eq.intr;
                self.signal_irq(v);
            } else {
                eq.armed = true;
            }
        }
    }

    // ---- CQ ----

    fn cmd_create_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_CQ.0;
        need_in(op, input, create_cq_in::SIZE_BYTES)?;
        let ctx = create_cq_in::cq_context;
        let g = |f: Field| ctx.inner(f).get(input);
        let log_size = g(cqc::log_cq_size) as u32;
        if log_size as u64 > limits::LOG_MAX_CQ_SZ {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if g(cqc::cqe_sz) != 0
            || g(cqc::cqe_comp_en) != 0
            || g(cqc::dbr_umem_valid) != 0
            || create_cq_in::cq_umem_valid.get(input) != 0
        {
            // 64-byte CQEs, no compression, no UMEM: what this device model supports.
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let uar = g(cqc::uar_page) as u32;
        let eqn = g(cqc::c_eqn_or_apu_element) as u32;
        if !self.objects.uars.contains(&uar) || !self.objects.eqs.contains_key(&eqn) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let dbr = g(cqc::dbr_addr);
        if dbr % 8 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(g(cqc::log_page_size));
        let offset = page::page_offset_bytes(g(cqc::page_offset), page_shift);
        let npages = pages_for((plain::cqe64::SIZE as u64) << log_size, page_shift, offset);
        let pas = read_pas(op, input, create_cq_in::SIZE_BYTES, npages)?;
        let moderation = (g(cqc::cq_period) as u16, g(cqc::cq_max_count) as u16);
        let oi = g(cqc::oi) != 0;
        let cqn = self
            .objects
            .cqs
            .add(1 << limits::LOG_MAX_CQ, |cqn| {
                Locked::new(Cq {
                    cqn,
                    log_size,
                    uar,
                    eqn,
                    buf: QueueBuf { pas, page_shift, offset },
                    dbr,
                    oi,
                    producer: 0,
                    arm: None,
                    error: false,
                    moderation,
                })
            })
            .ok_or_else(|| no_res(op))?;
        let mut o = out(create_cq_out::SIZE_BYTES);
        create_cq_out::cqn.set(&mut o, cqn as u64);
        Ok(o)
    }

    fn cmd_destroy_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_CQ.0;
        need_in(op, input, destroy_cq_in::SIZE_BYTES)?;
        let cqn = destroy_cq_in::cqn.get(input) as u32;
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(bad_res(op));
        }
        if self.objects.qps.values().any(|q| {
            let q = q.lock();
            q.cqn_snd == cqn || q.cqn_rcv == cqn
        }) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.cqs.remove(&cqn);
        Ok(out(destroy_cq_out::SIZE_BYTES))
    }

    fn cmd_query_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_CQ.0;
        need_in(op, input, query_cq_in::SIZE_BYTES)?;
        let cqn = query_cq_in::cqn.get(input) as u32;
        let Some(cq) = self.objects.cqs.object_mut(&cqn).cloned() else { return Err(bad_res(op)) };
        let ci = self.iommu.read_u32_be(cq.dbr).unwrap_or(0);
        let mut o = out(query_cq_out::SIZE_BYTES + 8 * cq.buf.pas.len());
        let ctx = query_cq_out::cq_context;
        let s = |o: &mut Vec<u8>, f: Field, v: u64| {
            ctx.inner(f).set(o, v);
        };
        s(&mut o, cqc::status, if cq.error { CqStatus::CQ_OVERFLOW } else { CqStatus::OK }.0 as u64);
        s(&mut o, cqc::log_cq_size, cq.log_size as u64);
        s(&mut o, cqc::uar_page, cq.uar as u64);
        s(&mut o, cqc::c_eqn_or_apu_element, cq.eqn as u64);
        s(&mut o, cqc::log_page_size, page::log_page_size(cq.buf.page_shift));
        s(&mut o, cqc::page_offset, page::page_offset_field(cq.buf.offset, cq.buf.page_shift));
        s(&mut o, cqc::oi, cq.oi as u64);
        s(
            &mut o,
            cqc::st,
            match cq.arm {
                Some(CqArm { solicited_only: true, .. }) => CqState::SOLICITED_NOTIFICATION_REQUEST_ARMED,
                Some(_) => CqState::NOTIFICATION_REQUEST_ARMED,
                None => CqState::FIRED,
            }
            .0 as u64,
        );
        s(&mut o, cqc::cq_period, cq.moderation.0 as u64);
        s(&mut o, cqc::cq_max_count, cq.moderation.1 as u64);
        s(&mut o, cqc::consumer_counter, (ci & plain::cq::NUM_MASK_24) as u64);
        s(&mut o, cqc::producer_counter, (cq.producer & plain::cq::NUM_MASK_24) as u64);
        s(&mut o, cqc::dbr_addr, cq.dbr);
        for (i, p) in cq.buf.pas.iter().enumerate() {
            let off = query_cq_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    fn cmd_modify_cq(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::MODIFY_CQ.0;
        need_in(op, input, modify_cq_in::SIZE_BYTES)?;
        let cqn = modify_cq_in::cqn.get(input) as u32;
        let select = CqModifyFields(modify_cq_in::modify_field_select_resize_field_select.get(input) as u32);
        let ctx = modify_cq_in::cq_context;
        let g = |f: Field| ctx.inner(f).get(input);
        let Some(cq) = self.objects.cqs.object_mut(&cqn) else { return Err(bad_res(op)) };
        match ModifyCqOpMod(op_mod) {
            // Modify moderation: cq_period and cq_max_count.
            ModifyCqOpMod::MODIFY => {
                let mut m = cq.moderation;
                if select.contains(CqModifyFields::PERIOD) {
                    m.0 = g(cqc::cq_period) as u16;
                }
                if select.contains(CqModifyFields::COUNT) {
                    m.1 = g(cqc::cq_max_count) as u16;
                }
                self.objects.cqs.object_mut(&cqn).expect("CQ looked up above").moderation = m;
            }
            // Resize: log_cq_size, page_offset and log_page_size.
            ModifyCqOpMod::RESIZE => {
                let log_size = g(cqc::log_cq_size) as u32;
                if log_size as u64 > limits::LOG_MAX_CQ_SZ {
                    return Err(bad_param(op, sy::EXCEEDS_LIMIT));
                }
                let page_shift = page::page_shift(g(cqc::log_page_size));
                let offset = page::page_offset_bytes(g(cqc::page_offset), page_shift);
                let npages = pages_for((plain::cqe64::SIZE as u64) << log_size, page_shift, offset);
                let pas = read_pas(op, input, modify_cq_in::SIZE_BYTES, npages)?;
                // The switch point: a RESIZE_CQ CQE in the old ring at the producer position; the
                // driver copies the CQEs before it into the new ring. The producer counter goes on
                // in the new ring after it.
                let mut marker = [0u8; plain::cqe64::SIZE];
                marker[plain::cqe64::op_own] = plain::CqeOpOwn::new().with_opcode(CqeOpcode::RESIZE_CQ.0).into_bits();
                if !self.data_path(|dp| dp.write_cqe(cqn, &mut marker, false)) {
                    return Err(res_state(op, sy::BAD_STATE));
                }
                let cq = self.objects.cqs.object_mut(&cqn).expect("CQ looked up above");
                cq.log_size = log_size;
                cq.buf = QueueBuf { pas, page_shift, offset };
            }
            _ => return Err(bad_param(op, sy::BAD_OP_MOD)),
        }
        Ok(out(modify_cq_out::SIZE_BYTES))
    }

    /// UAR + 0x20: CQ arm doorbell (high dword: sn, command, consumer index).
    pub(crate) fn cq_arm_doorbell(&mut self, uar: u32, cqn: u32, hi: u32) {
        let Some(cq) = self.objects.cqs.object_mut(&cqn) else {
            self.stats.bad_doorbells += 1;
            return;
        };
        if cq.uar != uar {
            self.stats.bad_doorbells += 1;
            return;
        }
        let arm = CqArm {
            solicited_only: hi & plain::uar::CQ_DB_REQ_NOT_SOL != 0,
            sn: ((hi >> plain::uar::CQ_DB_SN_SHIFT) & 3) as u8,
            ci: hi & plain::cq::NUM_MASK_24,
        };
        cq.arm = Some(arm);
        // CQEs already beyond the consumer index raise the event at once.
        let pending = (cq.producer & plain::cq::NUM_MASK_24) != arm.ci;
        if pending && !arm.solicited_only {
            self.data_path(|dp| dp.cq_event(cqn));
        }
    }

    // ---- MKey ----

    fn cmd_create_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_MKEY.0;
        need_in(op, input, create_mkey_in::SIZE_BYTES)?;
        let ctx = create_mkey_in::memory_key_mkey_entry;
        let g = |f: Field| ctx.inner(f).get(input);
        if create_mkey_in::mkey_umem_valid.get(input) != 0
            || MkcAccessMode::from_fields(g(mkc::access_mode_4_2) as u8, g(mkc::access_mode_1_0) as u8)
                != MkcAccessMode::MTT
        {
            // MTT translation only.
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if g(mkc::free) != 0 || g(mkc::umr_en) != 0 || g(mkc::bsf_en) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let pd = g(mkc::pd) as u32;
        if !self.objects.pds.contains(&pd) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let page_shift = g(mkc::log_page_size) as u32;
        if !(12..=30).contains(&page_shift) {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let start = g(mkc::start_addr);
        let len = g(mkc::len);
        let length64 = g(mkc::length64) != 0;
        let octwords =
            create_mkey_in::translations_octword_actual_size.get(input).max(g(mkc::translations_octword_size));
        let nmtt = octwords as usize * 2;
        let needed = if length64 { 0 } else { pages_for(len, page_shift, start & ((1 << page_shift) - 1)) };
        if nmtt < needed || nmtt > (1 << 24) {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        need_in(op, input, create_mkey_in::SIZE_BYTES + 8 * nmtt)?;
        let mtt: Vec<u64> = (0..nmtt).map(|i| be64(input, create_mkey_in::SIZE_BYTES + 8 * i)).collect();
        if mtt[..needed].iter().any(|e| e & ((1u64 << page_shift) - 1) & plain::mkey::MTT_PTAG_MASK != 0) {
            return Err(bad_param(op, sy::BAD_PAGE_ADDRESS));
        }
        let mkey = |index| Mkey {
            index,
            variant: g(mkc::mkey_7_0) as u8,
            pd,
            lw: g(mkc::lw) != 0,
            rr: g(mkc::rr) != 0,
            rw: g(mkc::rw) != 0,
            atomic: g(mkc::a) != 0,
            start,
            len,
            length64,
            page_shift,
            mtt,
            mkc: ctx.bytes(input).map(|b| b.to_vec()).unwrap_or_default(),
        };
        let index = self.objects.mkeys.add(1 << limits::LOG_MAX_MKEY, mkey).ok_or_else(|| no_res(op))?;
        self.objects.mkeys_created += 1;
        let mut o = out(create_mkey_out::SIZE_BYTES);
        create_mkey_out::mkey_index.set(&mut o, index as u64);
        Ok(o)
    }

    fn cmd_destroy_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_MKEY.0;
        need_in(op, input, destroy_mkey_in::SIZE_BYTES)?;
        let index = destroy_mkey_in::mkey_index.get(input) as u32;
        if self.objects.mkeys.remove(&index).is_none() {
            return Err(bad_res(op));
        }
        self.objects.mkeys_destroyed += 1;
        Ok(out(destroy_mkey_out::SIZE_BYTES))
    }

    fn cmd_query_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_MKEY.0;
        need_in(op, input, query_mkey_in::SIZE_BYTES)?;
        let index = query_mkey_in::mkey_index.get(input) as u32;
        let Some(m) = self.objects.mkeys.get(&index) else { return Err(bad_res(op)) };
        let mut o = out(query_mkey_out::SIZE_BYTES);
        if let Some(d) = query_mkey_out::memory_key_mkey_entry.bytes_mut(&mut o) {
            let n = d.len().min(m.mkc.len());
            d[..n].copy_from_slice(&m.mkc[..n]);
        }
        Ok(o)
    }

    /// Looks up an MKey by its 32-bit key (index and variant must both match).
    pub fn mkey(&self, key: u32) -> Option<&Mkey> {
        self.objects.mkeys.get(&plain::mkey::index(key)).filter(|m| m.variant == plain::mkey::variant(key))
    }

    // ---- SRQ ----

    fn cmd_create_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_SRQ.0;
        need_in(op, input, create_srq_in::SIZE_BYTES)?;
        let ctx = create_srq_in::srq_context_entry;
        let g = |f: Field| ctx.inner(f).get(input);
        let log_size = g(srqc::log_srq_size) as u32;
        let stride_shift = g(srqc::log_rq_stride) as u32 + plain::wqe::RQ_STRIDE_UNIT_SHIFT;
        if log_size as u64 > limits::LOG_MAX_SRQ_SZ || (1u64 << stride_shift) > limits::MAX_WQE_SZ_RQ {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if g(srqc::lwm) >= (1u64 << log_size) {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        let pd = g(srqc::pd) as u32;
        if !self.objects.pds.contains(&pd) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let dbr = g(srqc::dbr_addr);
        if dbr % 4 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(g(srqc::log_page_size));
        let offset = page::page_offset_bytes(g(srqc::page_offset), page_shift);
        let npages = pages_for((1u64 << log_size) << stride_shift, page_shift, offset);
        let pas = read_pas(op, input, create_srq_in::SIZE_BYTES, npages)?;
        let srqs = &self.objects.srqs;
        let srqn = alloc_num(|n| srqs.contains_key(&n), 1, 1 << limits::LOG_MAX_SRQ).ok_or_else(|| no_res(op))?;
        self.objects.srqs.insert(
            srqn,
            Locked::new(Srq {
                srqn,
                pd,
                cqn: g(srqc::cqn) as u32,
                log_size,
                stride_shift,
                buf: QueueBuf { pas, page_shift, offset },
                dbr,
                lwm: g(srqc::lwm) as u32,
                consumed: 0,
                head: 0,
                error: false,
            }),
        );
        let mut o = out(create_srq_out::SIZE_BYTES);
        create_srq_out::srqn.set(&mut o, srqn as u64);
        Ok(o)
    }

    fn cmd_destroy_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_SRQ.0;
        need_in(op, input, destroy_srq_in::SIZE_BYTES)?;
        let srqn = destroy_srq_in::srqn.get(input) as u32;
        if !self.objects.srqs.contains_key(&srqn) {
            return Err(bad_res(op));
        }
        if self.objects.qps.values().any(|q| q.lock().srqn == Some(srqn)) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.srqs.remove(&srqn);
        Ok(out(destroy_srq_out::SIZE_BYTES))
    }

    fn cmd_query_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_SRQ.0;
        need_in(op, input, query_srq_in::SIZE_BYTES)?;
        let srqn = query_srq_in::srqn.get(input) as u32;
        let Some(s) = self.objects.srqs.get_mut(&srqn).map(|s| s.get_mut().clone()) else { return Err(bad_res(op)) };
        let counter = self.iommu.read_u32_be(s.dbr).unwrap_or(0) & plain::dbr::WQ_COUNTER_MASK;
        let mut o = out(query_srq_out::SIZE_BYTES);
        let ctx = query_srq_out::srq_context_entry;
        ctx.inner(srqc::state).set(&mut o, if s.error { SrqState::ERROR } else { SrqState::GOOD }.0 as u64);
        ctx.inner(srqc::log_srq_size).set(&mut o, s.log_size as u64);
        ctx.inner(srqc::log_rq_stride).set(&mut o, (s.stride_shift - plain::wqe::RQ_STRIDE_UNIT_SHIFT) as u64);
        ctx.inner(srqc::pd).set(&mut o, s.pd as u64);
        ctx.inner(srqc::cqn).set(&mut o, s.cqn as u64);
        ctx.inner(srqc::lwm).set(&mut o, s.lwm as u64);
        ctx.inner(srqc::wqe_cnt).set(&mut o, (counter.wrapping_sub(s.consumed) & plain::dbr::WQ_COUNTER_MASK) as u64);
        ctx.inner(srqc::dbr_addr).set(&mut o, s.dbr);
        ctx.inner(srqc::log_page_size).set(&mut o, page::log_page_size(s.buf.page_shift));
        Ok(o)
    }

    fn cmd_arm_rq(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::ARM_RQ.0;
        need_in(op, input, arm_rq_in::SIZE_BYTES)?;
        // SRQ: the only kind this device has.
        if ArmRqOpMod(op_mod) != ArmRqOpMod::SRQ {
            return Err(bad_param(op, sy::BAD_OP_MOD));
        }
        let srqn = arm_rq_in::srq_number.get(input) as u32;
        let lwm = arm_rq_in::lwm.get(input) as u32;
        let Some(s) = self.objects.srqs.get_mut(&srqn).map(Locked::get_mut) else { return Err(bad_res(op)) };
        if lwm >= (1 << s.log_size) {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        s.lwm = lwm;
        Ok(out(arm_rq_out::SIZE_BYTES))
    }

    // ---- QP ----

    fn cmd_create_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_QP.0;
        need_in(op, input, create_qp_in::SIZE_BYTES)?;
        let base = create_qp_in::qpc;
        let g = |f: Field| base.inner(f).get(input);
        let st = QpServiceType(g(qpc::st) as u8);
        if st != QpServiceType::RC && st != QpServiceType::UD {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if g(qpc::state) != 0 || create_qp_in::wq_umem_valid.get(input) != 0 || g(qpc::dbr_umem_valid) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let pd = g(qpc::pd) as u32;
        let (cqn_snd, cqn_rcv) = (g(qpc::cqn_snd) as u32, g(qpc::cqn_rcv) as u32);
        let uar = g(qpc::uar_page) as u32;
        let o = &self.objects;
        if !o.pds.contains(&pd)
            || !o.uars.contains(&uar)
            || !o.cqs.contains_key(&cqn_snd)
            || !o.cqs.contains_key(&cqn_rcv)
        {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let rq_type = RqType(g(qpc::rq_type) as u8);
        let (srqn, no_rq) = match rq_type {
            RqType::NON_ZERO_RQ => (None, false),
            RqType::SRQ_RQ => {
                let s = g(qpc::srqn_rmpn_xrqn) as u32;
                if !o.srqs.contains_key(&s) {
                    return Err(bad_param(op, sy::BAD_REFERENCE));
                }
                (Some(s), true)
            }
            RqType::ZERO_LEN_RQ => (None, true),
            _ => return Err(bad_param(op, sy::BAD_FIELD_VALUE)),
        };
        let log_rq_size = g(qpc::log_rq_size) as u32;
        let rq_stride_shift = g(qpc::log_rq_stride) as u32 + plain::wqe::RQ_STRIDE_UNIT_SHIFT;
        let no_sq = g(qpc::no_sq) != 0;
        let log_sq = g(qpc::log_sq_size) as u32;
        if log_rq_size as u64 > limits::LOG_MAX_QP_SZ
            || log_sq as u64 > limits::LOG_MAX_QP_SZ
            || (1u64 << rq_stride_shift) > limits::MAX_WQE_SZ_RQ
        {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        let dbr = g(qpc::dbr_addr);
        if dbr % 8 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let rq_bytes = if no_rq { 0 } else { (1u64 << log_rq_size) << rq_stride_shift };
        let sq_bytes = if no_sq { 0 } else { (plain::wqe::SEND_WQE_BB as u64) << log_sq };
        let page_shift = page::page_shift(g(qpc::log_page_size));
        let offset = page::page_offset_bytes(g(qpc::page_offset), page_shift);
        let npages = pages_for(rq_bytes + sq_bytes, page_shift, offset);
        let pas = read_pas(op, input, create_qp_in::SIZE_BYTES, npages)?;
        let mut ctx = base.bytes(input).map(|b| b.to_vec()).unwrap_or_else(|| vec![0; qpc::SIZE_BYTES]);
        qpc::state.set(&mut ctx, QpState::RST.0 as u64);
        let qpn = self
            .objects
            .qps
            .add(1 << limits::LOG_MAX_QP, |qpn| {
                Locked::new(Qp {
                    qpn,
                    st,
                    state: QpState::RST,
                    ctx,
                    pd,
                    cqn_snd,
                    cqn_rcv,
                    srqn,
                    uar,
                    buf: QueueBuf { pas, page_shift, offset },
                    log_rq_size,
                    rq_stride_shift,
                    log_sq_size: (!no_sq).then_some(log_sq),
                    no_rq,
                    dbr,
                    sq_fetched: 0,
                    rq_consumed: 0,
                    sq_doorbell: 0,
                    sq_rang: false,
                    transport: Some(Box::default()),
                    timed: false,
                })
            })
            .ok_or_else(|| no_res(op))?;
        let mut o = out(create_qp_out::SIZE_BYTES);
        create_qp_out::qpn.set(&mut o, qpn as u64);
        Ok(o)
    }

    fn cmd_destroy_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_QP.0;
        need_in(op, input, destroy_qp_in::SIZE_BYTES)?;
        let qpn = destroy_qp_in::qpn.get(input) as u32;
        if self.objects.qps.remove(&qpn).is_none() {
            return Err(bad_res(op));
        }
        self.qp_destroyed(qpn);
        Ok(out(destroy_qp_out::SIZE_BYTES))
    }

    fn cmd_query_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_QP.0;
        need_in(op, input, query_qp_in::SIZE_BYTES)?;
        let qpn = query_qp_in::qpn.get(input) as u32;
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(op)) };
        let mut o = out(query_qp_out::SIZE_BYTES + 8 * qp.buf.pas.len());
        if let Some(d) = query_qp_out::qpc.bytes_mut(&mut o) {
            d.copy_from_slice(&qp.ctx);
        }
        let q = query_qp_out::qpc;
        q.inner(qpc::state).set(&mut o, qp.state.0 as u64);
        q.inner(qpc::hw_sq_wqebb_counter).set(&mut o, qp.sq_fetched as u64);
        q.inner(qpc::sw_sq_wqebb_counter).set(&mut o, qp.sq_doorbell as u64);
        q.inner(qpc::hw_rq_counter).set(&mut o, qp.rq_consumed as u64);
        self.qp_query_transport(qpn, &mut o);
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(op)) };
        for (i, p) in qp.buf.pas.iter().enumerate() {
            let off = query_qp_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    fn cmd_modify_qp(&mut self, op: CmdOpcode, input: &[u8]) -> CmdResult {
        let opc = op.0;
        let short = matches!(op, CmdOpcode::QP_2ERR | CmdOpcode::QP_2RST);
        need_in(opc, input, if short { qp_2err_in::SIZE_BYTES } else { rst2init_qp_in::SIZE_BYTES })?;
        let qpn = rst2init_qp_in::qpn.get(input) as u32;
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(opc)) };
        let cur = qp.state;
        let (from_ok, to) = match op {
            CmdOpcode::RST2INIT_QP => (cur == QpState::RST, QpState::INIT),
            CmdOpcode::INIT2INIT_QP => (cur == QpState::INIT, QpState::INIT),
            CmdOpcode::INIT2RTR_QP => (cur == QpState::INIT, QpState::RTR),
            CmdOpcode::RTR2RTS_QP => (cur == QpState::RTR, QpState::RTS),
            CmdOpcode::RTS2RTS_QP => (cur == QpState::RTS, QpState::RTS),
            CmdOpcode::SQERR2RTS_QP => (cur == QpState::SQER, QpState::RTS),
            CmdOpcode::SQD_RTS_QP => (cur == QpState::SQD, QpState::RTS),
            CmdOpcode::QP_2ERR => (true, QpState::ERR),
            CmdOpcode::QP_2RST => (true, QpState::RST),
            _ => return Err(CmdFail::new(CmdStatus::BAD_OP_ERR, opc, 0)),
        };
        if !from_ok {
            return Err(qp_state_err(opc));
        }
        let st = qp.st;
        let mut ctx = qp.ctx.clone();
        if !short {
            let mask = rst2init_qp_in::opt_param_mask.get(input) as u32;
            // Only the transition's optional parameters may be flagged (the firmware-spec table
            // Linux masks every modify with, `opt_mask` in mlx5_ib qp.c).
            if QpOptParam(mask).difference(QpOptParam::allowed(op, st)).bits() != 0 {
                return Err(bad_param(opc, sy::BAD_OPT_PARAM));
            }
            let src = rst2init_qp_in::qpc;
            for (f, bit) in transition_fields(op, st) {
                if bit.is_none_or(|b| mask & b != 0) {
                    copy_field(&mut ctx, input, src, f);
                }
            }
            self.validate_qp_attrs(opc, op, st, &ctx)?;
        }
        qpc::state.set(&mut ctx, to.0 as u64);
        let qp = self.objects.qps.object_mut(&qpn).expect("QP looked up above");
        qp.ctx = ctx;
        qp.state = to;
        if to == QpState::RST {
            qp.sq_fetched = 0;
            qp.rq_consumed = 0;
            qp.sq_doorbell = 0;
        }
        self.qp_state_changed(qpn, cur, to);
        Ok(out(rst2init_qp_out::SIZE_BYTES))
    }

    fn validate_qp_attrs(&self, opc: u16, op: CmdOpcode, st: QpServiceType, ctx: &[u8]) -> Result<(), CmdFail> {
        let bad = || bad_param(opc, sy::BAD_QP_ATTRIBUTE);
        let ads = qpc::primary_address_path;
        let port = ads.inner(ads::vhca_port_num).get(ctx);
        if port > 1 {
            return Err(bad());
        }
        if ads.inner(ads::pkey_index).get(ctx) != 0 {
            return Err(bad()); // one P_Key (0xffff) at index 0
        }
        if st == QpServiceType::RC && op == CmdOpcode::INIT2RTR_QP {
            let mtu = qpc::mtu.get(ctx) as u8;
            if !(1..=5).contains(&mtu) || mtu > 5 {
                return Err(bad());
            }
            let gid_index = ads.inner(ads::src_addr_index).get(ctx) as usize;
            if self.vport.gids.get(gid_index).copied().flatten().is_none() {
                return Err(bad());
            }
            let rgid = ads.inner(ads::rgid_rip).bytes(ctx).unwrap_or(&[0; 16]);
            if rgid == [0; 16] {
                return Err(bad());
            }
            if qpc::log_rra_max.get(ctx) > limits::LOG_MAX_RA_QP || qpc::log_msg_max.get(ctx) > limits::LOG_MAX_MSG {
                return Err(bad());
            }
        }
        if st == QpServiceType::RC && op == CmdOpcode::RTR2RTS_QP && qpc::log_sra_max.get(ctx) > limits::LOG_MAX_RA_QP {
            return Err(bad());
        }
        Ok(())
    }
}

/// An EQE payload (`plain::eqe::data`) that starts with `payload` and is zero after it.
pub(crate) fn event_data(payload: &(impl zerocopy::IntoBytes + zerocopy::Immutable)) -> plain::EqeData {
    let mut data = plain::EqeData::default();
    let b = payload.as_bytes();
    data[..b.len()].copy_from_slice(b);
    data
}

impl DataPath<'_> {
    /// Writes an EQE of `ty` on the lowest-numbered EQ subscribed to it. Returns whether an EQ
    /// took it. `data` is the EQE's payload ([`event_data`] builds it from a payload structure).
    pub(crate) fn post_event(&mut self, ty: EventType, sub_type: u8, data: &plain::EqeData) -> bool {
        let t = ty.0 as usize;
        let subscribed = |e: &Locked<Eq>| {
            let e = e.lock();
            (t < 256 && e.mask[t / 64] & (1 << (t % 64)) != 0).then_some(e.eqn)
        };
        let Some(eqn) = self.objects.eqs.values().find_map(subscribed) else { return false };
        self.write_eqe(eqn, ty.0, sub_type, data)
    }

    /// Writes one EQE on `eqn` and raises its interrupt if armed.
    pub(crate) fn write_eqe(&mut self, eqn: u32, ty: u8, sub_type: u8, data: &plain::EqeData) -> bool {
        let hca = self.hca();
        let Some(mut eq) = hca.objects.eqs.get(&eqn).map(Locked::lock) else { return false };
        if eq.overrun {
            return false;
        }
        let n = 1u32 << eq.log_size;
        if eq.producer.wrapping_sub(eq.consumer) >= n {
            if !eq.oi {
                eq.overrun = true;
                self.lane.device_stats.eq_overruns += 1;
                self.lane.fatal = Some(umlx_hwdesc::enums::HealthSyndrome::ASYNC_EQ_OVERRUN_ERR);
            }
            return false;
        }
        let idx = eq.producer & (n - 1);
        let owner = ((eq.producer >> eq.log_size) & 1) as u8;
        let Some(iova) = eq.buf.iova((idx as usize * plain::eqe::SIZE) as u64) else { return false };
        let e = plain::eqe { type_: ty, sub_type, data: *data, owner, ..Default::default() };
        let eqe: [u8; plain::eqe::SIZE] = zerocopy::transmute!(e);
        if !self.may_dma() {
            return false;
        }
        if self.iommu.write_owner_last(iova, &eqe, plain::eqe::owner).is_err() {
            return false;
        }
        eq.producer = eq.producer.wrapping_add(1);
        self.lane.device_stats.eqes += 1;
        if eq.armed {
            eq.armed = false;
            let v = eq.intr;
            drop(eq);
            self.signal_irq(v);
        }
        true
    }

    /// Posts the completion event of an armed CQ and disarms it.
    pub(crate) fn cq_event(&mut self, cqn: u32) {
        let Some(mut cq) = self.objects.cqs.lock(&cqn) else { return };
        if cq.arm.take().is_none() {
            return;
        }
        let eqn = cq.eqn;
        drop(cq);
        let data = plain::eqe_comp { cqn: (cqn & plain::cq::NUM_MASK_24).into(), ..Default::default() };
        self.write_eqe(eqn, EventType::COMP.0, 0, &zerocopy::transmute!(data));
    }

    /// Writes a CQE (its owner bit is set here) and raises the completion event when armed and
    /// the CQE qualifies. Returns false if the CQ is gone, in error, overrun, or unreachable.
    pub(crate) fn write_cqe(&mut self, cqn: u32, cqe: &mut [u8; plain::cqe64::SIZE], solicited: bool) -> bool {
        let hca = self.hca();
        let Some(mut cq) = hca.objects.cqs.lock(&cqn) else { return false };
        if cq.error {
            return false;
        }
        let n = 1u32 << cq.log_size;
        let fail = match self.iommu.read_u32_be(cq.dbr) {
            Err(_) => Some(CqErrorSyndrome::CQ_ACCESS_VIOLATION_ERROR),
            Ok(ci) => {
                let produced = cq.producer & plain::cq::NUM_MASK_24;
                (produced.wrapping_sub(ci & plain::cq::NUM_MASK_24) & plain::cq::NUM_MASK_24 >= n && !cq.oi)
                    .then_some(CqErrorSyndrome::CQ_OVERRUN)
            }
        };
        if let Some(syndrome) = fail {
            drop(cq);
            self.cq_error(cqn, syndrome);
            return false;
        }
        let idx = cq.producer & (n - 1);
        let owner = ((cq.producer >> cq.log_size) & 1) as u8;
        let Some(iova) = cq.buf.iova((idx as usize * plain::cqe64::SIZE) as u64) else { return false };
        let own = plain::cqe64::op_own;
        let op_own = plain::CqeOpOwn::from_bits(cqe[own]).with_owner(owner != 0);
        cqe[own] = op_own.into_bits();
        if self.iommu.write_owner_last(iova, cqe, own).is_err() {
            drop(cq);
            self.cq_error(cqn, CqErrorSyndrome::CQ_ACCESS_VIOLATION_ERROR);
            return false;
        }
        cq.producer = cq.producer.wrapping_add(1);
        let opcode = CqeOpcode(op_own.opcode());
        let is_err = matches!(opcode, CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR);
        let is_resize = opcode == CqeOpcode::RESIZE_CQ;
        if let Some(arm) = cq.arm
            && !is_resize
            && (!arm.solicited_only || solicited || is_err)
        {
            drop(cq);
            self.cq_event(cqn);
        }
        true
    }

    /// Moves a CQ to error and posts CQ_ERROR with `syndrome`.
    pub(crate) fn cq_error(&mut self, cqn: u32, syndrome: CqErrorSyndrome) {
        if let Some(mut cq) = self.objects.cqs.lock(&cqn) {
            if cq.error {
                return;
            }
            cq.error = true;
        }
        let err = plain::eqe_cq_err {
            cqn: (cqn & plain::cq::NUM_MASK_24).into(),
            syndrome: syndrome.0,
            ..Default::default()
        };
        self.post_event(EventType::CQ_ERROR, 0, &event_data(&err));
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectTable;

    /// Objects are found by number, the number added is the lowest free one (the first hole),
    /// numbers below the table's first are never held, iteration is in ascending number, and
    /// nothing is added when the lowest free number is not below the limit.
    #[test]
    fn an_object_table_is_indexed_by_number_and_reuses_the_lowest_free_one() {
        const LIMIT: u64 = 1 << 18;
        let mut t: ObjectTable<String> = ObjectTable::starting_at(256);
        assert!(t.is_empty());
        for (n, name) in [(256, "a"), (257, "b"), (258, "c")] {
            assert_eq!(t.add(LIMIT, |k| format!("{name}{k}")), Some(n));
        }
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&257).map(String::as_str), Some("b257"), "made with its number");
        assert_eq!(t.get(&259), None);
        assert_eq!(t.get(&1), None, "below the first number");
        assert!(!t.contains_key(&1));
        assert_eq!(t.remove(&257).as_deref(), Some("b257"));
        assert_eq!(t.remove(&257), None);
        assert_eq!(t.values().map(String::as_str).collect::<Vec<_>>(), ["a256", "c258"]);
        if let Some(c) = t.get_mut(&258) {
            c.push('!');
        }
        assert_eq!(t.add(LIMIT, |k| format!("d{k}")), Some(257), "the hole is reused first");
        assert_eq!(t.values().map(String::as_str).collect::<Vec<_>>(), ["a256", "d257", "c258!"]);
        assert_eq!(t.len(), 3);
        // The last object gone, the table is no longer than the one before it needs.
        assert_eq!(t.remove(&258).as_deref(), Some("c258!"));
        assert_eq!(t.add(258, |_| unreachable!("no number below the limit is free")), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.add(LIMIT, |k| format!("e{k}")), Some(258));
    }
}
