//! [`HostEq`]: an event queue the host created, with its EQE helpers.

use super::HostBuffer;
use crate::device::SimDevice;
use std::time::{Duration, Instant};
use umlx_hwdesc::plain::{eq, eqe, uar};

/// An event queue the host created with [`CmdHost::create_eq`](super::CmdHost::create_eq).
#[derive(Debug)]
pub struct HostEq {
    /// EQ number.
    pub eqn: u32,
    /// UAR whose doorbells serve it.
    pub uar: u32,
    /// log2 of the number of entries.
    pub log_size: u32,
    /// MSI-X vector.
    pub intr: u32,
    /// The EQE ring.
    pub buf: HostBuffer,
    /// Consumer counter (entries consumed so far).
    pub ci: u32,
    pub(super) dev: SimDevice,
}

impl HostEq {
    /// Number of entries.
    pub fn nent(&self) -> u32 {
        1 << self.log_size
    }

    /// Byte offset of the entry for consumer counter `ci`.
    pub fn entry_offset(&self, ci: u32) -> usize {
        (ci & (self.nent() - 1)) as usize * eq::EQE_SIZE
    }

    /// The EQE at the consumer counter if software owns it (its owner bit equals the counter's
    /// wrap bit).
    pub fn peek(&self) -> Option<[u8; eqe::SIZE]> {
        let off = self.entry_offset(self.ci);
        let owner = self.buf.read_u8(off + eqe::owner) & eq::EQE_OWNER_MASK;
        if owner as u32 != (self.ci >> self.log_size) & 1 {
            return None;
        }
        let mut e = [0u8; eqe::SIZE];
        self.buf.read(off, &mut e);
        Some(e)
    }

    /// Consumes the next EQE if there is one (does not ring the doorbell).
    pub fn poll(&mut self) -> Option<[u8; eqe::SIZE]> {
        let e = self.peek()?;
        self.ci = self.ci.wrapping_add(1);
        Some(e)
    }

    /// Waits up to `timeout` for the next EQE and consumes it.
    pub fn wait(&mut self, timeout: Duration) -> Option<[u8; eqe::SIZE]> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.poll() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Consumes every available EQE.
    pub fn drain(&mut self) -> Vec<[u8; eqe::SIZE]> {
        std::iter::from_fn(|| self.poll()).collect()
    }

    /// Writes the consumer index to the UAR: + 0x40 (update and arm) or + 0x48 (update only).
    pub fn doorbell(&self, arm: bool) {
        let reg = if arm { uar::EQ_DOORBELL_ARM } else { uar::EQ_DOORBELL_NO_ARM };
        let off = (self.uar as usize * uar::UAR_PAGE_SIZE + reg) as u64;
        self.dev.bar0_write32(off, (self.eqn << eq::DB_EQN_SHIFT) | (self.ci & eq::DB_CI_MASK));
    }
}

/// The event type of an EQE.
pub fn eqe_type(e: &[u8; eqe::SIZE]) -> u8 {
    e[eqe::type_]
}

/// The first big-endian dword of an EQE's data (CMD: the completed-slot vector).
pub fn eqe_data_u32(e: &[u8; eqe::SIZE], off: usize) -> u32 {
    let at = eqe::data + off;
    u32::from_be_bytes(e[at..at + 4].try_into().expect("4 bytes"))
}
