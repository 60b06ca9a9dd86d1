//! Event queues: the EQ context (`eqc`) and the inputs and outputs of CREATE_EQ, DESTROY_EQ and
//! QUERY_EQ.
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`.

crate::ifc! {
    /// EQ context (`eqc`, 64 bytes): size, UAR, MSI-X vector, state, counters.
    struct eqc[0x200] {
        status: 0x4,
        reserved_at_4: 0x9,
        ec: 0x1,
        oi: 0x1,
        reserved_at_f: 0x5,
        st: 0x4,
        reserved_at_18: 0x8,

        reserved_at_20: 0x20,

        reserved_at_40: 0x14,
        page_offset: 0x6,
        reserved_at_5a: 0x6,

        reserved_at_60: 0x3,
        log_eq_size: 0x5,
        uar_page: 0x18,

        reserved_at_80: 0x20,

        reserved_at_a0: 0x14, // rdma-core: reserved_at_a0[0x18] + intr[0x8] (same low bits)
        intr: 0xc,

        reserved_at_c0: 0x3,
        log_page_size: 0x5,
        reserved_at_c8: 0x18,

        reserved_at_e0: 0x60,

        reserved_at_140: 0x8,
        consumer_counter: 0x18,

        reserved_at_160: 0x8,
        producer_counter: 0x18,

        reserved_at_180: 0x80,
    }

    /// CREATE_EQ input: the `eqc`, the four 64-bit event masks and the EQ page list.
    struct create_eq_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x40,

        eq_context_entry: eqc,

        reserved_at_280: 0x40,

        event_bitmask: [0x40; 4],

        reserved_at_3c0: 0x4c0,

        pas: [0x40; 0],
    }

    /// CREATE_EQ output: the new EQ number.
    struct create_eq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x18,
        eq_number: 0x8,

        reserved_at_60: 0x20,
    }

    /// DESTROY_EQ input.
    struct destroy_eq_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x18,
        eq_number: 0x8,

        reserved_at_60: 0x20,
    }

    /// DESTROY_EQ output.
    struct destroy_eq_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_EQ input.
    struct query_eq_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x18,
        eq_number: 0x8,

        reserved_at_60: 0x20,
    }

    /// QUERY_EQ output: the current `eqc`, event mask and page list.
    struct query_eq_out[0x880] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        eq_context_entry: eqc,

        reserved_at_280: 0x40,

        event_bitmask: 0x40,

        reserved_at_300: 0x580,

        pas: [0x40; 0],
    }
}
