//! Work-queue sizing: how many 64-byte WQEBBs a send WQE of a QP needs for its largest request
//! (control segment, UD address vector or RDMA/atomic segments, then the gather list or inline
//! data), how large the SQ, RQ and SRQ rings are for the requested capabilities, and what
//! capabilities the device allows from its caps. This module owns those numbers; the segment
//! sizes come from hwdesc's `plain` structures.

use crate::{Error, Result};
use umlx_hwdesc::enums::QpServiceType;
use umlx_hwdesc::plain::{
    wqe, wqe_atomic_seg, wqe_av, wqe_ctrl_seg, wqe_data_seg, wqe_inline_seg, wqe_raddr_seg, wqe_srq_next_seg,
};

/// Largest inline data one send WQE carries.
pub const MAX_INLINE: u32 = 512;
/// Largest gather list of a send WQE.
pub const MAX_SEND_SGE: u32 = 30;
/// Largest scatter list of a receive WQE.
pub const MAX_RECV_SGE: u32 = 31;

const BB: u32 = wqe::SEND_WQE_BB as u32;
const DS: u32 = wqe::SEND_WQE_DS as u32;
const DATA_SEG: u32 = wqe_data_seg::SIZE as u32;

/// The capabilities a QP is asked for (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests.
    pub max_send_wr: u32,
    /// Receive work requests.
    pub max_recv_wr: u32,
    /// Gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter entries per receive request.
    pub max_recv_sge: u32,
    /// Inline bytes per send request.
    pub max_inline_data: u32,
}

/// The geometry of a new QP's queues and the capabilities it actually gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSizing {
    /// WQEBBs of the largest send WQE.
    pub wqe_bbs: u32,
    /// SQ size in WQEBBs (a power of two).
    pub sq_bbs: u32,
    /// log2 of `sq_bbs`.
    pub log_sq_size: u32,
    /// Receive WQEs (a power of two).
    pub rq_wqes: u32,
    /// Receive WQE stride in bytes (a power of two).
    pub rq_stride: u32,
    /// What the QP gets (receive side 0 with an SRQ).
    pub actual: QpCaps,
}

/// Bytes before the data of the largest send WQE of a service type: the control segment, then
/// a UD address vector, or an RC remote-address and atomic segment.
fn fixed_bytes(st: QpServiceType) -> u32 {
    let ctrl = wqe_ctrl_seg::SIZE as u32;
    if st == QpServiceType::UD {
        ctrl + wqe_av::SIZE as u32
    } else {
        ctrl + wqe_raddr_seg::SIZE as u32 + wqe_atomic_seg::SIZE as u32
    }
}

/// Sizes the queues of a QP of service type `st` for `caps` (`srq`: receives go to an SRQ).
pub fn qp(st: QpServiceType, caps: QpCaps, srq: bool) -> Result<QpSizing> {
    if caps.max_send_sge > MAX_SEND_SGE || caps.max_recv_sge > MAX_RECV_SGE {
        return Err(Error::InvalidArgument(format!(
            "{} send / {} receive SGEs: at most {MAX_SEND_SGE} / {MAX_RECV_SGE}",
            caps.max_send_sge, caps.max_recv_sge
        )));
    }
    if caps.max_inline_data > MAX_INLINE {
        return Err(Error::InvalidArgument(format!("max_inline_data {}: at most {MAX_INLINE}", caps.max_inline_data)));
    }
    let fixed = fixed_bytes(st);
    let inline_hdr = wqe_inline_seg::SIZE as u32;
    let data = (caps.max_send_sge.max(1) * DATA_SEG).max((caps.max_inline_data + inline_hdr).div_ceil(DS) * DS);
    let wqe_bbs = (fixed + data).div_ceil(BB);
    let sq_bbs = (caps.max_send_wr.max(1) * wqe_bbs).next_power_of_two();
    let rq_stride = (caps.max_recv_sge.max(1) * DATA_SEG).next_power_of_two().max(DATA_SEG);
    let rq_wqes = caps.max_recv_wr.max(1).next_power_of_two();
    let room = wqe_bbs * BB - fixed;
    Ok(QpSizing {
        wqe_bbs,
        sq_bbs,
        log_sq_size: sq_bbs.trailing_zeros(),
        rq_wqes,
        rq_stride,
        actual: QpCaps {
            max_send_wr: sq_bbs / wqe_bbs,
            max_recv_wr: if srq { 0 } else { rq_wqes },
            max_send_sge: room / DATA_SEG,
            max_recv_sge: if srq { 0 } else { rq_stride / DATA_SEG },
            max_inline_data: (room - inline_hdr).min(MAX_INLINE),
        },
    })
}

/// The WQE stride of an SRQ whose WQEs hold `max_sge` scatter entries after the "next"
/// segment (a power of two).
pub fn srq_stride(max_sge: u32) -> Result<u32> {
    if max_sge == 0 || max_sge > MAX_RECV_SGE {
        return Err(Error::InvalidArgument(format!("SRQ max_sge {max_sge}: 1..={MAX_RECV_SGE}")));
    }
    Ok((wqe_srq_next_seg::SIZE as u32 + max_sge * DATA_SEG).next_power_of_two())
}

/// Gather entries the device's largest send WQE (`max_wqe_sz_sq` bytes) holds after a control
/// and a remote-address segment.
pub fn device_max_send_sge(max_wqe_sz_sq: u32) -> u32 {
    max_wqe_sz_sq.saturating_sub((wqe_ctrl_seg::SIZE + wqe_raddr_seg::SIZE) as u32) / DATA_SEG
}

/// Scatter entries the device's largest SRQ WQE (`max_wqe_sz_rq` bytes) holds after the
/// "next" segment.
pub fn device_max_srq_sge(max_wqe_sz_rq: u32) -> u32 {
    max_wqe_sz_rq.saturating_sub(wqe_srq_next_seg::SIZE as u32) / DATA_SEG
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_and_ud_sizes() {
        // RC, one SGE: ctrl 16 + raddr 16 + atomic 16 + one data segment 16 = one WQEBB.
        let s = qp(QpServiceType::RC, QpCaps { max_send_wr: 10, max_recv_wr: 5, ..Default::default() }, false).unwrap();
        assert_eq!((s.wqe_bbs, s.sq_bbs, s.log_sq_size, s.rq_wqes, s.rq_stride), (1, 16, 4, 8, 16));
        assert_eq!((s.actual.max_send_sge, s.actual.max_inline_data, s.actual.max_send_wr), (1, 12, 16));
        // UD with 64 inline bytes: ctrl 16 + AV 48 + 80 (4 + 64 rounded to 16) = 144 -> 3 WQEBBs.
        let s =
            qp(QpServiceType::UD, QpCaps { max_send_wr: 4, max_inline_data: 64, ..Default::default() }, true).unwrap();
        assert_eq!((s.wqe_bbs, s.sq_bbs, s.actual.max_recv_wr, s.actual.max_recv_sge), (3, 16, 0, 0));
        assert_eq!((s.actual.max_send_sge, s.actual.max_inline_data), (8, 124));
        assert!(qp(QpServiceType::RC, QpCaps { max_send_sge: 31, ..Default::default() }, false).is_err());
        assert!(qp(QpServiceType::RC, QpCaps { max_inline_data: 513, ..Default::default() }, false).is_err());
        assert_eq!(srq_stride(1).unwrap(), 32);
        assert_eq!(srq_stride(4).unwrap(), 128);
        assert!(srq_stride(0).is_err());
        assert_eq!(device_max_send_sge(512), 30);
        assert_eq!(device_max_srq_sge(512), 31);
    }
}
