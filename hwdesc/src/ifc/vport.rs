//! Virtual-port contexts and the commands that read and change them: the NIC vport context
//! (QUERY / MODIFY_NIC_VPORT_CONTEXT), the HCA vport context and GID table
//! (QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID), the vport link state (QUERY_VPORT_STATE), and
//! the RoCE address (GID) table entries (SET / QUERY_ROCE_ADDRESS). Also the `mac_address_layout`
//! the NIC vport context nests.
//!
//! Layouts follow the newest Linux `mlx5_ifc.h`. Where rdma-core's copy differs:
//! - `nic_vport_context`: rdma-core names only `roce_en` (bit 0x1f) and reserves the rest;
//!   Linux (followed) names every field, including `mtu`, the GUIDs and `permanent_address`.
//! - `query_nic_vport_context_in`: rdma-core reserves 0x40..0x80; Linux (followed) has
//!   `other_vport`, `vport_number` and `allowed_list_type`.
//! - `hca_vport_context`, QUERY_HCA_VPORT_CONTEXT, QUERY_HCA_VPORT_GID, QUERY_VPORT_STATE and
//!   SET_ROCE_ADDRESS are in Linux only.
//! - Linux declares the GID tail of `query_hca_vport_gid_out` as an array of the nested
//!   `array128_auto` (16 bytes each); here it is `gid: [0x80; 0]`.
//! - `nic_vport_context` ends in the variable tail `current_uc_mac_address` (64-bit entries of
//!   `mac_address_layout` shape) that lies past its 0x800 bits; it is declared `[0x40; 0]`.

crate::ifc! {
    /// `mac_address_layout`: a MAC address in the two low bytes of dword 0 and all of dword 1.
    struct mac_address_layout[0x40] {
        reserved_at_0: 0x10,
        mac_addr_47_32: 0x10,

        mac_addr_31_0: 0x20,
    }

    /// `nic_vport_context`: the Ethernet view of a vport (RoCE enable, MTU, MAC, promiscuity).
    struct nic_vport_context[0x800] {
        reserved_at_0: 0x5,
        min_wqe_inline_mode: 0x3,
        reserved_at_8: 0x15,
        disable_mc_local_lb: 0x1,
        disable_uc_local_lb: 0x1,
        roce_en: 0x1,

        arm_change_event: 0x1,
        reserved_at_21: 0x1a,
        event_on_mtu: 0x1,
        event_on_promisc_change: 0x1,
        event_on_vlan_change: 0x1,
        event_on_mc_address_change: 0x1,
        event_on_uc_address_change: 0x1,

        vhca_id_type: 0x1,
        reserved_at_41: 0xb,
        affiliation_criteria: 0x4,
        affiliated_vhca_id: 0x10,

        reserved_at_60: 0xa0,

        reserved_at_100: 0x1,
        sd_group: 0x3,
        reserved_at_104: 0x1c,

        reserved_at_120: 0x10,
        mtu: 0x10,

        system_image_guid: 0x40,
        port_guid: 0x40,
        node_guid: 0x40,

        reserved_at_200: 0x140,
        qkey_violation_counter: 0x10,
        reserved_at_350: 0x430,

        promisc_uc: 0x1,
        promisc_mc: 0x1,
        promisc_all: 0x1,
        reserved_at_783: 0x2,
        allowed_list_type: 0x3,
        reserved_at_788: 0xc,
        allowed_list_size: 0xc,

        permanent_address: mac_address_layout,

        reserved_at_7e0: 0x20,

        current_uc_mac_address: [0x40; 0],
    }

    /// `hca_vport_context`: the InfiniBand/HCA view of a vport (port state, GUIDs, LIDs).
    struct hca_vport_context[0x1000] {
        field_select: 0x20,

        reserved_at_20: 0xe0,

        sm_virt_aware: 0x1,
        has_smi: 0x1,
        has_raw: 0x1,
        grh_required: 0x1,
        reserved_at_104: 0x4,
        num_port_plane: 0x8,
        port_physical_state: 0x4,
        vport_state_policy: 0x4,
        port_state: 0x4,
        vport_state: 0x4,

        reserved_at_120: 0x20,

        system_image_guid: 0x40,

        port_guid: 0x40,

        node_guid: 0x40,

        cap_mask1: 0x20,

        cap_mask1_field_select: 0x20,

        cap_mask2: 0x20,

        cap_mask2_field_select: 0x20,

        reserved_at_280: 0x80,

        lid: 0x10,
        reserved_at_310: 0x4,
        init_type_reply: 0x4,
        lmc: 0x3,
        subnet_timeout: 0x5,

        sm_lid: 0x10,
        sm_sl: 0x4,
        reserved_at_334: 0xc,

        qkey_violation_counter: 0x10,
        pkey_violation_counter: 0x10,

        reserved_at_360: 0xca0,
    }

    /// `roce_addr_layout`: one RoCE address (GID) table entry: L3 address, VLAN, MAC, version.
    struct roce_addr_layout[0x100] {
        source_l3_address: [0x8; 0x10],

        reserved_at_80: 0x3,
        vlan_valid: 0x1,
        vlan_id: 0xc,
        source_mac_47_32: 0x10,

        source_mac_31_0: 0x20,

        reserved_at_c0: 0x14,
        roce_l3_type: 0x4,
        roce_version: 0x8,

        reserved_at_e0: 0x20,
    }

    /// QUERY_HCA_VPORT_CONTEXT input.
    struct query_hca_vport_context_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xb,
        port_num: 0x4,
        vport_number: 0x10,

        reserved_at_60: 0x20,
    }

    /// QUERY_HCA_VPORT_CONTEXT output: the `hca_vport_context`.
    struct query_hca_vport_context_out[0x1080] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        hca_vport_context: hca_vport_context,
    }

    /// QUERY_HCA_VPORT_GID input: `gid_index` 0xffff asks for the whole table.
    struct query_hca_vport_gid_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xb,
        port_num: 0x4,
        vport_number: 0x10,

        reserved_at_60: 0x10,
        gid_index: 0x10,
    }

    /// QUERY_HCA_VPORT_GID output: `gids_num` 128-bit GIDs in the `gid` tail.
    struct query_hca_vport_gid_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,

        gids_num: 0x10,
        reserved_at_70: 0x10,

        gid: [0x80; 0],
    }

    /// QUERY_NIC_VPORT_CONTEXT input.
    struct query_nic_vport_context_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xf,
        vport_number: 0x10,

        reserved_at_60: 0x5,
        allowed_list_type: 0x3,
        reserved_at_68: 0x18,
    }

    /// QUERY_NIC_VPORT_CONTEXT output: the `nic_vport_context`.
    struct query_nic_vport_context_out[0x880] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        nic_vport_context: nic_vport_context,
    }

    /// `modify_nic_vport_field_select`: which `nic_vport_context` fields MODIFY_NIC_VPORT_CONTEXT
    /// changes.
    struct modify_nic_vport_field_select[0x20] {
        reserved_at_0: 0x12,
        affiliation: 0x1,
        reserved_at_13: 0x1,
        disable_uc_local_lb: 0x1,
        disable_mc_local_lb: 0x1,
        node_guid: 0x1,
        port_guid: 0x1,
        min_inline: 0x1,
        mtu: 0x1,
        change_event: 0x1,
        promisc: 0x1,
        permanent_address: 0x1,
        addresses_list: 0x1,
        roce_en: 0x1,
        reserved_at_1f: 0x1,
    }

    /// MODIFY_NIC_VPORT_CONTEXT input: the selected fields of `nic_vport_context`.
    struct modify_nic_vport_context_in[0x1000] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xf,
        vport_number: 0x10,

        field_select: modify_nic_vport_field_select,

        reserved_at_80: 0x780,

        nic_vport_context: nic_vport_context,
    }

    /// MODIFY_NIC_VPORT_CONTEXT output.
    struct modify_nic_vport_context_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_VPORT_STATE input: op_mod 0 vNIC vport, 1 e-switch vport, 2 uplink.
    struct query_vport_state_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xf,
        vport_number: 0x10,

        reserved_at_60: 0x20,
    }

    /// QUERY_VPORT_STATE output: administrative and operational state (0 down, 1 up).
    struct query_vport_state_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,

        reserved_at_60: 0x18,
        admin_state: 0x4,
        state: 0x4,
    }

    /// SET_ROCE_ADDRESS input: writes RoCE address table entry `roce_address_index`.
    struct set_roce_address_in[0x180] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        roce_address_index: 0x10,
        reserved_at_50: 0xc,
        vhca_port_num: 0x4,

        reserved_at_60: 0x20,

        roce_address: roce_addr_layout,
    }

    /// SET_ROCE_ADDRESS output.
    struct set_roce_address_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_ROCE_ADDRESS input: reads RoCE address table entry `roce_address_index`.
    struct query_roce_address_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        roce_address_index: 0x10,
        reserved_at_50: 0xc,
        vhca_port_num: 0x4,

        reserved_at_60: 0x20,
    }

    /// QUERY_ROCE_ADDRESS output: the `roce_addr_layout` entry.
    struct query_roce_address_out[0x180] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        roce_address: roce_addr_layout,
    }
}
