//! Finding and opening NCCL or RCCL, and the one symbol table both are bound through.
//!
//! Nothing is linked at build time: the library is opened with `dlopen` (through
//! `libloading`) the first time it is asked for, and a machine without it still runs
//! everything but that backend's collectives.
//!
//! **NCCL** (`libnccl.so.2`, then `libnccl.so`), search order:
//!
//! 1. every folder of `XTHUNK_NCCL_PATH`, then of `XTHUNK_CUDA_PATH` (`:`-separated);
//! 2. `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`, `/usr/local/cuda/lib64`;
//! 3. `nvidia/nccl/lib` (the PyPI wheel `nvidia-nccl-cu12`) under every Python package folder:
//!    each entry of `XTHUNK_PIP_PREFIX` (`:`-separated; default `$HOME/.cache/xthunk/pip`,
//!    where the test setup installs the wheel) and the `lib/python3*/{site,dist}-packages`
//!    below it, `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `/usr/local` and `/usr`;
//! 4. the names through the dynamic loader's own search (`LD_LIBRARY_PATH`, the ld cache).
//!
//! Steps 2 to 4 are skipped when `XTHUNK_NCCL_NO_DEFAULT_SEARCH` is set (to anything but `0`
//! or the empty string).
//!
//! **RCCL** (`librccl.so.1`, then `librccl.so`), search order: every folder of
//! `XTHUNK_ROCM_PATH`, `$ROCM_PATH/lib`, `/opt/rocm/lib`, then by name; all but the first are
//! skipped when `XTHUNK_ROCM_NO_DEFAULT_SEARCH` is set (the ROCm backend's own switch).
//!
//! The first candidate that opens, has every required symbol and is at least
//! [`crate::MIN_VERSION`] wins. When none does, the error is
//! `Unavailable { backend: "nccl" | "rccl", reason }` with every path tried and why it failed.
//!
//! The table is declared with core's one symbol-table mechanism
//! ([`xthunk_core::backend::dylib`]): required symbols (a library lacking one is skipped,
//! naming what it lacks) and optional ones (`None` when absent, and `None` below the version
//! that introduced them even where the library exports them). A library that was bound is
//! never unloaded: NCCL starts threads (the bootstrap root of `ncclGetUniqueId`, proxies) that
//! would run unmapped code.

use crate::result::describe_result;
use crate::sys;
use crate::version::{
    BF16_SINCE, CONFIG_SINCE, LAST_ERROR_SINCE, MEM_ALLOC_SINCE, MIN_VERSION, NcclVersion,
    SCALABLE_SINCE, SPLIT_SINCE, WINDOW_SINCE,
};
use std::ffi::{CStr, c_int};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xthunk_core::backend::dylib::{Loader, OptionalSymbol, Probe, SymbolTable, symbol_table};
use xthunk_core::backend::search::{
    self, dedup_paths, describe_attempts, installed_site_packages, site_packages_under, split_paths,
};
use xthunk_core::{Error, Result};

/// Which library: NCCL (NVIDIA) or RCCL (AMD). Both are bound through the same table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    Nccl,
    Rccl,
}

impl Flavor {
    /// `nccl` or `rccl`: the `backend` of every error about this library.
    pub const fn name(self) -> &'static str {
        match self {
            Flavor::Nccl => "nccl",
            Flavor::Rccl => "rccl",
        }
    }

    /// File names, best first.
    pub const fn library_names(self) -> &'static [&'static str] {
        match self {
            Flavor::Nccl => &["libnccl.so.2", "libnccl.so"],
            Flavor::Rccl => &["librccl.so.1", "librccl.so"],
        }
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::Nccl => "NCCL",
            Flavor::Rccl => "RCCL",
        })
    }
}

/// Where to look for the library. [`SearchConfig::from_env`] reads the environment; tests
/// build one with [`SearchConfig::only`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// Folders searched first, in order (`XTHUNK_NCCL_PATH` and `XTHUNK_CUDA_PATH`, or
    /// `XTHUNK_ROCM_PATH`).
    pub override_dirs: Vec<PathBuf>,
    /// Installation library folders (`$CUDA_HOME/lib64`, …, or `$ROCM_PATH/lib`, …).
    pub install_dirs: Vec<PathBuf>,
    /// Python package folders; `nvidia/nccl/lib` below each is searched (NCCL only).
    pub python_dirs: Vec<PathBuf>,
    /// Whether the names are finally given to the dynamic loader's own search.
    pub by_name: bool,
}

/// The wheel's library folder below a Python package folder.
const NCCL_WHEEL_SUBDIR: &str = "nvidia/nccl/lib";

impl SearchConfig {
    /// The search described in the [module documentation](self), from the environment.
    pub fn from_env(flavor: Flavor) -> Self {
        Self::from_vars(flavor, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// The search for these variable values (`var(name)`); Python folders that exist on this
    /// machine are found by listing them.
    pub fn from_vars(flavor: Flavor, var: impl Fn(&str) -> Option<String>) -> Self {
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let switched_off = |name: &str| var(name).is_some_and(|v| v != "0");
        let paths = |name: &str| var(name).map(|v| split_paths(&v)).unwrap_or_default();
        let mut cfg = SearchConfig::default();
        match flavor {
            Flavor::Nccl => {
                cfg.override_dirs = paths("XTHUNK_NCCL_PATH");
                cfg.override_dirs.extend(paths("XTHUNK_CUDA_PATH"));
                if switched_off("XTHUNK_NCCL_NO_DEFAULT_SEARCH") {
                    dedup_paths(&mut cfg.override_dirs);
                    return cfg;
                }
                for v in ["CUDA_HOME", "CUDA_PATH"] {
                    if let Some(h) = var(v) {
                        cfg.install_dirs.push(PathBuf::from(h).join("lib64"));
                    }
                }
                cfg.install_dirs
                    .push(PathBuf::from("/usr/local/cuda/lib64"));
                let home = var("HOME").map(PathBuf::from);
                let pip_prefixes = match var("XTHUNK_PIP_PREFIX") {
                    Some(v) => split_paths(&v),
                    None => home
                        .iter()
                        .map(|h| h.join(".cache").join("xthunk").join("pip"))
                        .collect(),
                };
                for p in pip_prefixes {
                    cfg.python_dirs.push(p.clone());
                    cfg.python_dirs.extend(site_packages_under(&p));
                }
                cfg.python_dirs.extend(installed_site_packages(
                    |name| var(name).map(PathBuf::from),
                    false,
                ));
            }
            Flavor::Rccl => {
                cfg.override_dirs = paths("XTHUNK_ROCM_PATH");
                if switched_off("XTHUNK_ROCM_NO_DEFAULT_SEARCH") {
                    dedup_paths(&mut cfg.override_dirs);
                    return cfg;
                }
                if let Some(r) = var("ROCM_PATH") {
                    cfg.install_dirs.push(PathBuf::from(r).join("lib"));
                }
                cfg.install_dirs.push(PathBuf::from("/opt/rocm/lib"));
            }
        }
        cfg.by_name = true;
        dedup_paths(&mut cfg.override_dirs);
        dedup_paths(&mut cfg.install_dirs);
        dedup_paths(&mut cfg.python_dirs);
        cfg
    }

    /// Exactly these folders, nothing else (no dynamic-loader search): for tests, or to pin
    /// one installation.
    pub fn only(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        SearchConfig {
            override_dirs: dirs.into_iter().collect(),
            ..SearchConfig::default()
        }
    }

    /// The folders searched, in order.
    pub fn folders(&self, flavor: Flavor) -> Vec<PathBuf> {
        let mut dirs = self.override_dirs.clone();
        dirs.extend(self.install_dirs.iter().cloned());
        if flavor == Flavor::Nccl {
            dirs.extend(self.python_dirs.iter().map(|p| p.join(NCCL_WHEEL_SUBDIR)));
        }
        dedup_paths(&mut dirs);
        dirs
    }

    /// Every candidate in search order: each name in each folder, then the bare names when
    /// the dynamic loader's search is on.
    pub fn candidates(&self, flavor: Flavor) -> Vec<PathBuf> {
        search::candidates(&self.folders(flavor), flavor.library_names(), self.by_name)
    }
}

symbol_table! {
    /// The NCCL/RCCL API: one table for both libraries. The types are `nccl.h`'s declarations
    /// ([`crate::sys`]).
    pub(crate) struct NcclApi {
        required {
            ncclGetVersion: sys::ncclGetVersion_t,
            ncclGetUniqueId: sys::ncclGetUniqueId_t,
            ncclCommInitRank: sys::ncclCommInitRank_t,
            ncclAllReduce: sys::ncclAllReduce_t,
            ncclAllGather: sys::ncclAllGather_t,
            ncclReduceScatter: sys::ncclReduceScatter_t,
            ncclBroadcast: sys::ncclBroadcast_t,
            ncclSend: sys::ncclSend_t,
            ncclRecv: sys::ncclRecv_t,
            ncclGroupStart: sys::ncclGroupStart_t,
            ncclGroupEnd: sys::ncclGroupEnd_t,
            ncclCommGetAsyncError: sys::ncclCommGetAsyncError_t,
            ncclCommAbort: sys::ncclCommAbort_t,
            ncclCommDestroy: sys::ncclCommDestroy_t,
            ncclGetErrorString: sys::ncclGetErrorString_t,
            ncclCommCount: sys::ncclCommCount_t,
            ncclCommUserRank: sys::ncclCommUserRank_t,
        }
        optional {
            #[since(CONFIG_SINCE.to_version())]
            ncclCommInitRankConfig: sys::ncclCommInitRankConfig_t,
            #[since(CONFIG_SINCE.to_version())]
            ncclCommFinalize: sys::ncclCommFinalize_t,
            #[since(SPLIT_SINCE.to_version())]
            ncclCommSplit: sys::ncclCommSplit_t,
            #[since(LAST_ERROR_SINCE.to_version())]
            ncclGetLastError: sys::ncclGetLastError_t,
            #[since(MEM_ALLOC_SINCE.to_version())]
            ncclMemAlloc: sys::ncclMemAlloc_t,
            #[since(MEM_ALLOC_SINCE.to_version())]
            ncclMemFree: sys::ncclMemFree_t,
            #[since(MEM_ALLOC_SINCE.to_version())]
            ncclCommRegister: sys::ncclCommRegister_t,
            #[since(MEM_ALLOC_SINCE.to_version())]
            ncclCommDeregister: sys::ncclCommDeregister_t,
            #[since(WINDOW_SINCE.to_version())]
            ncclCommWindowRegister: sys::ncclCommWindowRegister_t,
            #[since(WINDOW_SINCE.to_version())]
            ncclCommWindowDeregister: sys::ncclCommWindowDeregister_t,
            #[since(SCALABLE_SINCE.to_version())]
            ncclCommInitRankScalable: sys::ncclCommInitRankScalable_t,
        }
    }
}

/// A loaded NCCL or RCCL: its table, where it came from, and its version. Obtained from
/// [`Nccl::load`] (once per process) or [`Nccl::load_with`]; shared as an `Arc` by every
/// communicator made from it.
pub struct Nccl {
    pub(crate) api: NcclApi,
    flavor: Flavor,
    path: PathBuf,
    version: NcclVersion,
}

impl fmt::Debug for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nccl")
            .field("flavor", &self.flavor)
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

static LOADED_NCCL: parking_lot::Mutex<Option<Arc<Nccl>>> = parking_lot::Mutex::new(None);
static LOADED_RCCL: parking_lot::Mutex<Option<Arc<Nccl>>> = parking_lot::Mutex::new(None);

impl Nccl {
    /// Names of the required symbols of the table.
    pub const REQUIRED_SYMBOLS: &'static [&'static str] = NcclApi::REQUIRED;
    /// The optional symbols, each with the version that introduced it.
    pub const OPTIONAL_SYMBOLS: &'static [OptionalSymbol] = NcclApi::OPTIONAL;

    /// The library, loaded once per process with the environment's search
    /// ([`SearchConfig::from_env`]). A success is kept; a failure is not (a later call
    /// searches again), so it costs a few `stat`s each time.
    pub fn load(flavor: Flavor) -> Result<Arc<Nccl>> {
        let cache = match flavor {
            Flavor::Nccl => &LOADED_NCCL,
            Flavor::Rccl => &LOADED_RCCL,
        };
        let mut slot = cache.lock();
        if let Some(n) = slot.as_ref() {
            return Ok(n.clone());
        }
        let n = Nccl::load_with(flavor, &SearchConfig::from_env(flavor))?;
        *slot = Some(n.clone());
        Ok(n)
    }

    /// Loads the library from the first of `config`'s candidates that opens, has every
    /// required symbol and is recent enough. Not cached: every call searches (the libraries
    /// themselves are opened once by the dynamic loader, which counts references).
    pub fn load_with(flavor: Flavor, config: &SearchConfig) -> Result<Arc<Nccl>> {
        let candidates = config.candidates(flavor);
        let loaded = Loader::new(flavor.to_string())
            .min_version(MIN_VERSION.to_version())
            .load(&candidates, |api: &NcclApi| {
                let v = Nccl::read_version(api)?;
                Ok(Probe::with(Some(v.to_version()), v))
            });
        let tried = match loaded {
            Ok(l) => {
                tracing::info!(
                    library = flavor.name(),
                    path = %l.path.display(),
                    version = %l.extra,
                    "loaded {flavor}"
                );
                return Ok(Arc::new(Nccl {
                    api: l.table,
                    flavor,
                    path: l.path,
                    version: l.extra,
                }));
            }
            Err(e) => e.tried,
        };
        let reason = if candidates.is_empty() {
            format!(
                "no {} found: no folder to search ({})",
                flavor.library_names()[0],
                match flavor {
                    Flavor::Nccl => "set XTHUNK_NCCL_PATH",
                    Flavor::Rccl => "set XTHUNK_ROCM_PATH",
                }
            )
        } else {
            format!(
                "no usable {} found; tried: {}",
                flavor.library_names()[0],
                describe_attempts(&tried)
            )
        };
        tracing::debug!(library = flavor.name(), %reason, "collective library unavailable");
        Err(Error::Unavailable {
            backend: flavor.name().into(),
            reason,
        })
    }

    /// `ncclGetVersion`, decoded; the error refuses the candidate.
    fn read_version(api: &NcclApi) -> std::result::Result<NcclVersion, String> {
        let mut code: c_int = 0;
        // SAFETY: `ncclGetVersion` writes one int through a valid pointer; it needs no GPU and
        // no initialized runtime.
        let rc = unsafe { (api.ncclGetVersion)(&mut code) };
        if rc != sys::ncclSuccess {
            return Err(format!("ncclGetVersion failed: {}", describe_result(rc)));
        }
        NcclVersion::from_code(code)
            .ok_or_else(|| format!("ncclGetVersion returned an unknown version code {code}"))
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The file loaded (resolved through `/proc/self/maps` when found by bare name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version `ncclGetVersion` reported.
    pub fn version(&self) -> NcclVersion {
        self.version
    }

    /// `NCCL 2.32.3 (/path/to/libnccl.so.2)`.
    pub fn describe(&self) -> String {
        format!("{} {} ({})", self.flavor, self.version, self.path.display())
    }

    /// Whether `ncclBfloat16` exists (2.10).
    pub fn supports_bf16(&self) -> bool {
        self.version >= BF16_SINCE
    }

    /// Whether communicators can be configured (`ncclCommInitRankConfig`, 2.14): needed for
    /// non-blocking communicators. (Each optional symbol is `None` below its version: the
    /// table's gates.)
    pub fn supports_config(&self) -> bool {
        self.api.ncclCommInitRankConfig.is_some()
    }

    /// Whether `ncclCommSplit` can be used (2.18).
    pub fn supports_split(&self) -> bool {
        self.api.ncclCommSplit.is_some()
    }

    /// Whether `ncclCommInitRankScalable` can be used (2.23): init through several roots.
    pub fn supports_scalable_init(&self) -> bool {
        self.api.ncclCommInitRankScalable.is_some()
    }

    /// Whether `ncclCommFinalize` can be used (2.14).
    pub fn supports_finalize(&self) -> bool {
        self.api.ncclCommFinalize.is_some()
    }

    /// The library's own message for a result code (`ncclGetErrorString`).
    pub fn error_string(&self, code: sys::ncclResult_t) -> Option<String> {
        // SAFETY: `ncclGetErrorString` returns a pointer to a static string (or null) for any
        // code; it reads no other state.
        let p = unsafe { (self.api.ncclGetErrorString)(code) };
        c_string(p)
    }

    /// The library's description of its last error (`ncclGetLastError`, 2.13), when it has
    /// a non-empty one.
    pub fn last_error(&self) -> Option<String> {
        let f = self.api.ncclGetLastError?;
        // SAFETY: `ncclGetLastError` accepts a null communicator and returns a pointer to a
        // library-owned string (or null), which is copied at once.
        let p = unsafe { f(std::ptr::null_mut()) };
        c_string(p).filter(|s| !s.trim().is_empty())
    }

    /// `ncclGetUniqueId`: the id rank 0 makes and every rank passes to
    /// [`Nccl::init_rank`]. Needs no GPU; on NCCL it starts the bootstrap root (a thread
    /// listening on a socket) that the ranks connect to.
    pub fn unique_id(&self) -> Result<[u8; sys::NCCL_UNIQUE_ID_BYTES]> {
        let mut id = sys::ncclUniqueId {
            internal: [0; sys::NCCL_UNIQUE_ID_BYTES],
        };
        // SAFETY: writes one `ncclUniqueId` (128 bytes, the header's layout) through a valid
        // pointer.
        let rc = unsafe { (self.api.ncclGetUniqueId)(&mut id) };
        self.check("ncclGetUniqueId", rc)?;
        Ok(id.internal.map(|c| c as u8))
    }

    /// `ncclGroupStart`: groups the calls this thread issues until [`Nccl::group_end`]
    /// (groups are per thread, across communicators).
    pub fn group_start(&self) -> Result<()> {
        // SAFETY: takes no arguments; only updates this thread's group depth.
        let rc = unsafe { (self.api.ncclGroupStart)() };
        self.check("ncclGroupStart", rc)
    }

    /// `ncclGroupEnd`. On non-blocking communicators it may return `ncclInProgress`, which is
    /// passed back as `Ok(false)`: wait on the communicators before their next call.
    pub fn group_end(&self) -> Result<bool> {
        // SAFETY: takes no arguments; launches the calls grouped on this thread.
        let rc = unsafe { (self.api.ncclGroupEnd)() };
        if rc == sys::ncclInProgress {
            return Ok(false);
        }
        self.check("ncclGroupEnd", rc).map(|()| true)
    }
}

/// Copies a C string the library owns.
fn c_string(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null pointers from `ncclGetErrorString`/`ncclGetLastError` point to
    // NUL-terminated strings that stay valid at least until the next call on this thread;
    // the bytes are copied at once.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Nccl {
    /// `Ok` for `ncclSuccess`; otherwise an [`Error::Backend`] naming the library, `call`, the
    /// code (name, number, meaning), and the library's own messages.
    pub(crate) fn check(&self, call: &str, rc: sys::ncclResult_t) -> Result<()> {
        if rc == sys::ncclSuccess {
            return Ok(());
        }
        Err(self.error(call, rc))
    }

    /// The error for a failed `call` (see [`Nccl::check`]).
    pub(crate) fn error(&self, call: &str, rc: sys::ncclResult_t) -> Error {
        let mut message = describe_result(rc);
        if let Some(s) = self.error_string(rc) {
            message.push_str(&format!(" [{s}]"));
        }
        if let Some(s) = self.last_error() {
            message.push_str(&format!("; last error: {}", s.trim()));
        }
        Error::backend(self.flavor().name(), call, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn nccl_search_order() {
        let cfg = SearchConfig::from_vars(
            Flavor::Nccl,
            vars(&[
                ("XTHUNK_NCCL_PATH", "/n1:/n2"),
                ("XTHUNK_CUDA_PATH", "/c1"),
                ("CUDA_HOME", "/cuda"),
                ("XTHUNK_PIP_PREFIX", "/pip"),
                ("HOME", "/home/u"),
            ]),
        );
        let folders = cfg.folders(Flavor::Nccl);
        let pos = |p: &str| folders.iter().position(|f| f == Path::new(p));
        let order = [
            pos("/n1"),
            pos("/n2"),
            pos("/c1"),
            pos("/cuda/lib64"),
            pos("/pip/nvidia/nccl/lib"),
        ];
        assert!(order.iter().all(Option::is_some), "{folders:?}");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{folders:?}");
        // An explicit XTHUNK_PIP_PREFIX replaces the default cache folder.
        assert_eq!(pos("/home/u/.cache/xthunk/pip/nvidia/nccl/lib"), None);
        let c = cfg.candidates(Flavor::Nccl);
        assert_eq!(c[0], Path::new("/n1/libnccl.so.2"));
        assert_eq!(c[1], Path::new("/n1/libnccl.so"));
        assert_eq!(
            c.last().map(PathBuf::as_path),
            Some(Path::new("libnccl.so"))
        );
    }

    #[test]
    fn nccl_default_pip_prefix_is_the_cache() {
        let cfg = SearchConfig::from_vars(Flavor::Nccl, vars(&[("HOME", "/home/u")]));
        assert!(
            cfg.folders(Flavor::Nccl)
                .contains(&PathBuf::from("/home/u/.cache/xthunk/pip/nvidia/nccl/lib"))
        );
    }

    #[test]
    fn no_default_search_keeps_only_the_overrides() {
        let cfg = SearchConfig::from_vars(
            Flavor::Nccl,
            vars(&[
                ("XTHUNK_NCCL_PATH", "/n1"),
                ("CUDA_HOME", "/cuda"),
                ("XTHUNK_NCCL_NO_DEFAULT_SEARCH", "1"),
            ]),
        );
        assert_eq!(
            cfg.candidates(Flavor::Nccl),
            vec![
                PathBuf::from("/n1/libnccl.so.2"),
                PathBuf::from("/n1/libnccl.so")
            ]
        );
        let cfg = SearchConfig::from_vars(
            Flavor::Rccl,
            vars(&[
                ("XTHUNK_ROCM_PATH", "/r"),
                ("ROCM_PATH", "/rocm"),
                ("XTHUNK_ROCM_NO_DEFAULT_SEARCH", "yes"),
            ]),
        );
        assert_eq!(cfg.folders(Flavor::Rccl), vec![PathBuf::from("/r")]);
    }

    #[test]
    fn rccl_search_order() {
        let cfg = SearchConfig::from_vars(
            Flavor::Rccl,
            vars(&[
                ("XTHUNK_ROCM_PATH", "/r"),
                ("ROCM_PATH", "/rocm"),
                ("XTHUNK_PIP_PREFIX", "/pip"),
            ]),
        );
        assert_eq!(
            cfg.folders(Flavor::Rccl),
            vec![
                PathBuf::from("/r"),
                PathBuf::from("/rocm/lib"),
                PathBuf::from("/opt/rocm/lib")
            ]
        );
        let c = cfg.candidates(Flavor::Rccl);
        assert_eq!(c[0], Path::new("/r/librccl.so.1"));
        assert_eq!(
            c.last().map(PathBuf::as_path),
            Some(Path::new("librccl.so"))
        );
    }

    #[test]
    fn table_lists_every_symbol_the_brief_names() {
        for s in [
            "ncclGetVersion",
            "ncclGetUniqueId",
            "ncclCommInitRank",
            "ncclAllReduce",
            "ncclAllGather",
            "ncclReduceScatter",
            "ncclBroadcast",
            "ncclSend",
            "ncclRecv",
            "ncclGroupStart",
            "ncclGroupEnd",
            "ncclCommGetAsyncError",
            "ncclCommAbort",
            "ncclCommDestroy",
            "ncclGetErrorString",
            "ncclCommCount",
            "ncclCommUserRank",
        ] {
            assert!(Nccl::REQUIRED_SYMBOLS.contains(&s), "{s}");
        }
        let gated = |name: &str| {
            Nccl::OPTIONAL_SYMBOLS
                .iter()
                .find(|o| o.name == name)
                .and_then(|o| o.since)
        };
        for (s, since) in [
            ("ncclCommInitRankConfig", CONFIG_SINCE),
            ("ncclCommSplit", SPLIT_SINCE),
            ("ncclCommFinalize", CONFIG_SINCE),
            ("ncclGetLastError", LAST_ERROR_SINCE),
        ] {
            assert_eq!(gated(s), Some(since.to_version()), "{s}");
        }
    }
}
