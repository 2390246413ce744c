//! Finding and opening the ROCm libraries at run time, and their symbol tables: the HIP
//! runtime's (`HipApi`), hipRTC's (`HiprtcApi`), comgr's (`ComgrApi`) and rocBLAS's
//! (`RocblasApi`).
//!
//! Every ROCm library is opened with `dlopen` (through `libloading`); nothing is linked at
//! build time. Search order (the first candidate that opens *and* has every required symbol
//! wins; every candidate tried is listed when none does):
//!
//! 1. every folder of `XTHUNK_ROCM_PATH` (`:`-separated);
//! 2. the folder the HIP runtime was found in (for hipRTC, comgr and rocBLAS);
//! 3. `$ROCM_PATH/lib`, then `/opt/rocm/lib`;
//! 4. the bare names (the dynamic loader's own search: `LD_LIBRARY_PATH`, the ld.so cache).
//!
//! Steps 3 and 4 are skipped when `XTHUNK_ROCM_NO_DEFAULT_SEARCH` is set (to anything but
//! `0` or the empty string): a test, or an admin pinning one installation, sees exactly the
//! folders named.
//!
//! The tables are declared with core's one symbol-table mechanism
//! ([`xthunk_core::backend::dylib`], after IREE's dynamic symbol tables): required symbols (a
//! library lacking one is skipped, with the missing names in the reason) and optional ones
//! (`None` when absent, which turns a feature off), bound once into plain function pointers
//! that live as long as the table, which keeps the library open. A library that was bound is
//! never unloaded: comgr registers LLVM options in the NODELETE libLLVM, so unloading and
//! reloading it aborts; the HIP runtime keeps threads and global state.

use crate::sys;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
pub use xthunk_core::backend::dylib::LoadError;
use xthunk_core::backend::dylib::{Loader, Probe, Version, symbol_table};
use xthunk_core::backend::search::{self, split_paths};

/// Names of the HIP runtime, newest first (ROCm 7, 6, 5), after the unversioned name.
pub const HIP_LIBRARY_NAMES: &[&str] = &[
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// Where to look for the ROCm libraries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// Folders searched first (`XTHUNK_ROCM_PATH`).
    pub override_dirs: Vec<PathBuf>,
    /// The ROCm installation root (`ROCM_PATH`); its `lib` folder is searched.
    pub rocm_path: Option<PathBuf>,
    /// Whether `$ROCM_PATH/lib`, `/opt/rocm/lib` and the dynamic loader's search are used
    /// (false when `XTHUNK_ROCM_NO_DEFAULT_SEARCH` is set).
    pub default_search: bool,
}

impl SearchConfig {
    /// The configuration the environment asks for.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// The configuration for these variable values (`var(name)`), for tests.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let override_dirs = var("XTHUNK_ROCM_PATH")
            .map(|v| split_paths(&v))
            .unwrap_or_default();
        let rocm_path = var("ROCM_PATH")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let no_default =
            var("XTHUNK_ROCM_NO_DEFAULT_SEARCH").is_some_and(|v| !v.is_empty() && v != "0");
        SearchConfig {
            override_dirs,
            rocm_path,
            default_search: !no_default,
        }
    }

    /// Only these folders: no default search.
    pub fn only(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        SearchConfig {
            override_dirs: dirs.into_iter().collect(),
            rocm_path: None,
            default_search: false,
        }
    }

    /// Every candidate for a library called one of `names`, in search order; `sibling` is
    /// the folder of a library already loaded (searched right after the override folders).
    pub fn candidates(&self, names: &[&str], sibling: Option<&Path>) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self.override_dirs.clone();
        if let Some(s) = sibling {
            dirs.push(s.to_path_buf());
        }
        if self.default_search {
            if let Some(root) = &self.rocm_path {
                dirs.push(root.join("lib"));
            }
            dirs.push(PathBuf::from("/opt/rocm/lib"));
        }
        search::candidates(&dirs, names, self.default_search)
    }
}

symbol_table! {
    /// The HIP runtime (`libamdhip64`).
    pub(crate) struct HipApi {
        required {
            hipInit: sys::hipInit_t,
            hipRuntimeGetVersion: sys::hipVersion_t,
            hipDriverGetVersion: sys::hipVersion_t,
            hipGetDeviceCount: sys::hipGetDeviceCount_t,
            hipSetDevice: sys::hipSetDevice_t,
            hipDeviceSynchronize: sys::hipDeviceSynchronize_t,
            hipDeviceGetName: sys::hipDeviceGetName_t,
            hipDeviceGetAttribute: sys::hipDeviceGetAttribute_t,
            hipDeviceTotalMem: sys::hipDeviceTotalMem_t,
            hipMalloc: sys::hipMalloc_t,
            hipFree: sys::hipFree_t,
            hipHostMalloc: sys::hipHostMalloc_t,
            hipHostFree: sys::hipHostFree_t,
            hipHostGetDevicePointer: sys::hipHostGetDevicePointer_t,
            hipMallocManaged: sys::hipMallocManaged_t,
            hipMemcpy: sys::hipMemcpy_t,
            hipMemcpyAsync: sys::hipMemcpyAsync_t,
            hipMemcpyDtoDAsync: sys::hipMemcpyDtoDAsync_t,
            hipMemsetD8Async: sys::hipMemsetD8Async_t,
            hipMemsetD16Async: sys::hipMemsetD16Async_t,
            hipMemsetD32Async: sys::hipMemsetD32Async_t,
            hipStreamCreateWithFlags: sys::hipStreamCreateWithFlags_t,
            hipStreamDestroy: sys::hipStreamDestroy_t,
            hipStreamSynchronize: sys::hipStreamSynchronize_t,
            hipStreamQuery: sys::hipStreamQuery_t,
            hipStreamWaitEvent: sys::hipStreamWaitEvent_t,
            hipEventCreateWithFlags: sys::hipEventCreateWithFlags_t,
            hipEventDestroy: sys::hipEventDestroy_t,
            hipEventRecord: sys::hipEventRecord_t,
            hipEventSynchronize: sys::hipEventSynchronize_t,
            hipEventQuery: sys::hipEventQuery_t,
            hipEventElapsedTime: sys::hipEventElapsedTime_t,
            hipModuleLoadData: sys::hipModuleLoadData_t,
            hipModuleUnload: sys::hipModuleUnload_t,
            hipModuleGetFunction: sys::hipModuleGetFunction_t,
            hipModuleLaunchKernel: sys::hipModuleLaunchKernel_t,
        }
        optional {
            hipGetErrorName: sys::hipGetErrorName_t,
            // ROCm >= 6 layout; ROCm 5 has only the unsuffixed one.
            hipGetDevicePropertiesR0600: sys::hipGetDeviceProperties_t,
            hipGetDeviceProperties: sys::hipGetDeviceProperties_t,
            // Graphs (stream capture): without them, command buffers run as plain streams.
            hipStreamBeginCapture: sys::hipStreamBeginCapture_t,
            hipStreamEndCapture: sys::hipStreamEndCapture_t,
            hipGraphInstantiate: sys::hipGraphInstantiate_t,
            hipGraphLaunch: sys::hipGraphLaunch_t,
            hipGraphGetNodes: sys::hipGraphGetNodes_t,
            hipGraphDestroy: sys::hipGraphDestroy_t,
            hipGraphExecDestroy: sys::hipGraphExecDestroy_t,
            // Stream-ordered allocation (ROCm >= 5.1): without them, no memory pools.
            hipMemPoolCreate: sys::hipMemPoolCreate_t,
            hipMemPoolDestroy: sys::hipMemPoolDestroy_t,
            hipMemPoolSetAttribute: sys::hipMemPoolSetAttribute_t,
            hipMallocFromPoolAsync: sys::hipMallocFromPoolAsync_t,
            hipFreeAsync: sys::hipFreeAsync_t,
            // Exported only by xthunk's driver emulator (emulator/, its control API):
            // its devices are labelled emulated everywhere.
            xthunk_emu_version: sys::xthunk_emu_version_t,
        }
    }
}

impl HipApi {
    /// True when every symbol stream capture needs is there.
    pub(crate) fn has_graphs(&self) -> bool {
        self.hipStreamBeginCapture.is_some()
            && self.hipStreamEndCapture.is_some()
            && self.hipGraphInstantiate.is_some()
            && self.hipGraphLaunch.is_some()
            && self.hipGraphGetNodes.is_some()
            && self.hipGraphDestroy.is_some()
            && self.hipGraphExecDestroy.is_some()
    }
}

/// Names of the dedicated hipRTC library (ROCm ≥ 6), after the unversioned name.
pub const HIPRTC_LIBRARY_NAMES: &[&str] = &[
    "libhiprtc.so",
    "libhiprtc.so.7",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
];

/// Names of comgr (`.so.3` from ROCm 6.3 on, `.so.2` before).
pub const COMGR_LIBRARY_NAMES: &[&str] =
    &["libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2"];

symbol_table! {
    /// hipRTC.
    pub(crate) struct HiprtcApi {
        required {
            hiprtcCreateProgram: sys::hiprtcCreateProgram_t,
            hiprtcCompileProgram: sys::hiprtcCompileProgram_t,
            hiprtcDestroyProgram: sys::hiprtcDestroyProgram_t,
            hiprtcGetProgramLogSize: sys::hiprtcGetProgramLogSize_t,
            hiprtcGetProgramLog: sys::hiprtcGetProgramLog_t,
            hiprtcGetCodeSize: sys::hiprtcGetCodeSize_t,
            hiprtcGetCode: sys::hiprtcGetCode_t,
        }
        optional {
            hiprtcVersion: sys::hiprtcVersion_t,
        }
    }
}

symbol_table! {
    /// The code object manager: only its ISA list is used.
    pub(crate) struct ComgrApi {
        required {
            amd_comgr_get_isa_count: sys::amd_comgr_get_isa_count_t,
            amd_comgr_get_isa_name: sys::amd_comgr_get_isa_name_t,
        }
        optional {
            amd_comgr_get_version: sys::amd_comgr_get_version_t,
        }
    }
}

/// Names of rocBLAS (ROCm 7: `.so.5`, ROCm 6: `.so.4`, ROCm 5: `.so.0`).
pub const ROCBLAS_LIBRARY_NAMES: &[&str] = &[
    "librocblas.so",
    "librocblas.so.5",
    "librocblas.so.4",
    "librocblas.so.3",
    "librocblas.so.0",
];

symbol_table! {
    /// rocBLAS.
    pub(crate) struct RocblasApi {
        required {
            rocblas_create_handle: sys::rocblas_create_handle_t,
            rocblas_destroy_handle: sys::rocblas_destroy_handle_t,
            rocblas_set_stream: sys::rocblas_set_stream_t,
            rocblas_set_pointer_mode: sys::rocblas_set_pointer_mode_t,
            rocblas_gemm_ex: sys::rocblas_gemm_ex_t,
            rocblas_gemm_strided_batched_ex: sys::rocblas_gemm_strided_batched_ex_t,
        }
        optional {
            rocblas_get_version_string_size: sys::rocblas_get_version_string_size_t,
            rocblas_get_version_string: sys::rocblas_get_version_string_t,
        }
    }
}

/// The loaded HIP runtime: its table, where it came from, and its version.
pub(crate) struct Hip {
    pub(crate) api: HipApi,
    /// The file loaded (resolved through `/proc/self/maps` when found by bare name).
    pub(crate) path: PathBuf,
    /// `hipRuntimeGetVersion` (`major * 10_000_000 + minor * 100_000 + patch`).
    pub(crate) runtime_version: c_int,
}

impl Hip {
    /// Loads the HIP runtime from the first candidate that works.
    pub(crate) fn load(config: &SearchConfig) -> Result<Hip, LoadError> {
        let candidates = config.candidates(HIP_LIBRARY_NAMES, None);
        let loaded = Loader::new("libamdhip64").load(&candidates, |api: &HipApi| {
            let mut v: c_int = 0;
            // SAFETY: `hipRuntimeGetVersion` writes one int through a valid pointer; it needs
            // no initialized runtime.
            let rc = unsafe { (api.hipRuntimeGetVersion)(&mut v) };
            let v = if rc == sys::hipSuccess { v } else { 0 };
            Ok(Probe::with(hip_version(v), v))
        })?;
        let (api, path, runtime_version) = (loaded.table, loaded.path, loaded.extra);
        tracing::info!(
            path = %path.display(),
            version = %format_hip_version(runtime_version),
            "loaded the HIP runtime"
        );
        Ok(Hip {
            api,
            path,
            runtime_version,
        })
    }

    /// The folder the runtime was loaded from.
    pub(crate) fn folder(&self) -> Option<&Path> {
        self.path.parent().filter(|p| !p.as_os_str().is_empty())
    }

    /// `hipDriverGetVersion`, when it succeeds.
    pub(crate) fn driver_version(&self) -> Option<c_int> {
        let mut v: c_int = 0;
        // SAFETY: writes one int through a valid pointer.
        let rc = unsafe { (self.api.hipDriverGetVersion)(&mut v) };
        (rc == sys::hipSuccess && v > 0).then_some(v)
    }

    /// `HIP runtime 5.2.21153 (/usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.21153)`, with the
    /// driver version when the runtime reports one.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "HIP runtime {} ({})",
            format_hip_version(self.runtime_version),
            self.path.display()
        );
        if let Some(d) = self.driver_version() {
            s.push_str(&format!(", driver {}", format_hip_version(d)));
        }
        s
    }
}

/// `50221153` → `5.2.21153` (HIP_VERSION = major * 10^7 + minor * 10^5 + patch).
pub fn format_hip_version(v: c_int) -> String {
    match hip_version(v) {
        Some(v) => v.to_string(),
        None => "unknown".into(),
    }
}

/// A HIP version number (`major * 10^7 + minor * 10^5 + patch`) as a [`Version`]; `None`
/// when it is not positive (unknown).
pub fn hip_version(v: c_int) -> Option<Version> {
    let v = u32::try_from(v).ok().filter(|v| *v > 0)?;
    Some(Version::new(
        v / 10_000_000,
        (v / 100_000) % 100,
        v % 100_000,
    ))
}

/// The path of a library already mapped into this process whose file name starts with
/// `prefix` (from `/proc/self/maps`).
pub(crate) fn mapped_library(prefix: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(prefix) && f.contains(".so"))
        })
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order() {
        let c = SearchConfig::from_vars(|n| match n {
            "XTHUNK_ROCM_PATH" => Some("/a::/b".into()),
            "ROCM_PATH" => Some("/rocm".into()),
            _ => None,
        });
        assert_eq!(
            c.override_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert!(c.default_search);
        let got = c.candidates(&["x.so", "x.so.6"], Some(Path::new("/sib")));
        let want: Vec<PathBuf> = [
            "/a/x.so",
            "/a/x.so.6",
            "/b/x.so",
            "/b/x.so.6",
            "/sib/x.so",
            "/sib/x.so.6",
            "/rocm/lib/x.so",
            "/rocm/lib/x.so.6",
            "/opt/rocm/lib/x.so",
            "/opt/rocm/lib/x.so.6",
            "x.so",
            "x.so.6",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn default_search_can_be_disabled() {
        let c = SearchConfig::from_vars(|n| match n {
            "XTHUNK_ROCM_PATH" => Some("/only".into()),
            "XTHUNK_ROCM_NO_DEFAULT_SEARCH" => Some("1".into()),
            _ => None,
        });
        assert!(!c.default_search);
        assert_eq!(
            c.candidates(&["y.so"], None),
            vec![PathBuf::from("/only/y.so")]
        );
        let c =
            SearchConfig::from_vars(|n| (n == "XTHUNK_ROCM_NO_DEFAULT_SEARCH").then(|| "0".into()));
        assert!(c.default_search);
    }

    #[test]
    fn load_error_lists_every_path() {
        let e = Loader::new("libamdhip64")
            .load::<HipApi, ()>(
                &[PathBuf::from("/nonexistent-xthunk/libamdhip64.so")],
                |_| Ok(Probe::version(None)),
            )
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            e,
            "no usable libamdhip64 found; tried: /nonexistent-xthunk/libamdhip64.so (no such file)"
        );
        let e = Loader::new("comgr")
            .load::<ComgrApi, ()>(&[], |_| Ok(Probe::version(None)))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("no folder to search"), "{e}");
    }

    #[test]
    fn versions_read_like_hip_version_h() {
        assert_eq!(format_hip_version(50_221_153), "5.2.21153");
        assert_eq!(format_hip_version(60_342_134), "6.3.42134");
        assert_eq!(format_hip_version(0), "unknown");
        assert_eq!(format_hip_version(-1), "unknown");
        assert_eq!(hip_version(60_342_134), Some(Version::new(6, 3, 42134)));
    }
}
