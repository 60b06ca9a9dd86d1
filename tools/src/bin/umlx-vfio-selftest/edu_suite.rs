//! The checks on QEMU's `edu` device: its registers, DMA both ways through a mapped
//! `DmaBuffer`, MSI from the raise register and from a DMA completion, and an unmapped IOVA
//! that the device must no longer reach.

use super::*;

pub(super) mod edu {
    pub const ID: usize = 0x00;
    pub const LIVENESS: usize = 0x04;
    pub const FACTORIAL: usize = 0x08;
    pub const STATUS: usize = 0x20;
    pub const IRQ_STATUS: usize = 0x24;
    pub const IRQ_RAISE: usize = 0x60;
    pub const IRQ_ACK: usize = 0x64;
    pub const DMA_SRC: usize = 0x80;
    pub const DMA_DST: usize = 0x88;
    pub const DMA_COUNT: usize = 0x90;
    pub const DMA_CMD: usize = 0x98;
    /// The device-side DMA buffer (4 KiB).
    pub const BUF: u64 = 0x40000;
    pub const CMD_RUN: u32 = 1;
    pub const CMD_TO_RAM: u32 = 2;
    pub const CMD_IRQ: u32 = 4;
    /// IRQ status bit of a DMA completion.
    pub const IRQ_DMA: u32 = 0x100;
    /// edu's DMA mask is 28 bits.
    pub const DMA_LIMIT: u64 = 1 << 28;
    /// Bytes per transfer: QEMU 7.2's edu aborts on a transfer ending exactly at the end of its
    /// buffer (an off-by-one in edu_check_range), so stay below 4096.
    pub const LEN: usize = 4000;
}

/// Programs one edu DMA and (unless it raises an IRQ the caller waits for) waits for it.
fn edu_dma(bar: &Bar, src: u64, dst: u64, cmd: u32) -> Result<Duration, String> {
    if bar.read32_le(edu::DMA_CMD) & edu::CMD_RUN != 0 {
        return Err("the DMA engine is still busy".into());
    }
    bar.write64_le(edu::DMA_SRC, src);
    bar.write64_le(edu::DMA_DST, dst);
    bar.write64_le(edu::DMA_COUNT, edu::LEN as u64);
    let t = Instant::now();
    bar.write32_le(edu::DMA_CMD, cmd | edu::CMD_RUN);
    wait_until(Duration::from_secs(3), || bar.read32_le(edu::DMA_CMD) & edu::CMD_RUN == 0)
        .map(|_| t.elapsed())
        .ok_or_else(|| format!("DMA {src:#x} -> {dst:#x} did not complete within 3 s"))
}

fn edu_registers(r: &mut Report, bar: &Bar) {
    let id = bar.read32_le(edu::ID);
    r.check(
        "edu-id",
        id & 0xffff == 0x00ed,
        format!("ID register {id:#010x} (edu version {}.{})", id >> 24, (id >> 16) & 0xff),
    );
    let mut bad = Vec::new();
    for v in [0x1234_5678u32, 0xdead_beef, 0] {
        bar.write32_le(edu::LIVENESS, v);
        let got = bar.read32_le(edu::LIVENESS);
        if got != !v {
            bad.push(format!("wrote {v:#010x} read {got:#010x}"));
        }
    }
    r.check(
        "edu-liveness",
        bad.is_empty(),
        if bad.is_empty() {
            "writes come back inverted (0x12345678 -> 0xedcba987, ...)".into()
        } else {
            bad.join(", ")
        },
    );
    bar.write32_le(edu::FACTORIAL, 10);
    let done = wait_until(Duration::from_secs(1), || bar.read32_le(edu::STATUS) & 1 == 0);
    let f = bar.read32_le(edu::FACTORIAL);
    r.check("edu-factorial", done.is_some() && f == 3_628_800, format!("10! = {f}"));
}

pub(super) fn edu_checks(r: &mut Report, b: &Arc<VfioBackend>, pci: &str) {
    let bar = b.bar0();
    edu_registers(r, bar);

    // The Backend trait's accessors (what the mlx5 driver uses) are big-endian: on this
    // little-endian device every value comes back byte-swapped.
    let id_be = b.read32(edu::ID);
    b.write32(edu::LIVENESS, 0x1122_3344);
    let live_be = b.read32(edu::LIVENESS);
    let live_le = bar.read32_le(edu::LIVENESS);
    r.check(
        "bar0-big-endian",
        id_be == bar.read32_le(edu::ID).swap_bytes() && live_be == !0x1122_3344 && live_le == !0x4433_2211u32,
        format!(
            "Backend::read32(ID) = {id_be:#010x}; Backend::write32(LIVENESS, 0x11223344) reads back {live_be:#010x} big-endian, {live_le:#010x} little-endian"
        ),
    );

    // --- DMA memory from the driver's allocator, mapped through the IOMMU.
    let space = DmaSpace::new(b.clone());
    let free0 = space.free_iova_bytes();
    let avail0 = dma_avail(b);
    let a = match DmaBuffer::new(&space, 2 * PAGE_4K, false) {
        Ok(a) => a,
        Err(e) => return r.fail("dma-map", e),
    };
    let avail1 = dma_avail(b);
    r.check(
        "dma-map",
        a.iova() + a.len() as u64 <= edu::DMA_LIMIT && avail1.zip(avail0).is_none_or(|(x, y)| x + 1 == y),
        format!(
            "DmaBuffer {:#x} bytes at IOVA {:#x} (below edu's 28-bit DMA mask); container DMA mappings available {} -> {}",
            a.len(),
            a.iova(),
            fmt_opt(avail0),
            fmt_opt(avail1)
        ),
    );
    let p1 = pattern(edu::LEN, 1);
    let (src, dst) = (a.iova(), a.iova_at(PAGE_4K));
    a.write_bytes(0, &p1).expect("in bounds");
    a.fill(PAGE_4K, PAGE_4K, 0).expect("in bounds");
    match edu_dma(bar, src, edu::BUF, 0) {
        Ok(t) => r.pass("dma-to-device", format!("{} bytes RAM (IOVA {src:#x}) -> edu in {}", edu::LEN, ms(t))),
        Err(e) => r.fail("dma-to-device", e),
    }
    match edu_dma(bar, edu::BUF, dst, edu::CMD_TO_RAM) {
        Ok(t) => r.pass("dma-from-device", format!("{} bytes edu -> RAM (IOVA {dst:#x}) in {}", edu::LEN, ms(t))),
        Err(e) => r.fail("dma-from-device", e),
    }
    let back = read_mem(&a, PAGE_4K, edu::LEN);
    r.check(
        "dma-roundtrip-data",
        back == p1,
        format!("{} bytes compared; first bytes sent {} received {}", edu::LEN, head(&p1), head(&back)),
    );

    // --- A large buffer (2 MiB pages when the system has them): a transfer that crosses a
    // 4 KiB boundary in its middle lands where the CPU sees it. The edu buffer still holds p1.
    let big_len = 2 * PAGE_2M;
    match DmaBuffer::new(&space, big_len, true) {
        Err(e @ Error::MemlockLimit { .. }) if memlock_limit().is_some_and(|l| l < 2 * big_len as u64) => r.skip(
            "dma-large-buffer",
            format!("the memlock limit is below twice {big_len:#x} bytes; the driver refuses clearly: {e}"),
        ),
        Ok(big) => {
            let off = PAGE_2M + PAGE_4K - 1000;
            let d = edu_dma(bar, edu::BUF, big.iova_at(off), edu::CMD_TO_RAM);
            let got = read_mem(&big, off, edu::LEN);
            let around = (big.read_u8(off - 1).unwrap_or(1), big.read_u8(off + edu::LEN).unwrap_or(1));
            r.check(
                "dma-large-buffer",
                d.is_ok() && got == p1 && around == (0, 0) && big.iova() % PAGE_2M as u64 == 0,
                format!(
                    "{:#x}-byte DmaBuffer on {} pages at IOVA {:#x}: edu -> IOVA {:#x} (across a 4 KiB boundary) {}",
                    big.len(),
                    if big.is_huge() { "2 MiB" } else { "4 KiB (no free huge pages)" },
                    big.iova(),
                    big.iova_at(off),
                    if got == p1 && around == (0, 0) { "arrived exactly there" } else { "DID NOT ARRIVE INTACT" }
                ),
            );
        }
        Err(e) => r.fail("dma-large-buffer", e),
    }

    // --- MSI: the raise-IRQ register and the DMA-completion interrupt.
    edu_msi(r, b, &a, &p1);
    enable_interrupts_check(r, b);

    // --- Unmap: the device must no longer reach the memory.
    edu_unmap(r, b, &space, &a, pci);

    drop(a);
    let avail_end = dma_avail(b);
    r.check(
        "dma-released",
        space.free_iova_bytes() == free0 && avail_end == avail0,
        format!(
            "all buffers dropped: IOVA space back to {:#x} free bytes, container DMA mappings available {}",
            space.free_iova_bytes(),
            fmt_opt(avail_end)
        ),
    );
}

/// Starts an edu DMA without waiting for it.
fn edu_start(bar: &Bar, src: u64, dst: u64, cmd: u32) {
    bar.write64_le(edu::DMA_SRC, src);
    bar.write64_le(edu::DMA_DST, dst);
    bar.write64_le(edu::DMA_COUNT, edu::LEN as u64);
    bar.write32_le(edu::DMA_CMD, cmd | edu::CMD_RUN);
}

fn edu_msi(r: &mut Report, b: &Arc<VfioBackend>, a: &DmaBuffer<VfioBackend>, p1: &[u8]) {
    let bar = b.bar0();
    let fds_before = Snapshot::take().fds;
    r.expect_err("msi-too-many", b.enable_msi(b.msi_count() + 1), "the device offers");
    if let Err(e) = b.enable_msi(1) {
        return r.fail("msi-enable", e);
    }
    let Some(fd) = b.irq_eventfd(0) else { return r.fail("msi-enable", "no eventfd for vector 0") };
    r.pass(
        "msi-enable",
        format!("VFIO_DEVICE_SET_IRQS: 1 of {} MSI vector(s) -> eventfd {}", b.msi_count(), fd.as_raw_fd()),
    );
    event::drain(&fd);
    let quiet = !event::wait_readable(&fd, Duration::from_millis(20));
    for (name, bit) in [("msi-raise", 0x1u32), ("msi-raise-again", 0x2)] {
        bar.write32_le(edu::IRQ_RAISE, bit);
        let got = wait_irq(&fd, Duration::from_secs(2));
        let st = bar.read32_le(edu::IRQ_STATUS);
        bar.write32_le(edu::IRQ_ACK, st);
        match got {
            Some((t, n)) => r.check(
                name,
                st & bit != 0 && quiet,
                format!(
                    "raise-IRQ register <- {bit:#x}: eventfd readable after {}, count {n}, IRQ status {st:#x}{}",
                    ms(t),
                    if quiet { "" } else { " (but the eventfd was readable before the raise)" }
                ),
            ),
            None => r.fail(name, format!("no interrupt on eventfd {} within 2 s (IRQ status {st:#x})", fd.as_raw_fd())),
        };
    }
    // DMA completion interrupt: reload the device buffer, then device -> RAM with CMD_IRQ.
    let reload = edu_dma(bar, a.iova(), edu::BUF, 0);
    a.fill(PAGE_4K, PAGE_4K, 0).expect("in bounds");
    event::drain(&fd);
    edu_start(bar, edu::BUF, a.iova_at(PAGE_4K), edu::CMD_TO_RAM | edu::CMD_IRQ);
    let got = wait_irq(&fd, Duration::from_secs(3));
    let st = bar.read32_le(edu::IRQ_STATUS);
    bar.write32_le(edu::IRQ_ACK, st);
    let data = read_mem(a, PAGE_4K, edu::LEN);
    match (reload, got) {
        (Ok(_), Some((t, _))) => r.check(
            "msi-dma-completion",
            st & edu::IRQ_DMA != 0 && data == p1,
            format!(
                "DMA-completion MSI after {} (IRQ status {st:#x}); data {}",
                ms(t),
                if data == p1 { "matches" } else { "differs" }
            ),
        ),
        (Err(e), _) => r.fail("msi-dma-completion", e),
        (_, None) => r.fail("msi-dma-completion", format!("no interrupt within 3 s (IRQ status {st:#x})")),
    };
    // The eventfd is shared with the backend: let go of it, so disabling closes it.
    drop(fd);
    match b.disable_irqs() {
        Ok(()) => {
            let fds = Snapshot::take().fds;
            r.check(
                "irq-disable",
                b.irq_eventfd(0).is_none() && fds == fds_before,
                format!("MSI disabled, eventfd closed ({fds} fds, {fds_before} before enabling)"),
            )
        }
        Err(e) => r.check("irq-disable", false, e),
    };
}

fn edu_unmap(
    r: &mut Report,
    b: &Arc<VfioBackend>,
    space: &Arc<DmaSpace<VfioBackend>>,
    a: &DmaBuffer<VfioBackend>,
    pci: &str,
) {
    let bar = b.bar0();
    let bb = match DmaBuffer::new(space, PAGE_4K, false) {
        Ok(x) => x,
        Err(e) => return r.fail("dma-second-buffer", e),
    };
    let biova = bb.iova();
    let p2 = pattern(edu::LEN, 2);
    bb.write_bytes(0, &p2).expect("in bounds");
    // Control: while mapped, the device reads the buffer.
    a.fill(PAGE_4K, PAGE_4K, 0).expect("in bounds");
    let ctl =
        edu_dma(bar, biova, edu::BUF, 0).and_then(|_| edu_dma(bar, edu::BUF, a.iova_at(PAGE_4K), edu::CMD_TO_RAM));
    let got = read_mem(a, PAGE_4K, edu::LEN);
    r.check(
        "dma-second-buffer",
        ctl.is_ok() && got == p2,
        format!(
            "while mapped at IOVA {biova:#x} the device reads it: {}",
            if got == p2 { "data matches" } else { "data differs" }
        ),
    );

    let before = dma_avail(b);
    let mem = match bb.unmap() {
        Ok(m) => m,
        Err(e) => return r.fail("dma-unmap", e),
    };
    let after = dma_avail(b);
    r.check(
        "dma-unmap",
        after.zip(before).is_none_or(|(x, y)| x == y + 1),
        format!(
            "DmaBuffer::unmap: VFIO_IOMMU_UNMAP_DMA of IOVA {biova:#x}, memory kept; DMA mappings available {} -> {}",
            fmt_opt(before),
            fmt_opt(after)
        ),
    );

    // Device write to the unmapped IOVA: the memory must stay as it is.
    let load = edu_dma(bar, a.iova(), edu::BUF, 0);
    mem.fill(0, PAGE_4K, 0).expect("in bounds");
    let w = edu_dma(bar, edu::BUF, biova, edu::CMD_TO_RAM);
    let now = read_mem(&mem, 0, PAGE_4K);
    let untouched = now.iter().all(|&x| x == 0);
    r.check(
        "iommu-blocks-write",
        load.is_ok() && w.is_ok() && untouched,
        format!(
            "edu DMA of {} bytes to unmapped IOVA {biova:#x} ({}): {}",
            edu::LEN,
            match &w {
                Ok(t) => format!("engine done in {}", ms(*t)),
                Err(e) => e.clone(),
            },
            if untouched { "the memory stayed zero" } else { "DATA ARRIVED in the unmapped memory" }
        ),
    );

    // Device read from the unmapped IOVA: the memory's bytes must not reach the device.
    mem.write_bytes(0, &p2).expect("in bounds");
    a.fill(PAGE_4K, PAGE_4K, 0).expect("in bounds");
    let rd = edu_dma(bar, biova, edu::BUF, 0).and_then(|_| edu_dma(bar, edu::BUF, a.iova_at(PAGE_4K), edu::CMD_TO_RAM));
    let got = read_mem(a, PAGE_4K, edu::LEN);
    r.check(
        "iommu-blocks-read",
        rd.is_ok() && got != p2,
        format!(
            "edu DMA from unmapped IOVA {biova:#x}, then its buffer to a mapped page: {} (first bytes {})",
            if got == p2 { "THE MEMORY'S BYTES CAME THROUGH" } else { "the memory's bytes did not come through" },
            head(&got)
        ),
    );
    drop(mem);

    // The guest kernel logs IOMMU faults, rate-limited (10 messages per 5 s, and each fault
    // costs it about three): one line for this device at this IOVA is required, both are shown.
    let bdf = pci.get(5..).unwrap_or(pci);
    let mut lines = Vec::new();
    for what in ["DMA Write", "DMA Read"] {
        match find_dmar_fault(bdf, biova, what, Duration::from_secs(2)) {
            Ok(Some(line)) => lines.push(line),
            Ok(None) => {
                info(format!("no `DMAR: [{what} ...] Request device [{bdf}] fault addr {biova:#x}` line in dmesg"))
            }
            Err(e) => return r.skip("dmar-fault-logged", e),
        }
    }
    r.check(
        "dmar-fault-logged",
        !lines.is_empty(),
        if lines.is_empty() {
            format!("no DMAR fault line for [{bdf}] at {biova:#x} in dmesg")
        } else {
            lines.join(" | ")
        },
    );
}
