//! Device-side control flow in recorded graphs (conditional graph nodes): the data a stream
//! that records `while` loops and branches as graph nodes is given.
//!
//! A [`ConditionHandle`] is a condition a conditional node reads when the graph runs (CUDA:
//! a `CUgraphConditionalHandle`, created with `cuGraphConditionalHandleCreate`). Work
//! recorded with [`Stream::set_condition`](super::Stream::set_condition) sets it on the
//! device from a predicate, a branch index or a trip counter (CUDA: a tiny kernel calling
//! `cudaGraphSetConditional`); [`Stream::capture_conditional`](super::Stream::capture_conditional)
//! records an `If` node (its body runs once when the condition is nonzero) or a `While` node
//! (its body runs while the condition is nonzero, the condition tested before every trip,
//! so the body sets it again at its end). Nodes nest: a body may record further nodes.
//!
//! Streams without conditional nodes (HIP, CUDA before 12.4) keep the defaults, which return
//! `Unsupported`: the executor then runs the command buffer with host-driven control flow.

use super::types::DevicePtr;

/// A condition a conditional graph node reads, created while capturing; valid for the graph
/// being recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConditionHandle(pub u64);

/// The kind of a conditional graph node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionalKind {
    /// The body runs once when the condition is nonzero.
    If,
    /// The body runs while the condition is nonzero (tested before every trip).
    While,
}

/// What [`Stream::set_condition`](super::Stream::set_condition) sets a condition from, read
/// on the device when the recorded work runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCondition {
    /// 1 when the byte at `pred` is nonzero, else 0 (a `while`'s predicate).
    Pred { pred: DevicePtr },
    /// 1 when the branch index at `index` selects branch `branch` of `branches`, else 0.
    /// An i32 index selects the last branch when negative or out of range; a pred index
    /// (one byte) selects branch 0 when nonzero and branch 1 when zero.
    Branch {
        index: DevicePtr,
        pred: bool,
        branch: u32,
        branches: u32,
    },
    /// 1 when the u64 counter at `counter` is below `n`, else 0; the counter is then
    /// incremented (a `while` with a trip count).
    TripsBelow { counter: DevicePtr, n: u64 },
}

impl SetCondition {
    /// The condition's value given the bytes it reads: the index or predicate bytes (at
    /// least 4 for an i32 index), or the counter's value (which the caller then increments).
    /// Every backend's set-condition work computes this (the host directly; the CUDA
    /// kernel the same rule).
    pub fn value(&self, bytes: &[u8], counter: u64) -> u32 {
        match *self {
            SetCondition::Pred { .. } => u32::from(bytes.first().is_some_and(|b| *b != 0)),
            SetCondition::Branch {
                pred,
                branch,
                branches,
                ..
            } => {
                let last = branches.saturating_sub(1);
                let selected = if pred {
                    u32::from(bytes.first().is_none_or(|b| *b == 0))
                } else {
                    let mut i = [0u8; 4];
                    for (d, s) in i.iter_mut().zip(bytes) {
                        *d = *s;
                    }
                    let i = i32::from_le_bytes(i);
                    if i < 0 || i as u32 > last {
                        last
                    } else {
                        i as u32
                    }
                };
                u32::from(selected == branch)
            }
            SetCondition::TripsBelow { n, .. } => u32::from(counter < n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_follow_the_executor_rules() {
        let p = DevicePtr(0);
        assert_eq!(SetCondition::Pred { pred: p }.value(&[2], 0), 1);
        assert_eq!(SetCondition::Pred { pred: p }.value(&[0], 0), 0);
        let br = |pred, branch| SetCondition::Branch {
            index: p,
            pred,
            branch,
            branches: 3,
        };
        assert_eq!(br(false, 1).value(&1i32.to_le_bytes(), 0), 1);
        assert_eq!(br(false, 0).value(&1i32.to_le_bytes(), 0), 0);
        assert_eq!(br(false, 2).value(&(-1i32).to_le_bytes(), 0), 1);
        assert_eq!(br(false, 2).value(&7i32.to_le_bytes(), 0), 1);
        assert_eq!(br(true, 0).value(&[1], 0), 1);
        assert_eq!(br(true, 1).value(&[0], 0), 1);
        assert_eq!(br(true, 0).value(&[0], 0), 0);
        let trips = SetCondition::TripsBelow { counter: p, n: 2 };
        assert_eq!(trips.value(&[], 1), 1);
        assert_eq!(trips.value(&[], 2), 0);
    }
}
