//! The QP table: from a CQE's QP number to the work-request ring of its send or receive
//! queue, read by pollers without locks, and the per-poller cache in front of it.

use super::cq::NO_SOP_DROP_QPN;
use super::*;

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
