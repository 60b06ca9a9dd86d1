//! A program that exits the moment its last poll took a message, destroying nothing (as many
//! small programs do, and any program that calls `exit` on an error path): the sender of that
//! message must still see it acknowledged. A ConnectX sends that ACK as the message arrives;
//! the software ConnectX may hold it back for a polling application to send with its reply
//! (`Port::acks_may_wait`), and so must send it when the process exits.
//!
//! The test runs itself again as the receiver, a second process on a UDP wire between the two.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use umlx_verbs::simwire::{SimWire, SimWireOptions};
use umlx_verbs::*;

/// Set in the receiver's environment to `LOCAL,PEER`: the wire's two endpoints.
const RECEIVER: &str = "UMLX_TEST_EXITING_RECEIVER";
const NAME: &str = "a_receiver_that_exits_at_once_still_acknowledges_what_it_took";
const SIZE: u32 = 64;

/// One side: a sim on the wire from `local` to `peer`, its CQ, buffer and RC QP.
struct Side {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn open(local: SocketAddr, peer: SocketAddr, index: u8) -> Side {
    let o = SimWireOptions { wire: SimWire::Udp(local, peer), index: Some(index), ..Default::default() };
    let ctx = Context::open_sim_on_wire(&o).expect("a sim on the UDP wire");
    let pd = ctx.alloc_pd().expect("a PD");
    let cq = ctx.create_cq(16, None).expect("a CQ");
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).expect("a buffer");
    let qp = pd.create_qp(QpType::Rc, &cq).max_send_wr(4).max_recv_wr(4).sq_sig_all(true).build().expect("an RC QP");
    Side { ctx, _pd: pd, cq, mr, qp }
}

/// What one side tells the other: its QP number and GID.
fn address(s: &Side) -> String {
    let (_, gid) = s.ctx.default_gid().expect("the port's GID");
    format!("{} {}", s.qp.qp_num(), u128::from_be_bytes(gid.0))
}

fn connect(s: &mut Side, line: &str) {
    let mut words = line.split_whitespace();
    let qp_num = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("no QP number in {line:?}"));
    let gid = words.next().and_then(|w| w.parse::<u128>().ok()).unwrap_or_else(|| panic!("no GID in {line:?}"));
    let peer = RcPeer { qp_num, psn: 0, gid: Gid(gid.to_be_bytes()) };
    s.qp.connect(&peer, &ConnectParams::default()).expect("the QP connects");
}

/// The first completion on `cq` within 10 s.
fn completion(cq: &mut Cq) -> Option<Wc> {
    let mut wc = [Wc::default()];
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if cq.poll(&mut wc) == 1 {
            return Some(wc[0]);
        }
    }
    None
}

/// The receiver: connects, posts a receive, tells the sender its address, polls until the
/// message is there, and exits at once with everything still open.
fn receiver(wire: &str) -> ! {
    let (local, peer) = wire.split_once(',').expect("LOCAL,PEER");
    let mut s = open(local.parse().unwrap(), peer.parse().unwrap(), 2);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("the sender's address");
    connect(&mut s, &line);
    s.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[s.mr.sge(0, SIZE)] }]).expect("a receive");
    // The sender sends once it has this.
    println!("address: {}", address(&s));
    let wc = completion(&mut s.cq).expect("the message arrives");
    let data = s.mr.to_vec(0, SIZE as usize).expect("the buffer");
    println!("took {:?} {:?} {} bytes, first {}", wc.status, wc.opcode, wc.byte_len, data[0]);
    std::process::exit(0);
}

fn free_port() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).expect("a free UDP port")
}

#[test]
fn a_receiver_that_exits_at_once_still_acknowledges_what_it_took() {
    if let Ok(wire) = std::env::var(RECEIVER) {
        receiver(&wire);
    }
    let (mine, theirs) = (free_port(), free_port());
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(RECEIVER, format!("{theirs},{mine}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the receiver starts");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut s = open(mine, theirs, 1);
    writeln!(child.stdin.as_mut().unwrap(), "{}", address(&s)).expect("the receiver reads the address");
    // libtest prints its own words before the test's, on the same line.
    let mut line = String::new();
    let theirs = loop {
        line.clear();
        assert!(out.read_line(&mut line).expect("the receiver's output") > 0, "the receiver printed no address");
        if let Some((_, a)) = line.split_once("address: ") {
            break a.to_string();
        }
    };
    connect(&mut s, &theirs);
    s.mr.write(0, &[0x5A; SIZE as usize]).unwrap();
    let sge = [s.mr.sge(0, SIZE)];
    s.qp.post_send(&[SendWr::new(9, SendOp::Send { data: Payload::Sges(&sge), imm: None }).signaled()])
        .expect("the send posts");
    let wc = completion(&mut s.cq).expect("the send completes within 10 s");
    let status = child.wait().expect("the receiver ends");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(status.success(), "the receiver failed: {status}; it printed {rest:?}");
    assert!(rest.contains("took Success Recv 64 bytes, first 90"), "the receiver printed {rest:?}");
    // Before the fix: the receiver's ACK never left, and the send ended, after seven
    // retransmissions to a closed port, with RetryExcErr.
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (9, WcStatus::Success, WcOpcode::Send), "{wc:?}");
}
