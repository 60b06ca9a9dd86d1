//! Frames sent together on a UDP wire leave as segmented datagrams where they can
//! (`UDP_SEGMENT`) and arrive as the same frames, in order: one per datagram at a socket that
//! did not ask for coalescing (QEMU's socket netdev, rxe's guest), and split again by a sim
//! whose socket receives them coalesced (`UDP_GRO`).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use umlx_sim::{SimConfig, SimDevice};
use umlx_wire::pcap::PcapReader;
mod wire_common;
use wire_common::frames;

/// Lengths that make every kind of segment run: more equal frames than one datagram carries
/// (64), a shorter frame closing a run, a longer frame starting a new one, more bytes than one
/// datagram carries, single frames.
fn mixed_lengths(big: usize) -> Vec<usize> {
    let mut lens = vec![300; 70];
    lens.push(100);
    lens.extend([1082, 1082, 1082, 60, 1082]);
    lens.extend(std::iter::repeat_n(big, 20));
    lens.push(64);
    lens
}

#[test]
fn frames_sent_together_reach_a_plain_socket_one_per_datagram_in_order() {
    let plain = UdpSocket::bind("127.0.0.1:0").expect("a plain socket");
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let dev = SimDevice::new(SimConfig::numbered(0));
    let port = dev.port();
    port.connect_udp("127.0.0.1:0".parse().unwrap(), plain.local_addr().unwrap()).expect("a UDP wire");
    // Small frames: the plain socket keeps its default receive buffer.
    let sent = frames(&mixed_lengths(1500), [0x02, 0, 0, 0, 0, 0x77], port.mac());
    port.transmit(sent.clone());
    let mut buf = vec![0u8; 65536];
    for (n, frame) in sent.iter().enumerate() {
        let len = plain.recv(&mut buf).unwrap_or_else(|e| panic!("frame {n} of {} did not arrive: {e}", sent.len()));
        assert_eq!(&buf[..len], &frame[..], "datagram {n} is not frame {n} (length {len}, sent {})", frame.len());
    }
    plain.set_nonblocking(true).unwrap();
    assert!(plain.recv(&mut buf).is_err(), "a datagram more than the frames sent");
}

#[test]
fn frames_sent_together_reach_another_sim_as_the_same_frames_in_order() {
    // Each wire's peer is the other's socket (a wire takes frames from its peer only).
    let (raddr, saddr) = two_free_udp_addresses();
    let receiver = SimDevice::new(SimConfig::numbered(1));
    let rport = receiver.port();
    rport.connect_udp(raddr, saddr).expect("a wire to the sender");
    let sender = SimDevice::new(SimConfig::numbered(0));
    let sport = sender.port();
    sport.connect_udp(saddr, raddr).expect("a wire to the receiver");
    let pcap = std::env::temp_dir().join(format!("umlx-udp-segments-{}.pcap", std::process::id()));
    rport.set_pcap(&pcap).expect("recording the receiver's frames");

    let sent = frames(&mixed_lengths(4000), rport.mac(), sport.mac());
    sport.transmit(sent.clone());
    let end = Instant::now() + Duration::from_secs(5);
    while rport.stats().rx_frames < sent.len() as u64 {
        assert!(Instant::now() < end, "{} of {} frames arrived", rport.stats().rx_frames, sent.len());
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(20));
    rport.stop_pcap().expect("closing the recording");
    let got: Vec<Vec<u8>> = PcapReader::new(std::fs::File::open(&pcap).expect("the recording"))
        .expect("a pcap")
        .map(|r| r.expect("a record").data)
        .collect();
    let _ = std::fs::remove_file(&pcap);
    assert_eq!(got.len(), sent.len(), "frames received");
    for (n, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(g, s, "frame {n} (length {}, sent {})", g.len(), s.len());
    }
    assert_eq!(rport.stats().rx_not_roce, sent.len() as u64);
}

/// Two loopback UDP addresses that were free a moment ago (bound, then let go).
fn two_free_udp_addresses() -> (SocketAddr, SocketAddr) {
    let a = UdpSocket::bind("127.0.0.1:0").expect("a free port");
    let b = UdpSocket::bind("127.0.0.1:0").expect("another free port");
    (a.local_addr().unwrap(), b.local_addr().unwrap())
}

#[test]
fn a_wire_takes_frames_from_its_peer_only() {
    let peer = UdpSocket::bind("127.0.0.1:0").expect("the peer's socket");
    let stranger = UdpSocket::bind("127.0.0.1:0").expect("another socket");
    let dev = SimDevice::new(SimConfig::numbered(0));
    let port = dev.port();
    let wire = port.connect_udp("127.0.0.1:0".parse().unwrap(), peer.local_addr().unwrap()).expect("a UDP wire");
    let sent = frames(&[60, 61], port.mac(), [0x02, 0, 0, 0, 0, 0x77]);
    // The stranger's frame first: had the wire taken it, it would be counted before the peer's.
    stranger.connect(wire).expect("the stranger connects to the wire's address");
    stranger.send(&sent[0]).expect("a datagram from another sender");
    peer.send_to(&sent[1], wire).expect("a datagram from the peer");
    let end = Instant::now() + Duration::from_secs(5);
    while port.stats().rx_frames == 0 {
        assert!(Instant::now() < end, "the peer's frame did not arrive");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(20));
    let stats = port.stats();
    assert_eq!((stats.rx_frames, stats.rx_bytes), (1, 61), "only the peer's frame (61 bytes) is the wire's");
    // The kernel found no socket for the stranger's datagram and told it so (ICMP port
    // unreachable, which a connected socket reports).
    stranger.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let refused = stranger.recv(&mut [0u8; 64]).expect_err("no reply to the stranger");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused, "{refused}");
}

/// Frames longer than the route's MTU: the kernel refuses them as segments (a segment is never
/// fragmented), so the wire sends them again one per datagram (IP fragments them as it does
/// any long datagram) and stops segmenting frames that long. Runs itself again in a network
/// namespace of its own (`unshare -rn`), whose loopback gets an MTU of 1500; skipped, with a
/// notice, where the machine allows no such namespace.
#[test]
fn frames_longer_than_the_routes_mtu_still_arrive() {
    const INSIDE: &str = "UMLX_TEST_IN_NETNS";
    const NAME: &str = "frames_longer_than_the_routes_mtu_still_arrive";
    if std::env::var_os(INSIDE).is_none() {
        let exe = std::env::current_exe().expect("the test binary");
        let run = std::process::Command::new("unshare")
            .args(["-rn", "--"])
            .arg(exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(INSIDE, "1")
            .output();
        match run {
            Ok(out) if out.status.success() => {
                let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
                assert!(said.contains("1 passed"), "the test did not run in the namespace: {said}");
                if said.contains("skipped:") {
                    eprintln!("{}", said.lines().find(|l| l.contains("skipped:")).unwrap_or(""));
                }
            }
            Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare failed") => {
                eprintln!(
                    "skipped: no network namespace here (unshare -rn: {})",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(out) => panic!(
                "in a namespace with a 1500-byte MTU: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("skipped: unshare cannot run here ({e})"),
        }
        return;
    }
    let ip = std::process::Command::new("ip").args(["link", "set", "lo", "up", "mtu", "1500"]).status();
    if !ip.is_ok_and(|s| s.success()) {
        eprintln!("skipped: `ip link set lo up mtu 1500` failed in the namespace");
        return;
    }
    let plain = UdpSocket::bind("127.0.0.1:0").expect("a plain socket");
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let dev = SimDevice::new(SimConfig::numbered(0));
    let port = dev.port();
    port.connect_udp("127.0.0.1:0".parse().unwrap(), plain.local_addr().unwrap()).expect("a UDP wire");
    // Twice: the second batch goes out without a refused attempt (the same frames arrive).
    for _ in 0..2 {
        let sent = frames(&[4000, 4000, 4000, 1000, 1000, 1000, 60], [0x02, 0, 0, 0, 0, 0x77], port.mac());
        port.transmit(sent.clone());
        let mut buf = vec![0u8; 65536];
        for (n, frame) in sent.iter().enumerate() {
            let len = plain.recv(&mut buf).unwrap_or_else(|e| panic!("frame {n} did not arrive: {e}"));
            assert_eq!(&buf[..len], &frame[..], "datagram {n} is not frame {n}");
        }
    }
}
