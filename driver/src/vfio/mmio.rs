//! A mapped device BAR and its register accessors.
//!
//! The BAR is mmap'd (`MAP_SHARED`) from the VFIO device fd at the region's offset; VFIO maps it
//! uncached. When the kernel lets only some areas be mapped (the sparse-mmap capability, which
//! older kernels report for a BAR holding the MSI-X table), those areas are mapped over a
//! reserved range and the rest, the holes, is reached by `pread`/`pwrite` on the device fd. Every accessor is one inlined volatile load or store of the
//! register's width: `read32`/`write32` convert to and from the device's big-endian order,
//! `write64` is a single 64-bit store of the big-endian encoding (the doorbell format), and the
//! `*_le` accessors are for little-endian devices (the VM self-test's QEMU `edu` and `e1000e`).
//!
//! Contract: `offset` is inside the BAR and naturally aligned for the access. The check is made
//! in every build, not only in debug builds: these are safe functions and an access outside the
//! mapping would be undefined behaviour. It costs one compare and a never-taken branch to a cold
//! panic (a violation is a driver bug).
//!
//! # Unsafe
//!
//! One of the driver's eight unsafe modules (`backend`, `datapath`, `dma`, `event`, `simdev`,
//! `vfio`, `vfio::sys`, `vfio::mmio`): every unsafe block has a `SAFETY:` comment.

use super::sys::SparseArea;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

/// A device BAR mapped into the process.
#[derive(Debug)]
pub struct Bar {
    ptr: NonNull<u8>,
    len: usize,
    index: u32,
    /// `[start, end)` byte ranges of the BAR that are not mapped (a sparse mapping: the kernel
    /// keeps the MSI-X table out of mmap on older kernels); accesses there go through
    /// `pread`/`pwrite` on the device fd. Empty for a whole mapping.
    holes: Box<[(usize, usize)]>,
    /// A duplicate of the device fd (owned, so it outlives every access) and the region's
    /// offset in it, for the holes.
    fd: OwnedFd,
    region_offset: u64,
}

// SAFETY: the mapping has no thread affinity; all access is volatile through raw pointers
// (device registers, no Rust references) or pread/pwrite on an owned fd, so it may be used from
// any thread.
unsafe impl Send for Bar {}
// SAFETY: as for Send; `&self` accessors only do single volatile accesses within bounds.
unsafe impl Sync for Bar {}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr + len) is the reservation made in `map_areas`, with the device
        // areas mapped over it; nothing refers to it after the Bar is gone.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Bar {
    /// Maps `len` bytes of the device fd at `offset` (a VFIO region offset) read/write shared.
    pub(crate) fn map(device: BorrowedFd<'_>, index: u32, offset: u64, len: usize) -> io::Result<Bar> {
        Bar::map_areas(device, index, offset, len, &[SparseArea { offset: 0, size: len as u64 }])
    }

    /// Maps the `areas` of a `len`-byte region at `offset` of the device fd (sorted, page
    /// aligned, inside the region: what the sparse-mmap capability lists); the rest of the BAR
    /// is reached through `pread`/`pwrite` (see [`Bar::is_mapped`]).
    pub(crate) fn map_areas(
        device: BorrowedFd<'_>,
        index: u32,
        offset: u64,
        len: usize,
        areas: &[SparseArea],
    ) -> io::Result<Bar> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "BAR has size 0"));
        }
        let page = 4096u64;
        let mut holes = Vec::new();
        let mut at = 0u64;
        for a in areas {
            let end = a.offset.checked_add(a.size).filter(|&e| e <= len as u64);
            // (A BAR smaller than a page, or an area ending at the BAR's end, may end unaligned.)
            let unaligned_end = a.size % page != 0 && end != Some(len as u64);
            if a.offset < at || a.offset % page != 0 || unaligned_end || end.is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "BAR{index} mmap area {:#x}+{:#x} is unaligned, overlapping or outside the BAR",
                        a.offset, a.size
                    ),
                ));
            }
            if a.offset > at {
                holes.push((at as usize, a.offset as usize));
            }
            at = a.offset + a.size;
        }
        if at < len as u64 {
            holes.push((at as usize, len));
        }
        // The BAR keeps its own descriptor (F_DUPFD_CLOEXEC), for pread/pwrite of the holes.
        let fd = device.try_clone_to_owned()?;
        // Reserve the BAR's address range, then put the device's areas over it.
        // SAFETY: a new anonymous inaccessible mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap of BAR returned a null pointer"))?;
        let bar = Bar { ptr, len, index, holes: holes.into_boxed_slice(), fd, region_offset: offset };
        for a in areas {
            // SAFETY: [base + a.offset, + a.size) lies inside the reservation (checked above),
            // which this Bar owns; MAP_FIXED replaces only that part of it.
            let got = unsafe {
                libc::mmap(
                    base.cast::<u8>().add(a.offset as usize).cast(),
                    a.size as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    device.as_raw_fd(),
                    (offset + a.offset) as libc::off_t,
                )
            };
            if got == libc::MAP_FAILED {
                return Err(io::Error::last_os_error()); // `bar` unmaps the reservation
            }
        }
        Ok(bar)
    }

    /// Whether `[offset, offset + size)` is in the mapping (not in a hole of a sparse one).
    #[inline(always)]
    pub fn is_mapped(&self, offset: usize, size: usize) -> bool {
        !self.holes.iter().any(|&(s, e)| offset < e && offset + size > s)
    }

    /// Reads `buf.len()` bytes at `offset` through the device fd (a hole); all ones when the
    /// read fails, as a PCI function that no longer answers reads (the health check's sign).
    #[cold]
    fn pread(&self, offset: usize, buf: &mut [u8]) {
        let pos = (self.region_offset + offset as u64) as libc::off_t;
        // SAFETY: `buf` is writable for its length; the fd is owned by self.
        let n = unsafe { libc::pread(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), pos) };
        if n != buf.len() as isize {
            buf.fill(0xff);
        }
    }

    /// Writes `data` at `offset` through the device fd (a hole). A failed write is lost, as a
    /// posted write to a function that no longer answers is; the health check reports that.
    #[cold]
    fn pwrite(&self, offset: usize, data: &[u8]) {
        let pos = (self.region_offset + offset as u64) as libc::off_t;
        // SAFETY: `data` is readable for its length; the fd is owned by self.
        unsafe { libc::pwrite(self.fd.as_raw_fd(), data.as_ptr().cast(), data.len(), pos) };
    }

    /// Length of the mapping in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapped BAR is never empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The BAR (region) index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The start of the mapping, as a raw pointer (never turn it into a reference).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The 4 KiB page at `offset` (page-aligned, wholly inside the BAR) as a raw pointer into
    /// the mapping, valid as long as `self`; `None` otherwise.
    pub fn page(&self, offset: usize) -> Option<NonNull<u8>> {
        if offset & 0xfff != 0 || offset.checked_add(4096).is_none_or(|e| e > self.len) || !self.is_mapped(offset, 4096)
        {
            return None;
        }
        // SAFETY: offset + 4096 <= len (checked), so the address lies in the mapping.
        NonNull::new(unsafe { self.ptr.as_ptr().add(offset) })
    }

    #[inline(always)]
    fn check(&self, offset: usize, size: usize) {
        // len >= 4096 is not guaranteed for every BAR; compare without underflow.
        if offset & (size - 1) != 0 || size > self.len || offset > self.len - size {
            bar_violation(self.index, offset, size, self.len);
        }
    }

    /// Reads the 32-bit big-endian register at `offset`: one volatile 32-bit load.
    #[inline]
    pub fn read32(&self, offset: usize) -> u32 {
        u32::from_be(self.read32_raw(offset))
    }

    /// Writes the 32-bit big-endian register at `offset`: one volatile 32-bit store.
    #[inline]
    pub fn write32(&self, offset: usize, value: u32) {
        self.write32_raw(offset, value.to_be())
    }

    /// Writes the big-endian encoding of `value` at `offset` as one volatile 64-bit store (the
    /// doorbell format: the device sees the high dword at `offset`, the low one at `offset+4`).
    #[inline]
    pub fn write64(&self, offset: usize, value: u64) {
        self.write64_raw(offset, value.to_be())
    }

    /// Writes `data` (each word big-endian encoded, as [`Bar::write64`]) at `offset` as
    /// consecutive 64-bit stores: a BlueFlame copy. A write-combining mapping would need
    /// `dma::mmio_flush_writes` after it; VFIO's mapping is uncached.
    #[inline]
    pub fn write_block(&self, offset: usize, data: &[u64]) {
        let bytes = data.len().wrapping_mul(8);
        if offset & 7 != 0 || data.len() > self.len / 8 || offset > self.len - bytes {
            bar_violation(self.index, offset, bytes, self.len);
        }
        if !self.is_mapped(offset, bytes) {
            for (i, w) in data.iter().enumerate() {
                self.write64(offset + 8 * i, *w);
            }
            return;
        }
        for (i, w) in data.iter().enumerate() {
            // SAFETY: offset + 8*i + 8 <= offset + bytes <= len (checked above), 8-aligned.
            unsafe { self.ptr.as_ptr().add(offset + 8 * i).cast::<u64>().write_volatile(w.to_be()) }
        }
    }

    /// Reads the 32-bit little-endian register at `offset` (for little-endian devices).
    #[inline]
    pub fn read32_le(&self, offset: usize) -> u32 {
        u32::from_le(self.read32_raw(offset))
    }

    /// Writes the 32-bit little-endian register at `offset` (for little-endian devices).
    #[inline]
    pub fn write32_le(&self, offset: usize, value: u32) {
        self.write32_raw(offset, value.to_le())
    }

    /// Writes the 64-bit little-endian register at `offset` as one store.
    #[inline]
    pub fn write64_le(&self, offset: usize, value: u64) {
        self.write64_raw(offset, value.to_le())
    }

    #[inline(always)]
    fn read32_raw(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        if !self.is_mapped(offset, 4) {
            let mut b = [0u8; 4];
            self.pread(offset, &mut b);
            return u32::from_ne_bytes(b);
        }
        // SAFETY: in bounds and 4-aligned (checked; the mapping is page-aligned); the mapping
        // lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() }
    }

    #[inline(always)]
    fn write32_raw(&self, offset: usize, raw: u32) {
        self.check(offset, 4);
        if !self.is_mapped(offset, 4) {
            return self.pwrite(offset, &raw.to_ne_bytes());
        }
        // SAFETY: in bounds and 4-aligned (checked; the mapping is page-aligned); the mapping
        // lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().write_volatile(raw) }
    }

    #[inline(always)]
    fn write64_raw(&self, offset: usize, raw: u64) {
        self.check(offset, 8);
        if !self.is_mapped(offset, 8) {
            return self.pwrite(offset, &raw.to_ne_bytes());
        }
        // SAFETY: in bounds and 8-aligned (checked; the mapping is page-aligned); the mapping
        // lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).cast::<u64>().write_volatile(raw) }
    }
}

/// The accessor contract was broken: a driver bug.
#[cold]
#[inline(never)]
#[track_caller]
fn bar_violation(index: u32, offset: usize, size: usize, len: usize) -> ! {
    panic!(
        "BAR{index} access of {size} bytes at offset {offset:#x} is outside the BAR ({len:#x} bytes) or misaligned: driver bug"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd};

    /// A 16 KiB memfd standing in for a device fd, its region at fd offset 0x4000.
    fn device() -> OwnedFd {
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"umlx-bar".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: `fd` is fresh and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on an fd we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 0x8000) }, 0);
        fd
    }

    fn file_u32(fd: &OwnedFd, pos: u64) -> u32 {
        let mut b = [0u8; 4];
        // SAFETY: `b` is writable for 4 bytes.
        assert_eq!(unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr().cast(), 4, pos as libc::off_t) }, 4);
        u32::from_be_bytes(b)
    }

    #[test]
    fn a_sparse_bar_maps_its_areas_and_reaches_the_holes_through_the_fd() {
        let fd = device();
        // The page at 0x2000 (an MSI-X table, say) is not mappable.
        let areas = [SparseArea { offset: 0, size: 0x2000 }, SparseArea { offset: 0x3000, size: 0x1000 }];
        let bar = Bar::map_areas(fd.as_fd(), 0, 0x4000, 0x4000, &areas).unwrap();
        assert!(bar.is_mapped(0x1ffc, 4) && !bar.is_mapped(0x1ffc, 8) && !bar.is_mapped(0x2000, 4));
        assert!(bar.page(0x1000).is_some() && bar.page(0x2000).is_none() && bar.page(0x3000).is_some());
        // Through the mapping and through the hole alike, the bytes land in the region.
        bar.write32(0x10, 0x1122_3344);
        bar.write32(0x2010, 0x5566_7788);
        bar.write64(0x2ff8, 0x0102_0304_0506_0708);
        bar.write32(0x3000, 0x99aa_bbcc);
        assert_eq!(file_u32(&fd, 0x4010), 0x1122_3344);
        assert_eq!(file_u32(&fd, 0x6010), 0x5566_7788);
        assert_eq!((file_u32(&fd, 0x6ff8), file_u32(&fd, 0x6ffc)), (0x0102_0304, 0x0506_0708));
        assert_eq!(file_u32(&fd, 0x7000), 0x99aa_bbcc);
        assert_eq!((bar.read32(0x10), bar.read32(0x2010), bar.read32(0x3000)), (0x1122_3344, 0x5566_7788, 0x99aa_bbcc));
        // Overlapping or unaligned areas are refused.
        let bad = [SparseArea { offset: 0, size: 0x2000 }, SparseArea { offset: 0x1000, size: 0x1000 }];
        assert!(Bar::map_areas(fd.as_fd(), 0, 0x4000, 0x4000, &bad).is_err());
        assert!(Bar::map_areas(fd.as_fd(), 0, 0x4000, 0x4000, &[SparseArea { offset: 0x800, size: 0x1000 }]).is_err());
    }

    #[test]
    fn a_whole_bar_has_no_holes() {
        let fd = device();
        let bar = Bar::map(fd.as_fd(), 0, 0, 0x8000).unwrap();
        assert!(bar.is_mapped(0, 0x8000));
        bar.write32(0x7ffc, 0xdead_beef);
        assert_eq!(file_u32(&fd, 0x7ffc), 0xdead_beef);
    }
}
