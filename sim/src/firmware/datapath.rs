//! Hooks between the firmware's objects and the data path (doorbells, QP state changes).
//! The transport itself lives in `crate::transport`.

use super::Hca;
use umlx_hwdesc::enums::QpState;

impl Hca {
    /// UAR + 0x800..: SQ doorbell (the first 8 bytes of the WQE's control segment).
    pub(crate) fn sq_doorbell(&mut self, uar: u32, value: u64) {
        let qpn = ((value >> 8) & 0xff_ffff) as u32;
        match self.objects.qps.get_mut(&qpn) {
            Some(qp) if qp.uar == uar => {
                qp.sq_doorbell = ((value >> 40) & 0xffff) as u16;
            }
            _ => self.stats.bad_doorbells += 1,
        }
    }

    /// Called after a QP changed state.
    pub(crate) fn qp_state_changed(&mut self, _qpn: u32, _from: QpState, _to: QpState) {}

    /// Called after a QP was destroyed.
    pub(crate) fn qp_destroyed(&mut self, _qpn: u32) {}

    /// Fills the transport fields of a QUERY_QP output.
    pub(crate) fn qp_query_transport(&self, _qpn: u32, _out: &mut [u8]) {}
}
