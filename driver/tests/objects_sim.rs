//! Hardware objects on the software ConnectX: creation, state transitions, RAII destroy.

use std::sync::Arc;
use umlx_driver::objects::{Access, CompEq, Cq, MemoryRegion, Pd, Qp, QpConfig, Srq, Transition, Uar};
use umlx_driver::{Error, Hca, HcaOptions, SimBackend};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, QpServiceType, QpState};
use umlx_hwdesc::ifc::{ads, qpc};
use umlx_sim::SimConfig;

fn open() -> (Arc<SimBackend>, Arc<Hca<SimBackend>>) {
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
