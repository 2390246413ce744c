//! One kernel run of the `kernels/` checks ([`Case`]): its problem size ([`Shape`]), inputs,
//! immediates and expected outputs with their tolerances ([`Expect`], [`unary_tol`]).

use crate::failure::CheckFailure;
use crate::reference::{KernelId, UnaryOp};
use crate::util::{Tol, Values, compute_eps, fail};
use xthunk_core::ir::{DType, Scalar};

/// One kernel problem size.
#[derive(Clone, Copy, Debug)]
pub(super) enum Shape {
    N(usize),
    Rows(usize, usize),
}

impl Shape {
    pub(super) fn describe(&self) -> String {
        match self {
            Shape::N(n) => format!("n={n}"),
            Shape::Rows(r, c) => format!("{r}x{c}"),
        }
    }
}

/// What one output must hold.
pub(super) struct Expect {
    pub(super) param: &'static str,
    pub(super) values: Values,
    /// Absolute tolerance per element (floats only; integers are exact).
    pub(super) tol: Vec<f64>,
    /// Columns, for messages (0 for 1-D).
    pub(super) cols: usize,
}

/// Inputs, immediates and expected outputs of one kernel run.
pub(super) struct Case {
    pub(super) inputs: Vec<(&'static str, Values)>,
    pub(super) scalars: Vec<(&'static str, Scalar)>,
    pub(super) expect: Vec<Expect>,
    /// Softmax: `(rows, cols, tolerance)` of the rows-sum-to-one check.
    pub(super) row_sums_one: Option<(usize, usize, f64)>,
}

impl Case {
    pub(super) fn new(shape: Shape) -> Case {
        let scalars = match shape {
            Shape::N(n) => vec![("n", Scalar::I64(n as i64))],
            Shape::Rows(r, c) => vec![
                ("rows", Scalar::I64(r as i64)),
                ("cols", Scalar::I64(c as i64)),
            ],
        };
        Case {
            inputs: vec![],
            scalars,
            expect: vec![],
            row_sums_one: None,
        }
    }

    pub(super) fn input(&self, name: &str) -> Option<&Values> {
        self.inputs.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub(super) fn scalar(&self, name: &str) -> Option<Scalar> {
        self.scalars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
    }

    pub(super) fn exact(&mut self, param: &'static str, values: Values, cols: usize) {
        let tol = vec![0.0; values.len()];
        self.expect.push(Expect {
            param,
            values,
            tol,
            cols,
        });
    }

    pub(super) fn floats(
        &mut self,
        param: &'static str,
        values: Vec<f64>,
        tol: Vec<f64>,
        cols: usize,
    ) {
        self.expect.push(Expect {
            param,
            values: Values::F(values),
            tol,
            cols,
        });
    }
}

pub(super) fn no_reference(id: &KernelId) -> CheckFailure {
    fail(format!(
        "no reference for {:?} on {} (the conformance suite needs one)",
        id.op, id.dtype
    ))
}

pub(super) fn unary_tol(op: UnaryOp, t: DType, x: &[f64], exp: &[f64]) -> Vec<f64> {
    let base = if op.transcendental() {
        Tol::transcendental(t)
    } else {
        Tol::of(t)
    };
    let eps = compute_eps(t);
    exp.iter()
        .zip(x)
        .map(|(&e, &xi)| {
            base.bound(e)
                + if matches!(op, UnaryOp::Gelu | UnaryOp::GeluErf) {
                    4.0 * eps * xi.abs()
                } else {
                    0.0
                }
        })
        .collect()
}
