//! A minimal software host for driving a [`SimDevice`](crate::device::SimDevice) directly,
//! without any driver: the sim's own firmware tests and benchmarks.
//!
//! * [`HostBuffer`]: owned, zeroed, page-aligned host memory mapped into the device's IOMMU at a
//!   chosen IOVA (unmapped and freed on drop), with bounds-checked accessors. The device may
//!   read and write it at any time, so it is never seen through a Rust reference: every access
//!   goes through [`crate::hostmem`] (atomic loads and stores).
//! * [`CmdHost`]: an IOVA bump allocator and a command issuer. It enables bus mastering, waits
//!   for the firmware, programs the command queue, builds entries and mailbox chains (576-byte
//!   blocks at 1 KiB-aligned IOVAs), optionally signs them, rings the doorbell, polls the
//!   ownership bit with a timeout and gathers the output. [`PreparedCmd`] gives the two phases
//!   (build, then post) separately so a test can damage an entry or a mailbox in between. It
//!   also has short helpers for every bring-up and teardown step, a pool of firmware pages, and
//!   the simple allocations (UAR, PD, EQ).
//! * [`HostEq`]: an event queue created by the host, with ownership-checked EQE polling and the
//!   UAR consumer-index doorbells.
//! * [`EventFd`]: a non-blocking eventfd to connect an MSI-X vector to.
//!
//! This module is one of the sim's `unsafe` modules (the README lists them all): its `buffer`
//! module allocates raw memory, hands it to the device through the `unsafe`
//! [`SimDevice::dma_map`](crate::device::SimDevice::dma_map) and reads and writes it through
//! [`crate::hostmem`]; its `eventfd` module creates an eventfd through libc. `commands` and
//! `event_queue` have no `unsafe`. Every `unsafe` block carries a `// SAFETY:` comment.

use umlx_hwdesc::plain::{cmd, cmd_layout, cmd_prot_block};

/// Host and adapter page size.
pub const PAGE_SIZE: usize = 4096;
/// Where [`CmdHost::new`] starts handing out IOVAs (above 4 GiB, so the high half of the command
/// queue address is exercised).
pub const DEFAULT_IOVA_BASE: u64 = 0x1_0000_0000;
/// Unmapped IOVA left between two allocations of the bump allocator, so an overrun faults.
const GUARD: u64 = PAGE_SIZE as u64;
/// Mailbox block size.
pub const MAILBOX_BLOCK: usize = cmd_prot_block::SIZE;
/// Mailbox block stride in the host's mailbox memory (the alignment the device requires).
pub const MAILBOX_STRIDE: usize = 1024;
/// Bytes of input and output carried inline in a command entry.
const INLINE: usize = cmd::CMD_INLINE_SIZE;
/// Data bytes per mailbox block.
const BLOCK_DATA: usize = cmd::CMD_DATA_BLOCK_SIZE;
/// Size of a command queue entry.
const ENTRY: usize = cmd_layout::SIZE;

/// The signature byte that makes the XOR of `bytes` plus itself equal 0xff (§2.6 of the device
/// contract): NOT of the XOR of `bytes`.
pub fn signature(bytes: &[u8]) -> u8 {
    !bytes.iter().fold(0u8, |a, b| a ^ b)
}

mod buffer;
mod commands;
mod event_queue;
mod eventfd;

pub use buffer::HostBuffer;
pub use commands::{CmdError, CmdHost, PreparedCmd, cmd_input};
pub use event_queue::{HostEq, eqe_data_u32, eqe_type};
pub use eventfd::EventFd;
