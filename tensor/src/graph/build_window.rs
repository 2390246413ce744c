//! Adding the windowed ops to a [`Graph`]: `reduce_window` and `convolution`, each checked
//! against StableHLO's rules and expressed with nodes the graph already has, so the lowering
//! needs nothing new:
//!
//! * the windows of an operand are one `gather` of single elements at the starts
//!   `window_index * stride + element_index * dilation` (two scaled iotas), after a `pad` that
//!   makes the padding, base/lhs dilation (interior padding) and negative padding (cropping);
//! * `reduce_window` is a `reduce` of those windows over the window dimensions: the pad, the
//!   gather and the iotas are fusible, so the lowering computes each result in one kernel that
//!   reads the operand directly (nothing of the size of the windows is stored);
//! * `convolution` is im2col and a `dot_general`: the windows of the lhs (its batch and
//!   feature dimensions carried whole) contracted with the kernel over the input feature and
//!   the window dimensions, the groups (`feature_group_count` or `batch_group_count`) as the
//!   dot's batch dimension. The dot's lowering materializes the patches in the gemm's layout
//!   (one fused kernel) and calls the backend's `Gemm` (cuBLAS, rocBLAS, the host's), or a
//!   generated kernel for integer types.

use super::build::{R, distinct_in};
use super::ops::{BinaryOp, ConvDims, DotDims, GatherDims, WindowDims};
use super::{Graph, Value};
use crate::error::invalid;
use xthunk_core::ir::DType;

/// The little-endian bytes of an i64 scalar.
fn i64_bytes(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// Windows along a dimension of `n` elements (after padding): `window` elements `dilation`
/// apart, one window every `stride`; `None` when a size overflows or a factor is zero.
fn window_count(n: u64, window: u64, stride: u64, dilation: u64) -> Option<u64> {
    if window == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let extent = (window - 1).checked_mul(dilation)?.checked_add(1)?;
    Some(if n < extent {
        0
    } else {
        (n - extent) / stride + 1
    })
}

/// The size of a dimension of `n` elements after `pad` with `(low, high)` and `interior`.
fn padded(n: u64, low: i64, high: i64, interior: u64) -> Option<i128> {
    let inner = if n == 0 {
        0
    } else {
        (n as i128 - 1)
            .checked_mul(interior as i128)?
            .checked_add(n as i128)?
    };
    inner.checked_add(low as i128)?.checked_add(high as i128)
}

impl Graph {
    /// A scalar i64 constant broadcast to `dims`.
    fn i64_splat(&mut self, v: u64, dims: &[u64]) -> R<Value> {
        let c = self.constant(DType::I64, &[], i64_bytes(v))?;
        self.broadcast_in_dim(c, dims, &[])
    }

    /// A value of `dtype` and `dims` whose elements are all `fill` (a scalar).
    fn filled(&mut self, fill: Value, dims: &[u64]) -> R<Value> {
        self.broadcast_in_dim(fill, dims, &[])
    }

    /// The windows of `x` (`op` names the caller for errors). Along a dimension `i` with
    /// `windowed[i]`, windows of `window[i]` elements `dilation[i]` apart start every
    /// `stride[i]` elements; another dimension is carried whole. The result's dimensions are
    /// the window counts (`x`'s dimension order; a carried dimension keeps its size), then
    /// each windowed dimension's window elements, in dimension order.
    fn windows(
        &mut self,
        op: &'static str,
        x: Value,
        window: &[u64],
        stride: &[u64],
        dilation: &[u64],
        windowed: &[bool],
    ) -> R<Value> {
        let t = self.check(op, x)?.clone();
        let r = t.rank();
        let mut counts = vec![];
        for i in 0..r {
            if !windowed[i] {
                counts.push(t.dims[i]);
                continue;
            }
            let n =
                window_count(t.dims[i], window[i], stride[i], dilation[i]).ok_or_else(|| {
                    invalid(
                        op,
                        format!(
                            "dimension {i}: window {}, stride {}, dilation {} (each at least 1)",
                            window[i], stride[i], dilation[i]
                        ),
                    )
                })?;
            counts.push(n);
        }
        let wd: Vec<usize> = (0..r).filter(|&i| windowed[i]).collect();
        let mut out_dims = counts.clone();
        out_dims.extend(wd.iter().map(|&i| window[i]));
        if wd.is_empty() {
            return Ok(x);
        }
        if out_dims.contains(&0) {
            let zero = self.constant(t.dtype, &[], vec![0; t.dtype.size()])?;
            return self.filled(zero, &out_dims);
        }
        // The start of each element: indices [counts of wd…, windows of wd…, m].
        let m = wd.len();
        let mut idx_dims: Vec<u64> = wd.iter().map(|&i| counts[i]).collect();
        idx_dims.extend(wd.iter().map(|&i| window[i]));
        idx_dims.push(1);
        let mut parts = vec![];
        for (j, &i) in wd.iter().enumerate() {
            let mut a = self.iota(DType::I64, &idx_dims, j)?;
            if stride[i] != 1 {
                let s = self.i64_splat(stride[i], &idx_dims)?;
                a = self.binary(BinaryOp::Multiply, a, s)?;
            }
            let mut b = self.iota(DType::I64, &idx_dims, m + j)?;
            if dilation[i] != 1 {
                let d = self.i64_splat(dilation[i], &idx_dims)?;
                b = self.binary(BinaryOp::Multiply, b, d)?;
            }
            parts.push(self.binary(BinaryOp::Add, a, b)?);
        }
        let starts = if parts.len() == 1 {
            parts[0]
        } else {
            self.concatenate(&parts, 2 * m)?
        };
        let dims = GatherDims {
            offset_dims: (0..r).filter(|&i| !windowed[i]).collect(),
            collapsed_slice_dims: wd.clone(),
            operand_batching_dims: vec![],
            start_indices_batching_dims: vec![],
            start_index_map: wd.clone(),
            index_vector_dim: 2 * m,
        };
        let sizes: Vec<u64> = (0..r)
            .map(|i| if windowed[i] { 1 } else { t.dims[i] })
            .collect();
        let w = self.gather(x, starts, dims, &sizes)?;
        if self.ty(w).dims != out_dims {
            return Err(invalid(
                op,
                format!("windows of {t}: {} (expected {out_dims:?})", self.ty(w)),
            ));
        }
        Ok(w)
    }

    /// `reduce_window` of `inputs` (one shape) from `inits` (scalars of their types) with
    /// `body` (`(acc…, x…)` scalars to `acc…`, as `reduce`'s): every window of the inputs
    /// padded with the init values (base dilation as interior padding) reduced to one element.
    pub fn reduce_window(
        &mut self,
        inputs: &[Value],
        inits: &[Value],
        w: &WindowDims,
        body: super::Graph,
    ) -> R<Vec<Value>> {
        let op = "reduce_window";
        let n = inputs.len();
        if n == 0 || inits.len() != n {
            return Err(invalid(
                op,
                format!("{n} inputs and {} init values", inits.len()),
            ));
        }
        let t = self.check(op, inputs[0])?.clone();
        let r = t.rank();
        if w.dimensions.len() != r
            || w.strides.len() != r
            || w.base_dilations.len() != r
            || w.window_dilations.len() != r
            || w.padding.len() != r
        {
            return Err(invalid(
                op,
                format!("window attributes of another rank than the inputs' ({t}): {w:?}"),
            ));
        }
        if [
            &w.dimensions,
            &w.strides,
            &w.base_dilations,
            &w.window_dilations,
        ]
        .iter()
        .any(|v| v.contains(&0))
        {
            return Err(invalid(
                op,
                format!("window sizes, strides and dilations must be positive: {w:?}"),
            ));
        }
        for x in inputs {
            let u = self.check(op, *x)?;
            if u.dims != t.dims {
                return Err(invalid(op, format!("inputs {t} and {u} differ in shape")));
            }
        }
        // The windows of every input, a trailing window dimension of 1 added so that a
        // reduction always happens (the body applies to the init value and each element).
        let windowed: Vec<bool> = (0..r)
            .map(|i| w.dimensions[i] != 1 || w.strides[i] != 1)
            .collect();
        let m = windowed.iter().filter(|b| **b).count();
        let mut wins = vec![];
        let mut out_dims = vec![];
        for i in 0..n {
            let low: Vec<i64> = w.padding.iter().map(|p| p.0).collect();
            let high: Vec<i64> = w.padding.iter().map(|p| p.1).collect();
            let interior: Vec<u64> = w.base_dilations.iter().map(|b| b - 1).collect();
            for d in 0..r {
                let size = padded(t.dims[d], low[d], high[d], interior[d]);
                if size.is_none_or(|s| s < 0) {
                    return Err(invalid(
                        op,
                        format!("dimension {d} of {t} is padded to a negative size"),
                    ));
                }
            }
            let p = self.pad(inputs[i], inits[i], &low, &high, &interior)?;
            let win = self.windows(
                op,
                p,
                &w.dimensions,
                &w.strides,
                &w.window_dilations,
                &windowed,
            )?;
            let mut dims = self.ty(win).dims.clone();
            out_dims = dims[..r].to_vec();
            dims.push(1);
            wins.push(self.reshape(win, &dims)?);
        }
        let reduced: Vec<usize> = (r..=r + m).collect();
        if out_dims.contains(&0) {
            return inits.iter().map(|v| self.filled(*v, &out_dims)).collect();
        }
        self.reduce(&wins, inits, &reduced, body)
    }

    /// `convolution` of `lhs` with the kernel `rhs`, the result of element type `out` (the
    /// operands' or a wider one of the same family).
    pub fn convolution(&mut self, lhs: Value, rhs: Value, c: &ConvDims, out: DType) -> R<Value> {
        let op = "convolution";
        let a = self.check(op, lhs)?.clone();
        let b = self.check(op, rhs)?.clone();
        let bad = |m: &str| Err(invalid(op, format!("{m} (lhs {a}, rhs {b}, {c:?})")));
        let r = a.rank();
        let ns = c.input_spatial.len();
        if r < 2 || b.rank() != r || ns + 2 != r {
            return bad("the operands' rank must be the spatial dimensions + 2");
        }
        let lists_ok = c.kernel_spatial.len() == ns
            && c.output_spatial.len() == ns
            && c.window_strides.len() == ns
            && c.padding.len() == ns
            && c.lhs_dilation.len() == ns
            && c.rhs_dilation.len() == ns
            && c.window_reversal.len() == ns;
        if !lists_ok {
            return bad("a window attribute per spatial dimension expected");
        }
        let all = |x: usize, y: usize, s: &[usize]| [&[x, y][..], s].concat();
        if !distinct_in(&all(c.input_batch, c.input_feature, &c.input_spatial), r)
            || !distinct_in(
                &all(
                    c.kernel_input_feature,
                    c.kernel_output_feature,
                    &c.kernel_spatial,
                ),
                r,
            )
            || !distinct_in(&all(c.output_batch, c.output_feature, &c.output_spatial), r)
        {
            return bad("dimension numbers must name each dimension once");
        }
        if [&c.window_strides, &c.lhs_dilation, &c.rhs_dilation]
            .iter()
            .any(|v| v.contains(&0))
        {
            return bad("strides and dilations must be positive");
        }
        let (g, bg) = (c.feature_group_count, c.batch_group_count);
        let (n, cin) = (a.dims[c.input_batch], a.dims[c.input_feature]);
        let (kin, kout) = (
            b.dims[c.kernel_input_feature],
            b.dims[c.kernel_output_feature],
        );
        if g == 0 || bg == 0 || (g > 1 && bg > 1) {
            return bad("group counts must be positive, one of them 1");
        }
        if cin % g != 0 || kin.checked_mul(g) != Some(cin) || kout % g != 0 {
            return bad("input features must be kernel input features × feature_group_count");
        }
        if n % bg != 0 || kout % bg != 0 {
            return bad("batch_group_count must divide the batch and the output features");
        }
        if a.dtype != b.dtype || a.dtype == DType::Pred {
            return bad("operands of one numeric type expected");
        }
        // The padded, lhs-dilated input.
        let mut low = vec![0i64; r];
        let mut high = vec![0i64; r];
        let mut interior = vec![0u64; r];
        for j in 0..ns {
            let d = c.input_spatial[j];
            (low[d], high[d]) = c.padding[j];
            interior[d] = c.lhs_dilation[j] - 1;
            let size = padded(a.dims[d], low[d], high[d], interior[d]);
            if size.is_none_or(|s| s < 0) {
                return bad("a spatial dimension is padded to a negative size");
            }
        }
        let zero = self.constant(a.dtype, &[], vec![0; a.dtype.size()])?;
        let p = self.pad(lhs, zero, &low, &high, &interior)?;
        let mut window = vec![1u64; r];
        let mut stride = vec![1u64; r];
        let mut dil = vec![1u64; r];
        let mut windowed = vec![false; r];
        for j in 0..ns {
            let d = c.input_spatial[j];
            window[d] = b.dims[c.kernel_spatial[j]];
            stride[d] = c.window_strides[j];
            dil[d] = c.rhs_dilation[j];
            windowed[d] = true;
        }
        if window.contains(&0) {
            return bad("a kernel spatial dimension of size 0");
        }
        let pat = self.windows(op, p, &window, &stride, &dil, &windowed)?;
        let pd = self.ty(pat).dims.clone();
        // The output, canonical: [batch / batch groups, output features, spatial…].
        let (nb, h) = (n / bg, g * bg);
        let mut canon = vec![nb, kout];
        canon.extend(c.input_spatial.iter().map(|&d| pd[d]));
        let mut perm_out = vec![0usize; r];
        perm_out[c.output_batch] = 0;
        perm_out[c.output_feature] = 1;
        for j in 0..ns {
            perm_out[c.output_spatial[j]] = 2 + j;
        }
        let out_dims: Vec<u64> = perm_out.iter().map(|&k| canon[k]).collect();
        if out.is_float() != a.dtype.is_float() || out == DType::Pred {
            return bad("the result's element type must be of the operands' family");
        }
        if canon.contains(&0) || cin == 0 {
            let z = self.constant(out, &[], vec![0; out.size()])?;
            return self.filled(z, &out_dims);
        }
        // Split the patches' batch into [bg, nb] and features into [g, cin / g].
        let mut split = vec![];
        let mut pos = vec![0usize; pd.len()];
        let (mut pos_bg, mut pos_g) = (0, 0);
        for (i, &s) in pd.iter().enumerate() {
            if i == c.input_batch {
                pos_bg = split.len();
                split.extend([bg, nb]);
                pos[i] = pos_bg + 1;
            } else if i == c.input_feature {
                pos_g = split.len();
                split.extend([g, kin]);
                pos[i] = pos_g + 1;
            } else {
                pos[i] = split.len();
                split.push(s);
            }
        }
        let pat = self.reshape(pat, &split)?;
        // The kernel: reversed where asked, output features split into [h, kout / h].
        let rev: Vec<usize> = (0..ns)
            .filter(|&j| c.window_reversal[j])
            .map(|j| c.kernel_spatial[j])
            .collect();
        let k = if rev.is_empty() {
            rhs
        } else {
            self.reverse(rhs, &rev)?
        };
        let mut ksplit = vec![];
        let mut kpos = vec![0usize; r];
        let mut kpos_h = 0;
        for (i, &s) in b.dims.iter().enumerate() {
            if i == c.kernel_output_feature {
                kpos_h = ksplit.len();
                ksplit.extend([h, kout / h]);
                kpos[i] = kpos_h + 1;
            } else {
                kpos[i] = ksplit.len();
                ksplit.push(s);
            }
        }
        let k = self.reshape(k, &ksplit)?;
        // Window element dimension of spatial j in the patches: after the r counts, in the
        // order of the lhs dimension numbers.
        let mut sorted = c.input_spatial.clone();
        sorted.sort_unstable();
        let elem_pos = |j: usize| -> usize {
            let rank = sorted.iter().position(|&d| d == c.input_spatial[j]);
            pos[r + rank.unwrap_or(0)]
        };
        let lhs_group = if bg > 1 { pos_bg } else { pos_g };
        let mut lhs_con = vec![pos[c.input_feature]];
        lhs_con.extend((0..ns).map(elem_pos));
        let mut rhs_con = vec![kpos[c.kernel_input_feature]];
        rhs_con.extend(c.kernel_spatial.iter().map(|&d| kpos[d]));
        let dims = DotDims {
            lhs_batch: vec![lhs_group],
            rhs_batch: vec![kpos_h],
            lhs_contracting: lhs_con.clone(),
            rhs_contracting: rhs_con,
        };
        let dot = self.dot_general(pat, k, dims, out)?;
        // dot: [h, lhs free…, kout / h]; lhs free in split order.
        let free: Vec<usize> = (0..split.len())
            .filter(|p| *p != lhs_group && !lhs_con.contains(p))
            .collect();
        let at = |p: usize| 1 + free.iter().position(|&f| f == p).unwrap_or(0);
        let other = if bg > 1 { pos_g } else { pos_bg };
        let last = 1 + free.len();
        let mut perm = vec![at(pos[c.input_batch]), 0, last];
        perm.extend(c.input_spatial.iter().map(|&d| at(pos[d])));
        perm.push(at(other));
        let t = self.transpose(dot, &perm)?;
        let t = self.reshape(t, &canon)?;
        let res = self.transpose(t, &perm_out)?;
        if self.ty(res).dims != out_dims {
            return bad("internal: the result's dimensions");
        }
        Ok(res)
    }
}

impl Graph {
    /// Copies `other`'s nodes into this graph, its parameters bound to `args`; its results.
    fn inline(&mut self, op: &'static str, other: &Graph, args: &[Value]) -> R<Vec<Value>> {
        if other.params.len() != args.len() {
            return Err(invalid(
                op,
                format!(
                    "region `{}` takes {} values, {} given",
                    other.name,
                    other.params.len(),
                    args.len()
                ),
            ));
        }
        for (p, a) in other.params.iter().zip(args) {
            if other.ty(*p) != self.check(op, *a)? {
                return Err(invalid(
                    op,
                    format!("region `{}`: a parameter of another type", other.name),
                ));
            }
        }
        let mut map: Vec<Option<Value>> = vec![None; other.values.len()];
        for (p, a) in other.params.iter().zip(args) {
            map[p.0 as usize] = Some(*a);
        }
        let get = |map: &[Option<Value>], v: Value| {
            map.get(v.0 as usize).copied().flatten().ok_or_else(|| {
                invalid(
                    op,
                    format!("region `{}`: value %{} undefined", other.name, v.0),
                )
            })
        };
        for node in &other.nodes {
            if matches!(node.op, super::Op::Parameter { .. }) {
                continue;
            }
            let operands = node
                .operands
                .iter()
                .map(|v| get(&map, *v))
                .collect::<R<Vec<_>>>()?;
            let types = node.results.iter().map(|v| other.ty(*v).clone()).collect();
            let out = self.add(node.op.clone(), operands, types)?;
            for (r, v) in node.results.iter().zip(out) {
                map[r.0 as usize] = Some(v);
            }
        }
        other.results.iter().map(|(_, v)| get(&map, *v)).collect()
    }

    /// `select_and_scatter`: in every window of `operand` (padded; a padding element is never
    /// selected), the element `select` picks (`select(current, x)` true keeps the current
    /// one, the first element in row-major order starts), then each `source` element (one
    /// per window) combined by `scatter` into the result (starting as `init` everywhere) at
    /// its window's selected element. A window of padding only scatters nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter(
        &mut self,
        operand: Value,
        source: Value,
        init: Value,
        window: &[u64],
        strides: &[u64],
        padding: &[(i64, i64)],
        select: Graph,
        scatter: Graph,
    ) -> R<Value> {
        let op = "select_and_scatter";
        let t = self.check(op, operand)?.clone();
        let st = self.check(op, source)?.clone();
        let it = self.check(op, init)?.clone();
        let r = t.rank();
        if window.len() != r || strides.len() != r || padding.len() != r {
            return Err(invalid(
                op,
                format!("window attributes of another rank than the operand {t}"),
            ));
        }
        if it.rank() != 0 || it.dtype != t.dtype || st.dtype != t.dtype {
            return Err(invalid(
                op,
                format!("operand {t}, source {st} and init {it} of one element type expected"),
            ));
        }
        let scalar = super::TensorType::new(t.dtype, &[]);
        let pred = super::TensorType::new(DType::Pred, &[]);
        if select.param_types() != [scalar.clone(), scalar.clone()]
            || select.result_types() != [pred]
        {
            return Err(invalid(
                op,
                format!("`select` must map two {scalar} to a pred scalar"),
            ));
        }
        if r == 0 {
            // One window of the one element: it is selected.
            let both = self.scatter_combine(op, &scatter, init, source)?;
            return Ok(both);
        }
        // The window counts (the source's dimensions).
        let mut counts = vec![];
        for i in 0..r {
            let size = padded(t.dims[i], padding[i].0, padding[i].1, 0)
                .and_then(|s| u64::try_from(s).ok())
                .ok_or_else(|| {
                    invalid(
                        op,
                        format!("dimension {i} padded to a negative or huge size"),
                    )
                })?;
            let n = window_count(size, window[i], strides[i], 1).ok_or_else(|| {
                invalid(
                    op,
                    format!("dimension {i}: window and stride must be positive"),
                )
            })?;
            counts.push(n);
        }
        if st.dims != counts {
            return Err(invalid(
                op,
                format!("source {st}: one element per window ({counts:?}) expected"),
            ));
        }
        let result = self.filled(init, &t.dims)?;
        if counts.contains(&0) || t.elements() == 0 {
            return Ok(result);
        }
        // The windows of the operand, of "not padding", and each element's row-major
        // position in its window.
        let low: Vec<i64> = padding.iter().map(|p| p.0).collect();
        let high: Vec<i64> = padding.iter().map(|p| p.1).collect();
        let zeros = vec![0u64; r];
        let ones = vec![1u64; r];
        let all = vec![true; r];
        let z = self.constant(t.dtype, &[], vec![0; t.dtype.size()])?;
        let p = self.pad(operand, z, &low, &high, &zeros)?;
        let wv = self.windows(op, p, window, strides, &ones, &all)?;
        let yes = self.constant(DType::Pred, &[], vec![1])?;
        let no = self.constant(DType::Pred, &[], vec![0])?;
        let yes = self.filled(yes, &t.dims)?;
        let valid = self.pad(yes, no, &low, &high, &zeros)?;
        let wok = self.windows(op, valid, window, strides, &ones, &all)?;
        let wdims = self.ty(wv).dims.clone();
        let mut pos: Option<Value> = None;
        let mut inner = 1u64;
        for i in (0..r).rev() {
            let mut k = self.iota(DType::I64, &wdims, r + i)?;
            if inner != 1 {
                let c = self.i64_splat(inner, &wdims)?;
                k = self.binary(BinaryOp::Multiply, k, c)?;
            }
            pos = Some(match pos {
                None => k,
                Some(q) => self.binary(BinaryOp::Add, q, k)?,
            });
            inner = inner.saturating_mul(window[i]);
        }
        let pos = match pos {
            Some(p) => p,
            None => return Err(invalid(op, "internal: no window dimension")),
        };
        // The selection as a reduce over the window dimensions of (value, valid, position).
        let body = select_body(op, &select, t.dtype)?;
        let any = self.constant(t.dtype, &[], vec![0; t.dtype.size()])?;
        let none = self.constant(DType::Pred, &[], vec![0])?;
        let minus1 = self.constant(DType::I64, &[], (-1i64).to_le_bytes().to_vec())?;
        let dims: Vec<usize> = (r..2 * r).collect();
        let sel = self.reduce(&[wv, wok, pos], &[any, none, minus1], &dims, body)?;
        let (found, k) = (sel[1], sel[2]);
        // The selected element's operand index, per window (-1: none, skipped).
        let mut cols = vec![];
        let mut col_dims = counts.clone();
        col_dims.push(1);
        let mut inner = 1u64;
        let mut inners = vec![0u64; r];
        for i in (0..r).rev() {
            inners[i] = inner;
            inner = inner.saturating_mul(window[i]);
        }
        let neg = self.i64_splat(u64::MAX, &counts)?; // -1
        for i in 0..r {
            let mut c = self.iota(DType::I64, &counts, i)?;
            if strides[i] != 1 {
                let s = self.i64_splat(strides[i], &counts)?;
                c = self.binary(BinaryOp::Multiply, c, s)?;
            }
            let div = self.i64_splat(inners[i], &counts)?;
            let wi = self.binary(BinaryOp::Divide, k, div)?;
            let m = self.i64_splat(window[i], &counts)?;
            let wi = self.binary(BinaryOp::Remainder, wi, m)?;
            c = self.binary(BinaryOp::Add, c, wi)?;
            if low[i] != 0 {
                let l = self.i64_splat(low[i] as u64, &counts)?;
                c = self.binary(BinaryOp::Subtract, c, l)?;
            }
            let c = self.select(found, c, neg)?;
            cols.push(self.reshape(c, &col_dims)?);
        }
        let idx = if cols.len() == 1 {
            cols[0]
        } else {
            self.concatenate(&cols, r)?
        };
        let d = super::ScatterDims {
            update_window_dims: vec![],
            inserted_window_dims: (0..r).collect(),
            input_batching_dims: vec![],
            scatter_indices_batching_dims: vec![],
            scatter_dims_to_operand_dims: (0..r).collect(),
            index_vector_dim: r,
        };
        let out = self.scatter(&[result], idx, &[source], d, scatter, false)?;
        Ok(out[0])
    }

    /// `scatter(init, source)` for a rank-0 `select_and_scatter`.
    fn scatter_combine(
        &mut self,
        op: &'static str,
        scatter: &Graph,
        init: Value,
        source: Value,
    ) -> R<Value> {
        let out = self.inline(op, scatter, &[init, source])?;
        match out.as_slice() {
            [v] if self.ty(*v) == self.check(op, init)? => Ok(*v),
            _ => Err(invalid(op, "`scatter` must map two scalars to one")),
        }
    }
}

/// The reduce body choosing an element per window: over `(value, valid, position)`, a
/// valid element replaces the current one when there is none yet or `select(current, x)`
/// is false.
fn select_body(op: &'static str, select: &Graph, d: DType) -> R<Graph> {
    use super::UnaryOp;
    let mut b = Graph::new("select_and_scatter_select");
    let av = b.parameter("acc", d, &[])?;
    let aok = b.parameter("acc_valid", DType::Pred, &[])?;
    let ak = b.parameter("acc_pos", DType::I64, &[])?;
    let xv = b.parameter("x", d, &[])?;
    let xok = b.parameter("x_valid", DType::Pred, &[])?;
    let xk = b.parameter("x_pos", DType::I64, &[])?;
    let keep = b.inline(op, select, &[av, xv])?;
    let keep = match keep.as_slice() {
        [k] => *k,
        _ => return Err(invalid(op, "`select` must have one result")),
    };
    let replace = b.unary(UnaryOp::Not, keep)?;
    let empty = b.unary(UnaryOp::Not, aok)?;
    let take = b.binary(BinaryOp::Or, empty, replace)?;
    let take = b.binary(BinaryOp::And, xok, take)?;
    let v = b.select(take, xv, av)?;
    let ok = b.select(take, xok, aok)?;
    let k = b.select(take, xk, ak)?;
    b.result("value", v)?;
    b.result("valid", ok)?;
    b.result("position", k)?;
    Ok(b)
}
