//! Traffic across several verbs at once: every RC opcode in one run on one connection, RC
//! under loss and reordering (sim only), a QP reset and reconnected to itself (loopback) more
//! than once, a CQ resized with completions waiting in it, and polls of one and of sixteen
//! entries reporting every requester opcode while a small CQ wraps.

use crate::env::{Env, Side};
use crate::kit::Result;
use crate::kit::*;
use crate::{ensure, ensure_eq};
use std::time::{Duration, Instant};
use umlx_sim::fabric::{Fabric, FabricConfig};
use umlx_verbs::*;

/// Byte the target and receive buffers are filled with before a transfer (so writes past the
/// end show).
const GUARD: u8 = 0xd5;

/// Checks a successful requester completion of `qp_num`.
#[track_caller]
fn requester(w: &Wc, wr_id: u64, opcode: WcOpcode, qp_num: u32) -> Result {
    expect_wc(w, wr_id, WcStatus::Success, opcode)?;
    ensure_eq!(w.qp_num, qp_num, "QP of completion {wr_id} ({opcode})");
    Ok(())
}

/// Every RC opcode in one run on one connection, each moving exact bytes: a SEND with
/// immediate gathered from two SGEs and scattered over two, a multi-packet RDMA WRITE, an RDMA
/// WRITE with immediate into a receive with no SGE, an RDMA READ into scattered buffers,
/// fetch-and-add and compare-and-swap (big-endian in memory), an inline SEND, and an unsignaled
/// WRITE followed by a signaled one (one completion for both). Every completion is checked for
/// status, opcode, wr_id and QP, and for byte_len and immediate where ibverbs defines them; the
/// bytes around every target are checked untouched.
pub fn rc_every_opcode_in_one_run(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let (t, quiet) = (env.timeout, env.quiet);
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    a.mr.fill(0, 64 * 1024, GUARD)?;
    b.mr.fill(0, 64 * 1024, GUARD)?;

    // SEND with immediate: two SGEs gathered, two SGEs scattered.
    let msg = pattern(3000, 1);
    a.mr.write(0, &msg[..1000])?;
    a.mr.write(2000, &msg[1000..])?;
    qb.post_recv(&[recv(77, &[b.mr.sge(100, 1500), b.mr.sge(5000, 2000)])])?;
    let gather = [a.mr.sge(0, 1000), a.mr.sge(2000, 2000)];
    qa.post_send(&[wr(1, send_imm(&gather, 0xdead_beef))])?;
    requester(&wait_wcs(&mut a.cq, 1, t)?[0], 1, WcOpcode::Send, na)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 77, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!((w[0].byte_len, w[0].imm_data, w[0].qp_num), (3000, 0xdead_beef, nb), "SEND with immediate");
    ensure!(w[0].wc_flags.contains(WcFlags::WITH_IMM), "no WITH_IMM flag: {:?}", w[0]);
    let mut got = b.mr.to_vec(100, 1500)?;
    got.extend(b.mr.to_vec(5000, 1500)?);
    same_bytes("SEND with immediate, gathered and scattered", &got, &msg)?;
    untouched("before the first scatter SGE", &b.mr, 0, 100, GUARD)?;
    untouched("between the scatter SGEs", &b.mr, 1600, 3400, GUARD)?;
    untouched("the rest of the second scatter SGE", &b.mr, 6500, 600, GUARD)?;

    // RDMA WRITE of several packets, then WRITE with immediate into a receive with no SGE.
    let data = pattern(5000, 7);
    a.mr.write(8192, &data)?;
    qa.post_send(&[wr(2, write(&[a.mr.sge(8192, 5000)], &b.mr, 20_000))])?;
    requester(&wait_wcs(&mut a.cq, 1, t)?[0], 2, WcOpcode::RdmaWrite, na)?;
    same_bytes("5000-byte RDMA WRITE", &b.mr.to_vec(20_000, 5000)?, &data)?;
    untouched("before the WRITE", &b.mr, 19_936, 64, GUARD)?;
    untouched("after the WRITE", &b.mr, 25_000, 64, GUARD)?;
    qb.post_recv(&[recv(78, &[])])?;
    let s16 = [a.mr.sge(8192, 16)];
    let write_imm = SendOp::Write { data: Payload::Sges(&s16), remote: at(&b.mr, 30_000), imm: Some(42) };
    qa.post_send(&[wr(3, write_imm)])?;
    requester(&wait_wcs(&mut a.cq, 1, t)?[0], 3, WcOpcode::RdmaWrite, na)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 78, WcStatus::Success, WcOpcode::RecvRdmaWithImm)?;
    ensure_eq!((w[0].byte_len, w[0].imm_data, w[0].qp_num), (16, 42, nb), "RDMA WRITE with immediate");
    ensure!(w[0].wc_flags.contains(WcFlags::WITH_IMM), "no WITH_IMM flag: {:?}", w[0]);
    same_bytes("RDMA WRITE with immediate", &b.mr.to_vec(30_000, 16)?, &data[..16])?;
    untouched("after the WRITE with immediate", &b.mr, 30_016, 64, GUARD)?;

    // RDMA READ into two scattered local buffers.
    let remote = pattern(2500, 9);
    b.mr.write(40_000, &remote)?;
    let into = [a.mr.sge(30_000, 1000), a.mr.sge(40_000, 1500)];
    qa.post_send(&[wr(4, read(&into, &b.mr, 40_000))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    requester(&w[0], 4, WcOpcode::RdmaRead, na)?;
    ensure_eq!(w[0].byte_len, 2500, "READ byte_len");
    let mut got = a.mr.to_vec(30_000, 1000)?;
    got.extend(a.mr.to_vec(40_000, 1500)?);
    same_bytes("RDMA READ into scattered buffers", &got, &remote)?;
    untouched("after the first READ buffer", &a.mr, 31_000, 64, GUARD)?;
    untouched("after the second READ buffer", &a.mr, 41_500, 64, GUARD)?;

    // Atomics: fetch-and-add, then compare-and-swap on the sum.
    let target = 50_000;
    b.mr.write(target, &100u64.to_be_bytes())?;
    let faa = SendOp::FetchAdd { result: a.mr.sge(50_000, 8), remote: at(&b.mr, target), add: 5 };
    qa.post_send(&[wr(5, faa)])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    requester(&w[0], 5, WcOpcode::FetchAdd, na)?;
    ensure_eq!(w[0].byte_len, 8, "fetch-and-add byte_len");
    ensure_eq!(a.mr.to_vec(50_000, 8)?, 100u64.to_be_bytes(), "value returned by fetch-and-add");
    ensure_eq!(b.mr.to_vec(target, 8)?, 105u64.to_be_bytes(), "remote value after fetch-and-add");
    let cas = SendOp::CompareSwap { result: a.mr.sge(50_008, 8), remote: at(&b.mr, target), compare: 105, swap: 7 };
    qa.post_send(&[wr(6, cas)])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    requester(&w[0], 6, WcOpcode::CompSwap, na)?;
    ensure_eq!(w[0].byte_len, 8, "compare-and-swap byte_len");
    ensure_eq!(a.mr.to_vec(50_008, 8)?, 105u64.to_be_bytes(), "value returned by compare-and-swap");
    ensure_eq!(b.mr.to_vec(target, 8)?, 7u64.to_be_bytes(), "remote value after compare-and-swap");
    untouched("before the atomic target", &b.mr, target - 8, 8, GUARD)?;
    untouched("after the atomic target", &b.mr, target + 8, 8, GUARD)?;
    untouched("after the atomic results", &a.mr, 50_016, 16, GUARD)?;

    // Inline SEND.
    qb.post_recv(&[recv(79, &[b.mr.sge(60_000, 64)])])?;
    qa.post_send(&[wr(7, send_inline(b"inline payload!"))])?;
    requester(&wait_wcs(&mut a.cq, 1, t)?[0], 7, WcOpcode::Send, na)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 79, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!((w[0].byte_len, w[0].qp_num), (15, nb), "inline SEND");
    ensure!(!w[0].wc_flags.contains(WcFlags::WITH_IMM), "WITH_IMM on a SEND without immediate: {:?}", w[0]);
    same_bytes("inline SEND", &b.mr.to_vec(60_000, 15)?, b"inline payload!")?;
    untouched("after the inline SEND", &b.mr, 60_015, 113, GUARD)?;

    // An unsignaled WRITE then a signaled one: one completion for both, both written.
    let s8 = [a.mr.sge(0, 8)];
    qa.post_send(&[with_flags(wr(8, write(&s8, &b.mr, 0)), SendFlags(0)), wr(9, write(&s8, &b.mr, 8))])?;
    requester(&wait_wcs(&mut a.cq, 1, t)?[0], 9, WcOpcode::RdmaWrite, na)?;
    expect_no_wc(&mut a.cq, quiet, "the unsignaled WRITE")?;
    same_bytes("unsignaled WRITE", &b.mr.to_vec(0, 8)?, &msg[..8])?;
    same_bytes("signaled WRITE after it", &b.mr.to_vec(8, 8)?, &msg[..8])?;
    untouched("after both WRITEs", &b.mr, 16, 84, GUARD)?;
    expect_no_wc(&mut b.cq, quiet, "WRITEs without immediate at the responder")?;
    Ok(Outcome::Passed)
}

/// Puts the fabric back to no impairments when dropped (also when a scenario fails).
struct Impaired(Fabric);

impl Impaired {
    fn new(fabric: &Fabric, cfg: FabricConfig) -> Impaired {
        fabric.set_config(cfg);
        Impaired(fabric.clone())
    }
}

impl Drop for Impaired {
    fn drop(&mut self) {
        self.0.set_config(FabricConfig::default());
    }
}

/// RC over a fabric losing 10% of the frames and reordering 10% (SIM ONLY: it needs the sim's
/// fault injection): 150 SENDs of 700 bytes with up to 9 in flight all complete successfully,
/// each arrives exactly once, in order, intact, with its length and QP; the fabric did lose
/// and reorder frames on the way.
pub fn rc_lossy_fabric_delivers_every_message_once_in_order(env: &mut Env) -> Result<Outcome> {
    let Some(fabric) = env.fabric().cloned() else {
        return Ok(Outcome::Skipped("needs fault injection (a fabric losing and reordering frames): sim only".into()));
    };
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts { timeout: 12, ..Default::default() })?;
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let before = fabric.stats();
    let _impaired = Impaired::new(&fabric, FabricConfig { seed: 7, loss: 0.10, reorder: 0.10, ..Default::default() });
    const MESSAGES: u64 = 150;
    const LEN: usize = 700;
    const SLOTS: u64 = 32;
    let slot = |i: u64| (i % SLOTS) as usize * 1024;
    let (mut sent, mut recv_posted) = (0u64, 0u64);
    let (mut received, mut completed) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut wc = [Wc::default(); 16];
    while (received.len() as u64) < MESSAGES || (completed.len() as u64) < MESSAGES {
        while recv_posted < MESSAGES && recv_posted - received.len() as u64 <= 16 {
            qb.post_recv(&[recv(recv_posted, &[b.mr.sge(slot(recv_posted), 1024)])])?;
            recv_posted += 1;
        }
        if sent < MESSAGES && sent - received.len() as u64 <= 8 {
            a.mr.write(slot(sent), &pattern(LEN, sent as u8))?;
            qa.post_send(&[wr(sent, send(&[a.mr.sge(slot(sent), LEN as u32)]))])?;
            sent += 1;
        }
        let n = a.cq.poll(&mut wc);
        for w in &wc[..n] {
            requester(w, completed.len() as u64, WcOpcode::Send, na)?;
            completed.push(w.wr_id);
        }
        let n = b.cq.poll(&mut wc);
        for w in &wc[..n] {
            let k = received.len() as u64;
            expect_wc(w, k, WcStatus::Success, WcOpcode::Recv)?;
            ensure_eq!((w.byte_len as usize, w.qp_num), (LEN, nb), "length and QP of message {k}");
            same_bytes(&format!("message {k}"), &b.mr.to_vec(slot(k), LEN)?, &pattern(LEN, k as u8))?;
            received.push(w.wr_id);
        }
        ensure!(
            Instant::now() < deadline,
            "stuck at {} of {MESSAGES} messages received, {} send completions; fabric {:?}",
            received.len(),
            completed.len(),
            fabric.stats()
        );
        if n == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let want: Vec<u64> = (0..MESSAGES).collect();
    ensure_eq!(received, want, "every message once, in order");
    ensure_eq!(completed, want, "every send completion once, in order");
    expect_no_wc(&mut b.cq, env.quiet, "a duplicate delivery")?;
    expect_no_wc(&mut a.cq, env.quiet, "a duplicate send completion")?;
    let s = fabric.stats();
    ensure!(
        s.lost > before.lost && s.reordered > before.reordered,
        "the fabric lost {} and reordered {} frames: the impairment did not happen",
        s.lost - before.lost,
        s.reordered - before.reordered
    );
    Ok(Outcome::Passed)
}

/// One side's loopback rounds: its QP connected to itself, reset and reconnected.
fn loopback_rounds(env: &Env, side: &mut Side) -> Result {
    let (t, quiet) = (env.timeout, env.quiet);
    let who = side.ep.label();
    let mut qp = side.pd.create_qp(QpType::Rc, &side.cq).cap(default_caps()).build()?;
    let me = qp.qp_num();
    let o = RcOpts::default();
    // The QP is its own peer: its GID, and its own MAC (the port loops the frames back inside).
    let peer = RcPeer { qp_num: me, psn: o.psn_a, gid: side.ep.gid };
    let params = ConnectParams { dmac: Some(side.ep.ctx.mac()), ..o.params(&side.ep, &side.ep, o.psn_a) };
    for round in 0..3u8 {
        if round > 0 {
            reset(&mut qp)?;
            ensure_eq!(qp.query()?.qp_state, Some(QpState::Reset), "{who}: state after RESET, round {round}");
        }
        qp.connect(&peer, &params)?;
        ensure_eq!(qp.query()?.qp_state, Some(QpState::Rts), "{who}: state after reconnecting, round {round}");
        // Round 0 fills most of the SQ; after RESET the queues start from index zero again.
        let count = if round == 0 { 48usize } else { 5 };
        let src = pattern(32 * count, 130 + round);
        side.mr.write(0, &src)?;
        side.mr.fill(8192, 32 * count + 64, GUARD)?;
        side.mr.fill(16_384, 128, GUARD)?;
        let rs = [side.mr.sge(16_384, 64)];
        qp.post_recv(&[recv(1000 + round as u64, &rs)])?;
        for k in 0..count {
            let s = [side.mr.sge(32 * k, 32)];
            qp.post_send(&[wr(k as u64, write(&s, &side.mr, 8192 + 32 * k))])?;
        }
        let s = [side.mr.sge(0, 40)];
        qp.post_send(&[wr(999, send_imm(&s, 0x100 + round as u32))])?;
        let w = wait_wcs(&mut side.cq, count + 2, t)?;
        let (rx, tx): (Vec<Wc>, Vec<Wc>) = w.into_iter().partition(|w| w.wr_id >= 1000);
        ensure_eq!((rx.len(), tx.len()), (1, count + 1), "{who}: receive and send completions, round {round}");
        for (k, w) in tx.iter().enumerate() {
            let (wr_id, opcode) = if k < count { (k as u64, WcOpcode::RdmaWrite) } else { (999, WcOpcode::Send) };
            requester(w, wr_id, opcode, me)?;
        }
        expect_wc(&rx[0], 1000 + round as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!(
            (rx[0].byte_len, rx[0].imm_data, rx[0].qp_num),
            (40, 0x100 + round as u32, me),
            "{who}: SEND with immediate to itself, round {round}"
        );
        ensure!(rx[0].wc_flags.contains(WcFlags::WITH_IMM), "{who}: no WITH_IMM flag: {:?}", rx[0]);
        same_bytes(
            &format!("{who}: {count} WRITEs to itself, round {round}"),
            &side.mr.to_vec(8192, 32 * count)?,
            &src,
        )?;
        untouched(&format!("{who}: after the WRITEs, round {round}"), &side.mr, 8192 + 32 * count, 64, GUARD)?;
        same_bytes(&format!("{who}: SEND to itself, round {round}"), &side.mr.to_vec(16_384, 40)?, &src[..40])?;
        untouched(&format!("{who}: after the SEND, round {round}"), &side.mr, 16_424, 88, GUARD)?;
        expect_no_wc(&mut side.cq, quiet, &format!("{who}: round {round}: a WQE of an earlier incarnation"))?;
    }
    Ok(())
}

/// An RC QP connected to itself (loopback through its own port), on each endpoint: WRITEs to
/// its own memory and a SEND with immediate to its own receive queue; then RESET and
/// reconnected to itself, twice: the queues start from zero again (no completion of a WQE of an
/// earlier incarnation), the bytes are exact each round.
pub fn rc_loopback_qp_reset_and_reconnected_to_itself(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    loopback_rounds(env, &mut a)?;
    loopback_rounds(env, &mut b)?;
    Ok(Outcome::Passed)
}

/// Waits until the device wrote `n` more CQEs to `cq` than `base`.
fn wait_produced(cq: &Cq, base: u32, n: u32, timeout: Duration) -> Result {
    let start = Instant::now();
    loop {
        let p = cq.device_produced()?;
        if p.wrapping_sub(base) >= n {
            return Ok(());
        }
        ensure!(start.elapsed() < timeout, "CQ {:#x}: {} of {n} CQEs written", cq.cqn(), p.wrapping_sub(base));
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// `ibv_resize_cq`: five completions wait in the CQ while it grows past 1000 entries; they are
/// polled first, then 1200 more arrive in the new ring (wrapping it), all in order, none lost,
/// none twice. Shrinking below what is waiting is refused (EINVAL) and changes nothing; the
/// waiting completions are all there.
pub fn cq_resize_keeps_waiting_completions_and_takes_new_ones(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let na = qa.qp_num();
    a.mr.write(0, &pattern(16, 150))?;
    let s = [a.mr.sge(0, 16)];
    let write_at = |i: u64| wr(i, write(&s, &b.mr, 64 * (i % 64) as usize));
    let check = |w: &[Wc], want: &[u64], what: &str| -> Result {
        for w in w {
            requester(w, w.wr_id, WcOpcode::RdmaWrite, na)?;
        }
        let ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
        ensure_eq!(ids, want, "{what}");
        Ok(())
    };

    let base = a.cq.device_produced()?;
    for i in 0..5 {
        qa.post_send(&[write_at(i)])?;
    }
    wait_produced(&a.cq, base, 5, t)?;
    let before = a.cq.capacity();
    a.cq.resize(1000)?;
    let cap = a.cq.capacity();
    ensure!(cap >= 1000 && cap > before, "capacity {cap} after resizing a {before}-entry CQ to 1000");
    check(&wait_wcs(&mut a.cq, 5, t)?, &[0, 1, 2, 3, 4], "the completions that waited through the resize")?;
    expect_no_wc(&mut a.cq, env.quiet, "after the waiting completions")?;

    let mut ids = Vec::new();
    let mut want = Vec::new();
    for batch in 0..40u64 {
        for k in 0..30 {
            let id = 1000 + batch * 30 + k;
            qa.post_send(&[write_at(id)])?;
            want.push(id);
        }
        let w = wait_wcs(&mut a.cq, 30, t)?;
        for w in &w {
            requester(w, w.wr_id, WcOpcode::RdmaWrite, na)?;
        }
        ids.extend(w.iter().map(|w| w.wr_id));
    }
    ensure_eq!(ids, want, "1200 completions through the resized ring");
    same_bytes("the last WRITE", &b.mr.to_vec(64 * (2199 % 64), 16)?, &pattern(16, 150))?;

    let base = a.cq.device_produced()?;
    for i in 0..10 {
        qa.post_send(&[write_at(i)])?;
    }
    wait_produced(&a.cq, base, 10, t)?;
    match a.cq.resize(4) {
        Err(e) if e.kind() == ErrorKind::InvalidArgument => {}
        other => {
            return Err(Failure::new(format!(
                "shrinking a CQ holding 10 completions to 4: expected EINVAL, got {other:?}"
            )));
        }
    }
    ensure_eq!(a.cq.capacity(), cap, "capacity after a refused resize");
    check(&wait_wcs(&mut a.cq, 10, t)?, &(0..10).collect::<Vec<_>>(), "the completions that waited")?;
    expect_no_wc(&mut a.cq, env.quiet, "after the refused resize")?;
    Ok(Outcome::Passed)
}

/// Polls `cq` with room for `room` entries until `n` completions came: no poll returns more
/// than its room, and no more than `n` come.
fn poll_with_room(cq: &mut Cq, n: usize, room: usize, timeout: Duration) -> Result<Vec<Wc>> {
    let mut out = Vec::with_capacity(n);
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    while out.len() < n {
        let k = cq.poll(&mut wc[..room]);
        ensure!(k <= room, "a poll with room for {room} returned {k}");
        out.extend_from_slice(&wc[..k]);
        ensure!(out.len() <= n, "{} completions for {n} requests: {out:?}", out.len());
        if k == 0 {
            ensure!(start.elapsed() < timeout, "CQ {:#x}: {} of {n} completions: {out:?}", cq.cqn(), out.len());
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    Ok(out)
}

/// Polls of one and of sixteen entries on a CQ of 7 (its 8-entry ring wraps every 8
/// completions): each round posts WRITE, READ, SEND, FETCH_ADD and WRITE in one chain, so the
/// completion's (QP, opcode) changes at every entry; rounds alternate between polls of one and
/// polls of sixteen, and every completion has its opcode, wr_id, QP, no flags, and byte_len for
/// READ and atomic (the READ's bytes, the add's returned value checked). Then single
/// completions into polls of sixteen: each poll finds exactly one and writes only the first
/// entry. The peer received every SEND and saw every add.
pub fn cq_polls_of_one_and_of_sixteen_across_ring_wraps(env: &mut Env) -> Result<Outcome> {
    let (a, mut b) = env.sides()?;
    let t = env.timeout;
    let mut small = a.ep.ctx.create_cq(7, None)?;
    ensure_eq!(small.capacity(), 7, "capacity of a CQ of 7");
    let mut qa = a.pd.create_qp(QpType::Rc, &small).cap(default_caps()).build()?;
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).cap(default_caps()).build()?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, &RcOpts::default())?;
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    let payload = pattern(16, 160);
    a.mr.write(0, &payload)?;
    let remote = pattern(24, 161);
    b.mr.write(512, &remote)?;
    let s = [a.mr.sge(0, 16)];
    let r = [a.mr.sge(4096, 24)];
    let round = |k: u64| {
        let base = 100 * k;
        [
            wr(base, write(&s, &b.mr, 0)),
            wr(base + 1, read(&r, &b.mr, 512)),
            wr(base + 2, send(&s)),
            wr(base + 3, SendOp::FetchAdd { result: a.mr.sge(8192, 8), remote: at(&b.mr, 1024), add: 1 }),
            wr(base + 4, write(&s, &b.mr, 64)),
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
    for k in 0..8u64 {
        a.mr.fill(4096, 64, GUARD)?;
        qb.post_recv(&[recv(900 + k, &[b.mr.sge(2048, 64)])])?;
        qa.post_send(&round(k))?;
        let room = if k % 2 == 0 { 1 } else { 16 };
        let got = poll_with_room(&mut small, 5, room, t)?;
        for (w, (wr_id, opcode, len)) in got.iter().zip(want(k)) {
            requester(w, wr_id, opcode, na)?;
            ensure_eq!(w.wc_flags, WcFlags(0), "flags of a requester completion {w:?}");
            if let Some(len) = len {
                ensure_eq!(w.byte_len, len, "byte_len of {opcode} in round {k} (polls of {room})");
            }
        }
        ensure_eq!(small.poll(&mut [Wc::default(); 16]), 0, "round {k}: nothing more");
        ensure_eq!(small.poll(&mut []), 0, "round {k}: a poll into an empty slice");
        same_bytes(&format!("READ of round {k}"), &a.mr.to_vec(4096, 24)?, &remote)?;
        untouched(&format!("after the READ of round {k}"), &a.mr, 4120, 40, GUARD)?;
        ensure_eq!(a.mr.to_vec(8192, 8)?, k.to_be_bytes(), "value returned by the add of round {k}");
    }
    // One completion at a time into polls with room for 16: each finds exactly one.
    for k in 0..12u64 {
        qa.post_send(&[wr(5000 + k, write(&s, &b.mr, 0))])?;
        let mut w = [Wc::default(); 16];
        let start = Instant::now();
        let n = loop {
            match small.poll(&mut w) {
                0 => ensure!(start.elapsed() < t, "no completion for WRITE {}", 5000 + k),
                n => break n,
            }
        };
        ensure_eq!(n, 1, "completions found by a poll for one WRITE");
        requester(&w[0], 5000 + k, WcOpcode::RdmaWrite, na)?;
        ensure_eq!(w[0].wc_flags, WcFlags(0), "flags of a requester completion");
        ensure_eq!(w[1], Wc::default(), "only the first entry is written");
    }
    let w = wait_wcs(&mut b.cq, 8, t)?;
    for (k, w) in w.iter().enumerate() {
        expect_wc(w, 900 + k as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!((w.byte_len, w.qp_num), (16, nb), "receive {k} at the peer");
    }
    same_bytes("the last SEND", &b.mr.to_vec(2048, 16)?, &payload)?;
    same_bytes("WRITE to offset 0", &b.mr.to_vec(0, 16)?, &payload)?;
    same_bytes("WRITE to offset 64", &b.mr.to_vec(64, 16)?, &payload)?;
    ensure_eq!(b.mr.to_vec(1024, 8)?, 8u64.to_be_bytes(), "eight fetch-and-adds of 1 (big-endian, as mlx5)");
    drop((qa, qb));
    Ok(Outcome::Passed)
}
