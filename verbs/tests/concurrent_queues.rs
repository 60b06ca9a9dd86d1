//! Two threads driving two QPs of one pair of in-process software ConnectX adapters at once:
//! the devices run both threads' send doorbells and receive queues side by side (a shared
//! borrow of each device, a lane per run, received frames steered to queues by destination
//! QP). Every byte lands, every completion comes once and in order, and nothing is lost,
//! duplicated or reordered on the way (no retransmission, no sequence NAK, no duplicate).

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};
use umlx_verbs::*;

mod two_sims;
use two_sims::End;

const ACCESS: AccessFlags = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);
/// WRITEs per round, each `WRITE_LEN` bytes (three packets at the path MTU of 1024).
const WRITES: usize = 8;
const WRITE_LEN: usize = 3000;
/// Where each round's SEND lands in the receiver's MR.
const RECV_AT: usize = 48 << 10;

/// A second flow beside the one [`two_sims::pair`] made: a CQ, an RC QP and an MR of its own on
/// each adapter, connected as that one is.
fn second_flow(a: &End, b: &End) -> (End, End) {
    let end = |e: &End| {
        let pd = e.ctx.alloc_pd().unwrap();
        let cq = e.ctx.create_cq(256, None).unwrap();
        let qp = pd.create_qp(QpType::Rc, &cq).max_send_wr(64).max_recv_wr(64).sq_sig_all(true).build().unwrap();
        let mr = pd.alloc_mr(1 << 16, ACCESS).unwrap();
        End { ctx: e.ctx.clone(), dev: e.dev.clone(), cq, qp, mr, _pd: pd }
    };
    let (mut a2, mut b2) = (end(a), end(b));
    let (ga, gb) = (a.ctx.query_gid(1, 1).unwrap(), b.ctx.query_gid(1, 1).unwrap());
    let params =
        ConnectParams { path_mtu: Some(Mtu::Mtu1024), sgid_index: Some(1), access: ACCESS, ..Default::default() };
    let (qa, qb) = (a2.qp.qp_num(), b2.qp.qp_num());
    a2.qp.connect(&RcPeer { qp_num: qb, psn: 0, gid: gb }, &params).unwrap();
    b2.qp.connect(&RcPeer { qp_num: qa, psn: 0, gid: ga }, &params).unwrap();
    (a2, b2)
}

/// Bytes that differ from flow to flow, round to round and WRITE to WRITE.
fn pattern(flow: u64, round: u64, k: u64, len: usize) -> Vec<u8> {
    let seed = (flow << 40) ^ (round << 8) ^ k;
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) ^ seed.wrapping_mul(0x85eb_ca6b) ^ (seed >> 13)) as u8)
        .collect()
}

/// Waits for `n` completions on `cq`, checking each one's status and opcode with `check`.
fn complete(cq: &mut Cq, n: usize, what: &str, mut check: impl FnMut(usize, &Wc)) {
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    let mut got = 0;
    while got < n {
        let k = cq.poll(&mut wc);
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{what}: completion {got}: {w:?}");
            check(got, w);
            got += 1;
        }
        if k == 0 {
            assert!(start.elapsed() < Duration::from_secs(20), "{what}: {got} of {n} completions");
            std::thread::yield_now();
        }
    }
}

/// `rounds` rounds of flow `flow` from `a` to `b`: a receive posted at `b`, then `WRITES`
/// WRITEs and a SEND posted with one doorbell; every completion checked (the WRITEs' in order,
/// by WR id), the receive's byte count and the WRITEs' bytes in `b`'s memory.
fn run_flow(flow: u64, a: &mut End, b: &mut End, rounds: u64) {
    for round in 0..rounds {
        let what = format!("flow {flow}, round {round}");
        let rsge = [b.mr.sge(RECV_AT, 64)];
        b.qp.post_recv(&[RecvWr { wr_id: round, sg_list: &rsge }]).unwrap();
        for k in 0..WRITES {
            a.mr.write(k * WRITE_LEN, &pattern(flow, round, k as u64, WRITE_LEN)).unwrap();
        }
        a.mr.write(RECV_AT, &pattern(flow, round, 99, 64)).unwrap();
        let sges: Vec<[Sge; 1]> = (0..WRITES).map(|k| [a.mr.sge(k * WRITE_LEN, WRITE_LEN as u32)]).collect();
        let send_sge = [a.mr.sge(RECV_AT, 64)];
        let mut wrs: Vec<SendWr<'_>> = (0..WRITES)
            .map(|k| {
                let remote = Remote { addr: b.mr.addr() + (k * WRITE_LEN) as u64, rkey: b.mr.rkey() };
                SendWr::new(k as u64, SendOp::Write { data: Payload::Sges(&sges[k]), remote, imm: None })
            })
            .collect();
        wrs.push(SendWr::new(WRITES as u64, SendOp::Send { data: Payload::Sges(&send_sge), imm: None }));
        a.qp.post_send(&wrs).unwrap();
        complete(&mut a.cq, WRITES + 1, &what, |i, w| {
            let op = if i < WRITES { WcOpcode::RdmaWrite } else { WcOpcode::Send };
            assert_eq!((w.wr_id, w.opcode), (i as u64, op), "{what}: completion {i}");
        });
        complete(&mut b.cq, 1, &what, |_, w| {
            assert_eq!((w.wr_id, w.opcode, w.byte_len), (round, WcOpcode::Recv, 64), "{what}: the receive");
        });
        for k in 0..WRITES {
            let got = b.mr.to_vec(k * WRITE_LEN, WRITE_LEN).unwrap();
            assert!(got == pattern(flow, round, k as u64, WRITE_LEN), "{what}: WRITE {k}'s bytes at the responder");
        }
        assert_eq!(b.mr.to_vec(RECV_AT, 64).unwrap(), pattern(flow, round, 99, 64), "{what}: the SEND's bytes");
    }
}

#[test]
fn two_threads_on_two_qps_of_one_pair_of_adapters_deliver_everything_once_and_in_order() {
    let params = ConnectParams { access: ACCESS, ..Default::default() };
    let (_fabric, mut a1, mut b1) = two_sims::pair(41, ACCESS, params);
    let (mut a2, mut b2) = second_flow(&a1, &b1);
    let (dev_a, dev_b) = (a1.dev.clone(), b1.dev.clone());
    const ROUNDS: u64 = 150;
    std::thread::scope(|s| {
        let t1 = s.spawn(|| run_flow(1, &mut a1, &mut b1, ROUNDS));
        let t2 = s.spawn(|| run_flow(2, &mut a2, &mut b2, ROUNDS));
        t1.join().expect("flow 1");
        t2.join().expect("flow 2");
    });
    // Two flows of ROUNDS rounds, each WRITES WRITEs of three packets and a one-packet SEND.
    let packets = 2 * ROUNDS * (WRITES as u64 * 3 + 1);
    let (ta, tb) = (dev_a.transport_stats(), dev_b.transport_stats());
    assert_eq!(ta.tx_packets, packets, "each packet sent once: {ta:?}");
    assert_eq!((ta.retransmits, ta.timeouts, ta.seq_naks_received), (0, 0, 0), "{ta:?}");
    assert_eq!((tb.duplicates, tb.seq_naks_sent, tb.rx_dropped), (0, 0, 0), "{tb:?}");
    assert_eq!(tb.rx_packets, packets, "{tb:?}");
}
