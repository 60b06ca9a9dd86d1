//! Hardware objects on the software ConnectX: creation, state transitions, RAII destroy.

use std::sync::Arc;
use umlx_driver::objects::{Access, CompEq, Cq, MemoryRegion, Pd, Qp, QpConfig, Srq, Transition, Uar};
use umlx_driver::{Error, Hca, HcaOptions, OpenHca, SimBackend};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, QpServiceType, QpState};
use umlx_hwdesc::ifc::{ads, qpc};
use umlx_sim::SimConfig;

fn open() -> (Arc<SimBackend>, Arc<OpenHca<SimBackend>>) {
    let b = SimBackend::new("obj", SimConfig::default()).unwrap();
    let h = Hca::open(b.clone(), HcaOptions { ips: vec!["10.77.0.1".parse().unwrap()], ..Default::default() }).unwrap();
    (b, h)
}

#[test]
fn gid_table_is_programmed_at_bring_up() {
    let (_b, h) = open();
    let port = h.port();
    assert_eq!(port.mac, [0x02, 0x00, 0x5e, 0x10, 0x00, 0x00]);
    assert_eq!(port.mtu, 1500);
    assert_eq!(port.gids.len(), 2);
    assert_eq!(&port.gids[0].gid[..2], &[0xfe, 0x80]);
    assert_eq!(port.gids[1].gid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1]);
}

#[test]
fn objects_are_created_and_destroyed_with_their_owners() {
    let (b, h) = open();
    {
        let pd = Pd::new(&h).unwrap();
        let uar = Arc::new(Uar::new(&h).unwrap());
        let eq = CompEq::new(&h, 1, 6).unwrap();
        let cq = Arc::new(Cq::new(&h, 6, Some(eq.clone())).unwrap());
        let mr = MemoryRegion::new(&pd, 3 * 4096 + 5, false, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        assert_eq!(mr.mkey().lkey() & 0xff, mr.mkey().rkey() & 0xff);
        let huge = MemoryRegion::new(&pd, 4 << 20, true, Access::LOCAL_WRITE).unwrap();
        assert_eq!(huge.memory().len(), 4 << 20);
        let srq = Arc::new(Srq::new(&pd, 6, 6, 0).unwrap());
        srq.arm(4).unwrap();
        let rc = Qp::new(
            &pd,
            &uar,
            &cq,
            &cq,
            None,
            QpConfig { service: QpServiceType::RC, log_sq_size: 6, log_rq_size: 6, rq_stride_shift: 5 },
        )
        .unwrap();
        let ud = Qp::new(
            &pd,
            &uar,
            &cq,
            &cq,
            Some(&srq),
            QpConfig { service: QpServiceType::UD, log_sq_size: 6, log_rq_size: 0, rq_stride_shift: 4 },
        )
        .unwrap();
        let counts = b.device().object_counts();
        assert_eq!((counts.pds, counts.cqs, counts.qps, counts.mkeys, counts.srqs, counts.eqs), (1, 1, 2, 2, 1, 2));

        // Wrong state: RTR2RTS from RESET.
        match rc.modify(Transition::Rtr2Rts, 0, |_| {}) {
            Err(Error::Command { opcode, status, .. }) => {
                assert_eq!(opcode, CmdOpcode::RTR2RTS_QP);
                assert_eq!(status, CmdStatus::BAD_QP_STATE_ERR);
            }
            other => panic!("{other:?}"),
        }
        rc.modify(Transition::Rst2Init, 0, |c| {
            qpc::rwe.set(c, 1);
            qpc::rre.set(c, 1);
            qpc::primary_address_path.inner(ads::vhca_port_num).set(c, 1);
        })
        .unwrap();
        rc.modify(Transition::Init2Rtr, 0, |c| {
            qpc::mtu.set(c, 3);
            qpc::log_msg_max.set(c, 20);
            qpc::remote_qpn.set(c, ud.qpn() as u64);
            qpc::next_rcv_psn.set(c, 0x1234);
            let p = qpc::primary_address_path;
            p.inner(ads::src_addr_index).set(c, 1);
            p.inner(ads::vhca_port_num).set(c, 1);
            p.inner(ads::rgid_rip).bytes_mut(c).unwrap().copy_from_slice(&h.port().gids[1].gid);
        })
        .unwrap();
        rc.modify(Transition::Rtr2Rts, 0, |c| {
            qpc::next_send_psn.set(c, 0x77);
            qpc::retry_count.set(c, 7);
            qpc::rnr_retry.set(c, 7);
        })
        .unwrap();
        let ctx = rc.query().unwrap();
        assert_eq!(qpc::state.get(&ctx), QpState::RTS.0 as u64);
        assert_eq!(qpc::next_rcv_psn.get(&ctx), 0x1234);
        // A GID index that is not programmed is refused.
        let rc2 = Qp::new(
            &pd,
            &uar,
            &cq,
            &cq,
            None,
            QpConfig { service: QpServiceType::RC, log_sq_size: 4, log_rq_size: 4, rq_stride_shift: 4 },
        )
        .unwrap();
        rc2.modify(Transition::Rst2Init, 0, |_| {}).unwrap();
        let e = rc2
            .modify(Transition::Init2Rtr, 0, |c| {
                qpc::mtu.set(c, 3);
                qpc::primary_address_path.inner(ads::src_addr_index).set(c, 9);
            })
            .unwrap_err();
        assert!(matches!(e, Error::Command { status: CmdStatus::BAD_PARAM_ERR, .. }), "{e}");
        rc.modify(Transition::ToErr, 0, |_| {}).unwrap();
        rc.modify(Transition::ToRst, 0, |_| {}).unwrap();
    }
    let counts = b.device().object_counts();
    assert_eq!(
        (counts.pds, counts.cqs, counts.qps, counts.mkeys, counts.srqs, counts.eqs),
        (0, 0, 0, 0, 0, 1),
        "only the async EQ is left"
    );
    drop(h);
    assert_eq!(b.device().page_accounting().mappings, 0);
}

#[test]
fn remote_write_without_local_write_is_refused() {
    let (_b, h) = open();
    let pd = Pd::new(&h).unwrap();
    assert!(matches!(MemoryRegion::new(&pd, 4096, false, Access::REMOTE_WRITE), Err(Error::InvalidArgument(_))));
}

/// The contexts `qpc::build` makes pass the strict sim for RC and UD (with the optional access
/// flags in INIT2RTR), QUERY_QP reads back what they carry (`log_msg_max` from the cap, a UD
/// QP's 4096-byte MTU and 4 KiB messages), and the mask the verbs layer used to send (the path,
/// RNR timer and responder depth flagged in INIT2RTR) is refused with BAD_PARAM.
#[test]
fn driver_qp_contexts_pass_the_strict_firmware() {
    use umlx_driver::qpc::{AddressPath, QpAttrs, RemoteAccess};
    use umlx_hwdesc::enums::{IbMtu, QpOptParam};
    use umlx_hwdesc::ifc::cmd_hca_cap;
    let (_b, h) = open();
    let pd = Pd::new(&h).unwrap();
    let uar = Arc::new(Uar::new(&h).unwrap());
    let cq = Arc::new(Cq::new(&h, 6, None).unwrap());
    let cfg = |service| QpConfig { service, log_sq_size: 6, log_rq_size: 6, rq_stride_shift: 5 };
    let rc = Qp::new(&pd, &uar, &cq, &cq, None, cfg(QpServiceType::RC)).unwrap();
    let access = Some(RemoteAccess { write: true, read: true, atomic: false });
    let init = QpAttrs { port: 1, port_given: true, access, pkey_index: Some(0), ..Default::default() };
    rc.transition(Transition::Rst2Init, &init).unwrap();
    let path = AddressPath {
        dmac: [0x02, 0, 0x5e, 0x10, 0, 0x63],
        dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 99],
        sgid_index: 1,
        hop_limit: 0,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    };
    let rtr = QpAttrs {
        port: 1,
        access,
        path_mtu: Some(IbMtu::MTU_1024),
        path: Some(path),
        dest_qpn: Some(0x77),
        rq_psn: Some(9),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    // The old mask on the same context: refused, the QP stays in INIT.
    let log_max_msg = h.caps().general_cap(cmd_hca_cap::log_max_msg) as u8;
    let m = umlx_driver::qpc::build(Transition::Init2Rtr, QpServiceType::RC, rc.qpn(), &rtr, log_max_msg);
    let old = QpOptParam::PRIMARY_ADDR_PATH | QpOptParam::RNR_TIMEOUT | QpOptParam::RRA_MAX;
    match rc.modify(Transition::Init2Rtr, old.bits(), |c| c.copy_from_slice(&m.qpc)) {
        Err(Error::Command { status, syndrome, .. }) => {
            assert_eq!(status, CmdStatus::BAD_PARAM_ERR);
            assert_eq!(
                syndrome,
                umlx_sim::firmware::syndrome::make(
                    CmdOpcode::INIT2RTR_QP.0,
                    umlx_sim::firmware::syndrome::BAD_OPT_PARAM
                )
            );
        }
        r => panic!("INIT2RTR with mandatory parameters flagged: {r:?}"),
    }
    assert_eq!(rc.query_attrs().unwrap().state, QpState::INIT);
    rc.transition(Transition::Init2Rtr, &rtr).unwrap();
    let rts = QpAttrs {
        port: 1,
        sq_psn: Some(3),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(1),
        ..Default::default()
    };
    rc.transition(Transition::Rtr2Rts, &rts).unwrap();
    let q = rc.query_attrs().unwrap();
    let c = rc.query().unwrap();
    assert_eq!(q.state, QpState::RTS);
    assert_eq!((q.mtu, qpc::log_msg_max.get(&c) as u8), (IbMtu::MTU_1024, log_max_msg));
    assert_eq!((q.dest_qpn, q.rq_psn, q.sq_psn, q.max_dest_rd_atomic), (0x77, 9, 3, 4));
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (14, 7, 7));
    assert_eq!(q.access, RemoteAccess { write: true, read: true, atomic: false });
    assert_eq!((q.path.dmac, q.path.dgid, q.path.hop_limit), (path.dmac, path.dgid, 64));
    assert_eq!(
        qpc::primary_address_path.inner(ads::udp_sport).get(&c) as u16,
        umlx_driver::qpc::roce_udp_sport(0, rc.qpn(), 0x77)
    );
    // UD: Q_Key optional in INIT2RTR and RTR2RTS; mtu 4096 and log_msg_max 12 as Linux sets.
    let ud = Qp::new(&pd, &uar, &cq, &cq, None, cfg(QpServiceType::UD)).unwrap();
    let k = |q| QpAttrs { port: 1, qkey: Some(q), pkey_index: Some(0), ..Default::default() };
    ud.transition(Transition::Rst2Init, &k(0x11)).unwrap();
    ud.transition(Transition::Init2Rtr, &k(0x22)).unwrap();
    ud.transition(Transition::Rtr2Rts, &QpAttrs { sq_psn: Some(5), ..k(0x33) }).unwrap();
    let c = ud.query().unwrap();
    let q = ud.query_attrs().unwrap();
    assert_eq!((q.state, q.qkey, q.sq_psn), (QpState::RTS, 0x33, 5));
    assert_eq!((q.mtu, qpc::log_msg_max.get(&c)), (IbMtu::MTU_4096, 12));
}

#[test]
fn completion_eqs_get_the_spare_entries() {
    // EQ-6: 2^2 entries asked, 4 + MLX5_NUM_SPARE_EQE (0x80) rounded up = 256 created.
    let (_b, h) = open();
    let eq = CompEq::new(&h, 1, 2).unwrap();
    assert_eq!(eq.entries(), 256);
    let out = h
        .command(
            CmdOpcode::QUERY_EQ,
            0,
            umlx_hwdesc::ifc::query_eq_in::SIZE_BYTES,
            umlx_hwdesc::ifc::query_eq_out::SIZE_BYTES,
            |b| {
                umlx_hwdesc::ifc::query_eq_in::eq_number.set(b, eq.eqn() as u64);
            },
        )
        .unwrap();
    let ctx = umlx_hwdesc::ifc::query_eq_out::eq_context_entry;
    assert_eq!(ctx.inner(umlx_hwdesc::ifc::eqc::log_eq_size).get(&out), 8, "the device sees 256 entries");
}

#[test]
fn the_blueflame_half_size_comes_from_log_bf_reg_size() {
    // UAR-3: the sim reports log_bf_reg_size 9, so each half is 0x100 bytes.
    let (_b, h) = open();
    let caps = h.caps();
    assert_eq!(caps.general_cap(umlx_hwdesc::ifc::cmd_hca_cap::log_bf_reg_size), 9);
    assert_eq!(caps.bf_buf_size(), 0x100);
}

#[test]
fn an_interrupt_eventfd_stays_open_while_held_after_its_backend_is_gone() {
    use std::io::Write;
    let (b, h) = open();
    let fd = umlx_driver::backend::Backend::irq_eventfd(&*b, 0).expect("the async vector has an eventfd");
    let again = umlx_driver::backend::Backend::irq_eventfd(&*b, 0).expect("vector 0");
    assert!(Arc::ptr_eq(&fd, &again), "one eventfd per vector, shared with the caller");
    h.teardown().unwrap();
    drop((h, b, again));
    // The backend closed nothing under us: the descriptor is still the eventfd, and works.
    umlx_driver::event::drain(&fd);
    std::fs::File::from(fd.try_clone().unwrap()).write_all(&3u64.to_ne_bytes()).unwrap();
    assert!(umlx_driver::event::wait_readable(&fd, std::time::Duration::ZERO));
    assert_eq!(umlx_driver::event::drain(&fd), 3);
    assert!(!umlx_driver::event::wait_readable(&fd, std::time::Duration::ZERO));
}
