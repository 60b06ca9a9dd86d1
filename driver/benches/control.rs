//! Control-path benchmark on the software ConnectX: bring-up and teardown time, and memory
//! registration cost per 4 KiB page and per GiB of 2 MiB pages, excluding and including the
//! pinning (allocation, mlock, IOMMU map). Run with `cargo bench -p umlx-driver --bench control`.
//! 2 MiB pages need reserved huge pages (`echo 1100 > /proc/sys/vm/nr_hugepages`); without them
//! the "2 MiB" rows say so and use 4 KiB pages.

use std::sync::Arc;
use std::time::{Duration, Instant};
use umlx_driver::dma::DmaBuffer;
use umlx_driver::objects::{Access, MemoryRegion, Mkey, Pd};
use umlx_driver::{Hca, HcaOptions, OpenHca, SimBackend};
use umlx_sim::SimConfig;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let b = SimBackend::new("bench", SimConfig::default()).expect("sim");
    let opts = HcaOptions { trace: false, ..Default::default() };
    let mut up = Vec::new();
    let mut down = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let h = Hca::open(b.clone(), opts.clone()).expect("bring-up");
        up.push(t.elapsed());
        let t = Instant::now();
        drop(h);
        down.push(t.elapsed());
        b.device().reset();
    }
    println!("bring-up (ENABLE_HCA .. async EQ armed)     median {:>10.1?}", median(up));
    println!("teardown (.. pages reclaimed, DISABLE_HCA)  median {:>10.1?}", median(down));

    let h = Hca::open(b.clone(), opts).expect("bring-up");
    let pd = Pd::new(&h).expect("pd");
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let pages = 1024usize;
    let buf = DmaBuffer::new(h.dma_space(), pages * 4096, false).expect("buffer");
    let per_page = |d: Duration, n: usize| d.as_nanos() as f64 / n as f64;
    let reg = median(
        (0..15)
            .map(|_| {
                let t = Instant::now();
                let k = Mkey::for_buffer(&pd, &buf, buf.iova(), access).expect("mkey");
                let e = t.elapsed();
                drop(k);
                e
            })
            .collect(),
    );
    println!(
        "MR registration, 4 KiB pages, excl. pinning  {:>10.0} ns/page ({pages} pages: {reg:.1?})",
        per_page(reg, pages)
    );
    let reg_pin = median(
        (0..15)
            .map(|_| {
                let t = Instant::now();
                let mr = MemoryRegion::new(&pd, pages * 4096, false, access).expect("mr");
                let e = t.elapsed();
                drop(mr);
                e
            })
            .collect(),
    );
    println!(
        "MR registration, 4 KiB pages, incl. pinning  {:>10.0} ns/page ({pages} pages: {reg_pin:.1?})",
        per_page(reg_pin, pages)
    );
    drop(buf);

    let gib = 1usize << 30;
    match DmaBuffer::new(h.dma_space(), gib, true) {
        Ok(big) => {
            let kind = if big.is_huge() { "2 MiB pages" } else { "4 KiB pages (no huge pages reserved)" };
            let reg = median(
                (0..7)
                    .map(|_| {
                        let t = Instant::now();
                        let k = Mkey::for_buffer(&pd, &big, big.iova(), access).expect("mkey");
                        let e = t.elapsed();
                        drop(k);
                        e
                    })
                    .collect(),
            );
            println!("MR registration, 1 GiB of {kind}, excl. pinning {reg:>10.1?}/GiB");
            drop(big);
            let t = Instant::now();
            let mr = MemoryRegion::new(&pd, gib, true, access).expect("mr");
            let e = t.elapsed();
            let kind = if mr.memory().is_huge() { "2 MiB pages" } else { "4 KiB pages (no huge pages reserved)" };
            drop(mr);
            println!("MR registration, 1 GiB of {kind}, incl. pinning {e:>10.1?}/GiB");
        }
        Err(e) => println!("MR registration, 1 GiB: skipped ({e})"),
    }
    drop(pd);
    let _: Arc<OpenHca<SimBackend>> = h;
}
