//! Regions as graphs of their own: a region's free values (what it reads from outside, in
//! first-use order), and building a region's graph with its block arguments and those
//! values as parameters — except constants, made again inside (so a reduction body or a
//! loop condition keeps its constants fused, and `reduce`/`scatter` bodies stay closed).

use super::{Env, FreeValues, ImportError, Importer, Item, lookup, ref0, tensor_type};
use crate::ast::{Block, Op, ValueRef};
use std::collections::HashSet;
use std::rc::Rc;
use xthunk_tensor::graph::{Graph, Op as TOp, TensorType, Value};

/// Constants up to this size are made again inside a region rather than passed in.
const COPIED_CONSTANT_BYTES: u64 = 1 << 16;

/// What regions read from outside, split into the values passed as parameters and the
/// constants copied in.
pub(crate) struct Captures {
    pub passed: Vec<(ValueRef, Value)>,
    consts: Vec<(ValueRef, Value)>,
}

/// Values `b` uses that it does not define (nested regions included), in first-use order;
/// through `memo`, so that importing nested regions level by level walks each block once,
/// not once per level above it.
fn free_of(b: &Block, memo: &mut FreeValues) -> Rc<Vec<ValueRef>> {
    let key: *const Block = b;
    if let Some(f) = memo.get(&key) {
        return f.clone();
    }
    let mut defined: HashSet<ValueRef> = b.args.iter().map(|a| ref0(&a.name)).collect();
    let mut free = vec![];
    let mut seen = HashSet::new();
    for op in &b.ops {
        for r in &op.operands {
            if !defined.contains(r) && seen.insert(r.clone()) {
                free.push(r.clone());
            }
        }
        for region in &op.regions {
            for inner in &region.blocks {
                for r in free_of(inner, memo).iter() {
                    if !defined.contains(r) && seen.insert(r.clone()) {
                        free.push(r.clone());
                    }
                }
            }
        }
        for group in &op.results {
            for index in 0..group.count {
                defined.insert(ValueRef {
                    name: group.name.clone(),
                    index,
                });
            }
        }
    }
    let free = Rc::new(free);
    memo.insert(key, free.clone());
    free
}

/// Values `blocks` use that none of them defines (nested regions included), in first-use order.
fn free_values(blocks: &[&Block], memo: &mut FreeValues) -> Vec<ValueRef> {
    let mut free = vec![];
    let mut seen = HashSet::new();
    for b in blocks {
        for r in free_of(b, memo).iter() {
            if seen.insert(r.clone()) {
                free.push(r.clone());
            }
        }
    }
    free
}

/// The one block of region `i` of `op`.
pub(crate) fn region_block(op: &Op, i: usize) -> Result<&Block, ImportError> {
    match op.regions.get(i).map(|r| r.blocks.as_slice()) {
        Some([b]) => Ok(b),
        _ => Err(ImportError::unsupported(
            op,
            format!("region {i}: exactly one block expected"),
        )),
    }
}

/// What `blocks` (the regions of `op`) read from `env` (`memo`: see [`FreeValues`]).
pub(crate) fn captures(
    g: &Graph,
    env: &Env,
    op: &Op,
    blocks: &[&Block],
    memo: &mut FreeValues,
) -> Result<Captures, ImportError> {
    let mut c = Captures {
        passed: vec![],
        consts: vec![],
    };
    for r in free_values(blocks, memo) {
        let Item::Tensor(v) = lookup(env, &r, op)? else {
            return Err(ImportError::unsupported(
                op,
                format!("a region reads the tuple %{}", r.name),
            ));
        };
        let small_constant =
            matches!(g.def(v).op, TOp::Constant { .. }) && g.ty(v).bytes() <= COPIED_CONSTANT_BYTES;
        if small_constant {
            c.consts.push((r, v));
        } else {
            c.passed.push((r, v));
        }
    }
    Ok(c)
}

impl Importer<'_> {
    /// The graph of `block` (a region of `op`): parameters its block arguments, then the
    /// passed captures; returns it with its results set (`r0`, `r1`, …).
    pub(crate) fn region_graph(
        &mut self,
        outer: &Graph,
        op: &Op,
        name: &str,
        block: &Block,
        caps: &Captures,
    ) -> Result<Graph, ImportError> {
        let mut g = Graph::new(name);
        let mut env = Env::new();
        for (i, a) in block.args.iter().enumerate() {
            let t = tensor_type(&a.ty, op, &format!("{name} argument {i}"))?;
            let v = g
                .parameter(&format!("a{i}"), t.dtype, &t.dims)
                .map_err(|e| ImportError::graph(op, e))?;
            env.insert(ref0(&a.name), Item::Tensor(v));
        }
        for (i, (r, v)) in caps.passed.iter().enumerate() {
            let t: &TensorType = outer.ty(*v);
            let p = g
                .parameter(&format!("c{i}"), t.dtype, &t.dims)
                .map_err(|e| ImportError::graph(op, e))?;
            env.insert(r.clone(), Item::Tensor(p));
        }
        for (r, v) in &caps.consts {
            let TOp::Constant { bytes } = &outer.def(*v).op else {
                continue;
            };
            let t = outer.ty(*v);
            let c = g
                .constant(t.dtype, &t.dims, bytes.clone())
                .map_err(|e| ImportError::graph(op, e))?;
            env.insert(r.clone(), Item::Tensor(c));
        }
        let outs = self.block(&mut g, block, &mut env)?;
        for (i, item) in outs.iter().enumerate() {
            let Item::Tensor(v) = item else {
                return Err(ImportError::unsupported(
                    op,
                    format!("{name} returns a tuple"),
                ));
            };
            g.result(&format!("r{i}"), *v)
                .map_err(|e| ImportError::graph(op, e))?;
        }
        Ok(g)
    }

    /// A closed body (`reduce`, `scatter`): it may read constants from outside, nothing else.
    pub(crate) fn closed_body(
        &mut self,
        outer: &Graph,
        env: &Env,
        op: &Op,
    ) -> Result<Graph, ImportError> {
        self.closed_region(outer, env, op, 0, "body")
    }

    /// Region `i` of `op` as a closed graph named `name` (see [`Self::closed_body`]).
    pub(crate) fn closed_region(
        &mut self,
        outer: &Graph,
        env: &Env,
        op: &Op,
        i: usize,
        name: &str,
    ) -> Result<Graph, ImportError> {
        let block = region_block(op, i)?;
        let caps = captures(outer, env, op, &[block], &mut self.free)?;
        if let Some((r, _)) = caps.passed.first() {
            return Err(ImportError::unsupported(
                op,
                format!(
                    "its body reads %{} from outside (only constants may be)",
                    r.name
                ),
            ));
        }
        self.region_graph(outer, op, name, block, &caps)
    }
}
