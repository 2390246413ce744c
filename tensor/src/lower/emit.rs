//! The kernel emitter: C statements that compute one element of a value at a given index,
//! following the value's producers through every fused op (elementwise ops, converts,
//! broadcasts, and the index-only movement ops), reading materialized values from buffers.
//! A kernel's text names its buffers by position only (`o0`, `p0`, …), so identical fused
//! computations give identical text and are generated once.

use super::scalar;
use crate::error::LowerError;
use crate::graph::{Graph, Op, Value};
use std::collections::HashMap;
use xthunk_core::ir::{DType, Slice};

/// Where a value of a graph is while lowering.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Home {
    /// In a buffer (row-major).
    Buf(Slice),
    /// A C variable of the kernel being emitted (a region's scalar parameter).
    Var(String),
    /// Computed where it is read.
    Fused,
}

/// A graph and where its values are.
pub(crate) struct Scope<'a> {
    pub graph: &'a Graph,
    pub homes: &'a [Home],
}

impl Scope<'_> {
    fn home(&self, v: Value) -> &Home {
        &self.homes[v.0 as usize]
    }
}

/// One generated kernel being written.
#[derive(Default)]
pub(crate) struct KernelText {
    lines: Vec<String>,
    depth: usize,
    pub inputs: Vec<(Slice, DType)>,
    pub outputs: Vec<(Slice, DType)>,
    /// Whether each output is also read (`inout`).
    pub read_outputs: Vec<bool>,
    tmp: usize,
    /// Lines written at the body's top level, and whether any line synchronizes threads:
    /// a body of one `XT_FOR` loop and nothing else is an `XT_FOR_EACH` kernel.
    top_lines: usize,
    syncs: bool,
    /// Values already computed, by (graph, value, index), one layer per open block: a
    /// value read twice at one index inside a kernel is computed once.
    known: Vec<HashMap<Key, String>>,
}

type Key = (usize, Value, Vec<String>);

fn unsupported(op: &'static str, reason: impl Into<String>) -> LowerError {
    LowerError::Unsupported {
        op,
        reason: reason.into(),
    }
}

/// The row-major linear index of `idx` in `dims` (digits merged where they can be: see
/// `index.rs`).
pub(crate) fn linear(idx: &[String], dims: &[u64]) -> String {
    super::index::linear(idx, dims)
}

/// [`linear`] as an element offset (a buffer's subscript): the same expression.
pub(crate) fn offset(idx: &[String], dims: &[u64]) -> String {
    super::index::linear(idx, dims)
}

impl KernelText {
    pub fn new() -> Self {
        Self {
            depth: 1,
            known: vec![HashMap::new()],
            ..Default::default()
        }
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        if self.depth == 1 {
            self.top_lines += 1;
        }
        if [
            "__syncthreads",
            "__shared__",
            "xt_warp",
            "xt_block_reduce",
            "xt_shfl",
            "XT_BLOCK_PHASE",
            "XT_BLOCK_SYNC",
        ]
        .iter()
        .any(|w| s.contains(w))
        {
            self.syncs = true;
        }
        let pad = "  ".repeat(self.depth);
        self.lines.push(format!("{pad}{s}"));
    }

    /// Whether the body is one `XT_FOR` loop and nothing else, with no barrier or warp
    /// operation: its iterations are independent (they run in parallel on a GPU in any order),
    /// so it is an `XT_FOR_EACH` kernel (a contiguous loop per worker on the CPU).
    fn each(&self) -> bool {
        self.top_lines == 2
            && !self.syncs
            && self
                .lines
                .first()
                .is_some_and(|l| l.trim_start().starts_with("XT_FOR("))
    }

    /// Writes `s` and opens a block.
    pub fn open(&mut self, s: impl AsRef<str>) {
        self.line(s);
        self.depth += 1;
        self.known.push(HashMap::new());
    }

    /// Closes a block and writes `s`.
    pub fn close(&mut self, s: impl AsRef<str>) {
        self.depth = self.depth.saturating_sub(1);
        self.known.pop();
        self.line(s);
    }

    /// Closes a block and opens the next (`} else {`).
    pub fn else_branch(&mut self, s: impl AsRef<str>) {
        self.close(s);
        self.depth += 1;
        self.known.push(HashMap::new());
    }

    /// A fresh variable of C type `ty` holding `expr`.
    pub fn var(&mut self, ty: &str, expr: impl AsRef<str>) -> String {
        let name = format!("v{}", self.tmp);
        self.tmp += 1;
        self.line(format!("const {ty} {name} = {};", expr.as_ref()));
        name
    }

    /// A fresh mutable variable.
    pub fn mut_var(&mut self, ty: &str, expr: impl AsRef<str>) -> String {
        let name = format!("v{}", self.tmp);
        self.tmp += 1;
        self.line(format!("{ty} {name} = {};", expr.as_ref()));
        name
    }

    /// The name of the input buffer `slice` read as `dtype` (one parameter per distinct slice
    /// and type).
    pub fn input(&mut self, slice: Slice, dtype: DType) -> String {
        // By slice and type: a buffer read as two types (a value and its `bitcast_convert`,
        // which shares the buffer) is two typed parameters, never one read as the other.
        let i = match self
            .inputs
            .iter()
            .position(|&(s, d)| s == slice && d == dtype)
        {
            Some(i) => i,
            None => {
                self.inputs.push((slice, dtype));
                self.inputs.len() - 1
            }
        };
        format!("p{i}")
    }

    /// The name of a new output buffer.
    pub fn output(&mut self, slice: Slice, dtype: DType) -> String {
        self.outputs.push((slice, dtype));
        self.read_outputs.push(false);
        format!("o{}", self.outputs.len() - 1)
    }

    /// The name of a new output buffer the kernel also reads.
    pub fn inout(&mut self, slice: Slice, dtype: DType) -> String {
        let name = self.output(slice, dtype);
        if let Some(r) = self.read_outputs.last_mut() {
            *r = true;
        }
        name
    }

    /// Index expressions of the row-major position `lin` in `dims` (a variable holds `lin`
    /// unless it is one already; each index is computed where it is used, so an index a
    /// kernel does not read costs nothing).
    pub fn delinearize(&mut self, lin: &str, dims: &[u64]) -> Vec<String> {
        let parts = super::index::split(lin, dims);
        let mut idx = vec![String::new(); dims.len()];
        let mut l = None;
        let mut stride = 1u64;
        for d in (0..dims.len()).rev() {
            idx[d] = match &parts[d] {
                Some(e) => e.clone(),
                None => {
                    let l = l
                        .get_or_insert_with(|| {
                            let plain = lin.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                            if plain {
                                lin.to_string()
                            } else {
                                self.var("long long", lin)
                            }
                        })
                        .clone();
                    if d == 0 {
                        format!("({l} / {stride}LL)")
                    } else {
                        format!("(({l} / {stride}LL) % {}LL)", dims[d])
                    }
                }
            };
            stride = stride.saturating_mul(dims[d]);
        }
        idx
    }

    /// The kernel's source with the name `name`: outputs, inputs, then the element count `n`.
    pub fn source(&self, name: &str) -> String {
        let mut params = vec![];
        for (i, (_, d)) in self.outputs.iter().enumerate() {
            params.push(format!("{}* __restrict__ o{i}", scalar::storage(*d)));
        }
        for (i, (_, d)) in self.inputs.iter().enumerate() {
            params.push(format!("const {}* __restrict__ p{i}", scalar::storage(*d)));
        }
        params.push("long long n".into());
        if self.each() {
            let mut lines = self.lines.clone();
            lines[0] = lines[0].replacen("XT_FOR(", "XT_FOR_EACH(", 1);
            return format!(
                "__global__ void {name}({}) {{\n{}\n}}\nXT_EACH_KERNEL({name})\n",
                params.join(", "),
                lines.join("\n")
            );
        }
        format!(
            "__global__ void {name}({}) {{\n{}\n}}\n",
            params.join(", "),
            self.lines.join("\n")
        )
    }

    /// The C variable holding element `idx` of `v` (computed once per block and index).
    pub fn value_at(&mut self, s: &Scope, v: Value, idx: &[String]) -> Result<String, LowerError> {
        let key: Key = (s.graph as *const Graph as usize, v, idx.to_vec());
        if let Some(name) = self.known.iter().rev().find_map(|m| m.get(&key)) {
            return Ok(name.clone());
        }
        let name = self.compute_at(s, v, idx)?;
        if let Some(top) = self.known.last_mut() {
            top.insert(key, name.clone());
        }
        Ok(name)
    }

    fn compute_at(&mut self, s: &Scope, v: Value, idx: &[String]) -> Result<String, LowerError> {
        let t = s.graph.ty(v).clone();
        let ct = scalar::compute(t.dtype);
        match s.home(v) {
            Home::Buf(slice) => {
                let p = self.input(*slice, t.dtype);
                let lin = offset(idx, &t.dims);
                return Ok(self.var(ct, scalar::load(t.dtype, &format!("{p}[{lin}]"))));
            }
            Home::Var(name) => return Ok(name.clone()),
            Home::Fused => {}
        }
        let node = s.graph.def(v);
        let ops = &node.operands;
        let ot = |i: usize| s.graph.ty(ops[i]).clone();
        let e = match &node.op {
            Op::Constant { bytes } => {
                if t.elements() != 1 {
                    return Err(unsupported(
                        "constant",
                        "a fused constant of more than one element",
                    ));
                }
                scalar::literal(t.dtype, bytes)
            }
            Op::Iota { dim } => scalar::convert(DType::I64, t.dtype, &idx[*dim]),
            Op::Unary(op) => {
                let x = self.value_at(s, ops[0], idx)?;
                scalar::unary(*op, ot(0).dtype, &x)
            }
            Op::Binary(op) => {
                let a = self.value_at(s, ops[0], idx)?;
                let b = self.value_at(s, ops[1], idx)?;
                scalar::binary(*op, t.dtype, &a, &b)
            }
            Op::Compare { direction, kind } => {
                let a = self.value_at(s, ops[0], idx)?;
                let b = self.value_at(s, ops[1], idx)?;
                scalar::compare_typed(*direction, *kind, ot(0).dtype, &a, &b)
            }
            Op::Select => {
                let p = self.at_or_scalar(s, ops[0], idx)?;
                let r = self.mut_var(ct, format!("({ct})0"));
                self.open(format!("if ({p}) {{"));
                let a = self.value_at(s, ops[1], idx)?;
                self.line(format!("{r} = {a};"));
                self.else_branch("} else {");
                let b = self.value_at(s, ops[2], idx)?;
                self.line(format!("{r} = {b};"));
                self.close("}");
                return Ok(r);
            }
            Op::Map { body } => {
                let mut xs = vec![];
                for &x in ops {
                    xs.push(self.value_at(s, x, idx)?);
                }
                let r = self.mut_var(ct, format!("({ct})0"));
                // The body's values are scalars (index []): a block of their own, so that
                // two positions of one map in a kernel do not share them.
                self.open("{");
                let mut homes = vec![Home::Fused; body.values().len()];
                for (p, x) in body.params().iter().zip(xs) {
                    homes[p.0 as usize] = Home::Var(x);
                }
                let bs = Scope {
                    graph: body,
                    homes: &homes,
                };
                let v = self.value_at(&bs, body.results()[0].1, &[])?;
                self.line(format!("{r} = {v};"));
                self.close("}");
                return Ok(r);
            }
            Op::Clamp => {
                let lo = self.at_or_scalar(s, ops[0], idx)?;
                let x = self.value_at(s, ops[1], idx)?;
                let hi = self.at_or_scalar(s, ops[2], idx)?;
                if crate::graph::is_float(t.dtype) {
                    format!("xh_fmin({hi}, xh_fmax({lo}, {x}))")
                } else {
                    format!("xh_imin<{ct}>({hi}, xh_imax<{ct}>({lo}, {x}))")
                }
            }
            Op::Convert => {
                let x = self.value_at(s, ops[0], idx)?;
                scalar::convert(ot(0).dtype, t.dtype, &x)
            }
            Op::ReducePrecision {
                exponent_bits,
                mantissa_bits,
            } => {
                let x = self.value_at(s, ops[0], idx)?;
                scalar::reduce_precision(t.dtype, &x, *exponent_bits, *mantissa_bits)
                    .ok_or_else(|| unsupported("reduce_precision", format!("{}", t.dtype)))?
            }
            Op::BitcastConvert => {
                let from = ot(0).dtype;
                if from.size() != t.dtype.size() {
                    return Err(unsupported(
                        "bitcast_convert",
                        format!(
                            "{from} to {} fused (the operand is materialized first)",
                            t.dtype
                        ),
                    ));
                }
                let x = self.value_at(s, ops[0], idx)?;
                scalar::bitcast(from, t.dtype, &x).ok_or_else(|| {
                    unsupported("bitcast_convert", format!("{from} to {}", t.dtype))
                })?
            }
            Op::BroadcastInDim { dims } => {
                let o = ot(0);
                let sub: Vec<String> = dims
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| {
                        if o.dims[i] == 1 {
                            "0".to_string()
                        } else {
                            idx[d].clone()
                        }
                    })
                    .collect();
                return self.value_at(s, ops[0], &sub);
            }
            Op::Reshape => {
                let lin = linear(idx, &t.dims);
                let sub = self.delinearize(&lin, &ot(0).dims);
                return self.value_at(s, ops[0], &sub);
            }
            Op::Transpose { perm } => {
                let mut sub = vec![String::new(); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    sub[p] = idx[i].clone();
                }
                return self.value_at(s, ops[0], &sub);
            }
            Op::Slice { start, strides, .. } => {
                let sub: Vec<String> = (0..idx.len())
                    .map(|d| format!("({}LL + {} * {}LL)", start[d], idx[d], strides[d]))
                    .collect();
                return self.value_at(s, ops[0], &sub);
            }
            Op::Reverse { dims } => {
                let sub: Vec<String> = (0..idx.len())
                    .map(|d| {
                        if dims.contains(&d) {
                            format!("({}LL - {})", t.dims[d] as i64 - 1, idx[d])
                        } else {
                            idx[d].clone()
                        }
                    })
                    .collect();
                return self.value_at(s, ops[0], &sub);
            }
            Op::Concatenate { dim } => {
                let r = self.mut_var(ct, format!("({ct})0"));
                let mut off = 0u64;
                for (k, x) in ops.iter().enumerate() {
                    let n = s.graph.ty(*x).dims[*dim];
                    let cond = format!("{} < {}LL", idx[*dim], off + n);
                    let head = if k == 0 {
                        format!("if ({cond}) {{")
                    } else if k + 1 == ops.len() {
                        "} else {".into()
                    } else {
                        format!("}} else if ({cond}) {{")
                    };
                    if k == 0 {
                        self.open(head);
                    } else {
                        self.else_branch(head);
                    }
                    let mut sub = idx.to_vec();
                    sub[*dim] = format!("({} - {off}LL)", idx[*dim]);
                    let e = self.value_at(s, *x, &sub)?;
                    self.line(format!("{r} = {e};"));
                    off += n;
                }
                self.close("}");
                return Ok(r);
            }
            Op::Pad { low, interior, .. } => {
                let o = ot(0);
                let mut conds = vec![];
                let mut sub = vec![];
                for d in 0..idx.len() {
                    let step = interior[d] + 1;
                    let tvar = self.var("long long", format!("{} - ({}LL)", idx[d], low[d]));
                    conds.push(format!(
                        "{tvar} >= 0 && {tvar} % {step}LL == 0 && {tvar} / {step}LL < {}LL",
                        o.dims[d]
                    ));
                    sub.push(format!("({tvar} / {step}LL)"));
                }
                let r = self.mut_var(ct, format!("({ct})0"));
                let cond = if conds.is_empty() {
                    "true".to_string()
                } else {
                    conds.join(" && ")
                };
                self.open(format!("if ({cond}) {{"));
                let a = self.value_at(s, ops[0], &sub)?;
                self.line(format!("{r} = {a};"));
                self.else_branch("} else {");
                let b = self.value_at(s, ops[1], &[])?;
                self.line(format!("{r} = {b};"));
                self.close("}");
                return Ok(r);
            }
            Op::DynamicSlice { sizes } => {
                let o = ot(0);
                let mut sub = vec![];
                for d in 0..idx.len() {
                    let st = self.value_at(s, ops[1 + d], &[])?;
                    let c = self.var(
                        "long long",
                        format!("xh_clampi((long long){st}, {}LL)", o.dims[d] - sizes[d]),
                    );
                    sub.push(self.var("long long", format!("{c} + {}", idx[d])));
                }
                return self.value_at(s, ops[0], &sub);
            }
            Op::DynamicUpdateSlice => {
                let u = ot(1);
                let mut conds = vec![];
                let mut sub = vec![];
                for d in 0..idx.len() {
                    let st = self.value_at(s, ops[2 + d], &[])?;
                    let c = self.var(
                        "long long",
                        format!("xh_clampi((long long){st}, {}LL)", t.dims[d] - u.dims[d]),
                    );
                    let j = self.var("long long", format!("{} - {c}", idx[d]));
                    conds.push(format!("{j} >= 0 && {j} < {}LL", u.dims[d]));
                    sub.push(j);
                }
                let r = self.mut_var(ct, format!("({ct})0"));
                let cond = if conds.is_empty() {
                    "true".to_string()
                } else {
                    conds.join(" && ")
                };
                self.open(format!("if ({cond}) {{"));
                let a = self.value_at(s, ops[1], &sub)?;
                self.line(format!("{r} = {a};"));
                self.else_branch("} else {");
                let b = self.value_at(s, ops[0], idx)?;
                self.line(format!("{r} = {b};"));
                self.close("}");
                return Ok(r);
            }
            Op::Gather {
                dims: d,
                slice_sizes,
            } => {
                let (o, si) = (ot(0), ot(1));
                let ivd = d.index_vector_dim;
                let batch: Vec<String> = (0..idx.len())
                    .filter(|k| !d.offset_dims.contains(k))
                    .map(|k| idx[k].clone())
                    .collect();
                let mut full = vec!["0".to_string(); o.rank()];
                for (j, &dop) in d.start_index_map.iter().enumerate() {
                    let mut sub = batch.clone();
                    if ivd < si.rank() {
                        sub.insert(ivd, format!("{j}LL"));
                    }
                    let sv = self.value_at(s, ops[1], &sub)?;
                    let hi = o.dims[dop] - slice_sizes[dop];
                    full[dop] =
                        self.var("long long", format!("xh_clampi((long long){sv}, {hi}LL)"));
                }
                for (&dop, &dst) in d
                    .operand_batching_dims
                    .iter()
                    .zip(&d.start_indices_batching_dims)
                {
                    full[dop] = batch[if dst < ivd { dst } else { dst - 1 }].clone();
                }
                let mut offsets = d.offset_dims.iter().map(|&k| idx[k].clone());
                for (dop, f) in full.iter_mut().enumerate() {
                    if !d.collapsed_slice_dims.contains(&dop)
                        && !d.operand_batching_dims.contains(&dop)
                    {
                        let off = offsets.next().unwrap_or_else(|| "0".into());
                        *f = format!("({f} + {off})");
                    }
                }
                return self.value_at(s, ops[0], &full);
            }
            other => {
                return Err(unsupported(
                    other.name(),
                    "fused into a kernel (a lowering bug: it is materialized)",
                ));
            }
        };
        Ok(self.var(ct, e))
    }

    /// `v` at `idx`, or its only element when it is a scalar (select's pred, clamp's bounds).
    fn at_or_scalar(&mut self, s: &Scope, v: Value, idx: &[String]) -> Result<String, LowerError> {
        if s.graph.ty(v).rank() == 0 {
            self.value_at(s, v, &[])
        } else {
            self.value_at(s, v, idx)
        }
    }
}
