//! ARP and IPv6 neighbour discovery: replies checked field by field against hand-built
//! requests, and a full resolve-and-learn exchange.

mod wire_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use umlx_wire::arp::{self, NeighborOp};
use umlx_wire::packet::VlanTag;
use wire_common::from_hex;

const MY_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const PEER_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// The Internet checksum written independently of the library: 0 means a valid packet.
fn inet_sum(parts: &[&[u8]]) -> u16 {
    let mut acc = 0u32;
    for p in parts {
        for c in p.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    }
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

fn icmpv6_valid(ipv6: &[u8]) -> bool {
    let plen = usize::from(u16::from_be_bytes([ipv6[4], ipv6[5]]));
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ipv6[8..40]);
    pseudo.extend_from_slice(&(plen as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    inet_sum(&[&pseudo, &ipv6[40..40 + plen]]) == 0
}

/// Recomputes the ICMPv6 checksum of an untagged frame after an edit.
fn fix_icmpv6(frame: &mut [u8]) {
    let ip = &mut frame[14..];
    ip[42] = 0;
    ip[43] = 0;
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[8..40]);
    pseudo.extend_from_slice(&(plen as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    let c = inet_sum(&[&pseudo, &ip[40..40 + plen]]);
    ip[42..44].copy_from_slice(&c.to_be_bytes());
}

/// A hand-written ARP request: who has 192.168.10.1? tell 192.168.10.2 (52:54:00:12:34:56).
fn arp_request_bytes() -> Vec<u8> {
    from_hex(
        "ffffffffffff 525400123456 0806
         0001 0800 06 04 0001
         525400123456 c0a80a02
         000000000000 c0a80a01",
    )
}

#[test]
fn arp_reply_field_by_field() {
    let me: IpAddr = "192.168.10.1".parse().unwrap();
    let r = arp::reply(&arp_request_bytes(), MY_MAC, &[me]).expect("a reply");
    assert_eq!(r.len(), 60, "padded to the Ethernet minimum");
    assert_eq!(&r[0..6], &PEER_MAC, "Ethernet dst = requester");
    assert_eq!(&r[6..12], &MY_MAC, "Ethernet src = us");
    assert_eq!(&r[12..14], &[0x08, 0x06], "ethertype ARP");
    assert_eq!(&r[14..16], &[0x00, 0x01], "HTYPE Ethernet");
    assert_eq!(&r[16..18], &[0x08, 0x00], "PTYPE IPv4");
    assert_eq!((r[18], r[19]), (6, 4), "HLEN, PLEN");
    assert_eq!(&r[20..22], &[0x00, 0x02], "oper = reply");
    assert_eq!(&r[22..28], &MY_MAC, "SHA");
    assert_eq!(&r[28..32], &[192, 168, 10, 1], "SPA = the requested address");
    assert_eq!(&r[32..38], &PEER_MAC, "THA = requester");
    assert_eq!(&r[38..42], &[192, 168, 10, 2], "TPA = requester");
    assert!(r[42..].iter().all(|&b| b == 0), "zero padding");

    // What the requester learns from it.
    assert_eq!(arp::learn(&r), Some((me, MY_MAC)));

    // Not ours, or not a request: no reply.
    let other: IpAddr = "192.168.10.9".parse().unwrap();
    assert_eq!(arp::reply(&arp_request_bytes(), MY_MAC, &[other]), None);
    assert_eq!(arp::reply(&r, MY_MAC, &[me]), None, "a reply is not answered");
    let v6: IpAddr = "::1".parse().unwrap();
    assert_eq!(arp::reply(&arp_request_bytes(), MY_MAC, &[v6]), None);
    // Damaged requests.
    let mut bad = arp_request_bytes();
    bad[19] = 16; // PLEN
    assert_eq!(arp::reply(&bad, MY_MAC, &[me]), None);
    for n in 0..arp_request_bytes().len() {
        assert_eq!(arp::reply(&arp_request_bytes()[..n], MY_MAC, &[me]), None);
    }
}

#[test]
fn arp_reply_keeps_the_vlan_tag() {
    let mut req = arp_request_bytes();
    req.splice(12..12, [0x81, 0x00, 0x20, 0x64]); // PCP 1, VID 100
    let me: IpAddr = "192.168.10.1".parse().unwrap();
    let r = arp::reply(&req, MY_MAC, &[me]).unwrap();
    assert_eq!(&r[12..16], &[0x81, 0x00, 0x20, 0x64]);
    assert_eq!(&r[16..18], &[0x08, 0x06]);
    assert_eq!(&r[24..26], &[0x00, 0x02]);
    let m = arp::parse(&r).unwrap();
    assert_eq!(m.vlan, Some(VlanTag::new(1, 100)));
}

/// A hand-written neighbour solicitation from fe80::5054:ff:fe12:3456 for 2001:db8::1,
/// sent to the solicited-node group, with a source link-layer option. The checksum is
/// computed here, independently.
fn ns_bytes(src: &str, hop_limit: u8) -> Vec<u8> {
    let src: Ipv6Addr = src.parse().unwrap();
    let dst: Ipv6Addr = "ff02::1:ff00:1".parse().unwrap();
    let target: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    if !src.is_unspecified() {
        icmp.extend_from_slice(&[1, 1]);
        icmp.extend_from_slice(&PEER_MAC);
    }
    let mut ip = from_hex("60000000");
    ip.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[58, hop_limit]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[8..40]);
    pseudo.extend_from_slice(&(icmp.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    let c = inet_sum(&[&pseudo, &icmp]);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = from_hex("3333ff000001 525400123456 86dd");
    f.extend(ip);
    f.extend(icmp);
    f
}

#[test]
fn neighbor_advertisement_field_by_field() {
    let me: IpAddr = "2001:db8::1".parse().unwrap();
    let ns = ns_bytes("fe80::5054:ff:fe12:3456", 255);
    assert!(icmpv6_valid(&ns[14..]));
    let r = arp::reply(&ns, MY_MAC, &[me]).expect("an advertisement");
    assert_eq!(r.len(), 14 + 40 + 32);
    assert_eq!(&r[0..6], &PEER_MAC, "to the solicitor's link-layer address");
    assert_eq!(&r[6..12], &MY_MAC);
    assert_eq!(&r[12..14], &[0x86, 0xdd]);
    let ip = &r[14..];
    assert_eq!(&ip[0..4], &[0x60, 0, 0, 0], "version 6, TC 0, flow 0");
    assert_eq!(&ip[4..6], &[0, 32], "payload length");
    assert_eq!(ip[6], 58, "next header ICMPv6");
    assert_eq!(ip[7], 255, "hop limit");
    assert_eq!(&ip[8..24], &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets(), "src = target");
    assert_eq!(&ip[24..40], &"fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap().octets(), "dst = solicitor");
    let icmp = &ip[40..];
    assert_eq!((icmp[0], icmp[1]), (136, 0), "type NA, code 0");
    assert!(icmpv6_valid(ip), "ICMPv6 checksum");
    assert_eq!(icmp[4], 0x60, "flags: Solicited + Override, not Router");
    assert_eq!(&icmp[5..8], &[0, 0, 0]);
    assert_eq!(&icmp[8..24], &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets(), "target");
    assert_eq!((icmp[24], icmp[25]), (2, 1), "target link-layer option, 8 bytes");
    assert_eq!(&icmp[26..32], &MY_MAC);

    let m = arp::parse(&r).unwrap();
    assert_eq!(m.op, NeighborOp::Advertisement);
    assert_eq!(m.nd_flags, 0x60);
    assert_eq!(arp::learn(&r), Some((me, MY_MAC)));
}

#[test]
fn neighbor_solicitation_edge_cases() {
    let me: IpAddr = "2001:db8::1".parse().unwrap();
    // Duplicate address detection (source ::): answer to all-nodes, S clear.
    let dad = ns_bytes("::", 255);
    let r = arp::reply(&dad, MY_MAC, &[me]).unwrap();
    assert_eq!(&r[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
    assert_eq!(&r[14 + 24..14 + 40], &"ff02::1".parse::<Ipv6Addr>().unwrap().octets());
    assert_eq!(r[14 + 40 + 4], 0x20, "Override only");
    assert!(icmpv6_valid(&r[14..]));
    // RFC 4861: hop limit must be 255.
    assert_eq!(arp::reply(&ns_bytes("fe80::2", 64), MY_MAC, &[me]), None);
    // Bad checksum.
    let mut bad = ns_bytes("fe80::2", 255);
    bad[14 + 40 + 2] ^= 1;
    assert_eq!(arp::reply(&bad, MY_MAC, &[me]), None);
    // Another target.
    let other: IpAddr = "2001:db8::99".parse().unwrap();
    assert_eq!(arp::reply(&ns_bytes("fe80::2", 255), MY_MAC, &[other]), None);
    // Option of length 0 (RFC 4861 §4.6: discard).
    let mut zero_opt = ns_bytes("fe80::2", 255);
    let n = zero_opt.len();
    zero_opt[n - 7] = 0;
    fix_icmpv6(&mut zero_opt);
    assert!(icmpv6_valid(&zero_opt[14..]));
    assert_eq!(arp::reply(&zero_opt, MY_MAC, &[me]), None);
    // Truncations never panic and never answer.
    let good = ns_bytes("fe80::2", 255);
    for n in 0..good.len() {
        assert_eq!(arp::reply(&good[..n], MY_MAC, &[me]), None);
    }
}

#[test]
fn resolve_and_learn_both_families() {
    let a_mac = MY_MAC;
    let b_mac = PEER_MAC;
    let a4 = Ipv4Addr::new(10, 1, 0, 1);
    let b4 = Ipv4Addr::new(10, 1, 0, 2);
    let req = arp::arp_request(a_mac, a4, b4);
    assert_eq!(req.len(), 60);
    assert_eq!(&req[0..6], &arp::BROADCAST_MAC);
    let m = arp::parse(&req).unwrap();
    assert_eq!(m.op, NeighborOp::ArpRequest);
    assert_eq!((m.sender_ip, m.sender_mac, m.target_ip), (IpAddr::V4(a4), Some(a_mac), IpAddr::V4(b4)));
    assert_eq!(m.target_mac, Some([0; 6]));
    assert_eq!(arp::learn(&req), None, "requests teach nothing through learn()");
    let rep = arp::reply(&req, b_mac, &[IpAddr::V4(b4)]).unwrap();
    assert_eq!(&rep[0..6], &a_mac);
    assert_eq!(arp::learn(&rep), Some((IpAddr::V4(b4), b_mac)));

    let a6: Ipv6Addr = "fd00::a".parse().unwrap();
    let b6: Ipv6Addr = "fd00::1:2:b".parse().unwrap();
    let ns = arp::request(a_mac, IpAddr::V6(a6), IpAddr::V6(b6)).unwrap();
    assert_eq!(&ns[0..6], &[0x33, 0x33, 0xff, 0x02, 0x00, 0x0b]);
    assert_eq!(&ns[14 + 24..14 + 40], &arp::solicited_node(b6).octets());
    assert_eq!(arp::solicited_node(b6), "ff02::1:ff02:b".parse::<Ipv6Addr>().unwrap());
    assert!(icmpv6_valid(&ns[14..]));
    let m = arp::parse(&ns).unwrap();
    assert_eq!((m.op, m.sender_mac), (NeighborOp::Solicitation, Some(a_mac)));
    let na = arp::reply(&ns, b_mac, &[IpAddr::V6(b6)]).unwrap();
    assert_eq!(&na[0..6], &a_mac);
    assert_eq!(arp::learn(&na), Some((IpAddr::V6(b6), b_mac)));

    assert_eq!(arp::request(a_mac, IpAddr::V4(a4), IpAddr::V6(b6)), None);
}
