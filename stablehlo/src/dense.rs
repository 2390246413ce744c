//! Decoding `dense<...>` and `dense_resource<...>` values into little-endian element bytes for
//! their tensor type, checked: the count matches the shape (or the value is a splat), each
//! value fits its type (integer ranges, float formats with round-to-nearest-even for `f16`,
//! `bf16` and the f8 family, hex bit patterns of the type's width).

use crate::ast::{
    Attr, ComplexOf, DenseData, Dim, ElementType, Literal, NarrowFloat, Pos, Resource, Type,
};
use crate::error::{ParseError, one_line};

/// The default cap on decoded bytes.
pub const MAX_BYTES: u64 = 1 << 30;

/// The little-endian i64 elements of decoded `i64` (or `index`) bytes.
pub fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            i64::from_le_bytes(b)
        })
        .collect()
}

/// Bytes per element of `e` (integers round up to whole bytes; `i1` is one byte).
pub fn element_size(e: ElementType) -> usize {
    match e {
        ElementType::Int { width, .. } => usize::from(width).div_ceil(8),
        ElementType::F16 | ElementType::BF16 => 2,
        ElementType::F32 => 4,
        ElementType::F64 | ElementType::Index => 8,
        ElementType::Narrow(_) => 1,
        ElementType::Complex(ComplexOf::F32) => 8,
        ElementType::Complex(ComplexOf::F64) => 16,
    }
}

/// A float format: exponent and mantissa bits, bias, and how it spells NaN and infinity.
#[derive(Clone, Copy)]
struct Format {
    exp: u32,
    man: u32,
    bias: i32,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// IEEE: infinity, NaN with the exponent all ones.
    Ieee,
    /// No infinity; NaN is every exponent and mantissa bit set (`f8E4M3FN`).
    Fn,
    /// No infinity, no negative zero; NaN is the sign bit alone (`...FNUZ`).
    Fnuz,
    /// No infinity, no NaN (`f6E2M3FN`, `f6E3M2FN`, `f4E2M1FN`).
    Finite,
    /// `f8E8M0FNU`: no sign, no mantissa, no zero; NaN is every bit set.
    ExponentOnly,
}

fn format_of(e: ElementType) -> Option<Format> {
    let f = |exp, man, bias, kind| {
        Some(Format {
            exp,
            man,
            bias,
            kind,
        })
    };
    match e {
        ElementType::F16 => f(5, 10, 15, Kind::Ieee),
        ElementType::BF16 => f(8, 7, 127, Kind::Ieee),
        ElementType::F32 => f(8, 23, 127, Kind::Ieee),
        ElementType::Narrow(k) => match k {
            NarrowFloat::F8E4M3FN => f(4, 3, 7, Kind::Fn),
            NarrowFloat::F8E5M2 => f(5, 2, 15, Kind::Ieee),
            NarrowFloat::F8E4M3FNUZ => f(4, 3, 8, Kind::Fnuz),
            NarrowFloat::F8E5M2FNUZ => f(5, 2, 16, Kind::Fnuz),
            NarrowFloat::F8E4M3B11FNUZ => f(4, 3, 11, Kind::Fnuz),
            NarrowFloat::F8E4M3 => f(4, 3, 7, Kind::Ieee),
            NarrowFloat::F8E3M4 => f(3, 4, 3, Kind::Ieee),
            NarrowFloat::F8E8M0FNU => f(8, 0, 127, Kind::ExponentOnly),
            NarrowFloat::F6E2M3FN => f(2, 3, 1, Kind::Finite),
            NarrowFloat::F6E3M2FN => f(3, 2, 3, Kind::Finite),
            NarrowFloat::F4E2M1FN => f(2, 1, 1, Kind::Finite),
        },
        _ => None,
    }
}

/// `v` rounded to nearest-even in `fmt`, as its bits; `Err` if it is out of range.
fn encode_float(v: f64, fmt: Format) -> Result<u64, String> {
    if fmt.kind == Kind::ExponentOnly {
        return encode_exponent_only(v);
    }
    let (e, m) = (fmt.exp, fmt.man);
    let sign = u64::from(v.is_sign_negative()) << (e + m);
    let exp_ones = (1u64 << e) - 1;
    if v.is_nan() {
        return match fmt.kind {
            Kind::Ieee => Ok(sign | exp_ones << m | 1 << (m - 1)),
            Kind::Fn => Ok(sign | exp_ones << m | ((1 << m) - 1)),
            Kind::Fnuz => Ok(1 << (e + m)),
            _ => Err("NaN has no encoding in this type".into()),
        };
    }
    if v.is_infinite() {
        return match fmt.kind {
            Kind::Ieee => Ok(sign | exp_ones << m),
            _ => Err("infinity has no encoding in this type".into()),
        };
    }
    if v == 0.0 {
        return Ok(if fmt.kind == Kind::Fnuz { 0 } else { sign });
    }
    let bits = v.abs().to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mant, e2) = if raw_exp == 0 {
        (frac, -1074i64)
    } else {
        (frac | 1 << 52, raw_exp - 1075)
    };
    let lg = e2 + i64::from(63 - mant.leading_zeros());
    let emin = 1 - i64::from(fmt.bias);
    let mut big_e = lg.max(emin);
    let shift = big_e - i64::from(m) - e2;
    let mut q = if shift <= 0 {
        mant << (-shift) as u32
    } else if shift >= 64 {
        0
    } else {
        let s = shift as u32;
        let q = mant >> s;
        let rem = mant & ((1u64 << s) - 1);
        let half = 1u64 << (s - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    if q >= 1u64 << (m + 1) {
        q >>= 1;
        big_e += 1;
    }
    let (biased, field) = if q < 1u64 << m {
        (0u64, q)
    } else {
        ((big_e + i64::from(fmt.bias)) as u64, q - (1u64 << m))
    };
    let max_biased = match fmt.kind {
        Kind::Ieee => exp_ones - 1,
        _ => exp_ones,
    };
    // `Finite` uses every exponent and mantissa for numbers; `Fn` keeps the all-ones pattern.
    if biased > max_biased || (fmt.kind == Kind::Fn && biased == exp_ones && field == (1 << m) - 1)
    {
        return Err(format!("{v} is out of range"));
    }
    if fmt.kind == Kind::Fnuz && biased == 0 && field == 0 {
        return Ok(0);
    }
    Ok(sign | biased << m | field)
}

/// `f8E8M0FNU`: `2^(bits - 127)`; a positive value rounds to the nearest power of two (a tie
/// to the even exponent field), NaN is 0xFF.
fn encode_exponent_only(v: f64) -> Result<u64, String> {
    if v.is_nan() {
        return Ok(0xFF);
    }
    if v <= 0.0 || v.is_infinite() {
        return Err(format!(
            "{v} has no encoding in f8E8M0FNU (positive and finite only)"
        ));
    }
    let bits = v.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    // v = 1.frac * 2^e2 (normal f64) or frac * 2^-1074 (subnormal, far below the range).
    if raw_exp == 0 {
        return Err(format!("{v} is out of range"));
    }
    let e2 = raw_exp - 1023;
    // The nearest power of two: 2^e2 or 2^(e2+1), split at 1.5 * 2^e2.
    let half = 1u64 << 51;
    let up = frac > half || (frac == half && (e2 + 127) & 1 == 1);
    let biased = e2 + 127 + i64::from(up);
    if !(0..=254).contains(&biased) {
        return Err(format!("{v} is out of range"));
    }
    Ok(biased as u64)
}

fn float_value(l: &Literal) -> Option<f64> {
    match l {
        Literal::Float(f) => Some(f.0),
        Literal::Int {
            negative,
            magnitude,
            hex: false,
        } => {
            let v = *magnitude as f64;
            Some(if *negative { -v } else { v })
        }
        _ => None,
    }
}

/// One float element: a value, or (hex) a bit pattern of the type's width.
fn encode_float_elem(l: &Literal, e: ElementType, out: &mut Vec<u8>) -> Result<(), String> {
    let size = element_size(e);
    if let Literal::Int {
        negative: false,
        magnitude,
        hex: true,
    } = l
    {
        let bits = match format_of(e) {
            Some(f) if f.kind == Kind::ExponentOnly => 8,
            Some(f) => 1 + f.exp + f.man,
            None => 8 * size as u32,
        };
        if *magnitude >> bits != 0 {
            return Err(format!("bit pattern {magnitude:#x} is wider than the type"));
        }
        out.extend_from_slice(&magnitude.to_le_bytes()[..size]);
        return Ok(());
    }
    let v = float_value(l).ok_or("expected a float")?;
    let bits = match format_of(e) {
        Some(fmt) => encode_float(v, fmt)?,
        None => v.to_bits(),
    };
    out.extend_from_slice(&bits.to_le_bytes()[..size]);
    Ok(())
}

fn encode_int(
    l: &Literal,
    width: u16,
    signed: Option<bool>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let (negative, magnitude) = match l {
        Literal::Int {
            negative,
            magnitude,
            ..
        } => (*negative, *magnitude),
        Literal::Bool(b) if width == 1 => (false, u128::from(*b)),
        _ => return Err("expected an integer".into()),
    };
    let w = u32::from(width);
    let unsigned_max = if w == 128 {
        u128::MAX
    } else {
        (1u128 << w) - 1
    };
    let neg_max = 1u128 << (w - 1);
    let fits = match (signed, negative) {
        (Some(false), true) => magnitude == 0,
        (Some(false), false) | (None, false) => magnitude <= unsigned_max,
        (Some(true), false) => magnitude < neg_max,
        (_, true) => magnitude <= neg_max,
    };
    if !fits {
        let sign = if negative { "-" } else { "" };
        return Err(format!("{sign}{magnitude} does not fit i{width}"));
    }
    let v = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    out.extend_from_slice(&v.to_le_bytes()[..usize::from(width).div_ceil(8)]);
    Ok(())
}

fn encode(l: &Literal, e: ElementType, out: &mut Vec<u8>) -> Result<(), String> {
    match e {
        ElementType::Int { width, signed } => encode_int(l, width, signed, out),
        ElementType::Index => encode_int(l, 64, None, out),
        ElementType::Complex(part) => {
            let pe = match part {
                ComplexOf::F32 => ElementType::F32,
                ComplexOf::F64 => ElementType::F64,
            };
            match l {
                Literal::Complex(re, im) => {
                    encode_float_elem(re, pe, out)?;
                    encode_float_elem(im, pe, out)
                }
                _ => Err("expected a complex `(re, im)`".into()),
            }
        }
        _ => encode_float_elem(l, e, out),
    }
}

/// Checks a nested list against the shape and pushes its leaves in order.
fn flatten<'l>(l: &'l Literal, dims: &[u64], out: &mut Vec<&'l Literal>) -> Result<(), String> {
    match (l, dims.split_first()) {
        (Literal::List(items), Some((d, rest))) => {
            if items.len() as u64 != *d {
                return Err(format!("{} elements where the shape has {d}", items.len()));
            }
            items.iter().try_for_each(|i| flatten(i, rest, out))
        }
        (Literal::List(_), None) => Err("more list nesting than the shape has dimensions".into()),
        (_, Some(_)) => Err("less list nesting than the shape has dimensions".into()),
        (leaf, None) => {
            out.push(leaf);
            Ok(())
        }
    }
}

/// The little-endian element bytes of a `dense` or `dense_resource` attribute (resources from
/// the module's trailer), at most `max_bytes` of them. `op` names the operation for errors.
pub fn decode(
    attr: &Attr,
    resources: &[Resource],
    max_bytes: u64,
    op: &str,
) -> Result<Vec<u8>, ParseError> {
    let (ty, pos) = match attr {
        Attr::Dense { ty, pos, .. } | Attr::DenseResource { ty, pos, .. } => (ty, *pos),
        _ => {
            return Err(dense_err(
                Pos::default(),
                op,
                "not a `dense` or `dense_resource` value".into(),
            ));
        }
    };
    let fail = |m: String| dense_err(pos, op, m);
    let Type::Tensor {
        dims: Some(dims),
        elem,
        ..
    } = ty
    else {
        return Err(fail("a dense value needs a ranked tensor type".into()));
    };
    let mut shape = Vec::with_capacity(dims.len());
    for d in dims {
        match d {
            Dim::Static(n) => shape.push(*n),
            Dim::Dynamic => return Err(fail("a dense value needs a static shape".into())),
        }
    }
    let size = element_size(*elem) as u64;
    let count = shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d));
    let total = count.and_then(|c| c.checked_mul(size));
    let (Some(count), Some(total)) = (count, total) else {
        return Err(fail("the element count overflows".into()));
    };
    if total > max_bytes {
        return Err(ParseError::TooLarge {
            pos,
            op: one_line(op),
            what: format!("{total} bytes of a dense value"),
            limit: max_bytes,
        });
    }
    let (count, total) = (count as usize, total as usize);
    let raw = |bytes: &[u8], what: &str| -> Result<Vec<u8>, ParseError> {
        if bytes.len() == total {
            Ok(bytes.to_vec())
        } else if bytes.len() as u64 == size && count > 0 {
            Ok(bytes.repeat(count))
        } else {
            Err(fail(format!(
                "{what} holds {} bytes; the type needs {total} ({count} elements of {size})",
                bytes.len()
            )))
        }
    };
    let mut out = match attr {
        Attr::DenseResource { name, .. } => {
            let Some(r) = resources.iter().find(|r| &r.name == name) else {
                return Err(fail(format!("no resource `{name}` in the file's trailer")));
            };
            raw(&r.data, &format!("resource `{name}`"))?
        }
        Attr::Dense { data, .. } => match data {
            DenseData::Empty => {
                if count != 0 {
                    return Err(fail(format!(
                        "`dense<>` has no elements; the type has {count}"
                    )));
                }
                vec![]
            }
            DenseData::Hex(bytes) => raw(bytes, "the hex blob")?,
            DenseData::Literals(l @ Literal::List(_)) => {
                let mut leaves = Vec::new();
                flatten(l, &shape, &mut leaves).map_err(fail)?;
                let mut out = Vec::with_capacity(total);
                for (i, leaf) in leaves.iter().enumerate() {
                    encode(leaf, *elem, &mut out).map_err(|m| fail(format!("element {i}: {m}")))?;
                }
                out
            }
            DenseData::Literals(splat) => {
                let mut one = Vec::new();
                encode(splat, *elem, &mut one).map_err(fail)?;
                one.repeat(count)
            }
        },
        _ => vec![],
    };
    if matches!(elem, ElementType::Int { width: 1, .. }) {
        for b in &mut out {
            if *b > 1 {
                return Err(fail(format!("boolean byte {b:#x} is neither 0 nor 1")));
            }
        }
    }
    Ok(out)
}

fn dense_err(pos: Pos, op: &str, message: String) -> ParseError {
    ParseError::Dense {
        pos,
        op: one_line(op),
        message: one_line(&message),
    }
}
