//! The async event queue and what reads it: its creation and doorbells, the drain that serves
//! page requests and queues user events, the user-facing event queue, and the device's event
//! thread (the work Linux does in its EQ interrupt handler and its health poll).

use super::*;
use std::os::fd::AsFd;

pub(super) struct EqState<B: Backend> {
    pub(super) eqn: u32,
    buf: DmaBuffer<B>,
    ci: u32,
    log_size: u32,
}

impl<B: Backend> EqState<B> {
    /// The byte offset of the EQE at the consumer index, if the device has handed it over
    /// ([`ready_eqe`]).
    fn next_ready(&self) -> Option<usize> {
        ready_eqe(&self.buf, self.ci, self.log_size)
    }
}

/// The byte offset in `buf` (an EQ of 2^`log_size` EQEs) of the EQE at consumer index `ci`,
/// if the device has handed it over: its owner bit matches the pass `ci` is on. The async EQ
/// and the completion EQs read their entries through this.
pub(crate) fn ready_eqe<B: Backend>(buf: &DmaBuffer<B>, ci: u32, log_size: u32) -> Option<usize> {
    let offset = (ci & ((1u32 << log_size) - 1)) as usize * eqk::EQE_SIZE;
    let owner = buf.read_u8_at(offset + eqe::owner) & eqk::EQE_OWNER_MASK;
    (owner as u32 == (ci >> log_size) & 1).then_some(offset)
}

impl<B: Backend> Hca<B> {
    pub(super) fn create_async_eq(&self, uar: u32) -> Result<u32> {
        let n = 1usize << ASYNC_EQ_LOG_SIZE;
        let buf = DmaBuffer::new(&self.space, n * eqk::EQE_SIZE, false)?;
        for i in 0..n {
            buf.write_u8(i * eqk::EQE_SIZE + eqe::owner, eqk::EQE_OWNER_INIT_VAL)?;
        }
        let npages = buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        let mut inp = cmd_in(CmdOpcode::CREATE_EQ, 0, create_eq_in::SIZE_BYTES + 8 * npages);
        let ctx = create_eq_in::eq_context_entry;
        ctx.inner(eqc::log_eq_size).set(&mut inp, ASYNC_EQ_LOG_SIZE as u64);
        ctx.inner(eqc::uar_page).set(&mut inp, uar as u64);
        ctx.inner(eqc::intr).set(&mut inp, ASYNC_VECTOR as u64);
        ctx.inner(eqc::log_page_size).set(&mut inp, 0);
        let mask: u64 = [
            EventType::CMD,
            EventType::PAGE_REQUEST,
            EventType::PORT_CHANGE,
            EventType::CQ_ERROR,
            EventType::PATH_MIG,
            EventType::COMM_EST,
            EventType::SQ_DRAINED,
            EventType::WQ_CATAS_ERROR,
            EventType::PATH_MIG_FAILED,
            EventType::WQ_INVAL_REQ_ERROR,
            EventType::WQ_ACCESS_ERROR,
            EventType::SRQ_CATAS_ERROR,
            EventType::SRQ_LAST_WQE,
            EventType::SRQ_RQ_LIMIT,
        ]
        .iter()
        .fold(0, |m, t| m | (1u64 << t.0));
        create_eq_in::event_bitmask.elem(0).set(&mut inp, mask);
        for i in 0..npages {
            let off = create_eq_in::SIZE_BYTES + 8 * i;
            inp[off..off + 8].copy_from_slice(&(buf.iova() + (ADAPTER_PAGE_SIZE * i) as u64).to_be_bytes());
        }
        let out = self.exec(&inp, create_eq_out::SIZE_BYTES)?;
        let eqn = create_eq_out::eq_number.get(&out) as u32;
        *self.eq.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(EqState { eqn, buf, ci: 0, log_size: ASYNC_EQ_LOG_SIZE });
        self.eq_doorbell(eqn, 0, true);
        Ok(eqn)
    }

    fn eq_doorbell(&self, eqn: u32, ci: u32, arm: bool) {
        self.backend.write32(eq_doorbell_offset(self.uar(), arm), eq_doorbell_value(eqn, ci));
    }

    /// Drains the async EQ: completes nothing itself for commands (their owners see the
    /// ownership bit), serves page requests, queues user events, re-arms the EQ, checks health.
    /// One drain at a time: when it returns, every event the EQ held when it was called has
    /// been handled, whichever thread took it (the event thread may have taken a page request
    /// and still be serving it).
    pub fn process_events(&self) -> Result<()> {
        let _one_at_a_time = self.drain.lock().unwrap_or_else(|e| e.into_inner());
        self.check_health()?;
        let mut page_reqs = Vec::new();
        {
            let mut g = self.eq.lock().unwrap_or_else(|e| e.into_inner());
            let Some(eq) = g.as_mut() else { return Ok(()) };
            let mut consumed = 0;
            while let Some(offset) = eq.next_ready() {
                dma_rmb();
                let mut raw = [0u8; eqe::SIZE];
                eq.buf.read_bytes(offset, &mut raw)?;
                eq.ci = eq.ci.wrapping_add(1);
                consumed += 1;
                let Ok(e) = eqe::read_from_bytes(&raw[..]) else { continue };
                let ty = EventType(e.type_);
                let data = &e.data[..];
                match ty {
                    EventType::CMD => {}
                    EventType::PAGE_REQUEST => {
                        if let Ok((p, _)) = eqe_page_req::read_from_prefix(data) {
                            page_reqs.push(p.num_pages.get());
                        }
                    }
                    EventType::PORT_CHANGE => {
                        if let Ok((p, _)) = eqe_port_state::read_from_prefix(data) {
                            self.push_event(AsyncEvent {
                                event_type: ty,
                                sub_type: e.sub_type,
                                object: ((p.port >> eqk::PORT_STATE_PORT_SHIFT) & eqk::PORT_STATE_PORT_MASK) as u32,
                                syndrome: 0,
                            })
                        }
                    }
                    EventType::CQ_ERROR => {
                        if let Ok((c, _)) = eqe_cq_err::read_from_prefix(data) {
                            self.push_event(AsyncEvent {
                                event_type: ty,
                                sub_type: 0,
                                object: c.cqn.get() & umlx_hwdesc::plain::cq::NUM_MASK_24,
                                syndrome: c.syndrome,
                            })
                        }
                    }
                    _ => {
                        if let Ok((q, _)) = eqe_qp_srq::read_from_prefix(data) {
                            self.push_event(AsyncEvent {
                                event_type: ty,
                                sub_type: e.sub_type,
                                object: q.qp_srq_n.get() & umlx_hwdesc::plain::cq::NUM_MASK_24,
                                syndrome: 0,
                            })
                        }
                    }
                }
                if consumed % 64 == 0 {
                    let (eqn, ci) = (eq.eqn, eq.ci);
                    self.eq_doorbell(eqn, ci, false);
                }
            }
            let (eqn, ci) = (eq.eqn, eq.ci);
            self.eq_doorbell(eqn, ci, true);
        }
        for n in page_reqs {
            if n > 0 {
                self.give_pages(n as usize)?;
            } else if n < 0 {
                self.take_pages(n.unsigned_abs() as usize)?;
            }
        }
        Ok(())
    }

    /// Whether the async EQ holds an EQE the driver has not consumed.
    pub(super) fn async_eq_has_event(&self) -> bool {
        self.eq.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|eq| eq.next_ready().is_some())
    }

    pub(super) fn push_event(&self, e: AsyncEvent) {
        let mut q = self.events.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(e);
        self.signal_program();
    }

    /// Makes the program's async event fd readable (with the event thread; called with the
    /// event queue locked, so a program's wait and the queue stay in step).
    fn signal_program(&self) {
        if let Some(fd) = &self.events_fd {
            crate::event::signal(&**fd);
        }
    }

    /// Takes the next user-visible async event, if any (call `process_events` first, or wait
    /// on the async eventfd).
    pub fn next_event(&self) -> Option<AsyncEvent> {
        let mut q = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let e = q.pop_front();
        // The program may have cleared the eventfd while more events waited: it stays readable
        // while any does. (The driver never clears it: the program's wait does, and a look
        // that then finds nothing is a spurious wake-up, as the program expects of any fd.)
        if e.is_some() && !q.is_empty() {
            self.signal_program();
        }
        e
    }

    /// The eventfd a program waits on for async events: with the event thread
    /// ([`HcaOptions::event_thread`]), one the driver signals when it queues a user event;
    /// without it, the async EQ's interrupt eventfd (readable when the EQ needs draining).
    pub fn async_event_fd(&self) -> Option<Arc<OwnedFd>> {
        self.events_fd.clone().or_else(|| self.backend.irq_eventfd(ASYNC_VECTOR))
    }

    /// Whether the event thread runs.
    pub(super) fn event_thread_runs(&self) -> bool {
        self.event_thread.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Starts the event thread ([`HcaOptions::event_thread`]).
    pub(super) fn start_event_thread(self: &Arc<Self>) -> Result<()> {
        let os = |op: &str| {
            let op = op.to_string();
            move |source| Error::Os { op, source }
        };
        let stop = crate::event::new_eventfd(true).map_err(os("eventfd"))?;
        let watch = stop.try_clone().map_err(os("dup of the event thread's stop eventfd"))?;
        let irq = if self.opts.interrupts { self.backend.irq_eventfd(ASYNC_VECTOR) } else { None };
        let hca = self.clone();
        let handle = std::thread::Builder::new()
            .name("umlx-events".into())
            .spawn(move || event_thread(&hca, irq, watch))
            .map_err(os("spawning the device's event thread"))?;
        *self.event_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(EventThread { stop, handle });
        Ok(())
    }

    /// Stops the event thread and waits for it to end (unless this is that thread: a fatal
    /// finding there ends it anyway).
    pub(super) fn stop_event_thread(&self) {
        let Some(t) = self.event_thread.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        crate::event::signal(&t.stop);
        if t.handle.thread().id() != std::thread::current().id() {
            let _ = t.handle.join();
        }
    }
}

/// BAR0 offset of the EQ doorbell of `uar` (with or without arming).
pub(crate) fn eq_doorbell_offset(uar: u32, arm: bool) -> usize {
    (uar as usize) * uark::UAR_PAGE_SIZE + if arm { uark::EQ_DOORBELL_ARM } else { uark::EQ_DOORBELL_NO_ARM }
}

/// The value written to an EQ doorbell.
pub(crate) fn eq_doorbell_value(eqn: u32, ci: u32) -> u32 {
    (eqn << eqk::DB_EQN_SHIFT) | (ci & eqk::DB_CI_MASK)
}

/// How often the event thread checks the device's health when nothing wakes it sooner (Linux
/// polls every 2 s, `MLX5_HEALTH_POLL_INTERVAL`; a stuck health counter is fatal after
/// [`HEALTH_WINDOW`]).
pub const HEALTH_POLL: Duration = Duration::from_secs(1);

/// How often the event thread of a device without interrupts looks at its async EQ.
const POLLED_EQ_LOOK: Duration = Duration::from_millis(10);

/// The event thread, as the HCA keeps it: the eventfd that stops it, and its handle.
pub(super) struct EventThread {
    stop: OwnedFd,
    handle: std::thread::JoinHandle<()>,
}

/// The device's event thread: drains the async EQ when its interrupt fires (or every
/// [`POLLED_EQ_LOOK`] without one), checks health every [`HEALTH_POLL`], and ends when `stop` is
/// signalled (teardown) or when the device is dead (its fatal event is queued). It holds the
/// [`Hca`], never the [`OpenHca`] whose drop tears the device down.
fn event_thread<B: Backend>(hca: &Hca<B>, irq: Option<Arc<OwnedFd>>, stop: OwnedFd) {
    let mut next_health = Instant::now() + HEALTH_POLL;
    loop {
        let mut wait = next_health.saturating_duration_since(Instant::now());
        if irq.is_none() {
            wait = wait.min(POLLED_EQ_LOOK);
        }
        let (interrupted, stopped) = crate::event::wait_either(irq.as_deref().map(|fd| fd.as_fd()), stop.as_fd(), wait);
        if stopped {
            return;
        }
        if let Some(fd) = irq.as_deref().filter(|_| interrupted) {
            crate::event::drain(fd);
        }
        // An error here is the device's (its health, a page request it could not be given):
        // the next look, or the program's next call, reports it. A drain checks health first.
        if interrupted || hca.async_eq_has_event() {
            let _ = hca.process_events();
        } else if Instant::now() >= next_health {
            let _ = hca.check_health();
        } else {
            continue;
        }
        next_health = Instant::now() + HEALTH_POLL;
        if hca.is_fatal() {
            return;
        }
    }
}
