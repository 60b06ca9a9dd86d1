//! Device capabilities: the general capability page `cmd_hca_cap` (QUERY_HCA_CAP / SET_HCA_CAP
//! op_mod type 0x0), the RoCE page `roce_cap` (type 0x4) and the atomic page `atomic_caps`
//! (type 0x3), and the QUERY_HCA_CAP / SET_HCA_CAP command inputs and outputs that carry them.
//!
//! Layouts follow the newest Linux `mlx5_ifc.h`; rdma-core's copy agrees on every offset the two
//! share but is older. Where they differ:
//! - `cmd_hca_cap`: Linux names many bits rdma-core reserves and vice versa, and spells some
//!   fields differently (Linux `disable_link_up`, `enhanced_error_q_counters`, `ports_check`,
//!   `striding_rq`, `dc_req_scat_data_cqe`, `umr_ptr_rlky`, `cqe_compression_128`,
//!   `modify_rq_counter_set_id`, `flex_parser_id_geneve_tlv_option_0` against rdma-core
//!   `disable_link_up_by_init_hca`, `enhanced_retransmission_q_counters`, `port_checks`,
//!   `eth_striding_wq`, `dc_req_sctr_data_cqe`, `umr_ptr_rlkey`, `cqe_compression_128b`,
//!   `modify_rq_counters_set_id`, `flex_parser_id_geneve_opt_0`). Bits that only rdma-core names
//!   (for example `access_other_hca_roce` at 0x0, `qp_data_in_order` at 0x62,
//!   `log_dma_mmo_max_size` at 0x6b, `tunneled_atomic` at 0xf0, `dma_mmo_sq` at 0x153,
//!   `dma_mmo_qp` at 0x748) are reserved here, as in Linux.
//! - `roce_cap`: rdma-core names only the first dword; Linux (followed) also has `roce_version`,
//!   `l3_type`, the RoCEv2 UDP ports and `roce_address_table_size`.
//! - `atomic_caps`: rdma-core names `fetch_add_pci_atomic`, `swap_pci_atomic` and
//!   `compare_swap_pci_atomic` at 0x280/0x290/0x2a0; Linux (followed) reserves 0xe0..0x800.
//! - `query_hca_cap_in` / `set_hca_cap_in`: Linux has `ec_vf_function` at 0x41 (rdma-core
//!   reserves it).
//!
//! The `capability` field of the command structures is the 4096-byte `hca_cap_union`; it is
//! declared as a byte array, and the page inside it is read through the page's own fields
//! (`query_hca_cap_out::capability.inner(cmd_hca_cap::roce)`).

crate::ifc! {
    /// `cmd_hca_cap`: the general device capabilities (capability type 0x0).
    struct cmd_hca_cap[0x800] {
        reserved_at_0: 0x6,
        page_request_disable: 0x1,
        abs_native_port_num: 0x1,
        reserved_at_8: 0x8,
        shared_object_to_user_object_allowed: 0x1,
        reserved_at_11: 0xe,
        vhca_resource_manager: 0x1,

        hca_cap_2: 0x1,
        create_lag_when_not_master_up: 0x1,
        dtor: 0x1,
        event_on_vhca_state_teardown_request: 0x1,
        event_on_vhca_state_in_use: 0x1,
        event_on_vhca_state_active: 0x1,
        event_on_vhca_state_allocated: 0x1,
        event_on_vhca_state_invalid: 0x1,
        reserved_at_28: 0x8,
        vhca_id: 0x10,

        reserved_at_40: 0x40,

        log_max_srq_sz: 0x8,
        log_max_qp_sz: 0x8,
        event_cap: 0x1,
        reserved_at_91: 0x2,
        isolate_vl_tc_new: 0x1,
        reserved_at_94: 0x4,
        prio_tag_required: 0x1,
        reserved_at_99: 0x2,
        log_max_qp: 0x5,

        reserved_at_a0: 0x3,
        ece_support: 0x1,
        reserved_at_a4: 0x5,
        reg_c_preserve: 0x1,
        reserved_at_aa: 0x1,
        log_max_srq: 0x5,
        reserved_at_b0: 0x1,
        uplink_follow: 0x1,
        ts_cqe_to_dest_cqn: 0x1,
        reserved_at_b3: 0x6,
        go_back_n: 0x1,
        reserved_at_ba: 0x6,

        max_sgl_for_optimized_performance: 0x8,
        log_max_cq_sz: 0x8,
        relaxed_ordering_write_umr: 0x1,
        relaxed_ordering_read_umr: 0x1,
        reserved_at_d2: 0x7,
        virtio_net_device_emualtion_manager: 0x1,
        virtio_blk_device_emualtion_manager: 0x1,
        log_max_cq: 0x5,

        log_max_eq_sz: 0x8,
        relaxed_ordering_write: 0x1,
        relaxed_ordering_read_pci_enabled: 0x1,
        log_max_mkey: 0x6,
        reserved_at_f0: 0x6,
        terminate_scatter_list_mkey: 0x1,
        repeated_mkey: 0x1,
        dump_fill_mkey: 0x1,
        reserved_at_f9: 0x2,
        fast_teardown: 0x1,
        log_max_eq: 0x4,

        max_indirection: 0x8,
        fixed_buffer_size: 0x1,
        log_max_mrw_sz: 0x7,
        force_teardown: 0x1,
        reserved_at_111: 0x1,
        log_max_bsf_list_size: 0x6,
        umr_extended_translation_offset: 0x1,
        null_mkey: 0x1,
        log_max_klm_list_size: 0x6,

        reserved_at_120: 0x2,
        qpc_extension: 0x1,
        reserved_at_123: 0x7,
        log_max_ra_req_dc: 0x6,
        reserved_at_130: 0x2,
        eth_wqe_too_small: 0x1,
        reserved_at_133: 0x6,
        vnic_env_cq_overrun: 0x1,
        log_max_ra_res_dc: 0x6,

        reserved_at_140: 0x5,
        release_all_pages: 0x1,
        must_not_use: 0x1,
        reserved_at_147: 0x2,
        roce_accl: 0x1,
        log_max_ra_req_qp: 0x6,
        reserved_at_150: 0xa,
        log_max_ra_res_qp: 0x6,

        end_pad: 0x1,
        cc_query_allowed: 0x1,
        cc_modify_allowed: 0x1,
        start_pad: 0x1,
        cache_line_128byte: 0x1,
        reserved_at_165: 0x4,
        rts2rts_qp_counters_set_id: 0x1,
        reserved_at_16a: 0x2,
        vnic_env_int_rq_oob: 0x1,
        sbcam_reg: 0x1,
        reserved_at_16e: 0x1,
        qcam_reg: 0x1,
        gid_table_size: 0x10,

        out_of_seq_cnt: 0x1,
        vport_counters: 0x1,
        retransmission_q_counters: 0x1,
        debug: 0x1,
        modify_rq_counter_set_id: 0x1,
        rq_delay_drop: 0x1,
        max_qp_cnt: 0xa,
        pkey_table_size: 0x10,

        vport_group_manager: 0x1,
        vhca_group_manager: 0x1,
        ib_virt: 0x1,
        eth_virt: 0x1,
        vnic_env_queue_counters: 0x1,
        ets: 0x1,
        nic_flow_table: 0x1,
        eswitch_manager: 0x1,
        device_memory: 0x1,
        mcam_reg: 0x1,
        pcam_reg: 0x1,
        local_ca_ack_delay: 0x5,
        port_module_event: 0x1,
        enhanced_error_q_counters: 0x1,
        ports_check: 0x1,
        reserved_at_1b3: 0x1,
        disable_link_up: 0x1,
        beacon_led: 0x1,
        port_type: 0x2,
        num_ports: 0x8,

        reserved_at_1c0: 0x1,
        pps: 0x1,
        pps_modify: 0x1,
        log_max_msg: 0x5,
        reserved_at_1c8: 0x4,
        max_tc: 0x4,
        temp_warn_event: 0x1,
        dcbx: 0x1,
        general_notification_event: 0x1,
        reserved_at_1d3: 0x2,
        fpga: 0x1,
        rol_s: 0x1,
        rol_g: 0x1,
        reserved_at_1d8: 0x1,
        wol_s: 0x1,
        wol_g: 0x1,
        wol_a: 0x1,
        wol_b: 0x1,
        wol_m: 0x1,
        wol_u: 0x1,
        wol_p: 0x1,

        stat_rate_support: 0x10,
        reserved_at_1f0: 0x1,
        pci_sync_for_fw_update_event: 0x1,
        reserved_at_1f2: 0x6,
        init2_lag_tx_port_affinity: 0x1,
        reserved_at_1f9: 0x2,
        wqe_based_flow_table_update_cap: 0x1,
        cqe_version: 0x4,

        compact_address_vector: 0x1,
        striding_rq: 0x1,
        reserved_at_202: 0x1,
        ipoib_enhanced_offloads: 0x1,
        ipoib_basic_offloads: 0x1,
        reserved_at_205: 0x1,
        repeated_block_disabled: 0x1,
        umr_modify_entity_size_disabled: 0x1,
        umr_modify_atomic_disabled: 0x1,
        umr_indirect_mkey_disabled: 0x1,
        umr_fence: 0x2,
        dc_req_scat_data_cqe: 0x1,
        reserved_at_20d: 0x2,
        drain_sigerr: 0x1,
        cmdif_checksum: 0x2,
        sigerr_cqe: 0x1,
        reserved_at_213: 0x1,
        wq_signature: 0x1,
        sctr_data_cqe: 0x1,
        reserved_at_216: 0x1,
        sho: 0x1,
        tph: 0x1,
        rf: 0x1,
        dct: 0x1,
        qos: 0x1,
        eth_net_offloads: 0x1,
        roce: 0x1,
        atomic: 0x1,
        reserved_at_21f: 0x1,

        cq_oi: 0x1,
        cq_resize: 0x1,
        cq_moderation: 0x1,
        cq_period_mode_modify: 0x1,
        reserved_at_224: 0x2,
        cq_eq_remap: 0x1,
        pg: 0x1,
        block_lb_mc: 0x1,
        reserved_at_229: 0x1,
        scqe_break_moderation: 0x1,
        cq_period_start_from_cqe: 0x1,
        cd: 0x1,
        reserved_at_22d: 0x1,
        apm: 0x1,
        vector_calc: 0x1,
        umr_ptr_rlky: 0x1,
        imaicl: 0x1,
        qp_packet_based: 0x1,
        reserved_at_233: 0x3,
        qkv: 0x1,
        pkv: 0x1,
        set_deth_sqpn: 0x1,
        reserved_at_239: 0x3,
        xrc: 0x1,
        ud: 0x1,
        uc: 0x1,
        rc: 0x1,

        uar_4k: 0x1,
        reserved_at_241: 0x7,
        fl_rc_qp_when_roce_disabled: 0x1,
        regexp_params: 0x1,
        uar_sz: 0x6,
        port_selection_cap: 0x1,
        nic_cap_reg: 0x1,
        umem_uid_0: 0x1,
        reserved_at_253: 0x5,
        log_pg_sz: 0x8,

        bf: 0x1,
        driver_version: 0x1,
        pad_tx_eth_packet: 0x1,
        reserved_at_263: 0x3,
        mkey_by_name: 0x1,
        reserved_at_267: 0x4,
        log_bf_reg_size: 0x5,

        reserved_at_270: 0x3,
        qp_error_syndrome: 0x1,
        reserved_at_274: 0x2,
        lag_dct: 0x2,
        lag_tx_port_affinity: 0x1,
        lag_native_fdb_selection: 0x1,
        reserved_at_27a: 0x1,
        lag_master: 0x1,
        num_lag_ports: 0x4,

        reserved_at_280: 0x10,
        max_wqe_sz_sq: 0x10,

        reserved_at_2a0: 0xb,
        shampo: 0x1,
        reserved_at_2ac: 0x4,
        max_wqe_sz_rq: 0x10,

        max_flow_counter_31_16: 0x10,
        max_wqe_sz_sq_dc: 0x10,

        reserved_at_2e0: 0x7,
        max_qp_mcg: 0x19,

        reserved_at_300: 0x10,
        flow_counter_bulk_alloc: 0x8,
        log_max_mcg: 0x8,

        reserved_at_320: 0x3,
        log_max_transport_domain: 0x5,
        reserved_at_328: 0x2,
        relaxed_ordering_read: 0x1,
        log_max_pd: 0x5,
        dp_ordering_ooo_all_ud: 0x1,
        dp_ordering_ooo_all_uc: 0x1,
        dp_ordering_ooo_all_xrc: 0x1,
        dp_ordering_ooo_all_dc: 0x1,
        dp_ordering_ooo_all_rc: 0x1,
        pcie_reset_using_hotreset_method: 0x1,
        pci_sync_for_fw_update_with_driver_unload: 0x1,
        vnic_env_cnt_steering_fail: 0x1,
        vport_counter_local_loopback: 0x1,
        q_counter_aggregation: 0x1,
        q_counter_other_vport: 0x1,
        log_max_xrcd: 0x5,

        nic_receive_steering_discard: 0x1,
        receive_discard_vport_down: 0x1,
        transmit_discard_vport_down: 0x1,
        eq_overrun_count: 0x1,
        reserved_at_344: 0x1,
        invalid_command_count: 0x1,
        quota_exceeded_count: 0x1,
        reserved_at_347: 0x1,
        log_max_flow_counter_bulk: 0x8,
        max_flow_counter_15_0: 0x10,

        reserved_at_360: 0x3,
        log_max_rq: 0x5,
        reserved_at_368: 0x3,
        log_max_sq: 0x5,
        reserved_at_370: 0x3,
        log_max_tir: 0x5,
        reserved_at_378: 0x3,
        log_max_tis: 0x5,

        basic_cyclic_rcv_wqe: 0x1,
        reserved_at_381: 0x2,
        log_max_rmp: 0x5,
        reserved_at_388: 0x3,
        log_max_rqt: 0x5,
        reserved_at_390: 0x3,
        log_max_rqt_size: 0x5,
        reserved_at_398: 0x3,
        log_max_tis_per_sq: 0x5,

        ext_stride_num_range: 0x1,
        roce_rw_supported: 0x1,
        log_max_current_uc_list_wr_supported: 0x1,
        log_max_stride_sz_rq: 0x5,
        reserved_at_3a8: 0x3,
        log_min_stride_sz_rq: 0x5,
        reserved_at_3b0: 0x3,
        log_max_stride_sz_sq: 0x5,
        reserved_at_3b8: 0x3,
        log_min_stride_sz_sq: 0x5,

        hairpin: 0x1,
        reserved_at_3c1: 0x2,
        log_max_hairpin_queues: 0x5,
        reserved_at_3c8: 0x3,
        log_max_hairpin_wq_data_sz: 0x5,
        reserved_at_3d0: 0x3,
        log_max_hairpin_num_packets: 0x5,
        reserved_at_3d8: 0x3,
        log_max_wq_sz: 0x5,

        nic_vport_change_event: 0x1,
        disable_local_lb_uc: 0x1,
        disable_local_lb_mc: 0x1,
        log_min_hairpin_wq_data_sz: 0x5,
        reserved_at_3e8: 0x1,
        silent_mode: 0x1,
        vhca_state: 0x1,
        log_max_vlan_list: 0x5,
        reserved_at_3f0: 0x3,
        log_max_current_mc_list: 0x5,
        reserved_at_3f8: 0x3,
        log_max_current_uc_list: 0x5,

        general_obj_types: 0x40,

        sq_ts_format: 0x2,
        rq_ts_format: 0x2,
        steering_format_version: 0x4,
        create_qp_start_hint: 0x18,

        reserved_at_460: 0x1,
        ats: 0x1,
        cross_vhca_rqt: 0x1,
        log_max_uctx: 0x5,
        reserved_at_468: 0x1,
        crypto: 0x1,
        ipsec_offload: 0x1,
        log_max_umem: 0x5,
        max_num_eqs: 0x10,

        reserved_at_480: 0x1,
        tls_tx: 0x1,
        tls_rx: 0x1,
        log_max_l2_table: 0x5,
        reserved_at_488: 0x8,
        log_uar_page_sz: 0x10,

        reserved_at_4a0: 0x20,
        device_frequency_mhz: 0x20,
        device_frequency_khz: 0x20,

        reserved_at_500: 0x20,
        num_of_uars_per_page: 0x20,

        flex_parser_protocols: 0x20,

        max_geneve_tlv_options: 0x8,
        reserved_at_568: 0x3,
        max_geneve_tlv_option_data_len: 0x5,
        reserved_at_570: 0x1,
        adv_rdma: 0x1,
        reserved_at_572: 0x7,
        adv_virtualization: 0x1,
        reserved_at_57a: 0x6,

        reserved_at_580: 0xb,
        log_max_dci_stream_channels: 0x5,
        reserved_at_590: 0x3,
        log_max_dci_errored_streams: 0x5,
        reserved_at_598: 0x8,

        reserved_at_5a0: 0x10,
        enhanced_cqe_compression: 0x1,
        reserved_at_5b1: 0x1,
        crossing_vhca_mkey: 0x1,
        log_max_dek: 0x5,
        reserved_at_5b8: 0x4,
        mini_cqe_resp_stride_index: 0x1,
        cqe_128_always: 0x1,
        cqe_compression_128: 0x1,
        cqe_compression: 0x1,

        cqe_compression_timeout: 0x10,
        cqe_compression_max_num: 0x10,

        reserved_at_5e0: 0x8,
        flex_parser_id_gtpu_dw_0: 0x4,
        reserved_at_5ec: 0x4,
        tag_matching: 0x1,
        rndv_offload_rc: 0x1,
        rndv_offload_dc: 0x1,
        log_tag_matching_list_sz: 0x5,
        reserved_at_5f8: 0x3,
        log_max_xrq: 0x5,

        affiliate_nic_vport_criteria: 0x8,
        native_port_num: 0x8,
        num_vhca_ports: 0x8,
        flex_parser_id_gtpu_teid: 0x4,
        reserved_at_61c: 0x2,
        sw_owner_id: 0x1,
        reserved_at_61f: 0x1,

        max_num_of_monitor_counters: 0x10,
        num_ppcnt_monitor_counters: 0x10,

        max_num_sf: 0x10,
        num_q_monitor_counters: 0x10,

        reserved_at_660: 0x20,

        sf: 0x1,
        sf_set_partition: 0x1,
        reserved_at_682: 0x1,
        log_max_sf: 0x5,
        apu: 0x1,
        reserved_at_689: 0x4,
        migration: 0x1,
        reserved_at_68e: 0x2,
        log_min_sf_size: 0x8,
        max_num_sf_partitions: 0x8,

        uctx_cap: 0x20,

        reserved_at_6c0: 0x4,
        flex_parser_id_geneve_tlv_option_0: 0x4,
        flex_parser_id_icmp_dw1: 0x4,
        flex_parser_id_icmp_dw0: 0x4,
        flex_parser_id_icmpv6_dw1: 0x4,
        flex_parser_id_icmpv6_dw0: 0x4,
        flex_parser_id_outer_first_mpls_over_gre: 0x4,
        flex_parser_id_outer_first_mpls_over_udp_label: 0x4,

        max_num_match_definer: 0x10,
        sf_base_id: 0x10,

        flex_parser_id_gtpu_dw_2: 0x4,
        flex_parser_id_gtpu_first_ext_dw_0: 0x4,
        num_total_dynamic_vf_msix: 0x18,
        reserved_at_720: 0x14,
        dynamic_msix_table_size: 0xc,
        reserved_at_740: 0xc,
        min_dynamic_vf_msix_table_size: 0x4,
        reserved_at_750: 0x2,
        data_direct: 0x1,
        reserved_at_753: 0x1,
        max_dynamic_vf_msix_table_size: 0xc,

        reserved_at_760: 0x3,
        log_max_num_header_modify_argument: 0x5,
        log_header_modify_argument_granularity_offset: 0x4,
        log_header_modify_argument_granularity: 0x4,
        reserved_at_770: 0x3,
        log_header_modify_argument_max_alloc: 0x5,
        reserved_at_778: 0x8,

        vhca_tunnel_commands: 0x40,
        match_definer_format_supported: 0x40,
    }

    /// `roce_cap`: the RoCE capabilities (capability type 0x4).
    struct roce_cap[0x800] {
        roce_apm: 0x1,
        reserved_at_1: 0x3,
        sw_r_roce_src_udp_port: 0x1,
        fl_rc_qp_when_roce_disabled: 0x1,
        fl_rc_qp_when_roce_enabled: 0x1,
        roce_cc_general: 0x1,
        qp_ooo_transmit_default: 0x1,
        reserved_at_9: 0x15,
        qp_ts_format: 0x2,

        reserved_at_20: 0x60,

        reserved_at_80: 0xc,
        l3_type: 0x4,
        reserved_at_90: 0x8,
        roce_version: 0x8,

        reserved_at_a0: 0x10,
        r_roce_dest_udp_port: 0x10,

        r_roce_max_src_udp_port: 0x10,
        r_roce_min_src_udp_port: 0x10,

        reserved_at_e0: 0x10,
        roce_address_table_size: 0x10,

        reserved_at_100: 0x700,
    }

    /// `atomic_caps`: the atomic-operation capabilities (capability type 0x3).
    struct atomic_caps[0x800] {
        reserved_at_0: 0x40,

        atomic_req_8B_endianness_mode: 0x2,
        reserved_at_42: 0x4,
        supported_atomic_req_8B_endianness_mode_1: 0x1,
        reserved_at_47: 0x19,

        reserved_at_60: 0x20,

        reserved_at_80: 0x10,
        atomic_operations: 0x10,

        reserved_at_a0: 0x10,
        atomic_size_qp: 0x10,

        reserved_at_c0: 0x10,
        atomic_size_dc: 0x10,

        reserved_at_e0: 0x720,
    }

    /// QUERY_HCA_CAP input: op_mod = (capability type << 1) | (0 = maximum, 1 = current).
    struct query_hca_cap_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_function: 0x1,
        ec_vf_function: 0x1,
        reserved_at_42: 0xe,
        function_id: 0x10,

        reserved_at_60: 0x20,
    }

    /// QUERY_HCA_CAP output: the requested capability page in the 4096-byte `capability` union.
    struct query_hca_cap_out[0x8080] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        capability: [0x8; 0x1000],
    }

    /// SET_HCA_CAP input: the capability page to set, in the 4096-byte `capability` union.
    struct set_hca_cap_in[0x8080] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_function: 0x1,
        ec_vf_function: 0x1,
        reserved_at_42: 0xe,
        function_id: 0x10,

        reserved_at_60: 0x20,

        capability: [0x8; 0x1000],
    }

    /// SET_HCA_CAP output.
    struct set_hca_cap_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }
}
