//! C-emission helpers shared by the portable kernel templates (`mod.rs`'s families and
//! `training.rs`): the C spellings of element types, conversions between stored and compute
//! types, literals, math-function names, kernel declarations from signatures, and the row loop.

use crate::ir::{Access, DType};
use crate::kernels::{KernelSignature, ParamKind};

/// The C type of a buffer element or immediate.
pub(super) fn ctype(t: DType) -> &'static str {
    match t {
        DType::F16 | DType::BF16 => "unsigned short",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::U8 | DType::Pred => "unsigned char",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::I16 => "short",
        DType::U16 => "unsigned short",
        DType::U32 => "unsigned int",
        DType::U64 => "unsigned long long",
        // Storage only: the standard library registers no kernel of these types (its families
        // are instantiated from `Elem` types, which they are not), so no template computes in
        // them; the names keep the mapping total.
        DType::F8E4M3FN | DType::F8E5M2 => "unsigned char",
        DType::C64 => "xt_c64",
        DType::C128 => "xt_c128",
    }
}

/// The C type arithmetic is done in.
pub(super) fn compute(t: DType) -> &'static str {
    match t {
        DType::F16 | DType::BF16 | DType::F32 => "float",
        other => ctype(other),
    }
}

/// The unsigned type integer arithmetic wraps in.
pub(super) fn wrap(t: DType) -> &'static str {
    match t {
        DType::I64 | DType::U64 => "unsigned long long",
        _ => "unsigned int",
    }
}

/// `e` (a stored element) converted to the compute type.
pub(super) fn load(t: DType, e: &str) -> String {
    match t {
        DType::F16 => format!("xt_f16_to_f32({e})"),
        DType::BF16 => format!("xt_bf16_to_f32({e})"),
        _ => e.to_string(),
    }
}

/// `v` (of the compute type) rounded to the element type.
pub(super) fn store(t: DType, v: &str) -> String {
    match t {
        DType::F16 => format!("xt_f32_to_f16({v})"),
        DType::BF16 => format!("xt_f32_to_bf16({v})"),
        _ => v.to_string(),
    }
}

/// A float constant in compute type `c` (`float` or `double`), written with the shortest
/// decimal that reads back as exactly the value Rust's `as` conversion gives (as the host
/// implementations round their constants).
pub(super) fn lit(c: &str, v: f64) -> String {
    if c == "float" {
        format!("{:?}f", v as f32)
    } else {
        format!("{v:?}")
    }
}

/// Math function of compute type `c`: `expf` or `exp`.
pub(super) fn math(c: &str, f: &str) -> String {
    if c == "float" {
        format!("{f}f")
    } else {
        f.to_string()
    }
}

/// The lowest value of an integer type (the identity of `max`).
pub(super) fn int_min(t: DType) -> &'static str {
    match t {
        DType::I8 => "((signed char)-128)",
        DType::U8 | DType::Pred => "((unsigned char)0)",
        DType::I16 => "((short)-32768)",
        DType::U16 => "((unsigned short)0)",
        DType::I32 => "(-2147483647 - 1)",
        DType::U32 => "0u",
        DType::U64 => "0ull",
        _ => "(-9223372036854775807LL - 1LL)",
    }
}

pub(super) fn is_signed_int(t: DType) -> bool {
    t.is_signed_int()
}

/// `(T)((W)0 - (W)x)`: wrapping negation of an integer.
pub(super) fn int_neg(t: DType, x: &str) -> String {
    format!("({}) (({w})0 - ({w}){x})", ctype(t), w = wrap(t))
}

/// `x` (a stored element of `t`) exactly as a double.
pub(super) fn to_f64(t: DType, x: &str) -> String {
    match t {
        DType::F64 => x.to_string(),
        DType::F16 | DType::BF16 => format!("(double){}", load(t, x)),
        _ => format!("(double){x}"),
    }
}

/// `v` (a double) converted to `t` with one rounding (floats: nearest even; i32: toward
/// zero, saturating, NaN -> 0).
pub(super) fn from_f64(t: DType, v: &str) -> String {
    match t {
        DType::F64 => v.to_string(),
        DType::F32 => format!("(float){v}"),
        DType::F16 => format!("xt_f64_to_f16({v})"),
        DType::BF16 => format!("xt_f64_to_bf16({v})"),
        DType::I32 => format!("xt_f64_to_i32({v})"),
        other => format!("({}){v}", ctype(other)),
    }
}

/// The kernel's declaration, from its signature: buffers as (const) pointers, immediates by
/// value.
pub(super) fn declaration(sig: &KernelSignature) -> String {
    let params: Vec<String> = sig
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Buffer { dtype, access, .. } => {
                let c = if *access == Access::Read {
                    "const "
                } else {
                    ""
                };
                format!("{c}{}* {}", ctype(*dtype), p.name)
            }
            ParamKind::Scalar(dt) => format!("{} {}", ctype(*dt), p.name),
        })
        .collect();
    format!(
        "extern \"C\" __global__ void {}({})",
        sig.name,
        params.join(", ")
    )
}

/// Row loop of the row kernels: each block takes whole rows (block-stride over rows), its
/// threads stride over the columns.
pub(super) const ROWS: &str = "  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();\n  for (long long r = xt_block_id(); r < rows; r += xt_num_blocks()) {\n";
