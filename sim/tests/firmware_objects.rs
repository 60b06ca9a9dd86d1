//! Object commands: PD, transport domain, UAR and Q counter allocation; CQ create, query,
//! modify (moderation and resize) and destroy; MKey create (MTT), query and destroy; SRQ
//! create, query, arm and destroy; QP create (RC and UD) and query.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{
    CmdOpcode, CmdStatus, CqState, CqStatus, CqeOpcode, MkcAccessMode, QpServiceType, QpState, RqType,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{cqe64, dbr, eq, uar, wqe};

#[test]
fn pd_td_uar_and_q_counter() {
    let mut env = Env::new();
    let h = &mut env.host;
    // PDs: distinct, reusable after dealloc.
    let a = h.alloc_pd().unwrap();
    let b = h.alloc_pd().unwrap();
    assert!(a != b && a != env.pd && b != env.pd && a > 0 && b > 0);
    h.dealloc_pd(a).unwrap();
    expect_fail(h.dealloc_pd(a), CmdOpcode::DEALLOC_PD, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    assert_eq!(h.alloc_pd().unwrap(), a, "lowest free number reused");
    // Transport domains.
    let td = |h: &mut CmdHost| {
        let o = h.exec(CmdOpcode::ALLOC_TRANSPORT_DOMAIN, 0, 16, alloc_transport_domain_out::SIZE_BYTES, |_| {});
        alloc_transport_domain_out::transport_domain.get(&o.unwrap()) as u32
    };
    let dealloc_td = |h: &mut CmdHost, n: u32| {
        h.exec(CmdOpcode::DEALLOC_TRANSPORT_DOMAIN, 0, dealloc_transport_domain_in::SIZE_BYTES, 16, |i| {
            dealloc_transport_domain_in::transport_domain.set(i, n as u64);
        })
    };
    let (t1, t2) = (td(h), td(h));
    assert!(t1 >= 1 && t2 != t1);
    dealloc_td(h, t1).unwrap();
    dealloc_td(h, t2).unwrap();
    expect_fail(dealloc_td(h, t2), CmdOpcode::DEALLOC_TRANSPORT_DOMAIN, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    // UARs: indices above the initialization segment, distinct.
    let u1 = h.alloc_uar().unwrap();
    let u2 = h.alloc_uar().unwrap();
    assert!(u1 >= 8 && u2 >= 8 && u1 != u2 && u1 != env.uar);
    assert!(((u2 as usize * uar::UAR_PAGE_SIZE) as u64) < env.dev.bar0_len());
    h.dealloc_uar(u1).unwrap();
    h.dealloc_uar(u2).unwrap();
    expect_fail(h.dealloc_uar(u2), CmdOpcode::DEALLOC_UAR, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    // A doorbell on a UAR that is not allocated is counted, not acted upon.
    let bad = env.dev.stats().bad_doorbells;
    let arm = u2 as usize * uar::UAR_PAGE_SIZE + uar::EQ_DOORBELL_ARM;
    env.dev.bar0_write32(arm as u64, env.eq.eqn << eq::DB_EQN_SHIFT);
    assert_eq!(env.dev.stats().bad_doorbells, bad + 1);
    // Q counters.
    let o = h.exec(CmdOpcode::ALLOC_Q_COUNTER, 0, 16, alloc_q_counter_out::SIZE_BYTES, |_| {}).unwrap();
    let qc = alloc_q_counter_out::counter_set_id.get(&o) as u32;
    assert!(qc >= 1);
    let query = |h: &mut CmdHost, id: u32| {
        h.exec(CmdOpcode::QUERY_Q_COUNTER, 0, query_q_counter_in::SIZE_BYTES, query_q_counter_out::SIZE_BYTES, |i| {
            query_q_counter_in::counter_set_id.set(i, id as u64);
            query_q_counter_in::clear.set(i, 1);
        })
    };
    let o = query(h, qc).expect("QUERY_Q_COUNTER");
    assert_eq!(query_q_counter_out::out_of_buffer.get(&o), 0);
    assert_eq!(query_q_counter_out::rx_write_requests.get(&o), 0);
    h.exec(CmdOpcode::DEALLOC_Q_COUNTER, 0, dealloc_q_counter_in::SIZE_BYTES, 16, |i| {
        dealloc_q_counter_in::counter_set_id.set(i, qc as u64);
    })
    .unwrap();
    expect_fail(query(h, qc), CmdOpcode::QUERY_Q_COUNTER, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
}

fn query_cq(h: &mut CmdHost, cqn: u32) -> Result<Vec<u8>, CmdError> {
    // The fixed-size output drivers use (no page list).
    h.exec(CmdOpcode::QUERY_CQ, 0, query_cq_in::SIZE_BYTES, query_cq_out::SIZE_BYTES, |i| {
        query_cq_in::cqn.set(i, cqn as u64);
    })
}

#[test]
fn cq_lifecycle() {
    let mut env = Env::new();
    let (uar, eqn) = (env.uar, env.eq.eqn);
    let h = &mut env.host;
    let cq = create_cq(h, uar, eqn, 6).expect("CREATE_CQ");
    assert!(cq.cqn >= 1);
    cq.dbr.write_u32_be(dbr::CQ_SET_CI, 5);
    let o = query_cq(h, cq.cqn).expect("QUERY_CQ");
    let c = query_cq_out::cq_context;
    assert_eq!(c.inner(cqc::log_cq_size).get(&o), 6);
    assert_eq!(c.inner(cqc::uar_page).get(&o), uar as u64);
    assert_eq!(c.inner(cqc::c_eqn_or_apu_element).get(&o), eqn as u64);
    assert_eq!(c.inner(cqc::dbr_addr).get(&o), cq.dbr.iova());
    assert_eq!(c.inner(cqc::consumer_counter).get(&o), 5, "read from the doorbell record");
    assert_eq!(c.inner(cqc::producer_counter).get(&o), 0);
    assert_eq!(c.inner(cqc::status).get(&o), CqStatus::OK.0 as u64);
    assert_eq!(c.inner(cqc::st).get(&o), CqState::FIRED.0 as u64, "not armed");
    // Armed (the UAR's CQ doorbell: the arm command and the consumer index, 0 as the producer's
    // so that nothing fires, over the CQ number), for the next completion and for the next
    // solicited one: QUERY_CQ reports each state.
    for (cmd, st) in [
        (uar::CQ_DB_REQ_NOT, CqState::NOTIFICATION_REQUEST_ARMED),
        (uar::CQ_DB_REQ_NOT_SOL, CqState::SOLICITED_NOTIFICATION_REQUEST_ARMED),
    ] {
        let hi = cmd;
        h.dev().bar0_write64(
            (uar as usize * uar::UAR_PAGE_SIZE + uar::CQ_DOORBELL) as u64,
            ((hi as u64) << 32) | cq.cqn as u64,
        );
        let o = query_cq(h, cq.cqn).expect("QUERY_CQ");
        assert_eq!(c.inner(cqc::st).get(&o), st.0 as u64, "armed with command {cmd:#x}");
    }
    // With room for the page list, QUERY_CQ returns it too.
    let o = h
        .exec(CmdOpcode::QUERY_CQ, 0, query_cq_in::SIZE_BYTES, query_cq_out::SIZE_BYTES + 8, |i| {
            query_cq_in::cqn.set(i, cq.cqn as u64);
        })
        .unwrap();
    assert_eq!(u64::from_be_bytes(o[query_cq_out::SIZE_BYTES..].try_into().unwrap()), cq.buf.iova());

    // Moderation: only the selected fields change.
    let modify = |h: &mut CmdHost, op_mod: u16, select: u32, f: &dyn Fn(&mut [u8]), pas: &[u64]| {
        h.exec(CmdOpcode::MODIFY_CQ, op_mod, modify_cq_in::SIZE_BYTES + 8 * pas.len(), 16, |i| {
            modify_cq_in::cqn.set(i, cq.cqn as u64);
            modify_cq_in::modify_field_select_resize_field_select.set(i, select as u64);
            f(i);
            put_pas(i, modify_cq_in::SIZE_BYTES, pas);
        })
    };
    let moder = |i: &mut [u8]| {
        modify_cq_in::cq_context.inner(cqc::cq_period).set(i, 16);
        modify_cq_in::cq_context.inner(cqc::cq_max_count).set(i, 32);
    };
    modify(h, 0, 0b01, &moder, &[]).expect("MODIFY_CQ period");
    let o = query_cq(h, cq.cqn).unwrap();
    assert_eq!((c.inner(cqc::cq_period).get(&o), c.inner(cqc::cq_max_count).get(&o)), (16, 0));
    modify(h, 0, 0b11, &moder, &[]).expect("MODIFY_CQ period and count");
    let o = query_cq(h, cq.cqn).unwrap();
    assert_eq!((c.inner(cqc::cq_period).get(&o), c.inner(cqc::cq_max_count).get(&o)), (16, 32));

    // Resize to 256 CQEs in 4 new pages. The firmware writes the RESIZE_CQ marker in the old
    // ring, so the doorbell record must hold a consumer index the ring agrees with again.
    cq.dbr.write_u32_be(dbr::CQ_SET_CI, 0);
    let big = h.alloc(4 * 4096);
    let resize = |i: &mut [u8]| {
        modify_cq_in::cq_context.inner(cqc::log_cq_size).set(i, 8);
    };
    modify(h, 1, 0b1, &resize, &pages_of(&big)).expect("MODIFY_CQ resize");
    let o = h
        .exec(CmdOpcode::QUERY_CQ, 0, query_cq_in::SIZE_BYTES, query_cq_out::SIZE_BYTES + 32, |i| {
            query_cq_in::cqn.set(i, cq.cqn as u64);
        })
        .unwrap();
    assert_eq!(c.inner(cqc::log_cq_size).get(&o), 8);
    assert_eq!((c.inner(cqc::cq_period).get(&o), c.inner(cqc::cq_max_count).get(&o)), (16, 32), "kept");
    let pas: Vec<u64> =
        (0..4).map(|k| u64::from_be_bytes(o[query_cq_out::SIZE_BYTES + 8 * k..][..8].try_into().unwrap())).collect();
    assert_eq!(pas, pages_of(&big));
    let op_own = cq.buf.read_u8(cqe64::op_own);
    assert_eq!(
        CqeOpcode::from_op_own(op_own),
        CqeOpcode::RESIZE_CQ,
        "the RESIZE_CQ marker sits at the switch point of the old ring"
    );
    assert_eq!(c.inner(cqc::producer_counter).get(&o), 1, "the producer goes on after the marker");
    // Resize with too few pages, or beyond the limit.
    let r = modify(h, 1, 0b1, &resize, &pages_of(&big)[..2]);
    expect_fail(r, CmdOpcode::MODIFY_CQ, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
    let huge = |i: &mut [u8]| {
        modify_cq_in::cq_context.inner(cqc::log_cq_size).set(i, 23);
    };
    let r = modify(h, 1, 0b1, &huge, &[]);
    expect_fail(r, CmdOpcode::MODIFY_CQ, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);

    destroy_cq(h, cq.cqn).expect("DESTROY_CQ");
    expect_fail(query_cq(h, cq.cqn), CmdOpcode::QUERY_CQ, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    expect_fail(destroy_cq(h, cq.cqn), CmdOpcode::DESTROY_CQ, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
}

#[test]
fn cq_create_validation() {
    let mut env = Env::new();
    let (uar, eqn) = (env.uar, env.eq.eqn);
    let h = &mut env.host;
    let buf = h.alloc(4096);
    let dbr = h.alloc(4096);
    let try_cq = |h: &mut CmdHost, f: &dyn Fn(&mut Vec<u8>)| {
        let mut i = cq_input(uar, eqn, 6, &[buf.iova()], dbr.iova());
        f(&mut i);
        h.run(&i, create_cq_out::SIZE_BYTES)
    };
    let c = create_cq_in::cq_context;
    let r = try_cq(h, &|i| {
        c.inner(cqc::cqe_sz).set(i, 1);
    });
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    let r = try_cq(h, &|i| {
        c.inner(cqc::log_cq_size).set(i, 23);
    });
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);
    let r = try_cq(h, &|i| {
        c.inner(cqc::dbr_addr).set(i, dbr.iova() + 4);
    });
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    let r = try_cq(h, &|i| {
        create_cq_in::cq_umem_valid.set(i, 1);
    });
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    assert_eq!(env.dev.object_counts().cqs, 0, "no CQ left behind by refused commands");
}

fn mkey_input(pd: u32, start: u64, len: u64, variant: u8, pages: &[u64], f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let n = pages.len().next_multiple_of(2);
    let mut i = cmd_input(CmdOpcode::CREATE_MKEY, 0, create_mkey_in::SIZE_BYTES + 8 * n);
    let m = create_mkey_in::memory_key_mkey_entry;
    create_mkey_in::pg_access.set(&mut i, 1);
    m.inner(mkc::access_mode_1_0).set(&mut i, MkcAccessMode::MTT.bits_1_0() as u64);
    m.inner(mkc::lr).set(&mut i, 1);
    m.inner(mkc::lw).set(&mut i, 1);
    m.inner(mkc::rr).set(&mut i, 1);
    m.inner(mkc::rw).set(&mut i, 1);
    m.inner(mkc::qpn).set(&mut i, 0xff_ffff);
    m.inner(mkc::mkey_7_0).set(&mut i, variant as u64);
    m.inner(mkc::pd).set(&mut i, pd as u64);
    m.inner(mkc::start_addr).set(&mut i, start);
    m.inner(mkc::len).set(&mut i, len);
    m.inner(mkc::translations_octword_size).set(&mut i, (n / 2) as u64);
    m.inner(mkc::log_page_size).set(&mut i, 12);
    create_mkey_in::translations_octword_actual_size.set(&mut i, (n / 2) as u64);
    for (k, &page) in pages.iter().enumerate() {
        let e = create_mkey_in::klm_pas_mtt.elem(k);
        e.set(&mut i, page);
        e.inner(mtt::rd_en).set(&mut i, 1);
        e.inner(mtt::wr_en).set(&mut i, 1);
    }
    f(&mut i);
    i
}

#[test]
fn mkey_lifecycle() {
    let mut env = Env::new();
    let pd = env.pd;
    let h = &mut env.host;
    let mem = h.alloc(3 * 4096);
    let start = 0x7f00_1234_5000u64 + 0x80; // not page aligned: 3 pages cover 8192 + 100 bytes
    let len = 8192 + 100;
    let input = mkey_input(pd, start, len, 0x42, &pages_of(&mem), |_| {});
    let o = h.run(&input, create_mkey_out::SIZE_BYTES).expect("CREATE_MKEY");
    let index = create_mkey_out::mkey_index.get(&o) as u32;
    assert!(index >= 1);
    let o = h
        .exec(CmdOpcode::QUERY_MKEY, 0, query_mkey_in::SIZE_BYTES, query_mkey_out::SIZE_BYTES, |i| {
            query_mkey_in::mkey_index.set(i, index as u64);
        })
        .expect("QUERY_MKEY");
    let m = query_mkey_out::memory_key_mkey_entry;
    assert_eq!(m.inner(mkc::pd).get(&o), pd as u64);
    assert_eq!(m.inner(mkc::start_addr).get(&o), start);
    assert_eq!(m.inner(mkc::len).get(&o), len);
    assert_eq!(m.inner(mkc::mkey_7_0).get(&o), 0x42);
    assert_eq!(m.inner(mkc::access_mode_1_0).get(&o), MkcAccessMode::MTT.bits_1_0() as u64);
    assert_eq!((m.inner(mkc::rr).get(&o), m.inner(mkc::rw).get(&o), m.inner(mkc::a).get(&o)), (1, 1, 0));
    assert_eq!(m.inner(mkc::log_page_size).get(&o), 12);
    // The PD is in use now.
    expect_fail(h.dealloc_pd(pd), CmdOpcode::DEALLOC_PD, CmdStatus::BAD_RES_STATE_ERR, sy::OBJECT_IN_USE);
    let destroy = |h: &mut CmdHost, index: u32| {
        h.exec(CmdOpcode::DESTROY_MKEY, 0, destroy_mkey_in::SIZE_BYTES, 16, |i| {
            destroy_mkey_in::mkey_index.set(i, index as u64);
        })
    };
    destroy(h, index).expect("DESTROY_MKEY");
    expect_fail(destroy(h, index), CmdOpcode::DESTROY_MKEY, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);

    // Validation.
    let pages = pages_of(&mem);
    let bad = |h: &mut CmdHost, input: Vec<u8>, status: CmdStatus, reason: u16| {
        expect_fail(h.run(&input, create_mkey_out::SIZE_BYTES), CmdOpcode::CREATE_MKEY, status, reason);
    };
    let m = create_mkey_in::memory_key_mkey_entry;
    bad(
        h,
        mkey_input(pd, start, len, 1, &pages, |i| {
            m.inner(mkc::access_mode_1_0).set(i, MkcAccessMode::KLMS.bits_1_0() as u64);
        }),
        CmdStatus::BAD_PARAM_ERR,
        sy::BAD_FIELD_VALUE,
    );
    bad(h, mkey_input(pd + 100, start, len, 1, &pages, |_| {}), CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    bad(h, mkey_input(pd, start, len, 1, &pages[..2], |_| {}), CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    bad(
        h,
        mkey_input(pd, start, len, 1, &pages, |i| {
            m.inner(mkc::log_page_size).set(i, 11);
        }),
        CmdStatus::BAD_PARAM_ERR,
        sy::BAD_FIELD_VALUE,
    );
    bad(
        h,
        mkey_input(pd, start, len, 1, &[pages[0], pages[1] + 0x800, pages[2]], |_| {}),
        CmdStatus::BAD_PARAM_ERR,
        sy::BAD_PAGE_ADDRESS,
    );
    assert_eq!(env.dev.object_counts().mkeys, 0);
}

#[test]
fn srq_lifecycle() {
    let mut env = Env::new();
    let (pd, uar, eqn) = (env.pd, env.uar, env.eq.eqn);
    let h = &mut env.host;
    let buf = h.alloc(4096);
    let dbr = h.alloc(4096);
    // Receive WQE strides are passed as log2 of their size in bytes.
    let create = |h: &mut CmdHost, stride_shift: u32, pd: u32| {
        let s = create_srq_in::srq_context_entry;
        h.exec(CmdOpcode::CREATE_SRQ, 0, create_srq_in::SIZE_BYTES + 8, create_srq_out::SIZE_BYTES, |i| {
            s.inner(srqc::log_srq_size).set(i, 4);
            s.inner(srqc::log_rq_stride).set(i, (stride_shift - wqe::RQ_STRIDE_UNIT_SHIFT) as u64);
            s.inner(srqc::pd).set(i, pd as u64);
            s.inner(srqc::dbr_addr).set(i, dbr.iova());
            s.inner(srqc::lwm).set(i, 0);
            put_pas(i, create_srq_in::SIZE_BYTES, &[buf.iova()]);
        })
    };
    let o = create(h, 5, pd).expect("CREATE_SRQ (16 WQEs of 32 bytes)");
    let srqn = create_srq_out::srqn.get(&o) as u32;
    assert!(srqn >= 1);
    dbr.write_u32_be(dbr::RCV_DBR, 7); // seven WQEs posted
    let query = |h: &mut CmdHost| {
        h.exec(CmdOpcode::QUERY_SRQ, 0, query_srq_in::SIZE_BYTES, query_srq_out::SIZE_BYTES, |i| {
            query_srq_in::srqn.set(i, srqn as u64);
        })
    };
    let s = query_srq_out::srq_context_entry;
    let o = query(h).expect("QUERY_SRQ");
    assert_eq!(s.inner(srqc::log_srq_size).get(&o), 4);
    assert_eq!(s.inner(srqc::log_rq_stride).get(&o), (5 - wqe::RQ_STRIDE_UNIT_SHIFT) as u64);
    assert_eq!(s.inner(srqc::pd).get(&o), pd as u64);
    assert_eq!(s.inner(srqc::dbr_addr).get(&o), dbr.iova());
    assert_eq!(s.inner(srqc::wqe_cnt).get(&o), 7);
    assert_eq!(s.inner(srqc::state).get(&o), 0);
    // ARM_RQ sets the limit watermark.
    let arm = |h: &mut CmdHost, op_mod: u16, lwm: u64| {
        h.exec(CmdOpcode::ARM_RQ, op_mod, arm_rq_in::SIZE_BYTES, 16, |i| {
            arm_rq_in::srq_number.set(i, srqn as u64);
            arm_rq_in::lwm.set(i, lwm);
        })
    };
    arm(h, 1, 5).expect("ARM_RQ");
    assert_eq!(s.inner(srqc::lwm).get(&query(h).unwrap()), 5);
    expect_fail(arm(h, 1, 16), CmdOpcode::ARM_RQ, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);
    expect_fail(arm(h, 0, 1), CmdOpcode::ARM_RQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    // A QP on the SRQ keeps it alive.
    let cq = create_cq(h, uar, eqn, 6).unwrap();
    let mut spec = QpSpec::rc(pd, uar, cq.cqn);
    spec.srqn = Some(srqn);
    let qp = create_qp(h, spec).expect("CREATE_QP on the SRQ");
    let destroy = |h: &mut CmdHost| {
        h.exec(CmdOpcode::DESTROY_SRQ, 0, destroy_srq_in::SIZE_BYTES, 16, |i| {
            destroy_srq_in::srqn.set(i, srqn as u64);
        })
    };
    expect_fail(destroy(h), CmdOpcode::DESTROY_SRQ, CmdStatus::BAD_RES_STATE_ERR, sy::OBJECT_IN_USE);
    let o = query_qp(h, qp.qpn).unwrap();
    assert_eq!(query_qp_out::qpc.inner(qpc::rq_type).get(&o), RqType::SRQ_RQ.0 as u64);
    assert_eq!(query_qp_out::qpc.inner(qpc::srqn_rmpn_xrqn).get(&o), srqn as u64);
    destroy_qp(h, qp.qpn).unwrap();
    destroy(h).expect("DESTROY_SRQ");
    expect_fail(query(h), CmdOpcode::QUERY_SRQ, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    // Validation.
    // 2 KiB receive WQEs exceed max_wqe_sz_rq (512).
    expect_fail(create(h, 11, pd), CmdOpcode::CREATE_SRQ, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);
    expect_fail(create(h, 5, pd + 50), CmdOpcode::CREATE_SRQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
}

#[test]
fn qp_create_rc_and_ud() {
    let mut env = Env::new();
    let (pd, uar, eqn) = (env.pd, env.uar, env.eq.eqn);
    let h = &mut env.host;
    let cq = create_cq(h, uar, eqn, 6).unwrap();
    let rc = create_qp(h, QpSpec::rc(pd, uar, cq.cqn)).expect("CREATE_QP RC");
    let mut ud_spec = QpSpec::rc(pd, uar, cq.cqn);
    ud_spec.st = QpServiceType::UD;
    let ud = create_qp(h, ud_spec).expect("CREATE_QP UD");
    assert!(rc.qpn >= 0x100 && ud.qpn >= 0x100, "QPs 0 and 1 are special");
    assert_ne!(rc.qpn, ud.qpn);
    for (qp, st) in [(&rc, QpServiceType::RC), (&ud, QpServiceType::UD)] {
        let o = query_qp(h, qp.qpn).expect("QUERY_QP with the fixed-size output");
        let q = query_qp_out::qpc;
        assert_eq!(q.inner(qpc::state).get(&o), QpState::RST.0 as u64);
        assert_eq!(q.inner(qpc::st).get(&o), st.0 as u64);
        assert_eq!(q.inner(qpc::pd).get(&o), pd as u64);
        assert_eq!(q.inner(qpc::cqn_snd).get(&o), cq.cqn as u64);
        assert_eq!(q.inner(qpc::log_sq_size).get(&o), 4);
        assert_eq!(q.inner(qpc::dbr_addr).get(&o), qp.dbr.iova());
    }
    // With room for it, QUERY_QP returns the page list.
    let o = h
        .exec(CmdOpcode::QUERY_QP, 0, query_qp_in::SIZE_BYTES, query_qp_out::SIZE_BYTES + 8, |i| {
            query_qp_in::qpn.set(i, rc.qpn as u64);
        })
        .unwrap();
    assert_eq!(u64::from_be_bytes(o[query_qp_out::SIZE_BYTES..].try_into().unwrap()), rc.buf.iova());
    // Limits and fields the device refuses.
    let spec = QpSpec::rc(pd, uar, cq.cqn);
    let r = create_qp_with(h, spec, |i| {
        // 1 KiB receive WQEs > 512.
        create_qp_in::qpc.inner(qpc::log_rq_stride).set(i, (10 - wqe::RQ_STRIDE_UNIT_SHIFT) as u64);
    });
    expect_fail(r, CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::EXCEEDS_LIMIT);
    let r = create_qp_with(h, spec, |i| {
        create_qp_in::qpc.inner(qpc::state).set(i, 1);
    });
    expect_fail(r, CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    let r = create_qp_with(h, spec, |i| {
        create_qp_in::qpc.inner(qpc::dbr_addr).set(i, 0x1004);
    });
    expect_fail(r, CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    let r = create_qp_with(h, spec, |i| {
        create_qp_in::qpc.inner(qpc::rq_type).set(i, RqType::CRQ_RQ.0 as u64);
    });
    expect_fail(r, CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    assert_eq!(env.dev.object_counts().qps, 2);
    destroy_qp(h, rc.qpn).unwrap();
    destroy_qp(h, ud.qpn).unwrap();
    assert_eq!(env.dev.object_counts().qps, 0);
}
