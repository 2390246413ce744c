//! The executable: a complete program, its allocations, modules, signature and entry thunks.

use super::thunk::Thunk;
use super::types::{BufferAllocation, IoAlias, Module, Signature};

/// A complete program.
#[derive(Clone, Debug, PartialEq)]
pub struct Executable {
    pub abi_version: u32,
    pub name: String,
    pub allocations: Vec<BufferAllocation>,
    pub modules: Vec<Module>,
    pub entry: Vec<Thunk>,
    pub signature: Signature,
    /// Outputs that may reuse a parameter's buffer (none: every output has its own).
    pub aliases: Vec<IoAlias>,
}

impl Executable {
    /// Total number of thunks, nested ones included.
    pub fn thunk_count(&self) -> usize {
        self.entry.iter().map(Thunk::count).sum()
    }

    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.iter().find(|m| m.name == name)
    }
}
