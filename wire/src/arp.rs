//! Address resolution on the simulated port: ARP (IPv4, RFC 826) and IPv6 neighbour
//! discovery (RFC 4861 solicitations and advertisements).
//!
//! rxe sends through the kernel's normal neighbour path, so the model's port must answer
//! ARP requests and neighbour solicitations for its own addresses or rxe never sends it
//! anything (wire doc §4.1). This module owns those frames:
//!
//! * [`reply`]: the answer to a request/solicitation aimed at one of our addresses;
//! * [`arp_request`], [`neighbor_solicitation`], [`request`]: resolve a peer;
//! * [`parse`], [`learn`]: read ARP and ND frames, so a port can learn a peer's MAC.
//!
//! One VLAN tag is understood; a reply carries the request's tag. Frames shorter than the
//! Ethernet minimum are zero-padded to 60 bytes. ND frames must carry hop limit 255 and a
//! correct ICMPv6 checksum, as RFC 4861 requires of a receiver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::inet;
use super::packet::{ETHERTYPE_ARP, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, MacAddr, VlanTag};

/// The Ethernet broadcast address.
pub const BROADCAST_MAC: MacAddr = [0xFF; 6];
/// IPv6 next header value of ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;
/// ICMPv6 type of a neighbour solicitation.
pub const ICMPV6_NEIGHBOR_SOLICITATION: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const ICMPV6_NEIGHBOR_ADVERTISEMENT: u8 = 136;

const ARP_REQUEST: u16 = 1;
const ARP_REPLY: u16 = 2;
const ND_OPT_SOURCE_LL: u8 = 1;
const ND_OPT_TARGET_LL: u8 = 2;
const NA_FLAG_SOLICITED: u8 = 0x40;
const NA_FLAG_OVERRIDE: u8 = 0x20;
const MIN_FRAME: usize = 60;

/// What kind of address-resolution message a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NeighborOp {
    /// ARP request (opcode 1).
    ArpRequest,
    /// ARP reply (opcode 2).
    ArpReply,
    /// ICMPv6 neighbour solicitation (type 135).
    Solicitation,
    /// ICMPv6 neighbour advertisement (type 136).
    Advertisement,
}

/// A decoded ARP or neighbour discovery message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NeighborMsg {
    /// Which message.
    pub op: NeighborOp,
    /// Ethernet source of the frame.
    pub eth_src: MacAddr,
    /// Ethernet destination of the frame.
    pub eth_dst: MacAddr,
    /// VLAN tag of the frame.
    pub vlan: Option<VlanTag>,
    /// Sender protocol address (ARP SPA, or the IPv6 source address).
    pub sender_ip: IpAddr,
    /// Sender hardware address (ARP SHA, or the NS source link-layer option).
    pub sender_mac: Option<MacAddr>,
    /// Target protocol address (ARP TPA, or the ND target address).
    pub target_ip: IpAddr,
    /// Target hardware address (ARP THA, or the NA target link-layer option).
    pub target_mac: Option<MacAddr>,
    /// NA flags byte (R 0x80, S 0x40, O 0x20); 0 otherwise.
    pub nd_flags: u8,
}

fn mac_at(b: &[u8], at: usize) -> Option<MacAddr> {
    b.get(at..at + 6)?.try_into().ok()
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Ethernet header: (dst, src, vlan, ethertype, offset of the L3 header).
fn l2(frame: &[u8]) -> Option<(MacAddr, MacAddr, Option<VlanTag>, u16, usize)> {
    let dst = mac_at(frame, 0)?;
    let src = mac_at(frame, 6)?;
    let et = be16(frame, 12)?;
    if et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ {
        let tag = VlanTag { tpid: et, tci: be16(frame, 14)? };
        Some((dst, src, Some(tag), be16(frame, 16)?, 18))
    } else {
        Some((dst, src, None, et, 14))
    }
}

fn put_l2(out: &mut Vec<u8>, dst: MacAddr, src: MacAddr, vlan: Option<VlanTag>, et: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    if let Some(t) = vlan {
        out.extend_from_slice(&t.tpid.to_be_bytes());
        out.extend_from_slice(&t.tci.to_be_bytes());
    }
    out.extend_from_slice(&et.to_be_bytes());
}

fn pad_min(mut v: Vec<u8>) -> Vec<u8> {
    if v.len() < MIN_FRAME {
        v.resize(MIN_FRAME, 0);
    }
    v
}

/// Parses the ND options area: (source link-layer, target link-layer). `None` if an option
/// has length 0 or runs past the end (RFC 4861 §4.6: such a packet is discarded).
fn nd_options(mut opts: &[u8]) -> Option<(Option<MacAddr>, Option<MacAddr>)> {
    let (mut src, mut tgt) = (None, None);
    while !opts.is_empty() {
        let ty = *opts.first()?;
        let len = usize::from(*opts.get(1)?) * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        match ty {
            ND_OPT_SOURCE_LL if len >= 8 => src = mac_at(opts, 2),
            ND_OPT_TARGET_LL if len >= 8 => tgt = mac_at(opts, 2),
            _ => {}
        }
        opts = &opts[len..];
    }
    Some((src, tgt))
}

/// Decodes an ARP (Ethernet/IPv4) or ICMPv6 NS/NA frame; `None` for anything else or a
/// malformed one (bad ICMPv6 checksum, hop limit not 255, bad options).
pub fn parse(frame: &[u8]) -> Option<NeighborMsg> {
    let (eth_dst, eth_src, vlan, et, off) = l2(frame)?;
    let p = frame.get(off..)?;
    match et {
        ETHERTYPE_ARP => {
            if be16(p, 0)? != 1 || be16(p, 2)? != 0x0800 || *p.get(4)? != 6 || *p.get(5)? != 4 {
                return None;
            }
            let op = match be16(p, 6)? {
                ARP_REQUEST => NeighborOp::ArpRequest,
                ARP_REPLY => NeighborOp::ArpReply,
                _ => return None,
            };
            let spa: [u8; 4] = p.get(14..18)?.try_into().ok()?;
            let tpa: [u8; 4] = p.get(24..28)?.try_into().ok()?;
            Some(NeighborMsg {
                op,
                eth_src,
                eth_dst,
                vlan,
                sender_ip: IpAddr::V4(Ipv4Addr::from(spa)),
                sender_mac: mac_at(p, 8),
                target_ip: IpAddr::V4(Ipv4Addr::from(tpa)),
                target_mac: mac_at(p, 18),
                nd_flags: 0,
            })
        }
        ETHERTYPE_IPV6 => {
            if p.first()? >> 4 != 6 || *p.get(6)? != IPPROTO_ICMPV6 || *p.get(7)? != 255 {
                return None;
            }
            let plen = usize::from(be16(p, 4)?);
            let icmp = p.get(40..40 + plen)?;
            if icmp.len() < 24 || *icmp.get(1)? != 0 {
                return None;
            }
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(p.get(8..24)?).ok()?);
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(p.get(24..40)?).ok()?);
            let acc = inet::pseudo_v6(src, dst, IPPROTO_ICMPV6, icmp.len());
            if inet::fold(inet::sum(acc, icmp)) != 0 {
                return None;
            }
            let target = Ipv6Addr::from(<[u8; 16]>::try_from(icmp.get(8..24)?).ok()?);
            if target.is_multicast() {
                return None;
            }
            let (src_ll, tgt_ll) = nd_options(icmp.get(24..)?)?;
            let op = match icmp[0] {
                ICMPV6_NEIGHBOR_SOLICITATION => NeighborOp::Solicitation,
                ICMPV6_NEIGHBOR_ADVERTISEMENT => NeighborOp::Advertisement,
                _ => return None,
            };
            Some(NeighborMsg {
                op,
                eth_src,
                eth_dst,
                vlan,
                sender_ip: IpAddr::V6(src),
                sender_mac: src_ll,
                target_ip: IpAddr::V6(target),
                target_mac: tgt_ll,
                nd_flags: if op == NeighborOp::Advertisement { icmp[4] } else { 0 },
            })
        }
        _ => None,
    }
}

/// What a reply or advertisement teaches: the peer's IP and MAC. ARP replies give
/// (SPA, SHA); neighbour advertisements give (target, target link-layer option, or the
/// Ethernet source when the option is absent). `None` for requests and other frames.
pub fn learn(frame: &[u8]) -> Option<(IpAddr, MacAddr)> {
    let m = parse(frame)?;
    match m.op {
        NeighborOp::ArpReply => Some((m.sender_ip, m.sender_mac?)),
        NeighborOp::Advertisement => Some((m.target_ip, m.target_mac.unwrap_or(m.eth_src))),
        NeighborOp::ArpRequest | NeighborOp::Solicitation => None,
    }
}

/// The answer to an ARP request or neighbour solicitation for one of `my_ips`, from
/// `my_mac`; `None` when `frame` is not such a request (or is malformed).
///
/// The ARP reply goes to the requester's SHA with SPA = the requested address. The
/// neighbour advertisement goes from the target address to the solicitation's source
/// (to ff02::1 with S=0 for a duplicate-address probe from ::), with S and O set and a
/// target link-layer option.
pub fn reply(frame: &[u8], my_mac: MacAddr, my_ips: &[IpAddr]) -> Option<Vec<u8>> {
    let m = parse(frame)?;
    if !my_ips.contains(&m.target_ip) {
        return None;
    }
    match (m.op, m.sender_ip, m.target_ip) {
        (NeighborOp::ArpRequest, IpAddr::V4(spa), IpAddr::V4(tpa)) => {
            let sha = m.sender_mac?;
            Some(arp_frame(ARP_REPLY, m.vlan, sha, my_mac, tpa, sha, spa))
        }
        (NeighborOp::Solicitation, IpAddr::V6(src), IpAddr::V6(target)) => {
            let dad = src.is_unspecified();
            let (dst_ip, dst_mac, flags) = if dad {
                (Ipv6Addr::new(0xFF02, 0, 0, 0, 0, 0, 0, 1), [0x33, 0x33, 0, 0, 0, 1], NA_FLAG_OVERRIDE)
            } else {
                (src, m.sender_mac.unwrap_or(m.eth_src), NA_FLAG_SOLICITED | NA_FLAG_OVERRIDE)
            };
            Some(nd_frame(
                ICMPV6_NEIGHBOR_ADVERTISEMENT,
                flags,
                m.vlan,
                dst_mac,
                my_mac,
                target,
                dst_ip,
                target,
                ND_OPT_TARGET_LL,
            ))
        }
        _ => None,
    }
}

/// An ARP frame (padded to 60 bytes).
fn arp_frame(
    op: u16,
    vlan: Option<VlanTag>,
    eth_dst: MacAddr,
    sha: MacAddr,
    spa: Ipv4Addr,
    tha: MacAddr,
    tpa: Ipv4Addr,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(MIN_FRAME + 4);
    put_l2(&mut v, eth_dst, sha, vlan, ETHERTYPE_ARP);
    v.extend_from_slice(&1u16.to_be_bytes()); // HTYPE Ethernet
    v.extend_from_slice(&0x0800u16.to_be_bytes()); // PTYPE IPv4
    v.extend_from_slice(&[6, 4]);
    v.extend_from_slice(&op.to_be_bytes());
    v.extend_from_slice(&sha);
    v.extend_from_slice(&spa.octets());
    v.extend_from_slice(&tha);
    v.extend_from_slice(&tpa.octets());
    pad_min(v)
}

/// An ICMPv6 NS or NA frame with one link-layer address option.
#[allow(clippy::too_many_arguments)]
fn nd_frame(
    icmp_type: u8,
    flags: u8,
    vlan: Option<VlanTag>,
    eth_dst: MacAddr,
    my_mac: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    opt_type: u8,
) -> Vec<u8> {
    let mut icmp = [0u8; 32];
    icmp[0] = icmp_type;
    icmp[4] = flags;
    icmp[8..24].copy_from_slice(&target.octets());
    icmp[24] = opt_type;
    icmp[25] = 1; // length in units of 8 bytes
    icmp[26..32].copy_from_slice(&my_mac);
    let acc = inet::pseudo_v6(src, dst, IPPROTO_ICMPV6, icmp.len());
    let csum = inet::fold(inet::sum(acc, &icmp));
    icmp[2..4].copy_from_slice(&csum.to_be_bytes());

    let mut v = Vec::with_capacity(18 + 40 + 32);
    put_l2(&mut v, eth_dst, my_mac, vlan, ETHERTYPE_IPV6);
    v.extend_from_slice(&(6u32 << 28).to_be_bytes());
    v.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    v.extend_from_slice(&[IPPROTO_ICMPV6, 255]);
    v.extend_from_slice(&src.octets());
    v.extend_from_slice(&dst.octets());
    v.extend_from_slice(&icmp);
    v
}

/// A broadcast ARP request from (`my_mac`, `my_ip`) asking for `target`.
pub fn arp_request(my_mac: MacAddr, my_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    arp_frame(ARP_REQUEST, None, BROADCAST_MAC, my_mac, my_ip, [0; 6], target)
}

/// The solicited-node multicast address of `ip` (ff02::1:ffXX:XXXX).
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let o = ip.octets();
    Ipv6Addr::from([0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, o[13], o[14], o[15]])
}

/// The Ethernet multicast MAC of an IPv6 multicast address (33:33 + low 32 bits).
pub fn ipv6_multicast_mac(ip: Ipv6Addr) -> MacAddr {
    let o = ip.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// A neighbour solicitation from (`my_mac`, `my_ip`) for `target`, sent to the target's
/// solicited-node multicast group with a source link-layer option.
pub fn neighbor_solicitation(my_mac: MacAddr, my_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = solicited_node(target);
    nd_frame(
        ICMPV6_NEIGHBOR_SOLICITATION,
        0,
        None,
        ipv6_multicast_mac(group),
        my_mac,
        my_ip,
        group,
        target,
        ND_OPT_SOURCE_LL,
    )
}

/// An ARP request or a neighbour solicitation, by address family; `None` if `my_ip` and
/// `target` are of different families.
pub fn request(my_mac: MacAddr, my_ip: IpAddr, target: IpAddr) -> Option<Vec<u8>> {
    match (my_ip, target) {
        (IpAddr::V4(me), IpAddr::V4(t)) => Some(arp_request(my_mac, me, t)),
        (IpAddr::V6(me), IpAddr::V6(t)) => Some(neighbor_solicitation(my_mac, me, t)),
        _ => None,
    }
}
