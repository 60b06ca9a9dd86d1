//! The port and its vport: MAC, MTU, RoCE enable, port state (administrative, and the link as
//! the cable leaves it) with port-change events, and the
//! RoCE address (GID) table (SET/QUERY_ROCE_ADDRESS, QUERY_HCA_VPORT_GID).
//!
//! On Ethernet the GID table is software-managed: the driver writes each entry with
//! SET_ROCE_ADDRESS (GID, source MAC, L3 type, RoCE version). An entry whose GID is all zero is
//! empty. QUERY_HCA_VPORT_GID reads the GIDs back.

use super::exec::{CmdResult, bad_param, need_in, out};
use super::objects::event_data;
use super::{Hca, syndrome as sy};
use crate::config::SimConfig;
use umlx_hwdesc::enums::{
    CmdOpcode, EventType, IbMtu, IbPortState, PortChangeSubtype, PortPhysicalState, VportAdminState, VportState,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain;

/// One RoCE address table entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoceAddr {
    /// The GID (IPv6 address or IPv4-mapped).
    pub gid: [u8; 16],
    /// Source MAC.
    pub mac: [u8; 6],
    /// 0 = IPv4, 1 = IPv6.
    pub l3_type: u8,
    /// 0 = RoCEv1, 2 = RoCEv2.
    pub version: u8,
    /// VLAN valid and ID.
    pub vlan: Option<u16>,
}

/// Port and vport state.
#[derive(Clone, Debug)]
pub struct Vport {
    /// Permanent MAC.
    pub mac: [u8; 6],
    /// Ethernet MTU.
    pub mtu: u32,
    /// RoCE enabled on the vport.
    pub roce_en: bool,
    /// The port's administrative state (INIT_HCA and PAOS writes bring it up, TEARDOWN_HCA
    /// and PAOS writes down).
    admin_up: bool,
    /// Whether a link partner is there: false only while the port's cable is out
    /// ([`crate::Port::disconnect`]); a port on no wire at all has its link up, its frames
    /// going nowhere.
    carrier: bool,
    /// RoCE address table.
    pub gids: Vec<Option<RoceAddr>>,
    node_guid: u64,
}

impl Vport {
    /// Vport state after reset.
    pub fn new(cfg: &SimConfig) -> Vport {
        Vport {
            mac: cfg.mac,
            mtu: cfg.eth_mtu,
            roce_en: false,
            admin_up: false,
            carrier: true,
            gids: vec![None; super::caps::limits::GID_TABLE_SIZE as usize],
            node_guid: cfg.node_guid,
        }
    }

    /// Whether the link is up (operational): administratively up, with a link partner.
    pub fn is_up(&self) -> bool {
        self.admin_up && self.carrier
    }

    /// Whether the port is administratively up.
    pub fn is_admin_up(&self) -> bool {
        self.admin_up
    }

    /// Whether the port's cable is in (see [`Hca::set_carrier`]).
    pub(crate) fn has_carrier(&self) -> bool {
        self.carrier
    }

    /// Sets whether the port's cable is in, with no event: what a reset keeps.
    pub(crate) fn set_has_carrier(&mut self, present: bool) {
        self.carrier = present;
    }

    /// The port's state and physical state as `hca_vport_context` reports them.
    fn ib_port_states(&self) -> (IbPortState, PortPhysicalState) {
        match (self.admin_up, self.carrier) {
            (true, true) => (IbPortState::ACTIVE, PortPhysicalState::LINK_UP),
            (true, false) => (IbPortState::DOWN, PortPhysicalState::POLLING),
            (false, _) => (IbPortState::DOWN, PortPhysicalState::DISABLED),
        }
    }

    /// The largest IB MTU (enum 1..5) that fits the Ethernet MTU with RoCEv2 headers (as rxe:
    /// the largest of 256..4096 not above MTU - 80... rounded to the enum).
    pub fn active_ib_mtu(&self) -> u8 {
        let usable = self.mtu.saturating_sub(80);
        let fits = [IbMtu::MTU_4096, IbMtu::MTU_2048, IbMtu::MTU_1024, IbMtu::MTU_512]
            .into_iter()
            .find(|m| m.bytes().is_some_and(|b| usable >= b));
        fits.unwrap_or(IbMtu::MTU_256).0
    }
}

impl Hca {
    /// Brings the port administratively up or down, posting a port-change event when its
    /// link changes.
    pub(crate) fn set_link(&mut self, up: bool) {
        let was = self.vport.is_up();
        self.vport.admin_up = up;
        self.port_admin_up.store(up, std::sync::atomic::Ordering::Relaxed);
        self.link_changed(was);
    }

    /// The port's cable goes in (`present`) or out: its link follows while the port is
    /// administratively up, with a port-change event, as a ConnectX posts one when its link
    /// partner comes or goes.
    pub fn set_carrier(&mut self, present: bool) {
        let was = self.vport.is_up();
        self.vport.carrier = present;
        self.link_changed(was);
    }

    /// Posts a port-change event if the link is no longer `was` (up or down).
    fn link_changed(&mut self, was: bool) {
        let up = self.vport.is_up();
        if up == was {
            return;
        }
        let port = plain::eqe_port_state { port: 1 << plain::eq::PORT_STATE_PORT_SHIFT, ..Default::default() };
        let sub = if up { PortChangeSubtype::ACTIVE } else { PortChangeSubtype::DOWN };
        self.post_event(EventType::PORT_CHANGE, sub.0, &event_data(&port));
    }

    pub(crate) fn execute_vport_cmd(&mut self, op: CmdOpcode, input: &[u8]) -> Option<CmdResult> {
        Some(match op {
            CmdOpcode::QUERY_NIC_VPORT_CONTEXT => self.cmd_query_nic_vport(input),
            CmdOpcode::MODIFY_NIC_VPORT_CONTEXT => self.cmd_modify_nic_vport(input),
            CmdOpcode::QUERY_HCA_VPORT_CONTEXT => self.cmd_query_hca_vport(input),
            CmdOpcode::QUERY_HCA_VPORT_GID => self.cmd_query_hca_vport_gid(input),
            CmdOpcode::QUERY_VPORT_STATE => self.cmd_query_vport_state(input),
            CmdOpcode::SET_ROCE_ADDRESS => self.cmd_set_roce_address(input),
            CmdOpcode::QUERY_ROCE_ADDRESS => self.cmd_query_roce_address(input),
            _ => return None,
        })
    }

    fn cmd_query_nic_vport(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_NIC_VPORT_CONTEXT.0;
        need_in(op, input, query_nic_vport_context_in::SIZE_BYTES)?;
        if query_nic_vport_context_in::other_vport.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let mut o = out(query_nic_vport_context_out::SIZE_BYTES);
        let ctx = query_nic_vport_context_out::nic_vport_context;
        ctx.inner(nic_vport_context::roce_en).set(&mut o, self.vport.roce_en as u64);
        ctx.inner(nic_vport_context::mtu).set(&mut o, self.vport.mtu as u64);
        ctx.inner(nic_vport_context::node_guid).set(&mut o, self.vport.node_guid);
        ctx.inner(nic_vport_context::port_guid).set(&mut o, self.vport.node_guid);
        ctx.inner(nic_vport_context::system_image_guid).set(&mut o, self.vport.node_guid);
        let mac = self.vport.mac;
        if let Some(b) = ctx.inner(nic_vport_context::permanent_address).bytes_mut(&mut o) {
            b[2..8].copy_from_slice(&mac)
        }
        Ok(o)
    }

    fn cmd_modify_nic_vport(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::MODIFY_NIC_VPORT_CONTEXT.0;
        need_in(op, input, modify_nic_vport_context_in::SIZE_BYTES)?;
        if modify_nic_vport_context_in::other_vport.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let sel = modify_nic_vport_context_in::field_select;
        let ctx = modify_nic_vport_context_in::nic_vport_context;
        if sel.inner(modify_nic_vport_field_select::roce_en).get(input) != 0 {
            self.vport.roce_en = ctx.inner(nic_vport_context::roce_en).get(input) != 0;
        }
        if sel.inner(modify_nic_vport_field_select::mtu).get(input) != 0 {
            let mtu = ctx.inner(nic_vport_context::mtu).get(input) as u32;
            if !(576..=9978).contains(&mtu) {
                return Err(bad_param(op, sy::BAD_FIELD_VALUE));
            }
            self.vport.mtu = mtu;
        }
        if sel.inner(modify_nic_vport_field_select::permanent_address).get(input) != 0
            && let Some(b) = ctx.inner(nic_vport_context::permanent_address).bytes(input)
        {
            self.vport.mac.copy_from_slice(&b[2..8]);
        }
        Ok(out(modify_nic_vport_context_out::SIZE_BYTES))
    }

    fn check_port(&self, op: u16, port: u64, other_vport: u64) -> Result<(), super::CmdFail> {
        if other_vport != 0 || port > 1 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        Ok(())
    }

    fn cmd_query_hca_vport(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_HCA_VPORT_CONTEXT.0;
        need_in(op, input, query_hca_vport_context_in::SIZE_BYTES)?;
        self.check_port(
            op,
            query_hca_vport_context_in::port_num.get(input),
            query_hca_vport_context_in::other_vport.get(input),
        )?;
        let mut o = out(query_hca_vport_context_out::SIZE_BYTES);
        let ctx = query_hca_vport_context_out::hca_vport_context;
        let (st, phys) = self.vport.ib_port_states();
        ctx.inner(hca_vport_context::port_state).set(&mut o, u64::from(st.0));
        ctx.inner(hca_vport_context::vport_state).set(&mut o, u64::from(st.0));
        ctx.inner(hca_vport_context::port_physical_state).set(&mut o, u64::from(phys.0));
        ctx.inner(hca_vport_context::port_guid).set(&mut o, self.vport.node_guid);
        ctx.inner(hca_vport_context::node_guid).set(&mut o, self.vport.node_guid);
        ctx.inner(hca_vport_context::system_image_guid).set(&mut o, self.vport.node_guid);
        Ok(o)
    }

    fn cmd_query_hca_vport_gid(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_HCA_VPORT_GID.0;
        need_in(op, input, query_hca_vport_gid_in::SIZE_BYTES)?;
        self.check_port(
            op,
            query_hca_vport_gid_in::port_num.get(input),
            query_hca_vport_gid_in::other_vport.get(input),
        )?;
        let index = query_hca_vport_gid_in::gid_index.get(input) as usize;
        // gid_index 0xffff asks for the whole table.
        let all = index == 0xffff;
        let table = &self.vport.gids;
        let picked: Vec<[u8; 16]> = if all {
            table.iter().map(|e| e.map(|e| e.gid).unwrap_or([0; 16])).collect()
        } else {
            match table.get(index) {
                Some(e) => vec![e.map(|e| e.gid).unwrap_or([0; 16])],
                None => return Err(bad_param(op, sy::EXCEEDS_LIMIT)),
            }
        };
        let mut o = out(query_hca_vport_gid_out::SIZE_BYTES + 16 * picked.len());
        query_hca_vport_gid_out::gids_num.set(&mut o, picked.len() as u64);
        for (i, g) in picked.iter().enumerate() {
            let off = query_hca_vport_gid_out::SIZE_BYTES + 16 * i;
            o[off..off + 16].copy_from_slice(g);
        }
        Ok(o)
    }

    fn cmd_query_vport_state(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_VPORT_STATE.0;
        need_in(op, input, query_vport_state_in::SIZE_BYTES)?;
        if query_vport_state_in::other_vport.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let mut o = out(query_vport_state_out::SIZE_BYTES);
        let state = if self.vport.is_up() { VportState::UP } else { VportState::DOWN };
        let admin = if self.vport.admin_up { VportAdminState::UP } else { VportAdminState::DOWN };
        query_vport_state_out::state.set(&mut o, u64::from(state.0));
        query_vport_state_out::admin_state.set(&mut o, u64::from(admin.0));
        Ok(o)
    }

    fn cmd_set_roce_address(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::SET_ROCE_ADDRESS.0;
        need_in(op, input, set_roce_address_in::SIZE_BYTES)?;
        let index = set_roce_address_in::roce_address_index.get(input) as usize;
        let port = set_roce_address_in::vhca_port_num.get(input);
        if port > 1 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if index >= self.vport.gids.len() {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        }
        let a = set_roce_address_in::roce_address;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(a.inner(roce_addr_layout::source_l3_address).bytes(input).unwrap_or(&[0; 16]));
        let mac_hi = a.inner(roce_addr_layout::source_mac_47_32).get(input) as u16;
        let mac_lo = a.inner(roce_addr_layout::source_mac_31_0).get(input) as u32;
        let mut mac = [0u8; 6];
        mac[..2].copy_from_slice(&mac_hi.to_be_bytes());
        mac[2..].copy_from_slice(&mac_lo.to_be_bytes());
        let l3_type = a.inner(roce_addr_layout::roce_l3_type).get(input) as u8;
        let version = a.inner(roce_addr_layout::roce_version).get(input) as u8;
        let vlan = (a.inner(roce_addr_layout::vlan_valid).get(input) != 0)
            .then(|| a.inner(roce_addr_layout::vlan_id).get(input) as u16);
        if gid == [0; 16] {
            self.vport.gids[index] = None;
        } else {
            if l3_type > 1 || !matches!(version, 0..=2) {
                return Err(bad_param(op, sy::BAD_FIELD_VALUE));
            }
            let v4mapped = gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff];
            if version == 2 && (l3_type == 0) != v4mapped {
                // RoCEv2 IPv4 entries must hold an IPv4-mapped GID and IPv6 entries must not.
                return Err(bad_param(op, sy::BAD_FIELD_VALUE));
            }
            self.vport.gids[index] = Some(RoceAddr { gid, mac, l3_type, version, vlan });
        }
        Ok(out(set_roce_address_out::SIZE_BYTES))
    }

    fn cmd_query_roce_address(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_ROCE_ADDRESS.0;
        need_in(op, input, query_roce_address_in::SIZE_BYTES)?;
        let index = query_roce_address_in::roce_address_index.get(input) as usize;
        let Some(entry) = self.vport.gids.get(index) else {
            return Err(bad_param(op, sy::EXCEEDS_LIMIT));
        };
        let mut o = out(query_roce_address_out::SIZE_BYTES);
        if let Some(e) = entry {
            let a = query_roce_address_out::roce_address;
            if let Some(b) = a.inner(roce_addr_layout::source_l3_address).bytes_mut(&mut o) {
                b.copy_from_slice(&e.gid)
            }
            a.inner(roce_addr_layout::source_mac_47_32).set(&mut o, u16::from_be_bytes([e.mac[0], e.mac[1]]) as u64);
            a.inner(roce_addr_layout::source_mac_31_0)
                .set(&mut o, u32::from_be_bytes([e.mac[2], e.mac[3], e.mac[4], e.mac[5]]) as u64);
            a.inner(roce_addr_layout::roce_l3_type).set(&mut o, e.l3_type as u64);
            a.inner(roce_addr_layout::roce_version).set(&mut o, e.version as u64);
            if let Some(v) = e.vlan {
                a.inner(roce_addr_layout::vlan_valid).set(&mut o, 1);
                a.inner(roce_addr_layout::vlan_id).set(&mut o, v as u64);
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_ib_mtu_is_the_largest_that_fits_the_ethernet_mtu_with_roce_headers() {
        let mut v = Vport::new(&SimConfig::default());
        for (eth_mtu, ib_mtu) in [
            (9000, IbMtu::MTU_4096),
            (4176, IbMtu::MTU_4096),
            (4175, IbMtu::MTU_2048),
            (1500, IbMtu::MTU_1024),
            (1103, IbMtu::MTU_512),
            (591, IbMtu::MTU_256),
            (0, IbMtu::MTU_256),
        ] {
            v.mtu = eth_mtu;
            assert_eq!(v.active_ib_mtu(), ib_mtu.0, "Ethernet MTU {eth_mtu}");
        }
    }
}
