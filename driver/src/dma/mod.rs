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
//!   [`Backend::dma_map`](crate::backend::Backend::dma_map), unmapped on drop.
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
//! This is one of the driver's eight unsafe modules (`backend`, `datapath`, `dma`, `event`, `simdev`,
//! `vfio`, `vfio::sys`, `vfio::mmio`). Its `memory` module calls
//! `mmap`/`madvise`/`mlock`/`munmap` and does volatile access through raw pointers; `buffer` and
//! `user` map memory for the device through [`Backend::dma_map`](crate::backend::Backend::dma_map)
//! and copy to and from it; `iova` has no `unsafe`. Every unsafe block carries a `SAFETY:` comment.

use crate::backend::IovaRange;
use crate::{Error, Result};
use std::sync::atomic::{Ordering, compiler_fence, fence};

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

mod buffer;
mod iova;
mod memory;
mod user;

pub use buffer::{DmaBuffer, DmaSpace};
pub use iova::IovaAllocator;
pub use memory::DmaMemory;
pub use user::{ExternalBuffer, UserMemory};

#[cfg(test)]
mod tests {
    use super::*;

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
}
