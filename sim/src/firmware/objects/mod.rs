//! The objects the firmware creates and destroys: UARs, PDs, transport domains, Q counters,
//! EQs, CQs, MKeys, SRQs and QPs, with their commands, their state checks and the event and
//! completion machinery (EQE writing with owner bits, EQ and CQ arming, completion events).
//!
//! Queue buffers are described by page lists (PAS) with a page size relative to 4 KiB; the
//! device reaches them through the IOMMU only when it uses them, so a buffer the driver forgot to
//! map is an IOMMU fault at use (a CQ error event, an error CQE or a lost EQE), not at creation.
//! The QP buffer holds the RQ first and the SQ right after it (SQ offset = RQ size), as both the
//! Linux driver and rdma-core lay it out.
//!
//! This module holds what the objects share (queue buffers, the numbered object tables and
//! their locks, MKey translation chunks, the command helpers) and the command dispatch; each
//! kind of object has a module of its own with its state and commands, as `hwdesc`'s layouts
//! are split: `resources` (UAR, PD, TD, Q counter), `eq`, `cq`, `mkey`, `srq` and `qp`.

mod cq;
mod eq;
mod mkey;
mod qp;
mod resources;
mod srq;

pub use cq::{Cq, CqArm};
pub use eq::Eq;
pub use mkey::{Access, Mkey, MkeyError};
pub use qp::Qp;
pub use resources::QCounter;
pub use srq::Srq;

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
}

/// An EQE payload (`plain::eqe::data`) that starts with `payload` and is zero after it.
pub(crate) fn event_data(payload: &(impl zerocopy::IntoBytes + zerocopy::Immutable)) -> plain::EqeData {
    let mut data = plain::EqeData::default();
    let b = payload.as_bytes();
    data[..b.len()].copy_from_slice(b);
    data
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
