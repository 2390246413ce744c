//! `stablehlo.reduce_window` and `stablehlo.convolution`: their window attributes (absent
//! ones take the spec's defaults: strides and dilations 1, padding 0, no reversal) and the
//! convolution's dimension numbers (`[b, 0, 1, f]x[0, 1, i, o]->[b, f, 0, 1]`, as the pretty
//! form prints them) mapped to xthunk-tensor's builders, which express both with existing
//! nodes (see `xthunk_tensor::graph`'s `build_window.rs`).

use super::ops::{R, result, tensors};
use super::{Env, ImportError, Importer, Item, check_attrs, dtype};
use crate::ast::{Attr, Op};
use crate::dense;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{ConvDims, Graph, WindowDims};

/// An `array<i64: …>` attribute of positive values, `n` of them; absent: `n` ones.
fn positive(op: &Op, name: &str, n: usize) -> R<Vec<u64>> {
    let Some(a) = op.attr(name) else {
        return Ok(vec![1; n]);
    };
    let v = a.as_ints().ok_or_else(|| {
        ImportError::invalid(op, format!("`{name}`: a list of integers expected"))
    })?;
    if v.len() != n {
        return Err(ImportError::invalid(
            op,
            format!("`{name}`: {} values, {n} expected", v.len()),
        ));
    }
    v.iter()
        .map(|&x| {
            u64::try_from(x)
                .ok()
                .filter(|x| *x > 0)
                .ok_or_else(|| ImportError::invalid(op, format!("`{name}`: {x} is not positive")))
        })
        .collect()
}

/// `padding`: a `dense<…> : tensor<nx2xi64>` of `(low, high)` pairs; absent: zeros.
fn padding(imp: &Importer<'_>, op: &Op, n: usize) -> R<Vec<(i64, i64)>> {
    let Some(a) = op.attr("padding") else {
        return Ok(vec![(0, 0); n]);
    };
    let ty = match a {
        Attr::Dense { ty, .. } | Attr::DenseResource { ty, .. } => ty,
        _ => {
            return Err(ImportError::invalid(
                op,
                "`padding`: a dense i64 tensor expected",
            ));
        }
    };
    let shape_ok = ty.static_shape() == Some(vec![n as u64, 2]);
    if !shape_ok || ty.element().and_then(dtype) != Some(DType::I64) {
        return Err(ImportError::invalid(
            op,
            format!("`padding`: a tensor<{n}x2xi64> expected"),
        ));
    }
    let bytes = dense::decode(a, &imp.module.resources, 16 * n as u64, &op.name)?;
    let v = dense::i64s(&bytes);
    Ok(v.chunks_exact(2).map(|p| (p[0], p[1])).collect())
}

/// A convolution's dimension numbers from `[b, 0, 1, f]x[0, 1, i, o]->[b, f, 0, 1]`: for
/// each of the three lists, the position of the two letters and of each spatial number.
fn conv_dims(op: &Op) -> R<[(usize, usize, Vec<usize>); 3]> {
    let text = match op.attr("dimension_numbers") {
        Some(Attr::Opaque(t)) => t.as_str(),
        _ => return Err(ImportError::invalid(op, "no `dimension_numbers`")),
    };
    let bad = || {
        ImportError::unsupported(
            op,
            format!(
                "dimension numbers `{text}` (the `[b, 0, f]x[0, i, o]->[b, 0, f]` form expected)"
            ),
        )
    };
    let inner = text
        .strip_prefix("#stablehlo.conv<")
        .and_then(|t| t.strip_suffix('>'))
        .ok_or_else(bad)?;
    let (lhs, rest) = inner.split_once('x').ok_or_else(bad)?;
    let (rhs, out) = rest.split_once("->").ok_or_else(bad)?;
    let list = |s: &str, first: char, second: char| -> R<(usize, usize, Vec<usize>)> {
        let s = s.trim().strip_prefix('[').and_then(|t| t.strip_suffix(']'));
        let items: Vec<&str> = s.ok_or_else(bad)?.split(',').map(str::trim).collect();
        let n = items.len();
        let (mut a, mut b) = (None, None);
        let mut spatial = vec![None; n.saturating_sub(2)];
        for (i, it) in items.iter().enumerate() {
            let ch = it.chars().next().ok_or_else(bad)?;
            if it.len() == 1 && ch == first && a.is_none() {
                a = Some(i);
            } else if it.len() == 1 && ch == second && b.is_none() {
                b = Some(i);
            } else {
                let j: usize = it.parse().map_err(|_| bad())?;
                match spatial.get_mut(j) {
                    Some(slot @ None) => *slot = Some(i),
                    _ => return Err(bad()),
                }
            }
        }
        let spatial: Option<Vec<usize>> = spatial.into_iter().collect();
        match (a, b, spatial) {
            (Some(a), Some(b), Some(s)) => Ok((a, b, s)),
            _ => Err(bad()),
        }
    };
    Ok([
        list(lhs, 'b', 'f')?,
        list(rhs, 'i', 'o')?,
        list(out, 'b', 'f')?,
    ])
}

impl Importer<'_> {
    pub(super) fn reduce_window(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(
            op,
            &[
                "window_dimensions",
                "window_strides",
                "base_dilations",
                "window_dilations",
                "padding",
            ],
        )?;
        let x = tensors(env, op)?;
        let n = x.len() / 2;
        if x.len() % 2 != 0 || n == 0 {
            return Err(ImportError::invalid(
                op,
                "inputs and as many init values expected",
            ));
        }
        let r = g.ty(x[0]).rank();
        if op.attr("window_dimensions").is_none() {
            return Err(ImportError::invalid(op, "no `window_dimensions`"));
        }
        let w = WindowDims {
            dimensions: positive(op, "window_dimensions", r)?,
            strides: positive(op, "window_strides", r)?,
            base_dilations: positive(op, "base_dilations", r)?,
            window_dilations: positive(op, "window_dilations", r)?,
            padding: padding(self, op, r)?,
        };
        let body = self.closed_body(g, env, op)?;
        let out = g
            .reduce_window(&x[..n], &x[n..], &w, body)
            .map_err(|e| ImportError::graph(op, e))?;
        for (i, v) in out.iter().enumerate() {
            let want = result(op, i)?;
            if *g.ty(*v) != want {
                return Err(ImportError::invalid(
                    op,
                    format!("result {i} is {}, the window gives {}", want, g.ty(*v)),
                ));
            }
        }
        Ok(out.into_iter().map(Item::Tensor).collect())
    }

    pub(super) fn convolution(&mut self, g: &mut Graph, op: &Op, env: &mut Env) -> R<Vec<Item>> {
        check_attrs(
            op,
            &[
                "dimension_numbers",
                "window_strides",
                "padding",
                "lhs_dilation",
                "rhs_dilation",
                "window_reversal",
                "feature_group_count",
                "batch_group_count",
                "precision_config",
            ],
        )?;
        let x = tensors(env, op)?;
        if x.len() != 2 {
            return Err(ImportError::invalid(op, "an input and a kernel expected"));
        }
        let [(ib, ifeat, isp), (ki, ko, ksp), (ob, of, osp)] = conv_dims(op)?;
        let ns = isp.len();
        let reversal = match op.attr("window_reversal") {
            None => vec![false; ns],
            Some(a) => a
                .as_ints()
                .filter(|v| v.len() == ns)
                .ok_or_else(|| {
                    ImportError::invalid(op, format!("`window_reversal`: {ns} booleans expected"))
                })?
                .iter()
                .map(|v| *v != 0)
                .collect(),
        };
        let count = |name: &str| -> R<u64> {
            match op.attr(name) {
                None => Ok(1),
                Some(a) => a
                    .as_int()
                    .and_then(|v| u64::try_from(v).ok())
                    .filter(|v| *v > 0)
                    .ok_or_else(|| ImportError::invalid(op, format!("`{name}`: not positive"))),
            }
        };
        let c = ConvDims {
            input_batch: ib,
            input_feature: ifeat,
            input_spatial: isp,
            kernel_input_feature: ki,
            kernel_output_feature: ko,
            kernel_spatial: ksp,
            output_batch: ob,
            output_feature: of,
            output_spatial: osp,
            window_strides: positive(op, "window_strides", ns)?,
            padding: padding(self, op, ns)?,
            lhs_dilation: positive(op, "lhs_dilation", ns)?,
            rhs_dilation: positive(op, "rhs_dilation", ns)?,
            window_reversal: reversal,
            feature_group_count: count("feature_group_count")?,
            batch_group_count: count("batch_group_count")?,
        };
        let want = result(op, 0)?;
        let v = g
            .convolution(x[0], x[1], &c, want.dtype)
            .map_err(|e| ImportError::graph(op, e))?;
        if *g.ty(v) != want {
            return Err(ImportError::invalid(
                op,
                format!("the result is {want}, the window gives {}", g.ty(v)),
            ));
        }
        Ok(vec![Item::Tensor(v)])
    }
}

impl Importer<'_> {
    pub(super) fn select_and_scatter(
        &mut self,
        g: &mut Graph,
        op: &Op,
        env: &mut Env,
    ) -> R<Vec<Item>> {
        check_attrs(op, &["window_dimensions", "window_strides", "padding"])?;
        let x = tensors(env, op)?;
        let [operand, source, init] = x.as_slice() else {
            return Err(ImportError::invalid(
                op,
                "an operand, a source and an init value expected",
            ));
        };
        let r = g.ty(*operand).rank();
        let window = positive(op, "window_dimensions", r)?;
        let strides = positive(op, "window_strides", r)?;
        let pad = padding(self, op, r)?;
        if op.regions.len() != 2 {
            return Err(ImportError::invalid(
                op,
                "a select and a scatter region expected",
            ));
        }
        let select = self.closed_region(g, env, op, 0, "select")?;
        let scatter = self.closed_region(g, env, op, 1, "scatter")?;
        let v = g
            .select_and_scatter(
                *operand, *source, *init, &window, &strides, &pad, select, scatter,
            )
            .map_err(|e| ImportError::graph(op, e))?;
        let want = result(op, 0)?;
        if *g.ty(v) != want {
            return Err(ImportError::invalid(
                op,
                format!("the result is {want}, the operand gives {}", g.ty(v)),
            ));
        }
        Ok(vec![Item::Tensor(v)])
    }
}
