//! Hand-written declarations of the NCCL API, from `nccl.h` of NCCL 2.32.3 (the PyPI wheel
//! `nvidia-nccl-cu12`). RCCL's `rccl.h` declares the same functions, types and values (RCCL
//! is a port of NCCL and keeps its ABI), so one table serves both libraries.
//!
//! Only what xthunk calls is declared. Enumerations are plain `c_int`s (a C enum whose values
//! fit an `int` has the size of an `int` on every ABI NCCL supports), so a value a newer
//! library adds is carried as a number, never misread as a Rust enum.
//!
//! The layouts are checked against the header by `tests/layout.rs` (it compiles a small C
//! program with the wheel's `nccl.h`).

#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `ncclResult_t`.
pub type ncclResult_t = c_int;
pub const ncclSuccess: ncclResult_t = 0;
pub const ncclUnhandledCudaError: ncclResult_t = 1;
pub const ncclSystemError: ncclResult_t = 2;
pub const ncclInternalError: ncclResult_t = 3;
pub const ncclInvalidArgument: ncclResult_t = 4;
pub const ncclInvalidUsage: ncclResult_t = 5;
pub const ncclRemoteError: ncclResult_t = 6;
pub const ncclInProgress: ncclResult_t = 7;
pub const ncclTimeout: ncclResult_t = 8;

/// `ncclDataType_t`.
pub type ncclDataType_t = c_int;
pub const ncclInt8: ncclDataType_t = 0;
pub const ncclUint8: ncclDataType_t = 1;
pub const ncclInt32: ncclDataType_t = 2;
pub const ncclUint32: ncclDataType_t = 3;
pub const ncclInt64: ncclDataType_t = 4;
pub const ncclUint64: ncclDataType_t = 5;
pub const ncclFloat16: ncclDataType_t = 6;
pub const ncclFloat32: ncclDataType_t = 7;
pub const ncclFloat64: ncclDataType_t = 8;
/// Since NCCL 2.10.
pub const ncclBfloat16: ncclDataType_t = 9;

/// `ncclRedOp_t`.
pub type ncclRedOp_t = c_int;
pub const ncclSum: ncclRedOp_t = 0;
pub const ncclProd: ncclRedOp_t = 1;
pub const ncclMax: ncclRedOp_t = 2;
pub const ncclMin: ncclRedOp_t = 3;

/// The opaque communicator (`struct ncclComm`).
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}
/// `ncclComm_t`: a pointer to the opaque communicator.
pub type ncclComm_t = *mut ncclComm;

/// `cudaStream_t` / `hipStream_t`: an opaque pointer to the vendor's stream.
pub type cudaStream_t = *mut c_void;

/// `NCCL_UNIQUE_ID_BYTES`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: passed **by value** to `ncclCommInitRank[Config]`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `NCCL_API_MAGIC`: the `magic` of every versioned configuration struct.
pub const NCCL_API_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT` (`INT_MIN`): "let NCCL choose".
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_SPLIT_NOCOLOR`: the rank joins no communicator of the split.
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;

/// The smallest `ncclConfig_t`: the layout NCCL 2.14 introduced (`size`, `magic`, `version`,
/// `blocking`). Every later `ncclConfig_t` appends fields after these (2.17 added
/// `cgaClusterSize` and on; 2.32's is 120 bytes), and NCCL reads a caller's struct through its
/// `size` (copying at most that many bytes over its defaults) and `version` (fields newer than
/// the version keep their defaults). So this one struct, with `size = 24` and `version =
/// 21400`, is accepted by every NCCL and RCCL that has `ncclCommInitRankConfig`, and sets
/// only `blocking`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclConfig_v21400 {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
}

impl ncclConfig_v21400 {
    /// `NCCL_CONFIG_INITIALIZER` for this layout, with `blocking` set.
    pub const fn new(blocking: bool) -> Self {
        ncclConfig_v21400 {
            size: std::mem::size_of::<ncclConfig_v21400>(),
            magic: NCCL_API_MAGIC,
            version: 21400,
            blocking: if blocking { 1 } else { 0 },
        }
    }
}

pub type ncclGetVersion_t = unsafe extern "C" fn(version: *mut c_int) -> ncclResult_t;
pub type ncclGetUniqueId_t = unsafe extern "C" fn(unique_id: *mut ncclUniqueId) -> ncclResult_t;
pub type ncclCommInitRank_t = unsafe extern "C" fn(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t;
/// `config` is declared `ncclConfig_t*` in the header; xthunk passes its smallest layout.
pub type ncclCommInitRankConfig_t = unsafe extern "C" fn(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_v21400,
) -> ncclResult_t;
pub type ncclCommSplit_t = unsafe extern "C" fn(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_v21400,
) -> ncclResult_t;
pub type ncclCommFinalize_t = unsafe extern "C" fn(comm: ncclComm_t) -> ncclResult_t;
pub type ncclCommDestroy_t = unsafe extern "C" fn(comm: ncclComm_t) -> ncclResult_t;
pub type ncclCommAbort_t = unsafe extern "C" fn(comm: ncclComm_t) -> ncclResult_t;
pub type ncclGetErrorString_t = unsafe extern "C" fn(result: ncclResult_t) -> *const c_char;
/// Since NCCL 2.13; `comm` may be null.
pub type ncclGetLastError_t = unsafe extern "C" fn(comm: ncclComm_t) -> *const c_char;
pub type ncclCommGetAsyncError_t =
    unsafe extern "C" fn(comm: ncclComm_t, async_error: *mut ncclResult_t) -> ncclResult_t;
pub type ncclCommCount_t =
    unsafe extern "C" fn(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
pub type ncclCommUserRank_t =
    unsafe extern "C" fn(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;
pub type ncclAllReduce_t = unsafe extern "C" fn(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclAllGather_t = unsafe extern "C" fn(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclReduceScatter_t = unsafe extern "C" fn(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclBroadcast_t = unsafe extern "C" fn(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclSend_t = unsafe extern "C" fn(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclRecv_t = unsafe extern "C" fn(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t;
pub type ncclGroupStart_t = unsafe extern "C" fn() -> ncclResult_t;
pub type ncclGroupEnd_t = unsafe extern "C" fn() -> ncclResult_t;

// Collective memory (NCCL 2.19: `ncclMemAlloc`, `ncclCommRegister`; 2.27: windows).

/// `ncclWindow_t`: an opaque handle.
pub type ncclWindow_t = *mut c_void;
/// `NCCL_WIN_DEFAULT`.
pub const NCCL_WIN_DEFAULT: c_int = 0x00;
/// `NCCL_WIN_COLL_SYMMETRIC`: every rank uses the window at the same offset from its head.
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 0x01;
/// `NCCL_WIN_REQUIRED_ALIGNMENT`: a window's address and size are multiples of it.
pub const NCCL_WIN_REQUIRED_ALIGNMENT: u64 = 4096;
pub type ncclMemAlloc_t = unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize) -> ncclResult_t;
pub type ncclMemFree_t = unsafe extern "C" fn(ptr: *mut c_void) -> ncclResult_t;
pub type ncclCommRegister_t = unsafe extern "C" fn(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> ncclResult_t;
pub type ncclCommDeregister_t =
    unsafe extern "C" fn(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t;
pub type ncclCommWindowRegister_t = unsafe extern "C" fn(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    win_flags: c_int,
) -> ncclResult_t;
pub type ncclCommWindowDeregister_t =
    unsafe extern "C" fn(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t;

/// `ncclCommInitRankScalable` (NCCL 2.23): `n_id` unique ids (one per root, the same on every
/// rank); `config` is declared `ncclConfig_t*`, xthunk passes its smallest layout.
pub type ncclCommInitRankScalable_t = unsafe extern "C" fn(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut ncclUniqueId,
    config: *mut ncclConfig_v21400,
) -> ncclResult_t;
