//! Protection domains, queue pairs, address handles and shared receive queues:
//! `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_post_send`, `ibv_post_recv`, `ibv_create_ah`, `ibv_create_srq`, `ibv_post_srq_recv`.

use crate::Dev;
use crate::context::Context;
use crate::cq::Cq;
use crate::error::PostWhy;
use crate::modify::{ConnectParams, ModifyQp, RcPeer, attr_names, transition_attrs};
use crate::mr::{Mr, access};
use crate::types::*;
use crate::wr::{OneSgeOp, Payload, RecvWr, SendOp, SendWr, Sge, UdSendWr};
use crate::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use umlx_driver::av::{Av, AvParams};
use umlx_driver::datapath::{
    PostError, RecvQueue, Remote, SendQueue, SendWqe, SimpleFields, SimpleWqeSource, SqChain, SqGeometry, WrRing,
    opcode,
};
use umlx_driver::dma::{ExternalBuffer, UserMemory};
use umlx_driver::objects::{MemoryRegion, Mkey, Pd as DrvPd, Qp as DrvQp, QpConfig, Srq as DrvSrq, Transition};
use umlx_driver::qpc::{AddressPath, QpAttrs, RemoteAccess};
use umlx_driver::wqsize::{self, QpCaps};
use umlx_hwdesc::enums::{IbMtu, QpServiceType, QpState as HwQpState};

/// A protection domain (`struct ibv_pd`).
pub struct Pd {
    pub(crate) ctx: Context,
    pub(crate) pd: Arc<DrvPd<Dev>>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("pdn", &self.pd.pdn()).finish()
    }
}

impl Pd {
    /// `ibv_reg_mr` over a buffer the region takes ownership of (given back by [`Mr::dereg`]).
    pub fn reg_mr(&self, data: impl Into<Box<[u8]>>, flags: AccessFlags) -> Result<Mr> {
        let acc = access(flags)?;
        let mem = UserMemory::new(self.ctx.shared.hca.dma_space(), data.into())?;
        self.register(mem, acc, flags)
    }

    /// `ibv_reg_mr` over memory that stays its owner's: a C program's buffer, registered where
    /// it lies (the `libibverbs.so.1` shim's `ibv_reg_mr`). The promise that the memory outlives
    /// the region was made when the [`ExternalBuffer`] was built; [`Mr::dereg`] gives nothing
    /// back.
    pub fn reg_external(&self, buf: ExternalBuffer, flags: AccessFlags) -> Result<Mr> {
        let acc = access(flags)?;
        let mem = UserMemory::external(self.ctx.shared.hca.dma_space(), buf)?;
        self.register(mem, acc, flags)
    }

    /// The MKey over pinned and mapped user memory.
    fn register(&self, mem: UserMemory<Dev>, acc: umlx_driver::objects::Access, flags: AccessFlags) -> Result<Mr> {
        let (iova_base, page, _) = mem.pages();
        let mkey = Mkey::create(&self.pd, mem.addr(), mem.len() as u64, page.trailing_zeros(), acc, |i| {
            iova_base + (i * page) as u64
        })?;
        Ok(Mr::user(mkey, mem, flags))
    }

    /// Registers `len` bytes of new pinned memory (on 2 MiB pages when `len` is at least 2 MiB
    /// and the system has them): the owned-buffer variant.
    pub fn alloc_mr(&self, len: usize, flags: AccessFlags) -> Result<Mr> {
        let acc = access(flags)?;
        let mr = MemoryRegion::new(&self.pd, len, len >= 2 << 20, acc)?;
        Ok(Mr::owned(mr, flags))
    }

    /// `ibv_create_ah` (RoCE: always global).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let dmac = self.ctx.resolve_dmac(attr)?;
        let sgid = attr.grh.sgid_index as u32;
        if !self.ctx.gids().iter().any(|(i, _)| *i == sgid) {
            return Err(Error::invalid(format!("source GID index {sgid} is not in the GID table")));
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

    /// `ibv_create_qp`: a builder for an RC or UD QP whose sends and receives complete on
    /// `cq` (see [`QpBuilder::recv_cq`] for a second CQ, [`QpBuilder::srq`] for an SRQ).
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::{Context, QpState, QpType};
    /// let ctx = Context::open_sim(Default::default())?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.create_cq(256, None)?;
    /// let qp = pd.create_qp(QpType::Rc, &cq).max_send_wr(128).max_inline_data(64).build()?;
    /// assert!(qp.cap.max_send_wr >= 128 && qp.cap.max_inline_data >= 64);
    /// assert_eq!(qp.state(), QpState::Reset);
    /// # Ok(()) }
    /// ```
    pub fn create_qp<'a>(&'a self, qp_type: QpType, cq: &'a Cq) -> QpBuilder<'a> {
        QpBuilder {
            pd: self,
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            init: QpInitCap {
                cap: QpCap { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
                sq_sig_all: false,
            },
        }
    }

    fn build_qp(&self, qp_type: QpType, send_cq: &Cq, recv_cq: &Cq, srq: Option<&Srq>, init: QpInitCap) -> Result<Qp> {
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
        .map_err(Error::from)?;
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
            .map_err(|e| Error::invalid(format!("SQ does not fit its buffer: {e:?}")))?;
        let rq = match srq {
            Some(_) => None,
            None => Some(
                RecvQueue::new(qp.mem().clone(), 0, config.log_rq_size, config.rq_stride_shift, ring.clone(), false)
                    .map_err(|e| Error::invalid(format!("RQ does not fit its buffer: {e:?}")))?,
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
    pub fn create_srq(&self, max_wr: u32, max_sge: u32, limit: u32) -> Result<Srq> {
        let stride = wqsize::srq_stride(max_sge).map_err(Error::from)?;
        let wqes = (max_wr + 1).next_power_of_two();
        if limit >= wqes {
            return Err(Error::invalid(format!("SRQ limit {limit} must be below its size {wqes}")));
        }
        let srq = Arc::new(DrvSrq::new(&self.pd, wqes.trailing_zeros(), stride.trailing_zeros(), limit)?);
        let ring = Arc::new(WrRing::new_srq(srq.srqn(), wqes as usize));
        let rq =
            RecvQueue::new(srq.mem().clone(), 0, wqes.trailing_zeros(), stride.trailing_zeros(), ring.clone(), true)
                .map_err(|e| Error::invalid(format!("SRQ does not fit its buffer: {e:?}")))?;
        self.ctx.shared.qps.insert_srq(ring);
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

/// The attributes of `ibv_create_qp` (`struct ibv_qp_init_attr`), from [`Pd::create_qp`].
/// Unset capabilities are 64 send and 64 receive WRs of one SGE each, no inline data.
#[derive(Debug)]
#[must_use = "a QpBuilder creates nothing until build()"]
pub struct QpBuilder<'a> {
    pd: &'a Pd,
    qp_type: QpType,
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    srq: Option<&'a Srq>,
    init: QpInitCap,
}

/// One setter per `struct ibv_qp_cap` field.
macro_rules! cap_setters {
    ($($(#[$doc:meta])* $field:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $field(mut self, n: u32) -> QpBuilder<'a> {
                self.init.cap.$field = n;
                self
            }
        )*
    };
}

impl<'a> QpBuilder<'a> {
    /// Receives complete on `cq` instead of the send CQ.
    pub fn recv_cq(mut self, cq: &'a Cq) -> QpBuilder<'a> {
        self.recv_cq = cq;
        self
    }

    /// Receives come from `srq` (the QP has no receive queue of its own).
    pub fn srq(mut self, srq: &'a Srq) -> QpBuilder<'a> {
        self.srq = Some(srq);
        self
    }

    cap_setters! {
        /// Send work requests outstanding at once.
        max_send_wr;
        /// Receive work requests outstanding at once.
        max_recv_wr;
        /// SGEs per send work request.
        max_send_sge;
        /// SGEs per receive work request.
        max_recv_sge;
        /// Inline bytes per send work request ([`crate::Payload::Inline`]).
        max_inline_data;
    }

    /// All capabilities at once (`struct ibv_qp_cap`).
    pub fn cap(mut self, cap: QpCap) -> QpBuilder<'a> {
        self.init.cap = cap;
        self
    }

    /// Every send work request completes, signaled or not (`sq_sig_all`).
    pub fn sq_sig_all(mut self, all: bool) -> QpBuilder<'a> {
        self.init.sq_sig_all = all;
        self
    }

    /// Creates the QP, in RESET. Its [`Qp::cap`] holds what it got (at least what was asked).
    pub fn build(self) -> Result<Qp> {
        self.pd.build_qp(self.qp_type, self.send_cq, self.recv_cq, self.srq, self.init)
    }
}

/// A shared receive queue (`struct ibv_srq`).
pub struct Srq {
    ctx: Context,
    srq: Arc<DrvSrq<Dev>>,
    rq: RecvQueue,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq").field("srqn", &self.srq.srqn()).finish()
    }
}

impl Srq {
    /// `ibv_post_srq_recv`.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        post_recv_chain(&mut self.rq, wrs)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: raise the limit event when fewer than `limit` WQEs
    /// remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        let size = 1u32 << self.srq.log_size;
        if limit >= size {
            return Err(Error::invalid(format!("SRQ limit {limit} must be below its size {size}")));
        }
        Ok(self.srq.arm(limit)?)
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srq.srqn()
    }

    /// Receive work requests the SRQ holds at once (`ibv_srq_attr.max_wr`; one slot of its
    /// power-of-two ring stays free).
    pub fn max_wr(&self) -> u32 {
        (1u32 << self.srq.log_size) - 1
    }

    /// Scatter entries per receive work request (`ibv_srq_attr.max_sge`).
    pub fn max_sge(&self) -> u32 {
        umlx_driver::wqsize::device_max_srq_sge(1 << self.srq.stride_shift)
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

/// Why the driver refused a post.
fn post_why(e: PostError) -> PostWhy {
    match e {
        PostError::QueueFull => PostWhy::QueueFull,
        PostError::TooManySges => PostWhy::TooManySges,
        PostError::InlineTooLarge | PostError::WqeTooLarge => PostWhy::InlineTooLarge,
        // Only a QP's RQ closes, in RESET.
        PostError::Closed => PostWhy::WrongState,
    }
}

/// The error of a post the driver refused at work request `index`.
#[cold]
fn post_error(index: usize, e: PostError) -> Error {
    Error::post(index, post_why(e), QpState::Reset)
}

/// A queue pair (`struct ibv_qp`).
pub struct Qp {
    ctx: Context,
    qp: DrvQp<Dev>,
    sq: SendQueue<Dev>,
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

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp").field("qpn", &self.qp.qpn()).field("state", &self.state).finish()
    }
}

impl Qp {
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

    /// `ibv_modify_qp`: the attributes `m` sets, checked against the transition as the
    /// Linux RDMA core checks them. A required attribute that is missing, or one the transition
    /// cannot take, is refused (EINVAL) with its ibverbs name.
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::{Context, ErrorKind, ModifyQp, QpState, QpType};
    /// let ctx = Context::open_sim(Default::default())?;
    /// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    /// let mut qp = pd.create_qp(QpType::Ud, &cq).build()?;
    /// let e = qp.modify(&ModifyQp::to(QpState::Init).port_num(1).pkey_index(0)).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    /// assert!(e.to_string().contains("IBV_QP_QKEY (qkey)"), "{e}");
    /// qp.modify(&ModifyQp::to(QpState::Init).port_num(1).pkey_index(0).qkey(0x1111))?;
    /// assert_eq!(qp.state(), QpState::Init);
    /// # Ok(()) }
    /// ```
    pub fn modify(&mut self, m: &ModifyQp) -> Result<()> {
        let (attr, mask) = (m.attr(), m.mask());
        let target = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state.ok_or_else(|| Error::invalid("IBV_QP_STATE set but qp_state is None"))?
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
                return Err(Error::wrong_state(format!("QP {:#x}: no transition from {from} to {to}", self.qp_num())));
            }
        };
        let (required, optional) = transition_attrs(t, rc);
        if !mask.contains(required) {
            return Err(Error::invalid(format!(
                "QP {:#x} {} -> {}: missing {}",
                self.qp_num(),
                self.state,
                target,
                attr_names(QpAttrMask(required.0 & !mask.0))
            )));
        }
        let extra = mask.0 & !(required.0 | optional.0 | M::STATE.0);
        if extra != 0 {
            return Err(Error::invalid(format!(
                "QP {:#x} {} -> {}: {} cannot be modified in this transition (it takes {})",
                self.qp_num(),
                self.state,
                target,
                attr_names(QpAttrMask(extra)),
                attr_names(QpAttrMask(required.0 | optional.0 | M::STATE.0))
            )));
        }
        let dmac = if mask.contains(M::AV) && rc { Some(self.ctx.resolve_dmac(&attr.ah_attr)?) } else { None };
        if mask.contains(M::PATH_MTU)
            && let Some(m) = attr.path_mtu
            && m as u32 > self.ctx.active_mtu() as u32
        {
            return Err(Error::invalid(format!(
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
        self.qp.transition(t, &attrs).map_err(Error::from)?;
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

    /// Takes an RC QP from RESET (or INIT, when receives were posted first, as rdma-core's
    /// pingpong does) through INIT and RTR to RTS, connected to `peer`: the three
    /// `ibv_modify_qp` calls every RC program writes, with `p`'s values.
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::{ConnectParams, Context, QpState, QpType, RcPeer};
    /// let ctx = Context::open_sim(Default::default())?;
    /// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    /// let mut qp = pd.create_qp(QpType::Rc, &cq).build()?;
    /// // Connected to itself: the peer is this QP, at this port's GID.
    /// let (_, gid) = ctx.default_gid().expect("the sim has an IPv4 GID");
    /// let me = RcPeer { qp_num: qp.qp_num(), psn: 0, gid };
    /// qp.connect(&me, &ConnectParams::default())?;
    /// assert_eq!(qp.state(), QpState::Rts);
    /// # Ok(()) }
    /// ```
    pub fn connect(&mut self, peer: &RcPeer, p: &ConnectParams) -> Result<()> {
        if self.qp_type != QpType::Rc {
            return Err(Error::invalid(format!("QP {:#x} is UD: use ud_to_rts", self.qp_num())));
        }
        let sgid_index = match p.sgid_index {
            Some(i) => i,
            None => {
                let (i, _) = self.ctx.default_gid().ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: no GID to connect from: give ConnectParams::sgid_index",
                        self.ctx.name()
                    ))
                })?;
                u8::try_from(i).map_err(|_| Error::invalid(format!("GID index {i} does not fit the address vector")))?
            }
        };
        let rd_atomic = match p.rd_atomic {
            Some(n) => n,
            None => {
                let d = self.ctx.query_device()?;
                d.max_qp_rd_atom.min(d.max_qp_init_rd_atom).clamp(1, 16) as u8
            }
        };
        if self.state == QpState::Reset {
            self.modify(
                &ModifyQp::to(QpState::Init).port_num(p.port_num).pkey_index(p.pkey_index).qp_access_flags(p.access),
            )?;
        } else if self.state != QpState::Init {
            return Err(Error::wrong_state(format!(
                "QP {:#x} is {}: connect starts from RESET or INIT",
                self.qp_num(),
                self.state
            )));
        }
        let ah = AhAttr {
            grh: GlobalRoute {
                dgid: peer.gid,
                flow_label: 0,
                sgid_index,
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
            },
            sl: p.sl,
            port_num: p.port_num,
            dmac: p.dmac,
        };
        self.modify(
            &ModifyQp::to(QpState::Rtr)
                .path_mtu(p.path_mtu.unwrap_or_else(|| self.ctx.active_mtu()))
                .dest_qp_num(peer.qp_num)
                .rq_psn(peer.psn)
                .max_dest_rd_atomic(rd_atomic)
                .min_rnr_timer(p.min_rnr_timer)
                .ah_attr(ah),
        )?;
        self.modify(
            &ModifyQp::to(QpState::Rts)
                .sq_psn(p.sq_psn)
                .timeout(p.timeout)
                .retry_cnt(p.retry_cnt)
                .rnr_retry(p.rnr_retry)
                .max_rd_atomic(rd_atomic),
        )
    }

    /// Takes a UD QP from RESET (or INIT) to RTS with Q_Key `qkey` and first PSN `sq_psn`, on
    /// port 1 and P_Key index 0.
    pub fn ud_to_rts(&mut self, qkey: u32, sq_psn: u32) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::invalid(format!("QP {:#x} is RC: use connect", self.qp_num())));
        }
        if self.state == QpState::Reset {
            self.modify(&ModifyQp::to(QpState::Init).port_num(1).pkey_index(0).qkey(qkey))?;
        } else if self.state != QpState::Init {
            return Err(Error::wrong_state(format!(
                "QP {:#x} is {}: ud_to_rts starts from RESET or INIT",
                self.qp_num(),
                self.state
            )));
        }
        self.modify(&ModifyQp::to(QpState::Rtr))?;
        self.modify(&ModifyQp::to(QpState::Rts).sq_psn(sq_psn))
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

    /// `ibv_post_send` on a connected (RC) QP: posts a chain of work requests with one
    /// doorbell. As ibverbs: the requests before the first failing one are posted; the error
    /// names the failing one ([`Error::work_request`]). A UD QP takes [`Qp::post_send_ud`].
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::*;
    /// let ctx = Context::open_sim(Default::default())?;
    /// let (pd, mut cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    /// let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// let mut qp = pd.create_qp(QpType::Rc, &cq).build()?;
    /// let (_, gid) = ctx.default_gid().expect("an IPv4 GID");
    /// qp.connect(&RcPeer { qp_num: qp.qp_num(), psn: 0, gid }, &ConnectParams::default())?;
    /// // Write bytes 0..64 of the region onto bytes 1024..1088 of itself.
    /// mr.write(0, &[7u8; 64])?;
    /// let remote = Remote { addr: mr.addr() + 1024, rkey: mr.rkey() };
    /// qp.post_send(&[SendWr::new(1, SendOp::Write { data: Payload::Sges(&[mr.sge(0, 64)]), remote, imm: None }).signaled()])?;
    /// let mut wc = [Wc::default(); 1];
    /// while cq.poll(&mut wc) == 0 {}
    /// assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (1, WcStatus::Success, WcOpcode::RdmaWrite));
    /// assert_eq!(mr.to_vec(1024, 64)?, vec![7u8; 64]);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
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

    /// One request of the short kind — SEND, SEND with immediate, RDMA WRITE (with immediate)
    /// or RDMA READ, one SGE — given as its fields rather than a [`SendWr`]: what a binding
    /// translating another API's request has at hand (libibverbs.so.1's `ibv_post_send`). The
    /// same checks, WQE and result as `post_send(&[wr])`; `remote` is ignored for SENDs and
    /// `imm` (host order) for the opcodes without one.
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::*;
    /// let ctx = Context::open_sim(Default::default())?;
    /// let (pd, mut cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    /// let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// let mut qp = pd.create_qp(QpType::Rc, &cq).build()?;
    /// let (_, gid) = ctx.default_gid().expect("an IPv4 GID");
    /// qp.connect(&RcPeer { qp_num: qp.qp_num(), psn: 0, gid }, &ConnectParams::default())?;
    /// mr.write(0, &[5u8; 64])?;
    /// let remote = Remote { addr: mr.addr() + 2048, rkey: mr.rkey() };
    /// qp.post_send_one(9, OneSgeOp::Write, SendFlags::SIGNALED, &mr.sge(0, 64), remote, 0)?;
    /// let mut wc = [Wc::default(); 1];
    /// while cq.poll(&mut wc) == 0 {}
    /// assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (9, WcStatus::Success, WcOpcode::RdmaWrite));
    /// assert_eq!(mr.to_vec(2048, 64)?, vec![5u8; 64]);
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn post_send_one(
        &mut self,
        wr_id: u64,
        op: OneSgeOp,
        flags: SendFlags,
        sge: &Sge,
        remote: Remote,
        imm: u32,
    ) -> Result<()> {
        if self.try_post_send_one(wr_id, op, flags, sge, remote, imm) {
            return Ok(());
        }
        self.post_send_one_general(wr_id, op, flags, sge, remote, imm)
    }

    /// The short path of [`Qp::post_send_one`] alone: `true` when the request is posted;
    /// `false`, with nothing done, when only the general post can answer (a full ring as last
    /// seen, an empty SGE, another QP type, a state that refuses sends, a dead device). A
    /// binding then makes the general post of its own request, which posts it or gives the
    /// error.
    #[inline(always)]
    pub fn try_post_send_one(
        &mut self,
        wr_id: u64,
        op: OneSgeOp,
        flags: SendFlags,
        sge: &Sge,
        remote: Remote,
        imm: u32,
    ) -> bool {
        self.try_post_send_one_from(op, flags, sge, &SimpleFields { wr_id, imm, remote })
    }

    /// [`Qp::try_post_send_one`] with the request's ID, immediate (host order) and remote
    /// address read from `src` where the WQE takes each, the immediate and remote address only
    /// for the opcodes that have them: a binding hands its own request, read in place
    /// (libibverbs.so.1 its `struct ibv_send_wr`), and keeps none of them in a register across
    /// the checks.
    #[inline(always)]
    pub fn try_post_send_one_from(
        &mut self,
        op: OneSgeOp,
        flags: SendFlags,
        sge: &Sge,
        src: &impl SimpleWqeSource,
    ) -> bool {
        if !sge.is_empty() && self.send_ok && self.qp_type == QpType::Rc && !self.fatal.load(Ordering::Relaxed) {
            let mut chain = self.sq.begin();
            if chain.has_room() {
                chain.put_simple_from(op as u8, flags.0, op.with_imm(), op.is_rdma(), sge, src);
                chain.finish();
                return true;
            }
        }
        false
    }

    /// `post_send_one` when the short path does not take it (a full ring, an empty SGE, another
    /// QP type or state): the general post, for its checks and errors.
    #[inline(never)]
    #[cold]
    fn post_send_one_general(
        &mut self,
        wr_id: u64,
        op: OneSgeOp,
        flags: SendFlags,
        sge: &Sge,
        remote: Remote,
        imm: u32,
    ) -> Result<()> {
        let sges = std::slice::from_ref(sge);
        let op = match op {
            OneSgeOp::Write => SendOp::Write { data: Payload::Sges(sges), remote, imm: None },
            OneSgeOp::WriteImm => SendOp::Write { data: Payload::Sges(sges), remote, imm: Some(imm) },
            OneSgeOp::Send => SendOp::Send { data: Payload::Sges(sges), imm: None },
            OneSgeOp::SendImm => SendOp::Send { data: Payload::Sges(sges), imm: Some(imm) },
            OneSgeOp::Read => SendOp::Read { into: sges, remote },
        };
        self.post_send_chain(&[SendWr { wr_id, op, flags }])
    }

    /// `post_send` for everything but a single short request.
    #[inline(never)]
    fn post_send_chain(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if !self.send_ok || self.fatal.load(Ordering::Relaxed) {
            return Err(self.refusal());
        }
        if self.qp_type != QpType::Rc {
            return Err(Error::post(0, PostWhy::WrongQpType, self.state));
        }
        let mut chain = self.sq.begin();
        // RC requests with one SGE, while the ring has room known without reading the tail: a
        // run of one opcode goes through one loop specialised for it (one compare per request,
        // no calls, state in registers). At the first other request, `post_send_rest` takes
        // over the rest of the chain.
        let mut rest = wrs;
        while let Some(wr) = rest.first() {
            let before = rest.len();
            match wr.op {
                SendOp::Write { imm: None, .. } => {
                    short_run(&mut chain, &mut rest, opcode::RDMA_WRITE, |op| match *op {
                        SendOp::Write { data: Payload::Sges([sge]), remote, imm: None } => Some((0, Some(remote), sge)),
                        _ => None,
                    })
                }
                SendOp::Send { imm: None, .. } => short_run(&mut chain, &mut rest, opcode::SEND, |op| match *op {
                    SendOp::Send { data: Payload::Sges([sge]), imm: None } => Some((0, None, sge)),
                    _ => None,
                }),
                SendOp::Send { imm: Some(_), .. } => {
                    short_run(&mut chain, &mut rest, opcode::SEND_IMM, |op| match *op {
                        SendOp::Send { data: Payload::Sges([sge]), imm: Some(imm) } => Some((imm, None, sge)),
                        _ => None,
                    })
                }
                SendOp::Write { imm: Some(_), .. } => {
                    short_run(&mut chain, &mut rest, opcode::RDMA_WRITE_IMM, |op| match *op {
                        SendOp::Write { data: Payload::Sges([sge]), remote, imm: Some(imm) } => {
                            Some((imm, Some(remote), sge))
                        }
                        _ => None,
                    })
                }
                SendOp::Read { .. } => short_run(&mut chain, &mut rest, opcode::RDMA_READ, |op| match *op {
                    SendOp::Read { into: [sge], remote } => Some((0, Some(remote), sge)),
                    _ => None,
                }),
                _ => break,
            }
            if rest.len() == before {
                break;
            }
        }
        if !rest.is_empty() {
            return post_send_rest(chain, wrs.len() - rest.len(), rest);
        }
        chain.finish();
        Ok(())
    }

    /// `ibv_post_send` on a UD QP: datagrams to the destinations their requests name, with one
    /// doorbell. As ibverbs: the requests before the first failing one are posted.
    pub fn post_send_ud(&mut self, wrs: &[UdSendWr<'_>]) -> Result<()> {
        if !self.send_ok || self.fatal.load(Ordering::Relaxed) {
            return Err(self.refusal());
        }
        if self.qp_type != QpType::Ud {
            return Err(Error::post(0, PostWhy::WrongQpType, self.state));
        }
        let mut chain = self.sq.begin();
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let av = wr.dest.ah.av.for_remote(wr.dest.remote_qpn, wr.dest.remote_qkey);
            let (op, imm) = match wr.imm {
                Some(imm) => (opcode::SEND_IMM, imm),
                None => (opcode::SEND, 0),
            };
            let w = send_wqe(wr.wr_id, wr.flags, (op, imm, Remote::default(), (0, 0)), wr.data, Some(&av));
            if let Err(e) = chain.with_queue(|sq| sq.write_wqe(&w)) {
                result = Err(post_error(i, e));
                break;
            }
        }
        chain.finish();
        result
    }

    /// Why this QP refuses posts now: the device is dead, or the state does not allow them.
    #[cold]
    fn refusal(&self) -> Error {
        let why = if self.fatal.load(Ordering::Relaxed) { PostWhy::DeviceFatal } else { PostWhy::WrongState };
        Error::post(0, why, self.state)
    }

    /// Starts a batch of sends (ibverbs' `ibv_wr_start`): the posts that follow write their
    /// WQEs, but the device sees none of them until [`Qp::complete_batch`] publishes them all
    /// with one doorbell; [`Qp::abort_batch`] drops them all instead. A post's errors are
    /// reported as ever; requests it refused are not in the batch.
    pub fn start_batch(&mut self) {
        self.sq.hold_doorbell();
    }

    /// Publishes the batch [`Qp::start_batch`] opened (nothing if none is open).
    pub fn complete_batch(&mut self) {
        self.sq.release_doorbell();
    }

    /// Drops every request posted since [`Qp::start_batch`]: none of them executes or
    /// completes (nothing if no batch is open).
    pub fn abort_batch(&mut self) {
        self.sq.discard_held();
    }

    /// One receive of one SGE given as its fields (a binding's `ibv_post_recv`): the same
    /// checks, WQE and result as `post_recv(&[RecvWr { wr_id, sg_list: &[sge] }])`.
    #[inline(always)]
    pub fn post_recv_one(&mut self, wr_id: u64, sge: &Sge) -> Result<()> {
        if self.try_post_recv_one(wr_id, sge) {
            return Ok(());
        }
        self.post_recv_one_general(wr_id, sge)
    }

    /// The short path of [`Qp::post_recv_one`] alone: `true` when the receive is posted;
    /// `false`, with nothing done, when only the general post can answer (a full ring as last
    /// seen, an empty SGE, an SRQ, a QP in RESET). A binding then makes the general post of
    /// its own request, which posts it or gives the error.
    #[inline(always)]
    pub fn try_post_recv_one(&mut self, wr_id: u64, sge: &Sge) -> bool {
        if let Some(rq) = &mut self.rq
            && rq.try_write_one(wr_id, sge)
        {
            rq.ring_doorbell();
            return true;
        }
        false
    }

    /// `post_recv_one` when the short path does not take it.
    #[inline(never)]
    #[cold]
    fn post_recv_one_general(&mut self, wr_id: u64, sge: &Sge) -> Result<()> {
        self.post_recv(&[RecvWr { wr_id, sg_list: std::slice::from_ref(sge) }])
    }

    /// `ibv_post_recv`.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        // The RQ is closed in RESET (see `modify`). As ibverbs (and `Srq::post_recv`), no
        // device-state check: receives posted to a dead device are harmless and never complete;
        // the fatal state shows in sends, control calls and the async event.
        match &mut self.rq {
            Some(rq) => post_recv_chain(rq, wrs),
            // Attached to an SRQ: post there.
            None => Err(Error::post(0, PostWhy::NoRecvQueue, self.state)),
        }
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.ctx.shared.qps.remove(self.qp.qpn());
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // Its rings leave the pollers' table (freed once no poll can be reading them), unless
        // QPs still take receives from it: they keep the device's SRQ alive, and its
        // completions must still find their wr_ids (the rings then stay until the context
        // drops, as `ibv_destroy_srq` would have refused with EBUSY).
        if Arc::strong_count(&self.srq) == 1 {
            self.ctx.shared.qps.remove_srq(self.srq.srqn());
        }
    }
}

/// Posts receive WRs on `rq` and updates its doorbell record once. As ibverbs: the requests
/// before the first failing one are posted. One-SGE requests with room known are written here;
/// at the first other one, [`post_recv_rest`] takes over the rest of the chain (out of line, so
/// this loop keeps its state in registers).
#[inline(always)]
fn post_recv_chain(rq: &mut RecvQueue, wrs: &[RecvWr<'_>]) -> Result<()> {
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
fn post_recv_rest(rq: &mut RecvQueue, first: usize, rest: &[RecvWr<'_>]) -> Result<()> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        if let Err(e) = rq.write_wqe(wr.wr_id, wr.sg_list) {
            result = Err(post_error(first + i, e));
            break;
        }
    }
    rq.ring_doorbell();
    result
}

/// Writes `wr` if it takes the short path (SEND(_IMM), RDMA_WRITE(_IMM) or RDMA_READ with one
/// non-empty SGE) and the ring has room known without reading the tail.
#[inline(always)]
fn short_one(chain: &mut SqChain<'_, Dev>, wr: &SendWr<'_>) -> bool {
    let (id, flags) = (wr.wr_id, wr.flags.0);
    // One specialised copy per opcode (not `short_form`): a single merged call costs the
    // one-request post about 20 instructions.
    match wr.op {
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: None } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_WRITE, flags, 0, Some(remote), sge)
        }
        SendOp::Send { data: Payload::Sges([sge]), imm: None } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::SEND, flags, 0, None, sge)
        }
        SendOp::Send { data: Payload::Sges([sge]), imm: Some(imm) } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::SEND_IMM, flags, imm, None, sge)
        }
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: Some(imm) } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_WRITE_IMM, flags, imm, Some(remote), sge)
        }
        SendOp::Read { into: [sge], remote } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_READ, flags, 0, Some(remote), sge)
        }
        _ => return false,
    }
    true
}

/// The WQE opcode, immediate, remote side and SGE of a request the short path takes (SEND,
/// RDMA WRITE and READ, with or without immediate, one SGE); `None` for the others.
#[inline(always)]
fn short_form<'a>(op: &SendOp<'a>) -> Option<(u8, u32, Option<Remote>, &'a Sge)> {
    Some(match *op {
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: None } => (opcode::RDMA_WRITE, 0, Some(remote), sge),
        SendOp::Send { data: Payload::Sges([sge]), imm: None } => (opcode::SEND, 0, None, sge),
        SendOp::Send { data: Payload::Sges([sge]), imm: Some(imm) } => (opcode::SEND_IMM, imm, None, sge),
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: Some(imm) } => {
            (opcode::RDMA_WRITE_IMM, imm, Some(remote), sge)
        }
        SendOp::Read { into: [sge], remote } => (opcode::RDMA_READ, 0, Some(remote), sge),
        _ => return None,
    })
}

/// Writes the leading requests of `rest` that are all `opcode` (as `extract` recognises them,
/// giving the immediate, the remote side and the one SGE) with a non-empty SGE, as many as the
/// ring has room for without reading the tail; advances `rest` past them.
#[inline(always)]
fn short_run<'a>(
    chain: &mut SqChain<'_, Dev>,
    rest: &mut &[SendWr<'a>],
    opcode: u8,
    extract: impl Fn(&SendOp<'a>) -> Option<(u32, Option<Remote>, &'a Sge)>,
) {
    let room = (chain.room() as usize).min(rest.len());
    let mut done = 0;
    for wr in &rest[..room] {
        let Some((imm, remote, sge)) = extract(&wr.op) else { break };
        if sge.is_empty() {
            break;
        }
        chain.put_simple(wr.wr_id, opcode, wr.flags.0, imm, remote, sge);
        done += 1;
    }
    *rest = &rest[done..];
}

/// The rest of an RC send chain from index `first` on, any request shape: short-path requests
/// (with the tail read when the ring looks full), everything else through
/// [`write_send_general`]. Ends the chain (doorbell). Out of line, so the caller's loop stays
/// free of calls.
#[inline(never)]
fn post_send_rest(mut chain: SqChain<'_, Dev>, first: usize, rest: &[SendWr<'_>]) -> Result<()> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        let (id, flags) = (wr.wr_id, wr.flags.0);
        let r = match short_form(&wr.op) {
            Some((op, imm, remote, sge)) => chain.write_simple(id, op, flags, imm, remote, sge),
            None => match chain.with_queue(|sq| write_send_general(sq, wr)) {
                Ok(()) => Ok(()),
                Err(why) => {
                    result = Err(Error::post(first + i, why, QpState::Rts));
                    break;
                }
            },
        };
        if let Err(e) = r {
            result = Err(post_error(first + i, e));
            break;
        }
    }
    chain.finish();
    result
}

/// Any RC send WR the short path does not take: inline data, SGE lists, atomics.
#[inline(never)]
fn write_send_general(sq: &mut SendQueue<Dev>, wr: &SendWr<'_>) -> std::result::Result<(), PostWhy> {
    let (op, imm, remote, atomic, data) = match &wr.op {
        SendOp::Send { data, imm: None } => (opcode::SEND, 0, Remote::default(), (0, 0), *data),
        SendOp::Send { data, imm: Some(imm) } => (opcode::SEND_IMM, *imm, Remote::default(), (0, 0), *data),
        SendOp::Write { data, remote, imm: None } => (opcode::RDMA_WRITE, 0, *remote, (0, 0), *data),
        SendOp::Write { data, remote, imm: Some(imm) } => (opcode::RDMA_WRITE_IMM, *imm, *remote, (0, 0), *data),
        SendOp::Read { into, remote } => (opcode::RDMA_READ, 0, *remote, (0, 0), Payload::Sges(into)),
        SendOp::CompareSwap { result, remote, compare, swap } => {
            (opcode::ATOMIC_CS, 0, *remote, (*swap, *compare), Payload::Sges(std::slice::from_ref(result)))
        }
        SendOp::FetchAdd { result, remote, add } => {
            (opcode::ATOMIC_FA, 0, *remote, (*add, 0), Payload::Sges(std::slice::from_ref(result)))
        }
    };
    if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) && !matches!(data, Payload::Sges([r]) if r.length() == 8) {
        return Err(PostWhy::AtomicLength);
    }
    let w = send_wqe(wr.wr_id, wr.flags, (op, imm, remote, atomic), data, None);
    sq.write_wqe(&w).map_err(post_why)
}

/// The WQE of a request the general path writes: its id and flags, (opcode, immediate, remote
/// side, atomic operands), the payload as a gather list or inline bytes, the UD address vector.
fn send_wqe<'a>(
    wr_id: u64,
    flags: SendFlags,
    (opcode, imm, remote, atomic): (u8, u32, Remote, (u64, u64)),
    data: Payload<'a>,
    av: Option<&'a [u8; umlx_hwdesc::plain::wqe_av::SIZE]>,
) -> SendWqe<'a> {
    let (sges, inline) = match data {
        Payload::Sges(s) => (s, None),
        Payload::Inline(b) => (&[][..], Some(b)),
    };
    SendWqe { wr_id, opcode, send_flags: flags.0 & 7, imm, remote, atomic, sges, inline, av }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use crate::Context;

    #[test]
    fn a_dropped_srq_leaves_the_ring_table() {
        let ctx = Context::open_sim(Default::default()).expect("sim");
        let pd = ctx.alloc_pd().expect("pd");
        let table = &ctx.shared.qps;
        let before = table.retained();
        for _ in 0..200 {
            let srq = pd.create_srq(16, 1, 0).expect("srq");
            assert_eq!(table.retained(), before + 1, "the SRQ's rings are in the table");
            drop(srq);
        }
        table.reclaim();
        if table.reclaims() {
            assert_eq!(table.retained(), before, "200 SRQs created and dropped: none left");
        }
        // An SRQ dropped while a QP takes receives from it keeps its rings for that QP's
        // completions.
        let cq = ctx.create_cq(16, None).expect("cq");
        let srq = pd.create_srq(16, 1, 0).expect("srq");
        let qp = pd.create_qp(crate::QpType::Rc, &cq).srq(&srq).build().expect("qp on the SRQ");
        let with_qp = table.retained();
        drop(srq);
        assert_eq!(table.retained(), with_qp, "kept while the QP uses the SRQ");
        drop(qp);
    }
}
