//! The port and vport: the RoCE address (GID) table through SET/QUERY_ROCE_ADDRESS and
//! QUERY_HCA_VPORT_GID with IPv4-mapped and IPv6 GIDs, and the NIC vport context (MAC, MTU).

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, IbPortState, PortPhysicalState, QpServiceType, VportState};
use umlx_hwdesc::ifc::*;
use umlx_sim::config::mac_to_guid;

const V6: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0x01];

fn query_roce_address(h: &mut CmdHost, index: u16) -> Result<Vec<u8>, CmdError> {
    h.exec(
        CmdOpcode::QUERY_ROCE_ADDRESS,
        0,
        query_roce_address_in::SIZE_BYTES,
        query_roce_address_out::SIZE_BYTES,
        |i| {
            query_roce_address_in::roce_address_index.set(i, index as u64);
            query_roce_address_in::vhca_port_num.set(i, 1);
        },
    )
}

fn query_gids(h: &mut CmdHost, index: u16, n: usize) -> Result<Vec<u8>, CmdError> {
    let outlen = query_hca_vport_gid_out::SIZE_BYTES + 16 * n;
    h.exec(CmdOpcode::QUERY_HCA_VPORT_GID, 0, query_hca_vport_gid_in::SIZE_BYTES, outlen, |i| {
        query_hca_vport_gid_in::port_num.set(i, 1);
        query_hca_vport_gid_in::gid_index.set(i, index as u64);
    })
}

/// Whether a QUERY_ROCE_ADDRESS output holds an empty entry (all zeros).
fn is_empty_entry(o: &[u8]) -> bool {
    query_roce_address_out::roce_address.bytes(o).expect("a QUERY_ROCE_ADDRESS output").iter().all(|&b| b == 0)
}

fn gid_at(o: &[u8], k: usize) -> [u8; 16] {
    let off = query_hca_vport_gid_out::SIZE_BYTES + 16 * k;
    o[off..off + 16].try_into().unwrap()
}

#[test]
fn roce_address_table() {
    let mut env = Env::new();
    let h = &mut env.host;
    let mac = SimConfig::default().mac;
    let v4 = gid_v4([10, 77, 0, 1]);
    set_roce_address(h, 0, v4, mac, 0, 2).expect("IPv4-mapped RoCEv2 GID");
    set_roce_address(h, 1, V6, mac, 1, 2).expect("IPv6 RoCEv2 GID");

    let a = query_roce_address_out::roce_address;
    for (index, gid, l3) in [(0u16, v4, 0u64), (1, V6, 1)] {
        let o = query_roce_address(h, index).expect("QUERY_ROCE_ADDRESS");
        assert_eq!(a.inner(roce_addr_layout::source_l3_address).bytes(&o).unwrap(), gid);
        assert_eq!(a.inner(roce_addr_layout::source_mac_47_32).get(&o), u16::from_be_bytes([mac[0], mac[1]]) as u64);
        assert_eq!(
            a.inner(roce_addr_layout::source_mac_31_0).get(&o),
            u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64
        );
        assert_eq!(a.inner(roce_addr_layout::roce_l3_type).get(&o), l3);
        assert_eq!(a.inner(roce_addr_layout::roce_version).get(&o), 2);
        assert_eq!(a.inner(roce_addr_layout::vlan_valid).get(&o), 0);
    }
    // An empty entry reads as zeros.
    assert!(is_empty_entry(&query_roce_address(h, 2).unwrap()));

    // QUERY_HCA_VPORT_GID: one entry, then the whole table.
    let o = query_gids(h, 1, 1).expect("QUERY_HCA_VPORT_GID 1");
    assert_eq!(query_hca_vport_gid_out::gids_num.get(&o), 1);
    assert_eq!(gid_at(&o, 0), V6);
    let o = query_gids(h, 0xffff, 256).expect("QUERY_HCA_VPORT_GID all");
    assert_eq!(query_hca_vport_gid_out::gids_num.get(&o), 256);
    assert_eq!(gid_at(&o, 0), v4);
    assert_eq!(gid_at(&o, 1), V6);
    assert_eq!(gid_at(&o, 2), [0; 16]);
    assert_eq!(gid_at(&o, 255), [0; 16]);
    // The whole table does not fit an output sized for one GID.
    let r = query_gids(h, 0xffff, 1);
    expect_fail(r, CmdOpcode::QUERY_HCA_VPORT_GID, CmdStatus::BAD_OUTP_LEN_ERR, sy::BAD_OUTPUT_LEN);
    let r = query_gids(h, 256, 1);
    expect_fail(r, CmdOpcode::QUERY_HCA_VPORT_GID, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);

    // Deleting an entry (zero GID) empties it.
    set_roce_address(h, 1, [0; 16], [0; 6], 0, 0).expect("delete");
    assert_eq!(gid_at(&query_gids(h, 1, 1).unwrap(), 0), [0; 16]);
    assert!(is_empty_entry(&query_roce_address(h, 1).unwrap()));
}

#[test]
fn roce_address_validation() {
    let mut env = Env::new();
    let h = &mut env.host;
    let mac = SimConfig::default().mac;
    let bad = |r: Result<(), CmdError>, reason| {
        expect_fail(r, CmdOpcode::SET_ROCE_ADDRESS, CmdStatus::BAD_PARAM_ERR, reason);
    };
    // RoCEv2 L3 type must match the GID form.
    bad(set_roce_address(h, 3, gid_v4([10, 0, 0, 1]), mac, 1, 2), sy::BAD_FIELD_VALUE);
    bad(set_roce_address(h, 3, V6, mac, 0, 2), sy::BAD_FIELD_VALUE);
    bad(set_roce_address(h, 3, V6, mac, 2, 2), sy::BAD_FIELD_VALUE);
    bad(set_roce_address(h, 3, V6, mac, 1, 3), sy::BAD_FIELD_VALUE);
    bad(set_roce_address(h, 256, V6, mac, 1, 2), sy::EXCEEDS_LIMIT);
    let r = h.exec(CmdOpcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::SIZE_BYTES, 16, |i| {
        set_roce_address_in::vhca_port_num.set(i, 2);
    });
    bad(r.map(drop), sy::BAD_FIELD_VALUE);
    // Nothing was written.
    assert!(is_empty_entry(&query_roce_address(h, 3).unwrap()));
    expect_fail(query_roce_address(h, 256), CmdOpcode::QUERY_ROCE_ADDRESS, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);
}

#[test]
fn qp_path_needs_a_live_gid() {
    let mut env = Env::new();
    let (pd, uar, eqn) = (env.pd, env.uar, env.eq.eqn);
    let h = &mut env.host;
    let mac = SimConfig::default().mac;
    set_roce_address(h, 0, gid_v4([10, 77, 0, 1]), mac, 0, 2).unwrap();
    let cq = create_cq(h, uar, eqn, 6).unwrap();
    let mut s = QpSpec::rc(pd, uar, cq.cqn);
    s.st = QpServiceType::RC;
    let qp = create_qp(h, s).unwrap();
    modify_qp(h, CmdOpcode::RST2INIT_QP, qp.qpn, 0, init_attrs).unwrap();
    // Entry 0 deleted: the path's GID index names nothing.
    set_roce_address(h, 0, [0; 16], [0; 6], 0, 0).unwrap();
    let r = modify_qp(h, CmdOpcode::INIT2RTR_QP, qp.qpn, 0, rtr_attrs);
    expect_fail(r, CmdOpcode::INIT2RTR_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_QP_ATTRIBUTE);
    // An IPv6 GID at index 0 works as well.
    set_roce_address(h, 0, V6, mac, 1, 2).unwrap();
    modify_qp(h, CmdOpcode::INIT2RTR_QP, qp.qpn, 0, rtr_attrs).expect("INIT2RTR with the IPv6 GID");
}

fn query_nic_vport(h: &mut CmdHost) -> Vec<u8> {
    h.exec(
        CmdOpcode::QUERY_NIC_VPORT_CONTEXT,
        0,
        query_nic_vport_context_in::SIZE_BYTES,
        query_nic_vport_context_out::SIZE_BYTES,
        |_| {},
    )
    .expect("QUERY_NIC_VPORT_CONTEXT")
}

/// The permanent MAC in a QUERY_NIC_VPORT_CONTEXT output.
fn permanent_mac(o: &[u8]) -> [u8; 6] {
    let a = query_nic_vport_context_out::nic_vport_context.inner(nic_vport_context::permanent_address);
    let hi = a.inner(mac_address_layout::mac_addr_47_32).get(o) as u16;
    let lo = a.inner(mac_address_layout::mac_addr_31_0).get(o) as u32;
    let mut mac = [0; 6];
    mac[..2].copy_from_slice(&hi.to_be_bytes());
    mac[2..].copy_from_slice(&lo.to_be_bytes());
    mac
}

fn modify_nic_vport(h: &mut CmdHost, f: impl FnOnce(&mut [u8])) -> Result<(), CmdError> {
    h.exec(CmdOpcode::MODIFY_NIC_VPORT_CONTEXT, 0, modify_nic_vport_context_in::SIZE_BYTES, 16, f).map(drop)
}

#[test]
fn nic_vport_mac_and_mtu() {
    let mut env = Env::new();
    let h = &mut env.host;
    let cfg = SimConfig::default();
    let o = query_nic_vport(h);
    assert_eq!(permanent_mac(&o), cfg.mac, "permanent MAC");
    let c = query_nic_vport_context_out::nic_vport_context;
    assert_eq!(c.inner(nic_vport_context::mtu).get(&o), 1500);
    assert_eq!(c.inner(nic_vport_context::node_guid).get(&o), mac_to_guid(cfg.mac));
    assert_eq!(c.inner(nic_vport_context::roce_en).get(&o), 0, "bring_up does not enable RoCE");

    let sel = modify_nic_vport_context_in::field_select;
    let ctx = modify_nic_vport_context_in::nic_vport_context;
    modify_nic_vport(h, |i| {
        sel.inner(modify_nic_vport_field_select::mtu).set(i, 1);
        ctx.inner(nic_vport_context::mtu).set(i, 9000);
    })
    .expect("MTU 9000");
    assert_eq!(c.inner(nic_vport_context::mtu).get(&query_nic_vport(h)), 9000);
    // A field without its select bit is ignored.
    modify_nic_vport(h, |i| {
        ctx.inner(nic_vport_context::mtu).set(i, 1280);
    })
    .unwrap();
    assert_eq!(c.inner(nic_vport_context::mtu).get(&query_nic_vport(h)), 9000);
    let r = modify_nic_vport(h, |i| {
        sel.inner(modify_nic_vport_field_select::mtu).set(i, 1);
        ctx.inner(nic_vport_context::mtu).set(i, 100);
    });
    expect_fail(r, CmdOpcode::MODIFY_NIC_VPORT_CONTEXT, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    // A new permanent MAC.
    let new_mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    modify_nic_vport(h, |i| {
        sel.inner(modify_nic_vport_field_select::permanent_address).set(i, 1);
        let a = ctx.inner(nic_vport_context::permanent_address);
        a.inner(mac_address_layout::mac_addr_47_32).set(i, 0x0211);
        a.inner(mac_address_layout::mac_addr_31_0).set(i, 0x2233_4455);
    })
    .unwrap();
    assert_eq!(permanent_mac(&query_nic_vport(h)), new_mac);
    // Another vport is not ours.
    let r = h.exec(CmdOpcode::QUERY_NIC_VPORT_CONTEXT, 0, 16, query_nic_vport_context_out::SIZE_BYTES, |i| {
        query_nic_vport_context_in::other_vport.set(i, 1);
    });
    expect_fail(r, CmdOpcode::QUERY_NIC_VPORT_CONTEXT, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
}

#[test]
fn hca_vport_context_and_state() {
    let mut env = Env::new();
    let h = &mut env.host;
    let o = query_hca_vport(h, 1).expect("QUERY_HCA_VPORT_CONTEXT");
    let c = query_hca_vport_context_out::hca_vport_context;
    assert_eq!(c.inner(hca_vport_context::port_state).get(&o), IbPortState::ACTIVE.0.into(), "after INIT_HCA");
    assert_eq!(c.inner(hca_vport_context::port_physical_state).get(&o), PortPhysicalState::LINK_UP.0.into());
    assert_eq!(c.inner(hca_vport_context::port_guid).get(&o), mac_to_guid(SimConfig::default().mac));
    let o = query_vport_state(h).expect("QUERY_VPORT_STATE");
    assert_eq!(query_vport_state_out::state.get(&o), VportState::UP.0.into());
    let r = query_hca_vport(h, 2);
    expect_fail(r, CmdOpcode::QUERY_HCA_VPORT_CONTEXT, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
}
