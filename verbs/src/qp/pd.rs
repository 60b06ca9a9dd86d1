//! Protection domains (`ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_ah`), address handles, and
//! the builder of `ibv_create_qp`.

use super::*;

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
    pub(super) av: Av,
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
