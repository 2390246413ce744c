//! StableHLO portable artifacts: MLIR bytecode of the VHLO dialect (what `jax.export`
//! serializes as `mlir_module_serialized`), read by [`crate::bytecode`] and turned into the
//! same syntax tree the text reader gives, so the importer is reused unchanged.
//!
//! Each versioned op (`vhlo.add_v1`, `vhlo.dot_general_v2`, …) becomes its StableHLO op in
//! the generic form; VHLO's flat attributes are regrouped as StableHLO has them (the dot,
//! gather, scatter and convolution dimension numbers), integer lists (VHLO tensors) become
//! `array<i64: …>`, and attributes at their default value (a default result accuracy, no dot
//! algorithm) are dropped as StableHLO's printer drops them.
//!
//! The artifact names the StableHLO version it was written for (its producer,
//! `StableHLO_v1.15.0`): versions from [`MIN_VERSION`] to [`MAX_VERSION`] are read (the op
//! set of the table below, taken from StableHLO's `VhloOps.td` at 1.20.0); a newer one is
//! refused naming both.

use crate::ast::{Attr, Block, DenseData, Literal, Module, Op, Pos, Region, Type};
use crate::ast::{Dim, ElementType, Float};
use crate::bytecode::{self, BytecodeError, RawBlock, RawOp, V};
use crate::vhlo_ops::OPS;

/// The oldest StableHLO version whose artifacts are read.
pub const MIN_VERSION: (u32, u32, u32) = (1, 0, 0);
/// The newest StableHLO version whose artifacts are read.
pub const MAX_VERSION: (u32, u32, u32) = (1, 20, 0);

type R<T> = Result<T, BytecodeError>;

fn unsupported<T>(what: impl Into<String>) -> R<T> {
    Err(BytecodeError::Unsupported { what: what.into() })
}

fn show(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

/// The StableHLO version of a producer string `StableHLO_vX.Y.Z`.
pub fn producer_version(producer: &str) -> Option<(u32, u32, u32)> {
    let v = producer.strip_prefix("StableHLO_v")?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let out = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(out)
}

/// One line saying what a portable artifact (bare, or inside a `jax.export` serialization)
/// declares: its producer and bytecode version, and `jax.export`'s fields.
pub fn describe(bytes: &[u8]) -> R<String> {
    let (module, exported) = if bytecode::is_bytecode(bytes) {
        (bytes, None)
    } else {
        let e = crate::jax_export::read(bytes)?;
        (e.module, Some(e))
    };
    let (version, producer) = bytecode::header(module)?;
    let mut s = format!(
        "StableHLO portable artifact: producer {}, MLIR bytecode version {version}",
        crate::error::one_line(&producer)
    );
    if let Some(e) = exported {
        s.push_str(&format!(
            "; jax.export of `{}`: serialization version {}, calling convention version {}, \
             {} device(s), platforms [{}], module arguments kept {:?}",
            crate::error::one_line(&e.function_name),
            e.serialization_version,
            e.calling_convention_version,
            e.nr_devices,
            crate::error::one_line(&e.platforms.join(", ")),
            e.kept_args
        ));
    }
    Ok(s)
}

/// Reads a portable artifact into a [`Module`], checking its version.
pub fn read(bytes: &[u8]) -> R<Module> {
    let bc = bytecode::read(bytes, &property_names)?;
    let Some(version) = producer_version(&bc.producer) else {
        return unsupported(format!(
            "producer `{}` (a StableHLO portable artifact names `StableHLO_vX.Y.Z`)",
            crate::error::one_line(&bc.producer)
        ));
    };
    if version > MAX_VERSION {
        return unsupported(format!(
            "the artifact is StableHLO {}, newer than the newest this xthunk reads ({}): \
             an xthunk that reads it, or an export from an older JAX, is needed",
            show(version),
            show(MAX_VERSION)
        ));
    }
    if version < MIN_VERSION {
        return unsupported(format!(
            "the artifact is StableHLO {}, older than the oldest this xthunk reads ({})",
            show(version),
            show(MIN_VERSION)
        ));
    }
    let mut tops = bc.ops.into_iter();
    let (Some(top), None) = (tops.next(), tops.next()) else {
        return unsupported("an artifact whose top level is not one `builtin.module`");
    };
    if top.name != "builtin.module" {
        return unsupported(format!("a top-level `{}`", top.name));
    }
    for (k, v) in &top.attrs {
        if k == "jax.uses_shape_polymorphism" && *v == V::Bool(true) {
            return unsupported(
                "shape polymorphism (symbolic dimensions): export with concrete shapes",
            );
        }
    }
    let op = convert(top, Parent::Module)?;
    Ok(Module {
        op,
        loc_aliases: vec![],
        resources: vec![],
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Parent {
    Module,
    Func,
    Other,
}

/// The properties of each op, in the order the bytecode writes them (ODS sorts them by name).
fn property_names(op: &str) -> Option<Vec<(&'static str, bool)>> {
    if op == "builtin.module" {
        return Some(vec![("sym_name", true), ("sym_visibility", true)]);
    }
    let name = op.strip_prefix("vhlo.")?;
    let i = OPS.binary_search_by(|(n, _)| n.cmp(&name)).ok()?;
    Some(OPS[i].1.iter().map(|&a| (a, false)).collect())
}

/// `add_v1` → `add`.
fn unversioned(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

fn convert(raw: RawOp, parent: Parent) -> R<Op> {
    let vname = raw.name.strip_prefix("vhlo.");
    let name = match (vname, parent) {
        (None, _) if raw.name == "builtin.module" => raw.name.clone(),
        (None, _) => return unsupported(format!("op `{}` (not VHLO)", raw.name)),
        (Some(v), _) if property_names(&raw.name).is_none() => {
            return unsupported(format!("VHLO op `{v}`"));
        }
        (Some("func_v1"), _) => "func.func".into(),
        (Some("call_v1"), _) => "func.call".into(),
        (Some("return_v1"), Parent::Func) => "func.return".into(),
        (Some(v), _) => format!("stablehlo.{}", unversioned(v)),
    };
    let inner = match name.as_str() {
        "builtin.module" => Parent::Module,
        "func.func" => Parent::Func,
        _ => Parent::Other,
    };
    let mut attrs = attributes(&name, raw.attrs)?;
    attrs.sort_by(|a, b| a.0.cmp(&b.0));
    let regions = raw
        .regions
        .into_iter()
        .map(|blocks| {
            Ok(Region {
                blocks: blocks
                    .into_iter()
                    .map(|b| block(b, inner))
                    .collect::<R<_>>()?,
            })
        })
        .collect::<R<_>>()?;
    Ok(Op {
        name,
        results: raw.results,
        operands: raw.operands,
        attrs,
        regions,
        successors: raw.successors,
        operand_types: raw.operand_types,
        result_types: raw.result_types,
        loc: Some(raw.loc),
        pos: Pos::default(),
    })
}

fn block(b: RawBlock, parent: Parent) -> R<Block> {
    Ok(Block {
        label: None,
        args: b.args,
        ops: b
            .ops
            .into_iter()
            .map(|o| convert(o, parent))
            .collect::<R<_>>()?,
    })
}

/// A VHLO attribute value as the text reader would have given it.
fn attr(v: V, name: &str) -> R<Attr> {
    Ok(match v {
        V::Unit => Attr::Unit,
        V::Bool(b) => Attr::Bool(b),
        V::Int { value, ty } => Attr::Int {
            value,
            ty: Some(ty),
        },
        V::Float { value, ty } => Attr::Float {
            value: Float(value),
            ty: Some(ty),
        },
        V::Str(s) => Attr::Str(s),
        V::Array(items) => Attr::Array(items.into_iter().map(|v| attr(v, name)).collect::<R<_>>()?),
        V::Dict(entries) => Attr::Dict(dict(entries)?),
        V::Tensor { ty, data } => match (int_list(&ty, &data), name) {
            (Some(a), n) if n != "value" => a,
            _ => Attr::Dense {
                data: DenseData::Hex(data),
                ty,
                pos: Pos::default(),
            },
        },
        V::Type(t) => Attr::Type(t),
        V::Enum { kind, value } => Attr::Enum {
            dialect: "stablehlo".into(),
            kind: kind.into(),
            value: value.into(),
        },
        V::OutputOperandAlias {
            output_tuple_indices,
            operand_index,
            operand_tuple_indices,
        } => Attr::Struct {
            name: "stablehlo.output_operand_alias".into(),
            fields: vec![
                ("output_tuple_indices".into(), ints(&output_tuple_indices)),
                (
                    "operand_index".into(),
                    Attr::Int {
                        value: i128::from(operand_index),
                        ty: None,
                    },
                ),
                ("operand_tuple_indices".into(), ints(&operand_tuple_indices)),
            ],
        },
        V::ResultAccuracy { .. } => Attr::Opaque(format!("{v:?}")),
        V::TypeExtensions(b) => Attr::Opaque(format!("#stablehlo.bounds<{b:?}>")),
        V::Symbol(path) => Attr::Symbol(path),
        V::Loc(l) => Attr::Loc(Box::new(l)),
        V::Text(t) => Attr::Opaque(t),
    })
}

fn dict(entries: Vec<(V, V)>) -> R<Vec<(String, Attr)>> {
    entries
        .into_iter()
        .map(|(k, v)| match k {
            V::Str(k) => {
                let a = attr(v, &k)?;
                Ok((k, a))
            }
            _ => unsupported("a dictionary key that is not a string"),
        })
        .collect()
}

fn ints(v: &[i64]) -> Attr {
    Attr::Array(
        v.iter()
            .map(|&x| Attr::Int {
                value: i128::from(x),
                ty: None,
            })
            .collect(),
    )
}

/// A rank-1 tensor of integers or booleans as `array<i64: …>` / `array<i1: …>`.
fn int_list(ty: &Type, data: &[u8]) -> Option<Attr> {
    let Type::Tensor {
        dims: Some(dims),
        elem,
        ..
    } = ty
    else {
        return None;
    };
    let [Dim::Static(n)] = dims.as_slice() else {
        return None;
    };
    let ElementType::Int { width, .. } = elem else {
        return None;
    };
    let size = match width {
        1 | 8 => 1,
        16 => 2,
        32 => 4,
        64 => 8,
        _ => return None,
    };
    // A list attribute (dimensions, strides) is short; a splat is expanded only up to this.
    let n = usize::try_from(*n).ok().filter(|&n| n <= 1 << 16)?;
    let data: Vec<u8> = if data.len() == size && n > 1 {
        data.repeat(n)
    } else {
        data.to_vec()
    };
    if data.len() != n.checked_mul(size)? {
        return None;
    }
    let values = data
        .chunks_exact(size)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..size].copy_from_slice(c);
            let shift = 64 - 8 * size as u32;
            let v = (i64::from_le_bytes(b) << shift) >> shift;
            if *width == 1 {
                Literal::Bool(v != 0)
            } else {
                Literal::Int {
                    negative: v < 0,
                    magnitude: u128::from(v.unsigned_abs()),
                    hex: false,
                }
            }
        })
        .collect();
    Some(Attr::DenseArray {
        elem: Type::Scalar(*elem),
        values,
    })
}

/// The op's attributes in StableHLO's form.
fn attributes(op: &str, raw: Vec<(String, V)>) -> R<Vec<(String, Attr)>> {
    let mut m: Vec<(String, V)> = raw;
    let mut take = |k: &str| -> Option<V> {
        let i = m.iter().position(|(n, _)| n == k)?;
        Some(m.remove(i).1)
    };
    let mut out: Vec<(String, Attr)> = vec![];
    let list = |v: Option<V>, k: &str| -> R<Attr> {
        match v {
            Some(V::Tensor { ty, data }) => {
                int_list(&ty, &data).map_or_else(|| unsupported(format!("`{k}`")), Ok)
            }
            Some(V::Array(items)) => attr(V::Array(items), k),
            None => Ok(Attr::Array(vec![])),
            Some(other) => attr(other, k),
        }
    };
    let int_of = |v: Option<V>| -> Attr {
        match v {
            Some(V::Int { value, .. }) => Attr::Int { value, ty: None },
            _ => Attr::Int { value: 0, ty: None },
        }
    };
    match op {
        "stablehlo.dot_general" => {
            let mut fields = vec![];
            for k in [
                "lhs_batching_dimensions",
                "rhs_batching_dimensions",
                "lhs_contracting_dimensions",
                "rhs_contracting_dimensions",
            ] {
                fields.push((k.to_string(), list(take(k), k)?));
            }
            out.push((
                "dot_dimension_numbers".into(),
                Attr::Struct {
                    name: "stablehlo.dot".into(),
                    fields,
                },
            ));
            let alg = [
                "lhs_precision_type",
                "rhs_precision_type",
                "accumulation_type",
                "lhs_component_count",
                "rhs_component_count",
                "num_primitive_operations",
                "allow_imprecise_accumulation",
            ];
            let vals: Vec<(String, Option<V>)> =
                alg.iter().map(|k| (k.to_string(), take(k))).collect();
            let none = |v: &Option<V>| matches!(v, None | Some(V::Type(Type::None)));
            if !vals.iter().all(|(_, v)| none(v)) {
                let mut fields = vec![];
                for (k, v) in vals {
                    if let Some(v) = v {
                        let a = attr(v, &k)?;
                        fields.push((k, a));
                    }
                }
                out.push((
                    "algorithm".into(),
                    Attr::Struct {
                        name: "stablehlo.dot_algorithm".into(),
                        fields,
                    },
                ));
            }
        }
        "stablehlo.gather" | "stablehlo.dynamic_gather" => {
            let mut fields = vec![];
            for k in [
                "offset_dims",
                "collapsed_slice_dims",
                "operand_batching_dims",
                "start_indices_batching_dims",
                "start_index_map",
            ] {
                fields.push((k.to_string(), list(take(k), k)?));
            }
            fields.push(("index_vector_dim".into(), int_of(take("index_vector_dim"))));
            out.push((
                "dimension_numbers".into(),
                Attr::Struct {
                    name: "stablehlo.gather".into(),
                    fields,
                },
            ));
        }
        "stablehlo.scatter" => {
            let mut fields = vec![];
            for k in [
                "update_window_dims",
                "inserted_window_dims",
                "input_batching_dims",
                "scatter_indices_batching_dims",
                "scatter_dims_to_operand_dims",
            ] {
                fields.push((k.to_string(), list(take(k), k)?));
            }
            fields.push(("index_vector_dim".into(), int_of(take("index_vector_dim"))));
            out.push((
                "scatter_dimension_numbers".into(),
                Attr::Struct {
                    name: "stablehlo.scatter".into(),
                    fields,
                },
            ));
        }
        "stablehlo.convolution" => {
            let n = |v: Option<V>| match v {
                Some(V::Int { value, .. }) => Ok(value),
                _ => unsupported("a convolution dimension that is not an integer"),
            };
            let l = |v: Option<V>| -> R<Vec<i64>> {
                match v {
                    Some(V::Tensor { ty, data }) => match int_list(&ty, &data) {
                        Some(a) => a.as_ints().ok_or(()),
                        None => Err(()),
                    },
                    _ => Err(()),
                }
                .or_else(|()| unsupported("convolution spatial dimensions"))
            };
            let layout = |a: (char, i128), b: (char, i128), spatial: Vec<i64>| {
                let rank = spatial.len() + 2;
                let mut slots = vec![String::new(); rank];
                for (ch, at) in [a, b] {
                    if let Some(s) = usize::try_from(at).ok().and_then(|i| slots.get_mut(i)) {
                        *s = ch.to_string();
                    }
                }
                for (k, &at) in spatial.iter().enumerate() {
                    if let Some(s) = usize::try_from(at).ok().and_then(|i| slots.get_mut(i)) {
                        *s = k.to_string();
                    }
                }
                format!("[{}]", slots.join(", "))
            };
            let lhs = layout(
                ('b', n(take("input_batch_dimension"))?),
                ('f', n(take("input_feature_dimension"))?),
                l(take("input_spatial_dimensions"))?,
            );
            let rhs = layout(
                ('i', n(take("kernel_input_feature_dimension"))?),
                ('o', n(take("kernel_output_feature_dimension"))?),
                l(take("kernel_spatial_dimensions"))?,
            );
            let res = layout(
                ('b', n(take("output_batch_dimension"))?),
                ('f', n(take("output_feature_dimension"))?),
                l(take("output_spatial_dimensions"))?,
            );
            out.push((
                "dimension_numbers".into(),
                Attr::Opaque(format!("#stablehlo.conv<{lhs}x{rhs}->{res}>")),
            ));
        }
        _ => {}
    }
    for (k, v) in m {
        // Defaults StableHLO's printer leaves out.
        let default = match (&v, k.as_str()) {
            (
                V::ResultAccuracy {
                    atol,
                    rtol,
                    ulps,
                    mode,
                },
                _,
            ) => {
                *atol == 0.0
                    && *rtol == 0.0
                    && *ulps == 0
                    && matches!(
                        **mode,
                        V::Enum {
                            value: "DEFAULT",
                            ..
                        }
                    )
            }
            (V::Str(s), "sym_visibility" | "backend_config") => s.is_empty(),
            (V::Array(a), "arg_attrs" | "res_attrs") => {
                a.iter().all(|d| matches!(d, V::Dict(e) if e.is_empty()))
            }
            (
                V::Array(a),
                "operand_layouts"
                | "result_layouts"
                | "output_operand_aliases"
                | "called_computations",
            ) => a.is_empty(),
            (V::Bool(false), "has_side_effect") => true,
            (V::Enum { value, .. }, "api_version") => *value == "API_VERSION_ORIGINAL",
            _ => false,
        };
        if default {
            continue;
        }
        let a = match (k.as_str(), v) {
            ("callee" | "decomposition", V::Str(s)) => Attr::Symbol(vec![s]),
            ("called_computations", V::Array(items)) => Attr::Array(
                items
                    .into_iter()
                    .map(|v| match v {
                        V::Str(s) => Ok(Attr::Symbol(vec![s])),
                        other => attr(other, "called_computations"),
                    })
                    .collect::<R<_>>()?,
            ),
            ("sym_name", V::Str(s)) => Attr::Str(s),
            (_, v) => attr(v, &k)?,
        };
        out.push((k, a));
    }
    Ok(out)
}
