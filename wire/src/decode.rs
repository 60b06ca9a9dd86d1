//! The engine of `umlx wire decode FILE.pcap`: one text line per RoCE frame and a summary.
//!
//! This module owns the human-readable rendering of RoCE packets (also usable for logs via
//! [`PacketLine`]) and the counting of a capture. Frames that are not RoCE (TCP, ARP, other
//! UDP) are counted and skipped; damaged RoCE frames get a `MALFORMED` line with the reason.
//!
//! Line format (one per RoCE frame; optional parts in brackets):
//!
//! ```text
//! #8 v2 172.17.242.56 > 172.17.242.47 sport=63431 RC_ACKNOWLEDGE dqpn=0x000139 psn=7010276
//!    ackreq=0 se=0 m=1 padcnt=0 [fecn] [becn] AETH ACK msn=1 credit=0x1f payload=0 icrc=ok
//! ```
//!
//! (printed on one line). Extension headers render as `RETH va=0x.. rkey=0x.. len=N`,
//! `DETH qkey=0x.. srcqp=0x..`, `AETH ACK msn=N credit=0x..` / `AETH NAK PSN_SEQ_ERR msn=N` /
//! `AETH RNR_NAK msn=N timer=T`, `AtomicETH va=.. rkey=.. swap_add=.. cmp=..`,
//! `AtomicAckETH orig=0x..`, `ImmDt imm=0x..`, `IETH rkey=0x..`, `RDETH eec=0x..`,
//! `FETH plt=N sel=N`, `CNP`.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use super::packet::{ExtKind, Opcode, RocePacket, RoceVersion, parse_frame};
use super::pcap::{LINKTYPE_ETHERNET, PcapError, PcapReader};

/// Counts of one decoded capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeSummary {
    /// Records read.
    pub frames: u64,
    /// RoCEv2 frames parsed.
    pub rocev2: u64,
    /// RoCEv1 frames parsed.
    pub rocev1: u64,
    /// Frames that are not RoCE.
    pub non_roce: u64,
    /// Parsed RoCE frames whose ICRC matches.
    pub icrc_ok: u64,
    /// Parsed RoCE frames whose ICRC does not match.
    pub icrc_bad: u64,
    /// RoCE frames that could not be parsed.
    pub malformed: u64,
    /// RoCE frames cut short by the capture's snaplen (not checkable).
    pub capture_truncated: u64,
    /// Parsed frames per BTH opcode value.
    pub per_opcode: [u64; 256],
    /// A pcap error that stopped the reading early (the counts cover what came before).
    pub file_error: Option<String>,
}

impl Default for DecodeSummary {
    fn default() -> Self {
        Self {
            frames: 0,
            rocev2: 0,
            rocev1: 0,
            non_roce: 0,
            icrc_ok: 0,
            icrc_bad: 0,
            malformed: 0,
            capture_truncated: 0,
            per_opcode: [0; 256],
            file_error: None,
        }
    }
}

impl DecodeSummary {
    /// Parsed frames with opcode `op`.
    pub fn opcode_count(&self, op: Opcode) -> u64 {
        self.per_opcode[usize::from(op.0)]
    }

    /// (opcode, count) for every opcode seen, ascending.
    pub fn opcodes(&self) -> impl Iterator<Item = (Opcode, u64)> + '_ {
        self.per_opcode.iter().enumerate().filter(|(_, n)| **n > 0).map(|(op, n)| (Opcode(op as u8), *n))
    }
}

impl fmt::Display for DecodeSummary {
    /// `summary: frames=.. rocev2=.. rocev1=.. non_roce=.. icrc_ok=.. icrc_bad=..
    /// malformed=.. capture_truncated=.. opcodes: NAME=N ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "summary: frames={} rocev2={} rocev1={} non_roce={} icrc_ok={} icrc_bad={} \
             malformed={} capture_truncated={} opcodes:",
            self.frames,
            self.rocev2,
            self.rocev1,
            self.non_roce,
            self.icrc_ok,
            self.icrc_bad,
            self.malformed,
            self.capture_truncated
        )?;
        let mut any = false;
        for (op, n) in self.opcodes() {
            write!(f, " {op}={n}")?;
            any = true;
        }
        if !any {
            f.write_str(" none")?;
        }
        Ok(())
    }
}

/// Why a capture could not be decoded at all.
#[derive(Debug)]
pub enum DecodeError {
    /// The file could not be opened or is not a pcap file.
    Pcap(PcapError),
    /// Writing the output failed.
    Io(io::Error),
    /// The capture is not Ethernet.
    UnsupportedLinkType {
        /// The link type found.
        linktype: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Pcap(e) => e.fmt(f),
            DecodeError::Io(e) => write!(f, "write error: {e}"),
            DecodeError::UnsupportedLinkType { linktype } => {
                write!(f, "unsupported pcap link type {linktype} (only 1, Ethernet, is decoded)")
            }
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Pcap(e) => Some(e),
            DecodeError::Io(e) => Some(e),
            DecodeError::UnsupportedLinkType { .. } => None,
        }
    }
}

impl From<PcapError> for DecodeError {
    fn from(e: PcapError) -> Self {
        DecodeError::Pcap(e)
    }
}

impl From<io::Error> for DecodeError {
    fn from(e: io::Error) -> Self {
        DecodeError::Io(e)
    }
}

/// Renders one parsed packet as a decode line (without the frame number).
#[derive(Clone, Copy, Debug)]
pub struct PacketLine<'p, 'a>(pub &'p RocePacket<'a>);

impl fmt::Display for PacketLine<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.0;
        let b = &p.bth;
        let v = match p.version() {
            RoceVersion::V1 => "v1",
            RoceVersion::V2 => "v2",
        };
        write!(f, "{v} {} > {} ", p.src_ip(), p.dst_ip())?;
        match p.udp() {
            Some(u) => write!(f, "sport={} ", u.src_port)?,
            None => f.write_str("sport=- ")?,
        }
        write!(
            f,
            "{} dqpn=0x{:06x} psn={} ackreq={} se={} m={} padcnt={}",
            b.opcode,
            b.dest_qp,
            b.psn,
            u8::from(b.ack_req),
            u8::from(b.se),
            u8::from(b.m),
            b.pad_cnt
        )?;
        if b.pkey != 0xFFFF {
            write!(f, " pkey=0x{:04x}", b.pkey)?;
        }
        if b.fecn {
            f.write_str(" fecn")?;
        }
        if b.becn {
            f.write_str(" becn")?;
        }
        let e = p.ext();
        for kind in p.info.headers.iter() {
            match kind {
                ExtKind::Rdeth => {
                    if let Some(h) = e.rdeth {
                        write!(f, " RDETH eec=0x{:06x}", h.ee_context)?;
                    }
                }
                ExtKind::Deth => {
                    if let Some(h) = e.deth {
                        write!(f, " DETH qkey=0x{:08x} srcqp=0x{:06x}", h.qkey, h.src_qp)?;
                    }
                }
                ExtKind::Feth => {
                    if let Some(h) = e.feth {
                        write!(f, " FETH plt={} sel={}", h.placement_type(), h.selectivity_level())?;
                    }
                }
                ExtKind::Reth => {
                    if let Some(h) = e.reth {
                        write!(f, " RETH va=0x{:x} rkey=0x{:x} len={}", h.va, h.rkey, h.dma_len)?;
                    }
                }
                ExtKind::AtomicEth => {
                    if let Some(h) = e.atomic_eth {
                        write!(
                            f,
                            " AtomicETH va=0x{:x} rkey=0x{:x} swap_add=0x{:x} cmp=0x{:x}",
                            h.va, h.rkey, h.swap_add, h.compare
                        )?;
                    }
                }
                ExtKind::Aeth => {
                    if let Some(h) = e.aeth {
                        write!(f, " AETH {h}")?;
                    }
                }
                ExtKind::AtomicAckEth => {
                    if let Some(h) = e.atomic_ack_eth {
                        write!(f, " AtomicAckETH orig=0x{:x}", h.orig_data)?;
                    }
                }
                ExtKind::ImmDt => {
                    if let Some(h) = e.imm_dt {
                        write!(f, " ImmDt imm=0x{:08x}", h.imm)?;
                    }
                }
                ExtKind::Ieth => {
                    if let Some(h) = e.ieth {
                        write!(f, " IETH rkey=0x{:x}", h.rkey)?;
                    }
                }
                ExtKind::Cnp => f.write_str(" CNP")?,
            }
        }
        write!(f, " payload={} icrc={}", p.payload.len(), if p.icrc_ok { "ok" } else { "BAD" })?;
        if !p.ip_checksum_ok {
            f.write_str(" ipcsum=BAD")?;
        }
        if p.udp_checksum_ok == Some(false) {
            f.write_str(" udpcsum=BAD")?;
        }
        Ok(())
    }
}

/// Decodes a classic pcap stream, writing one line per RoCE frame and the summary line to
/// `out`. A damaged file stops the reading with a `# pcap error` line; the summary (with
/// `file_error` set) is still printed and returned.
pub fn decode_pcap<R: Read, W: Write>(input: R, out: &mut W) -> Result<DecodeSummary, DecodeError> {
    let mut reader = PcapReader::new(input)?;
    let linktype = reader.header().linktype;
    if linktype != LINKTYPE_ETHERNET {
        return Err(DecodeError::UnsupportedLinkType { linktype });
    }
    let mut s = DecodeSummary::default();
    let mut data = Vec::new();
    loop {
        let (_, orig_len) = match reader.next_into(&mut data) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(PcapError::Io(e)) => return Err(DecodeError::Pcap(PcapError::Io(e))),
            Err(e) => {
                writeln!(out, "# pcap error: {e}")?;
                s.file_error = Some(e.to_string());
                break;
            }
        };
        s.frames += 1;
        let n = s.frames;
        match parse_frame(&data) {
            Ok(p) => {
                match p.version() {
                    RoceVersion::V1 => s.rocev1 += 1,
                    RoceVersion::V2 => s.rocev2 += 1,
                }
                if p.icrc_ok {
                    s.icrc_ok += 1;
                } else {
                    s.icrc_bad += 1;
                }
                s.per_opcode[usize::from(p.bth.opcode.0)] += 1;
                writeln!(out, "#{n} {}", PacketLine(&p))?;
            }
            Err(e) if e.is_not_roce() => s.non_roce += 1,
            Err(e) if (data.len() as u64) < u64::from(orig_len) => {
                s.capture_truncated += 1;
                writeln!(out, "#{n} CAPTURE_TRUNCATED {} of {orig_len} bytes captured: {e}", data.len())?;
            }
            Err(e) => {
                s.malformed += 1;
                writeln!(out, "#{n} MALFORMED {}: {e}", e.tag())?;
            }
        }
    }
    writeln!(out, "{s}")?;
    Ok(s)
}

/// [`decode_pcap`] on a file.
pub fn decode_pcap_file<W: Write>(path: impl AsRef<Path>, out: &mut W) -> Result<DecodeSummary, DecodeError> {
    let f = File::open(path.as_ref()).map_err(|e| {
        DecodeError::Pcap(PcapError::Io(io::Error::new(e.kind(), format!("{}: {e}", path.as_ref().display()))))
    })?;
    decode_pcap(BufReader::new(f), out)
}
