//! [`HostBuffer`]: owned, zeroed host memory mapped for the device at a chosen IOVA.

use super::PAGE_SIZE;
use crate::device::SimDevice;
use crate::hostmem;
use crate::iommu::MapError;
use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, fence};

/// Owned, zeroed, 4 KiB-aligned host memory mapped for device DMA at a fixed IOVA.
///
/// Accessors take `&self`: the memory is shared with the device (like DMA memory), and every
/// access is a copy through a raw pointer. Out-of-bounds accesses panic.
pub struct HostBuffer {
    dev: SimDevice,
    iova: u64,
    ptr: NonNull<u8>,
    len: usize,
    mapped: bool,
}

// SAFETY: the buffer owns its allocation and hands out no references into it (every access is a
// raw-pointer copy); `SimDevice` is a shareable handle. Moving the owner to another thread is
// therefore sound.
unsafe impl Send for HostBuffer {}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("mapped", &self.mapped)
            .finish()
    }
}

impl HostBuffer {
    /// Allocates `len` bytes (rounded up to whole pages, at least one) of zeroed memory and maps
    /// it read/write at `iova` in `dev`'s IOMMU.
    pub fn new(dev: &SimDevice, iova: u64, len: usize) -> Result<HostBuffer, MapError> {
        let len = len.max(1).checked_next_multiple_of(PAGE_SIZE).ok_or(MapError::Invalid)?;
        let layout = Layout::from_size_align(len, PAGE_SIZE).map_err(|_| MapError::Invalid)?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { alloc::handle_alloc_error(layout) };
        let mut buf = HostBuffer { dev: dev.clone(), iova, ptr, len, mapped: false };
        buf.map()?;
        Ok(buf)
    }

    fn layout(&self) -> Layout {
        Layout::from_size_align(self.len, PAGE_SIZE).expect("layout checked at allocation")
    }

    /// The IOVA the buffer is (or was) mapped at.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a buffer holds at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the buffer is currently mapped in the IOMMU.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// IOVA of byte `off` of the buffer.
    pub fn iova_at(&self, off: usize) -> u64 {
        assert!(off <= self.len, "offset {off:#x} beyond a buffer of {:#x} bytes", self.len);
        self.iova + off as u64
    }

    /// (Re)maps the buffer at its IOVA.
    pub fn map(&mut self) -> Result<(), MapError> {
        if self.mapped {
            return Ok(());
        }
        // SAFETY: `ptr..ptr+len` is this buffer's own allocation. It stays valid and in place
        // until `Drop`, which removes the mapping before freeing it (and leaks the memory if the
        // mapping cannot be removed); the host never holds references into it, only raw-pointer
        // copies, so concurrent device access is what the contract allows.
        unsafe { self.dev.dma_map(self.iova, self.ptr.as_ptr(), self.len as u64)? };
        self.mapped = true;
        Ok(())
    }

    /// Removes the IOMMU mapping but keeps the memory (the device faults on it until
    /// [`HostBuffer::map`]).
    pub fn unmap(&mut self) -> Result<(), MapError> {
        if !self.mapped {
            return Ok(());
        }
        self.dev.dma_unmap(self.iova, self.len as u64)?;
        self.mapped = false;
        Ok(())
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "HostBuffer access of {n:#x} bytes at {off:#x} beyond its {:#x} bytes",
            self.len
        );
    }

    /// Copies `out.len()` bytes at `off` into `out`, then an acquire fence.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        self.check(off, out.len());
        // SAFETY: `off..off+out.len()` lies inside the allocation (checked above), which lives
        // as long as `self`; `out` is a Rust buffer distinct from the allocation (no reference
        // into it is ever handed out).
        unsafe { hostmem::read(self.ptr.as_ptr().add(off), out) };
        fence(Ordering::Acquire);
    }

    /// A release fence, then copies `data` to `off`.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len());
        fence(Ordering::Release);
        // SAFETY: `off..off+data.len()` lies inside the allocation (checked above); `data` is a
        // Rust buffer distinct from the allocation.
        unsafe { hostmem::write(self.ptr.as_ptr().add(off), data) };
    }

    /// A release fence, then sets `n` bytes at `off` to `byte`.
    pub fn fill(&self, off: usize, n: usize, byte: u8) {
        self.check(off, n);
        fence(Ordering::Release);
        // SAFETY: `off..off+n` lies inside the allocation (checked above).
        unsafe { hostmem::fill(self.ptr.as_ptr().add(off), byte, n) };
    }

    /// `n` bytes at `off`, copied out.
    pub fn to_vec(&self, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.read(off, &mut v);
        v
    }

    /// Reads `N` bytes, then an acquire fence (suitable for polling an ownership byte).
    fn read_array<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        self.read(off, &mut b);
        b
    }

    /// Reads one byte.
    pub fn read_u8(&self, off: usize) -> u8 {
        self.read_array::<1>(off)[0]
    }

    /// Writes one byte.
    pub fn write_u8(&self, off: usize, v: u8) {
        self.write(off, &[v]);
    }

    /// Reads a big-endian u16.
    pub fn read_u16_be(&self, off: usize) -> u16 {
        u16::from_be_bytes(self.read_array(off))
    }

    /// Writes a big-endian u16.
    pub fn write_u16_be(&self, off: usize, v: u16) {
        self.write(off, &v.to_be_bytes());
    }

    /// Reads a big-endian u32.
    pub fn read_u32_be(&self, off: usize) -> u32 {
        u32::from_be_bytes(self.read_array(off))
    }

    /// Writes a big-endian u32.
    pub fn write_u32_be(&self, off: usize, v: u32) {
        self.write(off, &v.to_be_bytes());
    }

    /// Reads a big-endian u64.
    pub fn read_u64_be(&self, off: usize) -> u64 {
        u64::from_be_bytes(self.read_array(off))
    }

    /// Writes a big-endian u64.
    pub fn write_u64_be(&self, off: usize, v: u64) {
        self.write(off, &v.to_be_bytes());
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.mapped && self.dev.dma_unmap(self.iova, self.len as u64).is_err() {
            // The mapping could not be removed (someone else changed the IOMMU table): the
            // device might still reach this memory, so it is leaked rather than freed.
            return;
        }
        // SAFETY: `ptr` was allocated in `new` with exactly this layout, and the device can no
        // longer reach it (never mapped, or unmapped just above).
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout()) };
    }
}
