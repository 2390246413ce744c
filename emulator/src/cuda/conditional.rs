//! Conditional graph nodes through the CUDA driver API (CUDA 12.4+), EMULATED: the calls the
//! CUDA backend makes to record `while` and `conditional` as graph nodes, and the kernels of
//! xthunk's set-condition module.
//!
//! Calls: `cuStreamGetCaptureInfo_v2` (the capture's graph and dependencies),
//! `cuStreamUpdateCaptureDependencies`, `cuStreamBeginCaptureToGraph` (into an empty graph,
//! no dependencies: a node's body), `cuGraphConditionalHandleCreate`, and `cuGraphAddNode`
//! for `CU_GRAPH_NODE_TYPE_CONDITIONAL` only (any other node type is refused as
//! unsupported). Semantics and strictness: [`crate::stream::conditional`].
//!
//! **The set-condition kernels.** A kernel calling the device runtime's
//! `cudaGraphSetConditional` cannot run through the standard kernel library. The emulator runs
//! exactly these four kernels of the CUDA backend's set-condition module
//! (`backend-cuda/src/conditional.rs`, where their CUDA C is), with the semantics written
//! there, and recognizes them by the module they are loaded from: a CUDA module whose
//! functions are exactly these four and the undefined `cudaGraphSetConditional` the driver
//! resolves (NVRTC leaves it to the loader), with the parameter sizes the image declares
//! equal to theirs. A same-named kernel in any other module is not run as one of them.
//!
//! | kernel | parameters | sets the condition to |
//! |---|---|---|
//! | `xthunk_set_condition_pred` | `handle: u64, pred: const u8*` | `*pred != 0` |
//! | `xthunk_set_condition_branch` | `handle: u64, index: const i32*, branch: i32, last: i32` | `(*index < 0 \|\| *index > last ? last : *index) == branch` |
//! | `xthunk_set_condition_branch_pred` | `handle: u64, pred: const u8*, branch: i32` | `(*pred != 0 ? 0 : 1) == branch` |
//! | `xthunk_set_condition_trips` | `handle: u64, counter: u64*, n: u64` | `*counter < n`, then `*counter += 1` (saturating) |

use super::{CUresult, Handle, api, stream_of};
use crate::error::{Code, EmuError, invalid};
use crate::ffi::put;
use crate::stream::{self, conditional as cond};
use std::ffi::{c_int, c_uint, c_ulonglong};
use std::sync::OnceLock;
use xthunk_core::ir::{Access, DType, Scalar};
use xthunk_core::kernels::{
    Extent, HostArg, HostKernel, KernelError, KernelSignature, Param, ParamKind,
};

/// The device runtime call the set-condition kernels import.
pub const SET_CONDITIONAL: &str = "cudaGraphSetConditional";
/// The set-condition kernels, by name.
pub const SET_KERNELS: [&str; 4] = [
    "xthunk_set_condition_pred",
    "xthunk_set_condition_branch",
    "xthunk_set_condition_branch_pred",
    "xthunk_set_condition_trips",
];

fn handle_of(args: &[HostArg]) -> Result<u64, KernelError> {
    match args.first() {
        Some(HostArg::Scalar(Scalar::I64(h))) => Ok(*h as u64),
        _ => Err(KernelError::Failed(
            "the handle parameter is missing".into(),
        )),
    }
}

fn bytes<const N: usize>(args: &[HostArg], i: usize) -> Result<[u8; N], KernelError> {
    match args.get(i) {
        Some(HostArg::Buffer { ptr, len }) if *len == N && !ptr.is_null() => {
            let mut b = [0u8; N];
            // SAFETY: the launch checked the buffer: `len` = N valid bytes, held exclusively
            // for the kernel's run (the host kernel contract).
            unsafe { std::ptr::copy_nonoverlapping(*ptr, b.as_mut_ptr(), N) };
            Ok(b)
        }
        _ => Err(KernelError::Failed(format!(
            "parameter {i} is not a {N}-byte buffer"
        ))),
    }
}

fn int(args: &[HostArg], i: usize) -> Result<i64, KernelError> {
    match args.get(i) {
        Some(HostArg::Scalar(s)) => s
            .as_i64()
            .ok_or_else(|| KernelError::Failed(format!("parameter {i} is not an integer"))),
        _ => Err(KernelError::Failed(format!("parameter {i} is missing"))),
    }
}

fn set(args: &[HostArg], value: bool) -> Result<(), KernelError> {
    cond::set(handle_of(args)?, u32::from(value)).map_err(KernelError::Failed)
}

/// `xthunk_set_condition_pred`.
unsafe fn set_pred(args: &[HostArg]) -> Result<(), KernelError> {
    let [p] = bytes::<1>(args, 1)?;
    set(args, p != 0)
}

/// `xthunk_set_condition_branch`.
unsafe fn set_branch(args: &[HostArg]) -> Result<(), KernelError> {
    let i = i64::from(i32::from_le_bytes(bytes::<4>(args, 1)?));
    let (branch, last) = (int(args, 2)?, int(args, 3)?);
    let selected = if i < 0 || i > last { last } else { i };
    set(args, selected == branch)
}

/// `xthunk_set_condition_branch_pred`.
unsafe fn set_branch_pred(args: &[HostArg]) -> Result<(), KernelError> {
    let [p] = bytes::<1>(args, 1)?;
    let selected = if p != 0 { 0 } else { 1 };
    set(args, selected == int(args, 2)?)
}

/// `xthunk_set_condition_trips`.
unsafe fn set_trips(args: &[HostArg]) -> Result<(), KernelError> {
    let c = u64::from_le_bytes(bytes::<8>(args, 1)?);
    let n = int(args, 2)? as u64;
    set(args, c < n)?;
    let Some(HostArg::Buffer { ptr, .. }) = args.get(1) else {
        return Err(KernelError::Failed("the counter is missing".into()));
    };
    let next = c.saturating_add(1).to_le_bytes();
    // SAFETY: as in `bytes`: 8 checked bytes the kernel holds exclusively.
    unsafe { std::ptr::copy_nonoverlapping(next.as_ptr(), *ptr, 8) };
    Ok(())
}

fn buffer(name: &'static str, dtype: DType, access: Access) -> Param {
    Param {
        name,
        kind: ParamKind::Buffer {
            dtype,
            access,
            elems: Extent::Fixed(1),
        },
    }
}

fn scalar(name: &'static str, dtype: DType) -> Param {
    Param {
        name,
        kind: ParamKind::Scalar(dtype),
    }
}

fn kernels() -> &'static [HostKernel; 4] {
    static K: OnceLock<[HostKernel; 4]> = OnceLock::new();
    K.get_or_init(|| {
        let k = |name: &str, params: Vec<Param>, func| HostKernel {
            signature: KernelSignature {
                name: name.to_string(),
                params,
            },
            func,
        };
        let h = || scalar("handle", DType::I64);
        [
            k(
                SET_KERNELS[0],
                vec![h(), buffer("pred", DType::U8, Access::Read)],
                set_pred,
            ),
            k(
                SET_KERNELS[1],
                vec![
                    h(),
                    buffer("index", DType::I32, Access::Read),
                    scalar("branch", DType::I32),
                    scalar("last", DType::I32),
                ],
                set_branch,
            ),
            k(
                SET_KERNELS[2],
                vec![
                    h(),
                    buffer("pred", DType::U8, Access::Read),
                    scalar("branch", DType::I32),
                ],
                set_branch_pred,
            ),
            k(
                SET_KERNELS[3],
                vec![
                    h(),
                    buffer("counter", DType::I64, Access::ReadWrite),
                    scalar("n", DType::I64),
                ],
                set_trips,
            ),
        ]
    })
}

/// The set-condition kernel `name` when the module's functions (as its image lists them) are
/// exactly xthunk's set-condition module: its four kernels and the imported
/// `cudaGraphSetConditional`.
pub fn set_kernel(functions: &[String], name: &str) -> Option<&'static HostKernel> {
    let expected = SET_KERNELS.len() + 1;
    let exact = functions.len() == expected
        && SET_KERNELS
            .iter()
            .chain(std::iter::once(&SET_CONDITIONAL))
            .all(|k| functions.iter().any(|f| f == k));
    if !exact {
        return None;
    }
    kernels().iter().find(|k| k.signature.name == name)
}

/// `CUDA_CONDITIONAL_NODE_PARAMS`.
#[repr(C)]
pub struct ConditionalNodeParams {
    pub handle: c_ulonglong,
    pub ty: c_uint,
    pub size: c_uint,
    pub ph_graph_out: *mut Handle,
    pub ctx: Handle,
}

/// The start of `CUgraphNodeParams` (the conditional member of its union; the emulator reads
/// nothing further).
#[repr(C)]
pub struct NodeParamsHead {
    pub ty: c_int,
    pub reserved0: [c_int; 3],
    pub conditional: ConditionalNodeParams,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    s: Handle,
    status_out: *mut c_uint,
    id_out: *mut c_ulonglong,
    graph_out: *mut Handle,
    deps_out: *mut *const Handle,
    num_deps_out: *mut usize,
) -> CUresult {
    const C: &str = "cuStreamGetCaptureInfo_v2";
    api(C, || {
        let st = stream_of(s, C)?;
        let (status, id) = stream::capture_status(&st);
        if !status_out.is_null() {
            // SAFETY: the caller's (optional) out-pointer.
            unsafe { put(status_out, status, "captureStatus_out", C)? };
        }
        let Some(c) = stream::capture_of(&st).filter(|_| status == 1) else {
            return Ok(());
        };
        if !id_out.is_null() {
            // SAFETY: the caller's optional out-pointer, checked non-null.
            unsafe { put(id_out, id, "id_out", C)? };
        }
        if !graph_out.is_null() {
            // SAFETY: as above.
            unsafe { put(graph_out, c.graph, "graph_out", C)? };
        }
        let (deps, n) = c.dependencies();
        if !deps_out.is_null() {
            // SAFETY: as above.
            unsafe { put(deps_out, deps, "dependencies_out", C)? };
        }
        if !num_deps_out.is_null() {
            // SAFETY: as above.
            unsafe { put(num_deps_out, n, "numDependencies_out", C)? };
        }
        Ok(())
    })
}

/// The `n` handles at `p` (null when `n` is 0).
///
/// # Safety
/// `p` holds `n` handles when `n > 0`.
unsafe fn handles<'a>(
    p: *const Handle,
    n: usize,
    what: &str,
    call: &str,
) -> Result<&'a [Handle], EmuError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() || n > 1 << 20 {
        return Err(invalid(
            call,
            format!("`{what}`: {n} entries at a null pointer or too many"),
        ));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamUpdateCaptureDependencies(
    s: Handle,
    deps: *mut Handle,
    n: usize,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuStreamUpdateCaptureDependencies";
    api(C, || {
        let st = stream_of(s, C)?;
        if flags > 1 {
            return Err(invalid(C, format!("flags {flags} (ADD 0 or SET 1)")));
        }
        let Some(c) = stream::capture_of(&st).filter(|c| !c.is_invalid()) else {
            return Err(EmuError::new(
                Code::IllegalState,
                crate::diag::Kind::InvalidState,
                C,
                format!("{} is not capturing", st.label()),
            ));
        };
        // SAFETY: `deps` holds `n` handles (the API contract).
        let d = unsafe { handles(deps, n, "dependencies", C) }?;
        c.update_dependencies(d, flags == 1, C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCaptureToGraph(
    s: Handle,
    graph: Handle,
    deps: *const Handle,
    dep_data: *const std::ffi::c_void,
    n: usize,
    mode: c_uint,
) -> CUresult {
    const C: &str = "cuStreamBeginCaptureToGraph";
    api(C, || {
        if n != 0 || !deps.is_null() || !dep_data.is_null() {
            return Err(crate::error::unsupported(
                C,
                "capturing into a graph after dependencies (the emulator captures into empty \
                 graphs only)",
            ));
        }
        stream::begin_capture_into(&stream_of(s, C)?, mode, Some(graph), C)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphConditionalHandleCreate(
    out: *mut c_ulonglong,
    graph: Handle,
    ctx: Handle,
    default: c_uint,
    flags: c_uint,
) -> CUresult {
    const C: &str = "cuGraphConditionalHandleCreate";
    api(C, || {
        crate::context::cuda_initialized(C)?;
        if out.is_null() {
            return Err(invalid(C, "`pHandle_out` is a null pointer"));
        }
        let h = cond::create_condition(graph, ctx, default, flags, C)?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(out, h, "pHandle_out", C) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode(
    node_out: *mut Handle,
    graph: Handle,
    deps: *const Handle,
    n: usize,
    params: *mut NodeParamsHead,
) -> CUresult {
    const C: &str = "cuGraphAddNode";
    api(C, || {
        crate::context::cuda_initialized(C)?;
        if node_out.is_null() || params.is_null() {
            return Err(invalid(
                C,
                "`phGraphNode` or `nodeParams` is a null pointer",
            ));
        }
        // SAFETY: `params` points to a `CUgraphNodeParams` (the API contract), whose head
        // this reads and whose `phGraph_out` member the driver writes.
        let p = unsafe { &mut *params };
        if p.ty as u32 != cond::NODE_TYPE {
            return Err(crate::error::unsupported(
                C,
                format!(
                    "node type {} (the emulator adds only conditional nodes with cuGraphAddNode)",
                    p.ty
                ),
            ));
        }
        // SAFETY: `deps` holds `n` handles (the API contract).
        let d = unsafe { handles(deps, n, "dependencies", C) }?;
        let c = &mut p.conditional;
        let node = cond::add_node(
            graph,
            d,
            c.handle,
            c.ty,
            c.size,
            c.ctx,
            &mut c.ph_graph_out,
            C,
        )?;
        // SAFETY: the caller's out-pointer (checked non-null).
        unsafe { put(node_out, node, "phGraphNode", C) }
    })
}
