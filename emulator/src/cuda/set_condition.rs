//! The kernels of xthunk's set-condition module (CUDA conditional graph nodes, CUDA 12.4+),
//! EMULATED; the conditional-node entry points are in `conditional`. This file names nothing
//! of the CUDA shims, so `launch` can ask it whether a kernel is one of them.
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

use crate::stream::conditional as cond;
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
