//! The declaration macros: `ifc!` for PRM bit-layout structures, `plain!` for byte-layout
//! `#[repr(C)]` structures, and `open_enum!` for open enumerations.

/// Declares PRM ("`_bits`") structures field by field, in PRM order, with the `mlx5_ifc.h` names.
///
/// ```text
/// ifc! {
///     /// doc
///     struct create_cq_out[0x80] {
///         status: 0x8,              // scalar, width in bits
///         reserved_at_8: 0x18,      // reserved: checked to sit at bit 0x8
///         syndrome: 0x20,
///         cqc: cqc,                 // nested structure (any struct declared in crate::ifc)
///         pas: [0x40; 0],           // array: element width in bits; count (0 = variable tail)
///     }
/// }
/// ```
///
/// Each structure becomes a module holding one [`crate::Field`] constant per field, `SIZE_BITS`,
/// `SIZE_BYTES`, `FIELDS` and `STRUCT`. The total size and every reserved offset are checked at
/// compile time.
#[macro_export]
macro_rules! ifc {
    ($(
        $(#[$m:meta])*
        struct $name:ident [$size:expr] {
            $($f:ident : $spec:tt),* $(,)?
        }
    )*) => {$(
        $(#[$m])*
        #[allow(non_upper_case_globals, non_camel_case_types, dead_code, clippy::identity_op, clippy::erasing_op)]
        pub mod $name {
            use $crate::field::{Field, IfcStruct};
            #[repr(usize)]
            enum Idx { $($f,)* __End }
            const WIDTHS: &[usize] = &[$($crate::__ifc_width!($spec)),*];
            const fn off(i: usize) -> usize {
                let mut s = 0;
                let mut k = 0;
                while k < i {
                    s += WIDTHS[k];
                    k += 1;
                }
                s
            }
            $(
                #[doc = concat!("`", stringify!($f), "`: ", stringify!($spec), " bits.")]
                pub const $f: Field = Field::new(
                    stringify!($f),
                    off(Idx::$f as usize),
                    $crate::__ifc_width!($spec),
                    $crate::__ifc_kind!(stringify!($f), $spec),
                );
            )*
            /// Total size in bits.
            pub const SIZE_BITS: usize = off(Idx::__End as usize);
            /// Total size in bytes.
            pub const SIZE_BYTES: usize = SIZE_BITS / 8;
            /// Every field, in PRM order.
            pub const FIELDS: &[Field] = &[$($f),*];
            /// This structure's description (for the layout dump and generic code).
            pub const STRUCT: IfcStruct = IfcStruct { name: stringify!($name), size_bits: SIZE_BITS, fields: FIELDS };
            const _: () = assert!(SIZE_BITS == $size, concat!("size of ", stringify!($name), " differs from the PRM"));
        }
    )*};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_width {
    ($w:literal) => {
        $w
    };
    ([$w:literal; $n:expr]) => {
        $w * $n
    };
    ($s:ident) => {
        $crate::ifc::$s::SIZE_BITS
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __ifc_kind {
    ($name:expr, $w:literal) => {
        $crate::field::FieldKind::scalar_or_reserved($name)
    };
    ($name:expr, [$w:literal; $n:expr]) => {
        $crate::field::FieldKind::Array { elem_bits: $w, count: $n }
    };
    ($name:expr, $s:ident) => {
        $crate::field::FieldKind::Struct(stringify!($s))
    };
}

/// Declares byte-layout structures (`#[repr(C)]`, big-endian fields, no padding) with every
/// field's byte offset asserted at compile time, and a field table for the layout dump.
///
/// ```text
/// plain! {
///     /// doc
///     struct wqe_data_seg[16] {
///         /// doc
///         byte_count @ 0x00: U32,
///         lkey @ 0x04: U32,
///         addr @ 0x08: U64,
///     }
/// }
/// ```
#[macro_export]
macro_rules! plain {
    ($(
        $(#[$m:meta])*
        struct $name:ident [$size:expr] {
            $($(#[$fm:meta])* $f:ident @ $off:literal : $ty:ty),* $(,)?
        }
    )*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq,
            zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::KnownLayout, zerocopy::Immutable,
            zerocopy::Unaligned)]
        #[allow(non_camel_case_types)]
        pub struct $name {
            $($(#[$fm])* pub $f: $ty,)*
        }
        /// Byte offset of each field, named as the field (`cqe64::byte_cnt` is 0x2c): the one
        /// declaration that code reading or writing device memory through raw pointers uses.
        #[allow(non_upper_case_globals)]
        impl $name {
            $(
                #[doc = concat!("Byte offset of `", stringify!($f), "`.")]
                pub const $f: usize = core::mem::offset_of!($name, $f);
            )*
        }
        impl $name {
            /// Size in bytes.
            pub const SIZE: usize = $size;
            /// Every field with its byte offset and size.
            pub const FIELDS: &'static [$crate::PlainField] = &[$(
                $crate::PlainField {
                    name: stringify!($f),
                    offset_bytes: core::mem::offset_of!($name, $f),
                    size_bytes: core::mem::size_of::<$ty>(),
                }
            ),*];
            /// This structure's description (for the layout dump).
            pub const STRUCT: $crate::PlainStruct = $crate::PlainStruct {
                name: stringify!($name),
                size_bytes: $size,
                fields: Self::FIELDS,
            };
        }
        const _: () = {
            assert!(core::mem::size_of::<$name>() == $size, concat!("size of ", stringify!($name)));
            $(assert!(core::mem::offset_of!($name, $f) == $off,
                concat!("offset of ", stringify!($name), ".", stringify!($f)));)*
        };
    )*};
}

/// Declares an open enumeration: a newtype over an integer with named constants. An unknown
/// value round-trips unchanged and prints as `Unknown(0x..)`.
///
/// ```text
/// open_enum! {
///     /// doc
///     pub struct CmdStatus(u8) {
///         /// doc
///         OK = 0x00,
///     }
/// }
/// ```
#[macro_export]
macro_rules! open_enum {
    ($(
        $(#[$m:meta])*
        pub struct $name:ident($repr:ty) {
            $($(#[$vm:meta])* $v:ident = $val:expr),* $(,)?
        }
    )*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub $repr);
        #[allow(missing_docs)]
        impl $name {
            $($(#[$vm])* pub const $v: $name = $name($val);)*
            /// Every named value.
            pub const ALL: &'static [$name] = &[$($name($val)),*];
            /// The PRM name of this value, or `None` if the value is not one we know.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(x if x == $val => Some(stringify!($v)),)*
                    _ => None,
                }
            }
            /// Whether this value is one of the named values.
            pub const fn is_known(self) -> bool {
                self.name().is_some()
            }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(self, f)
            }
        }
        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "Unknown({:#x})", self.0),
                }
            }
        }
        impl From<$repr> for $name {
            fn from(v: $repr) -> Self {
                $name(v)
            }
        }
        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v.0
            }
        }
    )*};
}
