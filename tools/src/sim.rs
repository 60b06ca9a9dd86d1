//! `umlx sim --wire udp:LOCAL,PEER [--pcap FILE] [--ip ADDR]... [--index N] [--seconds S]`: a
//! software ConnectX on its own, brought up by the driver (so its port is active and its GID
//! table programmed) and attached to a UDP wire that carries one Ethernet frame per datagram.
//!
//! It is a peer for a VM's NIC (QEMU `-netdev socket,id=n0,udp=LOCAL,localaddr=PEER`: QEMU sends
//! to our LOCAL from its PEER) or for another process. Datagrams from any other address are not
//! the wire's (its socket is connected to PEER). It prints its identity (MAC, GIDs, UDP
//! endpoints), answers ARP and IPv6 neighbour solicitation for its addresses, and prints its
//! port's counters every second (frames and bytes each way, RoCEv2 frames accepted, frames that
//! are not RoCE, drops by reason, and the transport's counters) until SIGINT/SIGTERM or until
//! `--seconds` pass; then it flushes the `--pcap` capture and prints the totals.

use crate::common::fmt_mac;
use crate::device::{WireArg, parse_wire, sim_device};
use std::net::IpAddr;
use std::result::Result;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use umlx_sim::transport::TransportStats;
use umlx_verbs::{Context, Gid};
use umlx_wire::WireStats;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STOP.store(true, Ordering::SeqCst);
}

/// The options of `umlx sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// The UDP wire: frames go to PEER and arrive at LOCAL from PEER (QEMU's `-netdev socket,udp=`)
    #[arg(long, value_name = "udp:LOCAL,PEER", value_parser = parse_wire)]
    pub wire: WireArg,
    /// Record every frame in a pcap file
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<String>,
    /// An IP address of the port, repeatable (default 10.77.0.N+1)
    #[arg(long = "ip", value_name = "ADDR")]
    pub ips: Vec<IpAddr>,
    /// The sim's number: MAC 02:00:5e:10:00:N, IP 10.77.0.N+1
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub index: u8,
    /// Stop after this many seconds (default: at SIGINT / SIGTERM)
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub seconds: Option<f64>,
}

fn parse_seconds(v: &str) -> Result<f64, String> {
    let s: f64 = v.parse().map_err(|e| format!("{e}"))?;
    if !(s.is_finite() && s > 0.0) {
        return Err("a positive number of seconds".into());
    }
    Ok(s)
}

fn drops(w: &WireStats) -> String {
    let reasons = [
        ("truncated", w.drop_truncated),
        ("bad IP", w.drop_bad_ip),
        ("bad length", w.drop_bad_length),
        ("bad TVer", w.drop_bad_tver),
        ("unknown opcode", w.drop_unknown_opcode),
        ("bad header", w.drop_bad_header),
        ("bad checksum", w.drop_bad_checksum),
        ("bad ICRC", w.drop_bad_icrc),
        ("receive queue full", w.drop_rx_overflow),
        ("link down", w.drop_link_down),
    ];
    let named: Vec<String> = reasons.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{r} {n}")).collect();
    let rx =
        if named.is_empty() { "dropped 0".into() } else { format!("dropped {} ({})", w.dropped(), named.join(", ")) };
    match w.tx_drop_link_down {
        0 => rx,
        n => format!("{rx}, {n} sent while the link was down"),
    }
}

fn transport(t: &TransportStats) -> String {
    let mut s = format!("transport: tx {} rx {} dropped {}", t.tx_packets, t.rx_packets, t.rx_dropped);
    for (name, n) in [
        ("retransmits", t.retransmits),
        ("timeouts", t.timeouts),
        ("seq NAKs sent", t.seq_naks_sent),
        ("RNR NAKs sent", t.rnr_naks_sent),
        ("error NAKs sent", t.err_naks_sent),
        ("duplicates", t.duplicates),
        ("no GID", t.no_gid),
        ("bad WQEs", t.bad_wqes),
        ("UD too long", t.ud_too_long),
    ] {
        if n > 0 {
            s.push_str(&format!(" {name} {n}"));
        }
    }
    s
}

fn counters(elapsed: Duration, w: &WireStats, t: &TransportStats) -> String {
    format!(
        "[{:>6.1}s] rx {} frames {} B (RoCEv2 {}, ARP/ND {}, not RoCE {}), tx {} frames {} B, {}; {}",
        elapsed.as_secs_f64(),
        w.rx_frames,
        w.rx_bytes,
        w.rx_roce_v2 + w.rx_roce_v1,
        w.rx_frames.saturating_sub(w.rx_roce_v2 + w.rx_roce_v1 + w.rx_not_roce + w.dropped()),
        w.rx_not_roce,
        w.tx_frames,
        w.tx_bytes,
        drops(w),
        transport(t)
    )
}

fn gid_kind(g: &Gid) -> String {
    match g.to_ip() {
        IpAddr::V4(a) => format!("RoCE v2, IPv4 {a}"),
        IpAddr::V6(a) => format!("RoCE v2, IPv6 {a}"),
    }
}

/// Runs `umlx sim`.
pub fn run(o: &SimArgs) -> Result<(), String> {
    let WireArg::Udp(local, peer) = o.wire else {
        return Err("--wire udp:LOCAL,PEER: the sim needs explicit endpoints".into());
    };
    let (dev, ips) = sim_device(o.index, &o.ips).map_err(|e| e.to_string())?;
    let port = dev.port();
    let bound = port.connect_udp(local, peer).map_err(|e| format!("--wire: binding {local}: {e}"))?;
    if let Some(p) = &o.pcap {
        port.set_pcap(p).map_err(|e| format!("--pcap {p}: {e}"))?;
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        vmm_sys_util::signal::register_signal_handler(sig, on_signal)
            .map_err(|e| format!("installing the handler of signal {sig}: {e}"))?;
    }
    let t = Instant::now();
    let ctx = Context::attach_sim(dev.clone(), "0", ips).map_err(|e| format!("bringing the sim up: {e}"))?;
    let up = t.elapsed();
    let pa = ctx.query_port(1).map_err(|e| e.to_string())?;
    println!(
        "umlx sim: software ConnectX {} (index {}), brought up by the driver in {:.1} ms ({} steps)",
        ctx.name(),
        o.index,
        up.as_secs_f64() * 1e3,
        ctx.hca().trace().len()
    );
    println!("  MAC        {}", fmt_mac(ctx.mac()));
    let guid = ctx.query_device().map_err(|e| e.to_string())?.node_guid.to_be_bytes();
    let g = |i: usize| u16::from_be_bytes([guid[2 * i], guid[2 * i + 1]]);
    println!("  node GUID  {:04x}:{:04x}:{:04x}:{:04x}", g(0), g(1), g(2), g(3));
    println!("  port       {}, active MTU {}, link layer {}", pa.state, pa.active_mtu, pa.link_layer);
    for (i, gid) in ctx.gids() {
        println!("  GID[{i:>3}]   {gid}, {}", gid_kind(&gid));
    }
    println!("  wire       UDP {bound} -> {peer} (QEMU: -netdev socket,id=n0,udp={bound},localaddr={peer})");
    if let Some(p) = &o.pcap {
        println!("  pcap       {p}");
    }
    let answered: Vec<String> = ctx.gids().iter().map(|(_, g)| g.to_ip().to_string()).collect();
    println!("answering ARP / neighbour solicitation for {}", answered.join(", "));
    match o.seconds {
        Some(s) => println!("running for {s} s (or until interrupted)"),
        None => println!("running until interrupted (Ctrl-C)"),
    }

    let deadline = o.seconds.map(|s| t + up + Duration::from_secs_f64(s));
    let start = Instant::now();
    let mut next = start + Duration::from_secs(1);
    loop {
        let now = Instant::now();
        let over = deadline.is_some_and(|d| now >= d);
        if STOP.load(Ordering::SeqCst) || over {
            break;
        }
        if now >= next {
            println!("{}", counters(now - start, &port.stats(), &dev.transport_stats()));
            next += Duration::from_secs(1);
        }
        let mut wake = next.min(now + Duration::from_millis(100));
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        std::thread::sleep(wake.saturating_duration_since(now));
    }
    port.stop_pcap().map_err(|e| format!("--pcap: flushing: {e}"))?;
    println!("total {}", counters(start.elapsed(), &port.stats(), &dev.transport_stats()));
    port.disconnect();
    drop(ctx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Cmd;

    fn parse(s: &str) -> Result<super::SimArgs, String> {
        let argv = ["umlx", "sim"].into_iter().chain(s.split_whitespace());
        match crate::parse_from(argv).map_err(|e| e.to_string())?.cmd {
            Cmd::Sim(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options() {
        let o = parse("--wire udp:127.0.0.1:1,127.0.0.1:2 --ip 10.0.0.1 --index=3 --seconds 1.5").unwrap();
        assert_eq!(o.index, 3);
        assert_eq!(o.seconds, Some(1.5));
        assert_eq!(o.ips.len(), 1);
        let w = "--wire udp:127.0.0.1:1,127.0.0.1:2";
        assert!(parse(&format!("{w} --seconds 0")).unwrap_err().contains("positive number of seconds"));
        assert!(parse(&format!("{w} --bogus")).unwrap_err().contains("unexpected argument '--bogus'"));
        assert!(parse("").unwrap_err().contains("--wire"));
        assert!(parse("--wire").unwrap_err().contains("a value is required for '--wire"));
        assert!(parse("--wire tcp:1").unwrap_err().contains("expected udp:LOCAL,PEER"));
    }
}
