//! Work requests (`struct ibv_send_wr`, `struct ibv_recv_wr`) shaped so that an invalid one
//! cannot be written: the payload is a gather list or inline bytes, never both; each opcode
//! carries exactly its operands (a READ has a scatter list and no inline data, an atomic has
//! its 8-byte result buffer and named operands); UD addressing exists only in [`UdSendWr`], the
//! request a UD QP takes ([`crate::Qp::post_send_ud`]).
//!
//! ```
//! use umlx_verbs::{Payload, Remote, SendFlags, SendOp, SendWr, Sge};
//! let sgl = [Sge::new(0x1000, 64, 0x55)];
//! let remote = Remote { addr: 0x20_0000, rkey: 0x77 };
//! // An RDMA WRITE of 64 bytes, signaled.
//! let wr = SendWr::new(7, SendOp::Write { data: Payload::Sges(&sgl), remote, imm: None }).signaled();
//! assert_eq!((wr.wr_id, wr.flags), (7, SendFlags::SIGNALED));
//! // A SEND of bytes copied into the WQE (IBV_SEND_INLINE): no memory region needed.
//! let hello = SendWr::new(8, SendOp::Send { data: Payload::Inline(b"hello"), imm: Some(0x1234) });
//! # let _ = hello;
//! ```

use crate::qp::Ah;
use crate::types::{SendFlags, WrOpcode};
use umlx_driver::datapath::opcode as wqe_opcode;

/// A scatter/gather element (`struct ibv_sge`): address, length, lkey.
pub use umlx_driver::datapath::Sge;

/// The remote buffer of an RDMA or atomic operation: address and rkey (`wr.rdma`,
/// `wr.atomic`).
pub use umlx_driver::datapath::{Remote, SimpleWqeSource};

/// What a SEND or RDMA WRITE carries.
#[derive(Clone, Copy, Debug)]
// A plain tag byte first (no niche encoding): the post path tells the variants apart with one
// compare.
#[repr(u8)]
pub enum Payload<'a> {
    /// Gathered by the device from registered memory (`sg_list`).
    Sges(&'a [Sge]),
    /// Copied into the WQE when posted (IBV_SEND_INLINE): no memory region is needed and the
    /// bytes may be reused as soon as the post returns. At most the QP's `max_inline_data`.
    Inline(&'a [u8]),
}

impl<'a> From<&'a [Sge]> for Payload<'a> {
    fn from(s: &'a [Sge]) -> Payload<'a> {
        Payload::Sges(s)
    }
}

impl<'a, const N: usize> From<&'a [Sge; N]> for Payload<'a> {
    fn from(s: &'a [Sge; N]) -> Payload<'a> {
        Payload::Sges(s)
    }
}

/// The operation of a send work request on a connected (RC) QP, with its operands.
#[derive(Clone, Copy, Debug)]
#[repr(u8)]
pub enum SendOp<'a> {
    /// IBV_WR_SEND, or IBV_WR_SEND_WITH_IMM with `imm`.
    Send {
        /// The message.
        data: Payload<'a>,
        /// Immediate data for the receiver's completion.
        imm: Option<u32>,
    },
    /// IBV_WR_RDMA_WRITE, or IBV_WR_RDMA_WRITE_WITH_IMM with `imm` (which consumes a receive
    /// at the peer).
    Write {
        /// What to write.
        data: Payload<'a>,
        /// Where.
        remote: Remote,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// IBV_WR_RDMA_READ: `remote` into `into`.
    Read {
        /// Where the data lands (registered with LOCAL_WRITE).
        into: &'a [Sge],
        /// What to read.
        remote: Remote,
    },
    /// IBV_WR_ATOMIC_CMP_AND_SWP: if the 8 bytes at `remote` equal `compare`, they become
    /// `swap`; the original value lands in `result`.
    CompareSwap {
        /// One 8-byte element for the original value.
        result: Sge,
        /// The 8-byte aligned remote word.
        remote: Remote,
        /// Compared with the remote word.
        compare: u64,
        /// Written when equal.
        swap: u64,
    },
    /// IBV_WR_ATOMIC_FETCH_AND_ADD: the 8 bytes at `remote` grow by `add`; the original value
    /// lands in `result`.
    FetchAdd {
        /// One 8-byte element for the original value.
        result: Sge,
        /// The 8-byte aligned remote word.
        remote: Remote,
        /// Added to the remote word.
        add: u64,
    },
}

impl SendOp<'_> {
    /// The ibverbs opcode.
    pub fn opcode(&self) -> WrOpcode {
        match self {
            SendOp::Send { imm: None, .. } => WrOpcode::Send,
            SendOp::Send { imm: Some(_), .. } => WrOpcode::SendWithImm,
            SendOp::Write { imm: None, .. } => WrOpcode::RdmaWrite,
            SendOp::Write { imm: Some(_), .. } => WrOpcode::RdmaWriteWithImm,
            SendOp::Read { .. } => WrOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WrOpcode::AtomicCmpAndSwp,
            SendOp::FetchAdd { .. } => WrOpcode::AtomicFetchAndAdd,
        }
    }
}

/// A send work request for a connected QP (`struct ibv_send_wr`; a chain is a slice).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation and its operands.
    pub op: SendOp<'a>,
    /// IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_FENCE (inline is [`Payload::Inline`]).
    pub flags: SendFlags,
}

impl<'a> SendWr<'a> {
    /// A request with no flags.
    pub const fn new(wr_id: u64, op: SendOp<'a>) -> SendWr<'a> {
        SendWr { wr_id, op, flags: SendFlags(0) }
    }

    /// Asks for a completion (IBV_SEND_SIGNALED).
    pub const fn signaled(mut self) -> SendWr<'a> {
        self.flags = SendFlags(self.flags.0 | SendFlags::SIGNALED.0);
        self
    }

    /// Adds `flags`.
    pub const fn with_flags(mut self, flags: SendFlags) -> SendWr<'a> {
        self.flags = SendFlags(self.flags.0 | flags.0);
        self
    }
}

/// Where a UD send goes (`wr.ud`): the address handle, the remote QPN and its Q_Key.
#[derive(Clone, Copy, Debug)]
pub struct UdDest<'a> {
    /// Address handle.
    pub ah: &'a Ah,
    /// Remote QPN.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// A send work request for a UD QP: a SEND (with or without immediate) to a destination.
#[derive(Clone, Copy, Debug)]
pub struct UdSendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where it goes.
    pub dest: UdDest<'a>,
    /// The datagram (at most the path MTU).
    pub data: Payload<'a>,
    /// IBV_WR_SEND_WITH_IMM's immediate data.
    pub imm: Option<u32>,
    /// IBV_SEND_SIGNALED, IBV_SEND_SOLICITED.
    pub flags: SendFlags,
}

/// A receive work request (`struct ibv_recv_wr`): where an incoming SEND lands.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (registered with LOCAL_WRITE); empty for zero-byte messages.
    pub sg_list: &'a [Sge],
}

/// The operation of a one-SGE request given as fields ([`crate::Qp::post_send_one`]). Each
/// value is the send WQE opcode the request is posted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OneSgeOp {
    /// SEND.
    Send = wqe_opcode::SEND,
    /// SEND with immediate.
    SendImm = wqe_opcode::SEND_IMM,
    /// RDMA WRITE.
    Write = wqe_opcode::RDMA_WRITE,
    /// RDMA WRITE with immediate.
    WriteImm = wqe_opcode::RDMA_WRITE_IMM,
    /// RDMA READ.
    Read = wqe_opcode::RDMA_READ,
}

impl OneSgeOp {
    /// Whether the request carries immediate data.
    #[inline(always)]
    pub fn with_imm(self) -> bool {
        matches!(self, OneSgeOp::SendImm | OneSgeOp::WriteImm)
    }

    /// Whether the request names remote memory (an RDMA WRITE or READ).
    #[inline(always)]
    pub fn is_rdma(self) -> bool {
        matches!(self, OneSgeOp::Write | OneSgeOp::WriteImm | OneSgeOp::Read)
    }
}
