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
    /// Complex of two f32 (real first), 8 bytes.
    C64,
    /// Complex of two f64 (real first), 16 bytes.
    C128,
    /// 8-bit float, 4 exponent bits (bias 7), 3 mantissa bits, no infinities, one NaN
    /// encoding per sign (S.1111.111); ml_dtypes' `float8_e4m3fn`.
    F8E4M3FN,
    /// 8-bit float, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like (infinities and
    /// NaNs); ml_dtypes' `float8_e5m2`.
    F8E5M2,
}

impl DType {
    /// Every element type, in declaration order (the types added later come last, so listings
    /// that iterate over this keep their older order).
    pub const ALL: [DType; 17] = [
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
        DType::C64,
        DType::C128,
        DType::F8E4M3FN,
        DType::F8E5M2,
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

    /// The (real, at least 16-bit) floating-point types. The 8-bit floats are not among them:
    /// they are storage types that most kernels do not take (see [`DType::is_f8`]).
    pub const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

    /// The complex types.
    pub const COMPLEX: [DType; 2] = [DType::C64, DType::C128];

    /// The 8-bit float types.
    pub const F8: [DType; 2] = [DType::F8E4M3FN, DType::F8E5M2];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::Pred | DType::I8 | DType::U8 | DType::F8E4M3FN | DType::F8E5M2 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
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
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E5M2 => "f8e5m2",
        }
    }

    /// Parses [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// True for f16, bf16, f32, f64 (not the 8-bit floats, see [`DType::is_f8`], nor complex).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for c64 and c128.
    pub const fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// True for f8e4m3fn and f8e5m2.
    pub const fn is_f8(self) -> bool {
        matches!(self, DType::F8E4M3FN | DType::F8E5M2)
    }

    /// The element type of the real and imaginary parts of a complex type (f32 for c64, f64
    /// for c128); `None` for the other types.
    pub const fn complex_part(self) -> Option<DType> {
        match self {
            DType::C64 => Some(DType::F32),
            DType::C128 => Some(DType::F64),
            _ => None,
        }
    }

    /// The complex type whose parts are `self` (c64 for f32, c128 for f64); `None` for the
    /// other types.
    pub const fn complex_of(self) -> Option<DType> {
        match self {
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
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
