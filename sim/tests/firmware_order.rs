//! The firmware enforces the bring-up order and validates every command: state, opcode,
//! op_mod, lengths, resource numbers, references, and the pages it is given.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{
    AccessRegId, CmdOpcode, CmdStatus, DeliveryStatus, HcaCapType, ManagePagesOpMod, PagesOpMod, QpServiceType,
};
use umlx_hwdesc::ifc::*;

fn attached() -> (SimDevice, CmdHost) {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    (dev, host)
}

#[test]
fn commands_before_enable_hca() {
    let (_dev, mut host) = attached();
    for (op, in_size, out_size) in [
        (CmdOpcode::QUERY_ISSI, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES),
        (CmdOpcode::QUERY_PAGES, query_pages_in::SIZE_BYTES, query_pages_out::SIZE_BYTES),
        (CmdOpcode::NOP, 16, 16),
        (CmdOpcode::QUERY_HCA_CAP, query_hca_cap_in::SIZE_BYTES, query_hca_cap_out::SIZE_BYTES),
        (CmdOpcode::INIT_HCA, init_hca_in::SIZE_BYTES, 16),
        (CmdOpcode::ALLOC_PD, 16, 16),
        (CmdOpcode(0x7ff), 16, 16),
    ] {
        let r = host.exec(op, 1, in_size, out_size, |_| {});
        expect_fail(r, op, CmdStatus::BAD_SYS_STATE_ERR, sy::HCA_NOT_ENABLED);
    }
    host.enable_hca().expect("ENABLE_HCA is the one command accepted first");
    expect_fail(host.enable_hca(), CmdOpcode::ENABLE_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::ALREADY_DONE);
    // ENABLE_HCA for another function is refused.
    let r = host.exec(CmdOpcode::ENABLE_HCA, 0, enable_hca_in::SIZE_BYTES, 16, |i| {
        enable_hca_in::function_id.set(i, 1);
    });
    expect_fail(r, CmdOpcode::ENABLE_HCA, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
}

#[test]
fn boot_pages_gate_caps_and_access_reg() {
    let (_dev, mut host) = attached();
    host.enable_hca().unwrap();
    host.set_issi(1).unwrap();
    expect_fail(
        host.query_hca_cap(HcaCapType::GENERAL, true),
        CmdOpcode::QUERY_HCA_CAP,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::MISSING_BOOT_PAGES,
    );
    expect_fail(
        host.write_host_endianness(),
        CmdOpcode::ACCESS_REG,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::MISSING_BOOT_PAGES,
    );
    // Part of the boot pages is not enough.
    host.give_pages(10).unwrap();
    assert_eq!(host.query_pages(PagesOpMod::BOOT).unwrap(), 22);
    expect_fail(host.init_hca(), CmdOpcode::INIT_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::MISSING_BOOT_PAGES);
    host.give_pages(22).unwrap();
    host.query_hca_cap(HcaCapType::GENERAL, true).expect("caps with the boot pages");
}

#[test]
fn init_hca_before_init_pages() {
    let (dev, mut host) = attached();
    host.enable_hca().unwrap();
    host.set_issi(1).unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    expect_fail(host.init_hca(), CmdOpcode::INIT_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::MISSING_INIT_PAGES);
    host.give_pages(255).unwrap();
    assert_eq!(host.query_pages(PagesOpMod::INIT).unwrap(), 1);
    expect_fail(host.init_hca(), CmdOpcode::INIT_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::MISSING_INIT_PAGES);
    host.give_pages(1).unwrap();
    host.init_hca().expect("INIT_HCA with every init page");
    expect_fail(host.init_hca(), CmdOpcode::INIT_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::ALREADY_DONE);
    expect_fail(host.disable_hca(), CmdOpcode::DISABLE_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::BAD_STATE);
    assert_eq!(dev.hca_state(), umlx_sim::firmware::HcaState::Initialized);
}

#[test]
fn resources_before_init_hca() {
    let (_dev, mut host) = attached();
    host.enable_hca().unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    host.satisfy_pages(PagesOpMod::INIT).unwrap();
    expect_fail(host.alloc_pd(), CmdOpcode::ALLOC_PD, CmdStatus::BAD_SYS_STATE_ERR, sy::HCA_NOT_INITIALIZED);
    expect_fail(host.alloc_uar(), CmdOpcode::ALLOC_UAR, CmdStatus::BAD_SYS_STATE_ERR, sy::HCA_NOT_INITIALIZED);
    let r = host.exec(CmdOpcode::CREATE_CQ, 0, create_cq_in::SIZE_BYTES + 8, 16, |_| {});
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_SYS_STATE_ERR, sy::HCA_NOT_INITIALIZED);
    let r = host.exec(CmdOpcode::QUERY_NIC_VPORT_CONTEXT, 0, 16, query_nic_vport_context_out::SIZE_BYTES, |_| {});
    expect_fail(r, CmdOpcode::QUERY_NIC_VPORT_CONTEXT, CmdStatus::BAD_SYS_STATE_ERR, sy::HCA_NOT_INITIALIZED);
    expect_fail(
        host.teardown_hca(umlx_hwdesc::enums::TeardownProfile::GRACEFUL_CLOSE),
        CmdOpcode::TEARDOWN_HCA,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::HCA_NOT_INITIALIZED,
    );
    host.init_hca().unwrap();
    host.alloc_pd().expect("ALLOC_PD after INIT_HCA");
}

#[test]
fn unknown_opcode_and_bad_op_mod() {
    let mut env = Env::new();
    let h = &mut env.host;
    // Two opcodes that name nothing, and two the firmware does not support.
    for op in [CmdOpcode(0x7ff), CmdOpcode(0), CmdOpcode::CREATE_UMEM, CmdOpcode::GEN_EQE] {
        let r = h.exec(op, 0, 0x40, 0x40, |_| {});
        expect_fail(r, op, CmdStatus::BAD_OP_ERR, 0);
    }
    // op_mod out of range.
    let r = h.exec(CmdOpcode::QUERY_PAGES, 7, query_pages_in::SIZE_BYTES, 16, |_| {});
    expect_fail(r, CmdOpcode::QUERY_PAGES, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    let r = h.exec(CmdOpcode::MANAGE_PAGES, 3, manage_pages_in::SIZE_BYTES, 16, |_| {});
    expect_fail(r, CmdOpcode::MANAGE_PAGES, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    let r = h.exec(CmdOpcode::ACCESS_REG, 2, access_register_in::SIZE_BYTES + 16, 32, |i| {
        access_register_in::register_id.set(i, AccessRegId::HOST_ENDIANNESS.0 as u64);
    });
    expect_fail(r, CmdOpcode::ACCESS_REG, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    for ty in [HcaCapType::ODP, HcaCapType::ETHERNET_OFFLOADS, HcaCapType::GENERAL_2] {
        expect_fail(h.query_hca_cap(ty, true), CmdOpcode::QUERY_HCA_CAP, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    }
    let cq = create_cq(h, env.uar, env.eq.eqn, 6).unwrap();
    let r = h.exec(CmdOpcode::MODIFY_CQ, 2, modify_cq_in::SIZE_BYTES, 16, |i| {
        modify_cq_in::cqn.set(i, cq.cqn as u64);
    });
    expect_fail(r, CmdOpcode::MODIFY_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_OP_MOD);
    // An unknown register.
    let r = h.access_reg(AccessRegId::PPCNT, false, &[0; 16]);
    expect_fail(r, CmdOpcode::ACCESS_REG, CmdStatus::BAD_PARAM_ERR, sy::BAD_REGISTER);
}

#[test]
fn short_input_and_short_output() {
    let mut env = Env::new();
    let h = &mut env.host;
    // Input shorter than the command's structure.
    let r = h.exec(CmdOpcode::CREATE_EQ, 0, 16, create_eq_out::SIZE_BYTES, |_| {});
    expect_fail(r, CmdOpcode::CREATE_EQ, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
    let r = h.exec(CmdOpcode::SET_HCA_CAP, 0, 0x100, 16, |_| {});
    expect_fail(r, CmdOpcode::SET_HCA_CAP, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
    // A CREATE_CQ whose page list is cut short.
    let buf = h.alloc(4096);
    let mut input = cq_input(env.uar, env.eq.eqn, 6, &[buf.iova()], 0);
    input.truncate(create_cq_in::SIZE_BYTES);
    let r = h.run(&input, create_cq_out::SIZE_BYTES);
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
    // A GIVE with fewer addresses than input_num_entries says.
    let r = h.exec(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::GIVE.0, manage_pages_in::SIZE_BYTES + 8, 16, |i| {
        manage_pages_in::input_num_entries.set(i, 2);
    });
    expect_fail(r, CmdOpcode::MANAGE_PAGES, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
    // Output buffer shorter than the command's output.
    let r = h.exec(CmdOpcode::QUERY_HCA_CAP, HcaCapType::GENERAL.op_mod(true), 16, 16, |_| {});
    expect_fail(r, CmdOpcode::QUERY_HCA_CAP, CmdStatus::BAD_OUTP_LEN_ERR, sy::BAD_OUTPUT_LEN);
    let r = h.exec(CmdOpcode::QUERY_ISSI, 0, 16, query_issi_out::SIZE_BYTES - 4, |_| {});
    expect_fail(r, CmdOpcode::QUERY_ISSI, CmdStatus::BAD_OUTP_LEN_ERR, sy::BAD_OUTPUT_LEN);
    // Lengths below the command header are a delivery error, not a command status.
    let mut input = cmd_input(CmdOpcode::NOP, 0, 16);
    input.truncate(4);
    expect_delivery(h.run(&input, 16), DeliveryStatus::IN_LENGTH_ERR);
    expect_delivery(h.run(&cmd_input(CmdOpcode::NOP, 0, 16), 4), DeliveryStatus::OUT_LENGTH_ERR);
}

#[test]
fn bad_resource_numbers() {
    let mut env = Env::new();
    let h = &mut env.host;
    let one = |h: &mut CmdHost, op: CmdOpcode, f: umlx_hwdesc::Field, v: u64| {
        let r = h.exec(op, 0, 0x10, 0x10, |i| {
            f.set(i, v);
        });
        expect_fail(r, op, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    };
    one(h, CmdOpcode::DEALLOC_PD, dealloc_pd_in::pd, 999);
    one(h, CmdOpcode::DEALLOC_UAR, dealloc_uar_in::uar, 3);
    one(h, CmdOpcode::DEALLOC_TRANSPORT_DOMAIN, dealloc_transport_domain_in::transport_domain, 5);
    one(h, CmdOpcode::DEALLOC_Q_COUNTER, dealloc_q_counter_in::counter_set_id, 7);
    one(h, CmdOpcode::DESTROY_EQ, destroy_eq_in::eq_number, 200);
    one(h, CmdOpcode::DESTROY_CQ, destroy_cq_in::cqn, 77);
    one(h, CmdOpcode::QUERY_CQ, query_cq_in::cqn, 77);
    one(h, CmdOpcode::DESTROY_MKEY, destroy_mkey_in::mkey_index, 12345);
    one(h, CmdOpcode::DESTROY_SRQ, destroy_srq_in::srqn, 9);
    one(h, CmdOpcode::DESTROY_QP, destroy_qp_in::qpn, 0x100);
    one(h, CmdOpcode::QUERY_QP, query_qp_in::qpn, 0x5);
    one(h, CmdOpcode::QUERY_EQ, query_eq_in::eq_number, 9);
    let r = modify_qp(h, CmdOpcode::RST2INIT_QP, 0x100, 0, init_attrs);
    expect_fail(r, CmdOpcode::RST2INIT_QP, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
    // Freed numbers are gone too.
    let pd = h.alloc_pd().unwrap();
    h.dealloc_pd(pd).unwrap();
    expect_fail(h.dealloc_pd(pd), CmdOpcode::DEALLOC_PD, CmdStatus::BAD_RES_ERR, sy::NO_SUCH_OBJECT);
}

#[test]
fn bad_references_at_create() {
    let mut env = Env::new();
    let (uar, pd, eqn) = (env.uar, env.pd, env.eq.eqn);
    let h = &mut env.host;
    let buf = h.alloc(4096);
    let dbr = h.alloc(64);
    // CQ on a missing EQ or UAR.
    let r = h.run(&cq_input(uar, 33, 6, &[buf.iova()], dbr.iova()), 16);
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    let r = h.run(&cq_input(uar + 1, eqn, 6, &[buf.iova()], dbr.iova()), 16);
    expect_fail(r, CmdOpcode::CREATE_CQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    // EQ on a missing UAR.
    let r = h.create_eq(uar + 1, 4, 0, 0);
    expect_fail(r, CmdOpcode::CREATE_EQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    // EQ on an MSI-X vector the device does not have.
    let r = h.create_eq(uar, 4, 0, 64);
    expect_fail(r, CmdOpcode::CREATE_EQ, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
    // QP with a missing PD, CQ or SRQ.
    let cq = create_cq(h, uar, eqn, 6).unwrap();
    let mut s = QpSpec::rc(pd + 10, uar, cq.cqn);
    expect_fail(create_qp(h, s), CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    s.pd = pd;
    s.cqn = cq.cqn + 1;
    expect_fail(create_qp(h, s), CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    s.cqn = cq.cqn;
    s.srqn = Some(4);
    expect_fail(create_qp(h, s), CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_REFERENCE);
    // Unsupported service type.
    s.srqn = None;
    s.st = QpServiceType::UC;
    expect_fail(create_qp(h, s), CmdOpcode::CREATE_QP, CmdStatus::BAD_PARAM_ERR, sy::BAD_FIELD_VALUE);
}

#[test]
fn destroying_objects_in_use() {
    let mut env = Env::new();
    let (uar, pd, eqn) = (env.uar, env.pd, env.eq.eqn);
    let h = &mut env.host;
    let cq = create_cq(h, uar, eqn, 6).unwrap();
    let qp = create_qp(h, QpSpec::rc(pd, uar, cq.cqn)).unwrap();
    let in_use = |r: Result<(), CmdError>, op| expect_fail(r, op, CmdStatus::BAD_RES_STATE_ERR, sy::OBJECT_IN_USE);
    in_use(h.destroy_eq(eqn), CmdOpcode::DESTROY_EQ);
    in_use(h.dealloc_uar(uar), CmdOpcode::DEALLOC_UAR);
    in_use(h.dealloc_pd(pd), CmdOpcode::DEALLOC_PD);
    in_use(destroy_cq(h, cq.cqn), CmdOpcode::DESTROY_CQ);
    // In dependency order everything goes.
    destroy_qp(h, qp.qpn).unwrap();
    in_use(h.destroy_eq(eqn), CmdOpcode::DESTROY_EQ); // the CQ still uses it
    destroy_cq(h, cq.cqn).unwrap();
    h.destroy_eq(eqn).unwrap();
    h.dealloc_uar(uar).unwrap();
    h.dealloc_pd(pd).unwrap();
}

#[test]
fn manage_pages_validation() {
    let (dev, mut host) = attached();
    host.enable_hca().unwrap();
    let mapped = host.alloc(3 * 4096);
    let (a, b, c) = (mapped.iova(), mapped.iova_at(4096), mapped.iova_at(8192));
    let unmapped = host.reserve_iova(4096);
    let page = |r: Result<(), CmdError>, reason| {
        expect_fail(r, CmdOpcode::MANAGE_PAGES, CmdStatus::BAD_PARAM_ERR, reason);
    };
    page(host.give_page_list(&[a, unmapped]), sy::PAGE_NOT_MAPPED);
    page(host.give_page_list(&[0]), sy::BAD_PAGE_ADDRESS);
    page(host.give_page_list(&[a + 0x800]), sy::BAD_PAGE_ADDRESS);
    page(host.give_page_list(&[a, b, a]), sy::DUPLICATE_PAGE);
    assert_eq!(dev.page_accounting().held, 0, "a refused GIVE takes no page at all");
    host.give_page_list(&[a, b]).expect("valid pages");
    page(host.give_page_list(&[c, b]), sy::DUPLICATE_PAGE);
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.given_total), (2, 2));
    assert_eq!(acc.iommu_faults, 0, "validation does not fault");
    // The firmware uses the pages it holds: it wrote its marker into them.
    assert_eq!(&mapped.to_vec(0, 8), b"umlx-sim");
    assert_eq!(mapped.to_vec(8192, 8), [0; 8], "a page not held is untouched");
    // TAKE before INIT: only pages beyond boot + init demand come back (none here).
    assert!(host.take_pages(4).unwrap().is_empty());
    // CANT_GIVE is accepted (a driver's allocation failure notification).
    host.exec(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::CANT_GIVE.0, manage_pages_in::SIZE_BYTES, 16, |_| {})
        .expect("MANAGE_PAGES CANT_GIVE");
}
