//! Bit offsets of the capability, HCA bring-up and vport structures, checked against the PRM
//! positions (the Linux `mlx5_ifc.h` layout and the byte offsets in the device-contract notes).
use umlx_hwdesc::Field;
use umlx_hwdesc::ifc::{
    access_register_in, atomic_caps, cmd_hca_cap, hca_vport_context, host_endianness_reg, init_hca_in, manage_pages_in,
    manage_pages_out, modify_nic_vport_context_in, modify_nic_vport_field_select, nic_vport_context, paos_reg,
    ptys_reg, query_hca_cap_in, query_hca_cap_out, query_hca_vport_gid_out, query_issi_out,
    query_nic_vport_context_out, query_pages_out, query_q_counter_in, query_q_counter_out, query_roce_address_in,
    query_roce_address_out, query_vport_state_out, roce_addr_layout, roce_cap, set_driver_version_in, set_hca_cap_in,
    set_issi_in, teardown_hca_in,
};

/// Asserts a field's bit offset and width.
fn at(f: Field, offset_bits: usize, width_bits: usize) {
    assert_eq!((f.offset_bits, f.width_bits), (offset_bits, width_bits), "field {}", f.name);
}

#[test]
fn cmd_hca_cap_fields_sit_where_the_prm_says() {
    at(cmd_hca_cap::hca_cap_2, 0x20, 1);
    at(cmd_hca_cap::vhca_id, 0x30, 0x10);
    at(cmd_hca_cap::log_max_srq_sz, 0x80, 8);
    at(cmd_hca_cap::log_max_qp_sz, 0x88, 8);
    at(cmd_hca_cap::log_max_qp, 0x9b, 5);
    at(cmd_hca_cap::log_max_srq, 0xab, 5);
    at(cmd_hca_cap::log_max_cq_sz, 0xc8, 8);
    at(cmd_hca_cap::log_max_cq, 0xdb, 5);
    at(cmd_hca_cap::log_max_eq_sz, 0xe0, 8);
    at(cmd_hca_cap::log_max_mkey, 0xea, 6);
    at(cmd_hca_cap::fast_teardown, 0xfb, 1);
    at(cmd_hca_cap::log_max_eq, 0xfc, 4);
    at(cmd_hca_cap::log_max_mrw_sz, 0x109, 7);
    at(cmd_hca_cap::force_teardown, 0x110, 1);
    at(cmd_hca_cap::log_max_ra_req_qp, 0x14a, 6);
    at(cmd_hca_cap::log_max_ra_res_qp, 0x15a, 6);
    at(cmd_hca_cap::end_pad, 0x160, 1);
    at(cmd_hca_cap::cache_line_128byte, 0x164, 1);
    at(cmd_hca_cap::gid_table_size, 0x170, 0x10);
    at(cmd_hca_cap::pkey_table_size, 0x190, 0x10);
    at(cmd_hca_cap::disable_link_up, 0x1b4, 1);
    at(cmd_hca_cap::port_type, 0x1b6, 2);
    at(cmd_hca_cap::num_ports, 0x1b8, 8);
    at(cmd_hca_cap::log_max_msg, 0x1c3, 5);
    at(cmd_hca_cap::cqe_version, 0x1fc, 4);
    at(cmd_hca_cap::cmdif_checksum, 0x210, 2);
    at(cmd_hca_cap::wq_signature, 0x214, 1);
    at(cmd_hca_cap::dct, 0x21a, 1);
    at(cmd_hca_cap::eth_net_offloads, 0x21c, 1);
    at(cmd_hca_cap::roce, 0x21d, 1);
    at(cmd_hca_cap::atomic, 0x21e, 1);
    at(cmd_hca_cap::cq_oi, 0x220, 1);
    at(cmd_hca_cap::pg, 0x227, 1);
    at(cmd_hca_cap::xrc, 0x23c, 1);
    at(cmd_hca_cap::rc, 0x23f, 1);
    at(cmd_hca_cap::uar_4k, 0x240, 1);
    at(cmd_hca_cap::uar_sz, 0x24a, 6);
    at(cmd_hca_cap::umem_uid_0, 0x252, 1);
    at(cmd_hca_cap::log_pg_sz, 0x258, 8);
    at(cmd_hca_cap::bf, 0x260, 1);
    at(cmd_hca_cap::driver_version, 0x261, 1);
    at(cmd_hca_cap::mkey_by_name, 0x266, 1);
    at(cmd_hca_cap::log_bf_reg_size, 0x26b, 5);
    at(cmd_hca_cap::max_wqe_sz_sq, 0x290, 0x10);
    at(cmd_hca_cap::max_wqe_sz_rq, 0x2b0, 0x10);
    at(cmd_hca_cap::log_max_transport_domain, 0x323, 5);
    at(cmd_hca_cap::log_max_pd, 0x32b, 5);
    at(cmd_hca_cap::log_max_xrcd, 0x33b, 5);
    at(cmd_hca_cap::log_max_rq, 0x363, 5);
    at(cmd_hca_cap::log_max_tis, 0x37b, 5);
    at(cmd_hca_cap::general_obj_types, 0x400, 0x40);
    at(cmd_hca_cap::log_uar_page_sz, 0x490, 0x10);
    at(cmd_hca_cap::device_frequency_khz, 0x4e0, 0x20);
    at(cmd_hca_cap::num_of_uars_per_page, 0x520, 0x20);
    at(cmd_hca_cap::num_vhca_ports, 0x610, 8);
    at(cmd_hca_cap::match_definer_format_supported, 0x7c0, 0x40);
    assert_eq!(cmd_hca_cap::SIZE_BYTES, 0x100);
}

#[test]
fn contract_byte_offsets_of_general_caps() {
    // Appendix B of the device-contract notes gives byte offsets in the capability area.
    assert_eq!(cmd_hca_cap::log_max_srq_sz.offset_bytes(), 0x10);
    assert_eq!(cmd_hca_cap::log_max_qp.offset_bytes(), 0x13);
    assert_eq!(cmd_hca_cap::port_type.offset_bytes(), 0x36);
    assert_eq!(cmd_hca_cap::num_ports.offset_bytes(), 0x37);
    assert_eq!(cmd_hca_cap::cmdif_checksum.offset_bytes(), 0x42);
    assert_eq!(cmd_hca_cap::roce.offset_bytes(), 0x43);
    assert_eq!(cmd_hca_cap::umem_uid_0.offset_bytes(), 0x4a);
    assert_eq!(cmd_hca_cap::log_bf_reg_size.offset_bytes(), 0x4d);
    assert_eq!(cmd_hca_cap::max_wqe_sz_sq.offset_bytes(), 0x52);
    assert_eq!(cmd_hca_cap::log_uar_page_sz.offset_bytes(), 0x92);
    assert_eq!(cmd_hca_cap::device_frequency_khz.offset_bytes(), 0x9c);
    assert_eq!(cmd_hca_cap::num_vhca_ports.offset_bytes(), 0xc2);

    // A bit set through the field lands on the documented bit of the documented byte.
    let mut cap = [0u8; 0x100];
    assert!(cmd_hca_cap::roce.set(&mut cap, 1));
    assert!(cmd_hca_cap::atomic.set(&mut cap, 1));
    assert_eq!(cap[0x43], 0b0000_0110); // dw16 bits [2] and [1]
    assert!(cmd_hca_cap::umem_uid_0.set(&mut cap, 1));
    assert_eq!(cap[0x4a], 0x20); // dw18 bit 13
    assert!(cmd_hca_cap::port_type.set(&mut cap, 1));
    assert!(cmd_hca_cap::num_ports.set(&mut cap, 1));
    assert_eq!(&cap[0x36..0x38], &[0x01, 0x01]);
}

#[test]
fn roce_and_atomic_caps() {
    at(roce_cap::roce_apm, 0, 1);
    at(roce_cap::sw_r_roce_src_udp_port, 4, 1);
    at(roce_cap::fl_rc_qp_when_roce_disabled, 5, 1);
    at(roce_cap::fl_rc_qp_when_roce_enabled, 6, 1);
    at(roce_cap::qp_ts_format, 0x1e, 2);
    at(roce_cap::l3_type, 0x8c, 4);
    at(roce_cap::roce_version, 0x98, 8);
    at(roce_cap::r_roce_dest_udp_port, 0xb0, 0x10);
    at(roce_cap::r_roce_max_src_udp_port, 0xc0, 0x10);
    at(roce_cap::r_roce_min_src_udp_port, 0xd0, 0x10);
    at(roce_cap::roce_address_table_size, 0xf0, 0x10);
    assert_eq!(roce_cap::SIZE_BITS, 0x800);
    at(atomic_caps::atomic_req_8B_endianness_mode, 0x40, 2);
    at(atomic_caps::atomic_operations, 0x90, 0x10);
    at(atomic_caps::atomic_size_qp, 0xb0, 0x10);
    at(atomic_caps::atomic_size_dc, 0xd0, 0x10);
    assert_eq!(atomic_caps::SIZE_BITS, 0x800);
}

#[test]
fn query_and_set_hca_cap_carry_a_4096_byte_page() {
    at(query_hca_cap_in::op_mod, 0x30, 0x10);
    at(query_hca_cap_in::other_function, 0x40, 1);
    at(query_hca_cap_in::function_id, 0x50, 0x10);
    at(query_hca_cap_out::capability, 0x80, 0x8000);
    at(set_hca_cap_in::capability, 0x80, 0x8000);
    assert_eq!(query_hca_cap_out::SIZE_BYTES, 0x1010);
    assert_eq!(set_hca_cap_in::SIZE_BYTES, 0x1010);
    // A capability seen from inside the command: general cap `roce` at output byte 0x53.
    let roce = query_hca_cap_out::capability.inner(cmd_hca_cap::roce);
    assert_eq!(roce.offset_bits, 0x80 + 0x21d);
    let mut out = [0u8; 0x1010];
    assert!(roce.set(&mut out, 1));
    assert_eq!(out[0x53], 0x04);
    assert_eq!(query_hca_cap_out::capability.bytes(&out).map(<[u8]>::len), Some(0x1000));
}

#[test]
fn hca_bring_up_commands() {
    at(query_issi_out::current_issi, 0x50, 0x10);
    at(query_issi_out::supported_issi_dw0, 0x360, 0x20);
    assert_eq!(query_issi_out::supported_issi_dw0.offset_bytes(), 0x6c);
    at(set_issi_in::current_issi, 0x50, 0x10);
    at(query_pages_out::function_id, 0x50, 0x10);
    at(query_pages_out::num_pages, 0x60, 0x20);
    at(manage_pages_in::function_id, 0x50, 0x10);
    at(manage_pages_in::input_num_entries, 0x60, 0x20);
    at(manage_pages_in::pas, 0x80, 0);
    assert_eq!(manage_pages_in::pas.elem(1).offset_bits, 0xc0);
    at(manage_pages_out::output_num_entries, 0x40, 0x20);
    at(manage_pages_out::pas, 0x80, 0);
    at(init_hca_in::sw_owner_id, 0x80, 0x80);
    at(teardown_hca_in::profile, 0x50, 0x10);
    at(access_register_in::register_id, 0x50, 0x10);
    at(access_register_in::argument, 0x60, 0x20);
    at(access_register_in::register_data, 0x80, 0);
    at(set_driver_version_in::driver_version, 0x80, 0x200);
    assert_eq!(host_endianness_reg::SIZE_BYTES, 16);
    let mut he = [0u8; 16];
    assert!(host_endianness_reg::he.set(&mut he, 1));
    assert_eq!(he[0], 0x80);
}

#[test]
fn q_counters() {
    at(query_q_counter_in::clear, 0xc0, 1);
    at(query_q_counter_in::counter_set_id, 0xf8, 8);
    at(query_q_counter_out::rx_write_requests, 0x80, 0x20);
    at(query_q_counter_out::rx_read_requests, 0xc0, 0x20);
    at(query_q_counter_out::out_of_buffer, 0x180, 0x20);
    at(query_q_counter_out::local_ack_timeout_err, 0x300, 0x20);
    at(query_q_counter_out::req_rnr_retries_exceeded, 0x380, 0x20);
    at(query_q_counter_out::resp_local_length_error, 0x3c0, 0x20);
    at(query_q_counter_out::req_cqe_flush_error, 0x600, 0x20);
    at(query_q_counter_out::roce_slow_restart_trans, 0x6c0, 0x20);
}

#[test]
fn vport_contexts() {
    at(nic_vport_context::roce_en, 0x1f, 1);
    at(nic_vport_context::mtu, 0x130, 0x10);
    at(nic_vport_context::system_image_guid, 0x140, 0x40);
    at(nic_vport_context::port_guid, 0x180, 0x40);
    at(nic_vport_context::node_guid, 0x1c0, 0x40);
    at(nic_vport_context::allowed_list_size, 0x794, 0xc);
    at(nic_vport_context::permanent_address, 0x7a0, 0x40);
    assert_eq!(nic_vport_context::permanent_address.offset_bytes(), 0xf4);
    at(nic_vport_context::current_uc_mac_address, 0x800, 0);
    // The MAC of QUERY_NIC_VPORT_CONTEXT sits at output bytes 0x106..0x10c.
    let mac = query_nic_vport_context_out::nic_vport_context
        .inner(nic_vport_context::permanent_address)
        .inner(umlx_hwdesc::ifc::mac_address_layout::mac_addr_47_32);
    assert_eq!(mac.offset_bytes(), 0x106);

    at(modify_nic_vport_field_select::roce_en, 0x1e, 1);
    at(modify_nic_vport_field_select::mtu, 0x19, 1);
    at(modify_nic_vport_field_select::permanent_address, 0x1c, 1);
    at(modify_nic_vport_context_in::field_select, 0x60, 0x20);
    at(modify_nic_vport_context_in::nic_vport_context, 0x800, 0x800);

    at(hca_vport_context::port_physical_state, 0x110, 4);
    at(hca_vport_context::port_state, 0x118, 4);
    at(hca_vport_context::vport_state, 0x11c, 4);
    at(hca_vport_context::port_guid, 0x180, 0x40);
    at(hca_vport_context::lid, 0x300, 0x10);
    assert_eq!(hca_vport_context::SIZE_BITS, 0x1000);
    at(query_hca_vport_gid_out::gids_num, 0x60, 0x10);
    at(query_hca_vport_gid_out::gid, 0x80, 0);
    assert_eq!(query_hca_vport_gid_out::gid.elem(2).offset_bits, 0x180);

    at(query_vport_state_out::admin_state, 0x78, 4);
    at(query_vport_state_out::state, 0x7c, 4);
}

#[test]
fn roce_address_table() {
    at(roce_addr_layout::source_l3_address, 0, 0x80);
    at(roce_addr_layout::vlan_valid, 0x83, 1);
    at(roce_addr_layout::vlan_id, 0x84, 0xc);
    at(roce_addr_layout::source_mac_47_32, 0x90, 0x10);
    at(roce_addr_layout::source_mac_31_0, 0xa0, 0x20);
    at(roce_addr_layout::roce_l3_type, 0xd4, 4);
    at(roce_addr_layout::roce_version, 0xd8, 8);
    assert_eq!(roce_addr_layout::SIZE_BYTES, 32);
    at(query_roce_address_in::roce_address_index, 0x40, 0x10);
    at(query_roce_address_in::vhca_port_num, 0x5c, 4);
    at(query_roce_address_out::roce_address, 0x80, 0x100);
}

#[test]
fn ptys_fields_sit_where_the_prm_says() {
    assert_eq!(ptys_reg::SIZE_BYTES, 64);
    at(ptys_reg::local_port, 0x08, 8);
    at(ptys_reg::proto_mask, 0x1d, 3);
    at(ptys_reg::data_rate_oper, 0x30, 0x10);
    at(ptys_reg::ext_eth_proto_capability, 0x40, 0x20);
    at(ptys_reg::eth_proto_capability, 0x60, 0x20);
    at(ptys_reg::ext_eth_proto_admin, 0xa0, 0x20);
    at(ptys_reg::eth_proto_admin, 0xc0, 0x20);
    at(ptys_reg::ext_eth_proto_oper, 0x100, 0x20);
    at(ptys_reg::eth_proto_oper, 0x120, 0x20);
    at(ptys_reg::ib_link_width_oper, 0x140, 0x10);
    at(ptys_reg::connector_type, 0x17c, 4);
}

#[test]
fn paos_fields_sit_where_the_prm_says() {
    assert_eq!(paos_reg::SIZE_BYTES, 16);
    at(paos_reg::local_port, 0x08, 8);
    at(paos_reg::admin_status, 0x14, 4);
    at(paos_reg::oper_status, 0x1c, 4);
    at(paos_reg::ase, 0x20, 1);
}
