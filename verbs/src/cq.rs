//! Completion queues and completion channels: `ibv_create_cq`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`, `ibv_create_comp_channel`, `ibv_get_cq_event`, `ibv_ack_cq_events`,
//! `ibv_resize_cq`.

use crate::Dev;
use crate::context::Context;
use crate::types::*;
use crate::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use umlx_driver::backend::Backend;
use umlx_driver::datapath::{CqCursor, CqRing, Cqe, CqeRef, HeadTaken, Pinned, QpCache, SopDropQpn, WrRing, opcode};
use umlx_driver::objects::{CompEq, Cq as DrvCq};
use umlx_hwdesc::enums::{CqeOpcode, CqeSyndrome};

/// A completion channel (`struct ibv_comp_channel`): a file descriptor that becomes readable
/// when an armed CQ bound to it gets a completion.
///
/// ```
/// # fn main() -> Result<(), umlx_verbs::Error> {
/// use std::time::Duration;
/// use umlx_verbs::Context;
/// let ctx = Context::open_sim(Default::default())?;
/// let channel = ctx.create_comp_channel()?;
/// let mut cq = ctx.create_cq(64, Some(&channel))?;
/// cq.set_event_context(42);
/// cq.req_notify(false)?; // the next completion raises an event
/// // ... post work; then wait for the event, acknowledge it and poll:
/// if let Some(ev) = channel.get_cq_event(Duration::from_millis(10))? {
///     assert!(ev.is_for(&cq) && ev.context() == 42);
///     cq.ack_events(1);
/// }
/// # Ok(()) }
/// ```
pub struct CompChannel {
    ctx: Context,
    vector: u32,
    pub(crate) eq: Arc<CompEq<Dev>>,
    pending: Mutex<VecDeque<CqEvent>>,
    /// The CQs bound to the channel.
    pub(crate) cqs: Mutex<Vec<BoundCq>>,
}

/// A CQ bound to a channel: its number, its arm sequence number (counted up per event) and
/// the value its events carry.
pub(crate) struct BoundCq {
    cqn: u32,
    sn: Arc<AtomicU32>,
    context: Arc<AtomicU64>,
}

/// A completion event (`ibv_get_cq_event`'s CQ and `cq_context`): which CQ has new
/// completions. Acknowledge it on that CQ ([`Cq::ack_events`]) and poll the CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    cqn: u32,
    context: u64,
}

impl CqEvent {
    /// The CQ's number ([`Cq::cqn`]).
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Whether the event is about `cq`.
    pub fn is_for(&self, cq: &Cq) -> bool {
        self.cqn == cq.cqn()
    }

    /// The value the CQ carried when the event was raised ([`Cq::set_event_context`]): the
    /// `cq_context` of ibverbs, e.g. an index into the program's table of CQs.
    pub fn context(&self) -> u64 {
        self.context
    }
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel").field("eqn", &self.eq.eqn()).finish()
    }
}

impl Context {
    /// `ibv_create_comp_channel`: a completion EQ on its own interrupt vector.
    pub fn create_comp_channel(&self) -> Result<Arc<CompChannel>> {
        let vector = {
            let mut used = self.shared.vectors.lock().unwrap_or_else(|e| e.into_inner());
            let n = self.shared.hca.backend().irq_count();
            let v = (1..n).find(|v| !used.contains(v)).ok_or_else(|| {
                Error::invalid(format!(
                    "no free interrupt vector: the device has {n}, all in use by completion channels"
                ))
            })?;
            used.push(v);
            v
        };
        let eq = match CompEq::new(&self.shared.hca, vector, 10) {
            Ok(eq) => eq,
            Err(e) => {
                self.shared.vectors.lock().unwrap_or_else(|e| e.into_inner()).retain(|&x| x != vector);
                return Err(e.into());
            }
        };
        Ok(Arc::new(CompChannel {
            ctx: self.clone(),
            vector,
            eq,
            pending: Mutex::new(VecDeque::new()),
            cqs: Mutex::new(Vec::new()),
        }))
    }

    /// `ibv_create_cq` with at least `cqe` entries, optionally bound to a completion channel.
    pub fn create_cq(&self, cqe: u32, channel: Option<&Arc<CompChannel>>) -> Result<Cq> {
        let log = (cqe.max(1) + 1).next_power_of_two().trailing_zeros().max(1);
        let cq = Arc::new(DrvCq::new(&self.shared.hca, log, channel.map(|c| c.eq.clone()))?);
        let sn = Arc::new(AtomicU32::new(0));
        let event_context = Arc::new(AtomicU64::new(0));
        if let Some(c) = channel {
            let bound = BoundCq { cqn: cq.cqn(), sn: sn.clone(), context: event_context.clone() };
            c.cqs.lock().unwrap_or_else(|e| e.into_inner()).push(bound);
        }
        let ring =
            CqRing::new(cq.mem().clone(), log).ok_or_else(|| Error::invalid("CQ buffer smaller than its ring"))?;
        Ok(Cq {
            ctx: self.clone(),
            ring,
            resized: None,
            cq,
            sn,
            event_context,
            channel: channel.cloned(),
            events: 0,
            qp_cache: QpCache::default(),
            send_info: SendInfo::of(SopDropQpn::new(0, 0)),
            #[cfg(feature = "sim")]
            wire: self.shared.wire.get().cloned(),
        })
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        // Every CQ bound to the channel holds it, so no CQ reports here any more: the vector
        // can serve a new channel.
        self.ctx.shared.vectors.lock().unwrap_or_else(|e| e.into_inner()).retain(|&x| x != self.vector);
    }
}

impl CompChannel {
    /// The file descriptor to poll/epoll for readability, open while held.
    pub fn fd(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.eq.event_fd()
    }

    /// `ibv_get_cq_event`: waits up to `timeout` for a completion event; returns the event,
    /// which names its CQ, or `None` on timeout (`Duration::ZERO`: only look).
    pub fn get_cq_event(&self, timeout: Duration) -> Result<Option<CqEvent>> {
        if let Some(c) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).pop_front() {
            return Ok(Some(c));
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(fd) = self.fd() {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if umlx_driver::event::wait_readable(&fd, left.min(Duration::from_millis(10))) {
                    umlx_driver::event::drain(&fd);
                }
            }
            let mut got = Vec::new();
            self.eq.drain(|cqn| got.push(cqn))?;
            if !got.is_empty() {
                let cqs = self.cqs.lock().unwrap_or_else(|e| e.into_inner());
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                for cqn in got {
                    let mut context = 0;
                    if let Some(b) = cqs.iter().find(|b| b.cqn == cqn) {
                        b.sn.fetch_add(1, Ordering::Relaxed);
                        context = b.context.load(Ordering::Relaxed);
                    }
                    p.push_back(CqEvent { cqn, context });
                }
                return Ok(p.pop_front());
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }
}

/// A completion queue (`struct ibv_cq`).
pub struct Cq {
    pub(crate) ctx: Context,
    pub(crate) cq: Arc<DrvCq<Dev>>,
    ring: CqRing,
    /// The ring after a resize (the original stays with the driver's CQ).
    resized: Option<Arc<umlx_driver::objects::ResizedCqMem<Dev>>>,
    sn: Arc<AtomicU32>,
    /// What this CQ's completion events carry.
    event_context: Arc<AtomicU64>,
    channel: Option<Arc<CompChannel>>,
    events: u32,
    /// The QP and send opcode of the last requester CQE polled, and what they give a
    /// completion (valid while `qp_cache` holds one).
    qp_cache: QpCache,
    send_info: SendInfo,
    /// The sim port whose wire an empty poll drains ([`Context::poll_sim_wire`]).
    #[cfg(feature = "sim")]
    wire: Option<umlx_sim::port::Port>,
}

impl Drop for Cq {
    fn drop(&mut self) {
        // The CQN may be given to a new CQ: the channel must not keep this one's entry.
        if let Some(c) = &self.channel {
            let cqn = self.cq.cqn();
            c.cqs.lock().unwrap_or_else(|e| e.into_inner()).retain(|b| b.cqn != cqn);
        }
    }
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq").field("cqn", &self.cq.cqn()).finish()
    }
}

/// The ibverbs status of an error CQE's syndrome.
fn status_of(syndrome: u8) -> WcStatus {
    match CqeSyndrome(syndrome) {
        CqeSyndrome::LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
        CqeSyndrome::LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
        CqeSyndrome::LOCAL_PROT_ERR => WcStatus::LocProtErr,
        CqeSyndrome::WR_FLUSH_ERR => WcStatus::WrFlushErr,
        CqeSyndrome::MW_BIND_ERR => WcStatus::MwBindErr,
        CqeSyndrome::BAD_RESP_ERR => WcStatus::BadRespErr,
        CqeSyndrome::LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
        CqeSyndrome::REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
        CqeSyndrome::REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
        CqeSyndrome::REMOTE_OP_ERR => WcStatus::RemOpErr,
        CqeSyndrome::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        CqeSyndrome::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        CqeSyndrome::REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
        _ => WcStatus::GeneralErr,
    }
}

/// What a requester success CQE's `sop_drop_qpn` gives its completion.
#[derive(Clone, Copy)]
struct SendInfo {
    opcode: WcOpcode,
    /// As ibverbs: `byte_len` is set for a READ or an atomic (opcodes 0x10 and up) only.
    with_len: bool,
    qpn: u32,
}

impl SendInfo {
    fn of(word: SopDropQpn) -> SendInfo {
        let op = word.wqe_opcode();
        SendInfo { opcode: SEND_WC[op as usize], with_len: op >= opcode::RDMA_READ, qpn: word.qpn() }
    }
}

/// Fills `w` from a requester success CQE of the QP whose rings are `ring`.
#[inline(always)]
fn fill_send<W: WcEntry>(w: &mut W, ring: &WrRing, cqe: CqeRef<'_>, info: &SendInfo) {
    w.send_success(ring.complete_send(cqe.wqe_counter()), info.opcode, info.qpn);
    if info.with_len {
        w.set_byte_len(cqe.byte_cnt());
    }
}

/// Requester completion opcode by send WQE opcode (the byte the CQE echoes).
const SEND_WC: [WcOpcode; 256] = {
    let mut t = [WcOpcode::Send; 256];
    t[opcode::RDMA_WRITE as usize] = WcOpcode::RdmaWrite;
    t[opcode::RDMA_WRITE_IMM as usize] = WcOpcode::RdmaWrite;
    t[opcode::RDMA_READ as usize] = WcOpcode::RdmaRead;
    t[opcode::ATOMIC_CS as usize] = WcOpcode::CompSwap;
    t[opcode::ATOMIC_FA as usize] = WcOpcode::FetchAdd;
    t
};

impl Cq {
    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.cq.cqn()
    }

    /// Number of CQEs.
    pub fn capacity(&self) -> u32 {
        (1 << self.ring.log_size()) - 1
    }

    /// `ibv_poll_cq`: fills `wc` with up to `wc.len()` completions; returns how many.
    ///
    /// As with ibverbs, each completion sets the fields valid for it (see [`Wc`]); the others
    /// keep whatever the entry held. No lock, no allocation, no system call.
    ///
    /// ```
    /// # fn main() -> Result<(), umlx_verbs::Error> {
    /// use umlx_verbs::{Context, Wc, WcStatus};
    /// let ctx = Context::open_sim(Default::default())?;
    /// let mut cq = ctx.create_cq(64, None)?;
    /// let mut wc = [Wc::default(); 16];
    /// let n = cq.poll(&mut wc); // 0: nothing completed yet
    /// for w in &wc[..n] {
    ///     assert_eq!(w.status, WcStatus::Success, "wr {} failed: {}", w.wr_id, w.status);
    /// }
    /// # Ok(()) }
    /// ```
    #[inline(always)]
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        self.poll_into(wc)
    }

    /// [`Cq::poll`] into entries of another type: a binding's own completion entries (the C
    /// ABI's `struct ibv_wc`), written directly with no copy through [`Wc`].
    #[inline(always)]
    pub fn poll_into<W: WcEntry>(&mut self, wc: &mut [W]) -> usize {
        // Straight-line for the common calls: latency-bound programs poll for one completion,
        // and a batch poll often finds none or one. One look at the head CQE and, for a
        // requester success with the QP and opcode of the previous one, one entry filled.
        // Batches and anything else go to `poll_batch`.
        let one = wc.len() == 1;
        let Some(first) = wc.first_mut() else { return 0 };
        let (qps, cache, info) = (&self.ctx.shared.qps, &mut self.qp_cache, &self.send_info);
        let taken = self.ring.take_requester(|cqe, next| {
            let pinned = cache.pin(qps);
            let Some(ring) = pinned.hit(cqe.sop_drop_qpn()) else { return false };
            if !one && !next.is_empty() {
                return false; // a batch: the general loop takes it
            }
            fill_send(first, ring, cqe, info);
            true
        });
        match taken {
            HeadTaken::Taken => 1,
            HeadTaken::Empty => self.empty(wc),
            HeadTaken::Other | HeadTaken::Declined => self.poll_batch(wc),
        }
    }

    /// The CQ was empty: with a sim whose wire the poller drains, take what waits there and
    /// look again (out of line, reached by a tail call: the fast paths keep no stack frame).
    #[inline(always)]
    fn empty<W: WcEntry>(&mut self, wc: &mut [W]) -> usize {
        #[cfg(feature = "sim")]
        if self.wire.is_some() {
            return self.drain_sim_wire(wc);
        }
        let _ = wc;
        0
    }

    #[cfg(feature = "sim")]
    #[cold]
    #[inline(never)]
    fn drain_sim_wire<W: WcEntry>(&mut self, wc: &mut [W]) -> usize {
        match &self.wire {
            Some(p) if p.poll_wire() => self.poll_batch(wc),
            _ => 0,
        }
    }

    /// Polls into `wc` (the general case).
    #[inline(never)]
    fn poll_batch<W: WcEntry>(&mut self, wc: &mut [W]) -> usize {
        let shared = &*self.ctx.shared;
        // The QP of the previous CQE (rdma-core's `cur_rsc`), kept between polls; the rings
        // found stay allocated until `last` ends the poll.
        let mut last = self.qp_cache.pin(&shared.qps);
        let mut info = self.send_info;
        let mut ring_cursor = self.ring.cursor();
        // Requester successes go through a loop that calls nothing, so its state stays in
        // registers; any other CQE goes through `translate_other`, one at a time.
        let take = |cursor: &mut CqCursor<'_>, out: &mut [W], last: &mut Pinned<'_>, info: &mut SendInfo| {
            cursor.take_requesters(out, |cqe, w| {
                let word = cqe.sop_drop_qpn();
                let ring = match last.hit(word) {
                    Some(ring) => ring,
                    None => {
                        let Some(ring) = last.learn(word) else { return false };
                        *info = SendInfo::of(word);
                        ring
                    }
                };
                fill_send(w, ring, cqe, info);
                true
            })
        };
        let mut n = take(&mut ring_cursor, wc, &mut last, &mut info);
        while n < wc.len() {
            // A CQE the loop does not take: another kind, or one of a QP no longer known
            // (consumed and skipped), or the first of the next pass over the ring; or none.
            let Some(cqe) = ring_cursor.peek() else { break };
            let filled = Self::translate_other(&last, cqe, &mut wc[n]);
            ring_cursor.advance();
            n += filled as usize;
            n += take(&mut ring_cursor, &mut wc[n..], &mut last, &mut info);
        }
        ring_cursor.finish();
        drop(last);
        self.send_info = info;
        n
    }

    /// Any CQE but a requester success: responder successes (RESP_WR_IMM, RESP_SEND,
    /// RESP_SEND_IMM) and errors (REQ_ERR, RESP_ERR); others are not work completions.
    #[inline(never)]
    fn translate_other<W: WcEntry>(rings: &Pinned<'_>, cqe: CqeRef<'_>, w: &mut W) -> bool {
        match CqeOpcode(cqe.opcode()) {
            CqeOpcode::REQ => match rings.qp(cqe.qpn()) {
                Some(ring) => {
                    fill_send(w, ring, cqe, &SendInfo::of(cqe.sop_drop_qpn()));
                    true
                }
                None => false,
            },
            CqeOpcode::RESP_WR_IMM | CqeOpcode::RESP_SEND | CqeOpcode::RESP_SEND_IMM => {
                Self::translate_recv(rings, cqe, w)
            }
            CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR => Self::translate_error(rings, &cqe.copy(), w),
            _ => false,
        }
    }

    /// A responder success CQE.
    #[inline(always)]
    fn translate_recv<W: WcEntry>(rings: &Pinned<'_>, cqe: CqeRef<'_>, w: &mut W) -> bool {
        let qpn = cqe.qpn();
        let srqn = cqe.srqn();
        let srq = if srqn != 0 { rings.srq(srqn) } else { None };
        let Some(ring) = srq.or_else(|| rings.qp(qpn)) else { return false };
        let with_imm = cqe.with_imm();
        let imm_flag = if with_imm { WcFlags::WITH_IMM.0 } else { 0 };
        let grh_flag = if cqe.has_grh() { WcFlags::GRH.0 } else { 0 };
        w.recv_success(&Wc {
            wr_id: ring.complete_recv(cqe.wqe_counter()),
            status: WcStatus::Success,
            opcode: if CqeOpcode(cqe.opcode()) == CqeOpcode::RESP_WR_IMM {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            },
            vendor_err: 0,
            byte_len: cqe.byte_cnt(),
            imm_data: if with_imm { cqe.imm() } else { 0 },
            qp_num: qpn,
            src_qp: cqe.src_qp(),
            wc_flags: WcFlags(imm_flag | grh_flag),
            pkey_index: 0,
            slid: 0,
            sl: cqe.sl(),
        });
        true
    }

    /// Error CQEs (REQ_ERR, RESP_ERR): off the fast path.
    #[cold]
    #[inline(never)]
    fn translate_error<W: WcEntry>(rings: &Pinned<'_>, cqe: &Cqe, w: &mut W) -> bool {
        let (wr_id, opcode) = if CqeOpcode(cqe.opcode()) == CqeOpcode::REQ_ERR {
            let Some(ring) = rings.qp(cqe.qpn()) else { return false };
            (ring.complete_send(cqe.wqe_counter()), SEND_WC[cqe.wqe_opcode() as usize])
        } else {
            let srq = if cqe.srqn() != 0 { rings.srq(cqe.srqn()) } else { None };
            let Some(ring) = srq.or_else(|| rings.qp(cqe.qpn())) else { return false };
            (ring.complete_recv(cqe.wqe_counter()), WcOpcode::Recv)
        };
        w.error(&Wc {
            wr_id,
            status: status_of(cqe.syndrome()),
            opcode,
            vendor_err: cqe.vendor_syndrome() as u32,
            qp_num: cqe.qpn(),
            ..Wc::default()
        });
        true
    }

    /// `ibv_req_notify_cq`: the next completion (or the next solicited one) raises an event on
    /// the CQ's completion channel.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        if self.channel.is_none() {
            return Err(Error::invalid(format!("CQ {:#x} has no completion channel", self.cqn())));
        }
        let sn = self.sn.load(Ordering::Relaxed);
        let b = self.ctx.shared.hca.backend();
        self.ring.arm(&**b, self.ctx.shared.hca.uar(), self.cqn(), sn, solicited_only);
        Ok(())
    }

    /// Sets the value this CQ's completion events carry ([`CqEvent::context`]; ibverbs'
    /// `cq_context`).
    pub fn set_event_context(&self, context: u64) {
        self.event_context.store(context, Ordering::Relaxed);
    }

    /// The completion channel the CQ reports to.
    pub fn channel(&self) -> Option<&Arc<CompChannel>> {
        self.channel.as_ref()
    }

    /// `ibv_ack_cq_events`.
    pub fn ack_events(&mut self, n: u32) {
        self.events = self.events.wrapping_add(n);
    }

    fn ring_buf(&self) -> &umlx_driver::dma::DmaMemory {
        match &self.resized {
            Some(r) => &r.buf,
            None => &self.cq.mem().buf,
        }
    }

    /// `ibv_resize_cq`: at least `cqe` entries. CQEs not yet polled are kept (copied into the
    /// new ring up to the device's RESIZE_CQ marker). Refused if they would not fit.
    pub fn resize(&mut self, cqe: u32) -> Result<()> {
        let log = (cqe.max(1) + 1).next_power_of_two().trailing_zeros().max(1);
        let produced = self.cq.producer_counter()?;
        let pending = self.ring.unpolled(produced);
        if (1u32 << log) <= pending + 1 {
            return Err(Error::invalid(format!(
                "CQ {:#x}: {pending} completions are waiting; {cqe} entries cannot hold them",
                self.cqn()
            )));
        }
        let new = self.cq.resize(log)?;
        let Some(ci) = self.ring.carry_over(self.ring_buf(), &new.buf, log) else {
            return Err(Error::from(umlx_driver::Error::Firmware {
                device: self.ctx.name().into(),
                problem: format!("CQ {:#x}: no RESIZE_CQ CQE in the old ring after MODIFY_CQ", self.cqn()),
            }));
        };
        let ring = CqRing::resume(new.clone(), log, ci).ok_or_else(|| Error::invalid("CQ ring"))?;
        self.ring = ring;
        self.resized = Some(new);
        self.ring.update_ci();
        Ok(())
    }

    /// CQEs the device has written so far (QUERY_CQ producer counter; a control-path call).
    pub fn device_produced(&self) -> Result<u32> {
        Ok(self.cq.producer_counter()?)
    }

    /// Events acknowledged so far.
    pub fn acked_events(&self) -> u32 {
        self.events
    }
}
