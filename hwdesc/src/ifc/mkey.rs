//! Memory keys and page lists: the MKEY context (`mkc`), the inputs and outputs of CREATE_MKEY,
//! DESTROY_MKEY and QUERY_MKEY, the command page address (`cmd_pas`) and the MTT entry (`mtt`).
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`; `mtt` is from rdma-core's copy (Linux
//! has none).

crate::ifc! {
    /// MKEY context (`mkc`, 64 bytes): access mode and rights, PD, virtual range, page size.
    struct mkc[0x200] {
        reserved_at_0: 0x1,
        free: 0x1,
        reserved_at_2: 0x1,
        access_mode_4_2: 0x3,
        reserved_at_6: 0x7,
        relaxed_ordering_write: 0x1,
        reserved_at_e: 0x1,
        small_fence_on_rdma_read_response: 0x1,
        umr_en: 0x1,
        a: 0x1,
        rw: 0x1,
        rr: 0x1,
        lw: 0x1,
        lr: 0x1,
        access_mode_1_0: 0x2,
        reserved_at_18: 0x2,
        ma_translation_mode: 0x2, // rdma-core: part of reserved_at_18[0x8]
        reserved_at_1c: 0x4,

        qpn: 0x18,
        mkey_7_0: 0x8,

        reserved_at_40: 0x20,

        length64: 0x1,
        bsf_en: 0x1,
        sync_umr: 0x1,
        reserved_at_63: 0x2,
        expected_sigerr_count: 0x1,
        reserved_at_66: 0x1,
        en_rinval: 0x1,
        pd: 0x18,

        start_addr: 0x40,

        len: 0x40,

        bsf_octword_size: 0x20,

        reserved_at_120: 0x60,

        crossing_target_vhca_id: 0x10, // rdma-core: part of reserved_at_120[0x80]
        reserved_at_190: 0x10,

        translations_octword_size: 0x20,

        reserved_at_1c0: 0x19,
        relaxed_ordering_read: 0x1,
        // rdma-core: reserved_at_1d9[0x1] + log_page_size[0x5] (same low bits).
        log_page_size: 0x6,

        reserved_at_1e0: 0x20, // rdma-core: crypto_en[0x2] at 0x1e3
    }

    /// CREATE_MKEY input: the `mkc` and its translation entries (MTTs or KLMs).
    struct create_mkey_in[0x880] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x20,

        pg_access: 0x1,
        mkey_umem_valid: 0x1,
        data_direct: 0x1, // rdma-core: part of reserved_at_62[0x1e]
        reserved_at_63: 0x1d,

        memory_key_mkey_entry: mkc,

        reserved_at_280: 0x80,

        translations_octword_actual_size: 0x20,

        reserved_at_320: 0x560,

        // Headers declare 32-bit elements; here one element is one 64-bit MTT entry.
        klm_pas_mtt: [0x40; 0],
    }

    /// CREATE_MKEY output: the new MKEY index (the key is `index << 8 | mkey_7_0`).
    struct create_mkey_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x8,
        mkey_index: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_MKEY input.
    struct destroy_mkey_in[0x80] {
        opcode: 0x10,
        uid: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        mkey_index: 0x18,

        reserved_at_60: 0x20,
    }

    /// DESTROY_MKEY output.
    struct destroy_mkey_out[0x80] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,
    }

    /// QUERY_MKEY input.
    struct query_mkey_in[0x80] {
        opcode: 0x10,
        reserved_at_10: 0x10,

        reserved_at_20: 0x10,
        op_mod: 0x10,

        reserved_at_40: 0x8,
        mkey_index: 0x18,

        pg_access: 0x1,
        reserved_at_61: 0x1f,
    }

    /// QUERY_MKEY output: the `mkc` and the first translation entries.
    struct query_mkey_out[0x980] {
        status: 0x8,
        reserved_at_8: 0x18,

        syndrome: 0x20,

        reserved_at_40: 0x40,

        memory_key_mkey_entry: mkc,

        reserved_at_280: 0x600,

        bsf0_klm0_pas_mtt0_1: [0x8; 16],

        bsf1_klm1_pas_mtt2_3: [0x8; 16],
    }

    /// A 64-bit page address in a command page list (4 KiB aligned).
    struct cmd_pas[0x40] {
        pa_h: 0x20,

        pa_l: 0x14,
        reserved_at_34: 0xc,
    }

    /// MTT entry: page address bits 63..8 and the write/read enable flags.
    struct mtt[0x40] {
        ptag_63_32: 0x20,

        ptag_31_8: 0x18,
        reserved_at_38: 0x6,
        wr_en: 0x1,
        rd_en: 0x1,
    }
}
