//! Completions: the requester's and the responder's CQEs, error CQEs, and a QP's move to the
//! error state with the flush of its outstanding WQEs.

use super::{Kind, Path, QpTransport, SendWqe};
use crate::firmware::DataPath;
use umlx_hwdesc::enums::{CqeOpcode, CqeSyndrome, EventType, QpState};
use umlx_hwdesc::ifc::qpc;
use umlx_hwdesc::plain::{CqeOpOwn, cq as cq_consts, cqe64, eqe_qp_srq, err_cqe, wqe as w};
use umlx_hwdesc::{U16, U32};

/// A requester CQE's `sop_drop_qpn`: the send WQE opcode over the QP number.
fn sop_drop_qpn(wqe_opcode: u8, qpn: u32) -> U32 {
    U32::new(((wqe_opcode as u32) << cq_consts::SOP_WQE_OPCODE_SHIFT) | (qpn & cq_consts::NUM_MASK_24))
}

/// An `op_own` byte with `opcode` (the owner bit is the CQ's to set).
fn op_own(opcode: CqeOpcode, solicited: bool) -> u8 {
    CqeOpOwn::new().with_opcode(opcode.0).with_solicited(solicited).into_bits()
}

impl DataPath<'_> {
    /// Requester CQE for a successful WQE (only if signaled).
    pub(crate) fn req_cqe(&mut self, path: &Path, wq: &SendWqe) {
        if !wq.signaled {
            return;
        }
        let bytes = match wq.kind {
            Kind::Atomic => w::ATOMIC_SIZE,
            _ => wq.len,
        };
        let cqe = cqe64 {
            byte_cnt: U32::new(bytes),
            sop_drop_qpn: sop_drop_qpn(wq.opcode, path.qpn),
            wqe_counter: U16::new(wq.index),
            op_own: op_own(CqeOpcode::REQ, false),
            ..Default::default()
        };
        self.lane.stats.cqes += 1;
        self.write_cqe(path.cqn_snd, &mut zerocopy::transmute!(cqe), false);
    }

    /// An error CQE (requester when `resp` is false).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn error_cqe(&mut self, path: &Path, resp: bool, opcode: u8, counter: u16, synd: u8) {
        let cqe = err_cqe {
            srqn: U32::new(if resp { path.srqn.unwrap_or(0) } else { 0 }),
            syndrome: synd,
            s_wqe_opcode_qpn: sop_drop_qpn(opcode, path.qpn),
            wqe_counter: U16::new(counter),
            op_own: op_own(if resp { CqeOpcode::RESP_ERR } else { CqeOpcode::REQ_ERR }, false),
            ..Default::default()
        };
        self.lane.stats.cqes += 1;
        self.lane.stats.error_cqes += 1;
        let cqn = if resp { path.cqn_rcv } else { path.cqn_snd };
        self.write_cqe(cqn, &mut zerocopy::transmute!(cqe), false);
    }

    /// A responder CQE.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resp_cqe(
        &mut self,
        path: &Path,
        op: CqeOpcode,
        byte_cnt: u32,
        imm: Option<u32>,
        counter: u16,
        src_qp: u32,
        ud_l3: Option<u8>,
        solicited: bool,
    ) {
        let mut flags = src_qp & cq_consts::NUM_MASK_24;
        if let Some(l3) = ud_l3 {
            // GRH present (g = 1), and the RoCE L3 header type (IPv6 or IPv4).
            flags |= (1 << cq_consts::FLAGS_RQPN_GRH_SHIFT)
                | ((l3 as u32 & cq_consts::FLAGS_RQPN_ROCE_L3_TYPE_MASK) << cq_consts::FLAGS_RQPN_ROCE_L3_TYPE_SHIFT);
        }
        let cqe = cqe64 {
            flags_rqpn: U32::new(flags),
            srqn_uidx: U32::new(path.srqn.unwrap_or(0)),
            imm_inval_pkey: U32::new(imm.unwrap_or(0)),
            byte_cnt: U32::new(byte_cnt),
            sop_drop_qpn: U32::new(path.qpn & cq_consts::NUM_MASK_24),
            wqe_counter: U16::new(counter),
            op_own: op_own(op, solicited),
            ..Default::default()
        };
        self.lane.stats.cqes += 1;
        self.write_cqe(path.cqn_rcv, &mut zerocopy::transmute!(cqe), solicited);
    }

    /// Moves the QP to the error state and flushes its outstanding work.
    pub(crate) fn qp_to_error(&mut self, t: &mut QpTransport) {
        let qpn = t.path.qpn;
        let was = std::mem::replace(&mut t.state, QpState::ERR);
        if let Some(mut qp) = self.objects.qps.lock(&qpn) {
            qp.state = QpState::ERR;
            qpc::state.set(&mut qp.ctx, QpState::ERR.0 as u64);
        }
        if was != QpState::ERR && t.path.srqn.is_some() {
            let data = eqe_qp_srq {
                type_: umlx_hwdesc::plain::eq::EVENT_QUEUE_TYPE_QP,
                qp_srq_n: U32::new(qpn & cq_consts::NUM_MASK_24),
                ..Default::default()
            };
            self.post_event(EventType::SRQ_LAST_WQE, 0, &zerocopy::transmute!(data));
        }
        self.flush(t);
    }

    /// Flushes every fetched and posted WQE of a QP in the error state.
    pub(crate) fn flush(&mut self, t: &mut QpTransport) {
        t.deadline = None;
        t.rnr_until = None;
        let path = t.path.clone();
        loop {
            self.sq_fetch(t);
            if t.sq.is_empty() {
                break;
            }
            t.pump_from = 0;
            while let Some(wq) = t.sq.retire_front() {
                self.error_cqe(&path, false, wq.opcode, wq.index, CqeSyndrome::WR_FLUSH_ERR.0);
            }
        }
        if let Some(super::RecvMsg::Send { wqe, .. }) = t.cur.take() {
            self.error_cqe(&path, true, 0, wqe.counter, CqeSyndrome::WR_FLUSH_ERR.0);
        }
        if path.srqn.is_none() && !path.no_rq {
            let Ok(counter) = self.iommu.read_u32_be(path.dbr) else { return };
            let counter = counter as u16;
            let mut n = 0u32;
            while (t.rq_consumed as u16) != counter && n < (1 << path.log_rq_size) {
                self.error_cqe(&path, true, 0, t.rq_consumed as u16, CqeSyndrome::WR_FLUSH_ERR.0);
                t.rq_consumed = t.rq_consumed.wrapping_add(1);
                n += 1;
            }
        }
    }
}
