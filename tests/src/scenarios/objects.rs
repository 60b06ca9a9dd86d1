//! Verbs objects: PDs, both kinds of memory region, CQs, completion channels (any and
//! solicited-only), RC and UD QP state machines with `ibv_query_qp`, address handles, SRQs
//! shared by QPs and the SRQ limit event.

use crate::env::Env;
use crate::kit::Result;
use crate::kit::*;
use crate::{ensure, ensure_eq};
use std::time::Duration;
use umlx_hwdesc::enums::EventType;
use umlx_verbs::*;

/// `ibv_alloc_pd`; `ibv_reg_mr` over a caller's buffer and the owned-buffer variant: keys,
/// lengths, copies in and out, bounds, the buffer given back by dereg, and the access-flag rule
/// (remote write/atomic need local write; unknown bits refused) for both.
pub fn pd_and_mr_registration(env: &mut Env) -> Result<Outcome> {
    let ctx = &env.a.ctx;
    let pd1 = ctx.alloc_pd()?;
    let pd2 = ctx.alloc_pd()?;
    ensure!(pd1.pdn() != pd2.pdn(), "two PDs with PD number {:#x}", pd1.pdn());

    // Owned variant.
    let owned = pd1.alloc_mr(10_000, all_access())?;
    ensure!(owned.len() >= 10_000 && !owned.is_empty(), "owned MR of {} bytes for 10000", owned.len());
    ensure_eq!(owned.access(), all_access(), "owned MR access flags");
    let other = pd1.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
    ensure!(owned.lkey() != other.lkey() && owned.rkey() != other.rkey(), "two MRs share a key");
    ensure_eq!(owned.to_vec(0, 10_000)?, vec![0u8; 10_000], "a new owned MR is zeroed");
    let data = pattern(5000, 1);
    owned.write(4000, &data)?;
    same_bytes("owned MR read back", &owned.to_vec(4000, 5000)?, &data)?;
    owned.fill(100, 50, 0xab)?;
    ensure_eq!(owned.to_vec(99, 52)?, [&[0u8][..], &[0xab; 50], &[0]].concat(), "fill");
    let end = owned.len();
    ensure!(owned.write(end - 2, b"xyz").is_err(), "a write past the end of an owned MR must fail");
    ensure!(owned.read(end, &mut [0u8; 1]).is_err(), "a read past the end of an owned MR must fail");
    let s = owned.sge(12, 34);
    ensure_eq!((s.addr(), s.length(), s.lkey()), (owned.addr() + 12, 34, owned.lkey()), "Mr::sge");
    ensure!(owned.dereg().is_none(), "an owned MR gives no buffer back");

    // Caller's-buffer variant: three pages and an odd tail, contents kept.
    let user_data = pattern(3 * 4096 + 123, 2);
    let user = pd2.reg_mr(user_data.clone(), AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    ensure_eq!(user.len(), user_data.len(), "user MR length");
    ensure_eq!(user.access(), AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ, "user MR access flags");
    same_bytes("user MR contents", &user.to_vec(0, user_data.len())?, &user_data)?;
    user.write(4090, b"across a page")?;
    ensure!(user.write(user_data.len() - 1, b"xy").is_err(), "a write past the end of a user MR must fail");
    let back = user.dereg().ok_or_else(|| Failure::new("a user MR must give its buffer back"))?;
    ensure_eq!(&back[4090..4103], b"across a page", "the buffer given back holds the writes");
    same_bytes("untouched bytes of the buffer given back", &back[..4090], &user_data[..4090])?;

    // Access rules, both variants.
    let bad = [
        (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE without LOCAL_WRITE"),
        (AccessFlags::REMOTE_ATOMIC | AccessFlags::REMOTE_READ, "REMOTE_ATOMIC without LOCAL_WRITE"),
        (AccessFlags(0x100) | AccessFlags::LOCAL_WRITE, "an unknown flag"),
    ];
    for (flags, why) in bad {
        ensure!(
            matches!(pd1.alloc_mr(64, flags), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
            "alloc_mr with {why} must be EINVAL"
        );
        ensure!(
            matches!(pd1.reg_mr(vec![0u8; 64], flags), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
            "reg_mr with {why} must be EINVAL"
        );
    }
    let ro = pd1.reg_mr(vec![7u8; 64], AccessFlags::REMOTE_READ)?;
    ensure_eq!(ro.to_vec(0, 4)?, vec![7u8; 4], "a remote-read-only MR");
    Ok(Outcome::Passed)
}

/// Traffic through both MR variants: RDMA WRITE from a caller's buffer into a 2 MiB owned
/// region (huge pages when the system has them) across its page boundary, RDMA READ back into
/// another caller's buffer, SEND into a caller's buffer given back by dereg.
pub fn mr_variants_carry_traffic(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let len = 3 * 4096 + 123;
    let src = pattern(len, 3);
    let a_src = a.pd.reg_mr(src.clone(), AccessFlags::LOCAL_WRITE)?;
    let a_dst = a.pd.reg_mr(vec![0u8; len], AccessFlags::LOCAL_WRITE)?;
    let big_len = (2 << 20) + 8192;
    let b_big = b.pd.alloc_mr(big_len, all_access())?;
    let at = (2 << 20) - 5001;
    b_big.fill(at - 64, len + 128, 0xee)?;

    qa.post_send(&[wr(1, write(&[a_src.sge(0, len as u32)], &b_big, at))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 1, WcStatus::Success, WcOpcode::RdmaWrite)?;
    same_bytes("WRITE from a user MR into a 2 MiB owned MR", &b_big.to_vec(at, len)?, &src)?;
    untouched("bytes before the WRITE", &b_big, at - 64, 64, 0xee)?;
    untouched("bytes after the WRITE", &b_big, at + len, 64, 0xee)?;

    qa.post_send(&[wr(2, read(&[a_dst.sge(0, len as u32)], &b_big, at))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 2, WcStatus::Success, WcOpcode::RdmaRead)?;
    ensure_eq!(w[0].byte_len, len as u32, "READ byte_len");
    same_bytes("READ into a user MR", &a_dst.to_vec(0, len)?, &src)?;

    let msg = pattern(3000, 4);
    b.mr.write(100, &msg)?;
    let a_recv = a.pd.reg_mr(vec![0x11u8; 5000], AccessFlags::LOCAL_WRITE)?;
    qa.post_recv(&[recv(3, &[a_recv.sge(1000, 4000)])])?;
    qb.post_send(&[wr(4, send(&[b.mr.sge(100, 3000)]))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 3, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len, 3000, "received bytes");
    let back = a_recv.dereg().ok_or_else(|| Failure::new("user MR gave no buffer back"))?;
    same_bytes("SEND into a user MR, from the buffer given back", &back[1000..4000], &msg)?;
    same_bytes("bytes after the message", &back[4000..], &[0x11; 1000])?;
    drop((a_src, a_dst, b_big));
    Ok(Outcome::Passed)
}

/// `ibv_create_cq` sizes, polling an empty CQ, polling in batches smaller than what is there (in
/// order, nothing lost), the device's producer counter, and `req_notify` without a channel.
pub fn cq_poll_batches_and_producer_counter(env: &mut Env) -> Result<Outcome> {
    let ctx = &env.a.ctx;
    let small = ctx.create_cq(1, None)?;
    let mut mid = ctx.create_cq(100, None)?;
    ensure!(small.capacity() >= 1 && mid.capacity() >= 100, "capacities {} {}", small.capacity(), mid.capacity());
    ensure!(small.cqn() != mid.cqn(), "two CQs with CQN {:#x}", mid.cqn());
    ensure_eq!(mid.poll(&mut [Wc::default(); 4]), 0, "polling an empty CQ");
    ensure_eq!(mid.poll(&mut []), 0, "polling into an empty slice");
    ensure_eq!(mid.device_produced()?, 0, "producer counter of a new CQ");
    ensure!(
        matches!(mid.req_notify(false), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "req_notify without a channel must be EINVAL"
    );

    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let s = [a.mr.sge(0, 8)];
    let wrs: Vec<SendWr> = (0..10).map(|i| wr(100 + i, write(&s, &b.mr, 8 * i as usize))).collect();
    qa.post_send(&wrs)?;
    // Wait until the device wrote all ten, then take them three at a time.
    let start = std::time::Instant::now();
    while a.cq.device_produced()? < 10 {
        ensure!(start.elapsed() < env.timeout, "producer counter {} of 10", a.cq.device_produced()?);
        std::thread::sleep(Duration::from_micros(100));
    }
    let mut got = Vec::new();
    let mut batch = [Wc::default(); 3];
    for expect in [3, 3, 3, 1, 0] {
        let n = a.cq.poll(&mut batch);
        ensure_eq!(n, expect, "batch of a CQ holding {} completions", 10 - got.len());
        got.extend(batch[..n].iter().map(|w| (w.wr_id, w.status)));
    }
    let want: Vec<(u64, WcStatus)> = (100..110).map(|i| (i, WcStatus::Success)).collect();
    ensure_eq!(got, want, "completions in posting order");
    ensure_eq!(a.cq.device_produced()?, 10, "producer counter after ten completions");
    drop(small);
    Ok(Outcome::Passed)
}

/// A completion channel: its descriptor; no event while the CQ is not armed; one event per
/// arm, naming the CQ; `ack_cq_events`; two CQs on one channel (the QP's send and receive CQs)
/// each named by their own events.
pub fn completion_channel_events(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (t, quiet) = (env.timeout, env.quiet);
    let ch = b.ep.ctx.create_comp_channel()?;
    ensure!(
        ch.fd().is_some(),
        "the completion channel has no file descriptor: the backend gave its interrupt vector no eventfd"
    );
    let mut rcq = b.ep.ctx.create_cq(64, Some(&ch))?;
    let mut scq = b.ep.ctx.create_cq(64, Some(&ch))?;
    rcq.set_event_context(0x7ec);
    scq.set_event_context(0x5e4d);
    let ev = |e: Option<CqEvent>| e.map(|e| (e.cqn(), e.context()));
    let mut qb = b.pd.create_qp(QpType::Rc, &scq).recv_cq(&rcq).cap(default_caps()).build()?;
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    let s = [a.mr.sge(0, 16)];
    let r = [b.mr.sge(0, 64)];

    // Not armed: the completion arrives, no event.
    qb.post_recv(&[recv(1, &r)])?;
    qa.post_send(&[wr(10, send(&s))])?;
    wait_wcs(&mut rcq, 1, t)?;
    ensure_eq!(ev(ch.get_cq_event(quiet)?), None, "event from a CQ that was not armed");

    // Armed: one event naming the receive CQ.
    rcq.req_notify(false)?;
    qb.post_recv(&[recv(2, &r)])?;
    qa.post_send(&[wr(11, send(&s))])?;
    ensure_eq!(ev(ch.get_cq_event(t)?), Some((rcq.cqn(), 0x7ec)), "event after arming the receive CQ");
    rcq.ack_events(1);
    ensure_eq!(rcq.acked_events(), 1, "acknowledged events");
    expect_wc(&wait_wcs(&mut rcq, 1, t)?[0], 2, WcStatus::Success, WcOpcode::Recv)?;

    // The arm is used up: the next completion raises no event.
    qb.post_recv(&[recv(3, &r)])?;
    qa.post_send(&[wr(12, send(&s))])?;
    wait_wcs(&mut rcq, 1, t)?;
    ensure_eq!(ev(ch.get_cq_event(quiet)?), None, "a second event from one arm");

    // A re-arm before the completion of the event taken is polled raises no event for it,
    // only for the next completion (ibv_req_notify_cq(3): "Upon the addition of a new CQ
    // entry"; perftest's event mode re-arms, then polls once).
    wait_wcs(&mut a.cq, 3, t)?;
    rcq.req_notify(false)?;
    qb.post_recv(&[recv(4, &r), recv(5, &r)])?;
    qa.post_send(&[wr(13, send(&s))])?;
    ensure_eq!(ev(ch.get_cq_event(t)?), Some((rcq.cqn(), 0x7ec)), "event after arming the receive CQ again");
    rcq.ack_events(1);
    rcq.req_notify(false)?;
    ensure_eq!(ev(ch.get_cq_event(quiet)?), None, "an event for a completion an event already covered");
    qa.post_send(&[wr(14, send(&s))])?;
    ensure_eq!(ev(ch.get_cq_event(t)?), Some((rcq.cqn(), 0x7ec)), "event for the completion after the re-arm");
    rcq.ack_events(1);
    let wcs = wait_wcs(&mut rcq, 2, t)?;
    expect_wc(&wcs[0], 4, WcStatus::Success, WcOpcode::Recv)?;
    expect_wc(&wcs[1], 5, WcStatus::Success, WcOpcode::Recv)?;

    // A completion written while the CQ was not armed, still unpolled when it is armed,
    // raises the event at once: a host that polled the CQ empty, armed it and sleeps misses
    // nothing. The requester's completion says the responder wrote its receive CQE (it does
    // so before it ACKs).
    wait_wcs(&mut a.cq, 2, t)?;
    qb.post_recv(&[recv(6, &r)])?;
    qa.post_send(&[wr(15, send(&s))])?;
    wait_wcs(&mut a.cq, 1, t)?;
    rcq.req_notify(false)?;
    ensure_eq!(ev(ch.get_cq_event(t)?), Some((rcq.cqn(), 0x7ec)), "no event at the arm for a completion it missed");
    rcq.ack_events(1);
    expect_wc(&wait_wcs(&mut rcq, 1, t)?[0], 6, WcStatus::Success, WcOpcode::Recv)?;

    // The send CQ on the same channel: its event names it.
    scq.req_notify(false)?;
    qb.post_send(&[wr(20, write(&[b.mr.sge(0, 8)], &a.mr, 0))])?;
    ensure_eq!(ev(ch.get_cq_event(t)?), Some((scq.cqn(), 0x5e4d)), "event after arming the send CQ");
    scq.ack_events(1);
    expect_wc(&wait_wcs(&mut scq, 1, t)?[0], 20, WcStatus::Success, WcOpcode::RdmaWrite)?;
    drop((qa, qb));
    Ok(Outcome::Passed)
}

/// Completion channels come and go: creating and dropping (with a CQ on each) twice as many
/// channels as the device has interrupt vectors works, as a dropped channel's vector is free
/// again.
pub fn completion_channels_are_reusable(env: &mut Env) -> Result<Outcome> {
    let ctx = &env.a.ctx;
    let vectors = ctx.hca().backend().irq_count();
    for k in 0..2 * vectors {
        let ch = ctx.create_comp_channel().map_err(|e| {
            Failure::new(format!("completion channel {k}, each dropped before the next ({vectors} vectors): {e}"))
        })?;
        let cq = ctx.create_cq(16, Some(&ch))?;
        drop((cq, ch));
    }
    Ok(Outcome::Passed)
}

/// Solicited-only arming: unsolicited SENDs raise no event, a solicited SEND (and a solicited
/// SEND with immediate) does; the unsolicited completions are in the CQ all the same.
pub fn completion_channel_solicited_only(env: &mut Env) -> Result<Outcome> {
    let (a, b) = env.sides()?;
    let (t, quiet) = (env.timeout, env.quiet);
    let ch = b.ep.ctx.create_comp_channel()?;
    let mut cq = b.ep.ctx.create_cq(64, Some(&ch))?;
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).recv_cq(&cq).cap(default_caps()).build()?;
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    for i in 0..6 {
        qb.post_recv(&[recv(100 + i, &[b.mr.sge(64 * i as usize, 64)])])?;
    }
    let s = &[a.mr.sge(0, 8)];
    let solicited = SendFlags::SIGNALED | SendFlags::SOLICITED;

    cq.req_notify(true)?;
    qa.post_send(&[wr(1, send(s)), wr(2, send_imm(s, 5))])?;
    wait_wcs(&mut cq, 2, t)?;
    ensure_eq!(ch.get_cq_event(quiet)?.map(|e| e.cqn()), None, "event for unsolicited SENDs on a solicited-only arm");
    qa.post_send(&[with_flags(wr(3, send(s)), solicited)])?;
    ensure!(ch.get_cq_event(t)?.is_some_and(|e| e.is_for(&cq)), "no event for a solicited SEND");
    cq.ack_events(1);
    expect_wc(&wait_wcs(&mut cq, 1, t)?[0], 102, WcStatus::Success, WcOpcode::Recv)?;

    cq.req_notify(true)?;
    qa.post_send(&[wr(4, send(s)), with_flags(wr(5, send_imm(s, 9)), solicited)])?;
    ensure!(ch.get_cq_event(t)?.is_some_and(|e| e.is_for(&cq)), "no event for a solicited SEND with immediate");
    cq.ack_events(1);
    let w = wait_wcs(&mut cq, 2, t)?;
    ensure_eq!((w[0].wr_id, w[1].wr_id, w[1].imm_data), (103, 104, 9), "both completions are there");
    drop((qa, qb));
    Ok(Outcome::Passed)
}

/// The RC QP state machine with `ibv_query_qp` after each step: RESET → INIT (access flags),
/// INIT → INIT (more access), → RTR (path, PSN, MTU, RNR timer), → RTS (PSN, timeout, retries),
/// RTS → RTS (new timeout), → ERR → RESET, and reconnection after RESET carries traffic again.
pub fn rc_qp_state_machine_and_query(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let t = env.timeout;
    let want = default_caps();
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(want).build()?;
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).cap(want).build()?;
    ensure_eq!((qa.qp_type(), qa.state()), (QpType::Rc, QpState::Reset), "a new QP");
    let c = qa.cap;
    ensure!(
        c.max_send_wr >= 64
            && c.max_recv_wr >= 64
            && c.max_send_sge >= 4
            && c.max_recv_sge >= 4
            && c.max_inline_data >= 128,
        "capabilities {c:?} below the request {want:?}"
    );
    let q = qa.query()?;
    ensure_eq!(q.qp_state, Some(QpState::Reset), "queried state of a new QP");
    ensure_eq!(q.cap, qa.cap, "queried capabilities");

    qa.modify(&init_attrs(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ))?;
    let q = qa.query()?;
    ensure_eq!(q.qp_state, Some(QpState::Init), "state after RST2INIT");
    ensure_eq!(q.port_num, 1, "port");
    ensure_eq!(q.qp_access_flags, AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ, "access after RST2INIT");
    qa.modify(&ModifyQp::to(QpState::Init).qp_access_flags(all_access()))?;
    let q = qa.query()?;
    ensure_eq!(
        q.qp_access_flags,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        "access after INIT2INIT"
    );

    let o = RcOpts { min_rnr_timer: 12, rd_atomic: 4, ..Default::default() };
    qa.modify(&rtr_attrs(&a.ep, &b.ep, qb.qp_num(), 0x123456, &o))?;
    let q = qa.query()?;
    ensure_eq!(q.qp_state, Some(QpState::Rtr), "state after INIT2RTR");
    ensure_eq!(q.dest_qp_num, qb.qp_num(), "destination QPN");
    ensure_eq!(q.rq_psn, 0x123456, "expected receive PSN");
    ensure_eq!(q.path_mtu, Some(path_mtu(&a.ep, &b.ep)), "path MTU");
    ensure_eq!(q.min_rnr_timer, 12, "RNR timer");
    ensure_eq!(q.max_dest_rd_atomic, 4, "responder READ/atomic depth");
    ensure_eq!(q.ah_attr.grh.dgid, b.ep.gid, "destination GID");
    ensure_eq!(q.ah_attr.grh.sgid_index, a.ep.sgid_index, "source GID index");
    ensure_eq!(q.ah_attr.grh.hop_limit, 64, "hop limit");
    ensure_eq!(q.ah_attr.dmac, Some(b.ep.mac), "destination MAC");

    let o = RcOpts { timeout: 14, retry_cnt: 6, rnr_retry: 5, ..o };
    qa.modify(&rts_attrs(0xabcdef, &o))?;
    let q = qa.query()?;
    ensure_eq!(q.qp_state, Some(QpState::Rts), "state after RTR2RTS");
    ensure_eq!(q.sq_psn, 0xabcdef, "send PSN");
    ensure_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (14, 6, 5), "timeout, retry count, RNR retry");
    ensure_eq!(q.max_rd_atomic, 4, "initiator READ/atomic depth");
    // RTS -> RTS carries what ibverbs lets it (the RNR timer here). The ACK timeout is set at
    // RTR -> RTS: a modify naming it now is refused with EINVAL, as the kernel's RDMA core
    // refuses it, and changes nothing.
    qa.modify(&ModifyQp::new().min_rnr_timer(20))?;
    ensure_eq!(qa.query()?.min_rnr_timer, 20, "RNR timer after RTS2RTS");
    let refused = qa.modify(&ModifyQp::new().timeout(15));
    ensure!(
        matches!(&refused, Err(e) if e.errno() == 22),
        "an ACK timeout in RTS2RTS must be refused with EINVAL, got {refused:?}"
    );
    ensure_eq!(qa.query()?.timeout, 14, "the refused modify changed nothing");

    qb.connect(&RcPeer { qp_num: qa.qp_num(), psn: 0xabcdef, gid: a.ep.gid }, &o.params(&b.ep, &a.ep, 0x123456))?;
    let ping = |qa: &mut Qp, qb: &mut Qp, a: &mut crate::Side, b: &mut crate::Side, n: u8| -> Result {
        let msg = pattern(777, n);
        a.mr.write(0, &msg)?;
        qb.post_recv(&[recv(n as u64, &[b.mr.sge(4096, 1024)])])?;
        qa.post_send(&[wr(n as u64, send(&[a.mr.sge(0, 777)]))])?;
        expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], n as u64, WcStatus::Success, WcOpcode::Send)?;
        expect_wc(&wait_wcs(&mut b.cq, 1, t)?[0], n as u64, WcStatus::Success, WcOpcode::Recv)?;
        same_bytes("message", &b.mr.to_vec(4096, 777)?, &msg)
    };
    ping(&mut qa, &mut qb, &mut a, &mut b, 1)?;

    to_error(&mut qa)?;
    ensure_eq!((qa.state(), qa.query()?.qp_state), (QpState::Err, Some(QpState::Err)), "state after 2ERR");
    reset(&mut qa)?;
    ensure_eq!((qa.state(), qa.query()?.qp_state), (QpState::Reset, Some(QpState::Reset)), "state after 2RST");
    reset(&mut qb)?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    ping(&mut qa, &mut qb, &mut a, &mut b, 2)?;
    Ok(Outcome::Passed)
}

/// The UD QP state machine with `ibv_query_qp`: the Q_Key set at INIT, RTR without a path, RTS
/// with a send PSN; INIT without a Q_Key is refused.
pub fn ud_qp_state_machine_and_query(env: &mut Env) -> Result<Outcome> {
    let (a, _b) = env.sides()?;
    let mut qp = a.pd.create_qp(QpType::Ud, &a.cq).cap(default_caps()).build()?;
    ensure_eq!(qp.qp_type(), QpType::Ud, "QP type");
    let init = ModifyQp::to(QpState::Init).port_num(1).pkey_index(0);
    let e = qp.modify(&init);
    ensure!(
        matches!(&e, Err(e) if e.kind() == ErrorKind::InvalidArgument && e.to_string().contains("IBV_QP_QKEY (qkey)")),
        "UD RST2INIT without QKEY must be EINVAL naming the Q_Key: {e:?}"
    );
    ensure_eq!(qp.query()?.qp_state, Some(QpState::Reset), "state after a refused modify");
    qp.modify(&init.qkey(0x1234_5678))?;
    let q = qp.query()?;
    ensure_eq!((q.qp_state, q.qkey), (Some(QpState::Init), 0x1234_5678), "state and Q_Key after RST2INIT");
    qp.modify(&ModifyQp::to(QpState::Rtr))?;
    ensure_eq!(qp.query()?.qp_state, Some(QpState::Rtr), "state after INIT2RTR");
    qp.modify(&ModifyQp::to(QpState::Rts).sq_psn(0x55))?;
    let q = qp.query()?;
    ensure_eq!((q.qp_state, q.sq_psn, q.qkey), (Some(QpState::Rts), 0x55, 0x1234_5678), "after RTR2RTS");
    Ok(Outcome::Passed)
}

/// `ibv_create_ah`: from the neighbour table, with an explicit MAC, to a link-local GID (MAC from
/// the EUI-64); refused for a source GID index outside the table and for an IP with no known MAC.
pub fn address_handles(env: &mut Env) -> Result<Outcome> {
    let (a, b) = env.sides()?;
    let ah = ah_to(&a, &b.ep)?;
    ensure_eq!(ah.attr.grh.dgid, b.ep.gid, "AH destination");
    let unknown = Gid::from_ip("198.51.100.77".parse().map_err(|e| Failure::new(format!("{e}")))?);
    let attr = |dgid: Gid, sgid_index: u8, dmac: Option<[u8; 6]>| AhAttr {
        grh: GlobalRoute { dgid, sgid_index, hop_limit: 64, ..Default::default() },
        port_num: 1,
        dmac,
        ..Default::default()
    };
    let e = a.pd.create_ah(&attr(unknown, a.ep.sgid_index, None));
    ensure!(
        matches!(e, Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "an AH to an IP with no known MAC must be EINVAL: {e:?}"
    );
    a.pd.create_ah(&attr(unknown, a.ep.sgid_index, Some([2, 0, 0, 0, 0, 9])))?;
    let e = a.pd.create_ah(&attr(b.ep.gid, 200, None));
    ensure!(
        matches!(e, Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "an AH from source GID index 200 must be EINVAL: {e:?}"
    );
    let link_local = b.ep.ctx.query_gid(1, 0)?;
    a.pd.create_ah(&attr(link_local, 0, None))?;
    Ok(Outcome::Passed)
}

/// An SRQ shared by two RC QPs: `post_recv` on an SRQ QP refused, receives consumed in posting
/// order whichever QP the message came on, each completion naming its QP, data scattered over
/// two SGEs; SRQ creation limits.
pub fn srq_shared_by_two_qps(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let t = env.timeout;
    ensure!(
        matches!(b.pd.create_srq(16, 0, 0), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "an SRQ with 0 SGEs must be EINVAL"
    );
    ensure!(
        matches!(b.pd.create_srq(16, 32, 0), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "an SRQ with 32 SGEs must be EINVAL"
    );
    let mut srq = b.pd.create_srq(63, 2, 0)?;
    let mut qb = Vec::new();
    let mut qa = Vec::new();
    for _ in 0..2 {
        let mut x = b.pd.create_qp(QpType::Rc, &b.cq).srq(&srq).cap(default_caps()).build()?;
        ensure_eq!((x.cap.max_recv_wr, x.cap.max_recv_sge), (0, 0), "receive capabilities of an SRQ QP");
        let mut y = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
        connect_pair(&a.ep, &mut y, &b.ep, &mut x, &RcOpts::default())?;
        qb.push(x);
        qa.push(y);
    }
    let e = qb[0].post_recv(&[recv(1, &[b.mr.sge(0, 8)])]).unwrap_err();
    ensure_eq!((e.kind(), e.work_request()), (ErrorKind::InvalidArgument, Some(0)), "post_recv on a QP with an SRQ");
    // Eight receives, each scattered over two SGEs (100 + 924 bytes) in its own 1 KiB slot.
    for i in 0..8usize {
        let sg = [b.mr.sge(i * 2048, 100), b.mr.sge(i * 2048 + 1024, 924)];
        srq.post_recv(&[recv(1000 + i as u64, &sg)])?;
    }
    // Messages alternate between the QPs; each starts with its sender and number.
    let mut sent = Vec::new();
    for k in 0..6usize {
        let q = k % 2;
        let mut msg = pattern(600 + k * 50, k as u8);
        msg[0] = q as u8;
        msg[1] = k as u8;
        a.mr.write(k * 4096, &msg)?;
        qa[q].post_send(&[wr(k as u64, send(&[a.mr.sge(k * 4096, msg.len() as u32)]))])?;
        wait_wcs(&mut a.cq, 1, t)?;
        sent.push((q, msg));
    }
    let w = wait_wcs(&mut b.cq, 6, t)?;
    for (k, wc) in w.iter().enumerate() {
        let (q, msg) = &sent[k];
        expect_wc(wc, 1000 + k as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!(wc.qp_num, qb[*q].qp_num(), "QP of receive {k}");
        ensure_eq!(wc.byte_len as usize, msg.len(), "length of receive {k}");
        let mut got = b.mr.to_vec(k * 2048, 100)?;
        got.extend(b.mr.to_vec(k * 2048 + 1024, msg.len() - 100)?);
        same_bytes(&format!("message {k} scattered over two SGEs"), &got, msg)?;
    }
    drop(qb);
    Ok(Outcome::Passed)
}

/// The SRQ limit (`ibv_modify_srq` IBV_SRQ_LIMIT): no event while at least `limit` WQEs remain,
/// one SRQ_RQ_LIMIT event naming the SRQ when fewer do, none again until re-armed, then again;
/// a limit beyond the SRQ size is refused.
pub fn srq_limit_event(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (t, quiet) = (env.timeout, env.quiet.max(Duration::from_millis(50)));
    let ctx = b.ep.ctx.clone();
    drain_async_events(&ctx)?;
    // 15 WQEs asked for: 16 in the SRQ; the limit (4) set at creation.
    let mut srq = b.pd.create_srq(15, 1, 4)?;
    let srqn = srq.srqn();
    ensure!(srq.arm(1000).is_err(), "a limit beyond the SRQ size must be refused");
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).srq(&srq).cap(default_caps()).build()?;
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    let mut posted = 0u64;
    let mut post = |srq: &mut Srq, n: u64| -> Result {
        for _ in 0..n {
            srq.post_recv(&[recv(posted, &[b.mr.sge((posted % 16) as usize * 64, 64)])])?;
            posted += 1;
        }
        Ok(())
    };
    let mut sends = 0u64;
    let mut send = |qa: &mut Qp, acq: &mut Cq, bcq: &mut Cq, n: u64| -> Result {
        for _ in 0..n {
            qa.post_send(&[wr(sends, send(&[a.mr.sge(0, 16)]))])?;
            sends += 1;
        }
        wait_wcs(acq, n as usize, t)?;
        wait_wcs(bcq, n as usize, t)?;
        Ok(())
    };
    post(&mut srq, 8)?;
    send(&mut qa, &mut a.cq, &mut b.cq, 4)?; // 4 left: not below the limit
    expect_no_async_event(&ctx, EventType::SRQ_RQ_LIMIT, srqn, quiet)?;
    send(&mut qa, &mut a.cq, &mut b.cq, 1)?; // 3 left
    wait_async_event(&ctx, EventType::SRQ_RQ_LIMIT, srqn, t)?;
    post(&mut srq, 1)?;
    send(&mut qa, &mut a.cq, &mut b.cq, 2)?; // 2 left: the limit fired once and is disarmed
    expect_no_async_event(&ctx, EventType::SRQ_RQ_LIMIT, srqn, quiet)?;
    post(&mut srq, 8)?; // 10 left
    srq.arm(6)?;
    send(&mut qa, &mut a.cq, &mut b.cq, 4)?; // 6 left
    expect_no_async_event(&ctx, EventType::SRQ_RQ_LIMIT, srqn, quiet)?;
    send(&mut qa, &mut a.cq, &mut b.cq, 1)?; // 5 left
    wait_async_event(&ctx, EventType::SRQ_RQ_LIMIT, srqn, t)?;
    drop(qb);
    Ok(Outcome::Passed)
}

/// SRQ limits the SRQ cannot hold are refused (ibverbs: EINVAL when the limit exceeds the
/// SRQ's size), at creation and when re-armed, including values the 16-bit PRM `lwm` field
/// cannot represent.
pub fn srq_limit_out_of_range_refused(env: &mut Env) -> Result<Outcome> {
    let (_a, b) = env.sides()?;
    let mut accepted = Vec::new();
    for limit in [1000u32, 1 << 16, (1 << 16) + 4] {
        if b.pd.create_srq(15, 1, limit).is_ok() {
            accepted.push(format!("create_srq(15 WRs, limit {limit})"));
        }
    }
    let srq = b.pd.create_srq(15, 1, 0)?;
    for limit in [16u32, 1000, 1 << 16, (1 << 16) + 4] {
        if srq.arm(limit).is_ok() {
            accepted.push(format!("arm({limit}) on a 16-WQE SRQ"));
        }
    }
    ensure!(accepted.is_empty(), "out-of-range SRQ limits accepted: {}", accepted.join(", "));
    srq.arm(15)?;
    Ok(Outcome::Passed)
}
