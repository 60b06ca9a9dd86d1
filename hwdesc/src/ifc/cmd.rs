//! The command header shared by every input and output, and the simplest commands
//! (ENABLE_HCA, DISABLE_HCA).

crate::ifc! {
    /// Header of every command input (`mbox_in`).
    struct mbox_in[0x80] {
        opcode: 0x10,
        uid: 0x10,
        reserved_at_20: 0x10,
        op_mod: 0x10,
        reserved_at_40: 0x40,
    }

    /// Header of every command output (`mbox_out`).
    struct mbox_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,
        syndrome: 0x20,
        reserved_at_40: 0x40,
    }

    /// ENABLE_HCA input.
    struct enable_hca_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,
        reserved_at_20: 0x10,
        op_mod: 0x10,
        embedded_cpu_function: 0x1,
        reserved_at_41: 0xf,
        function_id: 0x10,
        reserved_at_60: 0x20,
    }

    /// ENABLE_HCA output.
    struct enable_hca_out[0x60] {
        status: 0x8,
        reserved_at_8: 0x18,
        syndrome: 0x20,
        reserved_at_40: 0x20,
    }
}
