//! IovaAllocator: alignment, the reserved low window, exhaustion, free and coalescing, and a
//! seeded random alloc/free run checked against a model.

use std::collections::BTreeMap;
use umlx_driver::Error;
use umlx_driver::backend::IovaRange;
use umlx_driver::dma::{IovaAllocator, LEGACY_IOVA_RANGES, MIN_IOVA};

fn r(start: u64, end: u64) -> IovaRange {
    IovaRange { start, end }
}

#[test]
fn allocations_are_aligned() {
    let mut a = IovaAllocator::new(&[r(0, (1 << 39) - 1)]);
    let x = a.alloc(0x1000, 0x1000).unwrap();
    assert_eq!(x, MIN_IOVA);
    let y = a.alloc(0x1000, 0x20_0000).unwrap();
    assert_eq!(y % 0x20_0000, 0);
    let z = a.alloc(0x3000, 0x4000).unwrap();
    assert_eq!(z % 0x4000, 0);
    assert!(z >= x + 0x1000);
    // The hole left by alignment is used by a later small allocation.
    let w = a.alloc(0x1000, 0x1000).unwrap();
    assert_eq!(w, x + 0x1000);
}

#[test]
fn never_hands_out_the_low_window() {
    let mut a = IovaAllocator::new(&[r(0, 0x1_ffff)]);
    assert_eq!(a.free_ranges(), vec![r(MIN_IOVA, 0x1_ffff)]);
    let x = a.alloc(1, 1).unwrap();
    assert_eq!(x, MIN_IOVA);
    let mut only_low = IovaAllocator::new(&[r(0, 0xffff)]);
    assert_eq!(only_low.free_bytes(), 0);
    assert!(matches!(only_low.alloc(1, 1), Err(Error::NoIova { len: 1 })));
}

#[test]
fn exhaustion_gives_no_iova() {
    let mut a = IovaAllocator::new(&[r(0x1_0000, 0x1_ffff)]);
    let got: Vec<u64> = (0..16).map(|_| a.alloc(0x1000, 0x1000).unwrap()).collect();
    assert_eq!(got[15], 0x1_f000);
    assert_eq!(a.free_bytes(), 0);
    match a.alloc(0x1000, 0x1000) {
        Err(Error::NoIova { len }) => assert_eq!(len, 0x1000),
        other => panic!("expected NoIova, got {other:?}"),
    }
    let msg = a.alloc(0x1000, 0x1000).unwrap_err().to_string();
    assert!(msg.contains("0x1000"), "{msg}");
    // Too big for a fresh allocator, or not fitting once aligned.
    let mut b = IovaAllocator::new(&[r(0x1_0000, 0x1_ffff)]);
    assert!(matches!(b.alloc(0x1_0001, 1), Err(Error::NoIova { .. })));
    assert!(matches!(b.alloc(0x1_0000, 0x2_0000), Err(Error::NoIova { .. })));
    assert_eq!(b.alloc(0x1_0000, 0x1_0000).unwrap(), 0x1_0000);
}

#[test]
fn invalid_arguments() {
    let mut a = IovaAllocator::new(&LEGACY_IOVA_RANGES);
    assert!(matches!(a.alloc(0, 0x1000), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.alloc(0x1000, 0), Err(Error::InvalidArgument(_))));
    assert!(matches!(a.alloc(0x1000, 0x3000), Err(Error::InvalidArgument(_))));
    let x = a.alloc(0x2000, 0x1000).unwrap();
    assert!(matches!(a.free(x, 0x1000), Err(Error::InvalidArgument(_))), "wrong length");
    assert!(matches!(a.free(x + 0x1000, 0x1000), Err(Error::InvalidArgument(_))), "not a start");
    a.free(x, 0x2000).unwrap();
    assert!(matches!(a.free(x, 0x2000), Err(Error::InvalidArgument(_))), "double free");
}

#[test]
fn free_coalesces_in_any_order() {
    let whole = vec![r(0x10_0000, 0x1f_ffff)];
    for order in [[0, 1, 2], [1, 0, 2], [2, 1, 0], [0, 2, 1], [1, 2, 0], [2, 0, 1]] {
        let mut a = IovaAllocator::new(&whole);
        let xs = [a.alloc(0x1000, 0x1000).unwrap(), a.alloc(0x2000, 0x1000).unwrap(), a.alloc(0x3000, 0x1000).unwrap()];
        let lens = [0x1000, 0x2000, 0x3000];
        assert_eq!(xs, [0x10_0000, 0x10_1000, 0x10_3000]);
        for &i in &order {
            a.free(xs[i], lens[i]).unwrap();
        }
        assert_eq!(a.free_ranges(), whole, "order {order:?}");
        assert_eq!(a.allocated(), 0);
    }
}

#[test]
fn ranges_are_merged_and_sorted() {
    let a = IovaAllocator::new(&[
        r(0x50_0000, 0x5f_ffff),
        r(0x10_0000, 0x1f_ffff),
        r(0x20_0000, 0x2f_ffff), // adjacent to the previous one
        r(0x58_0000, 0x6f_ffff), // overlaps the first one
        r(0x90_0000, 0x80_0000), // empty (start > end): ignored
    ]);
    assert_eq!(a.free_ranges(), vec![r(0x10_0000, 0x2f_ffff), r(0x50_0000, 0x6f_ffff)]);
}

#[test]
fn legacy_ranges_when_none_reported() {
    let a = IovaAllocator::with_legacy_fallback(&[]);
    assert_eq!(a.free_ranges(), LEGACY_IOVA_RANGES.to_vec());
    assert_eq!(LEGACY_IOVA_RANGES[0], r(0x10000, 0xFEDF_FFFF));
    assert_eq!(LEGACY_IOVA_RANGES[1], r(0xFEF0_0000, (1 << 39) - 1));
    let b = IovaAllocator::with_legacy_fallback(&[r(0x100_0000, 0x1ff_ffff)]);
    assert_eq!(b.free_ranges(), vec![r(0x100_0000, 0x1ff_ffff)]);
    // A request that does not fit below the MSI window goes above it.
    let mut c = IovaAllocator::with_legacy_fallback(&[]);
    let big = c.alloc(1 << 32, 1 << 32).unwrap();
    assert_eq!(big, 1 << 32);
}

#[test]
fn top_of_the_address_space_does_not_overflow() {
    let top = r(u64::MAX - 0xf_ffff, u64::MAX);
    let mut a = IovaAllocator::new(&[top]);
    let x = a.alloc(0x10_0000, 0x10_0000).unwrap();
    assert_eq!(x, u64::MAX - 0xf_ffff);
    assert!(matches!(a.alloc(1, 1), Err(Error::NoIova { .. })));
    a.free(x, 0x10_0000).unwrap();
    assert_eq!(a.free_ranges(), vec![top]);
    assert!(matches!(a.alloc(0x1000, 1 << 63), Err(Error::NoIova { .. })));
    let y = a.alloc(0x1000, 0x1000).unwrap();
    a.free(y, 0x1000).unwrap();
    assert_eq!(a.free_ranges(), vec![top]);
}

/// xorshift64*: a small seeded PRNG, enough to drive the allocator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn within(ranges: &[IovaRange], start: u64, len: u64) -> bool {
    ranges.iter().any(|r| r.start <= start && start + (len - 1) <= r.end)
}

#[test]
fn random_alloc_free_never_overlaps() {
    let ranges = [r(0, 0x3f_ffff), r(0x100_0000, 0x17f_ffff), r(0x200_0000, 0x200_ffff)];
    for seed in [1u64, 7, 0x5eed, 0xdead_beef_cafe] {
        let mut rng = Rng(seed);
        let mut a = IovaAllocator::new(&ranges);
        let initial = a.free_ranges();
        let total = a.free_bytes();
        let mut live: BTreeMap<u64, u64> = BTreeMap::new();
        let mut used = 0u64;
        for step in 0..20_000 {
            if live.is_empty() || rng.below(100) < 55 {
                let len = (1 + rng.below(64)) * 0x1000 - rng.below(2) * 0x800;
                let align = 1u64 << (12 + rng.below(8));
                match a.alloc(len, align) {
                    Ok(x) => {
                        assert_eq!(x % align, 0, "seed {seed} step {step}: alignment");
                        assert!(x >= MIN_IOVA);
                        assert!(within(&ranges, x, len), "seed {seed} step {step}: inside a range");
                        if let Some((&ps, &pl)) = live.range(..=x).next_back() {
                            assert!(ps + pl <= x, "seed {seed} step {step}: overlaps {ps:#x}");
                        }
                        if let Some((&ns, _)) = live.range(x..).next() {
                            assert!(x + len <= ns, "seed {seed} step {step}: overlaps {ns:#x}");
                        }
                        live.insert(x, len);
                        used += len;
                    }
                    Err(Error::NoIova { .. }) => {}
                    Err(e) => panic!("seed {seed} step {step}: {e}"),
                }
            } else {
                let k = rng.below(live.len() as u64) as usize;
                let (&x, &len) = live.iter().nth(k).unwrap();
                a.free(x, len).unwrap();
                live.remove(&x);
                used -= len;
            }
            assert_eq!(a.free_bytes() + used, total, "seed {seed} step {step}: accounting");
            assert_eq!(a.allocated(), live.len());
            // Free ranges never touch each other (always coalesced) and never cover live ones.
            let free = a.free_ranges();
            for w in free.windows(2) {
                assert!(w[0].end + 1 < w[1].start, "seed {seed} step {step}: not coalesced");
            }
            if step % 97 == 0 {
                for (&x, &len) in &live {
                    let last = x + (len - 1);
                    assert!(
                        free.iter().all(|f| f.end < x || last < f.start),
                        "seed {seed} step {step}: live {x:#x} is also free"
                    );
                }
            }
        }
        let rest: Vec<(u64, u64)> = live.into_iter().collect();
        for (x, len) in rest {
            a.free(x, len).unwrap();
        }
        assert_eq!(a.free_ranges(), initial, "seed {seed}: everything coalesces back");
    }
}
