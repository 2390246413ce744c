//! Lowering a [`Graph`] to a thunk program ([`lower`]): parameters and results become the
//! signature, every value not fused away a temp (the executor's temp planner shares their
//! memory), elementwise and index-only ops fuse into one generated kernel per region
//! (`fusion.rs` decides, `emit.rs` writes), reductions fuse their producers (`reduce.rs`),
//! `sort` is a kernel sorting rows (`sort.rs`), dots become `Gemm` thunks or a generated
//! kernel (`dot.rs`), `while` and `case` the IR's control-flow thunks (`control.rs`),
//! `custom_call` a `CustomCall` thunk (`call.rs`), collectives the IR's collective thunks
//! (`collective.rs`). The kernels form one portable source
//! module, `tensor`, that starts with `prelude.rs`'s helpers; identical kernels are generated
//! once.

mod call;
mod collective;
mod control;
mod dot;
mod emit;
mod fft;
mod fusion;
mod index;
mod linalg;
mod place;
pub mod prelude;
mod reduce;
mod rng;
mod scalar;
mod scatter;
mod sort;

use crate::error::LowerError;
use crate::graph::{Graph, Op, TensorType, Value};
use emit::{Home, KernelText, Scope};
use std::collections::HashMap;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{
    Access, CopyThunk, Dim3, Executable, KernelArg, KernelThunk, Module, ModuleImage, Scalar,
    Slice, Thunk,
};

/// The name of the generated module.
pub const MODULE: &str = "tensor";

/// Threads per block of generated kernels.
pub(crate) const BLOCK: u32 = 256;

/// A lowered graph.
#[derive(Debug)]
pub struct Lowered {
    /// The program, validated.
    pub executable: Executable,
    /// Distinct generated kernels (the module's kernel count).
    pub kernels: usize,
    /// Kernel launches in the program (a loop body's counted once).
    pub launches: usize,
    /// `Gemm` thunks in the program.
    pub gemms: usize,
}

/// Lowers `g`: parameter `i` is the program's parameter `i`, result `i` its output `i`, both
/// under the graph's names.
pub fn lower(g: &Graph) -> Result<Lowered, LowerError> {
    // The lowering recurses once per nested region: it runs on a stack of its own (reserved,
    // not committed), whatever the caller's thread has.
    let fail = |message: String| LowerError::Graph {
        graph: g.name().into(),
        message,
    };
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("xthunk-lower".into())
            .stack_size(STACK)
            .spawn_scoped(s, || lower_here(g))
            .map_err(|e| fail(format!("could not start the lowering thread: {e}")))?
            .join()
            .unwrap_or_else(|_| {
                Err(fail(
                    "the lowering thread panicked (a bug: please report it)".into(),
                ))
            })
    })
}

/// The stack of the lowering's thread (256 MiB, reserved and not committed).
pub const STACK: usize = 256 << 20;

fn lower_here(g: &Graph) -> Result<Lowered, LowerError> {
    if g.results().is_empty() {
        return Err(LowerError::Graph {
            graph: g.name().into(),
            message: "no results".into(),
        });
    }
    let mut l = Lowerer {
        b: ExecutableBuilder::new(g.name()),
        kernels: vec![],
        names: HashMap::new(),
        launches: 0,
        gemms: 0,
        in_place: Default::default(),
        rng_state: None,
    };
    let mut params = vec![];
    for (i, p) in g.params().iter().enumerate() {
        let t = g.ty(*p);
        let name = match &g.def(*p).op {
            Op::Parameter { name, .. } => name.clone(),
            _ => format!("arg{i}"),
        };
        params.push(l.b.parameter(&name, t.dtype, &t.dims).slice);
    }
    let mut dests = vec![];
    for (name, v) in g.results() {
        let t = g.ty(*v);
        dests.push(Some(l.b.output(name, t.dtype, &t.dims).slice));
    }
    let thunks = l.region(g, &params, &dests)?;
    // The `rng` generator's state, set once before anything draws.
    for t in l.rng_prologue() {
        l.b.push(t);
    }
    for t in thunks {
        l.b.push(t);
    }
    let kernels = l.kernels.len();
    if kernels > 0 {
        let code = format!("{}\n{}", prelude::PRELUDE, l.kernels.join("\n"));
        l.b.module(Module {
            name: MODULE.into(),
            images: vec![ModuleImage::Source { code }],
            options: Default::default(),
        });
    }
    let (launches, gemms) = (l.launches, l.gemms);
    Ok(Lowered {
        executable: l.b.build()?,
        kernels,
        launches,
        gemms,
    })
}

/// The state of one lowering: allocations, the kernels generated so far.
pub(crate) struct Lowerer {
    b: ExecutableBuilder,
    /// Kernel sources, in order of first use.
    kernels: Vec<String>,
    /// A kernel's text (named `KERNEL`) → its name.
    names: HashMap<String, String>,
    launches: usize,
    gemms: usize,
    /// `dynamic_update_slice` values (by graph address and value) written into their
    /// operand's buffer in place (a loop body's update of a carried value).
    in_place: std::collections::HashSet<(usize, Value)>,
    /// The `rng` generator's state (u64 key, u64 counter), once a node draws.
    rng_state: Option<Slice>,
}

impl Lowerer {
    fn temp(&mut self, t: &TensorType) -> Slice {
        self.b.temp(t.dtype, &t.dims).slice
    }

    /// Where `v` is written: the result buffer it claims, else a new temp.
    fn dest(&mut self, claims: &HashMap<Value, Slice>, g: &Graph, v: Value) -> Slice {
        match claims.get(&v) {
            Some(d) => *d,
            None => self.temp(g.ty(v)),
        }
    }

    /// The launch of a finished kernel over `n` elements (`None` when `n` is 0), a thread
    /// per element.
    fn launch(&mut self, k: KernelText, n: u64) -> Option<Thunk> {
        let blocks = n.div_ceil(u64::from(BLOCK)).clamp(1, 65535) as u32;
        self.launch_grid(k, n, blocks)
    }

    /// The launch of a finished kernel over `n` elements on `blocks` blocks.
    fn launch_grid(&mut self, k: KernelText, n: u64, blocks: u32) -> Option<Thunk> {
        if n == 0 {
            return None;
        }
        let key = k.source("KERNEL");
        let name = match self.names.get(&key) {
            Some(name) => name.clone(),
            None => {
                let name = format!("xk{}", self.kernels.len());
                self.kernels.push(k.source(&name));
                self.names.insert(key, name.clone());
                name
            }
        };
        self.launches += 1;
        let mut args = vec![];
        for ((s, _), read) in k.outputs.iter().zip(&k.read_outputs) {
            args.push(KernelArg::Buffer {
                slice: *s,
                access: if *read {
                    Access::ReadWrite
                } else {
                    Access::Write
                },
            });
        }
        for (s, _) in &k.inputs {
            args.push(KernelArg::Buffer {
                slice: *s,
                access: Access::Read,
            });
        }
        args.push(KernelArg::Scalar(Scalar::I64(n as i64)));
        Some(
            KernelThunk {
                module: MODULE.into(),
                name,
                grid: Dim3::x(blocks),
                block: Dim3::x(BLOCK),
                shared_mem: 0,
                args,
            }
            .into(),
        )
    }

    /// A kernel writing every element of `v` into `dest`.
    fn fused_kernel(
        &mut self,
        s: &Scope,
        v: Value,
        dest: Slice,
    ) -> Result<Option<Thunk>, LowerError> {
        let t = s.graph.ty(v).clone();
        let mut k = KernelText::new();
        let o = k.output(dest, t.dtype);
        k.open("XT_FOR(i, n) {");
        let idx = k.delinearize("i", &t.dims);
        let x = k.value_at(s, v, &idx)?;
        k.line(format!("{o}[i] = {};", scalar::store(t.dtype, &x)));
        k.close("}");
        Ok(self.launch(k, t.elements()))
    }

    /// Puts the value `v` into `dest`: a copy from its buffer, or a kernel computing it.
    fn write_into(
        &mut self,
        s: &Scope,
        v: Value,
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        match &s.homes[v.0 as usize] {
            Home::Buf(src) => {
                if *src != dest && dest.size > 0 {
                    out.push(
                        CopyThunk {
                            src: *src,
                            dst: dest,
                        }
                        .into(),
                    );
                }
            }
            _ => out.extend(self.fused_kernel(s, v, dest)?),
        }
        Ok(())
    }

    /// `v` in a buffer of its own layout (a kernel into a temp when it is fused).
    fn buffer_of(
        &mut self,
        s: &Scope,
        v: Value,
        out: &mut Vec<Thunk>,
    ) -> Result<Slice, LowerError> {
        if let Home::Buf(b) = &s.homes[v.0 as usize] {
            return Ok(*b);
        }
        let dest = self.temp(s.graph.ty(v));
        self.write_into(s, v, dest, out)?;
        Ok(dest)
    }

    /// Lowers the graph `g` (the program, or a region) with its parameters in `params` and
    /// its results written into `dests` (`None`: not written).
    fn region(
        &mut self,
        g: &Graph,
        params: &[Slice],
        dests: &[Option<Slice>],
    ) -> Result<Vec<Thunk>, LowerError> {
        if params.len() != g.params().len() || dests.len() != g.results().len() {
            return Err(LowerError::Graph {
                graph: g.name().into(),
                message: format!(
                    "{} parameters and {} results given for {} and {}",
                    params.len(),
                    dests.len(),
                    g.params().len(),
                    g.results().len()
                ),
            });
        }
        let results: std::collections::HashSet<Value> = g
            .results()
            .iter()
            .zip(dests)
            .filter(|(_, d)| d.is_some())
            .map(|((_, v), _)| *v)
            .collect();
        let roots = fusion::roots(g, &results);
        let mut homes = vec![Home::Fused; g.values().len()];
        // A result value computed by a kernel is written straight into its first destination.
        let mut claims: HashMap<Value, Slice> = HashMap::new();
        for ((_, v), d) in g.results().iter().zip(dests) {
            if let Some(d) = d {
                claims.entry(*v).or_insert(*d);
            }
        }
        let mut out = vec![];
        let transposed = fusion::transposed_dots(g, &results);
        let skipped: std::collections::HashSet<usize> = transposed.values().copied().collect();
        for (ni, node) in g.nodes().iter().enumerate() {
            let v = node.results.first().copied();
            if skipped.contains(&ni) {
                // A transpose whose value its dot wrote (below).
                continue;
            }
            match &node.op {
                Op::Parameter { index, .. } => {
                    homes[node.results[0].0 as usize] = Home::Buf(params[*index]);
                }
                Op::DotGeneral(dims) if transposed.contains_key(&node.results[0]) => {
                    let tv = g.nodes()[transposed[&node.results[0]]].results[0];
                    let dest = self.dest(&claims, g, tv);
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    let swapped = crate::graph::Node {
                        op: node.op.clone(),
                        operands: node.operands.iter().rev().copied().collect(),
                        results: vec![tv],
                    };
                    self.dot(&s, &swapped, &fusion::swapped(dims), dest, &mut out)?;
                    homes[tv.0 as usize] = Home::Buf(dest);
                }
                Op::DotGeneral(dims) => {
                    let v = node.results[0];
                    let dest = self.dest(&claims, g, v);
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    self.dot(&s, node, dims, dest, &mut out)?;
                    homes[v.0 as usize] = Home::Buf(dest);
                }
                // Ops writing every result into a buffer of its own (claimed, or a temp).
                Op::Reduce { .. }
                | Op::Fft { .. }
                | Op::Scatter { .. }
                | Op::Sort { .. }
                | Op::Cholesky { .. }
                | Op::TriangularSolve { .. }
                | Op::RngBitGenerator { .. }
                | Op::Rng { .. }
                | Op::Collective(_)
                | Op::CustomCall(_) => {
                    let dests: Vec<Slice> = node
                        .results
                        .iter()
                        .map(|r| self.dest(&claims, g, *r))
                        .collect();
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    match &node.op {
                        Op::Reduce { dims, body } => {
                            out.extend(self.reduce(&s, node, dims, body, &dests)?);
                        }
                        Op::Scatter {
                            dims,
                            body,
                            unique_indices,
                        } => {
                            let u = *unique_indices;
                            self.scatter(&s, node, dims, body, u, &dests, &mut out)?;
                        }
                        Op::Sort {
                            dimension,
                            comparator,
                            ..
                        } => {
                            self.sort(&s, node, *dimension, comparator, &dests, &mut out)?;
                        }
                        Op::CustomCall(call) => {
                            self.custom_call(&s, node, call, &dests, &mut out)?;
                        }
                        Op::Collective(c) => {
                            self.collective(&s, node, c, dests[0], &mut out)?;
                        }
                        Op::RngBitGenerator { algorithm } => {
                            self.rng_bit_generator(&s, node, *algorithm, &dests, &mut out)?;
                        }
                        Op::Rng { distribution } => {
                            self.rng(&s, node, *distribution, dests[0], &mut out)?;
                        }
                        Op::Fft { kind, lengths } => {
                            self.fft(&s, node, *kind, lengths, dests[0], &mut out)?;
                        }
                        Op::Cholesky { lower, lapack } => {
                            self.cholesky(&s, node, *lower, *lapack, &dests, &mut out)?;
                        }
                        Op::TriangularSolve {
                            left_side,
                            lower,
                            unit_diagonal,
                            transpose_a,
                        } => {
                            let (l, lo) = (*left_side, *lower);
                            let (u, tr) = (*unit_diagonal, *transpose_a);
                            self.triangular_solve(&s, node, l, lo, u, tr, dests[0], &mut out)?;
                        }
                        _ => {}
                    }
                    for (r, d) in node.results.iter().zip(dests) {
                        homes[r.0 as usize] = Home::Buf(d);
                    }
                }
                Op::While { cond, body } => {
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    let carried = self.while_loop(&s, node, cond, body, &mut out)?;
                    for (r, c) in node.results.iter().zip(carried) {
                        homes[r.0 as usize] = Home::Buf(c);
                    }
                }
                Op::Case { branches } => {
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    let res = self.case(&s, node, branches, &mut out)?;
                    for (r, c) in node.results.iter().zip(res) {
                        homes[r.0 as usize] = Home::Buf(c);
                    }
                }
                Op::DynamicUpdateSlice
                    if self
                        .in_place
                        .contains(&(g as *const Graph as usize, node.results[0])) =>
                {
                    let s = Scope {
                        graph: g,
                        homes: &homes,
                    };
                    let buf = self.buffer_of(&s, node.operands[0], &mut out)?;
                    out.extend(self.update_in_place(&s, node, buf)?);
                    homes[node.results[0].0 as usize] = Home::Buf(buf);
                }
                _ => {
                    let Some(v) = v else { continue };
                    let home = {
                        let s = Scope {
                            graph: g,
                            homes: &homes,
                        };
                        self.place(
                            &s,
                            node,
                            roots[v.0 as usize],
                            claims.get(&v).copied(),
                            &mut out,
                        )?
                    };
                    homes[v.0 as usize] = home;
                }
            }
        }
        let s = Scope {
            graph: g,
            homes: &homes,
        };
        let mut written: Vec<Value> = vec![];
        for ((_, v), d) in g.results().iter().zip(dests) {
            let Some(d) = d else { continue };
            let done = homes[v.0 as usize] == Home::Buf(*d) && !written.contains(v);
            written.push(*v);
            if !done {
                self.write_into(&s, *v, *d, &mut out)?;
            }
        }
        Ok(out)
    }
}
