//! Header types: decoded copies of the L2/L3/L4 headers, the BTH and the extension headers,
//! each with its wire encoding (all fields big-endian).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::gid::gid_to_ip;
use super::opcode::{ExtKind, HeaderSet, Opcode};

/// An Ethernet MAC address.
pub type MacAddr = [u8; 6];

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Ethertype of RoCEv1 (IBA GRH follows).
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
/// TPID of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// TPID of an 802.1ad service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// The RoCEv2 UDP destination port.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// GRH next header value of IBA transport (RoCEv1).
pub const GRH_NEXT_HEADER_IBA: u8 = 0x1B;
/// The default full-member P_Key.
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// The Q_Key of QP1 (GSI) traffic.
pub const GSI_QKEY: u32 = 0x8001_0000;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// A VLAN tag (802.1Q or 802.1ad).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Tag protocol identifier (0x8100 or 0x88A8).
    pub tpid: u16,
    /// Tag control information: PCP (3 bits), DEI (1), VID (12).
    pub tci: u16,
}

impl VlanTag {
    /// An 802.1Q tag with priority `pcp` and VLAN id `vid`.
    pub const fn new(pcp: u8, vid: u16) -> Self {
        Self { tpid: ETHERTYPE_VLAN, tci: ((pcp as u16 & 7) << 13) | (vid & 0x0FFF) }
    }

    /// The VLAN id.
    pub const fn vid(&self) -> u16 {
        self.tci & 0x0FFF
    }

    /// The priority code point.
    pub const fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }
}

/// The Ethernet header (with at most one VLAN tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthHeader {
    /// Destination MAC.
    pub dst: MacAddr,
    /// Source MAC.
    pub src: MacAddr,
    /// VLAN tag, if any.
    pub vlan: Option<VlanTag>,
    /// Ethertype after any tag. The frame builder overwrites it from the L3 kind.
    pub ethertype: u16,
}

impl EthHeader {
    /// Header length on the wire (14, or 18 with a tag).
    pub const fn len(&self) -> usize {
        if self.vlan.is_some() { 18 } else { 14 }
    }

    /// Never empty; present for symmetry with `len`.
    pub const fn is_empty(&self) -> bool {
        false
    }
}

/// An IPv4 header (options are accepted by the parser but not kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Header {
    /// Header length in 32-bit words (5 without options). The builder always writes 5.
    pub ihl: u8,
    /// TOS byte: DSCP (6 bits) and ECN (2 bits). ConnectX sends 0x02 or 0x6A.
    pub tos: u8,
    /// Total length. Computed by the builder.
    pub total_len: u16,
    /// Identification.
    pub id: u16,
    /// DF flag (RoCE sets it).
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol (17). Written as 17 by the builder.
    pub protocol: u8,
    /// Header checksum as found. Computed by the builder.
    pub checksum: u16,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

impl Ipv4Header {
    /// A RoCEv2 header with rxe's defaults: TOS 0, TTL 64, DF, ID 0.
    pub const fn new(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        Self {
            ihl: 5,
            tos: 0,
            total_len: 0,
            id: 0,
            dont_fragment: true,
            ttl: 64,
            protocol: IPPROTO_UDP,
            checksum: 0,
            src,
            dst,
        }
    }

    /// DSCP (top 6 TOS bits).
    pub const fn dscp(&self) -> u8 {
        self.tos >> 2
    }

    /// ECN (low 2 TOS bits).
    pub const fn ecn(&self) -> u8 {
        self.tos & 3
    }
}

/// An IPv6 header, also the layout of the RoCEv1 GRH (whose addresses are GIDs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Header {
    /// Traffic class (DSCP + ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length. Computed by the builder.
    pub payload_len: u16,
    /// Next header (17 for RoCEv2, 0x1B in a GRH). Written by the builder.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address (source GID).
    pub src: Ipv6Addr,
    /// Destination address (destination GID).
    pub dst: Ipv6Addr,
}

impl Ipv6Header {
    /// A RoCEv2 header with rxe's defaults: traffic class 0, flow label 0, hop limit 64.
    pub const fn new(src: Ipv6Addr, dst: Ipv6Addr) -> Self {
        Self { traffic_class: 0, flow_label: 0, payload_len: 0, next_header: IPPROTO_UDP, hop_limit: 64, src, dst }
    }
}

/// Which L3 header a RoCE frame has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpHeader {
    /// RoCEv2 over IPv4.
    Ipv4(Ipv4Header),
    /// RoCEv2 over IPv6.
    Ipv6(Ipv6Header),
    /// RoCEv1: ethertype 0x8915 and a GRH (IPv6 layout, next header 0x1B), no UDP.
    Grh(Ipv6Header),
}

/// RoCE protocol version of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoceVersion {
    /// RoCEv1: Ethernet + GRH + BTH.
    V1,
    /// RoCEv2: Ethernet + IP + UDP 4791 + BTH.
    V2,
}

impl IpHeader {
    /// The source address; for a GRH, the source GID mapped with [`gid_to_ip`].
    pub fn src(&self) -> IpAddr {
        match self {
            IpHeader::Ipv4(h) => IpAddr::V4(h.src),
            IpHeader::Ipv6(h) => IpAddr::V6(h.src),
            IpHeader::Grh(h) => gid_to_ip(&h.src.octets()),
        }
    }

    /// The destination address; for a GRH, the destination GID mapped with [`gid_to_ip`].
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHeader::Ipv4(h) => IpAddr::V4(h.dst),
            IpHeader::Ipv6(h) => IpAddr::V6(h.dst),
            IpHeader::Grh(h) => gid_to_ip(&h.dst.octets()),
        }
    }

    /// The source GID: [`ip_to_gid`](super::ip_to_gid) of [`Self::src`], read straight from
    /// the header.
    pub fn src_gid(&self) -> [u8; 16] {
        match self {
            IpHeader::Ipv4(h) => h.src.to_ipv6_mapped().octets(),
            IpHeader::Ipv6(h) | IpHeader::Grh(h) => h.src.octets(),
        }
    }

    /// The destination GID: [`ip_to_gid`](super::ip_to_gid) of [`Self::dst`], read straight
    /// from the header.
    pub fn dst_gid(&self) -> [u8; 16] {
        match self {
            IpHeader::Ipv4(h) => h.dst.to_ipv6_mapped().octets(),
            IpHeader::Ipv6(h) | IpHeader::Grh(h) => h.dst.octets(),
        }
    }

    /// Header length on the wire (builder view: IPv4 without options).
    pub const fn len(&self) -> usize {
        match self {
            IpHeader::Ipv4(h) => h.ihl as usize * 4,
            IpHeader::Ipv6(_) | IpHeader::Grh(_) => 40,
        }
    }

    /// Never empty; present for symmetry with `len`.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// RoCEv1 for a GRH, RoCEv2 otherwise.
    pub const fn roce_version(&self) -> RoceVersion {
        match self {
            IpHeader::Grh(_) => RoceVersion::V1,
            _ => RoceVersion::V2,
        }
    }

    /// The ethertype that announces this header.
    pub const fn ethertype(&self) -> u16 {
        match self {
            IpHeader::Ipv4(_) => ETHERTYPE_IPV4,
            IpHeader::Ipv6(_) => ETHERTYPE_IPV6,
            IpHeader::Grh(_) => ETHERTYPE_ROCEV1,
        }
    }
}

/// The UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// Source port (flow entropy, 0xC000-0xFFFF by convention).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
    /// Length (header + data).
    pub length: u16,
    /// Checksum (0 = none; RoCE senders use 0 over IPv4).
    pub checksum: u16,
}

impl UdpHeader {
    /// Size on the wire.
    pub const LEN: usize = 8;

    pub(crate) fn read(b: &[u8; 8]) -> Self {
        Self { src_port: be16(b, 0), dst_port: be16(b, 2), length: be16(b, 4), checksum: be16(b, 6) }
    }
}

/// The Base Transport Header (12 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bth {
    /// OpCode.
    pub opcode: Opcode,
    /// Solicited Event.
    pub se: bool,
    /// MigReq (ConnectX sends 1, rxe 0; receivers ignore it).
    pub m: bool,
    /// Pad count (0-3) after the payload.
    pub pad_cnt: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward ECN (RoCEv2).
    pub fecn: bool,
    /// Backward ECN (RoCEv2; set in a CNP).
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// Size on the wire.
    pub const LEN: usize = 12;

    /// A BTH with P_Key 0xFFFF and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        Self {
            opcode,
            se: false,
            m: false,
            pad_cnt: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Byte offset of the 24-bit destination QP.
    const DEST_QP_AT: usize = 5;

    /// The destination QP of an encoded BTH, without decoding the rest (receive steering).
    #[inline]
    pub fn dest_qp_of(b: &[u8; 12]) -> u32 {
        be24(b, Self::DEST_QP_AT)
    }

    /// Decodes a BTH (reserved bits are ignored).
    pub fn from_bytes(b: &[u8; 12]) -> Self {
        Self {
            opcode: Opcode(b[0]),
            se: b[1] & 0x80 != 0,
            m: b[1] & 0x40 != 0,
            pad_cnt: (b[1] >> 4) & 3,
            tver: b[1] & 0x0F,
            pkey: be16(b, 2),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: Self::dest_qp_of(b),
            ack_req: b[8] & 0x80 != 0,
            psn: be24(b, 9),
        }
    }

    /// Encodes the BTH (reserved bits zero; fields wider than their wire width are masked).
    pub fn to_bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0] = self.opcode.0;
        b[1] = (u8::from(self.se) << 7) | (u8::from(self.m) << 6) | ((self.pad_cnt & 3) << 4) | (self.tver & 0x0F);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        b[Self::DEST_QP_AT..Self::DEST_QP_AT + 3].copy_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        b[8] = u8::from(self.ack_req) << 7;
        b[9..12].copy_from_slice(&self.psn.to_be_bytes()[1..]);
        b
    }
}

/// Reliable Datagram Extended Transport Header (RD only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rdeth {
    /// EE-Context (24 bits).
    pub ee_context: u32,
}

impl Rdeth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        Self { ee_context: be24(b, 1) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 4] {
        (self.ee_context & 0x00FF_FFFF).to_be_bytes()
    }
}

/// Datagram Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Deth {
    /// Q_Key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 8]) -> Self {
        Self { qkey: be32(b, 0), src_qp: be24(b, 5) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4..].copy_from_slice(&(self.src_qp & 0x00FF_FFFF).to_be_bytes());
        b
    }
}

/// Flush Extended Transport Header (IBA 1.5 FLUSH).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Feth {
    /// The raw 32-bit word.
    pub raw: u32,
}

impl Feth {
    /// Placement type (bits 3-0).
    pub const fn placement_type(&self) -> u8 {
        (self.raw & 0x0F) as u8
    }
    /// Selectivity level (bits 5-4).
    pub const fn selectivity_level(&self) -> u8 {
        ((self.raw >> 4) & 3) as u8
    }
    /// Decodes.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        Self { raw: be32(b, 0) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 4] {
        self.raw.to_be_bytes()
    }
}

/// RDMA Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length.
    pub dma_len: u32,
}

impl Reth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 16]) -> Self {
        Self { va: be64(b, 0), rkey: be32(b, 8), dma_len: be32(b, 12) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.dma_len.to_be_bytes());
        b
    }
}

/// Atomic Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Virtual address (8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap data (COMPARE_SWAP) or add data (FETCH_ADD).
    pub swap_add: u64,
    /// Compare data (COMPARE_SWAP; 0 for FETCH_ADD).
    pub compare: u64,
}

impl AtomicEth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 28]) -> Self {
        Self { va: be64(b, 0), rkey: be32(b, 8), swap_add: be64(b, 12), compare: be64(b, 20) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..].copy_from_slice(&self.compare.to_be_bytes());
        b
    }
}

/// NAK codes of an AETH whose type bits are `11`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error (syndrome 0x60).
    PsnSeqErr,
    /// 1: invalid request (0x61).
    InvalidRequest,
    /// 2: remote access error (0x62).
    RemoteAccessErr,
    /// 3: remote operational error (0x63).
    RemoteOpErr,
    /// 4: invalid RD request (0x64).
    InvalidRdRequest,
    /// 5-31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// From the low 5 syndrome bits.
    pub const fn from_value(v: u8) -> Self {
        match v & 0x1F {
            0 => NakCode::PsnSeqErr,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessErr,
            3 => NakCode::RemoteOpErr,
            4 => NakCode::InvalidRdRequest,
            v => NakCode::Reserved(v),
        }
    }

    /// The low 5 syndrome bits.
    pub const fn value(self) -> u8 {
        match self {
            NakCode::PsnSeqErr => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessErr => 2,
            NakCode::RemoteOpErr => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1F,
        }
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PsnSeqErr => f.write_str("PSN_SEQ_ERR"),
            NakCode::InvalidRequest => f.write_str("INVALID_REQ"),
            NakCode::RemoteAccessErr => f.write_str("REM_ACC_ERR"),
            NakCode::RemoteOpErr => f.write_str("REM_OP_ERR"),
            NakCode::InvalidRdRequest => f.write_str("INV_RD_REQ"),
            NakCode::Reserved(v) => write!(f, "RESERVED({v})"),
        }
    }
}

/// What an AETH syndrome says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// Type `00`: ACK with a credit count code (0x1F = no flow control).
    Ack {
        /// Credit count code (0-31).
        credit: u8,
    },
    /// Type `01`: RNR NAK with a timer code.
    RnrNak {
        /// RNR timer code (0-31, see [`rnr_timer_usecs`]).
        timer: u8,
    },
    /// Type `10`: reserved.
    Reserved {
        /// Low 5 bits.
        value: u8,
    },
    /// Type `11`: NAK.
    Nak(NakCode),
}

/// ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// Syndrome: bit 7 reserved, bits 6-5 type, bits 4-0 value.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// The credit code rxe always sends: "invalid / no flow control".
pub const AETH_ACK_UNLIMITED: u8 = 0x1F;

impl Aeth {
    /// An ACK with credit count code `credit`.
    pub const fn ack(msn: u32, credit: u8) -> Self {
        Self { syndrome: credit & 0x1F, msn }
    }

    /// An RNR NAK with timer code `timer`.
    pub const fn rnr_nak(msn: u32, timer: u8) -> Self {
        Self { syndrome: 0x20 | (timer & 0x1F), msn }
    }

    /// A NAK.
    pub const fn nak(msn: u32, code: NakCode) -> Self {
        Self { syndrome: 0x60 | code.value(), msn }
    }

    /// Classifies the syndrome.
    pub const fn kind(&self) -> AethKind {
        let v = self.syndrome & 0x1F;
        match (self.syndrome >> 5) & 3 {
            0 => AethKind::Ack { credit: v },
            1 => AethKind::RnrNak { timer: v },
            2 => AethKind::Reserved { value: v },
            _ => AethKind::Nak(NakCode::from_value(v)),
        }
    }

    /// Whether the type bits say ACK (whatever the credit code).
    pub const fn is_ack(&self) -> bool {
        (self.syndrome >> 5) & 3 == 0
    }

    /// Whether the type bits say RNR NAK.
    pub const fn is_rnr_nak(&self) -> bool {
        (self.syndrome >> 5) & 3 == 1
    }

    /// Whether the type bits say NAK.
    pub const fn is_nak(&self) -> bool {
        (self.syndrome >> 5) & 3 == 3
    }

    /// Decodes.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        Self { syndrome: b[0], msn: be24(b, 1) }
    }

    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 4] {
        ((u32::from(self.syndrome) << 24) | (self.msn & 0x00FF_FFFF)).to_be_bytes()
    }
}

impl fmt::Display for Aeth {
    /// `ACK msn=3 credit=0x1f`, `RNR_NAK msn=.. timer=..`, `NAK PSN_SEQ_ERR msn=..`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            AethKind::Ack { credit } => write!(f, "ACK msn={} credit=0x{credit:02x}", self.msn),
            AethKind::RnrNak { timer } => write!(f, "RNR_NAK msn={} timer={timer}", self.msn),
            AethKind::Reserved { value } => {
                write!(f, "RESERVED_TYPE msn={} value={value}", self.msn)
            }
            AethKind::Nak(code) => write!(f, "NAK {code} msn={}", self.msn),
        }
    }
}

/// Credits meant by an AETH credit count code (IBA table), `None` for 31 (no flow control).
pub const fn credit_count(code: u8) -> Option<u32> {
    const T: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
        6144, 8192, 12288, 16384, 24576, 32768,
    ];
    let c = (code & 0x1F) as usize;
    if c < T.len() { Some(T[c]) } else { None }
}

/// Microseconds an RNR NAK timer code asks the requester to wait (code 0 = 655.36 ms).
pub const fn rnr_timer_usecs(code: u8) -> u32 {
    const T: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240,
        15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    T[(code & 0x1F) as usize]
}

/// Atomic ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// The original remote data.
    pub orig_data: u64,
}

impl AtomicAckEth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 8]) -> Self {
        Self { orig_data: be64(b, 0) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 8] {
        self.orig_data.to_be_bytes()
    }
}

/// Immediate data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImmDt {
    /// The immediate value, read big-endian (opaque: copied as is into the CQE).
    pub imm: u32,
}

impl ImmDt {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        Self { imm: be32(b, 0) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 4] {
        self.imm.to_be_bytes()
    }
}

/// Invalidate Extended Transport Header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ieth {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl Ieth {
    /// Decodes.
    pub fn from_bytes(b: &[u8; 4]) -> Self {
        Self { rkey: be32(b, 0) }
    }
    /// Encodes.
    pub fn to_bytes(&self) -> [u8; 4] {
        self.rkey.to_be_bytes()
    }
}

/// The 16 reserved bytes after the BTH of a CNP (zero when sent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CnpBody {
    /// The bytes as found.
    pub reserved: [u8; 16],
}

/// The extension headers of one packet, each present or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders {
    /// RDETH.
    pub rdeth: Option<Rdeth>,
    /// DETH.
    pub deth: Option<Deth>,
    /// FETH.
    pub feth: Option<Feth>,
    /// RETH.
    pub reth: Option<Reth>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEth>,
    /// AETH.
    pub aeth: Option<Aeth>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// ImmDt.
    pub imm_dt: Option<ImmDt>,
    /// IETH.
    pub ieth: Option<Ieth>,
    /// CNP reserved body.
    pub cnp: Option<CnpBody>,
}

impl ExtHeaders {
    /// The kinds present.
    pub fn present(&self) -> HeaderSet {
        ExtKind::ORDER.into_iter().fold(HeaderSet::EMPTY, |s, k| if self.has(k) { s.with(k) } else { s })
    }

    /// Whether `kind` is present.
    pub fn has(&self, kind: ExtKind) -> bool {
        match kind {
            ExtKind::Rdeth => self.rdeth.is_some(),
            ExtKind::Deth => self.deth.is_some(),
            ExtKind::Feth => self.feth.is_some(),
            ExtKind::Reth => self.reth.is_some(),
            ExtKind::AtomicEth => self.atomic_eth.is_some(),
            ExtKind::Aeth => self.aeth.is_some(),
            ExtKind::AtomicAckEth => self.atomic_ack_eth.is_some(),
            ExtKind::ImmDt => self.imm_dt.is_some(),
            ExtKind::Ieth => self.ieth.is_some(),
            ExtKind::Cnp => self.cnp.is_some(),
        }
    }

    /// Decodes the headers `kinds` from `b`, where they lie one after another in wire order
    /// (one that `b` is too short for is left out).
    ///
    /// Every field is computed in place in one value, in wire order, with no loop over the
    /// set: decoded one by one into a value that was then moved, the headers' narrow, fresh
    /// writes were read back wide by the move, and that stalled the core (perf, `umlx bench
    /// sim`). A receiving port decodes none of this: it reads the one header it needs
    /// ([`RocePacket::reth`](super::RocePacket::reth) and its siblings).
    #[inline(always)]
    pub(crate) fn decode(kinds: HeaderSet, b: &[u8]) -> ExtHeaders {
        if kinds.is_empty() {
            // The middle packets of a message (and the last of a SEND or WRITE) carry none.
            return ExtHeaders::default();
        }
        let mut at = 0;
        let mut next = |kind: ExtKind| {
            if !kinds.contains(kind) {
                return None;
            }
            let s = b.get(at..at + kind.size());
            at += kind.size();
            s
        };
        fn bytes<const N: usize>(s: Option<&[u8]>) -> Option<[u8; N]> {
            s.and_then(|s| s.try_into().ok())
        }
        ExtHeaders {
            rdeth: bytes(next(ExtKind::Rdeth)).map(|b| Rdeth::from_bytes(&b)),
            deth: bytes(next(ExtKind::Deth)).map(|b| Deth::from_bytes(&b)),
            feth: bytes(next(ExtKind::Feth)).map(|b| Feth::from_bytes(&b)),
            reth: bytes(next(ExtKind::Reth)).map(|b| Reth::from_bytes(&b)),
            atomic_eth: bytes(next(ExtKind::AtomicEth)).map(|b| AtomicEth::from_bytes(&b)),
            aeth: bytes(next(ExtKind::Aeth)).map(|b| Aeth::from_bytes(&b)),
            atomic_ack_eth: bytes(next(ExtKind::AtomicAckEth)).map(|b| AtomicAckEth::from_bytes(&b)),
            imm_dt: bytes(next(ExtKind::ImmDt)).map(|b| ImmDt::from_bytes(&b)),
            ieth: bytes(next(ExtKind::Ieth)).map(|b| Ieth::from_bytes(&b)),
            cnp: bytes(next(ExtKind::Cnp)).map(|reserved| CnpBody { reserved }),
        }
    }

    /// Encodes header `kind` into `out` (exactly `kind.size()` bytes); false if absent or
    /// `out` has the wrong size.
    pub(crate) fn write(&self, kind: ExtKind, out: &mut [u8]) -> bool {
        fn put<const N: usize>(out: &mut [u8], b: Option<[u8; N]>) -> bool {
            match (b, <&mut [u8; N]>::try_from(out)) {
                (Some(b), Ok(o)) => {
                    *o = b;
                    true
                }
                _ => false,
            }
        }
        match kind {
            ExtKind::Rdeth => put(out, self.rdeth.map(|h| h.to_bytes())),
            ExtKind::Deth => put(out, self.deth.map(|h| h.to_bytes())),
            ExtKind::Feth => put(out, self.feth.map(|h| h.to_bytes())),
            ExtKind::Reth => put(out, self.reth.map(|h| h.to_bytes())),
            ExtKind::AtomicEth => put(out, self.atomic_eth.map(|h| h.to_bytes())),
            ExtKind::Aeth => put(out, self.aeth.map(|h| h.to_bytes())),
            ExtKind::AtomicAckEth => put(out, self.atomic_ack_eth.map(|h| h.to_bytes())),
            ExtKind::ImmDt => put(out, self.imm_dt.map(|h| h.to_bytes())),
            ExtKind::Ieth => put(out, self.ieth.map(|h| h.to_bytes())),
            ExtKind::Cnp => put(out, self.cnp.map(|h| h.reserved)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bth_round_trip() {
        let b = Bth {
            se: true,
            m: true,
            pad_cnt: 2,
            fecn: true,
            becn: true,
            ack_req: true,
            pkey: 0x7FFF,
            ..Bth::new(Opcode::RC_SEND_ONLY, 0x00AB_CDEF, 0x0012_3456)
        };
        let w = b.to_bytes();
        assert_eq!(w, [0x04, 0xE0, 0x7F, 0xFF, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56]);
        assert_eq!(Bth::from_bytes(&w), b);
    }

    #[test]
    fn aeth_classes() {
        assert_eq!(Aeth::ack(3, 0x1F).kind(), AethKind::Ack { credit: 0x1F });
        assert_eq!(Aeth { syndrome: 0x60, msn: 0 }.kind(), AethKind::Nak(NakCode::PsnSeqErr));
        assert_eq!(Aeth::nak(1, NakCode::RemoteAccessErr).syndrome, 0x62);
        assert_eq!(Aeth::rnr_nak(1, 14).kind(), AethKind::RnrNak { timer: 14 });
        assert!(Aeth::rnr_nak(1, 14).is_rnr_nak());
        assert_eq!(Aeth { syndrome: 0x45, msn: 0 }.kind(), AethKind::Reserved { value: 5 });
        assert_eq!(Aeth::ack(3, 0x1F).to_string(), "ACK msn=3 credit=0x1f");
        assert_eq!(Aeth::nak(7, NakCode::PsnSeqErr).to_string(), "NAK PSN_SEQ_ERR msn=7");
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(31), None);
        assert_eq!(rnr_timer_usecs(0), 655_360);
        assert_eq!(rnr_timer_usecs(25), 61_440);
        let a = Aeth { syndrome: 0x7F, msn: 0x00AB_CDEF };
        assert_eq!(Aeth::from_bytes(&a.to_bytes()), a);
    }
}
