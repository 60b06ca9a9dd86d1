//! The small objects: UARs, PDs, transport domains and Q counters, with their commands.

use super::*;

/// A Q counter set.
#[derive(Clone, Copy, Debug, Default)]
pub struct QCounter {
    /// Receive WQEs missing when a message arrived (RNR).
    pub out_of_buffer: u32,
    /// Out-of-sequence packets received.
    pub out_of_sequence: u32,
    /// Duplicate requests received.
    pub duplicate_request: u32,
    /// RNR NAKs received.
    pub rnr_nak_retry_err: u32,
    /// Packet sequence errors (NAK) received.
    pub packet_seq_err: u32,
    /// Local ACK timeouts.
    pub local_ack_timeout_err: u32,
    /// RDMA WRITE requests received.
    pub rx_write_requests: u32,
    /// RDMA READ requests received.
    pub rx_read_requests: u32,
    /// Atomic requests received.
    pub rx_atomic_requests: u32,
    /// Transport retries exceeded.
    pub resp_local_length_error: u32,
}

impl Hca {
    pub(super) fn cmd_alloc_uar(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_UAR.0;
        let limit = (crate::firmware::BAR0_SIZE >> 12).min(1 << limits::LOG_MAX_UAR);
        let uars = &self.objects.uars;
        let n = alloc_num(|n| uars.contains(&n), crate::firmware::FIRST_UAR_INDEX, limit).ok_or_else(|| no_res(op))?;
        self.objects.uars.insert(n);
        let mut o = out(alloc_uar_out::SIZE_BYTES);
        alloc_uar_out::uar.set(&mut o, n as u64);
        Ok(o)
    }

    pub(super) fn cmd_dealloc_uar(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_UAR.0;
        need_in(op, input, dealloc_uar_in::SIZE_BYTES)?;
        let n = dealloc_uar_in::uar.get(input) as u32;
        if !self.objects.uars.contains(&n) {
            return Err(bad_res(op));
        }
        let o = &self.objects;
        if o.eqs.values().any(|e| e.lock().uar == n)
            || o.cqs.values().any(|c| c.lock().uar == n)
            || o.qps.values().any(|q| q.lock().uar == n)
        {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.uars.remove(&n);
        Ok(out(dealloc_uar_out::SIZE_BYTES))
    }

    pub(super) fn cmd_alloc_pd(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_PD.0;
        let pds = &self.objects.pds;
        let n = alloc_num(|n| pds.contains(&n), 1, 1 << limits::LOG_MAX_PD).ok_or_else(|| no_res(op))?;
        self.objects.pds.insert(n);
        let mut o = out(alloc_pd_out::SIZE_BYTES);
        alloc_pd_out::pd.set(&mut o, n as u64);
        Ok(o)
    }

    pub(super) fn cmd_dealloc_pd(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_PD.0;
        need_in(op, input, dealloc_pd_in::SIZE_BYTES)?;
        let n = dealloc_pd_in::pd.get(input) as u32;
        if !self.objects.pds.contains(&n) {
            return Err(bad_res(op));
        }
        let o = &self.objects;
        if o.qps.values().any(|q| q.lock().pd == n)
            || o.mkeys.values().any(|m| m.pd == n)
            || o.srqs.values().any(|s| s.lock().pd == n)
        {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.pds.remove(&n);
        Ok(out(dealloc_pd_out::SIZE_BYTES))
    }

    pub(super) fn cmd_alloc_td(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_TRANSPORT_DOMAIN.0;
        let tds = &self.objects.tds;
        let n = alloc_num(|n| tds.contains(&n), 1, 1 << limits::LOG_MAX_TRANSPORT_DOMAIN).ok_or_else(|| no_res(op))?;
        self.objects.tds.insert(n);
        let mut o = out(alloc_transport_domain_out::SIZE_BYTES);
        alloc_transport_domain_out::transport_domain.set(&mut o, n as u64);
        Ok(o)
    }

    pub(super) fn cmd_dealloc_td(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_TRANSPORT_DOMAIN.0;
        need_in(op, input, dealloc_transport_domain_in::SIZE_BYTES)?;
        let n = dealloc_transport_domain_in::transport_domain.get(input) as u32;
        if !self.objects.tds.remove(&n) {
            return Err(bad_res(op));
        }
        Ok(out(dealloc_transport_domain_out::SIZE_BYTES))
    }

    pub(super) fn cmd_alloc_q_counter(&mut self) -> CmdResult {
        let op = CmdOpcode::ALLOC_Q_COUNTER.0;
        let qc = &self.objects.qcounters;
        let n = alloc_num(|n| qc.contains_key(&n), 1, 256).ok_or_else(|| no_res(op))?;
        self.objects.qcounters.insert(n, QCounter::default());
        let mut o = out(alloc_q_counter_out::SIZE_BYTES);
        alloc_q_counter_out::counter_set_id.set(&mut o, n as u64);
        Ok(o)
    }

    pub(super) fn cmd_dealloc_q_counter(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DEALLOC_Q_COUNTER.0;
        need_in(op, input, dealloc_q_counter_in::SIZE_BYTES)?;
        let n = dealloc_q_counter_in::counter_set_id.get(input) as u32;
        if self.objects.qcounters.remove(&n).is_none() {
            return Err(bad_res(op));
        }
        Ok(out(dealloc_q_counter_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_q_counter(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_Q_COUNTER.0;
        need_in(op, input, query_q_counter_in::SIZE_BYTES)?;
        let n = query_q_counter_in::counter_set_id.get(input) as u32;
        let clear = query_q_counter_in::clear.get(input) != 0;
        let Some(c) = self.objects.qcounters.get_mut(&n) else { return Err(bad_res(op)) };
        let mut o = out(query_q_counter_out::SIZE_BYTES);
        use query_q_counter_out as q;
        q::out_of_buffer.set(&mut o, c.out_of_buffer as u64);
        q::out_of_sequence.set(&mut o, c.out_of_sequence as u64);
        q::duplicate_request.set(&mut o, c.duplicate_request as u64);
        q::rnr_nak_retry_err.set(&mut o, c.rnr_nak_retry_err as u64);
        q::packet_seq_err.set(&mut o, c.packet_seq_err as u64);
        q::local_ack_timeout_err.set(&mut o, c.local_ack_timeout_err as u64);
        q::rx_write_requests.set(&mut o, c.rx_write_requests as u64);
        q::rx_read_requests.set(&mut o, c.rx_read_requests as u64);
        q::rx_atomic_requests.set(&mut o, c.rx_atomic_requests as u64);
        if clear {
            *c = QCounter::default();
        }
        Ok(o)
    }
}
