//! `executor/`: a multi-thunk program (copy → kernel → gemm → kernel → memset, with a nested
//! sequence, temporaries, a constant and an independent branch) against the reference, under
//! the default, in-order and 4-stream schedules; memory: per-execution state (temporaries) is
//! pooled, so repeated executions do not grow the live bytes, and releasing the pool (and
//! dropping the executable) returns them to their value before; one loaded executable run from
//! four threads at once; a failing thunk reported with its path (and its state freed); argument
//! errors; control flow (`While` with and without trip count, `Conditional` on i32 and pred),
//! async scopes and command buffers, and control flow inside command buffers.
//!
//! The program's tolerance per element: `1e-5 · (Σ|gelu(x)||w| + |bias|) + 1e-6` (f32: the
//! gemm's `2(k+2)ε` bound plus the gelu's error, with room).
//!
//! By concern: [`program`] (the multi-thunk program and its reference), [`state`] (pooling and
//! concurrent executions), [`errors`] (failing thunks, bad arguments), [`control`] (control
//! flow, async scopes, command buffers), [`device_control`] (while and conditional inside
//! command buffers), [`common`] (the schedules they run under, loading, shared helpers); here
//! the list of checks.

mod common;
mod control;
mod device_control;
mod errors;
mod program;
mod state;

use super::seed::{seeded, seeded_exclusive};
use crate::check::Check;
use control::{async_scope, command_buffer, conditional, while_loop};
use device_control::control_in_command_buffer;
use errors::{argument_errors, error_names_thunk};
use program::multi_thunk;
use state::{concurrent, temps_freed};

pub fn checks() -> Vec<Check> {
    vec![
        seeded("executor/multi_thunk_program", multi_thunk),
        seeded_exclusive("executor/temps_freed", temps_freed),
        seeded("executor/concurrent_executions", concurrent),
        seeded_exclusive("executor/error_names_thunk", error_names_thunk),
        seeded("executor/argument_errors", argument_errors),
        seeded("executor/while_loop", while_loop),
        seeded("executor/conditional", conditional),
        seeded("executor/async_scope", async_scope),
        seeded("executor/command_buffer", command_buffer),
        seeded_exclusive(
            "executor/control_in_command_buffer",
            control_in_command_buffer,
        ),
    ]
}
