//! Adding `fft` (over trailing dimensions), `cholesky` and `triangular_solve` (over batches
//! of matrices in the last two dimensions) to a [`Graph`].

use super::build::R;
use super::ops::{FftType, Op};
use super::{Graph, TensorType, Value};
use crate::error::{GraphError, invalid};
use xthunk_core::ir::DType;

/// The batch dimensions and the two matrix dimensions of a float tensor of rank >= 2.
fn matrices(op: &'static str, t: &TensorType) -> R<(Vec<u64>, u64, u64)> {
    if !t.dtype.is_float() {
        return Err(invalid(op, format!("elements of type {}", t.dtype)));
    }
    let r = t.rank();
    if r < 2 {
        return Err(invalid(op, format!("{t}: rank 2 or more expected")));
    }
    Ok((t.dims[..r - 2].to_vec(), t.dims[r - 2], t.dims[r - 1]))
}

impl Graph {
    /// `rng_bit_generator(state)` with results (the new state, bits of `dtype` and `dims`):
    /// `state` is u64 of 2 words (3 allowed for Philox); `dtype` an integer or float type of
    /// 8 to 64 bits.
    pub fn rng_bit_generator(
        &mut self,
        state: Value,
        algorithm: super::RngAlgorithm,
        dtype: DType,
        dims: &[u64],
    ) -> R<Vec<Value>> {
        let op = "rng_bit_generator";
        let t = self.check(op, state)?.clone();
        let words = match algorithm {
            super::RngAlgorithm::ThreeFry => &[2u64][..],
            super::RngAlgorithm::Philox => &[2, 3][..],
        };
        if t.dtype != DType::U64 || t.rank() != 1 || !words.contains(&t.dims[0]) {
            return Err(invalid(
                op,
                format!("initial state {t}: ui64 of {words:?} words expected for {algorithm:?}"),
            ));
        }
        if dtype == DType::Pred {
            return Err(invalid(op, "pred results"));
        }
        self.add(
            Op::RngBitGenerator { algorithm },
            vec![state],
            vec![t, TensorType::new(dtype, dims)],
        )
    }

    /// `rng`: numbers of type `dtype` and shape `dims` drawn from `distribution` with the
    /// scalar parameters `a` and `b` (of that type; see [`Op::Rng`]).
    pub fn rng(
        &mut self,
        a: Value,
        b: Value,
        distribution: super::RngDistribution,
        dims: &[u64],
    ) -> R<Value> {
        let op = "rng";
        let ta = self.check(op, a)?.clone();
        let tb = self.check(op, b)?.clone();
        if ta.rank() != 0 || tb.rank() != 0 || ta.dtype != tb.dtype {
            return Err(invalid(
                op,
                format!("a {ta} and b {tb}: scalars of one type expected"),
            ));
        }
        if ta.dtype.is_complex() || ta.dtype.is_f8() {
            return Err(GraphError::Unsupported {
                op,
                reason: format!("elements of type {}", ta.dtype),
            });
        }
        if distribution == super::RngDistribution::Normal && !ta.dtype.is_float() {
            return Err(invalid(
                op,
                format!("NORMAL draws floating-point numbers, not {}", ta.dtype),
            ));
        }
        Ok(self.add(
            Op::Rng { distribution },
            vec![a, b],
            vec![TensorType::new(ta.dtype, dims)],
        )?[0])
    }

    /// `fft` of `x` over its trailing `lengths.len()` dimensions (1 to 3, each at least 1);
    /// see [`FftType`] for the types and shapes.
    pub fn fft(&mut self, x: Value, kind: FftType, lengths: &[u64]) -> R<Value> {
        let op = "fft";
        let t = self.check(op, x)?.clone();
        let l = lengths.len();
        if !(1..=3).contains(&l) || t.rank() < l || lengths.contains(&0) {
            return Err(invalid(
                op,
                format!(
                    "fft_length {lengths:?} for {t} (1 to 3 positive lengths, at most its rank)"
                ),
            ));
        }
        let lead = t.rank() - l;
        let n_last = lengths[l - 1];
        let half = n_last / 2 + 1;
        let mut want = lengths.to_vec();
        let mut dims = t.dims.clone();
        let dtype = match kind {
            FftType::Fft | FftType::Ifft if t.dtype.is_complex() => t.dtype,
            FftType::Rfft if matches!(t.dtype, DType::F32 | DType::F64) => {
                dims[t.rank() - 1] = half;
                t.dtype.complex_of().unwrap_or(t.dtype)
            }
            FftType::Irfft if t.dtype.is_complex() => {
                want[l - 1] = half;
                dims[t.rank() - 1] = n_last;
                t.dtype.complex_part().unwrap_or(t.dtype)
            }
            _ => {
                return Err(invalid(
                    op,
                    format!("{kind:?} of elements of type {}", t.dtype),
                ));
            }
        };
        if t.dims[lead..] != want[..] {
            return Err(invalid(
                op,
                format!(
                    "{kind:?} with fft_length {lengths:?}: the operand {t} must end in {want:?}"
                ),
            ));
        }
        self.add(
            Op::Fft {
                kind,
                lengths: lengths.to_vec(),
            },
            vec![x],
            vec![TensorType::new(dtype, &dims)],
        )?
        .first()
        .copied()
        .ok_or_else(|| invalid(op, "no result"))
    }

    /// `cholesky` of `a` (square matrices in the last two dimensions); see
    /// [`Op::Cholesky`]. With `lapack`, a second result: i32 `info` per matrix.
    pub fn cholesky(&mut self, a: Value, lower: bool, lapack: bool) -> R<Vec<Value>> {
        let op = "cholesky";
        let t = self.check(op, a)?.clone();
        let (batch, m, n) = matrices(op, &t)?;
        if m != n {
            return Err(invalid(op, format!("{t}: square matrices expected")));
        }
        let mut results = vec![t.clone()];
        if lapack {
            results.push(TensorType::new(DType::I32, &batch));
        }
        self.add(Op::Cholesky { lower, lapack }, vec![a], results)
    }

    /// `triangular_solve(a, b)`; see [`Op::TriangularSolve`].
    pub fn triangular_solve(
        &mut self,
        a: Value,
        b: Value,
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: bool,
    ) -> R<Value> {
        let op = "triangular_solve";
        let ta = self.check(op, a)?.clone();
        let tb = self.check(op, b)?.clone();
        let (batch_a, m, n) = matrices(op, &ta)?;
        let (batch_b, rows, cols) = matrices(op, &tb)?;
        if m != n {
            return Err(invalid(op, format!("a {ta}: square matrices expected")));
        }
        let side = if left_side { rows } else { cols };
        if ta.dtype != tb.dtype || batch_a != batch_b || side != m {
            return Err(invalid(
                op,
                format!(
                    "a {ta} and b {tb}: one element type, the same batch dimensions, and b's \
                     {} dimension equal to a's",
                    if left_side { "row" } else { "column" }
                ),
            ));
        }
        self.add1(
            Op::TriangularSolve {
                left_side,
                lower,
                unit_diagonal,
                transpose_a,
            },
            vec![a, b],
            tb,
        )
    }
}
