//! Hooks between the firmware's objects and the data path (doorbells, QP state changes).
//! The transport itself lives in `crate::transport`.

use super::Hca;
use std::time::Instant;
use umlx_hwdesc::enums::QpState;
use umlx_hwdesc::plain::wqe;
use umlx_wire::packet::Checksums;

// The doorbell's two dwords are the control segment's first two.
const _: () =
    assert!(umlx_hwdesc::plain::wqe_ctrl_seg::opmod_idx_opcode == 0 && umlx_hwdesc::plain::wqe_ctrl_seg::qpn_ds == 4);

impl Hca {
    /// UAR + 0x800..: SQ doorbell (the first 8 bytes of the WQE's control segment). The WQEs are
    /// taken from the SQ buffer up to the doorbell record's send counter (a BlueFlame copy is
    /// not used beyond its first 8 bytes).
    pub(crate) fn sq_doorbell(&mut self, uar: u32, value: u64) {
        // The value is the control segment's first 8 bytes (opmod_idx_opcode, qpn_ds) as stored.
        let bytes = value.to_be_bytes();
        let (Ok(idx_opcode), Ok(qpn_ds)) = (bytes[..4].try_into(), bytes[4..].try_into()) else { return };
        let (idx_opcode, qpn_ds) = (u32::from_be_bytes(idx_opcode), u32::from_be_bytes(qpn_ds));
        let qpn = qpn_ds >> wqe::WQE_CTRL_QPN_SHIFT;
        match self.objects.qps.object_mut(&qpn) {
            Some(qp) if qp.uar == uar => {
                qp.sq_doorbell = ((idx_opcode >> wqe::WQE_CTRL_WQE_INDEX_SHIFT) & wqe::WQE_CTRL_WQE_INDEX_MASK) as u16;
                self.sq_service(qpn, Instant::now());
            }
            _ => self.stats.bad_doorbells += 1,
        }
    }

    /// Called after a QP changed state.
    pub(crate) fn qp_state_changed(&mut self, qpn: u32, from: QpState, to: QpState) {
        self.transport_state_changed(qpn, from, to);
    }

    /// Called after a QP was destroyed.
    pub(crate) fn qp_destroyed(&mut self, qpn: u32) {
        self.objects.xport.timed.remove(&qpn);
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
        let x = &mut self.objects.xport;
        let checksums = if std::mem::take(&mut x.outbox_deferred) { Checksums::Defer } else { Checksums::Compute };
        (std::mem::take(&mut x.outbox), checksums)
    }

    /// Has the frames built from now on get their IPv4 header checksum and ICRC from the
    /// builder (`Compute`: the port's egress needs them) or not (`Defer`).
    pub fn set_egress_checksums(&mut self, checksums: Checksums) {
        self.objects.xport.compute_checksums = checksums == Checksums::Compute;
    }

    /// Gives back an emptied outbox [`Hca::take_outbox`] returned, so that its allocation
    /// holds the next frames.
    pub fn recycle_outbox(&mut self, out: Vec<Vec<u8>>) {
        crate::transport::reuse(&mut self.objects.xport.outbox, out);
    }

    /// Transport counters.
    pub fn transport_stats(&self) -> crate::transport::TransportStats {
        self.objects.xport.stats
    }

    /// The port MAC and the IP addresses of the RoCE GID table (what the port answers ARP and
    /// neighbour solicitation for, besides the configured addresses).
    pub fn gid_ips(&self) -> Vec<std::net::IpAddr> {
        self.vport.gids.iter().flatten().map(|g| umlx_wire::packet::gid_to_ip(&g.gid)).collect()
    }
}
