//! The fusion decision for the fusible ops (elementwise, converts, broadcasts, the index-only
//! movement ops, dynamic slices and updates): a value stays fused — computed inside each
//! kernel that reads it — unless it is a result, or is read more than once and is not cheap
//! to recompute; then it is the root of a kernel of its own. `reshape` and `bitcast_convert`
//! of a value in a buffer alias that buffer (same bytes, no kernel).

use super::emit::{Home, Scope};
use super::{LowerError, Lowerer};
use crate::graph::{Node, Op};
use xthunk_core::ir::{Slice, Thunk};

/// Whether the op's value at an index reads its operand once, by index only (cheap to
/// recompute in every reader when its operand is in a buffer).
fn index_only(op: &Op) -> bool {
    matches!(
        op,
        Op::BroadcastInDim { .. }
            | Op::Reshape
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Reverse { .. }
            | Op::Convert
            | Op::BitcastConvert
    )
}

/// Where the value of the fusible `node` goes (`uses`: its readers; `claim`: the result
/// buffer it is written to when it is one); emits its kernel when it is a root.
pub(super) fn place(
    l: &mut Lowerer,
    s: &Scope,
    node: &Node,
    uses: usize,
    claim: Option<Slice>,
    out: &mut Vec<Thunk>,
) -> Result<Home, LowerError> {
    let v = node.results[0];
    let t = s.graph.ty(v).clone();
    let operand_home = node.operands.first().map(|o| &s.homes[o.0 as usize]);
    let operand_in_buffer = matches!(operand_home, Some(Home::Buf(_)));
    match &node.op {
        Op::Constant { bytes } if t.elements() != 1 => {
            let slice = l.b.constant(t.dtype, &t.dims, bytes.clone()).slice;
            return Ok(Home::Buf(slice));
        }
        Op::Constant { .. } if claim.is_none() => return Ok(Home::Fused),
        Op::Reshape | Op::BitcastConvert => {
            if let Some(Home::Buf(b)) = operand_home {
                return Ok(Home::Buf(*b));
            }
            let from = s.graph.ty(node.operands[0]).dtype;
            if from.size() != t.dtype.size() {
                // Different widths: the operand's bytes, in a buffer, reinterpreted.
                let b = l.buffer_of(s, node.operands[0], out)?;
                return Ok(Home::Buf(b));
            }
        }
        _ => {}
    }
    let cheap = matches!(node.op, Op::Iota { .. } | Op::Constant { .. })
        || (index_only(&node.op) && operand_in_buffer);
    if claim.is_none() && (uses <= 1 || cheap) {
        return Ok(Home::Fused);
    }
    let dest = match claim {
        Some(d) => d,
        None => l.temp(&t),
    };
    out.extend(l.fused_kernel(s, v, dest)?);
    Ok(Home::Buf(dest))
}
