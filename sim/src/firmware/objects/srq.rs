//! Shared receive queues: CREATE_SRQ, DESTROY_SRQ, QUERY_SRQ and ARM_RQ (the SRQ limit).

use super::*;

/// A shared receive queue.
#[derive(Clone, Debug)]
pub struct Srq {
    /// SRQ number.
    pub srqn: u32,
    /// PD.
    pub pd: u32,
    /// CQ (for XRC; stored).
    pub cqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// log2 of the WQE stride in bytes.
    pub stride_shift: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Doorbell record.
    pub dbr: u64,
    /// Limit watermark; armed when non-zero.
    pub lwm: u32,
    /// WQEs consumed so far (the head of the linked list).
    pub consumed: u32,
    /// Next WQE index to consume.
    pub head: u32,
    /// Error state (catastrophic).
    pub error: bool,
}

impl Hca {
    pub(super) fn cmd_create_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_SRQ.0;
        need_in(op, input, create_srq_in::SIZE_BYTES)?;
        let ctx = create_srq_in::srq_context_entry;
        let g = |f: Field| ctx.inner(f).get(input);
        let log_size = g(srqc::log_srq_size) as u32;
        let stride_shift = g(srqc::log_rq_stride) as u32 + plain::wqe::RQ_STRIDE_UNIT_SHIFT;
        if log_size as u64 > limits::LOG_MAX_SRQ_SZ || (1u64 << stride_shift) > limits::MAX_WQE_SZ_RQ {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if g(srqc::lwm) >= (1u64 << log_size) {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        let pd = g(srqc::pd) as u32;
        if !self.objects.pds.contains(&pd) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let dbr = g(srqc::dbr_addr);
        if dbr % 4 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(g(srqc::log_page_size));
        let offset = page::page_offset_bytes(g(srqc::page_offset), page_shift);
        let npages = pages_for((1u64 << log_size) << stride_shift, page_shift, offset);
        let pas = read_pas(op, input, create_srq_in::SIZE_BYTES, npages)?;
        let srqs = &self.objects.srqs;
        let srqn = alloc_num(|n| srqs.contains_key(&n), 1, 1 << limits::LOG_MAX_SRQ).ok_or_else(|| no_res(op))?;
        self.objects.srqs.insert(
            srqn,
            Locked::new(Srq {
                srqn,
                pd,
                cqn: g(srqc::cqn) as u32,
                log_size,
                stride_shift,
                buf: QueueBuf { pas, page_shift, offset },
                dbr,
                lwm: g(srqc::lwm) as u32,
                consumed: 0,
                head: 0,
                error: false,
            }),
        );
        let mut o = out(create_srq_out::SIZE_BYTES);
        create_srq_out::srqn.set(&mut o, srqn as u64);
        Ok(o)
    }

    pub(super) fn cmd_destroy_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_SRQ.0;
        need_in(op, input, destroy_srq_in::SIZE_BYTES)?;
        let srqn = destroy_srq_in::srqn.get(input) as u32;
        if !self.objects.srqs.contains_key(&srqn) {
            return Err(bad_res(op));
        }
        if self.objects.qps.values().any(|q| q.lock().srqn == Some(srqn)) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.srqs.remove(&srqn);
        Ok(out(destroy_srq_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_srq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_SRQ.0;
        need_in(op, input, query_srq_in::SIZE_BYTES)?;
        let srqn = query_srq_in::srqn.get(input) as u32;
        let Some(s) = self.objects.srqs.get_mut(&srqn).map(|s| s.get_mut().clone()) else { return Err(bad_res(op)) };
        let counter = self.iommu.read_u32_be(s.dbr).unwrap_or(0) & plain::dbr::WQ_COUNTER_MASK;
        let mut o = out(query_srq_out::SIZE_BYTES);
        let ctx = query_srq_out::srq_context_entry;
        ctx.inner(srqc::state).set(&mut o, if s.error { SrqState::ERROR } else { SrqState::GOOD }.0 as u64);
        ctx.inner(srqc::log_srq_size).set(&mut o, s.log_size as u64);
        ctx.inner(srqc::log_rq_stride).set(&mut o, (s.stride_shift - plain::wqe::RQ_STRIDE_UNIT_SHIFT) as u64);
        ctx.inner(srqc::pd).set(&mut o, s.pd as u64);
        ctx.inner(srqc::cqn).set(&mut o, s.cqn as u64);
        ctx.inner(srqc::lwm).set(&mut o, s.lwm as u64);
        ctx.inner(srqc::wqe_cnt).set(&mut o, (counter.wrapping_sub(s.consumed) & plain::dbr::WQ_COUNTER_MASK) as u64);
        ctx.inner(srqc::dbr_addr).set(&mut o, s.dbr);
        ctx.inner(srqc::log_page_size).set(&mut o, page::log_page_size(s.buf.page_shift));
        Ok(o)
    }

    pub(super) fn cmd_arm_rq(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::ARM_RQ.0;
        need_in(op, input, arm_rq_in::SIZE_BYTES)?;
        // SRQ: the only kind this device has.
        if ArmRqOpMod(op_mod) != ArmRqOpMod::SRQ {
            return Err(bad_param(op, sy::BAD_OP_MOD));
        }
        let srqn = arm_rq_in::srq_number.get(input) as u32;
        let lwm = arm_rq_in::lwm.get(input) as u32;
        let Some(s) = self.objects.srqs.get_mut(&srqn).map(Locked::get_mut) else { return Err(bad_res(op)) };
        if lwm >= (1 << s.log_size) {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        s.lwm = lwm;
        Ok(out(arm_rq_out::SIZE_BYTES))
    }
}
