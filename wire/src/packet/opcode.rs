//! The BTH opcode: an open newtype plus the table of what each known opcode carries
//! (wire doc §2, rxe `rxe_opcode.c`, IBA).

use std::fmt;

/// One extension header kind, in the fixed order they follow the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtKind {
    /// Reliable Datagram ETH (4 bytes, RD only).
    Rdeth,
    /// Datagram ETH (8 bytes: Q_Key, SrcQP).
    Deth,
    /// Flush ETH (4 bytes, RC FLUSH; precedes the RETH).
    Feth,
    /// RDMA ETH (16 bytes: VA, R_Key, DMA length).
    Reth,
    /// Atomic ETH (28 bytes: VA, R_Key, swap/add, compare).
    AtomicEth,
    /// ACK ETH (4 bytes: syndrome, MSN).
    Aeth,
    /// Atomic ACK ETH (8 bytes: original remote data).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    ImmDt,
    /// Invalidate ETH (4 bytes: R_Key to invalidate).
    Ieth,
    /// The 16 reserved bytes of a CNP (RoCEv2 A17.9.3).
    Cnp,
}

impl ExtKind {
    /// Every kind, in wire order.
    pub const ORDER: [ExtKind; 10] = [
        ExtKind::Rdeth,
        ExtKind::Deth,
        ExtKind::Feth,
        ExtKind::Reth,
        ExtKind::AtomicEth,
        ExtKind::Aeth,
        ExtKind::AtomicAckEth,
        ExtKind::ImmDt,
        ExtKind::Ieth,
        ExtKind::Cnp,
    ];

    /// Size of this header on the wire in bytes.
    pub const fn size(self) -> usize {
        match self {
            ExtKind::Rdeth | ExtKind::Feth | ExtKind::Aeth | ExtKind::ImmDt | ExtKind::Ieth => 4,
            ExtKind::Deth | ExtKind::AtomicAckEth => 8,
            ExtKind::Reth | ExtKind::Cnp => 16,
            ExtKind::AtomicEth => 28,
        }
    }

    /// The IBA name ("RETH", "ImmDt", ...).
    pub const fn name(self) -> &'static str {
        match self {
            ExtKind::Rdeth => "RDETH",
            ExtKind::Deth => "DETH",
            ExtKind::Feth => "FETH",
            ExtKind::Reth => "RETH",
            ExtKind::AtomicEth => "AtomicETH",
            ExtKind::Aeth => "AETH",
            ExtKind::AtomicAckEth => "AtomicAckETH",
            ExtKind::ImmDt => "ImmDt",
            ExtKind::Ieth => "IETH",
            ExtKind::Cnp => "CNP",
        }
    }

    /// Its bit in a [`HeaderSet`]: its place in [`ExtKind::ORDER`], so that a set's bits, low
    /// to high, are its kinds in wire order.
    const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

// The kinds are declared in wire order: each one's discriminant is its place in ORDER.
const _: () = {
    let mut i = 0;
    while i < ExtKind::ORDER.len() {
        assert!(ExtKind::ORDER[i] as usize == i);
        i += 1;
    }
};

impl fmt::Display for ExtKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of extension header kinds (what an opcode carries, or what a packet holds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// No extension header.
    pub const EMPTY: HeaderSet = HeaderSet(0);

    /// The set holding exactly the given kinds.
    pub const fn of(kinds: &[ExtKind]) -> HeaderSet {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= kinds[i].bit();
            i += 1;
        }
        HeaderSet(bits)
    }

    /// This set plus `kind`.
    pub const fn with(self, kind: ExtKind) -> HeaderSet {
        HeaderSet(self.0 | kind.bit())
    }

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: ExtKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total size on the wire of the headers in the set.
    pub const fn wire_len(self) -> usize {
        let mut n = 0;
        let mut bits = self.0;
        while bits != 0 {
            n += ExtKind::ORDER[bits.trailing_zeros() as usize].size();
            bits &= bits - 1;
        }
        n
    }

    /// Where header `kind` starts after the BTH in a packet carrying this set: the total size
    /// of the set's kinds before it in wire order. `None` if `kind` is not in the set.
    pub const fn offset_of(self, kind: ExtKind) -> Option<usize> {
        if !self.contains(kind) {
            return None;
        }
        Some(HeaderSet(self.0 & (kind.bit() - 1)).wire_len())
    }

    /// The first kind, in wire order, that is in one of the two sets and not the other.
    pub fn first_difference(self, other: HeaderSet) -> Option<ExtKind> {
        HeaderSet(self.0 ^ other.0).iter().next()
    }

    /// The kinds in the set, in wire order (its set bits, low to high).
    pub fn iter(self) -> impl Iterator<Item = ExtKind> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            let kind = ExtKind::ORDER.get(bits.trailing_zeros() as usize).copied();
            bits &= bits.wrapping_sub(1);
            kind
        })
    }
}

/// The transport service an opcode belongs to (top 3 opcode bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (0x00-0x1F).
    Rc,
    /// Unreliable Connected (0x20-0x3F).
    Uc,
    /// Reliable Datagram (0x40-0x5F).
    Rd,
    /// Unreliable Datagram (0x60-0x7F).
    Ud,
    /// Congestion notification (0x80-0x9F; only 0x81 is defined).
    Cnp,
    /// Extended Reliable Connected (0xA0-0xBF; not implemented by this codec).
    Xrc,
    /// Manufacturer specific (0xC0-0xFF).
    Vendor,
}

impl Transport {
    /// Short upper-case name ("RC", "UD", ...).
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Vendor => "VENDOR",
        }
    }
}

/// Which packet of a message an opcode is (rxe START/MIDDLE/END masks; single-packet
/// operations such as ACK or READ_REQUEST are `Only`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Middle packet.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// Whether this packet starts a message (FIRST or ONLY).
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Whether this packet ends a message (LAST or ONLY).
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The operation an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (all variants).
    Send,
    /// RDMA WRITE (all variants).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACKNOWLEDGE (ACK, NAK, RNR NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// COMPARE_SWAP.
    CompareSwap,
    /// FETCH_ADD.
    FetchAdd,
    /// FLUSH (IBA 1.5).
    Flush,
    /// ATOMIC_WRITE (IBA 1.5).
    AtomicWrite,
    /// RD RESYNC.
    Resync,
    /// Congestion notification packet.
    Cnp,
}

impl Operation {
    /// Whether packets of this operation travel from requester to responder.
    pub const fn is_request(self) -> bool {
        !self.is_response() && !matches!(self, Operation::Cnp)
    }

    /// Whether packets of this operation travel from responder to requester.
    pub const fn is_response(self) -> bool {
        matches!(self, Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge)
    }
}

/// What the opcode table says about one known opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// rxe / IBA name without the `IB_OPCODE_` prefix ("RC_SEND_ONLY").
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Place in a message.
    pub position: Position,
    /// Extension headers after the BTH (in [`ExtKind::ORDER`]).
    pub headers: HeaderSet,
    /// Whether the packet may carry a payload.
    pub payload: bool,
    /// BTH plus extension headers, in bytes: computed with the table, not at each use.
    header_bytes: u8,
}

impl OpcodeInfo {
    /// BTH plus extension headers, in bytes (rxe's `header_size` minus the L2/L3/L4 part).
    pub const fn header_len(&self) -> usize {
        self.header_bytes as usize
    }
}

/// A BTH opcode. Open: any `u8` is representable, [`Opcode::info`] tells whether this codec
/// knows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcode_table {
    ($( $name:ident = $val:literal, $tr:ident, $op:ident, $pos:ident, [$($h:ident),*], $pl:literal; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($val), ").")]
                pub const $name: Opcode = Opcode($val);
            )*

            /// Every opcode the table knows, in ascending order.
            pub const ALL_KNOWN: &'static [Opcode] = &[$(Opcode($val)),*];
        }

        static TABLE: [Option<OpcodeInfo>; 256] = {
            let mut t = [None; 256];
            $(
                t[$val] = Some(OpcodeInfo {
                    name: stringify!($name),
                    transport: Transport::$tr,
                    operation: Operation::$op,
                    position: Position::$pos,
                    headers: HeaderSet::of(&[$(ExtKind::$h),*]),
                    payload: $pl,
                    header_bytes: (12 + HeaderSet::of(&[$(ExtKind::$h),*]).wire_len()) as u8,
                });
            )*
            t
        };

        const fn lookup(v: u8) -> Option<&'static OpcodeInfo> {
            TABLE[v as usize].as_ref()
        }
    };
}

opcode_table! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, [ImmDt], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, [ImmDt], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, RdmaWrite, First, [Reth], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, RdmaWrite, Middle, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, RdmaWrite, Last, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, RdmaWrite, Last, [ImmDt], true;
    RC_RDMA_WRITE_ONLY = 0x0A, Rc, RdmaWrite, Only, [Reth], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B, Rc, RdmaWrite, Only, [Reth, ImmDt], true;
    RC_RDMA_READ_REQUEST = 0x0C, Rc, RdmaReadRequest, Only, [Reth], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D, Rc, RdmaReadResponse, First, [Aeth], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E, Rc, RdmaReadResponse, Middle, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0F, Rc, RdmaReadResponse, Last, [Aeth], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, RdmaReadResponse, Only, [Aeth], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, Only, [Aeth], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, Only, [Aeth, AtomicAckEth], false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, [AtomicEth], false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, [AtomicEth], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, [Ieth], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, [Ieth], true;
    RC_FLUSH = 0x1C, Rc, Flush, Only, [Feth, Reth], false;
    RC_ATOMIC_WRITE = 0x1D, Rc, AtomicWrite, Only, [Reth], true;

    UC_SEND_FIRST = 0x20, Uc, Send, First, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, [ImmDt], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, [ImmDt], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, RdmaWrite, First, [Reth], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, RdmaWrite, Middle, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, RdmaWrite, Last, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, RdmaWrite, Last, [ImmDt], true;
    UC_RDMA_WRITE_ONLY = 0x2A, Uc, RdmaWrite, Only, [Reth], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B, Uc, RdmaWrite, Only, [Reth, ImmDt], true;

    RD_SEND_FIRST = 0x40, Rd, Send, First, [Rdeth, Deth], true;
    RD_SEND_MIDDLE = 0x41, Rd, Send, Middle, [Rdeth, Deth], true;
    RD_SEND_LAST = 0x42, Rd, Send, Last, [Rdeth, Deth], true;
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43, Rd, Send, Last, [Rdeth, Deth, ImmDt], true;
    RD_SEND_ONLY = 0x44, Rd, Send, Only, [Rdeth, Deth], true;
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45, Rd, Send, Only, [Rdeth, Deth, ImmDt], true;
    RD_RDMA_WRITE_FIRST = 0x46, Rd, RdmaWrite, First, [Rdeth, Deth, Reth], true;
    RD_RDMA_WRITE_MIDDLE = 0x47, Rd, RdmaWrite, Middle, [Rdeth, Deth], true;
    RD_RDMA_WRITE_LAST = 0x48, Rd, RdmaWrite, Last, [Rdeth, Deth], true;
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49, Rd, RdmaWrite, Last, [Rdeth, Deth, ImmDt], true;
    RD_RDMA_WRITE_ONLY = 0x4A, Rd, RdmaWrite, Only, [Rdeth, Deth, Reth], true;
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4B, Rd, RdmaWrite, Only, [Rdeth, Deth, Reth, ImmDt], true;
    RD_RDMA_READ_REQUEST = 0x4C, Rd, RdmaReadRequest, Only, [Rdeth, Deth, Reth], false;
    RD_RDMA_READ_RESPONSE_FIRST = 0x4D, Rd, RdmaReadResponse, First, [Rdeth, Aeth], true;
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4E, Rd, RdmaReadResponse, Middle, [Rdeth], true;
    RD_RDMA_READ_RESPONSE_LAST = 0x4F, Rd, RdmaReadResponse, Last, [Rdeth, Aeth], true;
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, Rd, RdmaReadResponse, Only, [Rdeth, Aeth], true;
    RD_ACKNOWLEDGE = 0x51, Rd, Acknowledge, Only, [Rdeth, Aeth], false;
    RD_ATOMIC_ACKNOWLEDGE = 0x52, Rd, AtomicAcknowledge, Only, [Rdeth, Aeth, AtomicAckEth], false;
    RD_COMPARE_SWAP = 0x53, Rd, CompareSwap, Only, [Rdeth, Deth, AtomicEth], false;
    RD_FETCH_ADD = 0x54, Rd, FetchAdd, Only, [Rdeth, Deth, AtomicEth], false;
    RD_RESYNC = 0x55, Rd, Resync, Only, [Rdeth, Deth], false;

    UD_SEND_ONLY = 0x64, Ud, Send, Only, [Deth], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, [Deth, ImmDt], true;

    CNP = 0x81, Cnp, Cnp, Only, [Cnp], false;
}

impl Opcode {
    /// The table entry, or `None` for an opcode this codec does not know (reserved, XRC,
    /// manufacturer specific).
    pub const fn info(self) -> Option<&'static OpcodeInfo> {
        lookup(self.0)
    }

    /// Whether the table knows this opcode.
    pub const fn is_known(self) -> bool {
        lookup(self.0).is_some()
    }

    /// The name ("RC_SEND_ONLY", "CNP"), or `None` when unknown. `Display` prints unknown
    /// opcodes as `Unknown(0x..)`.
    pub const fn name(self) -> Option<&'static str> {
        match lookup(self.0) {
            Some(i) => Some(i.name),
            None => None,
        }
    }

    /// The transport service from the top 3 bits (defined for every value).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Vendor,
        }
    }

    /// The extension headers this opcode carries (empty when unknown).
    pub const fn headers(self) -> HeaderSet {
        match lookup(self.0) {
            Some(i) => i.headers,
            None => HeaderSet::EMPTY,
        }
    }

    /// BTH + extension header length, or `None` when unknown.
    pub const fn header_len(self) -> Option<usize> {
        match lookup(self.0) {
            Some(i) => Some(i.header_len()),
            None => None,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Unknown(0x{:02x})", self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl From<u8> for Opcode {
    fn from(v: u8) -> Self {
        Opcode(v)
    }
}

impl From<Opcode> for u8 {
    fn from(o: Opcode) -> u8 {
        o.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lengths_match_rxe() {
        // The doc's §2 list of rxe header lengths (BTH included).
        let cases: &[(Opcode, usize)] = &[
            (Opcode::RC_SEND_ONLY, 12),
            (Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, 16),
            (Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 16),
            (Opcode::RC_RDMA_WRITE_FIRST, 28),
            (Opcode::RC_RDMA_WRITE_ONLY, 28),
            (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 32),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 12),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 16),
            (Opcode::RC_RDMA_READ_REQUEST, 28),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 16),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 12),
            (Opcode::RC_ACKNOWLEDGE, 16),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 24),
            (Opcode::RC_COMPARE_SWAP, 40),
            (Opcode::RC_FETCH_ADD, 40),
            (Opcode::UD_SEND_ONLY, 20),
            (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 24),
            (Opcode::CNP, 28),
        ];
        for &(op, len) in cases {
            assert_eq!(op.header_len(), Some(len), "{op}");
        }
    }

    #[test]
    fn uc_is_rc_plus_0x20() {
        for v in 0x00..=0x0Bu8 {
            let rc = Opcode(v).info().unwrap();
            let uc = Opcode(v + 0x20).info().unwrap();
            assert_eq!(rc.headers, uc.headers);
            assert_eq!(&rc.name[3..], &uc.name[3..]);
            assert_eq!(uc.transport, Transport::Uc);
        }
    }

    #[test]
    fn names_and_unknowns() {
        assert_eq!(Opcode(0x11).to_string(), "RC_ACKNOWLEDGE");
        assert_eq!(Opcode(0x65).to_string(), "UD_SEND_ONLY_WITH_IMMEDIATE");
        assert_eq!(Opcode(0x15).to_string(), "Unknown(0x15)");
        assert_eq!(Opcode(0xC3).transport(), Transport::Vendor);
        for op in Opcode::ALL_KNOWN {
            let info = op.info().unwrap();
            assert!(info.name.starts_with(info.transport.name()));
            assert_eq!(op.transport(), info.transport);
        }
    }
}
