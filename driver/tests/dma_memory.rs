//! DmaMemory: allocation, page sizes, huge-page fallback, bounds checks and byte order.

use umlx_driver::Error;
use umlx_driver::dma::{DmaMemory, PAGE_2M, PAGE_4K};

fn free_huge_pages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn is_oob(r: Result<impl std::fmt::Debug, Error>) -> bool {
    matches!(r, Err(Error::OutOfBounds { .. }))
}

#[test]
fn small_allocation_is_one_zeroed_page() {
    let m = DmaMemory::new(1).unwrap();
    assert_eq!(m.len(), PAGE_4K);
    assert_eq!(m.page_size(), PAGE_4K);
    assert!(!m.is_huge());
    assert!(!m.is_empty());
    assert_eq!(m.as_ptr() as usize % PAGE_4K, 0);
    let mut buf = vec![0xAAu8; m.len()];
    m.read_bytes(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn length_rounds_up_to_pages() {
    assert_eq!(DmaMemory::new(4097).unwrap().len(), 2 * PAGE_4K);
    assert_eq!(DmaMemory::new(3 * PAGE_4K).unwrap().len(), 3 * PAGE_4K);
}

#[test]
fn zero_length_is_refused() {
    assert!(matches!(DmaMemory::new(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(DmaMemory::alloc_aligned(4096, false, 3000), Err(Error::InvalidArgument(_))));
}

#[test]
fn huge_pages_fall_back_to_4k() {
    let m = DmaMemory::alloc(PAGE_4K, true).unwrap();
    if free_huge_pages() == 0 {
        // This machine has no huge pages: the fallback must have been taken.
        assert_eq!(m.page_size(), PAGE_4K);
        assert_eq!(m.len(), PAGE_4K);
    } else {
        assert!(m.page_size() == PAGE_2M || m.page_size() == PAGE_4K);
    }
    assert_eq!(m.len() % m.page_size(), 0);
    assert_eq!(m.as_ptr() as usize % m.page_size(), 0);
    m.write_u32_be(m.len() - 4, 0xdead_beef).unwrap();
    assert_eq!(m.read_u32_be(m.len() - 4).unwrap(), 0xdead_beef);
}

#[test]
fn aligned_allocation() {
    let m = DmaMemory::alloc_aligned(10_000, false, PAGE_2M).unwrap();
    assert_eq!(m.as_ptr() as usize % PAGE_2M, 0);
    assert_eq!(m.len(), 3 * PAGE_4K);
    m.fill(0, m.len(), 0x5a).unwrap();
    assert_eq!(m.read_u8(m.len() - 1).unwrap(), 0x5a);
}

#[test]
fn big_endian_in_memory() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    m.write_u32_be(0, 0x1122_3344).unwrap();
    m.write_u64_be(8, 0x0102_0304_0506_0708).unwrap();
    m.write_u16_be(16, 0xa1b2).unwrap();
    m.write_u8(18, 0xc3).unwrap();
    let mut b = [0u8; 19];
    m.read_bytes(0, &mut b).unwrap();
    assert_eq!(&b[0..4], &[0x11, 0x22, 0x33, 0x44]);
    assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[16..19], &[0xa1, 0xb2, 0xc3]);
    assert_eq!(m.read_u32_be(0).unwrap(), 0x1122_3344);
    assert_eq!(m.read_u64_be(8).unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(m.read_u16_be(16).unwrap(), 0xa1b2);
    // The data-path accessors agree with the checked ones.
    assert_eq!(m.read_u32_be_at(0), 0x1122_3344);
    assert_eq!(m.read_u64_be_at(8), 0x0102_0304_0506_0708);
    assert_eq!(m.read_u16_be_at(16), 0xa1b2);
    assert_eq!(m.read_u8_at(18), 0xc3);
    m.write_u32_be_at(32, 0xcafe_f00d);
    m.write_u64_be_at(40, 0x8877_6655_4433_2211);
    m.write_u16_be_at(48, 0x0bad);
    m.write_u8_at(50, 0x7f);
    let mut c = [0u8; 19];
    m.read_bytes(32, &mut c).unwrap();
    assert_eq!(&c[0..4], &[0xca, 0xfe, 0xf0, 0x0d]);
    assert_eq!(&c[8..16], &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
    assert_eq!(&c[16..19], &[0x0b, 0xad, 0x7f]);
}

#[test]
fn unaligned_checked_accessors() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    m.write_u32_be(1, 0xa0b0_c0d0).unwrap();
    m.write_u64_be(13, 0x1020_3040_5060_7080).unwrap();
    let mut b = [0u8; 24];
    m.read_bytes(0, &mut b).unwrap();
    assert_eq!(&b[1..5], &[0xa0, 0xb0, 0xc0, 0xd0]);
    assert_eq!(&b[13..21], &[0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80]);
    assert_eq!(m.read_u32_be(1).unwrap(), 0xa0b0_c0d0);
    assert_eq!(m.read_u64_be(13).unwrap(), 0x1020_3040_5060_7080);
    assert_eq!(m.read_u16_be(2).unwrap(), 0xb0c0);
}

#[test]
fn bounds_are_checked() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    let n = m.len();
    assert!(m.read_u32_be(n - 4).is_ok());
    assert!(is_oob(m.read_u32_be(n - 3)));
    assert!(is_oob(m.read_u64_be(n - 4)));
    assert!(is_oob(m.write_u16_be(n - 1, 0)));
    assert!(is_oob(m.read_u8(n)));
    assert!(is_oob(m.write_u8(n, 0)));
    assert!(is_oob(m.write_bytes(n - 96, &[0u8; 97])));
    assert!(is_oob(m.read_bytes(n - 1, &mut [0u8; 2])));
    assert!(is_oob(m.fill(usize::MAX, 2, 0)));
    assert!(is_oob(m.fill(1, usize::MAX, 0)));
    assert!(m.read_bytes(n, &mut []).is_ok());
    let e = m.read_u32_be(n).unwrap_err().to_string();
    assert!(e.contains("DMA memory") && e.contains("0x1000"), "{e}");
    // Nothing was written by the refused accesses.
    let mut buf = vec![0u8; n];
    m.read_bytes(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
#[should_panic(expected = "out of bounds")]
fn data_path_read_out_of_bounds_panics() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    let _ = m.read_u32_be_at(PAGE_4K);
}

#[test]
#[should_panic(expected = "aligned")]
fn data_path_misaligned_write_panics() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    m.write_u64_be_at(4, 1);
}

#[test]
#[should_panic(expected = "out of bounds")]
fn data_path_huge_offset_panics() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    m.write_u8_at(usize::MAX, 1);
}

#[test]
fn copies_match_a_model_at_every_alignment() {
    let m = DmaMemory::new(PAGE_4K).unwrap();
    let mut model = vec![0u8; 256];
    let mut seed = 0x1234_5678u32;
    for start in 0..24 {
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 63, 100] {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            m.write_bytes(start, &data).unwrap();
            model[start..start + len].copy_from_slice(&data);
            let fill_at = (start * 7) % 200;
            m.fill(fill_at, len / 2, start as u8).unwrap();
            model[fill_at..fill_at + len / 2].fill(start as u8);
            let mut back = vec![0u8; 256];
            m.read_bytes(0, &mut back).unwrap();
            assert_eq!(back, model, "start {start} len {len}");
            let mut part = vec![0u8; len];
            m.read_bytes(start + 1, &mut part).unwrap();
            assert_eq!(part[..], model[start + 1..start + 1 + len]);
        }
    }
}

#[test]
fn memory_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<DmaMemory>();
    let m = std::sync::Arc::new(DmaMemory::new(PAGE_4K).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..64 {
                    m.write_u32_be_at((t * 64 + i) * 4, (t * 1000 + i) as u32);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..4 {
        for i in 0..64 {
            assert_eq!(m.read_u32_be_at((t * 64 + i) * 4), (t * 1000 + i) as u32);
        }
    }
}
