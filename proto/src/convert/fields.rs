//! The conversions of fields every message shares, both ways: slices, element types, launch
//! dimensions, accesses, scalars (bit-exact through the text format), and [`Loc`], where a
//! thunk is (its path made only for an error).

use crate::{ProtoError, pb};
use xthunk_core::ir::{Access, DType, Dim3, PathSegment, Scalar, Slice, Thunk, ThunkPath};

/// Converts a nested thunk list to its messages: the kind table's `thunk::list_to`, handed to
/// the composite kinds' converters (while, conditional, async_start, command_buffer) so that
/// the table is the only caller of each kind's converter.
pub(crate) type ListTo = fn(&[Thunk]) -> Vec<pb::Thunk>;

/// Converts the messages of the nested list `field` of the thunk at a location: the kind
/// table's `thunk::list_from`, handed to the composite kinds' converters.
pub(crate) type ListFrom =
    fn(&[pb::Thunk], &Loc<'_>, &'static str) -> Result<Vec<Thunk>, ProtoError>;

/// Where a thunk is, as a chain of borrowed steps: the [`ThunkPath`] is materialized only for
/// an error.
#[derive(Clone, Copy)]
pub(crate) enum Loc<'a> {
    Root,
    Step {
        parent: &'a Loc<'a>,
        field: &'static str,
        index: usize,
    },
}

impl Loc<'_> {
    fn path(&self) -> ThunkPath {
        let mut steps = Vec::new();
        let mut cur = self;
        while let Loc::Step {
            parent,
            field,
            index,
        } = cur
        {
            steps.push(PathSegment {
                field,
                index: *index,
            });
            cur = parent;
        }
        steps.reverse();
        ThunkPath(steps)
    }

    pub(crate) fn invalid(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ProtoError {
        ProtoError::Invalid {
            path: self.path(),
            field: field.into(),
            message: message.into(),
        }
    }
}

pub(crate) fn dtype_from(v: i32, loc: &Loc<'_>, field: &str) -> Result<DType, ProtoError> {
    match pb::DType::try_from(v) {
        Ok(pb::DType::DtypeUnspecified) => {
            Err(loc.invalid(field, "the element type is unspecified"))
        }
        Ok(pb::DType::DtypePred) => Ok(DType::Pred),
        Ok(pb::DType::DtypeI8) => Ok(DType::I8),
        Ok(pb::DType::DtypeU8) => Ok(DType::U8),
        Ok(pb::DType::DtypeI32) => Ok(DType::I32),
        Ok(pb::DType::DtypeI64) => Ok(DType::I64),
        Ok(pb::DType::DtypeF16) => Ok(DType::F16),
        Ok(pb::DType::DtypeBf16) => Ok(DType::BF16),
        Ok(pb::DType::DtypeF32) => Ok(DType::F32),
        Ok(pb::DType::DtypeF64) => Ok(DType::F64),
        Ok(pb::DType::DtypeI16) => Ok(DType::I16),
        Ok(pb::DType::DtypeU16) => Ok(DType::U16),
        Ok(pb::DType::DtypeU32) => Ok(DType::U32),
        Ok(pb::DType::DtypeU64) => Ok(DType::U64),
        Ok(pb::DType::DtypeC64) => Ok(DType::C64),
        Ok(pb::DType::DtypeC128) => Ok(DType::C128),
        Ok(pb::DType::DtypeF8e4m3fn) => Ok(DType::F8E4M3FN),
        Ok(pb::DType::DtypeF8e5m2) => Ok(DType::F8E5M2),
        Err(_) => Err(loc.invalid(field, format!("unknown element type value {v}"))),
    }
}

pub(crate) fn slice_from(
    s: &Option<pb::Slice>,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Slice, ProtoError> {
    match s {
        Some(s) => Ok(Slice::new(s.allocation, s.offset, s.size)),
        None => Err(loc.invalid(field, "the slice is missing")),
    }
}

pub(crate) fn dim3_from(
    d: &Option<pb::Dim3>,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Dim3, ProtoError> {
    match d {
        Some(d) => Ok(Dim3::new(d.x, d.y, d.z)),
        None => Err(loc.invalid(field, "the launch dimension is missing")),
    }
}

pub(crate) fn scalar_from(
    s: &pb::Scalar,
    loc: &Loc<'_>,
    field: &str,
) -> Result<Scalar, ProtoError> {
    use pb::scalar::Value;
    let range = |name: &str, v: i64, lo: i64, hi: i64| {
        loc.invalid(
            format!("{field}.{name}"),
            format!("{v} is out of range ({lo}..={hi})"),
        )
    };
    Ok(match s.value {
        Some(Value::Pred(v)) => Scalar::Pred(v),
        Some(Value::I8(v)) => {
            Scalar::I8(i8::try_from(v).map_err(|_| range("i8", v.into(), -128, 127))?)
        }
        Some(Value::U8(v)) => {
            Scalar::U8(u8::try_from(v).map_err(|_| range("u8", v.into(), 0, 255))?)
        }
        Some(Value::I32(v)) => Scalar::I32(v),
        Some(Value::I64(v)) => Scalar::I64(v),
        Some(Value::F16(v)) => {
            Scalar::F16(u16::try_from(v).map_err(|_| range("f16", v.into(), 0, 0xFFFF))?)
        }
        Some(Value::Bf16(v)) => {
            Scalar::BF16(u16::try_from(v).map_err(|_| range("bf16", v.into(), 0, 0xFFFF))?)
        }
        Some(Value::F32(v)) => Scalar::F32(v),
        Some(Value::F64(v)) => Scalar::F64(v),
        Some(Value::F32Bits(bits)) => Scalar::F32(f32::from_bits(bits)),
        Some(Value::F64Bits(bits)) => Scalar::F64(f64::from_bits(bits)),
        Some(Value::I16(v)) => {
            Scalar::I16(i16::try_from(v).map_err(|_| range("i16", v.into(), -32768, 32767))?)
        }
        Some(Value::U16(v)) => {
            Scalar::U16(u16::try_from(v).map_err(|_| range("u16", v.into(), 0, 0xFFFF))?)
        }
        Some(Value::U32(v)) => Scalar::U32(v),
        Some(Value::U64(v)) => Scalar::U64(v),
        None => {
            return Err(loc.invalid(
                field,
                "no scalar value is set (expected pred, i8, u8, i16, u16, i32, u32, i64, u64, \
                 f16, bf16, f32, f64, f32_bits or f64_bits)",
            ));
        }
    })
}

pub(crate) fn dtype_to(d: DType) -> pb::DType {
    match d {
        DType::Pred => pb::DType::DtypePred,
        DType::I8 => pb::DType::DtypeI8,
        DType::U8 => pb::DType::DtypeU8,
        DType::I32 => pb::DType::DtypeI32,
        DType::I64 => pb::DType::DtypeI64,
        DType::F16 => pb::DType::DtypeF16,
        DType::BF16 => pb::DType::DtypeBf16,
        DType::F32 => pb::DType::DtypeF32,
        DType::F64 => pb::DType::DtypeF64,
        DType::I16 => pb::DType::DtypeI16,
        DType::U16 => pb::DType::DtypeU16,
        DType::U32 => pb::DType::DtypeU32,
        DType::U64 => pb::DType::DtypeU64,
        DType::C64 => pb::DType::DtypeC64,
        DType::C128 => pb::DType::DtypeC128,
        DType::F8E4M3FN => pb::DType::DtypeF8e4m3fn,
        DType::F8E5M2 => pb::DType::DtypeF8e5m2,
    }
}

pub(crate) fn slice_to(s: &Slice) -> Option<pb::Slice> {
    Some(pb::Slice {
        allocation: s.allocation,
        offset: s.offset,
        size: s.size,
    })
}

pub(crate) fn dim3_to(d: &Dim3) -> Option<pb::Dim3> {
    Some(pb::Dim3 {
        x: d.x,
        y: d.y,
        z: d.z,
    })
}

pub(crate) fn access_to(a: Access) -> pb::Access {
    match a {
        Access::Read => pb::Access::Read,
        Access::Write => pb::Access::Write,
        Access::ReadWrite => pb::Access::ReadWrite,
    }
}

pub(crate) fn scalar_to(s: &Scalar) -> pb::Scalar {
    use pb::scalar::Value;
    let value = match *s {
        Scalar::Pred(v) => Value::Pred(v),
        Scalar::I8(v) => Value::I8(i32::from(v)),
        Scalar::U8(v) => Value::U8(u32::from(v)),
        Scalar::I32(v) => Value::I32(v),
        Scalar::I64(v) => Value::I64(v),
        Scalar::F16(v) => Value::F16(u32::from(v)),
        Scalar::BF16(v) => Value::Bf16(u32::from(v)),
        Scalar::F32(v) if decimal_is_exact_f32(v) => Value::F32(v),
        Scalar::F32(v) => Value::F32Bits(v.to_bits()),
        Scalar::F64(v) if decimal_is_exact_f64(v) => Value::F64(v),
        Scalar::F64(v) => Value::F64Bits(v.to_bits()),
        Scalar::I16(v) => Value::I16(i32::from(v)),
        Scalar::U16(v) => Value::U16(u32::from(v)),
        Scalar::U32(v) => Value::U32(v),
        Scalar::U64(v) => Value::U64(v),
    };
    pb::Scalar { value: Some(value) }
}

/// True when the text format carries `v` exactly as a decimal: not a NaN (the text has one
/// `nan`, without sign or payload), and its decimal reads back as the same bits. The text
/// writer prints an f32 in its shortest form (or, when integral, exactly) and the reader
/// parses it as an f64 and rounds that to f32; for a few values the two roundings disagree
/// (0x15ae43fd prints as `0.00000000000000000000000007038531`, which reads back as
/// 0x15ae43fc), so those are written as bits too.
pub(crate) fn decimal_is_exact_f32(v: f32) -> bool {
    if v.is_nan() {
        return false;
    }
    if !v.is_finite() || v.fract() == 0.0 {
        // `inf`, `-inf`, and integral values printed in full (exact in an f64).
        return true;
    }
    // What the reader does: the decimal as an f64, then rounded to the nearest f32.
    v.to_string()
        .parse::<f64>()
        .is_ok_and(|d| (d as f32).to_bits() == v.to_bits())
}

/// True when the text format carries `v` exactly: every f64 but a NaN (the shortest decimal
/// of an f64 reads back as the same f64).
pub(crate) fn decimal_is_exact_f64(v: f64) -> bool {
    !v.is_nan()
}
