//! `xthunk-stablehlo`: reads StableHLO — MLIR text as JAX prints it
//! (`jax.jit(f).lower(...).as_text()`) — into a typed syntax tree whose every operation
//! carries its position, and imports it ([`import`]) into an `xthunk-tensor` graph, which
//! that crate lowers to xthunk's IR (the reader itself uses no xthunk crate).
//!
//! Why a small hand-written reader: MLIR's own parser is C++ inside LLVM, and no Rust crate
//! binds it without building LLVM and MLIR (the `melior`/`mlir-sys` bindings need an LLVM
//! install of a matching version at build time), which xthunk's one-binary build cannot
//! require; nor do those bindings know the StableHLO dialect's pretty forms without linking
//! StableHLO's C++ too. The subset JAX prints is small and stable: the generic op form, the
//! `func`/`builtin` forms, StableHLO's and CHLO's custom assembly forms, types, attributes,
//! `dense` literals and locations, which this crate reads in a few thousand lines.
//!
//! - [`parse`] reads a file into a [`Module`]: both op forms give the same tree (one
//!   generic shape: name, operands, sorted attributes, regions, types, location, position);
//!   every value use is checked against the definitions it can see (not types or symbols:
//!   that is the lowering's to refuse).
//! - [`dense::decode`] turns a `dense<...>` or `dense_resource<...>` value into
//!   little-endian element bytes for its type, checked.
//! - [`import::import`] turns a parsed module into an `xthunk_tensor::graph::Graph` (`main`
//!   the entry, calls inlined, regions as graphs), refusing what xthunk does not support
//!   with its position ([`import::ImportError`]).
//! - [`canon::canonical`] renames SSA values by definition order, so two texts of one program
//!   compare equal.
//!
//! Any malformed input gives one [`ParseError`] with its line:column and the operation being
//! read, never a panic; nesting is limited ([`MAX_DEPTH`] levels, an operation counting
//! two and its region one: the deepest input needs under 1 MiB of stack in a debug build)
//! and sizes are capped ([`MAX_INPUT`], [`dense::MAX_BYTES`] by default, tensor rank).

pub mod ast;
mod attrs;
pub mod bytecode;
pub mod canon;
mod cursor;
pub mod dense;
mod display;
pub mod error;
mod func;
pub mod import;
pub mod jax_export;
mod ops;
mod pretty;
mod pretty_regions;
mod stack;
pub mod types;
mod values;
pub mod vhlo;
mod vhlo_ops;

pub use ast::{
    Attr, Block, BlockArg, Dim, ElementType, Location, Module, Op, Pos, Region, Type, ValueRef,
};
pub use cursor::{MAX_DEPTH, MAX_INPUT};
pub use error::ParseError;
pub use ops::parse;
pub use stack::STACK;
