//! GSPMD's form of a manual computation, what JAX emits with Shardy turned off
//! (`jax_use_shardy_partitioner = False`): `@Sharding` custom calls carrying an
//! `mhlo.sharding`, `@SPMDFullToShardShape` into the manual body (a `func.call`) and
//! `@SPMDShardToFullShape` out of it. Read like Shardy's (`shard.rs`): the program takes and
//! gives global values; the full-to-shard cuts this rank's tile, the shard-to-full gathers
//! every rank's tile per its sharding. Tiled shardings over the default device order
//! (`{devices=[a,b,...]<=[N]}`, optionally `last_tile_dim_replicate`, or the explicit list
//! 0..N-1) are read; anything else (transposed device orders, `last_tile_dims`, `maximal`)
//! is refused, and so is a tiled `@Sharding` that no full-to-shard consumes, which only an
//! automatic partitioner could run.

use super::ops::{R, result, tensors};
use super::ranks::HloSharding;
use super::shard::{Mesh, Sharding, shard_of, whole_of};
use super::{Env, ImportError, Importer, Item};
use crate::ast::{Attr, Op};
use xthunk_tensor::graph::{Graph, Value};

/// Parses `{replicated}`, `{manual}`, `{devices=[..]<=[..]}` (optionally
/// ` last_tile_dim_replicate`) and `{devices=[..]0,1,...}` in order.
fn parse(text: &str) -> Result<HloSharding, String> {
    let body = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or("not `{...}`")?
        .trim();
    match body {
        "replicated" => return Ok(HloSharding::Replicated),
        "manual" => return Ok(HloSharding::Manual),
        _ => {}
    }
    let (body, replicate) = match body.strip_suffix("last_tile_dim_replicate") {
        Some(b) => (b.trim(), true),
        None => (body, false),
    };
    let rest = body
        .strip_prefix("devices=[")
        .ok_or("only replicated, manual and tiled shardings are read")?;
    let (dims, order) = rest
        .split_once(']')
        .ok_or("no `]` after the tile dimensions")?;
    let mut tiles = dims
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<u64>()
                .map_err(|_| format!("tile dimension `{d}`"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if tiles.contains(&0) {
        return Err("a tile dimension of 0".into());
    }
    let n = tiles
        .iter()
        .try_fold(1u64, |a, d| a.checked_mul(*d))
        .ok_or("too many tiles")?;
    let order = order.trim();
    let iota = if let Some(shape) = order.strip_prefix("<=[") {
        let shape = shape
            .strip_suffix(']')
            .ok_or("a transposed or odd device order")?;
        let count = shape
            .split(',')
            .map(|d| d.trim().parse::<u64>().ok())
            .try_fold(1u64, |a, d| d.and_then(|d| a.checked_mul(d)));
        count == Some(n)
    } else {
        let ids: Option<Vec<u64>> = order.split(',').map(|d| d.trim().parse().ok()).collect();
        ids.is_some_and(|ids| ids.iter().copied().eq(0..n))
    };
    if !iota {
        return Err("a device order other than 0..N-1".into());
    }
    let copies = if replicate {
        tiles.pop().ok_or("no tile dimensions")?
    } else {
        1
    };
    Ok(HloSharding::Tiled { tiles, copies })
}

/// A synthetic mesh for a tiled sharding: one axis per dimension, then the copies; each
/// dimension split over its own axis.
fn mesh_of(tiles: &[u64], copies: u64) -> (Mesh, Sharding) {
    let mut axes: Vec<(String, u64)> = tiles
        .iter()
        .enumerate()
        .map(|(i, t)| (format!("d{i}"), *t))
        .collect();
    axes.push(("copies".into(), copies));
    let sharding = tiles
        .iter()
        .enumerate()
        .map(|(i, t)| if *t > 1 { vec![i] } else { vec![] })
        .collect();
    (Mesh { axes }, sharding)
}

impl Importer<'_> {
    fn sharding_attr(&self, op: &Op) -> R<HloSharding> {
        let Some(Attr::Str(text)) = op.attr("mhlo.sharding") else {
            return Err(ImportError::invalid(op, "no `mhlo.sharding`"));
        };
        parse(text)
            .map_err(|e| ImportError::unsupported(op, format!("`mhlo.sharding = \"{text}\"`: {e}")))
    }

    /// The mesh of a tiled sharding, checked against the program's ranks.
    fn tiled_mesh(&self, op: &Op, tiles: &[u64], copies: u64) -> R<(Mesh, Sharding)> {
        let (mesh, s) = mesh_of(tiles, copies);
        let n = mesh.axes.iter().fold(1u64, |a, x| a.saturating_mul(x.1));
        if n != self.spmd.ranks() || self.spmd.replicas != 1 {
            return Err(ImportError::unsupported(
                op,
                format!(
                    "a sharding over {n} devices in a program of {} replicas × {} partitions",
                    self.spmd.replicas, self.spmd.partitions
                ),
            ));
        }
        Ok((mesh, s))
    }

    /// `@Sharding`, `@SPMDFullToShardShape`, `@SPMDShardToFullShape`; `None` for other
    /// targets.
    pub(super) fn gspmd_call(
        &mut self,
        g: &mut Graph,
        op: &Op,
        env: &Env,
        target: &str,
    ) -> Option<R<Vec<Item>>> {
        let r = match target {
            "Sharding" => self.sharding_call(op, env),
            "SPMDFullToShardShape" => self.full_to_shard(g, op, env),
            "SPMDShardToFullShape" => self.shard_to_full(g, op, env),
            _ => return None,
        };
        Some(r)
    }

    fn operand(&self, op: &Op, env: &Env) -> R<Value> {
        match tensors(env, op)?.as_slice() {
            [x] => Ok(*x),
            _ => Err(ImportError::invalid(op, "one operand expected")),
        }
    }

    /// The value itself; a tiled sharding is remembered for the full-to-shard that must
    /// consume it.
    fn sharding_call(&mut self, op: &Op, env: &Env) -> R<Vec<Item>> {
        let x = self.operand(op, env)?;
        let s = self.sharding_attr(op)?;
        if self.spmd.ranks() > 1 && matches!(s, HloSharding::Tiled { .. }) {
            self.gspmd_pending.push((x, s, op.pos, op.name.clone()));
        }
        Ok(vec![Item::Tensor(x)])
    }

    fn full_to_shard(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let x = self.operand(op, env)?;
        let want = result(op, 0)?;
        let found = self.gspmd_pending.iter().position(|p| p.0 == x);
        let sharding = found.map(|i| self.gspmd_pending.remove(i).1);
        self.manual_seen = true;
        match sharding {
            Some(HloSharding::Tiled { tiles, copies }) => {
                let (mesh, s) = self.tiled_mesh(op, &tiles, copies)?;
                let coords = self.coordinates(g, op, &mesh)?;
                Ok(vec![Item::Tensor(shard_of(
                    g, op, &mesh, &coords, x, &s, &want.dims,
                )?)])
            }
            _ if *g.ty(x) == want => Ok(vec![Item::Tensor(x)]),
            _ => Err(ImportError::unsupported(
                op,
                "a full-to-shard of a value with no tiled `@Sharding` before it",
            )),
        }
    }

    fn shard_to_full(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let x = self.operand(op, env)?;
        let want = result(op, 0)?;
        match self.sharding_attr(op)? {
            HloSharding::Tiled { tiles, copies } => {
                let (mesh, s) = self.tiled_mesh(op, &tiles, copies)?;
                Ok(vec![Item::Tensor(whole_of(
                    g, op, &mesh, x, &s, &want.dims,
                )?)])
            }
            HloSharding::Replicated if *g.ty(x) == want => Ok(vec![Item::Tensor(x)]),
            other => Err(ImportError::unsupported(
                op,
                format!("a shard-to-full to {other:?} of a {}", g.ty(x)),
            )),
        }
    }

    /// A tiled `@Sharding` no full-to-shard consumed: a sharding an automatic partitioner
    /// would have to apply.
    pub(super) fn gspmd_leftover(&self) -> R<()> {
        match self.gspmd_pending.first() {
            None => Ok(()),
            Some((_, s, pos, name)) => Err(ImportError::Unsupported {
                what: format!(
                    "a {s:?} sharding outside a manual computation: this needs an automatic partitioner (GSPMD), which xthunk does not have"
                ),
                pos: *pos,
                op: name.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hlo_shardings_parse() {
        assert_eq!(parse("{replicated}"), Ok(HloSharding::Replicated));
        assert_eq!(parse("{manual}"), Ok(HloSharding::Manual));
        assert_eq!(
            parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"),
            Ok(HloSharding::Tiled {
                tiles: vec![2, 1],
                copies: 2
            })
        );
        assert_eq!(
            parse("{devices=[4,1]0,1,2,3}"),
            Ok(HloSharding::Tiled {
                tiles: vec![4, 1],
                copies: 1
            })
        );
        assert!(parse("{devices=[2,2]<=[2,2]T(1,0)}").is_err());
        assert!(parse("{devices=[4,1]3,2,1,0}").is_err());
        assert!(parse("{devices=[2,1,2]<=[4] last_tile_dims={manual}}").is_err());
        assert!(parse("{maximal device=0}").is_err());
    }
}
