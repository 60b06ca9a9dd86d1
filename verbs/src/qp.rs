//! Protection domains, queue pairs, address handles and shared receive queues:
//! `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_post_send`, `ibv_post_recv`, `ibv_create_ah`, `ibv_create_srq`, `ibv_post_srq_recv`.

use crate::context::Context;
use crate::cq::Cq;
use crate::mr::{Mr, access};
use crate::types::*;
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use umlx_driver::av::{Av, AvParams};
use umlx_driver::backend::Backend;
use umlx_driver::datapath::{
    self, PostError, RecvQueue, Remote, SendQueue, SendWqe, SqChain, SqGeometry, WrRing, opcode,
};
use umlx_driver::dma::UserMemory;
use umlx_driver::objects::{MemoryRegion, Mkey, Pd as DrvPd, Qp as DrvQp, QpConfig, Srq as DrvSrq, Transition};
use umlx_driver::qpc::{AddressPath, QpAttrs, RemoteAccess};
use umlx_driver::wqsize::{self, QpCaps};
use umlx_hwdesc::enums::{IbMtu, QpServiceType, QpState as HwQpState};

/// A protection domain (`struct ibv_pd`).
pub struct Pd<B: Backend> {
    pub(crate) ctx: Context<B>,
    pub(crate) pd: Arc<DrvPd<B>>,
}

impl<B: Backend> std::fmt::Debug for Pd<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("pdn", &self.pd.pdn()).finish()
    }
}

/// A driver error about an argument is EINVAL ([`Error::Invalid`]); others stay driver errors.
fn invalid(e: umlx_driver::Error) -> Error {
    match e {
        umlx_driver::Error::InvalidArgument(m) => Error::Invalid(m),
        e => Error::Driver(e),
    }
}

impl<B: Backend> Pd<B> {
    /// `ibv_reg_mr` over a buffer the region takes ownership of (given back by [`Mr::dereg`]).
    pub fn reg_mr(&self, data: impl Into<Box<[u8]>>, flags: AccessFlags) -> Result<Mr<B>> {
        let acc = access(flags)?;
        let mem = UserMemory::new(self.ctx.shared.hca.dma_space(), data.into())?;
        let (iova_base, page, _) = mem.pages();
        let mkey = Mkey::create(&self.pd, mem.addr(), mem.len() as u64, page.trailing_zeros(), acc, |i| {
            iova_base + (i * page) as u64
        })?;
        Ok(Mr::user(mkey, mem, flags))
    }

    /// Registers `len` bytes of new pinned memory (on 2 MiB pages when `len` is at least 2 MiB
    /// and the system has them): the owned-buffer variant.
    pub fn alloc_mr(&self, len: usize, flags: AccessFlags) -> Result<Mr<B>> {
        let acc = access(flags)?;
        let mr = MemoryRegion::new(&self.pd, len, len >= 2 << 20, acc)?;
        Ok(Mr::owned(mr, flags))
    }

    /// `ibv_create_ah` (RoCE: always global).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let dmac = self.ctx.resolve_dmac(attr)?;
        let sgid = attr.grh.sgid_index as u32;
        if !self.ctx.gids().iter().any(|(i, _)| *i == sgid) {
            return Err(Error::Invalid(format!("source GID index {sgid} is not in the GID table")));
        }
        let g = attr.grh;
        let av = self.ctx.shared.hca.build_av(&AvParams {
            dmac,
            sl: attr.sl,
            traffic_class: g.traffic_class,
            hop_limit: g.hop_limit,
            sgid_index: g.sgid_index,
            flow_label: g.flow_label,
            dgid: g.dgid.0,
            udp_sport: 0,
        });
        Ok(Ah { attr: *attr, av })
    }

    /// `ibv_create_qp`: RC or UD, with its send and receive CQs (they may be the same CQ) and an
    /// optional SRQ. The returned QP's [`Qp::cap`] holds the actual capabilities.
    pub fn create_qp(
        &self,
        qp_type: QpType,
        send_cq: &Cq<B>,
        recv_cq: &Cq<B>,
        srq: Option<&Srq<B>>,
        init: QpInitCap,
    ) -> Result<Qp<B>> {
        let cap = init.cap;
        let service = match qp_type {
            QpType::Rc => QpServiceType::RC,
            QpType::Ud => QpServiceType::UD,
        };
        let size = wqsize::qp(
            service,
            QpCaps {
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
            },
            srq.is_some(),
        )
        .map_err(invalid)?;
        let (sq_bbs, log_sq, rq_stride, rq_wqes) = (size.sq_bbs, size.log_sq_size, size.rq_stride, size.rq_wqes);
        let config = QpConfig {
            service,
            log_sq_size: log_sq,
            log_rq_size: rq_wqes.trailing_zeros(),
            rq_stride_shift: rq_stride.trailing_zeros(),
        };
        let shared = &self.ctx.shared;
        let qp = DrvQp::new(&self.pd, &shared.uar, &send_cq.cq, &recv_cq.cq, srq.map(|s| &s.srq), config)?;
        let ring = Arc::new(WrRing::new(qp.qpn(), sq_bbs as usize, if srq.is_some() { 1 } else { rq_wqes as usize }));
        shared.qps.insert(ring.clone());
        let geo = SqGeometry {
            qpn: qp.qpn(),
            sq_offset: qp.sq_offset,
            log_bbs: log_sq,
            uar_index: shared.uar.index(),
            max_sge: size.actual.max_send_sge,
            max_inline: size.actual.max_inline_data,
            sig_all: init.sq_sig_all,
            bf_buf_size: shared.hca.caps().bf_buf_size(),
        };
        let sq = SendQueue::new(shared.hca.backend().clone(), qp.mem().clone(), geo, ring.clone())
            .map_err(|e| Error::Invalid(format!("SQ does not fit its buffer: {e:?}")))?;
        let rq = match srq {
            Some(_) => None,
            None => Some(
                RecvQueue::new(qp.mem().clone(), 0, config.log_rq_size, config.rq_stride_shift, ring.clone(), false)
                    .map_err(|e| Error::Invalid(format!("RQ does not fit its buffer: {e:?}")))?,
            ),
        };
        let mut rq = rq;
        if let Some(rq) = &mut rq {
            // Closed until the QP leaves RESET.
            rq.close();
        }
        let a = size.actual;
        let actual = QpCap {
            max_send_wr: a.max_send_wr,
            max_recv_wr: a.max_recv_wr,
            max_send_sge: a.max_send_sge,
            max_recv_sge: a.max_recv_sge,
            max_inline_data: a.max_inline_data,
        };
        Ok(Qp {
            ctx: self.ctx.clone(),
            qp,
            sq,
            rq,
            state: QpState::Reset,
            send_ok: false,
            fatal: shared.hca.fatal_handle(),
            qp_type,
            cap: actual,
            port: 1,
            dest_qpn: 0,
        })
    }

    /// `ibv_create_srq` with `max_wr` WQEs of `max_sge` SGEs, and a limit (0: not armed).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq<B>> {
        let stride = wqsize::srq_stride(max_sge).map_err(invalid)?;
        let wqes = (max_wr + 1).next_power_of_two();
        if limit >= wqes {
            return Err(Error::Invalid(format!("SRQ limit {limit} must be below its size {wqes}")));
        }
        let srq = Arc::new(DrvSrq::new(&self.pd, wqes.trailing_zeros(), stride.trailing_zeros(), limit)?);
        let ring = Arc::new(WrRing::new_srq(srq.srqn(), wqes as usize));
        self.ctx.shared.qps.insert_srq(ring.clone());
        let rq = RecvQueue::new(srq.mem().clone(), 0, wqes.trailing_zeros(), stride.trailing_zeros(), ring, true)
            .map_err(|e| Error::Invalid(format!("SRQ does not fit its buffer: {e:?}")))?;
        Ok(Srq { ctx: self.ctx.clone(), srq, rq })
    }

    /// PD number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn()
    }
}

/// An address handle (`struct ibv_ah`): the prebuilt UD address vector.
#[derive(Clone, Copy, Debug)]
pub struct Ah {
    /// The attributes it was created with.
    pub attr: AhAttr,
    av: Av,
}

/// A shared receive queue (`struct ibv_srq`).
pub struct Srq<B: Backend> {
    ctx: Context<B>,
    srq: Arc<DrvSrq<B>>,
    rq: RecvQueue,
}

impl<B: Backend> Srq<B> {
    /// `ibv_post_srq_recv`.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostFailure> {
        post_recv_chain(&mut self.rq, wrs)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: raise the limit event when fewer than `limit` WQEs
    /// remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        let size = 1u32 << self.srq.log_size;
        if limit >= size {
            return Err(Error::Invalid(format!("SRQ limit {limit} must be below its size {size}")));
        }
        Ok(self.srq.arm(limit)?)
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srq.srqn()
    }

    /// The context.
    pub fn context(&self) -> &Context<B> {
        &self.ctx
    }
}

/// A failed post: which work request (index into the slice, as ibverbs' `bad_wr`) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostFailure {
    /// Index of the first work request not posted.
    pub index: usize,
    /// Why.
    pub kind: PostFailureKind,
}

/// Why a post failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostFailureKind {
    /// The queue is full (ENOMEM).
    QueueFull,
    /// Too many SGEs (EINVAL).
    TooManySges,
    /// Inline data too large (EINVAL).
    InlineTooLarge,
    /// The QP is in a state that does not accept the post (EINVAL).
    WrongState(QpState),
    /// The opcode or its operands do not fit the QP type (EINVAL).
    InvalidRequest,
    /// The device is in its fatal error state (EIO): nothing is posted.
    DeviceFatal,
}

impl PostFailure {
    fn from_driver(index: usize, e: PostError) -> PostFailure {
        let kind = match e {
            PostError::QueueFull => PostFailureKind::QueueFull,
            PostError::TooManySges => PostFailureKind::TooManySges,
            PostError::InlineTooLarge | PostError::WqeTooLarge => PostFailureKind::InlineTooLarge,
            // Only a QP's RQ closes, in RESET.
            PostError::Closed => PostFailureKind::WrongState(QpState::Reset),
        };
        PostFailure { index, kind }
    }

    /// The errno ibverbs returns.
    pub fn errno(&self) -> i32 {
        match self.kind {
            PostFailureKind::QueueFull => 12,
            PostFailureKind::DeviceFatal => 5,
            _ => 22,
        }
    }
}

impl std::fmt::Display for PostFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            PostFailureKind::QueueFull => write!(f, "work request {}: queue full (ENOMEM)", self.index),
            PostFailureKind::TooManySges => write!(f, "work request {}: too many SGEs (EINVAL)", self.index),
            PostFailureKind::InlineTooLarge => write!(f, "work request {}: inline data too large (EINVAL)", self.index),
            PostFailureKind::WrongState(s) => write!(f, "work request {}: QP in state {s} (EINVAL)", self.index),
            PostFailureKind::InvalidRequest => {
                write!(f, "work request {}: invalid for this QP type (EINVAL)", self.index)
            }
            PostFailureKind::DeviceFatal => {
                write!(f, "work request {}: the device is in its fatal error state (EIO)", self.index)
            }
        }
    }
}

impl std::error::Error for PostFailure {}

/// A queue pair (`struct ibv_qp`).
pub struct Qp<B: Backend> {
    ctx: Context<B>,
    qp: DrvQp<B>,
    sq: SendQueue<B>,
    rq: Option<RecvQueue>,
    state: QpState,
    /// The state accepts send WRs (RTS, SQD, ERR).
    send_ok: bool,
    /// The device's fatal-error flag.
    fatal: Arc<AtomicBool>,
    qp_type: QpType,
    /// The capabilities the QP got.
    pub cap: QpCap,
    port: u8,
    dest_qpn: u32,
}

impl<B: Backend> std::fmt::Debug for Qp<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qpn", &self.qp.qpn()).field("state", &self.state).finish()
    }
}

/// The attributes a modify must carry (besides `IBV_QP_STATE`) and those it may carry, for an
/// RC (`rc`) or UD QP: the table the Linux RDMA core checks every `ibv_modify_qp` against
/// (`qp_state_table`, `ib_modify_qp_is_ok`), so umlx accepts exactly what rdma-core on a
/// kernel device accepts and refuses the rest with EINVAL instead of dropping it.
fn transition_attrs(t: Transition, rc: bool) -> (QpAttrMask, QpAttrMask) {
    use QpAttrMask as M;
    let m = |bits: &[QpAttrMask]| M(bits.iter().fold(0, |a, b| a | b.0));
    let none = M(0);
    match (t, rc) {
        (Transition::ToRst | Transition::ToErr, _) => (none, none),
        (Transition::Rst2Init, true) => (m(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]), none),
        (Transition::Rst2Init, false) => (m(&[M::PKEY_INDEX, M::PORT, M::QKEY]), none),
        (Transition::Init2Init, true) => (none, m(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS])),
        (Transition::Init2Init, false) => (none, m(&[M::PKEY_INDEX, M::PORT, M::QKEY])),
        (Transition::Init2Rtr, true) => (
            m(&[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN, M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER]),
            m(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
        ),
        (Transition::Init2Rtr, false) => (none, m(&[M::PKEY_INDEX, M::QKEY])),
        (Transition::Rtr2Rts, true) => (
            m(&[M::TIMEOUT, M::RETRY_CNT, M::RNR_RETRY, M::SQ_PSN, M::MAX_QP_RD_ATOMIC]),
            m(&[M::CUR_STATE, M::ALT_PATH, M::ACCESS_FLAGS, M::MIN_RNR_TIMER, M::PATH_MIG_STATE]),
        ),
        (Transition::Rtr2Rts, false) => (M::SQ_PSN, m(&[M::CUR_STATE, M::QKEY])),
        (Transition::Rts2Rts | Transition::Sqd2Rts, true) => {
            (none, m(&[M::CUR_STATE, M::ACCESS_FLAGS, M::ALT_PATH, M::PATH_MIG_STATE, M::MIN_RNR_TIMER]))
        }
        (Transition::Rts2Rts | Transition::Sqd2Rts | Transition::SqErr2Rts, false) => {
            (none, m(&[M::CUR_STATE, M::QKEY]))
        }
        // An RC QP never reaches SQE (its send errors move it to ERR).
        (Transition::SqErr2Rts, true) => (none, none),
    }
}

impl<B: Backend> Qp<B> {
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qpn()
    }

    /// Current state (as last set).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// QP type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// `ibv_modify_qp` with ibverbs attribute-mask semantics.
    pub fn modify(&mut self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let target = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state.ok_or_else(|| Error::Invalid("IBV_QP_STATE set but qp_state is None".into()))?
        } else {
            self.state
        };
        use QpAttrMask as M;
        let rc = self.qp_type == QpType::Rc;
        let t = match (self.state, target) {
            (_, QpState::Reset) => Transition::ToRst,
            (_, QpState::Err) => Transition::ToErr,
            (QpState::Reset, QpState::Init) => Transition::Rst2Init,
            (QpState::Init, QpState::Init) => Transition::Init2Init,
            (QpState::Init, QpState::Rtr) => Transition::Init2Rtr,
            (QpState::Rtr, QpState::Rts) => Transition::Rtr2Rts,
            (QpState::Rts, QpState::Rts) => Transition::Rts2Rts,
            (QpState::Sqe, QpState::Rts) => Transition::SqErr2Rts,
            (QpState::Sqd, QpState::Rts) => Transition::Sqd2Rts,
            (from, to) => {
                return Err(Error::WrongState(format!("QP {:#x}: no transition from {from} to {to}", self.qp_num())));
            }
        };
        let (required, optional) = transition_attrs(t, rc);
        if !mask.contains(required) {
            return Err(Error::Invalid(format!(
                "QP {:#x} {} -> {}: attribute mask {:#x} lacks required {:#x}",
                self.qp_num(),
                self.state,
                target,
                mask.0,
                required.0 & !mask.0
            )));
        }
        let extra = mask.0 & !(required.0 | optional.0 | M::STATE.0);
        if extra != 0 {
            return Err(Error::Invalid(format!(
                "QP {:#x} {} -> {}: attributes {:#x} cannot be modified in this transition (ibverbs allows {:#x})",
                self.qp_num(),
                self.state,
                target,
                extra,
                required.0 | optional.0
            )));
        }
        let dmac = if mask.contains(M::AV) && rc { Some(self.ctx.resolve_dmac(&attr.ah_attr)?) } else { None };
        if mask.contains(M::PATH_MTU)
            && let Some(m) = attr.path_mtu
            && m as u32 > self.ctx.active_mtu() as u32
        {
            return Err(Error::Invalid(format!(
                "path MTU {m} exceeds the port's active MTU {}",
                self.ctx.active_mtu()
            )));
        }
        let port = if mask.contains(M::PORT) { attr.port_num } else { self.port };
        let dest = if mask.contains(M::DEST_QPN) { attr.dest_qp_num } else { self.dest_qpn };
        let given = |m: QpAttrMask| mask.contains(m);
        let f = attr.qp_access_flags;
        let g = attr.ah_attr.grh;
        let attrs = QpAttrs {
            port,
            port_given: given(M::PORT),
            access: (given(M::ACCESS_FLAGS) && rc).then_some(RemoteAccess {
                write: f.contains(AccessFlags::REMOTE_WRITE),
                read: f.contains(AccessFlags::REMOTE_READ),
                atomic: f.contains(AccessFlags::REMOTE_ATOMIC),
            }),
            pkey_index: given(M::PKEY_INDEX).then_some(attr.pkey_index),
            qkey: given(M::QKEY).then_some(attr.qkey),
            path_mtu: if given(M::PATH_MTU) { attr.path_mtu.map(|m| IbMtu(m as u8)) } else { None },
            path: dmac.map(|dmac| AddressPath {
                dmac,
                dgid: g.dgid.0,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
                flow_label: g.flow_label,
                sl: attr.ah_attr.sl,
            }),
            dest_qpn: given(M::DEST_QPN).then_some(attr.dest_qp_num),
            rq_psn: given(M::RQ_PSN).then_some(attr.rq_psn),
            sq_psn: given(M::SQ_PSN).then_some(attr.sq_psn),
            max_dest_rd_atomic: given(M::MAX_DEST_RD_ATOMIC).then_some(attr.max_dest_rd_atomic),
            max_rd_atomic: given(M::MAX_QP_RD_ATOMIC).then_some(attr.max_rd_atomic),
            min_rnr_timer: given(M::MIN_RNR_TIMER).then_some(attr.min_rnr_timer),
            timeout: given(M::TIMEOUT).then_some(attr.timeout),
            retry_cnt: given(M::RETRY_CNT).then_some(attr.retry_cnt),
            rnr_retry: given(M::RNR_RETRY).then_some(attr.rnr_retry),
        };
        self.qp.transition(t, &attrs).map_err(Error::Driver)?;
        self.port = port;
        self.dest_qpn = dest;
        if t == Transition::ToRst {
            // As rdma-core does on RESET: the producer counters and the doorbell record start
            // from zero again, so the device never sees the old incarnation's counters.
            self.sq.reset();
            if let Some(rq) = &mut self.rq {
                rq.reset();
            }
            self.qp.mem().dbr.write_u32_be(0, 0)?;
            self.qp.mem().dbr.write_u32_be(4, 0)?;
        }
        self.state = target;
        self.send_ok = matches!(target, QpState::Rts | QpState::Err | QpState::Sqd);
        if let Some(rq) = &mut self.rq {
            // The RQ refuses posts in RESET by itself (a closed queue looks full to the fast
            // path), so posting checks no state.
            if target == QpState::Reset {
                rq.close();
            } else {
                rq.open();
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`: the attributes as the device holds them.
    pub fn query(&self) -> Result<QpAttr> {
        let q = self.qp.query_attrs()?;
        let state = match q.state {
            HwQpState::RST => QpState::Reset,
            HwQpState::INIT => QpState::Init,
            HwQpState::RTR => QpState::Rtr,
            HwQpState::RTS => QpState::Rts,
            HwQpState::SQER => QpState::Sqe,
            HwQpState::SQD => QpState::Sqd,
            _ => QpState::Err,
        };
        let acc = |on: bool, f: AccessFlags| if on { f } else { AccessFlags(0) };
        let p = q.path;
        Ok(QpAttr {
            qp_state: Some(state),
            path_mtu: Mtu::from_value(q.mtu.0 as u32),
            qkey: q.qkey,
            rq_psn: q.rq_psn,
            sq_psn: q.sq_psn,
            dest_qp_num: q.dest_qpn,
            qp_access_flags: acc(q.access.write, AccessFlags::REMOTE_WRITE)
                | acc(q.access.read, AccessFlags::REMOTE_READ)
                | acc(q.access.atomic, AccessFlags::REMOTE_ATOMIC),
            cap: self.cap,
            ah_attr: AhAttr {
                grh: GlobalRoute {
                    dgid: Gid(p.dgid),
                    flow_label: p.flow_label,
                    sgid_index: p.sgid_index,
                    hop_limit: p.hop_limit,
                    traffic_class: p.traffic_class,
                },
                sl: p.sl,
                port_num: q.port,
                dmac: Some(p.dmac),
            },
            pkey_index: q.pkey_index,
            max_rd_atomic: q.max_rd_atomic,
            max_dest_rd_atomic: q.max_dest_rd_atomic,
            min_rnr_timer: q.min_rnr_timer,
            port_num: q.port,
            timeout: q.timeout,
            retry_cnt: q.retry_cnt,
            rnr_retry: q.rnr_retry,
        })
    }

    /// `ibv_post_send`: posts a chain of work requests with one doorbell. As ibverbs: the
    /// requests before the first failing one are posted; the failure names its index.
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostFailure> {
        // One request (the most common post) of the short kind on an RC QP: straight through,
        // in a few registers; anything else in `post_send_chain`.
        if let [wr] = wrs
            && self.send_ok
            && self.qp_type == QpType::Rc
            && !self.fatal.load(Ordering::Relaxed)
        {
            let mut chain = self.sq.begin();
            if short_one(&mut chain, wr) {
                chain.finish();
                return Ok(());
            }
        }
        self.post_send_chain(wrs)
    }

    /// `post_send` for everything but a single short request.
    #[inline(never)]
    fn post_send_chain(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostFailure> {
        if !self.send_ok || self.fatal.load(Ordering::Relaxed) {
            return Err(self.refusal());
        }
        let qp_type = self.qp_type;
        let mut chain = self.sq.begin();
        if qp_type != QpType::Rc {
            return post_send_rest(chain, qp_type, 0, wrs);
        }
        // RC requests with one SGE and no inline data, while the ring has room known without
        // reading the tail: a run of one opcode goes through one loop specialised for it (one
        // compare per request, no calls, state in registers). At the first other request,
        // `post_send_rest` takes over the rest of the chain.
        let mut rest = wrs;
        while let Some(wr) = rest.first() {
            let before = rest.len();
            match wr.op {
                SendOp::RdmaWrite { .. } => short_run(&mut chain, &mut rest, opcode::RDMA_WRITE, |op| match *op {
                    SendOp::RdmaWrite { remote_addr: addr, rkey } => Some((0, Some(Remote { addr, rkey }))),
                    _ => None,
                }),
                SendOp::Send => short_run(&mut chain, &mut rest, opcode::SEND, |op| match *op {
                    SendOp::Send => Some((0, None)),
                    _ => None,
                }),
                SendOp::SendWithImm(_) => short_run(&mut chain, &mut rest, opcode::SEND_IMM, |op| match *op {
                    SendOp::SendWithImm(imm) => Some((imm, None)),
                    _ => None,
                }),
                SendOp::RdmaWriteWithImm { .. } => {
                    short_run(&mut chain, &mut rest, opcode::RDMA_WRITE_IMM, |op| match *op {
                        SendOp::RdmaWriteWithImm { remote_addr: addr, rkey, imm } => {
                            Some((imm, Some(Remote { addr, rkey })))
                        }
                        _ => None,
                    })
                }
                SendOp::RdmaRead { .. } => short_run(&mut chain, &mut rest, opcode::RDMA_READ, |op| match *op {
                    SendOp::RdmaRead { remote_addr: addr, rkey } => Some((0, Some(Remote { addr, rkey }))),
                    _ => None,
                }),
                _ => break,
            }
            if rest.len() == before {
                break;
            }
        }
        if !rest.is_empty() {
            return post_send_rest(chain, qp_type, wrs.len() - rest.len(), rest);
        }
        chain.finish();
        Ok(())
    }

    /// Why this QP refuses posts now: the device is dead, or the state does not allow them.
    #[cold]
    fn refusal(&self) -> PostFailure {
        let kind = if self.fatal.load(Ordering::Relaxed) {
            PostFailureKind::DeviceFatal
        } else {
            PostFailureKind::WrongState(self.state)
        };
        PostFailure { index: 0, kind }
    }

    /// `ibv_post_recv`.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostFailure> {
        // The RQ is closed in RESET (see `modify`). As ibverbs (and `Srq::post_recv`), no
        // device-state check: receives posted to a dead device are harmless and never complete;
        // the fatal state shows in sends, control calls and the async event.
        match &mut self.rq {
            Some(rq) => post_recv_chain(rq, wrs),
            // Attached to an SRQ: post there.
            None => Err(PostFailure { index: 0, kind: PostFailureKind::InvalidRequest }),
        }
    }

    /// The context.
    pub fn context(&self) -> &Context<B> {
        &self.ctx
    }
}

impl<B: Backend> Drop for Qp<B> {
    fn drop(&mut self) {
        self.ctx.shared.qps.remove(self.qp.qpn());
    }
}

/// Posts receive WRs on `rq` and updates its doorbell record once. As ibverbs: the requests
/// before the first failing one are posted. One-SGE requests with room known are written here;
/// at the first other one, [`post_recv_rest`] takes over the rest of the chain (out of line, so
/// this loop keeps its state in registers).
#[inline(always)]
fn post_recv_chain(rq: &mut RecvQueue, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostFailure> {
    let mut rest = wrs;
    while let [wr, tail @ ..] = rest {
        match wr.sg_list {
            [sge] if rq.try_write_one(wr.wr_id, sge) => rest = tail,
            _ => return post_recv_rest(rq, wrs.len() - rest.len(), rest),
        }
    }
    rq.ring_doorbell();
    Ok(())
}

/// The rest of a receive chain from index `first` on, any request shape; rings the doorbell
/// record.
#[inline(never)]
fn post_recv_rest(rq: &mut RecvQueue, first: usize, rest: &[RecvWr<'_>]) -> std::result::Result<(), PostFailure> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        if let Err(e) = rq.write_wqe(wr.wr_id, wr.sg_list) {
            result = Err(PostFailure::from_driver(first + i, e));
            break;
        }
    }
    rq.ring_doorbell();
    result
}

/// Writes `wr` if it takes the short path (one non-empty SGE, no inline data, SEND(_IMM),
/// RDMA_WRITE(_IMM) or RDMA_READ) and the ring has room known without reading the tail.
#[inline(always)]
fn short_one<B: Backend>(chain: &mut SqChain<'_, B>, wr: &SendWr<'_>) -> bool {
    let [sge] = wr.sg_list else { return false };
    let (id, flags) = (wr.wr_id, wr.send_flags.0);
    if flags & SendFlags::INLINE.0 != 0 || sge.is_empty() || !chain.has_room() {
        return false;
    }
    // One specialised copy per opcode (not `short_form`): a single merged call costs the
    // one-request post about 20 instructions.
    match wr.op {
        SendOp::RdmaWrite { remote_addr: addr, rkey } => {
            chain.put_simple(id, opcode::RDMA_WRITE, flags, 0, Some(Remote { addr, rkey }), sge)
        }
        SendOp::Send => chain.put_simple(id, opcode::SEND, flags, 0, None, sge),
        SendOp::SendWithImm(imm) => chain.put_simple(id, opcode::SEND_IMM, flags, imm, None, sge),
        SendOp::RdmaWriteWithImm { remote_addr: addr, rkey, imm } => {
            chain.put_simple(id, opcode::RDMA_WRITE_IMM, flags, imm, Some(Remote { addr, rkey }), sge)
        }
        SendOp::RdmaRead { remote_addr: addr, rkey } => {
            chain.put_simple(id, opcode::RDMA_READ, flags, 0, Some(Remote { addr, rkey }), sge)
        }
        _ => return false,
    }
    true
}

/// The WQE opcode, immediate and remote side of an operation the short path takes (SEND,
/// RDMA WRITE and READ, with or without immediate); `None` for the others (atomics).
#[inline(always)]
fn short_form(op: &SendOp) -> Option<(u8, u32, Option<Remote>)> {
    Some(match *op {
        SendOp::RdmaWrite { remote_addr: addr, rkey } => (opcode::RDMA_WRITE, 0, Some(Remote { addr, rkey })),
        SendOp::Send => (opcode::SEND, 0, None),
        SendOp::SendWithImm(imm) => (opcode::SEND_IMM, imm, None),
        SendOp::RdmaWriteWithImm { remote_addr: addr, rkey, imm } => {
            (opcode::RDMA_WRITE_IMM, imm, Some(Remote { addr, rkey }))
        }
        SendOp::RdmaRead { remote_addr: addr, rkey } => (opcode::RDMA_READ, 0, Some(Remote { addr, rkey })),
        _ => return None,
    })
}

/// Writes the leading requests of `rest` that are all `opcode` (as `extract` recognises them,
/// giving the immediate and the remote side), have one non-empty SGE and no inline data, as
/// many as the ring has room for without reading the tail; advances `rest` past them.
#[inline(always)]
fn short_run<B: Backend>(
    chain: &mut SqChain<'_, B>,
    rest: &mut &[SendWr<'_>],
    opcode: u8,
    extract: impl Fn(&SendOp) -> Option<(u32, Option<Remote>)>,
) {
    let room = (chain.room() as usize).min(rest.len());
    let mut done = 0;
    for wr in &rest[..room] {
        let Some((imm, remote)) = extract(&wr.op) else { break };
        let [sge] = wr.sg_list else { break };
        if wr.send_flags.0 & SendFlags::INLINE.0 != 0 || sge.is_empty() {
            break;
        }
        chain.put_simple(wr.wr_id, opcode, wr.send_flags.0, imm, remote, sge);
        done += 1;
    }
    *rest = &rest[done..];
}

/// The rest of a send chain from index `first` on, any request shape: RC short-path requests
/// (with the tail read when the ring looks full), everything else through
/// [`write_send_general`]. Ends the chain (doorbell). Out of line, so the caller's loop stays
/// free of calls.
#[inline(never)]
fn post_send_rest<B: Backend>(
    mut chain: SqChain<'_, B>,
    qp_type: QpType,
    first: usize,
    rest: &[SendWr<'_>],
) -> std::result::Result<(), PostFailure> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        let (id, flags) = (wr.wr_id, wr.send_flags.0);
        let short = qp_type == QpType::Rc && flags & SendFlags::INLINE.0 == 0;
        let r = match (wr.sg_list, short_form(&wr.op)) {
            ([sge], Some((op, imm, remote))) if short => chain.write_simple(id, op, flags, imm, remote, sge),
            _ => match chain.with_queue(|sq| write_send_general(sq, qp_type, wr)) {
                Ok(()) => Ok(()),
                Err(kind) => {
                    result = Err(PostFailure { index: first + i, kind });
                    break;
                }
            },
        };
        if let Err(e) = r {
            result = Err(PostFailure::from_driver(first + i, e));
            break;
        }
    }
    chain.finish();
    result
}

/// Any send WR the short path does not take: UD, inline data, SGE lists, atomics.
#[inline(never)]
fn write_send_general<B: Backend>(
    sq: &mut SendQueue<B>,
    qp_type: QpType,
    wr: &SendWr<'_>,
) -> std::result::Result<(), PostFailureKind> {
    let invalid = PostFailureKind::InvalidRequest;
    let (op, imm, remote, atomic) = match wr.op {
        SendOp::Send => (opcode::SEND, 0, Default::default(), (0, 0)),
        SendOp::SendWithImm(imm) => (opcode::SEND_IMM, imm, Default::default(), (0, 0)),
        SendOp::RdmaWrite { remote_addr, rkey } => {
            (opcode::RDMA_WRITE, 0, datapath::Remote { addr: remote_addr, rkey }, (0, 0))
        }
        SendOp::RdmaWriteWithImm { remote_addr, rkey, imm } => {
            (opcode::RDMA_WRITE_IMM, imm, datapath::Remote { addr: remote_addr, rkey }, (0, 0))
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            (opcode::RDMA_READ, 0, datapath::Remote { addr: remote_addr, rkey }, (0, 0))
        }
        SendOp::AtomicCmpAndSwp { remote_addr, rkey, compare_add, swap } => {
            (opcode::ATOMIC_CS, 0, datapath::Remote { addr: remote_addr, rkey }, (swap, compare_add))
        }
        SendOp::AtomicFetchAndAdd { remote_addr, rkey, compare_add } => {
            (opcode::ATOMIC_FA, 0, datapath::Remote { addr: remote_addr, rkey }, (compare_add, 0))
        }
    };
    let ud = qp_type == QpType::Ud;
    if ud && !matches!(op, opcode::SEND | opcode::SEND_IMM) {
        return Err(invalid);
    }
    let av_buf;
    let av = if ud {
        let d = wr.ud.ok_or(invalid)?;
        av_buf = d.ah.av.for_remote(d.remote_qpn, d.remote_qkey);
        Some(&av_buf)
    } else {
        None
    };
    let is_atomic = matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA);
    if is_atomic && (wr.sg_list.len() != 1 || wr.sg_list[0].length() != 8) {
        return Err(invalid);
    }
    let inline = if wr.send_flags.contains(SendFlags::INLINE) {
        if op == opcode::RDMA_READ || is_atomic {
            return Err(invalid);
        }
        Some(wr.inline_data.ok_or(invalid)?)
    } else {
        None
    };
    let w = SendWqe {
        wr_id: wr.wr_id,
        opcode: op,
        send_flags: wr.send_flags.0 & 7,
        imm,
        remote,
        atomic,
        sges: wr.sg_list,
        inline,
        av,
    };
    sq.write_wqe(&w).map_err(|e| PostFailure::from_driver(0, e).kind)
}
