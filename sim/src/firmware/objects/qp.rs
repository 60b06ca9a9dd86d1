//! Queue pairs: CREATE_QP, DESTROY_QP, QUERY_QP and the state transitions, with what each
//! transition copies from the command's QPC and the attribute checks.

use super::*;

/// A queue pair.
#[derive(Clone, Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Service type.
    pub st: QpServiceType,
    /// State.
    pub state: QpState,
    /// The QP context as last written (create + modify), for attributes and QUERY_QP.
    pub ctx: Vec<u8>,
    /// PD.
    pub pd: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    /// SRQ, if the RQ is an SRQ.
    pub srqn: Option<u32>,
    /// UAR of the SQ doorbell.
    pub uar: u32,
    /// Buffer (RQ then SQ).
    pub buf: QueueBuf,
    /// log2 RQ entries.
    pub log_rq_size: u32,
    /// log2 RQ stride in bytes.
    pub rq_stride_shift: u32,
    /// log2 SQ size in WQEBBs (None: no SQ).
    pub log_sq_size: Option<u32>,
    /// Zero-length RQ.
    pub no_rq: bool,
    /// Doorbell record address.
    pub dbr: u64,
    /// SQ WQEBB counter the device has fetched up to.
    pub sq_fetched: u16,
    /// RQ WQEs consumed.
    pub rq_consumed: u32,
    /// Last SQ doorbell value (WQE counter) seen.
    pub sq_doorbell: u16,
    /// Whether a send doorbell rang while another run held the transport: that run serves
    /// the send queue before it puts the transport back.
    pub sq_rang: bool,
    /// Transport state (requester and responder), owned by `crate::transport`; boxed so that
    /// the transport takes it out and puts it back as a pointer. `None` only while taken.
    pub transport: Option<Box<crate::transport::QpTransport>>,
    /// Whether the QP is in the transport timers' set of timed QPs: kept here so that handing
    /// a packet to the QP changes that set only when this changes. A QP whose timers all
    /// stopped stays in the set until the timers' next run.
    pub timed: bool,
}

impl Qp {
    /// A context field.
    pub fn get(&self, f: Field) -> u64 {
        f.get(&self.ctx)
    }

    /// Byte offset of the SQ in the QP buffer.
    pub fn sq_offset(&self) -> u64 {
        if self.no_rq || self.srqn.is_some() { 0 } else { (1u64 << self.log_rq_size) << self.rq_stride_shift }
    }
}

// Every QP modify command shares the layout of RST2INIT_QP.
const _: () = {
    assert!(init2rtr_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(rtr2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(rts2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(sqerr2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(init2init_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(sqd2rts_qp_in::qpc.offset_bits == rst2init_qp_in::qpc.offset_bits);
    assert!(init2rtr_qp_in::opt_param_mask.offset_bits == rst2init_qp_in::opt_param_mask.offset_bits);
    assert!(qp_2err_in::qpn.offset_bits == rst2init_qp_in::qpn.offset_bits);
    assert!(qp_2rst_in::qpn.offset_bits == rst2init_qp_in::qpn.offset_bits);
};

/// Optional-parameter mask bits (PRM `opt_param_mask`, declared in hwdesc).
mod opt {
    use umlx_hwdesc::enums::QpOptParam as P;
    pub const RRE: u32 = P::RRE.0;
    pub const RAE: u32 = P::RAE.0;
    pub const RWE: u32 = P::RWE.0;
    pub const PKEY_INDEX: u32 = P::PKEY_INDEX.0;
    pub const Q_KEY: u32 = P::Q_KEY.0;
    pub const RNR_TIMEOUT: u32 = P::RNR_TIMEOUT.0;
}

/// What a transition copies from the command's QPC: (field, None = always, Some(bit) = when
/// that optional-parameter bit is set).
fn transition_fields(op: CmdOpcode, st: QpServiceType) -> Vec<(Field, Option<u32>)> {
    let ads = qpc::primary_address_path;
    let p = |f: Field| ads.inner(f);
    let ud = st == QpServiceType::UD;
    match op {
        CmdOpcode::RST2INIT_QP | CmdOpcode::INIT2INIT_QP => {
            let always = op == CmdOpcode::RST2INIT_QP;
            let a = |b: u32| if always { None } else { Some(b) };
            let mut v = vec![(p(ads::vhca_port_num), None), (p(ads::pkey_index), a(opt::PKEY_INDEX))];
            if ud {
                v.push((qpc::q_key, a(opt::Q_KEY)));
            } else {
                v.extend([(qpc::rre, a(opt::RRE)), (qpc::rwe, a(opt::RWE)), (qpc::rae, a(opt::RAE))]);
            }
            v
        }
        CmdOpcode::INIT2RTR_QP => {
            if ud {
                vec![
                    (qpc::mtu, None),
                    (qpc::log_msg_max, None),
                    (qpc::q_key, Some(opt::Q_KEY)),
                    (p(ads::pkey_index), Some(opt::PKEY_INDEX)),
                ]
            } else {
                vec![
                    (qpc::mtu, None),
                    (qpc::log_msg_max, None),
                    (qpc::remote_qpn, None),
                    (qpc::next_rcv_psn, None),
                    (qpc::min_rnr_nak, None),
                    (qpc::log_rra_max, None),
                    (qpc::primary_address_path, None),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        CmdOpcode::RTR2RTS_QP => {
            if ud {
                vec![(qpc::next_send_psn, None), (qpc::q_key, Some(opt::Q_KEY))]
            } else {
                vec![
                    (qpc::next_send_psn, None),
                    (qpc::retry_count, None),
                    (qpc::rnr_retry, None),
                    (qpc::log_sra_max, None),
                    (p(ads::ack_timeout), None),
                    (qpc::min_rnr_nak, Some(opt::RNR_TIMEOUT)),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        // The optional parameters of these transitions (QpOptParam::allowed) hold no timeout,
        // retry count or path: those bits are refused before this table is read.
        CmdOpcode::RTS2RTS_QP | CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP => {
            if ud {
                vec![(qpc::q_key, Some(opt::Q_KEY))]
            } else {
                vec![
                    (qpc::min_rnr_nak, Some(opt::RNR_TIMEOUT)),
                    (qpc::rre, Some(opt::RRE)),
                    (qpc::rwe, Some(opt::RWE)),
                    (qpc::rae, Some(opt::RAE)),
                ]
            }
        }
        _ => vec![],
    }
}

/// Copies `f` from the command QPC (at `src_off` bits) into the QP context.
fn copy_field(dst: &mut [u8], src: &[u8], src_base: Field, f: Field) {
    if f.width_bits <= 64 {
        f.set(dst, src_base.inner(f).get(src));
    } else if let (Some(s), Some(d)) = (src_base.inner(f).bytes(src), f.bytes_mut(dst)) {
        d.copy_from_slice(s);
    }
}

impl Hca {
    pub(super) fn cmd_create_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_QP.0;
        need_in(op, input, create_qp_in::SIZE_BYTES)?;
        let base = create_qp_in::qpc;
        let g = |f: Field| base.inner(f).get(input);
        let st = QpServiceType(g(qpc::st) as u8);
        if st != QpServiceType::RC && st != QpServiceType::UD {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if g(qpc::state) != 0 || create_qp_in::wq_umem_valid.get(input) != 0 || g(qpc::dbr_umem_valid) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let pd = g(qpc::pd) as u32;
        let (cqn_snd, cqn_rcv) = (g(qpc::cqn_snd) as u32, g(qpc::cqn_rcv) as u32);
        let uar = g(qpc::uar_page) as u32;
        let o = &self.objects;
        if !o.pds.contains(&pd)
            || !o.uars.contains(&uar)
            || !o.cqs.contains_key(&cqn_snd)
            || !o.cqs.contains_key(&cqn_rcv)
        {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let rq_type = RqType(g(qpc::rq_type) as u8);
        let (srqn, no_rq) = match rq_type {
            RqType::NON_ZERO_RQ => (None, false),
            RqType::SRQ_RQ => {
                let s = g(qpc::srqn_rmpn_xrqn) as u32;
                if !o.srqs.contains_key(&s) {
                    return Err(bad_param(op, sy::BAD_REFERENCE));
                }
                (Some(s), true)
            }
            RqType::ZERO_LEN_RQ => (None, true),
            _ => return Err(bad_param(op, sy::BAD_FIELD_VALUE)),
        };
        let log_rq_size = g(qpc::log_rq_size) as u32;
        let rq_stride_shift = g(qpc::log_rq_stride) as u32 + plain::wqe::RQ_STRIDE_UNIT_SHIFT;
        let no_sq = g(qpc::no_sq) != 0;
        let log_sq = g(qpc::log_sq_size) as u32;
        if log_rq_size as u64 > limits::LOG_MAX_QP_SZ
            || log_sq as u64 > limits::LOG_MAX_QP_SZ
            || (1u64 << rq_stride_shift) > limits::MAX_WQE_SZ_RQ
        {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        let dbr = g(qpc::dbr_addr);
        if dbr % 8 != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let rq_bytes = if no_rq { 0 } else { (1u64 << log_rq_size) << rq_stride_shift };
        let sq_bytes = if no_sq { 0 } else { (plain::wqe::SEND_WQE_BB as u64) << log_sq };
        let page_shift = page::page_shift(g(qpc::log_page_size));
        let offset = page::page_offset_bytes(g(qpc::page_offset), page_shift);
        let npages = pages_for(rq_bytes + sq_bytes, page_shift, offset);
        let pas = read_pas(op, input, create_qp_in::SIZE_BYTES, npages)?;
        let mut ctx = base.bytes(input).map(|b| b.to_vec()).unwrap_or_else(|| vec![0; qpc::SIZE_BYTES]);
        qpc::state.set(&mut ctx, QpState::RST.0 as u64);
        // At most 2^log_max_qp QPs (the current cap, which the driver may raise up to the max),
        // numbered from FIRST_QPN within the 24-bit QPN space.
        let log_max_qp = self.caps.general(umlx_hwdesc::ifc::cmd_hca_cap::log_max_qp);
        if self.objects.qps.len() as u64 >= 1 << log_max_qp {
            return Err(no_res(op));
        }
        let qpn = self
            .objects
            .qps
            .add(u64::from(plain::cq::NUM_MASK_24) + 1, |qpn| {
                Locked::new(Qp {
                    qpn,
                    st,
                    state: QpState::RST,
                    ctx,
                    pd,
                    cqn_snd,
                    cqn_rcv,
                    srqn,
                    uar,
                    buf: QueueBuf { pas, page_shift, offset },
                    log_rq_size,
                    rq_stride_shift,
                    log_sq_size: (!no_sq).then_some(log_sq),
                    no_rq,
                    dbr,
                    sq_fetched: 0,
                    rq_consumed: 0,
                    sq_doorbell: 0,
                    sq_rang: false,
                    transport: Some(Box::default()),
                    timed: false,
                })
            })
            .ok_or_else(|| no_res(op))?;
        let mut o = out(create_qp_out::SIZE_BYTES);
        create_qp_out::qpn.set(&mut o, qpn as u64);
        Ok(o)
    }

    pub(super) fn cmd_destroy_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_QP.0;
        need_in(op, input, destroy_qp_in::SIZE_BYTES)?;
        let qpn = destroy_qp_in::qpn.get(input) as u32;
        if self.objects.qps.remove(&qpn).is_none() {
            return Err(bad_res(op));
        }
        self.qp_destroyed(qpn);
        Ok(out(destroy_qp_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_qp(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_QP.0;
        need_in(op, input, query_qp_in::SIZE_BYTES)?;
        let qpn = query_qp_in::qpn.get(input) as u32;
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(op)) };
        let mut o = out(query_qp_out::SIZE_BYTES + 8 * qp.buf.pas.len());
        if let Some(d) = query_qp_out::qpc.bytes_mut(&mut o) {
            d.copy_from_slice(&qp.ctx);
        }
        let q = query_qp_out::qpc;
        q.inner(qpc::state).set(&mut o, qp.state.0 as u64);
        q.inner(qpc::hw_sq_wqebb_counter).set(&mut o, qp.sq_fetched as u64);
        q.inner(qpc::sw_sq_wqebb_counter).set(&mut o, qp.sq_doorbell as u64);
        q.inner(qpc::hw_rq_counter).set(&mut o, qp.rq_consumed as u64);
        self.qp_query_transport(qpn, &mut o);
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(op)) };
        for (i, p) in qp.buf.pas.iter().enumerate() {
            let off = query_qp_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    pub(super) fn cmd_modify_qp(&mut self, op: CmdOpcode, input: &[u8]) -> CmdResult {
        let opc = op.0;
        let short = matches!(op, CmdOpcode::QP_2ERR | CmdOpcode::QP_2RST);
        need_in(opc, input, if short { qp_2err_in::SIZE_BYTES } else { rst2init_qp_in::SIZE_BYTES })?;
        let qpn = rst2init_qp_in::qpn.get(input) as u32;
        let Some(qp) = self.objects.qps.object_mut(&qpn) else { return Err(bad_res(opc)) };
        let cur = qp.state;
        let (from_ok, to) = match op {
            CmdOpcode::RST2INIT_QP => (cur == QpState::RST, QpState::INIT),
            CmdOpcode::INIT2INIT_QP => (cur == QpState::INIT, QpState::INIT),
            CmdOpcode::INIT2RTR_QP => (cur == QpState::INIT, QpState::RTR),
            CmdOpcode::RTR2RTS_QP => (cur == QpState::RTR, QpState::RTS),
            CmdOpcode::RTS2RTS_QP => (cur == QpState::RTS, QpState::RTS),
            CmdOpcode::SQERR2RTS_QP => (cur == QpState::SQER, QpState::RTS),
            CmdOpcode::SQD_RTS_QP => (cur == QpState::SQD, QpState::RTS),
            CmdOpcode::QP_2ERR => (true, QpState::ERR),
            CmdOpcode::QP_2RST => (true, QpState::RST),
            _ => return Err(CmdFail::new(CmdStatus::BAD_OP_ERR, opc, 0)),
        };
        if !from_ok {
            return Err(qp_state_err(opc));
        }
        let st = qp.st;
        let mut ctx = qp.ctx.clone();
        if !short {
            let mask = rst2init_qp_in::opt_param_mask.get(input) as u32;
            // Only the transition's optional parameters may be flagged (the firmware-spec table
            // Linux masks every modify with, `opt_mask` in mlx5_ib qp.c).
            if QpOptParam(mask).difference(QpOptParam::allowed(op, st)).bits() != 0 {
                return Err(bad_param(opc, sy::BAD_OPT_PARAM));
            }
            let src = rst2init_qp_in::qpc;
            for (f, bit) in transition_fields(op, st) {
                if bit.is_none_or(|b| mask & b != 0) {
                    copy_field(&mut ctx, input, src, f);
                }
            }
            self.validate_qp_attrs(opc, op, st, &ctx)?;
        }
        qpc::state.set(&mut ctx, to.0 as u64);
        let qp = self.objects.qps.object_mut(&qpn).expect("QP looked up above");
        qp.ctx = ctx;
        qp.state = to;
        if to == QpState::RST {
            qp.sq_fetched = 0;
            qp.rq_consumed = 0;
            qp.sq_doorbell = 0;
        }
        self.qp_state_changed(qpn, cur, to);
        Ok(out(rst2init_qp_out::SIZE_BYTES))
    }

    fn validate_qp_attrs(&self, opc: u16, op: CmdOpcode, st: QpServiceType, ctx: &[u8]) -> Result<(), CmdFail> {
        let bad = || bad_param(opc, sy::BAD_QP_ATTRIBUTE);
        let ads = qpc::primary_address_path;
        let port = ads.inner(ads::vhca_port_num).get(ctx);
        if port > 1 {
            return Err(bad());
        }
        if ads.inner(ads::pkey_index).get(ctx) != 0 {
            return Err(bad()); // one P_Key (0xffff) at index 0
        }
        if st == QpServiceType::RC && op == CmdOpcode::INIT2RTR_QP {
            let mtu = qpc::mtu.get(ctx) as u8;
            if !(1..=5).contains(&mtu) || mtu > 5 {
                return Err(bad());
            }
            let gid_index = ads.inner(ads::src_addr_index).get(ctx) as usize;
            if self.vport.gids.get(gid_index).copied().flatten().is_none() {
                return Err(bad());
            }
            let rgid = ads.inner(ads::rgid_rip).bytes(ctx).unwrap_or(&[0; 16]);
            if rgid == [0; 16] {
                return Err(bad());
            }
            if qpc::log_rra_max.get(ctx) > limits::LOG_MAX_RA_QP || qpc::log_msg_max.get(ctx) > limits::LOG_MAX_MSG {
                return Err(bad());
            }
        }
        if st == QpServiceType::RC && op == CmdOpcode::RTR2RTS_QP && qpc::log_sra_max.get(ctx) > limits::LOG_MAX_RA_QP {
            return Err(bad());
        }
        Ok(())
    }
}
