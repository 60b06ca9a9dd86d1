//! Building complete RoCE frames into caller-provided buffers.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::error::BuildError;
use super::gid::gid_to_ip;
use super::headers::{
    Bth, EthHeader, ExtHeaders, GRH_NEXT_HEADER_IBA, IPPROTO_UDP, IpHeader, Ipv4Header, Ipv6Header, MacAddr,
    ROCEV2_UDP_PORT, VlanTag,
};
use super::parse::{L3Kind, RocePacket, udp_checksum};
use crate::icrc::{ICRC_LEN, IcrcSpan, icrc_of};
use crate::inet;

/// How the builder fills the UDP checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UdpChecksum {
    /// 0 ("no checksum"): what rxe and ConnectX send over IPv4 (rxe also over IPv6).
    Zero,
    /// A correct checksum over the pseudo-header, UDP header and data (ICRC included).
    Compute,
}

/// Who computes a frame's integrity fields: its IPv4 header checksum and its ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Checksums {
    /// The builder, into the frame (the default).
    Compute,
    /// Whoever sends the frame: the builder leaves both fields zero for
    /// [`fill_checksums`](crate::packet::fill_checksums) to fill before the frame crosses
    /// anything that could damage or record it, as a NIC's egress inserts the ICRC after its
    /// transport built the packet. A frame that never crosses such a medium (from one port to
    /// another in the same process) needs neither: its receiver parses it with
    /// [`parse_frame_trusted`](crate::packet::parse_frame_trusted). With
    /// [`UdpChecksum::Compute`] (which covers the ICRC) the builder computes all three.
    Defer,
}

/// The smallest Ethernet frame without FCS.
pub const MIN_ETH_FRAME: usize = 60;

/// Everything needed to emit one RoCE frame. Fields are public; the constructors fill
/// rxe-like defaults and the `with_*` methods chain.
///
/// Computed by the builder, whatever the given headers say: the ethertype, IPv4 IHL (5, no
/// options), total length, protocol (17) and header checksum; IPv6 payload length and next
/// header (17, or 0x1B in a GRH); UDP destination port (4791), length and checksum (per
/// `udp_checksum`); the BTH PadCnt (unless `pad_cnt` overrides it); the pad bytes (zeros)
/// and the ICRC. IPv4 is never fragmented (MF and offset 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameBuilder<'a> {
    /// Ethernet addresses and optional VLAN tag.
    pub eth: EthHeader,
    /// L3: IPv4 or IPv6 (RoCEv2), or GRH (RoCEv1).
    pub ip: IpHeader,
    /// UDP source port (ignored for RoCEv1).
    pub udp_src_port: u16,
    /// UDP checksum policy (ignored for RoCEv1).
    pub udp_checksum: UdpChecksum,
    /// The BTH. `pad_cnt` is recomputed from the payload unless `pad_cnt` below is set.
    pub bth: Bth,
    /// Extension headers; must be exactly those the opcode carries.
    pub ext: ExtHeaders,
    /// Payload (without pad).
    pub payload: &'a [u8],
    /// Explicit PadCnt (0-3); `None` = `(-payload.len()) & 3`.
    pub pad_cnt: Option<u8>,
    /// Zero-pad the frame to the 60-byte Ethernet minimum.
    pub pad_to_min_frame: bool,
    /// Who computes the IPv4 header checksum and the ICRC.
    pub checksums: Checksums,
}

impl<'a> FrameBuilder<'a> {
    /// A RoCE frame from `src_mac` to `dst_mac` over `ip`, UDP source port 0xC000, no
    /// extension headers and no payload. The UDP checksum is 0 over IPv4 and computed over
    /// IPv6 (the safe choice of the wire doc §4.1).
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr, ip: IpHeader, bth: Bth) -> Self {
        Self {
            eth: EthHeader { dst: dst_mac, src: src_mac, vlan: None, ethertype: ip.ethertype() },
            ip,
            udp_src_port: 0xC000,
            udp_checksum: match ip {
                IpHeader::Ipv6(_) => UdpChecksum::Compute,
                _ => UdpChecksum::Zero,
            },
            bth,
            ext: ExtHeaders::default(),
            payload: &[],
            pad_cnt: None,
            pad_to_min_frame: false,
            checksums: Checksums::Compute,
        }
    }

    /// RoCEv2 over IPv4 with TOS 0, TTL 64, DF, ID 0.
    pub fn ipv4(src_mac: MacAddr, dst_mac: MacAddr, src: Ipv4Addr, dst: Ipv4Addr, bth: Bth) -> Self {
        Self::new(src_mac, dst_mac, IpHeader::Ipv4(Ipv4Header::new(src, dst)), bth)
    }

    /// RoCEv2 over IPv6 with traffic class 0, flow label 0, hop limit 64.
    pub fn ipv6(src_mac: MacAddr, dst_mac: MacAddr, src: Ipv6Addr, dst: Ipv6Addr, bth: Bth) -> Self {
        Self::new(src_mac, dst_mac, IpHeader::Ipv6(Ipv6Header::new(src, dst)), bth)
    }

    /// RoCEv2 between two GIDs: IPv4 when both are IPv4-mapped, IPv6 otherwise.
    pub fn from_gids(src_mac: MacAddr, dst_mac: MacAddr, sgid: &[u8; 16], dgid: &[u8; 16], bth: Bth) -> Self {
        match (gid_to_ip(sgid), gid_to_ip(dgid)) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => Self::ipv4(src_mac, dst_mac, s, d, bth),
            _ => Self::ipv6(src_mac, dst_mac, Ipv6Addr::from(*sgid), Ipv6Addr::from(*dgid), bth),
        }
    }

    /// RoCEv1 (ethertype 0x8915 + GRH) between two GIDs, hop limit 64.
    pub fn rocev1(src_mac: MacAddr, dst_mac: MacAddr, sgid: &[u8; 16], dgid: &[u8; 16], bth: Bth) -> Self {
        let grh = Ipv6Header {
            next_header: GRH_NEXT_HEADER_IBA,
            ..Ipv6Header::new(Ipv6Addr::from(*sgid), Ipv6Addr::from(*dgid))
        };
        Self::new(src_mac, dst_mac, IpHeader::Grh(grh), bth)
    }

    /// The builder that re-emits a parsed packet: every header field, the UDP checksum
    /// policy (computed if the original was non-zero), PadCnt and the payload. A frame with
    /// IPv4 options, reserved BTH bits or non-zero pad bytes rebuilds without them.
    pub fn from_packet(p: &RocePacket<'a>) -> Self {
        Self {
            eth: p.eth(),
            ip: p.ip(),
            udp_src_port: p.udp_src_port(),
            udp_checksum: match p.udp() {
                Some(u) if u.checksum != 0 => UdpChecksum::Compute,
                _ => UdpChecksum::Zero,
            },
            bth: p.bth,
            ext: p.ext(),
            payload: p.payload,
            pad_cnt: Some(p.bth.pad_cnt),
            pad_to_min_frame: p.packet_end < p.frame.len() && p.frame.len() == MIN_ETH_FRAME,
            checksums: Checksums::Compute,
        }
    }

    /// Sets the extension headers.
    pub fn with_ext(mut self, ext: ExtHeaders) -> Self {
        self.ext = ext;
        self
    }

    /// Sets the payload.
    pub fn with_payload(mut self, payload: &'a [u8]) -> Self {
        self.payload = payload;
        self
    }

    /// Sets the UDP source port.
    pub fn with_udp_src_port(mut self, port: u16) -> Self {
        self.udp_src_port = port;
        self
    }

    /// Sets the UDP checksum policy.
    pub fn with_udp_checksum(mut self, c: UdpChecksum) -> Self {
        self.udp_checksum = c;
        self
    }

    /// Sets who computes the IPv4 header checksum and the ICRC.
    pub fn with_checksums(mut self, c: Checksums) -> Self {
        self.checksums = c;
        self
    }

    /// Whether the builder leaves the IPv4 header checksum and the ICRC to the sender: asked
    /// for, and no UDP checksum (which covers the ICRC) to compute.
    fn defers_checksums(&self) -> bool {
        self.checksums == Checksums::Defer
            && (self.udp_checksum == UdpChecksum::Zero || matches!(self.ip, IpHeader::Grh(_)))
    }

    /// Sets the VLAN tag.
    pub fn with_vlan(mut self, vlan: Option<VlanTag>) -> Self {
        self.eth.vlan = vlan;
        self
    }

    /// Sets the IPv4 TOS or IPv6/GRH traffic class (DSCP << 2 | ECN).
    pub fn with_traffic_class(mut self, tc: u8) -> Self {
        match &mut self.ip {
            IpHeader::Ipv4(h) => h.tos = tc,
            IpHeader::Ipv6(h) | IpHeader::Grh(h) => h.traffic_class = tc,
        }
        self
    }

    /// Sets the IPv4 TTL or IPv6/GRH hop limit.
    pub fn with_hop_limit(mut self, hops: u8) -> Self {
        match &mut self.ip {
            IpHeader::Ipv4(h) => h.ttl = hops,
            IpHeader::Ipv6(h) | IpHeader::Grh(h) => h.hop_limit = hops,
        }
        self
    }

    /// Sets the IPv4 identification (no effect on IPv6/GRH).
    pub fn with_ip_id(mut self, id: u16) -> Self {
        if let IpHeader::Ipv4(h) = &mut self.ip {
            h.id = id;
        }
        self
    }

    /// Sets the IPv6/GRH flow label (no effect on IPv4).
    pub fn with_flow_label(mut self, fl: u32) -> Self {
        if let IpHeader::Ipv6(h) | IpHeader::Grh(h) = &mut self.ip {
            h.flow_label = fl;
        }
        self
    }

    /// The PadCnt the frame will carry.
    pub fn pad(&self) -> u8 {
        self.pad_for(self.payload.len())
    }

    /// The PadCnt of the frame with a payload of `payload_len` bytes.
    fn pad_for(&self, payload_len: usize) -> u8 {
        pad_of(self.pad_cnt, payload_len)
    }

    fn l3_kind(&self) -> L3Kind {
        match self.ip {
            IpHeader::Ipv4(_) => L3Kind::Ipv4,
            IpHeader::Ipv6(_) => L3Kind::Ipv6,
            IpHeader::Grh(_) => L3Kind::Grh,
        }
    }

    /// BTH through ICRC, in bytes.
    fn transport_len(&self) -> usize {
        self.transport_len_for(self.payload.len())
    }

    /// BTH through ICRC, in bytes, with a payload of `payload_len` bytes.
    fn transport_len_for(&self, payload_len: usize) -> usize {
        transport_len_of(self.pad_cnt, &self.bth, payload_len)
    }

    /// Length of the frame [`build_into`](Self::build_into) would write (assuming the
    /// builder is valid).
    pub fn frame_len(&self) -> usize {
        self.frame_len_of(self.transport_len())
    }

    /// Checks the builder; the length of its transport packet ([`Self::transport_len`]), which
    /// the writer then needs not compute again.
    fn validate(&self) -> Result<usize, BuildError> {
        self.validate_for(self.payload.len())
    }

    /// [`Self::validate`] with a payload of `payload_len` bytes.
    fn validate_for(&self, payload_len: usize) -> Result<usize, BuildError> {
        self.validate_path()?;
        validate_packet(self.l3_kind(), self.pad_cnt, &self.bth, &self.ext, payload_len)
    }

    /// The checks of the fields every frame of a [`FrameTemplate`] shares.
    fn validate_path(&self) -> Result<(), BuildError> {
        if let IpHeader::Ipv6(h) | IpHeader::Grh(h) = self.ip {
            range("flow label", h.flow_label.into(), 0xF_FFFF)?;
        }
        Ok(())
    }

    /// Writes the frame at the start of `buf` and returns its length. Nothing is allocated;
    /// every byte of the frame is written (a reused buffer needs no clearing).
    pub fn build_into(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        let transport = self.validate()?;
        self.write_frame_of_payload(buf, transport)
    }

    /// [`FrameBuilder::frame_len`] from the transport packet's length.
    fn frame_len_of(&self, transport: usize) -> usize {
        let l3 = match self.l3_kind() {
            L3Kind::Ipv4 => 20 + 8,
            L3Kind::Ipv6 => 40 + 8,
            L3Kind::Grh => 40,
        };
        let n = self.eth.len() + l3 + transport;
        if self.pad_to_min_frame { n.max(MIN_ETH_FRAME) } else { n }
    }

    /// [`Self::write_frame`] of the builder's `payload`.
    fn write_frame_of_payload(&self, buf: &mut [u8], transport: usize) -> Result<usize, BuildError> {
        let put = |slot: &mut [u8]| {
            slot.copy_from_slice(self.payload);
            true
        };
        // The copy always succeeds: the frame is written whole.
        Ok(self.write_frame(buf, transport, self.payload.len(), put)?.unwrap_or(0))
    }

    /// Writes the frame after [`FrameBuilder::validate_for`] passed and gave the transport
    /// packet's length: the headers, then the `payload_len` bytes of payload that `fill` writes
    /// in their place, then the pad, ICRC and UDP checksum. `Ok(None)` when `fill` returned
    /// false.
    fn write_frame(
        &self,
        buf: &mut [u8],
        transport: usize,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<usize>, BuildError> {
        self.template_unchecked().write_frame(buf, &self.bth, &self.ext, transport, payload_len, fill)
    }

    /// The headers every frame of this builder's path repeats, written once (see
    /// [`FrameTemplate`]). Fails as [`Self::build_into`] would for a field of the path.
    pub fn template(&self) -> Result<FrameTemplate, BuildError> {
        self.validate_path()?;
        Ok(self.template_unchecked())
    }

    /// [`Self::template`] of a builder already checked.
    fn template_unchecked(&self) -> FrameTemplate {
        let mut head = [0u8; FrameTemplate::HEAD_MAX];
        let mut w = Writer { out: &mut head, at: 0 };
        // Ethernet.
        w.put(&self.eth.dst);
        w.put(&self.eth.src);
        if let Some(tag) = self.eth.vlan {
            w.put(&tag.tpid.to_be_bytes());
            w.put(&tag.tci.to_be_bytes());
        }
        w.put(&self.ip.ethertype().to_be_bytes());
        // L3 (+ UDP), their lengths and the IPv4 header checksum left for each frame.
        let l3 = w.at;
        let (kind, ip_hdr_len) = match self.ip {
            IpHeader::Ipv4(h) => {
                let mut hdr = [0u8; 20];
                hdr[0] = 0x45;
                hdr[1] = h.tos;
                hdr[4..6].copy_from_slice(&h.id.to_be_bytes());
                hdr[6] = if h.dont_fragment { 0x40 } else { 0 };
                hdr[8] = h.ttl;
                hdr[9] = IPPROTO_UDP;
                hdr[12..16].copy_from_slice(&h.src.octets());
                hdr[16..20].copy_from_slice(&h.dst.octets());
                w.put(&hdr);
                (L3Kind::Ipv4, 20)
            }
            IpHeader::Ipv6(h) | IpHeader::Grh(h) => {
                let v1 = matches!(self.ip, IpHeader::Grh(_));
                let word0 = (6u32 << 28) | (u32::from(h.traffic_class) << 20) | h.flow_label;
                w.put(&word0.to_be_bytes());
                w.put(&[0, 0]);
                w.put(&[if v1 { GRH_NEXT_HEADER_IBA } else { IPPROTO_UDP }, h.hop_limit]);
                w.put(&h.src.octets());
                w.put(&h.dst.octets());
                (if v1 { L3Kind::Grh } else { L3Kind::Ipv6 }, 40)
            }
        };
        if kind != L3Kind::Grh {
            w.put(&self.udp_src_port.to_be_bytes());
            w.put(&ROCEV2_UDP_PORT.to_be_bytes());
            w.put(&[0, 0, 0, 0]);
        }
        let head_len = w.at;
        // The IPv4 header's sum without its total length (and with its checksum zero): a
        // frame's header checksum is then that sum with the frame's length added, folded.
        let ipv4_sum = match kind {
            L3Kind::Ipv4 => head.get(l3..l3 + 20).map_or(0, |h| inet::sum(0, h)),
            _ => 0,
        };
        FrameTemplate {
            head,
            head_len: head_len as u8,
            ipv4_sum,
            l3: l3 as u8,
            ip_hdr_len: ip_hdr_len as u8,
            kind,
            ip: self.ip,
            pad_cnt: self.pad_cnt,
            pad_to_min_frame: self.pad_to_min_frame,
            udp_checksum: kind != L3Kind::Grh && self.udp_checksum == UdpChecksum::Compute,
            defer: self.defers_checksums(),
        }
    }

    /// Builds into `out`, replacing its contents (its capacity is reused: no allocation once
    /// it has grown to the largest frame). The frame's bytes are written over what `out` held,
    /// not cleared first: only bytes past its old length are zeroed before being written.
    pub fn build_vec(&self, out: &mut Vec<u8>) -> Result<usize, BuildError> {
        self.template()?.build_vec(&self.bth, &self.ext, self.payload, out)
    }

    /// [`Self::build_vec`] of a frame whose payload, `payload_len` bytes in place of the
    /// builder's `payload`, `fill` writes straight into the frame (before the ICRC and UDP
    /// checksum are computed over it): how a NIC's DMA engine reads a packet's payload from
    /// host memory into the packet, with no copy in between. `Ok(None)` when `fill` returned
    /// false (it could not get the payload); `out` then holds no valid frame.
    pub fn build_vec_filled(
        &self,
        payload_len: usize,
        out: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<usize>, BuildError> {
        self.template()?.build_vec_filled(&self.bth, &self.ext, payload_len, out, fill)
    }

    /// Builds into a new vector (of the frame's exact length: one allocation).
    pub fn to_vec(&self) -> Result<Vec<u8>, BuildError> {
        let mut v = Vec::new();
        self.build_vec(&mut v)?;
        Ok(v)
    }
}

/// The PadCnt of a payload of `payload_len` bytes: `pad_cnt` when set, otherwise what pads it to
/// a multiple of 4.
fn pad_of(pad_cnt: Option<u8>, payload_len: usize) -> u8 {
    pad_cnt.unwrap_or((payload_len.wrapping_neg() & 3) as u8)
}

/// BTH through ICRC, in bytes, of a packet with `bth` and a payload of `payload_len` bytes.
fn transport_len_of(pad_cnt: Option<u8>, bth: &Bth, payload_len: usize) -> usize {
    bth.opcode.header_len().unwrap_or(Bth::LEN) + payload_len + usize::from(pad_of(pad_cnt, payload_len)) + ICRC_LEN
}

/// Widest value of the 24-bit fields (QPN, PSN, MSN, EE-Context).
const M24: u32 = 0x00FF_FFFF;

/// The checks of one packet's fields (`bth`, `ext` and a payload of `payload_len` bytes) on a
/// path of `kind` with the PadCnt policy `pad_cnt`; the length of its transport packet.
///
/// Every packet a device sends passes through here, so the checks are first made at once, as
/// one condition; only a packet that fails one is checked again, field by field in a fixed
/// order, to name the first field at fault ([`validate_packet_by_field`], whose answer is the
/// answer).
#[inline]
fn validate_packet(
    kind: L3Kind,
    pad_cnt: Option<u8>,
    bth: &Bth,
    ext: &ExtHeaders,
    payload_len: usize,
) -> Result<usize, BuildError> {
    let pad = pad_of(pad_cnt, payload_len);
    if let Some(info) = bth.opcode.info()
        && info.headers == ext.present()
        && (info.payload || payload_len == 0)
        && bth.dest_qp <= M24
        && bth.psn <= M24
        && bth.tver <= 0xF
        && pad <= 3
        && ext.deth.is_none_or(|d| d.src_qp <= M24)
        && ext.aeth.is_none_or(|a| a.msn <= M24)
        && ext.rdeth.is_none_or(|r| r.ee_context <= M24)
    {
        let t = info.header_len() + payload_len + usize::from(pad) + ICRC_LEN;
        if ip_len_of(kind, t) <= usize::from(u16::MAX) {
            return Ok(t);
        }
    }
    validate_packet_by_field(kind, pad_cnt, bth, ext, payload_len)
}

/// The IPv4 total length (or IPv6 / GRH payload length) of a packet on a path of `kind` whose
/// transport packet is `transport` bytes.
fn ip_len_of(kind: L3Kind, transport: usize) -> usize {
    match kind {
        L3Kind::Ipv4 => 20 + 8 + transport,
        L3Kind::Ipv6 => 8 + transport,
        L3Kind::Grh => transport,
    }
}

/// [`validate_packet`]'s checks one by one, in a fixed order: the opcode, its extension
/// headers, its payload, then each field's range and the packet's length; the first that
/// fails is the error.
#[cold]
fn validate_packet_by_field(
    kind: L3Kind,
    pad_cnt: Option<u8>,
    bth: &Bth,
    ext: &ExtHeaders,
    payload_len: usize,
) -> Result<usize, BuildError> {
    let opcode = bth.opcode;
    let info = opcode.info().ok_or(BuildError::UnknownOpcode { opcode })?;
    if let Some(header) = info.headers.first_difference(ext.present()) {
        return Err(if info.headers.contains(header) {
            BuildError::MissingHeader { opcode, header }
        } else {
            BuildError::UnexpectedHeader { opcode, header }
        });
    }
    if !info.payload && payload_len != 0 {
        return Err(BuildError::UnexpectedPayload { opcode, len: payload_len });
    }
    let m24 = u64::from(M24);
    range("BTH DestQP", bth.dest_qp.into(), m24)?;
    range("BTH PSN", bth.psn.into(), m24)?;
    range("BTH TVer", bth.tver.into(), 0xF)?;
    let pad = pad_of(pad_cnt, payload_len);
    range("PadCnt", pad.into(), 3)?;
    if let Some(d) = ext.deth {
        range("DETH SrcQP", d.src_qp.into(), m24)?;
    }
    if let Some(a) = ext.aeth {
        range("AETH MSN", a.msn.into(), m24)?;
    }
    if let Some(r) = ext.rdeth {
        range("RDETH EE-Context", r.ee_context.into(), m24)?;
    }
    let t = info.header_len() + payload_len + usize::from(pad) + ICRC_LEN;
    let ip_len = ip_len_of(kind, t);
    if ip_len > usize::from(u16::MAX) {
        return Err(BuildError::TooLong { len: ip_len });
    }
    Ok(t)
}

fn range(field: &'static str, value: u64, max: u64) -> Result<(), BuildError> {
    if value > max { Err(BuildError::FieldRange { field, value, max }) } else { Ok(()) }
}

/// The headers a sender repeats in every frame to one destination (Ethernet with its VLAN tag,
/// IPv4, IPv6 or the GRH, and UDP), written once by [`FrameBuilder::template`]: a frame of it
/// then costs only what changes per packet (the lengths, the BTH and extension headers, the
/// payload and pad, and the integrity fields), as a NIC keeps a QP's address vector ready
/// rather than composing it per packet. A frame of a template is byte for byte the frame of
/// the builder it came from with that packet's BTH, extension headers and payload, checked the
/// same way.
#[derive(Clone, Copy, Debug)]
pub struct FrameTemplate {
    /// Ethernet through UDP, lengths and IPv4 header checksum zero.
    head: [u8; Self::HEAD_MAX],
    /// Bytes of `head` used.
    head_len: u8,
    /// The one's complement running sum of the IPv4 header in `head` (whose total length and
    /// checksum are zero); 0 for IPv6 and the GRH.
    ipv4_sum: u64,
    /// Offset of the IP header / GRH.
    l3: u8,
    /// Length of the IP header / GRH.
    ip_hdr_len: u8,
    kind: L3Kind,
    /// The IP header (its addresses make the UDP checksum's pseudo-header).
    ip: IpHeader,
    /// The builder's PadCnt policy.
    pad_cnt: Option<u8>,
    /// The builder's padding to the Ethernet minimum.
    pad_to_min_frame: bool,
    /// Whether frames carry a computed UDP checksum.
    udp_checksum: bool,
    /// Whether the IPv4 header checksum and the ICRC are left to the sender.
    defer: bool,
}

impl FrameTemplate {
    /// Ethernet with a VLAN tag (18), an IPv6 header (40) and UDP (8).
    const HEAD_MAX: usize = 18 + 40 + 8;

    /// Whether its frames leave the IPv4 header checksum and the ICRC to their sender
    /// ([`Checksums::Defer`]).
    pub fn defers_checksums(&self) -> bool {
        self.defer
    }

    /// The frame of this path with `bth`, `ext` and a payload of `payload_len` bytes that `fill`
    /// writes in place, built into `out` as [`FrameBuilder::build_vec_filled`] does.
    pub fn build_vec_filled(
        &self,
        bth: &Bth,
        ext: &ExtHeaders,
        payload_len: usize,
        out: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<usize>, BuildError> {
        let transport = validate_packet(self.kind, self.pad_cnt, bth, ext, payload_len)?;
        out.resize(self.frame_len_of(transport), 0);
        self.write_frame(out, bth, ext, transport, payload_len, fill)
    }

    /// The frame of this path with `bth`, `ext` and `payload`, built into `out` as
    /// [`FrameBuilder::build_vec`] does.
    pub fn build_vec(
        &self,
        bth: &Bth,
        ext: &ExtHeaders,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize, BuildError> {
        let put = |slot: &mut [u8]| {
            slot.copy_from_slice(payload);
            true
        };
        // The copy always succeeds: the frame is written whole.
        Ok(self.build_vec_filled(bth, ext, payload.len(), out, put)?.unwrap_or(0))
    }

    /// The frame's length with a transport packet of `transport` bytes.
    fn frame_len_of(&self, transport: usize) -> usize {
        let n = usize::from(self.head_len) + transport;
        if self.pad_to_min_frame { n.max(MIN_ETH_FRAME) } else { n }
    }

    /// [`FrameBuilder::write_frame`] on this path.
    fn write_frame(
        &self,
        buf: &mut [u8],
        bth: &Bth,
        ext: &ExtHeaders,
        transport: usize,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<usize>, BuildError> {
        let total = self.frame_len_of(transport);
        let have = buf.len();
        let Some(out) = buf.get_mut(..total) else {
            return Err(BuildError::BufferTooSmall { need: total, have });
        };
        let mut w = Writer { out, at: 0 };
        let defer = self.defer;

        // The path's headers, then their lengths (and the IPv4 header checksum).
        w.put(self.head.get(..usize::from(self.head_len)).unwrap_or(&[]));
        let (l3, kind, ip_hdr_len) = (usize::from(self.l3), self.kind, usize::from(self.ip_hdr_len));
        let udp_off = l3 + ip_hdr_len;
        match kind {
            L3Kind::Ipv4 => {
                let total = (20 + 8 + transport) as u16;
                w.put_at(l3 + 2, &total.to_be_bytes());
                if !defer {
                    let checksum = inet::fold(self.ipv4_sum + u64::from(total));
                    w.put_at(l3 + inet::IPV4_CHECKSUM_AT, &checksum.to_be_bytes());
                }
            }
            L3Kind::Ipv6 => w.put_at(l3 + 4, &((8 + transport) as u16).to_be_bytes()),
            L3Kind::Grh => w.put_at(l3 + 4, &(transport as u16).to_be_bytes()),
        }
        if kind != L3Kind::Grh {
            w.put_at(udp_off + 4, &((8 + transport) as u16).to_be_bytes());
        }

        // BTH, extension headers, payload, pad.
        let bth_off = w.at;
        let bth = Bth { pad_cnt: pad_of(self.pad_cnt, payload_len), ..*bth };
        w.put(&bth.to_bytes());
        for kind in bth.opcode.headers().iter() {
            let at = w.at;
            let end = at + kind.size();
            if let Some(slot) = w.out.get_mut(at..end) {
                ext.write(kind, slot);
            }
            w.at = end;
        }
        if !w.fill(payload_len, fill) {
            return Ok(None);
        }
        w.zero(usize::from(bth.pad_cnt));

        // ICRC, then the UDP checksum (which covers the ICRC; the ICRC masks it).
        let end = w.at + ICRC_LEN;
        let icrc = if defer { 0 } else { icrc_of(w.out, &IcrcSpan { l3, ip_hdr_len, kind, bth: bth_off, end }) };
        w.put(&icrc.to_le_bytes());
        let udp_csum = match w.out.get(udp_off..end) {
            Some(seg) if self.udp_checksum => Some(udp_checksum(&self.ip, seg)),
            _ => None,
        };
        if let Some(csum) = udp_csum {
            w.put_at(udp_off + 6, &csum.to_be_bytes());
        }
        let rest = total - w.at;
        w.zero(rest);
        Ok(Some(total))
    }
}

/// A cursor over the output frame. Writes past the end are dropped (the caller sized the
/// buffer with `frame_len`, so this never happens; it only keeps the builder panic-free).
struct Writer<'b> {
    out: &'b mut [u8],
    at: usize,
}

impl Writer<'_> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        if let Some(slot) = self.out.get_mut(self.at..self.at + b.len()) {
            slot.copy_from_slice(b);
        }
        self.at += b.len();
    }

    /// Writes `b` at `at`, behind the cursor (a length or checksum of bytes written before).
    #[inline(always)]
    fn put_at(&mut self, at: usize, b: &[u8]) {
        if let Some(slot) = self.out.get_mut(at..at + b.len()) {
            slot.copy_from_slice(b);
        }
    }

    /// Has `f` write the next `n` bytes in place; false when it did not.
    #[inline(always)]
    fn fill(&mut self, n: usize, f: impl FnOnce(&mut [u8]) -> bool) -> bool {
        let done = self.out.get_mut(self.at..self.at + n).is_some_and(f);
        self.at += n;
        done
    }

    /// Zeroes `n` bytes (none, the common case of the pad and of the rest of a frame, calls
    /// nothing).
    #[inline(always)]
    fn zero(&mut self, n: usize) {
        if n > 0
            && let Some(slot) = self.out.get_mut(self.at..self.at + n)
        {
            slot.fill(0);
        }
        self.at += n;
    }
}

/// Builds the frame described by `b` into `buf`; returns its length. Same as
/// [`FrameBuilder::build_into`].
pub fn build_frame(b: &FrameBuilder<'_>, buf: &mut [u8]) -> Result<usize, BuildError> {
    b.build_into(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Aeth, Deth, Opcode, Rdeth, Reth};

    /// The one-condition check of a packet agrees with the field-by-field one on every fault
    /// (and on no fault): the same length, or the same first error.
    #[test]
    fn the_quick_packet_check_agrees_with_the_one_that_names_the_fault() {
        let send = Bth::new(Opcode::RC_SEND_ONLY, 1, 2);
        let write = Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 1, 2);
        let reth = ExtHeaders { reth: Some(Reth::default()), ..ExtHeaders::default() };
        let none = ExtHeaders::default();
        let ud = Bth::new(Opcode::UD_SEND_ONLY, 1, 2);
        let deth = |src_qp| ExtHeaders { deth: Some(Deth { qkey: 1, src_qp }), ..ExtHeaders::default() };
        let ack = Bth::new(Opcode::RC_ACKNOWLEDGE, 1, 2);
        let aeth = |msn| ExtHeaders { aeth: Some(Aeth { syndrome: 0, msn }), ..ExtHeaders::default() };
        let rd = Bth::new(Opcode(0x40), 1, 2); // RD SEND First: RDETH + DETH
        let rdeth = |ee_context| ExtHeaders {
            rdeth: Some(Rdeth { ee_context }),
            deth: Some(Deth { qkey: 1, src_qp: 3 }),
            ..ExtHeaders::default()
        };
        let with = |b: Bth, f: fn(&mut Bth)| {
            let mut b = b;
            f(&mut b);
            b
        };
        let cases: Vec<(L3Kind, Option<u8>, Bth, ExtHeaders, usize)> = vec![
            (L3Kind::Ipv4, None, send, none, 64),
            (L3Kind::Ipv6, None, write, reth, 1024),
            (L3Kind::Grh, Some(0), send, none, 0),
            (L3Kind::Ipv4, None, Bth::new(Opcode(0x15), 1, 2), none, 0),
            (L3Kind::Ipv4, None, write, none, 8),
            (L3Kind::Ipv4, None, send, reth, 8),
            (L3Kind::Ipv4, None, ack, aeth(7), 1),
            (L3Kind::Ipv4, None, with(send, |b| b.dest_qp = 1 << 24), none, 0),
            (L3Kind::Ipv4, None, with(send, |b| b.psn = 1 << 24), none, 0),
            (L3Kind::Ipv4, None, with(send, |b| b.tver = 16), none, 0),
            (L3Kind::Ipv4, Some(4), send, none, 0),
            (L3Kind::Ipv4, None, ud, deth(1 << 24), 0),
            (L3Kind::Ipv4, None, ud, deth(5), 0),
            (L3Kind::Ipv4, None, ack, aeth(1 << 24), 0),
            (L3Kind::Ipv4, None, ack, aeth(9), 0),
            (L3Kind::Ipv4, None, rd, rdeth(1 << 24), 0),
            (L3Kind::Ipv4, None, rd, rdeth(4), 0),
            // The longest payloads that fit (padded to 4, with a 12-byte BTH and the ICRC), and
            // one word more.
            (L3Kind::Ipv4, None, send, none, 65_488),
            (L3Kind::Ipv4, None, send, none, 65_492),
            (L3Kind::Ipv6, None, send, none, 65_508),
            (L3Kind::Ipv6, None, send, none, 65_512),
            (L3Kind::Grh, None, send, none, 65_516),
            (L3Kind::Grh, None, send, none, 65_520),
        ];
        let mut faults = 0;
        for (i, (kind, pad_cnt, bth, ext, len)) in cases.into_iter().enumerate() {
            let quick = validate_packet(kind, pad_cnt, &bth, &ext, len);
            assert_eq!(quick, validate_packet_by_field(kind, pad_cnt, &bth, &ext, len), "case {i}");
            faults += usize::from(quick.is_err());
        }
        assert_eq!(faults, 14, "the cases' faults");
    }
}
