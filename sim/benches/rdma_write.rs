//! Messages per second of 64-byte RDMA WRITEs between two in-process ports (RC, MTU 1024,
//! a perfect fabric). Every 32nd WQE is signaled; the SQ never holds more than 128 WQEs.

#[path = "../tests/transport_common/mod.rs"]
mod transport_common;
use std::time::Instant;
use transport_common::*;

fn main() {
    let mut p = RcPair::new(FabricConfig::default(), RcParams { mtu: 3, ack_timeout: 14, ..Default::default() });
    p.a.mem.write(0, &pattern(7, 64));
    let total: usize = std::env::var("UMLX_BENCH_MSGS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let batch = 32;
    let start = Instant::now();
    let mut posted = 0usize;
    let mut in_flight = 0usize;
    while posted < total {
        while in_flight < 4 && posted < total {
            for k in 0..batch {
                let off = ((posted + k) % 1024) * 64;
                let s = segs(&[&raddr_seg(p.b.va(off), p.b.mkey), &data_seg(64, p.a.mkey, p.a.va(0))]);
                p.a.post_send(&mut p.qa, 0x08, k + 1 == batch, 0, &s);
            }
            posted += batch;
            in_flight += 1;
        }
        let c = p.a.poll_cq();
        assert_eq!(c[63] >> 4, 0, "write failed: syndrome {:#x}", c[0x37]);
        in_flight -= 1;
    }
    while in_flight > 0 {
        p.a.poll_cq();
        in_flight -= 1;
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(p.b.mem.to_vec(0, 64), pattern(7, 64));
    println!(
        "rdma_write_64B: {total} messages in {secs:.3} s = {:.0} messages/second ({:.1} MB/s payload)",
        total as f64 / secs,
        total as f64 * 64.0 / secs / 1e6
    );
}
