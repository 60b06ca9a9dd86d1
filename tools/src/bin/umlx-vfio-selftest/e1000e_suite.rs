//! The checks on QEMU's `e1000e` (82574L): registers, a real transmit by DMA signalled on
//! its MSI-X vector, every MSI-X vector through ICS and IVAR, and MSI.

use super::*;

pub(super) mod e1k {
    pub const CTRL: usize = 0x0000;
    pub const STATUS: usize = 0x0008;
    pub const ICR: usize = 0x00c0;
    pub const ICS: usize = 0x00c8;
    pub const IMS: usize = 0x00d0;
    pub const IMC: usize = 0x00d8;
    pub const IVAR: usize = 0x00e4;
    pub const TCTL: usize = 0x0400;
    pub const RDBAL: usize = 0x2800;
    pub const TDBAL: usize = 0x3800;
    pub const TDBAH: usize = 0x3804;
    pub const TDLEN: usize = 0x3808;
    pub const TDH: usize = 0x3810;
    pub const TDT: usize = 0x3818;
    pub const ICR_LSC: u32 = 1 << 2;
    pub const ICR_RXQ0: u32 = 1 << 20;
    pub const ICR_TXQ0: u32 = 1 << 22;
    pub const ICR_OTHER: u32 = 1 << 24;
    pub const TCTL_EN: u32 = 1 << 1;
    pub const TCTL_PSP: u32 = 1 << 3;
    /// Legacy TX descriptor command: end of packet, insert FCS, report status.
    pub const TXD_CMD: u8 = 0x01 | 0x02 | 0x08;
    /// TX descriptor status: descriptor done.
    pub const TXD_STAT_DD: u8 = 0x01;
    /// IVAR entry: vector number plus the valid bit.
    pub const fn ivar_entry(vector: u32) -> u32 {
        (vector & 7) | 8
    }
}

/// Lets QEMU's interrupt throttling timers run out before MSI-X is turned off. QEMU 7.2's
/// e1000e clamps ITR/EITR to at least 500 (128 µs), so every interrupt arms a throttling timer,
/// and its MSI-X timer asserts (aborting QEMU) if it fires after MSI-X was disabled (fixed in
/// QEMU 8.0). A real NIC has no such trap.
fn e1000e_settle() {
    std::thread::sleep(Duration::from_millis(20));
}

pub(super) fn e1000e_checks(r: &mut Report, b: &Arc<VfioBackend>) {
    let bar = b.bar0();
    let ctrl = bar.read32_le(e1k::CTRL);
    let status = bar.read32_le(e1k::STATUS);
    let speed = match (status >> 6) & 3 {
        0 => 10,
        1 => 100,
        _ => 1000,
    };
    r.check(
        "e1000e-status",
        status != 0xffff_ffff && status != 0,
        format!(
            "STATUS {status:#010x}: link {}, {} duplex, {speed} Mb/s; CTRL {ctrl:#010x}",
            if status & 2 != 0 { "up" } else { "down" },
            if status & 1 != 0 { "full" } else { "half" }
        ),
    );
    bar.write32_le(e1k::RDBAL, 0x1234_5670);
    let v = bar.read32_le(e1k::RDBAL);
    r.check("e1000e-register-rw", v == 0x1234_5670, format!("RDBAL0 <- 0x12345670, reads {v:#010x}"));

    let space = DmaSpace::new(b.clone());
    let free0 = space.free_iova_bytes();
    let avail0 = dma_avail(b);
    let fds_before = Snapshot::take().fds;

    // MSI-X: RXQ0 -> vector 0, TXQ0 -> vector 1, other causes -> vector 2.
    let count = b.irq_info(IRQ_MSIX).map(|i| i.count).unwrap_or(0);
    let n = count.min(3);
    if n == 0 {
        r.fail("msix-enable", "the device offers no MSI-X vectors");
    } else if let Err(e) = b.enable_msix(1).and_then(|_| b.enable_msix(n)) {
        r.fail("msix-enable", e);
    } else {
        // First 1 vector, then n: MSI-X is NORESIZE, the backend must disable it in between.
        let fds: Vec<Arc<OwnedFd>> = (0..n).filter_map(|v| b.irq_eventfd(v)).collect();
        let fds_now = Snapshot::take().fds;
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        r.check(
            "msix-enable",
            fds.len() == n as usize && fds_now == fds_before + n as usize,
            format!(
                "VFIO_DEVICE_SET_IRQS: 1 vector, then {n} of {count} MSI-X vectors -> eventfds {raw:?} ({fds_now} fds, {fds_before} before)"
            ),
        );
        r.expect_err("msix-too-many", b.enable_msix(count + 1), "the device offers");
        let vec_of = |i: u32| i.min(n - 1);
        let ivar = e1k::ivar_entry(vec_of(0)) | e1k::ivar_entry(vec_of(1)) << 8 | e1k::ivar_entry(vec_of(2)) << 16;
        bar.write32_le(e1k::IVAR, ivar);
        bar.write32_le(e1k::ICR, 0xffff_ffff);
        bar.write32_le(e1k::IMS, e1k::ICR_RXQ0 | e1k::ICR_TXQ0 | e1k::ICR_OTHER);
        for f in &fds {
            event::drain(f);
        }

        e1000e_tx(r, b, &space, fds.get(vec_of(1) as usize).cloned());

        for (vector, cause, label) in
            [(vec_of(0), e1k::ICR_RXQ0, "RXQ0"), (vec_of(1), e1k::ICR_TXQ0, "TXQ0"), (vec_of(2), e1k::ICR_LSC, "LSC")]
        {
            let name = format!("msix-vector-{vector}");
            let Some(fd) = fds.get(vector as usize) else { continue };
            let fd = fd.as_raw_fd();
            for f in &fds {
                event::drain(f);
            }
            bar.write32_le(e1k::ICS, cause);
            let got = wait_irq(&fds[vector as usize], Duration::from_secs(2));
            let others: Vec<usize> = fds
                .iter()
                .enumerate()
                .filter(|&(i, f)| i != vector as usize && event::wait_readable(f, Duration::ZERO))
                .map(|(i, _)| i)
                .collect();
            let icr = bar.read32_le(e1k::ICR);
            bar.write32_le(e1k::ICR, 0xffff_ffff);
            match got {
                Some((t, c)) => r.check(
                    &name,
                    others.is_empty() || n < 3,
                    format!(
                        "ICS <- {label} ({cause:#x}), routed by IVAR {ivar:#x}: eventfd {fd} readable after {}, count {c}, ICR {icr:#x}{}",
                        ms(t),
                        if others.is_empty() { String::new() } else { format!(", other vectors fired too: {others:?}") }
                    ),
                ),
                None => r.fail(&name, format!("ICS <- {label}: no interrupt on eventfd {fd} within 2 s (ICR {icr:#x})")),
            };
        }
        bar.write32_le(e1k::IMC, 0xffff_ffff);
        e1000e_settle();
        // Shared with the backend: let go of them, so disabling closes them.
        drop(fds);
        match b.disable_irqs() {
            Ok(()) => {
                let fds_now = Snapshot::take().fds;
                r.check(
                    "msix-disable",
                    b.irq_eventfd(0).is_none() && fds_now == fds_before,
                    format!("MSI-X disabled, eventfds closed ({fds_now} fds, {fds_before} before enabling)"),
                )
            }
            Err(e) => r.check("msix-disable", false, e),
        };
    }

    // MSI (one vector) through the same cause register, switched to straight from MSI-X (the
    // backend must disable MSI-X first), and left enabled: closing the backend must clean up.
    if b.msi_count() == 0 {
        r.skip("msi-ics", "the device offers no MSI");
    } else if let Err(e) = b.enable_msix(1).and_then(|_| b.enable_msi(1)) {
        r.fail("msi-ics", e);
    } else if let Some(fd) = b.irq_eventfd(0) {
        let fds_now = Snapshot::take().fds;
        bar.write32_le(e1k::ICR, 0xffff_ffff);
        bar.write32_le(e1k::IMS, e1k::ICR_LSC);
        event::drain(&fd);
        bar.write32_le(e1k::ICS, e1k::ICR_LSC);
        let got = wait_irq(&fd, Duration::from_secs(2));
        let icr = bar.read32_le(e1k::ICR);
        bar.write32_le(e1k::ICR, 0xffff_ffff);
        bar.write32_le(e1k::IMC, 0xffff_ffff);
        match got {
            Some((t, c)) => r.check(
                "msi-ics",
                fds_now == fds_before + 1,
                format!(
                    "MSI-X -> MSI switch ({fds_now} fds, {fds_before} with no interrupts); ICS <- LSC: MSI on eventfd {} after {}, count {c}, ICR {icr:#x}; left enabled for close",
                    fd.as_raw_fd(),
                    ms(t)
                ),
            ),
            None => r.fail("msi-ics", format!("no MSI within 2 s (ICR {icr:#x})")),
        }
    }

    // Backend::enable_interrupts (what bring-up calls): every MSI-X vector, one eventfd each.
    // It switches from MSI to MSI-X: let the MSI throttling timer run out first (QEMU 7.2's
    // asserts that MSI-X is off when it fires).
    e1000e_settle();
    enable_interrupts_check(r, b);

    let avail_end = dma_avail(b);
    r.check(
        "dma-released",
        space.free_iova_bytes() == free0 && avail_end == avail0,
        format!(
            "buffers dropped: IOVA space back to {:#x} free bytes, container DMA mappings available {}",
            space.free_iova_bytes(),
            fmt_opt(avail_end)
        ),
    );
}

/// One real transmit: the NIC fetches a descriptor and a frame from DMA memory and writes the
/// descriptor's status back; the TXQ0 cause goes to MSI-X vector `irq` (when given).
fn e1000e_tx(r: &mut Report, b: &Arc<VfioBackend>, space: &Arc<DmaSpace<VfioBackend>>, irq: Option<Arc<OwnedFd>>) {
    let bar = b.bar0();
    let avail0 = dma_avail(b);
    // Page 0: a ring of 8 legacy descriptors (TDLEN must be a multiple of 128); page 1: the frame.
    let ring = match DmaBuffer::new(space, 2 * PAGE_4K, false) {
        Ok(x) => x,
        Err(e) => return r.fail("e1000e-dma-tx", e),
    };
    let avail1 = dma_avail(b);
    r.check(
        "dma-map",
        avail1.zip(avail0).is_none_or(|(x, y)| x + 1 == y),
        format!(
            "DmaBuffer {:#x} bytes at IOVA {:#x}; container DMA mappings available {} -> {}",
            ring.len(),
            ring.iova(),
            fmt_opt(avail0),
            fmt_opt(avail1)
        ),
    );
    let mut frame = vec![0xffu8; 6];
    frame.extend_from_slice(&[0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x88, 0xb5]);
    frame.extend_from_slice(&pattern(60 - frame.len(), 3));
    ring.write_bytes(PAGE_4K, &frame).expect("in bounds");
    let mut desc = [0u8; 16];
    desc[0..8].copy_from_slice(&ring.iova_at(PAGE_4K).to_le_bytes());
    desc[8..10].copy_from_slice(&(frame.len() as u16).to_le_bytes());
    desc[11] = e1k::TXD_CMD;
    ring.write_bytes(0, &desc).expect("in bounds");
    bar.write32_le(e1k::TDBAL, ring.iova() as u32);
    bar.write32_le(e1k::TDBAH, (ring.iova() >> 32) as u32);
    bar.write32_le(e1k::TDLEN, 128);
    bar.write32_le(e1k::TDH, 0);
    bar.write32_le(e1k::TDT, 0);
    bar.write32_le(e1k::TCTL, e1k::TCTL_EN | e1k::TCTL_PSP);
    if let Some(fd) = &irq {
        event::drain(fd);
    }
    let t = Instant::now();
    bar.write32_le(e1k::TDT, 1);
    let done = wait_until(Duration::from_secs(2), || ring.read_u8(12).unwrap_or(0) & e1k::TXD_STAT_DD != 0);
    let tdh = bar.read32_le(e1k::TDH);
    r.check(
        "e1000e-dma-tx",
        done.is_some() && tdh == 1,
        format!(
            "descriptor at IOVA {:#x} and {}-byte frame at IOVA {:#x} fetched by DMA, status write-back (DD) {}; TDH {tdh}",
            ring.iova(),
            frame.len(),
            ring.iova_at(PAGE_4K),
            match done {
                Some(_) => format!("after {}", ms(t.elapsed())),
                None => "never came".into(),
            }
        ),
    );
    if let Some(irq) = irq {
        let fd = irq.as_raw_fd();
        match wait_irq(&irq, Duration::from_secs(2)) {
            Some((t, c)) => r.pass(
                "msix-tx-completion",
                format!("transmit completion (TXQ0) on MSI-X eventfd {fd} after {}, count {c}", ms(t)),
            ),
            None => r.fail("msix-tx-completion", format!("no interrupt on eventfd {fd} within 2 s")),
        }
    }
    bar.write32_le(e1k::TCTL, 0);
    bar.write32_le(e1k::ICR, 0xffff_ffff);
    drop(ring);
}
