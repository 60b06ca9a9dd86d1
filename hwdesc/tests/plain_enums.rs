//! Plain structures and open enumerations: sizes and offsets against the device-contract tables
//! (numbers typed here independently of the declarations), the sub-byte bitfields, and the
//! behaviour of open enums and flag sets.
use umlx_hwdesc::PlainStruct;
use umlx_hwdesc::enums::*;
use umlx_hwdesc::plain::*;
use zerocopy::{FromBytes, IntoBytes};

/// Checks `s` against `(name, offset, size)` rows: same fields in the same order, and that the
/// fields tile the structure with no gap or overlap.
fn check(s: PlainStruct, size: usize, rows: &[(&str, usize, usize)]) {
    assert_eq!(s.size_bytes, size, "size of {}", s.name);
    let got: Vec<(&str, usize, usize)> = s.fields.iter().map(|f| (f.name, f.offset_bytes, f.size_bytes)).collect();
    assert_eq!(got, rows, "fields of {}", s.name);
    let mut at = 0;
    for f in s.fields {
        assert_eq!(f.offset_bytes, at, "gap or overlap before {}.{}", s.name, f.name);
        at += f.size_bytes;
    }
    assert_eq!(at, size, "{} fields do not cover the structure", s.name);
}

#[test]
fn init_segment_and_health_buffer() {
    check(
        health_buffer::STRUCT,
        64,
        &[
            ("assert_var", 0x00, 20),
            ("rsvd0", 0x14, 12),
            ("assert_exit_ptr", 0x20, 4),
            ("assert_callra", 0x24, 4),
            ("rsvd1", 0x28, 8),
            ("fw_ver", 0x30, 4),
            ("hw_id", 0x34, 4),
            ("rfr", 0x38, 4),
            ("irisc_index", 0x3c, 1),
            ("synd", 0x3d, 1),
            ("ext_synd", 0x3e, 2),
        ],
    );
    check(
        init_seg::STRUCT,
        8208,
        &[
            ("fw_rev", 0x0, 4),
            ("cmdif_rev_fw_sub", 0x4, 4),
            ("rsvd0", 0x8, 8),
            ("cmdq_addr_h", 0x10, 4),
            ("cmdq_addr_l_sz", 0x14, 4),
            ("cmd_dbell", 0x18, 4),
            ("rsvd1", 0x1c, 0x1fc - 0x1c),
            ("initializing", 0x1fc, 4),
            ("health", 0x200, 64),
            ("rsvd2", 0x240, 0xff8 - 0x240),
            ("cmd_exec_to", 0xff8, 4),
            ("cmd_q_init_to", 0xffc, 4),
            ("internal_timer_h", 0x1000, 4),
            ("internal_timer_l", 0x1004, 4),
            ("rsvd3", 0x1008, 8),
            ("health_counter", 0x1010, 4),
            ("rsvd4", 0x1014, 0x1040 - 0x1014),
            ("real_time_h", 0x1040, 4),
            ("real_time_l", 0x1044, 4),
            ("rsvd5", 0x1048, 0x2000 - 0x1048),
            ("ieee1588_clk", 0x2000, 8),
            ("ieee1588_clk_type", 0x2008, 4),
            ("clr_intx", 0x200c, 4),
        ],
    );
    // Register offset constants agree with the contract's table.
    assert_eq!(iseg::FW_REV, 0x0);
    assert_eq!(iseg::CMDIF_REV_FW_SUB, 0x4);
    assert_eq!(iseg::CMDQ_ADDR_H, 0x10);
    assert_eq!(iseg::CMDQ_ADDR_L_SZ, 0x14);
    assert_eq!(iseg::CMD_DBELL, 0x18);
    assert_eq!(iseg::INITIALIZING, 0x1fc);
    assert_eq!(iseg::HEALTH, 0x200);
    assert_eq!(iseg::HEALTH_FW_VER, 0x230);
    assert_eq!(iseg::HEALTH_RFR, 0x238);
    assert_eq!(iseg::HEALTH_SYND, 0x23d);
    assert_eq!(iseg::CMD_EXEC_TO, 0xff8);
    assert_eq!(iseg::CMD_Q_INIT_TO, 0xffc);
    assert_eq!(iseg::INTERNAL_TIMER_H, 0x1000);
    assert_eq!(iseg::INTERNAL_TIMER_L, 0x1004);
    assert_eq!(iseg::HEALTH_COUNTER, 0x1010);
    assert_eq!(iseg::REAL_TIME_H, 0x1040);
    assert_eq!(iseg::REAL_TIME_L, 0x1044);
    assert_eq!(iseg::IEEE1588_CLK, 0x2000);
    assert_eq!(iseg::IEEE1588_CLK_TYPE, 0x2008);
    assert_eq!(iseg::CLR_INTX, 0x200c);
    assert_eq!(iseg::SIZE, 0x2010);
    assert_eq!(iseg::CMDIF_REV, 5);
    assert_eq!(iseg::NIC_IFC_SHIFT, 8);
    assert_eq!(iseg::FW_RESET_SUPPORTED_BIT, 30);
    assert_eq!((iseg::FW_REV_MAJOR_MASK, iseg::FW_REV_MINOR_SHIFT, iseg::FW_SUB_MINOR_MASK), (0xffff, 16, 0xffff));
    assert_eq!((iseg::HEALTH_SYND_DWORD, iseg::HEALTH_SYND_SHIFT), (0x23c, 16));
    assert_eq!(iseg::HEALTH_COUNTER_SYNDROME_SHIFT, 24);
    // The constants and the struct say the same thing.
    assert_eq!(core::mem::offset_of!(init_seg, health) + 0x30, iseg::HEALTH_FW_VER);
    assert_eq!(core::mem::offset_of!(init_seg, clr_intx), iseg::CLR_INTX);

    // Big-endian decoding of a BAR0 image.
    let mut bar = vec![0u8; 0x2010];
    bar[0x00..0x04].copy_from_slice(&[0x00, 0x27, 0x00, 0x16]);
    bar[0x04..0x08].copy_from_slice(&[0x00, 0x05, 0x12, 0x34]);
    bar[0x1fc] = 0x80;
    bar[0x23c..0x240].copy_from_slice(&[0x02, 0x07, 0xab, 0xcd]);
    bar[0x1010..0x1014].copy_from_slice(&[0x07, 0x00, 0x01, 0x02]);
    let seg = init_seg::ref_from_bytes(&bar[..]).unwrap();
    let fw_rev = seg.fw_rev.get();
    assert_eq!((fw_rev & iseg::FW_REV_MAJOR_MASK, fw_rev >> iseg::FW_REV_MINOR_SHIFT), (0x16, 0x27));
    assert_eq!(seg.cmdif_rev_fw_sub.get() >> iseg::CMDIF_REV_SHIFT, 5);
    assert_eq!(seg.cmdif_rev_fw_sub.get() & iseg::FW_SUB_MINOR_MASK, 0x1234);
    assert_eq!(seg.initializing.get() >> iseg::INITIALIZING_BIT, 1);
    assert_eq!(HealthSyndrome(seg.health.synd), HealthSyndrome::IRISC_ERR);
    assert_eq!(seg.health.ext_synd.get(), 0xabcd);
    let synd_dword = u32::from_be_bytes(bar[iseg::HEALTH_SYND_DWORD..][..4].try_into().unwrap());
    assert_eq!((synd_dword >> iseg::HEALTH_SYND_SHIFT) as u8, HealthSyndrome::IRISC_ERR.0);
    assert_eq!(seg.health_counter.get() & iseg::HEALTH_COUNTER_MASK, 0x102);
    assert_eq!(seg.health_counter.get() >> iseg::HEALTH_COUNTER_SYNDROME_SHIFT, 7);
}

#[test]
fn command_entry_and_mailbox() {
    check(
        cmd_layout::STRUCT,
        64,
        &[
            ("type_", 0x00, 1),
            ("rsvd0", 0x01, 3),
            ("inlen", 0x04, 4),
            ("in_ptr", 0x08, 8),
            ("in_", 0x10, 16),
            ("out", 0x20, 16),
            ("out_ptr", 0x30, 8),
            ("outlen", 0x38, 4),
            ("token", 0x3c, 1),
            ("sig", 0x3d, 1),
            ("rsvd1", 0x3e, 1),
            ("status_own", 0x3f, 1),
        ],
    );
    check(
        cmd_prot_block::STRUCT,
        576,
        &[
            ("data", 0x000, 512),
            ("rsvd0", 0x200, 48),
            ("next", 0x230, 8),
            ("block_num", 0x238, 4),
            ("rsvd1", 0x23c, 1),
            ("token", 0x23d, 1),
            ("ctrl_sig", 0x23e, 1),
            ("sig", 0x23f, 1),
        ],
    );
    assert_eq!(cmd::CMD_OWNER_HW, 1);
    assert_eq!(cmd::PCI_CMD_XPORT, 7);
    assert_eq!(cmd::CMD_DATA_BLOCK_SIZE, 512);
    assert_eq!(cmd::MAX_COMMANDS, 32);

    let lay = cmd_layout {
        type_: cmd::PCI_CMD_XPORT,
        inlen: 0x1010.into(),
        in_ptr: 0x1122_3344_5566_7788.into(),
        status_own: cmd::CMD_OWNER_HW,
        ..Default::default()
    };
    let b = lay.as_bytes();
    assert_eq!(b[0], 7);
    assert_eq!(&b[4..8], &[0, 0, 0x10, 0x10]);
    assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    assert_eq!(b[63], 1);

    let mut blk = cmd_prot_block::default();
    blk.data[0] = 0xaa;
    blk.block_num.set(3);
    let b = blk.as_bytes();
    assert_eq!(b[0], 0xaa);
    assert_eq!(&b[0x238..0x23c], &[0, 0, 0, 3]);
    assert_eq!(format!("{:?}", blk.rsvd0), "[0; 48]");
}

#[test]
fn eqe_and_event_payloads() {
    check(
        eqe::STRUCT,
        64,
        &[
            ("rsvd0", 0x00, 1),
            ("type_", 0x01, 1),
            ("rsvd1", 0x02, 1),
            ("sub_type", 0x03, 1),
            ("rsvd2", 0x04, 28),
            ("data", 0x20, 28),
            ("rsvd3", 0x3c, 2),
            ("signature", 0x3e, 1),
            ("owner", 0x3f, 1),
        ],
    );
    // Payload offsets are relative to EQE byte 0x20; the contract gives EQE offsets.
    let base = 0x20;
    check(eqe_comp::STRUCT, 28, &[("rsvd", 0, 24), ("cqn", 0x38 - base, 4)]);
    check(eqe_cmd::STRUCT, 28, &[("vector", 0x20 - base, 4), ("rsvd", 4, 24)]);
    check(
        eqe_page_req::STRUCT,
        28,
        &[
            ("ec_function", 0x20 - base, 2),
            ("func_id", 0x22 - base, 2),
            ("num_pages", 0x24 - base, 4),
            ("rsvd1", 8, 20),
        ],
    );
    // These two are shorter than the 28-byte union, as in Linux's device.h.
    check(eqe_port_state::STRUCT, 9, &[("rsvd0", 0, 8), ("port", 0x28 - base, 1)]);
    check(eqe_cq_err::STRUCT, 12, &[("cqn", 0x20 - base, 4), ("rsvd1", 4, 7), ("syndrome", 0x2b - base, 1)]);
    check(
        eqe_qp_srq::STRUCT,
        28,
        &[("rsvd1", 0, 20), ("type_", 0x34 - base, 1), ("rsvd2", 0x15, 3), ("qp_srq_n", 0x38 - base, 4)],
    );
    assert_eq!(eq::EQE_OWNER_INIT_VAL, 1);
    assert_eq!(eq::EQE_OWNER_MASK, 1);
    assert_eq!(eq::EQE_DATA_OFFSET, 0x20);
    assert_eq!((eq::PORT_STATE_PORT_SHIFT, eq::PORT_STATE_PORT_MASK), (4, 0xf));
    let port = eqe_port_state { port: 0x20, ..Default::default() };
    assert_eq!((port.port >> eq::PORT_STATE_PORT_SHIFT) & eq::PORT_STATE_PORT_MASK, 2);

    // A page request asking for 3 pages back, decoded through the payload struct.
    let mut raw = [0u8; 64];
    raw[0x01] = 0x0b;
    raw[0x22..0x24].copy_from_slice(&[0x00, 0x01]);
    raw[0x24..0x28].copy_from_slice(&(-3i32).to_be_bytes());
    raw[0x3f] = 1;
    let e = eqe::read_from_bytes(&raw[..]).unwrap();
    assert_eq!(EventType(e.type_), EventType::PAGE_REQUEST);
    let req = eqe_page_req::read_from_bytes(&e.data[..]).unwrap();
    assert_eq!(req.func_id.get(), 1);
    assert_eq!(req.num_pages.get(), -3);
    assert_eq!(e.owner & eq::EQE_OWNER_MASK, 1);
}

#[test]
fn cqe_layouts() {
    check(
        cqe64::STRUCT,
        64,
        &[
            ("rsvd0", 0x00, 2),
            ("wqe_id", 0x02, 2),
            ("rsvd4", 0x04, 13),
            ("ml_path", 0x11, 1),
            ("rsvd20", 0x12, 4),
            ("slid", 0x16, 2),
            ("flags_rqpn", 0x18, 4),
            ("hds_ip_ext", 0x1c, 1),
            ("l4_hdr_type_etc", 0x1d, 1),
            ("vlan_info", 0x1e, 2),
            ("srqn_uidx", 0x20, 4),
            ("imm_inval_pkey", 0x24, 4),
            ("app", 0x28, 1),
            ("app_op", 0x29, 1),
            ("app_info", 0x2a, 2),
            ("byte_cnt", 0x2c, 4),
            ("timestamp", 0x30, 8),
            ("sop_drop_qpn", 0x38, 4),
            ("wqe_counter", 0x3c, 2),
            ("signature", 0x3e, 1),
            ("op_own", 0x3f, 1),
        ],
    );
    check(
        err_cqe::STRUCT,
        64,
        &[
            ("rsvd0", 0x00, 32),
            ("srqn", 0x20, 4),
            ("rsvd1", 0x24, 18),
            ("vendor_err_synd", 0x36, 1),
            ("syndrome", 0x37, 1),
            ("s_wqe_opcode_qpn", 0x38, 4),
            ("wqe_counter", 0x3c, 2),
            ("signature", 0x3e, 1),
            ("op_own", 0x3f, 1),
        ],
    );
    assert_eq!(cq::CQE_OP_OWN_INVALID, 0xf0);

    let mut raw = [0u8; 64];
    raw[0x2c..0x30].copy_from_slice(&[0, 0, 0x01, 0x00]);
    raw[0x38..0x3c].copy_from_slice(&[0x0a, 0x00, 0x12, 0x34]);
    raw[0x3c..0x3e].copy_from_slice(&[0x00, 0x07]);
    raw[0x3f] = 0x01;
    let c = cqe64::read_from_bytes(&raw[..]).unwrap();
    assert_eq!(c.byte_cnt.get(), 256);
    assert_eq!(c.sop_drop_qpn.get() & 0xff_ffff, 0x1234);
    assert_eq!(WqeOpcode((c.sop_drop_qpn.get() >> 24) as u8), WqeOpcode::SEND);
    assert_eq!(c.wqe_counter.get(), 7);
    assert_eq!(CqeOpcode::from_op_own(c.op_own), CqeOpcode::REQ);

    raw[0x37] = 0x05;
    raw[0x3f] = 0xd0;
    let e = err_cqe::read_from_bytes(&raw[..]).unwrap();
    assert_eq!(CqeSyndrome(e.syndrome), CqeSyndrome::WR_FLUSH_ERR);
    assert_eq!(CqeOpcode::from_op_own(e.op_own), CqeOpcode::REQ_ERR);
    assert!(CqeOpcode::REQ_ERR.is_error());
    assert!(!CqeOpcode::RESP_SEND.is_error());
}

#[test]
fn wqe_segments_and_doorbell_records() {
    check(
        wqe_ctrl_seg::STRUCT,
        16,
        &[
            ("opmod_idx_opcode", 0x00, 4),
            ("qpn_ds", 0x04, 4),
            ("signature", 0x08, 1),
            ("dci_stream_channel_id", 0x09, 2),
            ("fm_ce_se", 0x0b, 1),
            ("imm", 0x0c, 4),
        ],
    );
    check(wqe_raddr_seg::STRUCT, 16, &[("raddr", 0, 8), ("rkey", 8, 4), ("reserved", 0xc, 4)]);
    check(wqe_data_seg::STRUCT, 16, &[("byte_count", 0, 4), ("lkey", 4, 4), ("addr", 8, 8)]);
    check(wqe_inline_seg::STRUCT, 4, &[("byte_count", 0, 4)]);
    check(wqe_atomic_seg::STRUCT, 16, &[("swap_add", 0, 8), ("compare", 8, 8)]);
    check(
        wqe_masked_atomic_seg::STRUCT,
        32,
        &[("swap_add", 0, 8), ("compare", 8, 8), ("swap_add_mask", 16, 8), ("compare_mask", 24, 8)],
    );
    check(
        wqe_av::STRUCT,
        48,
        &[
            ("qkey", 0x00, 4),
            ("reserved", 0x04, 4),
            ("dqp_dct", 0x08, 4),
            ("stat_rate_sl", 0x0c, 1),
            ("fl_mlid", 0x0d, 1),
            ("rlid", 0x0e, 2),
            ("reserved0", 0x10, 4),
            ("rmac", 0x14, 6),
            ("tclass", 0x1a, 1),
            ("hop_limit", 0x1b, 1),
            ("grh_gid_fl", 0x1c, 4),
            ("rgid", 0x20, 16),
        ],
    );
    check(
        wqe_srq_next_seg::STRUCT,
        16,
        &[("rsvd0", 0, 2), ("next_wqe_index", 2, 2), ("signature", 4, 1), ("rsvd1", 5, 11)],
    );
    check(qp_dbr::STRUCT, 8, &[("recv_counter", 0, 4), ("send_counter", 4, 4)]);
    check(cq_dbr::STRUCT, 8, &[("set_ci", 0, 4), ("arm", 4, 4)]);
    assert_eq!((dbr::RCV_DBR, dbr::SND_DBR, dbr::CQ_SET_CI, dbr::CQ_ARM_DB), (0, 4, 0, 4));

    assert_eq!(wqe::SEND_WQE_BB, 64);
    assert_eq!(wqe::SEND_WQE_DS, 16);
    assert_eq!(wqe::INLINE_SEG, 0x8000_0000);
    assert_eq!(wqe::INVALID_LKEY, 0x100);
    assert_eq!(wqe::EXTENDED_UD_AV, 0x8000_0000);
    assert_eq!(wqe::WQE_CTRL_FENCE, 0x80);
    assert_eq!(wqe::WQE_CTRL_CQ_UPDATE, 0x08);
    assert_eq!(wqe::WQE_CTRL_SOLICITED, 0x02);
    assert_eq!(wqe::RQ_STRIDE_UNIT_SHIFT, 4, "log_rq_stride 2 = 64-byte receive WQEs");
    assert_eq!((mkey::INDEX_SHIFT, mkey::VARIANT_MASK), (8, 0xff));
    assert_eq!(mkey::key(0x1234, 0x42), 0x0012_3442);
    assert_eq!((mkey::index(0x0012_3442), mkey::variant(0x0012_3442)), (0x1234, 0x42));

    assert_eq!(uar::CQ_DOORBELL, 0x20);
    assert_eq!(uar::EQ_DOORBELL_ARM, 0x40);
    assert_eq!(uar::EQ_DOORBELL_NO_ARM, 0x48);
    assert_eq!(uar::BF_OFFSET, 0x800);
    assert_eq!(uar::CQ_DB_REQ_NOT_SOL, 1 << 24);

    // A SEND control segment: index 5, QPN 0x12, 2 DS, signalled.
    let mut ctrl = wqe_ctrl_seg::default();
    ctrl.opmod_idx_opcode.set((5 << wqe::WQE_CTRL_WQE_INDEX_SHIFT) | u32::from(WqeOpcode::SEND.0));
    ctrl.qpn_ds.set((0x12 << wqe::WQE_CTRL_QPN_SHIFT) | 2);
    ctrl.fm_ce_se = wqe::WQE_CTRL_CQ_UPDATE;
    ctrl.imm.set(0xdead_beef);
    assert_eq!(ctrl.as_bytes(), &[0, 0, 5, 0x0a, 0, 0, 0x12, 2, 0, 0, 0, 0x08, 0xde, 0xad, 0xbe, 0xef]);
}

#[test]
fn op_own_bitfield_round_trips() {
    let invalid = CqeOpOwn::from_bits(0xf0);
    assert_eq!(invalid.opcode(), 15);
    assert!(!invalid.owner());
    assert!(!invalid.solicited());
    assert_eq!(invalid.format(), 0);

    let v = CqeOpOwn::new().with_owner(true).with_solicited(true).with_format(3).with_opcode(2);
    assert_eq!(v.into_bits(), 0x2f);
    assert_eq!(CqeOpOwn::from_bits(0x2f), v);
    for b in 0..=u8::MAX {
        let f = CqeOpOwn::from_bits(b);
        assert_eq!(f.owner(), b & 1 != 0);
        assert_eq!(f.solicited(), b & 2 != 0);
        assert_eq!(f.format(), (b >> 2) & 3);
        assert_eq!(f.opcode(), b >> 4);
        assert_eq!(CqeOpcode(f.opcode()), CqeOpcode::from_op_own(b));
        let rebuilt = CqeOpOwn::new()
            .with_owner(f.owner())
            .with_solicited(f.solicited())
            .with_format(f.format())
            .with_opcode(f.opcode());
        assert_eq!(rebuilt.into_bits(), b);
    }
}

#[test]
fn fm_ce_se_bitfield_round_trips() {
    assert_eq!(FmCeSe::new().with_ce(2).into_bits(), wqe::WQE_CTRL_CQ_UPDATE);
    assert_eq!(FmCeSe::new().with_ce(3).into_bits(), wqe::WQE_CTRL_CQ_UPDATE_AND_EQE);
    assert_eq!(FmCeSe::new().with_se(true).into_bits(), wqe::WQE_CTRL_SOLICITED);
    assert_eq!(FmCeSe::new().with_fm(4).into_bits(), wqe::WQE_CTRL_FENCE);
    assert_eq!(FmCeSe::new().with_fm(1).into_bits(), wqe::WQE_CTRL_INITIATOR_SMALL_FENCE);
    let all = FmCeSe::new().with_fm(4).with_ce(2).with_se(true);
    assert_eq!(all.into_bits(), 0x80 | 0x08 | 0x02);
    let back = FmCeSe::from_bits(0x8a);
    assert_eq!((back.fm(), back.ce(), back.se()), (4, 2, true));
}

#[test]
fn open_enums_print_and_round_trip() {
    assert_eq!(CmdStatus::BAD_PARAM_ERR.to_string(), "BAD_PARAM_ERR");
    assert_eq!(format!("{:?}", CmdStatus::OK), "OK");
    let unknown = CmdStatus(0x77);
    assert_eq!(unknown.to_string(), "Unknown(0x77)");
    assert_eq!(format!("{unknown:?}"), "Unknown(0x77)");
    assert!(!unknown.is_known());
    assert_eq!(u8::from(CmdStatus::from(0x77u8)), 0x77);
    assert_eq!(CmdStatus::from(0x03u8), CmdStatus::BAD_PARAM_ERR);

    assert_eq!(CmdOpcode::QP_2ERR.to_string(), "QP_2ERR");
    assert_eq!(CmdOpcode(0x0fff).to_string(), "Unknown(0xfff)");
    assert_eq!(DeliveryStatus::from_status_own(0x20), DeliveryStatus::CMD_DESCR_ERR);
    assert_eq!(DeliveryStatus::from_status_own(0x01), DeliveryStatus::OK);
    assert_eq!(QpState::SQ_DRAINING.name(), Some("SQ_DRAINING"));
    assert_eq!(QpState(8).name(), None);
    assert_eq!(EventType(0x0a).to_string(), "CMD");
}

#[test]
fn cmd_status_errno() {
    // Linux errno numbers: EIO 5, EAGAIN 11, ENOMEM 12, EBUSY 16, EINVAL 22.
    let table: &[(u8, i32)] = &[
        (0x00, 0),
        (0x01, 5),
        (0x02, 22),
        (0x03, 22),
        (0x04, 5),
        (0x05, 22),
        (0x06, 16),
        (0x08, 12),
        (0x09, 22),
        (0x0a, 22),
        (0x0f, 11),
        (0x10, 22),
        (0x30, 22),
        (0x40, 22),
        (0x50, 5),
        (0x51, 5),
        (0x77, 5),
    ];
    for &(s, e) in table {
        assert_eq!(CmdStatus(s).errno(), e, "status {s:#x}");
    }
    // Every named status is in the table above.
    for s in CmdStatus::ALL {
        assert!(table.iter().any(|&(v, _)| v == s.0), "{s} missing");
    }
    assert_eq!(CmdStatus::ALL.len(), 16);
}

#[test]
fn enum_values_match_the_contract() {
    let opcodes: &[(CmdOpcode, u16)] = &[
        (CmdOpcode::QUERY_HCA_CAP, 0x100),
        (CmdOpcode::QUERY_ADAPTER, 0x101),
        (CmdOpcode::INIT_HCA, 0x102),
        (CmdOpcode::TEARDOWN_HCA, 0x103),
        (CmdOpcode::ENABLE_HCA, 0x104),
        (CmdOpcode::DISABLE_HCA, 0x105),
        (CmdOpcode::QUERY_PAGES, 0x107),
        (CmdOpcode::MANAGE_PAGES, 0x108),
        (CmdOpcode::SET_HCA_CAP, 0x109),
        (CmdOpcode::QUERY_ISSI, 0x10a),
        (CmdOpcode::SET_ISSI, 0x10b),
        (CmdOpcode::SET_DRIVER_VERSION, 0x10d),
        (CmdOpcode::CREATE_MKEY, 0x200),
        (CmdOpcode::QUERY_MKEY, 0x201),
        (CmdOpcode::DESTROY_MKEY, 0x202),
        (CmdOpcode::QUERY_SPECIAL_CONTEXTS, 0x203),
        (CmdOpcode::CREATE_EQ, 0x301),
        (CmdOpcode::DESTROY_EQ, 0x302),
        (CmdOpcode::QUERY_EQ, 0x303),
        (CmdOpcode::GEN_EQE, 0x304),
        (CmdOpcode::CREATE_CQ, 0x400),
        (CmdOpcode::DESTROY_CQ, 0x401),
        (CmdOpcode::QUERY_CQ, 0x402),
        (CmdOpcode::MODIFY_CQ, 0x403),
        (CmdOpcode::CREATE_QP, 0x500),
        (CmdOpcode::DESTROY_QP, 0x501),
        (CmdOpcode::RST2INIT_QP, 0x502),
        (CmdOpcode::INIT2RTR_QP, 0x503),
        (CmdOpcode::RTR2RTS_QP, 0x504),
        (CmdOpcode::RTS2RTS_QP, 0x505),
        (CmdOpcode::SQERR2RTS_QP, 0x506),
        (CmdOpcode::QP_2ERR, 0x507),
        (CmdOpcode::QP_2RST, 0x50a),
        (CmdOpcode::QUERY_QP, 0x50b),
        (CmdOpcode::SQD_RTS_QP, 0x50c),
        (CmdOpcode::MAD_IFC, 0x50d),
        (CmdOpcode::INIT2INIT_QP, 0x50e),
        (CmdOpcode::CREATE_PSV, 0x600),
        (CmdOpcode::DESTROY_PSV, 0x601),
        (CmdOpcode::CREATE_SRQ, 0x700),
        (CmdOpcode::DESTROY_SRQ, 0x701),
        (CmdOpcode::QUERY_SRQ, 0x702),
        (CmdOpcode::ARM_RQ, 0x703),
        (CmdOpcode::CREATE_XRC_SRQ, 0x705),
        (CmdOpcode::DESTROY_XRC_SRQ, 0x706),
        (CmdOpcode::CREATE_DCT, 0x710),
        (CmdOpcode::DESTROY_DCT, 0x711),
        (CmdOpcode::QUERY_DCT, 0x713),
        (CmdOpcode::QUERY_VPORT_STATE, 0x750),
        (CmdOpcode::QUERY_NIC_VPORT_CONTEXT, 0x754),
        (CmdOpcode::MODIFY_NIC_VPORT_CONTEXT, 0x755),
        (CmdOpcode::QUERY_ROCE_ADDRESS, 0x760),
        (CmdOpcode::SET_ROCE_ADDRESS, 0x761),
        (CmdOpcode::QUERY_HCA_VPORT_CONTEXT, 0x762),
        (CmdOpcode::MODIFY_HCA_VPORT_CONTEXT, 0x763),
        (CmdOpcode::QUERY_HCA_VPORT_GID, 0x764),
        (CmdOpcode::QUERY_HCA_VPORT_PKEY, 0x765),
        (CmdOpcode::ALLOC_Q_COUNTER, 0x771),
        (CmdOpcode::DEALLOC_Q_COUNTER, 0x772),
        (CmdOpcode::QUERY_Q_COUNTER, 0x773),
        (CmdOpcode::ALLOC_PD, 0x800),
        (CmdOpcode::DEALLOC_PD, 0x801),
        (CmdOpcode::ALLOC_UAR, 0x802),
        (CmdOpcode::DEALLOC_UAR, 0x803),
        (CmdOpcode::ACCESS_REG, 0x805),
        (CmdOpcode::ATTACH_TO_MCG, 0x806),
        (CmdOpcode::DETACH_FROM_MCG, 0x807),
        (CmdOpcode::NOP, 0x80d),
        (CmdOpcode::ALLOC_XRCD, 0x80e),
        (CmdOpcode::DEALLOC_XRCD, 0x80f),
        (CmdOpcode::ALLOC_TRANSPORT_DOMAIN, 0x816),
        (CmdOpcode::DEALLOC_TRANSPORT_DOMAIN, 0x817),
        (CmdOpcode::CREATE_SQ, 0x904),
        (CmdOpcode::CREATE_RQ, 0x908),
        (CmdOpcode::CREATE_RMP, 0x90c),
        (CmdOpcode::MODIFY_RMP, 0x90d),
        (CmdOpcode::DESTROY_RMP, 0x90e),
        (CmdOpcode::QUERY_RMP, 0x90f),
        (CmdOpcode::CREATE_GENERAL_OBJECT, 0xa00),
        (CmdOpcode::MODIFY_GENERAL_OBJECT, 0xa01),
        (CmdOpcode::QUERY_GENERAL_OBJECT, 0xa02),
        (CmdOpcode::DESTROY_GENERAL_OBJECT, 0xa03),
        (CmdOpcode::CREATE_UCTX, 0xa04),
        (CmdOpcode::DESTROY_UCTX, 0xa06),
        (CmdOpcode::CREATE_UMEM, 0xa08),
        (CmdOpcode::DESTROY_UMEM, 0xa0a),
    ];
    for &(op, v) in opcodes {
        assert_eq!(op.0, v, "{op}");
    }
    // No two opcode names share a value.
    let mut seen: Vec<u16> = CmdOpcode::ALL.iter().map(|o| o.0).collect();
    seen.sort_unstable();
    let n = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), n);

    assert_eq!(
        [CmdStatus::RES_BUSY.0, CmdStatus::LIM_ERR.0, CmdStatus::NO_RES_ERR.0, CmdStatus::BAD_OUTP_LEN_ERR.0],
        [0x06, 0x08, 0x0f, 0x51]
    );
    assert_eq!(DeliveryStatus::RES_FLD_NOT_CLR_ERR.0, 0x09);
    assert_eq!(
        [WqeOpcode::SEND_INVAL.0, WqeOpcode::RDMA_WRITE_IMM.0, WqeOpcode::RDMA_READ.0, WqeOpcode::ATOMIC_FA.0],
        [0x01, 0x09, 0x10, 0x12]
    );
    assert_eq!([WqeOpcode::ATOMIC_MASKED_CS.0, WqeOpcode::UMR.0], [0x14, 0x25]);
    assert_eq!(
        [CqeOpcode::RESP_WR_IMM.0, CqeOpcode::SIG_ERR.0, CqeOpcode::RESP_ERR.0, CqeOpcode::INVALID.0],
        [1, 12, 14, 15]
    );
    assert_eq!(
        [CqeSyndrome::LOCAL_PROT_ERR.0, CqeSyndrome::RNR_RETRY_EXC_ERR.0, CqeSyndrome::REMOTE_ABORTED_ERR.0],
        [0x04, 0x16, 0x22]
    );
    assert_eq!(
        [EventType::PATH_MIG_FAILED.0, EventType::PORT_CHANGE.0, EventType::PAGE_REQUEST.0, EventType::DEVICE_TRACER.0],
        [0x07, 0x09, 0x0b, 0x26]
    );
    assert_eq!([PortChangeSubtype::DOWN.0, PortChangeSubtype::ACTIVE.0], [1, 4]);
    assert_eq!([VportState::DOWN.0, VportState::UP.0, VportAdminState::UP.0, VportAdminState::AUTO.0], [0, 1, 1, 2]);
    assert_eq!([IbPortState::DOWN.0, IbPortState::ACTIVE.0], [1, 4]);
    assert_eq!([PortPhysicalState::POLLING.0, PortPhysicalState::DISABLED.0, PortPhysicalState::LINK_UP.0], [2, 3, 5]);
    assert_eq!([QpState::RTS.0, QpState::ERR.0, QpState::SUSPENDED.0], [3, 6, 9]);
    assert_eq!([QpServiceType::RC.0, QpServiceType::UD.0, QpServiceType::SYNC_UMR.0], [0, 2, 0xe]);
    assert_eq!(IbMtu::MTU_256.bytes(), Some(256));
    assert_eq!(IbMtu::MTU_1024.bytes(), Some(1024));
    assert_eq!(IbMtu::MTU_4096.bytes(), Some(4096));
    assert_eq!(IbMtu(0).bytes(), None);
    assert_eq!(IbMtu(6).bytes(), None);
    assert_eq!(IbMtu::from_bytes(2048), Some(IbMtu(4)));
    assert_eq!(IbMtu::from_bytes(1500), None);

    assert_eq!(HcaCapType::GENERAL.op_mod(true), 0x0001);
    assert_eq!(HcaCapType::GENERAL.op_mod(false), 0x0000);
    assert_eq!(HcaCapType::ROCE.op_mod(true), 0x0009);
    assert_eq!(HcaCapType::ROCE.op_mod(false), 0x0008);
    assert_eq!(HcaCapType::GENERAL_2.op_mod(false), 0x40);
    assert_eq!(HcaCapType::from_op_mod(0x0009), (HcaCapType::ROCE, true));
    assert_eq!([HcaCapType::DEV_MEM.0, HcaCapType::CRYPTO.0, HcaCapType::GENERAL_2.0], [0xf, 0x1a, 0x20]);

    assert_eq!([PagesOpMod::BOOT.0, PagesOpMod::INIT.0, PagesOpMod::REGULAR.0], [1, 2, 3]);
    assert_eq!([ManagePagesOpMod::CANT_GIVE.0, ManagePagesOpMod::GIVE.0, ManagePagesOpMod::TAKE.0], [0, 1, 2]);
    assert_eq!([TeardownProfile::GRACEFUL_CLOSE.0, TeardownProfile::PREPARE_FAST_TEARDOWN.0], [0, 2]);
    assert_eq!([AccessRegId::HOST_ENDIANNESS.0, AccessRegId::PAOS.0, AccessRegId::PTYS.0], [0x7004, 0x5006, 0x5004]);
    assert_eq!([AccessRegId::PMTU.0, AccessRegId::DTOR.0], [0x5003, 0xc00e]);
    assert_eq!(
        [HealthSyndrome::FW_ERR.0, HealthSyndrome::ASYNC_EQ_OVERRUN_ERR.0, HealthSyndrome::HIGH_TEMP.0],
        [1, 0xc, 0x10]
    );
    assert_eq!([NicInterface::FULL.0, NicInterface::DISABLED.0, NicInterface::SW_RESET.0], [0, 1, 7]);
    assert_eq!([RqType::NON_ZERO_RQ.0, RqType::SRQ_RQ.0, RqType::ZERO_LEN_RQ.0], [0, 1, 3]);
    assert_eq!([CqStatus::OK.0, CqStatus::CQ_OVERFLOW.0, CqStatus::CQ_WRITE_FAIL.0], [0, 9, 0xa]);
    assert_eq!(
        [CqState::SOLICITED_NOTIFICATION_REQUEST_ARMED.0, CqState::NOTIFICATION_REQUEST_ARMED.0, CqState::FIRED.0],
        [6, 9, 0xa]
    );
    assert_eq!(
        MkcAccessMode::ALL.iter().map(|m| m.0).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5, 6],
        "PA MTT KLMS KSM SW_ICM MEMIC CROSSING"
    );
    assert_eq!((MkcAccessMode::MTT.bits_4_2(), MkcAccessMode::MTT.bits_1_0()), (0, 1));
    assert_eq!((MkcAccessMode::MEMIC.bits_4_2(), MkcAccessMode::MEMIC.bits_1_0()), (1, 1));
    assert_eq!(MkcAccessMode::from_fields(1, 2), MkcAccessMode::CROSSING);
    assert_eq!(MkcAccessMode::from_fields(0, 2), MkcAccessMode::KLMS);
    assert_eq!([CqErrorSyndrome::CQ_OVERRUN.0, CqErrorSyndrome::CQ_ACCESS_VIOLATION_ERROR.0], [1, 2]);
    assert_eq!([EqStatus::OK.0, EqStatus::EQ_WRITE_FAILURE.0], [0, 0xa]);
    assert_eq!([EqState::ARMED.0, EqState::FIRED.0], [9, 0xa]);
    assert_eq!([SrqState::GOOD.0, SrqState::ERROR.0], [0, 1]);
    assert_eq!([ModifyCqOpMod::MODIFY.0, ModifyCqOpMod::RESIZE.0], [0, 1]);
    assert_eq!(ArmRqOpMod::SRQ.0, 1);
    assert_eq!([AtomicReqMode::BE.0, AtomicReqMode::HOST_ENDIANNESS.0], [0, 1]);
    assert_eq!([RoceVersion::VERSION_1.0, RoceVersion::VERSION_2.0], [0, 2]);
    assert_eq!([RoceL3Type::IPV4.0, RoceL3Type::IPV6.0], [0, 1]);
}

#[test]
fn flag_sets() {
    assert_eq!(MkeyAccess::LOCAL_READ.0, 0x04);
    assert_eq!(MkeyAccess::UMR_EN.0, 0x80);
    let rw = MkeyAccess::LOCAL_READ | MkeyAccess::LOCAL_WRITE | MkeyAccess::REMOTE_WRITE;
    assert_eq!(rw.bits(), 0x2c);
    assert_eq!(rw.to_string(), "LOCAL_READ | LOCAL_WRITE | REMOTE_WRITE");
    assert!(rw.contains(MkeyAccess::LOCAL_WRITE));
    assert!(!rw.contains(MkeyAccess::ATOMIC));
    assert_eq!(MkeyAccess(0x2d).to_string(), "LOCAL_READ | LOCAL_WRITE | REMOTE_WRITE | Unknown(0x1)");
    assert_eq!(MkeyAccess(0x3).to_string(), "Unknown(0x3)");
    assert_eq!(MkeyAccess::empty().to_string(), "(empty)");

    assert_eq!((SupportedIssi::ISSI_0.0, SupportedIssi::ISSI_1.0), (1, 2));
    assert_eq!(SupportedIssi(0b11).to_string(), "ISSI_0 | ISSI_1");
    assert_eq!(
        [
            AtomicOps::CMP_SWAP.0,
            AtomicOps::FETCH_ADD.0,
            AtomicOps::EXTENDED_CMP_SWAP.0,
            AtomicOps::EXTENDED_FETCH_ADD.0
        ],
        [1, 2, 4, 8]
    );
    assert!(AtomicOps(0b1011).contains(AtomicOps::CMP_SWAP | AtomicOps::FETCH_ADD));
    assert!(!AtomicOps(0b01).contains(AtomicOps::CMP_SWAP | AtomicOps::FETCH_ADD));
    assert_eq!(AtomicSize::QP_8BYTES.0, 8);
    assert_eq!((RoceVersionCaps::VERSION_1.0, RoceVersionCaps::VERSION_2.0), (1, 4));
    assert_eq!((RoceL3TypeCaps::IPV4.0, RoceL3TypeCaps::IPV6.0), (2, 4));
    assert_eq!([CqModifyFields::PERIOD.0, CqModifyFields::COUNT.0, CqModifyFields::OVERRUN.0], [1, 2, 4]);
    assert_eq!(CqResizeFields::ALL_KNOWN.0, 0b111);
    assert_eq!([CqResizeFields::LOG_SIZE.0, CqResizeFields::PG_OFFSET.0, CqResizeFields::PG_SIZE.0], [1, 2, 4]);
    assert_eq!((mkey::MTT_READ, mkey::MTT_WRITE, mkey::MTT_PTAG_MASK), (1, 2, !0xff));

    let opt = QpOptParam::RRE | QpOptParam::RWE | QpOptParam::PKEY_INDEX;
    assert_eq!(opt.bits(), 0b1_1010);
    assert_eq!(format!("{opt:?}"), "RRE | RWE | PKEY_INDEX");
    assert_eq!(QpOptParam::COUNTER_SET_ID.0, 1 << 25);
    assert_eq!(QpOptParam::RETRY_COUNT.0, 1 << 12);
    assert_eq!(QpOptParam(1 << 11).to_string(), "Unknown(0x800)");
    assert_eq!(u32::from(QpOptParam::from(0x8000_0001)), 0x8000_0001);
}

/// The optional parameters per QP transition and service type, as Linux mlx5_ib's `opt_mask`
/// table lists them (raw bit values, so a renamed constant cannot hide a changed table).
#[test]
fn qp_opt_param_table_matches_linux_opt_mask() {
    let a = QpOptParam::allowed;
    let (rc, uc, ud) = (QpServiceType::RC, QpServiceType::UC, QpServiceType::UD);
    // No optional parameter in RST2INIT, 2ERR and 2RST.
    for op in [CmdOpcode::RST2INIT_QP, CmdOpcode::QP_2ERR, CmdOpcode::QP_2RST] {
        for st in [rc, uc, ud] {
            assert_eq!(a(op, st).bits(), 0, "{op} {st}");
        }
    }
    // INIT2INIT: RRE|RAE|RWE|PKEY_INDEX|PRI_PORT; UC RWE|PKEY_INDEX|PRI_PORT; UD PKEY_INDEX|Q_KEY|PRI_PORT.
    assert_eq!(a(CmdOpcode::INIT2INIT_QP, rc).bits(), 0x1_001e);
    assert_eq!(a(CmdOpcode::INIT2INIT_QP, uc).bits(), 0x1_0018);
    assert_eq!(a(CmdOpcode::INIT2INIT_QP, ud).bits(), 0x1_0030);
    // INIT2RTR: ALT_ADDR_PATH|RRE|RAE|RWE|PKEY_INDEX; UC ALT|RWE|PKEY; UD PKEY_INDEX|Q_KEY.
    assert_eq!(a(CmdOpcode::INIT2RTR_QP, rc).bits(), 0x1f);
    assert_eq!(a(CmdOpcode::INIT2RTR_QP, uc).bits(), 0x19);
    assert_eq!(a(CmdOpcode::INIT2RTR_QP, ud).bits(), 0x30);
    // RTR2RTS: ALT|RRE|RAE|RWE|PM_STATE|RNR_TIMEOUT; UC ALT|RWE|PM_STATE; UD Q_KEY.
    assert_eq!(a(CmdOpcode::RTR2RTS_QP, rc).bits(), 0x44f);
    assert_eq!(a(CmdOpcode::RTR2RTS_QP, uc).bits(), 0x409);
    assert_eq!(a(CmdOpcode::RTR2RTS_QP, ud).bits(), 0x20);
    // RTS2RTS: as RTR2RTS for RC and UC; UD Q_KEY|SRQN|CQN_RCV.
    assert_eq!(a(CmdOpcode::RTS2RTS_QP, rc).bits(), 0x44f);
    assert_eq!(a(CmdOpcode::RTS2RTS_QP, uc).bits(), 0x409);
    assert_eq!(a(CmdOpcode::RTS2RTS_QP, ud).bits(), 0xc_0020);
    // SQERR2RTS and SQD2RTS: RNR_TIMEOUT|RWE|RAE|RRE; UC RWE; UD Q_KEY.
    for op in [CmdOpcode::SQERR2RTS_QP, CmdOpcode::SQD_RTS_QP] {
        assert_eq!(a(op, rc).bits(), 0x4e);
        assert_eq!(a(op, uc).bits(), 0x8);
        assert_eq!(a(op, ud).bits(), 0x20);
    }
    // XRC has the RC set; a type without an entry has none.
    assert_eq!(a(CmdOpcode::INIT2RTR_QP, QpServiceType::XRC), a(CmdOpcode::INIT2RTR_QP, rc));
    assert_eq!(a(CmdOpcode::INIT2RTR_QP, QpServiceType::DCT).bits(), 0);
}
