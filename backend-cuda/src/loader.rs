//! Finding and opening NVIDIA libraries at run time, with a record of every place tried, and
//! their symbol tables: the driver symbols checked before cudarc may call them
//! ([`DRIVER_SYMBOLS`], `guarded` for the ones it may lack), and NVRTC's (`NvrtcApi`) and
//! cuBLAS's (`CublasApi`) tables, declared with core's one symbol-table mechanism
//! ([`xthunk_core::backend::dylib`]) and bound once from the library that was opened.
//!
//! Search order for the toolkit libraries (NVRTC, cuBLAS), [`SearchConfig::candidates`]:
//!
//! 1. every folder of `XTHUNK_CUDA_PATH` (`:`-separated);
//! 2. `$CUDA_HOME/lib64` (then `$CUDA_PATH/lib64`), and `/usr/local/cuda/lib64`;
//! 3. the library folders of pip's `nvidia-*` wheels (`nvidia/cuda_nvrtc/lib`,
//!    `nvidia/cublas/lib`, and CUDA 13's `nvidia/cu13/lib`) under every Python package folder
//!    found: each entry of `XTHUNK_PIP_PREFIX` (`:`-separated; a `pip install --target` folder,
//!    a venv or a prefix), `$XDG_CACHE_HOME/xthunk/pip` and `~/.cache/xthunk/pip` (where the
//!    test setup installs the wheels), `$VIRTUAL_ENV`, `$CONDA_PREFIX`,
//!    `~/.local/lib/python3*/site-packages`, `/usr/local/lib/python3*/{dist,site}-packages`,
//!    `/usr/lib/python3*/{dist,site}-packages` and pyenv's versions;
//! 4. the sonames through the dynamic loader's own search (`LD_LIBRARY_PATH`, the ld cache).
//!
//! The first candidate that opens, has every required symbol of the table and passes the
//! caller's check (NVRTC's version) wins; when none does, [`NotFound`] lists every path tried
//! and why it failed. A library that was bound is never unloaded (see core's `dylib`).
//!
//! The driver (`libcuda.so.1`) comes with the kernel driver, not the toolkit: it is searched in
//! `XTHUNK_CUDA_PATH`, then by name with the names cudarc itself uses. When the override finds
//! it, the library is opened by full path and kept open, so that cudarc's later `dlopen` of
//! `libcuda.so.1` by name resolves to that already-loaded object.

use crate::sys;
use parking_lot::Mutex;
use std::path::PathBuf;
use xthunk_core::backend::dylib::{LoadError, symbol_table};
use xthunk_core::backend::search::{
    self, dedup_paths, env_path, error_chain, installed_site_packages, site_packages_under,
    split_paths,
};
pub use xthunk_core::backend::search::{Attempt, describe_attempts};

/// A `dlopen` failure as a short outcome: `not found` when the file does not exist,
/// otherwise the loader's message (e.g. a wrong architecture or a missing dependency).
pub fn dlopen_outcome(e: &libloading::Error) -> String {
    let msg = error_chain(e);
    if msg.contains("No such file or directory") {
        "not found".into()
    } else {
        msg
    }
}

/// Where to look for NVIDIA libraries. [`SearchConfig::from_env`] reads the environment once;
/// tests build one explicitly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// `XTHUNK_CUDA_PATH`: folders searched first, for every library (driver included).
    pub cuda_path: Vec<PathBuf>,
    /// Toolkit library folders: `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`.
    pub toolkit_dirs: Vec<PathBuf>,
    /// Python package folders (`site-packages` or `pip install --target` folders) whose
    /// `nvidia/*/lib` folders hold wheel libraries.
    pub python_dirs: Vec<PathBuf>,
    /// Whether to finish with the dynamic loader's search by soname.
    pub system_search: bool,
}

impl SearchConfig {
    /// The search described in the [module documentation](self), from the environment.
    pub fn from_env() -> Self {
        let cuda_path = std::env::var("XTHUNK_CUDA_PATH")
            .map(|v| split_paths(&v))
            .unwrap_or_default();
        let mut toolkit_dirs = vec![];
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(h) = env_path(var) {
                toolkit_dirs.push(h.join("lib64"));
            }
        }
        toolkit_dirs.push(PathBuf::from("/usr/local/cuda/lib64"));

        let mut python_dirs = vec![];
        if let Ok(v) = std::env::var("XTHUNK_PIP_PREFIX") {
            for p in split_paths(&v) {
                python_dirs.extend(site_packages_under(&p));
                python_dirs.push(p);
            }
        }
        if let Some(c) = search::user_cache_dir(env_path) {
            python_dirs.push(c.join("xthunk").join("pip"));
        }
        if let Some(home) = env_path("HOME") {
            python_dirs.push(home.join(".cache").join("xthunk").join("pip"));
        }
        python_dirs.extend(installed_site_packages(env_path, true));
        dedup_paths(&mut python_dirs);

        SearchConfig {
            cuda_path,
            toolkit_dirs,
            python_dirs,
            system_search: true,
        }
    }

    /// A search of exactly these folders and nothing else (no system search): for tests.
    pub fn only(dirs: Vec<PathBuf>) -> Self {
        SearchConfig {
            cuda_path: dirs,
            toolkit_dirs: vec![],
            python_dirs: vec![],
            system_search: false,
        }
    }

    /// Every candidate for a toolkit library called one of `names`, in search order: each
    /// name in the override folders, the toolkit folders and the wheel folders
    /// (`wheel_subdirs` under each Python folder), then (with the system search) the bare
    /// names for the dynamic loader.
    pub fn candidates(&self, names: &[&str], wheel_subdirs: &[&str]) -> Vec<PathBuf> {
        let mut dirs = self.cuda_path.clone();
        dirs.extend(self.toolkit_dirs.iter().cloned());
        for py in &self.python_dirs {
            for sub in wheel_subdirs {
                dirs.push(py.join(sub));
            }
        }
        search::candidates(&dirs, names, self.system_search)
    }
}

/// A toolkit library could not be found or opened: every place tried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} not found; tried: {}", describe_attempts(.attempts))]
pub struct NotFound {
    /// `NVRTC`, `cuBLAS`.
    pub what: &'static str,
    pub attempts: Vec<Attempt>,
}

impl NotFound {
    /// The search for `what` failed as core's loader says.
    pub(crate) fn from_load(what: &'static str, e: LoadError) -> Self {
        NotFound {
            what,
            attempts: e.tried,
        }
    }
}

/// Opens a shared library by path or name (the driver, for cudarc).
fn dlopen(place: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading a library runs its initializers. The libraries opened here are NVIDIA's
    // (or the project's driver emulator), whose initializers have no preconditions.
    unsafe { libloading::Library::new(place) }.map_err(|e| dlopen_outcome(&e))
}

/// Checks that `lib` exports every symbol in `names`; the error names the first missing.
pub fn check_symbols(lib: &libloading::Library, names: &[&str]) -> Result<(), String> {
    for n in names {
        // SAFETY: only the symbol's address is looked up (as an untyped pointer); nothing is
        // called or dereferenced.
        let found = unsafe { lib.get::<*const std::ffi::c_void>(n.as_bytes()) }.is_ok();
        if !found {
            return Err(format!("symbol `{n}` missing"));
        }
    }
    Ok(())
}

/// Every driver entry point this crate calls through cudarc (checked at probe, so that no
/// later call can hit cudarc's panic on a missing symbol). A unit test keeps it in sync with
/// the source.
pub const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemAlloc_v2",
    "cuMemAllocManaged",
    "cuMemAllocHost_v2",
    "cuMemHostGetDevicePointer_v2",
    "cuMemFree_v2",
    "cuMemFreeHost",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyAsync",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWaitEvent",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventElapsedTime",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphGetNodes",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// Runs `f` with panics caught and the panic hook silenced (cudarc panics with a message when
/// a library or symbol is missing; the probe must neither die nor print). Calls are
/// serialized, since the panic hook is process-wide.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _serial = LOCK.lock();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(previous);
    r.map_err(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "(no message)".into());
        format!("{what} failed inside cudarc: {msg}")
    })
}

/// The NVIDIA driver library, opened the way cudarc will open it, and kept open.
pub(crate) struct DriverLibrary {
    /// The full path (when the override found it) or the name cudarc resolves.
    pub(crate) path: String,
    /// The driver library (and an override's preloaded copy).
    pub(crate) libs: Vec<libloading::Library>,
}

/// The address of `cuInit` in `lib` (to tell whether two handles are the same library).
fn cu_init_addr(lib: &libloading::Library) -> Option<usize> {
    // SAFETY: only the symbol's address is read.
    unsafe { lib.get::<*const std::ffi::c_void>(b"cuInit") }
        .ok()
        .map(|s| *s as usize)
}

impl DriverLibrary {
    /// Steps 1 to 3 of the probe (see `crate::device`): the override folders (by full path,
    /// kept open), cudarc's own names in cudarc's order, every symbol of [`DRIVER_SYMBOLS`];
    /// then checks that cudarc itself can open the library.
    pub(crate) fn open(config: &SearchConfig) -> Result<DriverLibrary, String> {
        let mut attempts: Vec<Attempt> = vec![];
        let mut libs = vec![];
        // 1. The override folders, opened by full path.
        let mut preloaded: Option<(String, Option<usize>)> = None;
        'dirs: for dir in &config.cuda_path {
            for name in ["libcuda.so.1", "libcuda.so"] {
                let p = dir.join(name);
                if !p.exists() {
                    attempts.push(Attempt {
                        place: p.display().to_string(),
                        outcome: "not found".into(),
                    });
                    continue;
                }
                match dlopen(&p.display().to_string()) {
                    Ok(lib) => {
                        preloaded = Some((p.display().to_string(), cu_init_addr(&lib)));
                        libs.push(lib);
                        break 'dirs;
                    }
                    Err(e) => attempts.push(Attempt {
                        place: p.display().to_string(),
                        outcome: e,
                    }),
                }
            }
        }
        if preloaded.is_none() && !config.system_search {
            return Err(format!(
                "the NVIDIA driver library (libcuda) was not found; tried: {}",
                describe_attempts(&attempts)
            ));
        }
        // 2. cudarc's names, in cudarc's order: the first that opens is what cudarc will use.
        let mut found = None;
        for name in cudarc::get_lib_name_candidates("cuda") {
            match dlopen(&name) {
                Ok(lib) => {
                    found = Some((name, lib));
                    break;
                }
                Err(e) => attempts.push(Attempt {
                    place: name,
                    outcome: e,
                }),
            }
        }
        let Some((name, lib)) = found else {
            return Err(format!(
                "the NVIDIA driver library (libcuda) was not found; tried: {}",
                describe_attempts(&attempts)
            ));
        };
        let mut library = name.clone();
        if let Some((path, addr)) = &preloaded {
            if addr.is_some() && *addr == cu_init_addr(&lib) {
                library = path.clone();
            } else {
                tracing::warn!(
                    "XTHUNK_CUDA_PATH has {path}, but cudarc resolves `{name}` to another driver library: using `{name}`"
                );
            }
        }
        // 3. Every symbol we call.
        check_symbols(&lib, DRIVER_SYMBOLS).map_err(|e| {
            format!("the driver library {library} is unusable: {e} (driver older than CUDA 12.0?)")
        })?;
        libs.push(lib);
        // SAFETY: only tries to open libraries, as above.
        let present = guarded("is_culib_present", || unsafe { sys::is_culib_present() })?;
        if !present {
            return Err(format!(
                "cudarc cannot open the driver library {library} that the probe opened"
            ));
        }
        Ok(DriverLibrary {
            path: library,
            libs,
        })
    }
}

/// Library file names, newest first.
pub const NVRTC_LIBRARY_NAMES: [&str; 4] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so",
];

/// Wheel library folders under a Python package folder.
pub const NVRTC_WHEEL_DIRS: [&str; 2] = ["nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib"];

symbol_table! {
    /// NVRTC (`libnvrtc.so.*`): the functions the compiler calls, and the two that list the
    /// supported architectures (optional: older NVRTCs lack them).
    pub(crate) struct NvrtcApi {
        required {
            nvrtcVersion: sys::nvrtcVersion_t,
            nvrtcCreateProgram: sys::nvrtcCreateProgram_t,
            nvrtcCompileProgram: sys::nvrtcCompileProgram_t,
            nvrtcGetProgramLogSize: sys::nvrtcGetSize_t,
            nvrtcGetProgramLog: sys::nvrtcGet_t,
            nvrtcGetCUBINSize: sys::nvrtcGetSize_t,
            nvrtcGetCUBIN: sys::nvrtcGet_t,
            nvrtcGetPTXSize: sys::nvrtcGetSize_t,
            nvrtcGetPTX: sys::nvrtcGet_t,
            nvrtcDestroyProgram: sys::nvrtcDestroyProgram_t,
            nvrtcGetErrorString: sys::nvrtcGetErrorString_t,
        }
        optional {
            nvrtcGetNumSupportedArchs: sys::nvrtcGetNumSupportedArchs_t,
            nvrtcGetSupportedArchs: sys::nvrtcGetSupportedArchs_t,
        }
    }
}

/// Library file names, newest first.
pub const CUBLAS_LIBRARY_NAMES: [&str; 2] = ["libcublas.so.13", "libcublas.so.12"];
/// Wheel library folders under a Python package folder.
pub const CUBLAS_WHEEL_DIRS: [&str; 2] = ["nvidia/cublas/lib", "nvidia/cu13/lib"];

symbol_table! {
    /// cuBLAS (`libcublas.so.*`): handle management and the two gemm entry points; the
    /// version query is optional.
    pub(crate) struct CublasApi {
        required {
            cublasCreate_v2: sys::cublasCreate_v2_t,
            cublasDestroy_v2: sys::cublasDestroy_v2_t,
            cublasSetStream_v2: sys::cublasSetStream_v2_t,
            cublasGemmEx: sys::cublasGemmEx_t,
            cublasGemmStridedBatchedEx: sys::cublasGemmStridedBatchedEx_t,
        }
        optional {
            cublasGetVersion_v2: sys::cublasGetVersion_v2_t,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use xthunk_core::backend::dylib::{Loader, Probe};

    #[test]
    fn empty_override_lists_every_place() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let cfg = SearchConfig::only(vec![dir.to_path_buf(), dir.join("missing")]);
        let candidates = cfg.candidates(&["libnvrtc.so.12"], &["nvidia/cuda_nvrtc/lib"]);
        let (present, absent) = (
            dir.join("libnvrtc.so.12"),
            dir.join("missing").join("libnvrtc.so.12"),
        );
        assert_eq!(candidates, [present.clone(), absent.clone()]);
        let e = Loader::new("NVRTC")
            .load::<NvrtcApi, ()>(&candidates, |_| Ok(Probe::version(None)))
            .unwrap_err();
        // Every path tried, each name in each folder (consecutive equal outcomes grouped).
        assert_eq!(
            NotFound::from_load("NVRTC", e).to_string(),
            format!(
                "NVRTC not found; tried: {}, {} (no such file)",
                present.display(),
                absent.display()
            )
        );
        let grouped = describe_attempts(&[
            Attempt::new("a", "not found"),
            Attempt::new("b", "not found"),
            Attempt::new("b", "not found"),
            Attempt::new("c", "refused: old"),
        ]);
        assert_eq!(grouped, "a, b (not found); c (refused: old)");
    }

    #[test]
    fn a_library_without_the_table_is_refused_naming_what_it_lacks() {
        // The C math library stands in for a wrong file called libcublas.so.12.
        let e = Loader::new("cuBLAS")
            .load::<CublasApi, ()>(&[PathBuf::from("libm.so.6")], |_| Ok(Probe::version(None)))
            .unwrap_err();
        let msg = NotFound::from_load("cuBLAS", e).to_string();
        assert!(
            msg.starts_with(
                "cuBLAS not found; tried: libm.so.6 (lacks required symbols cublasCreate_v2, "
            ),
            "{msg}"
        );
    }

    #[test]
    fn env_config_has_the_standard_places() {
        let c = SearchConfig::from_env();
        assert!(
            c.toolkit_dirs
                .contains(&PathBuf::from("/usr/local/cuda/lib64"))
        );
        assert!(c.system_search);
        let cands = c.candidates(&["libnvrtc.so.12"], &["nvidia/cuda_nvrtc/lib"]);
        assert!(
            cands
                .iter()
                .any(|d| d.ends_with("xthunk/pip/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"))
                || search::user_cache_dir(env_path).is_none()
        );
        assert_eq!(cands.last(), Some(&PathBuf::from("libnvrtc.so.12")));
    }

    /// Driver entry points this crate calls only inside [`guarded`], with a fallback when they
    /// are missing (`cuGraphExecUpdate_v2` in `graph.rs`; `cuFuncGetParamInfo` in `params.rs`:
    /// launches unchecked): not checked at probe, so a driver without them still works.
    const GUARDED_DRIVER_SYMBOLS: &[&str] = &[
        "cuGraphExecUpdate_v2",
        "cuStreamGetCaptureInfo_v2",
        "cuStreamUpdateCaptureDependencies",
        "cuStreamBeginCaptureToGraph",
        "cuGraphConditionalHandleCreate",
        "cuGraphAddNode",
        "cuMemPoolCreate",
        "cuMemPoolDestroy",
        "cuMemPoolSetAttribute",
        "cuMemAllocFromPoolAsync",
        "cuMemFreeAsync",
        "cuFuncGetParamInfo",
    ];

    /// Every `sys::cu*` function this crate's source calls is in [`DRIVER_SYMBOLS`] (so the
    /// probe checks it before cudarc could panic on it) or in [`GUARDED_DRIVER_SYMBOLS`]
    /// (called under `guarded`), and nothing else is listed.
    #[test]
    fn driver_symbols_cover_the_source() {
        let sources = [
            include_str!("context.rs"),
            include_str!("device.rs"),
            include_str!("graph.rs"),
            include_str!("vendor.rs"),
            include_str!("stream.rs"),
            include_str!("module.rs"),
            include_str!("blas.rs"),
            include_str!("conditional.rs"),
            include_str!("pool.rs"),
            include_str!("params.rs"),
        ];
        let mut used = std::collections::BTreeSet::new();
        for s in sources {
            for (i, _) in s.match_indices("sys::cu") {
                let rest = &s[i + 5..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if end > 2 {
                    used.insert(rest[..end].to_string());
                }
            }
        }
        let listed: std::collections::BTreeSet<String> = DRIVER_SYMBOLS
            .iter()
            .chain(GUARDED_DRIVER_SYMBOLS)
            .map(|s| s.to_string())
            .collect();
        assert!(
            crate::conditional::CONDITIONAL_DRIVER_SYMBOLS
                .iter()
                .all(|s| GUARDED_DRIVER_SYMBOLS.contains(s)),
            "a conditional-node symbol is not listed as guarded"
        );
        assert!(
            crate::pool::POOL_DRIVER_SYMBOLS
                .iter()
                .all(|s| GUARDED_DRIVER_SYMBOLS.contains(s)),
            "a memory-pool symbol is not listed as guarded"
        );
        assert!(
            GUARDED_DRIVER_SYMBOLS.contains(&crate::params::PARAM_INFO_SYMBOL),
            "the parameter-layout symbol is not listed as guarded"
        );
        assert!(
            GUARDED_DRIVER_SYMBOLS
                .iter()
                .all(|g| !DRIVER_SYMBOLS.contains(g)),
            "a symbol is both required and guarded"
        );
        let missing: Vec<_> = used.difference(&listed).collect();
        assert!(missing.is_empty(), "called but not checked: {missing:?}");
        let unused: Vec<_> = listed.difference(&used).collect();
        assert!(unused.is_empty(), "checked but never called: {unused:?}");
    }

    #[test]
    #[allow(clippy::panic)]
    fn guarded_catches_quietly() {
        let r: std::result::Result<(), String> = guarded("test", || {
            panic!("boom");
        });
        assert_eq!(r, Err("test failed inside cudarc: boom".to_string()));
        assert_eq!(guarded("ok", || 7), Ok(7));
    }
}
