//! Health and the hostile device: an injected fatal error (syndrome, frozen counter, commands
//! never complete), a chosen command failed on purpose, delayed completions finished by the
//! engine thread, and a fatal error after N commands.

mod firmware_common;

use firmware_common::*;
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, EventType, HealthSyndrome, PagesOpMod};
use umlx_hwdesc::plain::{cmd, iseg};
use umlx_sim::{FailCommand, Hostile};

fn counter(dev: &SimDevice) -> u32 {
    dev.bar0_read32(iseg::HEALTH_COUNTER as u64) & iseg::HEALTH_COUNTER_MASK
}

fn with_hostile(h: Hostile) -> (SimDevice, CmdHost) {
    let dev = SimDevice::new(SimConfig { hostile: h, ..Default::default() });
    let mut host = CmdHost::new(&dev);
    host.attach();
    (dev, host)
}

#[test]
fn injected_fatal_error() {
    let env = Env::new();
    let (dev, mut host) = (env.dev.clone(), env.host);
    assert_eq!(health_synd(&dev), HealthSyndrome(0));
    dev.inject_fatal(HealthSyndrome::HW_FTL_ERR);
    assert_eq!(health_synd(&dev), HealthSyndrome::HW_FTL_ERR, "health synd byte at BAR0 0x23d");
    assert_eq!(dev.bar0_read32(iseg::HEALTH_RFR as u64) >> iseg::RFR_BIT, 1, "recovery flow required");
    assert_eq!(health_counter_synd(&dev), HealthSyndrome::HW_FTL_ERR, "health_counter bits 31:24");
    assert_ne!(dev.bar0_read32(iseg::HEALTH_FW_VER as u64), 0xffff_ffff, "the function still answers");
    let c0 = counter(&dev);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(counter(&dev), c0, "the health counter is frozen");
    // Commands are never completed: ownership stays with the device.
    let commands = dev.stats().commands;
    host.timeout = Duration::from_millis(30);
    let p = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.post(&p);
    assert!(host.poll(&p).unwrap_err().timed_out);
    assert_eq!(host.status_own(0), cmd::CMD_OWNER_HW, "still owned by the device");
    assert_eq!(dev.stats().commands, commands);
    // A second injection keeps the first counter value.
    dev.inject_fatal(HealthSyndrome::FW_ERR);
    assert_eq!(counter(&dev), c0);
    // A function-level reset brings the device back.
    dev.reset();
    assert_eq!(health_synd(&dev), HealthSyndrome(0));
    let mut host2 = CmdHost::with_iova_base(&dev, 0x2_0000_0000);
    host2.bring_up().expect("bring-up after FLR");
    let c1 = counter(&dev);
    std::thread::sleep(Duration::from_millis(3));
    assert_ne!(counter(&dev), c1, "the health counter runs again");
}

#[test]
fn fail_nth_command() {
    let fail = FailCommand { nth: 3, opcode: None, status: CmdStatus::RES_BUSY.0, syndrome: 0xdead_beef };
    let (dev, mut host) = with_hostile(Hostile { fail_command: Some(fail), ..Default::default() });
    host.enable_hca().expect("1st");
    host.query_issi().expect("2nd");
    let e = host.set_issi(1).expect_err("3rd command fails on purpose");
    assert_eq!((e.status, e.syndrome), (CmdStatus::RES_BUSY, 0xdead_beef));
    assert_eq!(host.query_issi().unwrap().0, 0, "the failed SET_ISSI did nothing");
    host.set_issi(1).expect("the retry passes");
    assert_eq!(dev.stats().command_errors, 1);
}

#[test]
fn fail_nth_command_only_with_matching_opcode() {
    let fail =
        FailCommand { nth: 2, opcode: Some(CmdOpcode::QUERY_PAGES.0), status: CmdStatus::INT_ERR.0, syndrome: 0x1234 };
    let (_dev, mut host) = with_hostile(Hostile { fail_command: Some(fail), ..Default::default() });
    host.enable_hca().unwrap();
    host.query_issi().expect("2nd command is not QUERY_PAGES: not failed");
    host.query_pages(PagesOpMod::BOOT).expect("QUERY_PAGES is the 3rd command: not failed");

    let (_dev, mut host) = with_hostile(Hostile { fail_command: Some(fail), ..Default::default() });
    host.enable_hca().unwrap();
    let e = host.query_pages(PagesOpMod::BOOT).expect_err("2nd command and QUERY_PAGES");
    assert_eq!((e.status, e.syndrome), (CmdStatus::INT_ERR, 0x1234));
}

#[test]
fn fail_nth_command_counts_from_reset() {
    // "The Nth command executed after reset": a function-level reset starts the count again.
    let fail = FailCommand { nth: 3, opcode: None, status: CmdStatus::RES_BUSY.0, syndrome: 7 };
    let (dev, mut host) = with_hostile(Hostile { fail_command: Some(fail), ..Default::default() });
    host.enable_hca().unwrap();
    host.query_issi().unwrap();
    dev.reset();
    host.attach();
    host.enable_hca().expect("1st command after reset");
    host.query_issi().expect("2nd command after reset");
    let e = host.set_issi(1).expect_err("3rd command after reset");
    assert_eq!((e.status, e.syndrome), (CmdStatus::RES_BUSY, 7));
}

#[test]
fn delayed_completion_finished_by_the_engine() {
    let delay = Duration::from_millis(20);
    let (dev, mut host) = with_hostile(Hostile { command_delay: Some(delay), ..Default::default() });
    let t0 = Instant::now();
    let p = host.prepare(0, &cmd_input(CmdOpcode::ENABLE_HCA, 0, 16), 16);
    host.post(&p);
    let early = host.is_done(0);
    if t0.elapsed() < delay {
        assert!(!early, "not completed at the doorbell");
    }
    host.poll(&p).expect("completed later by the engine thread");
    assert!(t0.elapsed() >= delay, "completed after {:?}", t0.elapsed());
    assert_eq!(dev.hca_state(), umlx_sim::firmware::HcaState::Enabled);
    // The whole bring-up works with every command delayed, and the completion EQE and
    // interrupt come from the engine too.
    host.set_issi(1).unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    host.satisfy_pages(PagesOpMod::INIT).unwrap();
    host.init_hca().unwrap();
    let uar = host.alloc_uar().unwrap();
    let efd = EventFd::new().unwrap();
    dev.set_irq_eventfd(0, Some(efd.fd())).unwrap();
    let mut eq = host.create_eq(uar, 4, 1 << EventType::CMD.0, 0).unwrap();
    assert!(eq.wait(Duration::from_secs(2)).is_some(), "CREATE_EQ's completion");
    eq.doorbell(true);
    let t1 = Instant::now();
    let p = host.prepare(1, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.post(&p);
    let early = eq.peek();
    if t1.elapsed() < delay {
        assert!(early.is_none(), "no EQE before the delayed completion");
    }
    assert!(efd.wait(Duration::from_secs(2)).is_some(), "interrupt from the engine thread");
    assert!(host.is_done(1), "the EQE follows the ownership hand-back");
    let e = eq.poll().expect("CMD EQE");
    assert_eq!((eqe_type(&e), cmd_vector(&e)), (EventType::CMD.0, 1 << 1));
}

#[test]
fn fatal_after_n_commands() {
    let (dev, mut host) = with_hostile(Hostile { fatal_after_commands: Some(4), ..Default::default() });
    host.enable_hca().unwrap();
    host.query_issi().unwrap();
    host.set_issi(1).unwrap();
    assert_eq!(health_synd(&dev), HealthSyndrome(0));
    host.query_pages(PagesOpMod::BOOT).expect("the 4th command still completes");
    assert_eq!(health_synd(&dev), HealthSyndrome::FW_ERR, "fatal right after it");
    host.timeout = Duration::from_millis(30);
    assert!(host.give_pages(1).unwrap_err().timed_out, "the 5th never completes");
    let c0 = counter(&dev);
    std::thread::sleep(Duration::from_millis(4));
    assert_eq!(counter(&dev), c0);
}

#[test]
fn page_churn() {
    let h = Hostile { page_churn: 16, page_churn_every: 3, ..Default::default() };
    let dev = SimDevice::new(SimConfig { hostile: h, ..Default::default() });
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let uar = host.alloc_uar().unwrap();
    let mut eq = host.create_eq(uar, 5, 1 << EventType::PAGE_REQUEST.0, 0).unwrap();
    let mut seen = Vec::new();
    for _ in 0..12 {
        host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).unwrap();
        for e in eq.drain() {
            assert_eq!(eqe_type(&e), EventType::PAGE_REQUEST.0);
            let n = page_request(&e).num_pages.get();
            seen.push(n);
            if n > 0 {
                host.give_pages(n as usize).unwrap();
            } else {
                assert_eq!(host.take_pages((-n) as usize).unwrap().len(), (-n) as usize);
            }
        }
        eq.doorbell(false);
    }
    assert!(seen.contains(&16) && seen.contains(&-16), "churn in both directions: {seen:?}");
    assert!(dev.page_accounting().given_total > 288);
}

#[test]
fn a_syndrome_without_rfr_is_not_fatal() {
    let env = Env::new();
    let (dev, mut host) = (env.dev.clone(), env.host);
    dev.inject_health_warning(HealthSyndrome::HIGH_TEMP);
    assert_eq!(health_synd(&dev), HealthSyndrome::HIGH_TEMP, "the syndrome is in the health buffer");
    assert_eq!(dev.bar0_read32(iseg::HEALTH_RFR as u64) >> iseg::RFR_BIT, 0, "no recovery flow required");
    let c0 = counter(&dev);
    std::thread::sleep(Duration::from_millis(5));
    assert_ne!(counter(&dev), c0, "the health counter keeps running");
    host.exec(
        CmdOpcode::QUERY_ISSI,
        0,
        umlx_hwdesc::ifc::query_issi_in::SIZE_BYTES,
        umlx_hwdesc::ifc::query_issi_out::SIZE_BYTES,
        |_| {},
    )
    .expect("commands still execute");
}
