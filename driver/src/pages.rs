//! The firmware page pool: 4 KiB pages carved from pinned 2 MiB blocks (huge pages when the
//! system has them), each block mapped once; a block is unmapped and freed when all its pages
//! are back.

use crate::Result;
use crate::backend::Backend;
use crate::dma::{DmaBuffer, DmaSpace, PAGE_2M};
use std::sync::Arc;
use umlx_hwdesc::plain::page::ADAPTER_PAGE_SIZE;

const PAGES_PER_BLOCK: usize = PAGE_2M / ADAPTER_PAGE_SIZE;

struct Block<B: Backend> {
    buf: DmaBuffer<B>,
    used: [u64; PAGES_PER_BLOCK / 64],
    count: usize,
}

/// Pages given to the firmware, by block.
pub struct FwPages<B: Backend> {
    space: Arc<DmaSpace<B>>,
    blocks: Vec<Block<B>>,
}

impl<B: Backend> FwPages<B> {
    /// An empty pool.
    pub fn new(space: Arc<DmaSpace<B>>) -> FwPages<B> {
        FwPages { space, blocks: Vec::new() }
    }

    /// Takes `n` free pages (allocating blocks as needed) and returns their IOVAs.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let bi = match self.blocks.iter().position(|b| b.count < PAGES_PER_BLOCK) {
                Some(i) => i,
                None => {
                    let huge = DmaBuffer::with_alignment(&self.space, PAGE_2M, true, PAGE_2M);
                    let buf = match huge {
                        Ok(b) => b,
                        Err(_) => match DmaBuffer::with_alignment(&self.space, PAGE_2M, false, PAGE_2M) {
                            Ok(b) => b,
                            Err(e) => {
                                // Give back what this call took before failing: the caller
                                // gives the firmware none of them.
                                for &a in &out {
                                    self.free(a);
                                }
                                return Err(e);
                            }
                        },
                    };
                    self.blocks.push(Block { buf, used: [0; PAGES_PER_BLOCK / 64], count: 0 });
                    self.blocks.len() - 1
                }
            };
            let b = &mut self.blocks[bi];
            for w in 0..b.used.len() {
                while b.used[w] != u64::MAX && out.len() < n {
                    let bit = (!b.used[w]).trailing_zeros() as usize;
                    b.used[w] |= 1 << bit;
                    b.count += 1;
                    out.push(b.buf.iova() + ((w * 64 + bit) * ADAPTER_PAGE_SIZE) as u64);
                }
            }
        }
        Ok(out)
    }

    /// Returns a page; false if the address is not one of ours or not in use.
    pub fn free(&mut self, iova: u64) -> bool {
        let Some(bi) = self.blocks.iter().position(|b| iova >= b.buf.iova() && iova < b.buf.iova() + PAGE_2M as u64)
        else {
            return false;
        };
        let b = &mut self.blocks[bi];
        let off = iova - b.buf.iova();
        if !off.is_multiple_of(ADAPTER_PAGE_SIZE as u64) {
            return false;
        }
        let idx = (off / ADAPTER_PAGE_SIZE as u64) as usize;
        if b.used[idx / 64] & (1 << (idx % 64)) == 0 {
            return false;
        }
        b.used[idx / 64] &= !(1 << (idx % 64));
        b.count -= 1;
        if b.count == 0 {
            self.blocks.swap_remove(bi);
        }
        true
    }

    /// Pages currently given out.
    pub fn in_use(&self) -> usize {
        self.blocks.iter().map(|b| b.count).sum()
    }

    /// Blocks currently mapped.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }
}
