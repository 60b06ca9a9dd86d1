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
// sysfs: driver binding (for --rebind)
// -------------------------------------------------------------------------------------------

const SYS: &str = "/sys";

fn dev_dir(pci: &str) -> PathBuf {
    sysfs::device_dir(Path::new(SYS), pci)
}

fn driver(pci: &str) -> Option<String> {
    sysfs::driver_of(Path::new(SYS), pci)
}

fn write_sysfs(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("writing `{value}` to {}: {e}", path.display()))
}

fn unbind(pci: &str) -> Result<(), String> {
    if driver(pci).is_some() {
        write_sysfs(&dev_dir(pci).join("driver/unbind"), pci)?;
    }
    match wait_until(Duration::from_secs(2), || driver(pci).is_none()) {
        Some(_) => Ok(()),
        None => Err(format!("{pci} is still bound to {} after unbind", driver(pci).unwrap_or_default())),
    }
}

/// Binds `pci` to vfio-pci (driver_override, unbind, drivers_probe) and waits for its group node.
fn bind_vfio(pci: &str) -> Result<(), String> {
    if driver(pci).as_deref() == Some("vfio-pci") {
        return Ok(());
    }
    if !Path::new(SYS).join("bus/pci/drivers/vfio-pci").exists() {
        return Err("vfio-pci is not loaded (modprobe vfio-pci)".into());
    }
    write_sysfs(&dev_dir(pci).join("driver_override"), "vfio-pci")?;
    unbind(pci)?;
    write_sysfs(&Path::new(SYS).join("bus/pci/drivers_probe"), pci)?;
    if wait_until(Duration::from_secs(2), || driver(pci).as_deref() == Some("vfio-pci")).is_none() {
        return Err(format!("{pci} did not bind to vfio-pci (driver now: {:?})", driver(pci)));
    }
    let group = sysfs::iommu_group_of(Path::new(SYS), pci).ok_or(format!("{pci} has no IOMMU group"))?;
    let node = PathBuf::from(format!("/dev/vfio/{group}"));
    wait_until(Duration::from_secs(2), || node.exists()).ok_or(format!("{} did not appear", node.display()))?;
    Ok(())
}

/// With `--rebind`: the driver's errors for a device on another driver, on no driver and in a
/// non-viable group, then everything bound to vfio-pci.
fn binding_checks(r: &mut Report, pci: &str) -> Result<(), String> {
    let start = driver(pci);
    info(format!("{pci} starts bound to {}", start.as_deref().unwrap_or("no driver")));
    match start.as_deref() {
        Some(d) if !sysfs::is_vfio_driver(d) => {
            r.expect_err("other-driver-error", VfioBackend::open_any(pci), &format!("bound to {d}, not to vfio-pci"));
        }
        _ => r.skip("other-driver-error", "the device does not start on a host driver (edu has none)"),
    }
    unbind(pci)?;
    r.expect_err("not-bound-error", VfioBackend::open_any(pci), "not bound to any driver");
    bind_vfio(pci)?;
    r.check("bind-vfio", driver(pci).as_deref() == Some("vfio-pci"), format!("{pci} bound to vfio-pci"));

    let group = sysfs::iommu_group_of(Path::new(SYS), pci).ok_or(format!("{pci} has no IOMMU group"))?;
    let members = sysfs::group_devices(Path::new(SYS), group).map_err(|e| e.to_string())?;
    let peers: Vec<(String, String)> = members
        .iter()
        .filter(|m| m.as_str() != pci)
        .filter_map(|m| driver(m).filter(|d| !sysfs::is_vfio_driver(d)).map(|d| (m.clone(), d)))
        .filter(|(_, d)| d != "pci-stub" && d != "pcieport")
        .collect();
    info(format!("IOMMU group {group}: {}", members.join(", ")));
    if peers.is_empty() {
        r.skip(
            "non-viable-error",
            format!(
                "IOMMU group {group} has no other device on a host driver (the VM topology gives it its own group)"
            ),
        );
        return Ok(());
    }
    let names: Vec<String> = peers.iter().map(|(p, d)| format!("{p} ({d})")).collect();
    info(format!("group peers on host drivers: {}", names.join(", ")));
    r.expect_err("non-viable-error", VfioBackend::open_any(pci), "is not viable");
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "non-viable-kernel",
            !st.viable,
            format!("kernel VFIO_GROUP_GET_STATUS flags {:#x}: viable={}", st.flags, st.viable),
        ),
        Err(e) => r.check("non-viable-kernel", false, e),
    };
    // A peer on no driver is as good as one on vfio-pci: the sysfs rule and the kernel agree?
    for (p, _) in &peers {
        unbind(p)?;
    }
    let rule = sysfs::check_device(Path::new(SYS), pci, sysfs::IdPolicy::Any);
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "viable-unbound-peer",
            st.viable && rule.is_ok(),
            format!(
                "peers unbound (no driver): driver's sysfs check {}, kernel flags {:#x}: viable={}",
                match &rule {
                    Ok(_) => "passes".to_string(),
                    Err(e) => format!("fails: {e}"),
                },
                st.flags,
                st.viable
            ),
        ),
        Err(e) => r.check("viable-unbound-peer", false, e),
    };
    for (p, _) in &peers {
        bind_vfio(p)?;
    }
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "viable-after-bind",
            st.viable,
            format!("peers bound to vfio-pci; kernel flags {:#x}: viable={}", st.flags, st.viable),
        ),
        Err(e) => r.check("viable-after-bind", false, e),
    };
    Ok(())
}

// -------------------------------------------------------------------------------------------
// edu
// -------------------------------------------------------------------------------------------

mod edu {
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

fn edu_checks(r: &mut Report, b: &Arc<VfioBackend>, pci: &str) {
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

// -------------------------------------------------------------------------------------------
// e1000e
// -------------------------------------------------------------------------------------------

mod e1k {
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

fn e1000e_checks(r: &mut Report, b: &Arc<VfioBackend>) {
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
