//! `kernels/`: every kernel of the standard library, on fresh random inputs and poisoned
//! outputs, run through the executor as a one-kernel program built from the kernel's declared
//! signature, and compared with the f64 references of [`crate::reference`].
//!
//! Sizes: `n` ∈ {1, 1007} for elementwise kernels; `rows × cols` ∈ {1×1, 33×65, 2×1007} for
//! row kernels, plus 3×0 (empty rows) for reductions.
//!
//! Tolerances (see [`crate::util`] for the base table): integers, conversions, fills,
//! transposes and maxima exactly; arithmetic at [`Tol::of`]; transcendentals at
//! [`Tol::transcendental`]; with these extra absolute terms, `ε` the compute type's epsilon
//! (f32 for f16/bf16/f32): iota `2ε(|start| + i|step|)`, axpy `2ε(|αx| + |y|)`, gelu `4ε|x|`
//! (cancellation of `1 + tanh` for negative x), row sums `cols·ε·Σ|x|` (mean: divided by
//! cols), softmax `cols·ε·|expected|` (and every row sums to 1 within `2u + 2·cols·ε`, u the
//! output's unit roundoff), layer norm `4(cols+2)ε(|γ|·max|z| + |β|)` per row.

use super::seed::seeded;
use crate::check::Check;
use crate::reference::{self, BinaryOp, KernelId, Op, UnaryOp};
use crate::util::{
    CheckResult, CheckRng, Tol, Values, compare_floats, compare_ints, compute_eps, decode, encode,
    ensure, fail, log_uniform, poison_byte, random_ints, run_program, scalar_f, scalar_i,
    sprinkle_nan, uniform, uniform_signed, unit_roundoff,
};

mod case;
mod training;
mod user;
use case::{Case, Shape, no_reference, unary_tol};
use rand::Rng;
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{Access, DType, KernelArg, Module, Scalar};
use xthunk_core::kernels::{Extent, KernelSignature, ParamKind, standard_library};

pub fn checks() -> Vec<Check> {
    let mut v = vec![seeded("kernels/coverage", coverage)];
    v.extend(standard_checks(None));
    v.push(seeded("kernels/in_place_add_f32", |d, r| {
        in_place(d, r, "add_f32")
    }));
    v.push(seeded("kernels/in_place_gelu_bf16", |d, r| {
        in_place(d, r, "gelu_bf16")
    }));
    v.push(seeded("kernels/in_place_softmax_f32", |d, r| {
        in_place(d, r, "softmax_f32")
    }));
    v.extend(user::checks());
    v.extend(user::cuda_checks());
    v
}

/// The check of every standard kernel (`kernels/<name>`), on the standard library of the
/// device (`None`) or on `module`, a module defining the standard kernels.
fn standard_checks(module: Option<Arc<Module>>) -> Vec<Check> {
    standard_library()
        .kernels()
        .map(|k| {
            let name = k.signature.name.clone();
            let m = module.clone();
            seeded(format!("kernels/{name}"), move |d, rng| {
                kernel_check(d, rng, &name, m.as_deref())
            })
        })
        .collect()
}

/// The `kernels/<name>` checks of the standard kernels run on `module` in place of the
/// device's standard library: e.g. images of it compiled ahead of time, or a deliberately
/// broken copy of its source, to show that the checks catch it.
pub fn standard_kernel_checks(module: Module) -> Vec<Check> {
    standard_checks(Some(Arc::new(module)))
}

pub use user::{
    checks_of as user_kernel_checks, cuda as cuda_kernels, cuda_checks as cuda_kernel_checks,
    module as user_kernels_module,
};

fn shapes(op: Op) -> Vec<Shape> {
    if op.is_row() {
        let mut v = vec![Shape::Rows(1, 1), Shape::Rows(33, 65), Shape::Rows(2, 1007)];
        if matches!(op, Op::ReduceSum | Op::ReduceMax | Op::ReduceMean) {
            v.push(Shape::Rows(3, 0));
        }
        v
    } else {
        vec![Shape::N(1), Shape::N(1007)]
    }
}

/// Random inputs of a float unary op, in its domain.
fn unary_inputs(rng: &mut CheckRng, op: UnaryOp, t: DType, n: usize) -> Vec<f64> {
    let mut x = match op {
        UnaryOp::Neg | UnaryOp::Abs => uniform(rng, t, n, -100.0, 100.0),
        UnaryOp::Relu => uniform(rng, t, n, -10.0, 10.0),
        UnaryOp::Exp => uniform(rng, t, n, -8.0, 8.0),
        UnaryOp::Log | UnaryOp::Rsqrt => uniform(rng, t, n, 0.01, 100.0),
        UnaryOp::Sqrt => uniform(rng, t, n, 0.0, 100.0),
        UnaryOp::Tanh | UnaryOp::Gelu | UnaryOp::GeluErf => uniform(rng, t, n, -5.0, 5.0),
        UnaryOp::Sigmoid => uniform(rng, t, n, -10.0, 10.0),
    };
    if op == UnaryOp::Relu {
        // Documented: NaN -> 0.
        sprinkle_nan(rng, &mut x, 32);
    }
    x
}

/// Random inputs `(a, b)` of a float binary op.
fn binary_inputs(
    rng: &mut CheckRng,
    op: BinaryOp,
    t: DType,
    na: usize,
    nb: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut a = uniform(rng, t, na, -10.0, 10.0);
    let mut b = match op {
        BinaryOp::Div => uniform_signed(rng, t, nb, 0.5, 4.0),
        _ => uniform(rng, t, nb, -10.0, 10.0),
    };
    if matches!(op, BinaryOp::Max | BinaryOp::Min) {
        // Documented: fmax/fmin return the other operand when one is NaN.
        sprinkle_nan(rng, &mut a, 16);
        sprinkle_nan(rng, &mut b, 16);
    }
    (a, b)
}

fn elementwise_tol(t: DType, exp: &[f64]) -> Vec<f64> {
    let base = Tol::of(t);
    exp.iter().map(|&e| base.bound(e)).collect()
}

/// Builds inputs and expected outputs of kernel `id` at `shape`.
fn make_case(rng: &mut CheckRng, id: &KernelId, shape: Shape) -> CheckResult<Case> {
    let t = id.dtype;
    let mut c = Case::new(shape);
    let (n, rows, cols) = match shape {
        Shape::N(n) => (n, 1, n),
        Shape::Rows(r, cl) => (r * cl, r, cl),
    };
    let row_cols = if id.op.is_row() { cols } else { 0 };
    let eps = compute_eps(t);
    match id.op {
        Op::Fill => {
            if t.is_float() {
                let v = uniform(rng, t, 1, -100.0, 100.0)[0];
                c.scalars.push(("value", scalar_f(t, v)));
                c.exact("out", Values::F(vec![v; n]), 0);
            } else {
                let v = random_ints(rng, t, 1)[0];
                c.scalars.push(("value", scalar_i(t, v)));
                c.exact("out", Values::I(vec![v; n]), 0);
            }
        }
        Op::Iota => {
            if t.is_float() {
                let start = uniform(rng, t, 1, -10.0, 10.0)[0];
                let step = uniform(rng, t, 1, -1.0, 1.0)[0];
                c.scalars.push(("start", scalar_f(t, start)));
                c.scalars.push(("step", scalar_f(t, step)));
                let exp: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
                let base = Tol::of(t);
                let tol = exp
                    .iter()
                    .enumerate()
                    .map(|(i, &e)| {
                        base.bound(e) + 2.0 * eps * (start.abs() + i as f64 * step.abs())
                    })
                    .collect();
                c.floats("out", exp, tol, 0);
            } else {
                let start = random_ints(rng, t, 1)[0];
                let step = random_ints(rng, t, 1)[0];
                c.scalars.push(("start", scalar_i(t, start)));
                c.scalars.push(("step", scalar_i(t, step)));
                let exp = (0..n)
                    .map(|i| crate::util::wrap_int(t, start as i128 + i as i128 * step as i128))
                    .collect();
                c.exact("out", Values::I(exp), 0);
            }
        }
        Op::Convert(from) => {
            let input = if from.is_float() {
                let mut x = log_uniform(rng, from, n, -30, 34);
                // Special values: NaN, ±inf, saturation, ties, small integers.
                let specials = [
                    f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    3e9,
                    -3e9,
                    2.5,
                    -2.5,
                    -0.75,
                    0.0,
                    65519.0,
                    65520.0,
                    1.0 + 2f64.powi(-11),
                ];
                for (xi, s) in x.iter_mut().step_by(7).zip(specials) {
                    *xi = crate::util::round_to(from, s);
                }
                Values::F(x)
            } else if from == DType::I32 {
                let mut x = random_ints(rng, DType::I32, n);
                // Half of them in f16's range.
                for xi in x.iter_mut().skip(1).step_by(2) {
                    *xi = rng.random_range(-70_000..70_000);
                }
                Values::I(x)
            } else {
                return Err(no_reference(id));
            };
            let exp = match (&input, t) {
                (Values::F(x), DType::I32) => {
                    Values::I(x.iter().map(|&v| reference::float_to_i32(v)).collect())
                }
                (Values::F(x), to) if to.is_float() => {
                    Values::F(x.iter().map(|&v| crate::util::round_to(to, v)).collect())
                }
                (Values::I(x), to) if to.is_float() => Values::F(
                    x.iter()
                        .map(|&v| crate::util::round_to(to, v as f64))
                        .collect(),
                ),
                _ => return Err(no_reference(id)),
            };
            c.inputs.push(("in", input));
            c.exact("out", exp, 0);
        }
        Op::Unary(op) => {
            if t.is_float() {
                let x = unary_inputs(rng, op, t, n);
                let exp: Vec<f64> = x.iter().map(|&v| reference::unary_f(op, v)).collect();
                let tol = unary_tol(op, t, &x, &exp);
                c.inputs.push(("in", Values::F(x)));
                c.floats("out", exp, tol, 0);
            } else if op.has_int() && t != DType::U8 {
                let x = random_ints(rng, t, n);
                let exp = x
                    .iter()
                    .map(|&v| reference::unary_i(op, t, v).ok_or_else(|| no_reference(id)))
                    .collect::<CheckResult<Vec<i64>>>()?;
                c.inputs.push(("in", Values::I(x)));
                c.exact("out", Values::I(exp), 0);
            } else {
                return Err(no_reference(id));
            }
        }
        Op::Binary(op) | Op::BinaryRow(op) => {
            let row = matches!(id.op, Op::BinaryRow(_));
            let nb = if row { cols } else { n };
            let bidx = |i: usize| if row { i % cols.max(1) } else { i };
            if t.is_float() {
                let (a, b) = binary_inputs(rng, op, t, n, nb);
                let exp: Vec<f64> = (0..n)
                    .map(|i| reference::binary_f(op, a[i], b[bidx(i)]))
                    .collect();
                let tol = elementwise_tol(t, &exp);
                c.inputs.push(("a", Values::F(a)));
                c.inputs.push(("b", Values::F(b)));
                c.floats("out", exp, tol, row_cols);
            } else {
                let a = random_ints(rng, t, n);
                let b = random_ints(rng, t, nb);
                let exp = (0..n)
                    .map(|i| reference::binary_i(op, t, a[i], b[bidx(i)]))
                    .collect();
                c.inputs.push(("a", Values::I(a)));
                c.inputs.push(("b", Values::I(b)));
                c.exact("out", Values::I(exp), row_cols);
            }
        }
        Op::Axpy => {
            if !t.is_float() {
                return Err(no_reference(id));
            }
            let x = uniform(rng, t, n, -10.0, 10.0);
            let y = uniform(rng, t, n, -10.0, 10.0);
            let alpha = uniform(rng, t, 1, -2.0, 2.0)[0];
            let exp: Vec<f64> = x.iter().zip(&y).map(|(a, b)| alpha * a + b).collect();
            let base = Tol::of(t);
            let tol = (0..n)
                .map(|i| base.bound(exp[i]) + 2.0 * eps * ((alpha * x[i]).abs() + y[i].abs()))
                .collect();
            c.scalars.push(("alpha", scalar_f(t, alpha)));
            c.inputs.push(("x", Values::F(x)));
            c.inputs.push(("y", Values::F(y)));
            c.floats("y", exp, tol, 0);
        }
        Op::Scale => {
            if !t.is_float() {
                return Err(no_reference(id));
            }
            let x = uniform(rng, t, n, -10.0, 10.0);
            let alpha = uniform(rng, t, 1, -2.0, 2.0)[0];
            let exp: Vec<f64> = x.iter().map(|v| alpha * v).collect();
            let tol = elementwise_tol(t, &exp);
            c.scalars.push(("alpha", scalar_f(t, alpha)));
            c.inputs.push(("x", Values::F(x)));
            c.floats("x", exp, tol, 0);
        }
        Op::ReduceSum | Op::ReduceMean => {
            let mean = id.op == Op::ReduceMean;
            if t.is_float() {
                let x = uniform(rng, t, n, -10.0, 10.0);
                let sums = reference::row_sums(&x, rows, cols);
                let abs: Vec<f64> = (0..rows)
                    .map(|r| x[r * cols..(r + 1) * cols].iter().map(|v| v.abs()).sum())
                    .collect();
                let div = if mean { cols as f64 } else { 1.0 };
                let exp: Vec<f64> = sums.iter().map(|s| s / div).collect();
                let base = Tol::of(t);
                let tol = (0..rows)
                    .map(|r| base.bound(exp[r]) + cols as f64 * eps * abs[r] / div)
                    .collect();
                c.inputs.push(("in", Values::F(x)));
                c.floats("out", exp, tol, 0);
            } else if !mean && matches!(t, DType::I32 | DType::I64) {
                let x = random_ints(rng, t, n);
                let exp = reference::row_sums_i(t, &x, rows, cols);
                c.inputs.push(("in", Values::I(x)));
                c.exact("out", Values::I(exp), 0);
            } else {
                return Err(no_reference(id));
            }
        }
        Op::ReduceMax => {
            if t.is_float() {
                let mut x = uniform(rng, t, n, -100.0, 100.0);
                // A NaN in some rows (never a whole row): fmax skips it.
                if cols >= 2 {
                    for r in (0..rows).step_by(3) {
                        x[r * cols + rng.random_range(0..cols)] = f64::NAN;
                    }
                }
                let exp = reference::row_max_f(&x, rows, cols);
                c.inputs.push(("in", Values::F(x)));
                c.exact("out", Values::F(exp), 0);
            } else {
                let x = random_ints(rng, t, n);
                let exp = reference::row_max_i(&x, rows, cols, crate::util::int_range(t).0);
                c.inputs.push(("in", Values::I(x)));
                c.exact("out", Values::I(exp), 0);
            }
        }
        Op::Softmax => {
            if !t.is_float() {
                return Err(no_reference(id));
            }
            let x = uniform(rng, t, n, -5.0, 5.0);
            let exp = reference::softmax(&x, rows, cols);
            let base = Tol::transcendental(t);
            let tol = exp
                .iter()
                .map(|&e| base.bound(e) + cols as f64 * eps * e.abs())
                .collect();
            c.inputs.push(("in", Values::F(x)));
            c.floats("out", exp, tol, cols);
            c.row_sums_one = Some((
                rows,
                cols,
                2.0 * unit_roundoff(t) + 2.0 * cols as f64 * eps + 1e-15,
            ));
        }
        Op::LayerNorm => {
            if !t.is_float() {
                return Err(no_reference(id));
            }
            let mut x = uniform(rng, t, n, -3.0, 3.0);
            // Rows with an offset mean.
            for r in (1..rows).step_by(2) {
                let off = rng.random_range(-4.0..4.0);
                for v in &mut x[r * cols..(r + 1) * cols] {
                    *v = crate::util::round_to(t, *v + off);
                }
            }
            let gamma = uniform(rng, t, cols, -2.0, 2.0);
            let beta = uniform(rng, t, cols, -1.0, 1.0);
            let eps_ln = 1e-5f32;
            let (exp, zmax) = reference::layer_norm(&x, &gamma, &beta, eps_ln as f64, rows, cols);
            let base = Tol::transcendental(t);
            let tol = (0..n)
                .map(|i| {
                    let (r, cc) = (i / cols, i % cols);
                    base.bound(exp[i])
                        + 4.0
                            * (cols as f64 + 2.0)
                            * eps
                            * (gamma[cc].abs() * zmax[r] + beta[cc].abs())
                })
                .collect();
            c.scalars.push(("eps", Scalar::F32(eps_ln)));
            c.inputs.push(("in", Values::F(x)));
            c.inputs.push(("gamma", Values::F(gamma)));
            c.inputs.push(("beta", Values::F(beta)));
            c.floats("out", exp, tol, cols);
        }
        Op::BiasUnary(_) | Op::CrossEntropy | Op::AdamW | Op::Embedding => {
            return training::make_case(rng, id, shape);
        }
        Op::Transpose => {
            // Output is cols × rows.
            if t.is_float() {
                let x = uniform(rng, t, n, -100.0, 100.0);
                let exp = reference::transpose(&x, rows, cols);
                c.inputs.push(("in", Values::F(x)));
                c.exact("out", Values::F(exp), rows);
            } else {
                let x = random_ints(rng, t, n);
                let exp = reference::transpose(&x, rows, cols);
                c.inputs.push(("in", Values::I(x)));
                c.exact("out", Values::I(exp), rows);
            }
        }
    }
    Ok(c)
}

/// Element count of a buffer parameter, from the case's immediates.
fn extent(sig: &KernelSignature, elems: &Extent, case: &Case) -> CheckResult<usize> {
    match elems {
        Extent::Fixed(n) => Ok(*n as usize),
        Extent::Product(idx) => {
            let mut count = 1usize;
            for &j in idx {
                let p = sig
                    .params
                    .get(j)
                    .ok_or_else(|| fail(format!("`{}`: extent names parameter {j}", sig.name)))?;
                let v = case
                    .scalar(p.name)
                    .and_then(|s| s.as_i64())
                    .ok_or_else(|| {
                        fail(format!(
                            "`{}`: the reference sets no integer `{}`",
                            sig.name, p.name
                        ))
                    })?;
                count *= v as usize;
            }
            Ok(count)
        }
    }
}

/// The program of a case: one kernel whose read buffers are parameters, written buffers
/// outputs, and read-write buffers outputs initialised by a copy from a parameter `<name>_in`.
/// Returns the executable, the parameter bytes, and per output (name, dtype, byte size).
#[allow(clippy::type_complexity)]
fn build(
    sig: &KernelSignature,
    case: &Case,
    module: Option<&Module>,
) -> CheckResult<(
    xthunk_core::ir::Executable,
    Vec<Vec<u8>>,
    Vec<(&'static str, DType, usize)>,
)> {
    let mut b = ExecutableBuilder::new(format!("conformance_{}", sig.name));
    let module = match module {
        Some(m) => b.module(m.clone()),
        None => b.standard_module(),
    };
    let mut args = Vec::new();
    let mut params = Vec::new();
    let mut outputs = Vec::new();
    let mut threads = 1u64;
    for p in &sig.params {
        match &p.kind {
            ParamKind::Scalar(dt) => {
                let s = case.scalar(p.name).ok_or_else(|| {
                    fail(format!(
                        "`{}`: the reference sets no immediate `{}`",
                        sig.name, p.name
                    ))
                })?;
                ensure(s.dtype() == *dt, || {
                    format!(
                        "`{}`: immediate `{}` is {} in the reference, {} in the signature",
                        sig.name,
                        p.name,
                        s.dtype(),
                        dt
                    )
                })?;
                args.push(KernelArg::Scalar(s));
            }
            ParamKind::Buffer {
                dtype,
                access,
                elems,
            } => {
                let count = extent(sig, elems, case)?;
                threads = threads.max(count as u64);
                let input = |name: &str| -> CheckResult<Vec<u8>> {
                    let v = case.input(name).ok_or_else(|| {
                        fail(format!(
                            "`{}`: the reference provides no input `{name}`",
                            sig.name
                        ))
                    })?;
                    ensure(v.len() == count, || {
                        format!(
                            "`{}`: input `{name}` has {} elements, the signature {count}",
                            sig.name,
                            v.len()
                        )
                    })?;
                    encode(*dtype, v)
                };
                match access {
                    Access::Read => {
                        params.push(input(p.name)?);
                        args.push(b.parameter(p.name, *dtype, &[count as u64]).r());
                    }
                    Access::Write => {
                        outputs.push((p.name, *dtype, count * dtype.size()));
                        args.push(b.output(p.name, *dtype, &[count as u64]).w());
                    }
                    Access::ReadWrite => {
                        params.push(input(p.name)?);
                        let pin = b.parameter(&format!("{}_in", p.name), *dtype, &[count as u64]);
                        let out = b.output(p.name, *dtype, &[count as u64]);
                        b.copy(pin.slice(), out.slice());
                        outputs.push((p.name, *dtype, count * dtype.size()));
                        args.push(out.rw());
                    }
                }
            }
        }
    }
    b.kernel(&module, &sig.name, threads, args);
    let exe = b.build().map_err(xthunk_core::Error::from)?;
    Ok((exe, params, outputs))
}

/// Runs a case and compares every output.
fn run_case(
    device: &Arc<dyn Device>,
    sig: &KernelSignature,
    case: &Case,
    what: &str,
    module: Option<&Module>,
) -> CheckResult {
    let (exe, params, outputs) = build(sig, case, module)?;
    let init: Vec<Vec<u8>> = outputs
        .iter()
        .map(|(_, dt, size)| vec![poison_byte(*dt); *size])
        .collect();
    let got = run_program(device, exe, &params, &init)?;
    for e in &case.expect {
        let Some(i) = outputs.iter().position(|(n, _, _)| *n == e.param) else {
            return Err(fail(format!(
                "{what}: the reference expects output `{}`, the signature has no such written buffer",
                e.param
            )));
        };
        let (_, dt, _) = outputs[i];
        let values = decode(dt, &got[i]);
        let label = format!("{what}: `{}`", e.param);
        match (&values, &e.values) {
            (Values::F(g), Values::F(x)) => compare_floats(&label, g, x, e.cols, |j| e.tol[j])?,
            (Values::I(g), Values::I(x)) => compare_ints(&label, g, x, e.cols)?,
            _ => {
                return Err(fail(format!(
                    "{label}: output is {dt}, the reference has the other kind of values"
                )));
            }
        }
        if let (Some((rows, cols, tol)), Values::F(g)) = (case.row_sums_one, &values) {
            for r in 0..rows {
                let s: f64 = g[r * cols..(r + 1) * cols].iter().sum();
                ensure((s - 1.0).abs() <= tol || cols == 0, || {
                    format!(
                        "{label}: row {r} sums to {s:e}, not 1 (|diff| {:e} > {tol:e})",
                        (s - 1.0).abs()
                    )
                })?;
            }
        }
    }
    Ok(())
}

fn kernel_check(
    device: &Arc<dyn Device>,
    rng: &mut CheckRng,
    name: &str,
    module: Option<&Module>,
) -> CheckResult {
    let Some(k) = standard_library().get(name) else {
        return Err(fail(format!("`{name}` is not in the standard library")));
    };
    let Some(id) = reference::parse_kernel_name(name) else {
        return Err(fail(format!("no reference for `{name}`")));
    };
    for shape in shapes(id.op) {
        let case = make_case(rng, &id, shape)?;
        run_case(
            device,
            &k.signature,
            &case,
            &format!("{name} {}", shape.describe()),
            module,
        )?;
    }
    Ok(())
}

/// Every kernel of the library has a reference whose inputs, immediates and outputs match its
/// declared signature.
fn coverage(_device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let lib = standard_library();
    ensure(!lib.is_empty(), || "the standard library is empty".into())?;
    let mut missing = Vec::new();
    for k in lib.kernels() {
        let name = &k.signature.name;
        let ok = reference::parse_kernel_name(name)
            .ok_or_else(|| fail("unknown name"))
            .and_then(|id| {
                let shape = shapes(id.op)[0];
                let case = make_case(rng, &id, shape)?;
                build(&k.signature, &case, None).map(|_| ())
            });
        if let Err(e) = ok {
            missing.push(format!("{name} ({e})"));
        }
    }
    ensure(missing.is_empty(), || {
        format!(
            "{} of {} kernels have no matching reference: {}",
            missing.len(),
            lib.len(),
            missing.join("; ")
        )
    })
}

/// In-place launches (an output starting at the same address as an input of the same element
/// size) give the same result as separate buffers.
fn in_place(device: &Arc<dyn Device>, rng: &mut CheckRng, kernel: &str) -> CheckResult {
    let Some(id) = reference::parse_kernel_name(kernel) else {
        return Err(fail(format!("no reference for `{kernel}`")));
    };
    let t = id.dtype;
    let (rows, cols) = (7usize, 129usize);
    let n = rows * cols;
    let mut b = ExecutableBuilder::new(format!("conformance_in_place_{kernel}"));
    let m = b.standard_module();
    let x_in = b.parameter("x_in", t, &[n as u64]);
    let y = b.output("y", t, &[n as u64]);
    b.copy(x_in.slice(), y.slice());
    let (params, exp, tol) = match id.op {
        Op::Binary(op) => {
            let (a, bv) = binary_inputs(rng, op, t, n, n);
            let other = b.parameter("b", t, &[n as u64]);
            b.kernel(
                &m,
                kernel,
                n as u64,
                vec![y.r(), other.r(), y.w(), (n as i64).into()],
            );
            let exp: Vec<f64> = (0..n)
                .map(|i| reference::binary_f(op, a[i], bv[i]))
                .collect();
            let tol = elementwise_tol(t, &exp);
            (
                vec![encode(t, &Values::F(a))?, encode(t, &Values::F(bv))?],
                exp,
                tol,
            )
        }
        Op::Unary(op) => {
            let x = unary_inputs(rng, op, t, n);
            b.kernel(&m, kernel, n as u64, vec![y.r(), y.w(), (n as i64).into()]);
            let exp: Vec<f64> = x.iter().map(|&v| reference::unary_f(op, v)).collect();
            let tol = unary_tol(op, t, &x, &exp);
            (vec![encode(t, &Values::F(x))?], exp, tol)
        }
        Op::Softmax => {
            let x = uniform(rng, t, n, -5.0, 5.0);
            b.kernel(
                &m,
                kernel,
                n as u64,
                vec![y.r(), y.w(), (rows as i64).into(), (cols as i64).into()],
            );
            let exp = reference::softmax(&x, rows, cols);
            let base = Tol::transcendental(t);
            let eps = compute_eps(t);
            let tol = exp
                .iter()
                .map(|&e| base.bound(e) + cols as f64 * eps * e)
                .collect();
            (vec![encode(t, &Values::F(x))?], exp, tol)
        }
        _ => return Err(no_reference(&id)),
    };
    let exe = b.build().map_err(xthunk_core::Error::from)?;
    let out = run_program(device, exe, &params, &[vec![poison_byte(t); n * t.size()]])?;
    let got = decode(t, &out[0]);
    compare_floats(
        &format!("{kernel} in place"),
        got.floats("y")?,
        &exp,
        0,
        |i| tol[i],
    )
}
