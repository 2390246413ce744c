//! The collectives of an SPMD program: `all_reduce`, `all_gather`, `reduce_scatter`,
//! `all_to_all`, `collective_permute`, `collective_broadcast` onto xthunk-tensor's
//! collectives, and `replica_id` / `partition_id` from the device's rank.
//!
//! A program runs on `replicas × partitions` ranks (the module's `mhlo.num_replicas` and
//! `mhlo.num_partitions`); rank = replica × partitions + partition, as XLA numbers its
//! global device ids. Replica groups are read as the spec's modes say (`channel_handle`,
//! `use_global_device_ids`) and written as global ranks, one group per process group.

use super::ops::{R, int_attr, result, tensors};
use super::ranks::MAX_RANKS;
use super::regions::region_block;
use super::{Env, ImportError, Importer, Item, check_attrs};
use crate::ast::{Attr, Op};
use crate::dense;
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, CollectiveKind, Graph, ReduceOp, Value};

/// How replica groups name the ranks (the spec's modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Groups of replica ids, one set per partition.
    CrossReplica,
    /// Groups of partition ids, one set per replica.
    CrossPartition,
    /// Groups of global ranks.
    Flattened,
}

/// A dense `tensor<RxCxi64>` attribute as rows (`dense<>` and `0x0`: none).
fn int_matrix(imp: &Importer, op: &Op, name: &str) -> R<Vec<Vec<i64>>> {
    let Some(a) = op.attr(name) else {
        return Ok(vec![]);
    };
    let Attr::Dense { ty, .. } = a else {
        return Err(ImportError::invalid(
            op,
            format!("`{name}`: a dense i64 matrix expected"),
        ));
    };
    let shape = ty.static_shape().unwrap_or_default();
    let [rows, cols] = shape.as_slice() else {
        return Err(ImportError::invalid(
            op,
            format!("`{name}`: a rank-2 tensor expected"),
        ));
    };
    if ty.element().and_then(super::dtype) != Some(DType::I64) {
        return Err(ImportError::invalid(op, format!("`{name}`: i64 expected")));
    }
    let n = rows.checked_mul(*cols).filter(|n| *n <= MAX_RANKS * 2);
    let Some(n) = n else {
        return Err(ImportError::unsupported(
            op,
            format!("`{name}`: {rows}x{cols} entries"),
        ));
    };
    if n == 0 {
        return Ok(vec![]);
    }
    let bytes = dense::decode(a, &imp.module.resources, n * 8, &op.name)?;
    let vals = dense::i64s(&bytes);
    Ok(vals
        .chunks(usize::try_from(*cols).unwrap_or(1).max(1))
        .map(<[i64]>::to_vec)
        .collect())
}

/// `groups` with each group's ranks ascending, as xthunk's collectives take them. Where the
/// order matters (the position in the group places a block) a group out of order is refused.
fn ascending(op: &Op, mut groups: Vec<Vec<u32>>, order_matters: bool) -> R<Vec<Vec<u32>>> {
    for g in &mut groups {
        if g.is_sorted() {
            continue;
        }
        if order_matters {
            return Err(ImportError::unsupported(
                op,
                format!("replica group {g:?} not in ascending order (xthunk's groups are)"),
            ));
        }
        g.sort_unstable();
    }
    Ok(groups)
}

impl Importer<'_> {
    /// The mode of `op`'s groups.
    fn mode(&self, op: &Op, global_ids: bool) -> R<Mode> {
        let channel = match op.attr("channel_handle") {
            None => 0,
            Some(a) => a
                .field("handle")
                .and_then(Attr::as_int)
                .ok_or_else(|| ImportError::invalid(op, "`channel_handle`: no integer `handle`"))?,
        };
        match (channel > 0, global_ids) {
            (false, false) => Ok(Mode::CrossReplica),
            (true, false) => Ok(Mode::CrossPartition),
            (true, true) => Ok(Mode::Flattened),
            (false, true) => Err(ImportError::invalid(
                op,
                "`use_global_device_ids` without a `channel_handle`",
            )),
        }
    }

    /// An id of `mode`'s kind as a number in range.
    fn id(&self, op: &Op, mode: Mode, v: i64) -> R<u32> {
        let s = self.spmd;
        let limit = match mode {
            Mode::CrossReplica => u64::from(s.replicas),
            Mode::CrossPartition => u64::from(s.partitions),
            Mode::Flattened => s.ranks(),
        };
        u64::try_from(v)
            .ok()
            .filter(|v| *v < limit)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                ImportError::unsupported(
                    op,
                    format!(
                        "id {v} in replica groups of a program of {} replicas × {} partitions",
                        s.replicas, s.partitions
                    ),
                )
            })
    }

    /// `op`'s `replica_groups` as groups of global ranks.
    fn rank_groups(&self, op: &Op, mode: Mode) -> R<Vec<Vec<u32>>> {
        let s = self.spmd;
        let rows = int_matrix(self, op, "replica_groups")?;
        let groups: Vec<Vec<u32>> = if rows.is_empty() {
            let all = match mode {
                Mode::CrossReplica => s.replicas,
                Mode::CrossPartition => s.partitions,
                Mode::Flattened => {
                    return Err(ImportError::invalid(
                        op,
                        "empty `replica_groups` with `use_global_device_ids`",
                    ));
                }
            };
            vec![(0..all).collect()]
        } else {
            rows.iter()
                .map(|r| r.iter().map(|v| self.id(op, mode, *v)).collect())
                .collect::<R<_>>()?
        };
        Ok(match mode {
            Mode::Flattened => groups,
            Mode::CrossReplica => (0..s.partitions)
                .flat_map(|p| {
                    groups
                        .iter()
                        .map(move |g| g.iter().map(|r| r * s.partitions + p).collect::<Vec<_>>())
                })
                .collect(),
            Mode::CrossPartition => (0..s.replicas)
                .flat_map(|r| {
                    groups
                        .iter()
                        .map(move |g| g.iter().map(|p| r * s.partitions + p).collect::<Vec<_>>())
                })
                .collect(),
        })
    }

    /// The reduction a collective's region computes: one of `add`, `multiply`, `maximum`,
    /// `minimum` of its two arguments.
    fn reduction(&self, op: &Op) -> R<ReduceOp> {
        let b = region_block(op, 0)?;
        let refuse = || {
            ImportError::unsupported(
                op,
                "a reduction region other than one `add`, `multiply`, `maximum` or `minimum` of its two arguments",
            )
        };
        let ([a, c], [body, ret]) = (b.args.as_slice(), b.ops.as_slice()) else {
            return Err(refuse());
        };
        let red = match body.name.as_str() {
            "stablehlo.add" => ReduceOp::Sum,
            "stablehlo.multiply" => ReduceOp::Prod,
            "stablehlo.maximum" => ReduceOp::Max,
            "stablehlo.minimum" => ReduceOp::Min,
            _ => return Err(refuse()),
        };
        let names: Vec<&str> = body.operands.iter().map(|r| r.name.as_str()).collect();
        let args_ok = names == [a.name.as_str(), c.name.as_str()]
            || names == [c.name.as_str(), a.name.as_str()];
        let ret_ok = ret.operands.len() == 1
            && body.results.len() == 1
            && ret.operands[0].name == body.results[0].name;
        if !args_ok || !ret_ok || !body.regions.is_empty() {
            return Err(refuse());
        }
        Ok(red)
    }

    /// Imports a collective op or `replica_id` / `partition_id`; `None` for other ops.
    pub(super) fn collective_op(
        &mut self,
        g: &mut Graph,
        op: &Op,
        env: &mut Env,
    ) -> Option<R<Vec<Item>>> {
        let r = match op.name.as_str() {
            "stablehlo.all_reduce" => self.all_reduce(g, op, env),
            "stablehlo.all_gather" => self.all_gather(g, op, env),
            "stablehlo.reduce_scatter" => self.reduce_scatter(g, op, env),
            "stablehlo.all_to_all" => self.all_to_all(g, op, env),
            "stablehlo.collective_permute" => self.permute(g, op, env),
            "stablehlo.collective_broadcast" => self.broadcast(g, op, env),
            "stablehlo.replica_id" | "stablehlo.partition_id" => self.id_op(g, op),
            _ => return None,
        };
        Some(r)
    }

    /// Checks `op`'s attributes (`own` ones and the group attributes every grouped collective
    /// has) and gives its groups of global ranks, ascending (`order_matters`: refused when
    /// they are not, rather than sorted).
    fn grouped(&mut self, op: &Op, own: &[&str], order_matters: bool) -> R<Vec<Vec<u32>>> {
        let mut known = own.to_vec();
        known.extend(["replica_groups", "channel_handle", "use_global_device_ids"]);
        check_attrs(op, &known)?;
        let mode = self.mode(op, op.attr("use_global_device_ids").is_some())?;
        ascending(op, self.rank_groups(op, mode)?, order_matters)
    }

    fn all_reduce(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let groups = self.grouped(op, &[], false)?;
        let red = self.reduction(op)?;
        let gr = |e| ImportError::graph(op, e);
        tensors(env, op)?
            .into_iter()
            .map(|x| {
                let v = g
                    .collective(CollectiveKind::AllReduce(red), groups.clone(), x)
                    .map_err(gr)?;
                Ok(Item::Tensor(v))
            })
            .collect()
    }

    fn all_gather(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let groups = self.grouped(op, &["all_gather_dim"], true)?;
        let dim = self.dim_attr(op, "all_gather_dim")?;
        let gr = |e| ImportError::graph(op, e);
        tensors(env, op)?
            .into_iter()
            .map(|x| {
                let v = self.along(g, op, x, dim, |g, t| {
                    g.collective(CollectiveKind::AllGather, groups.clone(), t)
                        .map_err(gr)
                })?;
                Ok(Item::Tensor(v))
            })
            .collect()
    }

    fn reduce_scatter(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let groups = self.grouped(op, &["scatter_dimension"], true)?;
        let red = self.reduction(op)?;
        let dim = self.dim_attr(op, "scatter_dimension")?;
        let x = one_operand(env, op)?;
        let gr = |e| ImportError::graph(op, e);
        let v = self.along(g, op, x, dim, |g, t| {
            g.collective(CollectiveKind::ReduceScatter(red), groups, t)
                .map_err(gr)
        })?;
        Ok(vec![Item::Tensor(v)])
    }

    fn all_to_all(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(
            op,
            &[
                "split_dimension",
                "concat_dimension",
                "split_count",
                "replica_groups",
                "channel_handle",
            ],
        )?;
        let mode = self.mode(op, false)?;
        let groups = ascending(op, self.rank_groups(op, mode)?, true)?;
        let split = self.dim_attr(op, "split_dimension")?;
        let concat = self.dim_attr(op, "concat_dimension")?;
        let n = int_attr(op, "split_count")?;
        let gr = |e| ImportError::graph(op, e);
        let group = groups.first().map_or(0, Vec::len);
        if usize::try_from(n).ok() != Some(group) {
            return Err(ImportError::invalid(
                op,
                format!("`split_count` {n} for replica groups of {group}"),
            ));
        }
        let n = group as u64;
        let mut out = vec![];
        for x in tensors(env, op)? {
            let t = g.ty(x).clone();
            let rank = t.dims.len();
            if split >= rank || concat >= rank {
                return Err(ImportError::invalid(op, "a dimension out of range"));
            }
            let Some(k) = t.dims.get(split).filter(|d| *d % n == 0).map(|d| d / n) else {
                return Err(ImportError::invalid(
                    op,
                    format!("dimension {split} of {} is not a multiple of {n}", t),
                ));
            };
            // x → [n, ...] with dimension `split` cut to k: block j is what member j gets.
            let mut cut = t.dims.clone();
            cut[split] = k;
            let mut split_dims = t.dims[..split].to_vec();
            split_dims.extend([n, k]);
            split_dims.extend(&t.dims[split + 1..]);
            let s = g.reshape(x, &split_dims).map_err(gr)?;
            let mut perm = vec![split];
            perm.extend((0..=rank).filter(|d| *d != split));
            let blocks = g.transpose(s, &perm).map_err(gr)?;
            let got = g
                .collective(CollectiveKind::AllToAll, groups.clone(), blocks)
                .map_err(gr)?;
            // [n, cut...] → the blocks joined along `concat`: n just before that dimension.
            let mut perm = (1..=concat).collect::<Vec<_>>();
            perm.push(0);
            perm.extend(concat + 1..=rank);
            let moved = g.transpose(got, &perm).map_err(gr)?;
            let mut joined = cut.clone();
            joined[concat] = cut[concat].checked_mul(n).ok_or_else(|| {
                ImportError::unsupported(op, "a concatenated dimension too large")
            })?;
            out.push(Item::Tensor(g.reshape(moved, &joined).map_err(gr)?));
        }
        Ok(out)
    }

    fn permute(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(op, &["source_target_pairs", "channel_handle"])?;
        let mode = self.mode(op, false)?;
        let s = self.spmd;
        let mut pairs = vec![];
        let rows = int_matrix(self, op, "source_target_pairs")?;
        let copies = match mode {
            Mode::CrossReplica => s.partitions,
            _ => s.replicas,
        };
        for c in 0..copies {
            for row in &rows {
                let [a, b] = row.as_slice() else {
                    return Err(ImportError::invalid(op, "pairs of two ids expected"));
                };
                let (a, b) = (self.id(op, mode, *a)?, self.id(op, mode, *b)?);
                pairs.push(match mode {
                    Mode::CrossReplica => (a * s.partitions + c, b * s.partitions + c),
                    _ => (c * s.partitions + a, c * s.partitions + b),
                });
            }
        }
        let x = one_operand(env, op)?;
        let all = vec![(0..u32::try_from(s.ranks()).unwrap_or(u32::MAX)).collect()];
        let v = g
            .collective(CollectiveKind::Permute { pairs }, all, x)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vec![Item::Tensor(v)])
    }

    fn broadcast(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(op, &["replica_groups", "channel_handle"])?;
        let mode = self.mode(op, false)?;
        let groups = self.rank_groups(op, mode)?;
        // The first member of each group sends: its position once the group is ascending,
        // one position for every group.
        let mut root = None;
        for g in &groups {
            let first = g.first().copied().unwrap_or(0);
            let at = g.iter().filter(|r| **r < first).count() as u32;
            if *root.get_or_insert(at) != at {
                return Err(ImportError::unsupported(
                    op,
                    "groups whose first members sit at different positions once ascending",
                ));
            }
        }
        let groups = ascending(op, groups, false)?;
        let x = one_operand(env, op)?;
        let root = root.unwrap_or(0);
        let v = g
            .collective(CollectiveKind::Broadcast { root }, groups, x)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vec![Item::Tensor(v)])
    }

    /// `replica_id` (rank / partitions) or `partition_id` (rank % partitions), ui32.
    fn id_op(&mut self, g: &mut Graph, op: &Op) -> R<Vec<Item>> {
        check_attrs(op, &[])?;
        let gr = |e| ImportError::graph(op, e);
        let rank = g.rank_id().map_err(gr)?;
        let rank = g.convert(rank, DType::U32).map_err(gr)?;
        let p = g
            .constant(DType::U32, &[], self.spmd.partitions.to_le_bytes().to_vec())
            .map_err(gr)?;
        let how = if op.name == "stablehlo.replica_id" {
            BinaryOp::Divide
        } else {
            BinaryOp::Remainder
        };
        let v = g.binary(how, rank, p).map_err(gr)?;
        if *g.ty(v) != result(op, 0)? {
            return Err(ImportError::invalid(op, "the result must be a ui32 scalar"));
        }
        Ok(vec![Item::Tensor(v)])
    }

    fn dim_attr(&self, op: &Op, name: &str) -> R<usize> {
        usize::try_from(int_attr(op, name)?)
            .map_err(|_| ImportError::invalid(op, format!("`{name}`: a dimension expected")))
    }

    /// `f` applied to `x` with dimension `dim` moved to the front, and moved back after.
    fn along(
        &self,
        g: &mut Graph,
        op: &Op,
        x: Value,
        dim: usize,
        f: impl FnOnce(&mut Graph, Value) -> R<Value>,
    ) -> R<Value> {
        let rank = g.ty(x).dims.len();
        if dim >= rank {
            return Err(ImportError::invalid(
                op,
                format!("dimension {dim} of a rank-{rank} operand"),
            ));
        }
        if dim == 0 {
            return f(g, x);
        }
        let gr = |e| ImportError::graph(op, e);
        let mut front = vec![dim];
        front.extend((0..rank).filter(|d| *d != dim));
        let t = g.transpose(x, &front).map_err(gr)?;
        let y = f(g, t)?;
        let mut back: Vec<usize> = (1..=dim).collect();
        back.push(0);
        back.extend(dim + 1..rank);
        g.transpose(y, &back).map_err(gr)
    }
}

fn one_operand(env: &Env, op: &Op) -> R<Value> {
    match tensors(env, op)?.as_slice() {
        [x] => Ok(*x),
        v => Err(ImportError::unsupported(
            op,
            format!("{} operands (one supported)", v.len()),
        )),
    }
}
