//! The importer: a parsed StableHLO [`Module`] → an xthunk tensor [`Graph`] (crate
//! `xthunk-tensor`), which `xthunk_tensor::lower` turns into a thunk program.
//!
//! `main` is the entry: its parameters become the graph's `arg0`, `arg1`, … and its results
//! `out0`, `out1`, … in order (JAX's own names, `jax.result_info` and the arguments'
//! `jax.*`/`mhlo.*` attributes, are kept in [`Imported`] for `inspect`). `func.call` is
//! inlined (multi-result calls too; recursion refused); `tuple`, `get_tuple_element` and
//! `optimization_barrier` are resolved here, leaving no node. Regions become graphs of their
//! own (`regions.rs`): what a `while`, `case` or `if` region reads from outside comes in as
//! a parameter, a constant is made again inside. Every op xthunk-tensor supports is mapped
//! with its attributes (`ops.rs`); attributes under `mhlo.`, `jax.` and `sdy.` are ignored,
//! anything else (an op, an attribute, a type: `types.rs`) is refused with its position.

mod alias;
mod batch_norm;
mod call;
mod collective;
mod error;
mod gspmd;
mod linalg;
mod ops;
mod ranks;
mod regions;
mod shard;
mod sort;
mod types;
mod window;

use crate::ast::{Attr, Block, Module, Op, Type, ValueRef};
use crate::error::ParseError;
use std::collections::HashMap;
use xthunk_tensor::graph::{Graph, Value};

pub use error::ImportError;
pub use types::{dtype, tensor_type};

/// An imported program: the graph and JAX's names of its parameters and results.
#[derive(Clone, Debug)]
pub struct Imported {
    /// Parameters `arg0…`, results `out0…`, in `main`'s order.
    pub graph: Graph,
    /// Per parameter, its attributes as written (`jax.arg_info = "x"`, …), empty if none.
    pub arg_info: Vec<Vec<(String, String)>>,
    /// Per result, JAX's name (`jax.result_info`, e.g. `result['b1']`) if given.
    pub result_info: Vec<Option<String>>,
    /// Input–output aliases as `(output, parameter)`, from `tf.aliasing_output` and
    /// `jax.buffer_donor` (JAX's `donate_argnums`).
    pub aliases: Vec<(u32, u32)>,
    /// For an SPMD program (`mhlo.num_replicas × mhlo.num_partitions` > 1): how many ranks
    /// it runs on. With `global`, every rank takes the same GLOBAL inputs and gives the same
    /// GLOBAL outputs (a manual computation splits and gathers inside the program).
    pub spmd: Option<SpmdInfo>,
}

/// The ranks an SPMD program runs on, and whether its inputs and outputs are global values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpmdInfo {
    pub ranks: u64,
    pub global: bool,
}

/// Reads MLIR text and imports it.
pub fn import_text(text: &str) -> Result<Imported, ImportError> {
    import(&crate::parse(text)?)
}

/// Reads and imports a StableHLO portable artifact: MLIR bytecode of the VHLO dialect, or a
/// whole `jax.export` serialization holding one ([`crate::jax_export`]).
pub fn import_portable(bytes: &[u8]) -> Result<Imported, ImportError> {
    let read = || {
        if crate::bytecode::is_bytecode(bytes) {
            crate::vhlo::read(bytes)
        } else {
            crate::vhlo::read(crate::jax_export::read(bytes)?.module)
        }
    };
    // The reader recurses once per nesting level: on a thread with the importer's stack.
    let module = crate::stack::on_big_stack("bytecode", read).unwrap_or_else(|message| {
        Err(crate::bytecode::BytecodeError::Unsupported { what: message })
    })?;
    import(&module)
}

/// A value of the program being imported: a tensor, or a tuple resolved at import.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    Tensor(Value),
    Tuple(Vec<Item>),
}

/// The SSA values visible while importing one function body or region.
pub(crate) type Env = HashMap<ValueRef, Item>;

/// How deep function bodies and regions may nest, calls included (recursion is refused; this
/// bounds long call chains of deeply nested regions, and so the importer's stack, its own:
/// `stack::STACK`).
pub const MAX_NESTING: usize = 256;

/// Imports `m`: its `main` as the graph. On a thread with a stack of its own
/// ([`crate::stack::STACK`]), whatever the caller's.
pub fn import(m: &Module) -> Result<Imported, ImportError> {
    crate::stack::on_big_stack("importer", || import_here(m))
        .unwrap_or_else(|message| Err(ImportError::Parse(ParseError::Thread { message })))
}

fn import_here(m: &Module) -> Result<Imported, ImportError> {
    let Some(main) = m.function("main") else {
        return Err(ImportError::invalid(&m.op, "no function `main`"));
    };
    let Some(block) = main.block(0) else {
        return Err(ImportError::invalid(main, "`main` has no body"));
    };
    let name = m.op.symbol().unwrap_or("main").to_string();
    let mut g = Graph::new(name);
    let mut env = Env::new();
    let spmd = ranks::Spmd::of(&m.op)?;
    let mut imp = Importer {
        module: m,
        calls: vec!["main".into()],
        nesting: 0,
        free: FreeValues::new(),
        spmd,
        in_manual: false,
        manual_seen: false,
        gspmd_pending: vec![],
    };
    let mut arg_info = vec![];
    for (i, arg) in block.args.iter().enumerate() {
        let t = tensor_type(&arg.ty, main, &format!("parameter {i}"))?;
        let v = g
            .parameter(&format!("arg{i}"), t.dtype, &t.dims)
            .map_err(|e| ImportError::graph(main, e))?;
        env.insert(ref0(&arg.name), Item::Tensor(v));
        arg_info.push(dict_entries(main, "arg_attrs", i));
    }
    let outs = imp.block(&mut g, block, &mut env)?;
    let mut result_info = vec![];
    for (i, item) in outs.iter().enumerate() {
        let Item::Tensor(v) = item else {
            return Err(ImportError::unsupported(
                main,
                format!("result {i}: a tuple"),
            ));
        };
        g.result(&format!("out{i}"), *v)
            .map_err(|e| ImportError::graph(main, e))?;
        let info = dict_entries(main, "res_attrs", i)
            .into_iter()
            .find(|(k, _)| k == "jax.result_info")
            .map(|(_, v)| v);
        result_info.push(info);
    }
    imp.gspmd_leftover()?;
    if spmd.ranks() > 1 && !imp.manual_seen {
        automatic_partitioning(m, main)?;
    }
    let aliases = alias::aliases(main, &g)?;
    let spmd = (spmd.ranks() > 1).then_some(SpmdInfo {
        ranks: spmd.ranks(),
        global: imp.manual_seen,
    });
    Ok(Imported {
        graph: g,
        arg_info,
        result_info,
        aliases,
        spmd,
    })
}

/// A program of several partitions or replicas without a manual computation: refused
/// where a sharding splits a value (`sdy.sharding` or `mhlo.sharding` on `main`'s
/// parameters or results), since only an automatic partitioner could run it; otherwise
/// every rank runs it whole.
fn automatic_partitioning(m: &Module, main: &Op) -> Result<(), ImportError> {
    let split = ["arg_attrs", "res_attrs"].iter().any(|key| {
        let Some(Attr::Array(dicts)) = main.attr(key) else {
            return false;
        };
        dicts.iter().any(|d| {
            d.field("sdy.sharding").is_some_and(ranks::splits)
                || d.field("mhlo.sharding")
                    .and_then(Attr::as_str)
                    .is_some_and(|t| t.contains("devices="))
        })
    });
    if split {
        return Err(ImportError::unsupported(
            &m.op,
            "sharded parameters or results outside a manual computation: this program needs an automatic partitioner (GSPMD/Shardy), which xthunk does not have; write it with shard_map or pmap",
        ));
    }
    Ok(())
}

/// The entries of a function's `arg_attrs`/`res_attrs` dictionary `i`, values as text.
fn dict_entries(f: &Op, key: &str, i: usize) -> Vec<(String, String)> {
    let Some(Attr::Array(dicts)) = f.attr(key) else {
        return vec![];
    };
    let Some(Attr::Dict(entries)) = dicts.get(i) else {
        return vec![];
    };
    entries
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Attr::Str(s) => s.clone(),
                other => format!("{other:?}"),
            };
            (k.clone(), text)
        })
        .collect()
}

pub(crate) fn ref0(name: &str) -> ValueRef {
    ValueRef {
        name: name.into(),
        index: 0,
    }
}

/// The free values of blocks already walked, by block (a block's are a property of its text,
/// so a function body inlined again, or a region inside a region, is walked once).
pub(crate) type FreeValues =
    std::collections::HashMap<*const crate::ast::Block, std::rc::Rc<Vec<crate::ast::ValueRef>>>;

pub(crate) struct Importer<'m> {
    pub(crate) module: &'m Module,
    /// The functions being inlined, outermost first.
    calls: Vec<String>,
    /// Blocks being imported (function bodies and regions), one inside the other.
    nesting: usize,
    /// The free values of the blocks walked so far (`regions::captures`).
    free: FreeValues,
    /// The ranks the program runs on (`collective.rs`).
    spmd: ranks::Spmd,
    /// Inside a manual computation's body (`shard.rs`).
    in_manual: bool,
    /// A manual computation was imported.
    manual_seen: bool,
    /// GSPMD's tiled `@Sharding` values not yet consumed by a full-to-shard (`gspmd.rs`):
    /// the value, its sharding, and the op's position and name.
    gspmd_pending: Vec<(Value, ranks::HloSharding, crate::ast::Pos, String)>,
}

impl Importer<'_> {
    /// Imports the ops of `block` into `g`; returns the items its terminator
    /// (`func.return` or `stablehlo.return`) gives.
    pub(crate) fn block(
        &mut self,
        g: &mut Graph,
        block: &Block,
        env: &mut Env,
    ) -> Result<Vec<Item>, ImportError> {
        if self.nesting >= MAX_NESTING {
            return Err(ImportError::Unsupported {
                what: format!("regions and calls nested deeper than {MAX_NESTING}"),
                pos: block.ops.first().map(|o| o.pos).unwrap_or_default(),
                op: "block".into(),
            });
        }
        self.nesting += 1;
        let out = self.block_ops(g, block, env);
        self.nesting -= 1;
        out
    }

    fn block_ops(
        &mut self,
        g: &mut Graph,
        block: &Block,
        env: &mut Env,
    ) -> Result<Vec<Item>, ImportError> {
        for op in &block.ops {
            if matches!(
                op.name.as_str(),
                "func.return" | "stablehlo.return" | "sdy.return"
            ) {
                check_attrs(op, &[])?;
                return op.operands.iter().map(|r| lookup(env, r, op)).collect();
            }
            if self.spmd.ranks() > 1
                && !self.in_manual
                && op.attr("sdy.sharding").is_some_and(ranks::splits)
            {
                return Err(ImportError::unsupported(
                    op,
                    "a sharding on a value outside a manual computation: this needs an automatic partitioner, which xthunk does not have",
                ));
            }
            let items = self.op(g, op, env)?;
            if items.len() != op.result_count() {
                return Err(ImportError::invalid(
                    op,
                    format!(
                        "{} results written, the op gives {}",
                        op.result_count(),
                        items.len()
                    ),
                ));
            }
            self.check_results(g, op, &items)?;
            let mut it = items.into_iter();
            for group in &op.results {
                for index in 0..group.count {
                    if let Some(item) = it.next() {
                        let r = ValueRef {
                            name: group.name.clone(),
                            index,
                        };
                        env.insert(r, item);
                    }
                }
            }
        }
        Err(ImportError::Invalid {
            message: "a block without a terminator (`return`)".into(),
            pos: block.ops.last().map(|o| o.pos).unwrap_or_default(),
            op: "block".into(),
        })
    }

    /// Each tensor result's type against the type the op writes.
    fn check_results(&self, g: &Graph, op: &Op, items: &[Item]) -> Result<(), ImportError> {
        for (i, (item, ty)) in items.iter().zip(&op.result_types).enumerate() {
            if let (Item::Tensor(v), Type::Tensor { .. }) = (item, ty) {
                let want = tensor_type(ty, op, &format!("result {i}"))?;
                if *g.ty(*v) != want {
                    return Err(ImportError::invalid(
                        op,
                        format!("result {i} is {}, the op writes {ty}", g.ty(*v)),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `func.call @f(args)`: `f`'s body imported with its arguments bound.
    pub(crate) fn call(
        &mut self,
        g: &mut Graph,
        op: &Op,
        callee: &str,
        args: Vec<Item>,
    ) -> Result<Vec<Item>, ImportError> {
        if self.calls.iter().any(|c| c == callee) {
            return Err(ImportError::unsupported(
                op,
                format!(
                    "recursion: @{callee} calls itself (through {})",
                    self.calls.join(" → ")
                ),
            ));
        }
        let module = self.module;
        let Some(f) = module.function(callee) else {
            return Err(ImportError::invalid(op, format!("no function @{callee}")));
        };
        let Some(block) = f.block(0) else {
            return Err(ImportError::unsupported(
                op,
                format!("@{callee} has no body"),
            ));
        };
        if block.args.len() != args.len() {
            return Err(ImportError::invalid(
                op,
                format!(
                    "@{callee} takes {} arguments, {} given",
                    block.args.len(),
                    args.len()
                ),
            ));
        }
        let mut env = Env::new();
        for (a, item) in block.args.iter().zip(args) {
            env.insert(ref0(&a.name), item);
        }
        self.calls.push(callee.into());
        let out = self.block(g, block, &mut env);
        self.calls.pop();
        out
    }
}

/// The item `r` names.
pub(crate) fn lookup(env: &Env, r: &ValueRef, op: &Op) -> Result<Item, ImportError> {
    env.get(r).cloned().ok_or_else(|| {
        ImportError::invalid(op, format!("%{}#{} is not defined here", r.name, r.index))
    })
}

/// Refuses an attribute of `op` outside `known` (those under `mhlo.`, `jax.`, `sdy.` are
/// ignored).
pub(crate) fn check_attrs(op: &Op, known: &[&str]) -> Result<(), ImportError> {
    for (name, _) in &op.attrs {
        let ignored = ["mhlo.", "jax.", "sdy."]
            .iter()
            .any(|p| name.starts_with(p));
        if !ignored && !known.contains(&name.as_str()) {
            return Err(ImportError::unsupported(op, format!("attribute `{name}`")));
        }
    }
    Ok(())
}
