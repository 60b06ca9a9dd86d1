//! Tests of the device's engine thread and timers, of a device refused its engine, and of an
//! application's looks at its wire.

use super::engine::*;
use super::*;
use crate::firmware::PAGE_TOUCH_PERIOD;
use std::time::{Duration, Instant};

/// A device the operating system refuses its engine thread is an error, not a panic: shown
/// in a child process (this test's binary again) whose address space is limited to what it
/// has mapped plus 1 MiB, too little for a thread's 2 MiB stack.
#[test]
fn a_device_refused_its_engine_thread_is_an_error() {
    const CHILD: &str = "UMLX_SIM_TEST_NO_THREAD_ROOM";
    const NAME: &str = "device::tests::a_device_refused_its_engine_thread_is_an_error";
    if std::env::var_os(CHILD).is_some() {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmSize");
        let limit = libc::rlimit { rlim_cur: (kib << 10) + (1 << 20), rlim_max: libc::RLIM_INFINITY };
        // SAFETY: `limit` is a valid rlimit that outlives the call.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
        match SimDevice::try_new(SimConfig::default()) {
            Ok(_) => println!("child: started"),
            Err(e) => println!("child: refused: {e}"),
        }
        return;
    }
    let me = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(me)
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("running the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("child: refused: starting the sim's engine thread: "), "{stdout}");
    // Unlimited, the same device starts.
    assert!(SimDevice::try_new(SimConfig::default()).is_ok());
}

/// The timers run next when something is due: with nothing timed, when the firmware next
/// touches a page it holds, and no later than that period after the last run. (They ran
/// every millisecond whatever was due, which took a device that threads ran side by side
/// whole a thousand times a second.)
#[test]
fn the_timers_run_next_when_something_is_due_and_at_least_every_page_touch_period() {
    let dev = SimDevice::new(SimConfig::default());
    let mut h = dev.lock();
    let now = Instant::now();
    run_timers(&mut h, now);
    assert_eq!(h.timers_due, now + PAGE_TOUCH_PERIOD, "nothing timed, no page held");
    h.pages.held.insert(1 << 20);
    h.pci_config[4] |= 0x04; // PCI command register: bus master
    h.last_page_touch = now;
    let later = now + Duration::from_millis(2);
    run_timers(&mut h, later);
    assert!(h.next_due(later).is_some(), "a page touch is timed");
    assert_eq!(h.timers_due, now + PAGE_TOUCH_PERIOD, "the next page touch");
}

/// `t` as the engine clock takes it.
fn ns(t: Instant) -> u64 {
    crate::port::nanos_since_epoch(t)
}

/// The window the clock closes: a thread letting go reads the engine's old plan (a look
/// sooner than its timer: no wake) just before the engine plans a later look and finds the
/// device still held. The engine must then sleep no later than the timer, where it used to
/// sleep its whole idle period.
#[test]
fn an_engine_that_finds_the_device_held_wakes_for_the_timer_it_was_not_told_of() {
    let c = EngineClock::new();
    let now = Instant::now();
    c.engine_plans(now + Duration::from_micros(200)); // the engine's old plan
    let due = now + Duration::from_micros(400);
    assert!(!c.leaving(ns(now), ns(due)), "the old plan looks before the timer: no wake");
    // The engine plans its idle look and finds the device held (the holder has not let go).
    let planned = now + ENGINE_IDLE_PARK;
    c.engine_plans(planned);
    assert_eq!(c.engine_wake_when_held(now, planned), due);
    // That look is now its plan: a holder letting go with the same timers need not wake it,
    // one with a timer due sooner must.
    assert!(!c.leaving(ns(now), ns(due)), "the engine already looks when the timers are due");
    assert!(c.leaving(ns(now), ns(due - Duration::from_micros(50))));
}

/// The other order: the engine planned first, so the thread letting go sees the plan and
/// wakes it for a timer due sooner, and only then.
#[test]
fn a_thread_letting_go_wakes_the_engine_only_for_a_timer_due_before_its_plan() {
    let c = EngineClock::new();
    let now = Instant::now();
    c.engine_plans(now + ENGINE_IDLE_PARK);
    assert!(c.leaving(ns(now), ns(now + Duration::from_micros(300))));
    assert!(!c.leaving(ns(now), ns(now + 2 * ENGINE_IDLE_PARK)));
    // While the engine runs the device, nothing wakes it: it looks at the timers after.
    c.engine_runs();
    assert!(!c.leaving(ns(now), ns(now + Duration::from_micros(300))));
}

/// An engine that wakes to nothing while a thread that ran the device left the timers due
/// later leaves the device alone until then; it takes it when something waits, when the
/// timers are due, or when no thread has left them yet.
#[test]
fn an_engine_with_nothing_to_do_leaves_a_device_its_application_runs_alone() {
    let c = EngineClock::new();
    let now = Instant::now();
    let planned = now + ENGINE_IDLE_PARK;
    c.engine_plans(planned);
    assert_eq!(c.engine_idle_until(now, planned, true, false), None, "no thread has run the timers yet");
    let due = now + Duration::from_micros(300);
    assert!(c.leaving(ns(now), ns(due)), "due before the engine's plan: it is woken");
    // Once the grace of that thread's run has ended:
    let t = now + ENGINE_GRACE;
    assert_eq!(c.engine_idle_until(t, planned, true, false), Some(due));
    assert_eq!(c.engine_idle_until(t, planned, false, false), None, "a frame or a posted write waits");
    assert_eq!(c.engine_idle_until(due, planned, true, false), None, "the timers are due");
    // Its look at `due` is its plan: a thread leaving with the timers due then does not
    // wake it, one leaving them due sooner does.
    c.engine_plans(planned);
    assert_eq!(c.engine_idle_until(t, planned, true, false), Some(due));
    assert!(!c.leaving(ns(now), ns(due)));
    assert!(c.leaving(ns(now), ns(due - Duration::from_micros(100))));
    // Timers left later than the engine's idle period: it looks at its plan.
    c.leaving(ns(now), ns(now + 3 * ENGINE_IDLE_PARK));
    assert_eq!(c.engine_idle_until(t, planned, true, false), Some(planned));
}

/// An engine clock whose engine plans to look `park` from now: the clock, now, that plan, the
/// end of the grace of a thread that lets go now, and a moment within that grace.
fn a_clock_in_a_grace(park: Duration) -> (EngineClock, Instant, Instant, Instant, Instant) {
    let c = EngineClock::new();
    let now = Instant::now();
    c.engine_plans(now + park);
    (c, now, now + park, now + ENGINE_GRACE, now + Duration::from_micros(10))
}

/// Within the grace of a thread's run, the engine leaves the device to that thread even
/// when a frame waits or the timers are due (the thread takes them), and looks again when
/// the grace ends if something waits, else when the timers are due or the grace ends,
/// whichever is later; never later than its plan.
#[test]
fn an_engine_leaves_a_device_a_thread_just_let_go_of_to_that_thread() {
    let (c, now, planned, grace_ends, soon) = a_clock_in_a_grace(ENGINE_IDLE_PARK);
    let due = now + Duration::from_micros(300);
    c.leaving(ns(now), ns(due));
    assert_eq!(c.engine_idle_until(soon, planned, true, false), Some(due), "nothing waits: until the timers");
    assert_eq!(c.engine_idle_until(soon, planned, false, false), Some(grace_ends), "a frame on its way to that thread");
    // Timers due within the grace, and already due when the engine looks.
    c.leaving(ns(now), ns(now + Duration::from_micros(5)));
    assert_eq!(c.engine_idle_until(soon, planned, true, false), Some(grace_ends));
    assert_eq!(c.engine_idle_until(soon, planned, false, false), Some(grace_ends));
    assert_eq!(
        c.engine_idle_until(soon, soon + Duration::from_micros(20), false, false),
        Some(soon + Duration::from_micros(20))
    );
    // The grace over, the engine takes the device for what waits, or for the timers.
    assert_eq!(c.engine_idle_until(grace_ends, planned, false, false), None);
    assert_eq!(c.engine_idle_until(grace_ends, planned, true, false), None);
}

/// While an application polls the wire, the engine leaves a device a thread just let go of
/// until the timers are due after the grace, else until its plan: not at the grace's end,
/// whatever waits (the application's next run takes it). The grace over, it behaves as when
/// nobody polls.
#[test]
fn an_engine_leaves_a_device_its_polling_application_just_ran_until_its_plan() {
    let (c, now, planned, grace_ends, soon) = a_clock_in_a_grace(ENGINE_POLLED_PARK);
    // Timers due after the grace: the engine looks when they are due, whatever waits.
    let due = now + Duration::from_micros(300);
    c.leaving(ns(now), ns(due));
    assert_eq!(c.engine_idle_until(soon, planned, true, true), Some(due));
    assert_eq!(c.engine_idle_until(soon, planned, false, true), Some(due), "a frame on its way to that thread");
    // Due within the grace, or already due: left to the application's next run until the plan.
    c.leaving(ns(now), ns(now + Duration::from_micros(5)));
    assert_eq!(c.engine_idle_until(soon, planned, true, true), Some(planned));
    assert_eq!(c.engine_idle_until(soon, planned, false, true), Some(planned));
    // Never later than the plan.
    c.leaving(ns(now), ns(planned + ENGINE_POLLED_PARK));
    assert_eq!(c.engine_idle_until(soon, planned, true, true), Some(planned));
    // The grace over, what waits or is due is the engine's.
    c.leaving(ns(now), ns(now + Duration::from_micros(5)));
    assert_eq!(c.engine_idle_until(grace_ends, planned, true, true), None, "the timers are due");
    c.leaving(ns(now), ns(due));
    assert_eq!(c.engine_idle_until(grace_ends, planned, false, true), None, "a frame or a posted write waits");
    assert_eq!(c.engine_idle_until(grace_ends, planned, true, true), Some(due));
}

/// A held device with timers long past due (the holder runs them) or not armed: the engine
/// neither spins nor oversleeps.
#[test]
fn an_engine_that_finds_the_device_held_sleeps_between_its_floor_and_its_plan() {
    let c = EngineClock::new();
    let now = Instant::now();
    let planned = now + ENGINE_IDLE_PARK;
    assert_eq!(c.engine_wake_when_held(now, planned), planned, "no timer published yet");
    c.leaving(ns(now), ns(now));
    let later = now + Duration::from_millis(5);
    assert_eq!(c.engine_wake_when_held(later, later + ENGINE_IDLE_PARK), later + ENGINE_MIN_PARK);
}

/// Frames left waiting in the port's receive queues (by a thread whose run could not have the
/// device then, another thread holding it) are handled at the next look of a polling
/// application at its wire, even one that finds the wire empty: the engine leaves what waits
/// to an application that polls, for up to `ENGINE_POLLED_PARK` (a sender that waited for
/// such frames, ACKs, stalled for 8 - 10 ms every 10 ms in a 64-byte `send-bw`).
#[test]
fn a_look_at_an_empty_wire_handles_the_frames_waiting_in_the_port() {
    let dev = SimDevice::new(SimConfig::numbered(1));
    let port = dev.port();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("a peer socket");
    port.connect_udp("127.0.0.1:0".parse().unwrap(), peer.local_addr().unwrap()).expect("a UDP wire");
    let received = port.stats().rx_frames;
    // Not a RoCE frame: counted and dropped when the device handles it.
    port.queue_unannounced(vec![0x5A; 60]);
    assert!(port.rx_waiting(), "the frame waits");
    assert!(!port.poll_wire(), "nothing arrived on the wire");
    assert!(!port.rx_waiting(), "the look left the frame waiting");
    assert_eq!(port.stats().rx_frames, received + 1);
}

/// An application's look at its wire hands the device the frames it took where they lie, after
/// the frames queued before them, or, when another thread holds the device, queues them for
/// that thread. Shown by ARP replies for one address from two MACs: the device keeps the MAC of
/// the reply it handled last. A round counts when the look took the datagram (the wire's
/// receive thread may take it first; then the round is run again).
#[test]
fn a_look_hands_the_device_what_it_took_after_what_waited_or_queues_it_for_a_holder() {
    let dev = SimDevice::new(SimConfig::numbered(2));
    let port = dev.port();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("a peer socket");
    let local = port.connect_udp("127.0.0.1:0".parse().unwrap(), peer.local_addr().unwrap()).expect("a UDP wire");
    let (me, neighbour): (std::net::IpAddr, std::net::IpAddr) =
        ("10.77.0.1".parse().unwrap(), "10.77.0.9".parse().unwrap());
    let request = umlx_wire::arp::request(port.mac(), me, neighbour).expect("an ARP request");
    let reply_from = |last: u8| umlx_wire::arp::reply(&request, [0x02, 0, 0, 0, 0x77, last], &[neighbour]).unwrap();
    let learnt = || port.resolve(me, neighbour, Duration::ZERO).map(|mac| mac[5]);
    let mut next_mac = 0u8;
    for held in [false, true] {
        let mut looked = false;
        for _round in 0..50 {
            let (first, second) = (next_mac + 1, next_mac + 2);
            next_mac += 2;
            // A reply waits in the port, queued before the look's; a second arrives on the wire.
            port.queue_unannounced(reply_from(first));
            peer.send_to(&reply_from(second), local).expect("a datagram to the port");
            let guard = held.then(|| dev.lock());
            let start = Instant::now();
            while !looked && start.elapsed() < Duration::from_secs(1) && (held || learnt() != Some(second)) {
                looked = port.poll_wire();
            }
            if held && looked {
                assert!(port.rx_waiting(), "the look queued what it took for the holder");
                assert_ne!(learnt(), Some(second), "handled with the device held elsewhere");
            }
            drop(guard);
            let start = Instant::now();
            while learnt() != Some(second) || port.rx_waiting() {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the reply that came last is the one kept, and nothing waits (held: {held}, learnt: {:?})",
                    learnt()
                );
                port.poll_wire();
                std::thread::sleep(Duration::from_micros(100));
            }
            if looked {
                break;
            }
        }
        assert!(looked, "a look took the datagram in one of 50 rounds (held: {held})");
    }
}
