//! The parameters of kernels without a known signature (user source, cubins, PTX) as the
//! driver lays them out, and the check of a launch's arguments against them.
//!
//! `cuLaunchKernel` takes a `void**` with no count: given fewer arguments than the kernel has
//! parameters the driver reads past the array, and an immediate of the wrong size makes the
//! kernel read the wrong bytes. So, when a kernel is looked up, the driver is asked for each
//! parameter's offset and size ([`query`]: `cuFuncGetParamInfo`, CUDA 12.4+, index by index
//! until it answers `CUDA_ERROR_INVALID_VALUE` past the last parameter; `cuFuncGetParamCount`
//! is newer, CUDA 13.2, and not used), and every launch is checked against that layout
//! ([`check`]): the count, a buffer (an 8-byte device pointer) only for an 8-byte parameter,
//! an immediate only for a parameter of its own size. The layout holds sizes only: an 8-byte
//! immediate where the kernel takes a pointer cannot be told from a `long long` here.
//!
//! A driver without `cuFuncGetParamInfo` (older than 12.4; checked once, and the call is made
//! under `guarded`, since cudarc panics on a missing symbol) launches unchecked, as before,
//! and says so once in the log.

use crate::loader::{check_symbols, guarded};
use crate::sys::{self, CUresult};
use cudarc::driver::sys as drv;
use std::sync::OnceLock;
use xthunk_core::backend::LaunchArg;
use xthunk_core::{Error, Result};

/// The driver entry point this module calls (CUDA 12.4+, so not required by the probe).
pub const PARAM_INFO_SYMBOL: &str = "cuFuncGetParamInfo";

/// More parameters than a kernel can have (CUDA's parameter space is at most 32764 bytes):
/// the query stops there rather than trust the driver's answers forever.
const MAX_PARAMS: usize = 32768;

/// One kernel parameter as the driver lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamLayout {
    /// Its offset in the parameter buffer, in bytes.
    pub offset: usize,
    /// Its size in bytes.
    pub size: usize,
}

/// Whether the driver has [`PARAM_INFO_SYMBOL`] (looked up once; logged once when not).
fn driver_has_param_info() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        // SAFETY: the driver library is already loaded (the probe opened it).
        let found = guarded("the driver library", || unsafe { drv::culib() })
            .and_then(|lib| check_symbols(lib, &[PARAM_INFO_SYMBOL]));
        match found {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "launches of user kernels are not checked against their parameters on this driver ({e}; {PARAM_INFO_SYMBOL} needs CUDA 12.4)"
                );
                false
            }
        }
    })
}

/// The parameters of `func` (the function `kernel` of a loaded module, its context current)
/// as the driver lays them out; `None` when the driver cannot say (too old, or an error,
/// logged), and the kernel's launches are then not checked.
pub(crate) fn query(func: sys::CUfunction, kernel: &str) -> Option<Vec<ParamLayout>> {
    if !driver_has_param_info() {
        return None;
    }
    let mut out = vec![];
    while out.len() < MAX_PARAMS {
        let index = out.len();
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `func` is a live function handle; the two out-pointers are locals; the
        // symbol was found in the driver above (and a panic is caught anyway).
        let r = guarded(PARAM_INFO_SYMBOL, || unsafe {
            sys::cuFuncGetParamInfo(func, index, &mut offset, &mut size)
        });
        match r {
            Ok(CUresult::CUDA_SUCCESS) => out.push(ParamLayout { offset, size }),
            // Past the last parameter.
            Ok(CUresult::CUDA_ERROR_INVALID_VALUE) => return Some(out),
            Ok(other) => {
                tracing::warn!(
                    kernel,
                    "{PARAM_INFO_SYMBOL}({index}): {}: launches of this kernel are not checked against its parameters",
                    crate::result::cu_describe(other)
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(
                    kernel,
                    "{e}: launches of this kernel are not checked against its parameters"
                );
                return None;
            }
        }
    }
    tracing::warn!(
        kernel,
        "the driver reports more than {MAX_PARAMS} parameters: launches of this kernel are not checked against them"
    );
    None
}

/// The size in bytes of `arg` as `cuLaunchKernel` passes it: a device pointer, or the
/// immediate's C type.
fn arg_size(arg: &LaunchArg) -> usize {
    match arg {
        LaunchArg::Buffer { .. } => 8,
        LaunchArg::Scalar(s) => s.dtype().size(),
    }
}

/// Checks `args` against `kernel`'s parameters as the driver lays them out: one argument per
/// parameter, each of the parameter's size (a buffer is an 8-byte device pointer).
pub(crate) fn check(kernel: &str, params: &[ParamLayout], args: &[LaunchArg]) -> Result<()> {
    let err = |message: String| {
        Err(Error::Kernel {
            kernel: kernel.to_string(),
            message,
        })
    };
    if params.len() != args.len() {
        return err(format!(
            "the driver declares {} parameters, the launch passes {}",
            params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if arg_size(a) == p.size {
            continue;
        }
        return match a {
            LaunchArg::Buffer { .. } => err(format!(
                "argument {i}: a buffer (an 8-byte device pointer) was passed, the driver declares a {}-byte parameter",
                p.size
            )),
            LaunchArg::Scalar(s) => err(format!(
                "argument {i}: {s} ({} bytes) was passed, the driver declares a {}-byte parameter",
                arg_size(a),
                p.size
            )),
        };
    }
    Ok(())
}

/// What to add to a launch refused with an illegal address: the 8-byte immediates passed
/// (which the layout cannot tell from pointers: a kernel taking a pointer there reads the
/// immediate as an address). `None` when there is none.
pub(crate) fn pointer_hint(args: &[LaunchArg]) -> Option<String> {
    let wide: Vec<String> = args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            LaunchArg::Scalar(s) if s.dtype().size() == 8 => Some(format!("argument {i} ({s})")),
            _ => None,
        })
        .collect();
    if wide.is_empty() {
        return None;
    }
    Some(format!(
        "{} {} an 8-byte immediate: if the kernel takes a pointer there, pass a buffer",
        wide.join(", "),
        if wide.len() == 1 { "is" } else { "are" }
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use xthunk_core::backend::DevicePtr;
    use xthunk_core::ir::Scalar;

    /// `k(const double*, float*, int, float)` as the driver lays it out.
    const K: [ParamLayout; 4] = [
        ParamLayout { offset: 0, size: 8 },
        ParamLayout { offset: 8, size: 8 },
        ParamLayout {
            offset: 16,
            size: 4,
        },
        ParamLayout {
            offset: 20,
            size: 4,
        },
    ];

    fn buf() -> LaunchArg {
        LaunchArg::Buffer {
            ptr: DevicePtr(0x1000),
            len: 64,
        }
    }

    fn msg(args: &[LaunchArg]) -> String {
        check("k", &K, args).unwrap_err().to_string()
    }

    #[test]
    fn matching_arguments_pass() {
        let args = [
            buf(),
            buf(),
            LaunchArg::Scalar(Scalar::I32(7)),
            LaunchArg::Scalar(Scalar::F32(0.5)),
        ];
        assert!(check("k", &K, &args).is_ok());
        assert!(check("none", &[], &[]).is_ok());
    }

    #[test]
    fn mismatches_are_refused_naming_the_argument() {
        let (i32a, f32a) = (
            LaunchArg::Scalar(Scalar::I32(7)),
            LaunchArg::Scalar(Scalar::F32(0.5)),
        );
        let m = msg(&[buf(), buf(), i32a]);
        assert!(
            m.contains("`k`")
                && m.contains("the driver declares 4 parameters, the launch passes 3"),
            "{m}"
        );
        let m = msg(&[buf(), buf(), i32a, f32a, i32a]);
        assert!(
            m.contains("declares 4 parameters, the launch passes 5"),
            "{m}"
        );
        let m = msg(&[buf(), buf(), LaunchArg::Scalar(Scalar::I64(7)), f32a]);
        assert!(
            m.contains(
                "argument 2: i64:7 (8 bytes) was passed, the driver declares a 4-byte parameter"
            ),
            "{m}"
        );
        let m = msg(&[buf(), buf(), i32a, LaunchArg::Scalar(Scalar::F64(0.5))]);
        assert!(
            m.contains(
                "argument 3: f64:0.5 (8 bytes) was passed, the driver declares a 4-byte parameter"
            ),
            "{m}"
        );
        let m = msg(&[buf(), buf(), buf(), f32a]);
        assert!(
            m.contains("argument 2: a buffer (an 8-byte device pointer) was passed, the driver declares a 4-byte parameter"),
            "{m}"
        );
        let m = msg(&[LaunchArg::Scalar(Scalar::I32(1)), buf(), i32a, f32a]);
        assert!(m.contains("argument 0: i32:1 (4 bytes)"), "{m}");
    }

    #[test]
    fn an_illegal_address_names_the_wide_immediates() {
        let i64a = LaunchArg::Scalar(Scalar::I64(4096));
        assert_eq!(
            pointer_hint(&[i64a, buf(), LaunchArg::Scalar(Scalar::I32(7))]).as_deref(),
            Some(
                "argument 0 (i64:4096) is an 8-byte immediate: if the kernel takes a pointer there, pass a buffer"
            )
        );
        let two = pointer_hint(&[i64a, LaunchArg::Scalar(Scalar::F64(0.5))]).unwrap();
        assert!(
            two.starts_with("argument 0 (i64:4096), argument 1 (f64:0.5) are"),
            "{two}"
        );
        assert_eq!(
            pointer_hint(&[buf(), LaunchArg::Scalar(Scalar::F32(1.0))]),
            None
        );
    }
}
