//! Queue-object layouts (QP, CQ, EQ, MKEY, SRQ): field positions checked against the byte
//! offsets of the device-contract notes (sections 5, 8, 9), and golden command images built
//! field by field and compared byte for byte with images written out by hand.
use umlx_hwdesc::Field;
use umlx_hwdesc::ifc::{
    ads, arm_rq_in, cmd_pas, cqc, create_cq_in, create_cq_out, create_eq_in, create_eq_out, create_mkey_in,
    create_mkey_out, create_qp_in, create_qp_out, create_srq_in, destroy_cq_in, destroy_eq_in, destroy_mkey_in,
    destroy_qp_in, eqc, init2init_qp_in, init2rtr_qp_in, mkc, modify_cq_in, mtt, qp_2err_in, qp_2rst_in, qpc,
    query_cq_out, query_eq_out, query_mkey_out, query_qp_out, query_srq_out, rst2init_qp_in, rtr2rts_qp_in,
    rts2rts_qp_in, sqerr2rts_qp_in, srqc,
};

/// Bit offset of bit `hi` (31 = MSB) of the dword starting at byte `dword_byte`.
const fn dw(dword_byte: usize, hi: usize) -> usize {
    dword_byte * 8 + (31 - hi)
}

/// Asserts a field's bit offset and width.
#[track_caller]
fn at(f: Field, offset_bits: usize, width_bits: usize) {
    assert_eq!((f.offset_bits, f.width_bits), (offset_bits, width_bits), "field {}", f.name);
}

/// Asserts a byte-aligned field starts at `byte` and is `bytes` long.
#[track_caller]
fn at_byte(f: Field, byte: usize, bytes: usize) {
    assert!(f.offset_bits.is_multiple_of(8), "field {} not byte aligned", f.name);
    assert_eq!((f.offset_bytes(), f.size_bytes()), (byte, bytes), "field {}", f.name);
}

#[test]
fn qpc_matches_contract() {
    assert_eq!(qpc::SIZE_BYTES, 232);
    at(qpc::state, dw(0x00, 31), 4);
    at_byte(qpc::st, 0x01, 1);
    at(qpc::pm_state, dw(0x00, 12), 2);
    at(qpc::wq_signature, dw(0x04, 31), 1);
    at_byte(qpc::pd, 0x05, 3);
    at(qpc::mtu, dw(0x08, 31), 3);
    at(qpc::log_msg_max, dw(0x08, 28), 5);
    at(qpc::log_rq_size, dw(0x08, 22), 4);
    at(qpc::log_rq_stride, dw(0x08, 18), 3);
    at(qpc::no_sq, dw(0x08, 15), 1);
    at(qpc::log_sq_size, dw(0x08, 14), 4);
    at(qpc::ts_format, dw(0x08, 7), 2);
    at_byte(qpc::uar_page, 0x0d, 3);
    at_byte(qpc::user_index, 0x11, 3);
    at(qpc::log_page_size, dw(0x14, 28), 5);
    at_byte(qpc::remote_qpn, 0x15, 3);
    at_byte(qpc::primary_address_path, 0x18, 44);
    at_byte(qpc::secondary_address_path, 0x44, 44);
    at(qpc::log_ack_req_freq, dw(0x70, 31), 4);
    at(qpc::log_sra_max, dw(0x70, 23), 3);
    at(qpc::retry_count, dw(0x70, 18), 3);
    at(qpc::rnr_retry, dw(0x70, 15), 3);
    at_byte(qpc::next_send_psn, 0x79, 3);
    at_byte(qpc::cqn_snd, 0x7d, 3);
    at(qpc::log_rra_max, dw(0x90, 23), 3);
    at(qpc::atomic_mode, dw(0x90, 19), 4);
    at(qpc::rre, dw(0x90, 15), 1);
    at(qpc::rwe, dw(0x90, 14), 1);
    at(qpc::rae, dw(0x90, 13), 1);
    at(qpc::page_offset, dw(0x90, 11), 6);
    at(qpc::min_rnr_nak, dw(0x94, 28), 5);
    at_byte(qpc::next_rcv_psn, 0x95, 3);
    at_byte(qpc::xrcd, 0x99, 3);
    at_byte(qpc::cqn_rcv, 0x9d, 3);
    at_byte(qpc::dbr_addr, 0xa0, 8);
    at_byte(qpc::q_key, 0xa8, 4);
    at(qpc::rq_type, dw(0xac, 26), 3);
    at_byte(qpc::srqn_rmpn_xrqn, 0xad, 3);
    at_byte(qpc::hw_sq_wqebb_counter, 0xb4, 2);
    at_byte(qpc::sw_sq_wqebb_counter, 0xb6, 2);
    at_byte(qpc::hw_rq_counter, 0xb8, 4);
    at_byte(qpc::sw_rq_counter, 0xbc, 4);
    at(qpc::dbr_umem_valid, dw(0xd0, 28), 1);
    at_byte(qpc::dbr_umem_id, 0xe4, 4);
}

#[test]
fn ads_matches_contract() {
    assert_eq!(ads::SIZE_BYTES, 44);
    at(ads::fl, dw(0x00, 31), 1);
    at(ads::free_ar, dw(0x00, 30), 1);
    at_byte(ads::pkey_index, 0x02, 2);
    at(ads::grh, dw(0x04, 23), 1);
    at(ads::mlid, dw(0x04, 22), 7);
    at_byte(ads::rlid, 0x06, 2);
    at(ads::ack_timeout, dw(0x08, 31), 5);
    at_byte(ads::src_addr_index, 0x09, 1);
    at(ads::stat_rate, dw(0x08, 11), 4);
    at_byte(ads::hop_limit, 0x0b, 1);
    at(ads::tclass, dw(0x0c, 27), 8);
    at(ads::flow_label, dw(0x0c, 19), 20);
    at_byte(ads::rgid_rip, 0x10, 16);
    at(ads::f_dscp, dw(0x20, 27), 1);
    at(ads::f_ecn, dw(0x20, 26), 1);
    at(ads::f_eth_prio, dw(0x20, 24), 1);
    at(ads::ecn, dw(0x20, 23), 2);
    at(ads::dscp, dw(0x20, 21), 6);
    at_byte(ads::udp_sport, 0x22, 2);
    at(ads::dei_cfi, dw(0x24, 31), 1);
    at(ads::eth_prio, dw(0x24, 30), 3);
    at(ads::sl, dw(0x24, 27), 4);
    at_byte(ads::vhca_port_num, 0x25, 1);
    at_byte(ads::rmac_47_32, 0x26, 2);
    at_byte(ads::rmac_31_0, 0x28, 4);
    // The primary path as seen from a command: qpc at 0x18, path at qpc+0x18.
    at_byte(create_qp_in::qpc.inner(qpc::primary_address_path).inner(ads::rgid_rip), 0x40, 16);
}

#[test]
fn cqc_matches_contract() {
    assert_eq!(cqc::SIZE_BYTES, 64);
    at(cqc::dbr_umem_valid, dw(0x00, 25), 1);
    at(cqc::cqe_sz, dw(0x00, 23), 3);
    at(cqc::oi, dw(0x00, 17), 1);
    at(cqc::cqe_comp_en, dw(0x00, 14), 1);
    at(cqc::st, dw(0x00, 11), 4);
    at_byte(cqc::dbr_umem_id, 0x04, 4);
    at(cqc::page_offset, dw(0x08, 11), 6);
    at(cqc::log_cq_size, dw(0x0c, 28), 5);
    at_byte(cqc::uar_page, 0x0d, 3);
    at(cqc::cq_period, dw(0x10, 27), 12);
    at_byte(cqc::cq_max_count, 0x12, 2);
    // The contract's 8-bit c_eqn at byte 0x17 is the low byte of the widened 32-bit field.
    at_byte(cqc::c_eqn_or_apu_element, 0x14, 4);
    assert_eq!(cqc::c_eqn_or_apu_element.end_bits(), 0x18 * 8);
    at(cqc::log_page_size, dw(0x18, 28), 5);
    at_byte(cqc::last_notified_index, 0x21, 3);
    at_byte(cqc::last_solicit_index, 0x25, 3);
    at_byte(cqc::consumer_counter, 0x29, 3);
    at_byte(cqc::producer_counter, 0x2d, 3);
    at_byte(cqc::dbr_addr, 0x38, 8);
    at_byte(create_cq_in::cq_context, 0x10, 64);
    at_byte(create_cq_in::cq_umem_offset, 0x50, 8);
    at_byte(create_cq_in::cq_umem_id, 0x58, 4);
    at(create_cq_in::cq_umem_valid, dw(0x5c, 31), 1);
    at(create_cq_in::pas, 0x880, 0);
    assert_eq!(create_cq_in::SIZE_BYTES, 0x110);
    at_byte(create_cq_out::cqn, 0x09, 3);
    at_byte(destroy_cq_in::cqn, 0x09, 3);
    at_byte(query_cq_out::cq_context, 0x10, 64);
    at(query_cq_out::pas, 0x880, 0);
    at_byte(modify_cq_in::cqn, 0x09, 3);
    at_byte(modify_cq_in::modify_field_select_resize_field_select, 0x0c, 4);
    at_byte(modify_cq_in::cq_context, 0x10, 64);
}

#[test]
fn eqc_matches_contract() {
    assert_eq!(eqc::SIZE_BYTES, 64);
    at(eqc::status, dw(0x00, 31), 4);
    at(eqc::ec, dw(0x00, 18), 1);
    at(eqc::oi, dw(0x00, 17), 1);
    at(eqc::st, dw(0x00, 11), 4);
    at(eqc::page_offset, dw(0x08, 11), 6);
    at(eqc::log_eq_size, dw(0x0c, 28), 5);
    at_byte(eqc::uar_page, 0x0d, 3);
    // Linux widens intr to 12 bits; its low byte is the contract's byte 0x17.
    at(eqc::intr, dw(0x14, 11), 12);
    assert_eq!(eqc::intr.end_bits(), 0x18 * 8);
    at(eqc::log_page_size, dw(0x18, 28), 5);
    at_byte(eqc::consumer_counter, 0x29, 3);
    at_byte(eqc::producer_counter, 0x2d, 3);
    at_byte(create_eq_in::eq_context_entry, 0x10, 64);
    at(create_eq_in::event_bitmask, 0x2c0, 0x100);
    at_byte(create_eq_in::event_bitmask, 0x58, 32);
    at(create_eq_in::pas, 0x880, 0);
    assert_eq!(create_eq_in::SIZE_BYTES, 0x110);
    at_byte(create_eq_out::eq_number, 0x0b, 1);
    at_byte(destroy_eq_in::eq_number, 0x0b, 1);
    at_byte(query_eq_out::eq_context_entry, 0x10, 64);
    at(query_eq_out::pas, 0x880, 0);
}

#[test]
fn mkc_matches_contract() {
    assert_eq!(mkc::SIZE_BYTES, 64);
    at(mkc::free, dw(0x00, 30), 1);
    at(mkc::access_mode_4_2, dw(0x00, 28), 3);
    at(mkc::relaxed_ordering_write, dw(0x00, 18), 1);
    at(mkc::umr_en, dw(0x00, 15), 1);
    at(mkc::a, dw(0x00, 14), 1);
    at(mkc::rw, dw(0x00, 13), 1);
    at(mkc::rr, dw(0x00, 12), 1);
    at(mkc::lw, dw(0x00, 11), 1);
    at(mkc::lr, dw(0x00, 10), 1);
    at(mkc::access_mode_1_0, dw(0x00, 9), 2);
    at_byte(mkc::qpn, 0x04, 3);
    at_byte(mkc::mkey_7_0, 0x07, 1);
    at(mkc::length64, dw(0x0c, 31), 1);
    at(mkc::en_rinval, dw(0x0c, 24), 1);
    at_byte(mkc::pd, 0x0d, 3);
    at_byte(mkc::start_addr, 0x10, 8);
    at_byte(mkc::len, 0x18, 8);
    at_byte(mkc::bsf_octword_size, 0x20, 4);
    at_byte(mkc::translations_octword_size, 0x34, 4);
    at(mkc::relaxed_ordering_read, dw(0x38, 6), 1);
    // Linux: 6 bits [5:0]; the contract's [4:0] are its low bits.
    at(mkc::log_page_size, dw(0x38, 5), 6);
    assert_eq!(mkc::log_page_size.end_bits(), 0x3c * 8);
    at(create_mkey_in::pg_access, dw(0x0c, 31), 1);
    at(create_mkey_in::mkey_umem_valid, dw(0x0c, 30), 1);
    at_byte(create_mkey_in::memory_key_mkey_entry, 0x10, 64);
    at_byte(create_mkey_in::translations_octword_actual_size, 0x60, 4);
    at(create_mkey_in::klm_pas_mtt, 0x880, 0);
    assert_eq!(create_mkey_in::SIZE_BYTES, 0x110);
    at_byte(create_mkey_out::mkey_index, 0x09, 3);
    at_byte(destroy_mkey_in::mkey_index, 0x09, 3);
    at_byte(query_mkey_out::memory_key_mkey_entry, 0x10, 64);
    at_byte(query_mkey_out::bsf0_klm0_pas_mtt0_1, 0x110, 16);
    at_byte(mtt::ptag_63_32, 0, 4);
    at(mtt::ptag_31_8, 0x20, 24);
    at(mtt::wr_en, 62, 1);
    at(mtt::rd_en, 63, 1);
    at(cmd_pas::pa_h, 0, 32);
    at(cmd_pas::pa_l, 0x20, 20);
}

#[test]
fn qp_commands_match_contract() {
    at_byte(create_qp_in::input_qpn, 0x09, 3);
    at_byte(create_qp_in::opt_param_mask, 0x10, 4);
    at_byte(create_qp_in::ece, 0x14, 4);
    at(create_qp_in::qpc, 0xc0, 0x740);
    at_byte(create_qp_in::wq_umem_offset, 0x100, 8);
    at_byte(create_qp_in::wq_umem_id, 0x108, 4);
    at(create_qp_in::wq_umem_valid, dw(0x10c, 31), 1);
    at(create_qp_in::pas, 0x880, 0);
    assert_eq!(create_qp_in::SIZE_BYTES, 0x110);
    at_byte(create_qp_out::qpn, 0x09, 3);
    at_byte(destroy_qp_in::qpn, 0x09, 3);
    at_byte(query_qp_out::opt_param_mask, 0x10, 4);
    at(query_qp_out::qpc, 0xc0, 0x740);
    at(query_qp_out::pas, 0x880, 0);
    for (qpn, mask, ctx, size) in [
        (rst2init_qp_in::qpn, rst2init_qp_in::opt_param_mask, rst2init_qp_in::qpc, rst2init_qp_in::SIZE_BYTES),
        (init2init_qp_in::qpn, init2init_qp_in::opt_param_mask, init2init_qp_in::qpc, init2init_qp_in::SIZE_BYTES),
        (init2rtr_qp_in::qpn, init2rtr_qp_in::opt_param_mask, init2rtr_qp_in::qpc, init2rtr_qp_in::SIZE_BYTES),
        (rtr2rts_qp_in::qpn, rtr2rts_qp_in::opt_param_mask, rtr2rts_qp_in::qpc, rtr2rts_qp_in::SIZE_BYTES),
        (rts2rts_qp_in::qpn, rts2rts_qp_in::opt_param_mask, rts2rts_qp_in::qpc, rts2rts_qp_in::SIZE_BYTES),
        (sqerr2rts_qp_in::qpn, sqerr2rts_qp_in::opt_param_mask, sqerr2rts_qp_in::qpc, sqerr2rts_qp_in::SIZE_BYTES),
    ] {
        at_byte(qpn, 0x09, 3);
        at_byte(mask, 0x10, 4);
        at(ctx, 0xc0, 0x740);
        assert_eq!(size, 0x110);
    }
    at_byte(qp_2err_in::qpn, 0x09, 3);
    assert_eq!(qp_2err_in::SIZE_BYTES, 16);
    at_byte(qp_2rst_in::qpn, 0x09, 3);
    assert_eq!(qp_2rst_in::SIZE_BYTES, 16);
}

#[test]
fn srq_commands_have_their_prm_shape() {
    assert_eq!(srqc::SIZE_BYTES, 64);
    at(srqc::log_srq_size, dw(0x00, 27), 4);
    at(srqc::log_rq_stride, dw(0x04, 26), 3);
    at_byte(srqc::cqn, 0x09, 3);
    at_byte(srqc::pd, 0x19, 3);
    at_byte(srqc::lwm, 0x1c, 2);
    at_byte(srqc::dbr_addr, 0x28, 8);
    at_byte(create_srq_in::srq_context_entry, 0x10, 64);
    at(create_srq_in::pas, 0x880, 0);
    at_byte(query_srq_out::srq_context_entry, 0x10, 64);
    at_byte(arm_rq_in::srq_number, 0x09, 3);
    at_byte(arm_rq_in::lwm, 0x0e, 2);
}

/// Sets a field that must fit, failing the test otherwise.
#[track_caller]
fn set(buf: &mut [u8], f: Field, v: u64) {
    assert!(f.set(buf, v), "field {} does not fit", f.name);
    assert_eq!(f.get(buf), v, "field {} did not read back", f.name);
}

/// Concatenates hand-written lines into one image.
fn image(lines: &[&[u8]]) -> Vec<u8> {
    lines.concat()
}

#[test]
fn golden_create_cq() {
    // CREATE_CQ: 256 x 128-byte CQEs, UAR 0x123, EQ 7, moderation 16 us / 64 CQEs, 16 KiB
    // pages, doorbell record at 0x1_2345_6000, one page at 0x2_0000_0000.
    let mut buf = vec![0u8; create_cq_in::SIZE_BYTES + 8];
    let ctx = |f: Field| create_cq_in::cq_context.inner(f);
    set(&mut buf, create_cq_in::opcode, 0x400);
    set(&mut buf, ctx(cqc::cqe_sz), 1);
    set(&mut buf, ctx(cqc::log_cq_size), 8);
    set(&mut buf, ctx(cqc::uar_page), 0x123);
    set(&mut buf, ctx(cqc::cq_period), 0x10);
    set(&mut buf, ctx(cqc::cq_max_count), 0x40);
    set(&mut buf, ctx(cqc::c_eqn_or_apu_element), 7);
    set(&mut buf, ctx(cqc::log_page_size), 2);
    set(&mut buf, ctx(cqc::dbr_addr), 0x1_2345_6000);
    set(&mut buf, create_cq_in::pas.elem(0), 0x2_0000_0000);

    #[rustfmt::skip]
    let expected = image(&[
        &[0x04, 0x00, 0x00, 0x00],                         // 0x00 opcode 0x400, uid 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x04 op_mod 0
        &[0x00; 8],                                        // 0x08 reserved_at_40
        &[0x00, 0x20, 0x00, 0x00],                         // 0x10 cqc: cqe_sz=1 (bits 23:21)
        &[0x00, 0x00, 0x00, 0x00],                         // 0x14 cqc: dbr_umem_id 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x18 cqc: page_offset 0
        &[0x08, 0x00, 0x01, 0x23],                         // 0x1c cqc: log_cq_size 8, uar_page 0x123
        &[0x00, 0x10, 0x00, 0x40],                         // 0x20 cqc: cq_period 0x10, cq_max_count 0x40
        &[0x00, 0x00, 0x00, 0x07],                         // 0x24 cqc: c_eqn 7
        &[0x02, 0x00, 0x00, 0x00],                         // 0x28 cqc: log_page_size 2
        &[0x00; 4],                                        // 0x2c cqc: reserved_at_e0
        &[0x00; 16],                                       // 0x30 cqc: last_notified/solicit, ci, pi
        &[0x00; 8],                                        // 0x40 cqc: reserved_at_180
        &[0x00, 0x00, 0x00, 0x01, 0x23, 0x45, 0x60, 0x00], // 0x48 cqc: dbr_addr
        &[0x00; 8],                                        // 0x50 cq_umem_offset 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x58 cq_umem_id 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x5c cq_umem_valid 0
        &[0x00; 0xb0],                                     // 0x60 reserved_at_300
        &[0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00], // 0x110 pas[0]
    ]);
    assert_eq!(expected.len(), 0x118);
    assert_eq!(buf, expected);
}

#[test]
fn golden_create_qp_rc() {
    // CREATE_QP for RC: PD 5, 16 x 64-byte RQ WQEs, 64 SQ WQEBBs, default timestamps, UAR 0x123,
    // both queues on CQ 0x42, doorbell record at 0x1_2345_7000, one page at 0xdead_b000.
    let mut buf = vec![0u8; create_qp_in::SIZE_BYTES + 8];
    let ctx = |f: Field| create_qp_in::qpc.inner(f);
    set(&mut buf, create_qp_in::opcode, 0x500);
    set(&mut buf, ctx(qpc::st), 0x0);
    set(&mut buf, ctx(qpc::pm_state), 0x3);
    set(&mut buf, ctx(qpc::pd), 5);
    set(&mut buf, ctx(qpc::log_rq_size), 4);
    set(&mut buf, ctx(qpc::log_rq_stride), 2);
    set(&mut buf, ctx(qpc::log_sq_size), 6);
    set(&mut buf, ctx(qpc::ts_format), 1);
    set(&mut buf, ctx(qpc::uar_page), 0x123);
    set(&mut buf, ctx(qpc::cqn_snd), 0x42);
    set(&mut buf, ctx(qpc::cqn_rcv), 0x42);
    set(&mut buf, ctx(qpc::rq_type), 0);
    set(&mut buf, ctx(qpc::dbr_addr), 0x1_2345_7000);
    set(&mut buf, create_qp_in::pas.elem(0), 0xdead_b000);

    #[rustfmt::skip]
    let expected = image(&[
        &[0x05, 0x00, 0x00, 0x00],                         // 0x00 opcode 0x500, uid 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x04 op_mod 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x08 qpc_ext 0, input_qpn 0
        &[0x00; 4],                                        // 0x0c reserved_at_60
        &[0x00, 0x00, 0x00, 0x00],                         // 0x10 opt_param_mask 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x14 ece 0
        &[0x00, 0x00, 0x18, 0x00],                         // 0x18 qpc: state RST, st RC, pm_state 3
        &[0x00, 0x00, 0x00, 0x05],                         // 0x1c qpc: pd 5
        &[0x00, 0x22, 0x30, 0x40],                         // 0x20 qpc: log_rq_size 4, log_rq_stride 2, log_sq_size 6, ts_format 1
        &[0x00, 0x00, 0x01, 0x23],                         // 0x24 qpc: uar_page 0x123
        &[0x00, 0x00, 0x00, 0x00],                         // 0x28 qpc: user_index 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x2c qpc: log_page_size 0, remote_qpn 0
        &[0x00; 44],                                       // 0x30 qpc: primary_address_path
        &[0x00; 44],                                       // 0x5c qpc: secondary_address_path
        &[0x00; 8],                                        // 0x88 qpc: retry fields, reserved_at_3a0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x90 qpc: next_send_psn 0
        &[0x00, 0x00, 0x00, 0x42],                         // 0x94 qpc: cqn_snd 0x42
        &[0x00; 16],                                       // 0x98 qpc: deth_sqpn, last_acked_psn, ssn
        &[0x00, 0x00, 0x00, 0x00],                         // 0xa8 qpc: log_rra_max, rre/rwe/rae, page_offset
        &[0x00, 0x00, 0x00, 0x00],                         // 0xac qpc: min_rnr_nak, next_rcv_psn
        &[0x00, 0x00, 0x00, 0x00],                         // 0xb0 qpc: xrcd
        &[0x00, 0x00, 0x00, 0x42],                         // 0xb4 qpc: cqn_rcv 0x42
        &[0x00, 0x00, 0x00, 0x01, 0x23, 0x45, 0x70, 0x00], // 0xb8 qpc: dbr_addr
        &[0x00, 0x00, 0x00, 0x00],                         // 0xc0 qpc: q_key
        &[0x00, 0x00, 0x00, 0x00],                         // 0xc4 qpc: rq_type 0 (regular), srqn 0
        &[0x00; 0x38],                                     // 0xc8 qpc: rmsn .. dbr_umem_id
        &[0x00; 8],                                        // 0x100 wq_umem_offset
        &[0x00, 0x00, 0x00, 0x00],                         // 0x108 wq_umem_id
        &[0x00, 0x00, 0x00, 0x00],                         // 0x10c wq_umem_valid 0
        &[0x00, 0x00, 0x00, 0x00, 0xde, 0xad, 0xb0, 0x00], // 0x110 pas[0]
    ]);
    assert_eq!(expected.len(), 0x118);
    assert_eq!(buf, expected);
}

#[test]
fn golden_init2rtr_rocev2() {
    // INIT2RTR for QPN 0xabc over RoCEv2: MTU 1024, 1 MiB messages, remote QPN 0xdef, GID index 3,
    // hop limit 64, destination ::ffff:192.168.1.2, DSCP 26, UDP source port 0xdcba, priority 3,
    // port 1, destination MAC 02:11:22:33:44:55, RNR timer 12, expected PSN 0x123456.
    let mut buf = vec![0u8; init2rtr_qp_in::SIZE_BYTES];
    let ctx = |f: Field| init2rtr_qp_in::qpc.inner(f);
    let path = |f: Field| ctx(qpc::primary_address_path).inner(f);
    set(&mut buf, init2rtr_qp_in::opcode, 0x503);
    set(&mut buf, init2rtr_qp_in::qpn, 0xabc);
    set(&mut buf, ctx(qpc::mtu), 3);
    set(&mut buf, ctx(qpc::log_msg_max), 20);
    set(&mut buf, ctx(qpc::remote_qpn), 0xdef);
    set(&mut buf, path(ads::src_addr_index), 3);
    set(&mut buf, path(ads::hop_limit), 64);
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2];
    path(ads::rgid_rip).bytes_mut(&mut buf).expect("rgid_rip is byte aligned").copy_from_slice(&gid);
    set(&mut buf, path(ads::dscp), 26);
    set(&mut buf, path(ads::udp_sport), 0xdcba);
    set(&mut buf, path(ads::eth_prio), 3);
    set(&mut buf, path(ads::vhca_port_num), 1);
    set(&mut buf, path(ads::rmac_47_32), 0x0211);
    set(&mut buf, path(ads::rmac_31_0), 0x2233_4455);
    set(&mut buf, ctx(qpc::min_rnr_nak), 12);
    set(&mut buf, ctx(qpc::next_rcv_psn), 0x12_3456);
    for (i, b) in gid.iter().enumerate() {
        assert_eq!(path(ads::rgid_rip).elem(i).get(&buf), u64::from(*b));
    }

    #[rustfmt::skip]
    let expected = image(&[
        &[0x05, 0x03, 0x00, 0x00],                         // 0x00 opcode 0x503, uid 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x04 op_mod 0
        &[0x00, 0x00, 0x0a, 0xbc],                         // 0x08 qpn 0xabc
        &[0x00; 4],                                        // 0x0c reserved_at_60
        &[0x00, 0x00, 0x00, 0x00],                         // 0x10 opt_param_mask 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x14 ece 0
        &[0x00, 0x00, 0x00, 0x00],                         // 0x18 qpc: state, st, pm_state
        &[0x00, 0x00, 0x00, 0x00],                         // 0x1c qpc: pd
        &[0x74, 0x00, 0x00, 0x00],                         // 0x20 qpc: mtu 3 (1024), log_msg_max 20
        &[0x00, 0x00, 0x00, 0x00],                         // 0x24 qpc: uar_page
        &[0x00, 0x00, 0x00, 0x00],                         // 0x28 qpc: user_index
        &[0x00, 0x00, 0x0d, 0xef],                         // 0x2c qpc: remote_qpn 0xdef
        &[0x00, 0x00, 0x00, 0x00],                         // 0x30 ads: fl, free_ar, pkey_index
        &[0x00, 0x00, 0x00, 0x00],                         // 0x34 ads: plane_index, grh, mlid, rlid
        &[0x00, 0x03, 0x00, 0x40],                         // 0x38 ads: ack_timeout 0, src_addr_index 3, stat_rate 0, hop_limit 64
        &[0x00, 0x00, 0x00, 0x00],                         // 0x3c ads: tclass, flow_label
        &[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // 0x40 ads: rgid_rip[0..8]
        &[0x00, 0x00, 0xff, 0xff, 0xc0, 0xa8, 0x01, 0x02], // 0x48 ads: rgid_rip[8..16] = ::ffff:192.168.1.2
        &[0x00, 0x1a, 0xdc, 0xba],                         // 0x50 ads: dscp 26, udp_sport 0xdcba
        &[0x30, 0x01, 0x02, 0x11],                         // 0x54 ads: eth_prio 3, vhca_port_num 1, rmac_47_32
        &[0x22, 0x33, 0x44, 0x55],                         // 0x58 ads: rmac_31_0
        &[0x00; 44],                                       // 0x5c qpc: secondary_address_path
        &[0x00; 0x24],                                     // 0x88 qpc: retry fields .. rre/rwe/rae
        &[0x0c, 0x12, 0x34, 0x56],                         // 0xac qpc: min_rnr_nak 12, next_rcv_psn 0x123456
        &[0x00; 0x50],                                     // 0xb0 qpc: xrcd .. dbr_umem_id
        &[0x00; 0x10],                                     // 0x100 reserved_at_800
    ]);
    assert_eq!(expected.len(), 0x110);
    assert_eq!(buf, expected);
}
