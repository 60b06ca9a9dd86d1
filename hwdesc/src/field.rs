//! Bit-addressed fields of PRM ("`_bits`") structures, and the accessors that read and write them
//! in any byte buffer.
//!
//! The PRM describes every firmware-interface structure as a sequence of big-endian 32-bit dwords
//! whose bits are numbered from the most significant bit of dword 0. A [`Field`] is one named run
//! of bits in that numbering: `offset_bits` counts from bit 31 of dword 0, so a field at offset
//! 0x10 with width 16 occupies bytes 2..4 of the buffer. The driver emits commands and the sim
//! parses them through the very same `Field` constants.

/// What kind of field a [`Field`] is, for the layout dump and for nested access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A scalar of at most 64 bits (read and written with [`Field::get`] / [`Field::set`]).
    Scalar,
    /// A fixed-size array of `count` elements of `elem_bits` bits each (the field's width is the
    /// whole array; a zero-length array is a variable-length tail such as `pas[]`).
    Array {
        /// Bits per element.
        elem_bits: usize,
        /// Number of elements (0 for a variable-length tail).
        count: usize,
    },
    /// A nested PRM structure; its width is the nested structure's size.
    Struct(&'static str),
    /// Reserved bits (`reserved_at_<hex>`): must be zero on input.
    Reserved,
}

impl FieldKind {
    /// `Reserved` for a `reserved_*` name, `Scalar` otherwise.
    pub const fn scalar_or_reserved(name: &str) -> FieldKind {
        let b = name.as_bytes();
        let p = b"reserved";
        if b.len() < p.len() {
            return FieldKind::Scalar;
        }
        let mut i = 0;
        while i < p.len() {
            if b[i] != p[i] {
                return FieldKind::Scalar;
            }
            i += 1;
        }
        FieldKind::Reserved
    }
}

/// One field of a PRM structure: its name (as in `mlx5_ifc.h`), bit offset and bit width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field name, spelled as in `mlx5_ifc.h`.
    pub name: &'static str,
    /// Offset in bits from the start of the structure (bit 31 of dword 0 is bit 0).
    pub offset_bits: usize,
    /// Width in bits (for arrays: the whole array; for nested structures: their size).
    pub width_bits: usize,
    /// What the field is.
    pub kind: FieldKind,
}

/// Parses the hex number in a `reserved_at_<hex>` name, or returns `None` for other names.
const fn reserved_offset(name: &str) -> Option<usize> {
    let b = name.as_bytes();
    let prefix = b"reserved_at_";
    if b.len() <= prefix.len() {
        return None;
    }
    let mut i = 0;
    while i < prefix.len() {
        if b[i] != prefix[i] {
            return None;
        }
        i += 1;
    }
    let mut v = 0usize;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = v * 16 + d as usize;
        i += 1;
    }
    Some(v)
}

impl Field {
    /// Declares a field. Evaluated at compile time by the `ifc!` declarations, where it checks:
    /// a `reserved_at_<hex>` field sits exactly at `<hex>`; a scalar of at most 32 bits does not
    /// cross a dword boundary; a 64-bit scalar is 32-bit aligned.
    pub const fn new(name: &'static str, offset_bits: usize, width_bits: usize, kind: FieldKind) -> Field {
        if let Some(at) = reserved_offset(name) {
            assert!(at == offset_bits, "reserved_at_<hex> field is not at <hex>");
        }
        if let FieldKind::Scalar = kind {
            assert!(width_bits > 0 && width_bits <= 64, "scalar field wider than 64 bits");
            if width_bits <= 32 {
                assert!(offset_bits / 32 == (offset_bits + width_bits - 1) / 32, "scalar field crosses a dword");
            } else {
                assert!(offset_bits.is_multiple_of(32), "64-bit field not dword aligned");
            }
        }
        Field { name, offset_bits, width_bits, kind }
    }

    /// The bit just past this field: where the next field starts.
    pub const fn end_bits(&self) -> usize {
        self.offset_bits + self.width_bits
    }

    /// Byte offset of the field (the byte holding its most significant bit).
    pub const fn offset_bytes(&self) -> usize {
        self.offset_bits / 8
    }

    /// Size in bytes, rounded up, of the bytes the field touches when it is byte-aligned.
    pub const fn size_bytes(&self) -> usize {
        self.width_bits.div_ceil(8)
    }

    /// The same field seen from an enclosing structure in which this field's structure is
    /// nested at `outer` (for example `create_qp_in::qpc.inner(qpc::log_sq_size)`).
    pub const fn inner(&self, nested: Field) -> Field {
        assert!(nested.end_bits() <= self.width_bits || self.width_bits == 0, "nested field outside its container");
        Field { offset_bits: self.offset_bits + nested.offset_bits, ..nested }
    }

    /// Element `index` of an array field (as a scalar, or as a nested structure).
    pub const fn elem(&self, index: usize) -> Field {
        match self.kind {
            FieldKind::Array { elem_bits, count } => {
                assert!(count == 0 || index < count, "array index out of range");
                Field {
                    name: self.name,
                    offset_bits: self.offset_bits + index * elem_bits,
                    width_bits: elem_bits,
                    kind: FieldKind::Scalar,
                }
            }
            _ => panic!("elem() on a field that is not an array"),
        }
    }

    /// The field's bits in a structure of `struct_bits` bits (at most 64) read as one big-endian
    /// integer: the mask that tests or sets the field in such a value (an MTT entry read as a
    /// `u64`, for example).
    pub const fn be_mask(&self, struct_bits: usize) -> u64 {
        assert!(struct_bits <= 64 && self.end_bits() <= struct_bits && self.width_bits > 0, "field outside the word");
        (u64::MAX >> (64 - self.width_bits)) << (struct_bits - self.end_bits())
    }

    /// Whether `buf` is long enough to hold this field.
    pub const fn fits(&self, buf_len: usize) -> bool {
        self.end_bits().div_ceil(8) <= buf_len
    }

    /// Reads the field (at most 64 bits) from `buf`. Bits beyond the end of `buf` read as zero,
    /// as they would from a zero-padded message.
    pub fn get(&self, buf: &[u8]) -> u64 {
        debug_assert!(self.width_bits <= 64);
        let mut v: u64 = 0;
        let mut bit = self.offset_bits;
        let end = self.end_bits();
        // Walk byte by byte; PRM fields are big-endian bit runs.
        while bit < end {
            let byte = bit / 8;
            let in_byte = bit % 8;
            let take = (8 - in_byte).min(end - bit);
            let b = buf.get(byte).copied().unwrap_or(0);
            let chunk = (b >> (8 - in_byte - take)) & ((1u16 << take) - 1) as u8;
            v = (v << take) | chunk as u64;
            bit += take;
        }
        v
    }

    /// Writes `value` (truncated to the field's width) into `buf`, leaving every other bit
    /// unchanged. Returns `false` and writes nothing if `buf` is too short.
    pub fn set(&self, buf: &mut [u8], value: u64) -> bool {
        debug_assert!(self.width_bits <= 64);
        if !self.fits(buf.len()) {
            return false;
        }
        let end = self.end_bits();
        let mut bit = end;
        let mut v = value;
        while bit > self.offset_bits {
            let last = bit - 1;
            let byte = last / 8;
            let in_byte_end = last % 8 + 1; // bits used in this byte, counted from its MSB
            let start_in_byte = in_byte_end.saturating_sub(bit - self.offset_bits);
            let take = in_byte_end - start_in_byte;
            let shift = 8 - in_byte_end;
            let mask = ((((1u16 << take) - 1) as u8) as u16) << shift;
            let bits = ((v & ((1u64 << take) - 1)) as u16) << shift;
            buf[byte] = (buf[byte] & !(mask as u8)) | bits as u8;
            v = if take == 64 { 0 } else { v >> take };
            bit -= take;
        }
        true
    }

    /// The bytes of a byte-aligned field (an array, a nested structure, a GID), or `None` when
    /// the field is not byte-aligned or `buf` is too short.
    pub fn bytes<'a>(&self, buf: &'a [u8]) -> Option<&'a [u8]> {
        if !self.offset_bits.is_multiple_of(8) || !self.width_bits.is_multiple_of(8) || !self.fits(buf.len()) {
            return None;
        }
        Some(&buf[self.offset_bytes()..self.offset_bytes() + self.size_bytes()])
    }

    /// Mutable bytes of a byte-aligned field; see [`Field::bytes`].
    pub fn bytes_mut<'a>(&self, buf: &'a mut [u8]) -> Option<&'a mut [u8]> {
        if !self.offset_bits.is_multiple_of(8) || !self.width_bits.is_multiple_of(8) || !self.fits(buf.len()) {
            return None;
        }
        let (o, n) = (self.offset_bytes(), self.size_bytes());
        Some(&mut buf[o..o + n])
    }
}

/// A PRM structure's description: its name, size and fields, generated by `ifc!`.
#[derive(Clone, Copy, Debug)]
pub struct IfcStruct {
    /// The structure name as in `mlx5_ifc.h`, without the `mlx5_ifc_` prefix and `_bits` suffix.
    pub name: &'static str,
    /// Total size in bits.
    pub size_bits: usize,
    /// Every field, in PRM order.
    pub fields: &'static [Field],
}

impl IfcStruct {
    /// Size in bytes.
    pub const fn size_bytes(&self) -> usize {
        self.size_bits / 8
    }

    /// Looks a field up by name.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}
