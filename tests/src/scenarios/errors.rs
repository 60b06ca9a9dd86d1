//! Error paths: error completions with their ibverbs status (bad lkey, bad rkey, access
//! violations, receive buffer too small, RNR and transport retries exhausted), the flush of
//! everything after an error, and the refusals of the control and post paths (QP state rules,
//! posting in the wrong state, full queues, too many SGEs, inline data too large, requests the
//! QP type cannot carry).

use crate::env::{Env, Side};
use crate::kit::Result;
use crate::kit::*;
use crate::{ensure, ensure_eq};
use std::time::Duration;
use umlx_sim::fabric::FabricConfig;
use umlx_verbs::*;

const GUARD: u8 = 0xaa;

/// Posts `op` with `sg` followed by a signaled SEND on a fresh connected pair; expects the first
/// to complete with `status` and the SEND to be flushed; the requester QP ends in ERR.
#[allow(clippy::too_many_arguments)]
fn fails_then_flushes(
    env: &Env,
    a: &mut Side,
    b: &Side,
    o: &RcOpts,
    op: SendOp,
    status: &[WcStatus],
    what: &str,
) -> Result {
    let (mut qa, _qb) = rc_pair(a, b, default_caps(), o)?;
    qa.post_send(&[wr(1, op), wr(2, send(&[a.mr.sge(0, 8)]))])?;
    let w = wait_wcs(&mut a.cq, 2, env.timeout)?;
    ensure!(
        w[0].wr_id == 1 && status.contains(&w[0].status),
        "{what}: completion {:?}, expected status {status:?}",
        w[0]
    );
    expect_wc(&w[1], 2, WcStatus::WrFlushErr, WcOpcode::Send)?;
    ensure_eq!(qa.query()?.qp_state, Some(QpState::Err), "{what}: requester QP state after the error");
    ensure_eq!(a.cq.poll(&mut [Wc::default(); 2]), 0, "{what}: extra completions");
    Ok(())
}

/// A bad lkey (corrupted key, an MR of another PD, an address past the region): local
/// protection error, the next request flushed, the QP in ERR, nothing written remotely.
pub fn err_bad_lkey(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let o = RcOpts::default();
    b.mr.fill(0, 64, GUARD)?;
    let other_pd = a.ep.ctx.alloc_pd()?;
    let foreign = other_pd.alloc_mr(4096, all_access())?;
    let cases = [
        (Sge::new(a.mr.addr(), 8, a.mr.lkey() ^ 0x5500), "corrupted lkey"),
        (foreign.sge(0, 8), "lkey of another PD's MR"),
        (a.mr.sge(a.mr.len() - 4, 8), "SGE past the end of the MR"),
    ];
    for (sge, what) in cases {
        fails_then_flushes(env, &mut a, &b, &o, write(&[sge], &b.mr, 0), &[WcStatus::LocProtErr], what)?;
        untouched(what, &b.mr, 0, 64, GUARD)?;
    }
    // READ and atomic results land in local memory: the local MR needs LOCAL_WRITE.
    let no_local_write = a.pd.reg_mr(vec![GUARD; 4096], AccessFlags::REMOTE_READ)?;
    let s = [no_local_write.sge(0, 8)];
    let what = "READ into an MR without local write";
    fails_then_flushes(env, &mut a, &b, &o, read(&s, &b.mr, 0), &[WcStatus::LocProtErr], what)?;
    let faa = SendOp::FetchAdd { result: s[0], remote: at(&b.mr, 64), add: 1 };
    let what = "atomic result into an MR without local write";
    fails_then_flushes(env, &mut a, &b, &o, faa, &[WcStatus::LocProtErr], what)?;
    untouched("an MR without local write", &no_local_write, 0, 4096, GUARD)?;
    // A bad lkey in a receive WQE: the responder cannot place the data.
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &o)?;
    qb.post_recv(&[recv(9, &[Sge::new(b.mr.addr(), 64, b.mr.lkey() ^ 0x7700)])])?;
    qa.post_send(&[wr(3, send(&[a.mr.sge(0, 16)]))])?;
    let w = wait_wcs(&mut b.cq, 1, env.timeout)?;
    ensure!(
        w[0].wr_id == 9 && matches!(w[0].status, WcStatus::LocProtErr | WcStatus::LocAccessErr),
        "receive with a bad lkey: {:?}",
        w[0]
    );
    let w = wait_wcs(&mut a.cq, 1, env.timeout)?;
    ensure!(w[0].wr_id == 3 && w[0].status != WcStatus::Success, "SEND into a bad receive WQE: {:?}", w[0]);
    untouched("receive buffer with a bad lkey", &b.mr, 0, 64, GUARD)?;
    Ok(Outcome::Passed)
}

/// A bad rkey (corrupted key for WRITE, READ and atomic; a valid key with an address past the
/// region): remote access error, the next request flushed, remote memory untouched.
pub fn err_bad_rkey(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let o = RcOpts::default();
    b.mr.fill(0, 64, GUARD)?;
    b.mr.fill(b.mr.len() - 64, 64, GUARD)?;
    let (addr, bad) = (b.mr.addr(), b.mr.rkey() ^ 0x100);
    let s = [a.mr.sge(0, 16)];
    let s8 = [a.mr.sge(0, 8)];
    let rae = [WcStatus::RemAccessErr];
    let f = |env: &Env, a: &mut Side, op, what| fails_then_flushes(env, a, &b, &o, op, &rae, what);
    let remote = Remote { addr, rkey: bad };
    f(env, &mut a, SendOp::Write { data: Payload::Sges(&s), remote, imm: None }, "WRITE with a corrupted rkey")?;
    f(env, &mut a, SendOp::Read { into: &s, remote }, "READ with a corrupted rkey")?;
    let faa = SendOp::FetchAdd { result: s8[0], remote, add: 1 };
    f(env, &mut a, faa, "atomic with a corrupted rkey")?;
    let past = write(&s, &b.mr, b.mr.len() - 8);
    f(env, &mut a, past, "WRITE running past the end of the remote MR")?;
    untouched("remote memory after bad-rkey requests", &b.mr, 0, 64, GUARD)?;
    untouched("the end of the remote MR", &b.mr, b.mr.len() - 64, 64, GUARD)?;
    Ok(Outcome::Passed)
}

/// Access violations: WRITE, READ and atomic on MRs registered without that remote right
/// (remote access error); WRITE and READ on a QP whose access flags lack them (remote access
/// or invalid request error: the IB spec lets the responder NAK either way).
pub fn err_access_violation(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let o = RcOpts::default();
    let lw = AccessFlags::LOCAL_WRITE;
    let read_only = b.pd.alloc_mr(4096, lw | AccessFlags::REMOTE_READ)?;
    let write_only = b.pd.alloc_mr(4096, lw | AccessFlags::REMOTE_WRITE)?;
    read_only.fill(0, 64, GUARD)?;
    write_only.fill(0, 64, GUARD)?;
    let s = [a.mr.sge(0, 16)];
    let s8 = [a.mr.sge(0, 8)];
    let rae = [WcStatus::RemAccessErr];
    fails_then_flushes(env, &mut a, &b, &o, write(&s, &read_only, 0), &rae, "WRITE to an MR without remote write")?;
    fails_then_flushes(env, &mut a, &b, &o, read(&s, &write_only, 0), &rae, "READ of an MR without remote read")?;
    let faa = SendOp::FetchAdd { result: s8[0], remote: at(&write_only, 0), add: 1 };
    fails_then_flushes(env, &mut a, &b, &o, faa, &rae, "atomic on an MR without remote atomic")?;
    untouched("MR without remote write", &read_only, 0, 64, GUARD)?;
    untouched("MR without remote atomic", &write_only, 0, 64, GUARD)?;

    let either = [WcStatus::RemAccessErr, WcStatus::RemInvReqErr];
    b.mr.fill(0, 64, GUARD)?;
    let qp_read_only = RcOpts { access: AccessFlags::REMOTE_READ, ..o };
    let what = "WRITE to a QP without remote write";
    fails_then_flushes(env, &mut a, &b, &qp_read_only, write(&s, &b.mr, 0), &either, what)?;
    untouched("memory behind a QP without remote write", &b.mr, 0, 64, GUARD)?;
    let qp_write_only = RcOpts { access: AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE, ..o };
    let what = "READ from a QP without remote read";
    fails_then_flushes(env, &mut a, &b, &qp_write_only, read(&s, &b.mr, 0), &either, what)?;
    Ok(Outcome::Passed)
}

/// A SEND larger than the receive buffer: local length error on the receiver (its next receive
/// flushed), remote invalid request error on the sender; nothing written past the buffer.
pub fn err_receive_too_small(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    b.mr.fill(0, 1024, GUARD)?;
    qb.post_recv(&[recv(1, &[b.mr.sge(0, 100)]), recv(2, &[b.mr.sge(512, 100)])])?;
    qa.post_send(&[wr(10, send(&[a.mr.sge(0, 500)]))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 10, WcStatus::RemInvReqErr, WcOpcode::Send)?;
    let w = wait_wcs(&mut b.cq, 2, t)?;
    expect_wc(&w[0], 1, WcStatus::LocLenErr, WcOpcode::Recv)?;
    expect_wc(&w[1], 2, WcStatus::WrFlushErr, WcOpcode::Recv)?;
    ensure_eq!(qb.query()?.qp_state, Some(QpState::Err), "receiver QP state after a length error");
    untouched("past the receive buffer", &b.mr, 100, 412, GUARD)?;
    untouched("the flushed receive buffer", &b.mr, 512, 100, GUARD)?;
    Ok(Outcome::Passed)
}

/// RNR: with `rnr_retry` 0 a SEND to a QP with no receive posted fails at once (RNR retry
/// counter exceeded) and the next request is flushed; with 2 retries it fails after them; with
/// 7 (forever) it succeeds once the receive is posted late.
pub fn err_rnr_retry_exhausted(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let s = [a.mr.sge(0, 16)];
    let rnr = [WcStatus::RnrRetryExcErr];
    for retries in [0u8, 2] {
        let o = RcOpts { rnr_retry: retries, min_rnr_timer: 1, ..Default::default() };
        let what = format!("SEND without a receive, rnr_retry {retries}");
        fails_then_flushes(env, &mut a, &b, &o, send(&s), &rnr, &what)?;
    }
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts { rnr_retry: 7, ..Default::default() })?;
    qa.post_send(&[wr(5, send(&s))])?;
    std::thread::sleep(Duration::from_millis(20));
    ensure_eq!(a.cq.poll(&mut [Wc::default(); 1]), 0, "completion before any receive was posted");
    qb.post_recv(&[recv(6, &[b.mr.sge(0, 64)])])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, env.timeout)?[0], 5, WcStatus::Success, WcOpcode::Send)?;
    expect_wc(&wait_wcs(&mut b.cq, 1, env.timeout)?[0], 6, WcStatus::Success, WcOpcode::Recv)?;
    Ok(Outcome::Passed)
}

/// Transport retries exhausted (SIM ONLY: it needs the fabric to lose every frame, which only
/// the sim's fault injection can do): transport retry counter exceeded, then the flush.
pub fn err_transport_retry_exhausted(env: &mut Env) -> Result<Outcome> {
    let Some(fabric) = env.fabric().cloned() else {
        return Ok(Outcome::Skipped("needs fault injection (a fabric losing every frame): sim only".into()));
    };
    struct Restore(umlx_sim::fabric::Fabric);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.set_config(FabricConfig::default());
        }
    }
    let (mut a, b) = env.sides()?;
    let _restore = Restore(fabric.clone());
    fabric.set_config(FabricConfig { seed: 1, loss: 1.0, ..Default::default() });
    let o = RcOpts { timeout: 8, retry_cnt: 2, ..Default::default() };
    let s = [a.mr.sge(0, 16)];
    let rex = [WcStatus::RetryExcErr];
    fails_then_flushes(env, &mut a, &b, &o, write(&s, &b.mr, 0), &rex, "WRITE over a dead link")?;
    ensure!(fabric.stats().lost >= 3, "fewer than 3 frames lost: {:?}", fabric.stats());
    Ok(Outcome::Passed)
}

/// The flush after an error: moving a QP to ERR flushes its posted receives (in order, with
/// their wr_ids); receives and sends posted in ERR are flushed too, unsignaled ones included;
/// RESET and reconnecting recovers the QP.
pub fn err_flush_after_error(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let rs = [b.mr.sge(0, 64)];
    qb.post_recv(&(10..14).map(|i| recv(i, &rs)).collect::<Vec<_>>())?;
    to_error(&mut qb)?;
    let w = wait_wcs(&mut b.cq, 4, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, 10 + k as u64, WcStatus::WrFlushErr, WcOpcode::Recv)?;
        ensure_eq!(wc.qp_num, qb.qp_num(), "QP of a flushed receive");
    }
    qb.post_recv(&[recv(14, &rs)])?;
    expect_wc(&wait_wcs(&mut b.cq, 1, t)?[0], 14, WcStatus::WrFlushErr, WcOpcode::Recv)?;
    let ss = [b.mr.sge(0, 8)];
    qb.post_send(&[wr(20, write(&ss, &a.mr, 0)), with_flags(wr(21, send(&ss)), SendFlags(0)), wr(22, send(&ss))])?;
    let w = wait_wcs(&mut b.cq, 3, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, 20 + k as u64, WcStatus::WrFlushErr, WcOpcode::Send)?;
    }
    expect_no_wc(&mut b.cq, env.quiet, "after the flush")?;

    reset(&mut qa)?;
    reset(&mut qb)?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    qb.post_recv(&[recv(30, &rs)])?;
    a.mr.write(0, b"recovered")?;
    qa.post_send(&[wr(31, send(&[a.mr.sge(0, 9)]))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 31, WcStatus::Success, WcOpcode::Send)?;
    expect_wc(&wait_wcs(&mut b.cq, 1, t)?[0], 30, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(b.mr.to_vec(0, 9)?, b"recovered".to_vec(), "after RESET and reconnection");
    Ok(Outcome::Passed)
}

/// QP state rules of `ibv_modify_qp`: transitions that do not exist (EINVAL, wrong state),
/// missing required attributes (EINVAL), a path MTU above the port's, IBV_QP_STATE without a
/// state; a refused modify leaves the QP as it was.
pub fn err_qp_state_transitions(env: &mut Env) -> Result<Outcome> {
    let (a, b) = env.sides()?;
    let mut qp = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
    let o = RcOpts::default();
    let wrong = |qp: &mut Qp, target: QpState, at: QpState| -> Result {
        match qp.modify(&ModifyQp::to(target)) {
            Err(e) if e.kind() == ErrorKind::WrongState => {
                ensure_eq!(e.errno(), 22, "errno of a wrong transition");
            }
            other => {
                return Err(Failure::new(format!("{at} -> {target}: expected a wrong-state error, got {other:?}")));
            }
        }
        ensure_eq!((qp.state(), qp.query()?.qp_state), (at, Some(at)), "state after a refused {at} -> {target}");
        Ok(())
    };
    let invalid = |qp: &mut Qp, m: ModifyQp, what: &str| -> Result {
        let at = qp.state();
        match qp.modify(&m) {
            Err(e) if e.kind() == ErrorKind::InvalidArgument => ensure_eq!(e.errno(), 22, "errno of {what}"),
            other => return Err(Failure::new(format!("{what}: expected EINVAL, got {other:?}"))),
        }
        ensure_eq!(qp.query()?.qp_state, Some(at), "state after a refused {what}");
        Ok(())
    };
    for target in [QpState::Rtr, QpState::Rts, QpState::Sqd] {
        wrong(&mut qp, target, QpState::Reset)?;
    }
    invalid(&mut qp, ModifyQp::to(QpState::Init), "RST2INIT without port, P_Key index and access")?;
    invalid(&mut qp, ModifyQp::from_raw(QpAttr::default(), QpAttrMask::STATE), "IBV_QP_STATE with no state")?;
    qp.modify(&init_attrs(o.access))?;
    wrong(&mut qp, QpState::Rts, QpState::Init)?;
    let partial = ModifyQp::to(QpState::Rtr).ah_attr(address(&a.ep, &b.ep)).dest_qp_num(0x99);
    invalid(&mut qp, partial, "INIT2RTR without path MTU, PSN, RNR timer")?;
    let rtr = rtr_attrs(&a.ep, &b.ep, 0x99, 0, &o);
    if a.ep.ctx.active_mtu() != Mtu::Mtu4096 {
        invalid(&mut qp, rtr.path_mtu(Mtu::Mtu4096), "a path MTU above the port's active MTU")?;
    }
    qp.modify(&rtr)?;
    wrong(&mut qp, QpState::Init, QpState::Rtr)?;
    wrong(&mut qp, QpState::Rtr, QpState::Rtr)?;
    invalid(&mut qp, ModifyQp::to(QpState::Rts).sq_psn(0), "RTR2RTS without timeout and retries")?;
    qp.modify(&rts_attrs(0, &o))?;
    wrong(&mut qp, QpState::Init, QpState::Rts)?;
    wrong(&mut qp, QpState::Rtr, QpState::Rts)?;
    to_error(&mut qp)?;
    wrong(&mut qp, QpState::Rts, QpState::Err)?;
    wrong(&mut qp, QpState::Init, QpState::Err)?;
    reset(&mut qp)?;
    ensure_eq!(qp.query()?.qp_state, Some(QpState::Reset), "ERR -> RESET");
    qp.modify(&init_attrs(o.access))?;
    Ok(Outcome::Passed)
}

/// Posting in the wrong QP state: sends refused in RESET, INIT and RTR (EINVAL, index 0),
/// receives refused in RESET but accepted in INIT and RTR (and used once connected).
pub fn err_post_in_wrong_state(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(default_caps()).build()?;
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).cap(default_caps()).build()?;
    let o = RcOpts::default();
    let s = [a.mr.sge(0, 8)];
    let r = [b.mr.sge(0, 64)];
    let refused = |e: std::result::Result<(), Error>, state: QpState, what: &str| -> Result {
        match e {
            Err(f)
                if f.kind() == ErrorKind::WrongState
                    && f.qp_state() == Some(state)
                    && f.work_request() == Some(0)
                    && f.errno() == 22 =>
            {
                Ok(())
            }
            other => Err(Failure::new(format!("{what} in {state}: expected a wrong-state EINVAL, got {other:?}"))),
        }
    };
    refused(qa.post_send(&[wr(1, send(&s))]), QpState::Reset, "post_send")?;
    refused(qb.post_recv(&[recv(1, &r)]), QpState::Reset, "post_recv")?;
    qa.modify(&init_attrs(o.access))?;
    qb.modify(&init_attrs(o.access))?;
    refused(qa.post_send(&[wr(2, send(&s))]), QpState::Init, "post_send")?;
    qb.post_recv(&[recv(100, &r)])?;
    qa.modify(&rtr_attrs(&a.ep, &b.ep, qb.qp_num(), o.psn_b, &o))?;
    qb.modify(&rtr_attrs(&b.ep, &a.ep, qa.qp_num(), o.psn_a, &o))?;
    refused(qa.post_send(&[wr(3, send(&s))]), QpState::Rtr, "post_send")?;
    qb.post_recv(&[recv(101, &r)])?;
    qa.modify(&rts_attrs(o.psn_a, &o))?;
    qb.modify(&rts_attrs(o.psn_b, &o))?;
    expect_no_wc(&mut a.cq, env.quiet, "requests refused before RTS")?;
    qa.post_send(&[wr(4, send(&s)), wr(5, send(&s))])?;
    let w = wait_wcs(&mut a.cq, 2, env.timeout)?;
    expect_wc(&w[0], 4, WcStatus::Success, WcOpcode::Send)?;
    expect_wc(&w[1], 5, WcStatus::Success, WcOpcode::Send)?;
    let w = wait_wcs(&mut b.cq, 2, env.timeout)?;
    expect_wc(&w[0], 100, WcStatus::Success, WcOpcode::Recv)?;
    expect_wc(&w[1], 101, WcStatus::Success, WcOpcode::Recv)?;
    Ok(Outcome::Passed)
}

/// Full queues (ENOMEM): the SQ takes exactly its capacity of one-block WQEs until completions
/// are polled; a chain longer than the free space is posted up to the index returned; the RQ
/// takes exactly its capacity; an SRQ takes at least what was asked for, then refuses.
pub fn err_queue_full(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 1, 1, 0), &RcOpts::default())?;
    let t = env.timeout;
    let full = |e: std::result::Result<(), Error>, index: usize, what: &str| -> Result {
        match e {
            Err(f) if f.kind() == ErrorKind::QueueFull && f.work_request() == Some(index) && f.errno() == 12 => Ok(()),
            other => Err(Failure::new(format!("{what}: expected ENOMEM at index {index}, got {other:?}"))),
        }
    };
    let s = [a.mr.sge(0, 8)];
    let n = qa.cap.max_send_wr as usize;
    for k in 0..n {
        qa.post_send(&[wr(k as u64, write(&s, &b.mr, 8 * k))])?;
    }
    full(qa.post_send(&[wr(99, send(&s))]), 0, "a post to a full SQ")?;
    let w = wait_wcs(&mut a.cq, n, t)?;
    ensure!(w.iter().all(|w| w.status == WcStatus::Success), "completions of a full SQ: {w:?}");
    let chain: Vec<SendWr> = (0..n + 4).map(|k| wr(200 + k as u64, write(&s, &b.mr, 8 * (k % n)))).collect();
    full(qa.post_send(&chain), n, "a chain longer than the SQ")?;
    let w = wait_wcs(&mut a.cq, n, t)?;
    let ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
    ensure_eq!(ids, (200..200 + n as u64).collect::<Vec<_>>(), "the part of the chain that was posted");
    expect_no_wc(&mut a.cq, env.quiet, "requests past the refused one")?;

    let r = [b.mr.sge(0, 64)];
    let m = qb.cap.max_recv_wr as usize;
    for k in 0..m {
        qb.post_recv(&[recv(k as u64, &r)])?;
    }
    full(qb.post_recv(&[recv(99, &r)]), 0, "a post to a full RQ")?;
    full(qb.post_recv(&[recv(98, &r), recv(99, &r)]), 0, "a chain to a full RQ")?;
    qa.post_send(&[wr(300, send(&s))])?;
    wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&wait_wcs(&mut b.cq, 1, t)?[0], 0, WcStatus::Success, WcOpcode::Recv)?;
    qb.post_recv(&[recv(m as u64, &r)])?;
    full(qb.post_recv(&[recv(99, &r)]), 0, "the RQ full again")?;

    let mut srq = b.pd.create_srq(7, 1, 0)?;
    let mut posted = 0usize;
    let last = loop {
        let e = srq.post_recv(&[recv(posted as u64, &r)]);
        if e.is_err() || posted > 64 {
            break e;
        }
        posted += 1;
    };
    ensure!(posted >= 7, "the SRQ took {posted} receives for 7 asked");
    full(last, 0, &format!("a post to an SRQ holding {posted}"))?;
    Ok(Outcome::Passed)
}

/// Too many SGEs (EINVAL): a send with one more SGE than the QP has (alone, and second in a
/// chain: the first is posted), a receive with one more than the RQ has, an SRQ receive with
/// one more than the SRQ has, a UD send; QP and SRQ creation beyond the device's limits.
pub fn err_too_many_sges(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 2, 2, 0), &RcOpts::default())?;
    let too_many = |e: std::result::Result<(), Error>, index: usize, what: &str| -> Result {
        match e {
            Err(f)
                if f.kind() == ErrorKind::InvalidArgument
                    && f.work_request() == Some(index)
                    && f.errno() == 22
                    && f.to_string().contains("SGEs") =>
            {
                Ok(())
            }
            other => Err(Failure::new(format!("{what}: expected too many SGEs at index {index}, got {other:?}"))),
        }
    };
    let sg = |n: usize| -> Vec<Sge> { (0..n).map(|k| a.mr.sge(16 * k, 8)).collect() };
    let ns = qa.cap.max_send_sge as usize;
    let big = sg(ns + 1);
    let ok = sg(ns);
    too_many(qa.post_send(&[wr(1, write(&big, &b.mr, 0))]), 0, "a send with one SGE too many")?;
    too_many(qa.post_send(&[wr(2, write(&ok, &b.mr, 0)), wr(3, write(&big, &b.mr, 0))]), 1, "second in a chain")?;
    expect_wc(&wait_wcs(&mut a.cq, 1, env.timeout)?[0], 2, WcStatus::Success, WcOpcode::RdmaWrite)?;
    let nr = qb.cap.max_recv_sge as usize;
    let rbig: Vec<Sge> = (0..nr + 1).map(|k| b.mr.sge(16 * k, 8)).collect();
    too_many(qb.post_recv(&[recv(1, &rbig)]), 0, "a receive with one SGE too many")?;
    let mut srq = b.pd.create_srq(16, 1, 0)?;
    too_many(srq.post_recv(&[recv(1, &rbig[..2])]), 0, "an SRQ receive with 2 SGEs on a 1-SGE SRQ")?;
    let mut ud = a.pd.create_qp(QpType::Ud, &a.cq).cap(caps(16, 16, 2, 2, 0)).build()?;
    ud.ud_to_rts(1, 0)?;
    let ah = ah_to(&a, &b.ep)?;
    let uds = sg(ud.cap.max_send_sge as usize + 1);
    let w = ud_wr(4, UdDest { ah: &ah, remote_qpn: 2, remote_qkey: 1 }, Payload::Sges(&uds));
    too_many(ud.post_send_ud(&[w]), 0, "a UD send with one SGE too many")?;
    for (s, r) in [(31, 1), (1, 32)] {
        let e = a.pd.create_qp(QpType::Rc, &a.cq).cap(caps(16, 16, s, r, 0)).build();
        ensure!(
            matches!(e, Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
            "a QP with {s} send / {r} receive SGEs must be EINVAL: {e:?}"
        );
    }
    Ok(Outcome::Passed)
}

/// Inline data too large (EINVAL): one byte over the QP's inline maximum (RC and UD), while
/// exactly the maximum is delivered; a QP asking for more than 512 inline bytes is refused.
pub fn err_inline_too_large(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 1, 1, 64), &RcOpts::default())?;
    let max = qa.cap.max_inline_data as usize;
    let over = pattern(max + 1, 1);
    let e = qa.post_send(&[wr(1, send_inline(&over))]);
    match e {
        Err(f)
            if f.kind() == ErrorKind::InvalidArgument
                && f.work_request() == Some(0)
                && f.errno() == 22
                && f.to_string().contains("inline") => {}
        other => return Err(Failure::new(format!("{} inline bytes (max {max}): got {other:?}", max + 1))),
    }
    qb.post_recv(&[recv(2, &[b.mr.sge(0, 1024)])])?;
    qa.post_send(&[wr(2, send_inline(&over[..max]))])?;
    wait_wcs(&mut a.cq, 1, env.timeout)?;
    ensure_eq!(wait_wcs(&mut b.cq, 1, env.timeout)?[0].byte_len as usize, max, "inline SEND of the maximum");
    same_bytes("inline SEND of the maximum", &b.mr.to_vec(0, max)?, &over[..max])?;

    let mut ud = a.pd.create_qp(QpType::Ud, &a.cq).cap(caps(16, 16, 1, 1, 64)).build()?;
    ud.ud_to_rts(1, 0)?;
    let ah = ah_to(&a, &b.ep)?;
    let ud_over = pattern(ud.cap.max_inline_data as usize + 1, 2);
    let w = ud_wr(3, UdDest { ah: &ah, remote_qpn: 2, remote_qkey: 1 }, Payload::Inline(&ud_over));
    ensure!(
        matches!(ud.post_send_ud(&[w]), Err(f) if f.kind() == ErrorKind::InvalidArgument && f.to_string().contains("inline")),
        "UD inline data over the maximum must be refused"
    );
    let e = a.pd.create_qp(QpType::Rc, &a.cq).cap(caps(16, 16, 1, 1, 513)).build();
    ensure!(
        matches!(e, Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
        "a QP with 513 inline bytes must be EINVAL: {e:?}"
    );
    Ok(Outcome::Passed)
}

/// Requests the QP cannot carry (EINVAL, nothing posted): a connected-QP request on a UD QP,
/// a UD request on an RC QP, an atomic whose result SGE is not 8 bytes. (RDMA on a UD QP, a UD
/// send without an address, inline READs and atomics, and INLINE without data cannot be
/// written: the work-request types have no place for them.)
pub fn err_invalid_requests(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let mut ud = a.pd.create_qp(QpType::Ud, &a.cq).cap(default_caps()).build()?;
    ud.ud_to_rts(1, 0)?;
    let ah = ah_to(&a, &b.ep)?;
    let dest = UdDest { ah: &ah, remote_qpn: 2, remote_qkey: 1 };
    let s8 = [a.mr.sge(0, 8)];
    let invalid = |e: std::result::Result<(), Error>, what: &str| -> Result {
        match e {
            Err(f) if f.kind() == ErrorKind::InvalidArgument && f.work_request() == Some(0) && f.errno() == 22 => {
                Ok(())
            }
            other => Err(Failure::new(format!("{what}: expected an invalid-request EINVAL, got {other:?}"))),
        }
    };
    invalid(ud.post_send(&[wr(1, write(&s8, &b.mr, 0))]), "an RC request (RDMA WRITE) on a UD QP")?;
    invalid(ud.post_send(&[wr(2, send(&s8))]), "an RC SEND on a UD QP")?;
    invalid(qa.post_send_ud(&[ud_wr(3, dest, Payload::Sges(&s8))]), "a UD send on an RC QP")?;
    let faa = SendOp::FetchAdd { result: a.mr.sge(0, 4), remote: at(&b.mr, 0), add: 1 };
    invalid(qa.post_send(&[wr(4, faa)]), "an atomic with a 4-byte result SGE")?;
    let cas = SendOp::CompareSwap { result: a.mr.sge(0, 16), remote: at(&b.mr, 0), compare: 0, swap: 1 };
    invalid(qa.post_send(&[wr(5, cas)]), "an atomic with a 16-byte result SGE")?;
    expect_no_wc(&mut a.cq, env.quiet, "refused requests")?;
    Ok(Outcome::Passed)
}
