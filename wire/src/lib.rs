//! The RoCEv2 wire codec: everything that turns bytes on an Ethernet into typed RoCE packets
//! and back. The software ConnectX (`umlx-sim`) sends and receives through it, the driver takes
//! the RoCEv2 UDP source port from it, and `umlx wire decode` reads captures with it.
//!
//! This crate owns the *format* of what a port sends and receives, and nothing of the
//! transport state machines that use it:
//!
//! * [`icrc`]: CRC-32 (IEEE 802.3, slice-by-8) and the RoCE invariant CRC over RoCEv2
//!   (IPv4, IPv6) and RoCEv1 (GRH) frames, with the masking rules of the wire doc §3.
//! * [`packet`]: zero-copy [`parse_frame`] and allocation-free
//!   [`FrameBuilder`] for Ethernet / IPv4 / IPv6 / UDP 4791 / BTH and
//!   the extension headers, the opcode table, GID <-> IP helpers and the UDP source-port
//!   function rxe uses.
//! * [`arp`]: answers ARP requests and IPv6 neighbour solicitations for the port's own
//!   addresses, builds requests and learns peers from replies.
//! * [`pcap`]: a classic libpcap reader and writer.
//! * [`decode`]: the engine behind `umlx wire decode FILE.pcap`.
//! * [`stats`]: per-port receive/drop counters ([`WireStats`]).
//!
//! Facts (layouts, masks, opcode table) come from `shared/docs/rocev2-wire.md`; the codec is
//! checked against 1,526 real ConnectX frames in `shared/rocev2_vectors`.

pub mod arp;
pub mod decode;
pub mod icrc;
mod inet;
pub mod packet;
pub mod pcap;
pub mod stats;

pub use packet::{
    BuildError, FrameBuilder, Opcode, RocePacket, WireError, build_frame, parse_frame, parse_frame_verified,
};
pub use stats::WireStats;
