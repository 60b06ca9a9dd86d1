//! Send queue: a QP's transport state taken out and put back, WQE fetch and parsing, and the
//! requester's packet generation with its retransmission. Its frames are built in `egress`,
//! its payloads read in `memory`, its CQEs written in `completion`.

use super::{Egress, Kind, Path, QpTransport, SendQueue, SendWqe, UdDest, ack_timeout, psn_add, psn_cmp};
use crate::firmware::DataPath;
use crate::firmware::objects::Access;
use std::time::Instant;
use umlx_hwdesc::enums::{CqeSyndrome, QpState, WqeOpcode};
use umlx_hwdesc::plain::{
    FmCeSe, cq as cq_consts, qp_dbr, wqe as w, wqe_atomic_seg, wqe_av, wqe_ctrl_seg, wqe_data_seg, wqe_inline_seg,
    wqe_raddr_seg,
};
use umlx_wire::packet::{AtomicEth, Bth, Deth, ExtHeaders, ImmDt, Opcode, Reth};
use zerocopy::FromBytes;

/// Most WQEBBs a fetch reads ahead at once (one DMA read, within one page of the SQ).
const FETCH_WQEBBS: usize = 32;
/// The bytes of [`FETCH_WQEBBS`].
const FETCH_BLOCK_BYTES: usize = FETCH_WQEBBS * w::SEND_WQE_BB;

/// The structure `T` at byte `at` of a WQE, if the WQE holds it.
fn seg<T: FromBytes>(b: &[u8], at: usize) -> Option<T> {
    T::read_from_prefix(b.get(at..)?).ok().map(|(v, _)| v)
}

/// Why a WQE could not be parsed.
struct BadWqe(u8);

thread_local! {
    /// How many QP transports this thread holds ([`DataPath::take_transport`]).
    static TRANSPORTS_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// How many times [`DataPath::take_transport`] yields to the thread that holds a QP's
/// transport before it gives up (about a second on an idle machine; the holder's work is a
/// burst of a few dozen packets or WQEs). Reached only if that thread died holding it.
const TRANSPORT_WAIT_YIELDS: u32 = 1 << 20;

impl DataPath<'_> {
    // ---------------------------------------------------------------- transport take/put

    /// Takes the transport state out of a QP (put it back with [`DataPath::put_transport`]);
    /// `None` if there is no such QP.
    ///
    /// Another thread's run of the device may hold it (runs on a shared borrow of the device
    /// serve different queues at once): then this one waits until it is put back. (A send
    /// doorbell does not wait: it leaves the work to the holder, see
    /// [`crate::firmware::objects::Qp::sq_rang`].) That cannot
    /// deadlock because no thread holds two transports, nor waits for anything while it holds
    /// one: a run builds frames into its lane and sends them after it has put the transport
    /// back, and a burst of received packets ([`super::RxHold`]) puts one QP's back before it
    /// takes another's. A thread that already holds one (which that rule says never happens)
    /// gets `None` rather than wait.
    pub(crate) fn take_transport(&mut self, qpn: u32) -> Option<Box<QpTransport>> {
        let mut yields = 0;
        loop {
            if let Some(t) = self.objects.qps.lock(&qpn)?.transport.take() {
                TRANSPORTS_HELD.set(TRANSPORTS_HELD.get() + 1);
                return Some(t);
            }
            if TRANSPORTS_HELD.get() > 0 || yields == TRANSPORT_WAIT_YIELDS {
                return None;
            }
            yields += 1;
            std::thread::yield_now();
        }
    }

    /// Puts a QP's transport state back and mirrors its counters into the QP. A send doorbell
    /// that rang while the transport was out ([`crate::firmware::objects::Qp::sq_rang`]) is
    /// served first.
    pub(crate) fn put_transport(&mut self, qpn: u32, mut t: Box<QpTransport>) {
        let mut qp = loop {
            self.send_built();
            let Some(mut qp) = self.objects.qps.lock(&qpn) else {
                TRANSPORTS_HELD.set(TRANSPORTS_HELD.get().saturating_sub(1));
                return;
            };
            if !qp.sq_rang {
                break qp;
            }
            qp.sq_rang = false;
            drop(qp);
            self.serve_sq(&mut t, crate::port::run_now());
        };
        TRANSPORTS_HELD.set(TRANSPORTS_HELD.get().saturating_sub(1));
        let due = t.deadline.into_iter().chain(t.rnr_until).min();
        qp.sq_fetched = t.sq_head;
        qp.rq_consumed = t.rq_consumed;
        let timed = needs_timers(&t, &qp);
        qp.transport = Some(t);
        // A QP joins the timers' set when it needs them and stays in it until their next run
        // finds it needs them no more (`transport_tick`): a ping-pong arms and clears its
        // retransmit timer every message, and would otherwise change the set twice a message.
        let join = timed && !std::mem::replace(&mut qp.timed, true);
        // The QP's lock is let go of first: the timers' set is taken before a QP's lock
        // (`Hca::transport_next_due`), never after.
        drop(qp);
        if join {
            self.objects.xport.timed().insert(qpn);
        }
        if timed {
            // A QP in error with a receive queue is flushed at the timers' next run.
            self.note_due(due.unwrap_or_else(Instant::now));
        }
    }

    /// Takes QP `qpn` out of the timers' set if nothing of it is timed any more: its transport
    /// is in place (not held by a run, which puts it back with its timers) and has no deadline,
    /// and it is not a QP in error with a receive queue to flush. The set is locked first, then
    /// the QP, as everywhere.
    pub(crate) fn leave_timers_if_idle(&mut self, qpn: u32) {
        let mut timed = self.objects.xport.timed();
        let Some(mut qp) = self.objects.qps.lock(&qpn) else {
            timed.remove(&qpn);
            return;
        };
        let idle = qp.transport.as_deref().is_some_and(|t| !needs_timers(t, &qp));
        if idle {
            qp.timed = false;
            timed.remove(&qpn);
        }
    }

    // ---------------------------------------------------------------- SQ fetch

    /// Fetches every new WQE the doorbell record announces.
    pub(crate) fn sq_fetch(&mut self, t: &mut QpTransport) {
        let mut block = std::mem::take(&mut self.lane.fetch_block);
        if block.len() != FETCH_BLOCK_BYTES {
            // Made at the device's first fetch: its first QP's move to RTS, not a doorbell.
            block = vec![0; FETCH_BLOCK_BYTES].into_boxed_slice();
        }
        self.sq_fetch_through(t, &mut block);
        self.lane.fetch_block = block;
    }

    /// [`DataPath::sq_fetch`] with its read-ahead block.
    fn sq_fetch_through(&mut self, t: &mut QpTransport, block: &mut [u8]) {
        let Some(log_sq) = t.path.log_sq_size else { return };
        let size = 1u32 << log_sq;
        let Ok(counter) = self.iommu.read_u32_be(t.path.dbr + qp_dbr::send_counter as u64) else { return };
        let counter = counter as u16;
        // Posted WQEBBs read ahead in one DMA read: `block` holds `n` of them from index `from`
        // (what else it holds is stale, and never read).
        let (mut from, mut n) = (0u32, 0u32);
        loop {
            let pending = counter.wrapping_sub(t.sq_head) as u32;
            if pending == 0 || pending > size {
                return;
            }
            let idx = t.sq_head as u32 & (size - 1);
            if idx.wrapping_sub(from) >= n {
                // The posted WQEBBs from `idx` to the ring's end, within its page and the block.
                let off = t.path.sq_offset + ((idx as u64) << w::SEND_WQE_SHIFT);
                let in_page = (t.path.buf.contiguous_from(off) >> w::SEND_WQE_SHIFT) as u32;
                let count = pending.min(size - idx).min(in_page).clamp(1, FETCH_WQEBBS as u32);
                let Some(iova) = t.path.buf.iova(off) else { return };
                let Some(ahead) = block.get_mut(..(count as usize) << w::SEND_WQE_SHIFT) else { return };
                if self.iommu.read(iova, ahead).is_err() {
                    return;
                }
                (from, n) = (idx, count);
            }
            let at = ((idx - from) as usize) << w::SEND_WQE_SHIFT;
            let Some(first) = block.get(at..at + w::SEND_WQE_BB) else { return };
            let Some(ctrl) = seg::<wqe_ctrl_seg>(first, 0) else { return };
            let ds = (ctrl.qpn_ds.get() & w::WQE_CTRL_DS_MASK) as usize;
            let nbb = (ds * w::SEND_WQE_DS).div_ceil(w::SEND_WQE_BB).max(1) as u32;
            if nbb > pending {
                return; // the rest of the WQE is not posted yet
            }
            // A WQE read ahead whole is parsed where it lies; one that runs past the block (over
            // a page or the ring's end) is gathered WQEBB by WQEBB.
            let read_ahead =
                (idx - from + nbb <= n).then(|| block.get(at..at + ((nbb as usize) << w::SEND_WQE_SHIFT))).flatten();
            let mut longer = Vec::new();
            if read_ahead.is_none() {
                longer = crate::buffers::take();
                longer.extend_from_slice(first);
                for i in 1..nbb {
                    let j = (idx + i) & (size - 1);
                    let mut bb = [0u8; w::SEND_WQE_BB];
                    let ok = t
                        .path
                        .buf
                        .iova(t.path.sq_offset + ((j as u64) << w::SEND_WQE_SHIFT))
                        .is_some_and(|a| self.iommu.read(a, &mut bb).is_ok());
                    if !ok {
                        return;
                    }
                    longer.extend_from_slice(&bb);
                }
            }
            let bytes: &[u8] = read_ahead.unwrap_or(&longer);
            let (opcode, index) = opcode_index(&ctrl);
            // Built and parsed where it is queued. A descriptor is a few hundred bytes: it is
            // copied in from a constant, then filled in field by field. One assembled on the
            // stack was copied from there whole, and that copy's wide reads of its narrow,
            // fresh writes stalled the core (perf, `umlx bench sim`).
            let wq = t.sq.push_blank();
            describe_ctrl(wq, opcode, index, &ctrl);
            if let Err(BadWqe(synd)) = self.parse_wqe(&t.path, bytes, ds, wq) {
                self.lane.stats.bad_wqes += 1;
                wq.reset();
                describe_ctrl(wq, opcode, index, &ctrl);
                wq.err = Some(synd);
            }
            if read_ahead.is_none() {
                crate::buffers::give(longer);
            }
            t.sq_head = t.sq_head.wrapping_add(nbb as u16);
        }
    }

    /// Parses the WQE `b` (its `ds` segments) into `wq`, which holds what its control segment
    /// says ([`describe_ctrl`]); on an error `wq` is left partly filled.
    fn parse_wqe(&mut self, path: &Path, b: &[u8], ds: usize, wq: &mut SendWqe) -> Result<(), BadWqe> {
        let bad = BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0);
        let opcode = wq.opcode;
        let len = ds * w::SEND_WQE_DS;
        if ds == 0 || len > w::SEND_WQE_MAX_WQEBBS * w::SEND_WQE_BB || len > b.len() {
            return Err(bad);
        }
        let b = &b[..len];
        let mut at = wqe_ctrl_seg::SIZE;
        if path.ud {
            let av = seg::<wqe_av>(b, at).ok_or(bad)?;
            let qkey = av.qkey.get();
            let gfl = av.grh_gid_fl.get();
            wq.ud = Some(UdDest {
                // The "Q_Key" of a WR whose high bit is set means: use the QP's own.
                qkey: if qkey & w::EXTENDED_UD_AV != 0 { path.qkey } else { qkey },
                dqpn: av.dqp_dct.get() & cq_consts::NUM_MASK_24,
                rmac: av.rmac,
                rgid: av.rgid,
                sgid_index: ((gfl >> w::AV_SGID_INDEX_SHIFT) & w::AV_SGID_INDEX_MASK) as usize,
                udp_sport: match av.rlid.get() {
                    0 => path.udp_sport,
                    p => p,
                },
                hop_limit: av.hop_limit,
                tclass: av.tclass,
            });
            at += wqe_av::SIZE;
            if !matches!(WqeOpcode(opcode), WqeOpcode::SEND | WqeOpcode::SEND_IMM | WqeOpcode::NOP) {
                return Err(BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0));
            }
        }
        let op = WqeOpcode(opcode);
        wq.kind = match op {
            WqeOpcode::NOP => Kind::Nop,
            WqeOpcode::SEND | WqeOpcode::SEND_IMM => Kind::Send,
            WqeOpcode::RDMA_WRITE | WqeOpcode::RDMA_WRITE_IMM => Kind::Write,
            WqeOpcode::RDMA_READ => Kind::Read,
            WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => Kind::Atomic,
            _ => return Err(BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0)),
        };
        if matches!(wq.kind, Kind::Write | Kind::Read | Kind::Atomic) {
            let r = seg::<wqe_raddr_seg>(b, at).ok_or(BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0))?;
            wq.raddr = r.raddr.get();
            wq.rkey = r.rkey.get();
            at += wqe_raddr_seg::SIZE;
        }
        if wq.kind == Kind::Atomic {
            let a = seg::<wqe_atomic_seg>(b, at).ok_or(BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0))?;
            wq.swap_add = a.swap_add.get();
            wq.compare = a.compare.get();
            at += wqe_atomic_seg::SIZE;
        }
        // Data and inline segments.
        let mut total: u64 = 0;
        while let Some(head) = seg::<wqe_inline_seg>(b, at) {
            let bc = head.byte_count.get();
            if bc & w::INLINE_SEG != 0 {
                let n = (bc & !w::INLINE_SEG) as usize;
                let start = at + wqe_inline_seg::SIZE;
                let Some(data) = b.get(start..start + n) else { return Err(BadWqe(CqeSyndrome::LOCAL_LENGTH_ERR.0)) };
                if !matches!(wq.kind, Kind::Send | Kind::Write) {
                    return Err(BadWqe(CqeSyndrome::LOCAL_QP_OP_ERR.0));
                }
                wq.gather.push_inline(data);
                total += n as u64;
                at += (wqe_inline_seg::SIZE + n).div_ceil(w::SEND_WQE_DS) * w::SEND_WQE_DS;
                continue;
            }
            let Some(d) = seg::<wqe_data_seg>(b, at) else { break };
            let (lkey, addr) = (d.lkey.get(), d.addr.get());
            at += wqe_data_seg::SIZE;
            if bc == 0 {
                continue;
            }
            total += bc as u64;
            match wq.kind {
                Kind::Send | Kind::Write => {
                    // Read when each packet is built.
                    let gather = &mut wq.gather;
                    self.mkey_visit(lkey, path.pd, addr, bc as u64, Access::LocalRead, |iova, n| {
                        gather.push_host(iova, n)
                    })
                    .map_err(|_| BadWqe(CqeSyndrome::LOCAL_PROT_ERR.0))?;
                    if total > path.max_msg.max(1 << 31) {
                        return Err(BadWqe(CqeSyndrome::LOCAL_LENGTH_ERR.0));
                    }
                }
                Kind::Read | Kind::Atomic => {
                    // Checked now, written when the response arrives.
                    self.mkey_chunks(lkey, path.pd, addr, bc as u64, Access::LocalWrite)
                        .map_err(|_| BadWqe(CqeSyndrome::LOCAL_PROT_ERR.0))?;
                    wq.local.push((lkey, addr, bc));
                }
                Kind::Nop => {}
            }
        }
        if total > path.max_msg {
            return Err(BadWqe(CqeSyndrome::LOCAL_LENGTH_ERR.0));
        }
        wq.len = total as u32;
        if wq.kind == Kind::Atomic {
            if total < 8 {
                return Err(BadWqe(CqeSyndrome::LOCAL_LENGTH_ERR.0));
            }
            wq.len = 8;
        }
        let mtu = if path.ud { self.vport.active_ib_mtu() } else { 0 };
        let mtu = if path.ud { super::mtu_bytes(mtu) } else { path.mtu };
        wq.npkts = match wq.kind {
            Kind::Nop => 0,
            Kind::Atomic => 1,
            _ if path.ud => 1,
            _ => super::packets_for(wq.len.into(), mtu),
        };
        Ok(())
    }

    // ---------------------------------------------------------------- requester

    /// Fetches, sends and completes what the SQ allows now.
    pub(crate) fn sq_service(&mut self, qpn: u32, now: Instant) {
        let Some(mut t) = self.take_transport(qpn) else { return };
        self.serve_sq(&mut t, now);
        // The ACK the QP owes (a ping-pong's, coalesced until its reply) leaves now, after what
        // the doorbell sent, while the transport is held: the run's `flush_acks` would send it
        // next, before the run's frames go, but would take the transport again for it.
        if self.send_pending_ack(&mut t) {
            self.lane.acks_pending.retain(|&q| q != qpn);
        }
        self.put_transport(qpn, t);
    }

    /// What a send doorbell has a QP's transport `t` do: fetch the WQEs posted and send what
    /// the window allows (in error, flush them).
    fn serve_sq(&mut self, t: &mut QpTransport, now: Instant) {
        match t.state {
            QpState::RTS => {
                self.sq_fetch(t);
                self.sq_progress(t, now);
            }
            QpState::ERR => self.flush(t),
            _ => {}
        }
    }

    /// Completes finished WQEs at the front, then sends what the window allows.
    pub(crate) fn sq_progress(&mut self, t: &mut QpTransport, now: Instant) {
        self.advance(t);
        if t.state != QpState::RTS {
            return;
        }
        if t.path.ud {
            self.pump_ud(t);
        } else {
            self.pump_rc(t, now);
        }
        self.advance(t);
    }

    /// Pops completed WQEs in order, writing their CQEs; a failed WQE at the front completes
    /// in error and moves the QP to error.
    ///
    /// The completed ones leave the queue together, dropped where they are: a `SendWqe` is a
    /// few hundred bytes, and popping each one moved it out first.
    pub(crate) fn advance(&mut self, t: &mut QpTransport) {
        let mut n = 0;
        while let Some(w) = t.sq.get_mut(n) {
            if w.err.is_some() || !(w.done || w.kind == Kind::Nop) {
                break;
            }
            self.req_cqe(&t.path, w);
            w.gather.release();
            n += 1;
        }
        if n > 0 {
            t.sq.retire(n);
            t.pump_from = t.pump_from.saturating_sub(n);
        }
        if let Some(synd) = t.sq.front().and_then(|w| w.err) {
            let Some(wq) = t.sq.retire_front() else { return };
            let (opcode, index) = (wq.opcode, wq.index);
            t.pump_from = t.pump_from.saturating_sub(1);
            let path = t.path.clone();
            self.error_cqe(&path, false, opcode, index, synd);
            self.qp_to_error(t);
        }
    }

    fn pump_ud(&mut self, t: &mut QpTransport) {
        let mtu = super::mtu_bytes(self.vport.active_ib_mtu());
        let path = &t.path;
        for wq in t.sq.iter_mut() {
            if wq.err.is_some() {
                break;
            }
            if wq.done || wq.kind == Kind::Nop {
                continue;
            }
            let Some(d) = wq.ud else {
                wq.err = Some(CqeSyndrome::LOCAL_QP_OP_ERR.0);
                break;
            };
            if wq.len > mtu {
                self.lane.stats.ud_too_long += 1;
                wq.done = true;
                continue;
            }
            let imm = WqeOpcode(wq.opcode) == WqeOpcode::SEND_IMM;
            let opc = if imm { Opcode::UD_SEND_ONLY_WITH_IMMEDIATE } else { Opcode::UD_SEND_ONLY };
            let mut bth = Bth::new(opc, d.dqpn, t.next_psn);
            bth.se = wq.solicited;
            t.next_psn = psn_add(t.next_psn, 1);
            let ext = ExtHeaders {
                deth: Some(Deth { qkey: d.qkey, src_qp: path.qpn }),
                imm_dt: imm.then(|| ImmDt { imm: u32::from_be_bytes(wq.imm) }),
                ..Default::default()
            };
            if !self.emit_gathered(path, Some(&d), bth, ext, &mut wq.gather, 0..wq.len.into()) {
                wq.err = Some(CqeSyndrome::LOCAL_PROT_ERR.0);
                break;
            }
            wq.done = true;
            wq.sent = 1;
        }
    }

    fn pump_rc(&mut self, t: &mut QpTransport, now: Instant) {
        if let Some(until) = t.rnr_until {
            if now < until {
                return;
            }
            t.rnr_until = None;
        }
        // READs and atomics in flight, and whether one is before WQE i: counted only when a
        // WQE needs them (a READ/atomic to start, a fenced WQE), rare in a stream of SENDs and
        // WRITEs.
        let rd_in_flight = |sq: &SendQueue| {
            sq.iter()
                .filter(|w| matches!(w.kind, Kind::Read | Kind::Atomic) && w.first_psn.is_some() && !w.done)
                .count() as u32
        };
        let rd_before = |sq: &SendQueue, i: usize| {
            sq.iter().take(i).any(|w| matches!(w.kind, Kind::Read | Kind::Atomic) && !w.done)
        };
        let mut rd_outstanding = None;
        // Looked up at the first packet, for all this pump sends.
        let mut egress = None;
        let mut i = t.pump_from.min(t.sq.len());
        while i < t.sq.len() {
            let (kind, fence, started, complete, err) = {
                let w = &t.sq[i];
                (w.kind, w.fence, w.first_psn.is_some(), w.sent >= w.npkts, w.err.is_some())
            };
            if err {
                break;
            }
            let rd = matches!(kind, Kind::Read | Kind::Atomic);
            if kind == Kind::Nop || t.sq[i].done || complete {
                i += 1;
                continue;
            }
            if fence && rd_before(&t.sq, i) {
                break;
            }
            if rd && !started {
                let n = rd_outstanding.get_or_insert_with(|| rd_in_flight(&t.sq));
                if *n >= t.path.sra_max {
                    break;
                }
                *n += 1;
            }
            if !self.send_packets(t, i, &mut egress) {
                break;
            }
            i += 1;
        }
        t.pump_from = i;
        if t.waiting() {
            if t.deadline.is_none() {
                t.deadline = ack_timeout(t.path.ack_timeout).map(|d| now + d);
            }
        } else {
            t.deadline = None;
        }
    }

    /// Sends the unsent packets of WQE `i` while the window allows, on `egress` (looked up at
    /// its first packet when `None`). True when all are sent.
    ///
    /// The transport's path is read in place: moved out and back around the pump (about 150
    /// bytes, three copies), it cost a turn of a ping-pong about 100 instructions.
    fn send_packets(&mut self, t: &mut QpTransport, i: usize, egress: &mut Option<Egress>) -> bool {
        let mtu = t.path.mtu;
        loop {
            let w = &t.sq[i];
            if w.sent >= w.npkts {
                return true;
            }
            if psn_cmp(t.next_psn, t.una) >= super::MAX_UNACKED_PSNS as i32 {
                return false;
            }
            let first = *t.sq[i].first_psn.get_or_insert(t.next_psn);
            let w = &t.sq[i];
            let k = w.sent;
            let psn = psn_add(first, k);
            let last = k + 1 == w.npkts;
            let mut ext = ExtHeaders::default();
            let imm_op = matches!(WqeOpcode(w.opcode), WqeOpcode::SEND_IMM | WqeOpcode::RDMA_WRITE_IMM);
            let (opcode, payload_range, ack, consumed) = match w.kind {
                Kind::Send | Kind::Write => {
                    let off = u64::from(k) * u64::from(mtu);
                    let end = (off + u64::from(mtu)).min(w.len.into());
                    let send = w.kind == Kind::Send;
                    let op = match (w.npkts == 1, k == 0, last, send, imm_op) {
                        (true, _, _, true, false) => Opcode::RC_SEND_ONLY,
                        (true, _, _, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                        (true, _, _, false, false) => Opcode::RC_RDMA_WRITE_ONLY,
                        (true, _, _, false, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                        (false, true, _, true, _) => Opcode::RC_SEND_FIRST,
                        (false, true, _, false, _) => Opcode::RC_RDMA_WRITE_FIRST,
                        (false, false, false, true, _) => Opcode::RC_SEND_MIDDLE,
                        (false, false, false, false, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
                        (false, false, true, true, false) => Opcode::RC_SEND_LAST,
                        (false, false, true, true, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
                        (false, false, true, false, false) => Opcode::RC_RDMA_WRITE_LAST,
                        (false, false, true, false, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    };
                    if !send && k == 0 {
                        ext.reth = Some(Reth { va: w.raddr, rkey: w.rkey, dma_len: w.len });
                    }
                    if imm_op && last {
                        ext.imm_dt = Some(ImmDt { imm: u32::from_be_bytes(w.imm) });
                    }
                    (op, off.min(end)..end, last, 1)
                }
                Kind::Read => {
                    let off = k as u64 * mtu as u64;
                    ext.reth = Some(Reth {
                        va: w.raddr.wrapping_add(off),
                        rkey: w.rkey,
                        dma_len: w.len.saturating_sub(off as u32),
                    });
                    (Opcode::RC_RDMA_READ_REQUEST, 0..0, true, w.npkts - k)
                }
                Kind::Atomic => {
                    ext.atomic_eth =
                        Some(AtomicEth { va: w.raddr, rkey: w.rkey, swap_add: w.swap_add, compare: w.compare });
                    let op = if WqeOpcode(w.opcode) == WqeOpcode::ATOMIC_CS {
                        Opcode::RC_COMPARE_SWAP
                    } else {
                        Opcode::RC_FETCH_ADD
                    };
                    (op, 0..0, true, 1)
                }
                Kind::Nop => return true,
            };
            let mut bth = Bth::new(opcode, t.path.remote_qpn, psn);
            t.noack_pkts += 1;
            bth.ack_req = ack || t.noack_pkts > super::MAX_PKT_PER_ACK;
            if bth.ack_req {
                t.noack_pkts = 0;
            }
            bth.se = last && w.solicited && (w.kind == Kind::Send || imm_op);
            let egress = match egress {
                Some(e) => e,
                None => egress.insert(self.egress(&t.path, None)),
            };
            let w = &mut t.sq[i];
            if !self.emit_gathered_on(egress, bth, ext, &mut w.gather, payload_range) {
                w.err = Some(CqeSyndrome::LOCAL_PROT_ERR.0);
                return false;
            }
            w.sent += consumed;
            let np = psn_add(psn, consumed);
            if psn_cmp(np, t.next_psn) > 0 {
                t.next_psn = np;
            }
        }
    }

    /// Go-back-N: the next packet sent is `psn`.
    pub(crate) fn rewind(&mut self, t: &mut QpTransport, psn: u32) {
        let resent = psn_cmp(t.next_psn, psn).max(0) as u64;
        self.lane.stats.retransmits += resent;
        t.next_psn = psn;
        t.pump_from = 0;
        for w in t.sq.iter_mut() {
            let Some(first) = w.first_psn else { continue };
            if w.done {
                continue;
            }
            let d = psn_cmp(psn, first);
            if d <= 0 {
                w.sent = 0;
                w.resp = 0;
            } else if (d as u32) < w.npkts {
                w.sent = d as u32;
            }
        }
        // PSNs must stay contiguous: unstarted WQEs after a rewind keep their first PSN only if
        // they had one.
    }
}

/// The opcode and WQE index of a control segment.
fn opcode_index(ctrl: &wqe_ctrl_seg) -> (u8, u16) {
    let v = ctrl.opmod_idx_opcode.get();
    (v as u8, (v >> w::WQE_CTRL_WQE_INDEX_SHIFT) as u16)
}

/// Fills in what the control segment says: a blank descriptor ([`super::BLANK_WQE`]) becomes
/// the WQE's description with nothing of its other segments parsed.
fn describe_ctrl(wq: &mut SendWqe, opcode: u8, index: u16, ctrl: &wqe_ctrl_seg) {
    let flags = FmCeSe::from_bits(ctrl.fm_ce_se);
    wq.opcode = opcode;
    wq.index = index;
    wq.signaled = ctrl.fm_ce_se & w::WQE_CTRL_CQ_UPDATE != 0;
    wq.solicited = flags.se();
    wq.fence = flags.fm() != 0;
    wq.imm = ctrl.imm.to_bytes();
}

/// Whether QP `qp`, whose transport is `t`, needs the timers' runs: a retransmit or RNR
/// deadline is armed, or it is a QP in error with a receive queue, whose receive WQEs are
/// flushed as they are posted.
fn needs_timers(t: &QpTransport, qp: &crate::firmware::objects::Qp) -> bool {
    t.deadline.is_some() || t.rnr_until.is_some() || (qp.state == QpState::ERR && !qp.no_rq)
}
