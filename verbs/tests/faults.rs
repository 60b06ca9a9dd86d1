//! Device failures while traffic flows: firmware page requests in both directions during
//! RDMA traffic, a fatal health error during traffic, a failed page delivery at bring-up. Each
//! returns the documented error and leaves nothing mapped.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, HealthSyndrome};
use umlx_sim::fabric::Fabric;
use umlx_sim::{FailCommand, SimConfig, SimDevice};
use umlx_verbs::*;

mod two_sims;
use two_sims::End as Pair;

/// Adapters `n` and `n + 1`, their QPs connected with a short ACK timeout (10: 4 ms).
fn pair(n: u8) -> (Fabric, Pair, Pair) {
    let params = ConnectParams {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        rd_atomic: Some(1),
        min_rnr_timer: 1,
        timeout: 10,
        ..Default::default()
    };
    two_sims::pair(n, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE, params)
}

/// Sends `n` 1 KiB WRITEs from `a` to `b` and checks every byte; `during` runs after half.
fn traffic(a: &mut Pair, b: &Pair, n: u64, mut during: impl FnMut(&mut Pair)) {
    let mut wc = [Wc::default(); 16];
    for i in 0..n {
        let data: Vec<u8> = (0..1024u32).map(|k| (k as u64 ^ i) as u8).collect();
        a.mr.write(0, &data).unwrap();
        let s = [a.mr.sge(0, 1024)];
        let remote = Remote { addr: b.mr.addr() + 4096, rkey: b.mr.rkey() };
        a.qp.post_send(&[SendWr::new(i, SendOp::Write { data: Payload::Sges(&s), remote, imm: None }).signaled()])
            .unwrap();
        let start = Instant::now();
        loop {
            let k = a.cq.poll(&mut wc);
            if k > 0 {
                assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, i));
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "WRITE {i} never completed");
        }
        assert_eq!(b.mr.to_vec(4096, 1024).unwrap(), data, "WRITE {i}");
        if i == n / 2 {
            during(a);
        }
    }
}

#[test]
fn page_requests_during_traffic_are_served_both_ways() {
    let (_f, mut a, b) = pair(70);
    let before = a.dev.page_accounting().held;
    traffic(&mut a, &b, 40, |a| {
        // The firmware asks for 300 more pages in the middle of the traffic.
        a.dev.request_extra_pages(300);
        a.ctx.get_async_event().unwrap();
    });
    assert_eq!(a.dev.page_accounting().held, before + 300, "the driver gave them");
    assert_eq!(a.ctx.hca().pages_given() as u64, before + 300);
    traffic(&mut a, &b, 20, |a| {
        // ...and then wants them back.
        a.dev.request_extra_pages(0);
        a.ctx.get_async_event().unwrap();
    });
    assert_eq!(a.dev.page_accounting().held, before);
    assert_eq!(a.ctx.hca().pages_given() as u64, before);
}

#[test]
fn a_health_failure_during_traffic_fails_every_object_and_leaves_nothing_mapped() {
    let (_f, mut a, b) = pair(72);
    traffic(&mut a, &b, 10, |_| {});
    a.dev.inject_fatal(HealthSyndrome::HW_FTL_ERR);
    // The next control operation reports the fatal state, naming the syndrome.
    let e = a.ctx.alloc_pd().unwrap_err();
    assert!(e.to_string().contains("fatal") && e.to_string().contains("HW_FTL_ERR"), "{e}");
    // The async events give the fatal event once (IBV_EVENT_DEVICE_FATAL), then the error.
    let ev = a.ctx.get_async_event().unwrap().expect("the fatal event");
    assert_eq!((ev.event_type, ev.object), (umlx_hwdesc::enums::EventType::INTERNAL_ERROR, 0));
    let e = a.ctx.get_async_event().unwrap_err();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::DeviceFatal, libc::EIO), "{e}");
    assert!(matches!(e.driver_error(), Some(umlx_driver::Error::DeviceFatal { .. })), "{e:?}");
    assert!(a.ctx.hca().is_fatal());
    // The data path refuses work from now on instead of posting into a dead device.
    let sge = [a.mr.sge(0, 8)];
    let e =
        a.qp.post_send(&[SendWr::new(1, SendOp::Send { data: Payload::Sges(&sge), imm: None }).signaled()])
            .unwrap_err();
    assert_eq!((e.kind(), e.errno(), e.work_request()), (ErrorKind::DeviceFatal, libc::EIO, Some(0)));
    let dev = a.dev.clone();
    drop(a);
    assert_eq!(dev.page_accounting().mappings, 0, "every DMA mapping is gone after the fatal device is closed");
}

/// A program that waits on the async event fd while its device dies is woken by the device's
/// event thread (its health poll), with the fatal event, though it issues no call meanwhile.
#[test]
fn a_device_that_dies_while_the_program_waits_wakes_it_with_the_fatal_event() {
    let (_f, mut a, b) = pair(76);
    traffic(&mut a, &b, 4, |_| {});
    let fd = a.ctx.async_fd().expect("the async event fd");
    assert!(!umlx_driver::event::wait_readable(&*fd, Duration::ZERO), "no event before");
    let waiter = std::thread::spawn(move || umlx_driver::event::wait_readable(&*fd, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(50));
    a.dev.inject_fatal(HealthSyndrome::HW_FTL_ERR);
    assert!(waiter.join().unwrap(), "the wait ended with the fd readable");
    let ev = a.ctx.get_async_event().unwrap().expect("the fatal event");
    assert_eq!(ev.event_type, umlx_hwdesc::enums::EventType::INTERNAL_ERROR);
    assert_eq!(a.ctx.get_async_event().unwrap_err().kind(), ErrorKind::DeviceFatal);
    let dev = a.dev.clone();
    drop(a);
    assert_eq!(dev.page_accounting().mappings, 0);
}

#[test]
fn a_failed_page_delivery_at_bring_up_is_reported_and_leaves_nothing_mapped() {
    let mut cfg = SimConfig::numbered(74);
    // ENABLE_HCA, QUERY_ISSI, SET_ISSI, QUERY_PAGES (boot), then the 5th: MANAGE_PAGES give.
    cfg.hostile.fail_command = Some(FailCommand {
        nth: 5,
        opcode: Some(CmdOpcode::MANAGE_PAGES.0),
        status: CmdStatus::NO_RES_ERR.0,
        syndrome: 0x1234,
    });
    let ips = cfg.ips.clone();
    let dev = SimDevice::new(cfg);
    let e = Context::attach_sim(dev.clone(), "p", ips).map(|_| ()).expect_err("the MANAGE_PAGES failure");
    let want =
        ErrorKind::CommandFailed { opcode: CmdOpcode::MANAGE_PAGES, status: CmdStatus::NO_RES_ERR, syndrome: 0x1234 };
    assert_eq!(e.kind(), want, "{e}");
    assert!(matches!(e.driver_error(), Some(umlx_driver::Error::Command { .. })), "{e:?}");
    assert_eq!(dev.page_accounting().mappings, 0);
}

#[test]
fn a_pulled_cable_takes_the_port_down_with_an_event_until_it_is_back() {
    use umlx_hwdesc::enums::{EventType, PortChangeSubtype, PortPhysicalState};
    let (fabric, mut a, b) = pair(78);
    traffic(&mut a, &b, 4, |_| {});
    let fd = a.ctx.async_fd().expect("the async event fd");
    let next_event = |ctx: &Context| {
        assert!(umlx_driver::event::wait_readable(&*fd, Duration::from_secs(10)), "an event within 10 s");
        ctx.get_async_event().unwrap().expect("an event")
    };
    let port = a.ctx.query_port(1).unwrap();
    assert_eq!((port.state, port.phys_state), (PortState::Active, PortPhysicalState::LINK_UP.0));

    a.dev.port().disconnect();
    let ev = next_event(&a.ctx);
    assert_eq!((ev.event_type, ev.sub_type, ev.object), (EventType::PORT_CHANGE, PortChangeSubtype::DOWN.0, 1));
    let port = a.ctx.query_port(1).unwrap();
    assert_eq!((port.state, port.phys_state), (PortState::Down, PortPhysicalState::POLLING.0));

    fabric.attach(&a.dev.port());
    let ev = next_event(&a.ctx);
    assert_eq!((ev.event_type, ev.sub_type, ev.object), (EventType::PORT_CHANGE, PortChangeSubtype::ACTIVE.0, 1));
    let port = a.ctx.query_port(1).unwrap();
    assert_eq!((port.state, port.phys_state), (PortState::Active, PortPhysicalState::LINK_UP.0));
    assert!(a.ctx.get_async_event().unwrap().is_none(), "one event each way");
    // The QPs were left as they were: traffic flows again.
    traffic(&mut a, &b, 4, |_| {});
}
