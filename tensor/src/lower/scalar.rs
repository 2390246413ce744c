//! C for one element: each element type's storage and compute types, loads, stores, literals,
//! and the expression of every elementwise op over compute-typed operands (helpers from
//! `prelude.rs`). f16 and bf16 compute in `float` holding values of the type, rounded after
//! every operation, so each op rounds once, as in the type itself.

use crate::graph::{BinaryOp, CompareDirection, CompareType, UnaryOp, is_float};
use xthunk_core::ir::DType;

/// The C type of a buffer's elements.
pub fn storage(d: DType) -> &'static str {
    match d {
        DType::Pred | DType::U8 => "unsigned char",
        DType::I8 => "signed char",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::F16 => "xt_f16",
        DType::BF16 => "xt_bf16",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I16 => "short",
        DType::U16 => "unsigned short",
        DType::U32 => "unsigned int",
        DType::U64 => "unsigned long long",
        DType::C64 => "xt_c64",
        DType::C128 => "xt_c128",
        DType::F8E4M3FN => "xt_f8e4m3fn",
        DType::F8E5M2 => "xt_f8e5m2",
    }
}

/// The C type values are computed in.
pub fn compute(d: DType) -> &'static str {
    match d {
        DType::Pred => "bool",
        DType::F16 | DType::BF16 | DType::F32 | DType::F8E4M3FN | DType::F8E5M2 => "float",
        _ => storage(d),
    }
}

/// A buffer element as a compute value.
pub fn load(d: DType, elem: &str) -> String {
    match d {
        DType::Pred => format!("({elem} != 0)"),
        DType::F16 | DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 => format!("(float){elem}"),
        _ => elem.to_string(),
    }
}

/// A compute value as a buffer element.
pub fn store(d: DType, v: &str) -> String {
    match d {
        DType::Pred => format!("(unsigned char)({v} ? 1 : 0)"),
        DType::F16 => format!("xt_f16({v})"),
        DType::BF16 => format!("xt_bf16({v})"),
        DType::F8E4M3FN => format!("xt_f8e4m3fn({v})"),
        DType::F8E5M2 => format!("xt_f8e5m2({v})"),
        _ => v.to_string(),
    }
}

/// Rounds a float expression to `d` (f16/bf16); others unchanged.
pub fn round(d: DType, e: String) -> String {
    match d {
        DType::F16 => format!("xh_r16({e})"),
        DType::BF16 => format!("xh_rb16({e})"),
        DType::F8E4M3FN => format!("xh_r8e4({e})"),
        DType::F8E5M2 => format!("xh_r8e5({e})"),
        _ => e,
    }
}

/// The literal of one element given by its little-endian bytes.
pub fn literal(d: DType, b: &[u8]) -> String {
    let mut le = [0u8; 8];
    let n = b.len().min(8);
    le[..n].copy_from_slice(&b[..n]);
    let u = u64::from_le_bytes(le);
    match d {
        DType::Pred => (if u != 0 { "true" } else { "false" }).into(),
        DType::I8 => format!("(signed char){}", u as u8 as i8),
        DType::U8 => format!("(unsigned char){u}"),
        DType::I32 => format!("(int)0x{:x}u", u as u32),
        DType::I64 => format!("(long long)0x{u:x}ull"),
        DType::F16 => format!("xt_f16_to_f32((unsigned short)0x{u:x})"),
        DType::BF16 => format!("xt_bf16_to_f32((unsigned short)0x{u:x})"),
        DType::F32 => format!("xt_bits_f32(0x{u:x}u)"),
        DType::F64 => format!("xt_bits_f64(0x{u:x}ull)"),
        DType::I16 => format!("(short){}", u as u16 as i16),
        DType::U16 => format!("(unsigned short){u}"),
        DType::U32 => format!("0x{:x}u", u as u32),
        DType::U64 => format!("0x{u:x}ull"),
        DType::F8E4M3FN => format!("xt_f8e4m3fn_to_f32((unsigned char)0x{u:x})"),
        DType::F8E5M2 => format!("xt_f8e5m2_to_f32((unsigned char)0x{u:x})"),
        DType::C64 | DType::C128 => {
            // Two parts, real first.
            let (part, half) = match d {
                DType::C64 => (DType::F32, 4),
                _ => (DType::F64, 8),
            };
            let (re, im) = b.split_at(half.min(b.len()));
            format!(
                "{}({}, {})",
                compute(d),
                literal(part, re),
                literal(part, im)
            )
        }
    }
}

fn f1(d: DType, f: &str, x: &str) -> String {
    // C math: the float form for f32/f16/bf16 (`expf`), the double form for f64.
    if d == DType::F64 {
        format!("{f}({x})")
    } else {
        round(d, format!("{f}f({x})"))
    }
}

/// A unary op of a value of type `d`.
pub fn unary(op: UnaryOp, d: DType, x: &str) -> String {
    use UnaryOp::*;
    let t = compute(d);
    if d.is_complex() {
        return complex_unary(op, x);
    }
    match op {
        Real => x.to_string(),
        Imag => format!("({t})0"),
        Abs if is_float(d) => f1(d, "fabs", x),
        Abs => format!("xh_iabs<{t}>({x})"),
        Cbrt => f1(d, "cbrt", x),
        Ceil => f1(d, "ceil", x),
        CountLeadingZeros => format!("({t})xh_clz({x})"),
        Cosine => f1(d, "cos", x),
        // The prelude's: on the CPU, forms that vectorize.
        Exponential if d != DType::F64 => round(d, format!("xh_expf({x})")),
        Exponential => f1(d, "exp", x),
        ExponentialMinusOne => f1(d, "expm1", x),
        Floor => f1(d, "floor", x),
        IsFinite => format!("(bool)isfinite({x})"),
        Log => f1(d, "log", x),
        LogPlusOne => f1(d, "log1p", x),
        Logistic => round(d, format!("xh_logistic({x})")),
        Negate if is_float(d) => format!("(-{x})"),
        Negate => format!("xh_neg<{t}>({x})"),
        Not if d == DType::Pred => format!("(!{x})"),
        Not => format!("({t})(~{x})"),
        Popcnt => format!("({t})xh_popc({x})"),
        RoundNearestAfz => f1(d, "round", x),
        RoundNearestEven => f1(d, "rint", x),
        Rsqrt if d == DType::F64 => format!("(1.0 / sqrt({x}))"),
        Rsqrt => round(d, format!("(1.0f / sqrtf({x}))")),
        Sign if is_float(d) => format!("xh_fsign({x})"),
        Sign => format!("xh_isign<{t}>({x})"),
        Sine => f1(d, "sin", x),
        Sqrt => f1(d, "sqrt", x),
        Tan => f1(d, "tan", x),
        Tanh if d != DType::F64 => round(d, format!("xh_tanhf({x})")),
        Tanh => f1(d, "tanh", x),
        Acos => f1(d, "acos", x),
        Acosh => f1(d, "acosh", x),
        Asin => f1(d, "asin", x),
        Asinh => f1(d, "asinh", x),
        Atan => f1(d, "atan", x),
        Atanh => f1(d, "atanh", x),
        Cosh => f1(d, "cosh", x),
        Sinh => f1(d, "sinh", x),
        Erf => f1(d, "erf", x),
        // glibc's float forms are off by up to 3 (erfcf) and 6 (lgammaf) ulp (2·10^6 draws
        // each, against the double form rounded), and CUDA documents its lgammaf at 6 ulp and
        // more: narrower floats take the double form (f32 rounded once; f16 and bf16 through
        // float), on GPUs too, where double math is slower (these two are rare in models).
        Erfc if d != DType::F64 => round(d, format!("(float)erfc((double)({x}))")),
        Erfc => f1(d, "erfc", x),
        Lgamma if d != DType::F64 => round(d, format!("(float)lgamma((double)({x}))")),
        Lgamma => f1(d, "lgamma", x),
        // The prelude's (no C library has them); floats are computed in double.
        ErfInv => round(d, format!("xh_erfinv({x})")),
        Digamma => round(d, format!("xh_digamma({x})")),
        BesselI1e => round(d, format!("xh_i1e({x})")),
        IsInf => format!("(bool)isinf({x})"),
        IsNegInf => format!("(bool)(isinf({x}) && signbit({x}))"),
        IsPosInf => format!("(bool)(isinf({x}) && !signbit({x}))"),
    }
}

/// A binary op of two values giving a value of type `d` (the operands' type but for
/// `complex`, whose operands are `d`'s parts).
pub fn binary(op: BinaryOp, d: DType, a: &str, b: &str) -> String {
    use BinaryOp::*;
    let t = compute(d);
    if op == Complex {
        return format!("{t}({a}, {b})");
    }
    if d.is_complex() {
        return match op {
            Add => format!("xh_cadd({a}, {b})"),
            Subtract => format!("xh_csub({a}, {b})"),
            Multiply => format!("xh_cmul({a}, {b})"),
            Divide => format!("xh_cdiv({a}, {b})"),
            Power => format!("xh_cpow({a}, {b})"),
            // Refused by `BinaryOp::accepts`.
            other => format!("xh_complex_{}({a}, {b})", other.name()),
        };
    }
    let pred = d == DType::Pred;
    let float = is_float(d);
    let f64 = d == DType::F64;
    match op {
        Add if pred => format!("({a} || {b})"),
        Multiply if pred => format!("({a} && {b})"),
        Maximum if pred => format!("({a} || {b})"),
        Minimum if pred => format!("({a} && {b})"),
        Add if float => round(d, format!("({a} + {b})")),
        Subtract if float => round(d, format!("({a} - {b})")),
        Multiply if float => round(d, format!("({a} * {b})")),
        Divide if float => round(d, format!("({a} / {b})")),
        Remainder if float => f1b(d, "fmod", a, b, f64),
        Power if float => f1b(d, "pow", a, b, f64),
        Atan2 => f1b(d, "atan2", a, b, f64),
        // Steps in the type itself: f16 and bf16 by their bits.
        NextAfter if d == DType::F16 => format!("xh_next_h({a}, {b})"),
        NextAfter if d == DType::BF16 => format!("xh_next_b({a}, {b})"),
        NextAfter => f1b(d, "nextafter", a, b, f64),
        Polygamma => round(d, format!("xh_polygamma({a}, {b})")),
        Zeta => round(d, format!("xh_zeta({a}, {b})")),
        Maximum if float => format!("xh_fmax({a}, {b})"),
        Minimum if float => format!("xh_fmin({a}, {b})"),
        Add => format!("xh_add<{t}>({a}, {b})"),
        Subtract => format!("xh_sub<{t}>({a}, {b})"),
        Multiply => format!("xh_mul<{t}>({a}, {b})"),
        Divide => format!("xh_div<{t}>({a}, {b})"),
        Remainder => format!("xh_rem<{t}>({a}, {b})"),
        Power => format!("xh_ipow<{t}>({a}, {b})"),
        Maximum => format!("xh_imax<{t}>({a}, {b})"),
        Minimum => format!("xh_imin<{t}>({a}, {b})"),
        And if pred => format!("({a} && {b})"),
        Or if pred => format!("({a} || {b})"),
        Xor if pred => format!("({a} != {b})"),
        And => format!("({t})({a} & {b})"),
        Or => format!("({t})({a} | {b})"),
        Xor => format!("({t})({a} ^ {b})"),
        ShiftLeft => format!("xh_shl<{t}>({a}, {b})"),
        ShiftRightArithmetic => format!("xh_shra<{t}>({a}, {b})"),
        ShiftRightLogical => format!("xh_shrl<{t}>({a}, {b})"),
        // Handled above.
        Complex => format!("{t}({a}, {b})"),
    }
}

/// A unary op of a complex value (the ops `UnaryOp::accepts` lets through; the others
/// cannot reach here).
fn complex_unary(op: UnaryOp, x: &str) -> String {
    use UnaryOp::*;
    match op {
        Abs => format!("xh_cabs({x})"),
        Real => format!("({x}).re"),
        Imag => format!("({x}).im"),
        Negate => format!("xh_cneg({x})"),
        Sign => format!("xh_csign({x})"),
        Exponential => format!("xh_cexp({x})"),
        Log => format!("xh_clog({x})"),
        Sqrt => format!("xh_csqrt({x})"),
        Rsqrt => format!("xh_crsqrt({x})"),
        Cosine => format!("xh_ccos({x})"),
        Sine => format!("xh_csin({x})"),
        Tan => format!("xh_ctan({x})"),
        Tanh => format!("xh_ctanh({x})"),
        ExponentialMinusOne => format!("xh_cexpm1({x})"),
        LogPlusOne => format!("xh_clog1p({x})"),
        Logistic => format!("xh_clogistic({x})"),
        // Refused by `UnaryOp::accepts`; a call that compiles to an error names it.
        other => format!("xh_complex_{}({x})", other.name()),
    }
}

fn f1b(d: DType, f: &str, a: &str, b: &str, f64: bool) -> String {
    if f64 {
        format!("{f}({a}, {b})")
    } else {
        round(d, format!("{f}f({a}, {b})"))
    }
}

/// `compare` of two values of type `d` (complex: EQ and NE, both parts).
pub fn compare_typed(
    dir: CompareDirection,
    kind: CompareType,
    d: DType,
    a: &str,
    b: &str,
) -> String {
    if d.is_complex() {
        let not = if dir == CompareDirection::Ne { "!" } else { "" };
        return format!("({not}xh_ceq({a}, {b}))");
    }
    compare(dir, kind, a, b)
}

/// `compare` of two real values.
pub fn compare(dir: CompareDirection, kind: CompareType, a: &str, b: &str) -> String {
    let op = match dir {
        CompareDirection::Eq => "==",
        CompareDirection::Ne => "!=",
        CompareDirection::Ge => ">=",
        CompareDirection::Gt => ">",
        CompareDirection::Le => "<=",
        CompareDirection::Lt => "<",
    };
    if kind == CompareType::TotalOrder {
        format!("(xh_tkey({a}) {op} xh_tkey({b}))")
    } else {
        format!("({a} {op} {b})")
    }
}

/// Bounds of a float → integer conversion, as doubles: (the minimum, one past the maximum).
fn int_bounds(d: DType) -> (&'static str, &'static str) {
    match d {
        DType::I8 => ("-128.0", "128.0"),
        DType::U8 => ("0.0", "256.0"),
        DType::I16 => ("-32768.0", "32768.0"),
        DType::U16 => ("0.0", "65536.0"),
        DType::I32 => ("-2147483648.0", "2147483648.0"),
        DType::U32 => ("0.0", "4294967296.0"),
        DType::U64 => ("0.0", "18446744073709551616.0"),
        _ => ("-9223372036854775808.0", "9223372036854775808.0"),
    }
}

/// `convert` of a value from `from` to `to`.
pub fn convert(from: DType, to: DType, x: &str) -> String {
    if from == to {
        return x.to_string();
    }
    let t = compute(to);
    match (from.complex_part(), to.complex_part()) {
        (Some(fp), Some(tp)) => {
            return format!(
                "{t}({}, {})",
                convert(fp, tp, &format!("({x}).re")),
                convert(fp, tp, &format!("({x}).im"))
            );
        }
        // Complex to real: the real part (the imaginary one is dropped, as XLA does).
        (Some(fp), None) => return convert(fp, to, &format!("({x}).re")),
        (None, Some(tp)) => return format!("{t}({}, {}(0))", convert(from, tp, x), compute(tp)),
        (None, None) => {}
    }
    if to == DType::Pred {
        return format!("({x} != 0)");
    }
    if from == DType::Pred {
        return if is_float(to) {
            format!("({x} ? 1.0f : 0.0f)")
        } else {
            format!("({t})({x} ? 1 : 0)")
        };
    }
    match (is_float(from), is_float(to)) {
        (false, false) => format!("({t}){x}"),
        (true, false) => {
            let (lo, hi) = int_bounds(to);
            format!("xh_f2i<{t}>((double){x}, {lo}, {hi})")
        }
        (_, true) => match to {
            DType::F64 => format!("(double){x}"),
            // Every type reaches f16/bf16 through f32, as XLA converts (an f64 or a wide
            // integer is rounded twice; the spec leaves inexact conversions open).
            DType::F16 => format!("xh_r16((float){x})"),
            DType::BF16 => format!("xh_rb16((float){x})"),
            // Once, from the value as a double (exact for every source type but u64/i64,
            // whose conversion to double rounds first).
            DType::F8E4M3FN => format!("xh_r8e4((double){x})"),
            DType::F8E5M2 => format!("xh_r8e5((double){x})"),
            _ => format!("(float){x}"),
        },
    }
}

/// `bitcast_convert` between two element types of one width.
/// `reduce_precision` of `x` (a value of float type `d`, held in its compute type). Widths
/// above 64 bits mean "no reduction" and are written as 64 (every source has fewer).
pub fn reduce_precision(
    d: DType,
    x: &str,
    exponent_bits: u32,
    mantissa_bits: u32,
) -> Option<String> {
    let (e, m) = (exponent_bits.min(64), mantissa_bits.min(64));
    let f = match d {
        DType::F16 => "xh_rp_h",
        DType::BF16 => "xh_rp_b",
        DType::F32 => "xh_rp_f",
        DType::F64 => "xh_rp_d",
        _ => return None,
    };
    Some(format!("{f}({x}, {e}, {m})"))
}

pub fn bitcast(from: DType, to: DType, x: &str) -> Option<String> {
    let s = match (from, to) {
        _ if from == to => x.to_string(),
        (DType::F32, DType::I32) => format!("(int)xt_f32_bits({x})"),
        (DType::I32, DType::F32) => format!("xt_bits_f32((unsigned int){x})"),
        (DType::F64, DType::I64) => format!("(long long)xt_f64_bits({x})"),
        (DType::I64, DType::F64) => format!("xt_bits_f64((unsigned long long){x})"),
        (DType::F16, DType::BF16) => format!("xt_bf16_to_f32(xh_h_bits({x}))"),
        (DType::BF16, DType::F16) => format!("xt_f16_to_f32(xh_b_bits({x}))"),
        (DType::I8, DType::U8) => format!("(unsigned char){x}"),
        (DType::U8, DType::I8) => format!("(signed char){x}"),
        (DType::I16, DType::U16) => format!("(unsigned short){x}"),
        (DType::U16, DType::I16) => format!("(short){x}"),
        (DType::I32, DType::U32) => format!("(unsigned int){x}"),
        (DType::U32, DType::I32) => format!("(int){x}"),
        (DType::I64, DType::U64) => format!("(unsigned long long){x}"),
        (DType::U64, DType::I64) => format!("(long long){x}"),
        (DType::F32, DType::U32) => format!("xt_f32_bits({x})"),
        (DType::U32, DType::F32) => format!("xt_bits_f32({x})"),
        (DType::F64, DType::U64) => format!("(unsigned long long)xt_f64_bits({x})"),
        (DType::U64, DType::F64) => format!("xt_bits_f64({x})"),
        (DType::F16, DType::U16) => format!("xh_h_bits({x})"),
        (DType::U16, DType::F16) => format!("xt_f16_to_f32({x})"),
        (DType::BF16, DType::U16) => format!("xh_b_bits({x})"),
        (DType::U16, DType::BF16) => format!("xt_bf16_to_f32({x})"),
        (DType::F16, DType::I16) => format!("(short)xh_h_bits({x})"),
        (DType::I16, DType::F16) => format!("xt_f16_to_f32((unsigned short){x})"),
        (DType::BF16, DType::I16) => format!("(short)xh_b_bits({x})"),
        (DType::I16, DType::BF16) => format!("xt_bf16_to_f32((unsigned short){x})"),
        _ => return None,
    };
    Some(s)
}
