//! DMA memory: pinned host memory that the device reads and writes, the IOVA space it is mapped
//! at, and the mapping that ties the two together.
//!
//! # Pieces
//!
//! - [`DmaMemory`]: page-aligned anonymous memory, on 2 MiB huge pages when asked for and
//!   available (else 4 KiB pages), `MADV_DONTFORK`, `mlock`ed, zeroed, unmapped on drop.
//! - [`IovaAllocator`]: carves aligned IOVA ranges out of the IOMMU's usable ranges, with free
//!   and coalescing. It never hands out the window below [`MIN_IOVA`] (so never IOVA 0).
//! - [`DmaSpace`]: one device's backend plus its IOVA allocator, shared by all its buffers.
//! - [`DmaBuffer`]: a [`DmaMemory`] mapped for device read and write at an IOVA through
//!   [`Backend::dma_map`], unmapped on drop.
//! - Barriers named for what they order: [`dma_wmb`], [`dma_rmb`], [`mmio_flush_writes`].
//!
//! # Access rules: no references into device-visible memory
//!
//! The device may write this memory at any moment (that is what DMA is), so the driver never
//! holds a Rust reference (`&[u8]`, `&mut T`) into it: that would let the compiler assume the
//! bytes cannot change. All access goes through methods that do volatile loads and stores on raw
//! pointers. Multi-byte values are big-endian in memory (the device's byte order) and host-order
//! integers in Rust.
//!
//! There are two families of accessors:
//!
//! - **Control path** (`read_u32_be`, `write_bytes`, `fill`, ...): any offset; they return
//!   [`Error::OutOfBounds`] for an access outside the memory. A naturally aligned value is one
//!   volatile access; an unaligned one is copied byte by byte (not a single access).
//! - **Data path** (`read_u32_be_at`, `write_u64_be_at`, ...): `#[inline]`, exactly one aligned
//!   volatile load or store. Contract: `offset` is in bounds and naturally aligned for the type;
//!   the caller guarantees it (indices are masked against the queue size before use). A
//!   violation is a driver bug and panics from a cold, never-inlined function. The check is kept
//!   in release builds on purpose: these are safe functions, and an unchecked out-of-bounds
//!   access reachable from safe code would be undefined behaviour. It costs one compare and one
//!   never-taken branch; debug builds check the same thing (there is nothing more to check).
//!
//! Concurrent access from several CPU threads to the same bytes is not synchronised by this
//! module (exactly as with the device): callers that share a buffer between threads order their
//! accesses themselves (the driver gives each queue to one owner).
//!
//! # Pinned memory and RLIMIT_MEMLOCK
//!
//! `mlock` counts against `RLIMIT_MEMLOCK` unless the process has `CAP_IPC_LOCK` (root has it).
//! `VFIO_IOMMU_MAP_DMA` pins the same pages again and counts them a second time, so an
//! unprivileged process needs about twice the DMA memory in its memlock limit.
//!
//! # Unsafe
//!
//! This is one of the driver's seven unsafe modules (`datapath`, `dma`, `event`, `simdev`,
//! `vfio`, `vfio::sys`, `vfio::mmio`): it calls `mmap`/`madvise`/`mlock`/`munmap` and does
//! volatile access through raw pointers. Every unsafe block carries a `SAFETY:` comment.

use crate::backend::{Backend, IovaRange};
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, compiler_fence, fence};
use std::sync::{Arc, Mutex, MutexGuard};

/// The base page size: 4 KiB (also the adapter page size).
pub const PAGE_4K: usize = 4096;
/// The huge page size used for DMA memory: 2 MiB.
pub const PAGE_2M: usize = 2 << 20;

/// The lowest IOVA the allocator hands out: the window `0..0x10000` is never used, so a zero
/// or small bogus address in a descriptor can never hit mapped memory.
pub const MIN_IOVA: u64 = 0x10000;

/// The IOVA ranges used when the IOMMU reports none (no `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`):
/// below the x86 MSI window `0xFEE00000..0xFEEFFFFF`, and above it up to 2^39 - 1. These are
/// mlx5_vfio's legacy ranges (contract doc section 3.1 step 4).
pub const LEGACY_IOVA_RANGES: [IovaRange; 2] =
    [IovaRange { start: 0x1_0000, end: 0xFEDF_FFFF }, IovaRange { start: 0xFEF0_0000, end: (1 << 39) - 1 }];

// ---------------------------------------------------------------------------------------------
// Barriers
// ---------------------------------------------------------------------------------------------

/// Orders the CPU's earlier writes to DMA memory before its later writes to DMA memory or to
/// device registers: call it after building a WQE/descriptor and before writing the doorbell
/// record, and again after the doorbell record before ringing the doorbell.
///
/// On x86-64, stores are not reordered with other stores (including stores to uncached BAR
/// mappings), so this only has to stop the compiler: `fence(Release)` plus a compiler fence,
/// which emit no instruction. On AArch64 it is `dmb oshst` (outer-shareable, so the device sees
/// the order). Write-combining (BlueFlame) stores also need [`mmio_flush_writes`].
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders memory accesses; it reads and writes no memory or register.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    fence(Ordering::Release);
    compiler_fence(Ordering::SeqCst);
}

/// Orders the CPU's earlier reads of DMA memory before its later reads: call it after seeing
/// that an entry belongs to software (the CQE/EQE owner bit) and before reading the rest of the
/// entry, so no part of it is read from before the device finished writing it.
///
/// On x86-64, loads are not reordered with other loads, so this is `fence(Acquire)` plus a
/// compiler fence (no instruction). On AArch64 it is `dmb oshld`.
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` only orders memory accesses; it reads and writes no memory or register.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    fence(Ordering::Acquire);
    compiler_fence(Ordering::SeqCst);
}

/// Flushes write-combining stores to the device: call it after a BlueFlame copy into a
/// write-combining BAR mapping. `sfence` on x86-64, `dmb oshst` on AArch64, a full fence
/// elsewhere. Not needed for uncached mappings (VFIO maps BARs uncached).
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores; it reads and writes no memory or register.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders memory accesses; it reads and writes no memory or register.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fence(Ordering::SeqCst);
    compiler_fence(Ordering::SeqCst);
}

// ---------------------------------------------------------------------------------------------
// RLIMIT_MEMLOCK
// ---------------------------------------------------------------------------------------------

/// The memlock facts of this process.
#[derive(Clone, Copy, Debug)]
struct MemlockState {
    /// RLIMIT_MEMLOCK soft limit in bytes; `None` is unlimited.
    limit: Option<u64>,
    /// Bytes already locked (`VmLck` of /proc/self/status).
    locked: u64,
    /// The process has CAP_IPC_LOCK in its effective set (limit does not apply).
    cap_ipc_lock: bool,
}

impl MemlockState {
    fn current() -> MemlockState {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one `rlimit` through the valid pointer we pass.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
        let limit = if rc != 0 || rl.rlim_cur == libc::RLIM_INFINITY { None } else { Some(rl.rlim_cur) };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let mut locked = 0;
        let mut cap_ipc_lock = false;
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("VmLck:") {
                let kb = v.trim().trim_end_matches("kB").trim();
                locked = kb.parse::<u64>().unwrap_or(0) * 1024;
            } else if let Some(v) = line.strip_prefix("CapEff:") {
                let caps = u64::from_str_radix(v.trim(), 16).unwrap_or(0);
                cap_ipc_lock = caps & (1 << CAP_IPC_LOCK) != 0;
            }
        }
        MemlockState { limit, locked, cap_ipc_lock }
    }

    /// Whether `needed` more bytes may be locked; the error carries the total that would be
    /// locked and the limit.
    fn check(&self, needed: u64) -> Result<()> {
        if self.cap_ipc_lock {
            return Ok(());
        }
        match self.limit {
            Some(limit) if self.locked.saturating_add(needed) > limit => {
                Err(Error::MemlockLimit { needed: self.locked.saturating_add(needed), limit })
            }
            _ => Ok(()),
        }
    }
}

/// Linux capability number of CAP_IPC_LOCK.
const CAP_IPC_LOCK: u32 = 14;

/// Checks that `needed` more bytes can be locked under RLIMIT_MEMLOCK (always true with
/// CAP_IPC_LOCK). Returns [`Error::MemlockLimit`] with the total and the limit otherwise.
pub fn check_memlock(needed: u64) -> Result<()> {
    MemlockState::current().check(needed)
}

// ---------------------------------------------------------------------------------------------
// DmaMemory
// ---------------------------------------------------------------------------------------------

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

fn round_up(v: usize, to: usize) -> Option<usize> {
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
unsafe fn copy_from_device(src: *const u8, dst: &mut [u8]) {
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
unsafe fn copy_to_device(dst: *mut u8, src: &[u8]) {
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

// ---------------------------------------------------------------------------------------------
// IovaAllocator
// ---------------------------------------------------------------------------------------------

/// Allocates aligned IOVA ranges from a set of usable ranges, first fit, with free and
/// coalescing (mlx5_vfio's `iset_alloc_range`).
///
/// The window below [`MIN_IOVA`] is removed from every range, so IOVA 0 is never handed out.
#[derive(Clone, Debug)]
pub struct IovaAllocator {
    /// Free ranges: start -> end (inclusive); disjoint, never adjacent (always coalesced).
    free: BTreeMap<u64, u64>,
    /// Allocated ranges: start -> length.
    used: BTreeMap<u64, u64>,
}

impl IovaAllocator {
    /// An allocator over `ranges` (inclusive ends; overlapping or adjacent ranges are merged;
    /// everything below [`MIN_IOVA`] is dropped). Empty `ranges` give an empty allocator.
    pub fn new(ranges: &[IovaRange]) -> IovaAllocator {
        let mut sorted: Vec<IovaRange> = ranges
            .iter()
            .filter(|r| r.end >= MIN_IOVA && r.start <= r.end)
            .map(|r| IovaRange { start: r.start.max(MIN_IOVA), end: r.end })
            .collect();
        sorted.sort_by_key(|r| r.start);
        let mut free = BTreeMap::new();
        let mut cur: Option<IovaRange> = None;
        for r in sorted {
            match cur {
                Some(ref mut c) if r.start <= c.end.saturating_add(1) => c.end = c.end.max(r.end),
                _ => {
                    if let Some(c) = cur {
                        free.insert(c.start, c.end);
                    }
                    cur = Some(r);
                }
            }
        }
        if let Some(c) = cur {
            free.insert(c.start, c.end);
        }
        IovaAllocator { free, used: BTreeMap::new() }
    }

    /// An allocator over `ranges`, or over [`LEGACY_IOVA_RANGES`] when `ranges` is empty (the
    /// IOMMU reported none).
    pub fn with_legacy_fallback(ranges: &[IovaRange]) -> IovaAllocator {
        if ranges.is_empty() { IovaAllocator::new(&LEGACY_IOVA_RANGES) } else { IovaAllocator::new(ranges) }
    }

    /// Allocates `len` bytes at an IOVA aligned to `align` (a power of two). Returns
    /// [`Error::NoIova`] when no free range can hold it.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        if len == 0 {
            return Err(Error::InvalidArgument("IOVA length must be greater than 0".into()));
        }
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!("IOVA alignment {align:#x} is not a power of two")));
        }
        let mut found = None;
        for (&start, &end) in &self.free {
            let Some(a) = start.checked_add(align - 1).map(|x| x & !(align - 1)) else {
                continue;
            };
            let Some(last) = a.checked_add(len - 1) else { continue };
            if last <= end {
                found = Some((start, end, a, last));
                break;
            }
        }
        let (start, end, a, last) = found.ok_or(Error::NoIova { len })?;
        self.free.remove(&start);
        if a > start {
            self.free.insert(start, a - 1);
        }
        if last < end {
            self.free.insert(last + 1, end);
        }
        self.used.insert(a, len);
        Ok(a)
    }

    /// Frees a range returned by [`IovaAllocator::alloc`] (same IOVA and length), merging it
    /// with free neighbours.
    pub fn free(&mut self, iova: u64, len: u64) -> Result<()> {
        match self.used.get(&iova) {
            Some(&l) if l == len => {}
            Some(&l) => {
                return Err(Error::InvalidArgument(format!(
                    "IOVA {iova:#x} was allocated with length {l:#x}, freed with {len:#x}"
                )));
            }
            None => {
                return Err(Error::InvalidArgument(format!(
                    "IOVA {iova:#x} (length {len:#x}) is not allocated (double free?)"
                )));
            }
        }
        self.used.remove(&iova);
        let mut start = iova;
        let mut end = iova + (len - 1);
        let prev = self.free.range(..iova).next_back().map(|(&ps, &pe)| (ps, pe));
        if let Some((ps, _)) = prev.filter(|&(_, pe)| pe.checked_add(1) == Some(iova)) {
            self.free.remove(&ps);
            start = ps;
        }
        if let Some(ne) = end.checked_add(1).and_then(|next| self.free.remove(&next)) {
            end = ne;
        }
        self.free.insert(start, end);
        Ok(())
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s + 1).sum()
    }

    /// The free ranges, in ascending order (inclusive ends).
    pub fn free_ranges(&self) -> Vec<IovaRange> {
        self.free.iter().map(|(&start, &end)| IovaRange { start, end }).collect()
    }

    /// Number of ranges currently allocated.
    pub fn allocated(&self) -> usize {
        self.used.len()
    }
}

// ---------------------------------------------------------------------------------------------
// DmaSpace and DmaBuffer
// ---------------------------------------------------------------------------------------------

/// One device's DMA address space: its backend and its IOVA allocator (seeded from the
/// backend's IOVA ranges, or the legacy ranges when it reports none). Every [`DmaBuffer`] keeps
/// it alive, so the backend outlives all mappings.
pub struct DmaSpace<B: Backend> {
    backend: Arc<B>,
    iova: Mutex<IovaAllocator>,
    iommu_page: u64,
}

impl<B: Backend> std::fmt::Debug for DmaSpace<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaSpace")
            .field("backend", &self.backend.name())
            .field("iommu_page", &self.iommu_page)
            .field("iova", &*self.allocator())
            .finish()
    }
}

impl<B: Backend> DmaSpace<B> {
    /// The DMA space of `backend`.
    pub fn new(backend: Arc<B>) -> Arc<DmaSpace<B>> {
        let iova = IovaAllocator::with_legacy_fallback(&backend.iova_ranges());
        // Smallest IOMMU page of at least 4 KiB (mlx5_vfio does the same).
        let sizes = backend.iommu_page_sizes() & !(PAGE_4K as u64 - 1);
        let iommu_page = if sizes == 0 { PAGE_4K as u64 } else { 1u64 << sizes.trailing_zeros() };
        Arc::new(DmaSpace { backend, iova: Mutex::new(iova), iommu_page })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The smallest IOMMU page size of at least 4 KiB: IOVAs and lengths are multiples of it.
    pub fn iommu_page_size(&self) -> u64 {
        self.iommu_page
    }

    fn allocator(&self) -> MutexGuard<'_, IovaAllocator> {
        self.iova.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates an IOVA range (for mappings made outside [`DmaBuffer`], e.g. registered user
    /// memory). `align` is raised to the IOMMU page size.
    pub fn alloc_iova(&self, len: u64, align: u64) -> Result<u64> {
        self.allocator().alloc(len, align.max(self.iommu_page))
    }

    /// Frees a range from [`DmaSpace::alloc_iova`].
    pub fn free_iova(&self, iova: u64, len: u64) -> Result<()> {
        self.allocator().free(iova, len)
    }

    /// Free IOVA bytes left.
    pub fn free_iova_bytes(&self) -> u64 {
        self.allocator().free_bytes()
    }
}

/// [`DmaMemory`] mapped for device read and write at an IOVA; unmapped (and its IOVA freed)
/// on drop. Derefs to [`DmaMemory`] for the accessors.
pub struct DmaBuffer<B: Backend> {
    /// Taken (once) in `drop`, after the IOMMU mapping is gone.
    mem: ManuallyDrop<DmaMemory>,
    iova: u64,
    space: Arc<DmaSpace<B>>,
}

impl<B: Backend> std::fmt::Debug for DmaBuffer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBuffer")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.memory().len())
            .field("page_size", &self.memory().page_size())
            .finish()
    }
}

impl<B: Backend> DmaBuffer<B> {
    /// Allocates `len` bytes of DMA memory (2 MiB pages when `huge` and available), gives it an
    /// IOVA and maps it. The IOVA is aligned to the page size of the memory, to the IOMMU page
    /// size, and to 2 MiB when the buffer is at least 2 MiB (so the IOMMU can use superpages).
    pub fn new(space: &Arc<DmaSpace<B>>, len: usize, huge: bool) -> Result<DmaBuffer<B>> {
        DmaBuffer::with_alignment(space, len, huge, PAGE_4K)
    }

    /// As [`DmaBuffer::new`], with both the address and the IOVA aligned to at least `align`
    /// (a power of two): mlx5 firmware page blocks are 2 MiB-aligned in both.
    pub fn with_alignment(space: &Arc<DmaSpace<B>>, len: usize, huge: bool, align: usize) -> Result<DmaBuffer<B>> {
        let page = space.iommu_page as usize;
        let len = round_up(len.max(1), page)
            .ok_or_else(|| Error::InvalidArgument(format!("DMA buffer length {len:#x} is too large")))?;
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument(format!("DMA buffer alignment {align:#x} is not a power of two")));
        }
        let mem = DmaMemory::alloc_aligned(len, huge, align.max(page))?;
        let mut iova_align = (align.max(page).max(mem.page_size())) as u64;
        if mem.len() >= PAGE_2M {
            iova_align = iova_align.max(PAGE_2M as u64);
        }
        let map_len = mem.len();
        let iova = space.allocator().alloc(map_len as u64, iova_align)?;
        // SAFETY: `mem` is owned by the DmaBuffer built below, which unmaps [iova, iova+len)
        // before freeing the memory (and leaks the memory if the unmap fails), so the memory
        // stays allocated and in place while mapped. No references into it exist.
        if let Err(e) = unsafe { space.backend.dma_map(mem.as_ptr(), map_len, iova) } {
            let _ = space.allocator().free(iova, map_len as u64);
            return Err(e);
        }
        Ok(DmaBuffer { mem: ManuallyDrop::new(mem), iova, space: space.clone() })
    }

    /// The IOVA of the first byte: what goes into device descriptors.
    #[inline]
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The IOVA of byte `offset` (not checked against the length).
    #[inline]
    pub fn iova_at(&self, offset: usize) -> u64 {
        self.iova + offset as u64
    }

    /// Length in bytes (mapped length; a multiple of the page size).
    #[inline]
    pub fn len(&self) -> usize {
        self.memory().len()
    }

    /// Always false: a buffer is at least one page.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.memory().is_empty()
    }

    /// The memory, for its accessors (also reachable through `Deref`).
    #[inline]
    pub fn memory(&self) -> &DmaMemory {
        &self.mem
    }

    /// The DMA space this buffer is mapped in.
    pub fn space(&self) -> &Arc<DmaSpace<B>> {
        &self.space
    }

    /// The backend this buffer is mapped through.
    pub fn backend(&self) -> &Arc<B> {
        &self.space.backend
    }

    /// Removes the IOMMU mapping (and frees the IOVA) but keeps the memory: the device can no
    /// longer reach it, the CPU still can. If the unmap fails, the memory is leaked exactly as
    /// on drop (the device may still reach it) and the error is returned.
    pub fn unmap(self) -> Result<DmaMemory> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (ManuallyDrop), so each field is moved out exactly
        // once, here, and not used through `this` afterwards.
        let (mem, space) = unsafe { (ManuallyDrop::take(&mut this.mem), std::ptr::read(&this.space)) };
        let len = mem.len();
        match space.backend.dma_unmap(this.iova, len) {
            Ok(()) => {
                let _ = space.allocator().free(this.iova, len as u64);
                Ok(mem)
            }
            Err(e) => {
                std::mem::forget(mem);
                Err(e)
            }
        }
    }
}

impl<B: Backend> std::ops::Deref for DmaBuffer<B> {
    type Target = DmaMemory;
    #[inline]
    fn deref(&self) -> &DmaMemory {
        self.memory()
    }
}

impl<B: Backend> Drop for DmaBuffer<B> {
    fn drop(&mut self) {
        // SAFETY: `mem` is taken exactly once, here, and never used again.
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        let len = mem.len();
        match self.space.backend.dma_unmap(self.iova, len) {
            Ok(()) => {
                let _ = self.space.allocator().free(self.iova, len as u64);
                drop(mem);
            }
            Err(e) => {
                // The device may still reach this memory: freeing it could let the device
                // corrupt whatever reuses the pages. Leak the memory and the IOVA instead.
                eprintln!(
                    "umlx: {}: unmapping DMA buffer at IOVA {:#x} ({len:#x} bytes) failed: {e}; leaking it so the device cannot reach reused memory",
                    self.space.backend.name(),
                    self.iova
                );
                std::mem::forget(mem);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Memory that belongs to someone else (a C program's buffer handed to `ibv_reg_mr`), named by
/// address and length, to be registered in place by [`UserMemory::external`].
///
/// The promise that makes registering it sound is made once, by whoever builds it
/// ([`ExternalBuffer::new`] is `unsafe`); registration itself is then safe.
#[derive(Debug)]
pub struct ExternalBuffer {
    addr: std::ptr::NonNull<u8>,
    len: usize,
}

impl ExternalBuffer {
    /// Names `len` bytes at `addr`.
    ///
    /// # Safety
    ///
    /// `[addr, addr + len)` is memory of this process that stays allocated and mapped
    /// (readable, and writable when the registration allows the device to write) until the
    /// [`UserMemory`] built from it is dropped, and no Rust reference into it exists meanwhile:
    /// the device and the registration's copies may read and write it at any time. This is the
    /// contract `ibv_reg_mr` puts on its caller (the buffer outlives `ibv_dereg_mr`).
    pub unsafe fn new(addr: std::ptr::NonNull<u8>, len: usize) -> ExternalBuffer {
        ExternalBuffer { addr, len }
    }

    /// Its address.
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// User memory pinned and mapped for device access in place: the pages covering it are locked
/// and mapped at an IOVA whose offset within the page matches the buffer's. Either a heap buffer
/// the caller hands over ([`UserMemory::new`], given back by `into_inner` after unmapping) or
/// memory that stays the caller's ([`UserMemory::external`], never freed here). While
/// registered, the buffer is reachable only through copies (no references), so the device's
/// concurrent writes are never observed through a Rust reference.
pub struct UserMemory<B: Backend> {
    /// The registered buffer. Owned: taken out of its `Box` at registration (`Box::into_raw`) so
    /// that no `Box` or reference asserts exclusive access while the device may write it; put
    /// back into a `Box` only after a successful unmap (`into_inner`, `drop`). Null once
    /// returned. External: the caller's memory, never freed here.
    data: *mut u8,
    /// Whether `data` came from a `Box` this value owns.
    owned: bool,
    len: usize,
    mapped: bool,
    page_base: usize,
    map_len: usize,
    iova_base: u64,
    space: Arc<DmaSpace<B>>,
}

// SAFETY: UserMemory owns its buffer (a heap block with no thread affinity, held as a raw
// pointer) or registers external memory whose creator promised it stays valid for any thread
// (`ExternalBuffer::new`), and reaches it only by copies through raw pointers (`read`, `write`),
// never by references, as DmaMemory does; the backend handle is Send + Sync.
unsafe impl<B: Backend> Send for UserMemory<B> {}
// SAFETY: as for Send; `&self` methods only copy within bounds.
unsafe impl<B: Backend> Sync for UserMemory<B> {}

impl<B: Backend> std::fmt::Debug for UserMemory<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserMemory").field("len", &self.len()).field("iova", &self.iova()).finish()
    }
}

impl<B: Backend> UserMemory<B> {
    /// Pins and maps `data` (at least one byte).
    pub fn new(space: &Arc<DmaSpace<B>>, data: Box<[u8]>) -> Result<UserMemory<B>> {
        if data.is_empty() {
            return Err(Error::InvalidArgument("cannot register an empty buffer".into()));
        }
        let mut mem = Self::map(space, data.as_ptr() as usize, data.len())?;
        mem.data = Box::into_raw(data).cast::<u8>();
        mem.owned = true;
        Ok(mem)
    }

    /// Pins and maps memory that stays its owner's (at least one byte): nothing is freed when
    /// the registration ends, and `into_inner` gives nothing back.
    pub fn external(space: &Arc<DmaSpace<B>>, buf: ExternalBuffer) -> Result<UserMemory<B>> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument("cannot register an empty buffer".into()));
        }
        let start = buf.addr.as_ptr() as usize;
        if start.checked_add(buf.len).is_none() {
            return Err(Error::InvalidArgument(format!(
                "buffer at {start:#x} of {:#x} bytes wraps the address space",
                buf.len
            )));
        }
        let mut mem = Self::map(space, start, buf.len)?;
        mem.data = buf.addr.as_ptr();
        Ok(mem)
    }

    /// Locks and maps the pages under `[start, start + len)`; the result has no buffer yet.
    fn map(space: &Arc<DmaSpace<B>>, start: usize, len: usize) -> Result<UserMemory<B>> {
        let page = (space.iommu_page as usize).max(PAGE_4K);
        let page_base = start & !(page - 1);
        let end = start + len;
        let map_len = (end - page_base).next_multiple_of(page);
        MemlockState::current().check(map_len as u64)?;
        // SAFETY: the range covers the pages of the buffer being registered (an owned heap block
        // or external memory its creator vouched for) and, at its edges, neighbouring data in
        // the same pages: mlock only pins them.
        if unsafe { libc::mlock(page_base as *const libc::c_void, map_len) } != 0 {
            return Err(Error::last_os(format!("mlock {map_len:#x} bytes of user memory")));
        }
        let iova_base = match space.allocator().alloc(map_len as u64, page as u64) {
            Ok(i) => i,
            Err(e) => {
                // SAFETY: undoing the mlock above on the same range.
                unsafe { libc::munlock(page_base as *const libc::c_void, map_len) };
                return Err(e);
            }
        };
        // SAFETY: the buffer is either owned by the UserMemory built from this one (as a raw
        // pointer, a boxed slice's heap block that never moves) or external memory its creator
        // promised stays valid (`ExternalBuffer::new`); either way it is neither freed nor moved
        // until drop/into_inner unmapped the range.
        if let Err(e) = unsafe { space.backend.dma_map(page_base as *mut u8, map_len, iova_base) } {
            let _ = space.allocator().free(iova_base, map_len as u64);
            // SAFETY: undoing the mlock above on the same range.
            unsafe { libc::munlock(page_base as *const libc::c_void, map_len) };
            return Err(e);
        }
        Ok(UserMemory {
            data: std::ptr::null_mut(),
            owned: false,
            len,
            mapped: true,
            page_base,
            map_len,
            iova_base,
            space: space.clone(),
        })
    }

    /// Whether the memory is the caller's ([`UserMemory::external`]) rather than owned.
    pub fn is_external(&self) -> bool {
        !self.owned
    }

    /// Length of the buffer.
    pub fn len(&self) -> usize {
        if self.data.is_null() { 0 } else { self.len }
    }

    fn ptr(&self) -> *const u8 {
        self.data
    }

    /// Gives the buffer back as a `Box` (only after the device can no longer reach it).
    fn take_box(&mut self) -> Option<Box<[u8]>> {
        if self.data.is_null() || !self.owned {
            return None;
        }
        let slice =
            std::ptr::slice_from_raw_parts_mut(std::mem::replace(&mut self.data, std::ptr::null_mut()), self.len);
        // SAFETY: `slice` is the pointer `Box::into_raw` gave in `new` with its length, not yet
        // given back (the pointer is nulled here), so this is its one owner again.
        Some(unsafe { Box::from_raw(slice) })
    }

    /// Whether the buffer is empty (never: registration needs a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's virtual address (what work requests name).
    pub fn addr(&self) -> u64 {
        self.ptr() as u64
    }

    /// IOVA of the buffer's first byte.
    pub fn iova(&self) -> u64 {
        self.iova_base + (self.ptr() as usize - self.page_base) as u64
    }

    /// IOVA of the page holding the first byte, and the page size: the MTT's view.
    pub fn pages(&self) -> (u64, usize, usize) {
        let page = (self.space.iommu_page as usize).max(PAGE_4K);
        (self.iova_base, page, self.map_len / page)
    }

    /// Copies `out.len()` bytes from `offset`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(out.len()).filter(|&e| e <= self.len());
        if end.is_none() {
            return Err(Error::OutOfBounds {
                object: "registered memory".into(),
                offset: offset as u64,
                len: out.len() as u64,
                size: self.len() as u64,
            });
        }
        // SAFETY: in bounds (checked); volatile-free byte copy from memory the device may write:
        // a copy, never a reference handed out.
        unsafe { copy_from_device(self.ptr().add(offset), out) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let end = offset.checked_add(data.len()).filter(|&e| e <= self.len());
        if end.is_none() {
            return Err(Error::OutOfBounds {
                object: "registered memory".into(),
                offset: offset as u64,
                len: data.len() as u64,
                size: self.len() as u64,
            });
        }
        // SAFETY: in bounds (checked); the buffer is ours or vouched for (`ExternalBuffer::new`);
        // writes go through a raw pointer.
        unsafe { copy_to_device(self.ptr().add(offset).cast_mut(), data) };
        Ok(())
    }

    fn unmap(&mut self) -> bool {
        if !self.mapped {
            return true;
        }
        match self.space.backend.dma_unmap(self.iova_base, self.map_len) {
            Ok(()) => {
                self.mapped = false;
                let _ = self.space.allocator().free(self.iova_base, self.map_len as u64);
                // SAFETY: the range was locked in `new`.
                unsafe { libc::munlock(self.page_base as *const libc::c_void, self.map_len) };
                true
            }
            Err(e) => {
                eprintln!(
                    "umlx: unmapping registered user memory at IOVA {:#x} failed: {e}; leaking it",
                    self.iova_base
                );
                false
            }
        }
    }

    /// Unmaps and returns the buffer (None if the unmap failed: the memory is then leaked so
    /// the device cannot reach reused memory; None for external memory, which stays its
    /// owner's).
    pub fn into_inner(mut self) -> Option<Box<[u8]>> {
        if self.unmap() { self.take_box() } else { None }
    }
}

impl<B: Backend> Drop for UserMemory<B> {
    fn drop(&mut self) {
        // A failed unmap leaves the buffer to the device: leaked, never freed for reuse.
        if self.unmap() {
            drop(self.take_box());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> IovaRange {
        IovaRange { start, end }
    }

    #[test]
    fn memlock_decision() {
        let st = MemlockState { limit: Some(64 << 10), locked: 16 << 10, cap_ipc_lock: false };
        assert!(st.check(48 << 10).is_ok());
        match st.check(49 << 10) {
            Err(Error::MemlockLimit { needed, limit }) => {
                assert_eq!(needed, 65 << 10);
                assert_eq!(limit, 64 << 10);
            }
            other => panic!("expected MemlockLimit, got {other:?}"),
        }
        let msg = st.check(1 << 20).unwrap_err().to_string();
        assert!(msg.contains("ulimit -l"), "{msg}");
        let root = MemlockState { cap_ipc_lock: true, ..st };
        assert!(root.check(1 << 40).is_ok());
        let unlimited = MemlockState { limit: None, ..st };
        assert!(unlimited.check(1 << 40).is_ok());
    }

    #[test]
    fn clipping_and_merging() {
        let a = IovaAllocator::new(&[r(0, 0x1_ffff), r(0x2_0000, 0x2_ffff), r(0x5_0000, 0x6_0000)]);
        assert_eq!(a.free_ranges(), vec![r(0x1_0000, 0x2_ffff), r(0x5_0000, 0x6_0000)]);
        let b = IovaAllocator::new(&[r(0, 0xffff)]);
        assert_eq!(b.free_bytes(), 0);
    }

    #[test]
    fn buffer_alignment_rounding() {
        assert_eq!(round_up(1, PAGE_4K), Some(PAGE_4K));
        assert_eq!(round_up(PAGE_4K, PAGE_4K), Some(PAGE_4K));
        assert_eq!(round_up(usize::MAX, PAGE_4K), None);
    }
}
