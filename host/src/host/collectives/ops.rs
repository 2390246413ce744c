//! What a host collective operation is — its kind, element type, count, operator and root —
//! with the buffer lengths it implies, and its encoding as words (`u64`s): the issue side
//! passes those words to the built-in kernel ([`super::kernel`]) and the shared memory transport
//! publishes them to the other ranks. Every code is decoded here, beside its encoder.

use crate::collectives::ReduceOp;
use crate::error::{Error, Result};
use crate::ir::DType;
use std::fmt;

/// Kinds of host collective operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    /// A group of sends and receives (not a collective: it has no [`OpDesc`]).
    P2p,
}

/// Every kind, in code order (a kind's code is its index).
const KINDS: [OpKind; 6] = [
    OpKind::AllReduce,
    OpKind::AllGather,
    OpKind::ReduceScatter,
    OpKind::AllToAll,
    OpKind::Broadcast,
    OpKind::P2p,
];

impl OpKind {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all_reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::Broadcast => "broadcast",
            OpKind::P2p => "send/recv",
        }
    }

    pub(crate) fn code(self) -> u64 {
        KINDS.iter().position(|x| *x == self).unwrap_or(0) as u64
    }

    pub(crate) fn from_code(v: u64) -> Option<OpKind> {
        KINDS.get(usize::try_from(v).ok()?).copied()
    }
}

/// An element type's code: its index in [`DType::ALL`].
pub(crate) fn dtype_code(d: DType) -> u64 {
    DType::ALL.iter().position(|x| *x == d).unwrap_or(0) as u64
}

pub(crate) fn dtype_from_code(v: u64) -> Option<DType> {
    DType::ALL.get(usize::try_from(v).ok()?).copied()
}

/// A reduction's code: 0 for none, else 1 + its index in [`ReduceOp::ALL`].
fn op_code(op: Option<ReduceOp>) -> u64 {
    op.and_then(|op| ReduceOp::ALL.iter().position(|x| *x == op))
        .map_or(0, |i| i as u64 + 1)
}

/// `None` for a code that is no reduction; `Some(None)` for "no reduction".
fn op_from_code(v: u64) -> Option<Option<ReduceOp>> {
    match v {
        0 => Some(None),
        v => ReduceOp::ALL
            .get(usize::try_from(v - 1).ok()?)
            .copied()
            .map(Some),
    }
}

/// What a rank issued: compared across ranks at every collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpDesc {
    pub(crate) kind: OpKind,
    pub(crate) count: u64,
    pub(crate) dtype: DType,
    pub(crate) op: Option<ReduceOp>,
    pub(crate) root: usize,
}

/// The words of an encoded [`OpDesc`].
pub(crate) const DESC_WORDS: usize = 5;

impl OpDesc {
    pub(crate) fn new(
        kind: OpKind,
        count: u64,
        dtype: DType,
        op: Option<ReduceOp>,
        root: usize,
    ) -> Self {
        OpDesc {
            kind,
            count,
            dtype,
            op,
            root,
        }
    }

    /// The description as words: kind, count, dtype, operator and root codes.
    pub(crate) fn to_words(self) -> [u64; DESC_WORDS] {
        [
            self.kind.code(),
            self.count,
            dtype_code(self.dtype),
            op_code(self.op),
            self.root as u64,
        ]
    }

    /// The description [`OpDesc::to_words`] encoded, if the words are one.
    pub(crate) fn from_words(w: &[u64; DESC_WORDS]) -> Option<OpDesc> {
        Some(OpDesc {
            kind: OpKind::from_code(w[0])?,
            count: w[1],
            dtype: dtype_from_code(w[2])?,
            op: op_from_code(w[3])?,
            root: usize::try_from(w[4]).ok()?,
        })
    }

    /// The bytes of a rank's source and destination in a clique of `n`.
    pub(crate) fn lens(&self, n: usize) -> Result<(u64, u64)> {
        let (c, d) = (self.count, self.dtype);
        Ok(match self.kind {
            OpKind::AllReduce | OpKind::Broadcast => {
                let b = byte_len(c, d, 1)?;
                (b, b)
            }
            OpKind::AllGather => (byte_len(c, d, 1)?, byte_len(c, d, n)?),
            OpKind::ReduceScatter => (byte_len(c, d, n)?, byte_len(c, d, 1)?),
            OpKind::AllToAll | OpKind::P2p => {
                let b = byte_len(c, d, n)?;
                (b, b)
            }
        })
    }
}

impl fmt::Display for OpDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}", self.kind.name(), self.dtype)?;
        if let Some(op) = self.op {
            write!(f, " {op}")?;
        }
        write!(f, ", {} elements", self.count)?;
        if self.kind == OpKind::Broadcast {
            write!(f, ", root {}", self.root)?;
        }
        f.write_str(")")
    }
}

/// `count` elements of `dtype`, `times` over, in bytes, if that fits the address space.
pub(crate) fn byte_len(count: u64, dtype: DType, times: usize) -> Result<u64> {
    count
        .checked_mul(dtype.size() as u64)
        .and_then(|b| b.checked_mul(times as u64))
        .filter(|b| *b <= i64::MAX as u64 && usize::try_from(*b).is_ok())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{count} elements of {dtype} (x{times}) do not fit in memory"
            ))
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_description_round_trips_through_its_words() {
        for kind in KINDS {
            for dtype in DType::ALL {
                for op in std::iter::once(None).chain(ReduceOp::ALL.into_iter().map(Some)) {
                    let d = OpDesc {
                        kind,
                        count: 12345,
                        dtype,
                        op,
                        root: 3,
                    };
                    assert_eq!(OpDesc::from_words(&d.to_words()), Some(d));
                }
            }
        }
        assert_eq!(OpDesc::from_words(&[6, 0, 0, 0, 0]), None);
        assert_eq!(OpDesc::from_words(&[0, 0, 99, 0, 0]), None);
        assert_eq!(OpDesc::from_words(&[0, 0, 0, 99, 0]), None);
    }
}
