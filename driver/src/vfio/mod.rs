//! The VFIO backend: a real adapter bound to `vfio-pci`.
//!
//! [`VfioBackend::open`] first checks the device through sysfs ([`sysfs`]: exists, is a
//! ConnectX, IOMMU on, bound to vfio-pci, viable group, accessible `/dev/vfio/<group>`), so
//! each usual set-up mistake gets its own error and fix. Then:
//!
//! - container, group and device come from **vfio-ioctls** ([`VfioContainer`] opens
//!   `/dev/vfio/vfio`, checks the API version and `VFIO_TYPE1v2_IOMMU`; [`VfioDevice::new`]
//!   opens the group, checks it is viable, attaches it to the container, sets the type1v2 IOMMU
//!   and gets the device fd). That part of the crate fits as is.
//! - everything else is raw ioctls in [`sys`], because vfio-ioctls either lacks it or loses the
//!   error: `VFIO_IOMMU_GET_INFO` with the IOVA-range capability, `MAP_DMA`/`UNMAP_DMA` with the
//!   errno kept (ENOMEM/ENOSPC have specific causes), `SET_IRQS` with eventfds made here (the
//!   crate wants vmm-sys-util's `EventFd`, which is not our dependency), `VFIO_DEVICE_RESET`
//!   with its result, and exact config-space `pread`/`pwrite` (the crate's region I/O only
//!   logs failures). vfio-bindings is not re-exported by vfio-ioctls, so [`sys`] declares the
//!   few layouts it needs itself.
//! - BAR0 is mapped with mmap ([`mmio::Bar`]), only the areas the sparse-mmap capability lists
//!   when the kernel reports one (holes go through pread/pwrite); register access is one
//!   inlined volatile load or store.
//!
//! Drop disables interrupts, unmaps BAR0, closes the device fd, the group and the container.
//! DMA mappings are undone by their [`crate::dma::DmaBuffer`]s, which keep the backend alive.
//!
//! Unsafe code lives in [`sys`] and [`mmio`] (and [`crate::dma`]). This file has two unsafe
//! blocks: `Backend::dma_map` is an `unsafe fn`, and its body forwards the caller's contract to
//! [`sys::map_dma`]; `borrow_fd` lends the descriptor a vfio-ioctls object owns (the crate
//! implements `AsRawFd` only) as a `BorrowedFd` tied to that object's lifetime.

pub mod mmio;
pub mod sys;
pub mod sysfs;

use crate::backend::{Backend, IovaRange};
use crate::{Error, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError, VfioOps};

pub use sys::{IommuInfo, IrqInfo, RegionInfo};
pub use sysfs::{IdPolicy, PciDevice};

/// VFIO region index of BAR0 (BARs 0..=5 are regions 0..=5).
pub const REGION_BAR0: u32 = 0;
/// VFIO region index of the expansion ROM.
pub const REGION_ROM: u32 = 6;
/// VFIO region index of PCI configuration space.
pub const REGION_CONFIG: u32 = 7;

/// VFIO IRQ index of legacy INTx.
pub const IRQ_INTX: u32 = 0;
/// VFIO IRQ index of MSI.
pub const IRQ_MSI: u32 = 1;
/// VFIO IRQ index of MSI-X.
pub const IRQ_MSIX: u32 = 2;

/// PCI config offset of the COMMAND register (16-bit, little-endian).
pub const PCI_COMMAND: u64 = 0x04;
/// COMMAND bit 1: memory-space enable.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// COMMAND bit 2: bus-master enable (the device may do DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// The vfio-ioctls objects that own the descriptor `as_raw_fd` returns: a `File` field,
/// opened at creation, never replaced, closed only when the object drops.
trait OwnsFd: AsRawFd {}
impl OwnsFd for VfioDevice {}
impl OwnsFd for VfioContainer {}

/// The descriptor `owner` owns, borrowed for as long as `owner` is.
fn borrow_fd<T: OwnsFd>(owner: &T) -> BorrowedFd<'_> {
    // SAFETY: the descriptor is open for as long as `owner` lives (see `OwnsFd`), and the
    // returned borrow cannot outlive `owner`.
    unsafe { BorrowedFd::borrow_raw(owner.as_raw_fd()) }
}

/// Which interrupts are enabled, and their eventfds (index = vector). An eventfd is shared
/// (`Arc`) with whoever asked for it ([`Backend::irq_eventfd`]): enabling interrupts again, or
/// disabling them, drops the backend's reference, and the descriptor closes when the last
/// holder lets go, so a holder never reads or polls a closed or reused descriptor number.
#[derive(Default)]
struct IrqState {
    index: Option<u32>,
    fds: Vec<Arc<OwnedFd>>,
}

/// A PCI device bound to vfio-pci, opened through VFIO: the [`Backend`] for real hardware.
pub struct VfioBackend {
    // Field order is drop order: BAR0 is unmapped, then the eventfds are closed (interrupts
    // were disabled in `drop`), then the device fd is closed and the group released, then the
    // container is closed.
    bar0: mmio::Bar,
    irq: Mutex<IrqState>,
    device: VfioDevice,
    container: Arc<VfioContainer>,
    name: String,
    info: PciDevice,
    device_flags: u32,
    config: RegionInfo,
    iommu: IommuInfo,
    msi_count: u32,
    msix_count: u32,
}

impl std::fmt::Debug for VfioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioBackend")
            .field("name", &self.name)
            .field("info", &self.info)
            .field("bar0_len", &self.bar0.len())
            .field("iommu", &self.iommu)
            .field("msix_count", &self.msix_count)
            .finish()
    }
}

fn device_error(pci: &str, problem: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::Device { device: format!("pci:{pci}"), problem: problem.into(), hint: hint.into() }
}

/// Turns a vfio-ioctls error from container/group/device setup into our error with a fix.
fn map_vfio_error(pci: &str, group: u32, e: VfioError) -> Error {
    let (problem, hint) = match &e {
        VfioError::OpenContainer(io) => (
            format!("cannot open /dev/vfio/vfio: {io}"),
            "load the VFIO modules (`modprobe vfio-pci vfio_iommu_type1`) and run as root".to_string(),
        ),
        VfioError::OpenGroup(io, g) => (
            format!("cannot open /dev/vfio/{g}: {io}"),
            "run as root; EBUSY means another process (QEMU, DPDK, another umlx) holds the group".to_string(),
        ),
        VfioError::GroupViable => (
            format!("IOMMU group {group} is not viable"),
            "bind every device of the group to vfio-pci (`umlx bind <addr>`) or unbind it".to_string(),
        ),
        VfioError::VfioApiVersion | VfioError::VfioExtension | VfioError::VfioType1V2 => (
            format!("the kernel's VFIO does not offer the type1v2 IOMMU: {e}"),
            "load vfio_iommu_type1 (`modprobe vfio_iommu_type1`) on a kernel >= 3.18".to_string(),
        ),
        VfioError::GroupGetDeviceFD(_) => (
            format!("VFIO_GROUP_GET_DEVICE_FD failed: {e}"),
            "check `dmesg`; the device may be in use or its reset may have failed".to_string(),
        ),
        _ => (format!("VFIO set-up failed: {e}"), "check `dmesg` for VFIO messages".to_string()),
    };
    device_error(pci, problem, hint)
}

/// What the kernel says about an IOMMU group (`VFIO_GROUP_GET_STATUS`), independently of the
/// sysfs checks: see [`kernel_group_status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// The raw `VFIO_GROUP_FLAGS_*` bits.
    pub flags: u32,
    /// The group is viable: no device of it is used by a kernel driver doing DMA.
    pub viable: bool,
    /// The group is attached to a container.
    pub container_set: bool,
}

/// Opens `/dev/vfio/<group>`, asks the kernel for the group's status and closes it again: the
/// kernel's own verdict on viability, to compare with [`sysfs::check_group_viable`]. Fails with
/// EBUSY while the group is open (in this process or another).
pub fn kernel_group_status(group: u32) -> Result<GroupStatus> {
    let node = format!("/dev/vfio/{group}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&node)
        .map_err(|source| Error::Os { op: format!("opening {node}"), source })?;
    let flags = sys::group_status(file.as_fd())
        .map_err(|source| Error::Os { op: format!("{node}: VFIO_GROUP_GET_STATUS"), source })?;
    Ok(GroupStatus {
        flags,
        viable: flags & sys::GROUP_FLAGS_VIABLE != 0,
        container_set: flags & sys::GROUP_FLAGS_CONTAINER_SET != 0,
    })
}

impl VfioBackend {
    /// Opens the ConnectX at `pci` (`0000:3b:00.0`) through VFIO. Checks sysfs first (see
    /// [`sysfs`]); a non-mlx5 device is refused (see [`VfioBackend::open_any`]).
    pub fn open(pci: &str) -> Result<Arc<VfioBackend>> {
        VfioBackend::open_with(pci, IdPolicy::Mlx5)
    }

    /// Opens any PCI device bound to vfio-pci: for the VM self-test with QEMU's `edu`
    /// (1234:11e8) and `e1000e` (8086:10d3). The driver proper must use [`VfioBackend::open`].
    pub fn open_any(pci: &str) -> Result<Arc<VfioBackend>> {
        VfioBackend::open_with(pci, IdPolicy::Any)
    }

    fn open_with(pci: &str, policy: IdPolicy) -> Result<Arc<VfioBackend>> {
        let info = sysfs::check_device(Path::new("/sys"), pci, policy)?;
        sysfs::check_group_node(Path::new("/dev"), info.iommu_group, &info.pci)?;
        let pci = info.pci.clone();
        let group = info.iommu_group;

        let container = Arc::new(VfioContainer::new(None).map_err(|e| map_vfio_error(&pci, group, e))?);
        let ops: Arc<dyn VfioOps> = container.clone();
        let device = VfioDevice::new(&sysfs::device_dir(Path::new("/sys"), &pci), ops, false)
            .map_err(|e| map_vfio_error(&pci, group, e))?;
        let dev_fd = borrow_fd(&device);

        let os = |op: &str| {
            let pci = pci.clone();
            let op = op.to_string();
            move |source| Error::Os { op: format!("pci:{pci}: {op}"), source }
        };
        let dinfo = sys::device_info(dev_fd).map_err(os("VFIO_DEVICE_GET_INFO"))?;
        let iommu = sys::iommu_info(borrow_fd(&*container)).map_err(os("VFIO_IOMMU_GET_INFO"))?;
        let config = sys::region_info(dev_fd, REGION_CONFIG).map_err(os("VFIO_DEVICE_GET_REGION_INFO config"))?;
        let bar = sys::region_info(dev_fd, REGION_BAR0).map_err(os("VFIO_DEVICE_GET_REGION_INFO BAR0"))?;
        if bar.size == 0 {
            return Err(device_error(&pci, "BAR0 has size 0", "check `lspci -vv -s <pci>`: BAR0 must be a memory BAR"));
        }
        if !bar.mappable() {
            return Err(device_error(
                &pci,
                format!("BAR0 ({:#x} bytes) cannot be mmap'd through VFIO (flags {:#x})", bar.size, bar.flags),
                "BAR0 must be a memory BAR of at least one page; check `lspci -vv` and `dmesg`",
            ));
        }
        let bar_len = usize::try_from(bar.size)
            .map_err(|_| device_error(&pci, "BAR0 is larger than the address space", "use a 64-bit build"))?;
        // A kernel that keeps the MSI-X table out of mmap lists the areas that may be mapped;
        // the driver never touches the table (interrupts go through VFIO_DEVICE_SET_IRQS), and
        // any register in a hole is reached by pread/pwrite.
        let bar0 = match &bar.sparse_mmap {
            Some(areas) => mmio::Bar::map_areas(dev_fd, REGION_BAR0, bar.offset, bar_len, areas),
            None => mmio::Bar::map(dev_fd, REGION_BAR0, bar.offset, bar_len),
        }
        .map_err(os(&format!("mmap BAR0 ({bar_len:#x} bytes at fd offset {:#x})", bar.offset)))?;
        let count = |index| sys::irq_info(dev_fd, index).map(|i| i.count).unwrap_or(0);
        let (msi_count, msix_count) = (count(IRQ_MSI), count(IRQ_MSIX));

        Ok(Arc::new(VfioBackend {
            bar0,
            irq: Mutex::new(IrqState::default()),
            device,
            container,
            name: format!("pci:{pci}"),
            info,
            device_flags: dinfo.flags,
            config,
            iommu,
            msi_count,
            msix_count,
        }))
    }

    /// The PCI address (`0000:3b:00.0`).
    pub fn pci(&self) -> &str {
        &self.info.pci
    }

    /// What sysfs said about the device (IDs, driver, IOMMU group).
    pub fn pci_device(&self) -> &PciDevice {
        &self.info
    }

    /// The IOMMU group number.
    pub fn iommu_group(&self) -> u32 {
        self.info.iommu_group
    }

    /// The mapped BAR0 (also for little-endian register access in the VM self-test).
    pub fn bar0(&self) -> &mmio::Bar {
        &self.bar0
    }

    /// What `VFIO_IOMMU_GET_INFO` reported (page sizes, IOVA ranges, DMA mappings left).
    pub fn iommu_info(&self) -> &IommuInfo {
        &self.iommu
    }

    /// Asks the container's IOMMU again (`VFIO_IOMMU_GET_INFO`): unlike
    /// [`VfioBackend::iommu_info`], which is what it said at open, `dma_avail` here counts the
    /// mappings made since (each `VFIO_IOMMU_MAP_DMA` takes one, each unmap gives it back).
    pub fn query_iommu_info(&self) -> Result<IommuInfo> {
        sys::iommu_info(self.container_fd())
            .map_err(|source| Error::Os { op: format!("{}: VFIO_IOMMU_GET_INFO", self.name), source })
    }

    /// The VFIO device fd, open as long as the backend is.
    pub fn device_fd(&self) -> BorrowedFd<'_> {
        borrow_fd(&self.device)
    }

    /// The VFIO container fd, open as long as the backend is.
    pub fn container_fd(&self) -> BorrowedFd<'_> {
        borrow_fd(&*self.container)
    }

    /// `VFIO_DEVICE_GET_REGION_INFO` for region `index` (0..=5 BARs, 6 ROM, 7 config).
    pub fn region_info(&self, index: u32) -> Result<RegionInfo> {
        sys::region_info(self.device_fd(), index).map_err(|source| Error::Os {
            op: format!("{}: VFIO_DEVICE_GET_REGION_INFO region {index}", self.name),
            source,
        })
    }

    /// `VFIO_DEVICE_GET_IRQ_INFO` for IRQ index `index` (0 INTx, 1 MSI, 2 MSI-X).
    pub fn irq_info(&self, index: u32) -> Result<IrqInfo> {
        sys::irq_info(self.device_fd(), index).map_err(|source| Error::Os {
            op: format!("{}: VFIO_DEVICE_GET_IRQ_INFO index {index}", self.name),
            source,
        })
    }

    /// Number of MSI vectors the device offers.
    pub fn msi_count(&self) -> u32 {
        self.msi_count
    }

    /// Whether the device supports `VFIO_DEVICE_RESET`.
    pub fn supports_reset(&self) -> bool {
        self.device_flags & sys::DEVICE_FLAGS_RESET != 0
    }

    fn irq_state(&self) -> MutexGuard<'_, IrqState> {
        self.irq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enables `n` MSI-X vectors, each signalling its own non-blocking eventfd
    /// ([`Backend::irq_eventfd`]). Replaces interrupts enabled before. The backend holds the
    /// eventfds until interrupts are disabled or enabled again, or it is dropped; whoever took
    /// one keeps it open until they drop it.
    pub fn enable_msix(&self, n: u32) -> Result<()> {
        self.enable_irqs(IRQ_MSIX, "MSI-X", n)
    }

    /// Enables `n` MSI vectors, each with its own eventfd. Replaces interrupts enabled before.
    pub fn enable_msi(&self, n: u32) -> Result<()> {
        self.enable_irqs(IRQ_MSI, "MSI", n)
    }

    fn enable_irqs(&self, index: u32, what: &str, n: u32) -> Result<()> {
        let info = self.irq_info(index)?;
        if n == 0 || n > info.count {
            return Err(Error::InvalidArgument(format!(
                "{}: asked for {n} {what} vectors, the device offers {}",
                self.name, info.count
            )));
        }
        if info.flags & IrqInfo::FLAG_EVENTFD == 0 {
            return Err(device_error(
                &self.info.pci,
                format!("{what} cannot signal eventfds (VFIO irq flags {:#x})", info.flags),
                "use a kernel whose vfio-pci supports eventfd interrupts",
            ));
        }
        let mut st = self.irq_state();
        self.disable_locked(&mut st)?;
        let fds = (0..n)
            .map(|_| crate::event::new_eventfd(true))
            .map(|fd| fd.map(Arc::new))
            .collect::<std::io::Result<Vec<Arc<OwnedFd>>>>()
            .map_err(|source| Error::Os { op: format!("{}: eventfd", self.name), source })?;
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        sys::set_irq_eventfds(self.device_fd(), index, 0, &borrowed).map_err(|source| Error::Os {
            op: format!("{}: VFIO_DEVICE_SET_IRQS {what} {n} vectors", self.name),
            source,
        })?;
        st.index = Some(index);
        st.fds = fds;
        Ok(())
    }

    fn disable_locked(&self, st: &mut IrqState) -> Result<()> {
        if let Some(index) = st.index {
            sys::disable_irqs(self.device_fd(), index).map_err(|source| Error::Os {
                op: format!("{}: VFIO_DEVICE_SET_IRQS disable index {index}", self.name),
                source,
            })?;
            st.index = None;
            st.fds.clear();
        }
        Ok(())
    }

    /// Disables the interrupts enabled by [`VfioBackend::enable_msix`] or
    /// [`VfioBackend::enable_msi`] and lets go of their eventfds (closed unless someone still
    /// holds one).
    pub fn disable_irqs(&self) -> Result<()> {
        let mut st = self.irq_state();
        self.disable_locked(&mut st)
    }

    /// Reads a little-endian 16-bit config register.
    pub fn config_read_u16(&self, offset: u64) -> Result<u16> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Reads a little-endian 32-bit config register.
    pub fn config_read_u32(&self, offset: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian 16-bit config register.
    pub fn config_write_u16(&self, offset: u64, value: u16) -> Result<()> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Sets memory-space enable and bus-master enable in the COMMAND register (mlx5_vfio
    /// writes them after programming the command queue address). Returns the new value.
    pub fn enable_bus_master(&self) -> Result<u16> {
        let cmd = self.config_read_u16(PCI_COMMAND)?;
        let new = cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER;
        if new != cmd {
            self.config_write_u16(PCI_COMMAND, new)?;
        }
        Ok(new)
    }

    fn config_check(&self, offset: u64, len: usize) -> Result<u64> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.config.size => Ok(self.config.offset + offset),
            _ => Err(Error::OutOfBounds {
                object: format!("config space of {}", self.name),
                offset,
                len: len as u64,
                size: self.config.size,
            }),
        }
    }
}

// SAFETY: `doorbell_page` points into the BAR0 mapping the backend owns (`Bar`, unmapped on
// drop), bounds-checked to a whole UAR page; register accesses go through `Bar`, which checks
// offsets; `dma_map`/`dma_unmap` are the VFIO type1 ioctls on the backend's container; the
// eventfds live in the backend's IRQ state (see `enable_irqs`).
unsafe impl Backend for VfioBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn enable_interrupts(&self) -> Result<()> {
        // MSI-X, so the MSI-X count (not the MSI count: a ConnectX has no MSI capability, and
        // where a function has both, MSI offers one vector).
        let n = self.msix_count;
        if n == 0 {
            return Err(Error::Device {
                device: self.name.clone(),
                problem: "the function offers no MSI-X vectors".into(),
                hint: "check that the adapter's MSI-X capability is enabled in its firmware configuration".into(),
            });
        }
        self.enable_msix(n)
    }

    fn bar0_len(&self) -> usize {
        self.bar0.len()
    }

    #[inline]
    fn read32(&self, offset: usize) -> u32 {
        self.bar0.read32(offset)
    }

    #[inline]
    fn write32(&self, offset: usize, value: u32) {
        self.bar0.write32(offset, value)
    }

    #[inline]
    fn write64(&self, offset: usize, value: u64) {
        self.bar0.write64(offset, value)
    }

    fn doorbell_page(&self, uar_offset: usize) -> Option<std::ptr::NonNull<u8>> {
        self.bar0.page(uar_offset)
    }

    #[inline]
    fn write_block(&self, offset: usize, data: &[u64]) {
        self.bar0.write_block(offset, data)
    }

    unsafe fn dma_map(&self, vaddr: *mut u8, len: usize, iova: u64) -> Result<()> {
        // SAFETY: the caller upholds Backend::dma_map's contract, which is sys::map_dma's.
        let r = unsafe { sys::map_dma(self.container_fd(), vaddr, iova, len as u64) };
        r.map_err(|source| {
            let what = format!("{}: VFIO_IOMMU_MAP_DMA iova {iova:#x} len {len:#x}", self.name);
            match source.raw_os_error() {
                Some(libc::ENOMEM) => {
                    // type1 pins count against RLIMIT_MEMLOCK (on top of our mlock).
                    if let Err(e @ Error::MemlockLimit { .. }) = crate::dma::check_memlock(len as u64) {
                        return e;
                    }
                    Error::Os { op: format!("{what} (out of memory or over RLIMIT_MEMLOCK)"), source }
                }
                Some(libc::ENOSPC) => Error::Os {
                    op: format!("{what} (too many DMA mappings: raise vfio_iommu_type1's dma_entry_limit)"),
                    source,
                },
                Some(libc::EEXIST) => Error::Os { op: format!("{what} (overlaps an existing mapping)"), source },
                _ => Error::Os { op: what, source },
            }
        })
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<()> {
        let what = format!("{}: VFIO_IOMMU_UNMAP_DMA iova {iova:#x} len {len:#x}", self.name);
        let done = sys::unmap_dma(self.container_fd(), iova, len as u64)
            .map_err(|source| Error::Os { op: what.clone(), source })?;
        if done != len as u64 {
            return Err(Error::Os {
                op: what,
                source: std::io::Error::other(format!("unmapped {done:#x} bytes, not {len:#x}")),
            });
        }
        Ok(())
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        // Empty when the kernel has no IOVA-range capability: DmaSpace then uses the legacy
        // ranges (crate::dma::LEGACY_IOVA_RANGES).
        self.iommu.iova_ranges.clone()
    }

    fn iommu_page_sizes(&self) -> u64 {
        self.iommu.page_sizes
    }

    fn irq_count(&self) -> u32 {
        self.msix_count
    }

    fn irq_eventfd(&self, vector: u32) -> Option<Arc<OwnedFd>> {
        self.irq_state().fds.get(vector as usize).cloned()
    }

    fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.config_check(offset, buf.len())?;
        sys::pread_exact(self.device_fd(), buf, at).map_err(|source| Error::Os {
            op: format!("{}: config read of {} bytes at {offset:#x}", self.name, buf.len()),
            source,
        })
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.config_check(offset, data.len())?;
        sys::pwrite_exact(self.device_fd(), data, at).map_err(|source| Error::Os {
            op: format!("{}: config write of {} bytes at {offset:#x}", self.name, data.len()),
            source,
        })
    }

    fn reset(&self) -> Result<()> {
        if !self.supports_reset() {
            let pci = &self.info.pci;
            let methods = std::fs::read_to_string(sysfs::device_dir(Path::new("/sys"), pci).join("reset_method"))
                .map(|m| m.trim().to_string())
                .unwrap_or_default();
            return Err(if methods.is_empty() {
                device_error(
                    pci,
                    "the device offers no reset through VFIO: the kernel has no reset method for it (no FLR, no PM reset, and no bus reset since it is not alone below a bridge)",
                    "a function alone below a PCIe port gets a secondary bus reset; otherwise power-cycle the slot or reboot",
                )
            } else {
                device_error(
                    pci,
                    format!(
                        "the device offers no reset through VFIO: the kernel lists reset methods `{methods}`, but the reset vfio-pci tried when the device was opened failed"
                    ),
                    format!(
                        "see `dmesg`; `echo 1 > /sys/bus/pci/devices/{pci}/reset` shows the error; /sys/bus/pci/devices/{pci}/reset_method selects the methods"
                    ),
                )
            });
        }
        sys::device_reset(self.device_fd())
            .map_err(|source| Error::Os { op: format!("{}: VFIO_DEVICE_RESET", self.name), source })
    }
}

impl Drop for VfioBackend {
    fn drop(&mut self) {
        let mut st = std::mem::take(&mut *self.irq_state());
        if let Err(e) = self.disable_locked(&mut st) {
            eprintln!("umlx: {e}");
        }
        // The remaining fields drop in declaration order: BAR0, eventfds, device, container.
    }
}
