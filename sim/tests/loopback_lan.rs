//! The loopback LAN: several ports join one LAN of UDP ports, find each other with ARP, and a
//! frame to a learnt MAC reaches that member only.

use std::net::IpAddr;
use std::time::{Duration, Instant};
use umlx_sim::port::{LoopbackLan, Port};
use umlx_sim::{SimConfig, SimDevice};
mod wire_common;
use wire_common::frame;

const MEMBERS: u16 = 4;

/// Three members of a LAN of four whose ports are all free now (a base away from the automatic
/// LAN's, one range per `test` so that the tests of this file can run at once, moved on when
/// another program holds one of its ports).
fn three_members(test: u16) -> Vec<LoopbackLan> {
    let mut base = 41000 + (std::process::id() % 200) as u16 * 32 + test * 16;
    for _ in 0..64 {
        if LoopbackLan::first_free(base, MEMBERS) == Some(0) {
            let lans: Vec<_> = (0..3).map_while(|_| LoopbackLan::join(base, MEMBERS).ok()).collect();
            if lans.len() == 3 && lans.iter().enumerate().all(|(i, l)| l.member() == i as u16) {
                return lans;
            }
        }
        base += 32;
    }
    panic!("no free LAN of {MEMBERS} UDP ports found");
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn members_resolve_each_other_and_unicast_reaches_only_its_target() {
    let lans = three_members(0);
    let devs: Vec<(SimDevice, IpAddr)> = lans
        .into_iter()
        .enumerate()
        .map(|(i, lan)| {
            let cfg = SimConfig::numbered(i as u8);
            let ip = cfg.ips[0];
            let dev = SimDevice::new(cfg);
            dev.port().connect_lan(lan).expect("connecting to the LAN");
            (dev, ip)
        })
        .collect();
    let ports: Vec<Port> = devs.iter().map(|(d, _)| d.port()).collect();
    let (ip0, ip2) = (devs[0].1, devs[2].1);

    // ARP from member 0 for member 2's address: the request is flooded (member 1 sees it too),
    // the reply comes back and teaches member 0 where member 2 is.
    let mac2 = ports[0].resolve(ip0, ip2, Duration::from_secs(5)).expect("member 2 answers ARP");
    assert_eq!(mac2, ports[2].mac());
    wait_for("member 1 to see the flooded request", || ports[1].stats().rx_frames >= 1);

    // A unicast frame to member 2 now goes to member 2 only.
    let before1 = ports[1].stats().rx_frames;
    let before2 = ports[2].stats().rx_frames;
    ports[0].transmit(vec![frame(mac2, ports[0].mac())]);
    wait_for("member 2 to receive the unicast frame", || ports[2].stats().rx_frames > before2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ports[1].stats().rx_frames, before1, "a frame to a learnt MAC reached another member");
    assert_eq!(ports[2].stats().rx_not_roce, 1, "member 2 counted the non-RoCE frame");
}

#[test]
fn a_full_lan_is_a_clear_error() {
    let lans = three_members(1);
    // The fourth member takes the last port; a fifth finds none.
    let base = lans[0].base();
    let fourth = LoopbackLan::join(base, MEMBERS).expect("the fourth member");
    assert_eq!(fourth.member(), 3);
    assert_eq!(LoopbackLan::first_free(base, MEMBERS), None);
    let e = LoopbackLan::join(base, MEMBERS).expect_err("a fifth member");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    assert!(e.to_string().contains("every port of the loopback LAN"), "{e}");
    // A member that leaves frees its port for the next process.
    drop(fourth);
    assert_eq!(LoopbackLan::first_free(base, MEMBERS), Some(3));
}
