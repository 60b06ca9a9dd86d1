//! A mapped device BAR and its register accessors.
//!
//! The BAR is mmap'd (memmap2 `MmapRaw`, `MAP_SHARED`) from the VFIO device fd at the region's
//! offset; VFIO maps it uncached. Every accessor is one inlined volatile load or store of the
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
//! One of the driver's seven unsafe modules (`datapath`, `dma`, `event`, `simdev`, `vfio`,
//! `vfio::sys`, `vfio::mmio`): every unsafe block has a `SAFETY:` comment.

use memmap2::{MmapOptions, MmapRaw};
use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

/// A device BAR mapped into the process.
#[derive(Debug)]
pub struct Bar {
    ptr: NonNull<u8>,
    len: usize,
    index: u32,
    /// Owns the mapping; unmapped on drop.
    _map: MmapRaw,
}

// SAFETY: the mapping has no thread affinity; all access is volatile through raw pointers
// (device registers, no Rust references), so it may be used from any thread.
unsafe impl Send for Bar {}
// SAFETY: as for Send; `&self` accessors only do single volatile accesses within bounds.
unsafe impl Sync for Bar {}

impl Bar {
    /// Maps `len` bytes of the device fd at `offset` (a VFIO region offset) read/write shared.
    pub(crate) fn map(device: RawFd, index: u32, offset: u64, len: usize) -> io::Result<Bar> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "BAR has size 0"));
        }
        let map = MmapOptions::new().offset(offset).len(len).map_raw(device)?;
        let ptr =
            NonNull::new(map.as_mut_ptr()).ok_or_else(|| io::Error::other("mmap of BAR returned a null pointer"))?;
        Ok(Bar { ptr, len: map.len(), index, _map: map })
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
        if offset & 0xfff != 0 || offset.checked_add(4096).is_none_or(|e| e > self.len) {
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
        // SAFETY: in bounds and 4-aligned (checked; the mapping is page-aligned); the mapping
        // lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().read_volatile() }
    }

    #[inline(always)]
    fn write32_raw(&self, offset: usize, raw: u32) {
        self.check(offset, 4);
        // SAFETY: in bounds and 4-aligned (checked; the mapping is page-aligned); the mapping
        // lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).cast::<u32>().write_volatile(raw) }
    }

    #[inline(always)]
    fn write64_raw(&self, offset: usize, raw: u64) {
        self.check(offset, 8);
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
