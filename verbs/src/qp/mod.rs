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

mod pd;
mod post;
mod srq;

pub use pd::{Ah, Pd, QpBuilder};
use post::*;
pub use srq::Srq;

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
                // Inline data (a latency test's every request) goes to `post_send_rest`, which
                // writes it with `SqChain::write_inline`, without a look at the short run first.
                SendOp::Send { data: Payload::Inline(_), .. } | SendOp::Write { data: Payload::Inline(_), .. } => break,
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
