//! The UD address vector (`mlx5_wqe_av`, 48 bytes) a UD send WQE carries after its control
//! segment: this module owns its encoding. An address handle builds one [`Av`] from neutral
//! parameters ([`AvParams`]); each UD work request copies it and sets the remote QPN and Q_Key
//! ([`Av::for_remote`]). Written through hwdesc's `plain::wqe_av`, so no byte offset is typed
//! here.

use crate::Hca;
use crate::backend::Backend;
use umlx_hwdesc::ifc::roce_cap;
use umlx_hwdesc::plain::{wqe, wqe_av};
use zerocopy::IntoBytes;

/// Hop limit written when the caller gives 0 (as `ibv_create_ah` users expect; Linux's
/// RoCE GID paths and the contract's INIT2RTR defaults use 64).
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// What a RoCE address vector says, in ibverbs terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AvParams {
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// Service level (RoCE uses the low 3 bits, the Ethernet priority).
    pub sl: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// GRH hop limit (0: [`DEFAULT_HOP_LIMIT`]).
    pub hop_limit: u8,
    /// Source GID index.
    pub sgid_index: u8,
    /// GRH flow label (20 bits).
    pub flow_label: u32,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// RoCEv2 UDP source port (see [`Hca::build_av`] for the one an address handle gets).
    pub udp_sport: u16,
}

/// A prebuilt address vector, in the byte order the device reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Av([u8; wqe_av::SIZE]);

impl Av {
    /// Encodes `p` (remote QPN and Q_Key are per work request: see [`Av::for_remote`]).
    pub fn new(p: &AvParams) -> Av {
        let hop_limit = if p.hop_limit == 0 { DEFAULT_HOP_LIMIT } else { p.hop_limit };
        let av = wqe_av {
            // RoCE: the SL's priority bits (static rate 0).
            stat_rate_sl: (p.sl & wqe::AV_ROCE_SL_MASK) << wqe::AV_ROCE_SL_SHIFT,
            rlid: p.udp_sport.into(),
            rmac: p.dmac,
            tclass: p.traffic_class,
            hop_limit,
            grh_gid_fl: (wqe::AV_GRH
                | ((p.sgid_index as u32) << wqe::AV_SGID_INDEX_SHIFT)
                | (p.flow_label & wqe::AV_FLOW_LABEL_MASK))
                .into(),
            rgid: p.dgid,
            ..Default::default()
        };
        let mut b = [0u8; wqe_av::SIZE];
        b.copy_from_slice(av.as_bytes());
        Av(b)
    }

    /// This vector addressed to QP `remote_qpn` with Q_Key `qkey` (the extended-AV form, which
    /// carries the GRH fields), ready to go into a UD send WQE.
    #[inline(always)]
    pub fn for_remote(&self, remote_qpn: u32, qkey: u32) -> [u8; wqe_av::SIZE] {
        let mut b = self.0;
        b[wqe_av::qkey..wqe_av::qkey + 4].copy_from_slice(&qkey.to_be_bytes());
        b[wqe_av::dqp_dct..wqe_av::dqp_dct + 4].copy_from_slice(&(remote_qpn | wqe::EXTENDED_UD_AV).to_be_bytes());
        b
    }

    /// The 48 bytes as built (remote QPN and Q_Key zero).
    pub fn bytes(&self) -> &[u8; wqe_av::SIZE] {
        &self.0
    }
}

impl<B: Backend> Hca<B> {
    /// The address vector of an address handle for `p`, its UDP source port chosen as Linux
    /// `mlx5_ah_get_udp_sport` does when `p.udp_sport` is 0: from a non-zero flow label, else
    /// the device's lowest RoCE source port (RoCE cap `r_roce_min_src_udp_port`).
    pub fn build_av(&self, p: &AvParams) -> Av {
        let udp_sport = match (p.udp_sport, p.flow_label & wqe::AV_FLOW_LABEL_MASK) {
            (0, 0) => {
                let roce = self.caps().roce;
                if roce.is_empty() { 0 } else { roce_cap::r_roce_min_src_udp_port.get(&roce) as u16 }
            }
            (0, fl) => crate::qpc::roce_udp_sport(fl, 0, 0),
            (port, _) => port,
        };
        Av::new(&AvParams { udp_sport, ..*p })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_field_at_its_mlx5_wqe_av_place() {
        let p = AvParams {
            dmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            sl: 5,
            traffic_class: 0x68,
            hop_limit: 0,
            sgid_index: 3,
            flow_label: 0xa_bcde,
            dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            udp_sport: 0xc123,
        };
        let b = Av::new(&p).for_remote(0x12_3456, 0x1111_2222);
        let mut want = [0u8; 48];
        want[0x00..0x04].copy_from_slice(&[0x11, 0x11, 0x22, 0x22]); // qkey
        want[0x08..0x0c].copy_from_slice(&[0x80, 0x12, 0x34, 0x56]); // dqp_dct | EXTENDED_UD_AV
        want[0x0c] = 5 << 1; // SL bits 3:1
        want[0x0e..0x10].copy_from_slice(&[0xc1, 0x23]); // rlid = UDP source port
        want[0x14..0x1a].copy_from_slice(&p.dmac);
        want[0x1a] = 0x68;
        want[0x1b] = 64; // hop limit 0 -> 64
        want[0x1c..0x20].copy_from_slice(&[0x40, 0x3a, 0xbc, 0xde]); // GRH, gid index 3, flow label
        want[0x20..0x30].copy_from_slice(&p.dgid);
        assert_eq!(b, want);
        // The prebuilt vector has no remote side.
        assert_eq!(&Av::new(&p).bytes()[0..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
