//! UD traffic: SENDs with the GRH in front of the data, the source QP in the completion,
//! immediates, inline data and gather lists, address handles with an explicit MAC, and the
//! datagrams a receiver must drop (wrong Q_Key, no such QP).

use crate::env::{Env, Side};
use crate::kit::Result;
use crate::kit::*;
use crate::{ensure, ensure_eq};
use umlx_verbs::*;

const QKEY_A: u32 = 0x1111_1111;
const QKEY_B: u32 = 0x2222_2222;

fn ud_pair(a: &Side, b: &Side) -> Result<(Qp, Qp)> {
    let mut qa = a.pd.create_qp(QpType::Ud, &a.cq).cap(default_caps()).build()?;
    let mut qb = b.pd.create_qp(QpType::Ud, &b.cq).cap(default_caps()).build()?;
    qa.ud_to_rts(QKEY_A, 1)?;
    qb.ud_to_rts(QKEY_B, 2)?;
    Ok((qa, qb))
}

/// Checks the 40-byte GRH area of a UD receive buffer: for IPv4 20 zero bytes then the IPv4
/// header (source address at 12..16 of it), for IPv6 the IPv6 header (source GID at 8..24).
fn check_grh(grh: &[u8], from: &crate::Endpoint) -> Result {
    match from.ip {
        std::net::IpAddr::V4(ip) => {
            ensure_eq!(&grh[..20], &[0u8; 20][..], "IPv4 GRH area: 20 zero bytes first");
            ensure_eq!(grh[20] >> 4, 4, "IPv4 header version");
            ensure_eq!(&grh[32..36], &ip.octets()[..], "IPv4 source address in the GRH area");
        }
        std::net::IpAddr::V6(_) => {
            ensure_eq!(grh[0] >> 4, 6, "IPv6 header version");
            ensure_eq!(&grh[8..24], &from.gid.0[..], "source GID in the GRH");
        }
    }
    Ok(())
}

/// UD SEND of 1 byte and of a full path MTU, both directions: byte_len counts the 40-byte GRH,
/// the GRH names the sender, src_qp is the sender's QPN, the payload follows the GRH.
pub fn ud_send_recv_grh_and_source(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = ud_pair(&a, &b)?;
    let t = env.timeout;
    let ah_ab = ah_to(&a, &b.ep)?;
    let ah_ba = ah_to(&b, &a.ep)?;
    let mtu = path_mtu(&a.ep, &b.ep).bytes() as usize;
    for (i, len) in [1usize, 100, mtu].into_iter().enumerate() {
        for dir in 0..2 {
            let (from, qf, to, qt, ah, qkey) = if dir == 0 {
                (&mut a, &mut qa, &mut b, &mut qb, &ah_ab, QKEY_B)
            } else {
                (&mut b, &mut qb, &mut a, &mut qa, &ah_ba, QKEY_A)
            };
            let msg = pattern(len, (10 * i + dir) as u8);
            from.mr.write(0, &msg)?;
            to.mr.fill(0, 40 + len + 64, 0xee)?;
            qt.post_recv(&[recv(7, &[to.mr.sge(0, (40 + len + 64) as u32)])])?;
            let sg = [from.mr.sge(0, len as u32)];
            let w = ud_wr(8, UdDest { ah, remote_qpn: qt.qp_num(), remote_qkey: qkey }, Payload::Sges(&sg));
            qf.post_send_ud(&[w])?;
            expect_wc(&wait_wcs(&mut from.cq, 1, t)?[0], 8, WcStatus::Success, WcOpcode::Send)?;
            let wc = wait_wcs(&mut to.cq, 1, t)?;
            expect_wc(&wc[0], 7, WcStatus::Success, WcOpcode::Recv)?;
            ensure_eq!(wc[0].byte_len as usize, 40 + len, "UD byte_len (GRH + payload)");
            ensure_eq!((wc[0].src_qp, wc[0].qp_num), (qf.qp_num(), qt.qp_num()), "source and destination QPs");
            ensure!(wc[0].wc_flags.contains(WcFlags::GRH), "no GRH flag in {:?}", wc[0]);
            check_grh(&to.mr.to_vec(0, 40)?, &from.ep)?;
            same_bytes(&format!("{len}-byte UD payload"), &to.mr.to_vec(40, len)?, &msg)?;
            untouched("after the UD payload", &to.mr, 40 + len, 64, 0xee)?;
        }
    }
    Ok(Outcome::Passed)
}

/// UD SEND with immediate, inline UD SEND, a UD gather list of three SGEs, and an address
/// handle with an explicit destination MAC; each datagram with the GRH naming the sender and
/// the sender's QPN as source QP.
pub fn ud_immediate_inline_and_gather(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = ud_pair(&a, &b)?;
    let t = env.timeout;
    let ah = ah_to(&a, &b.ep)?;
    let ah_mac = a.pd.create_ah(&AhAttr { dmac: Some(b.ep.mac), ..ah.attr })?;
    let qpn_b = qb.qp_num();
    let dest = |ah| UdDest { ah, remote_qpn: qpn_b, remote_qkey: QKEY_B };
    for k in 0..3u64 {
        qb.post_recv(&[recv(k, &[b.mr.sge(1024 * k as usize, 1024)])])?;
    }
    let sg = [a.mr.sge(0, 200)];
    let imm = UdSendWr { imm: Some(0xabcd_0123), ..ud_wr(1, dest(&ah), Payload::Sges(&sg)) };
    let inline = pattern(60, 7);
    let inl = ud_wr(2, dest(&ah_mac), Payload::Inline(&inline));
    let pieces = [a.mr.sge(4000, 10), a.mr.sge(5000, 300), a.mr.sge(6000, 1)];
    let gather = ud_wr(3, dest(&ah), Payload::Sges(&pieces));
    a.mr.write(0, &pattern(200, 8))?;
    let mut want3 = Vec::new();
    for (k, s) in pieces.iter().enumerate() {
        let p = pattern(s.length() as usize, 20 + k as u8);
        a.mr.write((s.addr() - a.mr.addr()) as usize, &p)?;
        want3.extend(p);
    }
    qa.post_send_ud(&[imm, inl, gather])?;
    let w = wait_wcs(&mut a.cq, 3, t)?;
    for (k, wc) in w.iter().enumerate() {
        expect_wc(wc, 1 + k as u64, WcStatus::Success, WcOpcode::Send)?;
    }
    let w = wait_wcs(&mut b.cq, 3, t)?;
    for (k, wc) in w.iter().enumerate() {
        ensure_eq!((wc.src_qp, wc.qp_num), (qa.qp_num(), qpn_b), "source and destination QPs of datagram {k}");
        ensure!(wc.wc_flags.contains(WcFlags::GRH), "no GRH flag in {wc:?}");
        check_grh(&b.mr.to_vec(1024 * k, 40)?, &a.ep)?;
    }
    expect_wc(&w[0], 0, WcStatus::Success, WcOpcode::Recv)?;
    ensure!(w[0].wc_flags.contains(WcFlags::WITH_IMM), "no WITH_IMM flag: {:?}", w[0]);
    ensure_eq!((w[0].imm_data, w[0].byte_len), (0xabcd_0123, 240), "UD SEND with immediate");
    same_bytes("UD SEND with immediate", &b.mr.to_vec(40, 200)?, &pattern(200, 8))?;
    expect_wc(&w[1], 1, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[1].byte_len, 100, "inline UD SEND through an AH with an explicit MAC");
    same_bytes("inline UD SEND", &b.mr.to_vec(1024 + 40, 60)?, &inline)?;
    expect_wc(&w[2], 2, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[2].byte_len as usize, 40 + want3.len(), "3-SGE UD SEND");
    same_bytes("3-SGE UD SEND", &b.mr.to_vec(2048 + 40, want3.len())?, &want3)?;
    Ok(Outcome::Passed)
}

/// Datagrams the receiver drops without a completion: a wrong Q_Key, a QPN that does not exist;
/// the sender completes successfully all the same, and the next good datagram is delivered.
pub fn ud_wrong_qkey_or_qpn_dropped(env: &mut Env) -> Result<Outcome> {
    let (mut a, mut b) = env.sides()?;
    let (mut qa, mut qb) = ud_pair(&a, &b)?;
    let (t, quiet) = (env.timeout, env.quiet);
    let ah = ah_to(&a, &b.ep)?;
    qb.post_recv(&[recv(1, &[b.mr.sge(0, 1024)])])?;
    let sg = [a.mr.sge(0, 50)];
    let to = |qpn, qkey| ud_wr(qkey as u64, UdDest { ah: &ah, remote_qpn: qpn, remote_qkey: qkey }, Payload::Sges(&sg));
    let bogus_qpn = qb.qp_num() ^ 0x40;
    qa.post_send_ud(&[to(qb.qp_num(), 0x3333_3333), to(bogus_qpn, QKEY_B)])?;
    let w = wait_wcs(&mut a.cq, 2, t)?;
    ensure!(w.iter().all(|w| w.status == WcStatus::Success), "UD sends complete successfully: {w:?}");
    expect_no_wc(&mut b.cq, quiet, "datagrams with a wrong Q_Key or QPN")?;
    qa.post_send_ud(&[to(qb.qp_num(), QKEY_B)])?;
    wait_wcs(&mut a.cq, 1, t)?;
    let w = wait_wcs(&mut b.cq, 1, t)?;
    expect_wc(&w[0], 1, WcStatus::Success, WcOpcode::Recv)?;
    ensure_eq!(w[0].byte_len, 90, "the good datagram");
    Ok(Outcome::Passed)
}
