//! Device and port queries a verbs layer answers `ibv_query_device`, `ibv_query_port` and
//! `ibv_query_gid` from: the firmware version (initialization segment), the PCI ids, the HCA
//! vport context (QUERY_HCA_VPORT_CONTEXT), the link modes the port operates in (PTYS) and one
//! GID table entry (QUERY_HCA_VPORT_GID). This
//! module owns those reads; callers get neutral values.

use crate::backend::Backend;
use crate::{Error, Hca, Result};
use umlx_hwdesc::enums::{AccessRegId, AccessRegOpMod, AtomicOps, CmdOpcode, PtysProto};
use umlx_hwdesc::ifc::{
    access_register_in, access_register_out, atomic_caps, hca_vport_context, ptys_reg, query_hca_vport_context_in,
    query_hca_vport_context_out, query_hca_vport_gid_in, query_hca_vport_gid_out,
};
use umlx_hwdesc::plain::iseg;

/// The firmware version (`fw_rev` and `cmdif_rev_fw_sub` of the initialization segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwVersion {
    /// Major (`fw_rev` bits 15:0).
    pub major: u16,
    /// Minor (`fw_rev` bits 31:16).
    pub minor: u16,
    /// Sub-minor (`cmdif_rev_fw_sub` bits 15:0).
    pub sub_minor: u16,
}

impl std::fmt::Display for FwVersion {
    /// `major.minor.sub_minor`, as `ibv_devinfo` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.sub_minor)
    }
}

/// The state of a vport as QUERY_HCA_VPORT_CONTEXT reports it (IB encodings: `port_state`
/// 1 DOWN .. 4 ACTIVE, `port_physical_state` 5 LINK_UP ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VportState {
    /// Logical port state.
    pub port_state: u8,
    /// Physical port state.
    pub port_physical_state: u8,
}

/// The Ethernet link modes a port operates in, as the PTYS register reports them (bit sets of
/// [`umlx_hwdesc::enums::EthLinkMode`] and [`umlx_hwdesc::enums::ExtEthLinkMode`]; zero while the
/// link is down).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthProtoOper {
    /// `eth_proto_oper` (the legacy link modes).
    pub legacy: u32,
    /// `ext_eth_proto_oper` (the extended link modes).
    pub extended: u32,
}

impl<B: Backend> Hca<B> {
    /// ACCESS_REG read of PTYS for Ethernet on `port`: the link modes it operates in.
    pub fn query_eth_proto_oper(&self, port: u8) -> Result<EthProtoOper> {
        let data = access_register_in::register_data;
        let out = self.command(
            CmdOpcode::ACCESS_REG,
            AccessRegOpMod::READ.0,
            access_register_in::SIZE_BYTES + ptys_reg::SIZE_BYTES,
            access_register_out::SIZE_BYTES + ptys_reg::SIZE_BYTES,
            |b| {
                access_register_in::register_id.set(b, AccessRegId::PTYS.0 as u64);
                data.inner(ptys_reg::local_port).set(b, port as u64);
                data.inner(ptys_reg::proto_mask).set(b, PtysProto::EN.0 as u64);
            },
        )?;
        let reg = access_register_out::register_data;
        Ok(EthProtoOper {
            legacy: reg.inner(ptys_reg::eth_proto_oper).get(&out) as u32,
            extended: reg.inner(ptys_reg::ext_eth_proto_oper).get(&out) as u32,
        })
    }

    /// The firmware version from the initialization segment.
    pub fn fw_version(&self) -> FwVersion {
        let b = self.backend();
        let rev = b.read32(iseg::FW_REV);
        let sub = b.read32(iseg::CMDIF_REV_FW_SUB);
        FwVersion {
            major: (rev & iseg::FW_REV_MAJOR_MASK) as u16,
            minor: (rev >> iseg::FW_REV_MINOR_SHIFT) as u16,
            sub_minor: (sub & iseg::FW_SUB_MINOR_MASK) as u16,
        }
    }

    /// Whether the device does the two ibverbs atomics, compare-and-swap and fetch-and-add
    /// (atomic caps `atomic_operations` CMP_SWAP and FETCH_ADD).
    pub fn atomics_supported(&self) -> bool {
        let atomic = self.caps().atomic;
        !atomic.is_empty()
            && AtomicOps(atomic_caps::atomic_operations.get(&atomic) as u16)
                .contains(AtomicOps::CMP_SWAP | AtomicOps::FETCH_ADD)
    }

    /// PCI vendor and device id (config space offsets 0 and 2).
    pub fn pci_ids(&self) -> Result<(u16, u16)> {
        let mut cfg = [0u8; 4];
        self.backend().config_read(0, &mut cfg)?;
        Ok((u16::from_le_bytes([cfg[0], cfg[1]]), u16::from_le_bytes([cfg[2], cfg[3]])))
    }

    /// QUERY_HCA_VPORT_CONTEXT of `port` (1-based).
    pub fn query_vport(&self, port: u8) -> Result<VportState> {
        let out = self.command(
            CmdOpcode::QUERY_HCA_VPORT_CONTEXT,
            0,
            query_hca_vport_context_in::SIZE_BYTES,
            query_hca_vport_context_out::SIZE_BYTES,
            |b| {
                query_hca_vport_context_in::port_num.set(b, port as u64);
            },
        )?;
        let ctx = query_hca_vport_context_out::hca_vport_context;
        Ok(VportState {
            port_state: ctx.inner(hca_vport_context::port_state).get(&out) as u8,
            port_physical_state: ctx.inner(hca_vport_context::port_physical_state).get(&out) as u8,
        })
    }

    /// QUERY_HCA_VPORT_GID: entry `index` of `port`'s GID table.
    pub fn query_gid(&self, port: u8, index: u16) -> Result<[u8; 16]> {
        const GID: usize = 16;
        let out = self.command(
            CmdOpcode::QUERY_HCA_VPORT_GID,
            0,
            query_hca_vport_gid_in::SIZE_BYTES,
            query_hca_vport_gid_out::SIZE_BYTES + GID,
            |b| {
                query_hca_vport_gid_in::port_num.set(b, port as u64);
                query_hca_vport_gid_in::gid_index.set(b, index as u64);
            },
        )?;
        let off = query_hca_vport_gid_out::SIZE_BYTES;
        let gid = out.get(off..off + GID).ok_or_else(|| Error::Firmware {
            device: self.name().into(),
            problem: format!("QUERY_HCA_VPORT_GID answered {} bytes, short of one GID", out.len()),
        })?;
        let mut g = [0u8; GID];
        g.copy_from_slice(gid);
        Ok(g)
    }
}
