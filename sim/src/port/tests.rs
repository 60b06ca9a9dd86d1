//! Tests of the port: its run clock, and the checksums of the frames it hands to a fabric,
//! its own loopback, a recording and a socket.

use super::*;
use crate::fabric::{Fabric, FabricConfig};
use std::net::Ipv4Addr;
use umlx_wire::icrc;
use umlx_wire::packet::{Aeth, Bth, Deth, ExtHeaders, FrameBuilder, Opcode, Reth, parse_frame};
use umlx_wire::pcap::PcapReader;

const MAC_A: MacAddr = [2, 0, 0, 0, 0, 0xa];
const MAC_B: MacAddr = [2, 0, 0, 0, 0, 0xb];

/// Waits until the clock has moved past `t`.
fn after(t: Instant) {
    while Instant::now() <= t {
        std::thread::yield_now();
    }
}

#[test]
fn a_run_reads_the_clock_once_and_again_for_each_batch_it_receives() {
    let (a, b) = (Port::new(MAC_A, vec![]), Port::new(MAC_B, vec![]));
    // Outside a run, every call reads the clock.
    let t0 = run_now();
    after(t0);
    let t1 = run_now();
    assert!(t1 > t0, "outside a run");
    after(t1);
    {
        let _outer = Running::enter(&a);
        let start = run_now();
        assert!(start > t1, "a run's first call reads the clock");
        after(start);
        assert_eq!(run_now(), start, "then the run keeps its time");
        let batch;
        {
            // A device this run runs in the same thread (the in-process fabric) shares it.
            let _inner = Running::enter(&b);
            assert_eq!(run_now(), start, "a nested run");
            batch = run_now_for_batch();
            assert!(batch > start, "a batch of received frames reads it again");
            after(batch);
            assert_eq!(run_now(), batch);
        }
        assert_eq!(run_now(), batch, "the inner run's end leaves the outer run its time");
    }
    // The run has ended: the next one reads the clock anew.
    let later = run_now();
    assert!(later > t1);
    after(later);
    let _next = Running::enter(&a);
    assert!(run_now() > later, "a new run");
}

/// Four SENDs from A to B as the transport builds them: integrity fields left to the port.
fn transport_frames() -> Vec<Vec<u8>> {
    (0..4u8)
        .map(|i| {
            let bth = Bth::new(Opcode::RC_SEND_ONLY, 0x11, u32::from(i));
            let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
            let payload = [i; 64];
            let f = FrameBuilder::ipv4(MAC_A, MAC_B, a, b, bth)
                .with_payload(&payload)
                .with_checksums(Checksums::Defer)
                .to_vec()
                .unwrap();
            assert!(!icrc::verify(&f), "built without its ICRC");
            f
        })
        .collect()
}

#[test]
fn the_frames_whose_acks_may_wait_are_the_rc_requests() {
    let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let reth = ExtHeaders { reth: Some(Reth::default()), ..ExtHeaders::default() };
    let aeth = ExtHeaders { aeth: Some(Aeth::ack(1, 0)), ..ExtHeaders::default() };
    let deth = ExtHeaders { deth: Some(Deth::default()), ..ExtHeaders::default() };
    let cases = [
        (Opcode::RC_SEND_ONLY, ExtHeaders::default(), true),
        (Opcode::RC_RDMA_WRITE_ONLY, reth, true),
        (Opcode::RC_RDMA_READ_REQUEST, reth, true),
        (Opcode::RC_ACKNOWLEDGE, aeth, false),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, aeth, false),
        (Opcode::UC_SEND_ONLY, ExtHeaders::default(), false),
        (Opcode::UD_SEND_ONLY, deth, false),
    ];
    for (opcode, ext, request) in cases {
        let payload = [7u8; 16];
        let f = FrameBuilder::ipv4(MAC_A, MAC_B, a, b, Bth::new(opcode, 0x11, 5))
            .with_ext(ext)
            .with_payload(if opcode.info().is_some_and(|i| i.payload) { &payload } else { &[] })
            .to_vec()
            .unwrap();
        assert_eq!(is_rc_request(&f), request, "{opcode}");
        assert_eq!(rx_queue_of(&f), rx_queue_of_qp(0x11), "{opcode}");
    }
    let arp = umlx_wire::arp::arp_request(MAC_A, a, b);
    assert!(!is_rc_request(&arp));
    assert!(!is_rc_request(&[]));
}

fn ports(cfg: FabricConfig) -> (Fabric, Port, Port) {
    let fabric = Fabric::new(cfg);
    let (a, b) = (Port::new(MAC_A, vec![]), Port::new(MAC_B, vec![]));
    fabric.attach(&a);
    fabric.attach(&b);
    (fabric, a, b)
}

/// What waits in `p`'s receive queue after `n` frames arrived (the fabric's thread may
/// deliver them).
fn received(p: &Port, n: usize) -> Vec<(Vec<u8>, Checksums)> {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < n && Instant::now() < until {
        got.extend((0..RX_QUEUES).flat_map(|q| p.take_rx(q)).map(|f| (f.bytes, f.checksums)));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got.len(), n, "frames received");
    got
}

#[test]
fn a_perfect_fabric_and_the_adapters_loopback_carry_transport_frames_without_checksums() {
    let (_fabric, a, b) = ports(FabricConfig::default());
    let sent = transport_frames();
    a.transmit_from(&mut sent.clone(), Checksums::Defer);
    for ((bytes, checksums), sent) in received(&b, 4).iter().zip(&sent) {
        assert_eq!((bytes, *checksums), (sent, Checksums::Defer), "crossed as built, not to be verified");
        assert!(parse_frame_trusted(bytes).is_ok() && parse_frame_verified(bytes).is_err());
    }
    // To the port's own MAC: looped back inside the adapter, as they are.
    let to_self: Vec<Vec<u8>> = sent.iter().map(|f| [&MAC_B[..], &MAC_B[..], &f[12..]].concat()).collect();
    b.transmit_from(&mut to_self.clone(), Checksums::Defer);
    assert!(received(&b, 4).iter().all(|(f, c)| *c == Checksums::Defer && to_self.contains(f)));
    // Frames from anyone else (a test, an application) are always verified.
    a.transmit(sent.clone());
    assert!(received(&b, 4).iter().all(|(_, c)| *c == Checksums::Compute));
}

#[test]
fn an_impaired_fabric_a_recording_and_a_socket_get_the_checksums_filled() {
    let check_filled = |got: Vec<(Vec<u8>, Checksums)>, what: &str| {
        for (bytes, checksums) in got {
            assert_eq!(checksums, Checksums::Compute, "{what}");
            parse_frame_verified(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    };
    // A fabric that delays frames (it could as well corrupt them).
    let delayed = FabricConfig { delay: Duration::from_millis(1), ..Default::default() };
    let (_fabric, a, b) = ports(delayed);
    a.transmit_from(&mut transport_frames(), Checksums::Defer);
    check_filled(received(&b, 4), "impaired fabric");

    // A recording sender, on a perfect fabric: the pcap and the receiver get whole frames.
    let (_fabric, a, b) = ports(FabricConfig::default());
    let pcap = std::env::temp_dir().join(format!("umlx-port-checksums-{}.pcap", std::process::id()));
    a.set_pcap(&pcap).unwrap();
    a.transmit_from(&mut transport_frames(), Checksums::Defer);
    a.stop_pcap().unwrap();
    check_filled(received(&b, 4), "recording sender");
    let recorded: Vec<Vec<u8>> =
        PcapReader::new(File::open(&pcap).unwrap()).unwrap().map(|r| r.unwrap().data).collect();
    std::fs::remove_file(&pcap).ok();
    assert_eq!(recorded.len(), 4);
    assert!(recorded.iter().all(|f| icrc::verify(f) && parse_frame_verified(f).is_ok()), "recorded whole");

    // A UDP wire: the datagrams carry whole frames.
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let a = Port::new(MAC_A, vec![]);
    a.connect_udp("127.0.0.1:0".parse().unwrap(), rx.local_addr().unwrap()).unwrap();
    a.transmit_from(&mut transport_frames(), Checksums::Defer);
    rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 2048];
    let mut seen = 0;
    while seen < 4 {
        let n = rx.recv(&mut buf).unwrap();
        // A kernel that segments sends (UDP_SEGMENT) may put several frames in one read.
        let mut at = 0;
        while at < n {
            let p = parse_frame(&buf[at..n]).unwrap();
            let len = p.packet_end;
            parse_frame_verified(&buf[at..at + len]).unwrap();
            at += len;
            seen += 1;
        }
    }
}
