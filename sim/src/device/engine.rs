//! The device's engine thread and the clock it shares with the threads that run the device.
//!
//! This module owns what runs the device when no application thread does: the engine (time-
//! driven work, frames that arrived while another thread held the device) and
//! [`EngineClock`], the lock-free exchange by which the engine and the threads that let go of
//! the device agree on when it must next look; and the readying of a thread for the data path
//! (its lists, and for the sim's own threads their stack).

use super::Inner;
use crate::firmware::{Hca, PAGE_TOUCH_PERIOD};
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

/// What the engine and the threads that run the device tell each other about time without the
/// device lock: when the engine plans to look next, and when the device's timers are due as
/// the last thread to let go of the device left them (both in nanoseconds since `epoch`).
///
/// The two sides meet as in Dekker's algorithm: the engine notes its plan, then tries the
/// device and, finding it held, reads the timers; a thread letting go notes the timers, then
/// reads the plan. A SeqCst fence on each side between its write and its read means at least
/// one of them sees the other's write: either the thread wakes the engine for a timer due before
/// its plan, or the engine, which could not take the device, sleeps no later than that timer.
///
/// The times are nanoseconds since the sim's clock epoch (`port::nanos_since_epoch`); a thread
/// letting go passes them converted (its run clock's time, converted when read, and the
/// device's due time, converted when it changes: `Hca::timers_due_nanos`).
pub(super) struct EngineClock {
    /// When the engine looks next; 0 while it runs the device (its own run need not wake it).
    engine_wake: AtomicU64,
    /// When the timers are due, as the last run of the device left them.
    timers_due: AtomicU64,
    /// When a thread last let go of the device.
    left: AtomicU64,
    /// Whether a run on a shared borrow brought `timers_due` forward since the device was
    /// last taken whole ([`EngineClock::take_shared_armed`]).
    shared_armed: AtomicBool,
}

impl EngineClock {
    pub(super) fn new() -> EngineClock {
        // The epoch is read before any time the clock is given (a time before it would count
        // as 0).
        crate::port::clock_epoch();
        EngineClock {
            engine_wake: AtomicU64::new(0),
            timers_due: AtomicU64::new(u64::MAX),
            left: AtomicU64::new(u64::MAX),
            shared_armed: AtomicBool::new(false),
        }
    }

    /// `t` in nanoseconds since the epoch.
    fn nanos(&self, t: Instant) -> u64 {
        crate::port::nanos_since_epoch(t)
    }

    /// The engine will look at `at` unless woken; it tries the device next.
    pub(super) fn engine_plans(&self, at: Instant) {
        self.engine_wake.store(self.nanos(at), Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The engine runs the device.
    pub(super) fn engine_runs(&self) {
        self.engine_wake.store(0, Ordering::Relaxed);
    }

    /// The engine found the device held, at `now`, having planned to look at `planned`: it
    /// looks at that or when the timers are due as last left, whichever is first, but not
    /// sooner than [`ENGINE_MIN_PARK`] from now (the holder may keep the device a while, and
    /// runs the timers itself while it does). That look becomes its plan: a holder that lets
    /// go with the timers due no sooner need not wake it. (Left at `planned`, every holder
    /// letting go with the timers it last ran woke it again, tens of thousands of times a
    /// second on a busy device.) Lowering the plan loses no wake: a holder that reads the
    /// lower plan and does not wake the engine has its timers due no sooner than that look.
    pub(super) fn engine_wake_when_held(&self, now: Instant, planned: Instant) -> Instant {
        let due = self.published_due().unwrap_or(planned);
        let wake = due.min(planned).max(now + ENGINE_MIN_PARK);
        self.engine_plans(wake);
        wake
    }

    /// Whether a run on a shared borrow brought the published due time forward since the last
    /// call (made by a thread that holds the whole device, so no such run is under way).
    pub(super) fn take_shared_armed(&self) -> bool {
        self.shared_armed.load(Ordering::Relaxed) && self.shared_armed.swap(false, Ordering::Relaxed)
    }

    /// When the timers are due as the last thread to let go of the device left them; `None`
    /// before any thread has.
    pub(super) fn published_due(&self) -> Option<Instant> {
        self.published(&self.timers_due)
    }

    /// The instant a time stored in nanoseconds since the epoch stands for; `None` while it
    /// holds `u64::MAX` (nothing published yet).
    fn published(&self, at: &AtomicU64) -> Option<Instant> {
        match at.load(Ordering::Relaxed) {
            u64::MAX => None,
            nanos => crate::port::instant_since_epoch(nanos),
        }
    }

    /// The engine woke at `now`, having planned (and noted) to look next at `planned`: whether
    /// it may leave the device alone, and until when (`Some(wake)`, noted as its plan), or must
    /// take it (`None`).
    ///
    /// It leaves it alone while a thread let go of it less than [`ENGINE_GRACE`] ago (an
    /// application that rings doorbells runs it every few microseconds): that thread runs the
    /// timers when they fall due, and takes the frames and posted writes left waiting when it
    /// lets go (the module doc), so what waits now is on its way to it. The engine looks again
    /// when the grace ends if something waits, else when the timers are due or the grace ends,
    /// whichever is later. While an application polls the wire (`polled`), it looks again
    /// when the timers are due after the grace, else at its plan: that application runs the
    /// device at each frame it takes and each doorbell it rings, and its next run takes what
    /// waits and the timers due (a look at an empty wire too handles the frames waiting:
    /// `Port::poll_wire`; looks at each grace's end made the engine of a `send-lat`
    /// server wake twice at each of the firmware's page touches). Otherwise it leaves it alone
    /// when nothing waits (`nothing_waits`: no frame, no posted write, no ACK left unsent) and a
    /// thread that ran the device left the timers due later than now, until then. It takes it
    /// when something waits, when the timers are due, or when no thread has left them yet.
    /// Every wake is no later than `planned`.
    ///
    /// (Taking the device for nothing, the engine made an application that rang a doorbell
    /// meanwhile post it for the engine, and the engine then ran the device for that
    /// application, doorbell after doorbell, while the application waited for completions.
    /// Taking it when the timers fell due or a frame was on its way to an application's run
    /// had the same effect: in an in-process stream of 64-byte WRITEs, the responder's engine
    /// took a full window of WRITEs from the application a thousand times a second, each a
    /// 16 - 64 microsecond stall of the application, which yielded 64 - 255 times per stall.)
    pub(super) fn engine_idle_until(
        &self,
        now: Instant,
        planned: Instant,
        nothing_waits: bool,
        polled: bool,
    ) -> Option<Instant> {
        let due = self.published_due()?;
        if let Some(grace_ends) = self.published(&self.left).map(|t| t + ENGINE_GRACE)
            && grace_ends > now
        {
            let wake = match (polled, nothing_waits) {
                (true, _) if due > grace_ends => due,
                (true, _) => planned,
                (false, true) => due.max(grace_ends),
                (false, false) => grace_ends,
            }
            .min(planned);
            self.engine_plans(wake);
            return Some(wake);
        }
        if !nothing_waits || due <= now {
            return None;
        }
        let wake = due.min(planned);
        self.engine_plans(wake);
        Some(wake)
    }

    /// A thread lets go of the device at `now` with its timers due at `due` (both in
    /// nanoseconds since the epoch): whether the engine must be woken for them (it plans to
    /// look later, and is not running the device).
    pub(super) fn leaving(&self, now: u64, due: u64) -> bool {
        self.left.store(now, Ordering::Relaxed);
        self.timers_due.store(due, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        due < self.engine_wake.load(Ordering::Relaxed)
    }

    /// [`EngineClock::leaving`] for a run on a shared borrow of the device, which armed a timer
    /// due at `armed` (if any). Such runs do not run the timers, so they only ever bring the
    /// published due time forward; the next run of the whole device runs them and publishes
    /// it anew. Returns whether the engine must be woken, and whether the timers are due now.
    ///
    /// The engine is woken only for a timer this run brought before its plan. A due time the
    /// run found there was there when the engine last planned (it read it after noting its
    /// plan, or the run that published it read the plan: [`EngineClock`]), and the engine
    /// planned with it. Timers due now are run by a thread that takes the whole device after
    /// ([`Inner::run_left_over`]). (Woken at every run that found the timers due and could not
    /// take the device to run them, the engine of a device two threads ran woke 40,000 times a
    /// second for nothing.)
    ///
    /// What every run of every thread writes here is written only when it changes what is
    /// there (the time of leaving by [`LEFT_PRECISION`] or more, the due time sooner): a line
    /// each thread writes at every run would move between their cores at every run.
    pub(super) fn leaving_shared(&self, now: u64, armed: Option<Instant>) -> (bool, bool) {
        if now.saturating_sub(self.left.load(Ordering::Relaxed)) >= LEFT_PRECISION.as_nanos() as u64 {
            self.left.store(now, Ordering::Relaxed);
        }
        let mut lowered = None;
        if let Some(armed) = armed.map(|t| self.nanos(t))
            && armed < self.timers_due.load(Ordering::Relaxed)
        {
            self.timers_due.fetch_min(armed, Ordering::Relaxed);
            self.shared_armed.store(true, Ordering::Relaxed);
            lowered = Some(armed);
        }
        fence(Ordering::SeqCst);
        let wake = lowered.is_some_and(|armed| armed < self.engine_wake.load(Ordering::Relaxed));
        (wake, self.timers_due.load(Ordering::Relaxed) <= now)
    }
}

/// How far the time a shared run let go of the device may lag ([`EngineClock::leaving_shared`]):
/// a small part of [`ENGINE_GRACE`], which it is compared with.
pub(super) const LEFT_PRECISION: Duration = Duration::from_micros(2);
/// The longest the engine sleeps.
pub(super) const ENGINE_IDLE_PARK: Duration = Duration::from_millis(1);
/// The longest the engine sleeps while an application polls the wire
/// ([`crate::port::Port::poll_wire`]). That application runs the device itself, and sends the
/// ACKs its polls leave waiting with what it posts next or at its next look at an empty wire;
/// the engine sends them only when a look finds no poll since the one before (the application
/// stopped), at most twice this after the poll that left them, long before a requester
/// retransmits. Each wake of the engine takes a CPU that a busy-polling application may be
/// using: with the wire's receive thread's, a thousand a second each took 1 - 2% of a
/// `send-lat` application's turns, and with them its 99th percentile.
pub(super) const ENGINE_POLLED_PARK: Duration = Duration::from_millis(10);
/// The shortest time between two runs of the timers; a QP that needs service whatever the
/// time is served this often.
pub(super) const ENGINE_MIN_PARK: Duration = Duration::from_micros(100);
/// How long after a thread let go of the device the engine leaves it to that thread's next run
/// ([`EngineClock::engine_idle_until`]). Shorter than [`ENGINE_MIN_PARK`], the soonest the
/// timers are due after a run: the grace then ends before them, and a thread letting go with
/// them due no sooner need not wake the engine.
pub(super) const ENGINE_GRACE: Duration = Duration::from_micros(50);

/// Runs the device's timers at `now` and notes when they are next due.
pub(super) fn run_timers(h: &mut Hca, now: Instant) {
    h.tick(now);
    // Every time-driven task is in `next_due` (the longest wait is the firmware's page touch).
    // Running the timers a millisecond after the last run whatever was due took a device that
    // threads ran side by side whole a thousand times a second, for nothing.
    let wait = h
        .next_due(now)
        .map_or(PAGE_TOUCH_PERIOD, |due| due.saturating_duration_since(now))
        .clamp(ENGINE_MIN_PARK, PAGE_TOUCH_PERIOD);
    h.timers_due = now + wait;
}

/// Readies a thread for the data path: its buffer and transmit lists allocated. Otherwise a
/// thread that runs a device only now and then would still be allocating millions of messages
/// into a run, the first time a larger batch came its way.
pub(crate) fn prepare_thread() {
    crate::buffers::prepare_thread();
    crate::port::prepare_thread();
}

/// How much of a device thread's stack [`prepare_own_thread`] touches: four times the deepest a
/// device run was seen to go (16 KiB: a run, the run of the peer it sets off on the in-process
/// fabric, and the frame parser in it).
const STACK_PREPARED: usize = 64 * 1024;

/// [`prepare_thread`] for a thread of the sim's own (a device's engine, a UDP wire's receive
/// thread, a fabric's timer thread, each of which runs devices), whose stack is the sim's
/// memory too: its top [`STACK_PREPARED`] bytes are touched
/// now. An engine otherwise first ran a device as deep as that millions of messages into a
/// stream (pagemap around `umlx bench sim`'s 10 M WRITEs: two new pages of an engine's stack,
/// 8 - 16 KiB below its top), and took the page faults, and the memory, then.
pub(crate) fn prepare_own_thread() {
    prepare_thread();
    touch_stack();
}

/// Writes [`STACK_PREPARED`] bytes of stack below the caller's frame.
#[inline(never)]
fn touch_stack() {
    let mut below = [0u8; STACK_PREPARED];
    std::hint::black_box(&mut below);
}

/// The engine: time-driven device work, and frames no other thread handled, until the device
/// is dropped. The port wakes it when a frame waits for it.
///
/// It never queues for the device lock: a thread that holds it runs the device to completion,
/// which takes the frames waiting and runs the timers when due, and looks again for posted
/// writes and queued frames after it lets go. So the engine sleeps until the timers are next
/// due (a millisecond at most, [`ENGINE_POLLED_PARK`] while an application polls the wire); a
/// run that leaves them due sooner than that wakes it. Waking
/// to find no frame and no posted write waiting, and the timers left due later by a thread
/// that ran the device meanwhile, it does not take the device at all.
pub(super) fn engine(weak: Weak<Inner>) {
    prepare_own_thread();
    if let Some(inner) = weak.upgrade() {
        inner.port.set_waker(std::thread::current());
    }
    // The wire's polls counted at the last look (`Port::polls`).
    let mut polls_seen = 0;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let hold = inner.engine_hold.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let wake = engine_look(&inner, &mut polls_seen);
        drop(hold);
        drop(inner);
        std::thread::park_timeout(wake.saturating_duration_since(Instant::now()));
    }
}

/// One look of the engine at the device: what it runs, if anything; when it looks next.
/// `polls_seen`: the wire's polls counted at the last look, updated.
fn engine_look(inner: &Inner, polls_seen: &mut u64) -> Instant {
    // Noted before the lock is tried: a holder that lets go later compares with it.
    let now = Instant::now();
    let polls = inner.port.polls();
    let polled = polls != *polls_seen;
    *polls_seen = polls;
    // Frames send doorbells held for one that did not come (`port::tx_hold`): sent when the
    // application stopped polling, or long after they were held.
    if polled {
        inner.port.send_held_after(crate::port::TX_HOLD_LONGEST);
    } else {
        inner.port.send_held();
    }
    let park = if polled { ENGINE_POLLED_PARK } else { ENGINE_IDLE_PARK };
    let planned = now + park;
    inner.clock.engine_plans(planned);
    // Frames, posted writes, or ACKs a polling application left unsent once it stopped polling
    // (`Port::acks_may_wait`; while it polls, they leave with what it does next).
    let nothing_waits = !inner.port.rx_waiting()
        && !inner.posted_any.load(Ordering::Relaxed)
        && (polled || !inner.port.acks_deferred());
    if let Some(wake) = inner.clock.engine_idle_until(now, planned, nothing_waits, polled) {
        return wake;
    }
    match inner.try_lock() {
        Some(mut h) => {
            // While the engine runs the device, its own run need not wake it: it looks at
            // the timers when it is done.
            inner.clock.engine_runs();
            h.stats.engine_runs += 1;
            // A timer armed since the last run may be due before `timers_due`.
            let now = Instant::now();
            if h.next_due(now).is_some_and(|due| due <= now) {
                h.timers_due = now;
            }
            inner.run_to_completion(&mut h);
            // The buffers the run was given back serve the threads that run the data path
            // (`buffers`: an engine's list would keep them from those threads).
            crate::buffers::release();
            let wake = h.timers_due.min(Instant::now() + park);
            inner.clock.engine_plans(wake);
            wake
        }
        None => inner.clock.engine_wake_when_held(Instant::now(), planned),
    }
}
