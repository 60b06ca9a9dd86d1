//! The Internet (one's complement) checksum used by IPv4, UDP and ICMPv6 (RFC 1071).

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds `data` as big-endian 16-bit words to the running sum `acc` (an odd trailing byte is
/// padded with a zero byte). The caller folds with [`fold`].
///
/// The words are added four at a time, as the two 32-bit halves of each big-endian 8-byte
/// word: the one's complement sum is the same whatever the width of the words added, once
/// folded (RFC 1071, "parallel summation"), and a header takes a few additions instead of one
/// per 16-bit word. A running sum stays far below 2^64 for any slice that fits in memory.
pub(crate) fn sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_be_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        acc += (w >> 32) + (w & 0xFFFF_FFFF);
    }
    let mut pairs = words.remainder().chunks_exact(2);
    for c in &mut pairs {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a running sum to 16 bits and complements it: the checksum field value.
///
/// Four end-around-carry steps of fixed width, without a loop: 2^32 and 2^16 are both 1 modulo
/// 0xFFFF, so each step keeps the sum's residue. The first leaves less than 2^33, the second
/// less than 2^18, the third at most 0xFFFF + 3 and the last at most 0xFFFF. A sum that is not
/// zero never folds to zero (0xFFFF stays 0xFFFF), as with a fold one carry at a time.
pub(crate) fn fold(acc: u64) -> u16 {
    let acc = (acc & 0xFFFF_FFFF) + (acc >> 32);
    let acc = (acc & 0xFFFF) + (acc >> 16);
    let acc = (acc & 0xFFFF) + (acc >> 16);
    let acc = (acc & 0xFFFF) + (acc >> 16);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The sum as RFC 1071 states it: one 16-bit word at a time.
    fn sum_by_words(mut acc: u64, data: &[u8]) -> u64 {
        for c in data.chunks(2) {
            acc += u64::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
        }
        acc
    }

    /// The fold as RFC 1071 states it: one end-around carry at a time.
    fn fold_by_carries(mut acc: u64) -> u16 {
        while acc > 0xFFFF {
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn the_fixed_fold_agrees_with_a_carry_at_a_time() {
        // 0x8000_0000_8000_FFFF takes all four steps: 0x1_0000_FFFF, 0x1_FFFF, 0x1_0000, 1.
        let edges = [0, 1, 0xFFFE, 0xFFFF, 0x1_0000, 0x1_FFFF, 0xFFFF_FFFF, 0x8000_0000_8000_FFFF, u64::MAX];
        let multiples = (1..64u32).map(|k| 0xFFFFu64 << (k % 48));
        let spread = (0..4096u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 30));
        for acc in edges.into_iter().chain(multiples).chain(spread) {
            assert_eq!(fold(acc), fold_by_carries(acc), "sum {acc:#x}");
        }
    }

    #[test]
    fn the_rfc_1071_example_sums_to_its_stated_value() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to 2ddf0, folded ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &data)), !0xddf2);
    }

    #[test]
    fn summing_four_words_at_a_time_folds_to_the_word_by_word_sum_at_every_length() {
        // Bytes near 0xFF make every carry happen.
        let data: Vec<u8> = (0..200u32).map(|i| (0xFF - (i * 7 % 13)) as u8 ^ (i as u8 & 0x10)).collect();
        for start in 0..4 {
            for len in 0..=data.len() - start {
                let d = &data[start..start + len];
                assert_eq!(fold(sum(0, d)), fold(sum_by_words(0, d)), "start {start} len {len}");
                // A running sum carried in, as the pseudo-header's is.
                assert_eq!(fold(sum(0x1_2345, d)), fold(sum_by_words(0x1_2345, d)), "start {start} len {len}");
            }
        }
        // An all-ones slice, the worst case for carries.
        let ones = [0xFFu8; 64];
        assert_eq!(fold(sum(0, &ones)), fold(sum_by_words(0, &ones)));
    }
}
