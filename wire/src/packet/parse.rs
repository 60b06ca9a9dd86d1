//! Zero-copy parsing of RoCEv2 (IPv4, IPv6) and RoCEv1 frames.

use std::net::IpAddr;

use super::error::{Layer, WireError};
use super::headers::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_ROCEV1,
    ETHERTYPE_VLAN, EthHeader, ExtHeaders, GRH_NEXT_HEADER_IBA, IPPROTO_UDP, Ieth, ImmDt, IpHeader, Ipv4Header,
    Ipv6Header, ROCEV2_UDP_PORT, Reth, RoceVersion, UdpHeader, VlanTag,
};
use super::opcode::{ExtKind, Opcode, OpcodeInfo};
use crate::icrc::{ICRC_LEN, IcrcSpan, icrc_of, wire_value};
use crate::inet;

/// Which L3 header precedes the transport (crate-internal view of [`IpHeader`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum L3Kind {
    Ipv4,
    Ipv6,
    Grh,
}

fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b.get(at..at + N).and_then(|s| <[u8; N]>::try_from(s).ok()).unwrap_or([0; N])
}

fn truncated(layer: Layer, need: usize, have: usize) -> WireError {
    WireError::Truncated { layer, need, have }
}

/// The destination QP a RoCE frame's BTH names, found with as few checks as a NIC's receive
/// steering makes (which queue a frame waits in): `None` for a frame that is not RoCE (ARP,
/// other IP traffic) or too short for its BTH. Not a validation: [`parse_frame`] makes every
/// check of a frame taken from its queue.
pub fn steering_dest_qp(frame: &[u8]) -> Option<u32> {
    steering_bth_bytes(frame).map(Bth::dest_qp_of)
}

/// A RoCE frame's BTH, found with the checks of [`steering_dest_qp`] and no more: `None` for a
/// frame that is not RoCE or too short for its BTH.
pub fn steering_bth(frame: &[u8]) -> Option<Bth> {
    steering_bth_bytes(frame).map(Bth::from_bytes)
}

/// The bytes of a RoCE frame's BTH, found with the checks of [`steering_dest_qp`]: what
/// [`steering_bth`] decodes whole, and steering reads one field of.
#[inline(always)]
fn steering_bth_bytes(frame: &[u8]) -> Option<&[u8; Bth::LEN]> {
    let (mut ethertype, mut off) = (be16(frame, 12), 14);
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        (ethertype, off) = (be16(frame, 16), 18);
    }
    let bth_at = |at: usize| frame.get(at..at + Bth::LEN)?.try_into().ok();
    let udp = match ethertype {
        ETHERTYPE_IPV4 if *frame.get(off + 9)? == IPPROTO_UDP => off + usize::from(frame.get(off)? & 0x0F) * 4,
        ETHERTYPE_IPV6 if *frame.get(off + 6)? == IPPROTO_UDP => off + 40,
        ETHERTYPE_ROCEV1 => return bth_at(off + 40),
        _ => return None,
    };
    if be16(frame, udp + 2) != ROCEV2_UDP_PORT {
        return None;
    }
    bth_at(udp + 8)
}

/// The length an Ethernet frame that carries an IP packet gives itself: its Ethernet header
/// (with one VLAN tag, if any) and its IP packet's (the IPv4 total length; the IPv6 header and
/// payload length). `None` for any other frame (ARP, RoCEv1, ...) and for one too short to say.
/// A frame with padding after its IP packet is longer than this.
pub fn ip_frame_len(frame: &[u8]) -> Option<usize> {
    let (mut ethertype, mut off) = (be16(frame, 12), 14);
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        (ethertype, off) = (be16(frame, 16), 18);
    }
    let ip = frame.get(off..)?;
    match ethertype {
        ETHERTYPE_IPV4 if ip.len() >= 20 && ip[0] >> 4 == 4 => {
            let total = usize::from(be16(ip, 2));
            (total >= 20).then_some(off + total)
        }
        ETHERTYPE_IPV6 if ip.len() >= 40 && ip[0] >> 4 == 6 => Some(off + 40 + usize::from(be16(ip, 4))),
        _ => None,
    }
}

/// Validates the Ethernet, IP and UDP headers of a RoCE frame and finds the BTH and the end
/// of the IP packet. Shared by [`parse_frame`] and `icrc::compute`.
///
/// It decodes no header: the packet decodes them from the frame when asked
/// ([`eth_header`], [`ip_header`], [`udp_header`]). Decoded here and returned, the
/// headers' two-byte fields were stored one by one and read back a word at a time where the
/// parser took them out of the result: a store-forwarding stall on every frame received
/// (perf annotate of `Port::process_on`).
#[inline(always)]
pub(crate) fn locate(frame: &[u8]) -> Result<IcrcSpan, WireError> {
    let len = frame.len();
    if len < 14 {
        return Err(truncated(Layer::Ethernet, 14, len));
    }
    let mut ethertype = be16(frame, 12);
    let mut off = 14;
    if ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        if len < 18 {
            return Err(truncated(Layer::Vlan, 18, len));
        }
        ethertype = be16(frame, 16);
        off = 18;
    }
    let available = len - off;
    let (kind, ip_hdr_len, bth, end) = match ethertype {
        ETHERTYPE_IPV4 => {
            if available < 20 {
                return Err(truncated(Layer::Ipv4, off + 20, len));
            }
            let v = frame[off] >> 4;
            if v != 4 {
                return Err(WireError::BadIpVersion { version: v, expected: 4 });
            }
            let ihl = frame[off] & 0x0F;
            if ihl < 5 {
                return Err(WireError::BadIhl { ihl });
            }
            let hl = usize::from(ihl) * 4;
            if available < hl {
                return Err(truncated(Layer::Ipv4, off + hl, len));
            }
            let protocol = frame[off + 9];
            if protocol != IPPROTO_UDP {
                return Err(WireError::NotUdp { protocol });
            }
            let flags = be16(frame, off + 6);
            if flags & 0x3FFF != 0 {
                return Err(WireError::Fragmented);
            }
            if available < hl + 8 {
                return Err(truncated(Layer::Udp, off + hl + 8, len));
            }
            let udp = UdpHeader::read(&array(frame, off + hl));
            if udp.dst_port != ROCEV2_UDP_PORT {
                return Err(WireError::NotRocePort { dst_port: udp.dst_port });
            }
            let total = usize::from(be16(frame, off + 2));
            if total < hl + 8 || total > available {
                return Err(WireError::BadIpLength { declared: total, available });
            }
            if usize::from(udp.length) != total - hl {
                return Err(WireError::UdpLengthMismatch { udp_len: udp.length, ip_payload_len: total - hl });
            }
            (L3Kind::Ipv4, hl, off + hl + 8, off + total)
        }
        ETHERTYPE_IPV6 | ETHERTYPE_ROCEV1 => {
            let v1 = ethertype == ETHERTYPE_ROCEV1;
            let layer = if v1 { Layer::Grh } else { Layer::Ipv6 };
            if available < 40 {
                return Err(truncated(layer, off + 40, len));
            }
            let v = frame[off] >> 4;
            if v != 6 {
                return Err(WireError::BadIpVersion { version: v, expected: 6 });
            }
            let next_header = frame[off + 6];
            let plen = usize::from(be16(frame, off + 4));
            if v1 {
                if next_header != GRH_NEXT_HEADER_IBA {
                    return Err(WireError::NotUdp { protocol: next_header });
                }
                if 40 + plen > available {
                    return Err(WireError::BadIpLength { declared: 40 + plen, available });
                }
                (L3Kind::Grh, 40, off + 40, off + 40 + plen)
            } else {
                if next_header != IPPROTO_UDP {
                    return Err(WireError::NotUdp { protocol: next_header });
                }
                if available < 48 {
                    return Err(truncated(Layer::Udp, off + 48, len));
                }
                let udp = UdpHeader::read(&array(frame, off + 40));
                if udp.dst_port != ROCEV2_UDP_PORT {
                    return Err(WireError::NotRocePort { dst_port: udp.dst_port });
                }
                if plen < 8 || 40 + plen > available {
                    return Err(WireError::BadIpLength { declared: 40 + plen, available });
                }
                if usize::from(udp.length) != plen {
                    return Err(WireError::UdpLengthMismatch { udp_len: udp.length, ip_payload_len: plen });
                }
                (L3Kind::Ipv6, 40, off + 48, off + 40 + plen)
            }
        }
        other => return Err(WireError::NotIp { ethertype: other }),
    };
    if end < bth + Bth::LEN + ICRC_LEN {
        return Err(truncated(Layer::Bth, bth + Bth::LEN + ICRC_LEN, end));
    }
    Ok(IcrcSpan { l3: off, ip_hdr_len, kind, bth, end })
}

/// The Ethernet header of a frame [`locate`] accepted with its IP header or GRH at `l3` (18
/// with a VLAN tag).
#[inline(always)]
fn eth_header(frame: &[u8], l3: usize) -> EthHeader {
    let vlan = (l3 == 18).then(|| VlanTag { tpid: be16(frame, 12), tci: be16(frame, 14) });
    EthHeader { dst: array(frame, 0), src: array(frame, 6), vlan, ethertype: be16(frame, l3 - 2) }
}

/// The IP header (or GRH) of kind `kind` at `off` in a frame [`locate`] accepted.
#[inline(always)]
fn ip_header(frame: &[u8], off: usize, kind: L3Kind) -> IpHeader {
    match kind {
        L3Kind::Ipv4 => {
            let flags = be16(frame, off + 6);
            IpHeader::Ipv4(Ipv4Header {
                ihl: frame[off] & 0x0F,
                tos: frame[off + 1],
                total_len: be16(frame, off + 2),
                id: be16(frame, off + 4),
                dont_fragment: flags & 0x4000 != 0,
                ttl: frame[off + 8],
                protocol: frame[off + 9],
                checksum: be16(frame, off + inet::IPV4_CHECKSUM_AT),
                src: array::<4>(frame, off + IPV4_SRC_AT).into(),
                dst: array::<4>(frame, off + IPV4_DST_AT).into(),
            })
        }
        L3Kind::Ipv6 | L3Kind::Grh => {
            let word0 = u32::from_be_bytes(array(frame, off));
            let h = Ipv6Header {
                traffic_class: (word0 >> 20) as u8,
                flow_label: word0 & 0xF_FFFF,
                payload_len: be16(frame, off + 4),
                next_header: frame[off + 6],
                hop_limit: frame[off + 7],
                src: array::<16>(frame, off + IPV6_SRC_AT).into(),
                dst: array::<16>(frame, off + IPV6_DST_AT).into(),
            };
            if kind == L3Kind::Grh { IpHeader::Grh(h) } else { IpHeader::Ipv6(h) }
        }
    }
}

/// Where an IPv4 header holds its source and destination addresses.
const IPV4_SRC_AT: usize = 12;
const IPV4_DST_AT: usize = 16;
/// Where an IPv6 header or a GRH holds its source and destination addresses (GIDs).
const IPV6_SRC_AT: usize = 8;
const IPV6_DST_AT: usize = 24;

/// The GID of the address at `addr_at` of the IP header of kind `kind` at `off` (one of the
/// `*_SRC_AT`, `*_DST_AT` pairs, as `kind` says): an IPv4 address mapped as
/// [`ip_to_gid`](super::ip_to_gid) maps it, an IPv6 address or a GRH's GID as it is.
#[inline(always)]
fn gid_at(frame: &[u8], off: usize, kind: L3Kind, (v4_at, v6_at): (usize, usize)) -> [u8; 16] {
    match kind {
        L3Kind::Ipv4 => std::net::Ipv4Addr::from(array::<4>(frame, off + v4_at)).to_ipv6_mapped().octets(),
        L3Kind::Ipv6 | L3Kind::Grh => array(frame, off + v6_at),
    }
}

/// The UDP header, ending at the BTH at `bth`, of a frame [`locate`] accepted with an L3 of
/// kind `kind` (`None` for RoCEv1).
#[inline(always)]
fn udp_header(frame: &[u8], kind: L3Kind, bth: usize) -> Option<UdpHeader> {
    match kind {
        L3Kind::Grh => None,
        L3Kind::Ipv4 | L3Kind::Ipv6 => Some(UdpHeader::read(&array(frame, bth - UdpHeader::LEN))),
    }
}

/// A parsed RoCE frame. The BTH is a decoded copy; every other header is decoded when asked
/// for ([`RocePacket::eth`], [`RocePacket::ip`], [`RocePacket::udp`], [`RocePacket::ext`], and
/// one extension header alone with [`RocePacket::reth`] and its siblings), because a receiving
/// port reads a few fields of a few of them; `payload` and `pad` borrow the frame.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// The whole frame as given to [`parse_frame`].
    pub frame: &'a [u8],
    /// Base transport header.
    pub bth: Bth,
    /// The table entry of `bth.opcode` (always known once parsed).
    pub info: &'static OpcodeInfo,
    /// Payload, pad removed.
    pub payload: &'a [u8],
    /// The PadCnt pad bytes (zeros when sent correctly).
    pub pad: &'a [u8],
    /// ICRC on the wire (its 4 bytes read little-endian).
    pub icrc: u32,
    /// ICRC computed over the frame.
    pub icrc_expected: u32,
    /// Whether `icrc == icrc_expected`.
    pub icrc_ok: bool,
    /// Whether the IPv4 header checksum is right (always true for IPv6 and GRH).
    pub ip_checksum_ok: bool,
    /// UDP checksum verdict: `None` when the checksum is 0 (not used) or RoCEv1.
    pub udp_checksum_ok: Option<bool>,
    /// Offset of the IP header / GRH in `frame`.
    pub l3_offset: usize,
    /// Offset of the BTH in `frame`.
    pub bth_offset: usize,
    /// Offset one past the ICRC (end of the IP packet); bytes after it are Ethernet
    /// padding or trailer.
    pub packet_end: usize,
    /// Which header lies at `l3_offset`.
    l3: L3Kind,
}

impl std::fmt::Debug for RocePacket<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocePacket")
            .field("frame", &self.frame)
            .field("eth", &self.eth())
            .field("ip", &self.ip())
            .field("udp", &self.udp())
            .field("bth", &self.bth)
            .field("info", &self.info)
            .field("ext", &self.ext())
            .field("payload", &self.payload)
            .field("pad", &self.pad)
            .field("icrc", &self.icrc)
            .field("icrc_expected", &self.icrc_expected)
            .field("icrc_ok", &self.icrc_ok)
            .field("ip_checksum_ok", &self.ip_checksum_ok)
            .field("udp_checksum_ok", &self.udp_checksum_ok)
            .field("l3_offset", &self.l3_offset)
            .field("bth_offset", &self.bth_offset)
            .field("packet_end", &self.packet_end)
            .finish()
    }
}

impl<'a> RocePacket<'a> {
    /// The Ethernet header.
    pub fn eth(&self) -> EthHeader {
        eth_header(self.frame, self.l3_offset)
    }

    /// The IPv4 / IPv6 header, or the GRH of RoCEv1.
    pub fn ip(&self) -> IpHeader {
        ip_header(self.frame, self.l3_offset, self.l3)
    }

    /// The UDP header (`None` for RoCEv1).
    pub fn udp(&self) -> Option<UdpHeader> {
        udp_header(self.frame, self.l3, self.bth_offset)
    }

    /// The extension headers (exactly those of the opcode).
    pub fn ext(&self) -> ExtHeaders {
        ExtHeaders::decode(self.info.headers, self.frame.get(self.bth_offset + Bth::LEN..).unwrap_or(&[]))
    }

    /// The bytes of extension header `kind`, if the opcode carries it.
    #[inline(always)]
    fn ext_bytes<const N: usize>(&self, kind: ExtKind) -> Option<[u8; N]> {
        let at = self.bth_offset + Bth::LEN + self.info.headers.offset_of(kind)?;
        self.frame.get(at..at + N)?.try_into().ok()
    }

    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<Reth> {
        self.ext_bytes(ExtKind::Reth).map(|b| Reth::from_bytes(&b))
    }

    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<Aeth> {
        self.ext_bytes(ExtKind::Aeth).map(|b| Aeth::from_bytes(&b))
    }

    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<Deth> {
        self.ext_bytes(ExtKind::Deth).map(|b| Deth::from_bytes(&b))
    }

    /// The immediate data, if the opcode carries it.
    pub fn imm_dt(&self) -> Option<ImmDt> {
        self.ext_bytes(ExtKind::ImmDt).map(|b| ImmDt::from_bytes(&b))
    }

    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<Ieth> {
        self.ext_bytes(ExtKind::Ieth).map(|b| Ieth::from_bytes(&b))
    }

    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicEth> {
        self.ext_bytes(ExtKind::AtomicEth).map(|b| AtomicEth::from_bytes(&b))
    }

    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEth> {
        self.ext_bytes(ExtKind::AtomicAckEth).map(|b| AtomicAckEth::from_bytes(&b))
    }

    /// The source GID: [`IpHeader::src_gid`] of [`Self::ip`], read from the frame alone.
    pub fn src_gid(&self) -> [u8; 16] {
        gid_at(self.frame, self.l3_offset, self.l3, (IPV4_SRC_AT, IPV6_SRC_AT))
    }

    /// The destination GID: [`IpHeader::dst_gid`] of [`Self::ip`], read from the frame alone.
    pub fn dst_gid(&self) -> [u8; 16] {
        gid_at(self.frame, self.l3_offset, self.l3, (IPV4_DST_AT, IPV6_DST_AT))
    }

    /// RoCEv1 or RoCEv2.
    pub fn version(&self) -> RoceVersion {
        match self.l3 {
            L3Kind::Grh => RoceVersion::V1,
            L3Kind::Ipv4 | L3Kind::Ipv6 => RoceVersion::V2,
        }
    }

    /// The BTH opcode.
    pub fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// PadCnt.
    pub fn pad_cnt(&self) -> u8 {
        self.bth.pad_cnt
    }

    /// Source IP (a GRH's source GID is mapped like a RoCEv2 GID).
    pub fn src_ip(&self) -> IpAddr {
        self.ip().src()
    }

    /// Destination IP.
    pub fn dst_ip(&self) -> IpAddr {
        self.ip().dst()
    }

    /// UDP source port (0 for RoCEv1).
    pub fn udp_src_port(&self) -> u16 {
        self.udp().map_or(0, |u| u.src_port)
    }

    /// Bytes after the IP packet (Ethernet padding).
    pub fn trailer(&self) -> &'a [u8] {
        self.frame.get(self.packet_end..).unwrap_or(&[])
    }

    /// The transport packet: BTH through ICRC.
    pub fn transport(&self) -> &'a [u8] {
        self.frame.get(self.bth_offset..self.packet_end).unwrap_or(&[])
    }

    /// Checks the integrity fields: IPv4 header checksum, a non-zero UDP checksum, ICRC
    /// (in that order, as a receiving host would).
    pub fn check(&self) -> Result<(), WireError> {
        let verdict = Verdict {
            ip_checksum_ok: self.ip_checksum_ok,
            udp_checksum_ok: self.udp_checksum_ok,
            icrc_ok: self.icrc_ok,
            icrc: self.icrc,
            icrc_expected: self.icrc_expected,
        };
        if verdict.intact() {
            return Ok(());
        }
        Err(integrity_error(self.frame, self.l3, (self.l3_offset, self.bth_offset, self.packet_end), verdict))
    }
}

/// The integrity checks of a packet, as made (or trusted).
#[derive(Clone, Copy)]
struct Verdict {
    ip_checksum_ok: bool,
    udp_checksum_ok: Option<bool>,
    icrc_ok: bool,
    icrc: u32,
    icrc_expected: u32,
}

impl Verdict {
    fn intact(&self) -> bool {
        self.ip_checksum_ok && self.udp_checksum_ok != Some(false) && self.icrc_ok
    }
}

/// The first check `verdict` failed, in a receiving host's order (IPv4 header checksum, a
/// non-zero UDP checksum, ICRC), with the values found and expected, for the packet of `frame`
/// whose IP header (of kind `kind`), BTH and end lie at `at`.
#[cold]
fn integrity_error(frame: &[u8], kind: L3Kind, at: (usize, usize, usize), verdict: Verdict) -> WireError {
    let (l3, bth, end) = at;
    let ip = ip_header(frame, l3, kind);
    if !verdict.ip_checksum_ok {
        let (found, expected) = match ip {
            IpHeader::Ipv4(h) => {
                (h.checksum, frame.get(l3..bth.saturating_sub(8)).map_or(0, inet::ipv4_header_checksum))
            }
            _ => (0, 0),
        };
        return WireError::BadIpChecksum { found, expected };
    }
    if verdict.udp_checksum_ok == Some(false) {
        let found = udp_header(frame, kind, bth).map_or(0, |u| u.checksum);
        let expected = frame.get(bth.saturating_sub(8)..end).map_or(0, |seg| udp_checksum(&ip, seg));
        return WireError::BadUdpChecksum { found, expected };
    }
    WireError::BadIcrc { found: verdict.icrc, expected: verdict.icrc_expected }
}

/// The UDP checksum a segment (UDP header + data, its checksum field ignored) should carry
/// under `ip`'s pseudo-header; a computed 0 is sent as 0xFFFF (RFC 768).
pub(crate) fn udp_checksum(ip: &IpHeader, segment: &[u8]) -> u16 {
    let len = segment.len();
    let mut acc = match ip {
        IpHeader::Ipv4(h) => inet::pseudo_v4(h.src, h.dst, IPPROTO_UDP, len),
        IpHeader::Ipv6(h) | IpHeader::Grh(h) => inet::pseudo_v6(h.src, h.dst, IPPROTO_UDP, len),
    };
    acc = inet::sum(acc, segment.get(..6).unwrap_or(&[]));
    acc = inet::sum(acc, segment.get(8..).unwrap_or(&[]));
    match inet::fold(acc) {
        0 => 0xFFFF,
        c => c,
    }
}

/// Parses a RoCE frame: Ethernet (one optional VLAN tag), then IPv4 or IPv6 + UDP 4791
/// (RoCEv2) or a GRH (RoCEv1, ethertype 0x8915), then the BTH, the extension headers of the
/// opcode, payload, pad and ICRC.
///
/// Structural problems are errors; the integrity checks (IPv4 header checksum, UDP checksum,
/// ICRC) are computed and reported in the packet's `*_ok` fields so that a decoder can still
/// show a damaged frame. Use [`parse_frame_verified`] (or [`RocePacket::check`]) to turn them
/// into errors. Never panics and never allocates. Bytes after the IP packet (Ethernet
/// padding) are ignored.
pub fn parse_frame(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    parse_located(frame, Integrity::Report)
}

/// [`parse_frame`] of a frame whose integrity fields were never computed because it never
/// crossed anything that could damage it: built with
/// [`Checksums::Defer`](crate::packet::Checksums::Defer) and handed from one port to another
/// inside a process. Nothing is hashed; the packet's `*_ok` fields say it passed, and its
/// `icrc_expected` is what the frame carries. Every structural check of [`parse_frame`] is
/// made.
pub fn parse_frame_trusted(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    parse_located(frame, Integrity::Trust)
}

/// What [`parse_located`] does with a frame's integrity fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Integrity {
    /// Not computed: the packet says they passed ([`parse_frame_trusted`]).
    Trust,
    /// Computed and reported in the packet ([`parse_frame`]).
    Report,
    /// Computed; a failed one is the error ([`parse_frame_verified`]).
    Require,
}

/// [`parse_frame`], with the integrity fields handled as `integrity` says.
///
/// The packet is built once, where the caller keeps it: a result moved out of
/// [`parse_frame`] by a checking wrapper cost a copy of every byte per frame received. It
/// holds no decoded header but the BTH: built with the Ethernet, IP, UDP and extension headers
/// decoded (352 bytes), its fields were spilled and copied in one by one, about 190
/// instructions a frame that a receiving port did not need (callgrind).
#[inline(always)]
fn parse_located(frame: &[u8], integrity: Integrity) -> Result<RocePacket<'_>, WireError> {
    let verify = integrity != Integrity::Trust;
    let span = locate(frame)?;
    let transport = frame.get(span.bth..span.end).unwrap_or(&[]);
    let bth = Bth::from_bytes(&array(transport, 0));
    if bth.tver != 0 {
        return Err(WireError::BadTver { tver: bth.tver });
    }
    let opcode = bth.opcode;
    let info = opcode.info().ok_or(WireError::UnknownOpcode { opcode })?;
    let hdr_len = info.header_len();
    if transport.len() < hdr_len + ICRC_LEN {
        return Err(WireError::HeaderTooShort { opcode, need: hdr_len + ICRC_LEN, have: transport.len() });
    }
    let body = transport.get(hdr_len..transport.len() - ICRC_LEN).unwrap_or(&[]);
    let pad_len = usize::from(bth.pad_cnt);
    if pad_len > body.len() {
        return Err(WireError::BadPadCnt { pad_cnt: bth.pad_cnt, available: body.len() });
    }
    let (payload, pad) = body.split_at(body.len() - pad_len);
    if !info.payload && !payload.is_empty() {
        return Err(WireError::UnexpectedPayload { opcode, len: payload.len() });
    }
    let icrc = wire_value(frame, &span);
    let icrc_expected = if verify { icrc_of(frame, &span) } else { icrc };
    let ip_checksum_ok = match span.kind {
        L3Kind::Ipv4 if verify => frame.get(span.l3..span.l3 + span.ip_hdr_len).is_some_and(|h| inet::checksum(h) == 0),
        _ => true,
    };
    // The headers are decoded only where a check needs them: the trusted parse reads neither.
    let udp_checksum_ok = match udp_header(frame, span.kind, span.bth) {
        Some(u) if verify && u.checksum != 0 => Some(
            frame
                .get(span.bth - 8..span.end)
                .is_some_and(|seg| udp_checksum(&ip_header(frame, span.l3, span.kind), seg) == u.checksum),
        ),
        _ => None,
    };
    let verdict = Verdict { ip_checksum_ok, udp_checksum_ok, icrc_ok: icrc == icrc_expected, icrc, icrc_expected };
    if integrity == Integrity::Require && !verdict.intact() {
        return Err(integrity_error(frame, span.kind, (span.l3, span.bth, span.end), verdict));
    }
    Ok(RocePacket {
        frame,
        bth,
        info,
        payload,
        pad,
        icrc,
        icrc_expected,
        icrc_ok: verdict.icrc_ok,
        ip_checksum_ok,
        udp_checksum_ok,
        l3_offset: span.l3,
        bth_offset: span.bth,
        packet_end: span.end,
        l3: span.kind,
    })
}

/// Fills the integrity fields of a frame built with
/// [`Checksums::Defer`](crate::packet::Checksums::Defer): the IPv4 header checksum and the ICRC
/// (a frame that already has them gets the same values again). Fails, changing nothing, with
/// the [`WireError`] [`parse_frame`] would give when `frame` is not a RoCE frame.
pub fn fill_checksums(frame: &mut [u8]) -> Result<(), WireError> {
    let span = locate(frame)?;
    if span.kind == L3Kind::Ipv4
        && let Some(h) = frame.get_mut(span.l3..span.l3 + span.ip_hdr_len)
    {
        inet::put_ipv4_header_checksum(h);
    }
    let icrc = icrc_of(frame, &span);
    if let Some(slot) = frame.get_mut(span.end.saturating_sub(ICRC_LEN)..span.end) {
        slot.copy_from_slice(&icrc.to_le_bytes());
    }
    Ok(())
}

/// [`parse_frame`] plus [`RocePacket::check`]: what a receiving port accepts. A bad IPv4
/// header checksum, a bad non-zero UDP checksum or a bad ICRC is an error.
pub fn parse_frame_verified(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    parse_located(frame, Integrity::Require)
}
