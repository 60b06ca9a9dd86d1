//! The software ConnectX as a device: what a host sees of it over PCI.
//!
//! [`SimDevice`] is the handle a backend holds: BAR0 reads and writes (a doorbell write is an
//! event the device handles), PCI configuration space (vendor/device ID, COMMAND register with
//! bus mastering, which gates every DMA), the IOMMU table (map/unmap, as VFIO's
//! `VFIO_IOMMU_MAP_DMA` would fill it), MSI-X vectors delivered on eventfds, function-level
//! reset, and fault injection.
//!
//! The device runs to completion in whichever thread gives it work, as a NIC's pipeline
//! handles a doorbell when it arrives: a doorbell write executes the posted WQEs, sends their
//! frames and, on an in-process fabric, has the receiving device handle them in the same thread
//! when it is free (so an ACK may come back and complete the request before the doorbell
//! write returns). A frame from a UDP wire is handled in the thread that received it. A
//! background engine thread does the rest: time-driven work (retransmission and RNR timers,
//! delayed command completions) and frames that arrived while another thread held the device;
//! it stops when the last handle is dropped.
//!
//! Several threads run the data path at once. The device is behind a reader-writer lock:
//! send doorbells and received frames take it shared, each run on a lane of its own
//! ([`crate::transport::Lane`]) and each queue under a lock of its own; everything else
//! (commands, configuration, the other doorbells, the timers, counters) takes it whole. A QP's
//! order is kept across threads: its transport is held by one run at a time (another waits
//! for it), a run sends the frames it built before it lets go of the transport, and received
//! frames wait in receive queues chosen by destination QP, each handled by one run at a time.
//! A thread handles the queues it brought frames to; a queue another run is handling is left
//! to that run, which looks at it again before it stops.
//!
//! A 64-bit BAR write (a doorbell) never waits for the device: when another thread holds it
//! whole, the write is posted, as PCIe posts a CPU's MMIO write, and the device executes it
//! before that thread lets go ([`HcaGuard`]), or, for send doorbells, at the next run on a
//! shared borrow. Any later access to the whole device executes the posted writes first, so
//! they stay ordered before it, as a PCIe read flushes the writes posted before it; a send
//! doorbell rung after a posted write that needs the whole device is posted behind it. A
//! register read takes the device shared, beside the data path's runs, when no write is
//! posted (else whole, as above).
//!
//! The engine thread, and the clock it and the threads that let go of the device share, are
//! in the `engine` submodule; the ACKs the process's exit sends for its devices, in `exit`.

use crate::config::SimConfig;
use crate::firmware::{DataPath, Hca, HcaState, SimStats};
use crate::iommu::{IommuFault, MapError};
use crate::port::RxFrame;
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use umlx_hwdesc::enums::HealthSyndrome;
use umlx_wire::packet::Checksums;

mod engine;
mod exit;
use engine::{EngineClock, engine, run_timers};
pub(crate) use engine::{prepare_own_thread, prepare_thread};

struct Inner {
    /// The device. Held shared by the runs of the data path that ring send doorbells or
    /// handle received frames; whole by everything else (commands, configuration, the other
    /// doorbells, the timers, counters).
    hca: RwLock<Hca>,
    port: crate::port::Port,
    /// 64-bit BAR writes (offset, value) posted while another thread held the device, in the
    /// order they were made.
    posted: Mutex<VecDeque<(u64, u64)>>,
    /// Whether `posted` holds any: read without its lock by every thread that lets go of the
    /// device.
    posted_any: AtomicBool,
    /// Whether `posted` holds a write other than a send doorbell, which needs the whole device
    /// (send doorbells a run on a shared borrow executes: [`Inner::run_posted_doorbells`]).
    posted_whole: AtomicBool,
    /// When the engine looks next and when the timers are due, shared without the lock.
    clock: EngineClock,
    /// Which of the port's receive queues a run on a shared borrow is handling (bit `q` for
    /// queue `q`): one run at a time handles a queue, so that a QP's packets are handled in
    /// the order they arrived.
    receiving: AtomicU32,
    /// Which of those queues a run wanted to handle and found another run handling (bit `q`
    /// for queue `q`): the run handling it looks again when it lets go of it, where it
    /// otherwise handles a queue once ([`Inner::receive_shared`]).
    skipped: AtomicU32,
    /// Whether a run on a shared borrow let go with the timers due (it does not run them):
    /// the next thread to hold the whole device runs them.
    timers_wanted: AtomicBool,
    /// Held by the engine while it looks at the device (not while it sleeps), and by a test
    /// that keeps it out ([`SimDevice::hold_engine_while`]).
    engine_hold: Mutex<()>,
}

/// The device held whole: derefs to the [`Hca`]. Letting go of it executes the BAR writes
/// posted and handles the frames queued meanwhile (see the module doc), unless another thread
/// holds the device by then and so will.
pub struct HcaGuard<'a> {
    inner: &'a Inner,
    guard: Option<RwLockWriteGuard<'a, Hca>>,
}

impl std::ops::Deref for HcaGuard<'_> {
    type Target = Hca;
    fn deref(&self) -> &Hca {
        // `guard` is only taken by `drop`.
        self.guard.as_deref().expect("the guard is held until dropped")
    }
}

impl std::ops::DerefMut for HcaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Hca {
        self.guard.as_deref_mut().expect("the guard is held until dropped")
    }
}

impl Drop for HcaGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.inner.run_left_over(true);
    }
}

/// The guard a `try_read` or `try_write` of the device lock got, poisoned or not (see
/// [`Inner::lock`]); `None` if another thread holds it.
fn untainted<G>(tried: std::sync::TryLockResult<G>) -> Option<G> {
    match tried {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

impl Inner {
    /// Takes the whole device, after executing the BAR writes posted before.
    fn lock(&self) -> HcaGuard<'_> {
        let mut h = self.lock_raw();
        if self.posted_any.load(Ordering::Relaxed) {
            self.run_to_completion(&mut h);
        }
        HcaGuard { inner: self, guard: Some(h) }
    }

    /// The whole device, waiting for it if another thread holds it; the posted writes are
    /// left to the caller ([`Inner::lock`] executes them).
    fn lock_raw(&self) -> RwLockWriteGuard<'_, Hca> {
        // A panic while holding the lock leaves the model in an unknown state; keep going with
        // what is there rather than poisoning every later access.
        let mut h = self.hca.write().unwrap_or_else(|e| e.into_inner());
        self.take_over(&mut h);
        h
    }

    /// The whole device, if no other thread holds it.
    fn try_lock_raw(&self) -> Option<RwLockWriteGuard<'_, Hca>> {
        let mut h = untainted(self.hca.try_write())?;
        self.take_over(&mut h);
        Some(h)
    }

    /// [`Inner::lock`] if no other thread holds the device.
    fn try_lock(&self) -> Option<HcaGuard<'_>> {
        self.try_lock_raw().map(|h| HcaGuard { inner: self, guard: Some(h) })
    }

    /// What a thread that takes the whole device applies first: the fatal errors the runs on
    /// a shared borrow raised, and the timers they armed (published, not yet in `h`; only
    /// when a shared run brought the published time forward, as otherwise it is the time the
    /// last run of the whole device left, which `h` holds or a later, sooner one).
    fn take_over(&self, h: &mut Hca) {
        h.absorb_spare_lanes();
        if self.clock.take_shared_armed()
            && let Some(due) = self.clock.published_due()
        {
            h.note_due(due);
        }
    }

    /// Reads a 32-bit BAR0 register on a shared borrow of the device, beside the data path's
    /// runs: a read changes nothing, and a thread that took the whole device would first run
    /// what others posted meanwhile (a health check, once a second, would run the data path
    /// in the driver's event thread, and that thread's first run would make its lists then).
    /// `None` while writes are posted (a read flushes the writes posted before it, as on PCIe:
    /// [`Inner::lock`] executes them first) or a fatal error a shared run raised waits for a
    /// holder of the whole device to apply it ([`Hca::absorb_spare_lanes`]): the health
    /// registers must show it.
    fn read_register(&self, offset: u64) -> Option<u32> {
        if self.posted_any.load(Ordering::Relaxed) {
            return None;
        }
        let h = self.hca.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if h.spare_lane_fatal() {
            return None;
        }
        let value = h.bar_read32(offset);
        drop(h);
        // A write posted while this borrow held off a thread that needed the whole device.
        self.run_left_over(false);
        Some(value)
    }

    /// A shared borrow of the device, if no thread holds (or waits to hold) the whole of it.
    fn try_read(&self) -> Option<RwLockReadGuard<'_, Hca>> {
        untainted(self.hca.try_read())
    }

    /// Runs `f` on a shared borrow of the device, then what a run does after it
    /// ([`Inner::run_shared`]), then what was left over ([`Inner::run_left_over`]). False, and
    /// `f` not run, if another thread holds the whole device.
    fn try_shared(&self, f: impl FnOnce(&mut DataPath<'_>)) -> bool {
        self.try_shared_on(0, f)
    }

    /// [`Inner::try_shared`] whose run also handles the receive queues `queues` (bit `q` for
    /// queue `q`), whichever thread queued their frames.
    fn try_shared_on(&self, queues: u32, f: impl FnOnce(&mut DataPath<'_>)) -> bool {
        let Some(h) = self.try_read() else { return false };
        self.run_shared(&h, queues, f);
        drop(h);
        self.run_left_over(false);
        true
    }

    /// Posts a 64-bit BAR write that found the device held, then executes it if the device
    /// was let go of meanwhile.
    fn post(&self, offset: u64, value: u64) {
        let mut posted = self.posted.lock().unwrap_or_else(|e| e.into_inner());
        posted.push_back((offset, value));
        self.posted_any.store(true, Ordering::Relaxed);
        if Hca::sq_doorbell_uar(offset).is_none() {
            self.posted_whole.store(true, Ordering::Relaxed);
        }
        drop(posted);
        self.run_left_over(false);
    }

    /// Executes the send doorbells at the front of the posted writes, in order, on a shared
    /// borrow of the device (up to the first write that needs the whole device, which stays
    /// for a thread that takes it, with those after it). Another run may execute the ones
    /// after them meanwhile: send doorbells of one QP or of several may run in any order (each
    /// has the WQEs fetched up to the doorbell record's counter, in memory).
    fn run_posted_doorbells(&self, dp: &mut DataPath<'_>) {
        while self.posted_any.load(Ordering::Relaxed) {
            let mut posted = self.posted.lock().unwrap_or_else(|e| e.into_inner());
            let Some(uar_value) = posted.front().and_then(|&(o, v)| Some((Hca::sq_doorbell_uar(o)?, v))) else {
                return; // none, or a write that needs the whole device
            };
            posted.pop_front();
            if posted.is_empty() {
                self.posted_any.store(false, Ordering::Relaxed);
                self.posted_whole.store(false, Ordering::Relaxed);
            }
            drop(posted);
            dp.uar_sq_doorbell(uar_value.0, uar_value.1);
        }
    }

    /// Executes the posted BAR writes and runs the timers a shared run left due, when no other
    /// thread holds the device in a way that keeps this one out (one that does takes them
    /// before it lets go); with `frames` (a thread let go of the whole device), also handles
    /// the frames queued meanwhile.
    ///
    /// The fence pairs with the one in every other thread's call (a poster's after its post,
    /// a holder's after it let go) and with the port's before it tries the device for a
    /// frame it queued: of a post or a queueing and a release of the lock, at least one thread
    /// sees the other's, so no posted write or queued frame is left behind. (A thread that
    /// queues a frame while others hold the device shared runs it itself: only the whole
    /// device keeps it out. A queue another run was handling is that run's to look at again:
    /// [`Inner::receive_shared`].)
    fn run_left_over(&self, mut frames: bool) {
        loop {
            fence(Ordering::SeqCst);
            let timers_wanted = self.timers_wanted.load(Ordering::Relaxed);
            if self.posted_whole.load(Ordering::Relaxed) || timers_wanted {
                let mut h = match self.try_lock_raw() {
                    Some(h) => h,
                    // Timers that shared runs found due wait for a thread that takes the whole
                    // device. One that runs no device may queue for it (it holds nothing
                    // another thread's run waits for): runs beside one another on the data
                    // path leave the device free only by chance, and then only for a moment.
                    None if timers_wanted && !crate::port::running_any() => self.lock_raw(),
                    None => return,
                };
                self.run_to_completion(&mut h);
                frames = false; // that run took them
                continue;
            }
            let frames_left = frames && self.port.rx_waiting_queues() & !self.receiving.load(Ordering::Relaxed) != 0;
            if !self.posted_any.load(Ordering::Relaxed) && !frames_left {
                return;
            }
            let Some(h) = self.try_read() else { return };
            self.run_shared(&h, if frames_left { u32::MAX } else { 0 }, |_| ());
            frames = false;
        }
    }

    /// Whether the device owes its wire what its application's last poll or doorbells left
    /// waiting: ACKs ([`crate::port::Port::acks_may_wait`]) or frames held for a burst
    /// (`port::tx_hold`).
    fn owes_wire(&self) -> bool {
        self.port.acks_deferred() || self.port.holds_frames()
    }

    /// Sends what the device owes its wire ([`Inner::owes_wire`]): the ACKs a polling
    /// application's run left waiting, with what else waits in the device's outbox, and the
    /// frames held for a burst.
    fn send_owed_acks(&self, h: &mut Hca) {
        if self.port.acks_deferred() {
            self.port.flush_acks(h);
            self.transmit_outbox(h);
        }
        self.port.send_held();
    }

    /// Hands the frames the transport queued to the port; their integrity fields, if not
    /// computed, are left to the port.
    fn transmit_outbox(&self, h: &mut Hca) {
        let (mut out, checksums) = h.take_outbox();
        self.port.transmit_from(&mut out, checksums);
        h.recycle_outbox(out);
    }

    /// Executes the posted BAR writes in order, under the device lock `h`.
    fn execute_posted(&self, h: &mut Hca) {
        if !self.posted_any.load(Ordering::Relaxed) {
            return;
        }
        let mut posted = self.posted.lock().unwrap_or_else(|e| e.into_inner());
        // The writes only change the device's state (a doorbell's frames wait in its outbox):
        // nothing they do takes another lock or posts here.
        for &(offset, value) in posted.iter() {
            h.bar_write64(offset, value);
        }
        posted.clear();
        self.posted_any.store(false, Ordering::Relaxed);
        self.posted_whole.store(false, Ordering::Relaxed);
    }

    /// Sends what the transport queued and handles the frames that arrived meanwhile (the
    /// answers of devices that handled those frames in this thread among them), until neither
    /// remains, all under the device lock `h` held by this thread.
    ///
    /// Sending before the lock is released matters: a CQE is visible to the host as soon as it
    /// is written, and a host that then tears the device down (its next command waits for the
    /// lock) must not lose the ACK queued with that CQE.
    ///
    /// Then the timers, when due: whichever thread runs the whole device runs them, so a device
    /// its application keeps busy needs no engine for them (the frames that arrived first: an
    /// ACK must count before its retransmit timer).
    fn run_to_completion(&self, h: &mut Hca) {
        self.run_to_completion_with(h, None);
    }

    /// [`Inner::run_to_completion`] whose first look at the receive queues also runs
    /// `taken`: the handling of frames a thread took from the wire and did not queue (see
    /// [`crate::port::Receiver::try_receive_taken`]), after the frames queued before them.
    fn run_to_completion_with(&self, h: &mut Hca, mut taken: Option<&mut dyn FnMut(&mut Hca)>) {
        let _running = crate::port::Running::enter(&self.port);
        h.set_egress_checksums(self.port.egress_checksums());
        self.execute_posted(h);
        loop {
            // Send doorbells posted during the run are left to runs on a shared borrow once
            // this one lets go (`run_left_over`), unless a write that needs the whole device
            // follows them. Executed here, they kept the device whole, and the threads that
            // rang them idle, for as long as those threads kept ringing.
            if self.posted_whole.load(Ordering::Relaxed) {
                // Other threads' writes, posted while this run went on: their time is now.
                crate::port::run_clock_moves();
                self.execute_posted(h);
            }
            if !self.port.acks_may_wait() {
                self.port.flush_acks(h);
            }
            self.transmit_outbox(h);
            let mut received = self.receive_all(h);
            if let Some(handle) = taken.take() {
                handle(h);
                received = true;
            }
            if !received {
                if self.posted_whole.load(Ordering::Relaxed) {
                    continue;
                }
                let (now, now_nanos) = crate::port::run_clock();
                if now < h.timers_due {
                    // A shared run that found the published time due saw one the whole device
                    // has run since (it holds the truth now).
                    self.timers_run();
                    if self.clock.leaving(now_nanos, h.timers_due_nanos()) {
                        self.port.wake_engine(); // a timer due before the engine looks
                    }
                    return;
                }
                run_timers(h, now);
                self.timers_run();
                continue; // send what the timers queued
            }
        }
    }

    /// The timers ran (or are not due), under the whole device: runs on a shared borrow that
    /// find them due note it anew ([`Inner::run_shared`]).
    fn timers_run(&self) {
        if self.timers_wanted.load(Ordering::Relaxed) {
            self.timers_wanted.store(false, Ordering::Relaxed);
        }
    }

    /// Handles the frames waiting in every receive queue of the port, under the device lock
    /// `h`; whether there were any.
    fn receive_all(&self, h: &mut Hca) -> bool {
        let mut any = false;
        let mut waiting = self.port.rx_waiting_queues();
        while waiting != 0 {
            let q = waiting.trailing_zeros() as usize;
            waiting &= waiting - 1;
            let frames = self.port.take_rx(q);
            if !frames.is_empty() {
                self.port.process(h, &mut frames.iter().map(RxFrame::view), crate::port::run_now_for_batch());
                any = true;
            }
            self.port.recycle_rx(q, frames);
        }
        any
    }

    /// A run of the data path on a shared borrow `h` of the device, beside other threads'
    /// runs, on a lane of its own: the send doorbells posted ([`Inner::run_posted_doorbells`]),
    /// `f` (a send doorbell), then what [`Inner::run_to_completion`] does but for the other
    /// posted writes and the timers, which need the whole device: it sends
    /// what the run queued and handles the frames that arrived (when no other run is handling
    /// them: [`Inner::receive_shared`]) until neither remains. It lets go of the lane before
    /// the caller lets go of `h`, with its frames sent; the timer it armed is published, and if
    /// the timers are due, [`Inner::run_left_over`] takes the whole device to run them.
    ///
    /// The receive queues it handles are `queues` (bit `q` for queue `q`) and those this
    /// thread queued frames in ([`crate::port::Port::take_queued_here`]): a thread handles
    /// the frames it brought, and leaves another thread's to that thread, so that neither
    /// ends up doing the other's work while the other waits.
    fn run_shared(&self, h: &Hca, mut queues: u32, f: impl FnOnce(&mut DataPath<'_>)) {
        let _running = crate::port::Running::enter(&self.port);
        let mut lane = h.take_spare_lane();
        lane.compute_checksums = self.port.egress_checksums() == Checksums::Compute;
        let mut dp = DataPath::sending_on(h, &mut lane, &self.port);
        self.run_posted_doorbells(&mut dp);
        f(&mut dp);
        loop {
            dp.flush_acks();
            dp.send_built();
            // The ports the run's frames reached handle them now (it holds no transport).
            std::mem::take(&mut dp.lane.reached).notify();
            if !self.receive_shared(&mut dp, &mut queues) {
                break;
            }
        }
        let (wake, due) = self.clock.leaving_shared(crate::port::run_clock().1, lane.due.take());
        if due && !self.timers_wanted.load(Ordering::Relaxed) {
            self.timers_wanted.store(true, Ordering::Relaxed);
        }
        if wake {
            self.port.wake_engine(); // a timer due before the engine looks
        }
        h.put_spare_lane(lane);
    }

    /// Handles the frames waiting in the receive queues `queues` (to which it adds those this
    /// thread queued frames in since) on `dp`, each unless another run is handling it (that
    /// run takes these too before it stops: see [`Inner::run_left_over`]'s fence). Whether it
    /// handled any.
    fn receive_shared(&self, dp: &mut DataPath<'_>, queues: &mut u32) -> bool {
        let mut any = false;
        loop {
            *queues |= self.port.take_queued_here();
            let wanted = self.port.rx_waiting_queues() & *queues;
            let claimed = wanted & self.receiving.load(Ordering::Relaxed);
            if claimed != 0 && self.skipped.load(Ordering::Relaxed) & claimed != claimed {
                self.skipped.fetch_or(claimed, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                continue; // looks at the claims again after the fence
            }
            let free = wanted & !claimed;
            if free == 0 {
                return any;
            }
            let q = free.trailing_zeros() as usize;
            if !self.claim_rx(q) {
                continue; // another run took it meanwhile
            }
            any |= self.receive_claimed(dp, q, queues, || ());
        }
    }

    /// Claims receive queue `q` for this run ([`Inner::receiving`]); false if another run
    /// holds it.
    fn claim_rx(&self, q: usize) -> bool {
        let bit = 1 << q;
        fence(Ordering::SeqCst);
        self.receiving.fetch_or(bit, Ordering::Acquire) & bit == 0
    }

    /// Handles the frames waiting in receive queue `q`, which this run claimed, on `dp`, runs
    /// `while_held` (a test's: [`SimDevice::hold_receive_queue_while`]), and lets go of the
    /// claim; whether there were any frames. `q` stays in `queues`, for the caller to look at
    /// again, only if another run found it claimed meanwhile ([`Inner::receive_shared`]).
    #[inline(always)]
    fn receive_claimed(&self, dp: &mut DataPath<'_>, q: usize, queues: &mut u32, while_held: impl FnOnce()) -> bool {
        let bit = 1 << q;
        let frames = self.port.take_rx(q);
        let any = !frames.is_empty();
        if any {
            self.port.process_on(dp, &mut frames.iter().map(RxFrame::view), crate::port::run_now_for_batch());
        }
        self.port.recycle_rx(q, frames);
        while_held();
        self.receiving.fetch_and(!bit, Ordering::Release);
        // Pairs with the fence in a run that found the queue taken: it queued frames before,
        // and this run, letting go, sees its mark and looks again.
        fence(Ordering::SeqCst);
        if self.skipped.load(Ordering::Relaxed) & bit != 0 {
            self.skipped.fetch_and(!bit, Ordering::Relaxed);
        } else {
            *queues &= !bit;
        }
        any
    }
}

impl crate::port::Receiver for Inner {
    fn try_receive(&self) -> bool {
        // A polling application's ACKs wait in the device's own lane, for a run of the whole
        // device to send with its reply (`Port::acks_may_wait`).
        if self.posted_whole.load(Ordering::Relaxed) || self.port.acks_may_wait() || self.port.acks_deferred() {
            let Some(mut h) = self.try_lock() else { return false };
            self.run_to_completion(&mut h);
            return true;
        }
        self.try_shared(|_| ())
    }

    fn try_receive_taken(&self, handle: &mut dyn FnMut(&mut Hca)) -> bool {
        let Some(mut h) = self.try_lock() else { return false };
        self.run_to_completion_with(&mut h, Some(handle));
        true
    }

    fn receive_waiting(&self) {
        if let Some(mut h) = self.try_lock() {
            self.run_to_completion(&mut h);
            return;
        }
        // Held shared: a run beside the others, for every queue no other run is handling.
        self.try_shared_on(u32::MAX, |_| ());
    }

    fn carrier_changed(&self, present: bool) {
        self.lock().set_carrier(present);
    }
}

/// A software ConnectX. Cloning gives another handle to the same device.
#[derive(Clone)]
pub struct SimDevice {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDevice").finish_non_exhaustive()
    }
}

/// A snapshot of the device's page and mapping accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageAccounting {
    /// Pages the firmware holds now.
    pub held: u64,
    /// Pages the firmware wants now.
    pub demand: u64,
    /// Pages given in total since reset.
    pub given_total: u64,
    /// Pages returned in total since reset.
    pub returned_total: u64,
    /// IOMMU mappings.
    pub mappings: usize,
    /// IOMMU-mapped bytes.
    pub mapped_bytes: u64,
    /// IOMMU faults since creation.
    pub iommu_faults: u64,
}

/// Number of live objects of each kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// UARs.
    pub uars: usize,
    /// PDs.
    pub pds: usize,
    /// EQs.
    pub eqs: usize,
    /// CQs.
    pub cqs: usize,
    /// MKeys.
    pub mkeys: usize,
    /// SRQs.
    pub srqs: usize,
    /// QPs.
    pub qps: usize,
}

impl SimDevice {
    /// Powers on a device with `cfg`.
    ///
    /// # Panics
    /// If the operating system refuses the device its engine thread: [`SimDevice::try_new`]
    /// returns that error instead (what the tools and `verbs` use).
    pub fn new(cfg: SimConfig) -> SimDevice {
        SimDevice::try_new(cfg).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Powers on a device with `cfg`; fails when the operating system refuses the device its
    /// engine thread (too many threads, too little memory), with the OS error's kind and a
    /// message that says what failed ("starting the sim's engine thread: ...").
    pub fn try_new(cfg: SimConfig) -> std::io::Result<SimDevice> {
        // The creating thread is usually the application's, which rings the doorbells.
        prepare_thread();
        let port = crate::port::Port::new(cfg.mac, cfg.ips.clone());
        let mut hca = Hca::new(cfg);
        hca.attach_port(port.admin_state());
        let inner = Arc::new(Inner {
            hca: RwLock::new(hca),
            port,
            posted: Mutex::new(VecDeque::new()),
            posted_any: AtomicBool::new(false),
            posted_whole: AtomicBool::new(false),
            clock: EngineClock::new(),
            receiving: AtomicU32::new(0),
            skipped: AtomicU32::new(0),
            timers_wanted: AtomicBool::new(false),
            engine_hold: Mutex::new(()),
        });
        exit::register(&inner);
        let receiver: Weak<dyn crate::port::Receiver> = Arc::downgrade(&inner) as Weak<Inner>;
        inner.port.set_receiver(receiver);
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("umlx-sim-engine".into())
            .spawn(move || engine(weak))
            .map_err(|e| std::io::Error::new(e.kind(), format!("starting the sim's engine thread: {e}")))?;
        Ok(SimDevice { inner })
    }

    /// Locks the device state. The lock is never held across a call out of the device.
    pub fn lock(&self) -> HcaGuard<'_> {
        self.inner.lock()
    }

    /// BAR0 size in bytes.
    pub fn bar0_len(&self) -> u64 {
        crate::firmware::BAR0_SIZE
    }

    /// Reads the 32-bit big-endian register at BAR0 + `offset` (host-order value).
    pub fn bar0_read32(&self, offset: u64) -> u32 {
        match self.inner.read_register(offset) {
            Some(value) => value,
            None => self.lock().bar_read32(offset),
        }
    }

    /// Writes the 32-bit big-endian register at BAR0 + `offset`.
    pub fn bar0_write32(&self, offset: u64, value: u32) {
        let mut h = self.lock();
        // A command (DESTROY_QP, a QP to RESET, TEARDOWN_HCA, a PAOS write) must not lose an
        // ACK a polling application's run left waiting (`Port::acks_may_wait`): its host has
        // seen the CQE, and a ConnectX sent that ACK long before. Nor the frames its doorbells
        // held for a burst (`port::tx_hold`).
        self.inner.send_owed_acks(&mut h);
        h.bar_write32(offset, value);
        self.inner.run_to_completion(&mut h);
    }

    /// Writes 8 bytes (big-endian `value`) at BAR0 + `offset`: doorbells. Never waits for
    /// the device: when another thread runs it, the write is posted (see the module doc).
    pub fn bar0_write64(&self, offset: u64, value: u64) {
        // A send doorbell runs beside other threads' runs of the device, unless a write posted
        // before it that needs the whole device must go first, or a polling application's ACKs
        // wait to leave with what it sends (`Port::acks_may_wait`).
        let sq_uar = Hca::sq_doorbell_uar(offset);
        match sq_uar {
            Some(uar) => {
                self.inner.port.note_send_doorbell();
                self.inner.port.ringing_send_doorbell(|| self.send_doorbell(offset, uar, value));
            }
            None => {
                self.write64_whole(offset, value);
                // A CQ's arm doorbell (the application is about to wait for an event), or any
                // other: what send doorbells held leaves now.
                self.inner.port.send_held();
            }
        }
    }

    /// [`SimDevice::bar0_write64`] of a send doorbell (of UAR `uar`).
    #[inline]
    fn send_doorbell(&self, offset: u64, uar: u32, value: u64) {
        if !self.inner.posted_whole.load(Ordering::Relaxed) && !self.inner.port.acks_deferred() {
            if !self.inner.try_shared(|dp| dp.uar_sq_doorbell(uar, value)) {
                self.inner.post(offset, value);
            }
            return;
        }
        self.write64_whole(offset, value);
    }

    /// [`SimDevice::bar0_write64`] with the whole device, or posted if another thread holds it.
    fn write64_whole(&self, offset: u64, value: u64) {
        let Some(mut h) = self.inner.try_lock() else {
            self.inner.post(offset, value);
            return;
        };
        // The doorbell is part of the run that follows it: one read of the clock serves both
        // (`port::run_now`).
        let _running = crate::port::Running::enter(&self.inner.port);
        // Writes posted before this one go first.
        self.inner.execute_posted(&mut h);
        h.bar_write64(offset, value);
        self.inner.run_to_completion(&mut h);
    }

    /// The device's Ethernet port (attach it to a [`crate::fabric::Fabric`] or a UDP wire).
    pub fn port(&self) -> crate::port::Port {
        self.inner.port.clone()
    }

    /// Transport counters (packets, retransmissions, NAKs, CQEs).
    pub fn transport_stats(&self) -> crate::transport::TransportStats {
        self.lock().transport_stats()
    }

    /// Reads PCI configuration space.
    pub fn config_read(&self, offset: usize, buf: &mut [u8]) -> Result<(), MapError> {
        let h = self.lock();
        let end = offset.checked_add(buf.len()).filter(|&e| e <= h.pci_config.len()).ok_or(MapError::Invalid)?;
        buf.copy_from_slice(&h.pci_config[offset..end]);
        Ok(())
    }

    /// Writes PCI configuration space (only the COMMAND register is writable).
    pub fn config_write(&self, offset: usize, data: &[u8]) -> Result<(), MapError> {
        let mut h = self.lock();
        let end = offset.checked_add(data.len()).filter(|&e| e <= h.pci_config.len()).ok_or(MapError::Invalid)?;
        for (i, b) in (offset..end).zip(data) {
            if i == 4 {
                h.pci_config[4] = b & 0x07; // I/O, memory, bus master
            } else if i == 5 {
                h.pci_config[5] = b & 0x05;
            }
        }
        Ok(())
    }

    /// Maps host memory for device DMA (what `VFIO_IOMMU_MAP_DMA` does).
    ///
    /// # Safety
    /// `host..host+len` must stay valid for reads and writes, and must not move, until
    /// [`SimDevice::dma_unmap`] removes the mapping or the device is dropped; the device reads and
    /// writes it concurrently with the host, so the host must not hold Rust references into it.
    pub unsafe fn dma_map(&self, iova: u64, host: *mut u8, len: u64) -> Result<(), MapError> {
        let mut h = self.lock();
        if h.dma_entry_limit.is_some_and(|l| h.iommu.mapping_count() >= l) {
            return Err(MapError::NoSpace);
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { h.iommu.map(iova, host, len, true, true) }
    }

    /// Limits the number of DMA mappings, as vfio type1's `dma_entry_limit` does (MAP_DMA then
    /// fails with ENOSPC); `None` lifts the limit. Lets tests make the host run out of DMA.
    pub fn set_dma_entry_limit(&self, limit: Option<usize>) {
        self.lock().dma_entry_limit = limit;
    }

    /// Removes a DMA mapping.
    pub fn dma_unmap(&self, iova: u64, len: u64) -> Result<(), MapError> {
        self.lock().iommu.unmap(iova, len)
    }

    /// Number of MSI-X vectors.
    pub fn irq_count(&self) -> u32 {
        self.lock().irqs.len() as u32
    }

    /// Connects MSI-X `vector` to an eventfd (the device keeps its own duplicate), or
    /// disconnects it with `None`.
    pub fn set_irq_eventfd(&self, vector: u32, fd: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
        let file = match fd {
            Some(fd) => Some(File::from(fd.try_clone_to_owned()?)),
            None => None,
        };
        let mut h = self.lock();
        let slot = h
            .irqs
            .get_mut(vector as usize)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no such MSI-X vector"))?;
        *slot = file;
        Ok(())
    }

    /// Function-level reset.
    pub fn reset(&self) {
        self.lock().reset()
    }

    /// Raises a health syndrome without the recovery-flow bit (not fatal).
    pub fn inject_health_warning(&self, synd: HealthSyndrome) {
        self.lock().inject_health_warning(synd)
    }

    /// Sets the `nic_interface` field the init segment reports (bits 10:8 of
    /// `cmdq_addr_l_sz`), as firmware does when it disables the function.
    pub fn set_nic_interface(&self, state: umlx_hwdesc::enums::NicInterface) {
        self.lock().nic_interface = state.0 & 7;
    }

    /// Injects a fatal health error (syndrome as in the health buffer).
    pub fn inject_fatal(&self, synd: HealthSyndrome) {
        self.lock().inject_fatal(synd)
    }

    /// Asks the driver for `extra` more pages than the objects need (PAGE_REQUEST), or gives
    /// back extra demand with 0.
    pub fn request_extra_pages(&self, extra: u32) {
        let mut h = self.lock();
        h.pages.set_extra(extra);
        h.rebalance_pages_pub();
    }

    /// The firmware's lifecycle state.
    pub fn hca_state(&self) -> HcaState {
        self.lock().state
    }

    /// Page and mapping accounting.
    pub fn page_accounting(&self) -> PageAccounting {
        let h = self.lock();
        PageAccounting {
            held: h.pages.held.len() as u64,
            demand: h.pages.demand(),
            given_total: h.pages.given_total,
            returned_total: h.pages.returned_total,
            mappings: h.iommu.mapping_count(),
            mapped_bytes: h.iommu.mapped_bytes(),
            iommu_faults: h.iommu.faults(),
        }
    }

    /// How many objects of each kind exist.
    pub fn object_counts(&self) -> ObjectCounts {
        let h = self.lock();
        let o = &h.objects;
        ObjectCounts {
            uars: o.uars.len(),
            pds: o.pds.len(),
            eqs: o.eqs.len(),
            cqs: o.cqs.len(),
            mkeys: o.mkeys.len(),
            srqs: o.srqs.len(),
            qps: o.qps.len(),
        }
    }

    /// The last IOMMU fault.
    pub fn last_iommu_fault(&self) -> Option<IommuFault> {
        self.lock().iommu.last_fault()
    }

    /// Device counters.
    pub fn stats(&self) -> SimStats {
        self.lock().sim_stats()
    }

    /// For tests of what happens beside another run: runs `during` while a run of the device
    /// in this thread holds QP `qpn`'s transport, as another thread's run does while it
    /// handles the QP's packets, then puts it back. False, and `during` not run, if another
    /// thread holds the whole device. `during` must not take the whole device (counters,
    /// commands): this thread holds it shared.
    #[doc(hidden)]
    pub fn hold_qp_transport_while(&self, qpn: u32, during: impl FnOnce()) -> bool {
        self.inner.try_shared(|dp| {
            let held = dp.take_transport(qpn);
            during();
            if let Some(t) = held {
                dp.put_transport(qpn, t);
            }
        })
    }

    /// For tests of what happens beside another run: runs `during` while a run of the device
    /// in this thread handles the receive queue that QP `qpn`'s frames arrive in (after it
    /// took and handled the frames waiting there, before it lets go of the queue), as another
    /// thread's run does while it handles frames there; then that run goes on as any run
    /// does. False, and `during` not run, if another thread holds the whole device or that
    /// queue. `during` must not take the whole device: this thread holds it shared.
    #[doc(hidden)]
    pub fn hold_receive_queue_while(&self, qpn: u32, during: impl FnOnce()) -> bool {
        let inner = &*self.inner;
        let q = crate::port::rx_queue_of_qp(qpn);
        let mut claimed = false;
        let ran = inner.try_shared(|dp| {
            claimed = inner.claim_rx(q);
            if claimed {
                let mut queues = 1 << q;
                inner.receive_claimed(dp, q, &mut queues, during);
                inner.receive_shared(dp, &mut queues);
            }
        });
        ran && claimed
    }

    /// For tests that nothing but the threads they run moves the device: runs `during` with
    /// the device's engine kept out (it finishes the look it is in first, and looks again
    /// after).
    #[doc(hidden)]
    pub fn hold_engine_while<T>(&self, during: impl FnOnce() -> T) -> T {
        let _hold = self.inner.engine_hold.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        during()
    }
}

#[cfg(test)]
mod tests;
