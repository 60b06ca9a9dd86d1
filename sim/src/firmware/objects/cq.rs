//! Completion queues: CREATE_CQ, DESTROY_CQ, QUERY_CQ and MODIFY_CQ, the arm doorbell, and the
//! writing of CQEs (owner bits, overrun, the completion event of an armed CQ, CQ errors).

use super::*;

/// A pending arm of a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqArm {
    /// Only solicited completions (and errors) raise the event.
    pub solicited_only: bool,
    /// Arm sequence number (2 bits).
    pub sn: u8,
    /// Consumer index at arming.
    pub ci: u32,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// UAR index of the arm doorbell.
    pub uar: u32,
    /// EQ for completion events.
    pub eqn: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Doorbell record address.
    pub dbr: u64,
    /// Overrun ignore.
    pub oi: bool,
    /// CQEs written.
    pub producer: u32,
    /// The consumer counter the CQ's doorbell record held when the device last read it. A
    /// host only moves it forward, so while the CQEs written beyond it fit the ring, none can
    /// overrun it: the device reads the record again only for a CQE that would find the ring
    /// full by this count, not for every CQE.
    pub consumer_seen: u32,
    /// Current arm.
    pub arm: Option<CqArm>,
    /// The CQEs written when the last completion event was raised: those written since were
    /// written while the CQ was not armed (an arm that finds them unconsumed raises the event
    /// they missed).
    pub evented_through: u32,
    /// Set after an overrun or a fault: the CQ accepts no more CQEs.
    pub error: bool,
    /// Moderation: period and max count (stored for QUERY_CQ).
    pub moderation: (u16, u16),
}

impl Hca {
    pub(super) fn cmd_create_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_CQ.0;
        need_in(op, input, create_cq_in::SIZE_BYTES)?;
        let ctx = create_cq_in::cq_context;
        let g = |f: Field| ctx.inner(f).get(input);
        let log_size = g(cqc::log_cq_size) as u32;
        if log_size as u64 > limits::LOG_MAX_CQ_SZ {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if g(cqc::cqe_sz) != 0
            || g(cqc::cqe_comp_en) != 0
            || g(cqc::dbr_umem_valid) != 0
            || create_cq_in::cq_umem_valid.get(input) != 0
        {
            // 64-byte CQEs, no compression, no UMEM: what this device model supports.
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let uar = g(cqc::uar_page) as u32;
        let eqn = g(cqc::c_eqn_or_apu_element) as u32;
        if !self.objects.uars.contains(&uar) || !self.objects.eqs.contains_key(&eqn) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let dbr = g(cqc::dbr_addr);
        if dbr % 8 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(g(cqc::log_page_size));
        let offset = page::page_offset_bytes(g(cqc::page_offset), page_shift);
        let npages = pages_for((plain::cqe64::SIZE as u64) << log_size, page_shift, offset);
        let pas = read_pas(op, input, create_cq_in::SIZE_BYTES, npages)?;
        let moderation = (g(cqc::cq_period) as u16, g(cqc::cq_max_count) as u16);
        let oi = g(cqc::oi) != 0;
        let cqn = self
            .objects
            .cqs
            .add(1 << limits::LOG_MAX_CQ, |cqn| {
                Locked::new(Cq {
                    cqn,
                    log_size,
                    uar,
                    eqn,
                    buf: QueueBuf { pas, page_shift, offset },
                    dbr,
                    oi,
                    producer: 0,
                    consumer_seen: 0,
                    arm: None,
                    evented_through: 0,
                    error: false,
                    moderation,
                })
            })
            .ok_or_else(|| no_res(op))?;
        let mut o = out(create_cq_out::SIZE_BYTES);
        create_cq_out::cqn.set(&mut o, cqn as u64);
        Ok(o)
    }

    pub(super) fn cmd_destroy_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_CQ.0;
        need_in(op, input, destroy_cq_in::SIZE_BYTES)?;
        let cqn = destroy_cq_in::cqn.get(input) as u32;
        if !self.objects.cqs.contains_key(&cqn) {
            return Err(bad_res(op));
        }
        if self.objects.qps.values().any(|q| {
            let q = q.lock();
            q.cqn_snd == cqn || q.cqn_rcv == cqn
        }) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.cqs.remove(&cqn);
        Ok(out(destroy_cq_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_cq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_CQ.0;
        need_in(op, input, query_cq_in::SIZE_BYTES)?;
        let cqn = query_cq_in::cqn.get(input) as u32;
        let Some(cq) = self.objects.cqs.object_mut(&cqn).cloned() else { return Err(bad_res(op)) };
        let ci = self.iommu.read_u32_be(cq.dbr).unwrap_or(0);
        let mut o = out(query_cq_out::SIZE_BYTES + 8 * cq.buf.pas.len());
        let ctx = query_cq_out::cq_context;
        let s = |o: &mut Vec<u8>, f: Field, v: u64| {
            ctx.inner(f).set(o, v);
        };
        s(&mut o, cqc::status, if cq.error { CqStatus::CQ_OVERFLOW } else { CqStatus::OK }.0 as u64);
        s(&mut o, cqc::log_cq_size, cq.log_size as u64);
        s(&mut o, cqc::uar_page, cq.uar as u64);
        s(&mut o, cqc::c_eqn_or_apu_element, cq.eqn as u64);
        s(&mut o, cqc::log_page_size, page::log_page_size(cq.buf.page_shift));
        s(&mut o, cqc::page_offset, page::page_offset_field(cq.buf.offset, cq.buf.page_shift));
        s(&mut o, cqc::oi, cq.oi as u64);
        s(
            &mut o,
            cqc::st,
            match cq.arm {
                Some(CqArm { solicited_only: true, .. }) => CqState::SOLICITED_NOTIFICATION_REQUEST_ARMED,
                Some(_) => CqState::NOTIFICATION_REQUEST_ARMED,
                None => CqState::FIRED,
            }
            .0 as u64,
        );
        s(&mut o, cqc::cq_period, cq.moderation.0 as u64);
        s(&mut o, cqc::cq_max_count, cq.moderation.1 as u64);
        s(&mut o, cqc::consumer_counter, (ci & plain::cq::NUM_MASK_24) as u64);
        s(&mut o, cqc::producer_counter, (cq.producer & plain::cq::NUM_MASK_24) as u64);
        s(&mut o, cqc::dbr_addr, cq.dbr);
        for (i, p) in cq.buf.pas.iter().enumerate() {
            let off = query_cq_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    pub(super) fn cmd_modify_cq(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::MODIFY_CQ.0;
        need_in(op, input, modify_cq_in::SIZE_BYTES)?;
        let cqn = modify_cq_in::cqn.get(input) as u32;
        let select = CqModifyFields(modify_cq_in::modify_field_select_resize_field_select.get(input) as u32);
        let ctx = modify_cq_in::cq_context;
        let g = |f: Field| ctx.inner(f).get(input);
        let Some(cq) = self.objects.cqs.object_mut(&cqn) else { return Err(bad_res(op)) };
        match ModifyCqOpMod(op_mod) {
            // Modify moderation: cq_period and cq_max_count.
            ModifyCqOpMod::MODIFY => {
                let mut m = cq.moderation;
                if select.contains(CqModifyFields::PERIOD) {
                    m.0 = g(cqc::cq_period) as u16;
                }
                if select.contains(CqModifyFields::COUNT) {
                    m.1 = g(cqc::cq_max_count) as u16;
                }
                self.objects.cqs.object_mut(&cqn).expect("CQ looked up above").moderation = m;
            }
            // Resize: log_cq_size, page_offset and log_page_size.
            ModifyCqOpMod::RESIZE => {
                let log_size = g(cqc::log_cq_size) as u32;
                if log_size as u64 > limits::LOG_MAX_CQ_SZ {
                    return Err(bad_param(op, sy::EXCEEDS_LIMIT));
                }
                let page_shift = page::page_shift(g(cqc::log_page_size));
                let offset = page::page_offset_bytes(g(cqc::page_offset), page_shift);
                let npages = pages_for((plain::cqe64::SIZE as u64) << log_size, page_shift, offset);
                let pas = read_pas(op, input, modify_cq_in::SIZE_BYTES, npages)?;
                // The switch point: a RESIZE_CQ CQE in the old ring at the producer position; the
                // driver copies the CQEs before it into the new ring. The producer counter goes on
                // in the new ring after it.
                let mut marker = [0u8; plain::cqe64::SIZE];
                marker[plain::cqe64::op_own] = plain::CqeOpOwn::new().with_opcode(CqeOpcode::RESIZE_CQ.0).into_bits();
                if !self.data_path(|dp| dp.write_cqe(cqn, &mut marker, false)) {
                    return Err(res_state(op, sy::BAD_STATE));
                }
                let cq = self.objects.cqs.object_mut(&cqn).expect("CQ looked up above");
                cq.log_size = log_size;
                cq.buf = QueueBuf { pas, page_shift, offset };
            }
            _ => return Err(bad_param(op, sy::BAD_OP_MOD)),
        }
        Ok(out(modify_cq_out::SIZE_BYTES))
    }

    /// UAR + 0x20: CQ arm doorbell (high dword: sn, command, consumer index).
    pub(crate) fn cq_arm_doorbell(&mut self, uar: u32, cqn: u32, hi: u32) {
        let Some(cq) = self.objects.cqs.object_mut(&cqn) else {
            self.stats.bad_doorbells += 1;
            return;
        };
        if cq.uar != uar {
            self.stats.bad_doorbells += 1;
            return;
        }
        let arm = CqArm {
            solicited_only: hi & plain::uar::CQ_DB_REQ_NOT_SOL != 0,
            sn: ((hi >> plain::uar::CQ_DB_SN_SHIFT) & 3) as u8,
            ci: hi & plain::cq::NUM_MASK_24,
        };
        cq.arm = Some(arm);
        // Unconsumed CQEs (beyond the arm's consumer index) that no event covered, written
        // while the CQ was not armed, raise the event at once: a host that polled the CQ
        // empty, armed it and sleeps misses none (nor one written between the doorbell's ring
        // and its execution, when another thread held the device). A CQE an event already
        // covered raises none: the event comes with the next CQE written, as
        // ibv_req_notify_cq(3) says ("Upon the addition of a new CQ entry"). A host that
        // re-arms before it polls the CQE of the event it took (perftest's event mode, which
        // then polls once) would otherwise take a stale event for its next wait.
        let mask = plain::cq::NUM_MASK_24;
        let unconsumed = cq.producer.wrapping_sub(arm.ci) & mask;
        let evented = cq.evented_through.wrapping_sub(arm.ci) & mask;
        let covered = if evented <= unconsumed { evented } else { 0 };
        if unconsumed > covered && !arm.solicited_only {
            self.data_path(|dp| dp.cq_event(cqn));
        }
    }
}

impl DataPath<'_> {
    /// Posts the completion event of an armed CQ and disarms it.
    pub(crate) fn cq_event(&mut self, cqn: u32) {
        let Some(mut cq) = self.objects.cqs.lock(&cqn) else { return };
        if cq.arm.take().is_none() {
            return;
        }
        cq.evented_through = cq.producer;
        let eqn = cq.eqn;
        drop(cq);
        let data = plain::eqe_comp { cqn: (cqn & plain::cq::NUM_MASK_24).into(), ..Default::default() };
        self.write_eqe(eqn, EventType::COMP.0, 0, &zerocopy::transmute!(data));
    }

    /// Writes a CQE (its owner bit is set here) and raises the completion event when armed and
    /// the CQE qualifies. Returns false if the CQ is gone, in error, overrun, or unreachable.
    pub(crate) fn write_cqe(&mut self, cqn: u32, cqe: &mut [u8; plain::cqe64::SIZE], solicited: bool) -> bool {
        let hca = self.hca();
        let Some(mut cq) = hca.objects.cqs.lock(&cqn) else { return false };
        if cq.error {
            return false;
        }
        let n = 1u32 << cq.log_size;
        let mask = plain::cq::NUM_MASK_24;
        let produced = cq.producer & mask;
        let full = |consumer: u32| produced.wrapping_sub(consumer & mask) & mask >= n;
        // With overrun ignore set, the device does not look at the consumer counter at all.
        let fail = if cq.oi || !full(cq.consumer_seen) {
            None
        } else {
            match self.iommu.read_u32_be(cq.dbr) {
                Err(_) => Some(CqErrorSyndrome::CQ_ACCESS_VIOLATION_ERROR),
                Ok(consumer) => {
                    cq.consumer_seen = consumer;
                    full(consumer).then_some(CqErrorSyndrome::CQ_OVERRUN)
                }
            }
        };
        if let Some(syndrome) = fail {
            drop(cq);
            self.cq_error(cqn, syndrome);
            return false;
        }
        let idx = cq.producer & (n - 1);
        let owner = ((cq.producer >> cq.log_size) & 1) as u8;
        let Some(iova) = cq.buf.iova((idx as usize * plain::cqe64::SIZE) as u64) else { return false };
        let own = plain::cqe64::op_own;
        let op_own = plain::CqeOpOwn::from_bits(cqe[own]).with_owner(owner != 0);
        cqe[own] = op_own.into_bits();
        if self.iommu.write_owner_last(iova, cqe, own).is_err() {
            drop(cq);
            self.cq_error(cqn, CqErrorSyndrome::CQ_ACCESS_VIOLATION_ERROR);
            return false;
        }
        cq.producer = cq.producer.wrapping_add(1);
        let opcode = CqeOpcode(op_own.opcode());
        let is_err = matches!(opcode, CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR);
        let is_resize = opcode == CqeOpcode::RESIZE_CQ;
        if let Some(arm) = cq.arm
            && !is_resize
            && (!arm.solicited_only || solicited || is_err)
        {
            drop(cq);
            self.cq_event(cqn);
        }
        true
    }

    /// Moves a CQ to error and posts CQ_ERROR with `syndrome`.
    pub(crate) fn cq_error(&mut self, cqn: u32, syndrome: CqErrorSyndrome) {
        if let Some(mut cq) = self.objects.cqs.lock(&cqn) {
            if cq.error {
                return;
            }
            cq.error = true;
        }
        let err = plain::eqe_cq_err {
            cqn: (cqn & plain::cq::NUM_MASK_24).into(),
            syndrome: syndrome.0,
            ..Default::default()
        };
        self.post_event(EventType::CQ_ERROR, 0, &event_data(&err));
    }
}
