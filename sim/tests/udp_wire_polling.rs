//! A UDP wire whose application polls it (`Port::poll_wire`, as a CQ poll that finds nothing
//! does): the wire's receive thread leaves the socket to the application instead of waking at
//! every datagram, and takes the datagrams again, promptly, once the application stops polling
//! (an application that waits by watching memory an RDMA WRITE fills never polls).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use umlx_sim::port::Port;
use umlx_sim::{SimConfig, SimDevice};
mod wire_common;
use wire_common::frame;

/// What this process's thread named `name` has used so far: CPU time (user and system) in
/// clock ticks, and the times it blocked (voluntary context switches), from
/// `/proc/self/task/*/stat` and `status`.
fn usage_of_thread(name: &str) -> (u64, u64) {
    let mut found = None;
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("a task").path();
        if std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == name) {
            assert!(found.is_none(), "two threads named {name}");
            let stat = std::fs::read_to_string(dir.join("stat")).expect("the task's stat");
            // The fields after the command, which ends at the last ')': the state is field 3,
            // utime 14, stime 15.
            let rest: Vec<&str> = stat[stat.rfind(')').expect("a command") + 2..].split(' ').collect();
            let field = |n: usize| -> u64 { rest[n - 3].parse().expect("a tick count") };
            let status = std::fs::read_to_string(dir.join("status")).expect("the task's status");
            let count = |key: &str| -> u64 {
                let line = status.lines().find(|l| l.starts_with(key)).expect("a switch count");
                line[key.len()..].trim().parse().expect("a number")
            };
            found = Some((field(14) + field(15), count("voluntary_ctxt_switches:")));
        }
    }
    found.unwrap_or_else(|| panic!("no thread named {name}"))
}

fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < within, "timed out after {within:?} waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
    start.elapsed()
}

#[test]
fn the_receive_thread_leaves_a_polled_wire_to_its_application_and_returns_when_polling_stops() {
    let sender = UdpSocket::bind("127.0.0.1:0").expect("a sending socket");
    let dev = SimDevice::new(SimConfig::numbered(0));
    let port: Port = dev.port();
    let local = port
        .connect_udp("127.0.0.1:0".parse().unwrap(), sender.local_addr().unwrap())
        .expect("connecting the port to a UDP wire");
    let to: SocketAddr = local;
    let datagram = frame(port.mac(), [0x02, 0, 0, 0, 0, 0x99]);
    let received = || port.stats().rx_frames;

    // Nobody polls: the receive thread takes a datagram.
    sender.send_to(&datagram, to).unwrap();
    wait_for("the receive thread to take the first datagram", Duration::from_secs(5), || received() == 1);
    // A thread is named as it starts running: on a loaded machine the engine may not have yet.
    let named = |name: &str| {
        std::fs::read_dir("/proc/self/task").expect("/proc/self/task").any(|task| {
            std::fs::read_to_string(task.expect("a task").path().join("comm")).is_ok_and(|c| c.trim() == name)
        })
    };
    wait_for("the device's engine thread to start", Duration::from_secs(5), || named("umlx-sim-engine"));

    // The application polls without pause while 2,000 datagrams arrive 150 µs apart (0.3 s):
    // it takes them itself, and the receive thread takes neither datagrams nor CPU time from
    // it: it neither wakes at each datagram nor spins (on a machine whose cores are all busy
    // polling, either takes a core from a poller). Nor do it and the device's engine wake every
    // millisecond (each wake takes the CPU a poller may be using): fewer than 100 times each in
    // the 0.3 s (it was about 300 each, a pause of the receive thread and a look of the engine
    // every millisecond). A busy machine may preempt the application long enough for the
    // receive thread to take over (as it should then): up to three rounds.
    let mut rounds = Vec::new();
    let good = |&(taken, rx_ticks, rx_switches, engine_switches): &(u32, u64, u64, u64)| {
        taken >= 1900 && rx_ticks <= 2 && rx_switches < 100 && engine_switches < 100
    };
    while rounds.len() < 3 && !rounds.last().is_some_and(good) {
        let expect = received() + 2000;
        let (rx_ticks, rx_switches) = usage_of_thread("umlx-sim-udp-rx");
        let (_, engine_switches) = usage_of_thread("umlx-sim-engine");
        let mut taken_by_polls = 0;
        let mut next_send = Instant::now();
        let mut sent = 0;
        while sent < 2000 || received() < expect {
            if sent < 2000 && Instant::now() >= next_send {
                sender.send_to(&datagram, to).unwrap();
                sent += 1;
                next_send += Duration::from_micros(150);
            }
            if port.poll_wire() {
                taken_by_polls += 1;
            }
            assert!(next_send.elapsed() < Duration::from_secs(5), "the polled datagrams were not all received");
        }
        assert_eq!(received(), expect, "every datagram received once");
        let (rx_ticks_after, rx_switches_after) = usage_of_thread("umlx-sim-udp-rx");
        let (_, engine_switches_after) = usage_of_thread("umlx-sim-engine");
        rounds.push((
            taken_by_polls,
            rx_ticks_after - rx_ticks,
            rx_switches_after - rx_switches,
            engine_switches_after - engine_switches,
        ));
    }
    eprintln!("rounds: {rounds:?}");
    assert!(
        rounds.iter().any(good),
        "of 2,000 datagrams, (taken by the application's polls, the receive thread's CPU clock \
         ticks, the times it blocked, the times the engine blocked) in each round: {rounds:?}"
    );

    // The application stops polling (it now watches memory): a datagram is still received,
    // by the receive thread, within its pause.
    sender.send_to(&datagram, to).unwrap();
    let expect = received() + 1;
    let took = wait_for("the receive thread to take a datagram after polling stopped", Duration::from_secs(1), || {
        received() == expect
    });
    eprintln!("after polling stopped, the receive thread took a datagram in {took:?}");
    for n in 0..5u64 {
        sender.send_to(&datagram, to).unwrap();
        wait_for("the receive thread to keep taking datagrams", Duration::from_secs(1), || {
            received() == expect + 1 + n
        });
    }
}
