//! The runtime compiler: portable source → AMD GPU code object (HSACO) with hipRTC, behind a
//! disk cache.
//!
//! hipRTC is `libhiprtc.so.*` on ROCm ≥ 6 and part of `libamdhip64` on ROCm 5 (Debian's
//! 5.2): the dedicated library is searched first, then the HIP runtime's own symbols.
//!
//! On ROCm 5.2 a target hipRTC does not know *aborts the process* (a crash inside comgr), so
//! every target is checked against comgr's ISA list (`amd_comgr_get_isa_count` /
//! `amd_comgr_get_isa_name`, names like `amdgcn-amd-amdhsa--gfx90a`) before compiling; comgr
//! is the library hipRTC itself uses (the copy already mapped in the process is preferred).
//!
//! - Targets are validated (`gfx…` with optional `:feature±` suffixes, nothing that could be
//!   read as another compiler option) and checked against comgr's ISA list before hipRTC sees
//!   them: ROCm 5.2's hipRTC aborts the process on a target it does not know.
//! - Options: `--offload-arch=<target>` always, `-O3`, and `-ffp-contract=off` (the portable
//!   kernels follow the host's evaluation order; see `xthunk_core::kernels::portable`).
//! - Every result is checked: an ELF for `EM_AMDGPU` whose `e_flags` mach field is the
//!   target's.
//! - Disk cache: core's one kernel cache ([`KernelCache`]) in
//!   `$XDG_CACHE_HOME/xthunk/kernels/rocm/` (else `~/.cache/xthunk/kernels/rocm/`, beside the
//!   CUDA backend's `kernels/cuda/`), keyed by the SHA-256 of everything that determines the
//!   code object ([`Compiler::cache_key`]: the complete translation unit, the options, the
//!   target, the compiler version: hipRTC, HIP runtime and comgr), verified when read,
//!   written atomically, owner-only. An entry that fails its checks, or is not a code object
//!   for its target, is removed and rebuilt ([`CacheStatus::Rebuilt`]). Images are also kept
//!   in memory for the life of the [`Compiler`] ([`CacheStatus::Memory`]).

use crate::image::{CodeObject, mach_of};
use crate::loader::{
    COMGR_LIBRARY_NAMES, ComgrApi, HIPRTC_LIBRARY_NAMES, Hip, HiprtcApi, LoadError, SearchConfig,
    format_hip_version, mapped_library,
};
use crate::result::{BACKEND, CompileError, comgr_describe, hiprtc_describe};
use crate::sys;
use crate::target::Target;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use xthunk_core::Error;
use xthunk_core::backend::dylib::{Library, Loader, Probe, Version};
use xthunk_core::backend::kernel_cache::{CacheKey, KeyInputs, Lookup};
pub use xthunk_core::backend::kernel_cache::{CacheStatus, KernelCache};
use xthunk_core::backend::search::Attempt;
use xthunk_core::ir::{Module, ModuleImage};
use xthunk_core::kernels::portable;

/// Compiler options for a target (`--offload-arch` always).
pub fn options_for(target: &Target) -> Vec<String> {
    vec![
        format!("--offload-arch={}", target.full),
        "-O3".into(),
        "-ffp-contract=off".into(),
    ]
}

/// Compiler options for a complete translation unit for `target`: [`options_for`], with
/// `-ffast-math -ffp-contract=fast` instead of `-ffp-contract=off` when the unit asks for
/// fast math ([`portable::fast_math`]).
pub fn options_for_unit(target: &Target, source: &str) -> Vec<String> {
    let mut o = options_for(target);
    if portable::fast_math(source) {
        o.retain(|x| x != "-ffp-contract=off");
        o.push("-ffast-math".into());
        o.push("-ffp-contract=fast".into());
    }
    o
}

/// Checks that `image` is an AMD GPU code object for `target`; returns it parsed.
pub fn check_code_object(image: &[u8], target: &Target) -> Result<CodeObject, String> {
    let co = CodeObject::parse(image).map_err(|e| e.to_string())?;
    if let Some(want) = mach_of(&target.base)
        && co.mach() != want
    {
        return Err(format!(
            "e_flags mach is {:#x} ({}), expected {want:#x} ({})",
            co.mach(),
            co.target().unwrap_or("unknown"),
            target.base
        ));
    }
    Ok(co)
}

/// The default disk cache: `$XDG_CACHE_HOME/xthunk/kernels/rocm` or
/// `~/.cache/xthunk/kernels/rocm`; `None` when neither variable is set.
pub fn default_cache() -> Option<KernelCache> {
    KernelCache::default_location(BACKEND)
}

// ---- hipRTC and comgr -------------------------------------------------------------------

/// A loaded hipRTC.
pub(crate) struct Hiprtc {
    pub(crate) api: HiprtcApi,
    /// The library the symbols came from.
    pub(crate) path: PathBuf,
    /// `hiprtcVersion`, e.g. `(9, 0)`.
    pub(crate) version: Option<(i32, i32)>,
}

/// A failed compilation: the status and hipRTC's log.
#[derive(Clone, Debug)]
pub(crate) struct RtcFailure {
    pub(crate) call: &'static str,
    pub(crate) status: String,
    pub(crate) log: String,
}

impl Hiprtc {
    /// Loads hipRTC: `libhiprtc.so*` (searched with `config`, the HIP runtime's folder first),
    /// else the HIP runtime library itself (ROCm 5).
    pub(crate) fn load(
        config: &SearchConfig,
        hip_library: Option<(&Arc<Library>, &Path)>,
    ) -> Result<Hiprtc, LoadError> {
        let sibling = hip_library.and_then(|(_, p)| p.parent());
        let candidates = config.candidates(HIPRTC_LIBRARY_NAMES, sibling);
        let loader = Loader::new("hipRTC");
        let probe = |api: &HiprtcApi| {
            let version = api.hiprtcVersion.and_then(|f| {
                let (mut major, mut minor): (c_int, c_int) = (0, 0);
                // SAFETY: `hiprtcVersion` writes two ints through valid pointers.
                let rc = unsafe { f(&mut major, &mut minor) };
                (rc == sys::HIPRTC_SUCCESS).then_some((major, minor))
            });
            let v = version.map(|(a, b)| Version::new(a.max(0) as u32, b.max(0) as u32, 0));
            Ok(Probe::with(v, version))
        };
        let loaded = match loader.load(&candidates, probe) {
            Ok(loaded) => loaded,
            // ROCm 5: hipRTC is part of the HIP runtime.
            Err(mut e) => match hip_library {
                Some((lib, p)) => match loader.bind(lib, p, probe) {
                    Ok(loaded) => loaded,
                    Err(why) => {
                        e.tried.push(Attempt::new(
                            p.display().to_string(),
                            format!("the HIP runtime: {why}"),
                        ));
                        return Err(e);
                    }
                },
                None => {
                    e.tried.push(Attempt::new(
                        "libamdhip64",
                        "the HIP runtime was not found either",
                    ));
                    return Err(e);
                }
            },
        };
        let (api, path, version) = (loaded.table, loaded.path, loaded.extra);
        tracing::info!(path = %path.display(), ?version, "loaded hipRTC");
        Ok(Hiprtc { api, path, version })
    }

    /// Compiles one translation unit. `Ok` holds the code object and the compiler's log;
    /// `Err` the failing call, its status and the log.
    pub(crate) fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[String],
    ) -> Result<(Vec<u8>, String), RtcFailure> {
        let fail = |call, status: String, log: String| RtcFailure { call, status, log };
        let src = CString::new(source).map_err(|_| {
            fail(
                "hiprtcCreateProgram",
                "the source contains a NUL byte".into(),
                String::new(),
            )
        })?;
        let cname = CString::new(name).unwrap_or_default();
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                fail(
                    "hiprtcCompileProgram",
                    "an option contains a NUL byte".into(),
                    String::new(),
                )
            })?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut raw: sys::hiprtcProgram = std::ptr::null_mut();
        // SAFETY: `src` and `cname` are NUL-terminated and outlive the call; no headers are
        // passed (count 0, null arrays); `raw` receives the new program.
        let rc = unsafe {
            (self.api.hiprtcCreateProgram)(
                &mut raw,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if rc != sys::HIPRTC_SUCCESS || raw.is_null() {
            return Err(fail(
                "hiprtcCreateProgram",
                hiprtc_describe(rc),
                String::new(),
            ));
        }
        let program = Program {
            api: &self.api,
            raw,
        };
        let n = c_int::try_from(opt_ptrs.len()).unwrap_or(c_int::MAX);
        // SAFETY: `program.raw` is a live program; `opt_ptrs` holds `n` NUL-terminated
        // strings that outlive the call.
        let rc = unsafe { (self.api.hiprtcCompileProgram)(program.raw, n, opt_ptrs.as_ptr()) };
        let log = program.log();
        if rc != sys::HIPRTC_SUCCESS {
            return Err(fail("hiprtcCompileProgram", hiprtc_describe(rc), log));
        }
        let mut size = 0usize;
        // SAFETY: writes the code size of a compiled program.
        let rc = unsafe { (self.api.hiprtcGetCodeSize)(program.raw, &mut size) };
        if rc != sys::HIPRTC_SUCCESS {
            return Err(fail("hiprtcGetCodeSize", hiprtc_describe(rc), log));
        }
        if size == 0 {
            return Err(fail(
                "hiprtcGetCodeSize",
                "hipRTC returned an empty code object".into(),
                log,
            ));
        }
        let mut code = vec![0u8; size];
        // SAFETY: `code` has exactly the `size` bytes hipRTC reported for this program.
        let rc = unsafe { (self.api.hiprtcGetCode)(program.raw, code.as_mut_ptr().cast()) };
        if rc != sys::HIPRTC_SUCCESS {
            return Err(fail("hiprtcGetCode", hiprtc_describe(rc), log));
        }
        if !log.trim().is_empty() {
            tracing::debug!(%name, %log, "hipRTC log");
        }
        Ok((code, log))
    }
}

/// A hipRTC program, destroyed on drop.
struct Program<'a> {
    api: &'a HiprtcApi,
    raw: sys::hiprtcProgram,
}

impl Program<'_> {
    /// The compile log (empty when there is none or it cannot be read).
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: writes the log size of a live program.
        let rc = unsafe { (self.api.hiprtcGetProgramLogSize)(self.raw, &mut size) };
        if rc != sys::HIPRTC_SUCCESS || size == 0 {
            return String::new();
        }
        // One more byte than reported, zeroed: the text is NUL-terminated whether or not the
        // library counts the terminator.
        let mut buf = vec![0u8; size.saturating_add(1)];
        // SAFETY: `buf` holds at least the `size` bytes hipRTC reported.
        let rc = unsafe { (self.api.hiprtcGetProgramLog)(self.raw, buf.as_mut_ptr().cast()) };
        if rc != sys::HIPRTC_SUCCESS {
            return format!("(the log could not be read: {})", hiprtc_describe(rc));
        }
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live program created by hiprtcCreateProgram, destroyed once here.
        let rc = unsafe { (self.api.hiprtcDestroyProgram)(&mut self.raw) };
        if rc != sys::HIPRTC_SUCCESS {
            tracing::warn!("hiprtcDestroyProgram: {}", hiprtc_describe(rc));
        }
    }
}

/// comgr's list of ISAs.
pub(crate) struct Comgr {
    pub(crate) path: PathBuf,
    pub(crate) version: Option<(usize, usize)>,
    /// Full ISA names, e.g. `amdgcn-amd-amdhsa--gfx90a` (newer comgr also lists feature
    /// variants such as `amdgcn-amd-amdhsa--gfx90a:xnack+`).
    pub(crate) isa_names: Vec<String>,
}

impl Comgr {
    /// Loads comgr: the copy already mapped into the process (hipRTC's own) first, then the
    /// search.
    pub(crate) fn load(config: &SearchConfig, sibling: Option<&Path>) -> Result<Comgr, LoadError> {
        let mut candidates: Vec<PathBuf> = mapped_library("libamd_comgr").into_iter().collect();
        for c in config.candidates(COMGR_LIBRARY_NAMES, sibling) {
            if !candidates.contains(&c) {
                candidates.push(c);
            }
        }
        let loaded = Loader::new("comgr").load(&candidates, |api: &ComgrApi| {
            let version = api.amd_comgr_get_version.map(|f| {
                let (mut major, mut minor) = (0usize, 0usize);
                // SAFETY: writes two size_t values through valid pointers.
                unsafe { f(&mut major, &mut minor) };
                (major, minor)
            });
            let v = version.map(|(a, b)| {
                Version::new(
                    u32::try_from(a).unwrap_or(u32::MAX),
                    u32::try_from(b).unwrap_or(u32::MAX),
                    0,
                )
            });
            Ok(Probe::with(v, (version, isa_names(api)?)))
        })?;
        let (path, (version, isa_names)) = (loaded.path, loaded.extra);
        tracing::info!(path = %path.display(), ?version, isas = isa_names.len(), "loaded comgr");
        Ok(Comgr {
            path,
            version,
            isa_names,
        })
    }

    /// The gfx targets comgr knows, without features (`gfx90a`, `gfx1030`, ...), in its order.
    pub(crate) fn targets(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for n in &self.isa_names {
            let Some(t) = n.strip_prefix("amdgcn-amd-amdhsa--") else {
                continue;
            };
            let base = t.split(':').next().unwrap_or(t).to_string();
            if !out.contains(&base) {
                out.push(base);
            }
        }
        out
    }
}

/// Every ISA name comgr lists.
fn isa_names(api: &ComgrApi) -> Result<Vec<String>, String> {
    let mut count = 0usize;
    // SAFETY: writes one size_t through a valid pointer.
    let rc = unsafe { (api.amd_comgr_get_isa_count)(&mut count) };
    if rc != sys::AMD_COMGR_STATUS_SUCCESS {
        return Err(format!("amd_comgr_get_isa_count: {}", comgr_describe(rc)));
    }
    let mut names = Vec::with_capacity(count.min(1024));
    for i in 0..count.min(4096) {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `i` is below the count comgr reported; comgr stores a pointer to a static
        // NUL-terminated string in `p`.
        let rc = unsafe { (api.amd_comgr_get_isa_name)(i, &mut p) };
        if rc != sys::AMD_COMGR_STATUS_SUCCESS || p.is_null() {
            return Err(format!(
                "amd_comgr_get_isa_name({i}): {}",
                comgr_describe(rc)
            ));
        }
        // SAFETY: `p` is non-null and points to comgr's static NUL-terminated ISA name.
        let name = unsafe { std::ffi::CStr::from_ptr(p) };
        names.push(name.to_string_lossy().into_owned());
    }
    Ok(names)
}

// ---- the compiler -------------------------------------------------------------------------

/// A compiled code object.
#[derive(Clone, Debug)]
pub struct CompileOutput {
    pub target: Target,
    /// The HSACO code object (checked to be one for `target`).
    pub image: Arc<Vec<u8>>,
    /// What the caches did.
    pub cache: CacheStatus,
    /// The disk cache entry's path, when there is a disk cache.
    pub cache_path: Option<PathBuf>,
    /// hipRTC's log (warnings), empty when the image came from a cache.
    pub log: String,
}

/// The disk cache key of a complete translation unit (prelude included) for `target` with
/// the compiler `version` ([`Compiler::version`]): everything that determines the image.
fn cache_key(version: &str, source: &str, target: &Target) -> CacheKey {
    CacheKey::new(&KeyInputs {
        backend: BACKEND,
        compiler: "hipRTC",
        compiler_version: version,
        target: &target.full,
        kind: "hsaco",
        options: &options_for_unit(target, source),
        source,
    })
}

/// hipRTC with comgr's target list and a cache. Cheap to share (`Arc`).
pub struct Compiler {
    rtc: Hiprtc,
    comgr: Comgr,
    /// Kept loaded: on ROCm 5, hipRTC's symbols live in it.
    _hip: Option<Arc<Hip>>,
    version: String,
    cache: Option<KernelCache>,
    memory: Mutex<HashMap<CacheKey, Arc<Vec<u8>>>>,
    compilations: AtomicU64,
}

/// Serializes hipRTC compilations across the whole process: ROCm 5.2's hipRTC is not
/// thread-safe (two `hiprtcCompileProgram` calls at once crash inside it), and every
/// [`Compiler`] (one per backend instance) uses the same library state.
static HIPRTC: Mutex<()> = Mutex::new(());

impl Compiler {
    /// Loads hipRTC and comgr through `config` (the HIP runtime, when found, is used for
    /// hipRTC on ROCm 5 and its folder searched first); `cache` is the disk cache, if any
    /// ([`default_cache`] is the usual one).
    pub fn new(
        config: &SearchConfig,
        cache: Option<KernelCache>,
    ) -> Result<Compiler, CompileError> {
        let hip = Hip::load(config).ok().map(Arc::new);
        Self::with_hip(config, hip, cache)
    }

    pub(crate) fn with_hip(
        config: &SearchConfig,
        hip: Option<Arc<Hip>>,
        cache: Option<KernelCache>,
    ) -> Result<Compiler, CompileError> {
        let hip_lib = hip.as_ref().map(|h| (&h.api.library, h.path.as_path()));
        let rtc =
            Hiprtc::load(config, hip_lib).map_err(|e| CompileError::Unavailable(e.to_string()))?;
        let comgr = Comgr::load(config, rtc.path.parent())
            .map_err(|e| CompileError::Unavailable(format!("cannot check targets: {e}")))?;
        let version = format!(
            "hipRTC {} ({}); HIP runtime {}; comgr {}",
            rtc.version
                .map(|(a, b)| format!("{a}.{b}"))
                .unwrap_or_else(|| "unknown".into()),
            rtc.path.display(),
            hip.as_ref()
                .map(|h| format_hip_version(h.runtime_version))
                .unwrap_or_else(|| "absent".into()),
            comgr
                .version
                .map(|(a, b)| format!("{a}.{b}"))
                .unwrap_or_else(|| "unknown".into()),
        );
        Ok(Compiler {
            rtc,
            comgr,
            _hip: hip,
            version,
            cache,
            memory: Mutex::new(HashMap::new()),
            compilations: AtomicU64::new(0),
        })
    }

    /// hipRTC, HIP runtime and comgr versions (part of every cache key).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The disk cache, if any.
    pub fn cache(&self) -> Option<&KernelCache> {
        self.cache.as_ref()
    }

    /// How many times this compiler called hipRTC (cache hits do not count).
    pub fn compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    /// The gfx targets comgr (and so hipRTC) supports, e.g. `["gfx600", …, "gfx90a", …]`.
    pub fn supported_targets(&self) -> Vec<String> {
        self.comgr.targets()
    }

    /// comgr's full ISA names.
    pub fn isa_names(&self) -> &[String] {
        &self.comgr.isa_names
    }

    /// Validates `target` and checks comgr lists it.
    pub fn check_target(&self, target: &str) -> Result<Target, CompileError> {
        let t = Target::parse(target)?;
        let known = self.supported_targets();
        if !known.contains(&t.base) {
            return Err(CompileError::UnsupportedTarget {
                target: target.to_string(),
                comgr: format!("at {}", self.comgr.path.display()),
                known: known.join(", "),
            });
        }
        Ok(t)
    }

    /// The disk cache key of a complete translation unit for `target` with this compiler.
    pub fn cache_key(&self, source: &str, target: &Target) -> CacheKey {
        cache_key(&self.version, source, target)
    }

    /// Compiles a complete translation unit (e.g. [`portable::standard_source`] or
    /// [`portable::with_prelude`]) for `target`, through the caches.
    pub fn compile(&self, source: &str, target: &str) -> Result<CompileOutput, CompileError> {
        let t = self.check_target(target)?;
        let key = self.cache_key(source, &t);
        let cache_path = self.cache.as_ref().map(|c| c.path_for(&key));
        let from_cache = |image, cache| CompileOutput {
            target: t.clone(),
            image,
            cache,
            cache_path: cache_path.clone(),
            log: String::new(),
        };
        if let Some(img) = self.memory.lock().get(&key).cloned() {
            return Ok(from_cache(img, CacheStatus::Memory));
        }
        let status = match self.cache.as_ref().map(|c| (c, c.get(&key))) {
            None => CacheStatus::Disabled,
            Some((_, Lookup::Miss)) => CacheStatus::Miss,
            Some((_, Lookup::Corrupt(_))) => CacheStatus::Rebuilt,
            Some((cache, Lookup::Hit(img))) => match check_code_object(&img, &t) {
                Ok(_) => {
                    tracing::debug!(target = %t.full, path = %cache.path_for(&key).display(), "hsaco cache hit");
                    let img = Arc::new(img);
                    self.memory.lock().insert(key, img.clone());
                    return Ok(from_cache(img, CacheStatus::Hit));
                }
                Err(why) => {
                    tracing::warn!("discarding a cached code object: {why}");
                    cache.remove(&key);
                    CacheStatus::Rebuilt
                }
            },
        };
        let started = std::time::Instant::now();
        let (img, log) = {
            let _serial = HIPRTC.lock();
            self.compilations.fetch_add(1, Ordering::Relaxed);
            self.rtc
                .compile(source, "xthunk_portable.hip", &options_for_unit(&t, source))
                .map_err(|f| CompileError::Compilation {
                    module: portable::module_of(source)
                        .unwrap_or("portable source")
                        .into(),
                    call: f.call.into(),
                    status: f.status,
                    target: t.full.clone(),
                    log: f.log,
                })?
        };
        check_code_object(&img, &t).map_err(|reason| CompileError::BadOutput {
            target: t.full.clone(),
            reason,
        })?;
        if !log.trim().is_empty() {
            tracing::warn!(
                module = portable::module_of(source).unwrap_or("portable source"),
                "hipRTC warnings for {}:\n{log}",
                t.full
            );
        }
        tracing::info!(
            target = %t.full,
            bytes = img.len(),
            ms = started.elapsed().as_millis() as u64,
            "compiled portable source with hipRTC"
        );
        if let Some(cache) = &self.cache
            && let Err(e) = cache.put(&key, &img)
        {
            tracing::warn!(dir = %cache.dir().display(), "could not write the hsaco cache: {e}");
        }
        let img = Arc::new(img);
        self.memory.lock().insert(key, img.clone());
        Ok(CompileOutput {
            target: t,
            image: img,
            cache: status,
            cache_path,
            log,
        })
    }

    /// Compiles a module image that needs compiling (`Standard`, `Source`) for `target`.
    /// Messages name the module `module` and point at the user's lines.
    pub fn compile_image(
        &self,
        module: &Module,
        image: &ModuleImage,
        target: &str,
    ) -> Result<CompileOutput, Error> {
        let Some(unit) = xthunk_gpu::image::portable_source(module, image) else {
            return Err(Error::InvalidArgument(xthunk_gpu::image::not_portable(
                image,
            )));
        };
        Ok(self.compile(&unit, target)?)
    }
}

/// The process-wide compiler for the environment's search path and the default disk cache.
pub fn default_compiler() -> Result<Arc<Compiler>, CompileError> {
    static C: OnceLock<Result<Arc<Compiler>, CompileError>> = OnceLock::new();
    C.get_or_init(|| Compiler::new(&SearchConfig::from_env(), default_cache()).map(Arc::new))
        .clone()
}

/// Compiles a complete portable translation unit (e.g. `portable::standard_source()`, or
/// `portable::with_prelude(code)`) to an HSACO for `target` (`gfx90a`, or a full
/// `gcnArchName` such as `gfx90a:sramecc+:xnack-`), through the disk cache. Needs hipRTC and
/// comgr, not a GPU. This is what `xthunk compile --target gfx…` calls.
pub fn compile_for_target(source: &str, target: &str) -> xthunk_core::Result<Vec<u8>> {
    let c = default_compiler()?;
    Ok(c.compile(source, target)?.image.as_ref().clone())
}

/// The precompiled image of a portable module image for `target`: `Standard` and `Source`
/// become `Hsaco { arch: target, data }`; other images give `None` (they need no compiling).
/// For `xthunk compile --target gfx…` (the CUDA backend's `precompile` does the same for
/// `sm_XX`).
pub fn precompile(image: &ModuleImage, target: &str) -> xthunk_core::Result<Option<ModuleImage>> {
    precompile_module(&xthunk_gpu::image::bare_module(), image, target)
}

/// [`precompile`] of an image of `module`: compiled with the module's options, messages name
/// the module and the user's lines.
pub fn precompile_module(
    module: &Module,
    image: &ModuleImage,
    target: &str,
) -> xthunk_core::Result<Option<ModuleImage>> {
    if !matches!(image, ModuleImage::Standard | ModuleImage::Source { .. }) {
        return Ok(None);
    }
    let c = default_compiler()?;
    let compiled = c.compile_image(module, image, target)?;
    Ok(Some(ModuleImage::Hsaco {
        arch: compiled.target.full,
        data: compiled.image.as_ref().clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_covers_source_target_and_compiler_version() {
        let t = |s| Target::parse(s).unwrap_or_else(|e| unreachable!("{e}"));
        let src = portable::with_prelude("extern \"C\" __global__ void k() {}");
        let v = "hipRTC 5.2 (/lib/libamdhip64.so.5); HIP runtime 5.2.21153; comgr 2.4";
        let base = cache_key(v, &src, &t("gfx90a"));
        assert_eq!(base, cache_key(v, &src, &t("gfx90a")));
        for other in [
            cache_key("hipRTC 6.0", &src, &t("gfx90a")),
            cache_key(v, &src, &t("gfx908")),
            cache_key(v, &src, &t("gfx90a:xnack-")),
            cache_key(v, &portable::with_prelude("// other"), &t("gfx90a")),
        ] {
            assert_ne!(other, base);
        }
    }

    #[test]
    fn options_always_name_the_target() {
        let t = Target::parse("gfx1030").unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(options_for(&t)[0], "--offload-arch=gfx1030");
    }
}
