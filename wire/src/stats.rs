//! Per-port wire counters: what arrived, what was accepted and why the rest was dropped.
//!
//! The port owns one [`WireStats`] and feeds it every parse result; the counters are plain
//! integers (the port decides how to share them).

use super::packet::{RocePacket, RoceVersion, WireError};

/// Receive and transmit counters of one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames seen on receive.
    pub rx_frames: u64,
    /// Bytes seen on receive.
    pub rx_bytes: u64,
    /// RoCEv2 frames accepted.
    pub rx_roce_v2: u64,
    /// RoCEv1 frames accepted.
    pub rx_roce_v1: u64,
    /// Frames that are not RoCE (not IP, not UDP, another UDP port); ignored, not errors.
    pub rx_not_roce: u64,
    /// Dropped: the frame ends inside a header.
    pub drop_truncated: u64,
    /// Dropped: bad IP version, IHL or a fragment.
    pub drop_bad_ip: u64,
    /// Dropped: IP/UDP lengths inconsistent with each other or the frame, or a PadCnt larger
    /// than the body.
    pub drop_bad_length: u64,
    /// Dropped: BTH TVer not 0.
    pub drop_bad_tver: u64,
    /// Dropped: opcode not in the table.
    pub drop_unknown_opcode: u64,
    /// Dropped: the packet is shorter than its opcode's headers, or carries a payload where
    /// the opcode has none.
    pub drop_bad_header: u64,
    /// Dropped: IPv4 header checksum or non-zero UDP checksum wrong.
    pub drop_bad_checksum: u64,
    /// Dropped: ICRC mismatch (rxe: "bad ICRC").
    pub drop_bad_icrc: u64,
    /// Dropped: the port's receive queue was full (the device fell that far behind).
    pub drop_rx_overflow: u64,
    /// Dropped on receive: the port's link was down (administratively, or its cable out).
    pub drop_link_down: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames the device sent while the port's link was down, and those a UDP wire's port held
    /// for a later doorbell's datagram ([`WireStats::tx_held`]) when its link changed: they went
    /// nowhere (not counted as sent, nor as held).
    pub tx_drop_link_down: u64,
    /// Of the frames sent, those a UDP wire's port held at their send doorbell for the datagram
    /// of the doorbell rung right after it (a burst's frames leave together).
    pub tx_held: u64,
}

impl WireStats {
    /// Fresh counters.
    pub const fn new() -> Self {
        Self {
            rx_frames: 0,
            rx_bytes: 0,
            rx_roce_v2: 0,
            rx_roce_v1: 0,
            rx_not_roce: 0,
            drop_truncated: 0,
            drop_bad_ip: 0,
            drop_bad_length: 0,
            drop_bad_tver: 0,
            drop_unknown_opcode: 0,
            drop_bad_header: 0,
            drop_bad_checksum: 0,
            drop_bad_icrc: 0,
            drop_rx_overflow: 0,
            drop_link_down: 0,
            tx_frames: 0,
            tx_bytes: 0,
            tx_drop_link_down: 0,
            tx_held: 0,
        }
    }

    /// Counts a received frame of `len` bytes (call once per frame, before the verdict).
    pub fn record_rx_frame(&mut self, len: usize) {
        self.rx_frames += 1;
        self.rx_bytes += len as u64;
    }

    /// Counts an accepted packet.
    pub fn record_accepted(&mut self, p: &RocePacket<'_>) {
        match p.version() {
            RoceVersion::V1 => self.rx_roce_v1 += 1,
            RoceVersion::V2 => self.rx_roce_v2 += 1,
        }
    }

    /// Counts a rejected frame under the counter its error belongs to.
    pub fn record_error(&mut self, e: &WireError) {
        let c = match e {
            WireError::NotIp { .. } | WireError::NotUdp { .. } | WireError::NotRocePort { .. } => &mut self.rx_not_roce,
            WireError::Truncated { .. } => &mut self.drop_truncated,
            WireError::BadIpVersion { .. } | WireError::BadIhl { .. } | WireError::Fragmented => &mut self.drop_bad_ip,
            WireError::BadIpLength { .. } | WireError::UdpLengthMismatch { .. } | WireError::BadPadCnt { .. } => {
                &mut self.drop_bad_length
            }
            WireError::BadTver { .. } => &mut self.drop_bad_tver,
            WireError::UnknownOpcode { .. } => &mut self.drop_unknown_opcode,
            WireError::HeaderTooShort { .. } | WireError::UnexpectedPayload { .. } => &mut self.drop_bad_header,
            WireError::BadIpChecksum { .. } | WireError::BadUdpChecksum { .. } => &mut self.drop_bad_checksum,
            WireError::BadIcrc { .. } => &mut self.drop_bad_icrc,
        };
        *c += 1;
    }

    /// Counts a frame of `len` bytes and the verdict of
    /// [`parse_frame_verified`](super::packet::parse_frame_verified) on it.
    pub fn record_rx(&mut self, len: usize, verdict: &Result<RocePacket<'_>, WireError>) {
        self.record_rx_frame(len);
        match verdict {
            Ok(p) => self.record_accepted(p),
            Err(e) => self.record_error(e),
        }
    }

    /// Counts a sent frame.
    pub fn record_tx(&mut self, len: usize) {
        self.tx_frames += 1;
        self.tx_bytes += len as u64;
    }

    /// Adds `other`'s counts to these (the counts of a batch counted apart, say).
    pub fn add(&mut self, other: &WireStats) {
        let WireStats {
            rx_frames,
            rx_bytes,
            rx_roce_v2,
            rx_roce_v1,
            rx_not_roce,
            drop_truncated,
            drop_bad_ip,
            drop_bad_length,
            drop_bad_tver,
            drop_unknown_opcode,
            drop_bad_header,
            drop_bad_checksum,
            drop_bad_icrc,
            drop_rx_overflow,
            drop_link_down,
            tx_frames,
            tx_bytes,
            tx_drop_link_down,
            tx_held,
        } = *other;
        self.rx_frames += rx_frames;
        self.rx_bytes += rx_bytes;
        self.rx_roce_v2 += rx_roce_v2;
        self.rx_roce_v1 += rx_roce_v1;
        self.rx_not_roce += rx_not_roce;
        self.drop_truncated += drop_truncated;
        self.drop_bad_ip += drop_bad_ip;
        self.drop_bad_length += drop_bad_length;
        self.drop_bad_tver += drop_bad_tver;
        self.drop_unknown_opcode += drop_unknown_opcode;
        self.drop_bad_header += drop_bad_header;
        self.drop_bad_checksum += drop_bad_checksum;
        self.drop_bad_icrc += drop_bad_icrc;
        self.drop_rx_overflow += drop_rx_overflow;
        self.drop_link_down += drop_link_down;
        self.tx_frames += tx_frames;
        self.tx_bytes += tx_bytes;
        self.tx_drop_link_down += tx_drop_link_down;
        self.tx_held += tx_held;
    }

    /// Received frames dropped: damaged, for want of room, or while the link was down (not
    /// counting frames that simply are not RoCE).
    pub fn dropped(&self) -> u64 {
        self.drop_truncated
            + self.drop_bad_ip
            + self.drop_bad_length
            + self.drop_bad_tver
            + self.drop_unknown_opcode
            + self.drop_bad_header
            + self.drop_bad_checksum
            + self.drop_bad_icrc
            + self.drop_rx_overflow
            + self.drop_link_down
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::WireError;

    /// Records frame `i` of a made-up sequence: sent, received, or rejected by a verdict.
    fn record(s: &mut WireStats, i: u64) {
        match i % 4 {
            0 => s.record_tx(60 + i as usize),
            1 => s.record_rx_frame(70 + i as usize),
            2 => s.record_error(&WireError::BadIcrc { found: 1, expected: 2 }),
            _ => s.drop_rx_overflow += 1,
        }
    }

    #[test]
    fn counts_added_are_the_counts_of_both_batches() {
        let (mut first, mut second, mut all) = (WireStats::new(), WireStats::new(), WireStats::new());
        for i in 0..40 {
            record(if i < 13 { &mut first } else { &mut second }, i);
            record(&mut all, i);
        }
        first.add(&second);
        assert_eq!(first, all);
        assert_eq!((all.tx_frames, all.rx_frames, all.drop_bad_icrc, all.dropped()), (10, 10, 10, 20));
    }
}
