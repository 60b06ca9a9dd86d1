//! Receive steering (`steering_dest_qp`, `steering_bth`) on frames built here: the destination
//! QP and BTH a full parse finds, for every encapsulation, and nothing for a frame that is not
//! RoCE or is cut short before its BTH ends.

use std::net::{Ipv4Addr, Ipv6Addr};
use umlx_wire::packet::{
    Bth, ETHERTYPE_ARP, ETHERTYPE_VLAN, ExtHeaders, FrameBuilder, Opcode, Reth, VlanTag, parse_frame, steering_bth,
    steering_dest_qp,
};

const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// A WRITE to QP `qpn` (all 24 bits used) with a BTH whose every other field is set too.
fn bth(qpn: u32) -> Bth {
    let mut b = Bth::new(Opcode::RC_RDMA_WRITE_ONLY, qpn, 0xABCDEF);
    (b.se, b.m, b.ack_req, b.fecn, b.becn, b.pkey) = (true, true, true, true, true, 0x8001);
    b
}

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let reth = ExtHeaders { reth: Some(Reth { va: 0x1000, rkey: 0x42, dma_len: 3 }), ..ExtHeaders::default() };
    let (v4a, v4b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let (v6a, v6b) = (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1), Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2));
    let vlan = Some(VlanTag { tpid: ETHERTYPE_VLAN, tci: 7 });
    let build = |f: FrameBuilder<'_>| f.with_ext(reth).with_payload(b"abc").to_vec().expect("builds");
    vec![
        ("IPv4", build(FrameBuilder::ipv4(A, B, v4a, v4b, bth(0xFEDCBA)))),
        ("IPv4, VLAN", build(FrameBuilder::ipv4(A, B, v4a, v4b, bth(0x000101)).with_vlan(vlan))),
        ("IPv6", build(FrameBuilder::ipv6(A, B, v6a, v6b, bth(0x800001)))),
        ("IPv6, VLAN", build(FrameBuilder::ipv6(A, B, v6a, v6b, bth(0x7FFFFF)).with_vlan(vlan))),
        ("RoCEv1", build(FrameBuilder::rocev1(A, B, &v6a.octets(), &v6b.octets(), bth(0x123456)))),
    ]
}

#[test]
fn steering_finds_the_bth_a_full_parse_finds() {
    for (what, f) in frames() {
        let p = parse_frame(&f).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(steering_bth(&f), Some(p.bth), "{what}");
        assert_eq!(steering_dest_qp(&f), Some(p.bth.dest_qp), "{what}");
        // The IBA's BTH: the destination QP is big-endian in bytes 5 - 7.
        let at = p.bth_offset + 5;
        assert_eq!(steering_dest_qp(&f), Some(u32::from_be_bytes([0, f[at], f[at + 1], f[at + 2]])), "{what}");
    }
}

#[test]
fn steering_finds_nothing_in_a_frame_that_is_not_roce_or_ends_inside_the_bth() {
    for (what, f) in frames() {
        let p = parse_frame(&f).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Cut one byte before the BTH's end: no BTH to read.
        let cut = &f[..p.bth_offset + Bth::LEN - 1];
        assert_eq!(steering_dest_qp(cut), None, "{what}, cut inside the BTH");
        assert_eq!(steering_bth(cut), None, "{what}, cut inside the BTH");
        // Exactly the BTH: enough to steer, though not to parse.
        assert_eq!(steering_dest_qp(&f[..p.bth_offset + Bth::LEN]), Some(p.bth.dest_qp), "{what}, cut after the BTH");
        if let Some(u) = p.udp() {
            // Another UDP destination port: not RoCEv2.
            let mut other = f.clone();
            let port_at = p.bth_offset - 8 + 2;
            assert_eq!(u16::from_be_bytes([other[port_at], other[port_at + 1]]), u.dst_port, "{what}");
            other[port_at + 1] ^= 1;
            assert_eq!(steering_dest_qp(&other), None, "{what}, UDP port {}", u.dst_port ^ 1);
        }
    }
    // ARP (and anything else that is not IP or RoCEv1).
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    assert_eq!(steering_dest_qp(&arp), None);
    assert_eq!(steering_dest_qp(&[]), None);
}
