//! The HIP runtime API (`libamdhip64.so`), from `hip_runtime_api.h` (ROCm 5.2, Debian's
//! `libamdhip64-dev`) and ROCm 6's `hipDeviceProp_tR0600` layout. No `hiprtc*` symbol is
//! exported: compilation stays with the real hipRTC.
//!
//! Devices report `XTHUNK_EMU_GFX` (gfx90a by default), warp size 64, runtime version
//! 6.3.42134, and the name "xthunk emulated AMD device".
//!
//! Files, one per part of the API, named as in [`crate::cuda`]: `device` (initialization,
//! devices, attributes, property structs), `memory` (allocation, copies, memsets), `stream`
//! (streams, events, capture), `module` (modules, functions, launches), `graph` (graphs and
//! executable graphs), `pool` (stream-ordered allocation and memory pools), `error` (error
//! names, the last error).

#![allow(non_snake_case, clippy::too_many_arguments)]

mod device;
mod error;
mod graph;
mod memory;
mod module;
mod pool;
mod stream;

pub use device::*;
pub use error::*;
pub use graph::*;
pub use memory::*;
pub use module::*;
pub use pool::*;
pub use stream::*;

use crate::context::{Api, Ctx};
use crate::driver::Driver;
use crate::error::{EmuResult, guard, hip};
use crate::launch::ExtraTags;
use crate::stream::{STREAMS, StreamCore};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::Arc;

pub type HipError = c_int;
pub type Handle = usize;

/// `HIP_VERSION` reported by `hipRuntimeGetVersion` / `hipDriverGetVersion` (6.3.42134).
pub const RUNTIME_VERSION: c_int = 60_342_134;
/// Compute units reported.
pub const CU_COUNT: c_int = 16;

thread_local! {
    static LAST_ERROR: Cell<HipError> = const { Cell::new(0) };
}

fn api(call: &str, f: impl FnOnce() -> EmuResult<()>) -> HipError {
    let r = match guard(call, f) {
        Ok(()) => hip::SUCCESS,
        Err(e) => e.code.hip(),
    };
    if r != hip::SUCCESS && r != hip::NOT_READY {
        LAST_ERROR.with(|l| l.set(r));
    }
    r
}

fn ctx(call: &str) -> EmuResult<Arc<Ctx>> {
    crate::context::hip_ctx(call)
}

/// The HIP runtime's side of the shared entry-point bodies ([`crate::driver`]).
pub struct Hip;

impl Driver for Hip {
    const API: Api = Api::Hip;
    const EXTRA: ExtraTags = crate::launch::HIP_EXTRA;

    fn ctx(call: &str) -> EmuResult<Arc<Ctx>> {
        ctx(call)
    }

    fn stream(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
        stream_of(h, call)
    }

    fn empty_allocation(_call: &str) -> EmuResult<usize> {
        Ok(0)
    }

    fn sync_memset_completes(_dst: usize) -> bool {
        true
    }
}

/// The stream a handle names (NULL / `hipStreamPerThread`: the current device's null stream).
fn stream_of(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
    if h == 0 || h == crate::stream::STREAM_PER_THREAD {
        return Ok(ctx(call)?.legacy.clone());
    }
    STREAMS.get(h, call)
}
