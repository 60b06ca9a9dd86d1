//! HCA bring-up and basic resource commands: QUERY_ISSI / SET_ISSI, QUERY_PAGES / MANAGE_PAGES,
//! INIT_HCA / TEARDOWN_HCA / DISABLE_HCA, ACCESS_REG (and the HOST_ENDIANNESS register it
//! carries), SET_DRIVER_VERSION, UAR / PD / transport-domain allocation, and the Q counters
//! (ALLOC / DEALLOC / QUERY_Q_COUNTER).
//!
//! Layouts follow the newest Linux `mlx5_ifc.h`. Where rdma-core's copy differs:
//! - `query_pages_in`: Linux has `embedded_cpu_function` at 0x40 (rdma-core reserves 0x40..0x50).
//! - `init_hca_in`: Linux adds `sw_vhca_id` at 0x62 and `sw_owner_id[4]` at 0x80, so the input
//!   is 0x100 bits; rdma-core ends it at 0x80 with the same reserved prefix.
//! - `alloc_uar_in`, `dealloc_uar_in`: Linux names bits 0x10..0x20 `uid` (rdma-core reserves
//!   them).
//! - `dealloc_transport_domain_in`, `dealloc_q_counter_in`: rdma-core merges 0x20..0x40 into one
//!   reserved run; Linux (followed) has `op_mod` at 0x30.
//! - `alloc_transport_domain_out`, `alloc_q_counter_out`: rdma-core reserves the status and
//!   syndrome (0x0..0x40); Linux (followed) names them.
//! - `query_pages_out`: rdma-core calls the run at 0x41 `reserved_bits`.
//! - DISABLE_HCA, SET_DRIVER_VERSION and the Q-counter input / QUERY_Q_COUNTER are in Linux only.
//!   Linux names the reserved runs of SET_DRIVER_VERSION `reserved_0` .. `reserved_2`; here they
//!   are `reserved_at_<offset>` like every other reserved run.
//! - `disable_hca_out` is 0x60 bits in Linux (as `enable_hca_out` is in both headers).
//! - `host_endianness_reg` is a plain byte structure in both (Linux `driver.h`, rdma-core
//!   `mlx5_vfio.h`: `u8 he; u8 rsvd[15]`), whose `he` byte is 0x80 on a big-endian host and 0 on
//!   a little-endian one; it is declared here as the 1-bit `he` at bit 0 (the top bit of that
//!   byte) followed by reserved bits.

crate::ifc! {
    /// QUERY_ISSI input: asks for the current and supported interface-step-sequence IDs.
    struct query_issi_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
    }

    /// QUERY_ISSI output: the current ISSI and the supported-ISSI bitmask (its last dword).
    struct query_issi_out[0x380] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x10,
        current_issi: 0x10,

        reserved_at_60: 0xa0,

        reserved_at_100: [0x8; 0x4c],
        supported_issi_dw0: 0x20,
    }

    /// SET_ISSI input: selects the interface step sequence the driver speaks.
    struct set_issi_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x10,
        current_issi: 0x10,

        reserved_at_60: 0x20,
    }

    /// SET_ISSI output.
    struct set_issi_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_PAGES input: op_mod selects boot (1), init (2) or regular (3) pages.
    struct query_pages_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        embedded_cpu_function: 0x1,
        reserved_at_41: 0xf,
        function_id: 0x10,

        reserved_at_60: 0x20,
    }

    /// QUERY_PAGES output: how many 4 KiB pages the device wants (negative: wants to return).
    struct query_pages_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        embedded_cpu_function: 0x1,
        reserved_at_41: 0xf,
        function_id: 0x10,

        num_pages: 0x20,
    }

    /// MANAGE_PAGES input: gives (op_mod 1) or reports failure / takes back pages, with `pas`.
    struct manage_pages_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        embedded_cpu_function: 0x1,
        reserved_at_41: 0xf,
        function_id: 0x10,

        input_num_entries: 0x20,

        pas: [0x40; 0],
    }

    /// MANAGE_PAGES output: the pages the device returns (op_mod 2), in `pas`.
    struct manage_pages_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        output_num_entries: 0x20,

        reserved_at_60: 0x20,

        pas: [0x40; 0],
    }

    /// INIT_HCA input: brings the HCA to the initialized state.
    struct init_hca_in[0x100] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x20,

        reserved_at_60: 0x2,
        sw_vhca_id: 0xe,
        reserved_at_70: 0x10,

        sw_owner_id: [0x20; 4],
    }

    /// INIT_HCA output.
    struct init_hca_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// TEARDOWN_HCA input: `profile` 0 graceful, 1 force, 2 prepare fast teardown.
    struct teardown_hca_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x10,
        profile: 0x10,

        reserved_at_60: 0x20,
    }

    /// TEARDOWN_HCA output: `state` reports a failed force close.
    struct teardown_hca_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x3f,
        state: 0x1,
    }

    /// DISABLE_HCA input: disables a function (the inverse of ENABLE_HCA).
    struct disable_hca_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        embedded_cpu_function: 0x1,
        reserved_at_41: 0xf,
        function_id: 0x10,

        reserved_at_60: 0x20,
    }

    /// DISABLE_HCA output.
    struct disable_hca_out[0x60] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x20,
    }

    /// ACCESS_REG input: reads (op_mod 1) or writes (op_mod 0) register `register_id`.
    struct access_register_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x10,
        register_id: 0x10,

        argument: 0x20,

        register_data: [0x20; 0],
    }

    /// ACCESS_REG output: the register contents read back.
    struct access_register_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        register_data: [0x20; 0],
    }

    /// HOST_ENDIANNESS register (0x7004): `he` = 1 on a big-endian host, 0 on a little-endian one.
    struct host_endianness_reg[0x80] {
        he: 0x1,
        reserved_at_1: 0x7f,
    }

    /// PAOS register (0x5006): a port's administrative and operational status
    /// ([`crate::enums::PortStatus`]).
    struct paos_reg[0x80] {
        swid: 0x8,
        local_port: 0x8,
        reserved_at_10: 0x4,
        admin_status: 0x4,
        reserved_at_18: 0x4,
        oper_status: 0x4,

        ase: 0x1,
        ee: 0x1,
        reserved_at_22: 0x1c,
        e: 0x2,

        reserved_at_40: 0x40,
    }

    /// PTYS register (0x5004): a port's protocols and speeds — capable, administratively
    /// allowed and operating — as bit sets of link modes ([`crate::enums::EthLinkMode`],
    /// [`crate::enums::ExtEthLinkMode`]).
    struct ptys_reg[0x200] {
        reserved_at_0: 0x1,
        an_disable_admin: 0x1,
        an_disable_cap: 0x1,
        reserved_at_3: 0x5,
        local_port: 0x8,
        reserved_at_10: 0x8,
        plane_ind: 0x4,
        reserved_at_1c: 0x1,
        proto_mask: 0x3,

        an_status: 0x4,
        reserved_at_24: 0xc,
        data_rate_oper: 0x10,

        ext_eth_proto_capability: 0x20,

        eth_proto_capability: 0x20,

        ib_link_width_capability: 0x10,
        ib_proto_capability: 0x10,

        ext_eth_proto_admin: 0x20,

        eth_proto_admin: 0x20,

        ib_link_width_admin: 0x10,
        ib_proto_admin: 0x10,

        ext_eth_proto_oper: 0x20,

        eth_proto_oper: 0x20,

        ib_link_width_oper: 0x10,
        ib_proto_oper: 0x10,

        reserved_at_160: 0x8,
        lane_rate_oper: 0x14,
        connector_type: 0x4,

        eth_proto_lp_advertise: 0x20,

        reserved_at_1a0: 0x60,
    }

    /// SET_DRIVER_VERSION input: a NUL-padded driver version string.
    struct set_driver_version_in[0x280] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
        driver_version: [0x8; 0x40],
    }

    /// SET_DRIVER_VERSION output.
    struct set_driver_version_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,
        reserved_at_40: 0x40,
    }

    /// ALLOC_UAR input.
    struct alloc_uar_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
    }

    /// ALLOC_UAR output: the allocated UAR page index.
    struct alloc_uar_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        uar: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_UAR input.
    struct dealloc_uar_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        uar: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_UAR output.
    struct dealloc_uar_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// ALLOC_PD input.
    struct alloc_pd_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
    }

    /// ALLOC_PD output: the allocated protection domain.
    struct alloc_pd_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        pd: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_PD input.
    struct dealloc_pd_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        pd: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_PD output.
    struct dealloc_pd_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// ALLOC_TRANSPORT_DOMAIN input.
    struct alloc_transport_domain_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
    }

    /// ALLOC_TRANSPORT_DOMAIN output: the allocated transport domain.
    struct alloc_transport_domain_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        transport_domain: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_TRANSPORT_DOMAIN input.
    struct dealloc_transport_domain_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        transport_domain: 0x18,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_TRANSPORT_DOMAIN output.
    struct dealloc_transport_domain_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// ALLOC_Q_COUNTER input.
    struct alloc_q_counter_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,
    }

    /// ALLOC_Q_COUNTER output: the allocated counter set.
    struct alloc_q_counter_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x18,
        counter_set_id: 0x8,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_Q_COUNTER input.
    struct dealloc_q_counter_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x18,
        counter_set_id: 0x8,

        reserved_at_60: 0x20,
    }

    /// DEALLOC_Q_COUNTER output.
    struct dealloc_q_counter_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_Q_COUNTER input: reads (and optionally clears) one counter set.
    struct query_q_counter_in[0x100] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        other_vport: 0x1,
        reserved_at_41: 0xf,
        vport_number: 0x10,

        reserved_at_60: 0x60,

        clear: 0x1,
        aggregate: 0x1,
        reserved_at_c2: 0x1e,

        reserved_at_e0: 0x18,
        counter_set_id: 0x8,
    }

    /// QUERY_Q_COUNTER output: the counters of one counter set, 32 bits each.
    struct query_q_counter_out[0x800] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        rx_write_requests: 0x20,

        reserved_at_a0: 0x20,

        rx_read_requests: 0x20,

        reserved_at_e0: 0x20,

        rx_atomic_requests: 0x20,

        reserved_at_120: 0x20,

        rx_dct_connect: 0x20,

        reserved_at_160: 0x20,

        out_of_buffer: 0x20,

        reserved_at_1a0: 0x20,

        out_of_sequence: 0x20,

        reserved_at_1e0: 0x20,

        duplicate_request: 0x20,

        reserved_at_220: 0x20,

        rnr_nak_retry_err: 0x20,

        reserved_at_260: 0x20,

        packet_seq_err: 0x20,

        reserved_at_2a0: 0x20,

        implied_nak_seq_err: 0x20,

        reserved_at_2e0: 0x20,

        local_ack_timeout_err: 0x20,

        reserved_at_320: 0x60,

        req_rnr_retries_exceeded: 0x20,

        reserved_at_3a0: 0x20,

        resp_local_length_error: 0x20,
        req_local_length_error: 0x20,
        resp_local_qp_error: 0x20,
        local_operation_error: 0x20,
        resp_local_protection: 0x20,
        req_local_protection: 0x20,
        resp_cqe_error: 0x20,
        req_cqe_error: 0x20,
        req_mw_binding: 0x20,
        req_bad_response: 0x20,
        req_remote_invalid_request: 0x20,
        resp_remote_invalid_request: 0x20,
        req_remote_access_errors: 0x20,
        resp_remote_access_errors: 0x20,
        req_remote_operation_errors: 0x20,
        req_transport_retries_exceeded: 0x20,
        cq_overflow: 0x20,
        resp_cqe_flush_error: 0x20,
        req_cqe_flush_error: 0x20,

        reserved_at_620: 0x20,

        roce_adp_retrans: 0x20,
        roce_adp_retrans_to: 0x20,
        roce_slow_restart: 0x20,
        roce_slow_restart_cnps: 0x20,
        roce_slow_restart_trans: 0x20,

        reserved_at_6e0: 0x120,
    }
}
