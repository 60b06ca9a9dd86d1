//! `umlx-vfio-selftest <pci> [--device edu|e1000e|auto] [--rebind]`: the driver's VFIO backend
//! against Linux vfio-pci and a real (emulated) IOMMU, with QEMU's `edu` (1234:11e8) and
//! `e1000e` (8086:10d3) devices in a VM (`vm/run-vfio-suite.sh` runs it). A test harness with
//! drivers of its own for those two devices, so a binary of its own beside `umlx`, not one of
//! the user's commands.
//!
//! Everything goes through the driver's own code: [`VfioBackend::open_any`] (the same sysfs
//! checks, container, group and device set-up as the ConnectX path), its BAR0 accessors,
//! config-space access, [`DmaSpace`]/[`DmaBuffer`] for DMA memory, `enable_msi`/`enable_msix`
//! and [`Backend::irq_eventfd`] for interrupts, [`Backend::reset`].
//!
//! Checks, one `PASS`/`FAIL`/`SKIP` line each (exit status non-zero on any `FAIL`):
//!
//! - the driver's errors: the mlx5-only `open` refuses the device; with `--rebind`, the device
//!   is taken through "bound to another driver", "bound to no driver" and (when its IOMMU
//!   group has another device on a host driver) "group not viable", each of which must fail
//!   with the driver's own error, the last one cross-checked with the kernel's
//!   `VFIO_GROUP_GET_STATUS`; then it (and its group) is bound to vfio-pci;
//! - open, a second open refused as busy, config-space IDs, bus-master enable;
//! - edu: ID, liveness and factorial registers; DMA RAM→device→RAM through a mapped
//!   [`DmaBuffer`] with the bytes compared; MSI from the raise-IRQ register and from DMA
//!   completion; after [`DmaBuffer::unmap`], device writes and reads at the old IOVA must not
//!   reach the (still allocated) memory, and the guest's DMAR fault lines are looked for;
//! - e1000e: STATUS, a read/write register, a real transmit (descriptor read, data read,
//!   status write-back by DMA) signalled on its MSI-X vector, every MSI-X vector triggered
//!   through ICS and routed through IVAR, MSI;
//! - reset (or the driver's clear refusal when the device offers none), close with no file
//!   descriptor, mapping or locked memory left behind, the group released, and a reopen.
//!
//! This file holds the arguments, the report, the checks every device gets and `main`; the
//! device models' checks are in `edu_suite` and `e1000e_suite`, the binding checks in
//! `bindings`.
//!
//! `--rebind` changes driver bindings through sysfs (`driver_override`, `unbind`,
//! `drivers_probe`) and leaves the device and its group on vfio-pci: meant for the VM.

#![forbid(unsafe_code)]

use clap::Parser;
use std::fmt::Display;
use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::result::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};
use umlx_driver::Error;
use umlx_driver::backend::Backend;
use umlx_driver::dma::{DmaBuffer, DmaMemory, DmaSpace, PAGE_2M, PAGE_4K};
use umlx_driver::event;
use umlx_driver::vfio::mmio::Bar;
use umlx_driver::vfio::{self, IRQ_MSI, IRQ_MSIX, PCI_COMMAND, PCI_COMMAND_MASTER, VfioBackend, sysfs};

mod bindings;
mod e1000e_suite;
mod edu_suite;

use bindings::binding_checks;
use e1000e_suite::{e1k, e1000e_checks};
use edu_suite::{edu, edu_checks};

/// The device models the self-test knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// QEMU's `edu` teaching device: registers, a DMA engine, MSI.
    Edu,
    /// QEMU's 82574L model: a NIC with MSI-X.
    E1000e,
    /// Anything else (`--device auto` only): open, config, DMA mapping, reset, close.
    Generic,
}

impl Kind {
    fn of_ids(vendor: u16, device: u16) -> Kind {
        match (vendor, device) {
            (0x1234, 0x11e8) => Kind::Edu,
            (0x8086, 0x10d3) => Kind::E1000e,
            _ => Kind::Generic,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Edu => "edu",
            Kind::E1000e => "e1000e",
            Kind::Generic => "generic",
        }
    }
}

/// The device model `--device` names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    /// Whatever the function is (a device the self-test doesn't know gets the generic checks)
    #[default]
    Auto,
    /// QEMU's edu device
    Edu,
    /// QEMU's e1000e (82574L)
    E1000e,
}

/// The VFIO backend against vfio-pci + IOMMU with QEMU's edu/e1000e (in a VM)
#[derive(Parser, Debug)]
#[command(name = "umlx-vfio-selftest")]
pub struct SelftestArgs {
    /// The PCI function
    #[arg(value_name = "PCI")]
    pub pci: String,
    /// The device model to expect
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Also the checks that change driver bindings
    #[arg(long)]
    pub rebind: bool,
}

impl SelftestArgs {
    fn kind(&self) -> Option<Kind> {
        match self.device {
            DeviceChoice::Auto => None,
            DeviceChoice::Edu => Some(Kind::Edu),
            DeviceChoice::E1000e => Some(Kind::E1000e),
        }
    }
}

// -------------------------------------------------------------------------------------------
// Reporting
// -------------------------------------------------------------------------------------------

#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
    skipped: u32,
}

impl Report {
    fn check(&mut self, name: &str, ok: bool, detail: impl Display) {
        if ok {
            self.passed += 1;
            println!("PASS {name}: {detail}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {detail}");
        }
    }

    fn pass(&mut self, name: &str, detail: impl Display) {
        self.check(name, true, detail);
    }

    fn fail(&mut self, name: &str, detail: impl Display) {
        self.check(name, false, detail);
    }

    fn skip(&mut self, name: &str, why: impl Display) {
        self.skipped += 1;
        println!("SKIP {name}: {why}");
    }

    /// The operation must fail, and its message must contain `needle`.
    fn expect_err<T>(&mut self, name: &str, r: umlx_driver::Result<T>, needle: &str) {
        match r {
            Ok(_) => self.check(name, false, format!("succeeded, expected an error mentioning `{needle}`")),
            Err(e) => {
                let msg = e.to_string();
                let ok = msg.contains(needle);
                self.check(name, ok, format!("driver error: {msg}"))
            }
        }
    }
}

fn info(detail: impl Display) {
    println!("INFO {detail}");
}

// -------------------------------------------------------------------------------------------
// Process resources (leak checks)
// -------------------------------------------------------------------------------------------

/// What the process holds that a VFIO backend could leave behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Snapshot {
    /// Open file descriptors (`/proc/self/fd`).
    fds: usize,
    /// Mappings of VFIO files (`/proc/self/maps` lines naming vfio: BAR mmaps).
    vfio_maps: usize,
    /// Locked memory in kB (`VmLck`: the DMA memory).
    locked_kb: u64,
}

impl Snapshot {
    fn take() -> Snapshot {
        let fds = fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        let maps = fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let vfio_maps = maps.lines().filter(|l| l.contains("vfio")).count();
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let locked_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmLck:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        Snapshot { fds, vfio_maps, locked_kb }
    }
}

impl Display for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} fds, {} vfio mappings, {} kB locked", self.fds, self.vfio_maps, self.locked_kb)
    }
}

/// The memlock facts that decide whether DMA memory can be pinned: `None` when the process has
/// CAP_IPC_LOCK or no limit (nothing to check), else the RLIMIT_MEMLOCK soft limit in bytes.
fn memlock_limit() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(|v| u64::from_str_radix(v.trim(), 16));
    if cap_eff.is_some_and(|c| c.is_ok_and(|c| c & (1 << 14) != 0)) {
        return None;
    }
    let limits = fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    line["Max locked memory".len()..].split_whitespace().next()?.parse().ok()
}

// -------------------------------------------------------------------------------------------
// Helpers
// -------------------------------------------------------------------------------------------

/// Polls `done` every 100 µs until it is true (returns the time it took) or `timeout` passes.
fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if done() {
            return Some(t.elapsed());
        }
        if t.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(7).wrapping_add(seed as u32 * 13 + 3) as u8).collect()
}

fn read_mem(mem: &DmaMemory, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mem.read_bytes(offset, &mut v).expect("in bounds");
    v
}

fn head(b: &[u8]) -> String {
    b.iter().take(4).map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

fn dma_avail(b: &VfioBackend) -> Option<u32> {
    b.query_iommu_info().ok().and_then(|i| i.dma_avail)
}

fn fmt_opt(v: Option<u32>) -> String {
    v.map_or("not reported".to_string(), |v| v.to_string())
}

/// Waits for `fd` to become readable and drains it: `Some((latency, count))`.
fn wait_irq(fd: impl AsFd, timeout: Duration) -> Option<(Duration, u64)> {
    let (t, fd) = (Instant::now(), fd.as_fd());
    if event::wait_readable(fd, timeout) { Some((t.elapsed(), event::drain(fd))) } else { None }
}

/// Looks (for up to `timeout`) in the kernel log for a DMAR fault line of `bdf` (`bb:dd.f`) at
/// `addr`, of kind `what` (`DMA Read`/`DMA Write`). `Err` when `dmesg` cannot be run.
fn find_dmar_fault(bdf: &str, addr: u64, what: &str, timeout: Duration) -> Result<Option<String>, String> {
    let needle = format!("fault addr {addr:#x} ");
    let dev = format!("[{bdf}]");
    let t = Instant::now();
    loop {
        let out = std::process::Command::new("dmesg").output().map_err(|e| format!("cannot run dmesg: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("dmesg failed ({}): {}", out.status, err.trim()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(l) =
            text.lines().find(|l| l.contains("DMAR") && l.contains(what) && l.contains(&dev) && l.contains(&needle))
        {
            return Ok(Some(l.trim().to_string()));
        }
        if t.elapsed() > timeout {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// -------------------------------------------------------------------------------------------
// sysfs
// -------------------------------------------------------------------------------------------

const SYS: &str = "/sys";

fn dev_dir(pci: &str) -> PathBuf {
    sysfs::device_dir(Path::new(SYS), pci)
}

fn driver(pci: &str) -> Option<String> {
    sysfs::driver_of(Path::new(SYS), pci)
}

/// `Backend::enable_interrupts`, the bring-up path: all MSI-X vectors get an eventfd (and a
/// device without MSI-X gets the driver's error). Leaves them enabled: close must clean up.
fn enable_interrupts_check(r: &mut Report, b: &Arc<VfioBackend>) {
    let n = b.irq_count();
    if n == 0 {
        return r.expect_err("enable-interrupts", b.enable_interrupts(), "offers no MSI-X vectors");
    }
    let before = Snapshot::take().fds;
    match b.enable_interrupts() {
        Ok(()) => {
            let fds: Vec<Arc<OwnedFd>> = (0..n).filter_map(|v| b.irq_eventfd(v)).collect();
            let after = Snapshot::take().fds;
            r.check(
                "enable-interrupts",
                fds.len() == n as usize && b.irq_eventfd(n).is_none(),
                format!(
                    "Backend::enable_interrupts: {} of {n} MSI-X vectors have eventfds ({after} fds, {before} before); left enabled for close",
                    fds.len()
                ),
            )
        }
        Err(e) => r.fail("enable-interrupts", e),
    }
}

// -------------------------------------------------------------------------------------------
// Generic device
// -------------------------------------------------------------------------------------------

fn generic_checks(r: &mut Report, b: &Arc<VfioBackend>) {
    let space = DmaSpace::new(b.clone());
    let avail0 = dma_avail(b);
    match DmaBuffer::new(&space, 16 * PAGE_4K, false) {
        Ok(buf) => {
            let avail1 = dma_avail(b);
            r.check(
                "dma-map",
                avail1.zip(avail0).is_none_or(|(x, y)| x + 1 == y),
                format!("DmaBuffer {:#x} bytes at IOVA {:#x}", buf.len(), buf.iova()),
            );
            drop(buf);
            let avail2 = dma_avail(b);
            r.check("dma-unmap", avail2 == avail0, format!("DMA mappings available {}", fmt_opt(avail2)));
        }
        Err(e) => r.fail("dma-map", e),
    }
}

// -------------------------------------------------------------------------------------------
// The run
// -------------------------------------------------------------------------------------------

/// Without CAP_IPC_LOCK: a buffer of 3/4 of the memlock room left can be mlocked, but
/// `VFIO_IOMMU_MAP_DMA` pins and counts the same pages a second time, so the map must fail,
/// with the driver's RLIMIT_MEMLOCK error, and leave nothing behind.
fn memlock_check(r: &mut Report, b: &Arc<VfioBackend>) {
    let Some(limit) = memlock_limit() else {
        return r.skip("memlock-limit", "the process has CAP_IPC_LOCK (or no limit): RLIMIT_MEMLOCK does not apply");
    };
    let before = Snapshot::take();
    let room = limit.saturating_sub(before.locked_kb * 1024);
    let len = ((room * 3 / 4) as usize / PAGE_4K * PAGE_4K).max(PAGE_4K);
    let space = DmaSpace::new(b.clone());
    let avail0 = dma_avail(b);
    let res = DmaBuffer::new(&space, len, false);
    let ok_err = matches!(res, Err(Error::MemlockLimit { .. }));
    let detail = match &res {
        Ok(buf) => format!(
            "mapped {:#x} bytes with {room:#x} bytes of memlock room: VFIO did not count its pinning (the driver documents twice)",
            buf.len()
        ),
        Err(e) => format!("{len:#x}-byte buffer with RLIMIT_MEMLOCK {limit:#x} ({room:#x} left): {e}"),
    };
    drop(res);
    drop(space);
    let after = Snapshot::take();
    r.check(
        "memlock-limit",
        ok_err && after == before && dma_avail(b) == avail0,
        format!("{detail}; afterwards {after}, DMA mappings available {}", fmt_opt(dma_avail(b))),
    );
}

fn reset_check(r: &mut Report, b: &Arc<VfioBackend>, kind: Kind) {
    if !b.supports_reset() {
        r.expect_err("reset", b.reset(), "offers no reset through VFIO");
        return;
    }
    let bar = b.bar0();
    if kind == Kind::E1000e {
        bar.write32_le(e1k::RDBAL, 0x1234_5670);
    }
    let t = Instant::now();
    if let Err(e) = b.reset() {
        return r.fail("reset", e);
    }
    let took = t.elapsed();
    let cmd = b.config_read_u16(PCI_COMMAND).unwrap_or(0xffff);
    let method = fs::read_to_string(dev_dir(b.pci()).join("reset_method")).unwrap_or_default();
    let took = format!("{} (kernel reset method: {})", ms(took), method.trim());
    match kind {
        Kind::E1000e => {
            let v = bar.read32_le(e1k::RDBAL);
            let status = bar.read32_le(e1k::STATUS);
            r.check(
                "reset",
                v == 0 && status != 0xffff_ffff,
                format!(
                    "VFIO_DEVICE_RESET in {took}: RDBAL0 0x12345670 -> {v:#x} (registers back to defaults), STATUS {status:#010x}, COMMAND {cmd:#06x}"
                ),
            );
        }
        Kind::Edu => {
            let id = bar.read32_le(edu::ID);
            r.check(
                "reset",
                id & 0xffff == 0x00ed,
                format!("VFIO_DEVICE_RESET in {took}: device answers (ID {id:#010x}), COMMAND {cmd:#06x}"),
            );
        }
        Kind::Generic => r.pass("reset", format!("VFIO_DEVICE_RESET in {took}, COMMAND {cmd:#06x}")),
    }
}

fn alive(b: &VfioBackend, kind: Kind) -> bool {
    match kind {
        Kind::Edu => b.bar0().read32_le(edu::ID) & 0xffff == 0x00ed,
        Kind::E1000e => b.bar0().read32_le(e1k::STATUS) != 0xffff_ffff,
        Kind::Generic => b.config_read_u16(0).is_ok_and(|v| v != 0xffff),
    }
}

fn device_checks(r: &mut Report, pci: &str, kind: Kind, ids: (u16, u16)) {
    let base = Snapshot::take();
    info(format!("before open: {base}"));
    let b = match VfioBackend::open_any(pci) {
        Ok(b) => b,
        Err(e) => return r.fail("open", e),
    };
    let irq = |i| b.irq_info(i).map(|x| x.count).unwrap_or(0);
    r.pass(
        "open",
        format!(
            "VfioBackend::open_any: container fd {}, device fd {}, IOMMU group {}, BAR0 {:#x} bytes, {} MSI / {} MSI-X vectors, reset {}",
            b.container_fd().as_raw_fd(),
            b.device_fd().as_raw_fd(),
            b.iommu_group(),
            b.bar0_len(),
            irq(IRQ_MSI),
            irq(IRQ_MSIX),
            if b.supports_reset() { "offered" } else { "not offered" }
        ),
    );
    let opened = Snapshot::take();
    info(format!("after open: {opened}"));
    let im = b.iommu_info().clone();
    let ranges: Vec<String> = im.iova_ranges.iter().map(|x| format!("{:#x}-{:#x}", x.start, x.end)).collect();
    r.check(
        "iommu-info",
        im.page_sizes & 0x1000 != 0 && !im.iova_ranges.is_empty(),
        format!(
            "page sizes {:#x}, IOVA ranges [{}], DMA mappings available {}",
            im.page_sizes,
            ranges.join(", "),
            fmt_opt(im.dma_avail)
        ),
    );
    r.expect_err("busy-error", VfioBackend::open_any(pci), "busy");
    // Another function of the same IOMMU group: its group is this one, already open.
    let siblings: Vec<String> = sysfs::group_devices(Path::new(SYS), b.iommu_group())
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m != pci && driver(m).is_some_and(|d| sysfs::is_vfio_driver(&d)))
        .collect();
    match siblings.first() {
        Some(sib) => r.expect_err("group-sibling-busy", VfioBackend::open_any(sib), "busy"),
        None => r.skip("group-sibling-busy", "no other vfio-pci device in this IOMMU group"),
    }

    let v = b.config_read_u16(0);
    let d = b.config_read_u16(2);
    match (v, d) {
        (Ok(v), Ok(d)) => r.check(
            "config-ids",
            (v, d) == ids,
            format!("config space vendor:device {v:04x}:{d:04x} (sysfs {:04x}:{:04x})", ids.0, ids.1),
        ),
        (Err(e), _) | (_, Err(e)) => r.check("config-ids", false, e),
    };
    match b.region_info(vfio::REGION_CONFIG) {
        Ok(ci) => r.expect_err("config-bounds", b.config_read_u32(ci.size - 2), "is outside its"),
        Err(e) => r.fail("config-bounds", e),
    }
    match b.enable_bus_master().and_then(|_| b.config_read_u16(PCI_COMMAND)) {
        Ok(cmd) => r.check(
            "bus-master",
            cmd & PCI_COMMAND_MASTER != 0,
            format!("COMMAND {cmd:#06x} (bus master {})", if cmd & PCI_COMMAND_MASTER != 0 { "on" } else { "off" }),
        ),
        Err(e) => r.check("bus-master", false, e),
    };

    match kind {
        Kind::Edu => edu_checks(r, &b, pci),
        Kind::E1000e => e1000e_checks(r, &b),
        Kind::Generic => generic_checks(r, &b),
    }
    memlock_check(r, &b);
    reset_check(r, &b, kind);

    // Close: nothing may be left behind.
    let group = b.iommu_group();
    let refs = Arc::strong_count(&b);
    drop(b);
    let closed = Snapshot::take();
    r.check("close", refs == 1 && closed == base, format!("backend dropped: {closed} (before open: {base})"));
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "group-released",
            !st.container_set,
            format!("/dev/vfio/{group} opens again, kernel group flags {:#x} (no container attached)", st.flags),
        ),
        Err(e) => r.check("group-released", false, e),
    };
    match VfioBackend::open_any(pci) {
        Ok(b2) => {
            let ok = alive(&b2, kind);
            let avail = dma_avail(&b2);
            let again_open = Snapshot::take();
            drop(b2);
            let again = Snapshot::take();
            r.check(
                "reopen",
                ok && avail == im.dma_avail && again_open == opened && again == base,
                format!(
                    "opened again ({again_open}), device {}, DMA mappings available {}; closed again: {again}",
                    if ok { "answers" } else { "DOES NOT ANSWER" },
                    fmt_opt(avail)
                ),
            )
        }
        Err(e) => r.check("reopen", false, e),
    };
}

fn main() -> std::process::ExitCode {
    let args = SelftestArgs::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("umlx-vfio-selftest: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the self-test.
pub fn run(opts: &SelftestArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let pci = sysfs::normalize_pci(&opts.pci).map_err(|e| e.to_string())?;
    if !dev_dir(&pci).exists() {
        return Err(format!("PCI device {pci} does not exist (see `lspci -D`)"));
    }
    let ids = sysfs::read_ids(Path::new(SYS), &pci).map_err(|e| e.to_string())?;
    let found = Kind::of_ids(ids.0, ids.1);
    let kind = match opts.kind() {
        None => found,
        Some(k) if k == found => k,
        Some(k) => {
            return Err(format!("{pci} is {:04x}:{:04x}, not QEMU's {} device", ids.0, ids.1, k.name()));
        }
    };
    println!(
        "vfio-selftest {pci}: {:04x}:{:04x} ({}), driver {}, IOMMU group {}",
        ids.0,
        ids.1,
        kind.name(),
        driver(&pci).as_deref().unwrap_or("none"),
        sysfs::iommu_group_of(Path::new(SYS), &pci).map_or("none".into(), |g| g.to_string())
    );
    let mut r = Report::default();
    r.expect_err("mlx5-only-open", VfioBackend::open(&pci), "not a ConnectX");
    if opts.rebind {
        binding_checks(&mut r, &pci)?;
    } else {
        for name in ["other-driver-error", "not-bound-error", "non-viable-error"] {
            r.skip(name, "needs --rebind (changes driver bindings)");
        }
    }
    device_checks(&mut r, &pci, kind, ids);
    println!(
        "vfio-selftest {pci} ({}): {} passed, {} failed, {} skipped in {:.1} s",
        kind.name(),
        r.passed,
        r.failed,
        r.skipped,
        t0.elapsed().as_secs_f64()
    );
    if r.failed > 0 { Err(format!("{} check(s) failed", r.failed)) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<SelftestArgs, String> {
        let argv = ["umlx-vfio-selftest"].into_iter().chain(v.iter().copied());
        SelftestArgs::try_parse_from(argv).map_err(|e| e.to_string())
    }

    fn args(v: &[&str]) -> SelftestArgs {
        parse(v).unwrap()
    }

    #[test]
    fn options() {
        let o = args(&["00:03.0", "--device", "edu", "--rebind"]);
        assert_eq!((o.pci.as_str(), o.kind(), o.rebind), ("00:03.0", Some(Kind::Edu), true));
        let o = args(&["--device=auto", "0000:02:00.0"]);
        assert_eq!((o.kind(), o.rebind), (None, false));
        assert_eq!(args(&["x", "--device=e1000e"]).kind(), Some(Kind::E1000e));
        assert_eq!(args(&["x"]).kind(), None);
        let e = parse(&["x", "--device", "mlx5"]).unwrap_err();
        assert!(e.contains("invalid value 'mlx5' for '--device <DEVICE>'") && e.contains("auto, edu, e1000e"), "{e}");
        assert!(parse(&["x", "--frob"]).unwrap_err().contains("unexpected argument '--frob'"));
        assert!(parse(&["x", "y"]).unwrap_err().contains("unexpected argument 'y'"));
        let e = parse(&[]).unwrap_err();
        assert!(e.contains("required arguments were not provided") && e.contains("Usage: umlx-vfio-selftest"), "{e}");
        assert!(parse(&["x", "--device"]).unwrap_err().contains("a value is required for '--device"));
    }

    #[test]
    fn kinds() {
        assert_eq!(Kind::of_ids(0x1234, 0x11e8), Kind::Edu);
        assert_eq!(Kind::of_ids(0x8086, 0x10d3), Kind::E1000e);
        assert_eq!(Kind::of_ids(0x15b3, 0x101b), Kind::Generic);
    }

    #[test]
    fn a_missing_device_is_a_clear_error() {
        let e = run(&args(&["ffff:ff:1f.7"])).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        assert!(run(&args(&["not-an-address"])).unwrap_err().contains("not a PCI address"));
    }
}
