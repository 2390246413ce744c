//! How many ranks a program runs on, and whether a sharding splits a value: what the
//! importer's walk needs of SPMD programs before it meets a collective or a manual
//! computation (`collective.rs`, `shard.rs`).

use super::error::ImportError;
use crate::ast::{Attr, Op};

type R<T> = Result<T, ImportError>;

/// The most ranks a program may name (groups are expanded per rank at import).
pub const MAX_RANKS: u64 = 1 << 16;

/// How many ranks a program runs on: the module's replica and partition counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spmd {
    pub replicas: u32,
    pub partitions: u32,
}

impl Spmd {
    /// From the module's `mhlo.num_replicas` / `mhlo.num_partitions` (absent: 1).
    pub(crate) fn of(m: &Op) -> R<Spmd> {
        let count = |name: &str| -> R<u32> {
            match m.attr(name) {
                None => Ok(1),
                Some(a) => a
                    .as_int()
                    .and_then(|v| u32::try_from(v).ok())
                    .filter(|v| *v >= 1 && u64::from(*v) <= MAX_RANKS)
                    .ok_or_else(|| {
                        ImportError::unsupported(
                            m,
                            format!("`{name}`: a count from 1 to {MAX_RANKS} expected"),
                        )
                    }),
            }
        };
        let s = Spmd {
            replicas: count("mhlo.num_replicas")?,
            partitions: count("mhlo.num_partitions")?,
        };
        if s.ranks() > MAX_RANKS {
            return Err(ImportError::unsupported(
                m,
                format!("{} ranks (at most {MAX_RANKS})", s.ranks()),
            ));
        }
        Ok(s)
    }

    pub(crate) fn ranks(self) -> u64 {
        u64::from(self.replicas) * u64::from(self.partitions)
    }
}

/// Whether a sharding attribute (`#sdy.sharding<@mesh, [...]>` or the per-value list)
/// splits anything.
pub(crate) fn splits(a: &Attr) -> bool {
    match a {
        Attr::Opaque(t) => t.contains('"'),
        _ => false,
    }
}

/// An `mhlo.sharding` as the importer reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HloSharding {
    Replicated,
    Manual,
    /// Tiles per dimension, and copies of each tile (`last_tile_dim_replicate`).
    Tiled {
        tiles: Vec<u64>,
        copies: u64,
    },
}
