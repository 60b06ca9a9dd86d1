//! DmaSpace and DmaBuffer against a recording fake backend: mapping, IOVA choice, unmapping on
//! drop, failures.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use umlx_driver::backend::{Backend, IovaRange};
use umlx_driver::dma::{DmaBuffer, DmaSpace, LEGACY_IOVA_RANGES, PAGE_2M, PAGE_4K};
use umlx_driver::{Error, Result};

#[derive(Default)]
struct Fake {
    ranges: Vec<IovaRange>,
    page_sizes: u64,
    maps: Mutex<Vec<(usize, usize, u64)>>,
    unmaps: Mutex<Vec<(u64, usize)>>,
    fail_map: AtomicBool,
    fail_unmap: AtomicBool,
}

// SAFETY: no doorbell page, registers ignored, no eventfds; `dma_map` only records the mapping
// (no device reaches the memory).
unsafe impl Backend for Fake {
    fn name(&self) -> &str {
        "fake:0"
    }
    fn bar0_len(&self) -> usize {
        0
    }
    fn read32(&self, _offset: usize) -> u32 {
        0
    }
    fn write32(&self, _offset: usize, _value: u32) {}
    fn write64(&self, _offset: usize, _value: u64) {}
    unsafe fn dma_map(&self, vaddr: *mut u8, len: usize, iova: u64) -> Result<()> {
        if self.fail_map.load(Ordering::Relaxed) {
            return Err(Error::Os { op: "fake map".into(), source: std::io::Error::from_raw_os_error(libc_enomem()) });
        }
        self.maps.lock().unwrap().push((vaddr as usize, len, iova));
        Ok(())
    }
    fn dma_unmap(&self, iova: u64, len: usize) -> Result<()> {
        if self.fail_unmap.load(Ordering::Relaxed) {
            return Err(Error::InvalidArgument("fake unmap failure".into()));
        }
        let mut maps = self.maps.lock().unwrap();
        let i = maps.iter().position(|m| m.2 == iova && m.1 == len).expect("unmap of a mapped range");
        maps.remove(i);
        self.unmaps.lock().unwrap().push((iova, len));
        Ok(())
    }
    fn iova_ranges(&self) -> Vec<IovaRange> {
        self.ranges.clone()
    }
    fn iommu_page_sizes(&self) -> u64 {
        self.page_sizes
    }
    fn irq_count(&self) -> u32 {
        0
    }
    fn irq_eventfd(&self, _vector: u32) -> Option<Arc<OwnedFd>> {
        None
    }
    fn config_read(&self, _offset: u64, _buf: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn config_write(&self, _offset: u64, _data: &[u8]) -> Result<()> {
        Ok(())
    }
    fn reset(&self) -> Result<()> {
        Ok(())
    }
}

fn libc_enomem() -> i32 {
    12
}

fn fake(ranges: Vec<IovaRange>, page_sizes: u64) -> Arc<Fake> {
    Arc::new(Fake { ranges, page_sizes, ..Default::default() })
}

#[test]
fn buffer_is_mapped_and_unmapped() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 40) - 1 }], 0x4020_1000);
    let space = DmaSpace::new(be.clone());
    assert_eq!(space.iommu_page_size(), 4096);
    let before = space.free_iova_bytes();
    let buf = DmaBuffer::new(&space, 100, false).unwrap();
    assert_eq!(buf.len(), PAGE_4K);
    assert!(buf.iova() >= 0x10000);
    assert_eq!(buf.iova() % 4096, 0);
    assert_eq!(buf.iova_at(8), buf.iova() + 8);
    assert_eq!(*be.maps.lock().unwrap(), vec![(buf.as_ptr() as usize, PAGE_4K, buf.iova())]);
    assert_eq!(space.free_iova_bytes(), before - PAGE_4K as u64);
    // Accessors through Deref.
    buf.write_u32_be(0, 0xfeed_f00d).unwrap();
    assert_eq!(buf.read_u32_be_at(0), 0xfeed_f00d);
    assert_eq!(buf.memory().read_u8(0).unwrap(), 0xfe);
    let iova = buf.iova();
    drop(buf);
    assert!(be.maps.lock().unwrap().is_empty());
    assert_eq!(*be.unmaps.lock().unwrap(), vec![(iova, PAGE_4K)]);
    assert_eq!(space.free_iova_bytes(), before);
}

#[test]
fn unmap_keeps_the_memory_and_frees_the_iova() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 40) - 1 }], 0x1000);
    let space = DmaSpace::new(be.clone());
    let before = space.free_iova_bytes();
    let buf = DmaBuffer::new(&space, 2 * PAGE_4K, false).unwrap();
    buf.write_bytes(5, b"still here").unwrap();
    let (iova, ptr) = (buf.iova(), buf.as_ptr());
    let mem = buf.unmap().unwrap();
    assert!(be.maps.lock().unwrap().is_empty());
    assert_eq!(*be.unmaps.lock().unwrap(), vec![(iova, 2 * PAGE_4K)]);
    assert_eq!(space.free_iova_bytes(), before);
    // The memory is the same, still readable and writable by the CPU.
    assert_eq!(mem.as_ptr(), ptr);
    let mut b = [0u8; 10];
    mem.read_bytes(5, &mut b).unwrap();
    assert_eq!(&b, b"still here");
    mem.fill(0, PAGE_4K, 0xaa).unwrap();
    // A failed unmap reports the error and keeps the IOVA (the memory is leaked).
    let buf = DmaBuffer::new(&space, PAGE_4K, false).unwrap();
    be.fail_unmap.store(true, Ordering::Relaxed);
    assert!(buf.unmap().is_err());
    assert_eq!(space.free_iova_bytes(), before - PAGE_4K as u64);
    be.fail_unmap.store(false, Ordering::Relaxed);
}

#[test]
fn large_buffers_get_2m_aligned_iovas() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 40) - 1 }], 0x1000);
    let space = DmaSpace::new(be.clone());
    let small = DmaBuffer::new(&space, 4096, false).unwrap();
    let big = DmaBuffer::new(&space, PAGE_2M + 1, true).unwrap();
    assert_eq!(big.iova() % PAGE_2M as u64, 0);
    assert!(big.len() > PAGE_2M);
    assert_eq!(big.len() % big.page_size(), 0);
    let block = DmaBuffer::with_alignment(&space, PAGE_4K, false, PAGE_2M).unwrap();
    assert_eq!(block.iova() % PAGE_2M as u64, 0);
    assert_eq!(block.as_ptr() as usize % PAGE_2M, 0);
    // No two buffers share IOVA space.
    let mut spans =
        [(small.iova(), small.len() as u64), (big.iova(), big.len() as u64), (block.iova(), block.len() as u64)];
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0);
    }
    assert_eq!(be.maps.lock().unwrap().len(), 3);
}

#[test]
fn legacy_ranges_when_backend_reports_none() {
    let be = fake(vec![], 0);
    let space = DmaSpace::new(be);
    assert_eq!(space.iommu_page_size(), 4096);
    let buf = DmaBuffer::new(&space, 1, false).unwrap();
    assert!(LEGACY_IOVA_RANGES.iter().any(|r| r.start <= buf.iova() && buf.iova() <= r.end));
}

#[test]
fn larger_iommu_pages_round_the_buffer() {
    // Smallest IOMMU page >= 4 KiB is 64 KiB (bits 16 and 21 set; bit 11 ignored).
    let be = fake(vec![IovaRange { start: 0, end: (1 << 40) - 1 }], (1 << 16) | (1 << 21) | (1 << 11));
    let space = DmaSpace::new(be.clone());
    assert_eq!(space.iommu_page_size(), 1 << 16);
    let buf = DmaBuffer::new(&space, 100, false).unwrap();
    assert_eq!(buf.len(), 1 << 16);
    assert_eq!(buf.iova() % (1 << 16), 0);
    assert_eq!(buf.as_ptr() as usize % (1 << 16), 0);
}

#[test]
fn map_failure_frees_the_iova() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 30) - 1 }], 0x1000);
    let space = DmaSpace::new(be.clone());
    let before = space.free_iova_bytes();
    be.fail_map.store(true, Ordering::Relaxed);
    assert!(matches!(DmaBuffer::new(&space, 4096, false), Err(Error::Os { .. })));
    assert_eq!(space.free_iova_bytes(), before);
}

#[test]
fn unmap_failure_leaks_instead_of_freeing() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 30) - 1 }], 0x1000);
    let space = DmaSpace::new(be.clone());
    let before = space.free_iova_bytes();
    let buf = DmaBuffer::new(&space, 4096, false).unwrap();
    be.fail_unmap.store(true, Ordering::Relaxed);
    drop(buf);
    // The IOVA stays taken (the device might still use it).
    assert_eq!(space.free_iova_bytes(), before - 4096);
}

#[test]
fn exhausted_space_gives_no_iova() {
    let be = fake(vec![IovaRange { start: 0x10000, end: 0x1ffff }], 0x1000);
    let space = DmaSpace::new(be.clone());
    let a = DmaBuffer::new(&space, 0x8000, false).unwrap();
    let b = DmaBuffer::new(&space, 0x8000, false).unwrap();
    assert!(matches!(DmaBuffer::new(&space, 0x1000, false), Err(Error::NoIova { len: 0x1000 })));
    drop(a);
    let c = DmaBuffer::new(&space, 0x1000, false).unwrap();
    assert_eq!(c.iova(), 0x10000);
    drop((b, c));
    assert!(be.maps.lock().unwrap().is_empty());
}

#[test]
fn buffers_keep_the_backend_alive() {
    let be = fake(vec![], 0);
    let space = DmaSpace::new(be.clone());
    let buf = DmaBuffer::new(&space, 4096, false).unwrap();
    drop(space);
    assert!(Arc::strong_count(&be) >= 2);
    assert_eq!(buf.backend().name(), "fake:0");
    drop(buf);
    assert_eq!(Arc::strong_count(&be), 1);
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DmaBuffer<Fake>>();
}

#[test]
fn space_iova_allocation_for_user_memory() {
    let be = fake(vec![IovaRange { start: 0, end: (1 << 30) - 1 }], 0x1000);
    let space = DmaSpace::new(be);
    let x = space.alloc_iova(0x5000, 1).unwrap();
    assert_eq!(x % 0x1000, 0, "raised to the IOMMU page");
    space.free_iova(x, 0x5000).unwrap();
    assert!(space.free_iova(x, 0x5000).is_err());
}
