//! Conditional graph nodes (CUDA 12.4+): condition handles, IF / WHILE / SWITCH nodes with
//! their body graphs, and what they do when an executable graph runs. EMULATED: the emulator
//! keeps a condition's value per graph launch on the worker running the launch.
//!
//! - A **condition** (`cuGraphConditionalHandleCreate`) belongs to the graph it was created
//!   for, in that graph's context; with `CU_GRAPH_COND_ASSIGN_DEFAULT` it takes its default
//!   value at the start of every launch, otherwise it is *unset* until a kernel sets it, and
//!   a node reading an unset condition fails the launch. It may be used by one conditional
//!   node only, in its graph or a graph nested in it; a condition no node uses makes
//!   instantiation fail.
//! - A **node** (`cuGraphAddNode` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`) owns its body graphs
//!   (`phGraph_out`): they cannot be destroyed on their own and go with the graph holding the
//!   node. IF runs body 0 when the condition is nonzero (body 1, if there is one, when it is
//!   zero); WHILE runs body 0 while it is nonzero, tested before every trip; SWITCH runs body
//!   `value` when `value` < the body count. Bodies nest.
//! - **Setting** a condition (`cudaGraphSetConditional` in a kernel, see
//!   `crate::cuda::set_condition`) is only possible from a kernel of the graph launch the
//!   condition's node runs in; anywhere else it fails the kernel.
//! - Instantiation freezes the bodies as they are (later changes to a body graph do not reach
//!   an executable graph, as with CUDA's instantiation copy); an exec update accepts a graph
//!   whose conditional nodes have the same kinds and body shapes.
//!
//! A WHILE loop stops the launch with an error after [`MAX_TRIPS`] trips (a hang in CI is
//! worse than a diagnosed runaway loop).

use super::{GRAPHS, GraphCore, Op, Work, capture_into, node_handle};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid, unsupported};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `CU_GRAPH_NODE_TYPE_CONDITIONAL`.
pub const NODE_TYPE: u32 = 13;
/// `CU_GRAPH_COND_TYPE_IF`, `…_WHILE`, `…_SWITCH`.
pub const COND_IF: u32 = 0;
pub const COND_WHILE: u32 = 1;
pub const COND_SWITCH: u32 = 2;
/// `CU_GRAPH_COND_ASSIGN_DEFAULT`.
pub const ASSIGN_DEFAULT: u32 = 1;
/// The most bodies of one SWITCH node.
pub const MAX_BODIES: u32 = 1024;
/// The most trips of one WHILE node in one launch.
pub const MAX_TRIPS: u64 = 1 << 26;

/// A condition handle's state.
pub struct Condition {
    pub ctx_id: u64,
    /// The graph it was created for.
    pub graph: usize,
    pub default: u32,
    pub assign_default: bool,
    /// The node using it (one at most).
    used_by: Mutex<Option<usize>>,
}

static CONDITIONS: Mutex<Option<HashMap<u64, Arc<Condition>>>> = Mutex::new(None);
static NEXT_CONDITION: AtomicU64 = AtomicU64::new(1);

/// A body graph: live while the graph holding the node is being built, frozen in an
/// executable graph.
pub enum Body {
    Live(Arc<GraphCore>),
    Frozen(Arc<Vec<Op>>),
}

/// A conditional node.
pub struct Node {
    pub handle: u64,
    /// `COND_IF`, `COND_WHILE` or `COND_SWITCH`.
    pub kind: u32,
    pub bodies: Vec<Body>,
    /// The body graphs' handles: the CUDA-owned array `phGraph_out` points to (empty once
    /// frozen).
    body_handles: Box<[usize]>,
}

fn condition(handle: u64, call: &str) -> EmuResult<Arc<Condition>> {
    CONDITIONS
        .lock()
        .as_ref()
        .and_then(|m| m.get(&handle).cloned())
        .ok_or_else(|| {
            EmuError::new(
                Code::InvalidValue,
                Kind::InvalidHandle,
                call,
                format!("{handle:#x} is not a live conditional handle"),
            )
        })
}

/// Checks that the context handle `ctx` (a `CUcontext`, not null) is the graph's.
fn check_ctx(ctx: usize, g: &GraphCore, call: &str) -> EmuResult<()> {
    if ctx == 0 {
        return Err(invalid(call, "`ctx` is a null context"));
    }
    let c = crate::context::CONTEXTS.get(ctx, call)?;
    if c.id != g.ctx_id {
        return Err(invalid(
            call,
            "`ctx` is not the context the graph belongs to",
        ));
    }
    Ok(())
}

/// `cuGraphConditionalHandleCreate`.
pub fn create_condition(
    graph: usize,
    ctx: usize,
    default: u32,
    flags: u32,
    call: &str,
) -> EmuResult<u64> {
    let g = GRAPHS.get(graph, call)?;
    check_ctx(ctx, &g, call)?;
    if flags & !ASSIGN_DEFAULT != 0 {
        return Err(invalid(
            call,
            format!("flags {flags:#x} (only CU_GRAPH_COND_ASSIGN_DEFAULT is defined)"),
        ));
    }
    let h = 0xc0d0_0000_0000_0000 | NEXT_CONDITION.fetch_add(1, Ordering::SeqCst);
    CONDITIONS.lock().get_or_insert_with(HashMap::new).insert(
        h,
        Arc::new(Condition {
            ctx_id: g.ctx_id,
            graph,
            default,
            assign_default: flags & ASSIGN_DEFAULT != 0,
            used_by: Mutex::new(None),
        }),
    );
    Ok(h)
}

/// Whether `graph` is `ancestor` or nested in it (through conditional bodies).
fn within(mut graph: usize, ancestor: usize) -> bool {
    for _ in 0..4096 {
        if graph == ancestor {
            return true;
        }
        match GRAPHS.try_get(graph).and_then(|g| g.parent) {
            Some(p) => graph = p,
            None => return false,
        }
    }
    false
}

/// `cuGraphAddNode` of a conditional node into `graph` after `deps`: creates the body
/// graphs, writes their array's address to `*ph_graph_out`, returns the node handle. (The
/// arguments are the C call's.)
#[allow(clippy::too_many_arguments)]
pub fn add_node(
    graph: usize,
    deps: &[usize],
    handle: u64,
    kind: u32,
    size: u32,
    ctx: usize,
    ph_graph_out: &mut *mut usize,
    call: &str,
) -> EmuResult<usize> {
    let g = GRAPHS.get(graph, call)?;
    check_ctx(ctx, &g, call)?;
    let cond = condition(handle, call)?;
    if !within(graph, cond.graph) {
        return Err(invalid(
            call,
            format!(
                "conditional handle {handle:#x} belongs to graph {:#x}: a node using it must be \
                 in that graph or a graph nested in it, not in {graph:#x}",
                cond.graph
            ),
        ));
    }
    if let Some(n) = *cond.used_by.lock() {
        return Err(invalid(
            call,
            format!("conditional handle {handle:#x} is already used by node {n:#x}"),
        ));
    }
    let ok = match kind {
        COND_IF => size == 1 || size == 2,
        COND_WHILE => size == 1,
        COND_SWITCH => (1..=MAX_BODIES).contains(&size),
        _ => {
            return Err(invalid(call, format!("conditional node type {kind}")));
        }
    };
    if !ok {
        return Err(invalid(
            call,
            format!("{size} body graphs for a conditional node of type {kind}"),
        ));
    }
    let mut bodies = vec![];
    let mut handles = vec![];
    for _ in 0..size {
        let b = Arc::new(GraphCore::new(g.ctx_id, Some(graph)));
        handles.push(GRAPHS.insert(b.clone()));
        bodies.push(Body::Live(b));
    }
    let made = handles.clone();
    let mut body_handles = handles.into_boxed_slice();
    let array = body_handles.as_mut_ptr();
    let op = Op::new(
        Work::Conditional(Arc::new(Node {
            handle,
            kind,
            bodies,
            body_handles,
        })),
        call,
    );
    let added = match capture_into(graph) {
        Some(c) => c.add_node(op, deps, call),
        None => {
            let mut nodes = g.nodes.lock();
            let last = nodes.len().checked_sub(1).map(|i| node_handle(graph, i));
            if deps != last.as_slice() {
                Err(unsupported(
                    call,
                    format!(
                        "the emulator's graphs are linear: a node must depend on exactly the \
                         graph's last node ({last:x?}), not {deps:x?}"
                    ),
                ))
            } else {
                nodes.push(op);
                Ok(node_handle(graph, nodes.len() - 1))
            }
        }
    };
    let node = match added {
        Ok(n) => n,
        Err(e) => {
            // The body graphs just made go again (nothing refers to them).
            for h in made {
                let _ = GRAPHS.remove(h, call);
            }
            return Err(e);
        }
    };
    *cond.used_by.lock() = Some(node);
    *ph_graph_out = array;
    Ok(node)
}

/// A copy of `nodes` with every conditional node's bodies frozen as they are now.
pub fn freeze(nodes: &[Op]) -> Vec<Op> {
    nodes
        .iter()
        .map(|op| match &op.work {
            Work::Conditional(n) => Op {
                work: Work::Conditional(Arc::new(Node {
                    handle: n.handle,
                    kind: n.kind,
                    bodies: n
                        .bodies
                        .iter()
                        .map(|b| match b {
                            Body::Live(g) => Body::Frozen(Arc::new(freeze(&g.nodes.lock()))),
                            Body::Frozen(f) => Body::Frozen(f.clone()),
                        })
                        .collect(),
                    body_handles: Box::new([]),
                })),
                call: op.call.clone(),
            },
            _ => op.clone(),
        })
        .collect()
}

fn frozen(b: &Body) -> &[Op] {
    match b {
        Body::Frozen(f) => f,
        // Executable graphs hold frozen bodies only.
        Body::Live(_) => &[],
    }
}

/// Whether two frozen conditional nodes have the same kind and body shapes (node counts,
/// node types, kernels), for an exec update.
pub fn same_shape(a: &Node, b: &Node) -> Result<(), String> {
    if a.kind != b.kind || a.bodies.len() != b.bodies.len() {
        return Err("the conditional node changed type or body count".into());
    }
    for (i, (x, y)) in a.bodies.iter().zip(&b.bodies).enumerate() {
        let (x, y) = (frozen(x), frozen(y));
        if x.len() != y.len() {
            return Err(format!(
                "body {i} has {} nodes instead of {}",
                y.len(),
                x.len()
            ));
        }
        for (j, (p, q)) in x.iter().zip(y).enumerate() {
            if p.work.node_type() != q.work.node_type() {
                return Err(format!("node {j} of body {i} changed type"));
            }
            match (&p.work, &q.work) {
                (Work::Kernel(k), Work::Kernel(l)) if k.name() != l.name() => {
                    return Err(format!("node {j} of body {i} runs another kernel"));
                }
                (Work::Conditional(m), Work::Conditional(n)) => same_shape(m, n)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// Every graph of the tree rooted at `graph` (it and the bodies nested in it).
fn tree(graph: usize) -> Vec<usize> {
    let mut out = vec![graph];
    let mut i = 0;
    while i < out.len() {
        if let Some(g) = GRAPHS.try_get(out[i]) {
            for op in g.nodes.lock().iter() {
                if let Work::Conditional(n) = &op.work {
                    out.extend(n.body_handles.iter().copied());
                }
            }
        }
        i += 1;
    }
    out
}

/// Checks before instantiating `graph`: every condition created for a graph of its tree is
/// used by a node.
pub fn check_instantiable(graph: usize, call: &str) -> EmuResult<()> {
    let graphs = tree(graph);
    let unused: Vec<u64> = CONDITIONS
        .lock()
        .as_ref()
        .map(|m| {
            m.iter()
                .filter(|(_, c)| graphs.contains(&c.graph) && c.used_by.lock().is_none())
                .map(|(h, _)| *h)
                .collect()
        })
        .unwrap_or_default();
    if let Some(h) = unused.first() {
        return Err(invalid(
            call,
            format!("conditional handle {h:#x} of the graph is used by no conditional node"),
        ));
    }
    Ok(())
}

/// Destroys `graph`, the bodies nested in it and the conditions created for them.
pub fn destroy_graph_tree(graph: usize, call: &str) {
    let graphs = tree(graph);
    for h in &graphs {
        let _ = GRAPHS.remove(*h, call);
    }
    if let Some(m) = CONDITIONS.lock().as_mut() {
        m.retain(|_, c| !graphs.contains(&c.graph));
    }
}

/// Destroys what the nodes of an abandoned capture hold (their body graphs), and the
/// capture's own graph unless it recorded into an existing one (`own_graph`).
pub fn discard_capture(graph: usize, own_graph: bool, nodes: &[Op], call: &str) {
    for op in nodes {
        if let Work::Conditional(n) = &op.work {
            for b in n.body_handles.iter() {
                destroy_graph_tree(*b, call);
            }
        }
    }
    if own_graph {
        destroy_graph_tree(graph, call);
    }
}

/// `cuGraphDestroy`: a body graph cannot be destroyed on its own.
pub fn destroy_graph(graph: usize, call: &str) -> EmuResult<()> {
    let g = GRAPHS.get(graph, call)?;
    if let Some(p) = g.parent {
        return Err(invalid(
            call,
            format!(
                "graph {graph:#x} is a body of a conditional node of graph {p:#x}: it goes with \
                 that graph"
            ),
        ));
    }
    destroy_graph_tree(graph, call);
    Ok(())
}

thread_local! {
    /// The conditions of the graph launches running on this thread (innermost last): value
    /// by handle, `None` while unset.
    static LAUNCHES: RefCell<Vec<HashMap<u64, Option<u32>>>> = const { RefCell::new(Vec::new()) };
}

fn collect(nodes: &[Op], out: &mut HashMap<u64, Option<u32>>) {
    for op in nodes {
        if let Work::Conditional(n) = &op.work {
            let value = CONDITIONS
                .lock()
                .as_ref()
                .and_then(|m| m.get(&n.handle).cloned())
                .and_then(|c| c.assign_default.then_some(c.default));
            out.insert(n.handle, value);
            for b in &n.bodies {
                collect(frozen(b), out);
            }
        }
    }
}

/// Runs an executable graph's nodes: a launch with its own condition values.
pub fn run_graph(nodes: &[Op], _call: &str) -> EmuResult<()> {
    let mut conds = HashMap::new();
    collect(nodes, &mut conds);
    if conds.is_empty() {
        return run_all(nodes);
    }
    LAUNCHES.with(|l| l.borrow_mut().push(conds));
    let r = run_all(nodes);
    LAUNCHES.with(|l| l.borrow_mut().pop());
    r
}

fn run_all(nodes: &[Op]) -> EmuResult<()> {
    for n in nodes {
        n.run()?;
    }
    Ok(())
}

fn value(handle: u64, call: &str) -> EmuResult<u32> {
    let v = LAUNCHES.with(|l| l.borrow().last().and_then(|m| m.get(&handle).copied()));
    match v {
        Some(Some(v)) => Ok(v),
        _ => Err(EmuError::new(
            Code::LaunchFailed,
            Kind::InvalidState,
            call,
            format!(
                "a conditional node read condition {handle:#x}, which has no default value \
                 and was not set in this launch"
            ),
        )),
    }
}

/// `cudaGraphSetConditional(handle, value)` from a kernel running on this thread: the
/// condition must be one of the graph launch that runs the kernel.
pub fn set(handle: u64, v: u32) -> Result<(), String> {
    LAUNCHES.with(|l| {
        let mut l = l.borrow_mut();
        let Some(top) = l.last_mut() else {
            return Err(format!(
                "cudaGraphSetConditional({handle:#x}) from a kernel that is not part of a graph \
                 launch with conditional nodes"
            ));
        };
        match top.get_mut(&handle) {
            Some(slot) => {
                *slot = Some(v);
                Ok(())
            }
            None => Err(format!(
                "cudaGraphSetConditional({handle:#x}): not a condition of a conditional node of \
                 the graph launch running the kernel"
            )),
        }
    })
}

impl Node {
    /// Runs the node in the current launch.
    pub fn run(&self, call: &str) -> EmuResult<()> {
        match self.kind {
            COND_IF => {
                let v = value(self.handle, call)?;
                if v != 0 {
                    run_all(frozen(&self.bodies[0]))
                } else if let Some(b) = self.bodies.get(1) {
                    run_all(frozen(b))
                } else {
                    Ok(())
                }
            }
            COND_WHILE => {
                let mut trips = 0u64;
                while value(self.handle, call)? != 0 {
                    trips += 1;
                    if trips > MAX_TRIPS {
                        return Err(EmuError::new(
                            Code::LaunchFailed,
                            Kind::InvalidState,
                            call,
                            format!(
                                "a WHILE node ran {MAX_TRIPS} trips without its condition \
                                 becoming 0 (a runaway loop; the emulator stops it)"
                            ),
                        ));
                    }
                    run_all(frozen(&self.bodies[0]))?;
                }
                Ok(())
            }
            _ => {
                let v = value(self.handle, call)? as usize;
                match self.bodies.get(v) {
                    Some(b) => run_all(frozen(b)),
                    None => Ok(()),
                }
            }
        }
    }
}
