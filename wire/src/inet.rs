//! The Internet (one's complement) checksum used by IPv4, UDP and ICMPv6 (RFC 1071).

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds `data` as big-endian 16-bit words to the running 32-bit sum `acc` (an odd trailing
/// byte is padded with a zero byte). The caller folds with [`fold`].
pub(crate) fn sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a running sum to 16 bits and complements it: the checksum field value.
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

/// The running sum of the IPv4 pseudo-header for upper-layer protocol `proto`.
pub(crate) fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    acc + u64::from(proto) + len as u64
}

/// The running sum of the IPv6 pseudo-header (RFC 8200 §8.1) for next header `proto`.
pub(crate) fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: usize) -> u64 {
    let mut acc = sum(0, &src.octets());
    acc = sum(acc, &dst.octets());
    acc + u64::from(proto) + len as u64
}

/// The checksum of `data` alone (an IPv4 header with its checksum field zeroed, say).
pub(crate) fn checksum(data: &[u8]) -> u16 {
    fold(sum(0, data))
}

/// Byte offset of the header checksum in an IPv4 header.
pub(crate) const IPV4_CHECKSUM_AT: usize = 10;

/// The header checksum the IPv4 header `h` (options included) should carry: the checksum of
/// the header with that field taken as zero. 0 for a slice too short to be a header.
pub(crate) fn ipv4_header_checksum(h: &[u8]) -> u16 {
    match (h.get(..IPV4_CHECKSUM_AT), h.get(IPV4_CHECKSUM_AT + 2..)) {
        // The field starts at an even offset: the words after it stay aligned.
        (Some(before), Some(after)) if h.len() >= 20 => fold(sum(sum(0, before), after)),
        _ => 0,
    }
}

/// Writes [`ipv4_header_checksum`] into the header checksum field of the IPv4 header `h`
/// (nothing for a slice too short to be a header).
pub(crate) fn put_ipv4_header_checksum(h: &mut [u8]) {
    let c = ipv4_header_checksum(h);
    if h.len() >= 20 {
        h[IPV4_CHECKSUM_AT..IPV4_CHECKSUM_AT + 2].copy_from_slice(&c.to_be_bytes());
    }
}
