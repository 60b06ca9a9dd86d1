//! CRC-32 and the RoCE invariant CRC (ICRC).
//!
//! This module owns the checksum arithmetic of the wire: the IEEE 802.3 CRC-32 ([`crc32`],
//! [`Crc32`]) and the ICRC of RoCEv2 and RoCEv1 frames ([`compute`], [`verify`]), following
//! the wire doc §3:
//!
//! * the input is 8 bytes of `0xFF` (the masked IB LRH), then the IP header with IPv4 TOS,
//!   TTL and header checksum (IPv6/GRH: traffic class, flow label, hop limit) set to all
//!   ones, then (RoCEv2) the UDP header with its checksum set to `0xFFFF`, then the BTH with
//!   byte 4 (FECN, BECN, resv6a) set to `0xFF`, then everything after the BTH up to the ICRC
//!   (extension headers, payload, pad);
//! * the CRC is the standard reflected CRC-32 (`zlib.crc32`);
//! * the 32-bit result goes on the wire least-significant byte first.
//!
//! Nothing here allocates: the masked headers are copied into a stack buffer, with the rest of
//! the packet when the whole is small (one pass of the CRC); a larger packet's rest is hashed
//! in place.
//!
//! The CRC arithmetic is the `crc32fast` crate's (carry-less multiplication folding where the
//! CPU has it, several times faster than a table over a 4 KiB payload, and no slower over a
//! 64-byte one: the sim hashes every byte it sends and receives); this module's own slice-by-8
//! table, kept for the tests, checks it.

use super::packet::{L3Kind, WireError, locate};
use crate::inet::IPV4_CHECKSUM_AT;

/// The reflected form of the IEEE 802.3 polynomial 0x04C11DB7.
pub const CRC32_POLY_REFLECTED: u32 = 0xEDB8_8320;

/// The raw CRC register after `0xFFFF_FFFF` has absorbed 8 bytes of `0xFF` (the masked LRH).
///
/// rxe starts its ICRC from this value instead of hashing the pseudo-LRH.
pub const ICRC_SEED_AFTER_LRH: u32 = 0xDEBB_20E3;

/// Size of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

#[cfg(test)]
const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ CRC32_POLY_REFLECTED } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

#[cfg(test)]
static TABLES: [[u32; 256]; 8] = make_tables();

/// Advances a raw (not pre- or post-inverted) reflected CRC-32 register over `data`:
/// the contract of the kernel's `crc32_le()`.
pub fn crc32_raw(crc: u32, data: &[u8]) -> u32 {
    // crc32fast continues from a finished (inverted) CRC and finishes (inverts) its result.
    let mut h = crc32fast::Hasher::new_with_initial(!crc);
    h.update(data);
    !h.finalize()
}

/// [`crc32_raw`] by this module's slice-by-8 table: the reference the tests check it against.
#[cfg(test)]
fn crc32_raw_table(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ crc;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xFF) as usize]
            ^ t[2][((hi >> 8) & 0xFF) as usize]
            ^ t[1][((hi >> 16) & 0xFF) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// The standard CRC-32 (IEEE 802.3, as `zlib.crc32`) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    !crc32_raw(!0, data)
}

/// An incremental standard CRC-32 (IEEE 802.3) hasher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32 {
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// A hasher that has absorbed nothing.
    pub const fn new() -> Self {
        Self { state: !0 }
    }

    /// Absorbs `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.state = crc32_raw(self.state, data);
    }

    /// The CRC of everything absorbed so far (the hasher can go on absorbing).
    pub fn finish(&self) -> u32 {
        !self.state
    }
}

/// Where the ICRC-covered part of a frame lies; found by `packet::locate`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IcrcSpan {
    /// Offset of the IP header / GRH.
    pub l3: usize,
    /// Length of the IP header (IHL * 4, or 40).
    pub ip_hdr_len: usize,
    /// Which L3 (and so whether a UDP header follows).
    pub kind: L3Kind,
    /// Offset of the BTH.
    pub bth: usize,
    /// Offset one past the last ICRC byte (end of the IP packet).
    pub end: usize,
}

/// A hasher that has absorbed the masked LRH: where every ICRC starts. Made once, because a new
/// hasher looks up the CPU's features each time.
static ICRC_START: std::sync::LazyLock<crc32fast::Hasher> =
    std::sync::LazyLock::new(|| crc32fast::Hasher::new_with_initial(!ICRC_SEED_AFTER_LRH));

/// The ICRC of the packet at `span` in `frame` (a span from `locate`). An inconsistent span
/// yields 0 rather than a panic.
pub(crate) fn icrc_of(frame: &[u8], span: &IcrcSpan) -> u32 {
    let head_end = span.bth + 12;
    let (Some(head), Some(rest)) =
        (frame.get(span.l3..head_end), frame.get(head_end..span.end.saturating_sub(ICRC_LEN)))
    else {
        return 0;
    };
    let udp_len = if span.kind == L3Kind::Grh { 0 } else { 8 };
    if span.ip_hdr_len < 20 || head.len() != span.ip_hdr_len + udp_len + 12 {
        return 0;
    }
    // A small packet (an ACK, a 64-byte message) is hashed in one pass over a copy of its
    // masked headers followed by the rest: every pass of the CRC has a fixed cost (its setup,
    // its final reduction, its tail) as large as the copy, and a ping-pong hashes four such
    // packets a turn. A larger one keeps its body in place and is hashed in two passes.
    let mut buf = [0u8; ICRC_ONE_PASS_MAX];
    let whole = head.len() + rest.len();
    let one_pass = whole <= ICRC_ONE_PASS_MAX;
    let Some(masked) = buf.get_mut(..if one_pass { whole } else { head.len() }) else {
        return 0;
    };
    masked[..head.len()].copy_from_slice(head);
    if one_pass {
        masked[head.len()..].copy_from_slice(rest);
    }
    match span.kind {
        L3Kind::Ipv4 => {
            masked[1] = 0xFF; // TOS (DSCP + ECN)
            masked[8] = 0xFF; // TTL
            masked[IPV4_CHECKSUM_AT..IPV4_CHECKSUM_AT + 2].fill(0xFF); // header checksum
        }
        L3Kind::Ipv6 | L3Kind::Grh => {
            masked[0] |= 0x0F; // traffic class, high nibble
            masked[1] = 0xFF; // traffic class low nibble + flow label
            masked[2] = 0xFF;
            masked[3] = 0xFF;
            masked[7] = 0xFF; // hop limit
        }
    }
    if span.kind != L3Kind::Grh {
        let udp = span.ip_hdr_len;
        masked[udp + 6] = 0xFF; // UDP checksum
        masked[udp + 7] = 0xFF;
    }
    masked[head.len() - 12 + 4] = 0xFF; // BTH byte 4: FECN, BECN, resv6a
    // crc32_raw(seed, masked) (the rest copied in), or crc32_raw(crc32_raw(seed, masked),
    // rest), inverted: one hasher continued over both parts (crc32fast's hashers start from
    // and end on inverted registers).
    let mut h = ICRC_START.clone();
    h.update(masked);
    if !one_pass {
        h.update(rest);
    }
    h.finalize()
}

/// The most bytes (masked headers and the rest) that [`icrc_of`] hashes in one pass over a
/// stack copy; more are hashed in place after the headers. 128 takes a 64-byte RDMA WRITE over
/// IPv4 (120 bytes) and any ACK, and a buffer this small is zeroed by a few stores in line,
/// where one of 256 bytes cost a `memset` call per packet.
const ICRC_ONE_PASS_MAX: usize = 128;

/// The ICRC the frame *should* carry, computed from its headers and body (the 4 bytes on
/// the wire are not read).
///
/// `frame` is a whole Ethernet frame (optionally with one VLAN tag): RoCEv2 over IPv4 or
/// IPv6 (UDP destination port 4791), or RoCEv1 (ethertype 0x8915). Fails with the
/// [`WireError`] that [`parse_frame`](super::packet::parse_frame) would report when the frame
/// is not such a packet or its lengths are inconsistent.
pub fn compute(frame: &[u8]) -> Result<u32, WireError> {
    let span = locate(frame)?;
    Ok(icrc_of(frame, &span))
}

/// The ICRC carried on the wire (the last 4 bytes of the IP packet, little-endian).
pub fn on_wire(frame: &[u8]) -> Result<u32, WireError> {
    let span = locate(frame)?;
    Ok(wire_value(frame, &span))
}

pub(crate) fn wire_value(frame: &[u8], span: &IcrcSpan) -> u32 {
    match frame.get(span.end.saturating_sub(ICRC_LEN)..span.end).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
        Some(b) => u32::from_le_bytes(b),
        None => 0,
    }
}

/// Whether `frame` is a well-formed RoCE frame whose ICRC matches. `false` for anything
/// else, never a panic.
pub fn verify(frame: &[u8]) -> bool {
    match locate(frame) {
        Ok(span) => icrc_of(frame, &span) == wire_value(frame, &span),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_crc_agrees_with_the_table_at_every_length_and_seed() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for seed in [0u32, !0, ICRC_SEED_AFTER_LRH, 0x1234_5678] {
            for len in (0..300).chain([1023, 1024, 1025, 4096, 4999]) {
                assert_eq!(
                    crc32_raw(seed, &data[..len]),
                    crc32_raw_table(seed, &data[..len]),
                    "seed {seed:#x}, {len} bytes"
                );
            }
        }
    }

    use crate::packet::{ETHERTYPE_IPV4, IPPROTO_UDP, Opcode, ROCEV2_UDP_PORT};

    /// The ICRC of `frame`, RoCEv2 over IPv4 (20-byte header, no VLAN tag), by the wire doc's
    /// definition and this module's table: the masked LRH, then the IPv4 header with TOS, TTL
    /// and checksum masked, the UDP header with its checksum masked, the BTH with byte 4
    /// masked, then the body.
    fn reference_icrc(frame: &[u8]) -> u32 {
        let mut covered = vec![0xFF; 8];
        covered.extend_from_slice(&frame[14..frame.len() - ICRC_LEN]);
        for at in [8 + 1, 8 + 8, 8 + 10, 8 + 11, 8 + 20 + 6, 8 + 20 + 7, 8 + 28 + 4] {
            covered[at] = 0xFF;
        }
        !crc32_raw_table(!0, &covered)
    }

    #[test]
    fn small_and_large_packets_hash_alike_on_both_paths() {
        // Bodies on both sides of the one-pass limit, every length near it.
        let lengths = (0..64).chain(ICRC_ONE_PASS_MAX - 48..ICRC_ONE_PASS_MAX - 32).chain([1024, 4096]);
        for body in lengths {
            let ip_len = 20 + 8 + 12 + body + ICRC_LEN;
            let mut f = vec![0u8; 14 + ip_len];
            f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            f[14] = 0x45;
            f[15] = 0x02; // ECN, masked
            f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
            f[22] = 64; // TTL, masked
            f[23] = IPPROTO_UDP;
            f[24..26].copy_from_slice(&[0xAB, 0xCD]); // header checksum, masked
            f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
            f[34..36].copy_from_slice(&49152u16.to_be_bytes());
            f[36..38].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
            f[38..40].copy_from_slice(&((ip_len - 20) as u16).to_be_bytes());
            f[40..42].copy_from_slice(&[0x12, 0x34]); // UDP checksum, masked
            f[42] = Opcode::RC_SEND_ONLY.0;
            f[46] = 0xC0; // FECN, BECN: masked
            for (i, b) in f[54..54 + body].iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(31).wrapping_add(body as u8);
            }
            assert_eq!(compute(&f), Ok(reference_icrc(&f)), "{body}-byte body");
        }
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        let mut h = Crc32::new();
        h.update(b"12345");
        h.update(b"6789");
        assert_eq!(h.finish(), 0xCBF4_3926);
    }

    #[test]
    fn seed_is_crc_of_masked_lrh() {
        assert_eq!(crc32_raw(!0, &[0xFF; 8]), ICRC_SEED_AFTER_LRH);
    }

    #[test]
    fn slice_by_8_matches_bytewise() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 3) as u8).collect();
        for len in 0..data.len() {
            let mut bytewise = !0u32;
            for &b in &data[..len] {
                bytewise = TABLES[0][((bytewise ^ u32::from(b)) & 0xFF) as usize] ^ (bytewise >> 8);
            }
            assert_eq!(crc32_raw(!0, &data[..len]), bytewise, "len {len}");
        }
    }
}
