//! Bring-up and teardown of the driver on the software ConnectX.

use std::time::Duration;
use umlx_driver::{Error, Hca, HcaOptions, SimBackend};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, HealthSyndrome};
use umlx_hwdesc::ifc::{query_issi_in, query_issi_out};
use umlx_sim::{FailCommand, SimConfig};

mod common;
use common::{open, open_with};

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
/// EQ's 256 entries, leave the device healthy: polled; with interrupts; with interrupts after
/// another reader of the interrupt eventfd (an application's async-event thread) took the
/// interrupt of a pending event without draining the EQ, so no interrupt comes until it is;
/// and with the event thread, which takes the interrupts itself, polled or not.
#[test]
fn commands_consume_their_completion_events() {
    let cases =
        [(false, false, false), (true, false, false), (true, true, false), (true, false, true), (false, false, true)];
    for (interrupts, interrupt_taken, event_thread) in cases {
        let case = format!(
            "interrupts: {interrupts}, interrupt taken by another reader: {interrupt_taken}, event thread: {event_thread}"
        );
        let (b, h) = open_with(SimConfig::default(), HcaOptions { interrupts, event_thread, ..Default::default() });
        let h = h.expect("bring-up");
        let held = b.device().page_accounting().held;
        if interrupt_taken {
            let fd = umlx_driver::backend::Backend::irq_eventfd(&*b, umlx_driver::hca::ASYNC_VECTOR)
                .expect("the async EQ's eventfd");
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

/// Waits up to `limit` for `done`, looking every millisecond; says whether it came.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}

/// With the event thread, page requests the firmware raises while the program issues no
/// command are served, 300 of them (more than the async EQ's 256 entries hold): with
/// interrupts and polled. Without the thread nothing serves them until the program's next
/// call, and the EQ overruns (the device's fatal error): that case is checked too, as the
/// baseline.
#[test]
fn the_event_thread_serves_page_requests_while_the_program_is_idle() {
    for (interrupts, event_thread) in [(true, true), (false, true), (true, false)] {
        let case = format!("interrupts: {interrupts}, event thread: {event_thread}");
        let (b, h) = open_with(SimConfig::default(), HcaOptions { interrupts, event_thread, ..Default::default() });
        let h = h.expect("bring-up");
        let held = b.device().page_accounting().held;
        // Each look raises the firmware's extra demand by one page: one page request each.
        for extra in 1..=300 {
            b.device().request_extra_pages(extra);
            std::thread::sleep(Duration::from_micros(200));
        }
        let limit = Duration::from_millis(if event_thread { 10_000 } else { 300 });
        let served = within(limit, || b.device().page_accounting().held == held + 300);
        let overruns = b.device().stats().eq_overruns;
        if event_thread {
            assert!(served, "{case}: {:?}", b.device().page_accounting());
            assert_eq!(overruns, 0, "{case}");
            assert!(!h.is_fatal(), "{case}");
            assert_eq!(h.pages_given(), held as usize + 300, "{case}");
        } else {
            assert!(!served && overruns > 0, "{case}: nothing drains the EQ of an idle program");
        }
        drop(h);
        assert_eq!(b.device().page_accounting().mappings, 0, "{case}");
    }
}

/// With the event thread, a device that dies while the program issues no command is found by
/// the thread's health poll: the program's async eventfd becomes readable, the queued event
/// is the fatal one (`INTERNAL_ERROR`, IBV_EVENT_DEVICE_FATAL to a verbs program) with the
/// health syndrome, it is given once, and commands then fail with the device's error.
#[test]
fn the_event_thread_reports_a_device_that_dies_while_idle() {
    let (b, h) = open(SimConfig::default(), true);
    let h = h.expect("bring-up");
    let fd = h.async_event_fd().expect("the program's async eventfd");
    assert!(!umlx_driver::event::wait_readable(&*fd, Duration::ZERO), "no event yet");
    b.device().inject_fatal(HealthSyndrome::HW_FTL_ERR);
    let limit = umlx_driver::hca::HEALTH_POLL * 3;
    assert!(umlx_driver::event::wait_readable(&*fd, limit), "no event within {limit:?}");
    assert!(h.is_fatal());
    let e = h.next_event().expect("the fatal event");
    assert_eq!(e.event_type, umlx_hwdesc::enums::EventType::INTERNAL_ERROR);
    assert_eq!(e.syndrome, HealthSyndrome::HW_FTL_ERR.0);
    assert_eq!(h.next_event(), None, "given once");
    let err = h.command(CmdOpcode::QUERY_ISSI, 0, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES, |_| {});
    assert!(matches!(err, Err(Error::DeviceFatal { .. })), "{err:?}");
    drop(h);
    assert_eq!(b.device().page_accounting().mappings, 0);
}

/// Dropping the last handle tears the device down before the drop returns, even while the
/// event thread is in the middle of a look at the async EQ: the thread holds the HCA, never
/// the handle whose drop tears it down. The test holds the sim's lock so that the thread,
/// woken by a command's completion interrupt, stops inside its look (at the EQ's doorbell),
/// and drops the handle from another thread meanwhile.
#[test]
fn dropping_the_last_handle_tears_down_at_once_while_the_event_thread_looks() {
    let (b, h) = open(SimConfig::default(), true);
    let h = h.expect("bring-up");
    h.command(CmdOpcode::QUERY_ISSI, 0, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES, |_| {}).unwrap();
    let dev = b.device().clone();
    let held = b.device().lock();
    std::thread::sleep(Duration::from_millis(50));
    let dropper = std::thread::spawn(move || {
        drop(h);
        let acct = dev.page_accounting();
        (acct.held, acct.mappings)
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    assert_eq!(dropper.join().unwrap(), (0, 0), "everything was given back when the drop returned");
}

/// `process_events` returns only when every event the EQ held when it was called has been
/// handled, whichever thread took it: here the event thread takes a page request and serves
/// it with a MANAGE_PAGES the device completes 50 ms after its doorbell, and a program's
/// `process_events` meanwhile waits for the pages to be given instead of finding the EQ empty
/// and returning.
#[test]
fn process_events_waits_for_the_page_request_the_event_thread_took() {
    let mut cfg = SimConfig::default();
    cfg.hostile.command_delay = Some(Duration::from_millis(50));
    let (b, h) = open(cfg, true);
    let h = h.expect("bring-up");
    let held = b.device().page_accounting().held;
    b.device().request_extra_pages(300);
    // The event thread takes the request at its interrupt, and its MANAGE_PAGES is under way.
    std::thread::sleep(Duration::from_millis(10));
    h.process_events().expect("process_events");
    assert_eq!(b.device().page_accounting().held, held + 300, "the pages were given when process_events returned");
}
