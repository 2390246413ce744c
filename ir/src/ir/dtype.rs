//! Element types.

use std::fmt;

/// Element type of a buffer or an immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// One byte, 0 or 1.
    Pred,
    I8,
    U8,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    I16,
    U16,
    U32,
    U64,
}

impl DType {
    /// Every element type, in declaration order (the types added later come last, so listings
    /// that iterate over this keep their older order).
    pub const ALL: [DType; 13] = [
        DType::Pred,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    /// The integer types, signed and unsigned (not pred), narrowest first.
    pub const INTS: [DType; 8] = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// The floating-point types.
    pub const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::Pred | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// Short lowercase name used in kernel names, text formats and listings.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Pred => "pred",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    /// Parses [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// True for f16, bf16, f32, f64.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for the integer types, signed and unsigned (not pred).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    /// True for the signed integer types.
    pub const fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// True for the unsigned integer types (not pred).
    pub const fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
