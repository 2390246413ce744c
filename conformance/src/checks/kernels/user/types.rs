//! What a `kernels/user/` case is ([`Case`]): one launch, its arguments ([`Arg`]) and what its
//! outputs must hold ([`Expect`]).

use xthunk_core::ir::{DType, Scalar};

/// A launch argument.
pub(super) enum Arg {
    Buf(Vec<u8>),
    S(Scalar),
}

/// What one output buffer (argument `arg`) must hold.
pub(super) enum Expect {
    Floats {
        arg: usize,
        dtype: DType,
        values: Vec<f64>,
        tol: Vec<f64>,
        cols: usize,
    },
    Ints {
        arg: usize,
        dtype: DType,
        values: Vec<i64>,
    },
    /// A property of the raw bytes (e.g. a permutation), `Err` saying what is wrong.
    Holds { arg: usize, check: Box<Property> },
}

/// A property of an output's bytes, given every argument's bytes too.
type Property = dyn Fn(&[u8], &[Vec<u8>]) -> Result<(), String>;

/// One launch and what its outputs must hold.
pub(super) struct Case {
    pub(super) what: String,
    pub(super) kernel: &'static str,
    pub(super) grid: u32,
    pub(super) block: u32,
    pub(super) shared: u32,
    pub(super) args: Vec<Arg>,
    pub(super) expect: Vec<Expect>,
}
