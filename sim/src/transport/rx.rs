//! Receive side: inbound RoCEv2 packets for the RC responder, the RC requester (ACK, NAK,
//! READ responses, atomic ACKs) and UD; the transport timers; QP state-change handling.

use super::{Gather, Kind, Path, QpTransport, RecvMsg, RecvWqe, Resource, ScatterList, psn_add, psn_cmp, rnr_delay};
use crate::firmware::objects::{Access, Chunks, Locked};
use crate::firmware::{DataPath, Hca};
use std::ops::Bound;
use std::time::Instant;
use umlx_hwdesc::U32;
use umlx_hwdesc::enums::{CqeOpcode, CqeSyndrome, EventType, QpState};
use umlx_hwdesc::plain::{cq, eqe_qp_srq, wqe as w, wqe_data_seg, wqe_srq_next_seg};
use umlx_wire::packet::{
    AETH_ACK_UNLIMITED, Aeth, AethKind, AtomicAckEth, Bth, ExtHeaders, IpHeader, NakCode, Opcode, Operation, Position,
    RocePacket, Transport,
};
use zerocopy::FromBytes;

/// `eqe_qp_srq.type_` the sim reports for an SRQ's events: 1, which Linux names
/// `MLX5_EVENT_QUEUE_TYPE_RQ` (Linux's SRQ event handler does not read the type; which value a
/// ConnectX puts there for an SRQ is not stated by a public source).
const EVENT_QUEUE_TYPE_SRQ: u8 = umlx_hwdesc::plain::eq::EVENT_QUEUE_TYPE_RQ;

/// How a responder request failed.
enum Fail {
    /// Drop silently.
    Drop,
    /// RNR NAK.
    Rnr,
    /// NAK with this code; the responder QP goes to error (with this CQE syndrome for the
    /// receive WQE in progress, if any).
    Nak(NakCode, u8),
}

/// The transport of the QP the last packet of a burst was for, kept out of its QP until the
/// burst ends or a packet for another QP comes ([`DataPath::receive_held`]): a stream's packets
/// take and put back their QP's state once per burst, not once each.
#[derive(Default)]
pub struct RxHold(Option<(u32, Box<QpTransport>)>);

impl DataPath<'_> {
    /// Processes one verified inbound RoCE packet.
    pub fn receive_packet(&mut self, pkt: &RocePacket<'_>, now: Instant) {
        let mut hold = RxHold::default();
        self.receive_held(&mut hold, pkt, now);
        self.release(hold);
    }

    /// [`DataPath::receive_packet`] of a packet of a burst, which leaves its QP's transport in
    /// `hold` for the burst's next packet; the burst ends with [`DataPath::release`]. Between the
    /// two, nothing but the burst's packets may use the held QP's transport: its packets, and
    /// what they send, use it through `hold`; commands, doorbells and timers run after.
    pub fn receive_held(&mut self, hold: &mut RxHold, pkt: &RocePacket<'_>, now: Instant) {
        self.lane.stats.rx_packets += 1;
        let dgid = pkt.dst_gid();
        let qpn = pkt.bth.dest_qp;
        let mut t = match hold.0.take() {
            Some((held, t)) if held == qpn => t,
            other => {
                if let Some((held, t)) = other {
                    self.put_transport(held, t);
                }
                let Some(taken) = self.take_transport(qpn) else {
                    self.lane.stats.rx_dropped += 1;
                    return;
                };
                taken
            }
        };
        self.receive_on(&mut t, dgid, pkt, now);
        hold.0 = Some((qpn, t));
    }

    /// Ends a burst: the held transport goes back to its QP.
    pub fn release(&mut self, hold: RxHold) {
        if let Some((qpn, t)) = hold.0 {
            self.put_transport(qpn, t);
        }
    }

    /// What a packet for the QP of `t`, in `state`, does.
    fn receive_on(&mut self, t: &mut QpTransport, dgid: [u8; 16], pkt: &RocePacket<'_>, now: Instant) {
        // The state is the transport's own: a packet before may have moved the QP to error.
        let state = t.state;
        // Only a packet for one of the port's GIDs is taken. The QP's own source GID is one (the
        // common case, checked without a look through the whole table).
        let own = |g: &Option<crate::firmware::vport::RoceAddr>| g.as_ref().is_some_and(|g| g.gid == dgid);
        let to_sgid = self.vport.gids.get(t.path.sgid_index).is_some_and(own);
        if !to_sgid && !self.vport.gids.iter().any(own) {
            self.lane.stats.rx_dropped += 1;
            return;
        }
        let ok_state = matches!(state, QpState::RTR | QpState::RTS | QpState::SQD | QpState::SQER);
        match (pkt.bth.opcode.transport(), t.path.ud, ok_state) {
            (Transport::Ud, true, true) => self.ud_receive(t, pkt),
            (Transport::Rc, false, true) => {
                if !to_sgid || pkt.src_gid() != t.path.rgid {
                    self.lane.stats.rx_dropped += 1;
                } else if pkt.info.operation.is_response() {
                    if state == QpState::RTS {
                        self.requester_receive(t, pkt, now);
                    }
                } else {
                    self.responder_receive(t, pkt);
                }
            }
            _ => self.lane.stats.rx_dropped += 1,
        }
    }

    // ------------------------------------------------------------------ receive WQEs

    /// Takes the next receive WQE of the QP's RQ or SRQ, if one is posted.
    fn take_recv_wqe(&mut self, t: &mut QpTransport) -> Option<RecvWqe> {
        if let Some(srqn) = t.path.srqn {
            let hca = self.hca();
            let mut srq = hca.objects.srqs.get(&srqn).map(Locked::lock)?;
            if srq.error {
                return None;
            }
            let counter = self.iommu.read_u32_be(srq.dbr).ok()? as u16;
            let avail = counter.wrapping_sub(srq.consumed as u16) as u32;
            if avail == 0 || avail > (1 << srq.log_size) {
                return None;
            }
            let idx = srq.head & ((1 << srq.log_size) - 1);
            let pd = srq.pd;
            let iova = srq.buf.iova((idx as u64) << srq.stride_shift)?;
            let (next_wqe_index, sges) = read_recv_wqe(&self.iommu, iova, 1 << srq.stride_shift, |b| {
                let (next_seg, list) = wqe_srq_next_seg::read_from_prefix(b).ok()?;
                Some((next_seg.next_wqe_index.get(), parse_sges(list)))
            })??;
            srq.head = next_wqe_index as u32;
            srq.consumed = srq.consumed.wrapping_add(1);
            let left = avail - 1;
            if srq.lwm > 0 && left < srq.lwm {
                srq.lwm = 0;
                drop(srq);
                let data = eqe_qp_srq {
                    type_: EVENT_QUEUE_TYPE_SRQ,
                    qp_srq_n: U32::new(srqn & cq::NUM_MASK_24),
                    ..Default::default()
                };
                self.post_event(EventType::SRQ_RQ_LIMIT, 0, &zerocopy::transmute!(data));
            }
            return Some(RecvWqe { counter: idx as u16, sges, pd });
        }
        if t.path.no_rq {
            return None;
        }
        let counter = self.iommu.read_u32_be(t.path.dbr).ok()? as u16;
        let avail = counter.wrapping_sub(t.rq_consumed as u16) as u32;
        if avail == 0 || avail > (1 << t.path.log_rq_size) {
            return None;
        }
        let idx = t.rq_consumed & ((1 << t.path.log_rq_size) - 1);
        let iova = t.path.buf.iova((idx as u64) << t.path.rq_stride_shift)?;
        let sges = read_recv_wqe(&self.iommu, iova, 1 << t.path.rq_stride_shift, parse_sges)?;
        let c = t.rq_consumed as u16;
        t.rq_consumed = t.rq_consumed.wrapping_add(1);
        Some(RecvWqe { counter: c, sges, pd: t.path.pd })
    }

    // ------------------------------------------------------------------ UD

    fn ud_receive(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>) {
        let Some(deth) = pkt.deth() else { return };
        let qkey = if t.path.qpn == 1 { umlx_wire::packet::GSI_QKEY } else { t.path.qkey };
        if deth.qkey != qkey {
            self.lane.stats.rx_dropped += 1;
            return;
        }
        let Some(wqe) = self.take_recv_wqe(t) else {
            self.lane.stats.rx_dropped += 1;
            return;
        };
        let mut grh = [0u8; 40];
        let (hdr, l3) = match pkt.ip() {
            IpHeader::Ipv4(_) => (pkt.frame.get(pkt.l3_offset..pkt.l3_offset + 20), cq::ROCE_L3_HEADER_TYPE_IPV4),
            _ => (pkt.frame.get(pkt.l3_offset..pkt.l3_offset + 40), cq::ROCE_L3_HEADER_TYPE_IPV6),
        };
        let hdr = hdr.unwrap_or(&[]);
        grh[40 - hdr.len()..].copy_from_slice(hdr);
        let mut data = crate::buffers::take();
        data.extend_from_slice(&grh);
        data.extend_from_slice(pkt.payload);
        match self.scatter(&wqe.sges, wqe.pd, 0, &data) {
            Ok(()) => {
                let imm = pkt.imm_dt().map(|i| i.imm);
                let op = if imm.is_some() { CqeOpcode::RESP_SEND_IMM } else { CqeOpcode::RESP_SEND };
                self.resp_cqe(&t.path, op, data.len() as u32, imm, wqe.counter, deth.src_qp, Some(l3), pkt.bth.se);
            }
            Err(synd) => {
                self.error_cqe(&t.path, true, 0, wqe.counter, synd);
                self.qp_to_error(t);
            }
        }
        crate::buffers::give(data);
    }

    // ------------------------------------------------------------------ RC responder

    fn send_ack(&mut self, t: &QpTransport, psn: u32, aeth: Aeth) {
        let mut bth = Bth::new(Opcode::RC_ACKNOWLEDGE, t.path.remote_qpn, psn);
        bth.ack_req = false;
        let ext = ExtHeaders { aeth: Some(aeth), ..Default::default() };
        let s = &mut self.lane.stats;
        match aeth.kind() {
            AethKind::Ack { .. } => s.acks_sent += 1,
            AethKind::RnrNak { .. } => s.rnr_naks_sent += 1,
            AethKind::Nak(NakCode::PsnSeqErr) => s.seq_naks_sent += 1,
            _ => s.err_naks_sent += 1,
        }
        self.emit(&t.path, None, bth, ext, &[]);
    }

    /// A request arrives. An ACK the QP still owes is dropped when this request owes a newer one
    /// and sends nothing else (the newer ACK covers both), kept when this request sends nothing,
    /// and otherwise sent ahead of what this request sends.
    fn responder_receive(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>) {
        let owed = t.pending_ack.take();
        let before = self.lane.outbox.len();
        self.responder_handle(t, pkt);
        let Some((psn, aeth)) = owed else { return };
        let sent_more = self.lane.outbox.len() > before;
        match (t.pending_ack.is_some(), sent_more) {
            // The QP is listed in `acks_pending` since the owed ACK; this request listed it again.
            (true, false) => {
                self.lane.acks_pending.pop();
            }
            (false, false) => t.pending_ack = Some((psn, aeth)),
            (_, true) => {
                self.send_ack(t, psn, aeth);
                self.lane.outbox[before..].rotate_right(1);
            }
        }
    }

    fn responder_handle(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>) {
        let psn = pkt.bth.psn;
        let diff = psn_cmp(psn, t.epsn);
        if diff > 0 {
            if !t.nak_sent {
                t.nak_sent = true;
                self.send_ack(t, t.epsn, Aeth::nak(t.msn, NakCode::PsnSeqErr));
            }
            return;
        }
        if diff < 0 {
            self.lane.stats.duplicates += 1;
            self.duplicate(t, pkt);
            return;
        }
        match self.execute_request(t, pkt) {
            Ok(()) => t.nak_sent = false,
            Err(Fail::Drop) => {}
            Err(Fail::Rnr) => {
                let code = t.path.min_rnr_nak;
                self.send_ack(t, psn, Aeth::rnr_nak(t.msn, code));
            }
            Err(Fail::Nak(code, synd)) => {
                self.send_ack(t, psn, Aeth::nak(t.msn, code));
                if let Some(RecvMsg::Send { wqe, .. }) = t.cur.take() {
                    let path = t.path.clone();
                    self.error_cqe(&path, true, 0, wqe.counter, synd);
                }
                self.qp_to_error(t);
            }
        }
    }

    /// Executes an in-order request packet; on success `epsn` moves on and ACKs are sent.
    fn execute_request(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>) -> Result<(), Fail> {
        let info = pkt.info;
        let psn = pkt.bth.psn;
        let mtu = t.path.mtu as usize;
        let inval = |s| Err(Fail::Nak(NakCode::InvalidRequest, s));
        let pl = pkt.payload;
        // Length rules: FIRST/MIDDLE exactly PMTU, LAST 1..PMTU, ONLY 0..PMTU.
        if matches!(info.operation, Operation::Send | Operation::RdmaWrite) {
            let ok = match info.position {
                Position::First | Position::Middle => pl.len() == mtu,
                Position::Last => !pl.is_empty() && pl.len() <= mtu,
                Position::Only => pl.len() <= mtu,
            };
            if !ok {
                return inval(CqeSyndrome::REMOTE_INVAL_REQ_ERR.0);
            }
        }
        match info.operation {
            Operation::Send => {
                match (info.position.starts(), &t.cur) {
                    (true, None) => {
                        let Some(wqe) = self.take_recv_wqe(t) else { return Err(Fail::Rnr) };
                        t.cur = Some(RecvMsg::Send { wqe, offset: 0 });
                    }
                    (false, Some(RecvMsg::Send { .. })) => {}
                    _ => return inval(CqeSyndrome::REMOTE_INVAL_REQ_ERR.0),
                }
                let Some(RecvMsg::Send { wqe, offset }) = t.cur.as_ref() else { return Err(Fail::Drop) };
                if let Err(synd) = self.scatter(&wqe.sges, wqe.pd, *offset as u64, pl) {
                    let code = if synd == CqeSyndrome::LOCAL_LENGTH_ERR.0 {
                        NakCode::InvalidRequest
                    } else {
                        NakCode::RemoteOpErr
                    };
                    return Err(Fail::Nak(code, synd));
                }
                if let Some(RecvMsg::Send { offset, .. }) = t.cur.as_mut() {
                    *offset += pl.len() as u32;
                }
                if info.position.ends() {
                    let Some(RecvMsg::Send { wqe, offset }) = t.cur.take() else { return Err(Fail::Drop) };
                    let imm = pkt.imm_dt().map(|i| i.imm);
                    let op = if imm.is_some() { CqeOpcode::RESP_SEND_IMM } else { CqeOpcode::RESP_SEND };
                    self.resp_cqe(&t.path, op, offset, imm, wqe.counter, t.path.remote_qpn, None, pkt.bth.se);
                    t.msn = psn_add(t.msn, 1);
                }
            }
            // The common case, a whole message in one packet without an immediate, on its own:
            // the general arm below does the same for it, at about 90 more instructions per
            // packet (its message state made, matched and dropped; callgrind, `umlx bench sim`).
            Operation::RdmaWrite
                if matches!(info.position, Position::Only) && pkt.imm_dt().is_none() && t.cur.is_none() =>
            {
                if !t.path.rwe {
                    return inval(0);
                }
                let Some(reth) = pkt.reth() else { return inval(0) };
                if reth.dma_len > 0 {
                    // Translated into a list made here, not returned in one: a returned list
                    // is copied whole from where it was just filled in, and that copy's wide
                    // reads of narrow fresh writes stall the core (perf, `umlx bench sim`).
                    let mut to = Chunks::default();
                    let (rkey, va, len) = (reth.rkey, reth.va, reth.dma_len as u64);
                    let pd = t.path.pd;
                    if self.mkey_visit(rkey, pd, va, len, Access::RemoteWrite, |iova, n| to.push(iova, n)).is_err() {
                        return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                    }
                    if pl.len() != reth.dma_len as usize {
                        return inval(0);
                    }
                    if !self.write_chunks(&to, pl) {
                        return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                    }
                } else if !pl.is_empty() {
                    return inval(0);
                }
                t.msn = psn_add(t.msn, 1);
            }
            Operation::RdmaWrite => {
                // A message's first packet makes its state here (its region translated once,
                // `fresh`); a later packet finds it in `t.cur`. It is kept there only while
                // packets are still to come: a message of one packet, or a packet refused,
                // leaves nothing (an RNR NAK for a WRITE ONLY with an immediate, then, lets its
                // retry start it again).
                let (rkey, va, len, offset, fresh) = if info.position.starts() {
                    if t.cur.is_some() || !t.path.rwe {
                        return inval(0);
                    }
                    let Some(reth) = pkt.reth() else { return inval(0) };
                    let mut whole = None;
                    if reth.dma_len > 0 {
                        match self.mkey_chunks(reth.rkey, t.path.pd, reth.va, reth.dma_len as u64, Access::RemoteWrite)
                        {
                            Ok(c) => whole = Some((self.objects.mkeys_destroyed, c)),
                            Err(_) => return Err(Fail::Nak(NakCode::RemoteAccessErr, 0)),
                        }
                    }
                    (reth.rkey, reth.va, reth.dma_len, 0, whole)
                } else {
                    let Some(RecvMsg::Write { rkey, va, len, offset, .. }) = t.cur else { return inval(0) };
                    (rkey, va, len, offset, None)
                };
                let end = offset as u64 + pl.len() as u64;
                if end > len as u64 || (info.position.ends() && end != len as u64) {
                    t.cur = None;
                    return inval(0);
                }
                // An immediate needs the receive WQE before anything is written.
                let recv = if pkt.imm_dt().is_some() {
                    match self.take_recv_wqe(t) {
                        Some(r) => Some(r),
                        None => return Err(Fail::Rnr),
                    }
                } else {
                    None
                };
                if !pl.is_empty() {
                    // The translation of the first packet serves every packet of the message
                    // while no MKey has been destroyed since; otherwise the packet's own range
                    // is translated (and refused if its key went away).
                    let whole = match &t.cur {
                        Some(RecvMsg::Write { whole, .. }) => whole.as_ref(),
                        _ => fresh.as_ref(),
                    };
                    let ok = match whole {
                        Some((made, c)) if *made == self.objects.mkeys_destroyed => {
                            self.write_chunks_from(c, offset as u64, pl)
                        }
                        _ => {
                            let va0 = va.wrapping_add(offset as u64);
                            let c = self.mkey_chunks(rkey, t.path.pd, va0, pl.len() as u64, Access::RemoteWrite);
                            c.is_ok_and(|c| self.write_chunks(&c, pl))
                        }
                    };
                    if !ok {
                        t.cur = None;
                        return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                    }
                }
                let offset = offset + pl.len() as u32;
                if info.position.ends() {
                    t.cur = None;
                    t.msn = psn_add(t.msn, 1);
                    if let (Some(r), Some(imm)) = (recv, pkt.imm_dt()) {
                        let op = CqeOpcode::RESP_WR_IMM;
                        self.resp_cqe(&t.path, op, len, Some(imm.imm), r.counter, t.path.remote_qpn, None, pkt.bth.se);
                    }
                } else if let Some(RecvMsg::Write { offset: at, .. }) = t.cur.as_mut() {
                    *at = offset;
                } else {
                    t.cur = Some(RecvMsg::Write { rkey, va, len, offset, whole: fresh });
                }
            }
            Operation::RdmaReadRequest => {
                if !t.path.rre || t.cur.is_some() {
                    return inval(0);
                }
                let Some(reth) = pkt.reth() else { return inval(0) };
                let Some(mut data) = self.read_source(t.path.pd, reth.rkey, reth.va, reth.dma_len) else {
                    return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                };
                let npkts = super::packets_for(reth.dma_len.into(), mtu as u32);
                t.msn = psn_add(t.msn, 1);
                self.push_resource(t, Resource::Read { psn, npkts, va: reth.va, rkey: reth.rkey, len: reth.dma_len });
                self.read_responses(t, psn, 0, &mut data, reth.dma_len);
                t.epsn = psn_add(psn, npkts);
                return Ok(());
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                if !t.path.rae || t.cur.is_some() {
                    return inval(0);
                }
                let Some(a) = pkt.atomic_eth() else { return inval(0) };
                if a.va & 7 != 0 {
                    return inval(0);
                }
                let c = self
                    .mkey_chunks(a.rkey, t.path.pd, a.va, 8, Access::RemoteAtomic)
                    .map_err(|_| Fail::Nak(NakCode::RemoteAccessErr, 0))?;
                let mut old = Vec::new();
                if !self.read_chunks(&c, &mut old) || old.len() != 8 {
                    return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                }
                let orig = u64::from_be_bytes(old.try_into().unwrap_or([0; 8]));
                let new = if info.operation == Operation::CompareSwap {
                    if orig == a.compare { a.swap_add } else { orig }
                } else {
                    orig.wrapping_add(a.swap_add)
                };
                if !self.write_chunks(&c, &new.to_be_bytes()) {
                    return Err(Fail::Nak(NakCode::RemoteAccessErr, 0));
                }
                t.msn = psn_add(t.msn, 1);
                self.push_resource(t, Resource::Atomic { psn, orig });
                self.atomic_ack(t, psn, orig);
                t.epsn = psn_add(psn, 1);
                return Ok(());
            }
            _ => return Err(Fail::Drop),
        }
        t.epsn = psn_add(psn, 1);
        if pkt.bth.ack_req {
            t.last_ack_psn = Some(psn);
            if t.pending_ack.is_none() {
                self.lane.acks_pending.push(t.path.qpn);
            }
            t.pending_ack = Some((psn, Aeth::ack(t.msn, AETH_ACK_UNLIMITED)));
        }
        Ok(())
    }

    /// Whether a QP owes a coalesced ACK.
    pub(crate) fn acks_pending(&self) -> bool {
        !self.lane.acks_pending.is_empty()
    }

    /// Sends the ACKs coalesced while the frames that arrived together were handled.
    pub(crate) fn flush_acks(&mut self) {
        if self.lane.acks_pending.is_empty() {
            return; // most runs of the device (every look that finds nothing owed)
        }
        let qpns = std::mem::take(&mut self.lane.acks_pending);
        for &qpn in &qpns {
            self.flush_ack(qpn);
        }
        super::reuse(&mut self.lane.acks_pending, qpns);
    }

    /// Sends the QP's coalesced ACK, if it owes one.
    fn flush_ack(&mut self, qpn: u32) {
        let Some(mut t) = self.take_transport(qpn) else { return };
        self.send_pending_ack(&mut t);
        self.put_transport(qpn, t);
    }

    /// Sends the coalesced ACK the QP of `t` owes, if any; whether it owed one.
    pub(super) fn send_pending_ack(&mut self, t: &mut QpTransport) -> bool {
        let Some((psn, aeth)) = t.pending_ack.take() else { return false };
        self.send_ack(t, psn, aeth);
        true
    }

    fn push_resource(&mut self, t: &mut QpTransport, r: Resource) {
        while t.resources.len() >= t.path.rra_max.max(1) as usize {
            t.resources.pop_front();
        }
        t.resources.push_back(r);
    }

    /// READ responses for the request at `req_psn`, starting at packet `from`: `len` bytes
    /// read from `data` as each packet is built.
    fn read_responses(&mut self, t: &QpTransport, req_psn: u32, from: u32, data: &mut Gather, len: u32) {
        let mtu = u64::from(t.path.mtu);
        let len = u64::from(len);
        let npkts = super::packets_for(len, t.path.mtu);
        let egress = self.egress(&t.path, None);
        for k in from..npkts {
            let off = u64::from(k) * mtu;
            let op = match (npkts == 1, k == 0, k + 1 == npkts) {
                (true, _, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (false, true, _) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (false, false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            };
            let bth = Bth::new(op, t.path.remote_qpn, psn_add(req_psn, k));
            let mut ext = ExtHeaders::default();
            if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
                ext.aeth = Some(Aeth::ack(t.msn, AETH_ACK_UNLIMITED));
            }
            // The range was checked readable before the first response (`Hca::read_source`); a
            // mapping removed since then ends the responses, and the requester's retry asks again.
            if !self.emit_gathered_on(&egress, bth, ext, data, off..(off + mtu).min(len)) {
                return;
            }
        }
    }

    fn atomic_ack(&mut self, t: &QpTransport, psn: u32, orig: u64) {
        let bth = Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, t.path.remote_qpn, psn);
        let ext = ExtHeaders {
            aeth: Some(Aeth::ack(t.msn, AETH_ACK_UNLIMITED)),
            atomic_ack_eth: Some(AtomicAckEth { orig_data: orig }),
            ..Default::default()
        };
        self.emit(&t.path, None, bth, ext, &[]);
    }

    fn duplicate(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>) {
        let psn = pkt.bth.psn;
        match pkt.info.operation {
            Operation::Send | Operation::RdmaWrite => {
                let prev = psn_add(t.epsn, 0xff_ffff);
                self.send_ack(t, prev, Aeth::ack(t.msn, AETH_ACK_UNLIMITED));
            }
            Operation::RdmaReadRequest => {
                let Some(reth) = pkt.reth() else { return };
                let found = t.resources.iter().find_map(|r| match *r {
                    Resource::Read { psn: p, npkts, va, rkey, len } => {
                        let d = psn_cmp(psn, p);
                        (d >= 0 && (d as u32) < npkts).then_some((p, d as u32, va, rkey, len))
                    }
                    _ => None,
                });
                let Some((p, k, va, rkey, len)) = found else {
                    return;
                };
                let off = k as u64 * t.path.mtu as u64;
                if reth.rkey != rkey || reth.va != va.wrapping_add(off) {
                    return;
                }
                let Some(mut data) = self.read_source(t.path.pd, rkey, va, len) else { return };
                self.read_responses(t, p, k, &mut data, len);
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let found = t.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                if let Some(orig) = found {
                    self.atomic_ack(t, psn, orig);
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ RC requester

    fn requester_receive(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>, now: Instant) {
        let psn = pkt.bth.psn;
        // Ignore anything outside what was sent.
        if psn_cmp(psn, t.una) < 0 || psn_cmp(psn, t.next_psn) >= 0 {
            return;
        }
        let before = t.una;
        match pkt.info.operation {
            Operation::Acknowledge => {
                let Some(aeth) = pkt.aeth() else { return };
                match aeth.kind() {
                    AethKind::Ack { .. } => self.ack_through(t, psn, now),
                    AethKind::RnrNak { timer } => {
                        self.ack_through(t, psn_add(psn, 0xff_ffff), now);
                        self.lane.stats.rnr_naks_received += 1;
                        if t.path.rnr_retry != 7 {
                            if t.rnr_left == 0 {
                                self.fail_front(t, CqeSyndrome::RNR_RETRY_EXC_ERR.0);
                                return;
                            }
                            t.rnr_left -= 1;
                        }
                        self.rewind(t, psn);
                        t.deadline = None;
                        t.rnr_until = Some(now + rnr_delay(timer));
                        return;
                    }
                    AethKind::Nak(NakCode::PsnSeqErr) => {
                        self.lane.stats.seq_naks_received += 1;
                        self.ack_through(t, psn_add(psn, 0xff_ffff), now);
                        // A NAK proves the peer alive: it does not use up the retry count (only
                        // the local ACK timeout does). One go-back per PSN until progress.
                        if t.retry_psn != Some(psn) {
                            t.retry_psn = Some(psn);
                            self.rewind(t, psn);
                        }
                    }
                    AethKind::Nak(code) => {
                        self.ack_through(t, psn_add(psn, 0xff_ffff), now);
                        let synd = match code {
                            NakCode::RemoteAccessErr => CqeSyndrome::REMOTE_ACCESS_ERR.0,
                            NakCode::RemoteOpErr => CqeSyndrome::REMOTE_OP_ERR.0,
                            _ => CqeSyndrome::REMOTE_INVAL_REQ_ERR.0,
                        };
                        self.fail_front(t, synd);
                        return;
                    }
                    AethKind::Reserved { .. } => return,
                }
            }
            Operation::RdmaReadResponse => self.read_response(t, pkt, now),
            Operation::AtomicAcknowledge => {
                // Earlier SEND/WRITEs are implicitly acknowledged.
                self.ack_through(t, psn_add(psn, 0xff_ffff), now);
                let Some(idx) = t.sq.iter().position(|w| !w.done && w.kind != Kind::Nop) else { return };
                let wq = &t.sq[idx];
                if wq.kind != Kind::Atomic || wq.first_psn != Some(psn) {
                    return;
                }
                let orig = pkt.atomic_ack_eth().map_or(0, |a| a.orig_data);
                let local = wq.local.first().copied();
                let pd = t.path.pd;
                let ok = local.is_some_and(|(lkey, va, _)| {
                    self.mkey_chunks(lkey, pd, va, 8, Access::LocalWrite)
                        .ok()
                        .is_some_and(|c| self.write_chunks(&c[..], &orig.to_be_bytes()))
                });
                if !ok {
                    t.sq[idx].err = Some(CqeSyndrome::LOCAL_PROT_ERR.0);
                    t.pump_from = 0;
                } else {
                    t.sq[idx].done = true;
                }
                t.una = psn_add(psn, 1);
            }
            _ => return,
        }
        if psn_cmp(t.una, before) > 0 {
            t.retry_psn = None;
            t.retry_left = t.path.retry_count;
            t.rnr_left = t.path.rnr_retry;
            t.deadline = None;
        }
        self.sq_progress(t, now);
    }

    /// Uses one retry; on exhaustion the front WQE fails with "transport retry exceeded".
    fn consume_retry(&mut self, t: &mut QpTransport) -> bool {
        if t.retry_left == 0 {
            self.fail_front(t, CqeSyndrome::TRANSPORT_RETRY_EXC_ERR.0);
            return false;
        }
        t.retry_left -= 1;
        true
    }

    /// The first incomplete WQE fails with `synd`; the QP goes to error.
    fn fail_front(&mut self, t: &mut QpTransport, synd: u8) {
        if let Some(wq) = t.sq.iter_mut().find(|w| !w.done && w.kind != Kind::Nop) {
            wq.err = Some(synd);
            t.pump_from = 0;
        }
        self.advance(t);
        if t.state != QpState::ERR {
            self.qp_to_error(t);
        }
    }

    /// Cumulative ACK through `psn`: completes SEND/WRITE WQEs whose last PSN is covered.
    fn ack_through(&mut self, t: &mut QpTransport, psn: u32, _now: Instant) {
        // A READ or atomic whose responses are still missing caps the acknowledgement: an ACK
        // beyond it means its responses were lost, and it is requested again.
        let mut cap = None;
        for w in t.sq.iter_mut() {
            if w.done || w.kind == Kind::Nop {
                continue;
            }
            let Some(first) = w.first_psn else { break };
            let last = psn_add(first, w.npkts.saturating_sub(1));
            match w.kind {
                Kind::Send | Kind::Write => {
                    if psn_cmp(psn, last) >= 0 {
                        w.done = true;
                    } else {
                        break;
                    }
                }
                _ => {
                    cap = Some(psn_add(first, w.resp));
                    break;
                }
            }
        }
        let mut next = psn_add(psn, 1);
        let mut retry = false;
        if let Some(c) = cap
            && psn_cmp(next, c) > 0
        {
            next = c;
            retry = true;
        }
        if psn_cmp(next, t.una) > 0 && psn_cmp(next, t.next_psn) <= 0 {
            t.una = next;
        }
        self.advance(t);
        // One re-request per stall point; the rest of an old response burst must not start a
        // retry storm (the retransmit timer covers a lost re-request).
        if retry && t.retry_psn != Some(t.una) && t.state == QpState::RTS {
            let una = t.una;
            t.retry_psn = Some(una);
            self.rewind(t, una);
        }
    }

    fn read_response(&mut self, t: &mut QpTransport, pkt: &RocePacket<'_>, now: Instant) {
        let psn = pkt.bth.psn;
        if let Some(aeth) = pkt.aeth()
            && !aeth.is_ack()
        {
            return;
        }
        self.ack_through(t, psn_add(psn, 0xff_ffff), now);
        let mtu = t.path.mtu as u64;
        let pd = t.path.pd;
        let Some(idx) = t.sq.iter().position(|w| !w.done && w.kind != Kind::Nop) else { return };
        let wq = &t.sq[idx];
        let Some(first) = wq.first_psn else { return };
        if wq.kind != Kind::Read {
            return;
        }
        let expect = psn_add(first, wq.resp);
        if psn != expect {
            return; // a gap: the timer (or a later retry) re-requests
        }
        let off = wq.resp as u64 * mtu;
        let pl = pkt.payload;
        let last = wq.resp + 1 == wq.npkts;
        let bad = off + pl.len() as u64 > wq.len as u64
            || (!last && pl.len() as u64 != mtu)
            || (last && off + pl.len() as u64 != wq.len as u64);
        if bad {
            t.sq[idx].err = Some(CqeSyndrome::BAD_RESP_ERR.0);
            t.pump_from = 0;
            self.advance(t);
            return;
        }
        if self.scatter(&wq.local, pd, off, pl).is_err() {
            t.sq[idx].err = Some(CqeSyndrome::LOCAL_PROT_ERR.0);
            t.pump_from = 0;
            self.advance(t);
            return;
        }
        let wq = &mut t.sq[idx];
        wq.resp += 1;
        if wq.resp >= wq.npkts {
            wq.done = true;
        }
        t.una = psn_add(psn, 1);
    }

    // ------------------------------------------------------------------ timers, state

    /// Transport timers: retransmission on local ACK timeout, the end of an RNR wait, and the
    /// flush of receive WQEs posted to a QP in error.
    pub(crate) fn transport_tick(&mut self, now: Instant) {
        // The QPs in number order, each looked up after the last (no list is made: a timer
        // that fires costs no allocation).
        let mut after = Bound::Unbounded;
        loop {
            let Some(qpn) = self.objects.xport.timed().range((after, Bound::Unbounded)).next().copied() else { break };
            after = Bound::Excluded(qpn);
            let Some(mut t) = self.take_transport(qpn) else {
                self.objects.xport.timed().remove(&qpn);
                if let Some(mut qp) = self.objects.qps.lock(&qpn) {
                    qp.timed = false;
                }
                continue;
            };
            match t.state {
                QpState::ERR => self.flush(&mut t),
                QpState::RTS => {
                    if t.rnr_until.is_some_and(|u| now >= u) {
                        self.sq_progress(&mut t, now);
                    } else if t.deadline.is_some_and(|d| now >= d) {
                        t.deadline = None;
                        self.lane.stats.timeouts += 1;
                        if t.waiting() && self.consume_retry(&mut t) {
                            let back = t.resume_psn();
                            t.una = back;
                            self.rewind(&mut t, back);
                            self.sq_progress(&mut t, now);
                        }
                    }
                }
                _ => {
                    t.deadline = None;
                    t.rnr_until = None;
                }
            }
            self.put_transport(qpn, t);
            self.leave_timers_if_idle(qpn);
        }
    }

    /// Applies a QP state change to the transport.
    pub(crate) fn transport_state_changed(&mut self, qpn: u32, from: QpState, to: QpState) {
        let Some(mut t) = self.take_transport(qpn) else { return };
        t.state = to;
        use umlx_hwdesc::ifc::qpc;
        let (mut next_rcv_psn, mut next_send_psn) = (0, 0);
        if let Some(qp) = self.objects.qps.lock(&qpn) {
            t.path = Path::from_qp(&qp);
            next_rcv_psn = qp.get(qpc::next_rcv_psn) as u32;
            next_send_psn = qp.get(qpc::next_send_psn) as u32;
        }
        match to {
            QpState::RST => {
                let path = std::mem::take(&mut t.path);
                *t = QpTransport { path, ..Default::default() };
            }
            QpState::RTR if from == QpState::INIT => {
                t.epsn = next_rcv_psn & 0xff_ffff;
                t.msn = 0;
            }
            QpState::RTS if from == QpState::RTR => {
                t.next_psn = next_send_psn & 0xff_ffff;
                t.una = t.next_psn;
                t.retry_left = t.path.retry_count;
                t.rnr_left = t.path.rnr_retry;
            }
            QpState::ERR if from != QpState::ERR => self.flush(&mut t),
            _ => {}
        }
        let now = Instant::now();
        if to == QpState::RTS {
            self.sq_fetch(&mut t);
            self.sq_progress(&mut t, now);
        }
        self.put_transport(qpn, t);
    }
}

impl Hca {
    /// When the transport's timers next need the engine: the earliest retransmit or RNR
    /// deadline of the QPs with a timer running, or `now` for one that needs service whatever
    /// the time (a QP in ERR whose receive queue is flushed as receives are posted).
    pub(crate) fn transport_next_due(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for qpn in self.objects.xport.timed().iter() {
            let Some(qp) = self.objects.qps.lock(qpn) else { continue };
            let due = match qp.transport.as_deref() {
                Some(t) if qp.state == QpState::RTS => match (t.deadline, t.rnr_until) {
                    (Some(d), Some(r)) => d.min(r),
                    // Still in the set with nothing timed (`put_transport`): not due.
                    (d, r) => match d.or(r) {
                        Some(due) => due,
                        None => continue,
                    },
                },
                _ => now,
            };
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        next
    }
}

/// The longest receive WQE: the largest stride the firmware accepts for a receive queue.
const RECV_WQE_MAX: usize = crate::firmware::caps::limits::MAX_WQE_SZ_RQ as usize;

/// The longest receive WQE read into a buffer zeroed by a few stores in line: a stride of up
/// to four scatter entries (or an SRQ's next segment and three). A longer one is read into a
/// buffer of [`RECV_WQE_MAX`] bytes, which costs a `memset` call to zero.
const RECV_WQE_SHORT: usize = 64;

/// DMA-reads the receive WQE of `len` bytes at `iova` into a buffer on the stack (no buffer
/// taken and given back per message) and hands `parse` the bytes read; `None` on a DMA fault
/// or a stride longer than any the firmware accepts.
fn read_recv_wqe<R>(iommu: &crate::iommu::Iommu, iova: u64, len: usize, parse: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // `buf`: the room for the WQE, `None` when the WQE is longer than the buffer.
    fn read<R>(
        iommu: &crate::iommu::Iommu,
        iova: u64,
        buf: Option<&mut [u8]>,
        parse: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let b = buf?;
        iommu.read(iova, b).ok()?;
        Some(parse(b))
    }
    if len <= RECV_WQE_SHORT {
        read(iommu, iova, [0u8; RECV_WQE_SHORT].get_mut(..len), parse)
    } else {
        read(iommu, iova, [0u8; RECV_WQE_MAX].get_mut(..len), parse)
    }
}

/// Parses a receive scatter list (data segments, ended by the invalid lkey or a zero byte
/// count).
fn parse_sges(b: &[u8]) -> ScatterList {
    let mut v = ScatterList::default();
    for s in b.chunks_exact(wqe_data_seg::SIZE) {
        let Ok(d) = wqe_data_seg::read_from_bytes(s) else { break };
        let (bc, lkey) = (d.byte_count.get(), d.lkey.get());
        if lkey == w::INVALID_LKEY || bc == 0 {
            break;
        }
        // A receive byte count is 31 bits (bit 31 marks inline data in send WQEs only).
        v.push((lkey, d.addr.get(), bc & !w::INLINE_SEG));
    }
    v
}
