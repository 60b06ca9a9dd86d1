//! RoCE packets: header types, the opcode table, zero-copy parsing and allocation-free
//! building.
//!
//! This module owns the byte layout of everything from the Ethernet header to the ICRC
//! (wire doc §0-§2, §4):
//!
//! * header types: [`EthHeader`], [`IpHeader`] ([`Ipv4Header`], [`Ipv6Header`], RoCEv1 GRH),
//!   [`UdpHeader`], [`Bth`] and the extension headers [`Rdeth`], [`Deth`], [`Feth`],
//!   [`Reth`], [`AtomicEth`], [`Aeth`], [`AtomicAckEth`], [`ImmDt`], [`Ieth`], [`CnpBody`]
//!   gathered in [`ExtHeaders`];
//! * [`Opcode`] (an open `u8` newtype) and its table ([`OpcodeInfo`]): transport, operation,
//!   FIRST/MIDDLE/LAST/ONLY, extension headers, payload or not;
//! * [`parse_frame`] / [`parse_frame_verified`] returning a [`RocePacket`] or a
//!   [`WireError`]; [`parse_frame_trusted`] and [`fill_checksums`] for frames whose
//!   integrity fields their sender leaves to the egress ([`Checksums::Defer`]);
//! * [`FrameBuilder`] / [`build_frame`] writing a complete frame into a caller's buffer;
//! * GID helpers ([`gid_to_ip`], [`ip_to_gid`]) and the UDP source-port functions
//!   ([`udp_sport`] = `rdma_get_udp_sport`).

mod build;
mod error;
mod gid;
mod headers;
mod opcode;
mod parse;

pub use build::{Checksums, FrameBuilder, FrameTemplate, MIN_ETH_FRAME, UdpChecksum, build_frame};
pub use error::{BuildError, Layer, WireError};
pub use gid::{
    calc_flow_label, flow_label_to_udp_sport, gid_is_ipv4, gid_to_ip, gid_to_ipv4, initial_udp_sport, ip_to_gid,
    udp_sport,
};
pub use headers::{
    AETH_ACK_UNLIMITED, Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, CnpBody, DEFAULT_PKEY, Deth, ETHERTYPE_ARP,
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_ROCEV1, ETHERTYPE_VLAN, EthHeader, ExtHeaders, Feth,
    GRH_NEXT_HEADER_IBA, GSI_QKEY, IPPROTO_UDP, Ieth, ImmDt, IpHeader, Ipv4Header, Ipv6Header, MacAddr, NakCode,
    ROCEV2_UDP_PORT, Rdeth, Reth, RoceVersion, UdpHeader, VlanTag, credit_count, rnr_timer_usecs,
};
pub use opcode::{ExtKind, HeaderSet, Opcode, OpcodeInfo, Operation, Position, Transport};
pub(crate) use parse::{L3Kind, locate};
pub use parse::{
    RocePacket, fill_checksums, ip_frame_len, parse_frame, parse_frame_trusted, parse_frame_verified, steering_bth,
    steering_dest_qp,
};
