//! The loopback LAN: several ports join one LAN of UDP ports, find each other with ARP, and a
//! frame to a learnt MAC reaches that member only.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use umlx_sim::port::{LoopbackLan, Port};
use umlx_sim::{SimConfig, SimDevice};
use umlx_wire::arp;
use umlx_wire::packet::ETHERTYPE_ARP;
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

/// A sim (the first numbered one) on `lan`: the device, its port and its IPv4 address.
fn sim_on(lan: LoopbackLan) -> (SimDevice, Port, Ipv4Addr) {
    let cfg = SimConfig::numbered(0);
    let ip = match cfg.ips[0] {
        IpAddr::V4(ip) => ip,
        other => panic!("an IPv4 address for the sim, not {other}"),
    };
    let dev = SimDevice::new(cfg);
    let port = dev.port();
    port.connect_lan(lan).expect("connecting to the LAN");
    (dev, port, ip)
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

    // That frame came on member 0's lane, not from its member port: member 2 learnt nothing
    // from it, and its answer still reaches member 0 (alone).
    let before0 = ports[0].stats().rx_frames;
    ports[2].transmit(vec![frame(ports[0].mac(), mac2)]);
    wait_for("member 0 to receive member 2's unicast frame", || ports[0].stats().rx_frames > before0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ports[1].stats().rx_frames, before1, "member 2's answer reached another member");
}

#[test]
fn frames_to_a_learnt_member_leave_on_a_connected_lane_and_arp_from_the_member_port() {
    let mut lans = three_members(2);
    let base = lans[0].base();
    // Member 1 is a plain socket here, to see where the sim's datagrams come from.
    drop(lans.drain(1..));
    let peer = UdpSocket::bind(("127.0.0.1", base + 1)).expect("member 1's port");
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (_dev, port, ip0) = sim_on(lans.remove(0));
    let peer_mac = [2, 0, 0, 0, 0, 0x77];
    let member = |from: SocketAddr| from.port() >= base && from.port() < base + MEMBERS;

    // The peer asks for the sim's address without a member's tag: the answer (ARP) comes from
    // member 0's port, tagged as member 0's, and the sim has learnt nothing (it asks the
    // kernel for no datagram's sender): a frame to the peer is flooded from the member port.
    let mut ask = arp::arp_request(peer_mac, Ipv4Addr::new(10, 77, 0, 99), ip0);
    peer.send_to(&ask, ("127.0.0.1", base)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = peer.recv_from(&mut buf).expect("the ARP reply");
    assert_eq!(buf.get(12..14), Some(&ETHERTYPE_ARP.to_be_bytes()[..]), "an ARP frame ({n} bytes)");
    assert_eq!(from, SocketAddr::from(([127, 0, 0, 1], base)), "ARP leaves from the member port");
    let mut tag = Vec::new();
    LoopbackLan::tag_neighbour_frame(&mut tag, 0);
    assert!(buf[..n].ends_with(&tag), "member 0's tag ends it");
    port.transmit(vec![frame(peer_mac, port.mac())]);
    let (_, from) = peer.recv_from(&mut buf).expect("the flooded frame");
    assert_eq!(from, SocketAddr::from(([127, 0, 0, 1], base)), "not learnt: flooded from the member port");

    // Tagged as member 1's, the same request teaches the sim where the peer is.
    LoopbackLan::tag_neighbour_frame(&mut ask, 1);
    peer.send_to(&ask, ("127.0.0.1", base)).unwrap();
    peer.recv_from(&mut buf).expect("the ARP reply");

    // A frame to the peer goes on a lane: a socket of its own, connected, on no member's port;
    // the bytes are the frame's.
    let sent = frame(peer_mac, port.mac());
    port.transmit(vec![sent.clone()]);
    let (n, from) = peer.recv_from(&mut buf).expect("the frame");
    assert_eq!(&buf[..n], &sent[..]);
    assert!(from.ip().is_loopback() && !member(from), "a frame came from {from}, a member's port");
    // The next frames take the same lane.
    port.transmit(vec![sent.clone(), sent.clone()]);
    for _ in 0..2 {
        let (n, again) = peer.recv_from(&mut buf).expect("the next frames");
        assert_eq!((&buf[..n], again), (&sent[..], from), "the same lane");
    }
    // ARP to the peer still leaves from the member port.
    port.transmit(vec![arp::arp_request(port.mac(), ip0, Ipv4Addr::new(10, 77, 0, 99))]);
    let (_, from) = peer.recv_from(&mut buf).expect("the ARP request");
    assert_eq!(from, SocketAddr::from(([127, 0, 0, 1], base)));
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

#[test]
fn lanes_open_to_eight_members_and_frames_to_the_others_leave_from_the_member_port() {
    // A LAN of ten: the sim is member 0, nine plain sockets the others.
    const TEN: u16 = 10;
    let mut base = 44000 + (std::process::id() % 100) as u16 * 64;
    let (lan, peers) = loop {
        if LoopbackLan::first_free(base, TEN) == Some(0)
            && let Ok(lan) = LoopbackLan::join(base, TEN)
            && lan.member() == 0
        {
            let peers: Vec<UdpSocket> = (1..TEN).map_while(|m| UdpSocket::bind(("127.0.0.1", base + m)).ok()).collect();
            if peers.len() == usize::from(TEN - 1) {
                break (lan, peers);
            }
        }
        base += 64;
        assert!(base < 60000, "no free LAN of {TEN} UDP ports found");
    };
    let (_dev, port, ip0) = sim_on(lan);
    let mut buf = [0u8; 2048];
    // Each peer teaches the sim where it is (a tagged ARP request, answered).
    let macs: Vec<[u8; 6]> = (1..TEN).map(|m| [2, 0, 0, 0, 0x70, m as u8]).collect();
    for (m, (peer, mac)) in (1..TEN).zip(peers.iter().zip(&macs)) {
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut ask = arp::arp_request(*mac, Ipv4Addr::new(10, 77, 0, m as u8), ip0);
        LoopbackLan::tag_neighbour_frame(&mut ask, m);
        peer.send_to(&ask, ("127.0.0.1", base)).unwrap();
        peer.recv_from(&mut buf).expect("the ARP reply");
    }
    // A frame to each: the first eight members get theirs on lanes of their own, the ninth
    // from the member port (no lane past eight).
    let mut lanes = Vec::new();
    for (peer, mac) in peers.iter().zip(&macs) {
        let sent = frame(*mac, port.mac());
        port.transmit(vec![sent.clone()]);
        let (n, from) = peer.recv_from(&mut buf).expect("the frame");
        assert_eq!(&buf[..n], &sent[..]);
        lanes.push(from);
    }
    let member_port = SocketAddr::from(([127, 0, 0, 1], base));
    for (m, from) in lanes[..8].iter().enumerate() {
        assert!(from.port() < base || from.port() >= base + TEN, "member {}'s frame came from {from}", m + 1);
    }
    let mut distinct = lanes[..8].to_vec();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "one lane per member: {lanes:?}");
    assert_eq!(lanes[8], member_port, "the ninth member's frame leaves from the member port");
    // Again: each member's frames take the lane they took.
    for ((peer, mac), first) in peers.iter().zip(&macs).zip(&lanes) {
        port.transmit(vec![frame(*mac, port.mac())]);
        let (_, from) = peer.recv_from(&mut buf).expect("the next frame");
        assert_eq!(from, *first);
    }
}
