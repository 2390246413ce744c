//! [`Program`]: an executable that passed verification ([`crate::verify`]), shared: what the
//! executor loads, so that a program is verified once however many devices (ranks) it is
//! loaded on. Beside `verify` (IR + kernel catalog), below the executor: the proto crate
//! makes them without depending on the executor.

use crate::ir::{Executable, ValidationError};
use std::sync::Arc;

/// An executable that passed [`crate::verify`] (cheap to clone: the executable is shared).
/// Only [`Program::new`] makes one, so holding one means the program was verified.
#[derive(Clone, Debug)]
pub struct Program(Arc<Executable>);

impl Program {
    /// Verifies `exe` ([`crate::verify`]: the standard kernel library's catalog).
    pub fn new(exe: Executable) -> Result<Program, ValidationError> {
        crate::verify(&exe)?;
        Ok(Program(Arc::new(exe)))
    }

    /// The executable.
    pub fn executable(&self) -> &Executable {
        &self.0
    }
}

impl std::ops::Deref for Program {
    type Target = Executable;

    fn deref(&self) -> &Executable {
        &self.0
    }
}
