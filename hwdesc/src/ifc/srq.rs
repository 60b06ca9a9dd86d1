//! Shared receive queues: the SRQ context (`srqc`) and the inputs and outputs of CREATE_SRQ,
//! DESTROY_SRQ, QUERY_SRQ and ARM_RQ.
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`.

crate::ifc! {
    /// SRQ context (`srqc`, 64 bytes): size, stride, PD, CQ, limit watermark, doorbell record.
    struct srqc[0x200] {
        state: 0x4,
        log_srq_size: 0x4,
        reserved_at_8: 0x18,

        wq_signature: 0x1,
        cont_srq: 0x1,
        reserved_at_22: 0x1,
        rlky: 0x1,
        reserved_at_24: 0x1,
        log_rq_stride: 0x3,
        xrcd: 0x18,

        page_offset: 0x6,
        reserved_at_46: 0x2,
        cqn: 0x18,

        reserved_at_60: 0x20,

        reserved_at_80: 0x2,
        log_page_size: 0x6,
        reserved_at_88: 0x18,

        reserved_at_a0: 0x20,

        reserved_at_c0: 0x8,
        pd: 0x18,

        lwm: 0x10,
        wqe_cnt: 0x10,

        reserved_at_100: 0x40,

        dbr_addr: 0x40,

        reserved_at_180: 0x80,
    }

    /// CREATE_SRQ input: the `srqc` and the SRQ page list.
    struct create_srq_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,

        srq_context_entry: srqc,

        reserved_at_280: 0x600,

        pas: [0x40; 0],
    }

    /// CREATE_SRQ output: the new SRQ number.
    struct create_srq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        srqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_SRQ input.
    struct destroy_srq_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        srqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_SRQ output.
    struct destroy_srq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_SRQ input.
    struct query_srq_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        srqn: 0x18,

        reserved_at_60: 0x20,
    }

    /// QUERY_SRQ output: the current `srqc` and the page list.
    struct query_srq_out[0x880] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        srq_context_entry: srqc,

        reserved_at_280: 0x600,

        pas: [0x40; 0],
    }

    /// ARM_RQ input: arm the SRQ limit event at `lwm` (op_mod 1 = SRQ, 2 = XRQ).
    struct arm_rq_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        srq_number: 0x18,

        reserved_at_60: 0x10,
        lwm: 0x10,
    }

    /// ARM_RQ output.
    struct arm_rq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }
}
