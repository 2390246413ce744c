//! What every thunk kind says of itself ([`ThunkKind`], and its nested lists, [`Nested`]),
//! what its validation checks its fields with ([`Checker`]), and the small types they name:
//! [`Scope`], [`AsyncKind`], [`TraceCost`]. A leaf below every kind's module and the
//! [`super::Thunk`] enum.
//!
//! [`Nested<T>`] is generic over `T`, the element of the kind's nested thunk lists: the
//! composite kinds (`While<T>`, `Conditional<T>`, `AsyncStart<T>`, `CommandBuffer<T>`) hold
//! `Vec<T>` bodies, and `thunk/mod.rs` ties the knot (`WhileThunk = While<Thunk>`, …), so no
//! kind's module names the enum that holds it. [`ThunkKind`] itself is not generic, so a
//! kind's methods are called on it directly (`kernel.trace(args)`) without naming `T`.

use crate::ir::dtype::DType;
use crate::ir::error::ValidationError;
use crate::ir::path::{ListName, ThunkPath};
use crate::ir::signature::KernelCatalog;
use crate::ir::types::{Access, BufferAllocation, BufferUse, Module, Slice};
use serde_json::{Map, Value};

/// Which stream class an async scope runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncKind {
    /// Another compute stream.
    Compute,
    /// The communication stream (collectives).
    Communication,
}

impl AsyncKind {
    pub const fn name(self) -> &'static str {
        match self {
            AsyncKind::Compute => "compute",
            AsyncKind::Communication => "communication",
        }
    }
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

/// What a kind's validation ([`ThunkKind::validate`]) checks its fields with: the program's
/// allocations and modules, the kernel catalog, and the state of the walk (async ids seen,
/// whether it is inside a command buffer). Implemented by the IR's validator
/// ([`crate::ir::ThunkChecker`]).
pub trait Checker {
    /// The program's allocations.
    fn allocations(&self) -> &[BufferAllocation];

    /// The program's modules.
    fn modules(&self) -> &[Module];

    /// The kernel catalog standard-library launches are checked against.
    fn catalog(&self) -> &dyn KernelCatalog;

    /// Records an async id; false when it was seen before.
    fn new_async_id(&mut self, id: u32) -> bool;

    /// A slice inside its allocation (and not a constant's, when written).
    fn slice(
        &self,
        s: &Slice,
        path: &ThunkPath,
        field: &str,
        write: bool,
    ) -> Result<(), ValidationError>;

    /// A slice holding whole elements of a collective dtype.
    fn typed_slice(
        &self,
        s: &Slice,
        dtype: DType,
        path: &ThunkPath,
        field: &str,
        write: bool,
    ) -> Result<(), ValidationError>;

    /// Refuses `kind` inside a command buffer.
    fn no_control_flow(&self, path: &ThunkPath, kind: &str) -> Result<(), ValidationError>;
}

/// What every kind of thunk says of itself. Implemented once per kind, in its module (its
/// nested lists, if it has any, are [`Nested`](crate::ir::Nested)).
pub trait ThunkKind {
    /// Short kind name (`copy`, `gemm`, `all_reduce`, …), as in paths, errors and traces.
    fn name(&self) -> &'static str;

    /// Buffer uses of this thunk itself (not of nested thunks).
    fn buffer_uses(&self) -> Vec<BufferUse> {
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
    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError>;

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

/// A kind's nested thunk lists, generic over their element `T` ([`super::Thunk`] in a program:
/// [`super::Thunk::as_kind`] gives `&dyn Nested<Thunk>`). Kinds without nested lists implement
/// it for every `T` with the default, in one line.
pub trait Nested<T>: ThunkKind {
    /// Nested thunk lists, each with its name in paths.
    fn nested(&self) -> Vec<(ListName, &[T])> {
        vec![]
    }
}

/// A read use of `slice`.
pub(crate) fn read(slice: Slice) -> BufferUse {
    BufferUse {
        slice,
        access: Access::Read,
    }
}

/// A write use of `slice`.
pub(crate) fn write(slice: Slice) -> BufferUse {
    BufferUse {
        slice,
        access: Access::Write,
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
