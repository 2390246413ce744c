//! Element and tensor types of the StableHLO text mapped to xthunk's: `i1` → pred, signless
//! and `si` integers of 8, 16, 32 and 64 bits → the signed types, `ui` ones → the unsigned
//! types, the four float types, complex<f32>/complex<f64> (c64/c128), f8E4M3FN and f8E5M2;
//! anything xthunk lacks (the other narrow floats, `index`,
//! dynamic or unranked shapes, tuples or tokens where a tensor is needed) refused naming the
//! type.

use super::ImportError;
use crate::ast::{ComplexOf, ElementType, NarrowFloat, Op, Type};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::TensorType;

/// xthunk's element type for `e`, if it has one.
pub fn dtype(e: ElementType) -> Option<DType> {
    Some(match e {
        ElementType::Int {
            width: 1,
            signed: None,
        } => DType::Pred,
        ElementType::Int {
            width: 8,
            signed: None | Some(true),
        } => DType::I8,
        ElementType::Int {
            width: 8,
            signed: Some(false),
        } => DType::U8,
        ElementType::Int {
            width: 16,
            signed: None | Some(true),
        } => DType::I16,
        ElementType::Int {
            width: 16,
            signed: Some(false),
        } => DType::U16,
        ElementType::Int {
            width: 32,
            signed: None | Some(true),
        } => DType::I32,
        ElementType::Int {
            width: 32,
            signed: Some(false),
        } => DType::U32,
        ElementType::Int {
            width: 64,
            signed: None | Some(true),
        } => DType::I64,
        ElementType::Int {
            width: 64,
            signed: Some(false),
        } => DType::U64,
        ElementType::F16 => DType::F16,
        ElementType::BF16 => DType::BF16,
        ElementType::F32 => DType::F32,
        ElementType::F64 => DType::F64,
        ElementType::Complex(ComplexOf::F32) => DType::C64,
        ElementType::Complex(ComplexOf::F64) => DType::C128,
        ElementType::Narrow(NarrowFloat::F8E4M3FN) => DType::F8E4M3FN,
        ElementType::Narrow(NarrowFloat::F8E5M2) => DType::F8E5M2,
        _ => return None,
    })
}

/// The tensor type `ty` as xthunk's; `what` says where it was written (for the refusal).
pub fn tensor_type(ty: &Type, op: &Op, what: &str) -> Result<TensorType, ImportError> {
    let refuse = |why: &str| Err(ImportError::unsupported(op, format!("{what} {ty}: {why}")));
    let Type::Tensor { elem, encoding, .. } = ty else {
        return refuse("not a tensor type");
    };
    if encoding.is_some() {
        return refuse("a tensor encoding");
    }
    let Some(dims) = ty.static_shape() else {
        return refuse("a dynamic or unranked shape");
    };
    let Some(dtype) = dtype(*elem) else {
        return refuse(&format!("element type {elem} (xthunk has no such type)"));
    };
    Ok(TensorType { dtype, dims })
}
