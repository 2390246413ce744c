//! The host backend's CPU BLAS: OpenBLAS or BLIS opened at run time (as the GPU backends open
//! cuBLAS and rocBLAS), through which f32 and f64 gemms run; without one, gemm stays on the
//! built-in `gemm` crate ([`super::gemm`]).
//!
//! Search order ([`Search::candidates`]), through core's shared library search:
//!
//! 1. every entry of `XTHUNK_BLAS_PATH` (`:`-separated): a file is tried as it is, a folder
//!    for each of the names below;
//! 2. `/usr/local/lib` and `/opt/OpenBLAS/lib` (where `make install` of OpenBLAS or BLIS puts
//!    them), then the names through the dynamic loader's own search (`LD_LIBRARY_PATH`, the ld
//!    cache: Debian's `libopenblas0-pthread`, `libblis4`, and `libblas.so.3` / `libcblas.so.3`
//!    when an alternative points them at OpenBLAS or BLIS);
//! 3. the OpenBLAS that numpy's and scipy's wheels bundle (`numpy.libs/libscipy_openblas64_*.so`,
//!    `scipy_openblas64/lib/libscipy_openblas64_.so`) in the Python package folders core's
//!    search knows (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, pyenv, `/usr/local`, `/usr`):
//!    an ILP64 build (64-bit integers) whose symbols are `scipy_cblas_sgemm64_` and the like.
//!
//! A candidate of 1 and 2 needs `cblas_sgemm` and `cblas_dgemm` (the LP64 CBLAS API: 32-bit
//! integers; ILP64 builds such as `libopenblas64.so` are not looked for). Found by the search,
//! it must also be OpenBLAS (`openblas_get_config`) or BLIS
//! (`bli_info_get_version_str`): a reference BLAS is slower than the built-in gemm, so it is
//! refused unless `XTHUNK_BLAS_PATH` names it. `XTHUNK_HOST_BLAS=off` (or `0`, `none`,
//! `builtin`) skips the search. The choice is made once per process and logged once.
//!
//! Kernel width: a library found runs the gemms unless it says it runs a kernel set without
//! AVX-512 (OpenBLAS's core name, BLIS's configuration: `Haswell`, `zen3`…) on a CPU with
//! AVX-512, where the built-in gemm crate runs its AVX-512 kernels: then the built-in gemm
//! runs them, split over the CPU workers the same way ([`super::gemm`]). On a 2-core AMD EPYC
//! (Zen 5, full-width AVX-512) whose environment pins OpenBLAS 0.3.21 to its Haswell kernels
//! (`OPENBLAS_CORETYPE=Haswell`), one thread did an f32 256³ gemm in 268 µs through OpenBLAS,
//! 143 µs through OpenBLAS's SkylakeX kernels and 131 µs through the built-in gemm.
//! `XTHUNK_HOST_BLAS=on` (or `1`, `yes`, `blas`) keeps the library whatever its kernels.
//!
//! Threads: unless the user sets the library's threads (`OPENBLAS_NUM_THREADS`,
//! `GOTO_NUM_THREADS`, `BLIS_NUM_THREADS`, `OMP_NUM_THREADS`), the system OpenBLAS and BLIS are
//! set to one thread and xthunk splits each large gemm into row or column panels run on its
//! CPU worker pool ([`super::cpu::program::parallel`]), the threads that run the generated
//! kernels: one set of threads, idle ones asleep. (OpenBLAS's own threads spin in
//! `sched_yield` after each gemm, which took a third of the CPU time of a transformer step on a
//! 2-core machine from the kernels beside it.) With a thread variable set, the library runs
//! each gemm on its own threads as told. numpy's bundled OpenBLAS is left as it is (setting its
//! threads would change numpy's in the same process). Concurrent gemms of several streams or
//! devices call the library from several threads, which OpenBLAS's threaded builds and BLIS
//! allow.

use crate::backend::dylib::{Loaded, Loader, Probe, Version, symbol_table};
use crate::backend::search::{self, split_paths};
use std::ffi::{CStr, c_char, c_int, c_longlong};
use std::path::PathBuf;
use std::sync::OnceLock;

/// `cblas.h`'s `CblasRowMajor`.
pub(crate) const CBLAS_ROW_MAJOR: c_int = 101;
/// `CblasNoTrans`.
pub(crate) const CBLAS_NO_TRANS: c_int = 111;
/// `CblasTrans`.
pub(crate) const CBLAS_TRANS: c_int = 112;

/// `void cblas_?gemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)`
/// on `T` (`float` for `cblas_sgemm`, `double` for `cblas_dgemm`; the enums are `int`-sized)
/// with sizes of type `I` (`blasint`: `int` in LP64 builds, `int64_t` in ILP64 ones).
pub(crate) type CblasGemm<T, I> =
    unsafe extern "C" fn(c_int, c_int, c_int, I, I, I, T, *const T, I, *const T, I, T, *mut T, I);
/// The LP64 `cblas_?gemm`.
pub(crate) type GemmFn<T> = CblasGemm<T, c_int>;
/// The ILP64 `scipy_cblas_?gemm64_` of numpy's bundled OpenBLAS.
pub(crate) type Gemm64Fn<T> = CblasGemm<T, i64>;
/// `char *openblas_get_config(void)`, `char *bli_info_get_version_str(void)`.
type StrFn = unsafe extern "C" fn() -> *const c_char;
/// `int openblas_get_num_threads(void)`.
type GetIntFn = unsafe extern "C" fn() -> c_int;
/// `dim_t bli_thread_get_num_threads(void)` (`dim_t` is a 64-bit integer).
type GetDimFn = unsafe extern "C" fn() -> c_longlong;
/// `void bli_thread_set_num_threads(dim_t)`.
type SetDimFn = unsafe extern "C" fn(c_longlong);
/// `void openblas_set_num_threads(int)`.
type SetIntFn = unsafe extern "C" fn(c_int);
/// BLIS's `arch_t bli_arch_query_id(void)` (`arch_t` is a C enum: `int`-sized).
type ArchIdFn = unsafe extern "C" fn() -> c_int;
/// BLIS's `const char* bli_arch_string(arch_t)`.
type ArchStrFn = unsafe extern "C" fn(c_int) -> *const c_char;

symbol_table! {
    /// The CBLAS gemms, and what tells OpenBLAS and BLIS apart and sets their threads.
    pub(crate) struct CblasApi {
        required {
            cblas_sgemm: GemmFn<f32>,
            cblas_dgemm: GemmFn<f64>,
        }
        optional {
            openblas_get_config: StrFn,
            openblas_get_num_threads: GetIntFn,
            openblas_set_num_threads: SetIntFn,
            openblas_get_corename: StrFn,
            bli_info_get_version_str: StrFn,
            bli_arch_query_id: ArchIdFn,
            bli_arch_string: ArchStrFn,
            bli_thread_get_num_threads: GetDimFn,
            bli_thread_set_num_threads: SetDimFn,
        }
    }
}

symbol_table! {
    /// numpy's and scipy's bundled OpenBLAS (`scipy_openblas64`): ILP64, every symbol
    /// prefixed `scipy_` and suffixed `64_`.
    pub(crate) struct Scipy64Api {
        required {
            scipy_cblas_sgemm64_: Gemm64Fn<f32>,
            scipy_cblas_dgemm64_: Gemm64Fn<f64>,
        }
        optional {
            scipy_openblas_get_config64_: StrFn,
            scipy_openblas_get_num_threads64_: GetIntFn,
            scipy_openblas_get_corename64_: StrFn,
        }
    }
}

/// The table a CPU BLAS was bound through.
pub(crate) enum Api {
    /// The standard LP64 CBLAS (OpenBLAS, BLIS, another one named by the override).
    Lp64(CblasApi),
    /// numpy's bundled ILP64 OpenBLAS.
    Scipy64(Scipy64Api),
}

/// Which library a table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavour {
    OpenBlas,
    Blis,
    /// Another CBLAS, named by `XTHUNK_BLAS_PATH`.
    Other,
}

/// The sonames tried, in order of preference.
pub(crate) const NAMES: [&str; 7] = [
    "libopenblas.so.0",
    "libopenblas.so",
    "libblis.so.4",
    "libblis.so",
    "libblas.so.3",
    "libcblas.so.3",
    "libblas.so",
];

/// Folders searched after the override, before the dynamic loader's search.
const SYSTEM_DIRS: [&str; 2] = ["/usr/local/lib", "/opt/OpenBLAS/lib"];

/// A loaded CPU BLAS.
pub(crate) struct CpuBlas {
    pub(crate) api: Api,
    pub(crate) flavour: Flavour,
    /// The file loaded (where the dynamic loader found it, for a bare name).
    pub(crate) path: PathBuf,
    pub(crate) version: Option<Version>,
    /// The threads a gemm runs on, when the library says.
    pub(crate) threads: Option<u64>,
    /// The kernel set the library chose for this CPU, when it says (OpenBLAS's core name,
    /// `Haswell`, `SkylakeX`…; BLIS's configuration, `haswell`, `skx`, `zen4`…).
    pub(crate) kernels: Option<String>,
    /// Set when xthunk splits large gemms over its CPU workers itself (the library set to one
    /// thread by [`take_over`](Self::take_over), rather than left to its own threads): the
    /// library's thread-count setter, also for the very large gemms it runs on its own
    /// threads ([`super::gemm`]).
    pub(crate) set_threads: Option<SetThreads>,
}

/// A library's thread-count setter.
#[derive(Clone, Copy)]
pub(crate) enum SetThreads {
    OpenBlas(SetIntFn),
    Blis(SetDimFn),
}

impl SetThreads {
    /// # Safety
    /// The library's global thread count: no call of the library may be partitioning its
    /// work meanwhile (callers serialize the calls that change it).
    pub(crate) unsafe fn set(self, n: usize) {
        // SAFETY: the caller's contract; both take any positive count.
        unsafe {
            match self {
                SetThreads::OpenBlas(f) => f(c_int::try_from(n).unwrap_or(c_int::MAX).max(1)),
                SetThreads::Blis(f) => f(c_longlong::try_from(n).unwrap_or(c_longlong::MAX).max(1)),
            }
        }
    }
}

impl CpuBlas {
    /// Whether xthunk splits large gemms over its CPU workers (see `set_threads`).
    pub(crate) fn splits(&self) -> bool {
        self.set_threads.is_some()
    }

    /// `OpenBLAS 0.3.21 (/usr/lib/…/libopenblas.so.0, 2 threads)`.
    pub(crate) fn describe(&self) -> String {
        self.describe_with(true)
    }

    /// [`describe`](Self::describe), without the threads when `threads` is false.
    fn describe_with(&self, show_threads: bool) -> String {
        let name = match self.flavour {
            Flavour::OpenBlas => "OpenBLAS",
            Flavour::Blis => "BLIS",
            Flavour::Other => "CBLAS",
        };
        let version = self.version.map(|v| format!(" {v}")).unwrap_or_default();
        let mut threads = self
            .threads
            .filter(|_| show_threads)
            .map(|t| format!(", {t} thread{}", if t == 1 { "" } else { "s" }))
            .unwrap_or_default();
        if show_threads && self.splits() {
            threads.push_str(&format!(
                ", large gemms split over xthunk's {} CPU workers",
                super::cpu::program::workers()
            ));
        }
        let ilp64 = match self.api {
            Api::Scipy64(_) => " ILP64",
            Api::Lp64(_) => "",
        };
        let kernels = self
            .kernels
            .as_deref()
            .map(|k| format!(", {k} kernels"))
            .unwrap_or_default();
        format!(
            "{name}{version}{ilp64} ({}{kernels}{threads})",
            self.path.display()
        )
    }

    /// Makes the library ours to run gemms on: unless the user set its threads
    /// ([`THREAD_VARS`]), it is set to one thread, and xthunk splits large gemms over its CPU
    /// workers (`gemm.rs`). OpenBLAS's own threads spin (`sched_yield`) between gemms, taking
    /// the CPUs from the kernels running beside them (a third of the transformer step's CPU
    /// time on a 2-core machine), and BLIS is single-threaded by default. Only done once the
    /// library is chosen: one that is found but not used keeps its threads (numpy may share
    /// a system OpenBLAS in the same process).
    pub(crate) fn take_over(&mut self) {
        if let Some(set) = self.set_threads {
            // SAFETY: the library's global thread count, set once before any gemm of ours
            // (this is a library loaded by us, not numpy's bundled copy).
            unsafe { set.set(1) };
            self.threads = Some(1);
        }
    }

    /// Whether the library's kernels are known to leave AVX-512 unused: a kernel set it names
    /// ([`kernels`](Self::kernels)) that is one of its AVX2-or-narrower x86 sets. `None`
    /// when it does not say, or names a set not listed here (a newer one may be wider).
    pub(crate) fn kernels_lack_avx512(&self) -> Option<bool> {
        let k = self.kernels.as_deref()?.trim().to_ascii_lowercase();
        const WIDE: [&str; 6] = [
            "skylakex",
            "cooperlake",
            "sapphirerapids",
            "skx",
            "knl",
            "zen4",
        ];
        const NARROW: [&str; 20] = [
            "haswell",
            "zen",
            "zen2",
            "zen3",
            "sandybridge",
            "nehalem",
            "prescott",
            "core2",
            "penryn",
            "dunnington",
            "atom",
            "opteron",
            "barcelona",
            "bobcat",
            "bulldozer",
            "piledriver",
            "steamroller",
            "excavator",
            "nano",
            "generic",
        ];
        if WIDE.contains(&k.as_str()) || k.starts_with("zen5") {
            Some(false)
        } else if NARROW.contains(&k.as_str()) {
            Some(true)
        } else {
            None
        }
    }
}

/// The gemm the host backend uses: a CPU BLAS, or the built-in one and why.
pub(crate) enum Choice {
    Blas(CpuBlas),
    Builtin(Builtin),
}

/// Why the built-in `gemm` crate runs the host's gemms.
#[derive(Debug)]
pub(crate) enum Builtin {
    /// `XTHUNK_HOST_BLAS` (its value) turned the CPU BLAS off.
    Forced(String),
    /// No OpenBLAS or BLIS was found: the places tried.
    NotFound(String),
    /// A CPU BLAS was found, but it runs kernels without AVX-512 on a CPU that has it, where
    /// the built-in gemm crate's AVX-512 kernels are wider: the library, described, and its
    /// kernel set (on a 2-core AMD EPYC with AVX-512, OpenBLAS 0.3.21 told to run its
    /// Haswell kernels by `OPENBLAS_CORETYPE` took 268 µs for an f32 256³ gemm on one thread,
    /// the built-in gemm 131 µs).
    /// `note`: why the library runs those kernels, when known (`OPENBLAS_CORETYPE`).
    Narrower {
        blas: String,
        kernels: String,
        note: String,
    },
}

impl Choice {
    pub(crate) fn blas(&self) -> Option<&CpuBlas> {
        match self {
            Choice::Blas(b) => Some(b),
            Choice::Builtin(_) => None,
        }
    }

    /// One line for `xthunk devices`: `OpenBLAS 0.3.21 (…)`, `built-in gemm crate (…)`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Choice::Blas(b) => b.describe(),
            Choice::Builtin(Builtin::Forced(_)) => {
                "built-in gemm crate (XTHUNK_HOST_BLAS turns the CPU BLAS off)".into()
            }
            Choice::Builtin(Builtin::NotFound(_)) => {
                "built-in gemm crate (no OpenBLAS or BLIS found; the places tried are logged \
                 at info level)"
                    .into()
            }
            Choice::Builtin(Builtin::Narrower {
                blas,
                kernels,
                note,
            }) => format!(
                "built-in gemm crate, AVX-512 kernels (the CPU BLAS found, {blas}, runs its \
                 {kernels} kernels without AVX-512{note}; XTHUNK_HOST_BLAS=on uses it)"
            ),
        }
    }
}

/// Where to look, from the environment ([`Search::from_env`]) or given (tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Search {
    /// `XTHUNK_BLAS_PATH`'s entries: files and folders.
    pub(crate) override_paths: Vec<PathBuf>,
    /// Folders tried after the override.
    pub(crate) dirs: Vec<PathBuf>,
    /// Whether to finish with the dynamic loader's search by name.
    pub(crate) system_search: bool,
    /// Python package folders whose wheels may bundle numpy's OpenBLAS.
    pub(crate) python_dirs: Vec<PathBuf>,
}

impl Search {
    pub(crate) fn from_env() -> Self {
        Search {
            override_paths: std::env::var("XTHUNK_BLAS_PATH")
                .map(|v| split_paths(&v))
                .unwrap_or_default(),
            dirs: SYSTEM_DIRS.iter().map(PathBuf::from).collect(),
            system_search: true,
            python_dirs: search::installed_site_packages(search::env_path, true),
        }
    }

    /// The wheel libraries of numpy's bundled OpenBLAS under the Python folders.
    pub(crate) fn wheel_candidates(&self) -> Vec<PathBuf> {
        let mut out = vec![];
        for py in &self.python_dirs {
            let libs = py.join("numpy.libs");
            if let Ok(rd) = std::fs::read_dir(&libs) {
                let mut found: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().is_some_and(|n| {
                            let n = n.to_string_lossy();
                            n.starts_with("libscipy_openblas64_") && n.contains(".so")
                        })
                    })
                    .collect();
                found.sort();
                out.extend(found);
            }
            out.push(py.join("scipy_openblas64/lib/libscipy_openblas64_.so"));
        }
        search::dedup_paths(&mut out);
        out
    }

    /// The override's candidates (a file as it is, a folder joined with each name), then the
    /// search's.
    pub(crate) fn candidates(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut first = vec![];
        for p in &self.override_paths {
            if p.is_dir() {
                first.extend(NAMES.iter().map(|n| p.join(n)));
            } else {
                first.push(p.clone());
            }
        }
        search::dedup_paths(&mut first);
        let rest = search::candidates(&self.dirs, &NAMES, self.system_search);
        (first, rest)
    }

    /// Loads the first usable BLAS: any CBLAS among the override's candidates, OpenBLAS or
    /// BLIS among the others. The error lists every place tried.
    pub(crate) fn load(&self) -> Result<CpuBlas, String> {
        let (first, rest) = self.candidates();
        let loader = Loader::new("CPU BLAS (OpenBLAS or BLIS)");
        let mut tried = vec![];
        if !first.is_empty() {
            match loader.load(&first, |t: &CblasApi| Ok(probe(t))) {
                Ok(l) => return Ok(finish(l)),
                Err(e) => tried.extend(e.tried),
            }
        }
        let strict = |t: &CblasApi| {
            let p = probe(t);
            if p.extra == Flavour::Other {
                Err(
                    "a CBLAS that is neither OpenBLAS nor BLIS (name it in XTHUNK_BLAS_PATH \
                     to use it)"
                        .to_string(),
                )
            } else {
                Ok(p)
            }
        };
        match loader.load(&rest, strict) {
            Ok(l) => return Ok(finish(l)),
            Err(e) => tried.extend(e.tried),
        }
        let wheels = self.wheel_candidates();
        match loader.load(&wheels, |t: &Scipy64Api| Ok(probe64(t))) {
            Ok(l) => Ok(finish64(l)),
            Err(mut e) => {
                tried.append(&mut e.tried);
                e.tried = tried;
                Err(e.describe())
            }
        }
    }
}

/// A C string returned by the library, if any.
///
/// # Safety
/// `f` must return NULL or a NUL-terminated string that lives as long as the library.
unsafe fn c_string(f: Option<StrFn>) -> Option<String> {
    let f = f?;
    // SAFETY: the caller's contract.
    unsafe { owned(f()) }
}

/// The string at `p`, if not NULL.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
unsafe fn owned(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: not NULL, NUL-terminated (the caller's contract).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Which library, and its version (`OpenBLAS 0.3.21 DYNAMIC_ARCH …`, BLIS's `0.9.0`).
fn probe(t: &CblasApi) -> Probe<Flavour> {
    // SAFETY: both return a pointer to a static string of the library (or NULL).
    let (config, blis) = unsafe {
        (
            c_string(t.openblas_get_config),
            c_string(t.bli_info_get_version_str),
        )
    };
    if let Some(c) = config {
        let v = c
            .trim()
            .strip_prefix("OpenBLAS")
            .and_then(Version::parse_leading);
        Probe::with(v, Flavour::OpenBlas)
    } else if let Some(v) = blis {
        Probe::with(Version::parse_leading(&v), Flavour::Blis)
    } else {
        Probe::with(None, Flavour::Other)
    }
}

/// The version of numpy's OpenBLAS (`OpenBLAS 0.3.31.188.0 USE64BITINT …`).
fn probe64(t: &Scipy64Api) -> Probe<Flavour> {
    // SAFETY: returns a pointer to a static string of the library (or NULL).
    let config = unsafe { c_string(t.scipy_openblas_get_config64_) };
    let v = config
        .as_deref()
        .and_then(|c| c.trim().strip_prefix("OpenBLAS"))
        .and_then(Version::parse_leading);
    Probe::with(v, Flavour::OpenBlas)
}

/// numpy's OpenBLAS, loaded.
fn finish64(l: Loaded<Scipy64Api, Flavour>) -> CpuBlas {
    // SAFETY: a plain getter of the library's thread count.
    let threads = unsafe {
        l.table
            .scipy_openblas_get_num_threads64_
            .map(|f| f() as i64)
    };
    // SAFETY: returns a pointer to a static string of the library (or NULL).
    let kernels = unsafe { c_string(l.table.scipy_openblas_get_corename64_) };
    cpu_blas(l, threads, kernels, Api::Scipy64)
}

/// A loaded table as a [`CpuBlas`] running gemms on `threads` threads with the kernel set
/// `kernels` (when known).
fn cpu_blas<T>(
    l: Loaded<T, Flavour>,
    threads: Option<i64>,
    kernels: Option<String>,
    api: fn(T) -> Api,
) -> CpuBlas {
    CpuBlas {
        flavour: l.extra,
        path: l.path,
        version: l.version,
        threads: threads
            .and_then(|n| u64::try_from(n).ok())
            .map(|n| n.max(1)),
        kernels: kernels
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty()),
        api: api(l.table),
        set_threads: None,
    }
}

/// The environment variables through which a user sets a library's threads: when one is
/// set, the library keeps its own threading.
const THREAD_VARS: [&str; 4] = [
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "OMP_NUM_THREADS",
];

/// The loaded library, with its thread setter unless the user set its threads
/// ([`CpuBlas::take_over`] uses it once the library is chosen).
fn finish(l: Loaded<CblasApi, Flavour>) -> CpuBlas {
    let t = &l.table;
    let user_threads = THREAD_VARS.iter().any(|v| std::env::var_os(v).is_some());
    let setter = match l.extra {
        Flavour::OpenBlas => t.openblas_set_num_threads.map(SetThreads::OpenBlas),
        Flavour::Blis => t.bli_thread_set_num_threads.map(SetThreads::Blis),
        Flavour::Other => None,
    };
    let setter = setter.filter(|_| !user_threads);
    // SAFETY: plain getters of the library's thread count.
    let threads = unsafe {
        match l.extra {
            Flavour::OpenBlas => t.openblas_get_num_threads.map(|f| f() as i64),
            Flavour::Blis => t.bli_thread_get_num_threads.map(|f| f()),
            Flavour::Other => None,
        }
    };
    // SAFETY: OpenBLAS's core name is a static string (or NULL); BLIS's architecture id is
    // a plain getter, and its name for an id it returned is a static string (or NULL).
    let kernels = unsafe {
        match (l.extra, t.bli_arch_query_id, t.bli_arch_string) {
            (Flavour::OpenBlas, ..) => c_string(t.openblas_get_corename),
            (Flavour::Blis, Some(id), Some(name)) => owned(name(id())),
            _ => None,
        }
    };
    let mut b = cpu_blas(l, threads, kernels, Api::Lp64);
    b.set_threads = setter;
    b
}

/// True when `XTHUNK_HOST_BLAS`'s value turns the CPU BLAS off.
pub(crate) fn forced_off(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "off" | "0" | "no" | "none" | "false" | "builtin" | "built-in"
        )
    })
}

/// True when `XTHUNK_HOST_BLAS`'s value asks for the CPU BLAS whatever its kernels.
pub(crate) fn forced_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "on" | "1" | "yes" | "true" | "blas"
        )
    })
}

/// ` as OPENBLAS_CORETYPE=Haswell asks`, when the user set the variable that pins OpenBLAS's
/// kernels.
fn coretype_note() -> String {
    std::env::var("OPENBLAS_CORETYPE")
        .map(|v| format!(", as OPENBLAS_CORETYPE={v} asks"))
        .unwrap_or_default()
}

/// Whether this CPU runs the built-in gemm crate's AVX-512 kernels (the crate's own test).
pub(crate) fn builtin_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The choice for `XTHUNK_HOST_BLAS`'s value `setting`, a search, and whether the built-in
/// gemm runs AVX-512 kernels here (`wide_builtin`). Unless the setting says `off` or `on`,
/// a BLAS found runs the gemms, except where its kernels are known to lack AVX-512 and the
/// built-in gemm's have it.
pub(crate) fn choose(setting: Option<&str>, search: &Search, wide_builtin: bool) -> Choice {
    if let Some(v) = setting.filter(|v| forced_off(Some(v))) {
        return Choice::Builtin(Builtin::Forced(format!("XTHUNK_HOST_BLAS={v}")));
    }
    decide(setting, search.load(), wide_builtin)
}

/// [`choose`] once the search is done (`found`).
pub(crate) fn decide(
    setting: Option<&str>,
    found: Result<CpuBlas, String>,
    wide_builtin: bool,
) -> Choice {
    match found {
        Ok(b) if !forced_on(setting) && wide_builtin && b.kernels_lack_avx512() == Some(true) => {
            Choice::Builtin(Builtin::Narrower {
                kernels: b.kernels.clone().unwrap_or_default(),
                blas: b.describe_with(false),
                note: if b.flavour == Flavour::OpenBlas {
                    coretype_note()
                } else {
                    String::new()
                },
            })
        }
        Ok(mut b) => {
            b.take_over();
            Choice::Blas(b)
        }
        Err(why) => Choice::Builtin(Builtin::NotFound(why)),
    }
}

/// The process's choice, made (and logged) on first use.
pub(crate) fn choice() -> &'static Choice {
    static CHOICE: OnceLock<Choice> = OnceLock::new();
    CHOICE.get_or_init(|| {
        let setting = std::env::var("XTHUNK_HOST_BLAS").ok();
        let c = choose(
            setting.as_deref(),
            &Search::from_env(),
            builtin_has_avx512(),
        );
        match &c {
            Choice::Blas(b) => tracing::info!("host gemm (f32, f64): {}", b.describe()),
            Choice::Builtin(Builtin::Forced(why) | Builtin::NotFound(why)) => {
                tracing::info!("host gemm: the built-in gemm crate, no CPU BLAS: {why}")
            }
            Choice::Builtin(Builtin::Narrower { .. }) => {
                tracing::info!("host gemm (f32, f64): {}", c.describe())
            }
        }
        c
    })
}
