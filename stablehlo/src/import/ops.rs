//! One StableHLO op into graph nodes: each op's operands, attributes (checked: an unknown
//! one is refused) and result type mapped to the xthunk-tensor builder call of the same
//! semantics; control flow through `regions.rs`, calls inlined.

use super::regions::{captures, region_block};
use super::{Env, ImportError, Importer, Item, check_attrs, lookup, tensor_type};
use crate::ast::{Attr, DenseData, Literal, Op, Type};
use crate::dense;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{
    BinaryOp, CompareDirection, CompareType, DotDims, FftType, GatherDims, Graph, ScatterDims,
    UnaryOp, Value, is_signed_int,
};

pub(super) type R<T> = Result<T, ImportError>;

/// The tensor operands of `op`.
pub(super) fn tensors(env: &Env, op: &Op) -> R<Vec<Value>> {
    op.operands
        .iter()
        .map(|r| match lookup(env, r, op)? {
            Item::Tensor(v) => Ok(v),
            Item::Tuple(_) => Err(ImportError::unsupported(
                op,
                format!("a tuple operand (%{})", r.name),
            )),
        })
        .collect()
}

fn arity(op: &Op, vs: &[Value], n: usize) -> R<()> {
    if vs.len() != n {
        return Err(ImportError::invalid(
            op,
            format!("{} operands, {n} expected", vs.len()),
        ));
    }
    Ok(())
}

/// The result type `i` as xthunk's.
pub(super) fn result(op: &Op, i: usize) -> R<xthunk_tensor::graph::TensorType> {
    let Some(ty) = op.result_types.get(i) else {
        return Err(ImportError::invalid(op, format!("no type for result {i}")));
    };
    tensor_type(ty, op, &format!("result {i}"))
}

fn ints(op: &Op, name: &str) -> R<Vec<i64>> {
    match op.attr(name) {
        Some(a) => a.as_ints().ok_or_else(|| {
            ImportError::invalid(op, format!("`{name}`: a list of integers expected"))
        }),
        None => Err(ImportError::invalid(op, format!("no `{name}`"))),
    }
}

fn dims_of(op: &Op, what: &str, v: &[i64]) -> R<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| ImportError::invalid(op, format!("`{what}`: negative value {d}")))
        })
        .collect()
}

fn sizes_of(op: &Op, what: &str, v: &[i64]) -> R<Vec<u64>> {
    v.iter()
        .map(|&d| {
            u64::try_from(d)
                .map_err(|_| ImportError::invalid(op, format!("`{what}`: negative value {d}")))
        })
        .collect()
}

pub(super) fn int_attr(op: &Op, name: &str) -> R<i128> {
    op.attr(name)
        .and_then(Attr::as_int)
        .ok_or_else(|| ImportError::invalid(op, format!("no integer `{name}`")))
}

/// A field of a dimension-numbers struct: a list (absent: empty).
fn field_dims(op: &Op, s: &Attr, name: &str) -> R<Vec<usize>> {
    match s.field(name) {
        None => Ok(vec![]),
        Some(a) => {
            let v = a.as_ints().ok_or_else(|| {
                ImportError::invalid(op, format!("`{name}`: a list of integers expected"))
            })?;
            dims_of(op, name, &v)
        }
    }
}

fn field_dim(op: &Op, s: &Attr, name: &str) -> R<usize> {
    match s.field(name) {
        None => Ok(0),
        Some(a) => a
            .as_int()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ImportError::invalid(op, format!("`{name}`: an index expected"))),
    }
}

/// A struct attribute's fields, each in `known`.
fn struct_attr<'a>(op: &'a Op, name: &str, known: &[&str]) -> R<&'a Attr> {
    let Some(a @ Attr::Struct { fields, .. }) = op.attr(name) else {
        return Err(ImportError::invalid(op, format!("no `{name}`")));
    };
    if let Some((f, _)) = fields.iter().find(|(f, _)| !known.contains(&f.as_str())) {
        return Err(ImportError::unsupported(
            op,
            format!("`{name}` field `{f}`"),
        ));
    }
    Ok(a)
}

fn direction(op: &Op) -> R<CompareDirection> {
    let v = op
        .attr("comparison_direction")
        .and_then(Attr::enum_value)
        .unwrap_or("");
    CompareDirection::ALL
        .iter()
        .find(|d| d.name() == v)
        .copied()
        .ok_or_else(|| ImportError::invalid(op, format!("comparison direction `{v}`")))
}

fn compare_type(op: &Op, d: DType) -> R<CompareType> {
    match op.attr("compare_type").and_then(Attr::enum_value) {
        None | Some("NOTYPE") => Ok(if d.is_float() || d.is_complex() {
            CompareType::Float
        } else if is_signed_int(d) {
            CompareType::Signed
        } else {
            CompareType::Unsigned
        }),
        Some(v) => CompareType::ALL
            .iter()
            .find(|t| t.name() == v)
            .copied()
            .ok_or_else(|| ImportError::unsupported(op, format!("comparison type `{v}`"))),
    }
}

/// A splat `dense<x> : tensor<...>` (one literal, not a list) as the same value of a scalar
/// type, so that decoding it does not expand it to the whole shape.
fn splat_scalar(value: &Attr) -> Option<Attr> {
    match value {
        Attr::Dense {
            data: data @ DenseData::Literals(l),
            ty: Type::Tensor { elem, .. },
            pos,
        } if !matches!(l, Literal::List(_)) => Some(Attr::Dense {
            data: data.clone(),
            ty: Type::Tensor {
                dims: Some(vec![]),
                elem: *elem,
                encoding: None,
            },
            pos: *pos,
        }),
        _ => None,
    }
}

/// A `dot_general` `algorithm` is accepted only where it names what the lowering does
/// anyway: operands and accumulation in the operands' own type, one primitive operation.
fn default_algorithm(op: &Op, d: DType) -> R<()> {
    let Some(a) = op.attr("algorithm") else {
        return Ok(());
    };
    let ty_is = |f: &str| match a.field(f) {
        Some(Attr::Type(t)) => t.element().and_then(super::dtype) == Some(d),
        _ => false,
    };
    let one_is = |f: &str| a.field(f).and_then(Attr::as_int) == Some(1);
    let plain = ty_is("lhs_precision_type")
        && ty_is("rhs_precision_type")
        && ty_is("accumulation_type")
        && one_is("lhs_component_count")
        && one_is("rhs_component_count")
        && one_is("num_primitive_operations");
    if plain {
        Ok(())
    } else {
        Err(ImportError::unsupported(
            op,
            "a dot algorithm other than the operands' own type",
        ))
    }
}

fn one(v: Value) -> Vec<Item> {
    vec![Item::Tensor(v)]
}

fn many(vs: Vec<Value>) -> Vec<Item> {
    vs.into_iter().map(Item::Tensor).collect()
}

impl Importer<'_> {
    /// Imports `op` into `g`; returns its results.
    pub(crate) fn op(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        let name = op.name.as_str();
        // The elementwise ops: StableHLO's as `stablehlo.<name>`, CHLO's as `chlo.<name>`
        // (`chlo.tan` is StableHLO's `tan`; `chlo.square` is `x * x`).
        let (short, chlo) = match name.strip_prefix("chlo.") {
            Some("tan") => ("tan", false),
            Some(c) => (c, true),
            None => (name.strip_prefix("stablehlo.").unwrap_or(""), false),
        };
        let gr = |e| ImportError::graph(op, e);
        if chlo && short == "square" {
            check_attrs(op, &[])?;
            let x = tensors(env, op)?;
            arity(op, &x, 1)?;
            return Ok(one(g.binary(BinaryOp::Multiply, x[0], x[0]).map_err(gr)?));
        }
        if let Some(u) = UnaryOp::ALL
            .iter()
            .find(|u| u.name() == short && u.is_chlo() == chlo)
        {
            check_attrs(op, &["result_accuracy"])?;
            let x = tensors(env, op)?;
            arity(op, &x, 1)?;
            return Ok(one(g.unary(*u, x[0]).map_err(gr)?));
        }
        if let Some(b) = BinaryOp::ALL
            .iter()
            .find(|b| b.name() == short && b.is_chlo() == chlo)
        {
            check_attrs(op, &[])?;
            let x = tensors(env, op)?;
            arity(op, &x, 2)?;
            return Ok(one(g.binary(*b, x[0], x[1]).map_err(gr)?));
        }
        if let Some(r) = self.collective_op(g, op, env) {
            return r;
        }
        match name {
            "sdy.manual_computation" => self.manual_computation(g, op, env),
            "func.call" => {
                check_attrs(op, &["callee", "arg_attrs", "res_attrs", "no_inline"])?;
                let callee = match op.attr("callee") {
                    Some(Attr::Symbol(path)) if path.len() == 1 => path[0].clone(),
                    _ => return Err(ImportError::invalid(op, "no callee `@name`")),
                };
                let args = op
                    .operands
                    .iter()
                    .map(|r| lookup(env, r, op))
                    .collect::<R<_>>()?;
                self.call(g, op, &callee, args)
            }
            "stablehlo.composite" => {
                check_attrs(
                    op,
                    &["name", "composite_attributes", "decomposition", "version"],
                )?;
                let callee = match op.attr("decomposition") {
                    Some(Attr::Symbol(path)) if path.len() == 1 => path[0].clone(),
                    _ => return Err(ImportError::invalid(op, "no `decomposition`")),
                };
                let args = op
                    .operands
                    .iter()
                    .map(|r| lookup(env, r, op))
                    .collect::<R<_>>()?;
                self.call(g, op, &callee, args)
            }
            "stablehlo.tuple" => {
                check_attrs(op, &[])?;
                let items = op
                    .operands
                    .iter()
                    .map(|r| lookup(env, r, op))
                    .collect::<R<_>>()?;
                Ok(vec![Item::Tuple(items)])
            }
            "stablehlo.get_tuple_element" => {
                check_attrs(op, &["index"])?;
                let i = int_attr(op, "index")?;
                let [r] = op.operands.as_slice() else {
                    return Err(ImportError::invalid(op, "one operand expected"));
                };
                match lookup(env, r, op)? {
                    Item::Tuple(items) => usize::try_from(i)
                        .ok()
                        .and_then(|i| items.get(i).cloned())
                        .map(|item| vec![item])
                        .ok_or_else(|| ImportError::invalid(op, format!("index {i} out of range"))),
                    Item::Tensor(_) => Err(ImportError::invalid(op, "operand is not a tuple")),
                }
            }
            "stablehlo.optimization_barrier" => {
                check_attrs(op, &[])?;
                op.operands.iter().map(|r| lookup(env, r, op)).collect()
            }
            // A sharding annotation: the value itself on one device (its attributes are
            // Shardy's, all ignored).
            "sdy.sharding_constraint" | "sdy.reshard" => {
                if self.spmd.ranks() > 1
                    && !self.in_manual
                    && op.attr("sharding").is_some_and(super::ranks::splits)
                {
                    return Err(ImportError::unsupported(
                        op,
                        "a sharding constraint outside a manual computation: this needs an automatic partitioner, which xthunk does not have",
                    ));
                }
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                Ok(one(x[0]))
            }
            "stablehlo.constant" => {
                check_attrs(op, &["value"])?;
                let t = result(op, 0)?;
                let Some(value) = op.attr("value") else {
                    return Err(ImportError::invalid(op, "no `value`"));
                };
                // A splat is decoded as its one element (not expanded to the whole shape).
                let (decoded, elems) = match splat_scalar(value) {
                    Some(scalar) => (scalar, 1),
                    None => (value.clone(), t.elements()),
                };
                let bytes =
                    dense::decode(&decoded, &self.module.resources, dense::MAX_BYTES, name)?;
                let bytes = if elems == 1 && t.elements() != 1 {
                    let s = g.constant(t.dtype, &[], bytes).map_err(gr)?;
                    return Ok(one(g.broadcast_in_dim(s, &t.dims, &[]).map_err(gr)?));
                } else {
                    bytes
                };
                Ok(one(self.constant(g, op, t, bytes)?))
            }
            "stablehlo.reduce_precision" => {
                check_attrs(op, &["exponent_bits", "mantissa_bits"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let bits = |name: &str| -> R<u32> {
                    u32::try_from(int_attr(op, name)?)
                        .map_err(|_| ImportError::invalid(op, format!("`{name}` out of range")))
                };
                let (e, m) = (bits("exponent_bits")?, bits("mantissa_bits")?);
                Ok(one(g.reduce_precision(x[0], e, m).map_err(gr)?))
            }
            "stablehlo.iota" => {
                check_attrs(op, &["iota_dimension"])?;
                let t = result(op, 0)?;
                let d = usize::try_from(int_attr(op, "iota_dimension")?)
                    .map_err(|_| ImportError::invalid(op, "negative `iota_dimension`"))?;
                Ok(one(g.iota(t.dtype, &t.dims, d).map_err(gr)?))
            }
            "stablehlo.compare" => {
                check_attrs(op, &["comparison_direction", "compare_type"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 2)?;
                let kind = compare_type(op, g.ty(x[0]).dtype)?;
                Ok(one(g
                    .compare(direction(op)?, kind, x[0], x[1])
                    .map_err(gr)?))
            }
            "stablehlo.select" | "stablehlo.clamp" => {
                check_attrs(op, &[])?;
                let x = tensors(env, op)?;
                arity(op, &x, 3)?;
                let v = if short == "select" {
                    g.select(x[0], x[1], x[2])
                } else {
                    g.clamp(x[0], x[1], x[2])
                };
                Ok(one(v.map_err(gr)?))
            }
            "stablehlo.convert" | "stablehlo.bitcast_convert" => {
                check_attrs(op, &[])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let to = result(op, 0)?.dtype;
                let v = if short == "convert" {
                    g.convert(x[0], to)
                } else {
                    g.bitcast_convert(x[0], to)
                };
                Ok(one(v.map_err(gr)?))
            }
            "stablehlo.broadcast_in_dim" => {
                check_attrs(op, &["broadcast_dimensions"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let t = result(op, 0)?;
                let map = dims_of(
                    op,
                    "broadcast_dimensions",
                    &ints(op, "broadcast_dimensions")?,
                )?;
                Ok(one(g.broadcast_in_dim(x[0], &t.dims, &map).map_err(gr)?))
            }
            // Deprecated in StableHLO (a `broadcast_in_dim` whose new dimensions lead).
            "stablehlo.broadcast" => {
                check_attrs(op, &["broadcast_sizes"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let t = result(op, 0)?;
                let sizes = sizes_of(op, "broadcast_sizes", &ints(op, "broadcast_sizes")?)?;
                let rank = g.ty(x[0]).rank();
                let lead = sizes.len();
                let map: Vec<usize> = (lead..lead + rank).collect();
                Ok(one(g.broadcast_in_dim(x[0], &t.dims, &map).map_err(gr)?))
            }
            // A static dimension's size, as an i32 constant (dynamic shapes are refused).
            "stablehlo.get_dimension_size" => {
                check_attrs(op, &["dimension"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let d = int_attr(op, "dimension")?;
                let dims = g.ty(x[0]).dims.clone();
                let size = usize::try_from(d)
                    .ok()
                    .and_then(|d| dims.get(d))
                    .ok_or_else(|| {
                        ImportError::invalid(
                            op,
                            format!("dimension {d} of a rank-{} operand", dims.len()),
                        )
                    })?;
                let size = i32::try_from(*size).map_err(|_| {
                    ImportError::invalid(op, format!("size {size} does not fit the i32 result"))
                })?;
                let t = result(op, 0)?;
                if t.dtype != DType::I32 || t.rank() != 0 {
                    return Err(ImportError::invalid(
                        op,
                        format!("result {t}: tensor<i32> expected"),
                    ));
                }
                Ok(one(g
                    .constant(DType::I32, &[], size.to_le_bytes().to_vec())
                    .map_err(gr)?))
            }
            "stablehlo.map" => {
                check_attrs(op, &["dimensions"])?;
                let x = tensors(env, op)?;
                let rank = x.first().map(|v| g.ty(*v).rank()).unwrap_or(0);
                let dims = dims_of(op, "dimensions", &ints(op, "dimensions")?)?;
                // The spec's constraint: the dimensions are all of them, in order.
                if dims != (0..rank).collect::<Vec<_>>() {
                    return Err(ImportError::invalid(
                        op,
                        format!("dimensions {dims:?}: [0, …, {}) expected", rank),
                    ));
                }
                let body = self.closed_body(g, env, op)?;
                let v = g.map(&x, body).map_err(gr)?;
                if *g.ty(v) != result(op, 0)? {
                    return Err(ImportError::invalid(
                        op,
                        format!("result {}, {} computed", result(op, 0)?, g.ty(v)),
                    ));
                }
                Ok(one(v))
            }
            "stablehlo.reshape" => {
                check_attrs(op, &[])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                Ok(one(g.reshape(x[0], &result(op, 0)?.dims).map_err(gr)?))
            }
            "stablehlo.transpose" => {
                check_attrs(op, &["permutation"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let p = dims_of(op, "permutation", &ints(op, "permutation")?)?;
                Ok(one(g.transpose(x[0], &p).map_err(gr)?))
            }
            "stablehlo.concatenate" => {
                check_attrs(op, &["dimension"])?;
                let x = tensors(env, op)?;
                let d = usize::try_from(int_attr(op, "dimension")?)
                    .map_err(|_| ImportError::invalid(op, "negative `dimension`"))?;
                Ok(one(g.concatenate(&x, d).map_err(gr)?))
            }
            "stablehlo.slice" => {
                check_attrs(op, &["start_indices", "limit_indices", "strides"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let s = sizes_of(op, "start_indices", &ints(op, "start_indices")?)?;
                let l = sizes_of(op, "limit_indices", &ints(op, "limit_indices")?)?;
                let st = sizes_of(op, "strides", &ints(op, "strides")?)?;
                Ok(one(g.slice(x[0], &s, &l, &st).map_err(gr)?))
            }
            "stablehlo.dynamic_slice" => {
                check_attrs(op, &["slice_sizes"])?;
                let x = tensors(env, op)?;
                if x.is_empty() {
                    return Err(ImportError::invalid(op, "no operand"));
                }
                let sizes = sizes_of(op, "slice_sizes", &ints(op, "slice_sizes")?)?;
                Ok(one(g.dynamic_slice(x[0], &x[1..], &sizes).map_err(gr)?))
            }
            "stablehlo.dynamic_update_slice" => {
                check_attrs(op, &[])?;
                let x = tensors(env, op)?;
                if x.len() < 2 {
                    return Err(ImportError::invalid(
                        op,
                        "an operand and an update expected",
                    ));
                }
                Ok(one(g
                    .dynamic_update_slice(x[0], x[1], &x[2..])
                    .map_err(gr)?))
            }
            "stablehlo.pad" => {
                check_attrs(
                    op,
                    &["edge_padding_low", "edge_padding_high", "interior_padding"],
                )?;
                let x = tensors(env, op)?;
                arity(op, &x, 2)?;
                let low = ints(op, "edge_padding_low")?;
                let high = ints(op, "edge_padding_high")?;
                let interior = sizes_of(op, "interior_padding", &ints(op, "interior_padding")?)?;
                Ok(one(g
                    .pad(x[0], x[1], &low, &high, &interior)
                    .map_err(gr)?))
            }
            "stablehlo.reverse" => {
                check_attrs(op, &["dimensions"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let d = dims_of(op, "dimensions", &ints(op, "dimensions")?)?;
                Ok(one(g.reverse(x[0], &d).map_err(gr)?))
            }
            "stablehlo.dot_general" | "stablehlo.dot" => self.dot(g, op, env),
            "stablehlo.reduce" => {
                check_attrs(op, &["dimensions"])?;
                let x = tensors(env, op)?;
                let n = x.len() / 2;
                if x.len() % 2 != 0 || n == 0 {
                    return Err(ImportError::invalid(
                        op,
                        "inputs and as many init values expected",
                    ));
                }
                let dims = dims_of(op, "dimensions", &ints(op, "dimensions")?)?;
                let body = self.closed_body(g, env, op)?;
                Ok(many(g.reduce(&x[..n], &x[n..], &dims, body).map_err(gr)?))
            }
            "stablehlo.batch_norm_inference"
            | "stablehlo.batch_norm_training"
            | "stablehlo.batch_norm_grad" => self.batch_norm(g, op, env),
            "stablehlo.cholesky" => self.cholesky(g, op, env),
            "stablehlo.rng_bit_generator" => {
                check_attrs(op, &["rng_algorithm"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let algorithm = match op.attr("rng_algorithm").and_then(Attr::enum_value) {
                    // XLA's DEFAULT on its CPU and GPU backends.
                    Some("DEFAULT" | "PHILOX") | None => xthunk_tensor::graph::RngAlgorithm::Philox,
                    Some("THREE_FRY") => xthunk_tensor::graph::RngAlgorithm::ThreeFry,
                    Some(other) => {
                        return Err(ImportError::invalid(op, format!("rng_algorithm `{other}`")));
                    }
                };
                let out = result(op, 1)?;
                let vs = g
                    .rng_bit_generator(x[0], algorithm, out.dtype, &out.dims)
                    .map_err(gr)?;
                for (i, v) in vs.iter().enumerate() {
                    if *g.ty(*v) != result(op, i)? {
                        return Err(ImportError::invalid(
                            op,
                            format!("result {i} {}, {} computed", result(op, i)?, g.ty(*v)),
                        ));
                    }
                }
                Ok(many(vs))
            }
            "stablehlo.rng" => {
                check_attrs(op, &["rng_distribution"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 3)?;
                let distribution = match op.attr("rng_distribution").and_then(Attr::enum_value) {
                    Some("UNIFORM") => xthunk_tensor::graph::RngDistribution::Uniform,
                    Some("NORMAL") => xthunk_tensor::graph::RngDistribution::Normal,
                    other => {
                        return Err(ImportError::invalid(
                            op,
                            format!("rng_distribution {other:?}: UNIFORM or NORMAL expected"),
                        ));
                    }
                };
                let out = result(op, 0)?;
                // The shape operand gives the result's shape, which the result type states.
                let shape = g.ty(x[2]).clone();
                if shape.rank() != 1 || shape.dims[0] != out.rank() as u64 || !shape.dtype.is_int()
                {
                    return Err(ImportError::invalid(
                        op,
                        format!("shape operand {shape} for a result {out}"),
                    ));
                }
                let v = g.rng(x[0], x[1], distribution, &out.dims).map_err(gr)?;
                if *g.ty(v) != out {
                    return Err(ImportError::invalid(
                        op,
                        format!("result {out}, {} computed", g.ty(v)),
                    ));
                }
                Ok(one(v))
            }
            "stablehlo.triangular_solve" => self.triangular_solve(g, op, env),
            "stablehlo.reduce_window" => self.reduce_window(g, op, env),
            "stablehlo.convolution" => self.convolution(g, op, env),
            "stablehlo.select_and_scatter" => self.select_and_scatter(g, op, env),
            "stablehlo.gather" => self.gather(g, op, env),
            "stablehlo.sort" => self.sort(g, op, env),
            "chlo.top_k" => self.top_k(g, op, env),
            "stablehlo.scatter" => self.scatter(g, op, env),
            "stablehlo.while" => self.while_(g, op, env),
            "stablehlo.case" | "stablehlo.if" => self.case(g, op, env),
            "stablehlo.fft" => {
                check_attrs(op, &["fft_type", "fft_length"])?;
                let x = tensors(env, op)?;
                arity(op, &x, 1)?;
                let ty = op.attr("fft_type").and_then(Attr::enum_value).unwrap_or("");
                let kind = FftType::ALL
                    .iter()
                    .find(|(_, n)| *n == ty)
                    .map(|(k, _)| *k)
                    .ok_or_else(|| ImportError::invalid(op, format!("fft_type `{ty}`")))?;
                let lengths = sizes_of(op, "fft_length", &ints(op, "fft_length")?)?;
                Ok(one(g.fft(x[0], kind, &lengths).map_err(gr)?))
            }
            "stablehlo.custom_call" => self.custom_call(g, op, env),
            "stablehlo.after_all"
            | "stablehlo.create_token"
            | "stablehlo.infeed"
            | "stablehlo.outfeed"
            | "stablehlo.send"
            | "stablehlo.recv" => Err(ImportError::unsupported(
                op,
                format!(
                    "op `{name}`: tokens and transfers to the host are not supported (an \
                         xthunk program has no host I/O channel; see docs/stablehlo.md)"
                ),
            )),
            "stablehlo.dynamic_broadcast_in_dim"
            | "stablehlo.dynamic_conv"
            | "stablehlo.dynamic_gather"
            | "stablehlo.dynamic_iota"
            | "stablehlo.dynamic_pad"
            | "stablehlo.dynamic_reshape"
            | "stablehlo.real_dynamic_slice"
            | "stablehlo.set_dimension_size" => Err(ImportError::unsupported(
                op,
                format!(
                    "op `{name}`: dynamic shapes are not supported (every shape must be static)"
                ),
            )),
            "stablehlo.uniform_quantize" | "stablehlo.uniform_dequantize" => {
                Err(ImportError::unsupported(
                    op,
                    format!("op `{name}`: quantized types are not supported"),
                ))
            }
            "stablehlo.einsum"
            | "stablehlo.unary_einsum"
            | "stablehlo.torch_index_select"
            | "stablehlo.cross-replica-sum"
            | "stablehlo.trace" => Err(ImportError::unsupported(
                op,
                format!(
                    "op `{name}`: outside the StableHLO specification (its \"Not in HLO\" ops, \
                     which JAX does not emit; use dot_general, gather or all_reduce)"
                ),
            )),
            _ => Err(ImportError::unsupported(op, format!("op `{name}`"))),
        }
    }

    /// A constant: a splat of more than one element as a scalar and a broadcast (fused into
    /// its readers, nothing stored).
    fn constant(
        &mut self,
        g: &mut Graph,
        op: &Op,
        t: xthunk_tensor::graph::TensorType,
        bytes: Vec<u8>,
    ) -> R<Value> {
        let gr = |e| ImportError::graph(op, e);
        let size = t.dtype.size();
        let splat = t.elements() > 1
            && bytes.len() >= size
            && bytes.chunks(size).all(|c| c == &bytes[..size]);
        if splat {
            let s = g
                .constant(t.dtype, &[], bytes[..size].to_vec())
                .map_err(gr)?;
            return g.broadcast_in_dim(s, &t.dims, &[]).map_err(gr);
        }
        g.constant(t.dtype, &t.dims, bytes).map_err(gr)
    }

    fn dot(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        let x = tensors(env, op)?;
        arity(op, &x, 2)?;
        let out = result(op, 0)?.dtype;
        let dims = if op.name == "stablehlo.dot" {
            check_attrs(op, &["precision_config"])?;
            DotDims {
                lhs_contracting: vec![g.ty(x[0]).rank().saturating_sub(1)],
                rhs_contracting: vec![0],
                ..Default::default()
            }
        } else {
            check_attrs(
                op,
                &["dot_dimension_numbers", "precision_config", "algorithm"],
            )?;
            default_algorithm(op, g.ty(x[0]).dtype)?;
            let known = [
                "lhs_batching_dimensions",
                "rhs_batching_dimensions",
                "lhs_contracting_dimensions",
                "rhs_contracting_dimensions",
            ];
            let s = struct_attr(op, "dot_dimension_numbers", &known)?;
            DotDims {
                lhs_batch: field_dims(op, s, known[0])?,
                rhs_batch: field_dims(op, s, known[1])?,
                lhs_contracting: field_dims(op, s, known[2])?,
                rhs_contracting: field_dims(op, s, known[3])?,
            }
        };
        let v = g
            .dot_general(x[0], x[1], dims, out)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(one(v))
    }

    fn gather(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(
            op,
            &["dimension_numbers", "slice_sizes", "indices_are_sorted"],
        )?;
        let x = tensors(env, op)?;
        arity(op, &x, 2)?;
        let known = [
            "offset_dims",
            "collapsed_slice_dims",
            "operand_batching_dims",
            "start_indices_batching_dims",
            "start_index_map",
            "index_vector_dim",
        ];
        let s = struct_attr(op, "dimension_numbers", &known)?;
        let d = GatherDims {
            offset_dims: field_dims(op, s, known[0])?,
            collapsed_slice_dims: field_dims(op, s, known[1])?,
            operand_batching_dims: field_dims(op, s, known[2])?,
            start_indices_batching_dims: field_dims(op, s, known[3])?,
            start_index_map: field_dims(op, s, known[4])?,
            index_vector_dim: field_dim(op, s, known[5])?,
        };
        let sizes = sizes_of(op, "slice_sizes", &ints(op, "slice_sizes")?)?;
        let v = g
            .gather(x[0], x[1], d, &sizes)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(one(v))
    }

    fn scatter(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(
            op,
            &[
                "scatter_dimension_numbers",
                "indices_are_sorted",
                "unique_indices",
            ],
        )?;
        let x = tensors(env, op)?;
        let n = x.len() / 2;
        if x.len() % 2 != 1 || n == 0 {
            return Err(ImportError::invalid(
                op,
                "inputs, indices and as many updates expected",
            ));
        }
        let known = [
            "update_window_dims",
            "inserted_window_dims",
            "input_batching_dims",
            "scatter_indices_batching_dims",
            "scatter_dims_to_operand_dims",
            "index_vector_dim",
        ];
        let s = struct_attr(op, "scatter_dimension_numbers", &known)?;
        let d = ScatterDims {
            update_window_dims: field_dims(op, s, known[0])?,
            inserted_window_dims: field_dims(op, s, known[1])?,
            input_batching_dims: field_dims(op, s, known[2])?,
            scatter_indices_batching_dims: field_dims(op, s, known[3])?,
            scatter_dims_to_operand_dims: field_dims(op, s, known[4])?,
            index_vector_dim: field_dim(op, s, known[5])?,
        };
        let unique = op
            .attr("unique_indices")
            .and_then(Attr::as_bool)
            .unwrap_or(false);
        let body = self.closed_body(g, env, op)?;
        let v = g
            .scatter(&x[..n], x[n], &x[n + 1..], d, body, unique)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(many(v))
    }

    /// `while`: what the condition or the body reads from outside is carried too (the body
    /// passes it through unchanged), and dropped from the results.
    fn while_(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(op, &[])?;
        let x = tensors(env, op)?;
        let (cb, bb) = (region_block(op, 0)?, region_block(op, 1)?);
        if cb.args.len() != x.len() || bb.args.len() != x.len() || op.regions.len() != 2 {
            return Err(ImportError::invalid(
                op,
                format!(
                    "a condition and a body taking the {} operands expected",
                    x.len()
                ),
            ));
        }
        let caps = captures(g, env, op, &[cb, bb], &mut self.free)?;
        let cond = self.region_graph(g, op, "cond", cb, &caps)?;
        let mut body = self.region_graph(g, op, "body", bb, &caps)?;
        let passed: Vec<Value> = body.params()[x.len()..].to_vec();
        for (i, p) in passed.into_iter().enumerate() {
            body.result(&format!("c{i}"), p)
                .map_err(|e| ImportError::graph(op, e))?;
        }
        let mut operands = x.clone();
        operands.extend(caps.passed.iter().map(|(_, v)| *v));
        let out = g
            .while_loop(&operands, cond, body)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(many(out[..x.len()].to_vec()))
    }

    /// `case` (an i32 index) and `if` (a pred): the branches take what they read from
    /// outside as the node's operands.
    fn case(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(op, &[])?;
        let x = tensors(env, op)?;
        arity(op, &x, 1)?;
        let blocks = (0..op.regions.len())
            .map(|i| region_block(op, i))
            .collect::<R<Vec<_>>>()?;
        let caps = captures(g, env, op, &blocks, &mut self.free)?;
        let mut branches = vec![];
        for (i, b) in blocks.iter().enumerate() {
            if !b.args.is_empty() {
                return Err(ImportError::invalid(
                    op,
                    format!("branch {i} has arguments"),
                ));
            }
            branches.push(self.region_graph(g, op, &format!("branch{i}"), b, &caps)?);
        }
        let operands: Vec<Value> = caps.passed.iter().map(|(_, v)| *v).collect();
        let out = g
            .case(x[0], &operands, branches)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(many(out))
    }
}
