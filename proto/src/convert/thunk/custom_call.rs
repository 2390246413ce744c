//! The `CustomCall` thunk and its typed attributes, in both directions (protobuf ↔ IR).

use super::super::fields::{Loc, dtype_from, slice_from};
use super::super::fields::{decimal_is_exact_f32, decimal_is_exact_f64, dtype_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::{
    AttrArray, AttrValue, Attributes, CustomCallBuffer, CustomCallThunk, MAX_ATTRIBUTE_DEPTH,
};

const ATTRIBUTE_TYPES: &str = "bool, i32, i64, f32, f64, f32_bits, f64_bits, string, \
    bool_array, i32_array, i64_array, f32_array, f64_array, string_array, f32_bits_array, \
    f64_bits_array or dict";

/// Protobuf → IR (validation of what the message can hold that the IR cannot; the rest is
/// done by `verify`).
pub(super) fn from(c: &pb::CustomCallThunk, loc: &Loc<'_>) -> Result<CustomCallThunk, ProtoError> {
    let buffers = |list: &[pb::CustomCallBuffer], name: &str| {
        list.iter()
            .enumerate()
            .map(|(i, b)| {
                let f = format!("{name}[{i}]");
                Ok(CustomCallBuffer {
                    slice: slice_from(&b.slice, loc, &format!("{f}.slice"))?,
                    dtype: dtype_from(b.dtype, loc, &format!("{f}.dtype"))?,
                    dims: b.dims.clone(),
                })
            })
            .collect::<Result<Vec<_>, ProtoError>>()
    };
    if c.api_version == 0 {
        return Err(loc.invalid(
            "api_version",
            format!(
                "custom call `{}`: the API version is missing (0); this build implements {}",
                c.target,
                xthunk_core::ir::CUSTOM_CALL_API_VERSION
            ),
        ));
    }
    Ok(CustomCallThunk {
        target: c.target.clone(),
        operands: buffers(&c.operands, "operands")?,
        results: buffers(&c.results, "results")?,
        attributes: attributes_from(&c.attributes, loc, "attributes", &c.target, 1)?,
        api_version: c.api_version,
        side_effect: c.side_effect,
    })
}

fn attributes_from(
    list: &[pb::Attribute],
    loc: &Loc<'_>,
    field: &str,
    target: &str,
    depth: usize,
) -> Result<Attributes, ProtoError> {
    if depth > MAX_ATTRIBUTE_DEPTH {
        return Err(loc.invalid(
            field,
            format!("dictionaries nested deeper than {MAX_ATTRIBUTE_DEPTH}"),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for a in list {
        let f = format!("{field}.{}", a.name);
        let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(v) => value_from(v, loc, &f, target, depth)?,
            None => {
                return Err(loc.invalid(
                    f,
                    format!(
                        "custom call `{target}`: attribute `{}` has no value, or one of a type \
                         this build does not know (expected {ATTRIBUTE_TYPES})",
                        a.name
                    ),
                ));
            }
        };
        out.push((a.name.clone(), v));
    }
    Ok(Attributes(out))
}

fn value_from(
    v: &pb::attribute_value::Value,
    loc: &Loc<'_>,
    field: &str,
    target: &str,
    depth: usize,
) -> Result<AttrValue, ProtoError> {
    use pb::attribute_value::Value;
    Ok(match v {
        Value::Bool(b) => AttrValue::Bool(*b),
        Value::I32(x) => AttrValue::I32(*x),
        Value::I64(x) => AttrValue::I64(*x),
        Value::F32(x) => AttrValue::F32(*x),
        Value::F64(x) => AttrValue::F64(*x),
        Value::F32Bits(b) => AttrValue::F32(f32::from_bits(*b)),
        Value::F64Bits(b) => AttrValue::F64(f64::from_bits(*b)),
        Value::String(s) => AttrValue::Str(s.clone()),
        Value::BoolArray(a) => AttrValue::Array(AttrArray::Bool(a.values.clone())),
        Value::I32Array(a) => AttrValue::Array(AttrArray::I32(a.values.clone())),
        Value::I64Array(a) => AttrValue::Array(AttrArray::I64(a.values.clone())),
        Value::F32Array(a) => AttrValue::Array(AttrArray::F32(a.values.clone())),
        Value::F64Array(a) => AttrValue::Array(AttrArray::F64(a.values.clone())),
        Value::StringArray(a) => AttrValue::Array(AttrArray::Str(a.values.clone())),
        Value::F32BitsArray(a) => AttrValue::Array(AttrArray::F32(
            a.values.iter().map(|b| f32::from_bits(*b)).collect(),
        )),
        Value::F64BitsArray(a) => AttrValue::Array(AttrArray::F64(
            a.values.iter().map(|b| f64::from_bits(*b)).collect(),
        )),
        Value::Dict(d) => {
            AttrValue::Dict(attributes_from(&d.entries, loc, field, target, depth + 1)?)
        }
    })
}

/// IR → protobuf (total).
pub(super) fn to(c: &CustomCallThunk) -> pb::CustomCallThunk {
    let buffers = |list: &[CustomCallBuffer]| {
        list.iter()
            .map(|b| pb::CustomCallBuffer {
                slice: slice_to(&b.slice),
                dtype: dtype_to(b.dtype) as i32,
                dims: b.dims.clone(),
            })
            .collect()
    };
    pb::CustomCallThunk {
        target: c.target.clone(),
        operands: buffers(&c.operands),
        results: buffers(&c.results),
        attributes: attributes_to(&c.attributes),
        api_version: c.api_version,
        side_effect: c.side_effect,
    }
}

fn attributes_to(a: &Attributes) -> Vec<pb::Attribute> {
    a.0.iter()
        .map(|(name, v)| pb::Attribute {
            name: name.clone(),
            value: Some(pb::AttributeValue {
                value: Some(value_to(v)),
            }),
        })
        .collect()
}

fn value_to(v: &AttrValue) -> pb::attribute_value::Value {
    use pb::attribute_value::Value;
    match v {
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::I32(x) => Value::I32(*x),
        AttrValue::I64(x) => Value::I64(*x),
        AttrValue::F32(x) if decimal_is_exact_f32(*x) => Value::F32(*x),
        AttrValue::F32(x) => Value::F32Bits(x.to_bits()),
        AttrValue::F64(x) if decimal_is_exact_f64(*x) => Value::F64(*x),
        AttrValue::F64(x) => Value::F64Bits(x.to_bits()),
        AttrValue::Str(s) => Value::String(s.clone()),
        AttrValue::Array(a) => match a {
            AttrArray::Bool(v) => Value::BoolArray(pb::BoolArray { values: v.clone() }),
            AttrArray::I32(v) => Value::I32Array(pb::I32Array { values: v.clone() }),
            AttrArray::I64(v) => Value::I64Array(pb::I64Array { values: v.clone() }),
            AttrArray::F32(v) if v.iter().all(|x| decimal_is_exact_f32(*x)) => {
                Value::F32Array(pb::F32Array { values: v.clone() })
            }
            AttrArray::F32(v) => Value::F32BitsArray(pb::F32BitsArray {
                values: v.iter().map(|x| x.to_bits()).collect(),
            }),
            AttrArray::F64(v) if v.iter().all(|x| decimal_is_exact_f64(*x)) => {
                Value::F64Array(pb::F64Array { values: v.clone() })
            }
            AttrArray::F64(v) => Value::F64BitsArray(pb::F64BitsArray {
                values: v.iter().map(|x| x.to_bits()).collect(),
            }),
            AttrArray::Str(v) => Value::StringArray(pb::StringArray { values: v.clone() }),
        },
        AttrValue::Dict(d) => Value::Dict(pb::AttributeDict {
            entries: attributes_to(d),
        }),
    }
}
