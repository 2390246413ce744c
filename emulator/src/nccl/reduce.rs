//! Element types (`ncclDataType_t`), reduction operators (`ncclRedOp_t`) and the element-wise
//! reduction of the ranks' inputs.

use half::{bf16, f16};
use std::ffi::c_int;

/// Element types (`ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dt {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    BF16,
}

impl Dt {
    pub(super) fn from(v: c_int) -> Option<Dt> {
        Some(match v {
            0 => Dt::I8,
            1 => Dt::U8,
            2 => Dt::I32,
            3 => Dt::U32,
            4 => Dt::I64,
            5 => Dt::U64,
            6 => Dt::F16,
            7 => Dt::F32,
            8 => Dt::F64,
            9 => Dt::BF16,
            _ => return None,
        })
    }

    /// The `ncclDataType_t` value.
    pub(super) fn code(self) -> u8 {
        match self {
            Dt::I8 => 0,
            Dt::U8 => 1,
            Dt::I32 => 2,
            Dt::U32 => 3,
            Dt::I64 => 4,
            Dt::U64 => 5,
            Dt::F16 => 6,
            Dt::F32 => 7,
            Dt::F64 => 8,
            Dt::BF16 => 9,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Dt::I8 => "int8",
            Dt::U8 => "uint8",
            Dt::I32 => "int32",
            Dt::U32 => "uint32",
            Dt::I64 => "int64",
            Dt::U64 => "uint64",
            Dt::F16 => "float16",
            Dt::F32 => "float32",
            Dt::F64 => "float64",
            Dt::BF16 => "bfloat16",
        }
    }

    pub(super) fn size(self) -> usize {
        match self {
            Dt::I8 | Dt::U8 => 1,
            Dt::F16 | Dt::BF16 => 2,
            Dt::I32 | Dt::U32 | Dt::F32 => 4,
            Dt::I64 | Dt::U64 | Dt::F64 => 8,
        }
    }
}

/// Reduction operators (`ncclRedOp_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Red {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl Red {
    /// From an `ncclRedOp_t` value.
    pub(super) fn from(v: c_int) -> Option<Red> {
        Some(match v {
            0 => Red::Sum,
            1 => Red::Prod,
            2 => Red::Max,
            3 => Red::Min,
            4 => Red::Avg,
            _ => return None,
        })
    }

    /// The `ncclRedOp_t` value.
    pub(super) fn code(self) -> u8 {
        match self {
            Red::Sum => 0,
            Red::Prod => 1,
            Red::Max => 2,
            Red::Min => 3,
            Red::Avg => 4,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Red::Sum => "sum",
            Red::Prod => "prod",
            Red::Max => "max",
            Red::Min => "min",
            Red::Avg => "avg",
        }
    }
}

/// A value while reducing: integers exactly (wrapping at the type's width when stored),
/// floats in f64 (f16/bf16/f32 rounded once when stored).
#[derive(Clone, Copy)]
pub(super) enum Val {
    I(i128),
    F(f64),
}

pub(super) fn load(dt: Dt, b: &[u8]) -> Val {
    let a2 = |b: &[u8]| [b[0], b[1]];
    let a4 = |b: &[u8]| [b[0], b[1], b[2], b[3]];
    let a8 = |b: &[u8]| [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
    match dt {
        Dt::I8 => Val::I(b[0] as i8 as i128),
        Dt::U8 => Val::I(b[0] as i128),
        Dt::I32 => Val::I(i32::from_le_bytes(a4(b)) as i128),
        Dt::U32 => Val::I(u32::from_le_bytes(a4(b)) as i128),
        Dt::I64 => Val::I(i64::from_le_bytes(a8(b)) as i128),
        Dt::U64 => Val::I(u64::from_le_bytes(a8(b)) as i128),
        Dt::F16 => Val::F(f16::from_bits(u16::from_le_bytes(a2(b))).to_f64()),
        Dt::BF16 => Val::F(bf16::from_bits(u16::from_le_bytes(a2(b))).to_f64()),
        Dt::F32 => Val::F(f32::from_le_bytes(a4(b)) as f64),
        Dt::F64 => Val::F(f64::from_le_bytes(a8(b))),
    }
}

pub(super) fn store(dt: Dt, v: Val, out: &mut [u8]) {
    let (i, f) = match v {
        Val::I(i) => (i, i as f64),
        Val::F(f) => (f as i128, f),
    };
    match dt {
        Dt::I8 | Dt::U8 => out[0] = i as u8,
        Dt::I32 | Dt::U32 => out.copy_from_slice(&(i as u32).to_le_bytes()),
        Dt::I64 | Dt::U64 => out.copy_from_slice(&(i as u64).to_le_bytes()),
        Dt::F16 => out.copy_from_slice(&f16::from_f64(f).to_bits().to_le_bytes()),
        Dt::BF16 => out.copy_from_slice(&bf16::from_f64(f).to_bits().to_le_bytes()),
        Dt::F32 => out.copy_from_slice(&(f as f32).to_le_bytes()),
        Dt::F64 => out.copy_from_slice(&f.to_le_bytes()),
    }
}

pub(super) fn combine(op: Red, a: Val, b: Val) -> Val {
    match (a, b) {
        (Val::I(x), Val::I(y)) => Val::I(match op {
            Red::Sum | Red::Avg => x.wrapping_add(y),
            Red::Prod => x.wrapping_mul(y),
            Red::Max => x.max(y),
            Red::Min => x.min(y),
        }),
        (Val::F(x), Val::F(y)) => Val::F(match op {
            Red::Sum | Red::Avg => x + y,
            Red::Prod => x * y,
            Red::Max => x.max(y),
            Red::Min => x.min(y),
        }),
        _ => a,
    }
}

/// Reduces `inputs` (one byte slice per rank, same length) element by element.
pub(super) fn reduce(dt: Dt, op: Red, inputs: &[&[u8]]) -> Vec<u8> {
    let es = dt.size();
    let n = inputs.first().map(|b| b.len() / es).unwrap_or(0);
    let mut out = vec![0u8; n * es];
    for i in 0..n {
        let mut acc = load(dt, &inputs[0][i * es..]);
        for inp in &inputs[1..] {
            acc = combine(op, acc, load(dt, &inp[i * es..]));
        }
        if op == Red::Avg {
            acc = match acc {
                Val::I(x) => Val::I(x / inputs.len() as i128),
                Val::F(x) => Val::F(x / inputs.len() as f64),
            };
        }
        store(dt, acc, &mut out[i * es..(i + 1) * es]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions() {
        let a = 1.5f32.to_le_bytes();
        let b = 2.25f32.to_le_bytes();
        let r = reduce(Dt::F32, Red::Sum, &[&a, &b]);
        assert_eq!(r, 3.75f32.to_le_bytes());
        let r = reduce(Dt::F32, Red::Avg, &[&a, &b]);
        assert_eq!(r, 1.875f32.to_le_bytes());
        let x = i32::MAX.to_le_bytes();
        let y = 1i32.to_le_bytes();
        assert_eq!(reduce(Dt::I32, Red::Sum, &[&x, &y]), i32::MIN.to_le_bytes());
        assert_eq!(reduce(Dt::I32, Red::Max, &[&x, &y]), i32::MAX.to_le_bytes());
        let h = f16::from_f32(1.0).to_bits().to_le_bytes();
        assert_eq!(
            reduce(Dt::F16, Red::Prod, &[&h, &h]),
            f16::from_f32(1.0).to_bits().to_le_bytes()
        );
    }
}
