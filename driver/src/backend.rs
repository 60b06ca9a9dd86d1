//! The backend seam: the one trait that stands between the driver and a device.
//!
//! A backend gives the driver BAR0 register access (32-bit big-endian registers and 64-bit
//! doorbells), DMA mapping of driver memory at IOVAs, interrupts as eventfds (one per vector)
//! and PCI config-space access. Two implementations exist: [`crate::vfio::VfioBackend`] for a
//! real adapter bound to `vfio-pci`, and [`crate::simdev::SimBackend`] for the software ConnectX.
//! The driver is generic over `B: Backend`, so the VFIO data path pays nothing for the seam.

use crate::Result;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// A usable IOVA range of the IOMMU, inclusive of both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable IOVA.
    pub start: u64,
    /// Last usable IOVA (inclusive).
    pub end: u64,
}

/// Device access for the driver. All register values are host-order integers; the backend
/// converts to the device's big-endian byte order.
///
/// # Safety
///
/// The driver builds raw-pointer accesses on what a backend tells it, so an implementation
/// promises, beyond each method's own documentation:
///
/// * [`Backend::doorbell_page`]: a pointer it returns is aligned to the 4 KiB UAR page and
///   valid for 8-byte aligned volatile
///   stores at page offsets 0x800 to 0xfff for as long as the backend lives, reaches no memory
///   the program uses otherwise, and a store there has the effect [`Backend::write64`] of the
///   byte-swapped value at that BAR0 offset would have.
/// * [`Backend::read32`], [`Backend::write32`], [`Backend::write64`] and
///   [`Backend::write_block`] with an offset outside BAR0 (or misaligned) do not cause undefined
///   behaviour: they panic or are ignored, never touch other memory.
/// * [`Backend::dma_map`] lets the device reach exactly `[vaddr, vaddr + len)` at `iova`, and
///   after [`Backend::dma_unmap`] of a range returns `Ok`, the device can no longer reach it.
///
/// File descriptors cross the seam as owned values ([`Backend::irq_eventfd`] returns an
/// `Arc<OwnedFd>`), so no promise about their lifetime is needed: a descriptor is open for as
/// long as the driver holds it.
pub unsafe trait Backend: Send + Sync + 'static {
    /// A short name for messages: `pci:0000:3b:00.0` or `sim:0`.
    fn name(&self) -> &str;

    /// Length of BAR0 in bytes.
    fn bar0_len(&self) -> usize;

    /// Reads the 32-bit big-endian register at BAR0 + `offset` (4-byte aligned, in bounds).
    fn read32(&self, offset: usize) -> u32;

    /// Writes the 32-bit big-endian register at BAR0 + `offset`.
    fn write32(&self, offset: usize, value: u32);

    /// Writes 8 bytes at BAR0 + `offset` (8-byte aligned) as one 64-bit store of the big-endian
    /// encoding of `value`: the doorbell format (CQ arm, SQ doorbell).
    fn write64(&self, offset: usize, value: u64);

    /// The UAR page at BAR0 + `uar_offset` (4 KiB aligned) as a pointer through which 8-byte
    /// aligned stores to its BlueFlame registers (page offsets 0x800 to 0xfff) reach the device
    /// exactly as [`Backend::write64`] with the byte-swapped value would: a mapping of BAR0
    /// that stays valid as long as the backend lives. `None` (the default) when doorbells must
    /// go through `write64`. The send queue uses it to ring with one store.
    fn doorbell_page(&self, uar_offset: usize) -> Option<std::ptr::NonNull<u8>> {
        let _ = uar_offset;
        None
    }

    /// Copies a BlueFlame block (a multiple of 8 bytes, 8-byte aligned) to BAR0 + `offset`.
    fn write_block(&self, offset: usize, data: &[u64]) {
        for (i, w) in data.iter().enumerate() {
            self.write64(offset + 8 * i, *w);
        }
    }

    /// Maps `len` bytes of process memory at `vaddr` for device read and write at `iova`
    /// (VFIO_IOMMU_MAP_DMA).
    ///
    /// # Safety
    /// The memory must stay allocated, and must not move, until [`Backend::dma_unmap`] of the
    /// same range returns: the device may read and write it at any time while it is mapped.
    unsafe fn dma_map(&self, vaddr: *mut u8, len: usize, iova: u64) -> Result<()>;

    /// Removes a mapping made by [`Backend::dma_map`] (VFIO_IOMMU_UNMAP_DMA).
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<()>;

    /// The IOMMU's usable IOVA ranges.
    fn iova_ranges(&self) -> Vec<IovaRange>;

    /// Bit mask of the IOMMU's supported page sizes (bit n set: 2^n bytes).
    fn iommu_page_sizes(&self) -> u64;

    /// Number of interrupt vectors (MSI-X) the device offers.
    fn irq_count(&self) -> u32;

    /// The eventfd signalled when `vector` fires, once interrupts are enabled; `None` if the
    /// vector has none.
    ///
    /// Shared, not borrowed: interrupts can be enabled again (new eventfds) or disabled while
    /// the driver waits on one, through `&self`, so a `BorrowedFd<'_>` tied to the backend could
    /// be closed under its holder, and a bare `RawFd` could even name another file by then.
    /// The `Arc` keeps the descriptor open while anyone holds it; after interrupts are
    /// re-enabled an old one is simply never signalled again. (A `dup` per call would do too,
    /// at a system call and a descriptor each.)
    fn irq_eventfd(&self, vector: u32) -> Option<Arc<OwnedFd>>;

    /// Enables every MSI-X vector with an eventfd (done at bring-up, before the EQs exist).
    /// Backends whose vectors are always connected need not do anything.
    fn enable_interrupts(&self) -> Result<()> {
        Ok(())
    }

    /// Reads PCI configuration space.
    fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Writes PCI configuration space.
    fn config_write(&self, offset: u64, data: &[u8]) -> Result<()>;

    /// Function-level reset of the device.
    fn reset(&self) -> Result<()>;
}

/// The backend of an open device, whichever kind it is: what the driver is instantiated with
/// when one program opens adapters and software ConnectX devices alike (the verbs API's
/// `Context`, `Qp`, `Cq` ... are not generic). The data path does not see the choice: sends ring
/// through the doorbell page pointer when the backend maps one, and polling never calls the
/// backend; register accesses on the control path pay one branch.
#[derive(Clone, Debug)]
pub enum AnyBackend {
    /// A ConnectX bound to `vfio-pci`.
    Vfio(std::sync::Arc<crate::vfio::VfioBackend>),
    /// A software ConnectX in this process.
    #[cfg(feature = "sim")]
    Sim(std::sync::Arc<crate::simdev::SimBackend>),
}

impl AnyBackend {
    /// The software ConnectX behind this backend, if it is one.
    #[cfg(feature = "sim")]
    pub fn as_sim(&self) -> Option<&std::sync::Arc<crate::simdev::SimBackend>> {
        match self {
            AnyBackend::Sim(s) => Some(s),
            AnyBackend::Vfio(_) => None,
        }
    }

    /// The VFIO backend behind this backend, if it is one.
    pub fn as_vfio(&self) -> Option<&std::sync::Arc<crate::vfio::VfioBackend>> {
        match self {
            AnyBackend::Vfio(v) => Some(v),
            #[cfg(feature = "sim")]
            AnyBackend::Sim(_) => None,
        }
    }
}

impl From<std::sync::Arc<crate::vfio::VfioBackend>> for AnyBackend {
    fn from(b: std::sync::Arc<crate::vfio::VfioBackend>) -> AnyBackend {
        AnyBackend::Vfio(b)
    }
}

#[cfg(feature = "sim")]
impl From<std::sync::Arc<crate::simdev::SimBackend>> for AnyBackend {
    fn from(b: std::sync::Arc<crate::simdev::SimBackend>) -> AnyBackend {
        AnyBackend::Sim(b)
    }
}

/// Calls `$call` on whichever backend `$self` holds.
macro_rules! each_backend {
    ($self:expr, $b:ident => $call:expr) => {
        match $self {
            AnyBackend::Vfio($b) => $call,
            #[cfg(feature = "sim")]
            AnyBackend::Sim($b) => $call,
        }
    };
}

// SAFETY: every method forwards to the held backend, whose own `unsafe impl Backend` makes the
// promises of the contract; forwarding changes no pointer, offset or lifetime (the held backend
// lives as long as this value, which owns an `Arc` of it).
unsafe impl Backend for AnyBackend {
    fn name(&self) -> &str {
        each_backend!(self, b => b.name())
    }

    fn bar0_len(&self) -> usize {
        each_backend!(self, b => b.bar0_len())
    }

    #[inline]
    fn read32(&self, offset: usize) -> u32 {
        each_backend!(self, b => b.read32(offset))
    }

    #[inline]
    fn write32(&self, offset: usize, value: u32) {
        each_backend!(self, b => b.write32(offset, value))
    }

    #[inline]
    fn write64(&self, offset: usize, value: u64) {
        each_backend!(self, b => b.write64(offset, value))
    }

    fn doorbell_page(&self, uar_offset: usize) -> Option<std::ptr::NonNull<u8>> {
        each_backend!(self, b => b.doorbell_page(uar_offset))
    }

    fn write_block(&self, offset: usize, data: &[u64]) {
        each_backend!(self, b => b.write_block(offset, data))
    }

    unsafe fn dma_map(&self, vaddr: *mut u8, len: usize, iova: u64) -> Result<()> {
        // SAFETY: the caller's promise (memory valid and unmoved until unmapped) is passed on.
        each_backend!(self, b => unsafe { b.dma_map(vaddr, len, iova) })
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<()> {
        each_backend!(self, b => b.dma_unmap(iova, len))
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        each_backend!(self, b => b.iova_ranges())
    }

    fn iommu_page_sizes(&self) -> u64 {
        each_backend!(self, b => b.iommu_page_sizes())
    }

    fn irq_count(&self) -> u32 {
        each_backend!(self, b => b.irq_count())
    }

    fn irq_eventfd(&self, vector: u32) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        each_backend!(self, b => b.irq_eventfd(vector))
    }

    fn enable_interrupts(&self) -> Result<()> {
        each_backend!(self, b => b.enable_interrupts())
    }

    fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        each_backend!(self, b => b.config_read(offset, buf))
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        each_backend!(self, b => b.config_write(offset, data))
    }

    fn reset(&self) -> Result<()> {
        each_backend!(self, b => b.reset())
    }
}
