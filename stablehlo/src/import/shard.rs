//! Shardy's manual computations (`sdy.manual_computation` over a `sdy.mesh`): the program
//! becomes an SPMD program that takes and returns GLOBAL values. Each rank cuts its shard
//! of every input out of the global value (a `dynamic_slice` at its mesh coordinates, per
//! `in_shardings`), runs the body on it, and puts the global result back together (an
//! `all_gather` of every rank's shard, reordered per `out_shardings`; a replicated result
//! is the rank's own). Ops outside manual computations run on every rank on the global
//! values. Refused: partial manual axes (they need an automatic partitioner), nested manual
//! computations, meshes with explicit device orders, open or sub-axis shardings.
//!
//! A rank's mesh coordinates: the rank unravelled row-major over the mesh axes (the
//! `axis_index` JAX computes from `partition_id`).

use super::ops::{R, tensors};
use super::regions::region_block;
use super::{Env, ImportError, Importer, Item, ref0, tensor_type};
use crate::ast::{Attr, Op};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CollectiveKind, Graph, Value};

/// A mesh: its axes' names and sizes, major first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mesh {
    pub axes: Vec<(String, u64)>,
}

impl Mesh {
    /// The number of devices (saturating: a mesh that large matches no program).
    fn size(&self) -> u64 {
        self.axes.iter().fold(1u64, |a, x| a.saturating_mul(x.1))
    }

    fn axis(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|a| a.0 == name)
    }
}

/// One value's sharding: per dimension, the mesh axes (indices) it is split over, major
/// first.
pub(super) type Sharding = Vec<Vec<usize>>;

/// The quoted names in `text` (`"x", "y"`), refusing anything else but commas and blanks.
fn quoted_names(text: &str) -> Option<Vec<String>> {
    let mut out = vec![];
    let mut rest = text.trim();
    while !rest.is_empty() {
        let r = rest.strip_prefix('"')?;
        let end = r.find('"')?;
        out.push(r[..end].to_string());
        rest = r[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(out)
}

/// `#sdy.mesh<["x"=4, "y"=2]>` (no device ids).
fn parse_mesh(text: &str) -> Result<Mesh, String> {
    let body = text
        .strip_prefix("#sdy.mesh<")
        .and_then(|t| t.strip_suffix('>'))
        .ok_or("not a mesh")?
        .trim();
    let inner = body
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .ok_or("a mesh with explicit device ids (only the default device order is supported)")?;
    let mut axes = vec![];
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, size) = part.split_once('=').ok_or("an axis without a size")?;
        let name = name
            .trim()
            .strip_prefix('"')
            .and_then(|n| n.strip_suffix('"'))
            .ok_or("an unquoted axis name")?;
        let size: u64 = size
            .trim()
            .parse()
            .map_err(|_| format!("axis `{name}`: size `{}`", size.trim()))?;
        if size == 0 {
            return Err(format!("axis `{name}` of size 0"));
        }
        axes.push((name.to_string(), size));
    }
    Ok(Mesh { axes })
}

/// Splits `text` at top-level commas (outside brackets and braces).
fn top_level(text: &str) -> Vec<&str> {
    let mut parts = vec![];
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' | '{' | '<' | '(' => depth += 1,
            ']' | '}' | '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// `<@mesh, [{"x"}, {}]>` (a `replicated={...}` list allowed) → the mesh name and the
/// sharding.
fn parse_sharding(
    text: &str,
    mesh_of: &dyn Fn(&str) -> Option<Mesh>,
) -> Result<(String, Sharding), String> {
    let body = text
        .trim()
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .ok_or("not a sharding `<@mesh, [...]>`")?;
    let parts = top_level(body);
    let name = parts
        .first()
        .and_then(|p| p.strip_prefix('@'))
        .ok_or("an inline mesh (only `@name` meshes are supported)")?
        .to_string();
    let mesh = mesh_of(&name).ok_or(format!(
        "no mesh @{name} that xthunk reads (explicit device ids are not supported)"
    ))?;
    let dims = parts
        .get(1)
        .and_then(|d| d.strip_prefix('['))
        .and_then(|d| d.strip_suffix(']'))
        .ok_or("no dimension shardings")?;
    for extra in parts.iter().skip(2) {
        if !extra.starts_with("replicated=") {
            return Err(format!("`{extra}`"));
        }
    }
    let mut out = vec![];
    for d in top_level(dims) {
        // A priority (`{"x"}p1`) changes nothing here.
        let d = match d.rfind('}') {
            Some(i) if d[i + 1..].starts_with('p') => &d[..=i],
            _ => d,
        };
        let inner = d
            .strip_prefix('{')
            .and_then(|d| d.strip_suffix('}'))
            .ok_or(format!("dimension sharding `{d}`"))?;
        if inner.contains('?') {
            return Err(format!("an open dimension sharding `{d}`"));
        }
        if inner.contains(':') {
            return Err(format!("a sub-axis sharding `{d}`"));
        }
        let names = quoted_names(inner).ok_or(format!("dimension sharding `{d}`"))?;
        let axes = names
            .iter()
            .map(|n| mesh.axis(n).ok_or(format!("no axis `{n}` in @{name}")))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(axes);
    }
    Ok((name, out))
}

impl Importer<'_> {
    /// The mesh `@name` of the module.
    fn mesh(&self, name: &str) -> Option<Mesh> {
        let m = self.module;
        let op =
            m.op.block(0)?
                .ops
                .iter()
                .find(|o| o.name == "sdy.mesh" && o.symbol() == Some(name))?;
        match op.attr("mesh") {
            Some(Attr::Opaque(t)) => parse_mesh(t).ok(),
            _ => None,
        }
    }

    fn shardings(&self, op: &Op, key: &str) -> R<Vec<(String, Sharding)>> {
        let Some(Attr::Opaque(t)) = op.attr(key) else {
            return Err(ImportError::invalid(op, format!("no `{key}`")));
        };
        let body = t
            .strip_prefix("#sdy.sharding_per_value<")
            .and_then(|b| b.strip_suffix('>'))
            .and_then(|b| b.trim().strip_prefix('['))
            .and_then(|b| b.strip_suffix(']'))
            .ok_or_else(|| ImportError::invalid(op, format!("`{key}`: a list of shardings")))?;
        let mesh_of = |n: &str| self.mesh(n);
        top_level(body)
            .into_iter()
            .map(|s| {
                parse_sharding(s, &mesh_of)
                    .map_err(|e| ImportError::unsupported(op, format!("`{key}`: {e}")))
            })
            .collect()
    }

    /// `sdy.manual_computation` over the whole mesh.
    pub(super) fn manual_computation(
        &mut self,
        g: &mut Graph,
        op: &Op,
        env: &mut Env,
    ) -> R<Vec<Item>> {
        super::check_attrs(op, &["in_shardings", "out_shardings", "manual_axes"])?;
        if self.in_manual {
            return Err(ImportError::unsupported(
                op,
                "a manual computation inside another",
            ));
        }
        let ins = self.shardings(op, "in_shardings")?;
        let outs = self.shardings(op, "out_shardings")?;
        let Some((mesh_name, _)) = ins.first().or(outs.first()) else {
            return Err(ImportError::unsupported(
                op,
                "a manual computation with no values",
            ));
        };
        let mesh_name = mesh_name.clone();
        if ins.iter().chain(&outs).any(|(m, _)| *m != mesh_name) {
            return Err(ImportError::unsupported(
                op,
                "shardings over more than one mesh",
            ));
        }
        let Some(mesh) = self.mesh(&mesh_name) else {
            return Err(ImportError::unsupported(
                op,
                format!("mesh @{mesh_name}: missing, or with explicit device ids"),
            ));
        };
        let manual = match op.attr("manual_axes") {
            Some(Attr::Opaque(t)) => t
                .strip_prefix("#sdy<manual_axes{")
                .and_then(|t| t.strip_suffix("}>"))
                .and_then(quoted_names),
            _ => None,
        }
        .ok_or_else(|| ImportError::invalid(op, "`manual_axes`: a list of axis names"))?;
        let free: Vec<&str> = mesh
            .axes
            .iter()
            .filter(|(n, s)| *s > 1 && !manual.contains(n))
            .map(|(n, _)| n.as_str())
            .collect();
        if !free.is_empty() {
            return Err(ImportError::unsupported(
                op,
                format!(
                    "mesh axes {} are not manual: a partially manual computation needs an automatic partitioner",
                    free.join(", ")
                ),
            ));
        }
        if mesh.size() != self.spmd.ranks() || self.spmd.replicas != 1 {
            return Err(ImportError::unsupported(
                op,
                format!(
                    "a mesh of {} devices in a program of {} replicas × {} partitions",
                    mesh.size(),
                    self.spmd.replicas,
                    self.spmd.partitions
                ),
            ));
        }
        let block = region_block(op, 0)?;
        let xs = tensors(env, op)?;
        if xs.len() != ins.len() || block.args.len() != xs.len() {
            return Err(ImportError::invalid(
                op,
                "operands, in_shardings and body arguments disagree in number",
            ));
        }
        let coords = if ins
            .iter()
            .chain(&outs)
            .any(|(_, s)| s.iter().any(|d| !d.is_empty()))
        {
            self.coordinates(g, op, &mesh)?
        } else {
            vec![]
        };
        let mut inner = Env::new();
        for (i, ((x, (_, s)), arg)) in xs.iter().zip(&ins).zip(&block.args).enumerate() {
            let want = tensor_type(&arg.ty, op, &format!("body argument {i}"))?;
            let local = shard_of(g, op, &mesh, &coords, *x, s, &want.dims)?;
            inner.insert(ref0(&arg.name), Item::Tensor(local));
        }
        self.in_manual = true;
        self.manual_seen = true;
        let body = self.block(g, block, &mut inner);
        self.in_manual = false;
        let body = body?;
        if body.len() != outs.len() || body.len() != op.result_types.len() {
            return Err(ImportError::invalid(
                op,
                "results, out_shardings and the body's results disagree in number",
            ));
        }
        let mut results = vec![];
        for (i, (item, (_, s))) in body.iter().zip(&outs).enumerate() {
            let Item::Tensor(v) = item else {
                return Err(ImportError::unsupported(op, format!("result {i}: a tuple")));
            };
            let want = super::ops::result(op, i)?;
            let global = whole_of(g, op, &mesh, *v, s, &want.dims)?;
            results.push(Item::Tensor(global));
        }
        Ok(results)
    }

    /// Each mesh axis's coordinate of this rank, an i32 scalar each.
    pub(super) fn coordinates(&self, g: &mut Graph, op: &Op, mesh: &Mesh) -> R<Vec<Value>> {
        let gr = |e| ImportError::graph(op, e);
        let rank = g.rank_id().map_err(gr)?;
        let mut stride = 1u64;
        let mut out = vec![];
        for (name, size) in mesh.axes.iter().rev() {
            let c = |g: &mut Graph, v: u64| -> R<Value> {
                let v = i32::try_from(v).map_err(|_| {
                    ImportError::unsupported(op, format!("axis `{name}`: {v} too large"))
                })?;
                g.constant(DType::I32, &[], v.to_le_bytes().to_vec())
                    .map_err(gr)
            };
            let s = c(g, stride)?;
            let n = c(g, *size)?;
            let q = g.binary(BinaryOp::Divide, rank, s).map_err(gr)?;
            out.push(g.binary(BinaryOp::Remainder, q, n).map_err(gr)?);
            stride = stride.saturating_mul(*size);
        }
        out.reverse();
        Ok(out)
    }
}

/// Per dimension: (the number of shards, the shard's extent) of a global extent.
fn split_dims(op: &Op, mesh: &Mesh, s: &Sharding, global: &[u64]) -> R<Vec<(u64, u64)>> {
    if s.len() != global.len() {
        return Err(ImportError::invalid(
            op,
            format!(
                "a sharding of {} dimensions for a rank-{} value",
                s.len(),
                global.len()
            ),
        ));
    }
    s.iter()
        .zip(global)
        .map(|(axes, g)| {
            let k = axes
                .iter()
                .fold(1u64, |k, a| k.saturating_mul(mesh.axes[*a].1));
            if g % k != 0 {
                return Err(ImportError::invalid(
                    op,
                    format!("extent {g} does not split into {k} shards"),
                ));
            }
            Ok((k, g / k))
        })
        .collect()
}

/// This rank's shard of the global value `x`.
pub(super) fn shard_of(
    g: &mut Graph,
    op: &Op,
    mesh: &Mesh,
    coords: &[Value],
    x: Value,
    s: &Sharding,
    local: &[u64],
) -> R<Value> {
    let global = g.ty(x).dims.clone();
    let parts = split_dims(op, mesh, s, &global)?;
    let sizes: Vec<u64> = parts.iter().map(|p| p.1).collect();
    if sizes != local {
        return Err(ImportError::invalid(
            op,
            format!(
                "a shard of {global:?} per the sharding is {sizes:?}, the body takes {local:?}"
            ),
        ));
    }
    if parts.iter().all(|p| p.0 == 1) {
        return Ok(x);
    }
    let gr = |e| ImportError::graph(op, e);
    let mut starts = vec![];
    for (axes, (_, extent)) in s.iter().zip(&parts) {
        // The shard index: the axes' coordinates, the first axis major.
        let mut idx: Option<Value> = None;
        for a in axes {
            let size = i32::try_from(mesh.axes[*a].1).unwrap_or(i32::MAX);
            idx = Some(match idx {
                None => coords[*a],
                Some(i) => {
                    let n = g
                        .constant(DType::I32, &[], size.to_le_bytes().to_vec())
                        .map_err(gr)?;
                    let m = g.binary(BinaryOp::Multiply, i, n).map_err(gr)?;
                    g.binary(BinaryOp::Add, m, coords[*a]).map_err(gr)?
                }
            });
        }
        let extent = i32::try_from(*extent)
            .map_err(|_| ImportError::unsupported(op, format!("a shard extent of {extent}")))?;
        let e = g
            .constant(DType::I32, &[], extent.to_le_bytes().to_vec())
            .map_err(gr)?;
        starts.push(match idx {
            None => g
                .constant(DType::I32, &[], 0i32.to_le_bytes().to_vec())
                .map_err(gr)?,
            Some(i) => g.binary(BinaryOp::Multiply, i, e).map_err(gr)?,
        });
    }
    g.dynamic_slice(x, &starts, &sizes).map_err(gr)
}

/// The global value whose shards the ranks hold in `v`: every rank's shard gathered, then
/// put in place (mesh axes the sharding does not name hold copies: the first is taken).
pub(super) fn whole_of(
    g: &mut Graph,
    op: &Op,
    mesh: &Mesh,
    v: Value,
    s: &Sharding,
    global: &[u64],
) -> R<Value> {
    let local = g.ty(v).dims.clone();
    let parts = split_dims(op, mesh, s, global)?;
    if parts.iter().map(|p| p.1).collect::<Vec<_>>() != local {
        return Err(ImportError::invalid(
            op,
            format!("the body gives {local:?}, a shard of {global:?} is not that"),
        ));
    }
    if parts.iter().all(|p| p.0 == 1) {
        return Ok(v);
    }
    let gr = |e| ImportError::graph(op, e);
    let n = mesh.size();
    let all: Vec<u32> = (0..u32::try_from(n).unwrap_or(u32::MAX)).collect();
    let k = mesh.axes.len();
    // [1, local...] gathered: [ranks, local...], then [axis sizes..., local...].
    let mut one = vec![1];
    one.extend(&local);
    let lifted = g.reshape(v, &one).map_err(gr)?;
    let gathered = g
        .collective(CollectiveKind::AllGather, vec![all], lifted)
        .map_err(gr)?;
    let mut dims: Vec<u64> = mesh.axes.iter().map(|a| a.1).collect();
    dims.extend(&local);
    let mut x = g.reshape(gathered, &dims).map_err(gr)?;
    // Axes no dimension names: keep coordinate 0.
    let used: Vec<usize> = s.iter().flatten().copied().collect();
    if (0..k).any(|a| !used.contains(&a)) {
        let start = vec![0; dims.len()];
        let mut limit = dims.clone();
        for (a, l) in limit.iter_mut().enumerate().take(k) {
            if !used.contains(&a) {
                *l = 1;
            }
        }
        x = g
            .slice(x, &start, &limit, &vec![1; dims.len()])
            .map_err(gr)?;
    }
    // Unused axes first (extent 1), then per dimension its axes and its shard extent.
    let mut perm: Vec<usize> = (0..k).filter(|a| !used.contains(a)).collect();
    for (d, axes) in s.iter().enumerate() {
        perm.extend(axes);
        perm.push(k + d);
    }
    let x = g.transpose(x, &perm).map_err(gr)?;
    g.reshape(x, global).map_err(gr)
}
