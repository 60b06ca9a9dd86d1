//! Memory an application registers: [`UserMemory`] (a buffer umlx allocates, or an
//! [`ExternalBuffer`] a C program owns), mapped for the device at its own IOVA.

use super::memory::{copy_from_device, copy_to_device};
use super::{DmaSpace, MemlockState, PAGE_4K};
use crate::backend::Backend;
use crate::{Error, Result};
use std::sync::Arc;

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
