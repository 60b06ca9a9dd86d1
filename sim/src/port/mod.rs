//! The device's Ethernet port: what connects the transport to a wire.
//!
//! A [`Port`] has a MAC and the device's addresses. It owns the frames in both directions
//! outside the device lock: a frame arriving from a wire waits in its receive queue, and the
//! port asks its device (`Receiver`) to handle it at once in the arriving thread; when another
//! thread holds the device, that thread or the device's engine thread (which the port wakes)
//! takes it. An application that polls the wire itself ([`Port::poll_wire`]) has the device
//! handle what it took where the frames lie, not queued, when it can take the whole device at
//! once. Frames the transport built are handed to the port under the device lock. It answers
//! ARP and IPv6 neighbour solicitation for its own addresses ([`umlx_wire::arp`]), drops and
//! counts malformed frames ([`WireStats`]), and can record every frame sent and received in a
//! pcap.
//!
//! The port is the device's egress: the transport builds its frames without their integrity
//! fields ([`Checksums::Defer`]), and the port fills the IPv4 header checksum and the ICRC
//! ([`fill_checksums`]) before a frame crosses anything that could damage or record it: a
//! socket, an impaired fabric, a pcap. A frame handed to a port of the same process over a
//! perfect fabric, or looped back inside the adapter, crosses nothing: it travels without them
//! and its receiver parses it without hashing it ([`parse_frame_trusted`]), as an operating
//! system's loopback device passes packets whose checksums were never computed. Every frame
//! from a wire, a test or a fabric that can corrupt is verified.
//!
//! Wires: an in-process [`crate::fabric::Fabric`]; a UDP socket carrying one Ethernet frame
//! per datagram to and from one peer (QEMU's `-netdev socket,udp=...,localaddr=...`
//! encapsulation), so that another process or a VM can be the peer; or a [`LoopbackLan`], the
//! same encapsulation between any number of processes on one machine. The UDP sockets ask for
//! large buffers (`setsockopt`), so that a burst of a long message survives while the
//! receiving sim's thread waits for a core, and move datagrams in batches (`sendmmsg`,
//! `recvmmsg`, `poll`; the one datagram of a ping-pong's turn with `send`, and from a peer on
//! this machine with `recv`): these calls are the `unsafe` of the port, all in its `socket`
//! module. Only IP frames exactly as long as they say go segmented, one datagram for several.
//! The frames of send doorbells an application rings back to back wait for one datagram
//! together (`tx_hold`).

use crate::fabric::{FabricShared, Reached};
use crate::firmware::{DataPath, Hca};
use crate::transport::RxHold;
use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime};
use umlx_wire::packet::{
    Checksums, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, MacAddr, fill_checksums, parse_frame_trusted,
};
use umlx_wire::pcap::PcapWriter;
use umlx_wire::{WireStats, arp, parse_frame_verified};

mod lan;
mod socket;
mod tx_hold;
pub use lan::LoopbackLan;
use lan::{Lan, LanSendCache};
use socket::*;
pub(crate) use tx_hold::TX_HOLD_LONGEST;
use tx_hold::TxHold;

/// A frame waiting in a port's receive queue.
pub(crate) struct RxFrame {
    pub(crate) bytes: Vec<u8>,
    /// [`Checksums::Defer`]: a frame of this process's transport that crossed nothing, its
    /// integrity fields never computed; [`Checksums::Compute`]: anything else, verified.
    pub(crate) checksums: Checksums,
}

impl RxFrame {
    /// The frame and its [`RxFrame::checksums`], as [`Port::process`] takes them.
    pub(crate) fn view(&self) -> (&[u8], Checksums) {
        (&self.bytes, self.checksums)
    }
}

/// Fills the integrity fields of the transport's frames (see the module doc). A frame that is
/// not RoCE (an ARP reply) has none and is left as it is.
pub(crate) fn fill_all(frames: &mut [Vec<u8>]) {
    for f in frames {
        // Err only for a frame that is not RoCE: nothing to fill.
        let _ = fill_checksums(f);
    }
}

/// Where the port's frames go.
#[derive(Clone)]
enum Link {
    Down,
    Fabric(Arc<FabricShared>),
    Udp { sock: Arc<WireSocket>, peer: SocketAddr },
    Lan(Arc<Lan>),
}

impl Link {
    /// The UDP socket the link receives on.
    fn socket(&self) -> Option<&Arc<WireSocket>> {
        match self {
            Link::Udp { sock, .. } => Some(sock),
            Link::Lan(lan) => Some(&lan.sock),
            Link::Down | Link::Fabric(_) => None,
        }
    }

    /// Whether the link receives on `sock` (a receive thread's test that its port is still on
    /// its socket).
    fn receives_on(&self, sock: &Arc<WireSocket>) -> bool {
        self.socket().is_some_and(|s| Arc::ptr_eq(s, sock))
    }
}

/// The device behind a port: handles the frames waiting in the port's receive queue.
pub(crate) trait Receiver: Send + Sync {
    /// Handles the waiting frames now in this thread, unless another thread holds the device
    /// (then returns false, and the frames wait for that thread or the engine).
    fn try_receive(&self) -> bool;
    /// Runs the device to completion now in this thread, as [`Receiver::try_receive`] does,
    /// its first look at the receive queues also running `handle` (which hands the device
    /// frames this thread took from the wire and did not queue) after the frames queued
    /// before them; false, and `handle` not run, if another thread holds the device.
    fn try_receive_taken(&self, handle: &mut dyn FnMut(&mut Hca)) -> bool;
    /// Handles the frames waiting in every receive queue, whichever thread queued them, now in
    /// this thread, but those of a queue another run has claimed (that run takes them) or all
    /// of them while another thread holds the whole device (that thread takes them as it lets
    /// go).
    fn receive_waiting(&self);
    /// The port's cable went in (`present`) or out ([`Port::disconnect`], a connect after it):
    /// the device's link follows. Waits for the device; never called from a run of it.
    fn carrier_changed(&self, present: bool);
}

thread_local! {
    /// The ports whose devices this thread holds while it runs them to completion (innermost
    /// last): a frame for one of them is taken by that run before its lock is released.
    static RUNNING: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The receive queues this thread queued frames in, by port (bit `q` for queue `q`), since
    /// its last run of the port's device took note ([`Port::take_queued_here`]).
    static QUEUED_HERE: std::cell::RefCell<Vec<(usize, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The port whose device this thread now runs on frames it took from the port's wire
    /// itself, an application's [`Port::poll_wire`] or the wire's receive thread (0: none);
    /// see [`Port::acks_may_wait`].
    static TOOK_FROM_WIRE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The port whose device this thread now runs for a send doorbell its application rang
    /// (0: none); see [`Port::ringing_send_doorbell`].
    static SEND_DOORBELL_RUN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The time this thread's runs of devices go by ([`run_now`]), with its
    /// [`nanos_since_epoch`]; `None` until a run needs it and again once the run has received
    /// frames or the outermost run has ended.
    static RUN_CLOCK: std::cell::Cell<Option<(Instant, u64)>> = const { std::cell::Cell::new(None) };
}

/// The instant the sim's lock-free time stamps count from ([`nanos_since_epoch`]).
static CLOCK_EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// `t` in nanoseconds since the sim's clock epoch (0 for an instant before it): how the threads
/// that run a device and its engine exchange times without a lock (`device::EngineClock`).
/// A conversion costs a subtraction of two `timespec`s and a division into a `Duration` (about
/// 13 ns here), so the run clock converts its time once, when it reads it.
pub(crate) fn nanos_since_epoch(t: Instant) -> u64 {
    let d = t.saturating_duration_since(*CLOCK_EPOCH);
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

/// The sim's clock epoch, read (and so fixed) on the first call.
pub(crate) fn clock_epoch() -> Instant {
    *CLOCK_EPOCH
}

/// The instant `nanos` after the sim's clock epoch (the inverse of [`nanos_since_epoch`]).
pub(crate) fn instant_since_epoch(nanos: u64) -> Option<Instant> {
    CLOCK_EPOCH.checked_add(std::time::Duration::from_nanos(nanos))
}

/// Whether this thread runs a device now (holds it, whole or shared, in a run).
pub(crate) fn running_any() -> bool {
    RUNNING.with(|r| !r.borrow().is_empty())
}

/// The time for what this thread's run of a device does now: the clock is read when the run
/// first needs the time and then only for each batch of frames it receives, or of writes
/// other threads posted for it ([`run_clock_moves`]); outside a run, every call reads it. A run's doorbell, the timers
/// it arms and its look at the due timers before it lets go took a read each (about 40 ns
/// apiece here), two to four per one-way trip of a ping-pong. Sending is not waited on, so the
/// time stays that of the run's start or of its last batch: what a timer armed or found due
/// then is off by at most one batch's handling, as the frames of one doorbell already share
/// the time it was rung.
pub(crate) fn run_now() -> Instant {
    run_clock().0
}

/// [`run_now`], and the same time in [`nanos_since_epoch`].
pub(crate) fn run_clock() -> (Instant, u64) {
    RUN_CLOCK.with(|c| match c.get() {
        Some(t) => t,
        None => {
            let now = Instant::now();
            let t = (now, nanos_since_epoch(now));
            if running_any() {
                c.set(Some(t));
            }
            t
        }
    })
}

/// The run is about to handle a batch of received frames (or writes other threads posted
/// meanwhile): [`run_now`] reads the clock again.
pub(crate) fn run_clock_moves() {
    RUN_CLOCK.with(|c| c.set(None));
}

/// The time for a batch of received frames: the clock read anew ([`run_clock_moves`]), and kept
/// for what the run does next.
pub(crate) fn run_now_for_batch() -> Instant {
    run_clock_moves();
    run_now()
}

/// Marks a port's device as run to completion by this thread until dropped.
pub(crate) struct Running(usize);

impl Running {
    pub(crate) fn enter(port: &Port) -> Running {
        let id = Arc::as_ptr(&port.inner).addr();
        RUNNING.with(|r| r.borrow_mut().push(id));
        Running(id)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            if let Some(i) = r.iter().rposition(|&p| p == self.0) {
                r.remove(i);
            }
            if r.is_empty() {
                run_clock_moves(); // the next run reads the clock anew
            }
        });
    }
}

/// The frames that arrived and wait to be handled, and a spare queue (empty, with its
/// allocation) that takes their place when a device takes them ([`Port::take_rx`]): frames
/// arriving meanwhile (from a device this device's run runs) need no new allocation.
#[derive(Default)]
struct RxQueue {
    frames: VecDeque<RxFrame>,
    spare: VecDeque<RxFrame>,
}

/// Receive queues of a port. A frame waits in the one its destination QP steers it to
/// ([`rx_queue_of`]), as a NIC's receive side scaling spreads flows over queues: a QP's
/// packets stay in order in one queue, and runs of the device in several threads can each
/// handle a queue of their own at once.
pub(crate) const RX_QUEUES: usize = 4;

/// The receive queue a frame waits in: by its destination QP if it is RoCE, else the first.
fn rx_queue_of(frame: &[u8]) -> usize {
    umlx_wire::packet::steering_dest_qp(frame).map_or(0, rx_queue_of_qp)
}

/// Whether a frame is an RC request, which its responder answers with an ACK (or a NAK, or
/// the responses of a READ or atomic): the frames whose ACKs may wait ([`Port::acks_may_wait`]).
fn is_rc_request(frame: &[u8]) -> bool {
    umlx_wire::packet::steering_bth(frame)
        .and_then(|bth| bth.opcode.info())
        .is_some_and(|op| op.transport == umlx_wire::packet::Transport::Rc && op.operation.is_request())
}

/// The receive queue the frames for QP `qpn` wait in.
pub(crate) fn rx_queue_of_qp(qpn: u32) -> usize {
    qpn as usize % RX_QUEUES
}

pub(crate) struct PortInner {
    pub(crate) mac: MacAddr,
    ips: Vec<IpAddr>,
    rx: [crate::CacheLines<Mutex<RxQueue>>; RX_QUEUES],
    /// Which of `rx` hold frames (bit `q` for queue `q`): read without their locks by every
    /// thread that lets go of the device, so that a frame queued while it held the device is
    /// not left waiting.
    rx_waiting: AtomicU32,
    link: Mutex<Link>,
    /// Whether `link` is a UDP wire (a socket): read without its lock at each run of the
    /// device, which then has its transport compute the frames' checksums as it builds them.
    on_socket: AtomicBool,
    stats: Mutex<WireStats>,
    pcap: Mutex<Option<PcapWriter<BufWriter<File>>>>,
    /// Whether `pcap` holds a writer (read without its lock by every frame).
    recording: std::sync::atomic::AtomicBool,
    waker: Mutex<Option<Thread>>,
    receiver: std::sync::OnceLock<Weak<dyn Receiver>>,
    /// Held by whichever thread sends: the view of `link` its sends use, and what they count.
    tx: Mutex<Transmit>,
    /// Held by whichever thread takes datagrams from the UDP wire's socket; holds the view of
    /// `link` those looks use ([`WireView`]).
    drain: Mutex<Option<WireView>>,
    /// How many times applications polled the wire ([`Port::poll_wire`]; a count that may miss
    /// polls of threads at once). The wire's receive thread and the device's engine each compare
    /// it with what they saw last: while an application keeps polling, the receive thread
    /// leaves the socket to it, and the engine the device. Each poll writes it: on a line of
    /// its own.
    polls: crate::CacheLines<AtomicU64>,
    /// Whether the device's application rang a send doorbell ([`Port::note_send_doorbell`])
    /// since the wire's receive thread last took note ([`PortInner::take_send_doorbell_rung`],
    /// before each of its runs on requests): an application that sends between the requests
    /// the thread hands it replies to them, and their ACKs may wait for the reply. A doorbell
    /// that finds it set leaves it alone, and it is on a line of its own: a stream of doorbells
    /// does not write it.
    send_doorbell_rung: crate::CacheLines<AtomicBool>,
    /// Whether the device left ACKs unsent when it handled frames an application's
    /// [`Port::poll_wire`] took ([`Port::acks_may_wait`]); that poll's next empty look, the
    /// device's next transmit, or its engine sends them.
    acks_deferred: AtomicBool,
    /// When the oldest of the frames held in `tx` ([`TxHold`]) was held, in nanoseconds since
    /// the sim's clock epoch; 0 while none is. Read without the lock by the looks that send
    /// them (`PortInner::send_held`).
    held_since: AtomicU64,
    /// Neighbours learnt from ARP replies and neighbour advertisements.
    neighbors: Mutex<Vec<(IpAddr, MacAddr)>>,
    /// Whether the port is administratively up: shared with its device's firmware, which
    /// brings it up and down (INIT_HCA, TEARDOWN_HCA, PAOS writes). While it is down, frames
    /// go nowhere either way, counted (`WireStats::drop_link_down`, `tx_drop_link_down`). Up
    /// until the firmware first brings it down (a port of no device, or of a device no driver
    /// brought up, passes frames).
    admin_up: Arc<AtomicBool>,
}

/// A device's Ethernet port. Cloning gives another handle to the same port.
#[derive(Clone)]
pub struct Port {
    pub(crate) inner: Arc<PortInner>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port").field("mac", &self.inner.mac).finish_non_exhaustive()
    }
}

/// Most frames kept waiting in a receive queue; more are dropped (a full receive buffer).
const RX_QUEUE_LIMIT: usize = 65536;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Port {
    /// A port with `mac` answering for `ips`, not connected to any wire.
    pub fn new(mac: MacAddr, ips: Vec<IpAddr>) -> Port {
        Port {
            inner: Arc::new(PortInner {
                mac,
                ips,
                rx: Default::default(),
                rx_waiting: AtomicU32::new(0),
                link: Mutex::new(Link::Down),
                on_socket: AtomicBool::new(false),
                stats: Mutex::new(WireStats::new()),
                pcap: Mutex::new(None),
                recording: std::sync::atomic::AtomicBool::new(false),
                waker: Mutex::new(None),
                receiver: std::sync::OnceLock::new(),
                tx: Mutex::new(Transmit { view: None, stats: WireStats::new(), hold: TxHold::new() }),
                drain: Mutex::new(None),
                polls: crate::CacheLines(AtomicU64::new(0)),
                send_doorbell_rung: crate::CacheLines(AtomicBool::new(false)),
                acks_deferred: AtomicBool::new(false),
                held_since: AtomicU64::new(0),
                neighbors: Mutex::new(Vec::new()),
                admin_up: Arc::new(AtomicBool::new(true)),
            }),
        }
    }

    /// Resolves `ip` to a MAC the way a host stack does: from the neighbours already learnt,
    /// else by sending an ARP request (IPv4) or neighbour solicitation (IPv6) from `my_ip` and
    /// waiting up to `timeout` for the answer. This is the host's job, not the adapter's; the
    /// port offers it because an embedded device has no kernel beside it.
    pub fn resolve(&self, my_ip: IpAddr, ip: IpAddr, timeout: Duration) -> Option<MacAddr> {
        let known = |p: &Port| lock(&p.inner.neighbors).iter().find(|(i, _)| *i == ip).map(|(_, m)| *m);
        if let Some(m) = known(self) {
            return Some(m);
        }
        let req = arp::request(self.inner.mac, my_ip, ip)?;
        let start = Instant::now();
        let mut next_send = start;
        while start.elapsed() < timeout {
            if Instant::now() >= next_send {
                self.transmit(vec![req.clone()]);
                next_send = Instant::now() + Duration::from_millis(200);
            }
            std::thread::sleep(Duration::from_millis(2));
            if let Some(m) = known(self) {
                return Some(m);
            }
        }
        None
    }

    /// The port's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.inner.mac
    }

    /// Receive and transmit counters.
    pub fn stats(&self) -> WireStats {
        let mut stats = *lock(&self.inner.stats);
        stats.add(&lock(&self.inner.tx).stats);
        stats
    }

    /// Records every frame sent and received from now on in a pcap file at `path`.
    pub fn set_pcap(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let w = PcapWriter::new(BufWriter::new(File::create(path)?))?;
        *lock(&self.inner.pcap) = Some(w);
        self.inner.recording.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Stops recording and flushes the pcap file.
    pub fn stop_pcap(&self) -> std::io::Result<()> {
        self.inner.recording.store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(mut w) = lock(&self.inner.pcap).take() {
            w.flush()?;
        }
        Ok(())
    }

    /// Connects the port to a UDP wire: frames are sent as datagrams from `local` to `peer`,
    /// and every datagram from `peer` arriving at `local` is a received frame (QEMU's socket
    /// netdev sends from its `localaddr`, the peer given here). Returns the bound address.
    ///
    /// The socket is connected to `peer` (`connect`): the kernel then keeps the route in the
    /// socket and finds the socket of an arriving datagram before routing it (its early
    /// demultiplexing of connected sockets), where an unconnected socket costs a route lookup
    /// per datagram each way; and it drops datagrams from any other sender, which are not this
    /// wire's. Fails when `peer` cannot be connected to from `local` (another address family).
    pub fn connect_udp(&self, local: SocketAddr, peer: SocketAddr) -> std::io::Result<SocketAddr> {
        let sock = Arc::new(WireSocket::new(UdpSocket::bind(local)?));
        sock.connect(peer)?;
        let bound = sock.local_addr()?;
        self.connect_socket(sock.clone(), Link::Udp { sock, peer })?;
        Ok(bound)
    }

    /// Connects the port to a loopback LAN it joined: see [`LoopbackLan`].
    pub fn connect_lan(&self, lan: LoopbackLan) -> std::io::Result<()> {
        let lan = Lan::new(lan);
        let sock = lan.sock.clone();
        self.connect_socket(sock, Link::Lan(Arc::new(lan)))
    }

    /// Makes `link`, a wire on the UDP socket `sock`, the port's link, and starts the socket's
    /// receive thread (after the link is in place: the thread stops when the port is on another
    /// link).
    fn connect_socket(&self, sock: Arc<WireSocket>, link: Link) -> std::io::Result<()> {
        enlarge_buffers(&sock);
        probe_gso(&sock);
        enable_gro(&sock);
        self.inner.set_link(link);
        let weak = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new().name("umlx-sim-udp-rx".into()).spawn(move || udp_rx(weak, sock));
        if let Err(e) = spawned {
            self.inner.set_link(Link::Down);
            return Err(e);
        }
        self.inner.carrier(true);
        Ok(())
    }

    /// Disconnects the port from its wire: its cable is pulled. The device's link goes down,
    /// with a port-change event (IBV_EVENT_PORT_ERR through the drop-in), until the port is
    /// connected to a wire again. A port never connected to one has its link up, its frames
    /// going nowhere.
    pub fn disconnect(&self) {
        self.inner.set_link(Link::Down);
        self.inner.carrier(false);
    }

    pub(crate) fn set_fabric(&self, f: Arc<FabricShared>) {
        self.inner.set_link(Link::Fabric(f));
        self.inner.carrier(true);
    }

    /// Whether the frames the device sends now cross something that needs their IPv4 header
    /// checksum and ICRC (a socket or a recording): its transport then computes them as it
    /// builds each frame, where the port would have to find the fields again to fill them.
    pub(crate) fn egress_checksums(&self) -> Checksums {
        if self.inner.on_socket.load(Ordering::Relaxed) || self.inner.recording.load(Ordering::Relaxed) {
            Checksums::Compute
        } else {
            Checksums::Defer
        }
    }

    /// A frame arrives from the wire: it waits for the device's engine.
    pub fn inject(&self, frame: Vec<u8>) {
        self.inner.inject(frame, Checksums::Compute);
    }

    /// Queues a frame as one arriving from the wire, without telling the device: as a frame a
    /// thread queued but could not have the device handle, another thread holding it.
    #[cfg(test)]
    pub(crate) fn queue_unannounced(&self, frame: Vec<u8>) {
        self.inner.enqueue(frame, Checksums::Compute);
    }

    /// [`Port::inject`] of frames that arrive together: the device takes them as one burst.
    pub fn inject_burst(&self, frames: impl IntoIterator<Item = Vec<u8>>) {
        self.inner.enqueue_all(frames.into_iter(), Checksums::Compute);
        self.inner.notify();
    }

    /// Sends frames on the wire (the device calls it under its own lock: it takes only port and
    /// fabric locks, never a device lock).
    pub fn transmit(&self, mut frames: Vec<Vec<u8>>) {
        self.transmit_from(&mut frames, Checksums::Compute);
    }

    /// [`Port::transmit`] of the frames in `frames`, which it leaves empty (its allocation is
    /// the caller's to reuse). With [`Checksums::Defer`] they are the transport's, built
    /// without their integrity fields: filled here unless the frames cross nothing (the module
    /// doc).
    pub(crate) fn transmit_from(&self, frames: &mut Vec<Vec<u8>>, checksums: Checksums) {
        let mut reached = Reached::default();
        self.send_from(frames, checksums, &mut reached);
        reached.notify();
    }

    /// [`Port::transmit_from`] but for the last step: the ports the frames reached (this one
    /// among them, for a frame to its own MAC) are added to `reached`, for the caller to have
    /// them handle the frames ([`Reached::notify`]). Nothing here runs a device, so a run of
    /// the data path may send this way while it holds a QP's transport: the QP's frames then
    /// reach the wire in the order they were built, whichever threads build them. The frames
    /// of an application's send doorbell ([`Port::ringing_send_doorbell`]) for a UDP wire may
    /// be held for the next doorbell's datagram (`tx_hold`); any other send, of no frames
    /// too, sends what is held first.
    pub(crate) fn send_from(&self, frames: &mut Vec<Vec<u8>>, mut checksums: Checksums, reached: &mut Reached) {
        if frames.is_empty() && !self.holds_frames() {
            return;
        }
        if !self.inner.admin_up.load(Ordering::Relaxed) {
            let mut tx = lock(&self.inner.tx);
            tx.stats.tx_drop_link_down += frames.len() as u64;
            frames.drain(..).for_each(crate::buffers::give);
            self.inner.drop_held(&mut tx);
            return;
        }
        // The link of this batch, from the sends' view of it (taken from the link at the first
        // send after each change of it); held while the frames go to a socket, so that a send
        // clones nothing and takes neither the link's nor the LAN's locks.
        let mut tx = lock(&self.inner.tx);
        let Transmit { view, stats, hold } = &mut *tx;
        let held = hold.any();
        for f in frames.iter() {
            stats.record_tx(f.len());
        }
        let view =
            view.get_or_insert_with(|| TxView { link: lock(&self.inner.link).clone(), lan: LanSendCache::default() });
        let link = &view.link;
        // A fabric fills them itself if it is impaired; a recording or a socket needs them now.
        if checksums == Checksums::Defer
            && (self.inner.recording.load(Ordering::Relaxed) || !matches!(link, Link::Fabric(_) | Link::Down))
        {
            fill_all(frames);
            checksums = Checksums::Compute;
        }
        self.inner.record(frames);
        // A send doorbell's frames for a socket may wait for the next doorbell's (`tx_hold`);
        // frames to the port's own MAC never do (they never reach the wire).
        let doorbell =
            !frames.is_empty() && link.socket().is_some() && SEND_DOORBELL_RUN.get() == Arc::as_ptr(&self.inner).addr();
        if doorbell && !frames.iter().any(|f| self.inner.is_own(f)) {
            let now = run_now();
            let n = frames.len() as u64;
            if hold.hold(frames, now, self.inner.polls.load(Ordering::Relaxed)) {
                stats.tx_held += n;
                if !held {
                    self.inner.held_since.store(nanos_since_epoch(now).max(1), Ordering::Relaxed);
                }
                return;
            }
        }
        if held {
            self.inner.held_since.store(0, Ordering::Relaxed);
        }
        let mut looped = false;
        // Frames for the wire (and, for a UDP wire, (frame, destination) pairs): sent together
        // below, those held first, in lists this thread keeps for its next batch (a batch sent
        // while another is being sent, from a device run inside that one, gets lists of its
        // own).
        let (mut datagrams, mut dests, mut lanes) = UDP_BATCH.take();
        for mut f in hold.drain().chain(frames.drain(..)) {
            // Frames to our own MAC never reach the wire: the adapter loops them back inside, as
            // a ConnectX does for RoCE traffic between its own QPs.
            if self.inner.is_own(&f) {
                self.inner.enqueue(f, checksums);
                looped = true;
                continue;
            }
            match link {
                Link::Down => {}
                Link::Fabric(_) => datagrams.push(f), // sent together below
                Link::Udp { peer, .. } => {
                    dests.push((datagrams.len(), *peer));
                    datagrams.push(f);
                }
                Link::Lan(lan) => {
                    lan.tag_if_neighbour_frame(&mut f);
                    let i = datagrams.len();
                    if let Some(port) = lan.destinations(&mut view.lan, &f, |a| dests.push((i, a))) {
                        lanes.push((i, port));
                    }
                    datagrams.push(f);
                }
            }
        }
        // (On a LAN, the frames to learnt members are all on lanes: often none is left.)
        if let Some(sock) = link.socket()
            && !dests.is_empty()
        {
            send_datagrams(sock, &datagrams, &dests, matches!(link, Link::Udp { .. }));
        }
        if let Link::Lan(lan) = link
            && !lanes.is_empty()
        {
            lan.send_on_lanes(&mut view.lan, &datagrams, &mut lanes, &mut dests);
            lanes.clear();
        }
        if doorbell {
            hold.doorbell_sent(Instant::now());
        }
        // A fabric delivers without the view: its deliveries may reach this port.
        let fabric = match link {
            Link::Fabric(fabric) => Some(fabric.clone()),
            _ => None,
        };
        drop(tx);
        if let Some(fabric) = fabric {
            fabric.send_batch(&self.inner, &mut datagrams, checksums, reached);
        }
        datagrams.drain(..).for_each(crate::buffers::give);
        dests.clear();
        UDP_BATCH.set((datagrams, dests, lanes));
        if looped {
            reached.add(self.inner.clone());
        }
    }

    /// Runs `f`, the device's run for a send doorbell its application rang, with the port
    /// marked as this thread's doorbell's: the frames the run sends may be held for the next
    /// doorbell's (`tx_hold`).
    #[inline]
    pub(crate) fn ringing_send_doorbell<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = SEND_DOORBELL_RUN.replace(Arc::as_ptr(&self.inner).addr());
        let result = f();
        SEND_DOORBELL_RUN.set(before);
        result
    }

    /// Whether the port holds frames of send doorbells, on a UDP wire, for the datagram of the
    /// next doorbell rung right after (counted in [`WireStats::tx_held`]). They leave at the
    /// application's next look at an empty CQ, its next doorbell that is not rung right after,
    /// a CQ's arm doorbell, a command, or the engine's next look if it does none of these.
    #[inline]
    pub fn holds_frames(&self) -> bool {
        self.inner.held_since.load(Ordering::Relaxed) != 0
    }

    /// Sends the frames held for the next send doorbell's (`tx_hold`), if any.
    #[inline]
    pub(crate) fn send_held(&self) {
        if self.holds_frames() {
            self.send_held_now();
        }
    }

    /// [`Port::send_held`] once frames are known to be held.
    #[cold]
    #[inline(never)]
    fn send_held_now(&self) {
        self.send_from(&mut Vec::new(), Checksums::Compute, &mut Reached::default());
    }

    /// [`Port::send_held`] if the oldest has been held `age` or longer.
    pub(crate) fn send_held_after(&self, age: Duration) {
        if self.inner.holds_frames_for(age) {
            self.send_held_now();
        }
    }

    /// The frames waiting in receive queue `q` (of [`RX_QUEUES`]).
    pub(crate) fn take_rx(&self, q: usize) -> VecDeque<RxFrame> {
        let Some(queue) = self.inner.rx.get(q) else { return VecDeque::new() };
        let mut queue = lock(queue);
        // Bit `q` changes only under this queue's lock; unchanged, it is not written (the word
        // is every queue's, and every run reads it).
        if self.inner.rx_waiting.load(Ordering::Relaxed) & (1 << q) != 0 {
            self.inner.rx_waiting.fetch_and(!(1 << q), Ordering::Relaxed);
        }
        if queue.frames.is_empty() {
            return VecDeque::new();
        }
        let spare = std::mem::take(&mut queue.spare);
        std::mem::replace(&mut queue.frames, spare)
    }

    /// Gives back a queue [`Port::take_rx`] returned for receive queue `q`, emptied, so that
    /// its allocation serves the next frames.
    pub(crate) fn recycle_rx(&self, q: usize, mut frames: VecDeque<RxFrame>) {
        frames.drain(..).for_each(|f| crate::buffers::give(f.bytes));
        let Some(queue) = self.inner.rx.get(q) else { return };
        let mut queue = lock(queue);
        if queue.spare.capacity() < frames.capacity() {
            queue.spare = frames;
        }
    }

    /// The device that handles this port's frames.
    pub(crate) fn set_receiver(&self, r: Weak<dyn Receiver>) {
        let _ = self.inner.receiver.set(r);
    }

    /// The port's administrative state, for its device's firmware to bring it up and down.
    pub(crate) fn admin_state(&self) -> Arc<AtomicBool> {
        self.inner.admin_up.clone()
    }

    /// The thread to wake when a frame arrives.
    pub(crate) fn set_waker(&self, t: Thread) {
        *lock(&self.inner.waker) = Some(t);
    }

    /// Wakes the device's engine (to look at its timers again).
    pub(crate) fn wake_engine(&self) {
        if let Some(t) = &*lock(&self.inner.waker) {
            t.unpark();
        }
    }

    /// Whether frames wait in a receive queue (see [`PortInner::rx_waiting`]).
    pub(crate) fn rx_waiting(&self) -> bool {
        self.rx_waiting_queues() != 0
    }

    /// The receive queues this thread queued frames in since the last call (bit `q` for
    /// queue `q`): the ones a run of the device on a shared borrow in this thread handles,
    /// unless another run is handling them.
    pub(crate) fn take_queued_here(&self) -> u32 {
        let me = Arc::as_ptr(&self.inner).addr();
        QUEUED_HERE.with(|q| match q.borrow_mut().iter_mut().find(|(port, _)| *port == me) {
            Some((_, queues)) => std::mem::take(queues),
            None => 0,
        })
    }

    /// Which receive queues hold frames (bit `q` for queue `q`).
    pub(crate) fn rx_waiting_queues(&self) -> u32 {
        self.inner.rx_waiting.load(Ordering::Relaxed)
    }

    /// Hands received frames to the device (under its lock): ARP/ND are answered, RoCE
    /// packets verified (unless they crossed nothing: [`RxFrame::checksums`]) and given to the
    /// transport, anything else counted and dropped.
    pub(crate) fn process(&self, hca: &mut Hca, frames: &mut dyn Iterator<Item = (&[u8], Checksums)>, now: Instant) {
        hca.data_path(|dp| self.process_on(dp, frames, now));
    }

    /// [`Port::process`] on the data path's view of the device.
    pub(crate) fn process_on(
        &self,
        hca: &mut DataPath<'_>,
        frames: &mut dyn Iterator<Item = (&[u8], Checksums)>,
        now: Instant,
    ) {
        // The port's counters are taken once for the batch (their lock is not per frame).
        let mut counted = WireStats::new();
        let mut hold = RxHold::default();
        for (f, checksums) in frames {
            let et = f.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
            if et == Some(ETHERTYPE_ARP) || (et == Some(ETHERTYPE_IPV6) && f.get(20) == Some(&arp::IPPROTO_ICMPV6)) {
                let mut ips = self.inner.ips.clone();
                for ip in hca.gid_ips() {
                    if !ips.contains(&ip) {
                        ips.push(ip);
                    }
                }
                counted.record_rx_frame(f.len());
                if let Some((ip, mac)) = arp::learn(f) {
                    let mut n = lock(&self.inner.neighbors);
                    n.retain(|(i, _)| *i != ip);
                    n.push((ip, mac));
                }
                if let Some(r) = arp::reply(f, self.inner.mac, &ips) {
                    hca.lane.outbox.push(r);
                }
                continue;
            }
            let verdict = match checksums {
                Checksums::Defer => parse_frame_trusted(f),
                Checksums::Compute => parse_frame_verified(f),
            };
            counted.record_rx(f.len(), &verdict);
            if let Ok(p) = &verdict {
                hca.receive_held(&mut hold, p, now);
            }
        }
        hca.release(hold);
        lock(&self.inner.stats).add(&counted);
        // The ACKs these frames owe go out when the device next sends (its run does that
        // first), unless they may wait.
        if self.acks_may_wait() && hca.acks_pending() {
            self.inner.acks_deferred.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the ACKs of the frames this thread hands the device now may wait: yes while an
    /// application's [`Port::poll_wire`] runs the device, or the wire's receive thread runs it
    /// on frames it took. That application is busy-polling its CQ, or watching memory for a
    /// WRITE (perftest's `ib_write_lat`), and will soon see what these frames completed; what
    /// it then posts (the reply of a ping-pong) leaves with the ACKs, in one datagram, and a
    /// one-way trip costs one send instead of two. The peer's application, polling for that
    /// ACK, then takes the reply with it: an ACK sent alone would have it stop polling before
    /// the reply came, and leave the reply to its wire's receive thread, which must win a core
    /// from the programs that spin on it. The ACKs wait at most until the application's next
    /// look at an empty wire, the device's next transmit, the receive thread's grace
    /// (`UDP_RX_ACK_GRACE`, 30 µs), or, if the application stopped polling, its engine's first
    /// look that finds no poll since the one before (20 ms at most: see `device::engine`'s
    /// `ENGINE_POLLED_PARK`). An RC requester waits longer before it retransmits (perftest's
    /// and rdma-core's ACK timeout of 14 is 67 ms), and ACKs are cumulative, so a later one
    /// covers what a waiting one would have (the wire doc's §5.3).
    pub(crate) fn acks_may_wait(&self) -> bool {
        TOOK_FROM_WIRE.get() == Arc::as_ptr(&self.inner).addr()
    }

    /// How many times applications polled the wire ([`Port::poll_wire`]) so far (see
    /// `PortInner::polls`).
    pub(crate) fn polls(&self) -> u64 {
        self.inner.polls.load(Ordering::Relaxed)
    }

    /// Notes a send doorbell of the device's application (see `PortInner::send_doorbell_rung`).
    #[inline]
    pub(crate) fn note_send_doorbell(&self) {
        if !self.inner.send_doorbell_rung.load(Ordering::Relaxed) {
            self.inner.send_doorbell_rung.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the device left ACKs unsent for a polling application ([`Port::acks_may_wait`]):
    /// work for the engine's next look if the application does not send them first.
    pub(crate) fn acks_deferred(&self) -> bool {
        self.inner.acks_deferred.load(Ordering::Relaxed)
    }

    /// Sends the device's coalesced ACKs (into its outbox): what each run of the device does
    /// before it sends, unless [`Port::acks_may_wait`].
    #[inline]
    pub(crate) fn flush_acks(&self, hca: &mut Hca) {
        hca.data_path(|dp| dp.flush_acks());
        if self.inner.acks_deferred.load(Ordering::Relaxed) {
            self.inner.acks_deferred.store(false, Ordering::Relaxed);
        }
    }
}

impl PortInner {
    /// Makes `link` the port's link.
    fn set_link(&self, link: Link) {
        {
            let mut l = lock(&self.link);
            self.on_socket.store(link.socket().is_some(), Ordering::Relaxed);
            *l = link;
        }
        // After the link changed: a send or a look that took the view of the old one ends
        // first, and the next takes the new one. The old socket closes with the last of its
        // holders. Frames held for the old link's next datagram are lost with it, as those in
        // flight on a cable pulled out (the RC transport sends them again).
        {
            let mut tx = lock(&self.tx);
            tx.view = None;
            self.drop_held(&mut tx);
        }
        *lock(&self.drain) = None;
    }

    /// Drops the frames held for the next send doorbell's datagram (`tx_hold`): they count as
    /// sent while the link was down (`tx_drop_link_down`), no longer as sent or held.
    fn drop_held(&self, tx: &mut Transmit) {
        let Transmit { hold, stats, .. } = tx;
        for f in hold.drain() {
            stats.tx_frames = stats.tx_frames.saturating_sub(1);
            stats.tx_bytes = stats.tx_bytes.saturating_sub(f.len() as u64);
            stats.tx_held = stats.tx_held.saturating_sub(1);
            stats.tx_drop_link_down += 1;
            crate::buffers::give(f);
        }
        self.held_since.store(0, Ordering::Relaxed);
    }

    /// Whether `frame` goes to the port's own MAC (the adapter loops it back inside).
    fn is_own(&self, frame: &[u8]) -> bool {
        frame.get(0..6) == Some(&self.mac[..])
    }

    /// Tells the device whether the port's cable is in (see [`Receiver::carrier_changed`]).
    fn carrier(&self, present: bool) {
        if let Some(r) = self.receiver.get().and_then(Weak::upgrade) {
            r.carrier_changed(present);
        }
    }

    /// A frame arrives from the wire: it is queued and the device told.
    pub(crate) fn inject(&self, frame: Vec<u8>, checksums: Checksums) {
        self.enqueue(frame, checksums);
        self.notify();
    }

    /// Queues a frame that arrived (dropped and counted when the queue is full, as a NIC's
    /// receive buffer overflows); [`PortInner::notify`] then has it handled.
    /// `checksums` says whether its integrity fields were computed ([`RxFrame::checksums`]); a
    /// recording port fills them first.
    pub(crate) fn enqueue(&self, frame: Vec<u8>, checksums: Checksums) {
        self.enqueue_all(std::iter::once(frame), checksums);
    }

    /// [`PortInner::enqueue`] of each of `frames` (a batch from the fabric), each queue's lock
    /// taken once for the frames in a row that go to it.
    pub(crate) fn enqueue_all(&self, frames: impl Iterator<Item = Vec<u8>>, checksums: Checksums) {
        if !self.admin_up.load(Ordering::Relaxed) {
            let mut st = lock(&self.stats);
            for frame in frames {
                st.record_rx_frame(frame.len());
                st.drop_link_down += 1;
                crate::buffers::give(frame);
            }
            return;
        }
        let recording = self.recording.load(Ordering::Relaxed);
        // The queue whose lock is held, and whether a frame was added to it.
        let mut held: Option<(usize, MutexGuard<'_, RxQueue>, bool)> = None;
        for mut frame in frames {
            let mut checksums = checksums;
            if recording {
                if checksums == Checksums::Defer {
                    fill_all(std::slice::from_mut(&mut frame));
                    checksums = Checksums::Compute;
                }
                self.record(std::slice::from_ref(&frame));
            }
            let q = rx_queue_of(&frame);
            let (_, queue, added) = match held {
                Some(ref mut h) if h.0 == q => h,
                _ => {
                    self.let_go_of(held.take());
                    held.insert((q, lock(&self.rx[q]), false))
                }
            };
            if queue.frames.len() < RX_QUEUE_LIMIT {
                queue.frames.push_back(RxFrame { bytes: frame, checksums });
                *added = true;
            } else {
                let mut st = lock(&self.stats);
                st.record_rx_frame(frame.len());
                st.drop_rx_overflow += 1;
                drop(st);
                crate::buffers::give(frame);
            }
        }
        self.let_go_of(held);
    }

    /// Lets go of a receive queue [`PortInner::enqueue_all`] held, noting that it holds
    /// frames if one was added (under its lock: [`Port::take_rx`] clears the note under it).
    fn let_go_of(&self, held: Option<(usize, MutexGuard<'_, RxQueue>, bool)>) {
        let Some((q, queue, true)) = held else { return };
        if self.rx_waiting.load(Ordering::Relaxed) & (1 << q) == 0 {
            self.rx_waiting.fetch_or(1 << q, Ordering::Relaxed);
        }
        drop(queue);
        let me = std::ptr::from_ref(self).addr();
        QUEUED_HERE.with(|list| {
            let mut list = list.borrow_mut();
            match list.iter_mut().find(|(port, _)| *port == me) {
                Some((_, queues)) => *queues |= 1 << q,
                None => list.push((me, 1 << q)),
            }
        });
    }

    /// Has the queued frames handled: by this thread's run of the device if there is one, else
    /// now in this thread if the device is free, else by the thread holding it (which looks
    /// at the queue again after it lets go) or the engine.
    pub(crate) fn notify(&self) {
        if self.run_here() {
            return; // this thread's run of the device takes it
        }
        // Pairs with the fence of a thread that lets go of the device (`device::Inner`): of
        // the queueing and the release, at least one thread sees the other's.
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(r) = self.receiver.get().and_then(Weak::upgrade)
            && r.try_receive()
        {
            return;
        }
        if let Some(t) = &*lock(&self.waker) {
            t.unpark();
        }
    }

    /// Whether this thread is running the port's device (to completion, [`Running`]): that run
    /// takes what the port queues.
    fn run_here(&self) -> bool {
        let me = std::ptr::from_ref(self).addr();
        RUNNING.with(|r| r.borrow().contains(&me))
    }

    /// Has the device handle the frames waiting in every receive queue now
    /// ([`Receiver::receive_waiting`]), unless this thread's run of it will.
    fn receive_waiting(&self) {
        if self.run_here() {
            return;
        }
        if let Some(r) = self.receiver.get().and_then(Weak::upgrade) {
            r.receive_waiting();
        }
    }

    fn record(&self, frames: &[Vec<u8>]) {
        if !self.recording.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut p = lock(&self.pcap);
        if let Some(w) = p.as_mut() {
            let ts = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            for f in frames {
                let _ = w.write_record(ts, f);
            }
        }
    }
}

/// A UDP batch of [`Port::transmit_from`]: its frames, their (frame, address) pairs for the
/// link's socket, and (frame, member port) pairs for a LAN's lanes.
type UdpBatch = (Vec<Vec<u8>>, Vec<(usize, SocketAddr)>, Vec<(usize, u16)>);

/// Frames [`Port::transmit_from`]'s lists hold before they grow: a window of requests.
const TRANSMIT_LISTS: usize = 256;

/// Allocates this thread's [`Port::transmit_from`] lists, if not yet: for a thread about to
/// run devices, so that its first batches allocate nothing.
pub(crate) fn prepare_thread() {
    let (mut datagrams, mut dests, mut lanes) = UDP_BATCH.take();
    datagrams.reserve(TRANSMIT_LISTS);
    dests.reserve(TRANSMIT_LISTS);
    lanes.reserve(TRANSMIT_LISTS);
    UDP_BATCH.set((datagrams, dests, lanes));
}

thread_local! {
    /// The lists of [`Port::transmit_from`]'s UDP batches in each thread that sends.
    static UDP_BATCH: std::cell::Cell<UdpBatch> = const { std::cell::Cell::new((Vec::new(), Vec::new(), Vec::new())) };
    /// Receive slots for [`Port::poll_wire`] in each thread that calls it.
    static WIRE_SLOTS: std::cell::RefCell<Option<RecvSlots>> = const { std::cell::RefCell::new(None) };
}

/// What a port's sends keep, under its `tx` lock.
struct Transmit {
    /// See [`TxView`]; `None` until the first send after the link changed.
    view: Option<TxView>,
    /// The transmit counters (`tx_frames`, `tx_bytes`); [`Port::stats`] adds them to the
    /// port's others.
    stats: WireStats,
    /// The frames of send doorbells rung back to back, held for one datagram (`tx_hold`).
    hold: TxHold,
}

/// What a port's sends take from its link, kept under the port's `tx` lock: taken from the link
/// at the first send after each change of it ([`PortInner::set_link`] clears it).
struct TxView {
    link: Link,
    /// On a LAN: what was learnt, and the lanes.
    lan: LanSendCache,
}

/// What a receive thread's look at the UDP wire queued ([`PortInner::drain_wire`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Drained {
    /// How many datagrams it took (some may have been dropped: truncated, or not for the port).
    pub(super) datagrams: usize,
    /// Whether any of the frames queued is an RC request: a run of the device on them answers.
    pub(super) rc_requests: bool,
}

/// What a look at the UDP wire takes from the port's link, kept under the port's `drain` lock:
/// taken from the link at the first look after each change of it ([`PortInner::set_link`]
/// clears it), so that a look (an application's poll finding nothing, most of the time) takes
/// no other lock and clones no `Arc`.
pub(super) struct WireView {
    /// The socket the link receives on.
    sock: Arc<WireSocket>,
    /// The LAN, when the link is one: its members learn from their peers' tagged neighbour
    /// frames, not from the kernel's word on each datagram's sender.
    lan: Option<Arc<Lan>>,
    /// Whether the datagrams come from this machine: a LAN's members (its socket is on
    /// 127.0.0.1), or a loopback peer.
    local: bool,
    /// The frames one receive took, before they are queued together (allocated with the view).
    frames: Vec<Vec<u8>>,
    /// Where the frames an application's look took lie in its receive slots (offset, length),
    /// for the device to handle them there ([`Port::look_at_wire`]; allocated with the view,
    /// [`HANDLED_IN_PLACE`] of them).
    in_place: Vec<(usize, usize)>,
}

impl WireView {
    /// The view of `link`; `None` for a link without a socket.
    fn of(link: &Link) -> Option<WireView> {
        let (sock, lan, local) = match link {
            Link::Lan(lan) => (lan.sock.clone(), Some(lan.clone()), true),
            Link::Udp { sock, peer } => (sock.clone(), None, peer.ip().is_loopback()),
            Link::Down | Link::Fabric(_) => return None,
        };
        let (frames, in_place) = (Vec::with_capacity(TRANSMIT_LISTS), Vec::with_capacity(HANDLED_IN_PLACE));
        Some(WireView { sock, lan, local, frames, in_place })
    }
}

impl PortInner {
    /// The view of the link for a look at the wire (the caller holds `drain`, whose content
    /// `view` is): the one kept since the link last changed, or taken from it now.
    fn wire_view<'v>(&self, view: &'v mut Option<WireView>) -> Option<&'v mut WireView> {
        if view.is_none() {
            *view = WireView::of(&lock(&self.link));
        }
        view.as_mut()
    }

    /// Queues the datagrams waiting at the UDP wire's socket (up to [`UDP_RX_BATCH`]), if the
    /// port is still on that socket (`own`, the socket a receive thread was started for; any
    /// the link has for a poll); `None` when it is not. Datagrams are only ever taken under
    /// `drain` (which the caller holds, and whose content `view` is), so that two threads
    /// taking turns keep the wire's order.
    fn drain_wire(
        &self,
        view: &mut Option<WireView>,
        own: Option<&Arc<WireSocket>>,
        slots: &mut RecvSlots,
    ) -> Option<Drained> {
        let WireView { sock, lan, local, frames, .. } = self.wire_view(view)?;
        if own.is_some_and(|own| !Arc::ptr_eq(own, sock)) {
            return None;
        }
        let mut drained = Drained { datagrams: 0, rc_requests: false };
        while drained.datagrams < UDP_RX_BATCH {
            let n = recv_batch(sock, slots, *local, |frame, truncated| {
                if self.accepts(lan, frame, truncated) {
                    drained.rc_requests = drained.rc_requests || is_rc_request(frame);
                    frames.push(copied(frame));
                }
            });
            // The frames of one receive are queued together: a queue's lock is taken once for
            // the frames in a row that go to it (a reply and its ACK, say), not once a frame.
            if !frames.is_empty() {
                self.enqueue_all(frames.drain(..), Checksums::Compute);
            }
            drained.datagrams += n;
            if n < RECV_BATCH {
                break;
            }
        }
        Some(drained)
    }

    /// Runs `f` (a run of the device on frames this thread took from the wire: a polling
    /// application's look, or the wire's receive thread) with this port marked as the one
    /// whose wire this thread took them from, so that the run's ACKs may wait for the
    /// application's reply ([`Port::acks_may_wait`]). ACKs wait for one look at most: while
    /// ACKs are already waiting, the port is not marked and the run sends them (while a
    /// stream keeps arriving, every other look sends).
    fn letting_acks_wait<T>(&self, f: impl FnOnce() -> T) -> T {
        if !self.acks_deferred.load(Ordering::Relaxed) {
            TOOK_FROM_WIRE.set(std::ptr::from_ref(self).addr());
        }
        let result = f();
        TOOK_FROM_WIRE.set(0);
        result
    }

    /// Whether the oldest frame held for the next send doorbell's (`tx_hold`) has been held
    /// `age` or longer (the clock is read only if a frame is held).
    fn holds_frames_for(&self, age: Duration) -> bool {
        let since = self.held_since.load(Ordering::Relaxed);
        since != 0 && nanos_since_epoch(Instant::now()).saturating_sub(since) >= age.as_nanos() as u64
    }

    /// Whether the application rang a send doorbell since the last call (see
    /// `PortInner::send_doorbell_rung`); a doorbell rung meanwhile counts for the next.
    pub(super) fn take_send_doorbell_rung(&self) -> bool {
        let rung = self.send_doorbell_rung.load(Ordering::Relaxed);
        if rung {
            self.send_doorbell_rung.store(false, Ordering::Relaxed);
        }
        rung
    }

    /// Whether a frame a receive took from the wire goes to the port: not when the kernel
    /// truncated it (counted) or it is not for this member of a LAN.
    fn accepts(&self, lan: &Option<Arc<Lan>>, frame: &[u8], truncated: bool) -> bool {
        if truncated {
            let mut s = lock(&self.stats);
            s.record_rx_frame(frame.len());
            s.drop_truncated += 1;
            return false;
        }
        lan.as_ref().is_none_or(|lan| lan.accept(frame, &self.mac))
    }
}

/// A copy of `frame` in a buffer of the pool, to queue.
fn copied(frame: &[u8]) -> Vec<u8> {
    let mut buf = crate::buffers::take();
    buf.extend_from_slice(frame);
    buf
}

/// Most frames of one receive that an application's look hands the device where they lie
/// ([`Port::look_at_wire`]); a receive with more queues them.
const HANDLED_IN_PLACE: usize = 32;

/// What an application's look at the wire did ([`Port::look_at_wire`]).
enum Look {
    /// Nothing waited, or the port is not on a UDP wire.
    Empty,
    /// It took frames and the device handled them.
    Handled,
    /// It took frames and queued them: the device was held by another thread, or the frames
    /// were too many or to be recorded.
    Queued,
}

impl Port {
    /// An application's look at the UDP wire ([`Port::poll_wire`]), under the `drain` lock
    /// (`view` its content): one receive, whose frames the device handles where they lie in
    /// `slots`, in this thread, when it can take the whole device at once, after the frames
    /// queued before them. Otherwise the frames are queued as [`PortInner::drain_wire`] queues
    /// them, and after a full receive the rest that waits is too. Handling them in place
    /// spares each frame a copy into a buffer, its queue's lock twice and its steering.
    fn look_at_wire(&self, view: &mut Option<WireView>, slots: &mut RecvSlots) -> Look {
        let inner = &self.inner;
        let Some(WireView { sock, lan, local, frames, in_place }) = inner.wire_view(view) else { return Look::Empty };
        let base = slots.memory().as_ptr().addr();
        // Where the frames lie in the slots' memory, up to the first that did not fit in
        // `in_place`; that one and the rest are copied.
        in_place.clear();
        let n = recv_batch(sock, slots, *local, |frame, truncated| {
            if !inner.accepts(lan, frame, truncated) {
                return;
            }
            if in_place.len() < HANDLED_IN_PLACE && frames.is_empty() {
                in_place.push((frame.as_ptr().addr() - base, frame.len()));
            } else {
                frames.push(copied(frame));
            }
        });
        if n == 0 {
            return Look::Empty;
        }
        let memory = slots.memory();
        let taken = &in_place[..];
        let frame_at = |&(at, len): &(usize, usize)| memory.get(at..at + len).unwrap_or_default();
        if frames.is_empty()
            && inner.admin_up.load(Ordering::Relaxed)
            && !inner.recording.load(Ordering::Relaxed)
            && let Some(receiver) = inner.receiver.get().and_then(Weak::upgrade)
        {
            let handled = inner.letting_acks_wait(|| {
                receiver.try_receive_taken(&mut |h| {
                    let frames = &mut taken.iter().map(|at| (frame_at(at), Checksums::Compute));
                    self.process(h, frames, run_now_for_batch());
                })
            });
            if handled {
                return Look::Handled;
            }
        }
        // Queued in the order they came: those noted in place, then those copied after them.
        let noted = taken.iter().map(|at| copied(frame_at(at)));
        inner.enqueue_all(noted.chain(frames.drain(..)), Checksums::Compute);
        if n == RECV_BATCH {
            inner.drain_wire(view, None, slots);
        }
        Look::Queued
    }

    /// Takes what waits at the port's UDP wire now and has the device handle it, in the calling
    /// thread: how an application that polls its CQ runs the device's receive side itself (as
    /// a busy-polling DPDK program does), instead of waiting for the wire's receive thread to
    /// get a core. Never blocks: returns false at once when another thread is taking the
    /// wire's frames, when nothing waits, or when the port is not on a UDP wire.
    pub fn poll_wire(&self) -> bool {
        if !self.inner.on_socket.load(Ordering::Relaxed) {
            return false;
        }
        // Not a read-modify-write: a poll of another thread at once may go uncounted.
        let polls = self.inner.polls.load(Ordering::Relaxed);
        self.inner.polls.store(polls.wrapping_add(1), Ordering::Relaxed);
        // The end of a burst of send doorbells: what they held leaves (`tx_hold`).
        self.send_held();
        let Ok(mut view) = self.inner.drain.try_lock() else { return false };
        let look = WIRE_SLOTS.with(|b| match b.try_borrow_mut() {
            Ok(mut b) => self.look_at_wire(&mut view, b.get_or_insert_with(RecvSlots::new)),
            Err(_) => Look::Empty, // a look in progress in this thread (none calls another)
        });
        drop(view);
        if matches!(look, Look::Handled) {
            return true;
        }
        if matches!(look, Look::Empty) {
            if self.inner.acks_deferred.load(Ordering::Relaxed) {
                self.inner.notify(); // a run that sends the ACKs left waiting
            } else if self.inner.rx_waiting.load(Ordering::Relaxed) != 0 {
                // Frames a thread queued, and could not have the device handle then: the
                // engine leaves them to a polling application (`device::engine`).
                self.inner.receive_waiting();
                if self.inner.rx_waiting.load(Ordering::Relaxed) != 0 {
                    // Another thread's run holds them (it claimed their queue, or holds the
                    // device whole). If that thread waits for this CPU (the wire's receive
                    // thread, preempted mid-run by this busy-polling application on the core
                    // they share), spinning here would keep them waiting for the rest of the
                    // time slice: give it the CPU.
                    std::thread::yield_now();
                }
            }
            return false;
        }
        self.inner.letting_acks_wait(|| self.inner.notify());
        true
    }
}

#[cfg(test)]
mod tests;
