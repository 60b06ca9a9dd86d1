//! `umlx demo`: the whole stack in one command. Two software ConnectX adapters are brought up by
//! the driver on an in-process RoCEv2 fabric; RC and UD QPs are connected through the verbs
//! API; a ping-pong verifies data both ways; a bandwidth and latency sweep runs RDMA WRITE,
//! SEND and RDMA READ over sizes from 64 bytes to 64 KiB; the frames on the wire are decoded and
//! their ICRCs checked with the wire codec.

use crate::common::{fmt_mac, wait_one};
use std::result::Result;
use std::time::{Duration, Instant};
use umlx_sim::fabric::Fabric;
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

struct Node {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    rc: Qp,
    ud: Qp,
}

const MR_LEN: usize = 1 << 20;

fn node(fabric: &Fabric, n: u8, name: &str) -> Result<(Node, Duration, usize), String> {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::try_new(cfg).map_err(|e| format!("adapter {name}: {e}"))?;
    fabric.attach(&dev.port());
    let t = Instant::now();
    let ctx = Context::attach_sim(dev, name, ips).map_err(|e| e.to_string())?;
    let up = t.elapsed();
    let steps = ctx.hca().trace().len();
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(1024, None).map_err(|e| e.to_string())?;
    let all =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(MR_LEN, all).map_err(|e| e.to_string())?;
    let cap = QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
    let rc = pd.create_qp(QpType::Rc, &cq).cap(cap).build().map_err(|e| e.to_string())?;
    let ud = pd.create_qp(QpType::Ud, &cq).cap(cap).build().map_err(|e| e.to_string())?;
    Ok((Node { ctx, pd, cq, mr, rc, ud }, up, steps))
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8).collect()
}

/// RC ping-pong: A sends, B echoes the same bytes back; data checked every iteration.
fn rc_pingpong(a: &mut Node, b: &mut Node, size: usize, iters: usize) -> Result<Duration, String> {
    let t = Instant::now();
    for i in 0..iters {
        let msg = pattern(size, i as u64);
        a.mr.write(0, &msg).map_err(|e| e.to_string())?;
        b.rc.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, size as u32)] }]).map_err(|e| e.to_string())?;
        a.rc.post_recv(&[RecvWr { wr_id: 2, sg_list: &[a.mr.sge(MR_LEN / 2, size as u32)] }])
            .map_err(|e| e.to_string())?;
        let s = [a.mr.sge(0, size as u32)];
        a.rc.post_send(&[SendWr::new(3, SendOp::Send { data: Payload::Sges(&s), imm: None }).signaled()])
            .map_err(|e| e.to_string())?;
        let w = wait_one(&mut b.cq, 2)?;
        if w.status != WcStatus::Success || w.byte_len as usize != size {
            return Err(format!("B's receive: {w:?}"));
        }
        let s = [b.mr.sge(0, size as u32)];
        b.rc.post_send(&[SendWr::new(4, SendOp::Send { data: Payload::Sges(&s), imm: None }).signaled()])
            .map_err(|e| e.to_string())?;
        wait_one(&mut b.cq, 2)?;
        let mut got = 0;
        while got < 2 {
            let w = wait_one(&mut a.cq, 2)?;
            if w.status != WcStatus::Success {
                return Err(format!("A: {w:?}"));
            }
            got += 1;
        }
        if a.mr.to_vec(MR_LEN / 2, size).map_err(|e| e.to_string())? != msg {
            return Err(format!("RC ping-pong iteration {i}: the echoed bytes differ"));
        }
    }
    Ok(t.elapsed() / iters as u32)
}

fn ud_pingpong(a: &mut Node, b: &mut Node, size: usize, iters: usize) -> Result<Duration, String> {
    let ah_ab = a.pd.create_ah(&ah_to(&b.ctx)?).map_err(|e| e.to_string())?;
    let ah_ba = b.pd.create_ah(&ah_to(&a.ctx)?).map_err(|e| e.to_string())?;
    let t = Instant::now();
    for i in 0..iters {
        let msg = pattern(size, 1000 + i as u64);
        a.mr.write(0, &msg).map_err(|e| e.to_string())?;
        b.ud.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, size as u32 + 40)] }]).map_err(|e| e.to_string())?;
        a.ud.post_recv(&[RecvWr { wr_id: 2, sg_list: &[a.mr.sge(MR_LEN / 2, size as u32 + 40)] }])
            .map_err(|e| e.to_string())?;
        let s = [a.mr.sge(0, size as u32)];
        let dest = UdDest { ah: &ah_ab, remote_qpn: b.ud.qp_num(), remote_qkey: 0x1111_1111 };
        a.ud.post_send_ud(&[UdSendWr {
            wr_id: 3,
            dest,
            data: Payload::Sges(&s),
            imm: None,
            flags: SendFlags::SIGNALED,
        }])
        .map_err(|e| e.to_string())?;
        let w = wait_one(&mut b.cq, 2)?;
        if w.status != WcStatus::Success || w.src_qp != a.ud.qp_num() || !w.wc_flags.contains(WcFlags::GRH) {
            return Err(format!("B's UD receive: {w:?}"));
        }
        let s = [b.mr.sge(40, size as u32)];
        let dest = UdDest { ah: &ah_ba, remote_qpn: a.ud.qp_num(), remote_qkey: 0x1111_1111 };
        b.ud.post_send_ud(&[UdSendWr {
            wr_id: 4,
            dest,
            data: Payload::Sges(&s),
            imm: None,
            flags: SendFlags::SIGNALED,
        }])
        .map_err(|e| e.to_string())?;
        wait_one(&mut b.cq, 2)?;
        for _ in 0..2 {
            wait_one(&mut a.cq, 2)?;
        }
        if a.mr.to_vec(MR_LEN / 2 + 40, size).map_err(|e| e.to_string())? != msg {
            return Err(format!("UD ping-pong iteration {i}: the echoed bytes differ"));
        }
    }
    Ok(t.elapsed() / iters as u32)
}

fn ah_to(peer: &Context) -> Result<AhAttr, String> {
    let dgid = peer.query_gid(1, 1).map_err(|e| e.to_string())?;
    Ok(AhAttr {
        grh: GlobalRoute { dgid, sgid_index: 1, hop_limit: 64, ..Default::default() },
        port_num: 1,
        ..Default::default()
    })
}

/// One row of the sweep.
struct Row {
    op: &'static str,
    size: usize,
    msgs: usize,
    mbps: f64,
    mmsgs: f64,
    lat_us: f64,
}

fn bandwidth(a: &mut Node, b: &Node, op: &'static str, size: usize, msgs: usize) -> Result<Row, String> {
    let depth = 64usize;
    let s = [a.mr.sge(0, size as u32)];
    let remote = Remote { addr: b.mr.addr() + (MR_LEN / 2) as u64, rkey: b.mr.rkey() };
    let sop = match op {
        "READ" => SendOp::Read { into: &s, remote },
        _ => SendOp::Write { data: Payload::Sges(&s), remote, imm: None },
    };
    let (mut posted, mut done) = (0usize, 0usize);
    let mut wc = [Wc::default(); 32];
    let t = Instant::now();
    while done < msgs {
        while posted < msgs && posted - done < depth {
            // Signal every 16th and the last: completions are cumulative.
            let sig = posted % 16 == 15 || posted + 1 == msgs;
            let flags = if sig { SendFlags::SIGNALED } else { SendFlags(0) };
            a.rc.post_send(&[SendWr { wr_id: posted as u64, op: sop, flags }]).map_err(|e| e.to_string())?;
            posted += 1;
        }
        let n = a.cq.poll(&mut wc);
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!("{op} {size}: {w:?}"));
            }
            done = w.wr_id as usize + 1;
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!("{op} {size}: stuck at {done} of {msgs}"));
        }
    }
    let secs = t.elapsed().as_secs_f64();
    Ok(Row { op, size, msgs, mbps: (size * msgs) as f64 / secs / 1e6, mmsgs: msgs as f64 / secs / 1e6, lat_us: 0.0 })
}

fn send_latency(a: &mut Node, b: &mut Node, size: usize, iters: usize) -> Result<Row, String> {
    let mut samples = Vec::with_capacity(iters);
    let s = [a.mr.sge(0, size as u32)];
    for _ in 0..iters {
        b.rc.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, size as u32)] }]).map_err(|e| e.to_string())?;
        let t = Instant::now();
        a.rc.post_send(&[SendWr::new(2, SendOp::Send { data: Payload::Sges(&s), imm: None }).signaled()])
            .map_err(|e| e.to_string())?;
        wait_one(&mut b.cq, 2)?;
        samples.push(t.elapsed());
        wait_one(&mut a.cq, 2)?;
    }
    samples.sort();
    let avg = samples.iter().sum::<Duration>() / iters as u32;
    Ok(Row { op: "SEND lat", size, msgs: iters, mbps: 0.0, mmsgs: 0.0, lat_us: avg.as_secs_f64() * 1e6 })
}

/// The options of `umlx demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// A shorter run (fewer iterations and sizes)
    #[arg(long)]
    pub quick: bool,
}

/// Runs `umlx demo [--quick]`.
pub fn run(a: &DemoArgs) -> Result<(), String> {
    let quick = a.quick;
    println!("umlx demo: two software ConnectX adapters (ConnectX-6 Dx model) on an in-process RoCEv2 fabric\n");
    let fabric = crate::simbench::perfect_fabric()?;
    let pcap = std::env::temp_dir().join(format!("umlx-demo-{}.pcap", std::process::id()));
    let (mut a, up_a, steps) = node(&fabric, 1, "a")?;
    let (mut b, up_b, _) = node(&fabric, 2, "b")?;
    let sim_a = a.ctx.sim_backend().ok_or("the demo's node A is not a software ConnectX")?.clone();
    sim_a.device().port().set_pcap(&pcap).map_err(|e| e.to_string())?;
    for (name, n, up) in [("A", &a, up_a), ("B", &b, up_b)] {
        let d = n.ctx.query_device().map_err(|e| e.to_string())?;
        let p = n.ctx.query_port(1).map_err(|e| e.to_string())?;
        let gid = n.ctx.query_gid(1, 1).map_err(|e| e.to_string())?;
        println!(
            "adapter {name}: {} fw {} brought up in {:.1} ms ({steps} steps), MAC {}, port {} MTU {}, GID[1] {} ({}), RC QP {:#x}, UD QP {:#x}",
            n.ctx.name(),
            d.fw_ver,
            up.as_secs_f64() * 1e3,
            fmt_mac(n.ctx.mac()),
            p.state,
            p.active_mtu,
            gid,
            gid.to_ip(),
            n.rc.qp_num(),
            n.ud.qp_num()
        );
    }
    a.ctx.add_neighbor(b.ctx.query_gid(1, 1).map_err(|e| e.to_string())?.to_ip(), b.ctx.mac());
    b.ctx.add_neighbor(a.ctx.query_gid(1, 1).map_err(|e| e.to_string())?.to_ip(), a.ctx.mac());
    let (gid_a, gid_b) =
        (a.ctx.query_gid(1, 1).map_err(|e| e.to_string())?, b.ctx.query_gid(1, 1).map_err(|e| e.to_string())?);
    let (qa, qb) = (a.rc.qp_num(), b.rc.qp_num());
    // From GID index 1 (the IPv4 GIDs above), first PSNs 0x100 (A) and 0x200 (B).
    let from = |sq_psn| ConnectParams { sq_psn, sgid_index: Some(1), ..Default::default() };
    a.rc.connect(&RcPeer { qp_num: qb, psn: 0x200, gid: gid_b }, &from(0x100)).map_err(|e| e.to_string())?;
    b.rc.connect(&RcPeer { qp_num: qa, psn: 0x100, gid: gid_a }, &from(0x200)).map_err(|e| e.to_string())?;
    a.ud.ud_to_rts(0x1111_1111, 0).map_err(|e| e.to_string())?;
    b.ud.ud_to_rts(0x1111_1111, 0).map_err(|e| e.to_string())?;
    let iters = if quick { 50 } else { 500 };
    println!();
    let rtt = rc_pingpong(&mut a, &mut b, 4096, iters)?;
    println!(
        "RC ping-pong: {iters} round trips of 4096 bytes, data verified both ways, {:.1} µs per round trip",
        rtt.as_secs_f64() * 1e6
    );
    let rtt = ud_pingpong(&mut a, &mut b, 512, iters)?;
    println!(
        "UD ping-pong: {iters} round trips of 512 bytes (GRH + source QP checked), {:.1} µs per round trip",
        rtt.as_secs_f64() * 1e6
    );
    println!();
    let sizes: &[usize] = if quick { &[64, 4096, 65536] } else { &[64, 256, 1024, 4096, 16384, 65536] };
    let mut rows = Vec::new();
    for &size in sizes {
        let msgs = ((if quick { 4 << 20 } else { 32 << 20 }) / size).clamp(200, 20000);
        rows.push(bandwidth(&mut a, &b, "WRITE", size, msgs)?);
        rows.push(bandwidth(&mut a, &b, "READ", size, msgs)?);
        rows.push(send_latency(&mut a, &mut b, size, if quick { 50 } else { 300 })?);
    }
    println!(
        "{:<10} {:>8} {:>9} {:>11} {:>10} {:>12}",
        "operation", "bytes", "messages", "MB/s", "Mmsg/s", "latency µs"
    );
    for r in &rows {
        if r.lat_us > 0.0 {
            println!("{:<10} {:>8} {:>9} {:>11} {:>10} {:>12.1}", r.op, r.size, r.msgs, "-", "-", r.lat_us);
        } else {
            println!("{:<10} {:>8} {:>9} {:>11.1} {:>10.3} {:>12}", r.op, r.size, r.msgs, r.mbps, r.mmsgs, "-");
        }
    }
    sim_a.device().port().stop_pcap().map_err(|e| e.to_string())?;
    let mut sink = std::io::sink();
    let summary = umlx_wire::decode::decode_pcap_file(&pcap, &mut sink).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&pcap);
    println!(
        "\nwire (adapter A's port): {} RoCEv2 frames, {} ICRC ok, {} bad; fabric delivered {} frames",
        summary.rocev2,
        summary.icrc_ok,
        summary.icrc_bad,
        fabric.stats().delivered
    );
    if summary.icrc_bad != 0 || summary.rocev2 == 0 {
        return Err("the wire check failed".into());
    }
    Ok(())
}
