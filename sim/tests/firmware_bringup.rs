//! The whole bring-up, step by step as mlx5_vfio does it, and the teardown with exact page
//! accounting; then a second bring-up of the same function after DISABLE_HCA.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{
    AccessRegId, AtomicOps, CmdOpcode, CmdStatus, EventType, HcaCapType, NicInterface, PagesOpMod, RoceL3TypeCaps,
    RoceVersionCaps, SupportedIssi, TeardownProfile,
};
use umlx_hwdesc::ifc::*;
use umlx_sim::firmware::HcaState;

const BOOT: u64 = 32;
const INIT: u64 = 256;

#[test]
fn bring_up_and_teardown_with_page_accounting() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    assert_eq!(dev.hca_state(), HcaState::Disabled);

    // ENABLE_HCA
    host.enable_hca().expect("ENABLE_HCA");
    assert_eq!(dev.hca_state(), HcaState::Enabled);

    // ISSI
    let (cur, supported) = host.query_issi().expect("QUERY_ISSI");
    assert_eq!(cur, 0, "ISSI 0 after enable");
    assert!(SupportedIssi(supported).contains(SupportedIssi::ISSI_1), "ISSI 1 supported");
    host.set_issi(1).expect("SET_ISSI 1");
    assert_eq!(host.query_issi().unwrap().0, 1);
    expect_fail(host.set_issi(2), CmdOpcode::SET_ISSI, CmdStatus::BAD_PARAM_ERR, sy::BAD_ISSI);

    // Boot pages.
    assert_eq!(host.query_pages(PagesOpMod::BOOT).unwrap(), BOOT as i32);
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.given_total), (0, 0));
    let boot = host.give_pages(BOOT as usize).expect("MANAGE_PAGES GIVE boot");
    assert_eq!(boot.len(), BOOT as usize);
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.given_total, acc.returned_total), (BOOT, BOOT, 0));
    assert_eq!(host.query_pages(PagesOpMod::BOOT).unwrap(), 0, "boot demand met");
    // A zero-entry GIVE (what drivers send when nothing is asked) is accepted.
    host.give_pages(0).expect("zero-entry GIVE");
    assert_eq!(dev.page_accounting().held, BOOT);

    // Host endianness: write, then read back.
    host.write_host_endianness().expect("ACCESS_REG write HOST_ENDIANNESS");
    let reg = host
        .access_reg(AccessRegId::HOST_ENDIANNESS, false, &[0u8; host_endianness_reg::SIZE_BYTES])
        .expect("ACCESS_REG read");
    assert_eq!(reg.len(), host_endianness_reg::SIZE_BYTES);
    let mut he = [0u8; host_endianness_reg::SIZE_BYTES];
    host_endianness_reg::he.set(&mut he, cfg!(target_endian = "big") as u64);
    assert_eq!(reg[0], he[0], "`he` and the reserved bits beside it");

    // General capabilities, current and max.
    let gcur = host.query_hca_cap(HcaCapType::GENERAL, true).expect("QUERY_HCA_CAP general cur");
    let gmax = host.query_hca_cap(HcaCapType::GENERAL, false).expect("QUERY_HCA_CAP general max");
    use cmd_hca_cap as c;
    for caps in [&gcur, &gmax] {
        assert_eq!(c::port_type.get(caps), 1, "Ethernet port");
        assert_eq!(c::roce.get(caps), 1);
        assert_eq!(c::umem_uid_0.get(caps), 1, "mlx5_vfio refuses a device without umem_uid_0");
        assert_eq!(c::num_ports.get(caps), 1);
        assert_eq!(c::log_max_qp.get(caps), 18);
        assert_eq!(c::log_max_qp_sz.get(caps), 15);
        assert_eq!(c::log_max_cq.get(caps), 24);
        assert_eq!(c::log_max_cq_sz.get(caps), 22);
        assert_eq!(c::log_max_eq.get(caps), 8);
        assert_eq!(c::log_max_mkey.get(caps), 24);
        assert_eq!(c::log_max_pd.get(caps), 23);
        assert_eq!(c::gid_table_size.get(caps), 256);
        assert_eq!(c::log_bf_reg_size.get(caps), 9);
        assert_eq!((c::rc.get(caps), c::ud.get(caps), c::uc.get(caps), c::xrc.get(caps)), (1, 1, 0, 0));
        assert_eq!(c::fast_teardown.get(caps), 1);
        assert_eq!(c::cqe_version.get(caps), 1);
        assert_eq!(c::max_wqe_sz_sq.get(caps), 1024);
        assert_eq!(c::log_pg_sz.get(caps), 12);
        assert_eq!(c::device_frequency_khz.get(caps), 1_000_000);
    }
    assert_eq!(c::cmdif_checksum.get(&gcur), 0, "checksum off by default");
    assert_eq!(c::cmdif_checksum.get(&gmax), 3);
    assert_eq!(c::mkey_by_name.get(&gmax), 0);

    // RoCE and atomic capabilities.
    let rcur = host.query_hca_cap(HcaCapType::ROCE, true).unwrap();
    let rmax = host.query_hca_cap(HcaCapType::ROCE, false).unwrap();
    assert_eq!(roce_cap::roce_version.get(&rcur), RoceVersionCaps::VERSION_2.bits() as u64, "RoCE v2 only");
    assert_eq!(roce_cap::l3_type.get(&rcur), (RoceL3TypeCaps::IPV4 | RoceL3TypeCaps::IPV6).bits() as u64);
    assert_eq!(roce_cap::r_roce_dest_udp_port.get(&rcur), 4791);
    assert_eq!(roce_cap::roce_address_table_size.get(&rcur), 256);
    assert_eq!(roce_cap::r_roce_min_src_udp_port.get(&rcur), 0xc000);
    assert_eq!(roce_cap::sw_r_roce_src_udp_port.get(&rcur), 0);
    assert_eq!(roce_cap::sw_r_roce_src_udp_port.get(&rmax), 1);
    let acur = host.query_hca_cap(HcaCapType::ATOMIC, true).unwrap();
    assert_eq!(
        AtomicOps(atomic_caps::atomic_operations.get(&acur) as u16),
        AtomicOps::CMP_SWAP | AtomicOps::FETCH_ADD,
        "CS and FA"
    );
    assert_eq!(atomic_caps::atomic_size_qp.get(&acur), 8, "8-byte atomics");

    // SET_HCA_CAP: a settable field is accepted and shows in the current caps ...
    let mut set = gcur.clone();
    c::cmdif_checksum.set(&mut set, 0);
    c::log_max_qp.set(&mut set, 12);
    host.set_hca_cap(HcaCapType::GENERAL, &set).expect("SET_HCA_CAP general");
    let gcur2 = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    assert_eq!(c::log_max_qp.get(&gcur2), 12);
    assert_eq!(c::log_max_qp.get(&host.query_hca_cap(HcaCapType::GENERAL, false).unwrap()), 18, "max unchanged");
    // ... a non-settable one is refused, and so is a value beyond the maximum.
    let mut bad = gcur2.clone();
    c::port_type.set(&mut bad, 0);
    expect_fail(
        host.set_hca_cap(HcaCapType::GENERAL, &bad),
        CmdOpcode::SET_HCA_CAP,
        CmdStatus::BAD_PARAM_ERR,
        sy::CAP_NOT_SETTABLE,
    );
    let mut bad = gcur2.clone();
    c::log_max_qp.set(&mut bad, 19);
    expect_fail(
        host.set_hca_cap(HcaCapType::GENERAL, &bad),
        CmdOpcode::SET_HCA_CAP,
        CmdStatus::BAD_PARAM_ERR,
        sy::CAP_NOT_SETTABLE,
    );
    assert_eq!(host.query_hca_cap(HcaCapType::GENERAL, true).unwrap(), gcur2, "a refused SET changes nothing");
    // RoCE caps: what mlx5_vfio sets when the max allows it.
    let mut r = rcur.clone();
    roce_cap::sw_r_roce_src_udp_port.set(&mut r, 1);
    host.set_hca_cap(HcaCapType::ROCE, &r).expect("SET_HCA_CAP roce");
    assert_eq!(roce_cap::sw_r_roce_src_udp_port.get(&host.query_hca_cap(HcaCapType::ROCE, true).unwrap()), 1);

    // Init pages, INIT_HCA.
    assert_eq!(host.query_pages(PagesOpMod::INIT).unwrap(), INIT as i32);
    host.give_pages(INIT as usize).expect("MANAGE_PAGES GIVE init");
    assert_eq!(host.query_pages(PagesOpMod::INIT).unwrap(), 0);
    host.init_hca().expect("INIT_HCA");
    assert_eq!(dev.hca_state(), HcaState::Initialized);
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.demand, acc.given_total), (BOOT + INIT, BOOT + INIT, BOOT + INIT));
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 0, "no regular demand without objects");
    // Capabilities are fixed after INIT_HCA.
    expect_fail(
        host.set_hca_cap(HcaCapType::GENERAL, &gcur2),
        CmdOpcode::SET_HCA_CAP,
        CmdStatus::BAD_SYS_STATE_ERR,
        sy::ALREADY_DONE,
    );

    // RoCE enable on the NIC vport.
    let q = |host: &mut CmdHost| {
        let o = host
            .exec(
                CmdOpcode::QUERY_NIC_VPORT_CONTEXT,
                0,
                query_nic_vport_context_in::SIZE_BYTES,
                query_nic_vport_context_out::SIZE_BYTES,
                |_| {},
            )
            .expect("QUERY_NIC_VPORT_CONTEXT");
        query_nic_vport_context_out::nic_vport_context.inner(nic_vport_context::roce_en).get(&o)
    };
    assert_eq!(q(&mut host), 0);
    host.exec(
        CmdOpcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        modify_nic_vport_context_in::SIZE_BYTES,
        modify_nic_vport_context_out::SIZE_BYTES,
        |i| {
            modify_nic_vport_context_in::field_select.inner(modify_nic_vport_field_select::roce_en).set(i, 1);
            modify_nic_vport_context_in::nic_vport_context.inner(nic_vport_context::roce_en).set(i, 1);
        },
    )
    .expect("MODIFY_NIC_VPORT_CONTEXT roce_en");
    assert_eq!(q(&mut host), 1);

    // UAR and the async EQ (command completion + page request), owner bytes pre-set.
    let uar = host.alloc_uar().expect("ALLOC_UAR");
    assert!(uar >= 8, "UAR pages must not overlap the initialization segment (got {uar})");
    let mut eq =
        host.create_eq(uar, 8, (1 << EventType::CMD.0) | (1 << EventType::PAGE_REQUEST.0), 0).expect("CREATE_EQ");
    assert_eq!(eq.nent(), 256);
    // The EQ itself is regular demand: a PAGE_REQUEST for one page, then CREATE_EQ's own
    // completion event.
    let e0 = eq.poll().expect("PAGE_REQUEST EQE");
    assert_eq!(eqe_type(&e0), EventType::PAGE_REQUEST.0);
    assert_eq!(page_request(&e0).num_pages.get(), 1);
    assert_eq!(eqe(&e0).owner & umlx_hwdesc::plain::eq::EQE_OWNER_MASK, 0, "owner 0 on the first pass");
    let e1 = eq.poll().expect("CMD EQE of CREATE_EQ");
    assert_eq!(eqe_type(&e1), EventType::CMD.0);
    assert_eq!(cmd_vector(&e1), 1 << host.slot);
    assert!(eq.poll().is_none());
    eq.doorbell(true); // arm
    host.give_pages(1).expect("answering the page request");
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.demand), (BOOT + INIT + 1, BOOT + INIT + 1));
    // (The GIVE completed with a CMD EQE.)
    assert_eq!(eq.drain().len(), 1);
    eq.doorbell(false);

    // Teardown.
    host.destroy_eq(eq.eqn).expect("DESTROY_EQ");
    drop(eq);
    host.dealloc_uar(uar).expect("DEALLOC_UAR");
    assert_eq!(host.teardown_hca(TeardownProfile::GRACEFUL_CLOSE).expect("TEARDOWN_HCA"), 0);
    assert_eq!(dev.hca_state(), HcaState::TornDown);
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.demand), (BOOT + INIT + 1, 0), "after teardown every page is surplus");
    // TAKE in batches until everything is back.
    let mut returned = Vec::new();
    loop {
        let got = host.take_pages(100).expect("MANAGE_PAGES TAKE");
        assert!(got.len() <= 100);
        if got.is_empty() {
            break;
        }
        returned.extend(got);
    }
    assert_eq!(returned.len() as u64, BOOT + INIT + 1);
    returned.sort_unstable();
    returned.dedup();
    assert_eq!(returned.len() as u64, BOOT + INIT + 1, "each page returned once");
    assert!(returned.contains(&boot[0]) && returned.contains(&boot[BOOT as usize - 1]));
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.given_total, acc.returned_total), (0, BOOT + INIT + 1, BOOT + INIT + 1));
    assert_eq!(host.fw_page_count(), 0);
    host.disable_hca().expect("DISABLE_HCA");
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    assert_eq!(dev.page_accounting().iommu_faults, 0);

    // Only the command queue page is still mapped once the page chunks are freed.
    assert_eq!(dev.page_accounting().mappings, 1);
    drop(host);
    assert_eq!(dev.page_accounting().mappings, 0);
}

#[test]
fn fast_teardown() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    assert_eq!(host.teardown_hca(TeardownProfile::PREPARE_FAST_TEARDOWN).unwrap(), 0, "ready for fast teardown");
    set_nic_interface(&dev, NicInterface::DISABLED);
    assert_eq!(nic_interface(&dev), NicInterface::DISABLED);
    assert_eq!(dev.hca_state(), HcaState::TornDown);
}

#[test]
fn teardown_profile_out_of_range() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    expect_fail(
        host.teardown_hca(TeardownProfile(3)),
        CmdOpcode::TEARDOWN_HCA,
        CmdStatus::BAD_PARAM_ERR,
        sy::BAD_FIELD_VALUE,
    );
    assert_eq!(dev.hca_state(), HcaState::Initialized);
}

/// A function can be brought up again after DISABLE_HCA without a reset (what a driver reload
/// does): the second life asks for boot and init pages again, and its page demand is live
/// again after INIT_HCA.
#[test]
fn second_bring_up_after_disable() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let n = host.shut_down().expect("teardown, reclaim, disable");
    assert_eq!(n as u64, BOOT + INIT);
    assert_eq!(dev.page_accounting().held, 0);

    host.enable_hca().expect("ENABLE_HCA again");
    host.set_issi(1).unwrap();
    assert_eq!(host.query_pages(PagesOpMod::BOOT).unwrap(), BOOT as i32);
    host.give_pages(BOOT as usize).unwrap();
    assert_eq!(host.query_pages(PagesOpMod::INIT).unwrap(), INIT as i32);
    host.give_pages(INIT as usize).unwrap();
    host.init_hca().expect("INIT_HCA again");
    let acc = dev.page_accounting();
    assert_eq!((acc.held, acc.demand), (BOOT + INIT, BOOT + INIT), "demand is live again");
    assert!(host.take_pages(16).unwrap().is_empty(), "an initialized HCA has no surplus pages");
    // Objects raise the regular demand again.
    let uar = host.alloc_uar().unwrap();
    let _eq = host.create_eq(uar, 4, 0, 0).unwrap();
    assert_eq!(dev.page_accounting().demand, BOOT + INIT + 1);
    assert_eq!(host.query_pages(PagesOpMod::REGULAR).unwrap(), 1);
}

/// rdma-core's `init_hca_in` (what mlx5_vfio sends) is the 16-byte header alone; Linux's adds
/// `sw_owner_id`. Both are valid INIT_HCA inputs.
#[test]
fn init_hca_with_the_16_byte_input_of_rdma_core() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    host.enable_hca().unwrap();
    host.set_issi(1).unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    host.satisfy_pages(PagesOpMod::INIT).unwrap();
    host.exec(CmdOpcode::INIT_HCA, 0, 16, init_hca_out::SIZE_BYTES, |_| {}).expect("INIT_HCA with a 16-byte input");
    assert_eq!(dev.hca_state(), HcaState::Initialized);
    // Shorter than the header is still refused.
    let r = host.exec(CmdOpcode::INIT_HCA, 0, 12, init_hca_out::SIZE_BYTES, |_| {});
    expect_fail(r, CmdOpcode::INIT_HCA, CmdStatus::BAD_INP_LEN_ERR, sy::BAD_INPUT_LEN);
}
