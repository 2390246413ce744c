//! Thunks: one home per kind, and the one dispatch table of the IR.
//!
//! Each kind of thunk is a type in its own module (`copy.rs`, `gemm.rs`, `while_loop.rs`, …)
//! holding its fields, its validation, its buffer uses, its one-line description (`inspect`)
//! and its trace description, through the [`ThunkKind`] trait. [`Thunk`] is the enum of
//! every kind; [`Thunk::as_kind`] below is the only place in the IR that names its variants.
//!
//! The trait, the [`Checker`] a kind validates its fields with, and the small types every
//! kind names are in `kind.rs`, a leaf below the kinds. A thunk holds thunks (a while's body,
//! a conditional's branches, …): the four composite kinds are generic over the element of their
//! lists (`While<T>`, …) and the aliases here tie the knot (`WhileThunk = While<Thunk>`), so
//! no kind's module names this enum.
//!
//! Adding a kind: a module here with its type and its `ThunkKind` and `Nested` impls, a
//! variant and an arm in [`Thunk::as_kind`]; its conversion in `xthunk-proto`
//! (`convert/thunk/`); its planning and issue in the executor's one table
//! (`xthunk-executor`'s `executor/dispatch.rs`).
//! `docs/architecture.md` has the worked example.

mod async_scope;
mod collective;
mod command_buffer;
mod conditional;
mod copy;
pub(super) mod custom_call;
mod execution_seed;
mod gemm;
mod kernel;
mod kind;
mod memset;
mod p2p;
mod permute;
mod ragged;
mod rank_id;
mod sequence;
mod while_loop;

pub use async_scope::{AsyncDoneThunk, AsyncStart};
pub use collective::{
    COLLECTIVE_DTYPES, CollectiveOp, CollectiveThunk, ReduceOp, check_collective_sizes,
};
pub use command_buffer::CommandBuffer;
pub use conditional::{Conditional, select_branch};
pub use copy::CopyThunk;
pub use execution_seed::{ExecutionSeedThunk, execution_seed};
pub use kernel::KernelThunk;
pub use kind::{AsyncKind, Checker, Nested, Scope, ThunkKind, TraceCost};
pub use memset::{MemsetPattern, MemsetThunk};
pub use p2p::{RecvThunk, SendThunk};
pub use permute::CollectivePermuteThunk;
pub use ragged::{RaggedAllToAllThunk, RaggedIndices, RaggedPart, RaggedParts};
pub use rank_id::RankIdThunk;
pub use while_loop::While;

use super::gemm::GemmThunk;
use super::path::ListName;
use super::types::BufferUse;
use custom_call::CustomCallThunk;

/// `while` in a program: its condition and body are lists of [`Thunk`]s.
pub type WhileThunk = While<Thunk>;
/// `conditional` in a program: its branches are lists of [`Thunk`]s.
pub type ConditionalThunk = Conditional<Thunk>;
/// `async_start` in a program: its body is a list of [`Thunk`]s.
pub type AsyncStartThunk = AsyncStart<Thunk>;
/// `command_buffer` in a program: its body is a list of [`Thunk`]s.
pub type CommandBufferThunk = CommandBuffer<Thunk>;

/// One operation of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Thunk {
    Copy(CopyThunk),
    Memset(MemsetThunk),
    Kernel(KernelThunk),
    Gemm(GemmThunk),
    /// A nested list of thunks, run in order.
    Sequence(Vec<Thunk>),
    While(WhileThunk),
    Conditional(ConditionalThunk),
    AsyncStart(AsyncStartThunk),
    AsyncDone(AsyncDoneThunk),
    CommandBuffer(CommandBufferThunk),
    /// A collective among replica groups of the SPMD ranks.
    Collective(CollectiveThunk),
    CollectivePermute(CollectivePermuteThunk),
    Send(SendThunk),
    Recv(RecvThunk),
    RankId(RankIdThunk),
    /// Calls the handler registered for a target (a framework's own library call).
    CustomCall(CustomCallThunk),
    /// An all-to-all with per-peer offsets and sizes in device buffers.
    RaggedAllToAll(RaggedAllToAllThunk),
    /// Writes a u64 that differs between executions (the seed of `rng`).
    ExecutionSeed(ExecutionSeedThunk),
}

/// `From` for every kind held in a variant of its own type.
macro_rules! thunk_from {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        $(impl From<$ty> for Thunk {
            fn from(t: $ty) -> Thunk {
                Thunk::$variant(t)
            }
        })*
    };
}

thunk_from!(
    Copy(CopyThunk),
    Memset(MemsetThunk),
    Kernel(KernelThunk),
    Gemm(GemmThunk),
    While(WhileThunk),
    Conditional(ConditionalThunk),
    AsyncStart(AsyncStartThunk),
    AsyncDone(AsyncDoneThunk),
    CommandBuffer(CommandBufferThunk),
    Collective(CollectiveThunk),
    CollectivePermute(CollectivePermuteThunk),
    Send(SendThunk),
    Recv(RecvThunk),
    RankId(RankIdThunk),
    CustomCall(CustomCallThunk),
    RaggedAllToAll(RaggedAllToAllThunk),
    ExecutionSeed(ExecutionSeedThunk),
);

/// A list of thunks is a sequence.
impl From<Vec<Thunk>> for Thunk {
    fn from(thunks: Vec<Thunk>) -> Thunk {
        Thunk::Sequence(thunks)
    }
}

impl Thunk {
    /// The thunk as its kind: **the IR's one dispatch table**.
    pub fn as_kind(&self) -> &dyn Nested<Thunk> {
        match self {
            Thunk::Copy(t) => t,
            Thunk::Memset(t) => t,
            Thunk::Kernel(t) => t,
            Thunk::Gemm(t) => t,
            Thunk::Sequence(t) => t,
            Thunk::While(t) => t,
            Thunk::Conditional(t) => t,
            Thunk::AsyncStart(t) => t,
            Thunk::AsyncDone(t) => t,
            Thunk::CommandBuffer(t) => t,
            Thunk::Collective(t) => t,
            Thunk::CollectivePermute(t) => t,
            Thunk::Send(t) => t,
            Thunk::Recv(t) => t,
            Thunk::RankId(t) => t,
            Thunk::CustomCall(t) => t,
            Thunk::RaggedAllToAll(t) => t,
            Thunk::ExecutionSeed(t) => t,
        }
    }

    /// The kernel launch, for a kernel thunk.
    pub fn as_kernel(&self) -> Option<&KernelThunk> {
        match self {
            Thunk::Kernel(k) => Some(k),
            _ => None,
        }
    }

    /// The custom call, for a custom-call thunk.
    pub fn as_custom_call(&self) -> Option<&CustomCallThunk> {
        match self {
            Thunk::CustomCall(c) => Some(c),
            _ => None,
        }
    }

    /// Short kind name (`copy`, `memset`, `kernel`, `gemm`, `sequence`, …).
    pub fn kind(&self) -> &'static str {
        self.as_kind().name()
    }

    /// True for thunks that communicate with other ranks.
    pub fn is_collective(&self) -> bool {
        self.as_kind().communicates()
    }

    /// Buffer uses of this thunk itself (not of nested thunks).
    pub fn buffer_uses(&self) -> Vec<BufferUse> {
        self.as_kind().buffer_uses()
    }

    /// Buffer uses of this thunk and everything nested in it.
    pub fn all_buffer_uses(&self) -> Vec<BufferUse> {
        let mut out = Vec::new();
        self.collect_uses(&mut out);
        out
    }

    fn collect_uses(&self, out: &mut Vec<BufferUse>) {
        out.extend(self.buffer_uses());
        for c in self.children() {
            c.collect_uses(out);
        }
    }

    /// Nested thunk lists, each with its name in paths.
    pub fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        self.as_kind().nested()
    }

    /// How the thunk takes part in scheduling.
    pub fn scope(&self) -> Scope {
        self.as_kind().scope()
    }

    fn children(&self) -> impl Iterator<Item = &Thunk> {
        let lists = self.nested();
        lists.into_iter().flat_map(|(_, l)| l.iter())
    }

    /// Number of thunks in this subtree, this one included.
    pub fn count(&self) -> usize {
        1 + self.children().map(Thunk::count).sum::<usize>()
    }
}
