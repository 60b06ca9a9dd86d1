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

fn open(fabric: &Fabric, n: u8) -> Result<Side> {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::new(cfg);
    fabric.attach(&dev.port());
    let ctx = Context::attach_sim(dev, &format!("side{n}"), ips)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let qp = pd.create_qp(QpType::Rc, &cq).max_send_wr(4).max_recv_wr(4).sq_sig_all(true).build()?;
    Ok(Side { ctx, _pd: pd, cq, mr, qp })
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
fn send(s: &mut Side, wr_id: u64, size: u32) -> Result<()> {
    let sge = [s.mr.sge(0, size)];
    s.qp.post_send(&[SendWr::new(wr_id, SendOp::Send { data: Payload::Sges(&sge), imm: None }).signaled()])
}

fn main() -> Result<()> {
    let fabric = Fabric::perfect();
    let mut a = open(&fabric, 1)?;
    let mut b = open(&fabric, 2)?;
    let (ga, gb) = (a.ctx.query_gid(1, 1)?, b.ctx.query_gid(1, 1)?);
    a.ctx.add_neighbor(gb.to_ip(), b.ctx.mac());
    b.ctx.add_neighbor(ga.to_ip(), a.ctx.mac());
    // RESET -> INIT -> RTR -> RTS towards the peer's QP number, first PSN and GID (what two
    // programs exchange out of band), from GID index 1, path MTU 1024.
    let params = ConnectParams { path_mtu: Some(Mtu::Mtu1024), sgid_index: Some(1), ..Default::default() };
    a.qp.connect(&RcPeer { qp_num: b.qp.qp_num(), psn: 0, gid: gb }, &params)?;
    b.qp.connect(&RcPeer { qp_num: a.qp.qp_num(), psn: 0, gid: ga }, &params)?;
    let iters = 1000;
    let size = 1024u32;
    let start = Instant::now();
    for i in 0..iters {
        let msg: Vec<u8> = (0..size).map(|k| (k + i) as u8).collect();
        a.mr.write(0, &msg)?;
        b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, size)] }])?;
        a.qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[a.mr.sge(2048, size)] }])?;
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
