//! xthunk collectives over NCCL (NVIDIA) and RCCL (AMD), through one ABI table.
//!
//! RCCL is a port of NCCL that keeps its C API and ABI, so both libraries are bound through
//! the same hand-written declarations ([`sys`], from NCCL 2.32.3's `nccl.h`) and the same
//! IREE-style symbol table, opened at run time from two names: `libnccl.so.2` (also in pip's
//! `nvidia/nccl/lib`) and `librccl.so.1` (beside HIP). Nothing is linked at build time.
//!
//! - [`Nccl::load`] finds and opens the library once per process ([`loader`] has the search
//!   order), checks its version ([`NcclVersion`], at least [`MIN_VERSION`]) and gates optional
//!   features on it (`ncclCommInitRankConfig`, `ncclCommSplit`, `ncclCommFinalize`, bf16). A
//!   missing library is `Unavailable { backend: "nccl" | "rccl", reason }` with every path
//!   tried: it turns collectives off on that backend, not the backend.
//! - [`Nccl::unique_id`] and [`Nccl::init_rank`] bootstrap a clique; the result is an
//!   [`NcclCommunicator`], an `xthunk_core::collectives::Communicator` that owns its
//!   `ncclComm_t` (destroyed, or aborted after a failure, when dropped) and issues every
//!   operation on the stream's native handle ([`comm`] documents threads, aborts and devices:
//!   **the backend must make its device current on the thread that creates a communicator**).
//! - [`NcclCliqueProvider`] ([`provider`]) hands out those communicators as an xthunk
//!   `CliqueProvider` for the devices of one process (one thread per rank): the ranks of a
//!   clique share rank 0's unique id through an in-process rendezvous with timeouts, then each
//!   inits on its own thread with its device current; cached per clique and rank, split with
//!   `ncclCommSplit` where the library has it.
//!   Cliques of more than `ranks_per_root` ranks (default 128, `XTHUNK_NCCL_RANKS_PER_ROOT`)
//!   initialize through `ceil(size / ranks_per_root)` roots with `ncclCommInitRankScalable`
//!   where the library has it (2.23), each root making one unique id.
//! - [`NcclJobCliqueProvider`] ([`job`]) does the same across the processes of a job: rank
//!   0's unique id goes through the job's coordinator, communicators are non-blocking and
//!   bounded by the terminate timeout.
//! - [`memory`]: collective memory — `ncclMemAlloc` as the backends' outside allocator,
//!   windows (2.27) or user-buffer registration (2.19) per communicator, each gated on the
//!   version and the symbols found, what is not used logged once per library.
//! - [`result`] maps `ncclResult_t` to names, messages and xthunk errors in one place;
//!   [`nccl_dtype`] and [`nccl_op`] map element types and reduction operators.
//!
//! Tests against the real library (`tests/real_nccl.rs`, `tests/layout.rs`) need the PyPI
//! wheel, installed with NVRTC's (both live under `nvidia/`, and `pip install --target` skips
//! an existing top-level folder unless `--upgrade` replaces it):
//! `python3 -m pip install --upgrade --target "$HOME/.cache/xthunk/pip" nvidia-cuda-nvrtc-cu12
//! nvidia-nccl-cu12`. Without it they print `SKIPPED` and why; `XTHUNK_REQUIRE_NCCL=1` makes
//! that a failure. `tests/stub.rs` runs the communicator against a stand-in library built
//! with the C compiler.

pub mod comm;
pub mod job;
pub mod loader;
pub mod memory;
pub mod provider;
pub mod result;
pub mod sys;
mod types;
mod version;

pub use comm::{BindDevice, CommOptions, NcclCommunicator};
pub use job::NcclJobCliqueProvider;
pub use loader::{Flavor, Nccl, SearchConfig};
pub use provider::{
    BindRank, DEFAULT_RANKS_PER_ROOT, NcclCliqueCommunicator, NcclCliqueProvider, is_root,
    ranks_per_root_from_env, roots_for,
};
pub use result::{describe_result, result_info};
pub use types::{nccl_dtype, nccl_op};
pub use version::{
    BF16_SINCE, CONFIG_SINCE, LAST_ERROR_SINCE, MEM_ALLOC_SINCE, MIN_VERSION, NcclVersion,
    SCALABLE_SINCE, SPLIT_SINCE, WINDOW_SINCE,
};

/// Bytes of an `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES;
