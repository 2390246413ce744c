//! Registration of the standard kernel library's host implementations.

use super::elem::{Elem, Real, Wide};
use super::elementwise::{
    Abs, Add, BinaryOp, Div, Exp, Gelu, GeluErf, Log, Max, Min, Mul, Neg, Relu, Rsqrt, Sigmoid,
    Sqrt, Sub, Tanh, UnaryOp, axpy, binary, binary_row, convert, fill, iota, scale, unary,
};
use super::rows::{
    layer_norm, reduce_max, reduce_mean, reduce_sum_float, reduce_sum_int, softmax, transpose,
};
use super::training::{adamw, bias_unary, cross_entropy, embedding};
use super::{HostKernel, HostKernelFn, KernelLibrary, KernelSignature, Param, sigs};
use half::{bf16, f16};
use std::sync::OnceLock;

/// The standard kernel library (name `xthunk.std`); see the [module documentation](super)
/// for the list of kernels.
pub fn standard_library() -> &'static KernelLibrary {
    static LIB: OnceLock<KernelLibrary> = OnceLock::new();
    LIB.get_or_init(build)
}

fn reg(lib: &mut KernelLibrary, name: String, params: Vec<Param>, func: HostKernelFn) {
    lib.register(HostKernel {
        signature: KernelSignature { name, params },
        func,
    });
}

fn build() -> KernelLibrary {
    let mut lib = KernelLibrary::new("xthunk.std");
    let l = &mut lib;

    all_types::<f16>(l);
    all_types::<bf16>(l);
    all_types::<f32>(l);
    all_types::<f64>(l);
    all_types::<i8>(l);
    all_types::<u8>(l);
    all_types::<i32>(l);
    all_types::<i64>(l);

    floats::<f16>(l);
    floats::<bf16>(l);
    floats::<f32>(l);
    floats::<f64>(l);

    signed_ints::<i8>(l);
    signed_ints::<i32>(l);
    signed_ints::<i64>(l);
    reg(
        l,
        "reduce_sum_i32".into(),
        sigs::reduce(i32::DTYPE),
        reduce_sum_int::<i32>,
    );
    reg(
        l,
        "reduce_sum_i64".into(),
        sigs::reduce(i64::DTYPE),
        reduce_sum_int::<i64>,
    );

    convert_from::<f16>(l);
    convert_from::<bf16>(l);
    convert_from::<f32>(l);
    convert_from::<f64>(l);
    convert_from::<i32>(l);

    // AdamW keeps its moments in f32 (f64 for f64 parameters).
    reg(
        l,
        "adamw_f16".into(),
        sigs::adamw(f16::DTYPE, f32::DTYPE),
        adamw::<f16, f32>,
    );
    reg(
        l,
        "adamw_bf16".into(),
        sigs::adamw(bf16::DTYPE, f32::DTYPE),
        adamw::<bf16, f32>,
    );
    reg(
        l,
        "adamw_f32".into(),
        sigs::adamw(f32::DTYPE, f32::DTYPE),
        adamw::<f32, f32>,
    );
    reg(
        l,
        "adamw_f64".into(),
        sigs::adamw(f64::DTYPE, f64::DTYPE),
        adamw::<f64, f64>,
    );

    lib
}

/// Kernels of every element type: fill, iota, the binary ops and their row variants,
/// reduce_max, transpose.
fn all_types<T: Elem>(l: &mut KernelLibrary) {
    let t = T::DTYPE;
    reg(l, format!("fill_{t}"), sigs::fill(t), fill::<T>);
    reg(l, format!("iota_{t}"), sigs::iota(t), iota::<T>);
    bin::<T, Add>(l);
    bin::<T, Sub>(l);
    bin::<T, Mul>(l);
    bin::<T, Div>(l);
    bin::<T, Max>(l);
    bin::<T, Min>(l);
    reg(
        l,
        format!("reduce_max_{t}"),
        sigs::reduce(t),
        reduce_max::<T>,
    );
    reg(
        l,
        format!("transpose_{t}"),
        sigs::transpose(t),
        transpose::<T>,
    );
}

fn bin<T: Elem, O: BinaryOp>(l: &mut KernelLibrary) {
    let (t, op) = (T::DTYPE, O::NAME);
    reg(l, format!("{op}_{t}"), sigs::binary(t), binary::<T, O>);
    reg(
        l,
        format!("{op}_row_{t}"),
        sigs::binary_row(t),
        binary_row::<T, O>,
    );
}

fn un<T: Elem, O: UnaryOp<T::C>>(l: &mut KernelLibrary) {
    let t = T::DTYPE;
    reg(l, format!("{}_{t}", O::NAME), sigs::unary(t), unary::<T, O>);
}

/// Float-only kernels.
fn floats<T: Wide>(l: &mut KernelLibrary)
where
    T::C: Real,
{
    let t = T::DTYPE;
    un::<T, Neg>(l);
    un::<T, Abs>(l);
    un::<T, Exp>(l);
    un::<T, Log>(l);
    un::<T, Sqrt>(l);
    un::<T, Rsqrt>(l);
    un::<T, Tanh>(l);
    un::<T, Sigmoid>(l);
    un::<T, Relu>(l);
    un::<T, Gelu>(l);
    un::<T, GeluErf>(l);
    reg(
        l,
        format!("bias_gelu_{t}"),
        sigs::binary_row(t),
        bias_unary::<T, Gelu>,
    );
    reg(
        l,
        format!("bias_gelu_erf_{t}"),
        sigs::binary_row(t),
        bias_unary::<T, GeluErf>,
    );
    reg(
        l,
        format!("cross_entropy_{t}"),
        sigs::cross_entropy(t),
        cross_entropy::<T>,
    );
    reg(
        l,
        format!("embedding_{t}"),
        sigs::embedding(t),
        embedding::<T>,
    );
    reg(l, format!("axpy_{t}"), sigs::axpy(t), axpy::<T>);
    reg(l, format!("scale_{t}"), sigs::scale(t), scale::<T>);
    reg(
        l,
        format!("reduce_sum_{t}"),
        sigs::reduce(t),
        reduce_sum_float::<T>,
    );
    reg(
        l,
        format!("reduce_mean_{t}"),
        sigs::reduce(t),
        reduce_mean::<T>,
    );
    reg(l, format!("softmax_{t}"), sigs::softmax(t), softmax::<T>);
    reg(
        l,
        format!("layer_norm_{t}"),
        sigs::layer_norm(t),
        layer_norm::<T>,
    );
}

/// neg, abs, relu of the signed integer types.
fn signed_ints<T: Elem>(l: &mut KernelLibrary) {
    un::<T, Neg>(l);
    un::<T, Abs>(l);
    un::<T, Relu>(l);
}

fn convert_from<A: Wide>(l: &mut KernelLibrary) {
    convert_pair::<A, f16>(l);
    convert_pair::<A, bf16>(l);
    convert_pair::<A, f32>(l);
    convert_pair::<A, f64>(l);
    convert_pair::<A, i32>(l);
}

fn convert_pair<A: Wide, B: Wide>(l: &mut KernelLibrary) {
    let (a, b) = (A::DTYPE, B::DTYPE);
    if a != b {
        reg(
            l,
            format!("convert_{a}_{b}"),
            sigs::convert(a, b),
            convert::<A, B>,
        );
    }
}
