//! An RC ping-pong with the verbs API: two software ConnectX adapters on an in-process fabric,
//! one QP each, a message sent back and forth and checked every time.
//!
//! Run: `cargo run --release -p umlx-verbs --example rc_pingpong`

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};
use umlx_sim::fabric::Fabric;
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

/// One side: context, PD, CQ, a registered buffer and an RC QP.
struct Side {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn open(fabric: &Fabric, n: u8) -> std::result::Result<Side, Error> {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::new(cfg);
    fabric.attach(&dev.port());
    let ctx = Context::attach_sim(dev, &format!("side{n}"), ips)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let qp = pd.create_qp(QpType::Rc, &cq, &cq, None, QpInitCap { cap, sq_sig_all: true })?;
    Ok(Side { ctx, _pd: pd, cq, mr, qp })
}

/// RESET -> INIT -> RTR -> RTS towards the peer's QP number and GID (as exchanged out of band).
fn connect(s: &mut Side, peer_qpn: u32, peer_gid: Gid) -> std::result::Result<(), Error> {
    let m = QpAttrMask::STATE;
    s.qp.modify(
        &QpAttr { qp_state: Some(QpState::Init), port_num: 1, ..Default::default() },
        m | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )?;
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: peer_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            grh: GlobalRoute { dgid: peer_gid, sgid_index: 1, hop_limit: 64, ..Default::default() },
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    s.qp.modify(
        &rtr,
        m | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )?;
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    s.qp.modify(
        &rts,
        m | QpAttrMask::SQ_PSN
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
}

fn wait(cq: &mut Cq) -> Wc {
    let mut wc = [Wc::default()];
    let start = Instant::now();
    while cq.poll(&mut wc) == 0 {
        assert!(start.elapsed() < Duration::from_secs(5), "no completion");
    }
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
    wc[0]
}

/// Sends the first `size` bytes of `s`'s buffer, signaled.
fn send(s: &mut Side, wr_id: u64, size: u32) -> std::result::Result<(), Error> {
    let sge = [s.mr.sge(0, size)];
    let wr =
        SendWr { wr_id, sg_list: &sge, op: SendOp::Send, send_flags: SendFlags::SIGNALED, inline_data: None, ud: None };
    s.qp.post_send(&[wr]).map_err(|e| Error::Invalid(e.to_string()))
}

fn main() -> std::result::Result<(), Error> {
    let fabric = Fabric::perfect();
    let mut a = open(&fabric, 1)?;
    let mut b = open(&fabric, 2)?;
    let (ga, gb) = (a.ctx.query_gid(1, 1)?, b.ctx.query_gid(1, 1)?);
    a.ctx.add_neighbor(gb.to_ip(), b.ctx.mac());
    b.ctx.add_neighbor(ga.to_ip(), a.ctx.mac());
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
    connect(&mut a, qb, gb)?;
    connect(&mut b, qa, ga)?;
    let iters = 1000;
    let size = 1024u32;
    let start = Instant::now();
    for i in 0..iters {
        let msg: Vec<u8> = (0..size).map(|k| (k + i) as u8).collect();
        a.mr.write(0, &msg)?;
        b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, size)] }])
            .map_err(|e| Error::Invalid(e.to_string()))?;
        a.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[a.mr.sge(2048, size)] }])
            .map_err(|e| Error::Invalid(e.to_string()))?;
        send(&mut a, 3, size)?; // ping
        wait(&mut b.cq);
        send(&mut b, 4, size)?; // pong
        wait(&mut b.cq);
        wait(&mut a.cq);
        wait(&mut a.cq);
        assert_eq!(a.mr.to_vec(2048, size as usize)?, msg, "iteration {i}: the pong differs from the ping");
    }
    let t = start.elapsed();
    println!(
        "{iters} RC ping-pongs of {size} bytes in {t:.2?} = {:.1} usec/iter, data checked",
        t.as_secs_f64() * 1e6 / iters as f64
    );
    Ok(())
}
