//! The verbs data path between two software ConnectX adapters on the in-process fabric: every
//! opcode over RC and UD with data checked in remote memory, error completions, completion
//! channels, and RC under loss and reordering.

#![forbid(unsafe_code)]

mod common;

use std::time::{Duration, Instant};
use umlx_sim::fabric::{Fabric, FabricConfig};
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

struct Side {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
}

fn side(fabric: &Fabric, n: u8) -> Side {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::new(cfg);
    fabric.attach(&dev.port());
    let ctx = Context::attach_sim(dev, &format!("t{n}"), ips).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256, None).unwrap();
    let all =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(64 * 1024, all).unwrap();
    Side { ctx, pd, cq, mr }
}

fn know_each_other(a: &Side, b: &Side) {
    a.ctx.add_neighbor(b.ctx.query_gid(1, 1).unwrap().to_ip(), b.ctx.mac());
    b.ctx.add_neighbor(a.ctx.query_gid(1, 1).unwrap().to_ip(), a.ctx.mac());
}

fn cap() -> QpInitCap {
    QpInitCap {
        cap: QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 128 },
        sq_sig_all: false,
    }
}

struct RcOpts {
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    access: AccessFlags,
}

impl Default for RcOpts {
    fn default() -> Self {
        RcOpts {
            timeout: 12,
            retry_cnt: 7,
            rnr_retry: 7,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

fn rc_qp(s: &Side, cq: Option<&Cq>) -> Qp {
    let cq = cq.unwrap_or(&s.cq);
    s.pd.create_qp(QpType::Rc, cq, cq, None, cap()).unwrap()
}

fn connect(s: &Side, qp: &mut Qp, peer: &Side, peer_qpn: u32, o: &RcOpts) {
    let _ = s;
    let dgid = peer.ctx.query_gid(1, 1).unwrap();
    let p = common::RcParams {
        psn: 100,
        access: o.access,
        rd_atomic: 4,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
    };
    common::connect_rc(qp, peer_qpn, dgid, p);
}

fn rc_pair(fabric: &Fabric, n: u8, o: &RcOpts) -> (Side, Side, Qp, Qp) {
    let a = side(fabric, n);
    let b = side(fabric, n + 1);
    know_each_other(&a, &b);
    let mut qa = rc_qp(&a, None);
    let mut qb = rc_qp(&b, None);
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    connect(&a, &mut qa, &b, nb, o);
    connect(&b, &mut qb, &a, na, o);
    (a, b, qa, qb)
}

fn wait_wc(cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    while out.len() < n {
        let k = cq.poll(&mut wc);
        out.extend_from_slice(&wc[..k]);
        assert!(start.elapsed() < Duration::from_secs(30), "timed out with {} of {n} completions: {out:?}", out.len());
        if k == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    out
}

fn wr<'a>(wr_id: u64, sg: &'a [Sge], op: SendOp) -> SendWr<'a> {
    SendWr { wr_id, sg_list: sg, op, send_flags: SendFlags::SIGNALED, inline_data: None, ud: None }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn rc_every_opcode_moves_exact_bytes() {
    let fabric = Fabric::perfect();
    let (mut a, mut b, mut qa, mut qb) = rc_pair(&fabric, 32, &RcOpts::default());
    // SEND with immediate, two SGEs gathered, into a receive with two SGEs scattered.
    let msg = pattern(3000, 1);
    a.mr.write(0, &msg[..1000]).unwrap();
    a.mr.write(2000, &msg[1000..]).unwrap();
    let rs = [b.mr.sge(100, 1500), b.mr.sge(5000, 2000)];
    qb.post_recv(&[RecvWr { wr_id: 77, sg_list: &rs }]).unwrap();
    let ss = [a.mr.sge(0, 1000), a.mr.sge(2000, 2000)];
    qa.post_send(&[wr(1, &ss, SendOp::SendWithImm(0xdead_beef))]).unwrap();
    let wa = wait_wc(&mut a.cq, 1);
    assert_eq!((wa[0].status, wa[0].opcode, wa[0].wr_id), (WcStatus::Success, WcOpcode::Send, 1));
    let wb = wait_wc(&mut b.cq, 1);
    assert_eq!(
        (wb[0].status, wb[0].opcode, wb[0].wr_id, wb[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 77, 3000)
    );
    assert_eq!(wb[0].imm_data, 0xdead_beef);
    assert!(wb[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wb[0].qp_num, qb.qp_num());
    let mut got = b.mr.to_vec(100, 1500).unwrap();
    got.extend(b.mr.to_vec(5000, 1500).unwrap());
    assert_eq!(got, msg);

    // RDMA WRITE (multi-packet) then WRITE with immediate.
    let data = pattern(5000, 7);
    a.mr.write(8192, &data).unwrap();
    let s = [a.mr.sge(8192, 5000)];
    qa.post_send(&[wr(2, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr() + 20000, rkey: b.mr.rkey() })]).unwrap();
    assert_eq!(wait_wc(&mut a.cq, 1)[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(b.mr.to_vec(20000, 5000).unwrap(), data);
    qb.post_recv(&[RecvWr { wr_id: 78, sg_list: &[] }]).unwrap();
    let s = [a.mr.sge(8192, 16)];
    qa.post_send(&[wr(
        3,
        &s,
        SendOp::RdmaWriteWithImm { remote_addr: b.mr.addr() + 30000, rkey: b.mr.rkey(), imm: 42 },
    )])
    .unwrap();
    wait_wc(&mut a.cq, 1);
    let wb = wait_wc(&mut b.cq, 1);
    assert_eq!((wb[0].opcode, wb[0].imm_data, wb[0].wr_id), (WcOpcode::RecvRdmaWithImm, 42, 78));
    assert_eq!(b.mr.to_vec(30000, 16).unwrap(), data[..16].to_vec());

    // RDMA READ into scattered buffers.
    let remote = pattern(2500, 9);
    b.mr.write(40000, &remote).unwrap();
    let s = [a.mr.sge(30000, 1000), a.mr.sge(40000, 1500)];
    qa.post_send(&[wr(4, &s, SendOp::RdmaRead { remote_addr: b.mr.addr() + 40000, rkey: b.mr.rkey() })]).unwrap();
    let w = wait_wc(&mut a.cq, 1);
    assert_eq!((w[0].status, w[0].opcode, w[0].byte_len), (WcStatus::Success, WcOpcode::RdmaRead, 2500));
    let mut got = a.mr.to_vec(30000, 1000).unwrap();
    got.extend(a.mr.to_vec(40000, 1500).unwrap());
    assert_eq!(got, remote);

    // Atomics: fetch-and-add then compare-and-swap, results in local memory (big-endian).
    b.mr.write(50000, &100u64.to_be_bytes()).unwrap();
    let s = [a.mr.sge(50000, 8)];
    qa.post_send(&[wr(
        5,
        &s,
        SendOp::AtomicFetchAndAdd { remote_addr: b.mr.addr() + 50000, rkey: b.mr.rkey(), compare_add: 5 },
    )])
    .unwrap();
    let w = wait_wc(&mut a.cq, 1);
    assert_eq!((w[0].status, w[0].opcode, w[0].byte_len), (WcStatus::Success, WcOpcode::FetchAdd, 8));
    assert_eq!(a.mr.to_vec(50000, 8).unwrap(), 100u64.to_be_bytes());
    assert_eq!(b.mr.to_vec(50000, 8).unwrap(), 105u64.to_be_bytes());
    qa.post_send(&[wr(
        6,
        &s,
        SendOp::AtomicCmpAndSwp { remote_addr: b.mr.addr() + 50000, rkey: b.mr.rkey(), compare_add: 105, swap: 7 },
    )])
    .unwrap();
    let w = wait_wc(&mut a.cq, 1);
    assert_eq!(w[0].opcode, WcOpcode::CompSwap);
    assert_eq!(a.mr.to_vec(50000, 8).unwrap(), 105u64.to_be_bytes());
    assert_eq!(b.mr.to_vec(50000, 8).unwrap(), 7u64.to_be_bytes());

    // Inline SEND; unsignaled WRITE followed by a signaled one: one completion for both.
    qb.post_recv(&[RecvWr { wr_id: 79, sg_list: &[b.mr.sge(60000, 64)] }]).unwrap();
    let mut w_inline = wr(7, &[], SendOp::Send);
    w_inline.send_flags = SendFlags::SIGNALED | SendFlags::INLINE;
    w_inline.inline_data = Some(b"inline payload!");
    qa.post_send(&[w_inline]).unwrap();
    wait_wc(&mut a.cq, 1);
    assert_eq!(wait_wc(&mut b.cq, 1)[0].byte_len, 15);
    assert_eq!(b.mr.to_vec(60000, 15).unwrap(), b"inline payload!".to_vec());
    let s = [a.mr.sge(0, 8)];
    let mut unsig = wr(8, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() });
    unsig.send_flags = SendFlags(0);
    qa.post_send(&[unsig, wr(9, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr() + 8, rkey: b.mr.rkey() })]).unwrap();
    let w = wait_wc(&mut a.cq, 1);
    assert_eq!(w[0].wr_id, 9);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(a.cq.poll(&mut [Wc::default(); 4]), 0, "no completion for the unsignaled WR");
}

#[test]
fn ud_send_carries_grh_and_source_qp() {
    let fabric = Fabric::perfect();
    let mut a = side(&fabric, 21);
    let mut b = side(&fabric, 22);
    know_each_other(&a, &b);
    let mut qa = a.pd.create_qp(QpType::Ud, &a.cq, &a.cq, None, cap()).unwrap();
    let mut qb = b.pd.create_qp(QpType::Ud, &b.cq, &b.cq, None, cap()).unwrap();
    for (qp, qkey) in [(&mut qa, 0x1111_1111u32), (&mut qb, 0x2222_2222)] {
        let m = QpAttrMask::STATE;
        qp.modify(
            &QpAttr { qp_state: Some(QpState::Init), port_num: 1, qkey, ..Default::default() },
            m | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )
        .unwrap();
        qp.modify(&QpAttr { qp_state: Some(QpState::Rtr), ..Default::default() }, m).unwrap();
        qp.modify(&QpAttr { qp_state: Some(QpState::Rts), sq_psn: 1, ..Default::default() }, m | QpAttrMask::SQ_PSN)
            .unwrap();
    }
    let ah =
        a.pd.create_ah(&AhAttr {
            grh: GlobalRoute {
                dgid: b.ctx.query_gid(1, 1).unwrap(),
                sgid_index: 1,
                hop_limit: 64,
                ..Default::default()
            },
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    qb.post_recv(&[RecvWr { wr_id: 5, sg_list: &[b.mr.sge(0, 40 + 512)] }]).unwrap();
    let payload = pattern(300, 3);
    a.mr.write(0, &payload).unwrap();
    let s = [a.mr.sge(0, 300)];
    let mut w = wr(1, &s, SendOp::SendWithImm(9));
    w.ud = Some(UdDest { ah: &ah, remote_qpn: qb.qp_num(), remote_qkey: 0x2222_2222 });
    qa.post_send(&[w]).unwrap();
    assert_eq!(wait_wc(&mut a.cq, 1)[0].status, WcStatus::Success);
    let wb = wait_wc(&mut b.cq, 1);
    assert_eq!((wb[0].status, wb[0].byte_len, wb[0].src_qp, wb[0].imm_data), (WcStatus::Success, 340, qa.qp_num(), 9));
    assert!(wb[0].wc_flags.contains(WcFlags::GRH));
    let grh = b.mr.to_vec(0, 40).unwrap();
    assert_eq!(&grh[..20], &[0u8; 20], "IPv4: 20 zero bytes first");
    assert_eq!(grh[20] >> 4, 4, "then the IPv4 header");
    assert_eq!(&grh[32..36], &a.ctx.query_gid(1, 1).unwrap().0[12..16], "source address");
    assert_eq!(b.mr.to_vec(40, 300).unwrap(), payload);
    // A wrong Q_Key is dropped: no receive completion.
    qb.post_recv(&[RecvWr { wr_id: 6, sg_list: &[b.mr.sge(1024, 552)] }]).unwrap();
    let mut w = wr(2, &s, SendOp::Send);
    w.ud = Some(UdDest { ah: &ah, remote_qpn: qb.qp_num(), remote_qkey: 0x3333_3333 });
    qa.post_send(&[w]).unwrap();
    wait_wc(&mut a.cq, 1);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(b.cq.poll(&mut [Wc::default(); 2]), 0);
}

#[test]
fn error_completions_carry_the_ibverbs_status() {
    let fabric = Fabric::perfect();
    let (mut a, b, mut qa, _qb) = rc_pair(&fabric, 34, &RcOpts { rnr_retry: 0, ..Default::default() });
    // Bad lkey: local protection error.
    let bad = [Sge::new(a.mr.addr(), 8, a.mr.lkey() ^ 0x5500)];
    qa.post_send(&[wr(1, &bad, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() })]).unwrap();
    let w = wait_wc(&mut a.cq, 1);
    assert_eq!((w[0].status, w[0].wr_id), (WcStatus::LocProtErr, 1));
    assert_eq!(qa.query().unwrap().qp_state, Some(QpState::Err));

    // Bad rkey: remote access error, remote memory untouched.
    let (mut a, b, mut qa, _qb) = rc_pair(&fabric, 36, &RcOpts::default());
    b.mr.write(0, &[0xaa; 16]).unwrap();
    a.mr.write(0, &[0x55; 16]).unwrap();
    let s = [a.mr.sge(0, 16)];
    qa.post_send(&[
        wr(2, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() ^ 0x100 }),
        wr(3, &s, SendOp::Send),
    ])
    .unwrap();
    let w = wait_wc(&mut a.cq, 2);
    assert_eq!((w[0].status, w[0].wr_id), (WcStatus::RemAccessErr, 2));
    assert_eq!((w[1].status, w[1].wr_id), (WcStatus::WrFlushErr, 3), "the next WR is flushed");
    assert_eq!(b.mr.to_vec(0, 16).unwrap(), vec![0xaa; 16]);

    // Access violation: the responder MR has no remote write.
    let (mut a, b, mut qa, _qb) = rc_pair(&fabric, 38, &RcOpts::default());
    let ro = b.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let s = [a.mr.sge(0, 16)];
    qa.post_send(&[wr(4, &s, SendOp::RdmaWrite { remote_addr: ro.addr(), rkey: ro.rkey() })]).unwrap();
    assert_eq!(wait_wc(&mut a.cq, 1)[0].status, WcStatus::RemAccessErr);

    // RNR with rnr_retry 0: no receive posted.
    let (mut a, _b, mut qa, _qb) = rc_pair(&fabric, 40, &RcOpts { rnr_retry: 0, ..Default::default() });
    let s = [a.mr.sge(0, 16)];
    qa.post_send(&[wr(5, &s, SendOp::Send)]).unwrap();
    assert_eq!(wait_wc(&mut a.cq, 1)[0].status, WcStatus::RnrRetryExcErr);

    // Total loss: transport retry counter exceeded.
    let lossy = Fabric::new(FabricConfig { seed: 1, loss: 1.0, ..Default::default() });
    let (mut a, b, mut qa, _qb) = rc_pair(&lossy, 42, &RcOpts { timeout: 8, retry_cnt: 2, ..Default::default() });
    let s = [a.mr.sge(0, 16)];
    qa.post_send(&[
        wr(6, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() }),
        wr(7, &s, SendOp::Send),
    ])
    .unwrap();
    let w = wait_wc(&mut a.cq, 2);
    assert_eq!((w[0].status, w[1].status), (WcStatus::RetryExcErr, WcStatus::WrFlushErr));
}

#[test]
fn completion_channel_wakes_on_solicited_events() {
    let fabric = Fabric::perfect();
    let (a, mut b, mut qa, mut qb0) = rc_pair(&fabric, 44, &RcOpts::default());
    // Move B's QP onto a CQ with a completion channel.
    let ch = b.ctx.create_comp_channel().unwrap();
    let mut bcq = b.ctx.create_cq(64, Some(&ch)).unwrap();
    let mut qb = rc_qp(&b, Some(&bcq));
    let reset = QpAttr { qp_state: Some(QpState::Reset), ..Default::default() };
    qa.modify(&reset, QpAttrMask::STATE).unwrap();
    qb0.modify(&reset, QpAttrMask::STATE).unwrap();
    connect(&a, &mut qa, &b, qb.qp_num(), &RcOpts::default());
    connect(&b, &mut qb, &a, qa.qp_num(), &RcOpts::default());
    let s = [a.mr.sge(0, 8)];
    for i in 0..3 {
        qb.post_recv(&[RecvWr { wr_id: 100 + i, sg_list: &[b.mr.sge(0, 64)] }]).unwrap();
    }
    // Solicited-only: an unsolicited SEND does not wake, a solicited one does.
    bcq.req_notify(true).unwrap();
    qa.post_send(&[wr(1, &s, SendOp::Send)]).unwrap();
    assert_eq!(ch.get_cq_event(Duration::from_millis(100)).unwrap(), None, "unsolicited");
    let mut sol = wr(2, &s, SendOp::Send);
    sol.send_flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
    qa.post_send(&[sol]).unwrap();
    assert_eq!(ch.get_cq_event(Duration::from_secs(5)).unwrap(), Some(bcq.cqn()));
    bcq.ack_events(1);
    assert_eq!(wait_wc(&mut bcq, 2).len(), 2);
    // Plain arm: any completion wakes, and the fd became readable.
    bcq.req_notify(false).unwrap();
    qa.post_send(&[wr(3, &s, SendOp::Send)]).unwrap();
    assert_eq!(ch.get_cq_event(Duration::from_secs(5)).unwrap(), Some(bcq.cqn()));
    assert!(ch.fd().is_some());
    let _ = &mut b.cq;
}

fn run_lossy(cfg: FabricConfig, messages: u64) {
    let fabric = Fabric::new(cfg);
    let (mut a, mut b, mut qa, mut qb) = rc_pair(&fabric, 46, &RcOpts { timeout: 12, ..Default::default() });
    let mut received = Vec::new();
    let mut sent = 0u64;
    let mut recv_posted = 0u64;
    let start = Instant::now();
    while (received.len() as u64) < messages {
        while recv_posted < messages && recv_posted - received.len() as u64 <= 16 {
            let slot = (recv_posted % 32) as usize;
            qb.post_recv(&[RecvWr { wr_id: recv_posted, sg_list: &[b.mr.sge(slot * 1024, 1024)] }]).unwrap();
            recv_posted += 1;
        }
        if sent < messages && sent - received.len() as u64 <= 8 {
            let slot = (sent % 32) as usize;
            a.mr.write(slot * 1024, &pattern(700, sent as u8)).unwrap();
            qa.post_send(&[wr(sent, &[a.mr.sge(slot * 1024, 700)], SendOp::Send)]).unwrap();
            sent += 1;
        }
        let mut wc = [Wc::default(); 16];
        let n = a.cq.poll(&mut wc);
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
        }
        let n = b.cq.poll(&mut wc);
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            let slot = (w.wr_id % 32) as usize;
            assert_eq!(
                b.mr.to_vec(slot * 1024, 700).unwrap(),
                pattern(700, w.wr_id as u8),
                "message {} corrupted",
                w.wr_id
            );
            received.push(w.wr_id);
        }
        assert!(start.elapsed() < Duration::from_secs(120), "stuck at {} of {messages}", received.len());
    }
    let expected: Vec<u64> = (0..messages).collect();
    assert_eq!(received, expected, "every message once, in order");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(b.cq.poll(&mut [Wc::default(); 4]), 0, "no duplicate completion");
}

#[test]
fn rc_under_ten_percent_loss_and_reordering_delivers_every_message_once_in_order() {
    run_lossy(FabricConfig { seed: 7, loss: 0.10, reorder: 0.10, ..Default::default() }, 150);
}

#[test]
fn a_reset_qp_starts_from_zero_and_loopback_works() {
    // One adapter, one QP connected to itself: the port loops its own frames back inside.
    let fabric = Fabric::perfect();
    let mut a = side(&fabric, 60);
    let mut qp = rc_qp(&a, None);
    let n = qp.qp_num();
    let gid = a.ctx.query_gid(1, 1).unwrap();
    a.ctx.add_neighbor(gid.to_ip(), a.ctx.mac());
    let me = Side {
        ctx: a.ctx.clone(),
        pd: a.ctx.alloc_pd().unwrap(),
        cq: a.ctx.create_cq(4, None).unwrap(),
        mr: a.pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap(),
    };
    for round in 0..3u32 {
        if round > 0 {
            qp.modify(&QpAttr { qp_state: Some(QpState::Reset), ..Default::default() }, QpAttrMask::STATE).unwrap();
        }
        connect(&a, &mut qp, &me, n, &RcOpts::default());
        let s = [a.mr.sge(0, 32)];
        let count = if round == 0 { 48 } else { 5 };
        for i in 0..count {
            qp.post_send(&[wr(i, &s, SendOp::RdmaWrite { remote_addr: a.mr.addr() + 8192, rkey: a.mr.rkey() })])
                .unwrap();
        }
        let w = wait_wc(&mut a.cq, count as usize);
        assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            a.cq.poll(&mut [Wc::default(); 8]),
            0,
            "round {round}: no completion for WQEs of an earlier incarnation"
        );
    }
}

#[test]
fn cq_resize_keeps_completions_waiting_and_takes_new_ones() {
    let fabric = Fabric::perfect();
    let (mut a, b, mut qa, _qb) = rc_pair(&fabric, 62, &RcOpts::default());
    let s = [a.mr.sge(0, 16)];
    let write = |i: u64| wr(i, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr() + 64 * (i % 64), rkey: b.mr.rkey() });
    // 5 completions wait in the CQ while it grows...
    for i in 0..5 {
        qa.post_send(&[write(i)]).unwrap();
    }
    let start = Instant::now();
    while a.cq.device_produced().unwrap() < 5 {
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    let before = a.cq.capacity();
    a.cq.resize(1000).unwrap();
    assert!(a.cq.capacity() >= 1000 && a.cq.capacity() > before);
    // ...then 300 more arrive in the new ring (wrapping it): all in order, none lost, none twice.
    let mut ids: Vec<u64> = wait_wc(&mut a.cq, 5).iter().map(|w| w.wr_id).collect();
    for batch in 0..10u64 {
        for k in 0..30 {
            qa.post_send(&[write(1000 + batch * 30 + k)]).unwrap_or_else(|e| panic!("{e}"));
        }
        let w = wait_wc(&mut a.cq, 30);
        assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
        ids.extend(w.iter().map(|w| w.wr_id));
    }
    let want: Vec<u64> = (0..5).chain(1000..1300).collect();
    assert_eq!(ids, want);
    // Shrinking below what is waiting is refused.
    for i in 0..10 {
        qa.post_send(&[write(i)]).unwrap();
    }
    let start = Instant::now();
    while a.cq.device_produced().unwrap() < 315 + 1 {
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    assert!(matches!(a.cq.resize(4), Err(Error::Invalid(_))));
    assert_eq!(wait_wc(&mut a.cq, 10).len(), 10);
}

/// Polls one entry at a time until `n` completions came.
fn wait_wc_one_at_a_time(cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let start = Instant::now();
    while out.len() < n {
        let mut w = [Wc::default()];
        match cq.poll(&mut w) {
            0 => std::thread::sleep(Duration::from_micros(20)),
            1 => out.push(w[0]),
            k => panic!("a poll with room for one returned {k}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30), "timed out with {} of {n} completions: {out:?}", out.len());
    }
    out
}

#[test]
fn polls_of_one_and_of_sixteen_report_every_requester_opcode_across_ring_wraps() {
    // A CQ of 8 entries wraps every 8 completions; each round posts WRITE, READ, SEND,
    // FETCH_ADD and WRITE in one chain, so the poller's (QP, opcode) cache changes at
    // every completion and the fast and general paths take turns.
    let fabric = Fabric::perfect();
    let a = side(&fabric, 64);
    let mut b = side(&fabric, 65);
    know_each_other(&a, &b);
    let mut small = a.ctx.create_cq(7, None).unwrap();
    assert_eq!(small.capacity(), 7);
    let mut qa = rc_qp(&a, Some(&small));
    let mut qb = rc_qp(&b, None);
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    connect(&a, &mut qa, &b, nb, &RcOpts::default());
    connect(&b, &mut qb, &a, na, &RcOpts::default());
    let s = [a.mr.sge(0, 16)];
    let r = [a.mr.sge(4096, 24)];
    let f = [a.mr.sge(8192, 8)];
    let round = |k: u64| {
        let base = 100 * k;
        [
            wr(base, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() }),
            wr(base + 1, &r, SendOp::RdmaRead { remote_addr: b.mr.addr() + 512, rkey: b.mr.rkey() }),
            wr(base + 2, &s, SendOp::Send),
            wr(
                base + 3,
                &f,
                SendOp::AtomicFetchAndAdd { remote_addr: b.mr.addr() + 1024, rkey: b.mr.rkey(), compare_add: 1 },
            ),
            wr(base + 4, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr() + 64, rkey: b.mr.rkey() }),
        ]
    };
    let want = |k: u64| {
        let base = 100 * k;
        [
            (base, WcOpcode::RdmaWrite, None),
            (base + 1, WcOpcode::RdmaRead, Some(24)),
            (base + 2, WcOpcode::Send, None),
            (base + 3, WcOpcode::FetchAdd, Some(8)),
            (base + 4, WcOpcode::RdmaWrite, None),
        ]
    };
    let check = |k: u64, got: &[Wc]| {
        assert_eq!(got.len(), 5);
        for (w, (wr_id, opcode, len)) in got.iter().zip(want(k)) {
            assert_eq!((w.status, w.opcode, w.wr_id, w.qp_num), (WcStatus::Success, opcode, wr_id, na), "{w:?}");
            assert_eq!(w.wc_flags, WcFlags(0));
            if let Some(len) = len {
                assert_eq!(w.byte_len, len, "{w:?}");
            }
        }
    };
    for k in 0..8u64 {
        qb.post_recv(&[RecvWr { wr_id: 900 + k, sg_list: &[b.mr.sge(2048, 64)] }]).unwrap();
        qa.post_send(&round(k)).unwrap();
        if k % 2 == 0 {
            check(k, &wait_wc_one_at_a_time(&mut small, 5));
        } else {
            check(k, &wait_wc(&mut small, 5));
        }
        assert_eq!(small.poll(&mut [Wc::default(); 16]), 0, "nothing more");
        assert_eq!(small.poll(&mut []), 0);
    }
    // One completion at a time into polls with room for 16: each finds exactly one.
    for k in 0..12u64 {
        qa.post_send(&[wr(5000 + k, &s, SendOp::RdmaWrite { remote_addr: b.mr.addr(), rkey: b.mr.rkey() })]).unwrap();
        let mut w = [Wc::default(); 16];
        let start = Instant::now();
        let n = loop {
            match small.poll(&mut w) {
                0 => assert!(start.elapsed() < Duration::from_secs(30), "no completion"),
                n => break n,
            }
        };
        assert_eq!(n, 1);
        assert_eq!((w[0].status, w[0].opcode, w[0].wr_id), (WcStatus::Success, WcOpcode::RdmaWrite, 5000 + k));
        assert_eq!(w[1], Wc::default(), "only the first entry is written");
    }
    assert_eq!(wait_wc(&mut b.cq, 8).len(), 8, "the peer received every SEND");
    assert_eq!(b.mr.to_vec(1024, 8).unwrap(), 8u64.to_be_bytes(), "eight fetch-and-adds of 1 (big-endian, as mlx5)");
}
