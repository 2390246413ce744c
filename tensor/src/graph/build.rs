//! Adding operations to a [`Graph`]: each method checks the op's shape and type rule (as
//! StableHLO's spec states it) and returns the new value, or an error naming the op.

use super::ops::{BinaryOp, CompareDirection, CompareType, DotDims, Op, UnaryOp, bits, is_int};
use super::{Graph, Node, TensorType, Value};
use crate::error::{GraphError, invalid};
use xthunk_core::ir::DType;

pub(super) type R<T> = Result<T, GraphError>;

fn is_perm(p: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    p.len() == rank
        && p.iter()
            .all(|&d| d < rank && !std::mem::replace(&mut seen[d], true))
}

pub(super) fn distinct_in(p: &[usize], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    p.iter()
        .all(|&d| d < rank && !std::mem::replace(&mut seen[d], true))
}

impl Graph {
    pub(super) fn check(&self, op: &'static str, v: Value) -> R<&TensorType> {
        self.values
            .get(v.0 as usize)
            .ok_or_else(|| GraphError::UnknownValue {
                op,
                value: v.0,
                graph: self.name.clone(),
            })
    }

    pub(super) fn add(
        &mut self,
        op: Op,
        operands: Vec<Value>,
        results: Vec<TensorType>,
    ) -> R<Vec<Value>> {
        for t in &results {
            // Nonzero dimensions only: every product of some of them (strides, counts) fits.
            let bytes = t
                .dims
                .iter()
                .filter(|d| **d != 0)
                .try_fold(t.dtype.size() as u64, |a, d| a.checked_mul(*d))
                .filter(|b| *b <= i64::MAX as u64);
            if bytes.is_none() {
                return Err(invalid(op.name(), format!("the result {t} is too large")));
            }
        }
        let node = self.nodes.len();
        let mut out = vec![];
        for t in results {
            out.push(Value(self.values.len() as u32));
            self.values.push(t);
            self.defs.push(node);
        }
        self.nodes.push(Node {
            op,
            operands,
            results: out.clone(),
        });
        Ok(out)
    }

    pub(super) fn add1(&mut self, op: Op, operands: Vec<Value>, result: TensorType) -> R<Value> {
        Ok(self.add(op, operands, vec![result])?[0])
    }

    fn same_type(&self, op: &'static str, vs: &[Value]) -> R<TensorType> {
        let t = self.check(op, vs[0])?.clone();
        for v in &vs[1..] {
            let u = self.check(op, *v)?;
            if *u != t {
                return Err(invalid(op, format!("operand types differ: {t} and {u}")));
            }
        }
        Ok(t)
    }

    /// Declares the next parameter.
    pub fn parameter(&mut self, name: &str, dtype: DType, dims: &[u64]) -> R<Value> {
        let index = self.params.len();
        let v = self.add1(
            Op::Parameter {
                index,
                name: name.into(),
            },
            vec![],
            TensorType::new(dtype, dims),
        )?;
        self.params.push(v);
        Ok(v)
    }

    /// Appends a named result.
    pub fn result(&mut self, name: &str, v: Value) -> R<()> {
        self.check("result", v)?;
        self.results.push((name.into(), v));
        Ok(())
    }

    /// A constant from little-endian row-major element bytes (pred: one byte, 0 or 1).
    pub fn constant(&mut self, dtype: DType, dims: &[u64], bytes: Vec<u8>) -> R<Value> {
        let t = TensorType::new(dtype, dims);
        if bytes.len() as u64 != t.bytes() {
            return Err(invalid(
                "constant",
                format!("{t} needs {} bytes, {} given", t.bytes(), bytes.len()),
            ));
        }
        self.add1(Op::Constant { bytes }, vec![], t)
    }

    /// `iota` along `dim`.
    pub fn iota(&mut self, dtype: DType, dims: &[u64], dim: usize) -> R<Value> {
        if dim >= dims.len() {
            return Err(invalid(
                "iota",
                format!("dimension {dim} of a rank-{} result", dims.len()),
            ));
        }
        if dtype == DType::Pred {
            return Err(invalid("iota", "a pred result"));
        }
        self.add1(Op::Iota { dim }, vec![], TensorType::new(dtype, dims))
    }

    pub fn unary(&mut self, op: UnaryOp, x: Value) -> R<Value> {
        let t = self.check(op.name(), x)?.clone();
        if !op.accepts(t.dtype) {
            return Err(invalid(op.name(), format!("elements of type {}", t.dtype)));
        }
        let r = TensorType::new(op.result(t.dtype), &t.dims);
        self.add1(Op::Unary(op), vec![x], r)
    }

    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> R<Value> {
        let t = self.same_type(op.name(), &[a, b])?;
        if !op.accepts(t.dtype) {
            return Err(invalid(op.name(), format!("elements of type {}", t.dtype)));
        }
        let r = TensorType::new(op.result(t.dtype), &t.dims);
        self.add1(Op::Binary(op), vec![a, b], r)
    }

    pub fn compare(
        &mut self,
        direction: CompareDirection,
        kind: CompareType,
        a: Value,
        b: Value,
    ) -> R<Value> {
        let t = self.same_type("compare", &[a, b])?;
        if !kind.accepts(t.dtype) {
            return Err(invalid(
                "compare",
                format!(
                    "comparison type {} for elements of type {}",
                    kind.name(),
                    t.dtype
                ),
            ));
        }
        if t.dtype.is_complex() && !matches!(direction, CompareDirection::Eq | CompareDirection::Ne)
        {
            return Err(invalid(
                "compare",
                format!(
                    "direction {} for complex elements (EQ or NE)",
                    direction.name()
                ),
            ));
        }
        let r = TensorType::new(DType::Pred, &t.dims);
        self.add1(Op::Compare { direction, kind }, vec![a, b], r)
    }

    /// `select(pred, on_true, on_false)`; `pred` is a pred scalar or of the operands' shape.
    pub fn select(&mut self, pred: Value, on_true: Value, on_false: Value) -> R<Value> {
        let t = self.same_type("select", &[on_true, on_false])?;
        let p = self.check("select", pred)?;
        if p.dtype != DType::Pred || (p.rank() != 0 && p.dims != t.dims) {
            return Err(invalid("select", format!("pred {p} for operands {t}")));
        }
        self.add1(Op::Select, vec![pred, on_true, on_false], t)
    }

    /// `map` of `body` over `inputs` (one shape): `body` takes one scalar of each input's
    /// type and gives one scalar, made of elementwise ops only.
    pub fn map(&mut self, inputs: &[Value], body: Graph) -> R<Value> {
        let op = "map";
        let Some(&first) = inputs.first() else {
            return Err(invalid(op, "no inputs"));
        };
        let shape = self.check(op, first)?.dims.clone();
        if body.params().len() != inputs.len() || body.results().len() != 1 {
            return Err(invalid(
                op,
                format!(
                    "a body of {} parameters and {} results for {} inputs (one result expected)",
                    body.params().len(),
                    body.results().len(),
                    inputs.len()
                ),
            ));
        }
        for (i, (&x, p)) in inputs.iter().zip(body.params()).enumerate() {
            let t = self.check(op, x)?;
            let pt = body.ty(*p);
            if t.dims != shape || pt.rank() != 0 || pt.dtype != t.dtype {
                return Err(invalid(
                    op,
                    format!("input {i} {t} for body parameter {pt} (shape {shape:?} expected)"),
                ));
            }
        }
        let rt = body.ty(body.results()[0].1).clone();
        if rt.rank() != 0 {
            return Err(invalid(op, format!("the body returns {rt}, not a scalar")));
        }
        if let Some(bad) = body.nodes().iter().find(|n| {
            !matches!(
                n.op,
                Op::Parameter { .. }
                    | Op::Unary(_)
                    | Op::Binary(_)
                    | Op::Compare { .. }
                    | Op::Select
                    | Op::Clamp
                    | Op::Convert
                    | Op::BitcastConvert
                    | Op::ReducePrecision { .. }
                    | Op::Map { .. }
            ) && !matches!(n.op, Op::Constant { .. } if body.ty(n.results[0]).elements() == 1)
        }) {
            return Err(GraphError::Unsupported {
                op,
                reason: format!(
                    "`{}` in a map body (only elementwise ops and scalar constants)",
                    bad.op.name()
                ),
            });
        }
        let t = TensorType::new(rt.dtype, &shape);
        self.add1(
            Op::Map {
                body: Box::new(body),
            },
            inputs.to_vec(),
            t,
        )
    }

    /// `clamp(min, operand, max)`; `min` and `max` are scalars or of the operand's shape.
    pub fn clamp(&mut self, min: Value, x: Value, max: Value) -> R<Value> {
        let t = self.check("clamp", x)?.clone();
        for b in [min, max] {
            let u = self.check("clamp", b)?;
            if u.dtype != t.dtype || (u.rank() != 0 && u.dims != t.dims) {
                return Err(invalid("clamp", format!("bound {u} for operand {t}")));
            }
        }
        if t.dtype == DType::Pred || t.dtype.is_complex() {
            return Err(invalid("clamp", format!("elements of type {}", t.dtype)));
        }
        self.add1(Op::Clamp, vec![min, x, max], t)
    }

    pub fn convert(&mut self, x: Value, to: DType) -> R<Value> {
        let t = self.check("convert", x)?;
        let r = TensorType::new(to, &t.dims);
        self.add1(Op::Convert, vec![x], r)
    }

    /// `bitcast_convert` to `to`: same element width keeps the shape; a narrower result adds
    /// a last dimension of the ratio, a wider one drops it.
    /// `reduce_precision` to `exponent_bits` (at least 1) and `mantissa_bits`; float operands.
    pub fn reduce_precision(
        &mut self,
        x: Value,
        exponent_bits: u32,
        mantissa_bits: u32,
    ) -> R<Value> {
        let t = self.check("reduce_precision", x)?.clone();
        if !t.dtype.is_float() {
            return Err(invalid(
                "reduce_precision",
                format!("elements of type {}", t.dtype),
            ));
        }
        if exponent_bits == 0 {
            return Err(invalid("reduce_precision", "exponent_bits 0 (at least 1)"));
        }
        self.add1(
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            },
            vec![x],
            t,
        )
    }

    pub fn bitcast_convert(&mut self, x: Value, to: DType) -> R<Value> {
        let t = self.check("bitcast_convert", x)?.clone();
        let (fb, tb) = (bits(t.dtype), bits(to));
        if t.dtype == DType::Pred || to == DType::Pred {
            return Err(invalid("bitcast_convert", "pred elements"));
        }
        let mut dims = t.dims.clone();
        if tb < fb {
            dims.push((fb / tb) as u64);
        } else if tb > fb {
            if dims.last() != Some(&((tb / fb) as u64)) {
                return Err(invalid(
                    "bitcast_convert",
                    format!("{t} to {to}: the last dimension must be {}", tb / fb),
                ));
            }
            dims.pop();
        }
        self.add1(Op::BitcastConvert, vec![x], TensorType::new(to, &dims))
    }

    pub fn broadcast_in_dim(&mut self, x: Value, dims: &[u64], map: &[usize]) -> R<Value> {
        let t = self.check("broadcast_in_dim", x)?.clone();
        if map.len() != t.rank() || !distinct_in(map, dims.len()) {
            return Err(invalid(
                "broadcast_in_dim",
                format!(
                    "broadcast_dimensions {map:?} for {t} into rank {}",
                    dims.len()
                ),
            ));
        }
        for (i, &d) in map.iter().enumerate() {
            if t.dims[i] != 1 && t.dims[i] != dims[d] {
                return Err(invalid(
                    "broadcast_in_dim",
                    format!(
                        "operand dimension {i} ({}) into result dimension {d} ({})",
                        t.dims[i], dims[d]
                    ),
                ));
            }
        }
        let r = TensorType::new(t.dtype, dims);
        self.add1(Op::BroadcastInDim { dims: map.to_vec() }, vec![x], r)
    }

    pub fn reshape(&mut self, x: Value, dims: &[u64]) -> R<Value> {
        let t = self.check("reshape", x)?.clone();
        let r = TensorType::new(t.dtype, dims);
        if r.elements() != t.elements() {
            return Err(invalid(
                "reshape",
                format!("{t} to {r}: element counts differ"),
            ));
        }
        self.add1(Op::Reshape, vec![x], r)
    }

    pub fn transpose(&mut self, x: Value, perm: &[usize]) -> R<Value> {
        let t = self.check("transpose", x)?.clone();
        if !is_perm(perm, t.rank()) {
            return Err(invalid("transpose", format!("permutation {perm:?} of {t}")));
        }
        let dims: Vec<u64> = perm.iter().map(|&p| t.dims[p]).collect();
        self.add1(
            Op::Transpose {
                perm: perm.to_vec(),
            },
            vec![x],
            TensorType::new(t.dtype, &dims),
        )
    }

    pub fn concatenate(&mut self, xs: &[Value], dim: usize) -> R<Value> {
        let Some(&first) = xs.first() else {
            return Err(invalid("concatenate", "no operands"));
        };
        let t = self.check("concatenate", first)?.clone();
        if dim >= t.rank() {
            return Err(invalid("concatenate", format!("dimension {dim} of {t}")));
        }
        let mut dims = t.dims.clone();
        dims[dim] = 0;
        for x in xs {
            let u = self.check("concatenate", *x)?;
            let same = u.dtype == t.dtype
                && u.rank() == t.rank()
                && (0..t.rank()).all(|d| d == dim || u.dims[d] == t.dims[d]);
            if !same {
                return Err(invalid("concatenate", format!("operands {t} and {u}")));
            }
            dims[dim] = dims[dim]
                .checked_add(u.dims[dim])
                .ok_or_else(|| invalid("concatenate", "the result is too large"))?;
        }
        self.add1(
            Op::Concatenate { dim },
            xs.to_vec(),
            TensorType::new(t.dtype, &dims),
        )
    }

    pub fn slice(&mut self, x: Value, start: &[u64], limit: &[u64], strides: &[u64]) -> R<Value> {
        let t = self.check("slice", x)?.clone();
        let r = t.rank();
        if start.len() != r || limit.len() != r || strides.len() != r {
            return Err(invalid(
                "slice",
                format!(
                    "{t} with {}/{}/{} bounds",
                    start.len(),
                    limit.len(),
                    strides.len()
                ),
            ));
        }
        let mut dims = vec![];
        for d in 0..r {
            if start[d] > limit[d] || limit[d] > t.dims[d] || strides[d] == 0 {
                return Err(invalid(
                    "slice",
                    format!(
                        "dimension {d}: [{}, {}) step {} of {}",
                        start[d], limit[d], strides[d], t.dims[d]
                    ),
                ));
            }
            dims.push((limit[d] - start[d]).div_ceil(strides[d]));
        }
        let op = Op::Slice {
            start: start.to_vec(),
            limit: limit.to_vec(),
            strides: strides.to_vec(),
        };
        self.add1(op, vec![x], TensorType::new(t.dtype, &dims))
    }

    fn starts(&self, op: &'static str, starts: &[Value], rank: usize) -> R<()> {
        if starts.len() != rank {
            return Err(invalid(
                op,
                format!("{} start indices for rank {rank}", starts.len()),
            ));
        }
        let first = starts
            .first()
            .map(|s| self.check(op, *s).map(|t| t.dtype))
            .transpose()?;
        for s in starts {
            let u = self.check(op, *s)?;
            if u.rank() != 0 || !is_int(u.dtype) || Some(u.dtype) != first {
                return Err(invalid(
                    op,
                    format!("start index {u}: integer scalars of one type"),
                ));
            }
        }
        Ok(())
    }

    pub fn dynamic_slice(&mut self, x: Value, starts: &[Value], sizes: &[u64]) -> R<Value> {
        let t = self.check("dynamic_slice", x)?.clone();
        self.starts("dynamic_slice", starts, t.rank())?;
        if sizes.len() != t.rank() || sizes.iter().zip(&t.dims).any(|(s, d)| s > d) {
            return Err(invalid(
                "dynamic_slice",
                format!("slice sizes {sizes:?} of {t}"),
            ));
        }
        let mut ops = vec![x];
        ops.extend_from_slice(starts);
        let op = Op::DynamicSlice {
            sizes: sizes.to_vec(),
        };
        self.add1(op, ops, TensorType::new(t.dtype, sizes))
    }

    pub fn dynamic_update_slice(&mut self, x: Value, update: Value, starts: &[Value]) -> R<Value> {
        let t = self.check("dynamic_update_slice", x)?.clone();
        let u = self.check("dynamic_update_slice", update)?.clone();
        self.starts("dynamic_update_slice", starts, t.rank())?;
        if u.dtype != t.dtype
            || u.rank() != t.rank()
            || u.dims.iter().zip(&t.dims).any(|(a, b)| a > b)
        {
            return Err(invalid(
                "dynamic_update_slice",
                format!("update {u} of {t}"),
            ));
        }
        let mut ops = vec![x, update];
        ops.extend_from_slice(starts);
        self.add1(Op::DynamicUpdateSlice, ops, t)
    }

    /// `pad` with edge padding `low`/`high` (negative removes elements) and `interior`.
    pub fn pad(
        &mut self,
        x: Value,
        value: Value,
        low: &[i64],
        high: &[i64],
        interior: &[u64],
    ) -> R<Value> {
        let t = self.check("pad", x)?.clone();
        let v = self.check("pad", value)?;
        if v.rank() != 0 || v.dtype != t.dtype {
            return Err(invalid("pad", format!("padding value {v} for {t}")));
        }
        let r = t.rank();
        if low.len() != r || high.len() != r || interior.len() != r {
            return Err(invalid(
                "pad",
                format!(
                    "{t} with {}/{}/{} paddings",
                    low.len(),
                    high.len(),
                    interior.len()
                ),
            ));
        }
        let mut dims = vec![];
        for d in 0..r {
            let n = t.dims[d] as i128;
            let inner = if n == 0 {
                0
            } else {
                n + (n - 1) * interior[d] as i128
            };
            let size = low[d] as i128 + inner + high[d] as i128;
            if size < 0 {
                return Err(invalid(
                    "pad",
                    format!("dimension {d} would have {size} elements"),
                ));
            }
            dims.push(size as u64);
        }
        let op = Op::Pad {
            low: low.to_vec(),
            high: high.to_vec(),
            interior: interior.to_vec(),
        };
        self.add1(op, vec![x, value], TensorType::new(t.dtype, &dims))
    }

    pub fn reverse(&mut self, x: Value, dims: &[usize]) -> R<Value> {
        let t = self.check("reverse", x)?.clone();
        if !distinct_in(dims, t.rank()) {
            return Err(invalid("reverse", format!("dimensions {dims:?} of {t}")));
        }
        self.add1(
            Op::Reverse {
                dims: dims.to_vec(),
            },
            vec![x],
            t,
        )
    }

    /// `dot_general`; the result has `result_type`'s element type (the operands' or a wider
    /// one) and dimensions batch…, lhs free…, rhs free….
    pub fn dot_general(
        &mut self,
        lhs: Value,
        rhs: Value,
        dims: DotDims,
        result_type: DType,
    ) -> R<Value> {
        let op = "dot_general";
        let a = self.check(op, lhs)?.clone();
        let b = self.check(op, rhs)?.clone();
        if a.dtype != b.dtype || a.dtype == DType::Pred {
            return Err(invalid(op, format!("operands {a} and {b}")));
        }
        let ok_lists = dims.lhs_batch.len() == dims.rhs_batch.len()
            && dims.lhs_contracting.len() == dims.rhs_contracting.len()
            && distinct_in(
                &[dims.lhs_batch.clone(), dims.lhs_contracting.clone()].concat(),
                a.rank(),
            )
            && distinct_in(
                &[dims.rhs_batch.clone(), dims.rhs_contracting.clone()].concat(),
                b.rank(),
            );
        if !ok_lists {
            return Err(invalid(
                op,
                format!("dimension numbers {dims:?} for {a} and {b}"),
            ));
        }
        for (x, y) in dims
            .lhs_batch
            .iter()
            .zip(&dims.rhs_batch)
            .chain(dims.lhs_contracting.iter().zip(&dims.rhs_contracting))
        {
            if a.dims[*x] != b.dims[*y] {
                return Err(invalid(
                    op,
                    format!(
                        "lhs dimension {x} ({}) against rhs dimension {y} ({})",
                        a.dims[*x], b.dims[*y]
                    ),
                ));
            }
        }
        if super::ops::is_float(result_type) != super::ops::is_float(a.dtype)
            || result_type == DType::Pred
        {
            return Err(invalid(
                op,
                format!("result elements {result_type} for operands {}", a.dtype),
            ));
        }
        let mut out: Vec<u64> = dims.lhs_batch.iter().map(|&d| a.dims[d]).collect();
        let free = |rank: usize, batch: &[usize], con: &[usize]| -> Vec<usize> {
            (0..rank)
                .filter(|d| !batch.contains(d) && !con.contains(d))
                .collect()
        };
        out.extend(
            free(a.rank(), &dims.lhs_batch, &dims.lhs_contracting)
                .iter()
                .map(|&d| a.dims[d]),
        );
        out.extend(
            free(b.rank(), &dims.rhs_batch, &dims.rhs_contracting)
                .iter()
                .map(|&d| b.dims[d]),
        );
        self.add1(
            Op::DotGeneral(dims),
            vec![lhs, rhs],
            TensorType::new(result_type, &out),
        )
    }

    /// `reduce` of `inputs` over `dims` from `inits` with `body`.
    pub fn reduce(
        &mut self,
        inputs: &[Value],
        inits: &[Value],
        dims: &[usize],
        body: Graph,
    ) -> R<Vec<Value>> {
        let op = "reduce";
        let n = inputs.len();
        if n == 0 || inits.len() != n {
            return Err(invalid(
                op,
                format!("{n} inputs and {} init values", inits.len()),
            ));
        }
        let shape = self.check(op, inputs[0])?.dims.clone();
        if !distinct_in(dims, shape.len()) {
            return Err(invalid(
                op,
                format!("dimensions {dims:?} of rank {}", shape.len()),
            ));
        }
        let mut results = vec![];
        let mut want = vec![];
        for i in 0..n {
            let t = self.check(op, inputs[i])?.clone();
            let s = self.check(op, inits[i])?;
            if t.dims != shape || s.rank() != 0 || s.dtype != t.dtype {
                return Err(invalid(op, format!("input {t} with init {s}")));
            }
            let kept: Vec<u64> = (0..shape.len())
                .filter(|d| !dims.contains(d))
                .map(|d| shape[d])
                .collect();
            results.push(TensorType::new(t.dtype, &kept));
            want.push(TensorType::new(t.dtype, &[]));
        }
        let sig: Vec<TensorType> = want.iter().chain(want.iter()).cloned().collect();
        if body.param_types() != sig || body.result_types() != want {
            return Err(invalid(
                op,
                format!("body `{}` must map {} scalars to {n}", body.name, 2 * n),
            ));
        }
        let mut ops = inputs.to_vec();
        ops.extend_from_slice(inits);
        self.add(
            Op::Reduce {
                dims: dims.to_vec(),
                body: Box::new(body),
            },
            ops,
            results,
        )
    }

    /// `while` over the loop-carried `operands`.
    pub fn while_loop(&mut self, operands: &[Value], cond: Graph, body: Graph) -> R<Vec<Value>> {
        let op = "while";
        let mut types = vec![];
        for v in operands {
            types.push(self.check(op, *v)?.clone());
        }
        if cond.param_types() != types
            || cond.result_types() != vec![TensorType::new(DType::Pred, &[])]
        {
            return Err(invalid(
                op,
                format!(
                    "cond `{}` must map the operands to a pred scalar",
                    cond.name
                ),
            ));
        }
        if body.param_types() != types || body.result_types() != types {
            return Err(invalid(
                op,
                format!(
                    "body `{}` must map the operands to their own types",
                    body.name
                ),
            ));
        }
        self.add(
            Op::While {
                cond: Box::new(cond),
                body: Box::new(body),
            },
            operands.to_vec(),
            types,
        )
    }

    /// `if`: `on_true` when the pred scalar `pred` is true, else `on_false`; both take
    /// `operands` as their parameters.
    pub fn if_(
        &mut self,
        pred: Value,
        operands: &[Value],
        on_true: Graph,
        on_false: Graph,
    ) -> R<Vec<Value>> {
        if self.check("if", pred)?.dtype != DType::Pred {
            return Err(invalid("if", "the condition must be a pred scalar"));
        }
        self.case(pred, operands, vec![on_true, on_false])
    }

    /// `case` (an i32 `index`) or `if` (a pred `index`: branch 0 when true); every branch takes
    /// `operands` as its parameters and gives results of one list of types.
    pub fn case(
        &mut self,
        index: Value,
        operands: &[Value],
        branches: Vec<Graph>,
    ) -> R<Vec<Value>> {
        let op = "case";
        let it = self.check(op, index)?;
        if it.rank() != 0 || !matches!(it.dtype, DType::I32 | DType::Pred) {
            return Err(invalid(op, format!("index {it}: an i32 or pred scalar")));
        }
        if branches.is_empty() || (it.dtype == DType::Pred && branches.len() != 2) {
            return Err(invalid(
                op,
                format!("{} branches for a {} index", branches.len(), it.dtype),
            ));
        }
        let mut types = vec![];
        for v in operands {
            types.push(self.check(op, *v)?.clone());
        }
        let results = branches[0].result_types();
        for b in &branches {
            if b.param_types() != types || b.result_types() != results {
                return Err(invalid(
                    op,
                    format!("branch `{}`: parameters or results differ", b.name),
                ));
            }
        }
        let mut ops = vec![index];
        ops.extend_from_slice(operands);
        self.add(Op::Case { branches }, ops, results)
    }
}
