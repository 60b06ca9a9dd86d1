//! The command path through the IOMMU: an unmapped command queue, unmapped mailboxes, and
//! object buffers that are only reached when used.

mod firmware_common;

use firmware_common::*;
use std::time::Duration;
use umlx_hwdesc::enums::{CmdOpcode, DeliveryStatus, HcaCapType, HealthSyndrome, PagesOpMod, SupportedIssi};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{cmd, cmd_layout};

#[test]
fn unmapped_command_queue_completes_nothing() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    host.enable_hca().unwrap();
    let faults = dev.page_accounting().iommu_faults;
    let p = host.prepare(2, &cmd_input(CmdOpcode::QUERY_ISSI, 0, 16), query_issi_out::SIZE_BYTES);
    host.queue().unmap().unwrap();
    host.post(&p);
    let acc = dev.page_accounting();
    assert_eq!(acc.iommu_faults, faults + 1, "the entry read faulted");
    let f = dev.last_iommu_fault().expect("a recorded fault");
    assert_eq!(f.iova, host.queue().iova() + CmdHost::entry_offset(2) as u64);
    assert!(!f.write);
    host.timeout = Duration::from_millis(20);
    assert!(host.poll(&p).unwrap_err().timed_out, "nothing completes");
    assert_eq!(host.status_own(2), cmd::CMD_OWNER_HW, "the entry is still owned by the device");
    // Mapped again, a new doorbell runs the command.
    host.queue().map().unwrap();
    host.ring(1 << 2);
    host.timeout = Duration::from_secs(5);
    let o = host.poll(&p).expect("QUERY_ISSI after remapping the queue");
    assert!(SupportedIssi(query_issi_out::supported_issi_dw0.get(&o) as u32).contains(SupportedIssi::ISSI_1));
    assert_eq!(dev.page_accounting().iommu_faults, faults + 1);
}

#[test]
fn unmapped_mailboxes_are_delivery_errors() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    host.enable_hca().unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    let input = cmd_input(CmdOpcode::QUERY_HCA_CAP, HcaCapType::GENERAL.op_mod(true), 16);
    // Output chain unmapped.
    let faults = dev.page_accounting().iommu_faults;
    let mut p = host.prepare(0, &input, query_hca_cap_out::SIZE_BYTES);
    p.mailbox.as_mut().unwrap().unmap().unwrap();
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::OUT_LENGTH_ERR);
    assert!(dev.page_accounting().iommu_faults > faults);
    let commands = dev.stats().commands;
    // Input chain unmapped.
    let mut set = cmd_input(CmdOpcode::SET_HCA_CAP, 0, set_hca_cap_in::SIZE_BYTES);
    set_cap(&mut set, &host.query_hca_cap(HcaCapType::GENERAL, true).unwrap());
    let mut p = host.prepare(0, &set, 16);
    p.mailbox.as_mut().unwrap().unmap().unwrap();
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::IN_LENGTH_ERR);
    assert_eq!(dev.stats().commands, commands + 1, "only the QUERY_HCA_CAP in between executed");
    // An output chain at an unmapped IOVA: refused before the command runs (no side effect).
    let mut cap = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    cmd_hca_cap::log_max_qp.set(&mut cap, 9);
    set_cap(&mut set, &cap);
    let p = host.prepare(0, &set, 16 + 512);
    let nowhere = host.reserve_iova(4096);
    host.queue().write_u64_be(CmdHost::entry_offset(0) + cmd_layout::out_ptr, nowhere);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::OUT_LENGTH_ERR);
    assert_eq!(dev.last_iommu_fault().unwrap().iova, nowhere);
    assert_eq!(
        cmd_hca_cap::log_max_qp.get(&host.query_hca_cap(HcaCapType::GENERAL, true).unwrap()),
        18,
        "the refused SET_HCA_CAP changed nothing"
    );
}

#[test]
fn object_buffers_are_not_touched_at_create() {
    let mut env = Env::new();
    let (uar, eqn, pd) = (env.uar, env.eq.eqn, env.pd);
    let faults = env.dev.page_accounting().iommu_faults;
    // A CQ whose buffer and doorbell record were never mapped: created fine, no fault yet.
    let buf = env.host.reserve_iova(4 * 4096);
    let dbr = env.host.reserve_iova(4096);
    let pas: Vec<u64> = (0..4).map(|i| buf + i * 4096).collect();
    let o = env.host.run(&cq_input(uar, eqn, 8, &pas, dbr), create_cq_out::SIZE_BYTES).expect("CREATE_CQ");
    let cqn = create_cq_out::cqn.get(&o) as u32;
    assert_eq!(env.dev.page_accounting().iommu_faults, faults, "no DMA at CREATE_CQ");
    // A QP on it, with an unmapped WQ buffer and doorbell record.
    let wq = env.host.reserve_iova(4096);
    let qdbr = env.host.reserve_iova(4096);
    let q = create_qp_in::qpc;
    let o = env
        .host
        .exec(CmdOpcode::CREATE_QP, 0, create_qp_in::SIZE_BYTES + 8, create_qp_out::SIZE_BYTES, |i| {
            q.inner(qpc::pd).set(i, pd as u64);
            q.inner(qpc::uar_page).set(i, uar as u64);
            q.inner(qpc::log_rq_size).set(i, 3);
            q.inner(qpc::log_rq_stride).set(i, LOG_RQ_STRIDE as u64);
            q.inner(qpc::log_sq_size).set(i, 3);
            q.inner(qpc::cqn_snd).set(i, cqn as u64);
            q.inner(qpc::cqn_rcv).set(i, cqn as u64);
            q.inner(qpc::dbr_addr).set(i, qdbr);
            put_pas(i, create_qp_in::SIZE_BYTES, &[wq]);
        })
        .expect("CREATE_QP");
    let qpn = create_qp_out::qpn.get(&o) as u32;
    modify_qp(&mut env.host, CmdOpcode::RST2INIT_QP, qpn, 0, init_attrs).expect("RST2INIT");
    destroy_qp(&mut env.host, qpn).unwrap();
    destroy_cq(&mut env.host, cqn).unwrap();
    assert_eq!(env.dev.page_accounting().iommu_faults, faults, "the command path never reached the buffers");
    // The PAS must still be page aligned.
    let r = env.host.run(&cq_input(uar, eqn, 6, &[buf + 0x100], dbr), create_cq_out::SIZE_BYTES);
    expect_fail(r, CmdOpcode::CREATE_CQ, umlx_hwdesc::enums::CmdStatus::BAD_PARAM_ERR, sy::BAD_PAGE_ADDRESS);
}

#[test]
fn accepted_pages_are_used_and_never_taken_twice() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    host.enable_hca().unwrap();
    let pages = host.alloc(4096);
    host.give_page_list(&[pages.iova()]).unwrap();
    assert_eq!(&pages.to_vec(0, 8), b"umlx-sim", "the firmware wrote to the page it accepted");
    // A second GIVE of the same page is refused as a duplicate before the firmware writes to
    // it. (The page stays mapped: the firmware touches the pages it holds every few
    // milliseconds, and an unmapped one would be a fault whenever that touch came.)
    pages.fill(0, 8, 0);
    let r = host.give_page_list(&[pages.iova()]);
    expect_fail(r, CmdOpcode::MANAGE_PAGES, umlx_hwdesc::enums::CmdStatus::BAD_PARAM_ERR, sy::DUPLICATE_PAGE);
    assert_eq!(pages.to_vec(0, 8), [0; 8], "the refused page was not written again");
    assert_eq!(dev.page_accounting().iommu_faults, 0);
}

#[test]
fn a_held_page_unmapped_behind_the_firmware_is_fatal() {
    let mut env = Env::new();
    let mut page = env.host.alloc(4096);
    env.host.give_page_list(&[page.iova()]).expect("the firmware takes the page");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(health_synd(&env.dev), HealthSyndrome(0), "healthy while the page is mapped");
    page.unmap().unwrap();
    let start = std::time::Instant::now();
    while health_synd(&env.dev) == HealthSyndrome(0) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(2));
    }
    // The firmware keeps reading its pages: the unmapped one faults and the device goes fatal
    // with "ICM fetch PCI error" (0xa).
    assert_eq!(health_synd(&env.dev), HealthSyndrome::FETCH_PCI_ERR);
    assert_eq!(env.dev.last_iommu_fault().expect("a fault").iova, page.iova());
}
