//! Every load and store the sim makes to host memory: the memory a host mapped for DMA
//! ([`crate::iommu`]) and the sim's own host-side buffers ([`crate::host::HostBuffer`]).
//!
//! That memory is shared with another thread of the same program (the driver posts WQEs and
//! writes doorbell records while the sim's engine reads them; the sim writes CQEs while the
//! driver polls them), so a plain copy of it (`ptr::copy_nonoverlapping`, `write_bytes`) is a
//! data race under Rust's memory model, whatever the fences around it: the compiler may tear,
//! merge, repeat or drop such accesses. Here every access is an atomic load or store
//! (`Relaxed`; the callers' fences order them, as a device's DMA engine orders its PCIe
//! writes): one 8-byte access per aligned word, one byte access before the first aligned word
//! and after the last. Relaxed atomic loads and stores compile to the same single `mov`s as
//! volatile ones, and, unlike volatile accesses, they are data-race free among themselves and
//! ThreadSanitizer can tell them from plain ones.
//!
//! The other side of the sharing is the host's: the umlx driver reaches DMA memory with
//! volatile accesses (what it must do for a real device, which is not a Rust thread), so a
//! conflict between a driver store and a sim load is only ordered by the driver's barriers and
//! doorbells, as on hardware.
//!
//! This is one of the sim's `unsafe` modules: each function takes a raw host address whose
//! validity its caller vouches for (see each function's `# Safety`).

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const WORD: usize = size_of::<u64>();

/// Splits `len` bytes starting at address `addr` into a head of single bytes, whole aligned
/// 8-byte words, and a tail of single bytes: `(head, words)`; the tail is what is left.
fn split(addr: usize, len: usize) -> (usize, usize) {
    let head = addr.wrapping_neg() % WORD;
    if head >= len {
        return (len, 0);
    }
    (head, (len - head) / WORD)
}

/// Copies `out.len()` bytes of host memory at `src` into `out`.
///
/// # Safety
/// `src..src + out.len()` must be valid for reads (allocated, not freed meanwhile) and must not
/// overlap `out`. It may be written concurrently by the host, through any access but a Rust
/// reference.
pub unsafe fn read(src: *const u8, out: &mut [u8]) {
    let (head, words) = split(src.addr(), out.len());
    let mut i = 0;
    while i < head {
        // SAFETY: `src + i` is inside the readable range (caller's contract); `AtomicU8` has
        // the alignment of `u8`.
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Ordering::Relaxed);
        i += 1;
    }
    // Whole words, with no bounds check per word: the slice's chunks are the words.
    for chunk in out[i..i + words * WORD].chunks_exact_mut(WORD) {
        // SAFETY: `src + i` is 8-aligned (past the head) and the word lies inside the readable
        // range (caller's contract).
        let w = unsafe { AtomicU64::from_ptr(src.add(i).cast_mut().cast::<u64>()) }.load(Ordering::Relaxed);
        chunk.copy_from_slice(&w.to_ne_bytes());
        i += WORD;
    }
    while i < out.len() {
        // SAFETY: as for the head.
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Ordering::Relaxed);
        i += 1;
    }
}

/// Copies `data` into host memory at `dst`.
///
/// # Safety
/// `dst..dst + data.len()` must be valid for writes (allocated, not freed meanwhile) and must
/// not overlap `data`. It may be read or written concurrently by the host, through any access
/// but a Rust reference.
pub unsafe fn write(dst: *mut u8, data: &[u8]) {
    let (head, words) = split(dst.addr(), data.len());
    let mut i = 0;
    while i < head {
        // SAFETY: `dst + i` is inside the writable range (caller's contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(data[i], Ordering::Relaxed);
        i += 1;
    }
    // Whole words, with no bounds check per word: the slice's chunks are the words.
    for chunk in data[i..i + words * WORD].chunks_exact(WORD) {
        let mut w = [0u8; WORD];
        w.copy_from_slice(chunk);
        // SAFETY: `dst + i` is 8-aligned (past the head) and the word lies inside the writable
        // range (caller's contract).
        unsafe { AtomicU64::from_ptr(dst.add(i).cast::<u64>()) }.store(u64::from_ne_bytes(w), Ordering::Relaxed);
        i += WORD;
    }
    while i < data.len() {
        // SAFETY: as for the head.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(data[i], Ordering::Relaxed);
        i += 1;
    }
}

/// Sets `n` bytes of host memory at `dst` to `byte`.
///
/// # Safety
/// As for [`write`] of `n` bytes.
pub unsafe fn fill(dst: *mut u8, byte: u8, n: usize) {
    let (head, words) = split(dst.addr(), n);
    let word = u64::from_ne_bytes([byte; WORD]);
    let mut i = 0;
    while i < head {
        // SAFETY: `dst + i` is inside the writable range (caller's contract).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
        i += 1;
    }
    for _ in 0..words {
        // SAFETY: `dst + i` is 8-aligned and the word lies inside the writable range.
        unsafe { AtomicU64::from_ptr(dst.add(i).cast::<u64>()) }.store(word, Ordering::Relaxed);
        i += WORD;
    }
    while i < n {
        // SAFETY: as for the head.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
        i += 1;
    }
}

/// Stores one byte of host memory with release ordering: everything the sim wrote before it is
/// visible to a thread whose acquire load (or load and acquire fence) sees it. How the device
/// publishes an ownership bit (CQE `op_own`, EQE `owner`) after the entry's body.
///
/// # Safety
/// As for [`write`] of one byte.
pub unsafe fn store_u8_release(dst: *mut u8, value: u8) {
    // SAFETY: `dst` is valid for a one-byte write (caller's contract).
    unsafe { AtomicU8::from_ptr(dst) }.store(value, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_words_and_tail_cover_every_byte_once() {
        for addr in 0..16usize {
            for len in 0..40usize {
                let (head, words) = split(addr, len);
                assert!(head + WORD * words <= len, "{addr} {len}");
                if words > 0 {
                    assert_eq!((addr + head) % WORD, 0, "{addr} {len}");
                    assert!(len - head - WORD * words < WORD, "{addr} {len}: the tail is less than a word");
                }
            }
        }
    }

    #[test]
    fn copies_and_fills_at_every_alignment_touch_only_their_range() {
        let mut mem = vec![0u64; 8]; // 64 bytes, 8-aligned
        let base = mem.as_mut_ptr().cast::<u8>();
        let pattern: Vec<u8> = (1..=40).collect();
        for off in 0..16 {
            for len in [0, 1, 7, 8, 9, 23, 40] {
                let data = &pattern[..len];
                // SAFETY: `off + len` <= 56 < 64 bytes of `mem`, which no reference covers
                // while the raw accesses run.
                unsafe {
                    fill(base, 0xee, 64);
                    write(base.add(off), data);
                }
                let mut all = [0u8; 64];
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe {
                    read(base, &mut all);
                    read(base.add(off), &mut back);
                }
                assert_eq!(back, data, "at {off}, {len} bytes");
                assert!(all[..off].iter().chain(&all[off + len..]).all(|&b| b == 0xee), "at {off}, {len}");
                // SAFETY: as above.
                unsafe { fill(base.add(off), 0x11, len) };
                // SAFETY: as above.
                unsafe { read(base, &mut all) };
                assert!(all[off..off + len].iter().all(|&b| b == 0x11));
                assert!(all[..off].iter().chain(&all[off + len..]).all(|&b| b == 0xee));
            }
        }
    }
}
