//! The driver's conformance fixes (docs/driver-conformance.md) on the software ConnectX: the
//! second `initializing` wait, device-reported timeouts, health RFR and `nic_interface`,
//! CANT_GIVE, reclaim after empty TAKE replies, atomic endianness. A separate test binary from
//! `hca_sim.rs`, whose fd-leak test counts the whole process's descriptors.

use std::time::Duration;
use umlx_driver::{Error, Hca, HcaOptions, SimBackend};
use umlx_hwdesc::enums::{CmdOpcode, HealthSyndrome, NicInterface};
use umlx_sim::SimConfig;

mod common;
use common::open;

#[test]
fn bring_up_waits_for_initializing_after_the_command_queue_is_programmed() {
    // INIT-2: the sim sets `initializing` again for 100 ms once the queue address is written and
    // drops doorbells meanwhile; a driver that posts ENABLE_HCA at once would time out (50 ms).
    let cfg = SimConfig { cmdq_init_delay: Duration::from_millis(100), ..Default::default() };
    let b = SimBackend::new("t", cfg).unwrap();
    let h = Hca::open(b.clone(), HcaOptions { cmd_timeout: Some(Duration::from_millis(50)), ..Default::default() })
        .expect("bring-up after the post-queue wait");
    assert_eq!(b.device().stats().delivery_errors, 0);
    h.teardown().unwrap();
}

#[test]
fn initializing_longer_than_cmd_q_init_to_fails_naming_the_wait() {
    // cmd_q_init_to 30: 30 ms (unit 0: milliseconds).
    let cfg = SimConfig { cmdq_init_delay: Duration::from_secs(3600), cmd_q_init_to: 30, ..Default::default() };
    let b = SimBackend::new("t", cfg).unwrap();
    let e = Hca::open(b.clone(), HcaOptions::default()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("after the command queue was programmed") && msg.contains("30ms"), "{msg}");
}

#[test]
fn the_command_timeout_comes_from_cmd_exec_to_when_the_device_reports_it() {
    // CMD-10: the default sim reports 60 s (unit seconds); the driver uses it.
    let (_b, h) = open(SimConfig::default(), false);
    assert_eq!(h.unwrap().cmd_timeout(), Duration::from_secs(60));
    // A device reporting 120 ms: ENABLE_HCA that never completes times out after it.
    let mut cfg = SimConfig { cmd_exec_to: 120, ..Default::default() };
    cfg.hostile.command_delay = Some(Duration::from_secs(3600));
    let b = SimBackend::new("t", cfg).unwrap();
    match Hca::open(b.clone(), HcaOptions::default()).unwrap_err() {
        Error::CommandTimeout { opcode, waited, .. } => {
            assert_eq!(opcode, CmdOpcode::ENABLE_HCA);
            assert!(waited >= Duration::from_millis(120) && waited < Duration::from_secs(30), "{waited:?}");
        }
        e => panic!("expected a command timeout, got {e}"),
    }
    // A device that reports nothing (cmd_q_init_to = 0): Linux's 60 s default.
    let cfg = SimConfig { cmd_q_init_to: 0, cmd_exec_to: 5, ..Default::default() };
    let (_b, h) = open(cfg, false);
    assert_eq!(h.unwrap().cmd_timeout(), umlx_driver::hca::CMD_TIMEOUT);
}

#[test]
fn init_segment_timeouts_decode_as_linux_tout_does() {
    use umlx_driver::hca::iseg_timeout;
    assert_eq!(iseg_timeout(250), Duration::from_millis(250));
    assert_eq!(iseg_timeout((1 << 29) | 60), Duration::from_secs(60));
    assert_eq!(iseg_timeout((2 << 29) | 3), Duration::from_secs(180));
    assert_eq!(iseg_timeout((3 << 29) | 2), Duration::from_secs(7200));
    // Only two unit bits count (bit 31 set alone is milliseconds); bits 28:20 are not value.
    assert_eq!(iseg_timeout((4 << 29) | 7), Duration::from_millis(7));
    assert_eq!(iseg_timeout(0x1ff0_0005), Duration::from_millis(5));
}

#[test]
fn a_health_syndrome_without_rfr_is_reported_not_fatal() {
    let (b, h) = open(SimConfig::default(), true);
    let h = h.unwrap();
    b.device().inject_health_warning(HealthSyndrome::HIGH_TEMP);
    h.check_health().expect("a syndrome without RFR is not fatal");
    let r = h.health_report().expect("reported");
    assert!(r.contains("HIGH_TEMP") && r.contains("not fatal"), "{r}");
    h.command(CmdOpcode::QUERY_ISSI, 0, 0x80, 0x70, |_| {}).expect("commands still run");
    assert!(!h.is_fatal());
    b.device().inject_fatal(HealthSyndrome::HW_FTL_ERR);
    match h.check_health().unwrap_err() {
        Error::DeviceFatal { reason, .. } => assert!(reason.contains("RFR"), "{reason}"),
        e => panic!("{e}"),
    }
}

#[test]
fn nic_interface_disabled_is_fatal() {
    let (b, h) = open(SimConfig::default(), false);
    let h = h.unwrap();
    b.device().set_nic_interface(NicInterface::DISABLED);
    match h.check_health().unwrap_err() {
        Error::DeviceFatal { reason, .. } => assert!(reason.contains("DISABLED"), "{reason}"),
        e => panic!("{e}"),
    }
    assert!(h.is_fatal());
}

#[test]
fn teardown_reclaim_goes_on_after_empty_take_replies() {
    // PG-6: the firmware answers the first TAKEs after TEARDOWN_HCA with no pages.
    let mut cfg = SimConfig::default();
    cfg.hostile.reclaim_empty_replies = 5;
    let (b, h) = open(cfg, false);
    let h = h.unwrap();
    h.teardown().expect("teardown");
    assert_eq!(h.pages_given(), 0);
    let acct = b.device().page_accounting();
    assert_eq!(acct.held, 0, "every page back: {acct:?}");
    assert_eq!(acct.returned_total, acct.given_total);
    assert!(h.trace().iter().any(|s| s.step.starts_with("reclaim") && s.detail.contains("5 empty replies")));
}

#[test]
fn atomic_results_are_host_order_when_the_device_supports_it() {
    // CAP-8: mode 1 asked for only when the device advertises it.
    let (_b, h) = open(SimConfig::default(), false);
    assert!(!h.unwrap().caps().atomic_host_endian());
    let cfg = SimConfig { atomic_endianness_mode_1: true, ..Default::default() };
    let (_b, h) = open(cfg, false);
    assert!(h.unwrap().caps().atomic_host_endian());
}

#[test]
fn a_page_request_that_cannot_be_met_is_answered_with_cant_give() {
    // PG-3: the host runs out of DMA mappings; the driver tells the firmware (CANT_GIVE).
    let (b, h) = open(SimConfig::default(), false);
    let h = h.unwrap();
    let held = b.device().page_accounting().held;
    let mappings = b.device().page_accounting().mappings;
    b.device().set_dma_entry_limit(Some(mappings));
    // More than the free pages of the driver's current 2 MiB page blocks: a new block is needed.
    b.device().request_extra_pages(1024);
    let e = h.process_events().unwrap_err();
    assert!(e.to_string().contains("CANT_GIVE") && e.to_string().contains("1024"), "{e}");
    assert_eq!(b.device().stats().pages_cant_give, 1);
    assert_eq!(b.device().page_accounting().held, held, "nothing given");
    assert_eq!(h.pages_given() as u64, held, "the pages taken before the failure are free again");
    assert!(!h.is_fatal());
    // Once memory is available again the next request is served.
    b.device().set_dma_entry_limit(None);
    b.device().request_extra_pages(1025);
    h.process_events().unwrap();
    assert_eq!(b.device().page_accounting().held, held + 1025);
    assert_eq!(h.pages_given() as u64, held + 1025);
}
