//! Thunks: one home per kind, and the one dispatch table of the IR.
//!
//! Each kind of thunk is a type in its own module (`copy.rs`, `gemm.rs`, `while_loop.rs`, …)
//! holding its fields, its validation, its buffer uses, its one-line description (`inspect`)
//! and its trace description, through the [`ThunkKind`] trait. [`Thunk`] is the enum of
//! every kind; [`Thunk::as_kind`] below is the only place in the IR that names its variants.
//!
//! Adding a kind: a module here with its type and its `ThunkKind` impl, a variant and an arm
//! in [`Thunk::as_kind`]; its conversion in `xthunk-proto` (`convert/thunk/`); its planning
//! and issue in the executor's one table (`xthunk-executor`'s `executor/dispatch.rs`).
//! `docs/architecture.md` has the worked example.

mod async_scope;
mod collective;
mod command_buffer;
mod conditional;
mod copy;
pub(super) mod custom_call;
mod gemm;
mod kernel;
mod memset;
mod p2p;
mod permute;
mod rank_id;
mod sequence;
mod while_loop;

pub use async_scope::{AsyncDoneThunk, AsyncKind, AsyncStartThunk};
pub use collective::{
    COLLECTIVE_DTYPES, CollectiveOp, CollectiveThunk, ReduceOp, check_collective_sizes,
};
pub use command_buffer::CommandBufferThunk;
pub use conditional::{ConditionalThunk, select_branch};
pub use copy::CopyThunk;
pub use kernel::{KernelArg, KernelThunk};
pub use memset::{MemsetPattern, MemsetThunk};
pub use p2p::{RecvThunk, SendThunk};
pub use permute::CollectivePermuteThunk;
pub use rank_id::RankIdThunk;
pub use while_loop::WhileThunk;

use super::gemm::GemmThunk;
use super::path::ThunkPath;
use super::types::BufferUse;
use super::verify::{ThunkChecker, ValidationError};
use custom_call::CustomCallThunk;
use serde_json::{Map, Value};

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
}

/// How a thunk takes part in scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A schedulable step (every kind but the three below).
    Step,
    /// A sequence: its thunks are scheduled in its place, in the enclosing class.
    Sequence,
    /// An async scope's start: its body is scheduled in the given stream class.
    AsyncStart { id: u32, kind: AsyncKind },
    /// An async scope's end: no step of its own (ordering comes from the body's buffer uses).
    AsyncDone { id: u32 },
}

/// What a trace records of a thunk beyond its name: bytes moved, flops, and whether it
/// communicates with other ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCost {
    pub bytes: u64,
    pub flops: u64,
    pub communicates: bool,
}

/// What every kind of thunk says of itself. Implemented once per kind, in its module.
pub trait ThunkKind {
    /// Short kind name (`copy`, `gemm`, `all_reduce`, …), as in paths, errors and traces.
    fn name(&self) -> &'static str;

    /// Buffer uses of this thunk itself (not of nested thunks).
    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![]
    }

    /// Nested thunk lists, each with its name in paths.
    fn nested(&self) -> Vec<(ListName, &[Thunk])> {
        vec![]
    }

    /// How the thunk takes part in scheduling.
    fn scope(&self) -> Scope {
        Scope::Step
    }

    /// True for thunks that communicate with other ranks.
    fn communicates(&self) -> bool {
        false
    }

    /// True for a command buffer (what is nested in it is recorded).
    fn records(&self) -> bool {
        false
    }

    /// Validates the thunk's own fields at `path` (its nested lists are validated by the
    /// caller).
    fn validate(&self, cx: &mut ThunkChecker<'_>, path: &ThunkPath) -> Result<(), ValidationError>;

    /// What the progress record and the logs call it, e.g. `gemm f32 64x64x64`.
    fn label(&self) -> String {
        self.name().to_string()
    }

    /// One line describing the thunk without its nested thunks (`xthunk inspect`).
    fn describe(&self) -> String;

    /// Adds the thunk's trace arguments; returns its cost.
    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        let _ = args;
        TraceCost::default()
    }
}

/// The name of a nested thunk list in paths: `body`, `cond`, `thunks`, or `branches[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListName {
    pub field: &'static str,
    pub index: Option<usize>,
}

impl ListName {
    /// A list named by a field alone (`body`, `cond`, `thunks`).
    pub const fn field(field: &'static str) -> Self {
        ListName { field, index: None }
    }
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
);

/// A list of thunks is a sequence.
impl From<Vec<Thunk>> for Thunk {
    fn from(thunks: Vec<Thunk>) -> Thunk {
        Thunk::Sequence(thunks)
    }
}

impl Thunk {
    /// The thunk as its kind: **the IR's one dispatch table**.
    pub fn as_kind(&self) -> &dyn ThunkKind {
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

/// A read use of `slice`.
pub(crate) fn read(slice: super::Slice) -> BufferUse {
    BufferUse {
        slice,
        access: super::Access::Read,
    }
}

/// A write use of `slice`.
pub(crate) fn write(slice: super::Slice) -> BufferUse {
    BufferUse {
        slice,
        access: super::Access::Write,
    }
}

/// The line of a kind without a description of its own: its name and buffer uses, e.g.
/// `all_reduce uses=[%0[0..+16] r, %1[0..+16] w]`.
pub(crate) fn uses_line(t: &dyn ThunkKind) -> String {
    let uses: Vec<String> = t
        .buffer_uses()
        .iter()
        .map(|u| format!("{} {}", u.slice, u.access.short()))
        .collect();
    format!("{} uses=[{}]", t.name(), uses.join(", "))
}
