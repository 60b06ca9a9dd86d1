//! The command interface: the 32-entry command queue in one DMA page, slots with pre-built
//! mailbox chains, posting a command and collecting its output.
//!
//! Slot 0 carries regular commands and the last slot carries MANAGE_PAGES (as the Linux driver
//! does), so a firmware page request can be served while a regular command waits. Each slot
//! keeps a mailbox chain for 4 KiB of input and 4 KiB of output; longer messages get a chain of
//! their own for that one command. Mailbox blocks sit at 1 KiB boundaries. Waiting (polling or
//! event mode) is the caller's business: see `Hca::exec`.

use crate::backend::Backend;
use crate::dma::{DmaBuffer, DmaSpace, dma_rmb, dma_wmb};
use crate::{Error, Result};
use std::sync::Arc;
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, DeliveryStatus};
use umlx_hwdesc::ifc::{mbox_in, mbox_out};
use umlx_hwdesc::plain::page::ADAPTER_PAGE_SIZE;
use umlx_hwdesc::plain::{cmd as cmdk, cmd_layout as ent, cmd_prot_block as blk, iseg};

/// Bytes of a message carried inline in the queue entry.
pub const INLINE: usize = cmdk::CMD_INLINE_SIZE;
/// Data bytes per mailbox block.
pub const BLOCK_DATA: usize = cmdk::CMD_DATA_BLOCK_SIZE;
/// Distance between mailbox blocks in a chain buffer.
const BLOCK_STRIDE: usize = 1024;
/// Blocks pre-built per direction per slot (4 KiB of message).
const PREBUILT_BLOCKS: usize = 8;

/// A mailbox chain in DMA memory.
struct Chain<B: Backend> {
    buf: DmaBuffer<B>,
    blocks: usize,
}

impl<B: Backend> Chain<B> {
    fn new(space: &Arc<DmaSpace<B>>, blocks: usize) -> Result<Chain<B>> {
        let buf = DmaBuffer::new(space, (blocks.max(1) * BLOCK_STRIDE).next_multiple_of(ADAPTER_PAGE_SIZE), false)?;
        // Link the blocks once: next pointers and block numbers never change.
        for i in 0..blocks {
            let off = i * BLOCK_STRIDE;
            let next = if i + 1 < blocks { buf.iova() + ((i + 1) * BLOCK_STRIDE) as u64 } else { 0 };
            buf.write_u64_be(off + blk::next, next)?;
            buf.write_u32_be(off + blk::block_num, i as u32)?;
        }
        Ok(Chain { buf, blocks })
    }

    fn iova(&self) -> u64 {
        self.buf.iova()
    }
}

/// One command queue slot.
pub(crate) struct Slot<B: Backend> {
    index: u32,
    input: Chain<B>,
    output: Chain<B>,
    /// A chain built for one long command, kept until its output is read.
    long: Option<(Chain<B>, Chain<B>)>,
    outlen: usize,
    opcode: CmdOpcode,
    op_mod: u16,
}

/// The command queue page and its geometry.
pub(crate) struct CmdQueue<B: Backend> {
    backend: Arc<B>,
    space: Arc<DmaSpace<B>>,
    page: DmaBuffer<B>,
    log_stride: u32,
    /// Number of entries.
    pub size: u32,
}

impl<B: Backend> CmdQueue<B> {
    /// Allocates the queue page (its IOVA is programmed into BAR0 by the caller).
    pub fn new(backend: &Arc<B>, space: &Arc<DmaSpace<B>>, log_size: u32, log_stride: u32) -> Result<CmdQueue<B>> {
        let name = backend.name().to_string();
        if (1usize << log_size) > cmdk::MAX_COMMANDS || log_size + log_stride > 12 || (1usize << log_stride) < ent::SIZE
        {
            return Err(Error::Firmware {
                device: name,
                problem: format!(
                    "command queue geometry log_size {log_size} log_stride {log_stride} is not usable (at most 32 entries of at least 64 bytes in one 4 KiB page)"
                ),
            });
        }
        let page = DmaBuffer::new(space, ADAPTER_PAGE_SIZE, false)?;
        Ok(CmdQueue { backend: backend.clone(), space: space.clone(), page, log_stride, size: 1 << log_size })
    }

    /// IOVA of the queue page.
    pub fn iova(&self) -> u64 {
        self.page.iova()
    }

    /// Builds a slot with its pre-built mailbox chains.
    pub fn slot(&self, index: u32) -> Result<Slot<B>> {
        Ok(Slot {
            index,
            input: Chain::new(&self.space, PREBUILT_BLOCKS)?,
            output: Chain::new(&self.space, PREBUILT_BLOCKS)?,
            long: None,
            outlen: 0,
            opcode: CmdOpcode(0),
            op_mod: 0,
        })
    }

    fn entry(&self, slot: &Slot<B>) -> usize {
        (slot.index as usize) << self.log_stride
    }

    /// Writes `input` into the slot's entry and chain, hands the entry to the firmware and rings
    /// the doorbell.
    pub fn post(&self, slot: &mut Slot<B>, input: &[u8], outlen: usize) -> Result<()> {
        let in_blocks = input.len().saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        let out_blocks = outlen.saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        slot.long = None;
        if in_blocks > slot.input.blocks || out_blocks > slot.output.blocks {
            slot.long = Some((Chain::new(&self.space, in_blocks)?, Chain::new(&self.space, out_blocks)?));
        }
        let (inc, outc) = match &slot.long {
            Some((i, o)) => (i, o),
            None => (&slot.input, &slot.output),
        };
        for i in 0..in_blocks {
            let start = INLINE + i * BLOCK_DATA;
            let end = (start + BLOCK_DATA).min(input.len());
            let off = i * BLOCK_STRIDE;
            inc.buf.write_bytes(off, &input[start..end])?;
            inc.buf.fill(off + (end - start), BLOCK_DATA - (end - start), 0)?;
        }
        for i in 0..out_blocks {
            outc.buf.fill(i * BLOCK_STRIDE, BLOCK_DATA, 0)?;
        }
        let e = self.entry(slot);
        let mut inline = [0u8; INLINE];
        let n = input.len().min(INLINE);
        inline[..n].copy_from_slice(&input[..n]);
        let p = &self.page;
        p.write_u8(e + ent::type_, cmdk::PCI_CMD_XPORT)?;
        p.fill(e + ent::rsvd0, 3, 0)?;
        p.write_u32_be(e + ent::inlen, input.len() as u32)?;
        p.write_u64_be(e + ent::in_ptr, if in_blocks > 0 { inc.iova() } else { 0 })?;
        p.write_bytes(e + ent::in_, &inline)?;
        p.fill(e + ent::out, INLINE, 0)?;
        p.write_u64_be(e + ent::out_ptr, if out_blocks > 0 { outc.iova() } else { 0 })?;
        p.write_u32_be(e + ent::outlen, outlen as u32)?;
        // token, signature, reserved: 0; then ownership to the firmware.
        p.write_u8(e + ent::token, 0)?;
        p.write_u8(e + ent::sig, 0)?;
        p.write_u8(e + ent::rsvd1, 0)?;
        dma_wmb();
        p.write_u8(e + ent::status_own, cmdk::CMD_OWNER_HW)?;
        dma_wmb();
        slot.outlen = outlen;
        slot.opcode = CmdOpcode(mbox_in::opcode.get(input) as u16);
        slot.op_mod = mbox_in::op_mod.get(input) as u16;
        self.backend.write32(iseg::CMD_DBELL, 1 << slot.index);
        Ok(())
    }

    /// Whether the firmware handed the slot back.
    pub fn done(&self, slot: &Slot<B>) -> bool {
        self.page.read_u8_at(self.entry(slot) + ent::status_own) & cmdk::CMD_OWNER_MASK != cmdk::CMD_OWNER_HW
    }

    /// Reads the output of a completed command; a delivery error or a non-OK status is an
    /// error carrying opcode, op_mod, status and syndrome.
    pub fn finish(&self, slot: &mut Slot<B>) -> Result<Vec<u8>> {
        dma_rmb();
        let e = self.entry(slot);
        let status_own = self.page.read_u8(e + ent::status_own)?;
        let delivery = DeliveryStatus(status_own >> cmdk::DELIVERY_STATUS_SHIFT);
        let mut out = vec![0u8; slot.outlen.max(INLINE)];
        self.page.read_bytes(e + ent::out, &mut out[..INLINE])?;
        let outc = match &slot.long {
            Some((_, o)) => o,
            None => &slot.output,
        };
        let blocks = slot.outlen.saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        for i in 0..blocks {
            let start = INLINE + i * BLOCK_DATA;
            let end = (start + BLOCK_DATA).min(slot.outlen);
            outc.buf.read_bytes(i * BLOCK_STRIDE, &mut out[start..end])?;
        }
        slot.long = None;
        out.truncate(slot.outlen.max(INLINE));
        let status = CmdStatus(mbox_out::status.get(&out) as u8);
        if delivery != DeliveryStatus::OK || status != CmdStatus::OK {
            return Err(Error::Command {
                device: self.backend.name().to_string(),
                opcode: slot.opcode,
                op_mod: slot.op_mod,
                delivery,
                status,
                syndrome: mbox_out::syndrome.get(&out) as u32,
            });
        }
        Ok(out)
    }

    /// The opcode and op_mod of the command last posted on `slot`.
    pub fn posted(&self, slot: &Slot<B>) -> (CmdOpcode, u16) {
        (slot.opcode, slot.op_mod)
    }
}
