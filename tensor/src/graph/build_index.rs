//! Adding the indexing ops to a [`Graph`]: `gather` and `scatter`, with StableHLO's rules
//! for their dimension numbers checked when they are added.

use super::build::{R, distinct_in};
use super::ops::{GatherDims, Op, ScatterDims, is_int};
use super::{Graph, TensorType, Value};
use crate::error::invalid;

fn sorted_unique(v: &[usize]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

impl Graph {
    /// `gather` (StableHLO's rules C1–C23): slices of `slice_sizes` of `operand` at the
    /// starts `start_indices` holds (clamped into range).
    pub fn gather(
        &mut self,
        operand: Value,
        start_indices: Value,
        d: GatherDims,
        slice_sizes: &[u64],
    ) -> R<Value> {
        let op = "gather";
        let t = self.check(op, operand)?.clone();
        let si = self.check(op, start_indices)?.clone();
        let bad = |m: &str| {
            Err(invalid(
                op,
                format!(
                    "{m} ({d:?}, slice sizes {slice_sizes:?}, operand {t}, start indices {si})"
                ),
            ))
        };
        let (r, sr, ivd) = (t.rank(), si.rank(), d.index_vector_dim);
        if !is_int(si.dtype) || ivd > sr || slice_sizes.len() != r {
            return bad(
                "integer start indices, index_vector_dim within their rank, a slice size per operand dimension",
            );
        }
        if r != d.offset_dims.len() + d.collapsed_slice_dims.len() + d.operand_batching_dims.len() {
            return bad("the operand's rank must be offset + collapsed + batching dimensions");
        }
        let vector = if ivd < sr { si.dims[ivd] } else { 1 };
        if d.start_index_map.len() as u64 != vector {
            return bad("start_index_map must have one entry per index vector element");
        }
        if !sorted_unique(&d.offset_dims)
            || !sorted_unique(&d.collapsed_slice_dims)
            || !sorted_unique(&d.operand_batching_dims)
        {
            return bad("offset, collapsed and batching dimensions must be sorted and unique");
        }
        if !distinct_in(
            &[
                d.collapsed_slice_dims.clone(),
                d.operand_batching_dims.clone(),
            ]
            .concat(),
            r,
        ) || !distinct_in(
            &[d.start_index_map.clone(), d.operand_batching_dims.clone()].concat(),
            r,
        ) || !distinct_in(&d.start_indices_batching_dims, sr)
            || d.start_indices_batching_dims.contains(&ivd)
            || d.operand_batching_dims.len() != d.start_indices_batching_dims.len()
        {
            return bad("dimension lists out of range or overlapping");
        }
        for (a, b) in d
            .operand_batching_dims
            .iter()
            .zip(&d.start_indices_batching_dims)
        {
            if t.dims[*a] != si.dims[*b] {
                return bad("batching dimensions of different sizes");
            }
        }
        if slice_sizes.iter().zip(&t.dims).any(|(s, n)| s > n)
            || d.collapsed_slice_dims
                .iter()
                .chain(&d.operand_batching_dims)
                .any(|&c| slice_sizes[c] > 1)
        {
            return bad(
                "slice sizes larger than the operand, or above 1 in collapsed or batching dimensions",
            );
        }
        let batch: Vec<u64> = (0..sr).filter(|&k| k != ivd).map(|k| si.dims[k]).collect();
        let offset: Vec<u64> = (0..r)
            .filter(|k| !d.collapsed_slice_dims.contains(k) && !d.operand_batching_dims.contains(k))
            .map(|k| slice_sizes[k])
            .collect();
        let rank = batch.len() + offset.len();
        if d.offset_dims.iter().any(|&o| o >= rank) {
            return bad("offset dimensions beyond the result's rank");
        }
        let (mut bi, mut oi) = (batch.iter(), offset.iter());
        let dims: Vec<u64> = (0..rank)
            .map(|k| {
                if d.offset_dims.contains(&k) {
                    oi.next()
                } else {
                    bi.next()
                }
                .copied()
                .unwrap_or(0)
            })
            .collect();
        let node = Op::Gather {
            dims: d,
            slice_sizes: slice_sizes.to_vec(),
        };
        self.add1(
            node,
            vec![operand, start_indices],
            TensorType::new(t.dtype, &dims),
        )
    }

    /// `scatter` (StableHLO's rules): `inputs` with each element of `updates` combined by
    /// `body` into the element its index in `scatter_indices` names (no clamping: an update
    /// falling outside is skipped).
    pub fn scatter(
        &mut self,
        inputs: &[Value],
        scatter_indices: Value,
        updates: &[Value],
        d: ScatterDims,
        body: Graph,
        unique_indices: bool,
    ) -> R<Vec<Value>> {
        let op = "scatter";
        let n = inputs.len();
        if n == 0 || updates.len() != n {
            return Err(invalid(
                op,
                format!("{n} inputs and {} updates", updates.len()),
            ));
        }
        let t = self.check(op, inputs[0])?.clone();
        let u = self.check(op, updates[0])?.clone();
        let si = self.check(op, scatter_indices)?.clone();
        let bad = |m: &str| {
            Err(invalid(
                op,
                format!("{m} ({d:?}, input {t}, indices {si}, updates {u})"),
            ))
        };
        let mut results = vec![];
        let mut scalars = vec![];
        for (x, up) in inputs.iter().zip(updates) {
            let xt = self.check(op, *x)?.clone();
            let ut = self.check(op, *up)?;
            if xt.dims != t.dims || ut.dims != u.dims || ut.dtype != xt.dtype {
                return bad(
                    "inputs of one shape, updates of one shape, each update of its input's type",
                );
            }
            scalars.push(TensorType::new(xt.dtype, &[]));
            results.push(xt);
        }
        let (r, sr, ivd) = (t.rank(), si.rank(), d.index_vector_dim);
        if !is_int(si.dtype) || ivd > sr {
            return bad("integer indices, index_vector_dim within their rank");
        }
        let vector = if ivd < sr { si.dims[ivd] } else { 1 };
        let scatter_sizes: Vec<u64> = (0..sr).filter(|&k| k != ivd).map(|k| si.dims[k]).collect();
        if u.rank() != d.update_window_dims.len() + scatter_sizes.len()
            || r != d.update_window_dims.len()
                + d.inserted_window_dims.len()
                + d.input_batching_dims.len()
            || d.scatter_dims_to_operand_dims.len() as u64 != vector
        {
            return bad("ranks of inputs, updates and indices do not fit the dimension numbers");
        }
        if !sorted_unique(&d.update_window_dims)
            || !sorted_unique(&d.inserted_window_dims)
            || !sorted_unique(&d.input_batching_dims)
            || d.update_window_dims.iter().any(|&w| w >= u.rank())
            || !distinct_in(
                &[
                    d.inserted_window_dims.clone(),
                    d.input_batching_dims.clone(),
                ]
                .concat(),
                r,
            )
            || !distinct_in(
                &[
                    d.scatter_dims_to_operand_dims.clone(),
                    d.input_batching_dims.clone(),
                ]
                .concat(),
                r,
            )
            || !distinct_in(&d.scatter_indices_batching_dims, sr)
            || d.scatter_indices_batching_dims.contains(&ivd)
            || d.input_batching_dims.len() != d.scatter_indices_batching_dims.len()
        {
            return bad("dimension lists unsorted, out of range or overlapping");
        }
        for (a, b) in d
            .input_batching_dims
            .iter()
            .zip(&d.scatter_indices_batching_dims)
        {
            if t.dims[*a] != si.dims[*b] {
                return bad("batching dimensions of different sizes");
            }
        }
        let window_of: Vec<usize> = (0..r)
            .filter(|k| !d.inserted_window_dims.contains(k) && !d.input_batching_dims.contains(k))
            .collect();
        let mut scatter_it = scatter_sizes.iter();
        for k in 0..u.rank() {
            match d.update_window_dims.iter().position(|&w| w == k) {
                Some(i) => {
                    if u.dims[k] > t.dims[window_of[i]] {
                        return bad("an update window larger than the input");
                    }
                }
                None => {
                    if scatter_it.next() != Some(&u.dims[k]) {
                        return bad(
                            "update scatter dimensions must be the indices' batch dimensions",
                        );
                    }
                }
            }
        }
        let sig: Vec<TensorType> = scalars.iter().chain(scalars.iter()).cloned().collect();
        if body.param_types() != sig || body.result_types() != scalars {
            return Err(invalid(
                op,
                format!("body `{}` must map {} scalars to {n}", body.name(), 2 * n),
            ));
        }
        let mut ops = inputs.to_vec();
        ops.push(scatter_indices);
        ops.extend_from_slice(updates);
        let node = Op::Scatter {
            dims: d,
            body: Box::new(body),
            unique_indices,
        };
        self.add(node, ops, results)
    }
}
