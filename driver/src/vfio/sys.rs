//! Raw VFIO ioctls and file-descriptor calls that vfio-ioctls does not offer in a usable form.
//!
//! - `VFIO_GROUP_GET_STATUS` (the kernel's own viability verdict, for diagnostics);
//! - `VFIO_IOMMU_GET_INFO` with the capability chain (IOVA ranges, DMA mappings available);
//! - `VFIO_DEVICE_GET_INFO`, `VFIO_DEVICE_GET_REGION_INFO`, `VFIO_DEVICE_GET_IRQ_INFO`;
//! - `VFIO_DEVICE_SET_IRQS` with eventfds, and disabling an IRQ index;
//! - `VFIO_DEVICE_RESET` with its error (vfio-ioctls drops it);
//! - `VFIO_IOMMU_MAP_DMA` / `VFIO_IOMMU_UNMAP_DMA` with the OS error kept;
//! - exact `pread`/`pwrite` on the device fd (config-space access; short transfers are errors);
//! - `eventfd`.
//!
//! The numbers and layouts are those of `<linux/vfio.h>` (`_IO(';', 100 + n)`; the IOMMU ioctls
//! on the container fd reuse 112..114). The ioctl arguments are built as plain `u32`/`u64`
//! buffers or `#[repr(C)]` structs declared here, and the kernel's answers are parsed with
//! bounds checks (a capability chain is never trusted to stay inside its buffer).
//!
//! # Unsafe
//!
//! One of the driver's eight unsafe modules (`backend`, `datapath`, `dma`, `event`, `simdev`,
//! `vfio`, `vfio::sys`, `vfio::mmio`): every unsafe block has a `SAFETY:` comment.

use crate::backend::IovaRange;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use zerocopy::IntoBytes;

const VFIO_TYPE: u32 = b';' as u32;
const VFIO_BASE: u32 = 100;

const fn vfio_io(nr: u32) -> libc::Ioctl {
    ((VFIO_TYPE << 8) | (VFIO_BASE + nr)) as libc::Ioctl
}

const VFIO_GROUP_GET_STATUS: libc::Ioctl = vfio_io(3);
const VFIO_DEVICE_GET_INFO: libc::Ioctl = vfio_io(7);
const VFIO_DEVICE_GET_REGION_INFO: libc::Ioctl = vfio_io(8);
const VFIO_DEVICE_GET_IRQ_INFO: libc::Ioctl = vfio_io(9);
const VFIO_DEVICE_SET_IRQS: libc::Ioctl = vfio_io(10);
const VFIO_DEVICE_RESET: libc::Ioctl = vfio_io(11);
const VFIO_IOMMU_GET_INFO: libc::Ioctl = vfio_io(12);
const VFIO_IOMMU_MAP_DMA: libc::Ioctl = vfio_io(13);
const VFIO_IOMMU_UNMAP_DMA: libc::Ioctl = vfio_io(14);

const VFIO_IOMMU_INFO_PGSIZES: u32 = 1 << 0;
const VFIO_IOMMU_INFO_CAPS: u32 = 1 << 1;
const VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE: u16 = 1;
const VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL: u16 = 3;

const VFIO_DMA_MAP_FLAG_READ: u32 = 1 << 0;
const VFIO_DMA_MAP_FLAG_WRITE: u32 = 1 << 1;

const VFIO_IRQ_SET_DATA_NONE: u32 = 1 << 0;
const VFIO_IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
const VFIO_IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;

/// `struct vfio_device_info` (24 bytes).
#[repr(C)]
#[derive(Default)]
struct RawDeviceInfo {
    argsz: u32,
    flags: u32,
    num_regions: u32,
    num_irqs: u32,
    cap_offset: u32,
    pad: u32,
}

/// `struct vfio_region_info` (32 bytes).
#[repr(C)]
#[derive(Default)]
struct RawRegionInfo {
    argsz: u32,
    flags: u32,
    index: u32,
    cap_offset: u32,
    size: u64,
    offset: u64,
}

/// `struct vfio_irq_info` (16 bytes).
#[repr(C)]
#[derive(Default)]
struct RawIrqInfo {
    argsz: u32,
    flags: u32,
    index: u32,
    count: u32,
}

/// `struct vfio_iommu_type1_dma_map` (32 bytes).
#[repr(C)]
struct RawDmaMap {
    argsz: u32,
    flags: u32,
    vaddr: u64,
    iova: u64,
    size: u64,
}

/// `struct vfio_iommu_type1_dma_unmap` (24 bytes, no bitmap).
#[repr(C)]
struct RawDmaUnmap {
    argsz: u32,
    flags: u32,
    iova: u64,
    size: u64,
}

/// Device facts from `VFIO_DEVICE_GET_INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `VFIO_DEVICE_FLAGS_*` (bit 0 RESET, bit 1 PCI).
    pub flags: u32,
    /// Number of regions (PCI: BAR0..5, ROM, CONFIG, VGA, device specific).
    pub num_regions: u32,
    /// Number of IRQ indexes (PCI: INTx, MSI, MSI-X, ERR, REQ).
    pub num_irqs: u32,
}

/// `VFIO_DEVICE_FLAGS_RESET`: the device supports `VFIO_DEVICE_RESET`.
pub const DEVICE_FLAGS_RESET: u32 = 1 << 0;

/// `VFIO_REGION_INFO_CAP_SPARSE_MMAP`: only the listed areas of the region may be mmap'd.
const VFIO_REGION_INFO_CAP_SPARSE_MMAP: u16 = 1;
/// `VFIO_REGION_INFO_CAP_MSIX_MAPPABLE`: the MSI-X table in this BAR may be mmap'd.
const VFIO_REGION_INFO_CAP_MSIX_MAPPABLE: u16 = 3;

/// One area of a region that may be mmap'd (`struct vfio_region_sparse_mmap_area`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseArea {
    /// Offset in the region.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// A device region as `VFIO_DEVICE_GET_REGION_INFO` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region index (0..=5 BARs, 6 ROM, 7 config space, 8 VGA).
    pub index: u32,
    /// `VFIO_REGION_INFO_FLAG_*`: bit 0 READ, bit 1 WRITE, bit 2 MMAP, bit 3 CAPS.
    pub flags: u32,
    /// Size in bytes (0: the region does not exist, e.g. an unused BAR).
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite/mmap).
    pub offset: u64,
    /// With the sparse-mmap capability: the only areas that may be mmap'd (kernels that keep
    /// the MSI-X table out of the mapping report it); the rest is reached by pread/pwrite.
    pub sparse_mmap: Option<Vec<SparseArea>>,
    /// The MSI-X-mappable capability: the whole BAR may be mapped despite its MSI-X table.
    pub msix_mappable: bool,
}

impl RegionInfo {
    /// `VFIO_REGION_INFO_FLAG_READ`.
    pub const FLAG_READ: u32 = 1 << 0;
    /// `VFIO_REGION_INFO_FLAG_WRITE`.
    pub const FLAG_WRITE: u32 = 1 << 1;
    /// `VFIO_REGION_INFO_FLAG_MMAP`.
    pub const FLAG_MMAP: u32 = 1 << 2;
    /// `VFIO_REGION_INFO_FLAG_CAPS`: a capability chain follows.
    pub const FLAG_CAPS: u32 = 1 << 3;

    /// Whether the region can be mmap'd.
    pub fn mappable(&self) -> bool {
        self.flags & Self::FLAG_MMAP != 0
    }
}

/// An IRQ index as `VFIO_DEVICE_GET_IRQ_INFO` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqInfo {
    /// IRQ index (0 INTx, 1 MSI, 2 MSI-X, 3 ERR, 4 REQ).
    pub index: u32,
    /// `VFIO_IRQ_INFO_*`: bit 0 EVENTFD, bit 1 MASKABLE, bit 2 AUTOMASKED, bit 3 NORESIZE.
    pub flags: u32,
    /// Number of vectors.
    pub count: u32,
}

impl IrqInfo {
    /// `VFIO_IRQ_INFO_EVENTFD`: the index can signal eventfds.
    pub const FLAG_EVENTFD: u32 = 1 << 0;
}

/// What `VFIO_IOMMU_GET_INFO` reports about the container's IOMMU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IommuInfo {
    /// Supported page sizes (bit n: 2^n bytes); 0 if the kernel did not report them.
    pub page_sizes: u64,
    /// Usable IOVA ranges (inclusive); empty if the kernel has no IOVA-range capability.
    pub iova_ranges: Vec<IovaRange>,
    /// DMA mappings still available (`dma_entry_limit` minus mappings made), if reported.
    pub dma_avail: Option<u32>,
}

/// `ioctl(fd, req, arg)`, its failure as an `io::Error`.
///
/// # Safety
/// `arg` must point to an argument buffer valid for reads and writes of as many bytes as the
/// kernel reads or writes for request `req` (for the VFIO requests, the `argsz` the buffer
/// starts with, which must not exceed the buffer), and nothing else may access the buffer
/// during the call.
unsafe fn ioctl_ptr<T>(fd: BorrowedFd<'_>, req: libc::Ioctl, arg: *mut T) -> io::Result<libc::c_int> {
    // SAFETY: the caller upholds the contract above.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// `VFIO_GROUP_FLAGS_VIABLE`: every device of the group is bound to a VFIO driver or to none.
pub const GROUP_FLAGS_VIABLE: u32 = 1 << 0;
/// `VFIO_GROUP_FLAGS_CONTAINER_SET`: the group is attached to a container.
pub const GROUP_FLAGS_CONTAINER_SET: u32 = 1 << 1;

/// `VFIO_GROUP_GET_STATUS` on an open group fd: the `VFIO_GROUP_FLAGS_*` bits.
pub fn group_status(group: BorrowedFd<'_>) -> io::Result<u32> {
    // struct vfio_group_status: argsz u32, flags u32.
    let mut buf: [u32; 2] = [8, 0];
    // SAFETY: `buf` is a whole vfio_group_status (8 bytes, argsz 8), owned here.
    unsafe { ioctl_ptr(group, VFIO_GROUP_GET_STATUS, buf.as_mut_ptr()) }?;
    Ok(buf[1])
}

/// `VFIO_DEVICE_GET_INFO`.
pub fn device_info(device: BorrowedFd<'_>) -> io::Result<DeviceInfo> {
    let mut info = RawDeviceInfo { argsz: size_of::<RawDeviceInfo>() as u32, ..Default::default() };
    // SAFETY: `info` is a whole vfio_device_info with argsz its size, owned here.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_INFO, &mut info) }?;
    Ok(DeviceInfo { flags: info.flags, num_regions: info.num_regions, num_irqs: info.num_irqs })
}

/// `VFIO_DEVICE_GET_REGION_INFO` for region `index`, with its capabilities.
pub fn region_info(device: BorrowedFd<'_>, index: u32) -> io::Result<RegionInfo> {
    // struct vfio_region_info: argsz, flags, index, cap_offset (u32), size, offset (u64).
    let b = info_with_caps(device, VFIO_DEVICE_GET_REGION_INFO, &[0, index], size_of::<RawRegionInfo>())?;
    Ok(parse_region_info(index, &b))
}

/// Parses a `vfio_region_info` buffer the kernel filled (host byte order), with its capability
/// chain: the sparse-mmap areas and whether the MSI-X table may be mapped.
pub fn parse_region_info(index: u32, b: &[u8]) -> RegionInfo {
    let flags = get_u32(b, 4).unwrap_or(0);
    let mut info = RegionInfo {
        index,
        flags,
        size: get_u64(b, 16).unwrap_or(0),
        offset: get_u64(b, 24).unwrap_or(0),
        sparse_mmap: None,
        msix_mappable: false,
    };
    if flags & RegionInfo::FLAG_CAPS == 0 {
        return info;
    }
    for (id, off) in caps(b, get_u32(b, 12).unwrap_or(0)) {
        match id {
            VFIO_REGION_INFO_CAP_SPARSE_MMAP => {
                // Header, nr_areas u32, reserved u32, then (offset u64, size u64) per area.
                let n = get_u32(b, off + 8).unwrap_or(0) as usize;
                let mut areas = Vec::new();
                for i in 0..n.min(4096) {
                    let at = off + 16 + 16 * i;
                    let (Some(offset), Some(size)) = (get_u64(b, at), get_u64(b, at + 8)) else { break };
                    if size != 0 && offset.checked_add(size).is_some_and(|end| end <= info.size) {
                        areas.push(SparseArea { offset, size });
                    }
                }
                areas.sort_by_key(|a| a.offset);
                info.sparse_mmap = Some(areas);
            }
            VFIO_REGION_INFO_CAP_MSIX_MAPPABLE => info.msix_mappable = true,
            _ => {}
        }
    }
    info
}

/// `VFIO_DEVICE_GET_IRQ_INFO` for IRQ index `index`.
pub fn irq_info(device: BorrowedFd<'_>, index: u32) -> io::Result<IrqInfo> {
    let mut info = RawIrqInfo { argsz: size_of::<RawIrqInfo>() as u32, index, ..Default::default() };
    // SAFETY: `info` is a whole vfio_irq_info with argsz its size, owned here.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_GET_IRQ_INFO, &mut info) }?;
    Ok(IrqInfo { index, flags: info.flags, count: info.count })
}

/// `VFIO_DEVICE_SET_IRQS` (DATA_EVENTFD | ACTION_TRIGGER): vector `start + i` signals `fds[i]`.
/// Enables the index if it was off. The kernel takes its own reference to each eventfd, so
/// closing one later only stops it from being signalled.
pub fn set_irq_eventfds(device: BorrowedFd<'_>, index: u32, start: u32, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    // struct vfio_irq_set: argsz, flags, index, start, count, then `count` s32 fds.
    let mut buf: Vec<u32> = Vec::with_capacity(5 + fds.len());
    let argsz = (4 * (5 + fds.len())) as u32;
    buf.extend_from_slice(&[
        argsz,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        index,
        start,
        fds.len() as u32,
    ]);
    buf.extend(fds.iter().map(|fd| fd.as_raw_fd() as u32));
    // SAFETY: `buf` is a whole vfio_irq_set (header and its data) with argsz its length in
    // bytes, owned here.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_SET_IRQS, buf.as_mut_ptr()) }?;
    Ok(())
}

/// `VFIO_DEVICE_SET_IRQS` (DATA_NONE | ACTION_TRIGGER, count 0): disables IRQ index `index`.
pub fn disable_irqs(device: BorrowedFd<'_>, index: u32) -> io::Result<()> {
    let mut buf: [u32; 5] = [20, VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, index, 0, 0];
    // SAFETY: `buf` is a whole vfio_irq_set (header and its data) with argsz its length in
    // bytes, owned here.
    unsafe { ioctl_ptr(device, VFIO_DEVICE_SET_IRQS, buf.as_mut_ptr()) }?;
    Ok(())
}

/// `VFIO_DEVICE_RESET`.
pub fn device_reset(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: VFIO_DEVICE_RESET takes no argument.
    let rc = unsafe { libc::ioctl(device.as_raw_fd(), VFIO_DEVICE_RESET) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `VFIO_IOMMU_GET_INFO` on the container, following the capability chain.
pub fn iommu_info(container: BorrowedFd<'_>) -> io::Result<IommuInfo> {
    // struct vfio_iommu_type1_info: argsz u32, flags u32, iova_pgsizes u64, cap_offset u32,
    // pad u32 (24 bytes), then the capability chain.
    info_with_caps(container, VFIO_IOMMU_GET_INFO, &[], 24).map(|b| parse_iommu_info(&b))
}

/// Runs a VFIO `*_GET_INFO` ioctl whose structure starts with `argsz` and may be followed by a
/// capability chain: first with `len` bytes (after `argsz`, the words in `head` are written:
/// e.g. flags and an index), again with the larger `argsz` the kernel answers when the chain
/// does not fit. Returns the bytes the kernel filled. The buffer is u64 words for alignment.
fn info_with_caps(fd: BorrowedFd<'_>, request: libc::Ioctl, head: &[u32], len: usize) -> io::Result<Vec<u8>> {
    let mut len = len;
    let mut rounds = 0;
    loop {
        let mut words = vec![0u64; len.div_ceil(8).max(head.len().div_ceil(2) + 1)];
        let header = std::iter::once(len as u32).chain(head.iter().copied());
        for (slot, v) in words.as_mut_bytes().chunks_exact_mut(4).zip(header) {
            slot.copy_from_slice(&v.to_ne_bytes());
        }
        // SAFETY: `words` holds at least `len` bytes, the argsz written into its first word,
        // and is owned here.
        unsafe { ioctl_ptr(fd, request, words.as_mut_ptr()) }?;
        let bytes = words.as_bytes();
        let argsz = get_u32(bytes, 0).unwrap_or(0) as usize;
        rounds += 1;
        if argsz <= len || argsz > (1 << 20) || rounds == 4 {
            return Ok(bytes[..len].to_vec());
        }
        len = argsz;
    }
}

/// The capabilities of a VFIO info buffer `b`, from the one at byte `first`: (id, offset of its
/// header) for each `vfio_info_cap_header` (id u16, version u16, next u32) that lies in the
/// buffer. A chain that leaves the buffer ends; a loop ends after 32 hops.
fn caps(b: &[u8], first: u32) -> impl Iterator<Item = (u16, usize)> + '_ {
    let mut off = first as usize;
    let mut hops = 0;
    std::iter::from_fn(move || {
        if off == 0 || hops == 32 {
            return None;
        }
        hops += 1;
        let (id, next) = (get_u16(b, off)?, get_u32(b, off + 4)?);
        let here = off;
        off = next as usize;
        Some((id, here))
    })
}

fn get_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off.checked_add(2)?)?.try_into().ok()?))
}

fn get_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

fn get_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

/// Parses a `vfio_iommu_type1_info` buffer the kernel filled (host byte order), with its
/// capability chain. Anything pointing outside the buffer is ignored.
pub fn parse_iommu_info(b: &[u8]) -> IommuInfo {
    let mut info = IommuInfo::default();
    let flags = get_u32(b, 4).unwrap_or(0);
    if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
        info.page_sizes = get_u64(b, 8).unwrap_or(0);
    }
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return info;
    }
    for (id, off) in caps(b, get_u32(b, 16).unwrap_or(0)) {
        match id {
            VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                let n = get_u32(b, off + 8).unwrap_or(0) as usize;
                for i in 0..n.min(4096) {
                    let at = off + 16 + 16 * i;
                    match (get_u64(b, at), get_u64(b, at + 8)) {
                        (Some(start), Some(end)) if start <= end => info.iova_ranges.push(IovaRange { start, end }),
                        (Some(_), Some(_)) => {}
                        _ => break,
                    }
                }
            }
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => info.dma_avail = get_u32(b, off + 8),
            _ => {}
        }
    }
    info
}

/// `VFIO_IOMMU_MAP_DMA` (READ | WRITE) of `size` bytes at `vaddr` to `iova`.
///
/// # Safety
/// The memory `[vaddr, vaddr+size)` must stay allocated and in place until it is unmapped from
/// the IOMMU, and no Rust references into it may exist while it is mapped: the device can
/// read and write it at any time.
pub unsafe fn map_dma(container: BorrowedFd<'_>, vaddr: *mut u8, iova: u64, size: u64) -> io::Result<()> {
    let mut map = RawDmaMap {
        argsz: size_of::<RawDmaMap>() as u32,
        flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        vaddr: vaddr as u64,
        iova,
        size,
    };
    // SAFETY: `map` is a whole vfio_iommu_type1_dma_map with argsz its size, owned here; the
    // memory it names is the caller's to vouch for (see above).
    unsafe { ioctl_ptr(container, VFIO_IOMMU_MAP_DMA, &mut map) }?;
    Ok(())
}

/// `VFIO_IOMMU_UNMAP_DMA` of `[iova, iova+size)`; returns the number of bytes unmapped.
pub fn unmap_dma(container: BorrowedFd<'_>, iova: u64, size: u64) -> io::Result<u64> {
    let mut unmap = RawDmaUnmap { argsz: size_of::<RawDmaUnmap>() as u32, flags: 0, iova, size };
    // SAFETY: `unmap` is a whole vfio_iommu_type1_dma_unmap with argsz its size, owned here.
    unsafe { ioctl_ptr(container, VFIO_IOMMU_UNMAP_DMA, &mut unmap) }?;
    Ok(unmap.size)
}

/// Reads exactly `buf.len()` bytes at file offset `offset`; a short read is an error.
pub fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    // SAFETY: buf is a valid, writable buffer of buf.len() bytes.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read: {n} of {} bytes", buf.len())));
    }
    Ok(())
}

/// Writes exactly `data` at file offset `offset`; a short write is an error.
pub fn pwrite_exact(fd: BorrowedFd<'_>, data: &[u8], offset: u64) -> io::Result<()> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    // SAFETY: data is a valid buffer of data.len() bytes.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), off) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != data.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short write: {n} of {} bytes", data.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers() {
        assert_eq!(VFIO_GROUP_GET_STATUS, 0x3b67);
        assert_eq!(VFIO_DEVICE_GET_INFO, 0x3b6b);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
        assert_eq!(size_of::<RawRegionInfo>(), 32);
        assert_eq!(size_of::<RawDmaMap>(), 32);
        assert_eq!(size_of::<RawDmaUnmap>(), 24);
        assert_eq!(size_of::<RawDeviceInfo>(), 24);
    }

    fn put32(b: &mut Vec<u8>, v: u32) {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    fn put64(b: &mut Vec<u8>, v: u64) {
        b.extend_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn region_info_with_sparse_mmap_and_msix_caps() {
        // vfio_region_info (32 bytes): argsz, flags READ|WRITE|MMAP|CAPS, index 0, cap_offset
        // 32, size 64 KiB, offset 0x100_0000; then SPARSE_MMAP at 32 (two areas around the
        // MSI-X table page, and one outside the region, which is dropped) and MSIX_MAPPABLE.
        let mut b = Vec::new();
        put32(&mut b, 112);
        put32(&mut b, 0xf);
        put32(&mut b, 0);
        put32(&mut b, 32);
        put64(&mut b, 0x1_0000);
        put64(&mut b, 0x100_0000);
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        put32(&mut b, 96);
        put32(&mut b, 3);
        put32(&mut b, 0);
        put64(&mut b, 0x3000);
        put64(&mut b, 0xd000);
        put64(&mut b, 0);
        put64(&mut b, 0x2000);
        put64(&mut b, 0x1_0000);
        put64(&mut b, 0x1000);
        b.extend_from_slice(&3u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        put32(&mut b, 0);
        let info = parse_region_info(0, &b);
        assert_eq!((info.flags, info.size, info.offset), (0xf, 0x1_0000, 0x100_0000));
        assert!(info.mappable() && info.msix_mappable);
        assert_eq!(
            info.sparse_mmap,
            Some(vec![SparseArea { offset: 0, size: 0x2000 }, SparseArea { offset: 0x3000, size: 0xd000 }])
        );
        // Without the CAPS flag the chain is not read.
        let mut plain = b.clone();
        plain[4..8].copy_from_slice(&7u32.to_ne_bytes());
        let info = parse_region_info(0, &plain);
        assert_eq!((info.sparse_mmap, info.msix_mappable), (None, false));
    }

    #[test]
    fn iommu_info_chain() {
        // Header (24 bytes), DMA_AVAIL cap at 24 (12 bytes, padded to 16), IOVA_RANGE at 40.
        let mut b = Vec::new();
        put32(&mut b, 88);
        put32(&mut b, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS);
        put64(&mut b, 0x4020_1000);
        put32(&mut b, 24);
        put32(&mut b, 0);
        // DMA_AVAIL: id 3, version 1, next 40, avail 65000, pad
        b.extend_from_slice(&3u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        put32(&mut b, 40);
        put32(&mut b, 65000);
        put32(&mut b, 0);
        // IOVA_RANGE: id 1, version 1, next 0, nr 2, reserved, ranges
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        put32(&mut b, 0);
        put32(&mut b, 2);
        put32(&mut b, 0);
        put64(&mut b, 0);
        put64(&mut b, 0xfedf_ffff);
        put64(&mut b, 0xfef0_0000);
        put64(&mut b, (1 << 48) - 1);
        let info = parse_iommu_info(&b);
        assert_eq!(info.page_sizes, 0x4020_1000);
        assert_eq!(info.dma_avail, Some(65000));
        assert_eq!(
            info.iova_ranges,
            vec![IovaRange { start: 0, end: 0xfedf_ffff }, IovaRange { start: 0xfef0_0000, end: (1 << 48) - 1 }]
        );
        // A chain pointing outside the buffer, or looping, ends quietly.
        let mut bad = b.clone();
        bad[16..20].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_iommu_info(&bad).iova_ranges.is_empty());
        let mut looping = b.clone();
        looping[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(parse_iommu_info(&looping).dma_avail, Some(65000));
        // A truncated range list keeps what fits.
        let cut = &b[..b.len() - 8];
        assert_eq!(parse_iommu_info(cut).iova_ranges.len(), 1);
    }
}
