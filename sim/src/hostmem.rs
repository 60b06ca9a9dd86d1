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
//! A copy of [`BULK_COPY_MIN`] bytes or more (a packet's payload, a CQE) is made instead by an
//! `asm!` block of 16-byte SSE2 loads and stores, 64 bytes at a time while 64 remain
//! (`copy_bulk`), as a DMA engine moves a burst. The word loop cannot be vectorised (the
//! compiler may not merge atomic accesses): on a 1 KiB payload it took three times as long (95
//! against 31 ns here), and about 170 instructions for a CQE's 63 bytes. An `asm!` block is
//! opaque to the compiler, which can neither tear, merge, repeat nor drop its accesses; and
//! what it does is what a loop of `Relaxed` single-byte atomic accesses does (every byte of an
//! x86 access is single-copy atomic; the block loads each byte of the source and stores it to
//! the destination, the last 16 bytes twice when the length is not a multiple of 16), so it is
//! no data race either. ThreadSanitizer does not see inside it.
//!
//! This is one of the sim's `unsafe` modules: each function takes a raw host address whose
//! validity its caller vouches for (see each function's `# Safety`).

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const WORD: usize = size_of::<u64>();

/// The shortest copy made by `copy_bulk` rather than by words: one 16-byte load and store (a
/// receive WQE, a CQE or EQE without its owner byte, a payload).
pub const BULK_COPY_MIN: usize = 16;

/// Copies `n` bytes from `src` to `dst` by SSE2 loads and stores (the module doc says why this
/// is no data race): 64-byte blocks from the start, then the 16-byte blocks left, then, when `n`
/// is not a multiple of 16, the last 16 bytes (overlapping the last block). Only on x86-64,
/// whose every processor has SSE2; elsewhere every copy goes by words.
///
/// # Safety
/// `n` must be at least [`BULK_COPY_MIN`]. `src..src + n` must be valid for reads and
/// `dst..dst + n` for writes (allocated, not freed meanwhile), and the two must not overlap.
/// Either may be accessed concurrently by another thread, through any access but a Rust
/// reference.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_bulk(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the ranges are valid and disjoint and `n >= 16` (caller's contract). The first
    // loop runs `n / 64` times over 64-byte blocks from the start, the second `(n % 64) / 16`
    // times over the 16-byte blocks after them, which end at `n` rounded down to 16; when `n`
    // is not a multiple of 16, the last 16 bytes, which start `n - 16 >= 0` bytes in, are
    // copied once more. So every access lies inside the ranges. It uses no stack and clobbers
    // only the registers declared.
    unsafe {
        std::arch::asm!(
            "test {b64}, {b64}",
            "jz 3f",
            "2:",
            "movdqu xmm0, [{s}]",
            "movdqu xmm1, [{s} + 16]",
            "movdqu xmm2, [{s} + 32]",
            "movdqu xmm3, [{s} + 48]",
            "movdqu [{d}], xmm0",
            "movdqu [{d} + 16], xmm1",
            "movdqu [{d} + 32], xmm2",
            "movdqu [{d} + 48], xmm3",
            "add {s}, 64",
            "add {d}, 64",
            "dec {b64}",
            "jnz 2b",
            "3:",
            "test {b16}, {b16}",
            "jz 5f",
            "4:",
            "movdqu xmm0, [{s}]",
            "movdqu [{d}], xmm0",
            "add {s}, 16",
            "add {d}, 16",
            "dec {b16}",
            "jnz 4b",
            "5:",
            // A length that is not a multiple of 16: its last 16 bytes.
            "test {n}, 15",
            "jz 6f",
            "movdqu xmm0, [{s_last}]",
            "movdqu [{d_last}], xmm0",
            "6:",
            n = in(reg) n,
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            b64 = inout(reg) n / 64 => _,
            b16 = inout(reg) (n % 64) / 16 => _,
            s_last = in(reg) src.wrapping_add(n - 16),
            d_last = in(reg) dst.wrapping_add(n - 16),
            out("xmm0") _,
            out("xmm1") _,
            out("xmm2") _,
            out("xmm3") _,
            options(nostack),
        );
    }
}

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
    #[cfg(target_arch = "x86_64")]
    if out.len() >= BULK_COPY_MIN {
        // SAFETY: `src..src + out.len()` is valid for reads (caller's contract) and `out`, a
        // slice of the caller's, is valid for writes and does not overlap it.
        unsafe { copy_bulk(out.as_mut_ptr(), src, out.len()) };
        return;
    }
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
    #[cfg(target_arch = "x86_64")]
    if data.len() >= BULK_COPY_MIN {
        // SAFETY: `dst..dst + data.len()` is valid for writes (caller's contract) and `data`,
        // a slice of the caller's, is valid for reads and does not overlap it.
        unsafe { copy_bulk(dst, data.as_ptr(), data.len()) };
        return;
    }
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
/// As for [`write()`] of `n` bytes.
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
/// As for [`write()`] of one byte.
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
        const MEM: usize = 256;
        let mut mem = vec![0u64; MEM / WORD]; // 8-aligned
        let base = mem.as_mut_ptr().cast::<u8>();
        let pattern: Vec<u8> = (1..=200).collect();
        // Lengths below BULK_COPY_MIN go by words, the others by the bulk copy (on x86-64).
        for off in 0..16 {
            // Every head and tail length, and lengths around each of the bulk copy's loops.
            let around = [BULK_COPY_MIN, 17, 23, 31, 32, 40, 48, 63, 64, 65, 79, 80, 100, 127, 128, 200];
            for len in (0..BULK_COPY_MIN).chain(around) {
                let data = &pattern[..len];
                // SAFETY: `off + len` <= 215 < 256 bytes of `mem`, which no reference covers
                // while the raw accesses run.
                unsafe {
                    fill(base, 0xee, MEM);
                    write(base.add(off), data);
                }
                let mut all = [0u8; MEM];
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe {
                    read(base, &mut all);
                    read(base.add(off), &mut back);
                }
                assert_eq!(back, data, "at {off}, {len} bytes");
                // Read whole by the bulk copy: a fault that `read` mirrors for `write` shows here.
                assert_eq!(&all[off..off + len], data, "at {off}, {len} bytes, as stored");
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
