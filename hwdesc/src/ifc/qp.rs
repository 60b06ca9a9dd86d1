//! Queue pairs: the QP context (`qpc`), the address path (`ads`) it nests twice, and the inputs
//! and outputs of CREATE_QP, DESTROY_QP, QUERY_QP and every QP state-transition command
//! (RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, SQD2RTS, 2ERR, 2RST).
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`; where rdma-core's copy names bits that
//! Linux leaves reserved and the project uses them (`qpc.dbr_umem_id`), the named field is kept.
//! Every modify command carries the `qpc` at bit 0xc0 (byte 0x18) and the QPN at bits 0x48..0x60.

crate::ifc! {
    /// Address path (`ads`): where a QP sends (L2/L3 addressing, GID index, timeouts).
    struct ads[0x160] {
        fl: 0x1,
        free_ar: 0x1,
        reserved_at_2: 0xe,
        pkey_index: 0x10,

        plane_index: 0x8, // rdma-core: reserved_at_20
        grh: 0x1,
        mlid: 0x7,
        rlid: 0x10,

        ack_timeout: 0x5,
        reserved_at_45: 0x3,
        src_addr_index: 0x8,
        reserved_at_50: 0x4,
        stat_rate: 0x4,
        hop_limit: 0x8,

        reserved_at_60: 0x4,
        tclass: 0x8,
        flow_label: 0x14,

        rgid_rip: [0x8; 16],

        reserved_at_100: 0x4,
        f_dscp: 0x1,
        f_ecn: 0x1,
        reserved_at_106: 0x1,
        f_eth_prio: 0x1,
        ecn: 0x2,
        dscp: 0x6,
        udp_sport: 0x10,

        dei_cfi: 0x1,
        eth_prio: 0x3,
        sl: 0x4,
        vhca_port_num: 0x8,
        rmac_47_32: 0x10,

        rmac_31_0: 0x20,
    }

    /// QP context (`qpc`, 232 bytes): service type, state, queue geometry, paths, PSNs, CQs.
    struct qpc[0x740] {
        state: 0x4,
        lag_tx_port_affinity: 0x4,
        st: 0x8,
        reserved_at_10: 0x2,
        isolate_vl_tc: 0x1,
        pm_state: 0x2,
        reserved_at_15: 0x1,
        req_e2e_credit_mode: 0x2,
        offload_type: 0x4,
        end_padding_mode: 0x2,
        reserved_at_1e: 0x2,

        wq_signature: 0x1,
        block_lb_mc: 0x1,
        atomic_like_write_en: 0x1,
        latency_sensitive: 0x1,
        reserved_at_24: 0x1,
        drain_sigerr: 0x1,
        reserved_at_26: 0x1,
        dp_ordering_force: 0x1, // rdma-core: part of reserved_at_26[0x2]
        pd: 0x18,

        mtu: 0x3,
        log_msg_max: 0x5,
        reserved_at_48: 0x1,
        log_rq_size: 0x4,
        log_rq_stride: 0x3,
        no_sq: 0x1,
        log_sq_size: 0x4,
        reserved_at_55: 0x1,
        retry_mode: 0x2, // rdma-core: part of reserved_at_55[0x3]
        ts_format: 0x2,
        reserved_at_5a: 0x1, // rdma-core: data_in_order
        rlky: 0x1,
        ulp_stateless_offload_mode: 0x4,

        counter_set_id: 0x8,
        uar_page: 0x18,

        reserved_at_80: 0x8,
        user_index: 0x18,

        reserved_at_a0: 0x3,
        log_page_size: 0x5,
        remote_qpn: 0x18,

        primary_address_path: ads,

        secondary_address_path: ads,

        log_ack_req_freq: 0x4,
        reserved_at_384: 0x4,
        log_sra_max: 0x3,
        reserved_at_38b: 0x2,
        retry_count: 0x3,
        rnr_retry: 0x3,
        reserved_at_393: 0x1,
        fre: 0x1,
        cur_rnr_retry: 0x3,
        cur_retry_count: 0x3,
        reserved_at_39b: 0x5,

        reserved_at_3a0: 0x20,

        reserved_at_3c0: 0x8,
        next_send_psn: 0x18,

        reserved_at_3e0: 0x3,
        log_num_dci_stream_channels: 0x5, // rdma-core: part of reserved_at_3e0[0x8]
        cqn_snd: 0x18,

        reserved_at_400: 0x3,
        log_num_dci_errored_streams: 0x5, // rdma-core: part of reserved_at_400[0x8]
        deth_sqpn: 0x18,

        reserved_at_420: 0x20,

        reserved_at_440: 0x8,
        last_acked_psn: 0x18,

        reserved_at_460: 0x8,
        ssn: 0x18,

        reserved_at_480: 0x8,
        log_rra_max: 0x3,
        reserved_at_48b: 0x1,
        atomic_mode: 0x4,
        rre: 0x1,
        rwe: 0x1,
        rae: 0x1,
        reserved_at_493: 0x1,
        page_offset: 0x6,
        reserved_at_49a: 0x2,
        dp_ordering_1: 0x1, // rdma-core: part of reserved_at_49a[0x3]
        cd_slave_receive: 0x1,
        cd_slave_send: 0x1,
        cd_master: 0x1,

        reserved_at_4a0: 0x3,
        min_rnr_nak: 0x5,
        next_rcv_psn: 0x18,

        reserved_at_4c0: 0x8,
        xrcd: 0x18,

        reserved_at_4e0: 0x8,
        cqn_rcv: 0x18,

        dbr_addr: 0x40,

        q_key: 0x20,

        reserved_at_560: 0x5,
        rq_type: 0x3,
        srqn_rmpn_xrqn: 0x18,

        reserved_at_580: 0x8,
        rmsn: 0x18,

        hw_sq_wqebb_counter: 0x10,
        sw_sq_wqebb_counter: 0x10,

        hw_rq_counter: 0x20,

        sw_rq_counter: 0x20,

        reserved_at_600: 0x20,

        reserved_at_620: 0xf,
        cgs: 0x1,
        cs_req: 0x8,
        cs_res: 0x8,

        dc_access_key: 0x40,

        reserved_at_680: 0x3,
        dbr_umem_valid: 0x1,

        // Linux: reserved_at_684[0xbc]; rdma-core names the last dword dbr_umem_id (DEVX).
        reserved_at_684: 0x9c,

        dbr_umem_id: 0x20,
    }

    /// CREATE_QP input: the initial `qpc` and the WQ buffer (page list or UMEM).
    struct create_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        qpc_ext: 0x1,
        reserved_at_41: 0x7,
        input_qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20,

        qpc: qpc,

        wq_umem_offset: 0x40, // rdma-core: reserved_at_800[0x40]

        wq_umem_id: 0x20,

        wq_umem_valid: 0x1,
        reserved_at_861: 0x1f,

        pas: [0x40; 0],
    }

    /// CREATE_QP output: the new QPN.
    struct create_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        qpn: 0x18,

        ece: 0x20,
    }

    /// DESTROY_QP input.
    struct destroy_qp_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_QP output.
    struct destroy_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_QP input.
    struct query_qp_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        qpc_ext: 0x1,
        reserved_at_41: 0x7,
        qpn: 0x18,

        reserved_at_60: 0x20,
    }

    /// QUERY_QP output: the current `qpc` and the WQ page list.
    struct query_qp_out[0x880] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        opt_param_mask: 0x20,

        ece: 0x20,

        qpc: qpc,

        reserved_at_800: 0x80,

        // Linux: union qp_pas_or_qpc_ext_and_pas (the page list, or with qpc_ext=1 a 0x600-bit
        // qp_context_extension followed by the page list); declared here as the plain page list.
        pas: [0x40; 0],
    }

    /// RST2INIT_QP input.
    struct rst2init_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20, // rdma-core: reserved_at_a0

        qpc: qpc,

        reserved_at_800: 0x80,
    }

    /// RST2INIT_QP output.
    struct rst2init_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
        ece: 0x20,
    }

    /// INIT2INIT_QP input.
    struct init2init_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8, // rdma-core: qpc_ext[0x1] + reserved_at_41[0x7]
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20, // rdma-core: reserved_at_a0

        qpc: qpc,

        // rdma-core: reserved_at_800[0x40], opt_param_mask_95_32[0x40], qpc_data_ext (0x600).
        reserved_at_800: 0x80,
    }

    /// INIT2INIT_QP output.
    struct init2init_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
        ece: 0x20,
    }

    /// INIT2RTR_QP input.
    struct init2rtr_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20, // rdma-core: reserved_at_a0

        qpc: qpc,

        reserved_at_800: 0x80,
    }

    /// INIT2RTR_QP output.
    struct init2rtr_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
        ece: 0x20,
    }

    /// RTR2RTS_QP input.
    struct rtr2rts_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20, // rdma-core: reserved_at_a0

        qpc: qpc,

        reserved_at_800: 0x80,
    }

    /// RTR2RTS_QP output.
    struct rtr2rts_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
        ece: 0x20,
    }

    /// RTS2RTS_QP input.
    struct rts2rts_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8, // rdma-core: qpc_ext[0x1] + reserved_at_41[0x7]
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        ece: 0x20, // rdma-core: reserved_at_a0

        qpc: qpc,

        // rdma-core: reserved_at_800[0x40], opt_param_mask_95_32[0x40], qpc_data_ext (0x600).
        reserved_at_800: 0x80,
    }

    /// RTS2RTS_QP output.
    struct rts2rts_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
        ece: 0x20,
    }

    /// SQERR2RTS_QP input.
    struct sqerr2rts_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        reserved_at_a0: 0x20,

        qpc: qpc,

        reserved_at_800: 0x80,
    }

    /// SQERR2RTS_QP output.
    struct sqerr2rts_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// SQD2RTS_QP input.
    struct sqd2rts_qp_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,

        opt_param_mask: 0x20,

        reserved_at_a0: 0x20,

        qpc: qpc,

        reserved_at_800: 0x80,
    }

    /// SQD2RTS_QP output.
    struct sqd2rts_qp_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// 2ERR_QP input: move a QP to the error state.
    struct qp_2err_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,
    }

    /// 2ERR_QP output.
    struct qp_2err_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// 2RST_QP input: move a QP back to the reset state.
    struct qp_2rst_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        qpn: 0x18,

        reserved_at_60: 0x20,
    }

    /// 2RST_QP output.
    struct qp_2rst_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }
}
