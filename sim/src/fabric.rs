//! An in-process Ethernet fabric connecting ports, with seeded impairments.
//!
//! A [`Fabric`] delivers each frame to the port whose MAC is the destination (every other
//! port for broadcast and multicast). Its [`FabricConfig`] makes it lose, duplicate, corrupt,
//! delay and reorder frames with probabilities drawn from one seeded generator, so a test can
//! ask for "1% loss" and get the same decisions for the same sequence of frames. Delayed and
//! reordered frames are delivered by the fabric's own thread; everything else is delivered in
//! the sender's thread, after the sending device dropped its lock.

use crate::port::{Port, PortInner, fill_all};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};
use umlx_wire::packet::Checksums;

/// Impairments of a fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FabricConfig {
    /// Seed of the generator behind every random choice.
    pub seed: u64,
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame is held back so that later frames overtake it.
    pub reorder: f64,
    /// Probability that one byte of a frame is flipped (the receiver's ICRC check drops it).
    pub corrupt: f64,
    /// Fixed delay of every frame.
    pub delay: Duration,
    /// How long a reordered frame is held back (default 200 µs when zero).
    pub reorder_delay: Duration,
}

/// Counters of a fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames offered by ports.
    pub offered: u64,
    /// Frames delivered to ports.
    pub delivered: u64,
    /// Frames lost on purpose.
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames no port took (unknown destination MAC).
    pub unroutable: u64,
}

struct State {
    cfg: FabricConfig,
    rng: u64,
    held: Vec<(Instant, u64, usize, Vec<u8>)>,
    seq: u64,
    stats: FabricStats,
}

pub(crate) struct FabricShared {
    ports: Mutex<Vec<Weak<PortInner>>>,
    state: Mutex<State>,
    timer: Mutex<Option<Thread>>,
}

/// An in-process fabric. Cloning gives another handle to the same fabric; its thread stops
/// when the last handle is dropped.
#[derive(Clone)]
pub struct Fabric {
    shared: Arc<FabricShared>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fabric {
    /// A fabric with the given impairments.
    ///
    /// # Panics
    /// If the operating system refuses the fabric its timer thread: [`Fabric::try_new`]
    /// returns that error instead (what the tools use).
    pub fn new(cfg: FabricConfig) -> Fabric {
        Fabric::try_new(cfg).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A fabric with the given impairments; fails when the operating system refuses the fabric
    /// its timer thread, with the OS error's kind and a message that says what failed.
    pub fn try_new(cfg: FabricConfig) -> std::io::Result<Fabric> {
        let shared = Arc::new(FabricShared {
            ports: Mutex::new(Vec::new()),
            state: Mutex::new(State {
                cfg,
                rng: cfg.seed ^ 0x9E37_79B9_7F4A_7C15,
                held: Vec::new(),
                seq: 0,
                stats: FabricStats::default(),
            }),
            timer: Mutex::new(None),
        });
        let weak = Arc::downgrade(&shared);
        let h = std::thread::Builder::new()
            .name("umlx-sim-fabric".into())
            .spawn(move || timer(weak))
            .map_err(|e| std::io::Error::new(e.kind(), format!("starting the fabric's timer thread: {e}")))?;
        *lock(&shared.timer) = Some(h.thread().clone());
        Ok(Fabric { shared })
    }

    /// A fabric without impairments.
    pub fn perfect() -> Fabric {
        Fabric::new(FabricConfig::default())
    }

    /// Connects `port` to this fabric (disconnecting it from any other wire).
    pub fn attach(&self, port: &Port) {
        lock(&self.shared.ports).push(Arc::downgrade(&port.inner));
        port.set_fabric(self.shared.clone());
    }

    /// Changes the impairments (the generator keeps its state).
    pub fn set_config(&self, cfg: FabricConfig) {
        lock(&self.shared.state).cfg = cfg;
    }

    /// Counters.
    pub fn stats(&self) -> FabricStats {
        lock(&self.shared.state).stats
    }
}

impl FabricConfig {
    /// Whether frames cross unharmed and at once (nothing lost, duplicated, corrupted, delayed
    /// or reordered): the generator is then never drawn from.
    fn is_perfect(&self) -> bool {
        self.loss <= 0.0 && self.duplicate <= 0.0 && self.reorder <= 0.0 && self.corrupt <= 0.0 && self.delay.is_zero()
    }
}

impl State {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

impl FabricShared {
    /// A port sends a frame. The ports it reaches at once are added to `reached`: the sender
    /// notifies them ([`PortInner::notify`]) after its whole batch, so that a receiver handles
    /// frames sent together together.
    pub(crate) fn send(&self, from: &PortInner, mut frame: Vec<u8>, reached: &mut Reached) {
        let mut copies = 1;
        let mut hold = None;
        {
            let mut s = lock(&self.state);
            s.stats.offered += 1;
            let cfg = s.cfg;
            if s.chance(cfg.loss) {
                s.stats.lost += 1;
                return;
            }
            if s.chance(cfg.corrupt) && frame.len() > 14 {
                let r = s.next() as usize;
                let i = 14 + r % (frame.len() - 14);
                frame[i] ^= 1 << ((r >> 32) % 8);
                s.stats.corrupted += 1;
            }
            if s.chance(cfg.duplicate) {
                copies = 2;
                s.stats.duplicated += 1;
            }
            let mut delay = cfg.delay;
            if s.chance(cfg.reorder) {
                s.stats.reordered += 1;
                delay += if cfg.reorder_delay.is_zero() { Duration::from_micros(200) } else { cfg.reorder_delay };
            }
            if !delay.is_zero() {
                hold = Some(Instant::now() + delay);
            }
            if let Some(due) = hold {
                for _ in 0..copies {
                    s.seq += 1;
                    let seq = s.seq;
                    s.held.push((due, seq, from as *const PortInner as usize, frame.clone()));
                }
            }
        }
        if hold.is_some() {
            if let Some(t) = &*lock(&self.timer) {
                t.unpark();
            }
            return;
        }
        for _ in 1..copies {
            self.deliver(from as *const PortInner as usize, frame.clone(), reached);
        }
        self.deliver(from as *const PortInner as usize, frame, reached);
    }

    /// [`FabricShared::send`] for a batch of frames (`frames` is left empty). On a perfect
    /// fabric the fabric's state and its list of ports are locked once for the batch, not once
    /// per frame, a batch for one port is queued under one lock of that port's queue, and
    /// frames whose integrity fields their port left uncomputed ([`Checksums::Defer`]) cross
    /// without them (nothing here can damage them); an impaired fabric has them filled first,
    /// so that its receivers can tell what it corrupted.
    pub(crate) fn send_batch(
        &self,
        from: &PortInner,
        frames: &mut Vec<Vec<u8>>,
        checksums: Checksums,
        reached: &mut Reached,
    ) {
        if frames.is_empty() {
            return;
        }
        {
            let mut s = lock(&self.state);
            if !s.cfg.is_perfect() {
                drop(s);
                if checksums == Checksums::Defer {
                    fill_all(frames);
                }
                frames.drain(..).for_each(|f| self.send(from, f, reached));
                return;
            }
            s.stats.offered += frames.len() as u64;
        }
        let from = from as *const PortInner as usize;
        let (mut delivered, mut unroutable) = (0, 0);
        {
            let ports = lock(&self.ports);
            if let Some(p) = one_unicast_destination(&ports, from, frames) {
                delivered = frames.len() as u64;
                p.enqueue_all(frames.drain(..), checksums);
                reached.add(p);
            }
            for f in frames.drain(..) {
                match deliver_to(&ports, from, f, checksums, reached) {
                    0 => unroutable += 1,
                    n => delivered += n,
                }
            }
        }
        let mut s = lock(&self.state);
        s.stats.delivered += delivered;
        s.stats.unroutable += unroutable;
    }

    /// Queues `frame` at the ports it is for (see [`FabricShared::send`] for `reached`).
    fn deliver(&self, from: usize, frame: Vec<u8>, reached: &mut Reached) {
        let n = deliver_to(&lock(&self.ports), from, frame, Checksums::Compute, reached);
        let mut s = lock(&self.state);
        if n == 0 {
            s.stats.unroutable += 1;
        }
        s.stats.delivered += n;
    }
}

/// The one port every frame of `frames` is for, if they are all unicast to the same MAC (not
/// the sender's).
fn one_unicast_destination(ports: &[Weak<PortInner>], from: usize, frames: &[Vec<u8>]) -> Option<Arc<PortInner>> {
    let dst = frames.first()?.get(0..6)?;
    if dst[0] & 1 != 0 || frames.iter().any(|f| f.get(0..6) != Some(dst)) {
        return None;
    }
    others(ports, from).find(|p| p.mac == dst)
}

/// The live ports of `ports` other than the sender's (`from`).
fn others(ports: &[Weak<PortInner>], from: usize) -> impl Iterator<Item = Arc<PortInner>> + '_ {
    ports.iter().filter(move |w| w.as_ptr() as usize != from).filter_map(Weak::upgrade)
}

/// Queues `frame` at the ports of `ports` it is for (not the sender's, `from`), adding them to
/// `reached`; how many took it. `checksums` says whether its integrity fields were computed.
fn deliver_to(
    ports: &[Weak<PortInner>],
    from: usize,
    frame: Vec<u8>,
    checksums: Checksums,
    reached: &mut Reached,
) -> u64 {
    let Some(dst) = frame.get(0..6) else { return 0 };
    let group = dst[0] & 1 != 0;
    let mut n = 0;
    // Each receiver but the last gets a copy; the last (the only one, for unicast) gets the
    // frame itself.
    let mut last: Option<Arc<PortInner>> = None;
    for p in others(ports, from) {
        if group || p.mac == dst {
            if let Some(prev) = last.replace(p) {
                prev.enqueue(frame.clone(), checksums);
                reached.add(prev);
            }
            n += 1;
        }
    }
    if let Some(p) = last {
        p.enqueue(frame, checksums);
        reached.add(p);
    }
    n
}

/// The ports a batch of frames reached, each once, to be notified after the batch: the first
/// held in place (a unicast batch reaches one port), the others in a list that only a second
/// port (a broadcast) allocates.
#[derive(Default)]
pub(crate) struct Reached {
    first: Option<Arc<PortInner>>,
    more: Vec<Arc<PortInner>>,
}

impl std::fmt::Debug for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reached").field("ports", &(self.first.iter().count() + self.more.len())).finish()
    }
}

impl Reached {
    /// Notes that a frame reached port `p`.
    pub(crate) fn add(&mut self, p: Arc<PortInner>) {
        match &self.first {
            None => self.first = Some(p),
            Some(f) if Arc::ptr_eq(f, &p) => {}
            Some(_) => {
                if !self.more.iter().any(|r| Arc::ptr_eq(r, &p)) {
                    self.more.push(p);
                }
            }
        }
    }

    /// Has each port handle what reached it ([`PortInner::notify`]).
    pub(crate) fn notify(self) {
        for p in self.first.into_iter().chain(self.more) {
            p.notify();
        }
    }
}

fn timer(weak: Weak<FabricShared>) {
    // It delivers held frames, and so runs the devices they reach, as a device's own threads do.
    crate::device::prepare_own_thread();
    // The frames due at one look; kept, with its allocation, from look to look.
    let mut due = Vec::new();
    loop {
        let Some(f) = weak.upgrade() else { return };
        let now = Instant::now();
        let next = {
            let mut s = lock(&f.state);
            s.held.sort_by_key(|h| (h.0, h.1));
            let n = s.held.partition_point(|h| h.0 <= now);
            due.extend(s.held.drain(..n));
            s.held.first().map(|h| h.0)
        };
        let mut reached = Reached::default();
        for (_, _, from, frame) in due.drain(..) {
            f.deliver(from, frame, &mut reached);
        }
        reached.notify();
        drop(f);
        let wait = next.map_or(Duration::from_millis(5), |t| t.saturating_duration_since(Instant::now()));
        std::thread::park_timeout(wait.max(Duration::from_micros(20)));
    }
}
