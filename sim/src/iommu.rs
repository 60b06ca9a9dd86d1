//! The device's IOMMU: the table of IOVA ranges the host mapped for DMA, and the only path by
//! which the model touches host memory.
//!
//! This is the table `VFIO_IOMMU_MAP_DMA` would hold: each mapping takes an IOVA range to a range
//! of the host process's memory with read and/or write permission. Every DMA read and write the
//! device makes goes through [`Iommu::read`] / [`Iommu::write`]; an access that is not fully
//! covered by mappings with the needed permission is an IOMMU fault: it is counted, recorded
//! (the last faulting IOVA), and returned as an error for the caller to turn into the
//! hardware's failure (delivery error, error CQE, catastrophic event). There is never a wild
//! memory access.
//!
//! This module is one of the sim's `unsafe` modules (with [`crate::hostmem`], [`crate::host`]
//! and the `dma_map` entry of [`crate::device`]): it hands the host addresses given at map
//! time, whose validity the mapper promised when calling the `unsafe` [`Iommu::map`], to
//! [`crate::hostmem`], which makes every access an atomic load or store (host memory is
//! shared with the host's threads, so a plain copy would be a data race).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// One IOMMU mapping.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    len: u64,
    host: usize,
    read: bool,
    write: bool,
}

/// An IOMMU fault: the device accessed an IOVA range that is not (fully) mapped with the needed
/// permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IommuFault {
    /// First faulting IOVA.
    pub iova: u64,
    /// Length of the access.
    pub len: usize,
    /// Whether it was a write.
    pub write: bool,
}

impl std::fmt::Display for IommuFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IOMMU fault: DMA {} of {} bytes at IOVA {:#x} is not mapped",
            if self.write { "write" } else { "read" },
            self.len,
            self.iova
        )
    }
}

impl std::error::Error for IommuFault {}

/// Errors of the map/unmap interface (what VFIO_IOMMU_MAP_DMA would return).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// Zero length, unaligned, or wrapping range (EINVAL).
    Invalid,
    /// Overlaps an existing mapping (EEXIST).
    Exists,
    /// No mapping at exactly that IOVA and length (ENOENT).
    NotFound,
    /// The container's mapping limit is reached (ENOSPC, vfio type1 `dma_entry_limit`).
    NoSpace,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MapError::Invalid => "invalid IOVA range (zero length, not 4 KiB aligned or wrapping)",
            MapError::Exists => "IOVA range overlaps an existing mapping",
            MapError::NotFound => "no mapping at that IOVA and length",
            MapError::NoSpace => "DMA mapping limit reached (vfio dma_entry_limit)",
        })
    }
}

impl std::error::Error for MapError {}

/// The IOVA page size the model's IOMMU uses (4 KiB; map requests must be aligned to it).
pub const IOMMU_PAGE: u64 = 4096;

/// How many recently used pages each thread remembers, over all the tables it uses (a power
/// of two).
const RECENT: usize = 32;

/// A page of IOVA space an access began in, and the mapping that holds it: an entry of a
/// thread's [`RECENT_PAGES`].
#[derive(Clone, Copy, Debug)]
struct RecentPage {
    /// The [`Iommu::id`] of the table the page was found in.
    table: u64,
    /// The page's number (IOVA / [`IOMMU_PAGE`]).
    page: u64,
    /// The start IOVA of the mapping, and the mapping.
    start: u64,
    map: Mapping,
}

thread_local! {
    /// The pages this thread's last accesses began in, each at the entry its table and page
    /// number pick, as a CPU's direct-mapped TLB: an access is most often in one of the few
    /// pages a message touches (its send queue, its doorbell record, its buffer, the peer's
    /// buffer, a CQ), and a hit costs one comparison. Kept per thread, so that threads that
    /// run the data path at once share no line of it; an entry holds for its table's
    /// [`Iommu::id`], which every unmap changes.
    static RECENT_PAGES: [Cell<Option<RecentPage>>; RECENT] = const { [const { Cell::new(None) }; RECENT] };
}

/// Where the recent-page caches find `page` of table `table`.
fn recent_slot(table: u64, page: u64) -> usize {
    (page.wrapping_add(table.wrapping_mul(RECENT as u64 / 2 + 1)) as usize) % RECENT
}

/// The source of [`Iommu::id`]s: never one twice in a process.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// The IOMMU table and its fault counter.
///
/// A DMA read or write takes the table shared (`&self`): threads that run the data path at
/// once translate through it together; mapping and unmapping take it exclusively.
#[derive(Debug)]
pub struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    /// What the threads' recent-page caches know this table by: a new one at every unmap, so
    /// that no thread's cache keeps a page that is no longer mapped.
    id: u64,
    faults: AtomicU64,
    last_fault: Mutex<Option<IommuFault>>,
    mapped_bytes: u64,
}

impl Default for Iommu {
    fn default() -> Iommu {
        Iommu {
            maps: BTreeMap::new(),
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            faults: AtomicU64::new(0),
            last_fault: Mutex::new(None),
            mapped_bytes: 0,
        }
    }
}

impl Iommu {
    /// An empty table.
    pub fn new() -> Iommu {
        Iommu::default()
    }

    /// Maps `len` bytes of host memory at `host` for device access at `iova`.
    ///
    /// # Safety
    /// `host..host+len` must be valid for reads (and for writes if `write`) for as long as the
    /// mapping exists, i.e. until [`Iommu::unmap`] removes it or the table is dropped or
    /// cleared. The memory may be read and written by the device concurrently with the host
    /// (as DMA is): the host must treat it as device-visible memory (no Rust references).
    pub unsafe fn map(&mut self, iova: u64, host: *mut u8, len: u64, read: bool, write: bool) -> Result<(), MapError> {
        if len == 0
            || !iova.is_multiple_of(IOMMU_PAGE)
            || !len.is_multiple_of(IOMMU_PAGE)
            || iova.checked_add(len).is_none()
        {
            return Err(MapError::Invalid);
        }
        let end = iova + len;
        if let Some((&s, m)) = self.maps.range(..end).next_back()
            && s + m.len > iova
        {
            return Err(MapError::Exists);
        }
        self.maps.insert(iova, Mapping { len, host: host.expose_provenance(), read, write });
        self.mapped_bytes += len;
        Ok(())
    }

    /// Removes the mapping that starts at `iova` with exactly `len` bytes.
    pub fn unmap(&mut self, iova: u64, len: u64) -> Result<(), MapError> {
        match self.maps.get(&iova) {
            Some(m) if m.len == len => {
                self.maps.remove(&iova);
                self.forget_recent();
                self.mapped_bytes -= len;
                Ok(())
            }
            _ => Err(MapError::NotFound),
        }
    }

    /// Makes every thread's cached pages of this table stale.
    fn forget_recent(&mut self) {
        self.id = NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes every mapping (device reset does not do this; closing the container does).
    pub fn clear(&mut self) {
        self.maps.clear();
        self.forget_recent();
        self.mapped_bytes = 0;
    }

    /// Number of mappings.
    pub fn mapping_count(&self) -> usize {
        self.maps.len()
    }

    /// Total mapped bytes.
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped_bytes
    }

    /// Number of faults so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// The most recent fault.
    pub fn last_fault(&self) -> Option<IommuFault> {
        *self.last_fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `iova..iova+len` is fully mapped with the given permission.
    pub fn is_mapped(&self, iova: u64, len: usize, write: bool) -> bool {
        self.resolve(iova, len, write, |_, _, _| {}).is_ok()
    }

    /// Walks the host chunks backing `iova..iova+len`; calls `f(host_addr, offset_in_access,
    /// chunk_len)` for each, but only after checking the whole range is mapped.
    fn resolve(&self, iova: u64, len: usize, write: bool, mut f: impl FnMut(usize, usize, usize)) -> Result<(), ()> {
        if len == 0 {
            return Ok(());
        }
        let end = iova.checked_add(len as u64).ok_or(())?;
        let allowed = |m: &Mapping| if write { m.write } else { m.read };
        // The common case: from a page used recently, inside its mapping.
        let page = iova / IOMMU_PAGE;
        let slot = recent_slot(self.id, page);
        let recent = RECENT_PAGES.with(|r| r[slot].get());
        if let Some(r) = recent
            && r.page == page
            && r.table == self.id
            && end <= r.start + r.map.len
            && allowed(&r.map)
        {
            f(r.map.host + (iova - r.start) as usize, 0, len);
            return Ok(());
        }
        // First pass: check coverage and permission.
        let mut cur = iova;
        while cur < end {
            let (&s, m) = self.maps.range(..=cur).next_back().ok_or(())?;
            if cur >= s + m.len || !allowed(m) {
                return Err(());
            }
            if cur == iova {
                let entry = RecentPage { table: self.id, page, start: s, map: *m };
                RECENT_PAGES.with(|r| r[slot].set(Some(entry)));
                if end <= s + m.len {
                    // Inside this one mapping: no second pass.
                    f(m.host + (iova - s) as usize, 0, len);
                    return Ok(());
                }
            }
            cur = (s + m.len).min(end);
        }
        // Second pass: hand out the chunks.
        let mut cur = iova;
        while cur < end {
            let (&s, m) = self.maps.range(..=cur).next_back().ok_or(())?;
            let chunk_end = (s + m.len).min(end);
            f(m.host + (cur - s) as usize, (cur - iova) as usize, (chunk_end - cur) as usize);
            cur = chunk_end;
        }
        Ok(())
    }

    #[cold]
    fn fault(&self, iova: u64, len: usize, write: bool) -> IommuFault {
        let fault = IommuFault { iova, len, write };
        self.faults.fetch_add(1, Ordering::Relaxed);
        *self.last_fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(fault);
        fault
    }

    /// DMA read: copies device-visible host memory at `iova` into `out`.
    pub fn read(&self, iova: u64, out: &mut [u8]) -> Result<(), IommuFault> {
        let len = out.len();
        let res = self.resolve(iova, len, false, |host, off, n| {
            // SAFETY: `host..host+n` lies inside a mapping whose validity for reads the mapper
            // guaranteed (see `map`); `out` is the device's own buffer, not mapped host memory,
            // so they do not overlap. `off + n <= len` (see `resolve`).
            unsafe { crate::hostmem::read(std::ptr::with_exposed_provenance(host), &mut out[off..off + n]) }
        });
        fence(Ordering::Acquire);
        res.map_err(|_| self.fault(iova, len, false))
    }

    /// Whether a DMA read of `len` bytes at `iova` would succeed, without reading: what a
    /// device checks before it answers with data it reads later, packet by packet. A range
    /// that would fault is recorded as a fault.
    pub fn check_read(&self, iova: u64, len: usize) -> Result<(), IommuFault> {
        let res = self.resolve(iova, len, false, |_, _, _| {});
        res.map_err(|_| self.fault(iova, len, false))
    }

    /// DMA write: copies `data` into device-visible host memory at `iova`.
    pub fn write(&self, iova: u64, data: &[u8]) -> Result<(), IommuFault> {
        let len = data.len();
        fence(Ordering::Release);
        let res = self.resolve(iova, len, true, |host, off, n| {
            // SAFETY: `host..host+n` lies inside a mapping whose validity for writes the mapper
            // guaranteed (see `map`); `data` is not mapped memory. `off + n <= len`.
            unsafe { crate::hostmem::write(std::ptr::with_exposed_provenance_mut(host), &data[off..off + n]) }
        });
        res.map_err(|_| self.fault(iova, len, true))
    }

    /// DMA write of a ring entry whose byte `owner_at` carries its ownership bit: every other
    /// byte first, then that byte with release ordering, so that a driver that sees the owner
    /// byte sees the whole entry (how the device publishes a CQE's `op_own`, an EQE's `owner`
    /// and a command entry's `status_own`). An `owner_at` outside `entry` makes it a plain
    /// [`Iommu::write`].
    pub fn write_owner_last(&self, iova: u64, entry: &[u8], owner_at: usize) -> Result<(), IommuFault> {
        let Some(&owner) = entry.get(owner_at) else {
            return self.write(iova, entry);
        };
        let len = entry.len();
        fence(Ordering::Release);
        // One translation for the whole entry (nothing is written unless all of it is mapped),
        // the owner byte's host address kept for the last store.
        let mut owner_host = None;
        let res = self.resolve(iova, len, true, |host, off, n| {
            let chunk = &entry[off..off + n];
            let dst = std::ptr::with_exposed_provenance_mut::<u8>(host);
            match owner_at.checked_sub(off).filter(|&k| k < n) {
                Some(k) => {
                    // SAFETY: `host..host+n` lies inside a mapping whose validity for writes the
                    // mapper guaranteed (see `map`); `k < n`, so both parts lie inside it;
                    // `entry` is not mapped memory.
                    unsafe {
                        crate::hostmem::write(dst, &chunk[..k]);
                        crate::hostmem::write(dst.add(k + 1), &chunk[k + 1..]);
                    }
                    owner_host = Some(dst.wrapping_add(k));
                }
                // SAFETY: as above, the whole chunk.
                None => unsafe { crate::hostmem::write(dst, chunk) },
            }
        });
        res.map_err(|_| self.fault(iova, len, true))?;
        if let Some(dst) = owner_host {
            // SAFETY: one byte inside the mapping checked above (valid for writes, see `map`).
            unsafe { crate::hostmem::store_u8_release(dst, owner) };
        }
        Ok(())
    }

    /// Reads a big-endian u32 (doorbell records).
    pub fn read_u32_be(&self, iova: u64) -> Result<u32, IommuFault> {
        let mut b = [0u8; 4];
        self.read(iova, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Reads a big-endian u64.
    pub fn read_u64_be(&self, iova: u64) -> Result<u64, IommuFault> {
        let mut b = [0u8; 8];
        self.read(iova, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Writes a big-endian u64 (atomic results, READ responses of 8 bytes).
    pub fn write_u64_be(&self, iova: u64, v: u64) -> Result<(), IommuFault> {
        self.write(iova, &v.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_outside_mappings_faults_and_touches_nothing() {
        let mut mem = vec![0u8; 3 * 4096];
        let base = mem.as_mut_ptr();
        let mut io = Iommu::new();
        // SAFETY: `mem` outlives `io` within this test.
        unsafe { io.map(0x10000, base, 8192, true, true).unwrap() };
        io.write(0x10000 + 8190, &[1, 2]).unwrap();
        assert_eq!(io.write(0x10000 + 8191, &[1, 2]).unwrap_err().iova, 0x10000 + 8191);
        assert_eq!(mem[8191], 2);
        assert_eq!(io.faults(), 1);
        let mut b = [0u8; 2];
        assert!(io.read(0xf000, &mut b).is_err());
        // Spanning two adjacent mappings works.
        // SAFETY: as above.
        unsafe { io.map(0x12000, base.wrapping_add(8192), 4096, true, false).unwrap() };
        let mut c = [0u8; 4];
        io.read(0x10000 + 8190, &mut c).unwrap();
        assert_eq!(&c[..2], &[1, 2]);
        assert!(io.write(0x12000, &[9]).is_err(), "read-only mapping refuses writes");
        assert_eq!(io.unmap(0x12000, 4096), Ok(()));
        assert_eq!(io.unmap(0x12000, 4096), Err(MapError::NotFound));
        // SAFETY: as above.
        assert_eq!(unsafe { io.map(0x11000, base, 4096, true, true) }, Err(MapError::Exists));
    }

    #[test]
    fn an_entry_written_owner_last_lands_whole() {
        let mut mem = vec![0u8; 4096];
        let base = mem.as_mut_ptr();
        let mut io = Iommu::new();
        // SAFETY: `mem` outlives `io` within this test.
        unsafe { io.map(0x10000, base, 4096, true, true).unwrap() };
        let entry: Vec<u8> = (1..=64).collect();
        // The owner byte last in the entry (a CQE, an EQE), in the middle, and outside it.
        for (at, owner_at) in [(0usize, 63usize), (64, 10), (128, 64)] {
            io.write_owner_last(0x10000 + at as u64, &entry, owner_at).unwrap();
        }
        assert_eq!(&mem[..64], &entry[..]);
        assert_eq!(&mem[64..128], &entry[..]);
        assert_eq!(&mem[128..192], &entry[..]);
        assert!(mem[192..].iter().all(|&b| b == 0), "nothing past the entries");
        // An entry that does not fit its mapping faults, and writes nothing.
        assert!(io.write_owner_last(0x10000 + 4064, &entry, 63).is_err());
        assert!(mem[4064..].iter().all(|&b| b == 0), "nothing of a faulting entry");
        // An entry across two mappings of different host buffers, its owner byte before, at
        // and after the seam.
        let mut second = vec![0u8; 4096];
        // SAFETY: `second` outlives `io` within this test.
        unsafe { io.map(0x11000, second.as_mut_ptr(), 4096, true, true).unwrap() };
        for owner_at in [5usize, 31, 32, 60] {
            mem[4064..].fill(0);
            second[..32].fill(0);
            io.write_owner_last(0x10000 + 4064, &entry, owner_at).unwrap();
            assert_eq!(&mem[4064..], &entry[..32], "owner byte at {owner_at}");
            assert_eq!(&second[..32], &entry[32..], "owner byte at {owner_at}");
        }
    }

    /// Two tables used by one thread (an in-process pair of devices), mapping the same IOVA
    /// to different memory: each access reaches its own table's memory, though both tables'
    /// pages share the thread's cache, in the same entries.
    #[test]
    fn one_thread_s_remembered_pages_keep_the_tables_apart() {
        let (mut a_mem, mut b_mem) = (vec![0u8; 4096], vec![0u8; 4096]);
        let mut a = Iommu::new();
        // A table whose pages take the same cache entries as `a`'s: only the table's id tells
        // them apart.
        let mut b = Iommu::new();
        while recent_slot(b.id, 0x10) != recent_slot(a.id, 0x10) {
            b = Iommu::new();
        }
        // SAFETY: both buffers outlive both tables within this test.
        unsafe {
            a.map(0x10000, a_mem.as_mut_ptr(), 4096, true, true).unwrap();
            b.map(0x10000, b_mem.as_mut_ptr(), 4096, true, false).unwrap();
        }
        for round in 0..(2 * RECENT as u8) {
            a.write(0x10000, &[round]).unwrap();
            assert!(b.write(0x10000, &[round]).is_err(), "b's mapping is read-only");
            let (mut x, mut y) = ([0u8; 1], [0u8; 1]);
            a.read(0x10000, &mut x).unwrap();
            b.read(0x10000, &mut y).unwrap();
            assert_eq!((x[0], y[0]), (round, 0));
        }
        assert_eq!(b_mem[0], 0);
        assert_eq!(a_mem[0], 2 * RECENT as u8 - 1);
    }

    /// A page another thread still remembers is not reached once it is unmapped: the table's
    /// unmap makes every thread's cache of it stale.
    #[test]
    fn an_unmap_is_seen_by_every_thread_that_remembers_the_page() {
        let mut mem = vec![0u8; 4096];
        let io = std::sync::RwLock::new(Iommu::new());
        // SAFETY: `mem` outlives the table within this test.
        unsafe { io.write().unwrap().map(0x10000, mem.as_mut_ptr(), 4096, true, true).unwrap() };
        let (remembered, go_on) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            let user = s.spawn(|| {
                let mut b = [0u8; 4];
                io.read().unwrap().read(0x10000, &mut b).unwrap();
                remembered.wait();
                go_on.wait();
                io.read().unwrap().read(0x10000, &mut b)
            });
            remembered.wait();
            io.write().unwrap().unmap(0x10000, 4096).unwrap();
            go_on.wait();
            let after = user.join().unwrap();
            assert_eq!(after.unwrap_err().iova, 0x10000);
        });
        assert_eq!(io.read().unwrap().faults(), 1);
    }

    #[test]
    fn remembered_pages_keep_every_check() {
        let mut mem = vec![0u8; 4 * 4096];
        let base = mem.as_mut_ptr();
        let mut io = Iommu::new();
        // SAFETY: `mem` outlives `io` within this test.
        unsafe {
            io.map(0x10000, base, 8192, true, true).unwrap();
            io.map(0x10000 + 4096 * RECENT as u64, base.wrapping_add(8192), 4096, true, false).unwrap();
        }
        let mut b = [0u8; 4];
        // The page is remembered by a read; an access from it past its mapping still faults.
        io.read(0x11000, &mut b).unwrap();
        assert_eq!(io.read(0x11ffe, &mut b).unwrap_err().iova, 0x11ffe);
        // A page of a read-only mapping, remembered by a read, still refuses a write.
        let ro = 0x10000 + 4096 * RECENT as u64;
        io.read(ro, &mut b).unwrap();
        assert!(io.write(ro, &[1]).is_err());
        // Two pages sharing an entry (RECENT pages apart) each reach their own memory.
        io.write(0x10000, &[7]).unwrap();
        io.read(ro, &mut b).unwrap();
        io.write(0x10001, &[8]).unwrap();
        assert_eq!(&mem[..2], &[7, 8]);
        assert_eq!(mem[8192 + 1], 0);
        // An unmapped page is forgotten.
        io.read(0x10000, &mut b).unwrap();
        io.unmap(0x10000, 8192).unwrap();
        assert!(io.read(0x10000, &mut b).is_err());
        assert_eq!(io.faults(), 3);
    }
}
