//! Frames sent together on a UDP wire leave as segmented datagrams where they can
//! (`UDP_SEGMENT`) and arrive as the same frames, in order: one per datagram at a socket that
//! did not ask for coalescing (QEMU's socket netdev, rxe's guest), and split again by a sim
//! whose socket receives them coalesced (`UDP_GRO`).

use std::net::UdpSocket;
use std::time::{Duration, Instant};
use umlx_sim::{SimConfig, SimDevice};
use umlx_wire::pcap::PcapReader;

/// Frames of the given lengths from `src` to `dst` (a local experimental ethertype), each
/// filled with bytes that say which frame and which byte they are.
fn frames(lens: &[usize], dst: [u8; 6], src: [u8; 6]) -> Vec<Vec<u8>> {
    lens.iter()
        .enumerate()
        .map(|(n, &len)| {
            let mut f: Vec<u8> = (0..len).map(|i| (i * 7 + n * 13) as u8).collect();
            f[..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            f
        })
        .collect()
}

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
    let receiver = SimDevice::new(SimConfig::numbered(1));
    let rport = receiver.port();
    let raddr = rport.connect_udp("127.0.0.1:0".parse().unwrap(), "127.0.0.1:9".parse().unwrap()).expect("a wire");
    let sender = SimDevice::new(SimConfig::numbered(0));
    let sport = sender.port();
    sport.connect_udp("127.0.0.1:0".parse().unwrap(), raddr).expect("a wire to the receiver");
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
