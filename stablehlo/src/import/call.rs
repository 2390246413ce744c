//! `stablehlo.custom_call` → the tensor graph's `custom_call` (an xthunk `CustomCall` thunk
//! calling the handler registered under the target name).
//!
//! - The handler's typed attributes come from a dictionary `backend_config` (API version 4,
//!   the typed FFI) or from `mhlo.backend_config` (how JAX's `jax.ffi.ffi_call` prints them);
//!   a non-empty string `backend_config` (the older opaque form) is passed as the string
//!   attribute `backend_config`.
//! - Attribute values: `bool`; integers of up to 32 bits as i32, 64-bit ones as i64 (a value
//!   that does not fit is refused); `f16`, `bf16` and `f32` as f32, `f64` (or untyped) as f64;
//!   strings; `array<T: …>`, lists of one scalar type and rank-1 `dense<…>` values (how JAX
//!   prints a numpy array) as arrays; dictionaries. Anything else (dense tensors of higher
//!   rank, types, symbols) is refused, naming the attribute.
//! - Operands and results are whole row-major tensors: a layout other than row-major, a tuple
//!   or token operand or result, `called_computations` and aliases into tuples are refused.
//!   `output_operand_aliases` make the result start as a copy of the operand.

use super::ops::{R, result, tensors};
use super::{Env, ImportError, Importer, Item, check_attrs};
use crate::ast::{Attr, ElementType, Literal, Op, Resource, Type};
use crate::dense;
use xthunk_core::ir::{AttrArray, AttrValue, Attributes};
use xthunk_tensor::graph::{CustomCall, Graph};

const KNOWN: [&str; 8] = [
    "call_target_name",
    "api_version",
    "backend_config",
    "has_side_effect",
    "called_computations",
    "operand_layouts",
    "result_layouts",
    "output_operand_aliases",
];

impl Importer<'_> {
    pub(super) fn custom_call(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(op, &KNOWN)?;
        let target = match op.attr("call_target_name") {
            Some(Attr::Str(s)) if !s.is_empty() => s.clone(),
            _ => return Err(ImportError::invalid(op, "no `call_target_name`")),
        };
        if let Some(items) = self.lapack(g, op, env, &target)? {
            return Ok(items);
        }
        if let Some(items) = self.gspmd_call(g, op, env, &target) {
            return items;
        }
        let refuse = |what: String| {
            Err(ImportError::unsupported(
                op,
                format!("custom_call @{target}: {what}"),
            ))
        };
        match op.attr("api_version").map(|a| a.as_int()) {
            None | Some(Some(1..=4)) => {}
            Some(v) => return refuse(format!("api_version {v:?} (1 to 4 are known)")),
        }
        if let Some(Attr::Array(c)) = op.attr("called_computations")
            && !c.is_empty()
        {
            return refuse("called_computations".into());
        }
        let side_effect = match op.attr("has_side_effect") {
            None => false,
            Some(a) => a
                .as_bool()
                .ok_or_else(|| ImportError::invalid(op, "`has_side_effect`: a bool expected"))?,
        };
        let attributes = match (op.attr("backend_config"), op.attr("mhlo.backend_config")) {
            (Some(Attr::Dict(d)), _) => dict(op, &target, d, &self.module.resources)?,
            (Some(Attr::Str(s)), mhlo) if !s.is_empty() => {
                if matches!(mhlo, Some(Attr::Dict(_))) {
                    return refuse(
                        "both an opaque `backend_config` and `mhlo.backend_config`".into(),
                    );
                }
                Attributes(vec![("backend_config".into(), AttrValue::Str(s.clone()))])
            }
            (None | Some(Attr::Str(_)), Some(Attr::Dict(d))) => {
                dict(op, &target, d, &self.module.resources)?
            }
            (None | Some(Attr::Str(_)), _) => Attributes::default(),
            (Some(other), _) => {
                return Err(ImportError::invalid(
                    op,
                    format!("`backend_config`: a string or a dictionary, not {other:?}"),
                ));
            }
        };
        let operands = tensors(env, op)?;
        let mut results = vec![];
        for i in 0..op.result_types.len() {
            results.push(result(op, i)?);
        }
        for (key, types) in [
            ("operand_layouts", &op.operand_types),
            ("result_layouts", &op.result_types),
        ] {
            let Some(Attr::Array(layouts)) = op.attr(key) else {
                continue;
            };
            for (i, l) in layouts.iter().enumerate() {
                let minor_to_major = self.layout(op, key, i, l)?;
                let rank = types
                    .get(i)
                    .and_then(Type::static_shape)
                    .map_or(0, |d| d.len());
                let row_major = minor_to_major.len() == rank
                    && minor_to_major
                        .iter()
                        .enumerate()
                        .all(|(k, d)| *d == (rank - 1 - k) as i64);
                if !row_major {
                    return refuse(format!(
                        "{key}[{i}] = {minor_to_major:?} (xthunk passes row-major tensors only)"
                    ));
                }
            }
        }
        let mut aliases = vec![];
        if let Some(Attr::Array(list)) = op.attr("output_operand_aliases") {
            for a in list {
                let ints = |f: &str| a.field(f).and_then(Attr::as_ints).unwrap_or_default();
                let out = ints("output_tuple_indices");
                let operand = a.field("operand_index").and_then(Attr::as_int);
                if !ints("operand_tuple_indices").is_empty() || out.len() > 1 {
                    return refuse("an output_operand_alias into a tuple".into());
                }
                let r = out.first().copied().unwrap_or(0);
                let (Ok(r), Some(Ok(o))) = (usize::try_from(r), operand.map(usize::try_from))
                else {
                    return Err(ImportError::invalid(op, "a malformed output_operand_alias"));
                };
                aliases.push((r, o));
            }
        }
        let call = CustomCall {
            target,
            attributes,
            side_effect,
            aliases,
        };
        let vs = g
            .custom_call(call, &operands, results)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vs.into_iter().map(Item::Tensor).collect())
    }
}

impl Importer<'_> {
    /// A layout (`dense<[1, 0]> : tensor<2xindex>`): its minor-to-major dimensions.
    fn layout(&self, op: &Op, key: &str, i: usize, l: &Attr) -> R<Vec<i64>> {
        let bad = || ImportError::invalid(op, format!("`{key}`[{i}]: a dense list of indices"));
        let Attr::Dense {
            ty: Type::Tensor { elem, .. },
            ..
        } = l
        else {
            return Err(bad());
        };
        let size = dense::element_size(*elem);
        if !matches!(elem, ElementType::Index | ElementType::Int { .. }) || size == 0 {
            return Err(bad());
        }
        let bytes = dense::decode(l, &self.module.resources, 1024, &op.name)?;
        Ok(bytes
            .chunks_exact(size)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len().min(8)].copy_from_slice(&c[..c.len().min(8)]);
                i64::from_le_bytes(b)
            })
            .collect())
    }
}

/// A dictionary attribute as typed attributes.
fn dict(op: &Op, target: &str, d: &[(String, Attr)], res: &[Resource]) -> R<Attributes> {
    let mut out = vec![];
    for (name, a) in d {
        out.push((name.clone(), value(op, target, name, a, res)?));
    }
    Ok(Attributes(out))
}

/// The most bytes of one dense attribute passed as an array.
const MAX_DENSE_ATTR_BYTES: u64 = 1 << 20;

fn value(op: &Op, target: &str, name: &str, a: &Attr, res: &[Resource]) -> R<AttrValue> {
    let why = |why: &str| {
        ImportError::unsupported(
            op,
            format!("custom_call @{target}: attribute `{name}`: {why}"),
        )
    };
    let refuse = |w: &str| Err(why(w));
    Ok(match a {
        Attr::Bool(b) => AttrValue::Bool(*b),
        Attr::Unit => AttrValue::Bool(true),
        Attr::Str(s) => AttrValue::Str(s.clone()),
        Attr::Int { value, ty } => match int_width(ty.as_ref()) {
            Some(1) => AttrValue::Bool(*value != 0),
            Some(w) if w <= 32 => match i32::try_from(*value) {
                Ok(v) => AttrValue::I32(v),
                Err(_) => return refuse(&format!("{value} does not fit an i32")),
            },
            Some(_) => match i64::try_from(*value) {
                Ok(v) => AttrValue::I64(v),
                Err(_) => return refuse(&format!("{value} does not fit an i64")),
            },
            None => return refuse("an integer of a non-integer type"),
        },
        Attr::Float { value, ty } => match ty {
            Some(Type::Scalar(ElementType::F16 | ElementType::BF16 | ElementType::F32)) => {
                AttrValue::F32(value.0 as f32)
            }
            None | Some(Type::Scalar(ElementType::F64)) => AttrValue::F64(value.0),
            Some(t) => return refuse(&format!("a float of type {t}")),
        },
        Attr::DenseArray { elem, values } => {
            AttrValue::Array(dense_array(elem.clone(), values).ok_or_else(|| {
                why(&format!(
                    "array<{elem}: …> (bool, i32, i64, f32 and f64 arrays are passed)"
                ))
            })?)
        }
        Attr::Array(items) => {
            let mut vs = vec![];
            for (i, item) in items.iter().enumerate() {
                vs.push(value(op, target, &format!("{name}[{i}]"), item, res)?);
            }
            AttrValue::Array(array_of(vs).ok_or_else(|| {
                why("a list of mixed or nested values (arrays are of one scalar type)")
            })?)
        }
        Attr::Dict(d) => AttrValue::Dict(dict(op, target, d, res)?),
        // JAX prints a numpy array keyword as `dense<[3, 4]> : tensor<2xi64>`.
        Attr::Dense { ty, .. } | Attr::DenseResource { ty, .. } => {
            let (Some(dims), Type::Tensor { elem, .. }) = (ty.static_shape(), ty) else {
                return refuse(&format!("a dense value of type {ty}"));
            };
            if dims.len() > 1 {
                return refuse(&format!(
                    "a dense tensor of rank {} (arrays have rank 1)",
                    dims.len()
                ));
            }
            let bytes = dense::decode(a, res, MAX_DENSE_ATTR_BYTES, &op.name)?;
            AttrValue::Array(dense_bytes(*elem, &bytes).ok_or_else(|| {
                why(&format!(
                    "a dense {ty} (bool, integer, f32 and f64 arrays are passed; integers \
                     must fit i32 up to 32 bits, i64 at 64)"
                ))
            })?)
        }
        _ => return refuse("not a scalar, string, array or dictionary"),
    })
}

/// The bit width of an integer attribute's type (untyped: 64, MLIR's default).
fn int_width(ty: Option<&Type>) -> Option<u16> {
    match ty {
        None | Some(Type::Scalar(ElementType::Index)) => Some(64),
        Some(Type::Scalar(ElementType::Int { width, .. })) => Some(*width),
        _ => None,
    }
}

fn dense_array(elem: Type, values: &[Literal]) -> Option<AttrArray> {
    let int = |l: &Literal| match l {
        Literal::Int {
            negative,
            magnitude,
            ..
        } => {
            let m = i128::try_from(*magnitude).ok()?;
            Some(if *negative { -m } else { m })
        }
        Literal::Bool(b) => Some(i128::from(*b)),
        _ => None,
    };
    let float = |l: &Literal| match l {
        Literal::Float(f) => Some(f.0),
        _ => int(l).map(|i| i as f64),
    };
    Some(match elem {
        Type::Scalar(ElementType::Int { width: 1, .. }) => AttrArray::Bool(
            values
                .iter()
                .map(|l| int(l).map(|v| v != 0))
                .collect::<Option<_>>()?,
        ),
        Type::Scalar(ElementType::Int { width, .. }) if width <= 32 => AttrArray::I32(
            values
                .iter()
                .map(|l| int(l).and_then(|v| i32::try_from(v).ok()))
                .collect::<Option<_>>()?,
        ),
        Type::Scalar(ElementType::Int { width: 64, .. }) => AttrArray::I64(
            values
                .iter()
                .map(|l| int(l).and_then(|v| i64::try_from(v).ok()))
                .collect::<Option<_>>()?,
        ),
        Type::Scalar(ElementType::F16 | ElementType::BF16 | ElementType::F32) => AttrArray::F32(
            values
                .iter()
                .map(|l| float(l).map(|v| v as f32))
                .collect::<Option<_>>()?,
        ),
        Type::Scalar(ElementType::F64) => {
            AttrArray::F64(values.iter().map(float).collect::<Option<_>>()?)
        }
        _ => return None,
    })
}

/// A rank-0 or rank-1 dense value's little-endian bytes as an array.
fn dense_bytes(elem: ElementType, bytes: &[u8]) -> Option<AttrArray> {
    let ints = |width: u16, signed: bool| -> Vec<i128> {
        let n = usize::from(width).div_ceil(8);
        bytes
            .chunks_exact(n)
            .map(|c| {
                let mut b = [0u8; 16];
                b[..n].copy_from_slice(c);
                let v = u128::from_le_bytes(b);
                let shift = 128 - u32::from(width);
                if signed {
                    ((v << shift) as i128) >> shift
                } else {
                    v as i128
                }
            })
            .collect()
    };
    Some(match elem {
        ElementType::Int { width: 1, .. } => {
            AttrArray::Bool(bytes.iter().map(|b| *b != 0).collect())
        }
        ElementType::Int { width, signed } if width <= 32 => AttrArray::I32(
            ints(width, signed != Some(false))
                .into_iter()
                .map(|v| i32::try_from(v).ok())
                .collect::<Option<_>>()?,
        ),
        ElementType::Int { width: 64, signed } => AttrArray::I64(
            ints(64, signed != Some(false))
                .into_iter()
                .map(|v| i64::try_from(v).ok())
                .collect::<Option<_>>()?,
        ),
        ElementType::F32 => AttrArray::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        ElementType::F64 => AttrArray::F64(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        _ => return None,
    })
}

/// Scalars of one type as an array (an empty list is an empty i64 array).
fn array_of(vs: Vec<AttrValue>) -> Option<AttrArray> {
    macro_rules! all {
        ($variant:ident) => {
            vs.iter()
                .map(|v| match v {
                    AttrValue::$variant(x) => Some(x.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .map(AttrArray::$variant)
        };
    }
    match vs.first() {
        None => Some(AttrArray::I64(vec![])),
        Some(AttrValue::Bool(_)) => all!(Bool),
        Some(AttrValue::I32(_)) => all!(I32),
        Some(AttrValue::I64(_)) => all!(I64),
        Some(AttrValue::F32(_)) => all!(F32),
        Some(AttrValue::F64(_)) => all!(F64),
        Some(AttrValue::Str(_)) => all!(Str),
        _ => None,
    }
}
