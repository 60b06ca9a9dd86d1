//! GID <-> IP address mapping (wire doc §4.3) and the RoCEv2 UDP source-port functions
//! (wire doc §4.2, the kernel's `rdma_get_udp_sport` family).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IP address a RoCEv2 GID stands for: IPv4 when the GID is IPv4-mapped
/// (`::ffff:a.b.c.d`), the GID itself as IPv6 otherwise.
pub fn gid_to_ip(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The RoCEv2 GID of an IP address: IPv4-mapped IPv6 for IPv4, the address itself for IPv6.
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Whether a GID is IPv4-mapped (the network type is then IPv4).
pub fn gid_is_ipv4(gid: &[u8; 16]) -> bool {
    gid[..10] == [0; 10] && gid[10] == 0xFF && gid[11] == 0xFF
}

/// The IPv4 address of a v4-mapped GID.
pub fn gid_to_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// `rdma_calc_flow_label`: a 20-bit flow label from the two QP numbers (symmetric).
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = (lqpn as u64) * (rqpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// `rdma_flow_label_to_udp_sport`: folds a 20-bit flow label into 0xC000-0xFFFF.
pub const fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let fl_low = fl & 0x03FFF;
    let fl_high = fl & 0xFC000;
    let folded = fl_low ^ (fl_high >> 14);
    0xC000 | (folded as u16 & 0x3FFF)
}

/// `rdma_get_udp_sport`: the UDP source port rxe uses for a connected QP, from the path's
/// flow label, or from the two QP numbers when the flow label is 0. Symmetric, so both
/// directions of an RC connection use the same port.
pub const fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label != 0 { flow_label } else { calc_flow_label(lqpn, rqpn) };
    flow_label_to_udp_sport(fl)
}

/// The port rxe gives a QP before it has a path (and UD QPs):
/// `0xC000 + (hash_32(qpn, 14) & 0x3FFF)` with the kernel's golden-ratio `hash_32`.
pub const fn initial_udp_sport(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61C8_8647;
    let hash = qpn.wrapping_mul(GOLDEN_RATIO_32) >> (32 - 14);
    0xC000 + (hash & 0x3FFF) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sport_matches_observed_rxe() {
        // Doc §4.2: QPNs 0x19 and 0x11 gave 49577, QPNs 18/18 gave 49476.
        assert_eq!(udp_sport(0, 0x19, 0x11), 0xC1A9);
        assert_eq!(udp_sport(0, 0x11, 0x19), 49577);
        assert_eq!(udp_sport(0, 18, 18), 49476);
        assert_eq!(udp_sport(0x12345, 1, 2), flow_label_to_udp_sport(0x12345));
        for q in [0u32, 1, 17, 0xFF_FFFF] {
            assert!(initial_udp_sport(q) >= 0xC000);
        }
    }

    #[test]
    fn gid_mapping() {
        let ip: IpAddr = "192.168.1.7".parse().unwrap();
        let gid = ip_to_gid(ip);
        assert_eq!(&gid[10..], &[0xFF, 0xFF, 192, 168, 1, 7]);
        assert!(gid_is_ipv4(&gid));
        assert_eq!(gid_to_ip(&gid), ip);
        let v6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(gid_to_ip(&ip_to_gid(v6)), v6);
        assert!(!gid_is_ipv4(&ip_to_gid(v6)));
    }

    /// A header's GIDs are those of its addresses, for each kind of L3 header.
    #[test]
    fn header_gids_map_their_addresses() {
        use crate::packet::{IpHeader, Ipv4Header, Ipv6Header};
        let v4 = IpHeader::Ipv4(Ipv4Header::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into()));
        let six = Ipv6Header::new("fe80::1".parse().unwrap(), "::ffff:10.0.0.9".parse().unwrap());
        for h in [v4, IpHeader::Ipv6(six), IpHeader::Grh(six)] {
            assert_eq!((h.src_gid(), h.dst_gid()), (ip_to_gid(h.src()), ip_to_gid(h.dst())), "{h:?}");
        }
        assert_eq!(&v4.dst_gid()[10..], &[0xFF, 0xFF, 10, 0, 0, 2]);
    }
}
