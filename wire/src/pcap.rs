//! Classic libpcap files: a reader and a writer.
//!
//! This module owns the capture file format the tools and tests exchange with tcpdump,
//! tshark and Wireshark: the 24-byte global header (magic 0xA1B2C3D4 for microsecond or
//! 0xA1B23C4D for nanosecond timestamps, in either byte order) followed by records of a
//! 16-byte header and the captured bytes. pcapng is recognised and refused with a clear
//! error. The reader never panics on a damaged file and never allocates more than the
//! bytes actually present.

use std::fmt;
use std::io::{self, Read, Write};
use std::time::Duration;

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Largest record the reader accepts (bigger lengths mean a corrupt file).
pub const MAX_RECORD_LEN: u32 = 16 << 20;

const MAGIC_USEC: u32 = 0xA1B2_C3D4;
const MAGIC_NSEC: u32 = 0xA1B2_3C4D;
const MAGIC_PCAPNG: u32 = 0x0A0D_0D0A;

/// Timestamp resolution of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TsResolution {
    /// Microseconds (magic 0xA1B2C3D4).
    Micro,
    /// Nanoseconds (magic 0xA1B23C4D).
    Nano,
}

/// Byte order of a file's headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Little-endian (written by x86 hosts).
    Little,
    /// Big-endian.
    Big,
}

/// The global header of a pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PcapHeader {
    /// Byte order.
    pub endian: Endian,
    /// Timestamp resolution.
    pub resolution: TsResolution,
    /// Format version (2.4).
    pub version: (u16, u16),
    /// Snapshot length.
    pub snaplen: u32,
    /// Link type (low 28 bits of the field; 1 = Ethernet).
    pub linktype: u32,
}

/// One record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PcapRecord {
    /// Capture time since the Unix epoch (nanosecond precision; microsecond files have
    /// whole microseconds).
    pub timestamp: Duration,
    /// Length of the packet on the wire (may exceed `data.len()` when cut by the snaplen).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl PcapRecord {
    /// Whether the capture holds fewer bytes than the packet had.
    pub fn is_truncated(&self) -> bool {
        (self.data.len() as u64) < u64::from(self.orig_len)
    }
}

/// Why a pcap file could not be read.
#[derive(Debug)]
pub enum PcapError {
    /// I/O failure of the underlying reader or writer.
    Io(io::Error),
    /// The file is shorter than the 24-byte global header.
    TruncatedHeader {
        /// Bytes present.
        have: usize,
    },
    /// The magic number is not a classic pcap magic.
    BadMagic {
        /// The first 4 bytes.
        magic: [u8; 4],
    },
    /// A pcapng file (not supported).
    Pcapng,
    /// The file ends inside a record.
    TruncatedRecord {
        /// 1-based record number.
        index: u64,
        /// Bytes the record header promised (16 + captured length).
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// A record claims an implausible length (over [`MAX_RECORD_LEN`]).
    RecordTooLong {
        /// 1-based record number.
        index: u64,
        /// Captured length claimed.
        len: u32,
    },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcapError::Io(e) => write!(f, "pcap I/O error: {e}"),
            PcapError::TruncatedHeader { have } => {
                write!(f, "not a pcap file: only {have} bytes, the global header needs 24")
            }
            PcapError::BadMagic { magic } => write!(
                f,
                "not a classic pcap file: magic {:02x}{:02x}{:02x}{:02x}",
                magic[0], magic[1], magic[2], magic[3]
            ),
            PcapError::Pcapng => {
                f.write_str("pcapng files are not supported; convert with `editcap -F pcap in.pcapng out.pcap`")
            }
            PcapError::TruncatedRecord { index, need, have } => {
                write!(f, "pcap file truncated in record {index}: need {need} bytes, have {have}")
            }
            PcapError::RecordTooLong { index, len } => {
                write!(f, "pcap record {index} claims {len} captured bytes (corrupt file?)")
            }
        }
    }
}

impl std::error::Error for PcapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PcapError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for PcapError {
    fn from(e: io::Error) -> Self {
        PcapError::Io(e)
    }
}

/// Reads as many bytes as possible into `buf` (until full or EOF); returns the count.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A pcap reader over any [`Read`]. Iterate it for [`PcapRecord`]s, or call
/// [`next_into`](Self::next_into) to reuse one buffer.
#[derive(Debug)]
pub struct PcapReader<R> {
    inner: R,
    header: PcapHeader,
    index: u64,
    done: bool,
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the global header.
    pub fn new(mut inner: R) -> Result<Self, PcapError> {
        let mut h = [0u8; 24];
        let n = read_full(&mut inner, &mut h)?;
        let magic = [h[0], h[1], h[2], h[3]];
        if n >= 4 && u32::from_le_bytes(magic) == MAGIC_PCAPNG {
            return Err(PcapError::Pcapng);
        }
        if n < 24 {
            return Err(PcapError::TruncatedHeader { have: n });
        }
        let (endian, resolution) = match (u32::from_le_bytes(magic), u32::from_be_bytes(magic)) {
            (MAGIC_USEC, _) => (Endian::Little, TsResolution::Micro),
            (MAGIC_NSEC, _) => (Endian::Little, TsResolution::Nano),
            (_, MAGIC_USEC) => (Endian::Big, TsResolution::Micro),
            (_, MAGIC_NSEC) => (Endian::Big, TsResolution::Nano),
            _ => return Err(PcapError::BadMagic { magic }),
        };
        let u16_at = |at: usize| {
            let b = [h[at], h[at + 1]];
            match endian {
                Endian::Little => u16::from_le_bytes(b),
                Endian::Big => u16::from_be_bytes(b),
            }
        };
        let u32_at = |at: usize| {
            let b = [h[at], h[at + 1], h[at + 2], h[at + 3]];
            match endian {
                Endian::Little => u32::from_le_bytes(b),
                Endian::Big => u32::from_be_bytes(b),
            }
        };
        let header = PcapHeader {
            endian,
            resolution,
            version: (u16_at(4), u16_at(6)),
            snaplen: u32_at(16),
            linktype: u32_at(20) & 0x0FFF_FFFF,
        };
        Ok(Self { inner, header, index: 0, done: false })
    }

    /// The global header.
    pub fn header(&self) -> &PcapHeader {
        &self.header
    }

    fn u32(&self, b: [u8; 4]) -> u32 {
        match self.header.endian {
            Endian::Little => u32::from_le_bytes(b),
            Endian::Big => u32::from_be_bytes(b),
        }
    }

    /// Reads the next record's bytes into `data` (cleared first) and returns its timestamp
    /// and original length, or `None` at a clean end of file.
    pub fn next_into(&mut self, data: &mut Vec<u8>) -> Result<Option<(Duration, u32)>, PcapError> {
        data.clear();
        if self.done {
            return Ok(None);
        }
        let mut h = [0u8; 16];
        let n = read_full(&mut self.inner, &mut h)?;
        if n == 0 {
            self.done = true;
            return Ok(None);
        }
        self.index += 1;
        let index = self.index;
        if n < 16 {
            self.done = true;
            return Err(PcapError::TruncatedRecord { index, need: 16, have: n as u64 });
        }
        let ts_sec = self.u32([h[0], h[1], h[2], h[3]]);
        let ts_frac = self.u32([h[4], h[5], h[6], h[7]]);
        let incl = self.u32([h[8], h[9], h[10], h[11]]);
        let orig = self.u32([h[12], h[13], h[14], h[15]]);
        if incl > MAX_RECORD_LEN {
            self.done = true;
            return Err(PcapError::RecordTooLong { index, len: incl });
        }
        // `take` + `read_to_end` grows with the bytes that really arrive, so a lying length
        // in a short file costs nothing.
        let got = (&mut self.inner).take(u64::from(incl)).read_to_end(data)?;
        if got < incl as usize {
            self.done = true;
            return Err(PcapError::TruncatedRecord { index, need: 16 + u64::from(incl), have: 16 + got as u64 });
        }
        let nanos = match self.header.resolution {
            TsResolution::Micro => u64::from(ts_frac) * 1000,
            TsResolution::Nano => u64::from(ts_frac),
        };
        let ts = Duration::from_secs(u64::from(ts_sec)) + Duration::from_nanos(nanos);
        Ok(Some((ts, orig)))
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<PcapRecord, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut data = Vec::new();
        match self.next_into(&mut data) {
            Ok(Some((timestamp, orig_len))) => Some(Ok(PcapRecord { timestamp, orig_len, data })),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// A pcap writer (little-endian headers, LINKTYPE_ETHERNET by default).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    inner: W,
    resolution: TsResolution,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Writes a microsecond, Ethernet, snaplen 65535 header.
    pub fn new(inner: W) -> io::Result<Self> {
        Self::with_options(inner, TsResolution::Micro, 65535, LINKTYPE_ETHERNET)
    }

    /// Writes a header with the given resolution, snaplen and link type.
    pub fn with_options(mut inner: W, resolution: TsResolution, snaplen: u32, linktype: u32) -> io::Result<Self> {
        let magic = match resolution {
            TsResolution::Micro => MAGIC_USEC,
            TsResolution::Nano => MAGIC_NSEC,
        };
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) are 0.
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&linktype.to_le_bytes());
        inner.write_all(&h)?;
        Ok(Self { inner, resolution, snaplen })
    }

    /// Writes one record captured at `ts` (since the Unix epoch). Frames longer than the
    /// snaplen are cut, with the original length recorded.
    pub fn write_record(&mut self, ts: Duration, data: &[u8]) -> io::Result<()> {
        let orig = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let incl = orig.min(self.snaplen);
        let frac = match self.resolution {
            TsResolution::Micro => ts.subsec_micros(),
            TsResolution::Nano => ts.subsec_nanos(),
        };
        let secs = u32::try_from(ts.as_secs()).unwrap_or(u32::MAX);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.inner.write_all(&h)?;
        self.inner.write_all(data.get(..incl as usize).unwrap_or(data))
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}
