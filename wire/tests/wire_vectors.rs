//! The codec against real ConnectX frames (`shared/rocev2_vectors`): every RoCEv2 and RoCEv1
//! frame parses with a matching ICRC, the counts per file are those of the README, and every
//! frame re-encodes byte for byte from its parsed fields.

mod wire_common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use umlx_wire::icrc;
use umlx_wire::packet::{
    Aeth, AethKind, Bth, Checksums, CnpBody, ExtHeaders, FrameBuilder, GSI_QKEY, IpHeader, Ipv4Header, Opcode, Reth,
    RoceVersion, UdpChecksum, WireError, fill_checksums, ip_frame_len, parse_frame, parse_frame_trusted,
    parse_frame_verified, steering_bth, steering_dest_qp,
};
use wire_common::{PCAP_COUNTS, from_hex, pcap_frames, reference_icrc, scapy_vectors};

/// Parses every frame of one pcap; returns (v2, v1, non-RoCE, opcode histogram) after
/// asserting that every RoCE frame verifies and re-encodes exactly.
fn check_pcap(name: &str) -> (u64, u64, u64, BTreeMap<String, u64>) {
    let (mut v2, mut v1, mut other) = (0, 0, 0);
    let mut ops = BTreeMap::new();
    let mut buf = vec![0u8; 16384];
    for (n, frame, orig) in pcap_frames(name) {
        assert_eq!(frame.len() as u32, orig, "{name} #{n} is cut by the snaplen");
        match parse_frame(&frame) {
            Ok(p) => {
                assert!(
                    p.icrc_ok,
                    "{name} #{n} {}: ICRC on wire {:#010x}, computed {:#010x}",
                    p.bth.opcode, p.icrc, p.icrc_expected
                );
                parse_frame_verified(&frame).unwrap_or_else(|e| panic!("{name} #{n}: {e}"));
                assert!(icrc::verify(&frame));
                assert_eq!(icrc::compute(&frame), Ok(p.icrc));
                assert_eq!(reference_icrc(&frame), p.icrc, "{name} #{n}");
                // Receive steering finds the same BTH and destination QP with its few checks.
                assert_eq!(steering_bth(&frame), Some(p.bth), "{name} #{n}: steering");
                assert_eq!(steering_dest_qp(&frame), Some(p.bth.dest_qp), "{name} #{n}: steering");
                // A RoCEv2 frame's IP length ends its packet (the frame may be padded after it).
                let ip_end = (p.version() == RoceVersion::V2).then_some(p.packet_end);
                assert_eq!(ip_frame_len(&frame), ip_end, "{name} #{n}: its own length");
                match p.version() {
                    RoceVersion::V1 => v1 += 1,
                    RoceVersion::V2 => v2 += 1,
                }
                *ops.entry(p.bth.opcode.to_string()).or_default() += 1;

                // Re-encode from the parsed fields: byte for byte.
                let len =
                    FrameBuilder::from_packet(&p).build_into(&mut buf).unwrap_or_else(|e| panic!("{name} #{n}: {e}"));
                assert_eq!(&buf[..len], &frame[..], "{name} #{n} re-encodes differently");
                // And from a template of its path, given the packet's own fields.
                let t = FrameBuilder::from_packet(&p).template().unwrap_or_else(|e| panic!("{name} #{n}: {e}"));
                let mut v = vec![0xA5; 7];
                let len =
                    t.build_vec(&p.bth, &p.ext(), p.payload, &mut v).unwrap_or_else(|e| panic!("{name} #{n}: {e}"));
                assert_eq!((len, &v[..]), (frame.len(), &frame[..]), "{name} #{n} differs built from a template");
                check_deferred_checksums(&format!("{name} #{n}"), &frame);
            }
            Err(e) => {
                assert!(e.is_not_roce(), "{name} #{n}: RoCE frame rejected: {e}");
                assert_eq!(steering_dest_qp(&frame), None, "{name} #{n}: steering a frame that is not RoCE");
                other += 1;
            }
        }
    }
    (v2, v1, other, ops)
}

/// A real frame rebuilt with its checksums left to the egress ([`Checksums::Defer`]): both
/// integrity fields are zero, a receiving port's parse refuses it, the trusted parse gives the
/// same packet, and [`fill_checksums`] makes the real frame again, byte for byte.
fn check_deferred_checksums(what: &str, frame: &[u8]) {
    let p = parse_frame(frame).unwrap();
    let deferred = FrameBuilder::from_packet(&p).with_checksums(Checksums::Defer).to_vec().unwrap();
    let udp_checksum = p.udp().is_some_and(|u| u.checksum != 0);
    if udp_checksum {
        // The UDP checksum covers the ICRC: the builder computes all of them.
        assert_eq!(deferred, frame, "{what}: a UDP checksum keeps the builder computing");
        return;
    }
    let icrc_at = p.packet_end - 4..p.packet_end;
    assert_eq!(&deferred[icrc_at.clone()], &[0; 4], "{what}: the ICRC is left zero");
    let verdict = parse_frame_verified(&deferred);
    match p.ip() {
        IpHeader::Ipv4(_) => {
            assert_eq!(&deferred[p.l3_offset + 10..p.l3_offset + 12], &[0, 0], "{what}: IPv4 checksum left zero");
            assert!(matches!(verdict, Err(WireError::BadIpChecksum { found: 0, .. })), "{what}: {verdict:?}");
        }
        _ => assert!(matches!(verdict, Err(WireError::BadIcrc { found: 0, .. })), "{what}: {verdict:?}"),
    }
    let t = parse_frame_trusted(&deferred).unwrap_or_else(|e| panic!("{what}: trusted parse: {e}"));
    assert!(t.icrc_ok && t.ip_checksum_ok && t.check().is_ok(), "{what}");
    assert_eq!(
        (t.eth(), t.udp(), t.bth, t.ext(), t.payload, t.pad),
        (p.eth(), p.udp(), p.bth, p.ext(), p.payload, p.pad),
        "{what}"
    );
    assert_eq!((t.l3_offset, t.bth_offset, t.packet_end), (p.l3_offset, p.bth_offset, p.packet_end), "{what}");
    let mut filled = deferred.clone();
    fill_checksums(&mut filled).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(filled, frame, "{what}: filled checksums differ from the wire's");
    // The real frame with its integrity fields wiped, filled again.
    let mut wiped = frame.to_vec();
    wiped[icrc_at].fill(0);
    if let IpHeader::Ipv4(_) = p.ip() {
        wiped[p.l3_offset + 10..p.l3_offset + 12].fill(0);
    }
    fill_checksums(&mut wiped).unwrap();
    assert_eq!(wiped, frame, "{what}: wiped and filled");
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn every_pcap_frame_verifies_with_readme_counts() {
    let (mut total_v2, mut total_v1) = (0, 0);
    for &(name, want_v2, want_v1) in PCAP_COUNTS {
        let (v2, v1, _, _) = check_pcap(name);
        assert_eq!((v2, v1), (want_v2, want_v1), "{name}: RoCEv2/RoCEv1 counts");
        total_v2 += v2;
        total_v1 += v1;
    }
    let mut scapy_v2 = 0;
    let mut scapy_v1 = 0;
    for (name, frame) in scapy_vectors() {
        let p = parse_frame_verified(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reference_icrc(&frame), p.icrc);
        match p.version() {
            RoceVersion::V1 => scapy_v1 += 1,
            RoceVersion::V2 => scapy_v2 += 1,
        }
        let rebuilt = FrameBuilder::from_packet(&p).to_vec().unwrap();
        assert_eq!(rebuilt, frame, "{name} re-encodes differently");
        check_deferred_checksums(&name, &frame);
    }
    assert_eq!((scapy_v2, scapy_v1), (2, 2), "scapy vector file");
    // README: 1,201 RoCEv2/IPv4 frames (1,200 from hardware incl. the CNP, 1 from scapy)
    // and 325 RoCEv1 frames.
    assert_eq!(total_v2 + scapy_v2, 1201);
    assert_eq!(total_v1 + scapy_v1, 325);
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn opcode_mix_matches_readme() {
    let (_, _, _, ops) = check_pcap("rocev2_test.pcap");
    assert_eq!(ops.get("RC_SEND_FIRST"), Some(&120));
    assert_eq!(ops.get("RC_SEND_MIDDLE"), Some(&265));
    assert_eq!(ops.get("RC_SEND_LAST"), Some(&148));
    assert_eq!(ops.get("RC_ACKNOWLEDGE"), Some(&175));

    let (_, _, _, ops) = check_pcap("write.pcap");
    assert_eq!(ops.get("UD_SEND_ONLY"), Some(&5));
    assert_eq!(ops.get("RC_SEND_ONLY"), Some(&4));
    assert_eq!(ops.get("RC_RDMA_WRITE_ONLY"), Some(&2));
    assert_eq!(ops.get("RC_ACKNOWLEDGE"), Some(&6));

    let (_, _, _, ops) = check_pcap("nvme-discover.pcap");
    for op in ["RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"] {
        assert_eq!(ops.get(op), Some(&2), "{op}");
    }
    assert_eq!(ops.get("RC_RDMA_READ_REQUEST"), Some(&1));
    assert_eq!(ops.get("RC_RDMA_READ_RESPONSE_ONLY"), Some(&1));
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn read2_fields() {
    let frames = pcap_frames("read2.pcap");
    let get = |n: u64| frames.iter().find(|f| f.0 == n).unwrap().1.clone();

    // #4: CM MAD to QP1.
    let f = get(4);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(p.bth.dest_qp, 1);
    let deth = p.deth().unwrap();
    assert_eq!(deth.qkey, GSI_QKEY);
    assert_eq!(deth.src_qp, 1);
    assert_eq!(p.payload.len(), 256);
    assert!(p.bth.m);
    assert_eq!(p.src_ip(), IpAddr::V4(Ipv4Addr::new(172, 17, 242, 47)));
    assert_eq!(p.udp_src_port(), 63431);

    // #11: WRITE_ONLY of 22 bytes, PadCnt 2.
    let f = get(11);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(p.bth.pad_cnt, 2);
    assert_eq!(p.pad, &[0, 0]);
    assert_eq!(p.payload.len(), 22);
    assert_eq!(p.reth().unwrap().dma_len, 22);
    assert!(p.bth.ack_req);

    // #13 / #14: READ_REQUEST (RETH len 22) and READ_RESPONSE_ONLY (AETH MSN 3, PadCnt 2).
    let p = parse_frame(&get(13)).map(|p| (p.bth, p.ext())).unwrap();
    assert_eq!(p.0.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(p.1.reth.unwrap().dma_len, 22);
    let f = get(14);
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    let aeth = p.aeth().unwrap();
    assert_eq!(aeth.msn, 3);
    assert!(aeth.is_ack());
    assert_eq!(p.bth.pad_cnt, 2);
    assert_eq!(p.payload.len(), 22);

    // #8: the RC ACK of the doc's ICRC example: wire c8 7b cd 56, zlib crc 0x56cd7bc8.
    let f = get(8);
    let p = parse_frame(&f).unwrap();
    assert_eq!(f.len(), 62);
    assert_eq!(&f[58..], &[0xc8, 0x7b, 0xcd, 0x56]);
    assert_eq!(p.icrc, 0x56cd_7bc8);
    assert!(p.icrc_ok);
    assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(p.aeth().unwrap().msn, 1);
    assert!(matches!(p.aeth().unwrap().kind(), AethKind::Ack { .. }));
}

/// Rebuilds read2 #11 (WRITE_ONLY, PadCnt 2) from explicitly written fields rather than
/// from `from_packet`: what a port would do.
#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn read2_write_only_rebuilt_by_hand() {
    let frames = pcap_frames("read2.pcap");
    let orig = &frames.iter().find(|f| f.0 == 11).unwrap().1;
    let p = parse_frame(orig).unwrap();
    let IpHeader::Ipv4(ip) = p.ip() else { panic!("IPv4 expected") };
    let reth = p.reth().unwrap();
    let bth = Bth {
        m: true, // ConnectX sets MigReq
        ack_req: true,
        ..Bth::new(Opcode::RC_RDMA_WRITE_ONLY, p.bth.dest_qp, p.bth.psn)
    };
    let b = FrameBuilder::ipv4(p.eth().src, p.eth().dst, ip.src, ip.dst, bth)
        .with_traffic_class(ip.tos) // ConnectX: 0x02 or 0x6a
        .with_ip_id(ip.id)
        .with_udp_src_port(63431)
        .with_ext(ExtHeaders {
            reth: Some(Reth { va: reth.va, rkey: reth.rkey, dma_len: 22 }),
            ..ExtHeaders::default()
        })
        .with_payload(p.payload);
    assert_eq!(b.pad(), 2);
    assert_eq!(&b.to_vec().unwrap(), orig);
}

/// The doc's §3 worked vector (ConnectX-4 Lx CNP): checked by hand, built from scratch.
#[test]
fn cnp_hand_vector() {
    let frame = from_hex(
        "e41d2dab2bc2 7cfe90643b32 0800
         45c2 003c 718c 4000 4011 9161 0a001101 0a001201
         0000 12b7 0028 0000
         81 00 ffff 40 000118 00 000000
         00000000000000000000000000000000
         82fd002a",
    );
    // The masked input, written out: LRH, IPv4 (TOS, TTL, checksum -> ff), UDP (checksum
    // -> ffff), BTH (byte 4 -> ff), the 16 reserved bytes.
    let masked = from_hex(
        "ffffffffffffffff
         45ff 003c 718c 4000 ff11 ffff 0a001101 0a001201
         0000 12b7 0028 ffff
         81 00 ffff ff 000118 00 000000
         00000000000000000000000000000000",
    );
    assert_eq!(icrc::crc32(&masked), 0x2a00_fd82);
    assert_eq!(icrc::compute(&frame), Ok(0x2a00_fd82));
    assert!(icrc::verify(&frame));

    let p = parse_frame_verified(&frame).unwrap();
    assert_eq!(p.bth.opcode, Opcode::CNP);
    assert!(p.bth.becn && !p.bth.fecn);
    assert_eq!(p.bth.dest_qp, 0x118);
    assert_eq!(p.ext().cnp, Some(CnpBody::default()));
    assert!(p.payload.is_empty());

    let ip = Ipv4Header {
        tos: 0xc2,
        id: 0x718c,
        ..Ipv4Header::new(Ipv4Addr::new(10, 0, 17, 1), Ipv4Addr::new(10, 0, 18, 1))
    };
    let bth = Bth { becn: true, ..Bth::new(Opcode::CNP, 0x118, 0) };
    let built = FrameBuilder::new(
        [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
        [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
        IpHeader::Ipv4(ip),
        bth,
    )
    .with_udp_src_port(0)
    .with_ext(ExtHeaders { cnp: Some(CnpBody::default()), ..ExtHeaders::default() })
    .to_vec()
    .unwrap();
    assert_eq!(built, frame);
}

/// scapy's synthetic UC SEND_ONLY: checks the values its test asserts, including a correct
/// non-zero UDP checksum over IPv4, which the builder reproduces.
#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn scapy_uc_send_only() {
    let (_, frame) =
        scapy_vectors().into_iter().find(|(n, _)| n == "scapy_uc_send_only_ipv4_synthetic").expect("vector present");
    let p = parse_frame_verified(&frame).unwrap();
    assert_eq!(p.bth.opcode, Opcode::UC_SEND_ONLY);
    assert!(p.bth.m);
    assert_eq!(p.bth.pad_cnt, 2);
    assert_eq!(p.bth.dest_qp, 211);
    assert_eq!(p.bth.psn, 13_571_856);
    assert_eq!(p.payload.len(), 18);
    assert_eq!(p.icrc, 0x78f3_53f3u32.swap_bytes());
    assert_eq!(&frame[frame.len() - 4..], &[0x78, 0xf3, 0x53, 0xf3]);
    let IpHeader::Ipv4(ip) = p.ip() else { panic!() };
    assert_eq!(ip.checksum, 0xb4d5);
    assert_eq!(p.udp().unwrap().checksum, 0xaca2);
    assert_eq!(p.udp_checksum_ok, Some(true));
    let b = FrameBuilder::from_packet(&p);
    assert_eq!(b.udp_checksum, UdpChecksum::Compute);
    assert_eq!(b.to_vec().unwrap(), frame);
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn rocev1_vectors() {
    for (name, frame) in scapy_vectors() {
        if !name.starts_with("scapy_rocev1") {
            continue;
        }
        let p = parse_frame_verified(&frame).unwrap();
        assert_eq!(p.version(), RoceVersion::V1, "{name}");
        assert!(p.udp().is_none());
        match name.as_str() {
            "scapy_rocev1_rc_write_only_connectx" => {
                assert_eq!(p.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
                assert_eq!(p.bth.pad_cnt, 3);
            }
            "scapy_rocev1_rc_ack_connectx" => {
                assert_eq!(p.bth.opcode, Opcode::RC_ACKNOWLEDGE);
                assert_eq!(p.aeth(), Some(Aeth::ack(5, 0)));
            }
            other => panic!("unexpected vector {other}"),
        }
    }
}
