//! The fusion plan. Fusible ops (elementwise, converts, broadcasts, the index-only movement
//! ops, iotas, dynamic slices and updates, scalar constants) are computed inside the kernel
//! that reads them; a value becomes the root of a kernel of its own (a temp) when it is a
//! result, when its readers end up in different kernels (unless it is cheap to recompute: an
//! iota, a scalar, an index-only op of a buffer), or when one kernel would compute it more
//! than [`MAX_COPIES`] times at different indices. A reduction, a sort, a dot, a loop or a branch
//! reading a fused value computes it in its own kernel. `reshape` and `bitcast_convert` of a
//! value in a buffer alias that buffer (same bytes, no kernel).

use crate::graph::{DotDims, Graph, Node, Op, Value};
use std::collections::HashSet;

/// How many times one kernel may compute a fused value (at different indices) before it is
/// computed once into a temp instead.
const MAX_COPIES: usize = 4;

/// The longest chain of fused values one kernel computes: a value whose fused operands reach
/// this depth becomes a root. It bounds the emitter's recursion (one level per fused value:
/// a chain of 10^5 elementwise ops must not overflow the stack) and the size of one
/// kernel's expression; chains this long are rare in real programs, and a temp every 64 ops
/// costs little.
pub(super) const MAX_FUSED_DEPTH: usize = 64;

/// Whether the node's value can be computed inside its readers' kernels.
pub(super) fn fusible(g: &Graph, node: &Node) -> bool {
    match &node.op {
        Op::Parameter { .. }
        | Op::Scatter { .. }
        | Op::Sort { .. }
        | Op::Cholesky { .. }
        | Op::Fft { .. }
        | Op::RngBitGenerator { .. }
        | Op::Rng { .. }
        | Op::TriangularSolve { .. }
        | Op::DotGeneral(_)
        | Op::Reduce { .. }
        | Op::While { .. }
        | Op::Case { .. }
        | Op::Collective(_)
        | Op::CustomCall(_) => false,
        Op::Constant { .. } => g.ty(node.results[0]).elements() == 1,
        _ => true,
    }
}

/// Cheap to compute again in every reader: no operand, or one read by index from a buffer.
fn cheap(g: &Graph, node: &Node) -> bool {
    let index_only = matches!(
        node.op,
        Op::BroadcastInDim { .. }
            | Op::Reshape
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Reverse { .. }
            | Op::Convert
            | Op::BitcastConvert
    );
    matches!(node.op, Op::Iota { .. } | Op::Constant { .. })
        || (index_only && !fusible(g, g.def(node.operands[0])))
}

/// The nodes reading each value, by value index.
fn readers(g: &Graph) -> Vec<Vec<usize>> {
    let mut readers: Vec<Vec<usize>> = vec![vec![]; g.values().len()];
    for (i, n) in g.nodes().iter().enumerate() {
        for v in &n.operands {
            readers[v.0 as usize].push(i);
        }
    }
    readers
}

/// Which fusible values are roots (computed by a kernel of their own), by value index.
/// `results`: the values written to result buffers.
pub(super) fn roots(g: &Graph, results: &HashSet<Value>) -> Vec<bool> {
    let nodes = g.nodes();
    let readers = readers(g);
    let mut root = vec![false; g.values().len()];
    // The kernel (named by its root's node) computing each fused value, and how many times.
    let mut kernel: Vec<Option<usize>> = vec![None; g.values().len()];
    let mut copies = vec![0usize; g.values().len()];
    for node in nodes.iter().rev() {
        if !fusible(g, node) {
            continue;
        }
        let v = node.results[0];
        let vi = v.0 as usize;
        if results.contains(&v) {
            root[vi] = true;
            continue;
        }
        if cheap(g, node) {
            continue;
        }
        let mut ks = HashSet::new();
        let mut n = 0;
        for &r in &readers[vi] {
            let reader = &nodes[r];
            if !fusible(g, reader) {
                ks.insert(r);
                n += 1;
                continue;
            }
            let w = reader.results[0].0 as usize;
            if root[w] {
                ks.insert(r);
                n += 1;
            } else if let Some(k) = kernel[w] {
                ks.insert(k);
                n += copies[w];
            }
        }
        if ks.len() > 1 || n > MAX_COPIES {
            root[vi] = true;
        } else {
            kernel[vi] = ks.into_iter().next();
            copies[vi] = n;
        }
    }
    // Bound the depth of fused chains (in program order, so that a new root shortens the
    // chains of its readers). A root is always valid: it only materializes one more value.
    let mut depth = vec![0usize; g.values().len()];
    for node in nodes {
        if !fusible(g, node) {
            continue;
        }
        let vi = node.results[0].0 as usize;
        if root[vi] {
            continue;
        }
        let d = 1 + node
            .operands
            .iter()
            .map(|o| depth[o.0 as usize])
            .max()
            .unwrap_or(0);
        if d > MAX_FUSED_DEPTH && !cheap(g, node) {
            root[vi] = true;
        } else {
            depth[vi] = d;
        }
    }
    root
}

/// The dots computed transposed: a `dot_general` whose only reader is a `transpose` putting
/// the rhs's free dimensions before the lhs's (batch dimensions first and in place) is
/// lowered as the `dot_general` of the swapped operands, which gives the transpose's value
/// itself (C^T = B^T A^T: the gemm's operands and their transposes trade places) instead of
/// a kernel gathering the dot's result across its rows (a training step's weight gradient
/// read transposed by its update). By the dot's value: the transpose's node.
/// `results`: values written to result buffers (a dot among them is computed as it is).
pub(super) fn transposed_dots(
    g: &Graph,
    results: &HashSet<Value>,
) -> std::collections::HashMap<Value, usize> {
    let nodes = g.nodes();
    let readers = readers(g);
    let mut out = std::collections::HashMap::new();
    for n in nodes {
        let Op::DotGeneral(d) = &n.op else { continue };
        let (Some(&v), [lhs, rhs]) = (n.results.first(), n.operands.as_slice()) else {
            continue;
        };
        if results.contains(&v) {
            continue;
        }
        let [t] = readers[v.0 as usize].as_slice() else {
            continue;
        };
        let Op::Transpose { perm } = &nodes[*t].op else {
            continue;
        };
        let nb = d.lhs_batch.len();
        let free = |rank: usize, b: &[usize], c: &[usize]| {
            (0..rank)
                .filter(|x| !b.contains(x) && !c.contains(x))
                .count()
        };
        let nl = free(g.ty(*lhs).rank(), &d.lhs_batch, &d.lhs_contracting);
        let nr = free(g.ty(*rhs).rank(), &d.rhs_batch, &d.rhs_contracting);
        let want: Vec<usize> = (0..nb)
            .chain(nb + nl..nb + nl + nr)
            .chain(nb..nb + nl)
            .collect();
        if nl > 0 && nr > 0 && *perm == want {
            out.insert(v, *t);
        }
    }
    out
}

/// `d` with its operands' roles swapped (the dot of rhs and lhs).
pub(super) fn swapped(d: &DotDims) -> DotDims {
    DotDims {
        lhs_batch: d.rhs_batch.clone(),
        rhs_batch: d.lhs_batch.clone(),
        lhs_contracting: d.rhs_contracting.clone(),
        rhs_contracting: d.lhs_contracting.clone(),
    }
}
