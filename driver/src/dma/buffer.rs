//! [`DmaSpace`] (one device's backend and IOVA allocator) and [`DmaBuffer`] (driver-owned
//! memory mapped for the device).

use super::memory::round_up;
use super::{DmaMemory, IovaAllocator, PAGE_2M, PAGE_4K};
use crate::backend::Backend;
use crate::{Error, Result};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

/// One device's DMA address space: its backend and its IOVA allocator (seeded from the
/// backend's IOVA ranges, or the legacy ranges when it reports none). Every [`DmaBuffer`] keeps
/// it alive, so the backend outlives all mappings.
pub struct DmaSpace<B: Backend> {
    pub(super) backend: Arc<B>,
    iova: Mutex<IovaAllocator>,
    pub(super) iommu_page: u64,
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

    pub(super) fn allocator(&self) -> MutexGuard<'_, IovaAllocator> {
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
