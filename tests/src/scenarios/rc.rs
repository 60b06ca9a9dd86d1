//! RC traffic: every opcode, with the data checked byte for byte in the remote memory and the
//! bytes around it checked untouched; immediates, inline data, gather and scatter lists,
//! atomics, READ into scattered buffers, unsignaled requests, chains and ring wrap-around.

use crate::env::{Env, Side};
use crate::kit::Result;
use crate::kit::*;
use crate::{ensure, ensure_eq};
use umlx_verbs::*;

/// Byte the receive and target buffers are filled with before each transfer (so writes past
/// the end show).
const GUARD: u8 = 0xee;

fn send_and_check(
    env: &Env,
    (from, qf): (&mut Side, &mut Qp),
    (to, qt): (&mut Side, &mut Qp),
    len: usize,
    seed: u8,
) -> Result {
    let t = env.timeout;
    let msg = pattern(len, seed);
    from.mr.write(0, &msg)?;
    let room = len + 256;
    to.mr.fill(0, room + 64, GUARD)?;
    qt.post_recv(&[recv(seed as u64, &[to.mr.sge(0, room as u32)])])?;
    qf.post_send(&[wr(seed as u64, send(&[from.mr.sge(0, len as u32)]))])?;
    let w = wait_wcs(&mut from.cq, 1, t)?;
    expect_wc(&w[0], seed as u64, WcStatus::Success, WcOpcode::Send)?;
    ensure_eq!(w[0].qp_num, qf.qp_num(), "requester completion QP");
    let w = wait_wcs(&mut to.cq, 1, t)?;
    expect_wc(&w[0], seed as u64, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len as usize, len, "byte_len of a {len}-byte SEND");
    ensure_eq!(w[0].qp_num, qt.qp_num(), "responder completion QP");
    ensure!(!w[0].wc_flags.contains(WcFlags::WITH_IMM), "WITH_IMM on a SEND without immediate");
    same_bytes(&format!("{len}-byte SEND"), &to.mr.to_vec(0, len)?, &msg)?;
    untouched(&format!("receive buffer after a {len}-byte SEND"), &to.mr, len, room + 64 - len, GUARD)
}

/// SEND/RECV of sizes around the path MTU (1 byte to 10 packets), both directions.
pub fn rc_send_recv(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let mtu = path_mtu(&a.ep, &b.ep).bytes() as usize;
    for (i, len) in [1, 63, 64, mtu - 1, mtu, mtu + 1, 3 * mtu, 10 * mtu - 7].into_iter().enumerate() {
        send_and_check(env, (&mut a, &mut qa), (&mut b, &mut qb), len, 2 * i as u8 + 1)?;
        send_and_check(env, (&mut b, &mut qb), (&mut a, &mut qa), len, 2 * i as u8 + 2)?;
    }
    Ok(Outcome::Passed)
}

/// SEND with immediate: the value (0, all ones, a pattern) and WITH_IMM in the receive
/// completion, the data with it; a following plain SEND has no WITH_IMM.
pub fn rc_send_with_immediate(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let msg = pattern(2500, 5);
    a.mr.write(0, &msg)?;
    for (i, imm) in [0u32, u32::MAX, 0xdead_beef].into_iter().enumerate() {
        b.mr.fill(0, 4096, GUARD)?;
        qb.post_recv(&[recv(i as u64, &[b.mr.sge(0, 4096)])])?;
        qa.post_send(&[wr(i as u64, send_imm(&[a.mr.sge(0, 2500)], imm))])?;
        expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], i as u64, WcStatus::Success, WcOpcode::Send)?;
        let w = wait_wcs(&mut b.cq, 1, t)?;
        expect_wc(&w[0], i as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure!(w[0].wc_flags.contains(WcFlags::WITH_IMM), "no WITH_IMM flag: {:?}", w[0]);
        ensure_eq!((w[0].imm_data, w[0].byte_len), (imm, 2500), "immediate and length");
        same_bytes("SEND with immediate data", &b.mr.to_vec(0, 2500)?, &msg)?;
        untouched("after the message", &b.mr, 2500, 4096 - 2500, GUARD)?;
    }
    qb.post_recv(&[recv(9, &[b.mr.sge(0, 64)])])?;
    qa.post_send(&[wr(9, send(&[a.mr.sge(0, 8)]))])?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    ensure!(!w[0].wc_flags.contains(WcFlags::WITH_IMM), "WITH_IMM on a plain SEND: {:?}", w[0]);
    Ok(Outcome::Passed)
}

/// Gather and scatter lists: five send SGEs (one of them empty) scattered over four receive
/// SGEs with other boundaries, byte for byte; then a gather list of the QP's full SGE count.
pub fn rc_send_gather_scatter_sge_lists(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 6, 4, 0), &RcOpts::default())?;
    let t = env.timeout;
    // Gather: pieces at scattered offsets of A's region.
    let pieces: [(usize, usize); 5] = [(10_000, 1), (20_001, 100), (30_000, 0), (40_003, 1000), (50_000, 2007)];
    let mut msg = Vec::new();
    for (k, (off, len)) in pieces.iter().enumerate() {
        let p = pattern(*len, 10 + k as u8);
        a.mr.write(*off, &p)?;
        msg.extend(p);
    }
    let gather: Vec<Sge> = pieces.iter().map(|(o, l)| a.mr.sge(*o, *l as u32)).collect();
    // Scatter: four buffers of B's region, 3600 bytes of room for 3108.
    let slots: [(usize, usize); 4] = [(1_000, 50), (5_001, 1500), (9_000, 10), (13_000, 2040)];
    for (o, l) in slots {
        b.mr.fill(o, l + 16, GUARD)?;
    }
    let scatter: Vec<Sge> = slots.iter().map(|(o, l)| b.mr.sge(*o, *l as u32)).collect();
    qb.post_recv(&[recv(1, &scatter)])?;
    qa.post_send(&[wr(1, send(&gather))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 1, WcStatus::Success, WcOpcode::Send)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len as usize, msg.len(), "byte_len of the gathered message");
    let mut at = 0;
    for (k, (o, l)) in slots.iter().enumerate() {
        let n = (*l).min(msg.len() - at);
        same_bytes(&format!("scatter SGE {k}"), &b.mr.to_vec(*o, n)?, &msg[at..at + n])?;
        untouched(&format!("after scatter SGE {k}"), &b.mr, o + n, l + 16 - n, GUARD)?;
        at += n;
    }

    // Every send SGE the QP has, 33 bytes each.
    let n = qa.cap.max_send_sge as usize;
    let full: Vec<Sge> = (0..n).map(|k| a.mr.sge(60_000 + 100 * k, 33)).collect();
    let mut want = Vec::new();
    for k in 0..n {
        let p = pattern(33, 40 + k as u8);
        a.mr.write(60_000 + 100 * k, &p)?;
        want.extend(p);
    }
    qb.post_recv(&[recv(2, &[b.mr.sge(100_000, 4096)])])?;
    qa.post_send(&[wr(2, send(&full))])?;
    wait_wcs(&mut a.cq, 1, t)?;
    ensure_eq!(wait_wcs(&mut b.cq, 1, t)?[0].byte_len as usize, 33 * n, "bytes of a {n}-SGE gather");
    same_bytes(&format!("{n}-SGE gather"), &b.mr.to_vec(100_000, 33 * n)?, &want)?;
    Ok(Outcome::Passed)
}

/// A receive scatter list with an empty entry in the middle: as in ibverbs (libmlx5 skips
/// zero-length SGEs when it builds the receive WQE), the empty entry holds nothing and the
/// message continues in the entries after it.
pub fn rc_recv_sge_list_with_empty_entry(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 1, 4, 0), &RcOpts::default())?;
    let t = env.timeout;
    let msg = pattern(1500, 33);
    a.mr.write(0, &msg)?;
    b.mr.fill(0, 8192, GUARD)?;
    let scatter = [b.mr.sge(0, 1000), b.mr.sge(2048, 0), b.mr.sge(4096, 1000)];
    qb.post_recv(&[recv(1, &scatter)])?;
    qa.post_send(&[wr(1, send(&[a.mr.sge(0, 1500)]))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Send)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Recv)?;
    same_bytes("first scatter entry", &b.mr.to_vec(0, 1000)?, &msg[..1000])?;
    untouched("the empty scatter entry", &b.mr, 2048, 64, GUARD)?;
    same_bytes("scatter entry after the empty one", &b.mr.to_vec(4096, 500)?, &msg[1000..])?;
    untouched("after the message", &b.mr, 4596, 500, GUARD)?;
    Ok(Outcome::Passed)
}

/// A receive WQE longer than four scatter entries (eight: a 128-byte stride): a SEND fills
/// seven of them byte for byte and leaves the eighth and the gaps untouched.
pub fn rc_recv_scatter_list_of_eight(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 16, 1, 8, 0), &RcOpts::default())?;
    let t = env.timeout;
    let msg = pattern(2000, 71);
    a.mr.write(0, &msg)?;
    b.mr.fill(0, 8 * 1024, GUARD)?;
    // Eight entries of 300 bytes, 1 KiB apart: 2000 bytes fill six and 200 bytes of the seventh.
    let scatter: Vec<Sge> = (0..8).map(|k| b.mr.sge(1024 * k, 300)).collect();
    qb.post_recv(&[recv(1, &scatter)])?;
    qa.post_send(&[wr(1, send(&[a.mr.sge(0, 2000)]))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 1, WcStatus::Success, WcOpcode::Send)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len, 2000, "byte_len of a SEND over eight scatter entries");
    for (k, part) in msg.chunks(300).enumerate() {
        same_bytes(&format!("scatter entry {k}"), &b.mr.to_vec(1024 * k, part.len())?, part)?;
        untouched(&format!("after scatter entry {k}"), &b.mr, 1024 * k + part.len(), 1024 - part.len(), GUARD)?;
    }
    untouched("the eighth scatter entry", &b.mr, 7 * 1024, 1024, GUARD)?;
    Ok(Outcome::Passed)
}

/// Inline SENDs (1 byte to the QP's inline maximum, with and without immediate): the data is
/// copied at post time (changing the source afterwards does not change what arrives).
pub fn rc_send_inline(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let max = qa.cap.max_inline_data as usize;
    for (i, len) in [1usize, 12, 16, 17, 60, max].into_iter().enumerate() {
        let mut data = pattern(len, 60 + i as u8);
        let want = data.clone();
        b.mr.fill(0, len + 64, GUARD)?;
        qb.post_recv(&[recv(i as u64, &[b.mr.sge(0, (len + 64) as u32)])])?;
        let imm = if i % 2 == 0 { None } else { Some(i as u32) };
        qa.post_send(&[wr(i as u64, SendOp::Send { data: Payload::Inline(&data), imm })])?;
        data.fill(0); // inline data belongs to the WQE once posted
        expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], i as u64, WcStatus::Success, WcOpcode::Send)?;
        let w = wait_wcs(&mut b.cq, 1, t)?;
        expect_wc(&w[0], i as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!(w[0].byte_len as usize, len, "byte_len of a {len}-byte inline SEND");
        if i % 2 == 1 {
            ensure_eq!(w[0].imm_data, i as u32, "immediate of an inline SEND");
        }
        same_bytes(&format!("{len}-byte inline SEND"), &b.mr.to_vec(0, len)?, &want)?;
        untouched("after the inline SEND", &b.mr, len, 64, GUARD)?;
    }
    Ok(Outcome::Passed)
}

/// Zero-length operations: a SEND with no SGE (byte_len 0, receive buffer untouched), an RDMA
/// WRITE with no SGE, a zero-length RDMA WRITE with immediate (consumes a receive WQE with no
/// SGE).
pub fn rc_zero_length_operations(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    b.mr.fill(0, 128, GUARD)?;
    qb.post_recv(&[recv(1, &[b.mr.sge(0, 64)]), recv(2, &[])])?;
    qa.post_send(&[
        wr(1, send(&[])),
        wr(2, write(&[], &b.mr, 64)),
        wr(3, SendOp::Write { data: Payload::Sges(&[]), remote: at(&b.mr, 64), imm: Some(77) }),
    ])?;
    let w = wait_wcs(&mut a.cq, 3, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Send)?;
    expect_wc(&w[1], 2, WcStatus::Success, WcOpcode::RdmaWrite)?;
    expect_wc(&w[2], 3, WcStatus::Success, WcOpcode::RdmaWrite)?;
    let w = wait_wcs(&mut b.cq, 2, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len, 0, "byte_len of a zero-length SEND");
    expect_wc(&w[1], 2, WcStatus::Success, WcOpcode::RecvRdmaWithImm)?;
    ensure_eq!((w[1].byte_len, w[1].imm_data), (0, 77), "zero-length WRITE with immediate");
    untouched("memory around zero-length operations", &b.mr, 0, 128, GUARD)?;
    Ok(Outcome::Passed)
}

/// RDMA WRITE of 1 byte to 64 KiB at odd remote offsets, the PSNs wrapping past 2^24 on the
/// way; the bytes around each target untouched.
pub fn rc_rdma_write_multi_packet_psn_wrap(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let o = RcOpts { psn_a: 0xff_fff0, ..Default::default() };
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &o)?;
    let t = env.timeout;
    let mtu = path_mtu(&a.ep, &b.ep).bytes() as usize;
    for (i, len) in [1usize, mtu, mtu + 1, 5 * mtu + 17, 64 * 1024].into_iter().enumerate() {
        let data = pattern(len, 80 + i as u8);
        a.mr.write(1, &data)?;
        let at = 3 + 7 * i;
        b.mr.fill(0, len + 64, GUARD)?;
        qa.post_send(&[wr(i as u64, write(&[a.mr.sge(1, len as u32)], &b.mr, at))])?;
        let w = wait_wcs(&mut a.cq, 1, t)?;
        expect_wc(&w[0], i as u64, WcStatus::Success, WcOpcode::RdmaWrite)?;
        same_bytes(&format!("{len}-byte RDMA WRITE"), &b.mr.to_vec(at, len)?, &data)?;
        untouched("before the WRITE", &b.mr, 0, at, GUARD)?;
        untouched("after the WRITE", &b.mr, at + len, 64 - at, GUARD)?;
    }
    Ok(Outcome::Passed)
}

/// RDMA WRITE with immediate: data in the remote region (not in the receive buffer), a
/// RECV_RDMA_WITH_IMM completion with the immediate and the length, consuming one receive WQE.
pub fn rc_rdma_write_with_immediate(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let data = pattern(3000, 90);
    a.mr.write(0, &data)?;
    b.mr.fill(0, 8192, GUARD)?;
    qb.post_recv(&[recv(5, &[b.mr.sge(0, 64)]), recv(6, &[])])?;
    let (s1, s2) = ([a.mr.sge(0, 3000)], [a.mr.sge(0, 10)]);
    let op = |sgl, imm| SendOp::Write { data: Payload::Sges(sgl), remote: at(&b.mr, 4096), imm: Some(imm) };
    qa.post_send(&[wr(1, op(&s1, 0x1234_5678)), wr(2, op(&s2, 0))])?;
    let w = wait_wcs(&mut a.cq, 2, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::RdmaWrite)?;
    expect_wc(&w[1], 2, WcStatus::Success, WcOpcode::RdmaWrite)?;
    let w = wait_wcs(&mut b.cq, 2, t)?;
    expect_wc(&w[0], 5, WcStatus::Success, WcOpcode::RecvRdmaWithImm)?;
    ensure!(w[0].wc_flags.contains(WcFlags::WITH_IMM), "no WITH_IMM flag: {:?}", w[0]);
    ensure_eq!((w[0].imm_data, w[0].byte_len, w[0].qp_num), (0x1234_5678, 3000, qb.qp_num()), "first WRITE_IMM");
    expect_wc(&w[1], 6, WcStatus::Success, WcOpcode::RecvRdmaWithImm)?;
    ensure_eq!((w[1].imm_data, w[1].byte_len), (0, 10), "second WRITE_IMM");
    same_bytes("WRITE with immediate data", &b.mr.to_vec(4096, 3000)?, &data)?;
    untouched("the receive buffer (WRITE data goes to the remote address)", &b.mr, 0, 4096, GUARD)?;
    untouched("after the WRITE", &b.mr, 7096, 1096, GUARD)?;
    Ok(Outcome::Passed)
}

/// Inline RDMA WRITE and inline RDMA WRITE with immediate.
pub fn rc_rdma_write_inline(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let max = qa.cap.max_inline_data as usize;
    let d1 = pattern(100, 91);
    let d2 = pattern(max, 92);
    b.mr.fill(0, 1024, GUARD)?;
    qb.post_recv(&[recv(7, &[])])?;
    let imm = SendOp::Write { data: Payload::Inline(&d2), remote: at(&b.mr, 500), imm: Some(3) };
    qa.post_send(&[wr(1, write_inline(&d1, &b.mr, 7)), wr(2, imm)])?;
    let w = wait_wcs(&mut a.cq, 2, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::RdmaWrite)?;
    expect_wc(&w[1], 2, WcStatus::Success, WcOpcode::RdmaWrite)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 7, WcStatus::Success, WcOpcode::RecvRdmaWithImm)?;
    ensure_eq!((w[0].imm_data, w[0].byte_len as usize), (3, max), "inline WRITE with immediate");
    same_bytes("inline WRITE", &b.mr.to_vec(7, 100)?, &d1)?;
    same_bytes("inline WRITE with immediate", &b.mr.to_vec(500, max)?, &d2)?;
    untouched("before the first WRITE", &b.mr, 0, 7, GUARD)?;
    untouched("between the WRITEs", &b.mr, 107, 393, GUARD)?;
    untouched("after the second WRITE", &b.mr, 500 + max, 1024 - 500 - max, GUARD)?;
    Ok(Outcome::Passed)
}

/// RDMA READ into three scattered local buffers, a 10-packet READ, eight READs in one chain
/// (more than the initiator depth), and a READ posted after a WRITE to the same remote bytes,
/// which must see the written data.
pub fn rc_rdma_read_into_scattered_buffers(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let remote = pattern(2500, 100);
    b.mr.write(40_000, &remote)?;
    let slots = [(1_000usize, 1000usize), (3_001, 1), (5_000, 1499)];
    for (o, l) in slots {
        a.mr.fill(o, l + 16, GUARD)?;
    }
    let sg: Vec<Sge> = slots.iter().map(|(o, l)| a.mr.sge(*o, *l as u32)).collect();
    qa.post_send(&[wr(1, read(&sg, &b.mr, 40_000))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::RdmaRead)?;
    ensure_eq!(w[0].byte_len, 2500, "READ byte_len");
    let mut at = 0;
    for (k, (o, l)) in slots.iter().enumerate() {
        same_bytes(&format!("READ scatter SGE {k}"), &a.mr.to_vec(*o, *l)?, &remote[at..at + l])?;
        untouched(&format!("after READ scatter SGE {k}"), &a.mr, o + l, 16, GUARD)?;
        at += l;
    }

    let mtu = path_mtu(&a.ep, &b.ep).bytes() as usize;
    let big = pattern(10 * mtu, 101);
    b.mr.write(100_000, &big)?;
    qa.post_send(&[wr(2, read(&[a.mr.sge(100_000, big.len() as u32)], &b.mr, 100_000))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 2, WcStatus::Success, WcOpcode::RdmaRead)?;
    same_bytes("10-packet READ", &a.mr.to_vec(100_000, big.len())?, &big)?;

    let sgs: Vec<[Sge; 1]> = (0..8).map(|k| [a.mr.sge(150_000 + 1000 * k, 300)]).collect();
    let reads: Vec<SendWr> =
        sgs.iter().enumerate().map(|(k, s)| wr(10 + k as u64, read(s, &b.mr, 100_000 + 100 * k))).collect();
    qa.post_send(&reads)?;
    let w = wait_wcs(&mut a.cq, 8, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, 10 + k as u64, WcStatus::Success, WcOpcode::RdmaRead)?;
        let want = &big[100 * k..100 * k + 300];
        same_bytes(&format!("READ {k} of a chain of 8"), &a.mr.to_vec(150_000 + 1000 * k, 300)?, want)?;
    }

    let fresh = pattern(700, 102);
    a.mr.write(200_000, &fresh)?;
    qa.post_send(&[
        wr(20, write(&[a.mr.sge(200_000, 700)], &b.mr, 60_000)),
        wr(21, read(&[a.mr.sge(210_000, 700)], &b.mr, 60_000)),
    ])?;
    let w = wait_wcs(&mut a.cq, 2, t)?;
    expect_wc(&w[0], 20, WcStatus::Success, WcOpcode::RdmaWrite)?;
    expect_wc(&w[1], 21, WcStatus::Success, WcOpcode::RdmaRead)?;
    same_bytes("READ after WRITE on one QP", &a.mr.to_vec(210_000, 700)?, &fresh)?;
    Ok(Outcome::Passed)
}

/// Atomic fetch-and-add (64-bit, big-endian in memory as mlx5 does by default): the original
/// value returned, the sum in remote memory, wrap-around, a chain of ten adds returning each
/// intermediate value; the bytes around the target untouched.
pub fn rc_atomic_fetch_and_add(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let target = 8 * 1001;
    b.mr.fill(target - 8, 24, GUARD)?;
    b.mr.write(target, &0x0102_0304_0506_0708u64.to_be_bytes())?;
    let faa = |result: Sge, add: u64| SendOp::FetchAdd { result, remote: at(&b.mr, target), add };
    qa.post_send(&[wr(1, faa(a.mr.sge(0, 8), 5))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::FetchAdd)?;
    ensure_eq!(w[0].byte_len, 8, "atomic byte_len");
    ensure_eq!(a.mr.to_vec(0, 8)?, 0x0102_0304_0506_0708u64.to_be_bytes(), "value returned by fetch-and-add");
    ensure_eq!(b.mr.to_vec(target, 8)?, 0x0102_0304_0506_070du64.to_be_bytes(), "remote value after fetch-and-add");
    untouched("before the atomic target", &b.mr, target - 8, 8, GUARD)?;
    untouched("after the atomic target", &b.mr, target + 8, 8, GUARD)?;

    b.mr.write(target, &(u64::MAX - 1).to_be_bytes())?;
    qa.post_send(&[wr(2, faa(a.mr.sge(8, 8), 3))])?;
    wait_wcs(&mut a.cq, 1, t)?;
    ensure_eq!(a.mr.to_vec(8, 8)?, (u64::MAX - 1).to_be_bytes(), "value returned before wrap-around");
    ensure_eq!(b.mr.to_vec(target, 8)?, 1u64.to_be_bytes(), "remote value after wrap-around");

    let chain: Vec<SendWr> = (0..10).map(|k| wr(10 + k as u64, faa(a.mr.sge(64 + 8 * k, 8), 1))).collect();
    qa.post_send(&chain)?;
    let w = wait_wcs(&mut a.cq, 10, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, 10 + k as u64, WcStatus::Success, WcOpcode::FetchAdd)?;
        ensure_eq!(a.mr.to_vec(64 + 8 * k, 8)?, (1 + k as u64).to_be_bytes(), "value returned by add {k} of 10");
    }
    ensure_eq!(b.mr.to_vec(target, 8)?, 11u64.to_be_bytes(), "remote value after ten adds");
    Ok(Outcome::Passed)
}

/// Atomic compare-and-swap: swapped when equal (original returned), unchanged when not (current
/// value returned).
pub fn rc_atomic_compare_and_swap(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, default_caps(), &RcOpts::default())?;
    let t = env.timeout;
    let target = 4096;
    b.mr.fill(target - 8, 24, GUARD)?;
    b.mr.write(target, &105u64.to_be_bytes())?;
    let cas =
        |result: Sge, compare: u64, swap: u64| SendOp::CompareSwap { result, remote: at(&b.mr, target), compare, swap };
    qa.post_send(&[wr(1, cas(a.mr.sge(0, 8), 105, 0xfeed_face_cafe_beef))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::CompSwap)?;
    ensure_eq!(a.mr.to_vec(0, 8)?, 105u64.to_be_bytes(), "value returned by a successful compare-and-swap");
    ensure_eq!(b.mr.to_vec(target, 8)?, 0xfeed_face_cafe_beefu64.to_be_bytes(), "remote value after the swap");
    qa.post_send(&[wr(2, cas(a.mr.sge(8, 8), 105, 7))])?;
    expect_wc(&wait_wcs(&mut a.cq, 1, t)?[0], 2, WcStatus::Success, WcOpcode::CompSwap)?;
    ensure_eq!(a.mr.to_vec(8, 8)?, 0xfeed_face_cafe_beefu64.to_be_bytes(), "value returned by a failed compare");
    ensure_eq!(b.mr.to_vec(target, 8)?, 0xfeed_face_cafe_beefu64.to_be_bytes(), "remote value after a failed compare");
    untouched("around the atomic target", &b.mr, target - 8, 8, GUARD)?;
    untouched("after the atomic target", &b.mr, target + 8, 8, GUARD)?;
    Ok(Outcome::Passed)
}

/// Unsignaled requests: one completion for a run ending in a signaled one; a long stream of
/// mostly unsignaled requests through a small SQ (its space comes back with each signaled
/// completion); `sq_sig_all` signals requests posted without SIGNALED.
pub fn rc_unsignaled_and_sq_sig_all(env: &mut Env) -> Result<Outcome> {
    let (mut a, b) = env.sides()?;
    let (mut qa, _qb) = rc_pair(&a, &b, caps(16, 16, 1, 1, 0), &RcOpts::default())?;
    let (t, quiet) = (env.timeout, env.quiet);
    let s = [a.mr.sge(0, 8)];
    let unsig = |id: u64, off: usize| with_flags(wr(id, write(&s, &b.mr, off)), SendFlags(0));
    a.mr.write(0, &pattern(8, 110))?;
    qa.post_send(&[unsig(1, 0), unsig(2, 8), wr(3, write(&s, &b.mr, 16))])?;
    let w = wait_wcs(&mut a.cq, 1, t)?;
    expect_wc(&w[0], 3, WcStatus::Success, WcOpcode::RdmaWrite)?;
    expect_no_wc(&mut a.cq, quiet, "unsignaled WRITEs")?;
    for k in 0..3 {
        same_bytes(&format!("WRITE {k}"), &b.mr.to_vec(8 * k, 8)?, &pattern(8, 110))?;
    }
    // 200 requests through a 16-entry SQ, every 8th signaled.
    let size = qa.cap.max_send_wr as usize;
    let mut signaled = 0;
    for k in 0..200usize {
        let w = if k % 8 == 7 { wr(1000 + k as u64, write(&s, &b.mr, 1024)) } else { unsig(k as u64, 1024) };
        qa.post_send(&[w])?;
        if k % 8 == 7 {
            signaled += 1;
        }
        if k % size == size - 1 {
            for w in wait_wcs(&mut a.cq, signaled, t)? {
                ensure!(w.status == WcStatus::Success && w.wr_id >= 1000, "stream completion {w:?}");
            }
            signaled = 0;
        }
    }
    wait_wcs(&mut a.cq, signaled, t)?;

    let c = caps(16, 16, 1, 1, 0);
    let mut qs = a.pd.create_qp(QpType::Rc, &a.cq).cap(c).sq_sig_all(true).build()?;
    let mut qr = b.pd.create_qp(QpType::Rc, &b.cq).cap(c).sq_sig_all(true).build()?;
    connect_pair(&a.ep, &mut qs, &b.ep, &mut qr, &RcOpts::default())?;
    qs.post_send(&[with_flags(wr(50, write(&s, &b.mr, 0)), SendFlags(0)), unsig(51, 8)])?;
    let w = wait_wcs(&mut a.cq, 2, t)?;
    ensure_eq!((w[0].wr_id, w[1].wr_id), (50, 51), "completions with sq_sig_all");
    Ok(Outcome::Passed)
}

/// Chains and ring wrap-around: 16 receives and 16 SENDs each in one post, completions in
/// order; then many rounds of mixed-size WQEs (one and several SGEs, inline data taking two or
/// more WQE blocks) through a small SQ so that WQEs straddle the end of the ring.
pub fn rc_chains_and_ring_wrap(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = rc_pair(&a, &b, caps(16, 32, 3, 1, 100), &RcOpts::default())?;
    let t = env.timeout;
    let n = 16usize;
    let rsg: Vec<[Sge; 1]> = (0..n).map(|k| [b.mr.sge(1024 * k, 1024)]).collect();
    let rwrs: Vec<RecvWr> = rsg.iter().enumerate().map(|(k, s)| recv(k as u64, s)).collect();
    qb.post_recv(&rwrs)?;
    for k in 0..n {
        a.mr.write(1024 * k, &pattern(200 + k, k as u8))?;
    }
    let ssg: Vec<[Sge; 1]> = (0..n).map(|k| [a.mr.sge(1024 * k, 200 + k as u32)]).collect();
    let swrs: Vec<SendWr> = ssg.iter().enumerate().map(|(k, s)| wr(k as u64, send(s))).collect();
    qa.post_send(&swrs)?;
    let w = wait_wcs(&mut a.cq, n, t)?;
    let ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
    ensure_eq!(ids, (0..n as u64).collect::<Vec<_>>(), "send completions of a chain, in order");
    let w = wait_wcs(&mut b.cq, n, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, k as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!(wc.byte_len as usize, 200 + k, "length of chained SEND {k}");
        same_bytes(&format!("chained SEND {k}"), &b.mr.to_vec(1024 * k, 200 + k)?, &pattern(200 + k, k as u8))?;
    }

    // Mixed WQE sizes: rounds of 5 WRITEs whose WQEs take 1, 2 and 3 blocks.
    let inline = pattern(90, 120);
    let mut next = 0u64;
    for round in 0..40usize {
        let base = 100_000 + 512 * (round % 64);
        let sg1 = [a.mr.sge(0, 64)];
        let sg3 = [a.mr.sge(64, 10), a.mr.sge(200, 20), a.mr.sge(300, 34)];
        let mut chain = vec![
            wr(next, write(&sg1, &b.mr, base)),
            wr(next + 1, write_inline(&inline, &b.mr, base + 64)),
            wr(next + 2, write(&sg3, &b.mr, base + 160)),
            wr(next + 3, write_inline(&inline[..40], &b.mr, base + 230)),
            wr(next + 4, write(&sg1, &b.mr, base + 300)),
        ];
        if round % 3 == 1 {
            // One more block: the next rounds start at odd offsets, so WQEs straddle the ring end.
            chain.push(wr(next + 5, write(&sg1, &b.mr, base + 400)));
        }
        qa.post_send(&chain)?;
        let w = wait_wcs(&mut a.cq, chain.len(), t)?;
        for (k, wc) in w.iter().enumerate() {
            expect_wc(wc, next + k as u64, WcStatus::Success, WcOpcode::RdmaWrite)?;
        }
        next += chain.len() as u64;
        let mut sg3_data = a.mr.to_vec(64, 10)?;
        sg3_data.extend(a.mr.to_vec(200, 20)?);
        sg3_data.extend(a.mr.to_vec(300, 34)?);
        same_bytes("1-block WQE", &b.mr.to_vec(base, 64)?, &a.mr.to_vec(0, 64)?)?;
        same_bytes("inline WQE", &b.mr.to_vec(base + 64, 90)?, &inline)?;
        same_bytes("3-SGE WQE", &b.mr.to_vec(base + 160, 64)?, &sg3_data)?;
        same_bytes("short inline WQE", &b.mr.to_vec(base + 230, 40)?, &inline[..40])?;
    }
    Ok(Outcome::Passed)
}

/// Many QPs on one CQ per side: 32 connected pairs, each sending one distinct message; every
/// completion names the QP it belongs to and every message lands in its own buffer.
pub fn rc_many_qps_share_a_cq(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let t = env.timeout;
    let n = 32usize;
    let mut pairs = Vec::with_capacity(n);
    for k in 0..n {
        let o = RcOpts { psn_a: 0x100 * k as u32, psn_b: 0x100 * k as u32 + 7, ..Default::default() };
        pairs.push(rc_pair(&a, &b, caps(4, 4, 1, 1, 0), &o)?);
    }
    for (k, (qa, qb)) in pairs.iter_mut().enumerate() {
        a.mr.write(k * 1024, &pattern(500 + k, k as u8))?;
        qb.post_recv(&[recv(k as u64, &[b.mr.sge(k * 1024, 1024)])])?;
        qa.post_send(&[wr(k as u64, send(&[a.mr.sge(k * 1024, 500 + k as u32)]))])?;
    }
    let mut seen = vec![false; n];
    for w in wait_wcs(&mut b.cq, n, t)? {
        let k = w.wr_id as usize;
        ensure!(k < n && !seen[k], "unexpected or duplicate receive {w:?}");
        seen[k] = true;
        expect_wc(&w, k as u64, WcStatus::Success, WcOpcode::Recv)?;
        ensure_eq!(w.qp_num, pairs[k].1.qp_num(), "QP of receive {k}");
        ensure_eq!(w.byte_len as usize, 500 + k, "length of message {k}");
        same_bytes(&format!("message {k}"), &b.mr.to_vec(k * 1024, 500 + k)?, &pattern(500 + k, k as u8))?;
    }
    for w in wait_wcs(&mut a.cq, n, t)? {
        let k = w.wr_id as usize;
        ensure!(k < n, "unexpected send completion {w:?}");
        expect_wc(&w, k as u64, WcStatus::Success, WcOpcode::Send)?;
        ensure_eq!(w.qp_num, pairs[k].0.qp_num(), "QP of send completion {k}");
    }
    Ok(Outcome::Passed)
}
