//! xthunk's driver emulator: the subset of the CUDA driver, cuBLAS, NCCL, HIP, rocBLAS and
//! RCCL C APIs that the xthunk backends call, implemented on host memory with strict checks.
//! It is a test instrument (CI's stand-in GPU), never a backend a user picks: its devices
//! name themselves "xthunk emulated NVIDIA device" / "xthunk emulated AMD device".
//!
//! Built as a `cdylib`, it is loaded by the backends under the vendor libraries' names
//! (`libcuda.so.1`, `libcublas.so.12`, `libamdhip64.so`, `librocblas.so.4`, …; see
//! `ci/with-emulator.sh`). One library exports every API; it exports nothing named `nvrtc*`
//! or `hiprtc*` (compilers are the real ones).
//!
//! - Memory ([`memory`]): device pointers are host addresses; every access the emulator makes
//!   (copies, memsets, kernel buffers, BLAS operands) is checked against the live
//!   allocations: out-of-bounds, use after free, double free, misaligned kernel buffers,
//!   kernel buffers in another context's device memory, leaks at context destruction and
//!   process exit are reported ([`diag`]) with the call that did it, and the call fails.
//!   Fresh memory is poisoned (`0xCD`).
//! - Streams ([`stream`]): real asynchronous queues on worker threads; in strict mode (the
//!   default) queued work runs only when something waits for it, so a missing
//!   synchronization reads poison every time. Capture records graphs; graphs replay.
//! - Kernels ([`launch`]): real images (cubins and PTX from NVRTC, code objects from hipRTC)
//!   are read for their kernel names and what they say about each kernel ([`kernel_info`]:
//!   parameter sizes, launch bounds, static shared memory; AMD's metadata through
//!   [`msgpack`]). A launch is checked as a GPU would fault on it: its shape against the
//!   device's and the function's limits ([`limits`]), its parameter sizes, and every buffer
//!   inside a live allocation of the launch's own context, aligned to its element type. It
//!   runs the portable source the image carries (`xt_portable_source`), compiled for the CPU
//!   by core's CPU execution (`xthunk_core::host::cpu`); the standard library's kernels decode
//!   and check their raw parameters by their signatures. An image without carried source runs
//!   nothing.
//! - Stream-ordered pools ([`pool`]): `cuMemAllocAsync` / `hipMallocAsync` from pools with a
//!   release threshold, frees in stream order; [`memory::allocator_calls`] counts what really
//!   took memory from the host allocator.
//! - Gemm ([`gemm`]) and collectives ([`nccl`]) run on the host.
//! - Settings and error injection: [`config`].
//! - The C APIs ([`cuda`], [`hip`], [`cublas`], [`rocblas`], [`nccl`]) are thin shims; what the
//!   CUDA driver and the HIP runtime do alike is one body in [`driver`].
//!
//! The C ABI shims are `unsafe extern "C"` functions whose safety contract is the vendor
//! API's documentation (valid out-pointers, complete images, …): documenting it again on
//! each of them would only repeat the vendor manuals, hence `missing_safety_doc` is allowed.

#![allow(clippy::missing_safety_doc)]

pub mod api;
pub mod blas;
pub mod config;
pub mod context;
pub mod control;
pub mod copy;
pub mod cublas;
pub mod cuda;
pub mod diag;
pub mod driver;
pub mod error;
pub mod ffi;
pub mod gemm;
pub mod handles;
pub mod hip;
pub mod image;
pub mod kernel_info;
pub mod launch;
pub mod limits;
pub mod memory;
pub mod msgpack;
pub mod nccl;
pub mod pool;
pub mod rocblas;
pub mod section;
pub mod stream;
