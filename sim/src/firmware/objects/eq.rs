//! Event queues: CREATE_EQ, DESTROY_EQ and QUERY_EQ, EQ doorbells, and the writing of EQEs
//! (owner bits, overrun, the interrupt of an armed EQ).

use super::*;

/// An event queue.
#[derive(Clone, Debug)]
pub struct Eq {
    /// EQ number.
    pub eqn: u32,
    /// log2 entries.
    pub log_size: u32,
    /// UAR index of its doorbells.
    pub uar: u32,
    /// MSI-X vector.
    pub intr: u32,
    /// Buffer.
    pub buf: QueueBuf,
    /// Subscribed event types (four 64-bit masks).
    pub mask: [u64; 4],
    /// Entries written so far.
    pub producer: u32,
    /// Consumer counter from the last doorbell.
    pub consumer: u32,
    /// Whether the next EQE raises the interrupt.
    pub armed: bool,
    /// Overrun ignore.
    pub oi: bool,
    /// Whether the EQ overran (entries are dropped afterwards).
    pub overrun: bool,
}

impl Hca {
    pub(super) fn cmd_create_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_EQ.0;
        need_in(op, input, create_eq_in::SIZE_BYTES)?;
        let ctx = create_eq_in::eq_context_entry;
        let log_size = ctx.inner(eqc::log_eq_size).get(input) as u32;
        let uar = ctx.inner(eqc::uar_page).get(input) as u32;
        let intr = ctx.inner(eqc::intr).get(input) as u32;
        let log_page = ctx.inner(eqc::log_page_size).get(input);
        let page_offset = ctx.inner(eqc::page_offset).get(input);
        if log_size as u64 > limits::LOG_MAX_EQ_SZ || log_page > 18 || page_offset != 0 {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        if !self.objects.uars.contains(&uar) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        if intr >= self.cfg.num_msix {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let page_shift = page::page_shift(log_page);
        let npages = pages_for((plain::eqe::SIZE as u64) << log_size, page_shift, 0);
        let pas = read_pas(op, input, create_eq_in::SIZE_BYTES, npages)?;
        let mut mask = [0u64; 4];
        for (i, m) in mask.iter_mut().enumerate() {
            *m = create_eq_in::event_bitmask.elem(i).get(input);
        }
        let eqs = &self.objects.eqs;
        let eqn = alloc_num(|n| eqs.contains_key(&n), 0, 1 << limits::LOG_MAX_EQ).ok_or_else(|| no_res(op))?;
        let oi = ctx.inner(eqc::oi).get(input) != 0;
        self.objects.eqs.insert(
            eqn,
            Locked::new(Eq {
                eqn,
                log_size,
                uar,
                intr,
                buf: QueueBuf { pas, page_shift, offset: 0 },
                mask,
                producer: 0,
                consumer: 0,
                armed: false,
                oi,
                overrun: false,
            }),
        );
        let mut o = out(create_eq_out::SIZE_BYTES);
        create_eq_out::eq_number.set(&mut o, eqn as u64);
        Ok(o)
    }

    pub(super) fn cmd_destroy_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_EQ.0;
        need_in(op, input, destroy_eq_in::SIZE_BYTES)?;
        let eqn = destroy_eq_in::eq_number.get(input) as u32;
        if !self.objects.eqs.contains_key(&eqn) {
            return Err(bad_res(op));
        }
        if self.objects.cqs.values().any(|c| c.lock().eqn == eqn) {
            return Err(res_state(op, sy::OBJECT_IN_USE));
        }
        self.objects.eqs.remove(&eqn);
        Ok(out(destroy_eq_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_eq(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_EQ.0;
        need_in(op, input, query_eq_in::SIZE_BYTES)?;
        let eqn = query_eq_in::eq_number.get(input) as u32;
        let Some(eq) = self.objects.eqs.get_mut(&eqn).map(Locked::get_mut) else { return Err(bad_res(op)) };
        let mut o = out(query_eq_out::SIZE_BYTES + 8 * eq.buf.pas.len());
        let ctx = query_eq_out::eq_context_entry;
        ctx.inner(eqc::log_eq_size).set(&mut o, eq.log_size as u64);
        ctx.inner(eqc::uar_page).set(&mut o, eq.uar as u64);
        ctx.inner(eqc::intr).set(&mut o, eq.intr as u64);
        ctx.inner(eqc::log_page_size).set(&mut o, page::log_page_size(eq.buf.page_shift));
        ctx.inner(eqc::oi).set(&mut o, eq.oi as u64);
        ctx.inner(eqc::st).set(&mut o, if eq.armed { EqState::ARMED } else { EqState::FIRED }.0 as u64);
        ctx.inner(eqc::status).set(&mut o, if eq.overrun { EqStatus::EQ_WRITE_FAILURE } else { EqStatus::OK }.0 as u64);
        ctx.inner(eqc::consumer_counter).set(&mut o, (eq.consumer & plain::cq::NUM_MASK_24) as u64);
        ctx.inner(eqc::producer_counter).set(&mut o, (eq.producer & plain::cq::NUM_MASK_24) as u64);
        // QUERY_EQ carries one 64-bit mask (event types 0..63), not CREATE_EQ's four.
        query_eq_out::event_bitmask.set(&mut o, eq.mask[0]);
        for (i, p) in eq.buf.pas.iter().enumerate() {
            let off = query_eq_out::SIZE_BYTES + 8 * i;
            o[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        Ok(o)
    }

    /// Writes an EQE of `ty` on the lowest-numbered EQ subscribed to it
    /// ([`DataPath::post_event`]).
    pub(crate) fn post_event(&mut self, ty: EventType, sub_type: u8, data: &plain::EqeData) -> bool {
        self.data_path(|dp| dp.post_event(ty, sub_type, data))
    }

    /// UAR + 0x40 / 0x48: EQ consumer index update, with or without arming.
    pub(crate) fn eq_doorbell(&mut self, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let Some(eq) = self.objects.eqs.get_mut(&eqn).map(Locked::get_mut) else {
            self.stats.bad_doorbells += 1;
            return;
        };
        if eq.uar != uar {
            self.stats.bad_doorbells += 1;
            return;
        }
        // The doorbell carries 24 bits; extend against the producer.
        let full = (eq.producer & !plain::cq::NUM_MASK_24) | ci;
        eq.consumer = if full > eq.producer { full.wrapping_sub(1 << 24) } else { full };
        if arm {
            if eq.consumer != eq.producer {
                let v = eq.intr;
                self.signal_irq(v);
            } else {
                eq.armed = true;
            }
        }
    }
}

impl DataPath<'_> {
    /// Writes an EQE of `ty` on the lowest-numbered EQ subscribed to it. Returns whether an EQ
    /// took it. `data` is the EQE's payload ([`event_data`] builds it from a payload structure).
    pub(crate) fn post_event(&mut self, ty: EventType, sub_type: u8, data: &plain::EqeData) -> bool {
        let t = ty.0 as usize;
        let subscribed = |e: &Locked<Eq>| {
            let e = e.lock();
            (t < 256 && e.mask[t / 64] & (1 << (t % 64)) != 0).then_some(e.eqn)
        };
        let Some(eqn) = self.objects.eqs.values().find_map(subscribed) else { return false };
        self.write_eqe(eqn, ty.0, sub_type, data)
    }

    /// Writes one EQE on `eqn` and raises its interrupt if armed.
    pub(crate) fn write_eqe(&mut self, eqn: u32, ty: u8, sub_type: u8, data: &plain::EqeData) -> bool {
        let hca = self.hca();
        let Some(mut eq) = hca.objects.eqs.get(&eqn).map(Locked::lock) else { return false };
        if eq.overrun {
            return false;
        }
        let n = 1u32 << eq.log_size;
        if eq.producer.wrapping_sub(eq.consumer) >= n {
            if !eq.oi {
                eq.overrun = true;
                self.lane.device_stats.eq_overruns += 1;
                self.lane.fatal = Some(umlx_hwdesc::enums::HealthSyndrome::ASYNC_EQ_OVERRUN_ERR);
            }
            return false;
        }
        let idx = eq.producer & (n - 1);
        let owner = ((eq.producer >> eq.log_size) & 1) as u8;
        let Some(iova) = eq.buf.iova((idx as usize * plain::eqe::SIZE) as u64) else { return false };
        let e = plain::eqe { type_: ty, sub_type, data: *data, owner, ..Default::default() };
        let eqe: [u8; plain::eqe::SIZE] = zerocopy::transmute!(e);
        if !self.may_dma() {
            return false;
        }
        if self.iommu.write_owner_last(iova, &eqe, plain::eqe::owner).is_err() {
            return false;
        }
        eq.producer = eq.producer.wrapping_add(1);
        self.lane.device_stats.eqes += 1;
        if eq.armed {
            eq.armed = false;
            let v = eq.intr;
            drop(eq);
            self.signal_irq(v);
        }
        true
    }
}
