//! The QP state machine: every legal transition, a table of illegal ones, attribute
//! validation, optional parameters, and QUERY_QP reporting the state and attributes.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, QpOptParam, QpServiceType, QpState};
use umlx_hwdesc::ifc::*;

/// An environment with GID 0 set and one CQ.
struct QpEnv {
    env: Env,
    cqn: u32,
    _cq: CqHandle,
    qps: Vec<QpHandle>,
}

impl QpEnv {
    fn new() -> QpEnv {
        let mut env = Env::new();
        let mac = SimConfig::default().mac;
        set_roce_address(&mut env.host, 0, gid_v4([10, 77, 0, 1]), mac, 0, 2).expect("SET_ROCE_ADDRESS");
        let cq = create_cq(&mut env.host, env.uar, env.eq.eqn, 6).unwrap();
        QpEnv { cqn: cq.cqn, _cq: cq, env, qps: Vec::new() }
    }

    fn host(&mut self) -> &mut CmdHost {
        &mut self.env.host
    }

    fn new_qp(&mut self, st: QpServiceType) -> u32 {
        let mut s = QpSpec::rc(self.env.pd, self.env.uar, self.cqn);
        s.st = st;
        let qp = create_qp(&mut self.env.host, s).expect("CREATE_QP");
        let qpn = qp.qpn;
        self.qps.push(qp);
        qpn
    }

    /// A new RC QP driven to `state` through legal transitions.
    fn rc_in(&mut self, state: QpState) -> u32 {
        let qpn = self.new_qp(QpServiceType::RC);
        let h = self.host();
        let path: &[CmdOpcode] = match state {
            QpState::RST => &[],
            QpState::INIT => &[CmdOpcode::RST2INIT_QP],
            QpState::RTR => &[CmdOpcode::RST2INIT_QP, CmdOpcode::INIT2RTR_QP],
            QpState::RTS => &[CmdOpcode::RST2INIT_QP, CmdOpcode::INIT2RTR_QP, CmdOpcode::RTR2RTS_QP],
            QpState::ERR => &[CmdOpcode::RST2INIT_QP, CmdOpcode::QP_2ERR],
            s => panic!("no legal path to {s:?}"),
        };
        for &op in path {
            transition(h, op, qpn).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        }
        assert_eq!(qp_state(h, qpn), state);
        qpn
    }
}

/// Runs `op` on an RC QP with valid attributes for it.
fn transition(h: &mut CmdHost, op: CmdOpcode, qpn: u32) -> Result<(), CmdError> {
    modify_qp(h, op, qpn, 0, |i| match op {
        CmdOpcode::RST2INIT_QP | CmdOpcode::INIT2INIT_QP => init_attrs(i),
        CmdOpcode::INIT2RTR_QP => rtr_attrs(i),
        CmdOpcode::RTR2RTS_QP | CmdOpcode::RTS2RTS_QP | CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP => rts_attrs(i),
        _ => {}
    })
}

#[test]
fn every_legal_transition() {
    let mut t = QpEnv::new();
    let qpn = t.new_qp(QpServiceType::RC);
    let h = t.host();
    let steps = [
        (CmdOpcode::QP_2RST, QpState::RST), // RST -> RST
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::INIT2INIT_QP, QpState::INIT),
        (CmdOpcode::QP_2RST, QpState::RST), // INIT -> RST
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::QP_2ERR, QpState::ERR), // INIT -> ERR
        (CmdOpcode::QP_2RST, QpState::RST), // ERR -> RST
        (CmdOpcode::QP_2ERR, QpState::ERR), // RST -> ERR
        (CmdOpcode::QP_2ERR, QpState::ERR), // ERR -> ERR
        (CmdOpcode::QP_2RST, QpState::RST),
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::INIT2RTR_QP, QpState::RTR),
        (CmdOpcode::QP_2ERR, QpState::ERR), // RTR -> ERR
        (CmdOpcode::QP_2RST, QpState::RST),
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::INIT2RTR_QP, QpState::RTR),
        (CmdOpcode::QP_2RST, QpState::RST), // RTR -> RST
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::INIT2RTR_QP, QpState::RTR),
        (CmdOpcode::RTR2RTS_QP, QpState::RTS),
        (CmdOpcode::RTS2RTS_QP, QpState::RTS),
        (CmdOpcode::QP_2RST, QpState::RST), // RTS -> RST
        (CmdOpcode::RST2INIT_QP, QpState::INIT),
        (CmdOpcode::INIT2RTR_QP, QpState::RTR),
        (CmdOpcode::RTR2RTS_QP, QpState::RTS),
        (CmdOpcode::QP_2ERR, QpState::ERR), // RTS -> ERR
        (CmdOpcode::QP_2RST, QpState::RST),
    ];
    for (k, (op, to)) in steps.into_iter().enumerate() {
        transition(h, op, qpn).unwrap_or_else(|e| panic!("step {k} {op:?}: {e}"));
        assert_eq!(qp_state(h, qpn), to, "step {k} {op:?}");
    }
    // SQER and SQD are only reached through data-path errors and drains, which the command
    // path alone cannot produce; their exits are checked as illegal from the other states.
}

#[test]
fn illegal_transitions_are_bad_qp_state() {
    use CmdOpcode as O;
    let table: &[(QpState, &[CmdOpcode])] = &[
        (
            QpState::RST,
            &[O::INIT2INIT_QP, O::INIT2RTR_QP, O::RTR2RTS_QP, O::RTS2RTS_QP, O::SQERR2RTS_QP, O::SQD_RTS_QP],
        ),
        (QpState::INIT, &[O::RST2INIT_QP, O::RTR2RTS_QP, O::RTS2RTS_QP, O::SQERR2RTS_QP, O::SQD_RTS_QP]),
        (
            QpState::RTR,
            &[O::RST2INIT_QP, O::INIT2INIT_QP, O::INIT2RTR_QP, O::RTS2RTS_QP, O::SQERR2RTS_QP, O::SQD_RTS_QP],
        ),
        (
            QpState::RTS,
            &[O::RST2INIT_QP, O::INIT2INIT_QP, O::INIT2RTR_QP, O::RTR2RTS_QP, O::SQERR2RTS_QP, O::SQD_RTS_QP],
        ),
        (
            QpState::ERR,
            &[
                O::RST2INIT_QP,
                O::INIT2INIT_QP,
                O::INIT2RTR_QP,
                O::RTR2RTS_QP,
                O::RTS2RTS_QP,
                O::SQERR2RTS_QP,
                O::SQD_RTS_QP,
            ],
        ),
    ];
    let mut t = QpEnv::new();
    let mut checked = 0;
    for &(state, ops) in table {
        let qpn = t.rc_in(state);
        let h = t.host();
        for &op in ops {
            let r = transition(h, op, qpn);
            expect_fail(r, op, CmdStatus::BAD_QP_STATE_ERR, sy::BAD_QP_STATE);
            assert_eq!(qp_state(h, qpn), state, "{op:?} from {state:?} changed the state");
            checked += 1;
        }
    }
    assert_eq!(checked, 30);
}

#[test]
fn init2rtr_attribute_validation() {
    let mut t = QpEnv::new();
    let qpn = t.rc_in(QpState::INIT);
    let h = t.host();
    type Spoil<'a> = &'a dyn Fn(&mut [u8]);
    let cases: &[(&str, Spoil)] = &[
        ("mtu 0", &|i| {
            qpc_f(qpc::mtu).set(i, 0);
        }),
        ("mtu 6", &|i| {
            qpc_f(qpc::mtu).set(i, 6);
        }),
        ("GID index with no entry", &|i| {
            ads_f(ads::src_addr_index).set(i, 5);
        }),
        ("zero remote GID", &|i| {
            ads_f(ads::rgid_rip).bytes_mut(i).unwrap().fill(0);
        }),
        ("port 2", &|i| {
            ads_f(ads::vhca_port_num).set(i, 2);
        }),
        ("P_Key index 1", &|i| {
            ads_f(ads::pkey_index).set(i, 1);
        }),
        ("log_rra_max beyond the cap", &|i| {
            qpc_f(qpc::log_rra_max).set(i, 5);
        }),
    ];
    for (what, spoil) in cases {
        let r = modify_qp(h, CmdOpcode::INIT2RTR_QP, qpn, 0, |i| {
            rtr_attrs(i);
            spoil(i);
        });
        let e = r.expect_err(what);
        assert_eq!((e.status, e.reason()), (CmdStatus::BAD_PARAM_ERR, sy::BAD_QP_ATTRIBUTE), "{what}: {e}");
        assert_eq!(qp_state(h, qpn), QpState::INIT, "{what}: state unchanged");
        let o = query_qp(h, qpn).unwrap();
        assert_eq!(query_qp_out::qpc.inner(qpc::mtu).get(&o), 0, "{what}: a refused transition writes nothing");
    }
    // Valid attributes: RTR, and QUERY_QP reports them.
    transition(h, CmdOpcode::INIT2RTR_QP, qpn).unwrap();
    let o = query_qp(h, qpn).unwrap();
    let q = query_qp_out::qpc;
    let a = q.inner(qpc::primary_address_path);
    assert_eq!(q.inner(qpc::state).get(&o), QpState::RTR.0 as u64);
    assert_eq!(q.inner(qpc::mtu).get(&o), 3);
    assert_eq!(q.inner(qpc::remote_qpn).get(&o), 0x123);
    assert_eq!(q.inner(qpc::next_rcv_psn).get(&o), 0x10);
    assert_eq!(q.inner(qpc::rre).get(&o), 1, "kept from RST2INIT");
    assert_eq!(a.inner(ads::rgid_rip).bytes(&o).unwrap(), REMOTE_GID);
    assert_eq!(a.inner(ads::udp_sport).get(&o), 0xdcba);
    assert_eq!(a.inner(ads::rmac_31_0).get(&o), 0x5e10_0063);
    // RTR2RTS: log_sra_max beyond the cap is refused, then valid attributes pass.
    let r = modify_qp(h, CmdOpcode::RTR2RTS_QP, qpn, 0, |i| {
        rts_attrs(i);
        qpc_f(qpc::log_sra_max).set(i, 5);
    });
    expect_fail(r, CmdOpcode::RTR2RTS_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_QP_ATTRIBUTE);
    transition(h, CmdOpcode::RTR2RTS_QP, qpn).unwrap();
    let o = query_qp(h, qpn).unwrap();
    assert_eq!(q.inner(qpc::state).get(&o), QpState::RTS.0 as u64);
    assert_eq!(q.inner(qpc::next_send_psn).get(&o), 0x20);
    assert_eq!((q.inner(qpc::retry_count).get(&o), q.inner(qpc::rnr_retry).get(&o)), (7, 7));
    assert_eq!(a.inner(ads::ack_timeout).get(&o), 14);
}

#[test]
fn optional_parameters_apply_only_when_selected() {
    let mut t = QpEnv::new();
    let qpn = t.rc_in(QpState::INIT);
    let h = t.host();
    let q = query_qp_out::qpc;
    // INIT2INIT: rwe changes only with the RWE bit (1 << 3).
    modify_qp(h, CmdOpcode::INIT2INIT_QP, qpn, 0, |i| {
        qpc_f(qpc::rwe).set(i, 0);
    })
    .unwrap();
    assert_eq!(q.inner(qpc::rwe).get(&query_qp(h, qpn).unwrap()), 1, "not selected: unchanged");
    modify_qp(h, CmdOpcode::INIT2INIT_QP, qpn, QpOptParam::RWE.bits(), |i| {
        qpc_f(qpc::rwe).set(i, 0);
    })
    .unwrap();
    assert_eq!(q.inner(qpc::rwe).get(&query_qp(h, qpn).unwrap()), 0, "selected: applied");
    transition(h, CmdOpcode::INIT2RTR_QP, qpn).unwrap();
    transition(h, CmdOpcode::RTR2RTS_QP, qpn).unwrap();
    // RTS2RTS: min_rnr_nak with RNR_TIMEOUT (1 << 6); rwe not selected.
    modify_qp(h, CmdOpcode::RTS2RTS_QP, qpn, QpOptParam::RNR_TIMEOUT.bits(), |i| {
        qpc_f(qpc::min_rnr_nak).set(i, 3);
        qpc_f(qpc::rwe).set(i, 1);
    })
    .unwrap();
    let o = query_qp(h, qpn).unwrap();
    assert_eq!(q.inner(qpc::min_rnr_nak).get(&o), 3);
    assert_eq!(q.inner(qpc::rwe).get(&o), 0, "not selected");
}

/// The strict firmware: an `opt_param_mask` bit outside the transition's optional parameters
/// (Linux mlx5_ib `opt_mask`, "according to firmware spec") is BAD_PARAM with the
/// BAD_OPT_PARAM reason, and the QP keeps its state and context.
#[test]
fn opt_param_bits_outside_the_transition_table_are_bad_param() {
    let mut t = QpEnv::new();
    let qpn = t.new_qp(QpServiceType::RC);
    let h = t.host();
    // RST2INIT has no optional parameter at all.
    let r = modify_qp(h, CmdOpcode::RST2INIT_QP, qpn, QpOptParam::RRE.bits(), init_attrs);
    expect_fail(r, CmdOpcode::RST2INIT_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_OPT_PARAM);
    assert_eq!(qp_state(h, qpn), QpState::RST);
    transition(h, CmdOpcode::RST2INIT_QP, qpn).unwrap();
    // INIT2RTR (RC): the path, RNR timer and responder depth are mandatory, never optional.
    for bit in [QpOptParam::PRIMARY_ADDR_PATH, QpOptParam::RNR_TIMEOUT, QpOptParam::RRA_MAX, QpOptParam::Q_KEY] {
        let r = modify_qp(h, CmdOpcode::INIT2RTR_QP, qpn, bit.bits(), rtr_attrs);
        expect_fail(r, CmdOpcode::INIT2RTR_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_OPT_PARAM);
        assert_eq!(qp_state(h, qpn), QpState::INIT, "{bit}");
        let o = query_qp(h, qpn).unwrap();
        assert_eq!(query_qp_out::qpc.inner(qpc::mtu).get(&o), 0, "{bit}: a refused transition writes nothing");
    }
    // Its optional parameters pass (access flags, P_Key index).
    let ok = QpOptParam::RRE | QpOptParam::RWE | QpOptParam::RAE | QpOptParam::PKEY_INDEX;
    assert_eq!(ok, ok & QpOptParam::allowed(CmdOpcode::INIT2RTR_QP, QpServiceType::RC));
    modify_qp(h, CmdOpcode::INIT2RTR_QP, qpn, ok.bits(), |i| {
        rtr_attrs(i);
        init_attrs(i);
    })
    .expect("INIT2RTR with its optional parameters");
    // RTR2RTS (RC): retry counts, ACK timeout and initiator depth are mandatory.
    for bit in [QpOptParam::RETRY_COUNT, QpOptParam::RNR_RETRY, QpOptParam::ACK_TIMEOUT, QpOptParam::SRA_MAX] {
        let r = modify_qp(h, CmdOpcode::RTR2RTS_QP, qpn, bit.bits(), rts_attrs);
        expect_fail(r, CmdOpcode::RTR2RTS_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_OPT_PARAM);
        assert_eq!(qp_state(h, qpn), QpState::RTR, "{bit}");
    }
    transition(h, CmdOpcode::RTR2RTS_QP, qpn).unwrap();
    // A UD QP: Q_Key is optional in INIT2RTR, the access bits are not.
    let ud = t.new_qp(QpServiceType::UD);
    let h = t.host();
    modify_qp(h, CmdOpcode::RST2INIT_QP, ud, 0, |i| {
        ads_f(ads::vhca_port_num).set(i, 1);
    })
    .unwrap();
    let r = modify_qp(h, CmdOpcode::INIT2RTR_QP, ud, QpOptParam::RWE.bits(), |_| {});
    expect_fail(r, CmdOpcode::INIT2RTR_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_OPT_PARAM);
    modify_qp(h, CmdOpcode::INIT2RTR_QP, ud, QpOptParam::Q_KEY.bits(), |i| {
        qpc_f(qpc::q_key).set(i, 0x77);
    })
    .unwrap();
    assert_eq!(query_qp_out::qpc.inner(qpc::q_key).get(&query_qp(h, ud).unwrap()), 0x77);
}

#[test]
fn ud_qp_transitions() {
    let mut t = QpEnv::new();
    let qpn = t.new_qp(QpServiceType::UD);
    let h = t.host();
    modify_qp(h, CmdOpcode::RST2INIT_QP, qpn, 0, |i| {
        qpc_f(qpc::q_key).set(i, 0x1111_2222);
        ads_f(ads::vhca_port_num).set(i, 1);
    })
    .unwrap();
    // A UD QP needs no path for RTR (no mtu, no GID).
    modify_qp(h, CmdOpcode::INIT2RTR_QP, qpn, 0, |_| {}).expect("UD INIT2RTR without a path");
    modify_qp(h, CmdOpcode::RTR2RTS_QP, qpn, 0, |i| {
        qpc_f(qpc::next_send_psn).set(i, 0x55);
    })
    .unwrap();
    let o = query_qp(h, qpn).unwrap();
    let q = query_qp_out::qpc;
    assert_eq!(q.inner(qpc::state).get(&o), QpState::RTS.0 as u64);
    assert_eq!(q.inner(qpc::q_key).get(&o), 0x1111_2222);
    assert_eq!(q.inner(qpc::next_send_psn).get(&o), 0x55);
    assert_eq!(q.inner(qpc::st).get(&o), QpServiceType::UD.0 as u64);
    // Q_Key changes in RTS2RTS only when selected (1 << 5).
    modify_qp(h, CmdOpcode::RTS2RTS_QP, qpn, QpOptParam::Q_KEY.bits(), |i| {
        qpc_f(qpc::q_key).set(i, 7);
    })
    .unwrap();
    assert_eq!(q.inner(qpc::q_key).get(&query_qp(h, qpn).unwrap()), 7);
}

#[test]
fn reset_then_destroy() {
    let mut t = QpEnv::new();
    let qpn = t.rc_in(QpState::RTS);
    let h = t.host();
    transition(h, CmdOpcode::QP_2RST, qpn).unwrap();
    let o = query_qp(h, qpn).unwrap();
    let q = query_qp_out::qpc;
    assert_eq!(q.inner(qpc::hw_sq_wqebb_counter).get(&o), 0);
    assert_eq!(q.inner(qpc::hw_rq_counter).get(&o), 0);
    destroy_qp(h, qpn).unwrap();
    expect_fail(query_qp(h, qpn), CmdOpcode::QUERY_QP, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    let r = transition(h, CmdOpcode::RST2INIT_QP, qpn);
    expect_fail(r, CmdOpcode::RST2INIT_QP, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    // Short modify input.
    let r = h.exec(CmdOpcode::RST2INIT_QP, 0, 0x20, 16, |_| {});
    expect_fail(r, CmdOpcode::RST2INIT_QP, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
}

#[test]
fn the_current_log_max_qp_bounds_the_live_qps() {
    // A device whose firmware starts with room for 2^2 QPs, which no SET_HCA_CAP raised.
    let mut env = Env::with_config(SimConfig { log_max_qp: 2, ..SimConfig::default() });
    let cq = create_cq(&mut env.host, env.uar, env.eq.eqn, 6).unwrap();
    let spec = QpSpec::rc(env.pd, env.uar, cq.cqn);
    let mut qps: Vec<QpHandle> =
        (0..4).map(|_| create_qp(&mut env.host, spec).expect("CREATE_QP within 2^2")).collect();
    expect_status(create_qp(&mut env.host, spec), CmdStatus::NO_RES_ERR);
    // A QP destroyed makes room for one more.
    let gone = qps.pop().unwrap();
    destroy_qp(&mut env.host, gone.qpn).unwrap();
    qps.push(create_qp(&mut env.host, spec).expect("CREATE_QP after a DESTROY_QP"));
    expect_status(create_qp(&mut env.host, spec), CmdStatus::NO_RES_ERR);
}
