//! Two software ConnectX adapters of this process on a perfect in-process fabric, each with a
//! CQ, an RC QP and a 64 KiB MR, connected to each other (shared by the tests that run traffic
//! between two adapters).

// Each test binary that includes this module uses some of its fields, not all.
#![allow(dead_code)]

use umlx_sim::fabric::Fabric;
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

/// One adapter and what the traffic uses.
pub struct End {
    pub ctx: Context,
    pub dev: SimDevice,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
    pub _pd: Pd,
}

/// Adapter `n` on `fabric`: a CQ of 256, an RC QP (64 sends, 64 receives, every send
/// signaled) and a 64 KiB MR with `access`.
pub fn end(fabric: &Fabric, n: u8, access: AccessFlags) -> End {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::new(cfg);
    fabric.attach(&dev.port());
    let ctx = Context::attach_sim(dev.clone(), &format!("f{n}"), ips).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256, None).unwrap();
    let qp = pd.create_qp(QpType::Rc, &cq).max_send_wr(64).max_recv_wr(64).sq_sig_all(true).build().unwrap();
    let mr = pd.alloc_mr(1 << 16, access).unwrap();
    End { ctx, dev, cq, qp, mr, _pd: pd }
}

/// Adapters `n` and `n + 1` on a perfect fabric, their QPs connected from GID index 1 with
/// path MTU 1024, PSN 0 both ways, and `params`' other attributes.
pub fn pair(n: u8, access: AccessFlags, params: ConnectParams) -> (Fabric, End, End) {
    let fabric = Fabric::perfect();
    let mut a = end(&fabric, n, access);
    let mut b = end(&fabric, n + 1, access);
    let (ga, gb) = (a.ctx.query_gid(1, 1).unwrap(), b.ctx.query_gid(1, 1).unwrap());
    a.ctx.add_neighbor(gb.to_ip(), b.ctx.mac());
    b.ctx.add_neighbor(ga.to_ip(), a.ctx.mac());
    let params = ConnectParams { path_mtu: Some(Mtu::Mtu1024), sgid_index: Some(1), ..params };
    let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
    a.qp.connect(&RcPeer { qp_num: qb, psn: 0, gid: gb }, &params).unwrap();
    b.qp.connect(&RcPeer { qp_num: qa, psn: 0, gid: ga }, &params).unwrap();
    (fabric, a, b)
}
