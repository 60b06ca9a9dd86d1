//! The data path's view of the device ([`DataPath`]), and the hooks between the firmware's
//! objects and the data path (doorbells, QP state changes). The transport itself lives in
//! `crate::transport`.

use super::Hca;
use crate::transport::Lane;
use std::io::Write;
use std::sync::PoisonError;
use std::time::Instant;
use umlx_hwdesc::enums::QpState;
use umlx_hwdesc::plain::wqe;
use umlx_wire::packet::Checksums;

// The doorbell's two dwords are the control segment's first two.
const _: () =
    assert!(umlx_hwdesc::plain::wqe_ctrl_seg::opmod_idx_opcode == 0 && umlx_hwdesc::plain::wqe_ctrl_seg::qpn_ds == 4);

/// The device as a run of the data path sees it: shared, with the objects it changes each
/// under a lock of its own ([`super::objects::Locked`]), and the run's [`Lane`] for the rest.
/// It derefs to the [`Hca`] for what the data path only reads (keys, translations, GIDs, the
/// PCI configuration).
pub struct DataPath<'a> {
    hca: &'a Hca,
    /// The run's frames, ACKs owed, counters and scratch.
    pub(crate) lane: &'a mut Lane,
    /// The port a run beside others sends on as it goes ([`DataPath::send_built`]); `None` for
    /// a run of the whole device, which sends after it.
    wire: Option<&'a crate::port::Port>,
}

impl std::ops::Deref for DataPath<'_> {
    type Target = Hca;
    fn deref(&self) -> &Hca {
        self.hca
    }
}

impl<'a> DataPath<'a> {
    /// The device `hca` run on `lane`.
    pub(crate) fn new(hca: &'a Hca, lane: &'a mut Lane) -> DataPath<'a> {
        DataPath { hca, lane, wire: None }
    }

    /// The device `hca` run on `lane` beside other threads' runs, sending on `wire` as it goes.
    pub(crate) fn sending_on(hca: &'a Hca, lane: &'a mut Lane, wire: &'a crate::port::Port) -> DataPath<'a> {
        DataPath { hca, lane, wire: Some(wire) }
    }

    /// Sends the frames built so far, on a run that sends as it goes (one beside others'):
    /// what it does before it lets go of a QP's transport, so that whichever threads build a
    /// QP's frames, they reach the wire in the order they were built. (Sent after the transport
    /// was put back, a run's frames could follow the ones another thread built next.) Sending
    /// runs no device: the ports reached are noted in the lane, to be told when the run holds
    /// no transport.
    pub(crate) fn send_built(&mut self) {
        if let Some(wire) = self.wire
            && !self.lane.outbox.is_empty()
        {
            let checksums = self.lane.take_outbox_checksums();
            wire.send_from(&mut self.lane.outbox, checksums, &mut self.lane.reached);
        }
    }

    /// The device, for as long as the run lasts (not tied to this borrow of the view): what a
    /// queue's lock guard is taken from, so that the run can go on while it holds it.
    pub(crate) fn hca(&self) -> &'a Hca {
        self.hca
    }

    /// Whether the device may do DMA now (bus mastering is on); a DMA refused is counted.
    pub(crate) fn may_dma(&mut self) -> bool {
        let on = self.bus_master();
        if !on {
            self.lane.device_stats.dma_without_bus_master += 1;
        }
        on
    }

    /// Notes a timer due at `due` ([`Hca::note_due`] when the run ends).
    pub(crate) fn note_due(&mut self, due: Instant) {
        if self.lane.due.is_none_or(|d| due < d) {
            self.lane.due = Some(due);
        }
    }

    /// Signals MSI-X `vector`.
    pub(crate) fn signal_irq(&mut self, vector: u32) {
        if let Some(Some(f)) = self.irqs.get(vector as usize) {
            // An eventfd takes an 8-byte native-endian count; a full counter (EAGAIN) still
            // means "signalled".
            let _ = (&*f).write(&1u64.to_ne_bytes());
            self.lane.device_stats.interrupts += 1;
        }
    }

    /// A send doorbell written to UAR `uar` ([`Hca::sq_doorbell_uar`]): counted as a bad
    /// doorbell if the UAR is not allocated.
    pub(crate) fn uar_sq_doorbell(&mut self, uar: u32, value: u64) {
        if self.objects.uars.contains(&uar) {
            self.sq_doorbell(uar, value);
        } else {
            self.lane.device_stats.bad_doorbells += 1;
        }
    }

    /// UAR + 0x800..: SQ doorbell (the first 8 bytes of the WQE's control segment). The WQEs are
    /// taken from the SQ buffer up to the doorbell record's send counter (a BlueFlame copy is
    /// not used beyond its first 8 bytes).
    fn sq_doorbell(&mut self, uar: u32, value: u64) {
        // The value is the control segment's first 8 bytes (opmod_idx_opcode, qpn_ds) as stored.
        let bytes = value.to_be_bytes();
        let (Ok(idx_opcode), Ok(qpn_ds)) = (bytes[..4].try_into(), bytes[4..].try_into()) else { return };
        let (idx_opcode, qpn_ds) = (u32::from_be_bytes(idx_opcode), u32::from_be_bytes(qpn_ds));
        let qpn = qpn_ds >> wqe::WQE_CTRL_QPN_SHIFT;
        let rang = match self.objects.qps.lock(&qpn) {
            Some(mut qp) if qp.uar == uar => {
                qp.sq_doorbell = ((idx_opcode >> wqe::WQE_CTRL_WQE_INDEX_SHIFT) & wqe::WQE_CTRL_WQE_INDEX_MASK) as u16;
                if qp.transport.is_none() {
                    // Another run holds the QP's transport: it serves the send queue before
                    // it puts the transport back (`put_transport`), as a NIC's pipeline takes a
                    // doorbell for a queue it is working on, and this thread goes on.
                    qp.sq_rang = true;
                    return;
                }
                true
            }
            _ => false,
        };
        if rang {
            self.sq_service(qpn, crate::port::run_now());
        } else {
            self.lane.device_stats.bad_doorbells += 1;
        }
    }
}

/// The slot of [`Hca::spare_lanes`] this thread uses: threads are given slots in turn.
pub(crate) fn lane_slot() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % super::SPARE_LANE_SLOTS;
    }
    SLOT.with(|s| *s)
}

impl Hca {
    /// Runs `f` on the data path's view of the device, with the device's own lane: what the
    /// command path and the device's runs do while they hold the device whole. Then what the
    /// run counted, armed or raised joins the device's; its frames stay in the lane for
    /// [`Hca::take_outbox`].
    pub(crate) fn data_path<R>(&mut self, f: impl FnOnce(&mut DataPath<'_>) -> R) -> R {
        let mut lane = self.lane.take().unwrap_or_default();
        let r = f(&mut DataPath::new(self, &mut lane));
        self.absorb(&mut lane);
        self.lane = Some(lane);
        r
    }

    /// Applies the timer a run armed and the fatal error it raised on `lane` to the device.
    /// (Its counts wait in the lane until they are read: [`Hca::collect_counts`].)
    fn absorb(&mut self, lane: &mut Lane) {
        if let Some(due) = lane.due.take() {
            self.note_due(due);
        }
        if let Some(synd) = lane.fatal.take() {
            self.inject_fatal(synd);
        }
    }

    /// A lane for a run on a shared borrow of the device: a spare one, or a new one when every
    /// spare is in use (as many are made as runs were ever at once). Give it back with
    /// [`Hca::put_spare_lane`], its frames sent, before letting go of the device.
    pub(crate) fn take_spare_lane(&self) -> Box<Lane> {
        self.spare_lanes[lane_slot()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    /// Gives back a lane [`Hca::take_spare_lane`] gave. The timer it armed is the caller's to
    /// publish (it takes `due` first); a fatal error it raised waits in it for the next holder
    /// of the whole device ([`Hca::absorb_spare_lanes`]).
    pub(crate) fn put_spare_lane(&self, lane: Box<Lane>) {
        if lane.fatal.is_some() {
            self.spare_fatal.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.spare_lanes[lane_slot()].lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(lane);
    }

    /// Whether a spare lane holds a fatal error not yet applied ([`Hca::absorb_spare_lanes`]).
    pub(crate) fn spare_lane_fatal(&self) -> bool {
        self.spare_fatal.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Applies the fatal errors and timers the spare lanes hold, if any holds an error: what a
    /// thread that takes the whole device does first.
    pub(crate) fn absorb_spare_lanes(&mut self) {
        if !*self.spare_fatal.get_mut() {
            return;
        }
        *self.spare_fatal.get_mut() = false;
        for slot in 0..self.spare_lanes.len() {
            let mut lanes = std::mem::take(self.spare_lanes[slot].0.get_mut().unwrap_or_else(PoisonError::into_inner));
            for lane in &mut lanes {
                self.absorb(lane);
            }
            *self.spare_lanes[slot].0.get_mut().unwrap_or_else(PoisonError::into_inner) = lanes;
        }
    }

    /// Called after a QP changed state.
    pub(crate) fn qp_state_changed(&mut self, qpn: u32, from: QpState, to: QpState) {
        self.data_path(|dp| dp.transport_state_changed(qpn, from, to));
    }

    /// Called after a QP was destroyed.
    pub(crate) fn qp_destroyed(&mut self, qpn: u32) {
        self.objects.xport.timed.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&qpn);
    }

    /// Fills the transport fields of a QUERY_QP output.
    pub(crate) fn qp_query_transport(&self, qpn: u32, out: &mut [u8]) {
        use umlx_hwdesc::ifc::{qpc, query_qp_out};
        let Some(qp) = self.objects.qps.lock(&qpn) else { return };
        let Some(t) = qp.transport.as_deref() else { return };
        let q = query_qp_out::qpc;
        if qp.state != QpState::RST && qp.state != QpState::INIT {
            q.inner(qpc::next_rcv_psn).set(out, t.epsn as u64);
        }
        if matches!(qp.state, QpState::RTS | QpState::SQD | QpState::SQER) {
            q.inner(qpc::next_send_psn).set(out, t.next_psn as u64);
        }
    }

    /// Frames the transport queued for the wire since the last call, and whether their IPv4
    /// header checksum and ICRC are computed: `Defer` when any was built without them (then
    /// the port's egress fills what it must, [`umlx_wire::packet::fill_checksums`]).
    pub fn take_outbox(&mut self) -> (Vec<Vec<u8>>, Checksums) {
        let x = self.lane.get_or_insert_default();
        (std::mem::take(&mut x.outbox), x.take_outbox_checksums())
    }

    /// Has the frames built from now on get their IPv4 header checksum and ICRC from the
    /// builder (`Compute`: the port's egress needs them) or not (`Defer`).
    pub fn set_egress_checksums(&mut self, checksums: Checksums) {
        self.lane.get_or_insert_default().compute_checksums = checksums == Checksums::Compute;
    }

    /// Gives back an emptied outbox [`Hca::take_outbox`] returned, so that its allocation
    /// holds the next frames.
    pub fn recycle_outbox(&mut self, out: Vec<Vec<u8>>) {
        crate::transport::reuse(&mut self.lane.get_or_insert_default().outbox, out);
    }

    /// Adds the counts waiting in the device's lanes (its own and the spare ones) to its
    /// counters.
    pub(crate) fn collect_counts(&mut self) {
        let spares =
            self.spare_lanes.iter_mut().flat_map(|s| s.0.get_mut().unwrap_or_else(PoisonError::into_inner).iter_mut());
        for lane in self.lane.iter_mut().chain(spares) {
            self.objects.xport.stats.add(&std::mem::take(&mut lane.stats));
            self.stats.add(&std::mem::take(&mut lane.device_stats));
        }
    }

    /// Transport counters.
    pub fn transport_stats(&mut self) -> crate::transport::TransportStats {
        self.collect_counts();
        self.objects.xport.stats
    }

    /// Device counters.
    pub fn sim_stats(&mut self) -> super::SimStats {
        self.collect_counts();
        self.stats
    }

    /// The port MAC and the IP addresses of the RoCE GID table (what the port answers ARP and
    /// neighbour solicitation for, besides the configured addresses).
    pub fn gid_ips(&self) -> Vec<std::net::IpAddr> {
        self.vport.gids.iter().flatten().map(|g| umlx_wire::packet::gid_to_ip(&g.gid)).collect()
    }
}
