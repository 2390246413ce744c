//! The CUDA driver API (`libcuda.so.1`), as declared by cudarc's generated bindings for CUDA
//! 12.0 (`cudarc/src/driver/sys/mod.rs`): handles are pointers, `CUdeviceptr` is a 64-bit
//! address, `CUresult` an unsigned enum.
//!
//! Devices report compute capability `XTHUNK_EMU_SM` (9.0 by default), driver version 12.9,
//! and the name "xthunk emulated NVIDIA device".
//!
//! Files, one per part of the API: `device` (initialization, devices and their attributes),
//! `context` (primary and created contexts), `memory` (allocation, copies, memsets, pointer
//! attributes), `stream` (streams and events), `module` (modules, functions, launches),
//! `graph` (graphs and executable graphs), `conditional` (conditional graph nodes),
//! `set_condition` (the set-condition kernels), `pool` (stream-ordered allocation and memory pools), `error` (error names and the export table).

#![allow(non_snake_case, clippy::too_many_arguments)]

pub mod conditional;
mod context;
mod device;
mod error;
mod graph;
mod memory;
mod module;
mod pool;
pub mod set_condition;
mod stream;

pub use conditional::{
    cuGraphAddNode, cuGraphConditionalHandleCreate, cuStreamBeginCaptureToGraph,
    cuStreamGetCaptureInfo_v2, cuStreamUpdateCaptureDependencies,
};
pub use context::*;
pub use device::*;
pub use error::*;
pub use graph::*;
pub use memory::*;
pub use module::*;
pub use pool::*;
pub use stream::*;

use crate::context::{Api, Ctx};
use crate::diag::Kind;
use crate::driver::Driver;
use crate::error::{Code, EmuError, EmuResult, cu, guard};
use crate::launch::ExtraTags;
use crate::stream::{STREAMS, StreamCore};
use std::ffi::{c_int, c_ulonglong};
use std::sync::Arc;

pub type CUresult = u32;
/// `CUdeviceptr`.
pub type DevPtr = c_ulonglong;
/// Opaque handles (`CUcontext`, `CUstream`, …).
pub type Handle = usize;

/// The driver version reported (CUDA 12.9).
pub const DRIVER_VERSION: c_int = 12090;

fn api(call: &str, f: impl FnOnce() -> EmuResult<()>) -> CUresult {
    match guard(call, f) {
        Ok(()) => cu::SUCCESS,
        Err(e) => e.code.cu(),
    }
}

/// The stream a handle names (NULL and the special handles: the current context's legacy
/// stream).
fn stream_of(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
    if h == 0 || h == crate::stream::STREAM_LEGACY || h == crate::stream::STREAM_PER_THREAD {
        return Ok(crate::context::current(call)?.legacy.clone());
    }
    crate::context::cuda_initialized(call)?;
    STREAMS.get(h, call)
}

/// The CUDA driver's side of the shared entry-point bodies ([`crate::driver`]).
pub struct Cuda;

impl Driver for Cuda {
    const API: Api = Api::Cuda;
    const EXTRA: ExtraTags = crate::launch::CUDA_EXTRA;

    fn ctx(call: &str) -> EmuResult<Arc<Ctx>> {
        crate::context::current(call)
    }

    fn stream(h: Handle, call: &str) -> EmuResult<Arc<StreamCore>> {
        stream_of(h, call)
    }

    fn empty_allocation(call: &str) -> EmuResult<usize> {
        Err(crate::error::invalid(call, "0 bytes requested"))
    }

    fn sync_memset_completes(dst: usize) -> bool {
        crate::memory::allocation_containing(dst)
            .is_some_and(|a| a.kind == crate::memory::MemKind::Pinned)
    }
}

fn ctx_of_stream(s: &StreamCore, call: &str) -> EmuResult<Arc<Ctx>> {
    crate::context::of_stream(s).ok_or_else(|| {
        EmuError::new(
            Code::InvalidContext,
            Kind::InvalidState,
            call,
            "the stream's context was destroyed",
        )
    })
}
