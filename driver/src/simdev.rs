//! The sim backend: the software ConnectX behind the backend seam.
//!
//! BAR writes are trapped into the device model (a doorbell write is an event, as on hardware);
//! DMA mappings go into the model's IOMMU table, so memory the driver forgot to map is an IOMMU
//! fault, as it would be on hardware; interrupts are eventfds the model signals. This is one of
//! the driver's `unsafe` modules: it forwards the `dma_map` contract to the model.

use crate::backend::{Backend, IovaRange};
use crate::{Error, Result};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use umlx_hwdesc::plain::uar;
use umlx_sim::{SimConfig, SimDevice};

/// The page plain doorbells land in: one UAR page, aligned as a mapped UAR page is.
#[repr(C, align(4096))]
struct DoorbellSink([AtomicU64; uar::UAR_PAGE_SIZE / 8]);

/// A software ConnectX reached through the backend seam.
pub struct SimBackend {
    name: String,
    dev: SimDevice,
    irqs: Vec<Arc<OwnedFd>>,
    /// With plain doorbells: where data-path doorbell writes land instead of the device.
    doorbell_sink: Option<Box<DoorbellSink>>,
}

impl std::fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimBackend").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A new software ConnectX with `cfg`, or the operating system's refusal of its engine thread.
fn power_on(cfg: SimConfig) -> Result<SimDevice> {
    SimDevice::try_new(cfg).map_err(|e| Error::Os { op: "powering on the software ConnectX".into(), source: e })
}

impl SimBackend {
    /// Powers on a new software ConnectX with `cfg` and connects its MSI-X vectors to eventfds.
    pub fn new(name: &str, cfg: SimConfig) -> Result<Arc<SimBackend>> {
        Self::attach(name, power_on(cfg)?)
    }

    /// Attaches to an existing device model (e.g. one wired to a fabric).
    pub fn attach(name: &str, dev: SimDevice) -> Result<Arc<SimBackend>> {
        let n = dev.irq_count();
        let mut irqs = Vec::with_capacity(n as usize);
        for v in 0..n {
            let fd = crate::event::new_eventfd(true).map_err(|e| Error::Os { op: "eventfd".into(), source: e })?;
            dev.set_irq_eventfd(v, Some(fd.as_fd()))
                .map_err(|e| Error::Os { op: format!("connecting MSI-X vector {v}"), source: e })?;
            irqs.push(Arc::new(fd));
        }
        Ok(Arc::new(SimBackend { name: format!("sim:{name}"), dev, irqs, doorbell_sink: None }))
    }

    /// A backend whose data-path doorbells (SQ doorbells and BlueFlame writes at UAR offset
    /// 0x800 and up) are plain stores to memory that the device never sees: for measuring the
    /// driver's own data-path cost, as rdma-core's figures are measured with the doorbell
    /// pointing at plain memory. Commands, EQ and CQ doorbells still reach the device.
    pub fn with_plain_doorbells(name: &str, cfg: SimConfig) -> Result<Arc<SimBackend>> {
        Self::attach_with_plain_doorbells(name, power_on(cfg)?)
    }

    /// [`SimBackend::attach`] with plain doorbells, as [`SimBackend::with_plain_doorbells`].
    pub fn attach_with_plain_doorbells(name: &str, dev: SimDevice) -> Result<Arc<SimBackend>> {
        let b = Self::attach(name, dev)?;
        let mut b = Arc::try_unwrap(b).map_err(|_| Error::InvalidArgument("backend shared".into()))?;
        b.doorbell_sink = Some(Box::new(DoorbellSink(std::array::from_fn(|_| AtomicU64::new(0)))));
        Ok(Arc::new(b))
    }

    /// The last value stored to a plain doorbell at BAR0 `offset` (plain-doorbell mode).
    pub fn plain_doorbell(&self, offset: usize) -> Option<u64> {
        self.doorbell_sink.as_ref().map(|s| s.0[(offset / 8) % (uar::UAR_PAGE_SIZE / 8)].load(Ordering::Relaxed))
    }

    /// The device model.
    pub fn device(&self) -> &SimDevice {
        &self.dev
    }

    /// A neighbour resolver over the device's own wire: `f(my_ip, ip)` asks for `ip`'s MAC by
    /// ARP or neighbour solicitation from `my_ip`, waiting up to `timeout`.
    pub fn neighbor_resolver(
        &self,
        timeout: std::time::Duration,
    ) -> impl Fn(std::net::IpAddr, std::net::IpAddr) -> Option<[u8; 6]> + Send + Sync + 'static {
        let port = self.dev.port();
        move |me, ip| port.resolve(me, ip, timeout)
    }
}

// SAFETY: `doorbell_page` returns the backend's own sink page (plain doorbells) or nothing;
// register accesses are calls into the device model, which checks offsets; DMA goes through the
// model's IOMMU table; the eventfds are owned by the backend.
unsafe impl Backend for SimBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn bar0_len(&self) -> usize {
        self.dev.bar0_len() as usize
    }

    #[inline]
    fn read32(&self, offset: usize) -> u32 {
        self.dev.bar0_read32(offset as u64)
    }

    #[inline]
    fn write32(&self, offset: usize, value: u32) {
        self.dev.bar0_write32(offset as u64, value)
    }

    #[inline]
    fn write64(&self, offset: usize, value: u64) {
        if let Some(sink) = &self.doorbell_sink
            && offset % uar::UAR_PAGE_SIZE >= uar::BF_OFFSET
        {
            sink.0[(offset / 8) % (uar::UAR_PAGE_SIZE / 8)].store(value, Ordering::Relaxed);
            return;
        }
        self.dev.bar0_write64(offset as u64, value)
    }

    fn doorbell_page(&self, uar_offset: usize) -> Option<std::ptr::NonNull<u8>> {
        // Plain doorbells: every UAR page's BlueFlame half lands in the one sink page, as in
        // `write64` (which indexes it by the offset within the page).
        let _ = uar_offset;
        let sink = self.doorbell_sink.as_ref()?;
        std::ptr::NonNull::new(sink.0.as_ptr().cast_mut().cast::<u8>())
    }

    unsafe fn dma_map(&self, vaddr: *mut u8, len: usize, iova: u64) -> Result<()> {
        // SAFETY: the caller guarantees the memory stays valid and unmoved until dma_unmap.
        unsafe { self.dev.dma_map(iova, vaddr, len as u64) }.map_err(|e| Error::Os {
            op: format!("{}: IOMMU map of IOVA {iova:#x} ({len:#x} bytes)", self.name),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
        })
    }

    fn dma_unmap(&self, iova: u64, len: usize) -> Result<()> {
        self.dev.dma_unmap(iova, len as u64).map_err(|e| Error::Os {
            op: format!("{}: IOMMU unmap of IOVA {iova:#x} ({len:#x} bytes)", self.name),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()),
        })
    }

    fn iova_ranges(&self) -> Vec<IovaRange> {
        // What an x86 IOMMU typically reports, minus the MSI window.
        vec![IovaRange { start: 0x1_0000, end: 0xfedf_ffff }, IovaRange { start: 0xfef0_0000, end: (1 << 48) - 1 }]
    }

    fn iommu_page_sizes(&self) -> u64 {
        // 4 KiB, 2 MiB, 1 GiB.
        (1 << 12) | (1 << 21) | (1 << 30)
    }

    fn irq_count(&self) -> u32 {
        self.irqs.len() as u32
    }

    fn irq_eventfd(&self, vector: u32) -> Option<Arc<OwnedFd>> {
        self.irqs.get(vector as usize).cloned()
    }

    fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.dev
            .config_read(offset as usize, buf)
            .map_err(|e| Error::InvalidArgument(format!("config read at {offset:#x}: {e}")))
    }

    fn config_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.dev
            .config_write(offset as usize, data)
            .map_err(|e| Error::InvalidArgument(format!("config write at {offset:#x}: {e}")))
    }

    fn reset(&self) -> Result<()> {
        self.dev.reset();
        Ok(())
    }
}
