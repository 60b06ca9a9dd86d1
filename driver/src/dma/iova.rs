//! [`IovaAllocator`]: aligned IOVA ranges carved out of the IOMMU's usable ranges.

use super::{LEGACY_IOVA_RANGES, MIN_IOVA};
use crate::backend::IovaRange;
use crate::{Error, Result};
use std::collections::BTreeMap;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> IovaRange {
        IovaRange { start, end }
    }

    #[test]
    fn clipping_and_merging() {
        let a = IovaAllocator::new(&[r(0, 0x1_ffff), r(0x2_0000, 0x2_ffff), r(0x5_0000, 0x6_0000)]);
        assert_eq!(a.free_ranges(), vec![r(0x1_0000, 0x2_ffff), r(0x5_0000, 0x6_0000)]);
        let b = IovaAllocator::new(&[r(0, 0xffff)]);
        assert_eq!(b.free_bytes(), 0);
    }
}
