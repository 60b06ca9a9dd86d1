//! Bring-up and teardown of the driver on the software ConnectX.

use std::time::Duration;
use umlx_driver::{Error, Hca, HcaOptions, SimBackend};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, HealthSyndrome};
use umlx_hwdesc::ifc::{query_issi_in, query_issi_out};
use umlx_sim::{FailCommand, SimConfig};

mod common;
use common::open;

#[test]
fn bring_up_and_teardown_account_for_every_page() {
    for interrupts in [false, true] {
        let (b, h) = open(SimConfig::default(), interrupts);
        let h = h.expect("bring-up");
        let steps: Vec<&str> = h.trace().iter().map(|s| s.step).collect();
        assert!(steps.contains(&"ENABLE_HCA") && steps.contains(&"INIT_HCA"), "{steps:?}");
        let acct = b.device().page_accounting();
        assert_eq!(acct.held as usize, h.pages_given());
        // Boot (32) + init (256) pages, plus the regular pages the async EQ's ICM needs (1).
        assert_eq!(acct.held, 32 + 256 + 1, "boot + init + regular pages");
        assert_eq!(acct.held, acct.demand);
        assert!(acct.mappings > 0);
        h.teardown().expect("teardown");
        let acct = b.device().page_accounting();
        assert_eq!(acct.held, 0, "every page back");
        assert_eq!(acct.returned_total, acct.given_total);
        assert_eq!(h.pages_given(), 0);
        drop(h);
        let acct = b.device().page_accounting();
        assert_eq!(acct.mappings, 0, "nothing left mapped: {acct:?}");
        assert_eq!(acct.iommu_faults, 0);
    }
}

#[test]
fn a_command_error_carries_opcode_status_and_syndrome() {
    let mut cfg = SimConfig::default();
    cfg.hostile.fail_command =
        Some(FailCommand { nth: 3, opcode: None, status: CmdStatus::BAD_PARAM_ERR.0, syndrome: 0xdead_beef });
    let (b, h) = open(cfg, false);
    match h {
        Err(Error::Command { opcode, status, syndrome, .. }) => {
            assert_eq!(opcode, CmdOpcode::SET_ISSI);
            assert_eq!(status, CmdStatus::BAD_PARAM_ERR);
            assert_eq!(syndrome, 0xdead_beef);
        }
        other => panic!("expected a command error, got {other:?}"),
    }
    let acct = b.device().page_accounting();
    assert_eq!(acct.mappings, 0, "a failed bring-up leaves nothing mapped: {acct:?}");
}

#[test]
fn a_health_failure_moves_the_device_to_its_error_state() {
    let (b, h) = open(SimConfig::default(), true);
    let h = h.unwrap();
    b.device().inject_fatal(HealthSyndrome::HW_FTL_ERR);
    let e = h.command(CmdOpcode::ALLOC_PD, 0, 16, 16, |_| {}).unwrap_err();
    assert!(matches!(e, Error::DeviceFatal { .. }), "{e}");
    assert!(h.is_fatal());
    drop(h);
    assert_eq!(b.device().page_accounting().mappings, 0);
}

#[test]
fn a_command_that_never_completes_times_out() {
    let mut cfg = SimConfig::default();
    cfg.hostile.command_delay = Some(Duration::from_secs(3600));
    let b = SimBackend::new("t", cfg).unwrap();
    let e = Hca::open(b.clone(), HcaOptions { cmd_timeout: Some(Duration::from_millis(200)), ..Default::default() })
        .unwrap_err();
    assert!(matches!(e, Error::CommandTimeout { opcode: CmdOpcode::ENABLE_HCA, .. }), "{e}");
}

#[test]
fn page_requests_during_operation_are_served_both_ways() {
    let (b, h) = open(SimConfig::default(), true);
    let h = h.unwrap();
    let before = b.device().page_accounting().held;
    b.device().request_extra_pages(100);
    h.process_events().unwrap();
    assert_eq!(b.device().page_accounting().held, before + 100);
    b.device().request_extra_pages(0);
    h.process_events().unwrap();
    assert_eq!(b.device().page_accounting().held, before);
    assert_eq!(h.pages_given() as u64, before);
}

#[test]
fn hundred_open_close_cycles_leak_nothing() {
    let b = SimBackend::new("t", SimConfig::default()).unwrap();
    let fds_before = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    for _ in 0..100 {
        let h = Hca::open(b.clone(), HcaOptions { trace: false, ..Default::default() }).unwrap();
        drop(h);
        let acct = b.device().page_accounting();
        assert_eq!((acct.held, acct.mappings), (0, 0), "{acct:?}");
        b.device().reset();
    }
    let fds_after = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    assert!(fds_after <= fds_before + 2, "fd leak: {fds_before} -> {fds_after}");
}

/// Every command's completion event lands on the async EQ (it subscribes to CMD, as Linux's
/// does), and whoever issues commands consumes those EQEs. 600 commands, more than twice the
/// EQ's 256 entries, leave the device healthy: polled; with interrupts; and with interrupts
/// after another reader of the async eventfd (an application's async-event thread) took the
/// interrupt of a pending event without draining the EQ, so no interrupt comes until it is.
#[test]
fn commands_consume_their_completion_events() {
    for (interrupts, interrupt_taken) in [(false, false), (true, false), (true, true)] {
        let case = format!("interrupts: {interrupts}, interrupt taken by another reader: {interrupt_taken}");
        let (b, h) = open(SimConfig::default(), interrupts);
        let h = h.expect("bring-up");
        let held = b.device().page_accounting().held;
        if interrupt_taken {
            let fd = h.async_event_fd().expect("the async EQ's eventfd");
            b.device().request_extra_pages(8);
            assert!(umlx_driver::event::drain(&*fd) >= 1, "the page request raised the interrupt");
        }
        let before = b.device().stats();
        for i in 0..600 {
            h.command(CmdOpcode::QUERY_ISSI, 0, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES, |_| {})
                .unwrap_or_else(|e| panic!("command {i} ({case}): {e}"));
        }
        let after = b.device().stats();
        assert_eq!(after.eq_overruns, before.eq_overruns, "{case}");
        assert!(after.eqes >= before.eqes + 600, "each command wrote its completion EQE ({case}): {after:?}");
        assert!(!h.is_fatal(), "{case}");
        if interrupt_taken {
            assert_eq!(b.device().page_accounting().held, held + 8, "the page request was served");
        }
        h.teardown().expect("teardown");
    }
}
