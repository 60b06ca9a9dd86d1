//! Damaged input: truncations, flipped bytes, bad opcodes and lengths give errors (never a
//! panic); a bounded property test mutates frames at random and round-trips random valid
//! packets of every opcode.

mod wire_common;

use umlx_wire::packet::{
    Bth, ExtHeaders, FrameBuilder, IpHeader, Layer, Opcode, WireError, ip_frame_len, parse_frame, parse_frame_verified,
};
use umlx_wire::{arp, icrc};
use wire_common::{
    L3, XorShift, pcap_frames, random_builder, reference_icrc, reference_ipv6_udp_checksum_ok, scapy_vectors,
};

/// A few real frames of different shapes: UD CM MAD, WRITE_ONLY with pad, READ response,
/// ACK, RoCEv1 WRITE_ONLY, the CNP.
fn sample_frames() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (n, f, _) in pcap_frames("read2.pcap") {
        if [4, 8, 11, 13, 14].contains(&n) {
            out.push((format!("read2 #{n}"), f));
        }
    }
    for (name, f) in scapy_vectors() {
        if name.contains("rocev1_rc_write") || name.contains("cnp") {
            out.push((name, f));
        }
    }
    assert_eq!(out.len(), 7);
    out
}

/// Recomputes the ICRC of a RoCE frame in place (after a deliberate header edit).
fn fix_icrc(frame: &mut [u8]) {
    if let Ok(c) = icrc::compute(frame) {
        let n = frame.len();
        frame[n - 4..].copy_from_slice(&c.to_le_bytes());
    }
}

/// Recomputes an IPv4 header checksum at `l3`.
fn fix_ipv4_checksum(frame: &mut [u8], l3: usize) {
    frame[l3 + 10] = 0;
    frame[l3 + 11] = 0;
    let mut sum = 0u32;
    for c in frame[l3..l3 + 20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn truncation_at_every_length() {
    for (name, frame) in sample_frames() {
        assert!(parse_frame_verified(&frame).is_ok(), "{name}");
        let v1 = frame[12..14] == [0x89, 0x15];
        for n in 0..frame.len() {
            let cut = &frame[..n];
            let err = parse_frame(cut).expect_err(&format!("{name} cut at {n} parsed"));
            assert!(!icrc::verify(cut));
            assert!(icrc::compute(cut).is_err());
            match n {
                0..14 => assert_eq!(err, WireError::Truncated { layer: Layer::Ethernet, need: 14, have: n }),
                14..34 if !v1 => {
                    assert!(matches!(err, WireError::Truncated { layer: Layer::Ipv4, .. }), "{name} at {n}: {err}")
                }
                34..42 if !v1 => {
                    assert!(matches!(err, WireError::Truncated { layer: Layer::Udp, .. }), "{name} at {n}: {err}")
                }
                14..54 if v1 => {
                    assert!(matches!(err, WireError::Truncated { layer: Layer::Grh, .. }), "{name} at {n}: {err}")
                }
                _ => assert!(matches!(err, WireError::BadIpLength { .. }), "{name} at {n}: {err}"),
            }
            // Every error renders a message.
            assert!(!err.to_string().is_empty());
        }
    }
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn flipped_bits_are_caught() {
    for (name, frame) in sample_frames() {
        let p = parse_frame(&frame).unwrap();
        let (l3, bth) = (p.l3_offset, p.bth_offset);
        for i in 0..frame.len() {
            for bit in [0x01u8, 0x10, 0x80] {
                let mut m = frame.clone();
                m[i] ^= bit;
                let verdict = parse_frame_verified(&m);
                // Bits no check covers: the MACs (no FCS in a capture), BTH byte 4 (FECN,
                // BECN, resv6a: masked out of the ICRC by design, §3) and, in a GRH / IPv6
                // header (which has no checksum), the masked traffic class, flow label and
                // hop limit.
                let grh_masked = !matches!(p.ip(), IpHeader::Ipv4(_))
                    && ((i == l3 && bit & 0x0F != 0) || [l3 + 1, l3 + 2, l3 + 3, l3 + 7].contains(&i));
                if i < 12 || i == bth + 4 || grh_masked {
                    assert!(verdict.is_ok(), "{name} byte {i} bit {bit:#x}");
                    continue;
                }
                assert!(verdict.is_err(), "{name}: flipping bit {bit:#x} of byte {i} went unnoticed");
                // Past the L3 header start, a flip that still parses must fail the ICRC or
                // a checksum, never pass as a good packet.
                match parse_frame(&m) {
                    Ok(p) if i >= l3 => {
                        assert!(!p.icrc_ok || !p.ip_checksum_ok || p.udp_checksum_ok == Some(false), "{name} byte {i}")
                    }
                    _ => {}
                }
            }
        }
        // Payload bytes specifically fail the ICRC (not a structural check).
        if !p.payload.is_empty() {
            let mut m = frame.clone();
            let at = p.packet_end - 4 - p.pad.len() - 1;
            m[at] ^= 0x55;
            assert!(matches!(parse_frame_verified(&m), Err(WireError::BadIcrc { .. })));
            assert!(!parse_frame(&m).unwrap().icrc_ok);
            assert!(!icrc::verify(&m));
        }
        // The ICRC bytes themselves.
        let mut m = frame.clone();
        let n = m.len();
        m[n - 1] ^= 1;
        match parse_frame_verified(&m) {
            Err(WireError::BadIcrc { found, expected }) => {
                assert_eq!(expected, p.icrc);
                assert_eq!(found, p.icrc ^ 0x0100_0000);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn bad_opcodes() {
    let (_, ack) = sample_frames().into_iter().find(|(n, _)| n == "read2 #8").unwrap();
    let bth = 14 + 20 + 8;
    for op in [0x15u8, 0x18, 0x19, 0x1A, 0x1B, 0x1E, 0x1F, 0x2C, 0x3F, 0x56, 0x60, 0x66, 0x80, 0x82, 0xA0, 0xC0, 0xFF] {
        let mut m = ack.clone();
        m[bth] = op;
        fix_icrc(&mut m);
        assert_eq!(parse_frame(&m), Err(WireError::UnknownOpcode { opcode: Opcode(op) }), "opcode {op:#x}");
        assert!(!Opcode(op).is_known());
    }
    // An ACK (16 bytes of transport) relabelled as READ_REQUEST (needs 28 + 4).
    let mut m = ack.clone();
    m[bth] = Opcode::RC_RDMA_READ_REQUEST.0;
    fix_icrc(&mut m);
    assert_eq!(
        parse_frame(&m),
        Err(WireError::HeaderTooShort { opcode: Opcode::RC_RDMA_READ_REQUEST, need: 32, have: 20 })
    );
    // TVer 1.
    let mut m = ack.clone();
    m[bth + 1] |= 0x01;
    fix_icrc(&mut m);
    assert_eq!(parse_frame(&m), Err(WireError::BadTver { tver: 1 }));
    // PadCnt 3 on an ACK with no body.
    let mut m = ack.clone();
    m[bth + 1] |= 0x30;
    fix_icrc(&mut m);
    assert_eq!(parse_frame(&m), Err(WireError::BadPadCnt { pad_cnt: 3, available: 0 }));
    // A SEND_ONLY with 8 bytes relabelled ACK: AETH + 4 bytes of forbidden payload.
    let bthv = Bth::new(Opcode::RC_SEND_ONLY, 5, 6);
    let mut m = FrameBuilder::ipv4([2; 6], [4; 6], [10, 0, 0, 1].into(), [10, 0, 0, 2].into(), bthv)
        .with_payload(&[1, 2, 3, 4, 5, 6, 7, 8])
        .to_vec()
        .unwrap();
    m[bth] = Opcode::RC_ACKNOWLEDGE.0;
    fix_icrc(&mut m);
    assert_eq!(parse_frame(&m), Err(WireError::UnexpectedPayload { opcode: Opcode::RC_ACKNOWLEDGE, len: 4 }));
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn bad_lengths_and_headers() {
    let (_, f) = sample_frames().into_iter().find(|(n, _)| n == "read2 #11").unwrap();
    let l3 = 14;
    let edit = |at: usize, bytes: &[u8], fix_ip: bool| {
        let mut m = f.clone();
        m[at..at + bytes.len()].copy_from_slice(bytes);
        if fix_ip {
            fix_ipv4_checksum(&mut m, l3);
        }
        parse_frame(&m).map(|_| ())
    };
    let total = u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]);
    assert_eq!(
        edit(l3 + 2, &(total + 1).to_be_bytes(), true),
        Err(WireError::BadIpLength { declared: usize::from(total) + 1, available: f.len() - 14 })
    );
    assert_eq!(
        edit(l3 + 2, &(total - 4).to_be_bytes(), true),
        Err(WireError::UdpLengthMismatch { udp_len: total - 20, ip_payload_len: usize::from(total) - 24 })
    );
    assert_eq!(
        edit(l3 + 2, &20u16.to_be_bytes(), true),
        Err(WireError::BadIpLength { declared: 20, available: f.len() - 14 })
    );
    assert_eq!(
        edit(l3 + 24, &(total - 21).to_be_bytes(), false),
        Err(WireError::UdpLengthMismatch { udp_len: total - 21, ip_payload_len: usize::from(total) - 20 })
    );
    assert_eq!(edit(l3, &[0x44], true), Err(WireError::BadIhl { ihl: 4 }));
    assert_eq!(edit(l3, &[0x55], true), Err(WireError::BadIpVersion { version: 5, expected: 4 }));
    assert_eq!(edit(l3 + 9, &[6], true), Err(WireError::NotUdp { protocol: 6 }));
    assert_eq!(edit(l3 + 6, &[0x20, 0], true), Err(WireError::Fragmented));
    assert_eq!(edit(l3 + 6, &[0x40, 1], true), Err(WireError::Fragmented));
    assert_eq!(edit(l3 + 22, &4792u16.to_be_bytes(), false), Err(WireError::NotRocePort { dst_port: 4792 }));
    assert_eq!(edit(12, &[0x08, 0x06], false), Err(WireError::NotIp { ethertype: 0x0806 }));
    // IPv6 ethertype over an IPv4 header.
    assert_eq!(edit(12, &[0x86, 0xDD], false), Err(WireError::BadIpVersion { version: 4, expected: 6 }));
    // A wrong IPv4 checksum alone: parses, flagged, rejected when verified.
    let mut m = f.clone();
    m[l3 + 10] ^= 0xFF;
    let p = parse_frame(&m).unwrap();
    assert!(!p.ip_checksum_ok && p.icrc_ok);
    let IpHeader::Ipv4(h) = p.ip() else { panic!() };
    assert_eq!(
        parse_frame_verified(&m),
        Err(WireError::BadIpChecksum { found: h.checksum, expected: h.checksum ^ 0xFF00 })
    );
    // A non-zero but wrong UDP checksum.
    let mut m = f.clone();
    m[l3 + 26] = 0x12;
    assert!(matches!(parse_frame_verified(&m), Err(WireError::BadUdpChecksum { found: 0x1200, .. })));
    // Ethernet padding after the IP packet is ignored.
    let mut m = f.clone();
    m.extend_from_slice(&[0; 6]);
    let p = parse_frame_verified(&m).unwrap();
    assert_eq!(p.trailer(), &[0; 6]);
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn random_mutations_never_panic() {
    let mut rng = XorShift::new(0x5EED_0001);
    let mut seeds: Vec<Vec<u8>> = sample_frames().into_iter().map(|(_, f)| f).collect();
    let pool = rng.bytes(4096);
    for (i, &op) in Opcode::ALL_KNOWN.iter().enumerate() {
        let l3 = [L3::V4, L3::V6, L3::V1][i % 3];
        seeds.push(random_builder(&mut rng, op, l3, &pool).to_vec().unwrap());
    }
    let mut parsed_ok = 0;
    let mut icrc_caught = 0;
    for iter in 0..20_000u32 {
        let mut m = seeds[rng.below(seeds.len() as u64) as usize].clone();
        match rng.below(6) {
            0 => {
                let n = 1 + rng.below(4);
                for _ in 0..n {
                    let at = rng.below(m.len() as u64) as usize;
                    m[at] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let at = rng.below(m.len() as u64) as usize;
                m[at] = rng.u8();
            }
            2 => m.truncate(rng.below(m.len() as u64 + 1) as usize),
            3 => {
                let at = rng.below(m.len() as u64 + 1) as usize;
                let n = 1 + rng.below(16) as usize;
                let extra = rng.bytes(n);
                m.splice(at..at, extra);
            }
            4 => {
                // A length field or the opcode set to something random.
                let at = [16usize, 17, 38, 39, 42, 18, 19, 58, 59, 62][rng.below(10) as usize];
                if at < m.len() {
                    m[at] = rng.u8();
                }
            }
            _ => {
                let n = rng.below(128) as usize;
                m = rng.bytes(n);
            }
        }
        let r = parse_frame(&m);
        let _ = icrc::verify(&m);
        let _ = icrc::compute(&m);
        let _ = arp::parse(&m);
        let _ = arp::reply(&m, [2; 6], &["10.0.0.1".parse().unwrap()]);
        if let Ok(p) = r {
            parsed_ok += 1;
            if !p.icrc_ok {
                icrc_caught += 1;
            }
            // Whatever parses rebuilds and re-parses to the same fields.
            let rebuilt = FrameBuilder::from_packet(&p)
                .to_vec()
                .unwrap_or_else(|e| panic!("iteration {iter}: parsed packet does not rebuild: {e}"));
            let q = parse_frame_verified(&rebuilt).unwrap();
            assert_eq!((q.bth, q.ext(), q.payload), (p.bth, p.ext(), p.payload), "iteration {iter}");
            assert_eq!(q.eth().vlan, p.eth().vlan);
        }
    }
    // The mutations must have exercised both outcomes.
    assert!(parsed_ok > 1000, "only {parsed_ok} mutated frames parsed");
    assert!(icrc_caught > 500, "only {icrc_caught} ICRC failures seen");
}

#[test]
fn random_valid_packets_round_trip_for_every_opcode() {
    let mut rng = XorShift::new(0x00C0_FFEE);
    let pool = rng.bytes(4096);
    let mut buf = vec![0u8; 9000];
    let mut rebuilt = Vec::new();
    let mut count = 0;
    let mut ipv6_csums = 0;
    for &op in Opcode::ALL_KNOWN {
        for l3 in [L3::V4, L3::V6, L3::V1] {
            for _ in 0..12 {
                let b = random_builder(&mut rng, op, l3, &pool);
                let len = b.build_into(&mut buf).unwrap_or_else(|e| panic!("{op}: {e}"));
                assert_eq!(len, b.frame_len());
                let frame = &buf[..len];
                let p = parse_frame_verified(frame).unwrap_or_else(|e| panic!("{op} {l3:?}: {e}"));
                assert_eq!(p.bth, Bth { pad_cnt: b.pad(), ..b.bth }, "{op} {l3:?}");
                let ext = p.ext();
                assert_eq!(ext, b.ext, "{op}");
                // Each header read alone, at its offset in the opcode's set, is the one the whole
                // decode finds in wire order.
                assert_eq!(
                    (p.reth(), p.aeth(), p.deth(), p.imm_dt(), p.ieth(), p.atomic_eth(), p.atomic_ack_eth()),
                    (ext.reth, ext.aeth, ext.deth, ext.imm_dt, ext.ieth, ext.atomic_eth, ext.atomic_ack_eth),
                    "{op} {l3:?}"
                );
                assert_eq!(p.payload, b.payload, "{op}");
                assert!(p.pad.iter().all(|&x| x == 0));
                // Independent of the shared ICRC / checksum code (no real IPv6 vectors exist).
                assert_eq!(reference_icrc(frame), p.icrc, "{op} {l3:?}");
                if l3 == L3::V6 && b.eth.vlan.is_none() {
                    assert!(reference_ipv6_udp_checksum_ok(frame), "{op}");
                    ipv6_csums += usize::from(p.udp().unwrap().checksum != 0);
                }
                assert_eq!(p.eth().src, b.eth.src);
                assert_eq!(p.eth().dst, b.eth.dst);
                assert_eq!(p.eth().vlan, b.eth.vlan);
                // The GIDs read straight from the frame (what a receiving port compares).
                assert_eq!((p.src_gid(), p.dst_gid()), (b.ip.src_gid(), b.ip.dst_gid()), "{op} {l3:?}");
                match (p.ip(), b.ip) {
                    (IpHeader::Ipv4(x), IpHeader::Ipv4(y)) => {
                        assert_eq!(
                            (x.src, x.dst, x.tos, x.ttl, x.id, x.dont_fragment),
                            (y.src, y.dst, y.tos, y.ttl, y.id, y.dont_fragment)
                        );
                    }
                    (IpHeader::Ipv6(x), IpHeader::Ipv6(y)) | (IpHeader::Grh(x), IpHeader::Grh(y)) => {
                        assert_eq!(
                            (x.src, x.dst, x.traffic_class, x.flow_label, x.hop_limit),
                            (y.src, y.dst, y.traffic_class, y.flow_label, y.hop_limit)
                        );
                    }
                    (x, y) => panic!("L3 changed: {x:?} vs {y:?}"),
                }
                if l3 != L3::V1 {
                    assert_eq!(p.udp_src_port(), b.udp_src_port);
                }
                // And back: the parsed fields rebuild the same bytes, over a buffer that held
                // the complement of each (and more): a byte the builder left unwritten differs.
                rebuilt.clear();
                rebuilt.extend(frame.iter().map(|&x| !x));
                rebuilt.resize(frame.len() + 64, 0xa5);
                FrameBuilder::from_packet(&p).build_vec(&mut rebuilt).unwrap();
                assert_eq!(rebuilt.as_slice(), frame, "{op} {l3:?}");
                // The payload written in place by the caller (as the sim's DMA does) gives the
                // same bytes; a fill that fails gives no frame.
                let in_place = FrameBuilder { payload: &[], ..b };
                rebuilt.clear();
                rebuilt.extend(frame.iter().map(|&x| !x));
                let filled = in_place.build_vec_filled(b.payload.len(), &mut rebuilt, |slot| {
                    slot.copy_from_slice(b.payload);
                    true
                });
                assert_eq!(filled, Ok(Some(len)), "{op} {l3:?}");
                assert_eq!(rebuilt.as_slice(), frame, "{op} {l3:?}: payload filled in place");
                assert_eq!(in_place.build_vec_filled(b.payload.len(), &mut rebuilt, |_| false), Ok(None));
                count += 1;
            }
        }
    }
    assert_eq!(count, Opcode::ALL_KNOWN.len() * 3 * 12);
    assert!(ipv6_csums > 50, "only {ipv6_csums} IPv6 UDP checksums checked");
}

#[test]
fn builder_rejects_invalid_input() {
    use umlx_wire::packet::{BuildError, ExtKind, Reth};
    let b = |op| FrameBuilder::ipv4([2; 6], [4; 6], [10, 0, 0, 1].into(), [10, 0, 0, 2].into(), Bth::new(op, 1, 2));
    let mut buf = [0u8; 2048];
    assert_eq!(b(Opcode(0x15)).build_into(&mut buf), Err(BuildError::UnknownOpcode { opcode: Opcode(0x15) }));
    assert_eq!(
        b(Opcode::RC_RDMA_WRITE_ONLY).build_into(&mut buf),
        Err(BuildError::MissingHeader { opcode: Opcode::RC_RDMA_WRITE_ONLY, header: ExtKind::Reth })
    );
    let reth = ExtHeaders { reth: Some(Reth::default()), ..ExtHeaders::default() };
    assert_eq!(
        b(Opcode::RC_SEND_ONLY).with_ext(reth).build_into(&mut buf),
        Err(BuildError::UnexpectedHeader { opcode: Opcode::RC_SEND_ONLY, header: ExtKind::Reth })
    );
    assert_eq!(
        b(Opcode::RC_RDMA_READ_REQUEST).with_ext(reth).with_payload(&[1]).build_into(&mut buf),
        Err(BuildError::UnexpectedPayload { opcode: Opcode::RC_RDMA_READ_REQUEST, len: 1 })
    );
    let mut big = b(Opcode::RC_SEND_ONLY);
    big.bth.dest_qp = 1 << 24;
    assert!(matches!(big.build_into(&mut buf), Err(BuildError::FieldRange { field: "BTH DestQP", .. })));
    let payload = vec![0u8; 70_000];
    assert!(matches!(b(Opcode::RC_SEND_ONLY).with_payload(&payload).to_vec(), Err(BuildError::TooLong { .. })));
    let mut small = [0u8; 40];
    assert_eq!(b(Opcode::RC_SEND_ONLY).build_into(&mut small), Err(BuildError::BufferTooSmall { need: 58, have: 40 }));
    // The smallest frame pads to 60 on request.
    let mut v = Vec::new();
    let mut s = b(Opcode::RC_SEND_ONLY);
    assert_eq!(s.build_vec(&mut v), Ok(58));
    s.pad_to_min_frame = true;
    assert_eq!(s.build_vec(&mut v), Ok(60));
    let p = parse_frame_verified(&v).unwrap();
    assert_eq!(p.trailer(), &[0, 0]);
}

/// A template refuses what its builder refuses: a bad field of the path when it is made, a bad
/// packet when a frame is built of it (leaving nothing half built that looks valid).
#[test]
fn frame_template_rejects_what_the_builder_rejects() {
    use umlx_wire::packet::{BuildError, ExtKind, Ipv6Header};
    let v6 = |fl| {
        let ip = Ipv6Header {
            flow_label: fl,
            ..Ipv6Header::new([0xfe80, 0, 0, 0, 0, 0, 0, 1].into(), [0xfe80, 0, 0, 0, 0, 0, 0, 2].into())
        };
        FrameBuilder::new([2; 6], [4; 6], umlx_wire::packet::IpHeader::Ipv6(ip), Bth::new(Opcode::RC_SEND_ONLY, 1, 2))
    };
    assert!(matches!(v6(1 << 20).template(), Err(BuildError::FieldRange { field: "flow label", .. })));
    let t = v6(7).template().unwrap();
    let none = ExtHeaders::default();
    let mut v = Vec::new();
    let write = Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 1, 2);
    assert_eq!(
        t.build_vec(&write, &none, &[1, 2], &mut v),
        Err(BuildError::MissingHeader { opcode: Opcode::RC_RDMA_WRITE_ONLY, header: ExtKind::Reth })
    );
    let mut far = Bth::new(Opcode::RC_SEND_ONLY, 1, 2);
    far.psn = 1 << 24;
    assert!(matches!(t.build_vec(&far, &none, &[], &mut v), Err(BuildError::FieldRange { field: "BTH PSN", .. })));
    assert!(matches!(
        t.build_vec(&Bth::new(Opcode::RC_SEND_ONLY, 1, 2), &none, &vec![0; 70_000], &mut v),
        Err(BuildError::TooLong { .. })
    ));
    // A fill that fails leaves `Ok(None)`; one that succeeds gives the builder's frame.
    let send = Bth::new(Opcode::RC_SEND_ONLY, 9, 77);
    assert_eq!(t.build_vec_filled(&send, &none, 5, &mut v, |_| false), Ok(None));
    let n = t.build_vec_filled(&send, &none, 5, &mut v, |slot| {
        slot.copy_from_slice(b"hello");
        true
    });
    let want = FrameBuilder { bth: send, ..v6(7) }.with_payload(b"hello").to_vec().unwrap();
    assert_eq!((n, &v[..]), (Ok(Some(want.len())), &want[..]));
    let p = parse_frame_verified(&v).unwrap();
    assert_eq!((p.payload, p.bth.psn, p.bth.pad_cnt), (&b"hello"[..], 77, 3));
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn wire_stats_count_by_reason() {
    use umlx_wire::WireStats;
    let frames = sample_frames();
    let mut st = WireStats::new();
    let mut expect_v2 = 0;
    let mut expect_v1 = 0;
    for (_, f) in &frames {
        let verdict = parse_frame_verified(f);
        match verdict.as_ref().map(|p| p.version()) {
            Ok(umlx_wire::packet::RoceVersion::V1) => expect_v1 += 1,
            Ok(_) => expect_v2 += 1,
            Err(e) => panic!("{e}"),
        }
        st.record_rx(f.len(), &verdict);
    }
    let (_, good) = &frames[0];
    let mut bad_icrc = good.clone();
    let n = bad_icrc.len();
    bad_icrc[n - 1] ^= 1;
    st.record_rx(n, &parse_frame_verified(&bad_icrc));
    st.record_rx(10, &parse_frame_verified(&good[..10]));
    st.record_rx(42, &parse_frame_verified(&arp::arp_request([2; 6], [1, 1, 1, 1].into(), [1, 1, 1, 2].into())));
    let mut unknown = good.clone();
    unknown[42] = 0xC5;
    fix_icrc(&mut unknown);
    st.record_rx(n, &parse_frame_verified(&unknown));
    st.record_tx(100);

    assert_eq!(st.rx_frames, frames.len() as u64 + 4);
    assert_eq!((st.rx_roce_v2, st.rx_roce_v1), (expect_v2, expect_v1));
    assert_eq!(st.drop_bad_icrc, 1);
    assert_eq!(st.drop_truncated, 1);
    assert_eq!(st.rx_not_roce, 1);
    assert_eq!(st.drop_unknown_opcode, 1);
    assert_eq!(st.dropped(), 3);
    assert_eq!((st.tx_frames, st.tx_bytes), (1, 100));
}

#[test]
fn an_ip_frame_gives_its_own_length_and_no_other_frame_does() {
    let mut rng = XorShift::new(0x1EF7);
    let pool = rng.bytes(4096);
    let mut seen_vlan = 0;
    for &op in Opcode::ALL_KNOWN {
        for l3 in [L3::V4, L3::V6, L3::V1] {
            for _ in 0..4 {
                let b = random_builder(&mut rng, op, l3, &pool);
                seen_vlan += usize::from(b.eth.vlan.is_some());
                let mut frame = b.to_vec().unwrap();
                let len = frame.len();
                // The builder pads a frame to Ethernet's 60 bytes; a longer one ends with its packet.
                let packet_end = parse_frame_verified(&frame).unwrap().packet_end;
                assert!(packet_end == len || len == 60, "{op} {l3:?}");
                let want = (l3 != L3::V1).then_some(packet_end);
                assert_eq!(ip_frame_len(&frame), want, "{op} {l3:?}");
                // Padding after the IP packet is not part of it.
                frame.extend_from_slice(&[0; 18]);
                assert_eq!(ip_frame_len(&frame), want, "{op} {l3:?} padded");
                // A frame cut inside its IP header says nothing; one cut after says its length.
                let in_ip_header = 14 + 4 * usize::from(b.eth.vlan.is_some()) + 19;
                assert_eq!(ip_frame_len(&frame[..in_ip_header]), None, "{op} {l3:?} cut");
                assert_eq!(ip_frame_len(&frame[..packet_end - 1]), want, "{op} {l3:?} cut after its header");
            }
        }
    }
    assert!(seen_vlan > 0, "some frames had a VLAN tag");
    let (mac, v4, v6) = ([2, 0, 0, 0, 0, 1], "10.0.0.1".parse().unwrap(), "fe80::1".parse().unwrap());
    let arp_request = arp::arp_request(mac, v4, "10.0.0.2".parse().unwrap());
    assert_eq!(ip_frame_len(&arp_request), None, "ARP is not IP");
    let solicitation = arp::neighbor_solicitation(mac, v6, "fe80::2".parse().unwrap());
    assert_eq!(ip_frame_len(&solicitation), Some(solicitation.len()), "a neighbour solicitation is IPv6");
    assert_eq!(ip_frame_len(&[]), None);
}
