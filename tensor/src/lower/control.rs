//! `while` and `case`/`if` as the IR's `While` and `Conditional` thunks. A loop's carried
//! values live in temps the condition and the body read; the body writes its new values into
//! temps of their own and copies them back at its end (a value passed through unchanged is
//! neither written nor copied; a carried array the body only updates by
//! `dynamic_update_slice` is updated in place, its window alone written). A counted loop (a counter from a constant, `+ 1` a trip,
//! `< constant`) carries its trip count, so that the host does not wait on the condition every
//! trip. Every branch of a `case` writes the op's result temps.

use super::emit::{KernelText, Scope};
use super::{LowerError, Lowerer, scalar};
use crate::graph::{BinaryOp, CompareDirection, CompareType, Graph, Node, Op, Value};
use xthunk_core::ir::{ConditionalThunk, CopyThunk, DType, Slice, Thunk, WhileThunk};

/// The integer value of a scalar integer constant.
fn int_constant(g: &Graph, v: Value) -> Option<i64> {
    let t = g.ty(v);
    match (&g.def(v).op, t.dtype) {
        (Op::Constant { bytes }, DType::I32) if t.rank() == 0 => Some(i64::from(
            i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?),
        )),
        (Op::Constant { bytes }, DType::I64) if t.rank() == 0 => {
            Some(i64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
        }
        _ => None,
    }
}

/// The trip count of a counted loop, as `fori_loop` and `scan` emit it: carried value `k`
/// starts at a constant, the body adds 1 to it, and the condition is `k < constant`
/// (signed). `None` for any other loop.
fn known_trips(outer: &Graph, node: &Node, cond: &Graph, body: &Graph) -> Option<u64> {
    let (_, r) = cond.results().first()?;
    let cmp = cond.def(*r);
    let Op::Compare {
        direction: CompareDirection::Lt,
        kind: CompareType::Signed,
    } = cmp.op
    else {
        return None;
    };
    let k = cond.params().iter().position(|p| *p == cmp.operands[0])?;
    let limit = int_constant(cond, cmp.operands[1])?;
    let start = int_constant(outer, *node.operands.get(k)?)?;
    let (_, next) = body.results().get(k)?;
    let add = body.def(*next);
    if add.op != Op::Binary(BinaryOp::Add) {
        return None;
    }
    let p = body.params()[k];
    let one = match (add.operands[0] == p, add.operands[1] == p) {
        (true, false) => add.operands[1],
        (false, true) => add.operands[0],
        _ => return None,
    };
    if int_constant(body, one)? != 1 {
        return None;
    }
    Some(limit.saturating_sub(start).max(0) as u64)
}

impl Lowerer {
    /// Lowers the while `node`; returns the buffers holding its results.
    pub(super) fn while_loop(
        &mut self,
        s: &Scope,
        node: &Node,
        cond: &Graph,
        body: &Graph,
        out: &mut Vec<Thunk>,
    ) -> Result<Vec<Slice>, LowerError> {
        let mut carried = vec![];
        for v in &node.operands {
            let c = self.temp(s.graph.ty(*v));
            self.write_into(s, *v, c, out)?;
            carried.push(c);
        }
        let pred = self.b.temp(DType::Pred, &[]).slice;
        let cond_thunks = self.region(cond, &carried, &[Some(pred)])?;
        let mut dests = vec![];
        let mut copies = vec![];
        let uses = body.use_counts();
        for (i, (_, r)) in body.results().iter().enumerate() {
            let p = body.params()[i];
            let def = body.def(*r);
            if *r == p {
                dests.push(None);
            } else if def.op == Op::DynamicUpdateSlice
                && def.operands[0] == p
                && uses[p.0 as usize] == 1
            {
                // `scan`'s update of a carried array: only the update window is written, in
                // the carried buffer itself (nothing else reads the old value).
                self.in_place.insert((body as *const Graph as usize, *r));
                dests.push(None);
            } else {
                let n = self.temp(body.ty(*r));
                dests.push(Some(n));
                if n.size > 0 {
                    copies.push(Thunk::from(CopyThunk {
                        src: n,
                        dst: carried[i],
                    }));
                }
            }
        }
        let mut body_thunks = self.region(body, &carried, &dests)?;
        self.in_place
            .retain(|(g, _)| *g != body as *const Graph as usize);
        body_thunks.extend(copies);
        out.push(
            WhileThunk {
                cond: cond_thunks,
                pred,
                body: body_thunks,
                trip_count: known_trips(s.graph, node, cond, body),
            }
            .into(),
        );
        Ok(carried)
    }

    /// Lowers the case `node`; returns the buffers holding its results.
    pub(super) fn case(
        &mut self,
        s: &Scope,
        node: &Node,
        branches: &[Graph],
        out: &mut Vec<Thunk>,
    ) -> Result<Vec<Slice>, LowerError> {
        let index = self.buffer_of(s, node.operands[0], out)?;
        let mut params = vec![];
        for v in &node.operands[1..] {
            params.push(self.buffer_of(s, *v, out)?);
        }
        let results: Vec<Slice> = node
            .results
            .iter()
            .map(|r| self.temp(s.graph.ty(*r)))
            .collect();
        let dests: Vec<Option<Slice>> = results.iter().map(|r| Some(*r)).collect();
        let mut lists = vec![];
        for b in branches {
            lists.push(self.region(b, &params, &dests)?);
        }
        out.push(
            ConditionalThunk {
                index,
                index_type: s.graph.ty(node.operands[0]).dtype,
                branches: lists,
            }
            .into(),
        );
        Ok(results)
    }

    /// The kernel writing the update of the `dynamic_update_slice` `node` into `buf` (its
    /// operand's buffer) at the clamped starts: a thread per update element.
    pub(super) fn update_in_place(
        &mut self,
        s: &Scope,
        node: &Node,
        buf: Slice,
    ) -> Result<Option<Thunk>, LowerError> {
        let (t, u) = (
            s.graph.ty(node.operands[0]).clone(),
            s.graph.ty(node.operands[1]).clone(),
        );
        let mut k = KernelText::new();
        let o = k.inout(buf, t.dtype);
        k.open("XT_FOR(i, n) {");
        let uidx = k.delinearize("i", &u.dims);
        let mut target = vec![];
        for (d, ui) in uidx.iter().enumerate() {
            let st = k.value_at(s, node.operands[2 + d], &[])?;
            let c = format!("xh_clampi((long long){st}, {}LL)", t.dims[d] - u.dims[d]);
            target.push(k.var("long long", format!("{c} + {ui}")));
        }
        let x = k.value_at(s, node.operands[1], &uidx)?;
        let lin = super::emit::offset(&target, &t.dims);
        k.line(format!("{o}[{lin}] = {};", scalar::store(t.dtype, &x)));
        k.close("}");
        Ok(self.launch(k, u.elements()))
    }
}
