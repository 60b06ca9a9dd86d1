//! [`DmaMemory`]: pinned, page-aligned, zeroed anonymous memory, and its volatile accessors.

use super::{MemlockState, PAGE_2M, PAGE_4K};
use crate::{Error, Result};
use std::ptr::NonNull;

/// Pinned, page-aligned, zeroed anonymous memory for DMA, freed on drop.
///
/// Never hands out references into itself: see the module documentation for the accessors and
/// their contract. Only [`DmaMemory::as_ptr`] exposes the address, as a raw pointer, for a
/// backend to map.
#[derive(Debug)]
pub struct DmaMemory {
    ptr: NonNull<u8>,
    len: usize,
    page_size: usize,
}

// SAFETY: DmaMemory owns its mapping (no thread affinity) and all access goes through raw
// pointers with volatile operations, never references: the same rules as memory shared with a
// device or another process (see vfio-ioctls' `vfio_dma_map` contract). Sharing `&DmaMemory`
// between threads therefore cannot create aliasing references.
unsafe impl Send for DmaMemory {}
// SAFETY: as for Send; `&self` methods only do volatile accesses within bounds.
unsafe impl Sync for DmaMemory {}

pub(super) fn round_up(v: usize, to: usize) -> Option<usize> {
    debug_assert!(to.is_power_of_two());
    v.checked_add(to - 1).map(|x| x & !(to - 1))
}

/// A fresh anonymous mapping of `len` bytes whose start is aligned to `align` (a power of two,
/// at least the page size). Returns the pointer or the OS error.
fn map_anonymous(len: usize, huge: bool, align: usize) -> std::io::Result<NonNull<u8>> {
    let page = if huge { PAGE_2M } else { PAGE_4K };
    let extra = if align > page { align } else { 0 };
    let total = len.checked_add(extra).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if huge {
        flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
    }
    // SAFETY: an anonymous private mapping at an address the kernel chooses; it cannot alias
    // any existing Rust object.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), total, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let base = p as usize;
    let start = (base + align - 1) & !(align - 1);
    if extra != 0 {
        let head = start - base;
        let tail = total - head - len;
        if head != 0 {
            // SAFETY: [base, base+head) is the unused head of the mapping made above.
            unsafe { libc::munmap(p, head) };
        }
        if tail != 0 {
            // SAFETY: [start+len, start+len+tail) is the unused tail of the mapping made above.
            unsafe { libc::munmap((start + len) as *mut libc::c_void, tail) };
        }
    }
    NonNull::new(start as *mut u8).ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))
}

impl DmaMemory {
    /// Allocates `len` bytes (rounded up to 4 KiB) on 4 KiB pages.
    pub fn new(len: usize) -> Result<DmaMemory> {
        DmaMemory::alloc(len, false)
    }

    /// Allocates `len` bytes; with `huge`, on 2 MiB huge pages (`len` rounded up to 2 MiB) if
    /// the system has free huge pages, else on 4 KiB pages (`len` rounded up to 4 KiB).
    /// [`DmaMemory::page_size`] tells which one it got.
    pub fn alloc(len: usize, huge: bool) -> Result<DmaMemory> {
        DmaMemory::alloc_aligned(len, huge, PAGE_4K)
    }

    /// As [`DmaMemory::alloc`], with the start address aligned to `align` (a power of two; at
    /// least the page size is always used). mlx5 firmware page blocks use 2 MiB alignment.
    pub fn alloc_aligned(len: usize, huge: bool, align: usize) -> Result<DmaMemory> {
        if len == 0 {
            return Err(Error::InvalidArgument("DMA memory length must be greater than 0".into()));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!("DMA memory alignment {align:#x} is not a power of two")));
        }
        let state = MemlockState::current();
        // Huge pages are a preference: any failure falls back to 4 KiB pages.
        let huge_len = round_up(len, PAGE_2M).filter(|&h| huge && state.check(h as u64).is_ok());
        if let Some(Ok(m)) = huge_len.map(|h| DmaMemory::map_pinned(h, true, align.max(PAGE_2M))) {
            return Ok(m);
        }
        let len4 = round_up(len, PAGE_4K)
            .ok_or_else(|| Error::InvalidArgument(format!("DMA memory length {len:#x} is too large")))?;
        state.check(len4 as u64)?;
        DmaMemory::map_pinned(len4, false, align.max(PAGE_4K))
    }

    fn map_pinned(len: usize, huge: bool, align: usize) -> Result<DmaMemory> {
        let page_size = if huge { PAGE_2M } else { PAGE_4K };
        let ptr = map_anonymous(len, huge, align).map_err(|source| Error::Os {
            op: format!("mmap {len:#x} bytes of DMA memory on {} pages", if huge { "2 MiB" } else { "4 KiB" }),
            source,
        })?;
        // From here on, dropping `mem` unmaps.
        let mem = DmaMemory { ptr, len, page_size };
        // SAFETY: [ptr, ptr+len) is the mapping we own; madvise changes only its fork behaviour.
        let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTFORK) };
        if rc != 0 {
            return Err(Error::last_os(format!("madvise(MADV_DONTFORK) on {len:#x} bytes of DMA memory")));
        }
        // SAFETY: [ptr, ptr+len) is the mapping we own; mlock faults it in and pins it.
        let rc = unsafe { libc::mlock(ptr.as_ptr().cast(), len) };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            let state = MemlockState::current();
            let limit_hit = matches!(source.raw_os_error(), Some(libc::ENOMEM | libc::EAGAIN | libc::EPERM));
            if let (Some(limit), false, true) = (state.limit, state.cap_ipc_lock, limit_hit) {
                return Err(Error::MemlockLimit { needed: state.locked + len as u64, limit });
            }
            return Err(Error::Os { op: format!("mlock {len:#x} bytes of DMA memory"), source });
        }
        Ok(mem)
    }

    /// Length in bytes (a multiple of [`DmaMemory::page_size`]).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: DMA memory is at least one page.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The page size backing this memory: 4096 or 2 MiB.
    #[inline]
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Whether the memory is on 2 MiB huge pages.
    #[inline]
    pub fn is_huge(&self) -> bool {
        self.page_size == PAGE_2M
    }

    /// The start address, as a raw pointer for a backend to map (never turn it into a
    /// reference).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn oob(&self, offset: usize, len: usize) -> Error {
        Error::OutOfBounds {
            object: "DMA memory".into(),
            offset: offset as u64,
            len: len as u64,
            size: self.len as u64,
        }
    }

    /// Checks `offset..offset+len` lies inside the memory.
    #[inline]
    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(self.oob(offset, len)),
        }
    }

    /// The data-path contract: in bounds and naturally aligned (`size` is 1, 2, 4 or 8 and the
    /// memory is at least a page, so `len - size` cannot underflow).
    #[inline(always)]
    fn assert_at(&self, offset: usize, size: usize) {
        if offset > self.len - size || offset & (size - 1) != 0 {
            access_violation(offset, size, self.len);
        }
    }

    /// Data path: writes `words` as consecutive big-endian u64s from `offset` (8-byte aligned)
    /// with one bounds check for the whole run. Panics on a contract violation (driver bug).
    #[inline(always)]
    pub fn write_u64s_be_at<const N: usize>(&self, offset: usize, words: &[u64; N]) {
        if offset > self.len.wrapping_sub(8 * N) || offset & 7 != 0 || 8 * N > self.len {
            access_violation(offset, 8 * N, self.len);
        }
        for (i, w) in words.iter().enumerate() {
            // SAFETY: `offset + 8 * N <= len` and 8-byte alignment checked above; the mapping
            // lives as long as self.
            unsafe { self.ptr.as_ptr().add(offset + 8 * i).cast::<u64>().write_volatile(w.to_be()) }
        }
    }

    /// Data path: reads `N` consecutive big-endian u64s from `offset` (8-byte aligned) with one
    /// bounds check. Panics on a contract violation (driver bug).
    #[inline(always)]
    pub fn read_u64s_be_at<const N: usize>(&self, offset: usize) -> [u64; N] {
        if offset > self.len.wrapping_sub(8 * N) || offset & 7 != 0 || 8 * N > self.len {
            access_violation(offset, 8 * N, self.len);
        }
        let mut out = [0u64; N];
        for (i, w) in out.iter_mut().enumerate() {
            // SAFETY: in bounds and aligned (checked above); the mapping lives as long as self.
            *w = u64::from_be(unsafe { self.ptr.as_ptr().add(offset + 8 * i).cast::<u64>().read_volatile() });
        }
        out
    }

    /// Reads one byte.
    pub fn read_u8(&self, offset: usize) -> Result<u8> {
        self.check(offset, 1)?;
        Ok(self.read_u8_at(offset))
    }

    /// Writes one byte.
    pub fn write_u8(&self, offset: usize, value: u8) -> Result<()> {
        self.check(offset, 1)?;
        self.write_u8_at(offset, value);
        Ok(())
    }

    /// Data path: reads the byte at `offset` (contract: in bounds) with one volatile load.
    #[inline]
    pub fn read_u8_at(&self, offset: usize) -> u8 {
        self.assert_at(offset, 1);
        // SAFETY: offset < len (asserted); the mapping lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).read_volatile() }
    }

    /// Data path: writes the byte at `offset` (contract: in bounds) with one volatile store.
    #[inline]
    pub fn write_u8_at(&self, offset: usize, value: u8) {
        self.assert_at(offset, 1);
        // SAFETY: offset < len (asserted); the mapping lives as long as self.
        unsafe { self.ptr.as_ptr().add(offset).write_volatile(value) }
    }

    /// Copies `buf.len()` bytes starting at `offset` out of the memory.
    pub fn read_bytes(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: the range is inside the mapping (checked above).
        unsafe { copy_from_device(self.ptr.as_ptr().add(offset), buf) };
        Ok(())
    }

    /// Copies `data` into the memory at `offset`.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: the range is inside the mapping (checked above).
        unsafe { copy_to_device(self.ptr.as_ptr().add(offset), data) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check(offset, len)?;
        // SAFETY: the range is inside the mapping (checked above).
        unsafe { fill_device(self.ptr.as_ptr().add(offset), len, byte) };
        Ok(())
    }
}

/// The data-path contract was broken: a driver bug.
#[cold]
#[inline(never)]
#[track_caller]
fn access_violation(offset: usize, size: usize, len: usize) -> ! {
    panic!(
        "DMA memory access of {size} bytes at offset {offset:#x} is out of bounds (size {len:#x}) or not {size}-byte aligned: driver bug"
    )
}

macro_rules! be_accessors {
    ($t:ty, $read:ident, $write:ident, $read_at:ident, $write_at:ident) => {
        impl DmaMemory {
            #[doc = concat!("Reads the big-endian `", stringify!($t), "` at `offset` (any alignment).")]
            pub fn $read(&self, offset: usize) -> Result<$t> {
                const N: usize = size_of::<$t>();
                self.check(offset, N)?;
                if offset % N == 0 {
                    return Ok(self.$read_at(offset));
                }
                let mut b = [0u8; N];
                // SAFETY: the range is inside the mapping (checked above).
                unsafe { copy_from_device(self.ptr.as_ptr().add(offset), &mut b) };
                Ok(<$t>::from_be_bytes(b))
            }

            #[doc = concat!("Writes `value` as a big-endian `", stringify!($t), "` at `offset` (any alignment).")]
            pub fn $write(&self, offset: usize, value: $t) -> Result<()> {
                const N: usize = size_of::<$t>();
                self.check(offset, N)?;
                if offset % N == 0 {
                    self.$write_at(offset, value);
                    return Ok(());
                }
                // SAFETY: the range is inside the mapping (checked above).
                unsafe { copy_to_device(self.ptr.as_ptr().add(offset), &value.to_be_bytes()) };
                Ok(())
            }

            #[doc = concat!("Data path: reads the big-endian `", stringify!($t), "` at `offset` with one volatile load.")]
            ///
            /// Contract: `offset` is in bounds and naturally aligned; a violation panics (driver bug).
            #[inline]
            pub fn $read_at(&self, offset: usize) -> $t {
                self.assert_at(offset, size_of::<$t>());
                // SAFETY: in bounds and aligned (asserted; the base is page-aligned); the
                // mapping lives as long as self.
                let raw = unsafe { self.ptr.as_ptr().add(offset).cast::<$t>().read_volatile() };
                <$t>::from_be(raw)
            }

            #[doc = concat!("Data path: writes `value` as a big-endian `", stringify!($t), "` at `offset` with one volatile store.")]
            ///
            /// Contract: `offset` is in bounds and naturally aligned; a violation panics (driver bug).
            #[inline]
            pub fn $write_at(&self, offset: usize, value: $t) {
                self.assert_at(offset, size_of::<$t>());
                // SAFETY: in bounds and aligned (asserted; the base is page-aligned); the
                // mapping lives as long as self.
                unsafe { self.ptr.as_ptr().add(offset).cast::<$t>().write_volatile(value.to_be()) }
            }
        }
    };
}

be_accessors!(u16, read_u16_be, write_u16_be, read_u16_be_at, write_u16_be_at);
be_accessors!(u32, read_u32_be, write_u32_be, read_u32_be_at, write_u32_be_at);
be_accessors!(u64, read_u64_be, write_u64_be, read_u64_be_at, write_u64_be_at);

impl Drop for DmaMemory {
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr+len) is the mapping this object owns; nobody holds a reference into
        // it (none are ever handed out), and a DmaBuffer unmaps it from the IOMMU before
        // dropping it (or leaks it if that fails). munmap also unlocks it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Volatile copy of `dst.len()` bytes from `src`: aligned 8-byte loads in the middle, single
/// bytes at the unaligned ends.
///
/// # Safety
/// `src..src+dst.len()` must be inside a live mapping.
pub(super) unsafe fn copy_from_device(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let mut i = 0;
    while i < n && (src as usize + i) & 7 != 0 {
        // SAFETY: i < n, inside the range the caller vouches for.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: src+i is 8-aligned and src+i+8 <= src+n, inside the caller's range.
        let w = unsafe { src.add(i).cast::<u64>().read_volatile() };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, inside the range the caller vouches for.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
}

/// Volatile copy of `src` to `dst`, as [`copy_from_device`] in the other direction.
///
/// # Safety
/// `dst..dst+src.len()` must be inside a live, writable mapping.
pub(super) unsafe fn copy_to_device(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let mut i = 0;
    while i < n && (dst as usize + i) & 7 != 0 {
        // SAFETY: i < n, inside the range the caller vouches for.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
    while i + 8 <= n {
        let mut w = [0u8; 8];
        w.copy_from_slice(&src[i..i + 8]);
        // SAFETY: dst+i is 8-aligned and dst+i+8 <= dst+n, inside the caller's range.
        unsafe { dst.add(i).cast::<u64>().write_volatile(u64::from_ne_bytes(w)) };
        i += 8;
    }
    while i < n {
        // SAFETY: i < n, inside the range the caller vouches for.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
}

/// Volatile fill of `len` bytes at `dst` with `byte`.
///
/// # Safety
/// `dst..dst+len` must be inside a live, writable mapping.
unsafe fn fill_device(dst: *mut u8, len: usize, byte: u8) {
    let word = u64::from_ne_bytes([byte; 8]);
    let mut i = 0;
    while i < len && (dst as usize + i) & 7 != 0 {
        // SAFETY: i < len, inside the range the caller vouches for.
        unsafe { dst.add(i).write_volatile(byte) };
        i += 1;
    }
    while i + 8 <= len {
        // SAFETY: dst+i is 8-aligned and dst+i+8 <= dst+len, inside the caller's range.
        unsafe { dst.add(i).cast::<u64>().write_volatile(word) };
        i += 8;
    }
    while i < len {
        // SAFETY: i < len, inside the range the caller vouches for.
        unsafe { dst.add(i).write_volatile(byte) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_alignment_rounding() {
        assert_eq!(round_up(1, PAGE_4K), Some(PAGE_4K));
        assert_eq!(round_up(PAGE_4K, PAGE_4K), Some(PAGE_4K));
        assert_eq!(round_up(usize::MAX, PAGE_4K), None);
    }
}
