//! Completion queues: the CQ context (`cqc`) and the inputs and outputs of CREATE_CQ,
//! DESTROY_CQ, QUERY_CQ and MODIFY_CQ.
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`; the DEVX UMEM fields that Linux leaves
//! reserved (`cqc.dbr_umem_id`, `create_cq_in.cq_umem_offset` / `cq_umem_id`) are named as in
//! DPDK's `mlx5_prm.h`, at the same offsets.

crate::ifc! {
    /// CQ context (`cqc`, 64 bytes): size, CQE size, UAR, completion EQ, doorbell record.
    struct cqc[0x200] {
        status: 0x4,
        reserved_at_4: 0x2, // DPDK: as_notify, initiator_src_dct
        dbr_umem_valid: 0x1,
        apu_cq: 0x1,
        cqe_sz: 0x3,
        cc: 0x1,
        reserved_at_c: 0x1,
        scqe_break_moderation_en: 0x1,
        oi: 0x1,
        cq_period_mode: 0x2,
        cqe_comp_en: 0x1,
        mini_cqe_res_format: 0x2,
        st: 0x4,
        reserved_at_18: 0x6, // DPDK: reserved_at_18[0x1] + cqe_comp_layout[0x7] (overlaps)
        cqe_compression_layout: 0x2,

        dbr_umem_id: 0x20, // Linux: reserved_at_20; name from DPDK

        reserved_at_40: 0x14,
        page_offset: 0x6,
        reserved_at_5a: 0x6, // DPDK: mini_cqe_res_format_ext at 0x5c, cq_timestamp_format at 0x5e

        reserved_at_60: 0x3,
        log_cq_size: 0x5,
        uar_page: 0x18,

        reserved_at_80: 0x4,
        cq_period: 0xc,
        cq_max_count: 0x10,

        // Older headers: reserved_at_a0[0x18] + c_eqn[0x8]; the EQN is the low byte.
        c_eqn_or_apu_element: 0x20,

        reserved_at_c0: 0x3,
        log_page_size: 0x5,
        reserved_at_c8: 0x18,

        reserved_at_e0: 0x20,

        reserved_at_100: 0x8,
        last_notified_index: 0x18,

        reserved_at_120: 0x8,
        last_solicit_index: 0x18,

        reserved_at_140: 0x8,
        consumer_counter: 0x18,

        reserved_at_160: 0x8,
        producer_counter: 0x18,

        reserved_at_180: 0x40, // some headers: apu_user_arg; DPDK: local_partition_id, process_id

        dbr_addr: 0x40,
    }

    /// CREATE_CQ input: the `cqc` and the CQ buffer (page list or UMEM).
    struct create_cq_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,

        cq_context: cqc,

        cq_umem_offset: 0x40, // Linux: reserved_at_280[0x60] covers these two
        cq_umem_id: 0x20,

        cq_umem_valid: 0x1,
        reserved_at_2e1: 0x59f,

        pas: [0x40; 0],
    }

    /// CREATE_CQ output: the new CQN.
    struct create_cq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        cqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_CQ input.
    struct destroy_cq_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        cqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_CQ output.
    struct destroy_cq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_CQ input.
    struct query_cq_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        cqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// QUERY_CQ output: the current `cqc` and the page list.
    struct query_cq_out[0x880] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        cq_context: cqc,

        reserved_at_280: 0x600,

        pas: [0x40; 0],
    }

    /// MODIFY_CQ input (op_mod 0 = modify moderation, 1 = resize).
    struct modify_cq_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        cqn: 0x18,

        // Union of modify_field_select / resize_field_select (each one 32-bit mask).
        modify_field_select_resize_field_select: 0x20,

        cq_context: cqc,

        reserved_at_280: 0x60,

        cq_umem_valid: 0x1,
        reserved_at_2e1: 0x1f,

        reserved_at_300: 0x580,

        pas: [0x40; 0],
    }

    /// MODIFY_CQ output.
    struct modify_cq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }
}
