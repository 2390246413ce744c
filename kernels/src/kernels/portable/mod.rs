//! Portable source of the standard kernel library: one CUDA-C translation unit, compiled at
//! load time by NVRTC (NVIDIA) or hipRTC (AMD), with exactly the names, parameter lists and
//! semantics of the host implementations (see the [kernel table](super)).
//!
//! The source is generated from templates (one per kernel family) over the signatures of
//! [`standard_library`]: the parameter list of every kernel is written from its
//! [`KernelSignature`], so it cannot drift from what the validator checks. Use
//! [`standard_source`] for the whole library (prelude + every kernel), [`kernel_source`] for
//! one kernel, and [`with_prelude`] for user source (`ModuleImage::Source`).
//!
//! # The CUDA-C subset
//!
//! The user's contract (subset v2: warp operations for 32- and 64-lane warps, atomics,
//! `xt_f16`/`xt_bf16` value types, constants, C linkage by default, refused vendor-only
//! constructs) is `docs/kernels.md`; [`module_source`] writes a user module's translation unit
//! and [`scan`] checks and rewrites user source. The standard library's own kernels follow the
//! stricter rules below.
//!
//! Portable kernels are C++ as both NVRTC and hipRTC accept it, with no `#include`:
//!
//! - kernels are `extern "C" __global__ void name(...)` (unmangled names), parameters are
//!   buffers first, as pointers, then immediates by value; element types map to C as
//!   `f32` -> `float`, `f64` -> `double`, `i8` -> `signed char`, `u8` and `pred` ->
//!   `unsigned char`, `i32` -> `int`, `i64` -> `long long`, and `f16`/`bf16` ->
//!   `unsigned short` holding the raw bits (buffers and immediates alike). Read-only buffers
//!   are `const`; no `__restrict__` (outputs may alias inputs in place);
//! - built-ins used: `threadIdx`, `blockIdx`, `blockDim`, `gridDim`, `__syncthreads`,
//!   `__shared__`, and the C math functions `expf logf sqrtf tanhf fabsf fmaxf fminf` and their
//!   `double` forms; nothing else of the vendor runtimes;
//! - every kernel is correct for any launch shape: elementwise kernels are grid-stride loops
//!   over the flattened grid ([`XT_FOR`](#prelude)), row kernels give each block whole rows
//!   (block-stride over rows) and reduce in shared memory over all threads of the block. No
//!   kernel assumes a warp size: reductions use `blockDim` and `__syncthreads` only (a warp is
//!   32 threads on NVIDIA and 64 on AMD), so `warpSize` is never needed and never replaced by
//!   a literal;
//! - arithmetic: f16, bf16 and f32 compute in `float`, f64 in `double`, integers natively with
//!   wrapping `+ - *` and negation done in unsigned types (signed overflow is undefined in
//!   C++), division by zero giving 0 and `MIN / -1` giving `MIN`; reductions accumulate in
//!   `float` (`double` for f64; unsigned wrapping for integer sums). Compile with contraction
//!   off (NVRTC `--fmad=false`, hipRTC `-ffp-contract=off`) to follow the host's evaluation
//!   order; transcendental functions still differ from the host by an ulp or so.
//!
//! # Prelude
//!
//! [`PRELUDE`] (`prelude.cuh`) defines, with no vendor header:
//!
//! - `XT_CUDA` / `XT_HIP` from the compiler's own macros (`__CUDACC__`/`__CUDACC_RTC__`,
//!   `__HIP__`/`__HIPCC_RTC__`);
//! - bit casts `xt_bits_f32`, `xt_f32_bits`, `xt_bits_f64`, `xt_f64_bits` (CUDA intrinsics
//!   on NVRTC, `__builtin_bit_cast` on hipRTC);
//! - f16: `xt_f16_to_f32`, `xt_f32_to_f16` (round to nearest even) by inline PTX
//!   `cvt.f32.f16` / `cvt.rn.f16.f32` on CUDA and `_Float16` bit casts on HIP;
//! - bf16: `xt_bf16_to_f32`, `xt_f32_to_bf16` by integer shifts, round to nearest even, NaN
//!   kept quiet;
//! - single-rounding conversions from f64: `xt_f64_to_f32_odd` (round to odd), then
//!   `xt_f64_to_f16` / `xt_f64_to_bf16`; `xt_f64_to_i32` (toward zero, saturating, NaN -> 0);
//! - `xt_max` / `xt_min` overloads (`fmaxf`/`fminf` semantics for floats: NaN loses),
//!   `xt_gelu` (tanh approximation, host evaluation order), `XT_NEG_INF_F32/F64`;
//! - launch geometry over any grid/block shape: `xt_global_id`, `xt_global_threads`,
//!   `xt_block_id`, `xt_num_blocks`, `xt_thread_in_block`, `xt_block_threads`, and the
//!   grid-stride loop `XT_FOR(i, n)`;
//! - `xt_block_reduce(v, sh, op)` with `xt_op_add` / `xt_op_max`: a shared-memory tree
//!   reduction over all threads of a block (any size up to `XT_MAX_BLOCK` = 1024).
//!
//! # Caching
//!
//! Compiled images are cached by the backends in core's kernel cache
//! (`xthunk_core::backend::kernel_cache`), keyed by a SHA-256 of the exact text compiled, the
//! options, the target architecture and the compiler version; [`PORTABLE_SOURCE_VERSION`]
//! changes whenever the generator or prelude changes meaning.

mod embed;
mod emit;
mod hash;
pub use embed::{EMBEDDED_SOURCE_SYMBOL, embed_source, embedded_unit};
pub mod scan;
pub mod stamp;
mod training;

use super::{KernelSignature, standard_library};
use crate::ir::{DType, ModuleOptions};
use emit::{
    ROWS, compute, ctype, declaration, from_f64, int_min, int_neg, is_signed_int, lit, load, math,
    store, to_f64, wrap,
};
use std::fmt::Write as _;
use std::sync::OnceLock;

/// Version of the portable source generator and prelude (part of every cache key).
pub const PORTABLE_SOURCE_VERSION: u32 = 2;

/// The header-free xthunk prelude, prepended to every portable translation unit.
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// CUDA's spellings of the subset (`docs/kernels.md`, "bringing CUDA kernels"): follows
/// [`PRELUDE`] in every user module's unit (not in the standard library's).
pub const CUDA_SPELLINGS: &str = include_str!("cuda.cuh");

/// The whole standard library as one translation unit: the prelude, then every kernel of
/// [`standard_library`] (sorted by name).
pub fn standard_source() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| embed_source(standard_unit()))
}

/// [`standard_source`] without the copy of itself it carries ([`embed_source`]): what the
/// CPU execution compiles.
pub fn standard_unit() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        let mut s = standard_unstamped().to_string();
        s.push_str(&hash::stamp_definition(&standard_hash()));
        s
    })
}

/// The standard library's translation unit without its source stamp.
fn standard_unstamped() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        let mut s = header();
        s.push_str(PRELUDE);
        for k in standard_library().kernels() {
            s.push('\n');
            // Every standard kernel has a template (checked by the tests); a kernel without
            // one is left out and reported by name when looked up.
            if let Some(def) = kernel_definition_for(&k.signature) {
                s.push_str(&def);
            }
        }
        s
    })
}

/// The source hash of the standard library of this build ([`stamp`]).
pub fn standard_hash() -> String {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| hash::source_hash(standard_unstamped()))
        .clone()
}

/// One standard kernel as a complete translation unit (prelude included), or `None` when
/// `name` is not a standard kernel.
pub fn kernel_source(name: &str) -> Option<String> {
    let def = kernel_definition(name)?;
    let mut s = header();
    s.push_str(PRELUDE);
    s.push('\n');
    s.push_str(&def);
    Some(s)
}

/// The definition of one standard kernel (without the prelude).
pub fn kernel_definition(name: &str) -> Option<String> {
    let k = standard_library().get(name)?;
    kernel_definition_for(&k.signature)
}

/// User source in the CUDA-C subset with the prelude prepended (what `ModuleImage::Source`
/// compiles), as [`module_source`] writes it for a module named `source`.
pub fn with_prelude(code: &str) -> String {
    embed_source(&unit_with_prelude(code))
}

/// [`with_prelude`] without the copy of itself it carries ([`embed_source`]): what the CPU
/// execution compiles.
pub fn unit_with_prelude(code: &str) -> String {
    module_unit("source", code, &ModuleOptions::default())
}

/// The source a GPU compiler is handed for a source module named `module`: its unit
/// ([`module_unit`]) with the carried copy of itself ([`embed_source`]).
pub fn module_source(module: &str, code: &str) -> String {
    module_source_with(module, code, &ModuleOptions::default())
}

/// [`module_source`] with the module's compile options.
pub fn module_source_with(module: &str, code: &str, options: &ModuleOptions) -> String {
    embed_source(&module_unit(module, code, options))
}

/// The translation unit of a source module named `module` (what the CPU execution compiles):
/// the prelude; the module's defines (`#define NAME VALUE`, `NAME` alone defined as 1);
/// `#line 1 "<module>"` (so compiler messages point at the user's own lines and name the
/// module); `code` with its carried headers inlined where it includes them (`#include
/// "name"`, between `#line` directives naming the header) and C linkage applied to its kernels
/// ([`scan::with_c_linkage`]); its source stamp ([`stamp`]). Fast math is marked for the
/// compilers ([`fast_math`]).
pub fn module_unit(module: &str, code: &str, options: &ModuleOptions) -> String {
    let mut s = header();
    if options.fast_math {
        s.push_str(FAST_MATH);
        s.push('\n');
    }
    s.push_str(PRELUDE);
    s.push('\n');
    s.push_str(CUDA_SPELLINGS);
    s.push_str("\n// ---- user source ----\n");
    for d in &options.defines {
        let (name, value) = d.split_once('=').unwrap_or((d.as_str(), "1"));
        let _ = writeln!(s, "#define {name} {value}");
    }
    let name = line_file_name(module);
    let _ = writeln!(s, "#line 1 \"{name}\"");
    let inlined = scan::inline_headers(code, &name, &options.headers);
    let inlined = scan::without_covered_includes(&inlined);
    s.push_str(&scan::with_c_linkage(&inlined));
    s.push('\n');
    s.push_str(&hash::stamp_definition(&hash::module_hash(code, options)));
    s
}

/// The line that marks a translation unit for fast math (second line of the unit).
const FAST_MATH: &str = "// xthunk: fast math";

/// Whether a translation unit asks for fast math ([`ModuleOptions::fast_math`]): the
/// compilers then add their fast-math options.
pub fn fast_math(source: &str) -> bool {
    source.lines().nth(1) == Some(FAST_MATH)
}

/// The module a translation unit of [`module_source`] was written for (its `#line` file
/// name), `"standard"` for [`standard_source`], else `None`: compilers use it to name the
/// module in their messages.
pub fn module_of(source: &str) -> Option<&str> {
    if source == standard_source() {
        return Some("standard");
    }
    let (_, user) = source.split_once("\n// ---- user source ----\n")?;
    let line = user.lines().find(|l| l.starts_with("#line 1 \""))?;
    line.strip_prefix("#line 1 \"")?.strip_suffix('"')
}

/// `module` as the file name of a `#line` directive: printable ASCII, without `"` and `\\`.
fn line_file_name(module: &str) -> String {
    module
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn header() -> String {
    format!("// xthunk portable source v{PORTABLE_SOURCE_VERSION} (generated; do not edit)\n")
}

// ---- kernel families --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unary {
    Neg,
    Abs,
    Relu,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Gelu,
    GeluErf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Fill(DType),
    Iota(DType),
    Convert(DType, DType),
    Unary(Unary, DType),
    Binary(Binary, DType),
    BinaryRow(Binary, DType),
    Axpy(DType),
    Scale(DType),
    ReduceSum(DType),
    ReduceMax(DType),
    ReduceMean(DType),
    Softmax(DType),
    LayerNorm(DType),
    Transpose(DType),
}

fn unary_op(s: &str) -> Option<Unary> {
    Some(match s {
        "neg" => Unary::Neg,
        "abs" => Unary::Abs,
        "relu" => Unary::Relu,
        "exp" => Unary::Exp,
        "log" => Unary::Log,
        "sqrt" => Unary::Sqrt,
        "rsqrt" => Unary::Rsqrt,
        "tanh" => Unary::Tanh,
        "sigmoid" => Unary::Sigmoid,
        "gelu" => Unary::Gelu,
        "gelu_erf" => Unary::GeluErf,
        _ => return None,
    })
}

fn binary_op(s: &str) -> Option<Binary> {
    Some(match s {
        "add" => Binary::Add,
        "sub" => Binary::Sub,
        "mul" => Binary::Mul,
        "div" => Binary::Div,
        "max" => Binary::Max,
        "min" => Binary::Min,
        _ => return None,
    })
}

/// The family of a standard kernel name (`<op>_<dtype>`, `<op>_row_<dtype>`,
/// `convert_<a>_<b>`).
fn family(name: &str) -> Option<Family> {
    if let Some(rest) = name.strip_prefix("convert_") {
        let (a, b) = rest.split_once('_')?;
        return Some(Family::Convert(DType::from_name(a)?, DType::from_name(b)?));
    }
    let (op, t) = name.rsplit_once('_')?;
    let t = DType::from_name(t)?;
    Some(match op {
        "fill" => Family::Fill(t),
        "iota" => Family::Iota(t),
        "axpy" => Family::Axpy(t),
        "scale" => Family::Scale(t),
        "reduce_sum" => Family::ReduceSum(t),
        "reduce_max" => Family::ReduceMax(t),
        "reduce_mean" => Family::ReduceMean(t),
        "softmax" => Family::Softmax(t),
        "layer_norm" => Family::LayerNorm(t),
        "transpose" => Family::Transpose(t),
        _ => {
            if let Some(u) = unary_op(op) {
                Family::Unary(u, t)
            } else if let Some(b) = op.strip_suffix("_row").and_then(binary_op) {
                Family::BinaryRow(b, t)
            } else {
                Family::Binary(binary_op(op)?, t)
            }
        }
    })
}

// ---- C expressions of the operations (C spellings of types: `emit.rs`) ------------------

fn unary_expr(op: Unary, t: DType, x: &str) -> String {
    if t.is_float() {
        let c = compute(t);
        let one = lit(c, 1.0);
        let zero = lit(c, 0.0);
        match op {
            Unary::Neg => format!("-{x}"),
            Unary::Abs => format!("{}({x})", math(c, "fabs")),
            Unary::Relu => format!("({x} > {zero} ? {x} : {zero})"),
            Unary::Exp => format!("{}({x})", math(c, "exp")),
            Unary::Log => format!("{}({x})", math(c, "log")),
            Unary::Sqrt => format!("{}({x})", math(c, "sqrt")),
            Unary::Rsqrt => format!("{one} / {}({x})", math(c, "sqrt")),
            Unary::Tanh => format!("{}({x})", math(c, "tanh")),
            Unary::Sigmoid => format!("{one} / ({one} + {}(-{x}))", math(c, "exp")),
            Unary::Gelu => format!("xt_gelu({x})"),
            Unary::GeluErf => format!("xt_gelu_erf({x})"),
        }
    } else {
        let ct = ctype(t);
        match op {
            Unary::Neg => int_neg(t, x),
            Unary::Abs => format!("({x} < 0 ? {} : {x})", int_neg(t, x)),
            Unary::Relu => format!("({x} > 0 ? {x} : ({ct})0)"),
            // Float-only operations have no integer kernels (the library never asks).
            _ => format!("({ct})0"),
        }
    }
}

fn binary_expr(op: Binary, t: DType, x: &str, y: &str) -> String {
    if t.is_float() {
        match op {
            Binary::Add => format!("{x} + {y}"),
            Binary::Sub => format!("{x} - {y}"),
            Binary::Mul => format!("{x} * {y}"),
            Binary::Div => format!("{x} / {y}"),
            Binary::Max => format!("xt_max({x}, {y})"),
            Binary::Min => format!("xt_min({x}, {y})"),
        }
    } else {
        let (ct, w) = (ctype(t), wrap(t));
        match op {
            Binary::Add => format!("({ct})(({w}){x} + ({w}){y})"),
            Binary::Sub => format!("({ct})(({w}){x} - ({w}){y})"),
            Binary::Mul => format!("({ct})(({w}){x} * ({w}){y})"),
            Binary::Div if is_signed_int(t) => format!(
                "({y} == 0 ? ({ct})0 : ({y} == ({ct})-1 ? {} : ({ct})({x} / {y})))",
                int_neg(t, x)
            ),
            Binary::Div => format!("({y} == 0 ? ({ct})0 : ({ct})({x} / {y}))"),
            Binary::Max => format!("xt_max({x}, {y})"),
            Binary::Min => format!("xt_min({x}, {y})"),
        }
    }
}

/// The parameter names a family's body uses, in order (checked against the signature).
fn expected_params(f: Family) -> &'static [&'static str] {
    match f {
        Family::Fill(_) => &["out", "value", "n"],
        Family::Iota(_) => &["out", "start", "step", "n"],
        Family::Convert(..) | Family::Unary(..) => &["in", "out", "n"],
        Family::Binary(..) => &["a", "b", "out", "n"],
        Family::BinaryRow(..) => &["a", "b", "out", "rows", "cols"],
        Family::Axpy(_) => &["x", "y", "alpha", "n"],
        Family::Scale(_) => &["x", "alpha", "n"],
        Family::ReduceSum(_)
        | Family::ReduceMax(_)
        | Family::ReduceMean(_)
        | Family::Softmax(_)
        | Family::Transpose(_) => &["in", "out", "rows", "cols"],
        Family::LayerNorm(_) => &["in", "gamma", "beta", "out", "eps", "rows", "cols"],
    }
}

/// The definition of the kernel with signature `sig`, or `None` when its name has no
/// template or its parameters are not the ones the template is written for.
fn kernel_definition_for(sig: &KernelSignature) -> Option<String> {
    if let Some(def) = training::definition(sig) {
        return Some(def);
    }
    let f = family(&sig.name)?;
    let names: Vec<&str> = sig.params.iter().map(|p| p.name).collect();
    if names != expected_params(f) {
        return None;
    }
    let body = body(f);
    Some(format!("{} {{\n{body}}}\n", declaration(sig)))
}

fn body(f: Family) -> String {
    let mut s = String::new();
    // `write!` to a String cannot fail.
    macro_rules! w {
        ($($t:tt)*) => { let _ = writeln!(s, $($t)*); };
    }
    match f {
        Family::Fill(_) => {
            w!("  XT_FOR(i, n) out[i] = value;");
        }
        Family::Iota(t) => {
            if t.is_float() {
                let c = compute(t);
                w!(
                    "  const {c} s0 = {}, d = {};",
                    load(t, "start"),
                    load(t, "step")
                );
                w!(
                    "  XT_FOR(i, n) out[i] = {};",
                    store(t, &format!("s0 + ({c})i * d"))
                );
            } else {
                let (ct, wt) = (ctype(t), wrap(t));
                w!("  XT_FOR(i, n) out[i] = ({ct})(({wt})start + ({wt})i * ({wt})step);");
            }
        }
        Family::Convert(a, b) => {
            let f32_family = |t: DType| matches!(t, DType::F16 | DType::BF16 | DType::F32);
            if f32_family(a) && f32_family(b) {
                // Widening to f32 is exact, so rounding the f32 once is a single rounding.
                w!("  XT_FOR(i, n) out[i] = {};", store(b, &load(a, "in[i]")));
            } else {
                w!(
                    "  XT_FOR(i, n) out[i] = {};",
                    from_f64(b, &to_f64(a, "in[i]"))
                );
            }
        }
        Family::Unary(op, t) => {
            let c = compute(t);
            w!("  XT_FOR(i, n) {{");
            w!("    const {c} x = {};", load(t, "in[i]"));
            w!("    out[i] = {};", store(t, &unary_expr(op, t, "x")));
            w!("  }}");
        }
        Family::Binary(op, t) => {
            let c = compute(t);
            w!("  XT_FOR(i, n) {{");
            w!(
                "    const {c} x = {}, y = {};",
                load(t, "a[i]"),
                load(t, "b[i]")
            );
            w!("    out[i] = {};", store(t, &binary_expr(op, t, "x", "y")));
            w!("  }}");
        }
        Family::BinaryRow(op, t) => {
            let c = compute(t);
            w!("  XT_FOR(i, rows * cols) {{");
            w!("    const long long c = i % cols;");
            w!(
                "    const {c} x = {}, y = {};",
                load(t, "a[i]"),
                load(t, "b[c]")
            );
            w!("    out[i] = {};", store(t, &binary_expr(op, t, "x", "y")));
            w!("  }}");
        }
        Family::Axpy(t) => {
            let c = compute(t);
            w!("  const {c} al = {};", load(t, "alpha"));
            w!(
                "  XT_FOR(i, n) y[i] = {};",
                store(
                    t,
                    &format!("al * {} + {}", load(t, "x[i]"), load(t, "y[i]"))
                )
            );
        }
        Family::Scale(t) => {
            let c = compute(t);
            w!("  const {c} al = {};", load(t, "alpha"));
            w!(
                "  XT_FOR(i, n) x[i] = {};",
                store(t, &format!("al * {}", load(t, "x[i]")))
            );
        }
        Family::ReduceSum(t) | Family::ReduceMean(t) => {
            let mean = matches!(f, Family::ReduceMean(_));
            let (acc, init, add, fin) = if t.is_float() {
                let c = compute(t);
                let fin = if mean {
                    store(t, &format!("acc / ({c})cols"))
                } else {
                    store(t, "acc")
                };
                (c, lit(c, 0.0), load(t, "in[r * cols + c]"), fin)
            } else {
                let wt = wrap(t);
                (
                    wt,
                    "0".to_string(),
                    format!("({wt})in[r * cols + c]"),
                    format!("({})acc", ctype(t)),
                )
            };
            w!("  __shared__ {acc} sh[XT_MAX_BLOCK];");
            s.push_str(ROWS);
            w!("    {acc} acc = {init};");
            w!("    for (long long c = t; c < cols; c += nt) acc += {add};");
            w!("    acc = xt_block_reduce(acc, sh, xt_op_add());");
            w!("    if (t == 0) out[r] = {fin};");
            w!("  }}");
        }
        Family::ReduceMax(t) => {
            let c = compute(t);
            let init = match t {
                DType::F64 => "XT_NEG_INF_F64",
                _ if t.is_float() => "XT_NEG_INF_F32",
                _ => int_min(t),
            };
            w!("  __shared__ {c} sh[XT_MAX_BLOCK];");
            s.push_str(ROWS);
            w!("    {c} acc = {init};");
            w!(
                "    for (long long c = t; c < cols; c += nt) acc = xt_max(acc, ({c}){});",
                load(t, "in[r * cols + c]")
            );
            w!("    acc = xt_block_reduce(acc, sh, xt_op_max());");
            w!("    if (t == 0) out[r] = {};", store(t, "acc"));
            w!("  }}");
        }
        Family::Softmax(t) => {
            let c = compute(t);
            let exp = math(c, "exp");
            let ninf = if t == DType::F64 {
                "XT_NEG_INF_F64"
            } else {
                "XT_NEG_INF_F32"
            };
            w!("  __shared__ {c} sh[XT_MAX_BLOCK];");
            s.push_str(ROWS);
            w!("    const {}* x = in + r * cols;", ctype(t));
            w!("    {}* y = out + r * cols;", ctype(t));
            w!("    {c} m = {ninf};");
            w!(
                "    for (long long c = t; c < cols; c += nt) m = xt_max(m, {});",
                load(t, "x[c]")
            );
            w!("    m = xt_block_reduce(m, sh, xt_op_max());");
            w!("    {c} s = {};", lit(c, 0.0));
            w!(
                "    for (long long c = t; c < cols; c += nt) s += {exp}({} - m);",
                load(t, "x[c]")
            );
            w!("    s = xt_block_reduce(s, sh, xt_op_add());");
            w!(
                "    for (long long c = t; c < cols; c += nt) y[c] = {};",
                store(t, &format!("{exp}({} - m) / s", load(t, "x[c]")))
            );
            w!("  }}");
        }
        Family::LayerNorm(t) => {
            let c = compute(t);
            let sqrt = math(c, "sqrt");
            w!("  __shared__ {c} sh[XT_MAX_BLOCK];");
            w!("  const {c} e = ({c})eps;");
            s.push_str(ROWS);
            w!("    const {}* x = in + r * cols;", ctype(t));
            w!("    {}* y = out + r * cols;", ctype(t));
            w!("    {c} s = {};", lit(c, 0.0));
            w!(
                "    for (long long c = t; c < cols; c += nt) s += {};",
                load(t, "x[c]")
            );
            w!("    const {c} mean = xt_block_reduce(s, sh, xt_op_add()) / ({c})cols;");
            w!("    {c} v = {};", lit(c, 0.0));
            w!("    for (long long c = t; c < cols; c += nt) {{");
            w!("      const {c} d = {} - mean;", load(t, "x[c]"));
            w!("      v += d * d;");
            w!("    }}");
            w!("    v = xt_block_reduce(v, sh, xt_op_add());");
            w!(
                "    const {c} rstd = {} / {sqrt}(v / ({c})cols + e);",
                lit(c, 1.0)
            );
            w!(
                "    for (long long c = t; c < cols; c += nt) y[c] = {};",
                store(
                    t,
                    &format!(
                        "({} - mean) * rstd * {} + {}",
                        load(t, "x[c]"),
                        load(t, "gamma[c]"),
                        load(t, "beta[c]")
                    )
                )
            );
            w!("  }}");
        }
        Family::Transpose(_) => {
            w!("  XT_FOR(i, rows * cols) {{");
            w!("    const long long r = i % rows, c = i / rows;");
            w!("    out[i] = in[r * cols + c];");
            w!("  }}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    #[test]
    fn every_standard_kernel_has_portable_source() {
        let lib = standard_library();
        assert_eq!(lib.len(), 247);
        // The unit compiled; the source handed to NVRTC/hipRTC is it plus its carried copy.
        let src = standard_unit();
        assert!(standard_source().starts_with(src));
        for k in lib.kernels() {
            let def = kernel_definition(&k.signature.name)
                .unwrap_or_else(|| panic!("no portable source for `{}`", k.signature.name));
            assert!(
                src.contains(&def),
                "`{}` missing from the TU",
                k.signature.name
            );
            let decl = format!("extern \"C\" __global__ void {}(", k.signature.name);
            assert_eq!(src.matches(&decl).count(), 1, "{}", k.signature.name);
        }
        assert!(kernel_definition("nope_f32").is_none());
        assert!(kernel_source("add_f32").is_some_and(|s| s.starts_with("// xthunk")));
    }

    #[test]
    fn declarations_follow_the_signatures() {
        let d = kernel_definition("layer_norm_bf16").unwrap_or_default();
        assert!(d.starts_with(
            "extern \"C\" __global__ void layer_norm_bf16(const unsigned short* in, \
             const unsigned short* gamma, const unsigned short* beta, unsigned short* out, \
             float eps, long long rows, long long cols)"
        ));
        let d = kernel_definition("axpy_f16").unwrap_or_default();
        assert!(d.starts_with(
            "extern \"C\" __global__ void axpy_f16(const unsigned short* x, unsigned short* y, \
             unsigned short alpha, long long n)"
        ));
        let d = kernel_definition("convert_i32_bf16").unwrap_or_default();
        assert!(d.contains("xt_f64_to_bf16((double)in[i])"), "{d}");
        let d = kernel_definition("iota_i8").unwrap_or_default();
        assert!(d.starts_with(
            "extern \"C\" __global__ void iota_i8(signed char* out, signed char start, \
             signed char step, long long n)"
        ));
    }

    #[test]
    fn constants_round_as_on_the_host() {
        // The prelude's gelu constants are the shortest decimals of the f32 values the host
        // uses (`0.7978845608028654 as f32`, `0.044715 as f32`).
        assert!(PRELUDE.contains(&format!("{:?}f", 0.797_884_560_802_865_4_f64 as f32)));
        assert!(PRELUDE.contains(&format!("{:?}f", 0.044715_f64 as f32)));
        assert_eq!(lit("float", 1.0), "1.0f");
        assert_eq!(lit("double", 0.5), "0.5");
    }

    #[test]
    fn module_options_shape_the_unit_and_its_stamp() {
        use crate::ir::HeaderSource;
        let code = "#include \"util.h\"\n__global__ void k(float* x) { x[0] = twice((float)N); }\n";
        let options = ModuleOptions {
            defines: vec!["N=4".into(), "FLAG".into()],
            fast_math: true,
            headers: vec![HeaderSource {
                name: "util.h".into(),
                code: "__device__ float twice(float x) { return 2.0f * x; }".into(),
            }],
        };
        let unit = module_source_with("mine", code, &options);
        assert!(fast_math(&unit) && !fast_math(&module_source("mine", code)));
        assert_eq!(module_of(&unit), Some("mine"));
        let user = unit.split_once("// ---- user source ----\n").unwrap().1;
        assert!(
            user.starts_with(
                "#define N 4\n#define FLAG 1\n#line 1 \"mine\"\n#line 1 \"util.h\"\n__device__ float twice"
            ),
            "{user}"
        );
        assert!(
            user.contains("#line 2 \"mine\"\nextern \"C\" __global__ void k("),
            "{user}"
        );
        // The stamp covers the options.
        let plain = hash::module_hash(code, &ModuleOptions::default());
        assert_eq!(plain, hash::source_hash(code));
        let with = hash::module_hash(code, &options);
        assert_ne!(with, plain);
        let mut other = options.clone();
        other.defines[0] = "N=5".into();
        assert_ne!(hash::module_hash(code, &other), with);
        assert!(unit.contains(&hash::stamp_name(&with)));
    }

    #[test]
    fn no_warp_size_literal_and_no_headers() {
        // The unit (its carried copy repeats it as a string).
        let src = standard_unit();
        assert!(!src.contains("#include"));
        // The kernels (after the prelude, which alone may use vendor names) are portable.
        let kernels = src.split_once(PRELUDE).map(|(_, k)| k).unwrap_or_default();
        assert!(kernels.len() > 10_000);
        assert_eq!(scan::vendor_constructs(kernels), []);
        for bad in ["__shfl", "% 32", "/ 32", "[32]", "< 32"] {
            assert!(!kernels.contains(bad), "source contains `{bad}`");
        }
    }
}
