//! Why a frame could not be parsed or built.

use std::fmt;

use super::opcode::{ExtKind, Opcode};

/// The protocol layer a truncation was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet header (14 bytes).
    Ethernet,
    /// 802.1Q / 802.1ad tag.
    Vlan,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header.
    Ipv6,
    /// RoCEv1 global route header.
    Grh,
    /// UDP header.
    Udp,
    /// BTH plus ICRC (the minimum transport packet, 16 bytes).
    Bth,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet header",
            Layer::Vlan => "VLAN tag",
            Layer::Ipv4 => "IPv4 header",
            Layer::Ipv6 => "IPv6 header",
            Layer::Grh => "GRH",
            Layer::Udp => "UDP header",
            Layer::Bth => "BTH+ICRC",
        })
    }
}

/// Why a received frame is not a valid RoCE packet.
///
/// [`WireError::is_not_roce`] separates "someone else's traffic" (ARP, TCP, other UDP) from
/// damaged RoCE packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The frame ends inside a header.
    Truncated {
        /// Where.
        layer: Layer,
        /// Bytes needed from the frame start.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The ethertype is neither IPv4, IPv6 nor RoCEv1.
    NotIp {
        /// The ethertype found (after any VLAN tag).
        ethertype: u16,
    },
    /// The IP packet does not carry UDP (or the GRH does not carry IBA transport).
    NotUdp {
        /// IPv4 protocol / IPv6 next header / GRH next header.
        protocol: u8,
    },
    /// UDP, but not to the RoCEv2 port 4791.
    NotRocePort {
        /// The UDP destination port.
        dst_port: u16,
    },
    /// The IP version nibble disagrees with the ethertype.
    BadIpVersion {
        /// Version found.
        version: u8,
        /// Version the ethertype announced.
        expected: u8,
    },
    /// IPv4 IHL below 5.
    BadIhl {
        /// IHL found (32-bit words).
        ihl: u8,
    },
    /// The IP total/payload length is smaller than the headers or larger than the frame.
    BadIpLength {
        /// The IP packet length the header declares (bytes, header included).
        declared: usize,
        /// Bytes available in the frame from the IP header on.
        available: usize,
    },
    /// A fragment (MF set or non-zero offset): RoCE is never fragmented.
    Fragmented,
    /// The UDP length does not match the IP payload length.
    UdpLengthMismatch {
        /// UDP length field.
        udp_len: u16,
        /// IP payload length.
        ip_payload_len: usize,
    },
    /// BTH TVer is not 0.
    BadTver {
        /// TVer found.
        tver: u8,
    },
    /// An opcode this codec does not know (reserved, XRC, manufacturer specific).
    UnknownOpcode {
        /// The opcode.
        opcode: Opcode,
    },
    /// The transport packet is shorter than BTH + extension headers + ICRC of its opcode.
    HeaderTooShort {
        /// The opcode.
        opcode: Opcode,
        /// Bytes needed (BTH + extension headers + ICRC).
        need: usize,
        /// Bytes from the BTH to the end of the IP packet.
        have: usize,
    },
    /// PadCnt larger than the bytes between the headers and the ICRC.
    BadPadCnt {
        /// PadCnt.
        pad_cnt: u8,
        /// Payload + pad bytes present.
        available: usize,
    },
    /// A payload on an opcode that carries none (ACK, READ_REQUEST, atomics, CNP).
    UnexpectedPayload {
        /// The opcode.
        opcode: Opcode,
        /// Payload bytes found.
        len: usize,
    },
    /// The IPv4 header checksum is wrong (reported by `parse_frame_verified`).
    BadIpChecksum {
        /// Value in the header.
        found: u16,
        /// Value it should have.
        expected: u16,
    },
    /// A non-zero UDP checksum is wrong (reported by `parse_frame_verified`).
    BadUdpChecksum {
        /// Value in the header.
        found: u16,
        /// Value it should have.
        expected: u16,
    },
    /// The ICRC does not match (reported by `parse_frame_verified`).
    BadIcrc {
        /// ICRC on the wire (read little-endian).
        found: u32,
        /// ICRC computed over the frame.
        expected: u32,
    },
}

impl WireError {
    /// Whether the frame is simply not RoCE (not IP, not UDP, another port): traffic a RoCE
    /// port ignores rather than counts as damaged.
    pub fn is_not_roce(&self) -> bool {
        matches!(self, WireError::NotIp { .. } | WireError::NotUdp { .. } | WireError::NotRocePort { .. })
    }

    /// A short stable tag for counters and logs ("truncated", "bad_icrc", ...).
    pub fn tag(&self) -> &'static str {
        match self {
            WireError::Truncated { .. } => "truncated",
            WireError::NotIp { .. } => "not_ip",
            WireError::NotUdp { .. } => "not_udp",
            WireError::NotRocePort { .. } => "not_roce_port",
            WireError::BadIpVersion { .. } => "bad_ip_version",
            WireError::BadIhl { .. } => "bad_ihl",
            WireError::BadIpLength { .. } => "bad_ip_length",
            WireError::Fragmented => "fragmented",
            WireError::UdpLengthMismatch { .. } => "udp_length_mismatch",
            WireError::BadTver { .. } => "bad_tver",
            WireError::UnknownOpcode { .. } => "unknown_opcode",
            WireError::HeaderTooShort { .. } => "header_too_short",
            WireError::BadPadCnt { .. } => "bad_pad_cnt",
            WireError::UnexpectedPayload { .. } => "unexpected_payload",
            WireError::BadIpChecksum { .. } => "bad_ip_checksum",
            WireError::BadUdpChecksum { .. } => "bad_udp_checksum",
            WireError::BadIcrc { .. } => "bad_icrc",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated { layer, need, have } => {
                write!(f, "frame truncated in the {layer}: need {need} bytes, have {have}")
            }
            WireError::NotIp { ethertype } => {
                write!(f, "not IP or RoCEv1: ethertype 0x{ethertype:04x}")
            }
            WireError::NotUdp { protocol } => {
                write!(f, "not UDP (or not IBA transport after a GRH): protocol/next header {protocol}")
            }
            WireError::NotRocePort { dst_port } => {
                write!(f, "UDP destination port {dst_port} is not the RoCEv2 port 4791")
            }
            WireError::BadIpVersion { version, expected } => {
                write!(f, "IP version {version} where the ethertype says {expected}")
            }
            WireError::BadIhl { ihl } => write!(f, "IPv4 IHL {ihl} is below the minimum of 5"),
            WireError::BadIpLength { declared, available } => write!(
                f,
                "IP packet length {declared} does not fit: {available} bytes available \
                 (or shorter than its headers)"
            ),
            WireError::Fragmented => f.write_str("IPv4 fragment (RoCE is never fragmented)"),
            WireError::UdpLengthMismatch { udp_len, ip_payload_len } => {
                write!(f, "UDP length {udp_len} does not match the IP payload length {ip_payload_len}")
            }
            WireError::BadTver { tver } => write!(f, "BTH TVer {tver} (must be 0)"),
            WireError::UnknownOpcode { opcode } => {
                write!(f, "unknown BTH opcode 0x{:02x}", opcode.0)
            }
            WireError::HeaderTooShort { opcode, need, have } => {
                write!(f, "{opcode} needs {need} bytes of BTH+extension headers+ICRC, the packet has {have}")
            }
            WireError::BadPadCnt { pad_cnt, available } => {
                write!(f, "PadCnt {pad_cnt} exceeds the {available} bytes between headers and ICRC")
            }
            WireError::UnexpectedPayload { opcode, len } => {
                write!(f, "{opcode} carries no payload but has {len} bytes")
            }
            WireError::BadIpChecksum { found, expected } => {
                write!(f, "bad IPv4 header checksum 0x{found:04x} (expected 0x{expected:04x})")
            }
            WireError::BadUdpChecksum { found, expected } => {
                write!(f, "bad UDP checksum 0x{found:04x} (expected 0x{expected:04x})")
            }
            WireError::BadIcrc { found, expected } => write!(
                f,
                "bad ICRC 0x{found:08x} (expected 0x{expected:08x}; bytes on the wire are \
                 little-endian)"
            ),
        }
    }
}

impl std::error::Error for WireError {}

/// Why a frame could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuildError {
    /// The output buffer is too small.
    BufferTooSmall {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes in the buffer.
        have: usize,
    },
    /// The opcode is not in the table.
    UnknownOpcode {
        /// The opcode.
        opcode: Opcode,
    },
    /// The opcode calls for an extension header that was not given.
    MissingHeader {
        /// The opcode.
        opcode: Opcode,
        /// The header.
        header: ExtKind,
    },
    /// An extension header was given that the opcode does not carry.
    UnexpectedHeader {
        /// The opcode.
        opcode: Opcode,
        /// The header.
        header: ExtKind,
    },
    /// A payload was given for an opcode that carries none.
    UnexpectedPayload {
        /// The opcode.
        opcode: Opcode,
        /// Payload length.
        len: usize,
    },
    /// The packet would not fit in an IP packet (65535 bytes).
    TooLong {
        /// IP packet (IPv4) or IPv6 payload length it would have.
        len: usize,
    },
    /// A field is out of its range (24-bit QPN/PSN/MSN, 2-bit PadCnt, 4-bit TVer, 20-bit
    /// flow label).
    FieldRange {
        /// Field name.
        field: &'static str,
        /// Value given.
        value: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// A RoCEv1 frame was asked for a non-zero UDP source port, or similar mismatch of the
    /// L3 kind with the requested options.
    Inconsistent {
        /// What is wrong.
        what: &'static str,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuildError::BufferTooSmall { need, have } => {
                write!(f, "output buffer too small: frame needs {need} bytes, buffer has {have}")
            }
            BuildError::UnknownOpcode { opcode } => {
                write!(f, "cannot build unknown opcode 0x{:02x}", opcode.0)
            }
            BuildError::MissingHeader { opcode, header } => {
                write!(f, "{opcode} needs a {header} header, none given")
            }
            BuildError::UnexpectedHeader { opcode, header } => {
                write!(f, "{opcode} does not carry a {header} header")
            }
            BuildError::UnexpectedPayload { opcode, len } => {
                write!(f, "{opcode} carries no payload, {len} bytes given")
            }
            BuildError::TooLong { len } => {
                write!(f, "IP length {len} exceeds 65535")
            }
            BuildError::FieldRange { field, value, max } => {
                write!(f, "{field} = {value:#x} exceeds its maximum {max:#x}")
            }
            BuildError::Inconsistent { what } => f.write_str(what),
        }
    }
}

impl std::error::Error for BuildError {}
