//! What leaves together on a UDP wire, in one datagram.
//!
//! ACKs on a wire whose application busy-polls it (`Port::poll_wire`): the device leaves the
//! ACK of what the poll handed it to its next transmit, so a ping-pong's reply and the ACK of
//! the request leave together (one `sendmmsg`, one segmented datagram) instead of the ACK first
//! and the reply in a second send; and an ACK left waiting still leaves when the application
//! posts nothing more and stops polling. The same holds for what the wire's receive thread
//! hands the device while the application watches memory instead (perftest's `ib_write_lat`),
//! within the thread's grace.
//!
//! Send doorbells rung back to back by an application that polls (perftest's bandwidth tests
//! post one WR a doorbell): the port holds their frames for the next doorbell's datagram, and
//! what it holds leaves at the application's next look at an empty CQ, at a CQ's arm doorbell,
//! or without either, long before a requester would retransmit. A ping-pong holds nothing.
//!
//! Two devices on UDP wires through a relay in this test, which takes each datagram whole (it
//! asks for `UDP_GRO`: a segmented one comes as one), notes how many frames it carried and
//! each one's BTH opcode in the order they came, and forwards the frames one per datagram.

mod transport_common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use transport_common::*;

use umlx_hwdesc::enums::{CqeOpcode, WqeOpcode};
use umlx_hwdesc::plain::cqe64;
use umlx_wire::Opcode;

const SEND: WqeOpcode = WqeOpcode::SEND;
const WRITE: WqeOpcode = WqeOpcode::RDMA_WRITE;
const REQ: CqeOpcode = CqeOpcode::REQ;
const RESP_SEND: CqeOpcode = CqeOpcode::RESP_SEND;
const RC_SEND_ONLY: Opcode = Opcode::RC_SEND_ONLY;
const RC_WRITE_ONLY: Opcode = Opcode::RC_RDMA_WRITE_ONLY;
const RC_ACK: Opcode = Opcode::RC_ACKNOWLEDGE;

/// Which way a datagram went through the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    AToB,
    BToA,
}

/// Forwards datagrams between `a` (the relay socket device A sends to) and `b` (the one B
/// sends to), until `stop`, noting each frame's way and BTH opcode, and how many datagrams
/// went each way.
struct Relay {
    log: Arc<Mutex<Vec<(Way, Opcode)>>>,
    datagrams: Arc<Mutex<[usize; 2]>>,
    /// While set, what B sends is noted and dropped, not forwarded.
    mute_b: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// This file's tests run one at a time: what they check depends on applications that
    /// reply within microseconds, which two tests' six threads at once on two cores delay.
    _one_at_a_time: MutexGuard<'static, ()>,
}

/// Held by the relay of the test that runs ([`Relay`]).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Relay {
    fn start(a: UdpSocket, b: UdpSocket, a_dev: SocketAddr, b_dev: SocketAddr) -> Relay {
        // Another test's failure does not stop this one.
        let one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let log = Arc::new(Mutex::new(Vec::new()));
        let datagrams = Arc::new(Mutex::new([0; 2]));
        let stop = Arc::new(AtomicBool::new(false));
        for sock in [&a, &b] {
            sock.set_nonblocking(true).unwrap();
            take_segmented_datagrams_whole(sock);
        }
        let mute_b = Arc::new(AtomicBool::new(false));
        let (l, d, s, m) = (log.clone(), datagrams.clone(), stop.clone(), mute_b.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while !s.load(Ordering::Relaxed) {
                let mut idle = true;
                for (from, to, dest, way) in [(&a, &b, b_dev, Way::AToB), (&b, &a, a_dev, Way::BToA)] {
                    while let Ok(n) = from.recv(&mut buf) {
                        idle = false;
                        d.lock().unwrap()[way as usize] += 1;
                        let mut rest = &buf[..n];
                        while !rest.is_empty() {
                            let len = umlx_wire::packet::ip_frame_len(rest).expect("an IP frame").min(rest.len());
                            let frame = &rest[..len];
                            let opcode = umlx_wire::parse_frame(frame).expect("a RoCE frame").bth.opcode;
                            l.lock().unwrap().push((way, opcode));
                            if way == Way::AToB || !m.load(Ordering::Relaxed) {
                                to.send_to(frame, dest).unwrap();
                            }
                            rest = &rest[len..];
                        }
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
        });
        Relay { log, datagrams, mute_b, stop, thread: Some(thread), _one_at_a_time: one_at_a_time }
    }

    /// The opcodes of the frames that went `way` so far.
    fn opcodes(&self, way: Way) -> Vec<Opcode> {
        self.log.lock().unwrap().iter().filter(|(w, _)| *w == way).map(|&(_, op)| op).collect()
    }

    /// How many datagrams went `way` so far.
    fn datagrams(&self, way: Way) -> usize {
        self.datagrams.lock().unwrap()[way as usize]
    }
}

/// Has the kernel hand `sock` a segmented datagram as one (`UDP_GRO`), its frames back to
/// back: the relay then sees which frames a sender sent together.
fn take_segmented_datagrams_whole(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads an `int` from `&on`, a local that outlives the call, on the
    // socket's own descriptor.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "UDP_GRO: {}", std::io::Error::last_os_error());
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Devices A and B, each on its own UDP wire to the relay, with RC QPs connected to each
/// other. `ack_timeout` long (IBA 4.096 µs * 2^16, about 268 ms): no retransmission can stand
/// in for an ACK in these tests.
fn setup() -> (Node, Qp, Node, Qp, Relay) {
    let (fa, fb) = (Fabric::perfect(), Fabric::perfect());
    let (mut a, mut b) = (Node::new(0, &fa), Node::new(1, &fb));
    let ra = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let a_dev = a.dev.port().connect_udp("127.0.0.1:0".parse().unwrap(), ra.local_addr().unwrap()).unwrap();
    let b_dev = b.dev.port().connect_udp("127.0.0.1:0".parse().unwrap(), rb.local_addr().unwrap()).unwrap();
    let relay = Relay::start(ra, rb, a_dev, b_dev);
    let (qa, qb) = (a.create_qp(false, 6, 6), b.create_qp(false, 6, 6));
    let p = RcParams { ack_timeout: 16, ..RcParams::default() };
    let (ga, gb) = (a.gid, b.gid);
    a.connect_rc(&qa, (&gb, b.mac, qb.qpn), p);
    b.connect_rc(&qb, (&ga, a.mac, qa.qpn), p);
    (a, qa, b, qb, relay)
}

/// B's application: polls B's CQ, and B's wire when the CQ is empty, until a CQE comes.
fn busy_poll(b: &mut Node) -> [u8; cqe64::SIZE] {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = b.poll_cq_timeout(Duration::ZERO) {
            return c;
        }
        b.dev.port().poll_wire();
        assert!(Instant::now() < end, "no CQE at B within 10 s");
    }
}

/// A's two CQEs of a round (its SEND's and its receive's), in either order: (send, receive).
fn a_round(a: &mut Node) -> ([u8; cqe64::SIZE], [u8; cqe64::SIZE]) {
    let (x, y) = (a.poll_cq(), a.poll_cq());
    if cqe_opcode(&x) == REQ { (x, y) } else { (y, x) }
}

/// A round of a ping-pong: A's request, whose data A's memory holds at 0, and B's reply, whose
/// data B's memory holds at 0 (`ping` and `pong`).
type Round<'a> = &'a mut dyn FnMut(&mut Node, &mut Qp, &mut Node, &mut Qp, usize, &[u8], &[u8]);

/// Runs 40 rounds of a ping-pong with `request` frames each way (`round` does one), and checks
/// what the relay saw: no retransmission either way, an ACK for each of A's requests, and in
/// `min_reply_first` rounds at least, B's reply then that ACK (the only other order allowed is
/// the ACK then the reply). An ACK sent when B's device handled the request would come first
/// in every round. On a quiet machine the reply comes first in nearly every round; one whose
/// cores other programs keep busy may keep B's application from its reply past the time its
/// ACK waits (and after two such rounds the receive thread sends ACKs at once for 10 ms): the
/// rounds are run again, on new devices, up to three times before the test fails.
fn ping_pong(request: Opcode, min_reply_first: usize, round: Round<'_>) {
    const ROUNDS: usize = 40;
    let mut tries = Vec::new();
    while tries.len() < 3 {
        let (mut a, mut qa, mut b, mut qb, relay) = setup();
        let mut reply_first = 0;
        for n in 0..ROUNDS {
            let seen = relay.opcodes(Way::BToA).len();
            let ping = pattern(n as u32, 64);
            let pong = pattern(1000 + n as u32, 64);
            a.mem.write(0, &ping);
            b.mem.write(0, &pong);
            round(&mut a, &mut qa, &mut b, &mut qb, n, &ping, &pong);
            // The relay noted what B sent this round before forwarding it, and A has both.
            let sent = relay.opcodes(Way::BToA)[seen..].to_vec();
            if sent == [request, RC_ACK] {
                reply_first += 1;
            } else {
                assert_eq!(sent, [RC_ACK, request], "what B sent in round {n}");
            }
        }
        // Let the last ACKs through the relay.
        std::thread::sleep(Duration::from_millis(20));
        let a_to_b = relay.opcodes(Way::AToB);
        let b_to_a = relay.opcodes(Way::BToA);
        assert_eq!(a_to_b.iter().filter(|&&o| o == request).count(), ROUNDS, "no retransmission: {a_to_b:?}");
        assert_eq!(b_to_a.iter().filter(|&&o| o == request).count(), ROUNDS, "no retransmission: {b_to_a:?}");
        assert_eq!(b_to_a.iter().filter(|&&o| o == RC_ACK).count(), ROUNDS, "an ACK per request: {b_to_a:?}");
        // Each side's next doorbell comes a round trip after its last, after a poll or none:
        // none is held for another.
        for (node, name) in [(&a, "A"), (&b, "B")] {
            assert_eq!(node.dev.port().stats().tx_held, 0, "frames {name} held in a ping-pong");
        }
        if reply_first >= min_reply_first {
            return;
        }
        tries.push((reply_first, b_to_a));
    }
    panic!("the reply then its ACK in fewer than {min_reply_first} of {ROUNDS} rounds, three times: {tries:?}");
}

#[test]
fn a_polled_responder_sends_the_ack_with_its_reply_and_data_and_completions_are_right() {
    // B sees A's SEND by polling its CQ and wire, and replies at once; the ACK of the SEND
    // waits for the reply (until B's engine sends it, 20 ms at most, if B stops polling): in a
    // quarter of the rounds at least.
    ping_pong(RC_SEND_ONLY, 10, &mut |a, qa, b, qb, round, ping, pong| {
        a.post_recv(qa, 0x1000, 64);
        b.post_recv(qb, 0x1000, 64);
        a.post_send(qa, SEND, true, 0, &data_seg(64, a.mkey, a.va(0)));
        let r = busy_poll(b);
        assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (RESP_SEND, 64), "B's receive CQE, round {round}");
        assert_eq!(b.mem.to_vec(0x1000, 64), ping, "round {round}");
        b.post_send(qb, SEND, true, 0, &data_seg(64, b.mkey, b.va(0)));
        let (s, r) = a_round(a);
        assert_eq!((cqe_opcode(&s), sent_opcode(&s)), (REQ, SEND), "A's SEND completes, round {round}");
        assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (RESP_SEND, 64), "A's receive CQE, round {round}");
        assert_eq!(a.mem.to_vec(0x1000, 64), pong, "round {round}");
        let s = busy_poll(b);
        assert_eq!((cqe_opcode(&s), sent_opcode(&s)), (REQ, SEND), "B's SEND completes, round {round}");
    });
}

/// Waits (10 s at most) until `node`'s memory at `off` holds `want`, reading it as an
/// application that watches memory for a WRITE does: no CQ poll, no look at the wire.
fn watch_memory(node: &Node, off: usize, want: &[u8], what: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    while node.mem.to_vec(off, want.len()) != want {
        assert!(Instant::now() < end, "{what} not in memory within 10 s");
        std::hint::spin_loop();
    }
}

#[test]
fn a_responder_that_watches_memory_sends_the_ack_with_the_reply_it_writes() {
    // Neither application polls its wire: each wire's receive thread hands its device what
    // comes. B watches the buffer A's WRITE fills and writes its reply at once, as
    // `ib_write_lat`'s server does; the ACK of A's WRITE waits for that reply (the receive
    // thread's grace): in a tenth of the rounds at least.
    ping_pong(RC_WRITE_ONLY, 4, &mut |a, qa, b, qb, round, ping, pong| {
        let to_b = segs(&[&raddr_seg(b.va(0x1000), b.mkey), &data_seg(64, a.mkey, a.va(0))]);
        a.post_send(qa, WRITE, true, 0, &to_b);
        watch_memory(b, 0x1000, ping, &format!("A's WRITE of round {round}"));
        // B's application takes 10 µs over what came before it replies (well within the
        // grace): the run that handled A's WRITE sends its ACK in less, unless it waits.
        let seen = Instant::now();
        while seen.elapsed() < Duration::from_micros(10) {
            std::hint::spin_loop();
        }
        let to_a = segs(&[&raddr_seg(a.va(0x1000), a.mkey), &data_seg(64, b.mkey, b.va(0))]);
        b.post_send(qb, WRITE, true, 0, &to_a);
        let s = a.poll_cq();
        assert_eq!((cqe_opcode(&s), sent_opcode(&s)), (REQ, WRITE), "A's WRITE completes, round {round}");
        watch_memory(a, 0x1000, pong, &format!("B's WRITE of round {round}"));
        let s = b.poll_cq();
        assert_eq!((cqe_opcode(&s), sent_opcode(&s)), (REQ, WRITE), "B's WRITE completes, round {round}");
    });
}

#[test]
fn an_ack_the_receive_thread_left_waiting_leaves_when_no_reply_comes() {
    let (mut a, mut qa, mut b, mut qb, relay) = setup();
    // B's application WRITEs to A once: its receive thread then takes it for one that replies
    // to what comes, and the ACKs of A's WRITEs wait for a reply that never comes: for the
    // grace, and not at all once two went uncarried.
    let to_a = segs(&[&raddr_seg(a.va(0x2000), a.mkey), &data_seg(64, b.mkey, b.va(0))]);
    b.post_send(&mut qb, WRITE, true, 0, &to_a);
    let c = b.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "B's WRITE completes");
    for round in 0..5u32 {
        let ping = pattern(round, 64);
        a.mem.write(0, &ping);
        let to_b = segs(&[&raddr_seg(b.va(0x1000), b.mkey), &data_seg(64, a.mkey, a.va(0))]);
        a.post_send(&mut qa, WRITE, true, 0, &to_b);
        // B's application writes nothing back and polls nothing: the ACK still comes, long
        // before A would retransmit (268 ms).
        let start = Instant::now();
        let c = a.poll_cq_timeout(Duration::from_millis(100)).expect("A's WRITE completes without a retransmission");
        assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "round {round}");
        assert!(start.elapsed() < Duration::from_millis(100), "round {round}: {:?}", start.elapsed());
        assert_eq!(b.mem.to_vec(0x1000, 64), ping, "round {round}");
    }
    std::thread::sleep(Duration::from_millis(20));
    let count = |way, op| relay.opcodes(way).iter().filter(|&&o| o == op).count();
    assert_eq!((count(Way::AToB, RC_WRITE_ONLY), count(Way::AToB, RC_ACK)), (5, 1), "{:?}", relay.opcodes(Way::AToB));
    assert_eq!((count(Way::BToA, RC_WRITE_ONLY), count(Way::BToA, RC_ACK)), (1, 5), "{:?}", relay.opcodes(Way::BToA));
}

#[test]
fn an_ack_left_waiting_leaves_when_the_application_stops_polling() {
    let (mut a, mut qa, mut b, mut qb, relay) = setup();
    for round in 0..5 {
        b.post_recv(&mut qb, 0x1000, 64);
        a.post_send(&mut qa, SEND, true, 0, &data_seg(64, a.mkey, a.va(0)));
        let r = busy_poll(&mut b);
        assert_eq!(cqe_opcode(&r), RESP_SEND, "round {round}");
        // B's application posts nothing and polls no more: the ACK still comes, long before A
        // would retransmit (268 ms).
        let start = Instant::now();
        let c = a.poll_cq_timeout(Duration::from_millis(100)).expect("A's SEND completes without a retransmission");
        assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, SEND), "round {round}");
        assert!(start.elapsed() < Duration::from_millis(100), "round {round}: {:?}", start.elapsed());
    }
    let sends = relay.opcodes(Way::AToB).iter().filter(|&&o| o == RC_SEND_ONLY).count();
    assert_eq!(sends, 5, "no retransmission");
}

#[test]
fn an_ack_left_waiting_leaves_before_a_command_destroys_its_qp() {
    let (mut a, mut qa, mut b, mut qb, relay) = setup();
    b.post_recv(&mut qb, 0x1000, 64);
    a.post_send(&mut qa, SEND, true, 0, &data_seg(64, a.mkey, a.va(0)));
    let r = busy_poll(&mut b);
    assert_eq!(cqe_opcode(&r), RESP_SEND);
    // B's application has its CQE and destroys its QP at once (as a program that exits does),
    // well before B's engine would send the ACK its poll left waiting (up to 20 ms).
    use umlx_hwdesc::enums::CmdOpcode;
    use umlx_hwdesc::ifc::{destroy_qp_in, destroy_qp_out};
    let (size_in, size_out) = (destroy_qp_in::SIZE_BYTES, destroy_qp_out::SIZE_BYTES);
    let destroy = b.host.exec(CmdOpcode::DESTROY_QP, 0, size_in, size_out, |i| {
        destroy_qp_in::qpn.set(i, qb.qpn as u64);
    });
    destroy.expect("DESTROY_QP");
    let c = a.poll_cq_timeout(Duration::from_millis(200)).expect("A's SEND completes without a retransmission");
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, SEND));
    assert_eq!(relay.opcodes(Way::AToB), [RC_SEND_ONLY], "no retransmission");
}

/// The WRITEs of a burst in the tests below, each rung with a doorbell of its own.
const BURST: usize = 32;

/// Where in B's memory WRITE `i` of a burst lands.
fn burst_target(i: usize) -> usize {
    0x10000 + i * 64
}

/// A's application looks at its wire (an empty CQ's poll), as `ib_write_bw` does before each
/// burst, then posts [`BURST`] 64-byte WRITEs of `pattern(seed + i)` to B's memory at
/// [`burst_target`]`(i)`, one doorbell each, the last signaled, as fast as it can. Returns how
/// many of their frames A's port held for another's datagram.
fn post_burst(a: &mut Node, qa: &mut Qp, b: &Node, seed: u32) -> u64 {
    let wqes: Vec<Vec<u8>> = (0..BURST)
        .map(|i| {
            a.mem.write(i * 64, &pattern(seed + i as u32, 64));
            segs(&[&raddr_seg(b.va(burst_target(i)), b.mkey), &data_seg(64, a.mkey, a.va(i * 64))])
        })
        .collect();
    let before = a.dev.port().stats().tx_held;
    a.dev.port().poll_wire();
    for (i, wqe) in wqes.iter().enumerate() {
        a.post_send(qa, WRITE, i + 1 == BURST, 0, wqe);
    }
    a.dev.port().stats().tx_held - before
}

/// Checks that B's memory holds every WRITE of the burst `seed`.
fn burst_landed(b: &Node, seed: u32) {
    for i in 0..BURST {
        assert_eq!(b.mem.to_vec(burst_target(i), 64), pattern(seed + i as u32, 64), "WRITE {i} of burst {seed}");
    }
}

#[test]
fn send_doorbells_rung_back_to_back_after_a_poll_leave_together_and_every_write_lands() {
    let (mut a, mut qa, b, _qb, relay) = setup();
    let mut tries = Vec::new();
    for seed in [0, 100, 200] {
        let seen = (relay.opcodes(Way::AToB).len(), relay.datagrams(Way::AToB));
        let held = post_burst(&mut a, &mut qa, &b, seed);
        // A's application polls for the completion: its first look at the empty CQ sends what
        // the port still holds.
        let c = busy_poll(&mut a);
        assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "the last WRITE of burst {seed} completes");
        burst_landed(&b, seed);
        // B acknowledged the last WRITE: the relay forwarded (and noted) every frame before.
        let frames = relay.opcodes(Way::AToB)[seen.0..].to_vec();
        assert_eq!(frames, [RC_WRITE_ONLY; BURST], "burst {seed}: each WRITE once, none sent again");
        // A held frame leaves in the datagram of the next doorbell's, or with the others held
        // at the poll.
        let datagrams = relay.datagrams(Way::AToB) - seen.1;
        let most = BURST - held as usize + 1;
        assert!(datagrams <= most, "burst {seed}: {datagrams} datagrams for {BURST} frames, {held} held");
        // On a machine whose cores are wanted elsewhere, a doorbell may come too late after
        // the last to count as rung back to back: a burst again, up to three.
        if held >= BURST as u64 / 2 {
            assert_eq!(a.dev.transport_stats().retransmits, 0);
            return;
        }
        tries.push((held, datagrams));
    }
    panic!("fewer than half of a burst's {BURST} frames held, three times (held, datagrams): {tries:?}");
}

#[test]
fn frames_held_for_a_doorbell_that_never_comes_leave_though_the_application_looks_no_more() {
    let (mut a, mut qa, b, _qb, relay) = setup();
    // No ACK reaches A (a run of A's device on one would send what its port holds): only the
    // receive thread's and the engine's looks are left to.
    relay.mute_b.store(true, Ordering::Relaxed);
    for (n, seed) in [0, 100, 200].into_iter().enumerate() {
        let seen = relay.opcodes(Way::AToB).len();
        let held = post_burst(&mut a, &mut qa, &b, seed);
        // A's application neither polls nor arms a CQ (it waits for its peer on a socket, say):
        // what its port held still goes, long before A would retransmit (268 ms).
        let start = Instant::now();
        while relay.opcodes(Way::AToB).len() < seen + BURST {
            let took = start.elapsed();
            assert!(took < Duration::from_millis(100), "burst {seed}: {held} held, not all sent in {took:?}");
            std::thread::sleep(Duration::from_micros(50));
        }
        let frames = relay.opcodes(Way::AToB)[seen..].to_vec();
        assert_eq!(frames, [RC_WRITE_ONLY; BURST], "burst {seed}: each WRITE once, none sent again");
        // B's ACKs may go again: A's WRITEs, retransmitted, complete.
        relay.mute_b.store(false, Ordering::Relaxed);
        let c = a.poll_cq();
        assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "the last WRITE of burst {seed} completes");
        burst_landed(&b, seed);
        if held > 0 {
            return;
        }
        assert!(n < 2, "no frame of three bursts of {BURST} was held");
        relay.mute_b.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_cq_arm_doorbell_sends_what_send_doorbells_held() {
    let (mut a, mut qa, b, _qb, _relay) = setup();
    for seed in [0, 100, 200, 300, 400] {
        post_burst(&mut a, &mut qa, &b, seed);
        // The wire's receive thread sends frames held 50 µs; this look comes right after the
        // last doorbell, unless this thread lost its core meanwhile (then a burst again).
        if a.dev.port().holds_frames() {
            // A's application arms its CQ to sleep until the completion's event
            // (`ibv_req_notify_cq`): nothing may wait for a doorbell that will not come.
            a.arm_cq();
            assert!(!a.dev.port().holds_frames(), "burst {seed}: frames still held after the arm doorbell");
            let c = a.poll_cq();
            assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "the last WRITE of burst {seed} completes");
            burst_landed(&b, seed);
            return;
        }
        let c = busy_poll(&mut a);
        assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (REQ, WRITE), "the last WRITE of burst {seed} completes");
    }
    panic!("no frame held after five bursts of {BURST}");
}

#[test]
fn frames_held_when_the_cable_is_pulled_count_as_sent_while_the_link_was_down() {
    let mut tries = Vec::new();
    while tries.len() < 5 {
        let (mut a, mut qa, b, _qb, _relay) = setup();
        // A first burst, completed: the port has seen its application poll (the first
        // doorbell of a device holds nothing).
        post_burst(&mut a, &mut qa, &b, 0);
        busy_poll(&mut a);
        post_burst(&mut a, &mut qa, &b, 100);
        let before = a.dev.port().stats();
        a.dev.port().disconnect();
        assert!(!a.dev.port().holds_frames(), "frames still held with the cable out");
        let after = a.dev.port().stats();
        // What the port still held (the receive thread may have sent some meanwhile) went
        // nowhere: counted as sent while the link was down, no longer as sent, nor as held.
        let dropped = after.tx_drop_link_down - before.tx_drop_link_down;
        assert_eq!(before.tx_frames - after.tx_frames, dropped, "{before:?} then {after:?}");
        assert_eq!(before.tx_held - after.tx_held, dropped, "{before:?} then {after:?}");
        if dropped > 0 {
            return;
        }
        tries.push(before.tx_held);
    }
    panic!("no frame held when the cable came out, five times (frames held before it: {tries:?})");
}
