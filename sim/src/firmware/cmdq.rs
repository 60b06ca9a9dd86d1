//! Command queue delivery: reading entries and mailbox chains through the IOMMU, checking
//! ownership, type, signatures and tokens, writing the output back, handing ownership back, and
//! the command-completion event.

use super::{DelayedCmd, Hca, LOG_CMDQ_SIZE};
use std::time::Instant;
use umlx_hwdesc::enums::{DeliveryStatus, EventType};
use umlx_hwdesc::plain::{cmd, cmd_layout, cmd_prot_block};
use zerocopy::{FromBytes, IntoBytes};

/// Bytes of a command carried inline in the entry.
const INLINE: usize = cmd::CMD_INLINE_SIZE;
/// Data bytes per mailbox block.
const BLOCK_DATA: usize = cmd::CMD_DATA_BLOCK_SIZE;
/// Mailbox block size.
const BLOCK_SIZE: usize = cmd_prot_block::SIZE;
/// Required mailbox alignment (see the module docs of `firmware`).
const BLOCK_ALIGN: u64 = 1024;
/// Largest message the firmware accepts (inlen/outlen): 8 MiB (an MTT for 2 GiB of 4 KiB pages).
const MAX_MSG: usize = 8 << 20;

fn xor(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |a, b| a ^ b)
}

impl Hca {
    /// The command doorbell: each set bit hands one slot to the firmware.
    pub(crate) fn ring_cmd_doorbell(&mut self, mask: u32) {
        if self.is_fatal() || self.initializing() {
            return;
        }
        let slots = 1u32 << LOG_CMDQ_SIZE;
        let mut done = 0u32;
        for slot in 0..slots {
            if mask & (1 << slot) == 0 {
                continue;
            }
            if let Some(delay) = self.cfg.hostile.command_delay {
                let due = Instant::now() + delay;
                self.delayed.push(DelayedCmd { due, slot });
                self.note_due(due);
                continue;
            }
            if self.deliver(slot) {
                done |= 1 << slot;
            }
        }
        if done != 0 {
            self.post_cmd_completion(done);
        }
    }

    /// Posts the command-completion EQE (vector = completed slots) if an EQ subscribed to it.
    pub(crate) fn post_cmd_completion(&mut self, slots: u32) {
        let data = umlx_hwdesc::plain::eqe_cmd { vector: slots.into(), ..Default::default() };
        self.post_event(EventType::CMD, 0, &super::objects::event_data(&data));
    }

    fn cmdq_base(&self) -> u64 {
        ((self.cmdq_addr_h as u64) << 32) | (self.cmdq_addr_l as u64 & !0xfff)
    }

    /// Processes one slot. Returns whether a command completed (ownership handed back).
    pub(crate) fn deliver(&mut self, slot: u32) -> bool {
        if !self.may_dma() {
            return false;
        }
        let entry_iova = self.cmdq_base() + ((slot as u64) << super::LOG_CMDQ_STRIDE);
        let mut raw = [0u8; 64];
        if self.iommu.read(entry_iova, &mut raw).is_err() {
            return false;
        }
        let Ok(mut entry) = cmd_layout::read_from_bytes(&raw[..]) else { return false };
        if entry.status_own & 1 == 0 {
            return false; // not handed to the firmware
        }
        let (delivery, out_data) = self.run_entry(&raw, &entry);
        let out_data = out_data.unwrap_or_default();
        // Write the output: inline part into the entry, the rest into the output chain.
        let mut out_inline = [0u8; INLINE];
        let n = out_data.len().min(INLINE);
        out_inline[..n].copy_from_slice(&out_data[..n]);
        entry.out = out_inline;
        if delivery != DeliveryStatus::OK {
            self.stats.delivery_errors += 1;
        }
        // The delivery status with the ownership bit clear (the entry back to software),
        // written after everything else with release ordering.
        entry.status_own = delivery.0 << cmd::DELIVERY_STATUS_SHIFT;
        self.iommu.write_owner_last(entry_iova, entry.as_bytes(), cmd_layout::status_own).is_ok()
    }

    /// Checks the entry, gathers the input, executes, scatters the output. Returns the delivery
    /// status and the output message.
    fn run_entry(&mut self, raw: &[u8; 64], entry: &cmd_layout) -> (DeliveryStatus, Option<Vec<u8>>) {
        let checksum = self.caps.checksum_enabled();
        if entry.type_ != cmd::PCI_CMD_XPORT {
            return (DeliveryStatus::CMD_DESCR_ERR, None);
        }
        if checksum && xor(raw) != 0xff {
            return (DeliveryStatus::SIGNAT_ERR, None);
        }
        let inlen = entry.inlen.get() as usize;
        let outlen = entry.outlen.get() as usize;
        if !(8..=MAX_MSG).contains(&inlen) {
            return (DeliveryStatus::IN_LENGTH_ERR, None);
        }
        if !(8..=MAX_MSG).contains(&outlen) {
            return (DeliveryStatus::OUT_LENGTH_ERR, None);
        }
        // Gather the input.
        let mut input = vec![0u8; inlen.max(INLINE)];
        input[..INLINE].copy_from_slice(&entry.in_);
        input.truncate(inlen);
        if inlen > INLINE {
            let mut ptr = entry.in_ptr.get();
            let nblocks = (inlen - INLINE).div_ceil(BLOCK_DATA);
            for i in 0..nblocks {
                if !ptr.is_multiple_of(BLOCK_ALIGN) || ptr == 0 {
                    return (DeliveryStatus::IN_PTR_ALIGN_ERR, None);
                }
                let mut blk = [0u8; BLOCK_SIZE];
                if self.iommu.read(ptr, &mut blk).is_err() {
                    return (DeliveryStatus::IN_LENGTH_ERR, None);
                }
                let Ok(block) = cmd_prot_block::read_from_bytes(&blk[..]) else {
                    return (DeliveryStatus::IN_LENGTH_ERR, None);
                };
                if block.block_num.get() as usize != i {
                    return (DeliveryStatus::BAD_BLK_NUM_ERR, None);
                }
                if checksum {
                    if block.token != entry.token {
                        return (DeliveryStatus::TOK_ERR, None);
                    }
                    if xor(&blk[cmd_prot_block::rsvd0..cmd_prot_block::sig]) != 0xff || xor(&blk) != 0xff {
                        return (DeliveryStatus::SIGNAT_ERR, None);
                    }
                }
                let start = INLINE + i * BLOCK_DATA;
                let n = BLOCK_DATA.min(inlen - start);
                input[start..start + n].copy_from_slice(&block.data[..n]);
                ptr = block.next.get();
            }
        }
        // Walk the output chain before executing, so a bad chain fails the delivery.
        let mut out_blocks = Vec::new();
        if outlen > INLINE {
            let mut ptr = entry.out_ptr.get();
            let nblocks = (outlen - INLINE).div_ceil(BLOCK_DATA);
            for i in 0..nblocks {
                if !ptr.is_multiple_of(BLOCK_ALIGN) || ptr == 0 {
                    return (DeliveryStatus::OUT_PTR_ALIGN_ERR, None);
                }
                let mut blk = [0u8; BLOCK_SIZE];
                if self.iommu.read(ptr, &mut blk).is_err() || !self.iommu.is_mapped(ptr, BLOCK_SIZE, true) {
                    return (DeliveryStatus::OUT_LENGTH_ERR, None);
                }
                let Ok(block) = cmd_prot_block::read_from_bytes(&blk[..]) else {
                    return (DeliveryStatus::OUT_LENGTH_ERR, None);
                };
                if block.block_num.get() as usize != i {
                    return (DeliveryStatus::BAD_BLK_NUM_ERR, None);
                }
                out_blocks.push((ptr, block));
                ptr = block.next.get();
            }
        }
        let output = self.execute(&input, outlen);
        // Scatter the output beyond the inline part.
        for (i, (ptr, mut block)) in out_blocks.into_iter().enumerate() {
            let start = INLINE + i * BLOCK_DATA;
            let mut data = [0u8; BLOCK_DATA];
            if start < output.len() {
                let n = BLOCK_DATA.min(output.len() - start);
                data[..n].copy_from_slice(&output[start..start + n]);
            }
            block.data = umlx_hwdesc::plain::Bytes(data);
            if checksum {
                block.token = entry.token;
                let b = block.as_mut_bytes();
                b[cmd_prot_block::ctrl_sig] = 0;
                b[cmd_prot_block::sig] = 0;
                b[cmd_prot_block::ctrl_sig] = !xor(&b[cmd_prot_block::rsvd0..cmd_prot_block::ctrl_sig]);
                b[cmd_prot_block::sig] = !xor(&b[..cmd_prot_block::sig]);
            }
            if self.iommu.write(ptr, block.as_bytes()).is_err() {
                return (DeliveryStatus::OUT_LENGTH_ERR, None);
            }
        }
        (DeliveryStatus::OK, Some(output))
    }
}
