//! xthunk's vendor-neutral GPU layer: what the CUDA backend (`xthunk-cuda`) and the ROCm
//! backend (`xthunk-rocm`) share, written once and generic over the vendor's raw calls, so
//! that each vendor crate keeps only what differs (its symbol tables and declarations, result
//! codes, runtime compiler, BLAS tables, conditional nodes, HSACO bundles).
//!
//! # Modules
//!
//! - [`elf`]: the one ELF reader (cubins, AMD code objects): header, symbols, notes;
//! - [`msgpack`]: the one MessagePack reader (AMD code-object metadata);
//! - [`bench`](mod@bench): the raw vendor baselines' loops for `xthunk bench`, over
//!   [`bench::BaselineVendor`];
//! - [`vendor`]: the [`Vendor`] trait, a vendor's raw calls and handle types;
//! - [`memory`]: allocations, the registry every pointer range is checked against, checked
//!   regions and the owner's buffer;
//! - [`pool`]: the device's memory pool for stream-ordered allocation, over
//!   [`pool::PoolVendor`];
//! - [`stream`]: the raw stream handle that streams and stream-ordered allocations share;
//! - [`stream_base`]: what every vendor's stream holds (context, raw stream, memory registry,
//!   pool) and the copies, memsets, launches, event waits and stream-ordered allocation
//!   written once over [`stream_base::StreamVendor`];
//! - [`gpu_stream`]: the one `Stream` implementation, [`gpu_stream::GpuStream`]: the base and a
//!   vendor's own parts ([`gpu_stream::StreamParts`]: BLAS, capture, conditional nodes);
//! - [`event`]: events (timing, waits, queries);
//! - [`image`]: the source-stamp check of device-code images;
//! - [`args`]: kernel-argument marshalling (8-byte slots, checked buffer regions);
//! - [`errors`]: the `Unavailable` / `Unsupported` errors of a backend.
//!
//! Each vendor trait is small: associated types for the vendor's raw handles and one
//! function per raw call. The vendor crates implement [`Vendor`] and [`pool::PoolVendor`] on
//! a marker type (`xthunk_cuda::Cuda`, `xthunk_rocm::Rocm`, in their `vendor.rs` and
//! `pool.rs`) and [`bench::BaselineVendor`] on a device's baseline state.

pub mod args;
pub mod bench;
pub mod elf;
pub mod errors;
pub mod event;
pub mod gpu_stream;
pub mod image;
pub mod memory;
pub mod msgpack;
pub mod pool;
pub mod stream;
pub mod stream_base;
pub mod vendor;

pub use vendor::Vendor;
