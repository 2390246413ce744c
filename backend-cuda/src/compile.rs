//! The runtime compiler: portable source to cubins or PTX with NVRTC, through a disk cache.
//!
//! **NVRTC** ([`Nvrtc`]) is bound through the crate's own table ([`crate::loader`]; cudarc
//! only searches the names of the CUDA major it was built for): `libnvrtc.so.13`, `.12`,
//! `.11.2` in the places of [`SearchConfig`], the PyPI wheel `nvidia-cuda-nvrtc-cu12`
//! included.
//!
//! A compilation targets `sm_XX` (a cubin, what the driver loads directly) or `compute_XX`
//! (PTX, compiled by the driver's JIT at load). For a device whose architecture this NVRTC
//! does not know, [`Compiler::compile_for_device`] falls back to PTX for the newest
//! architecture NVRTC supports below it.
//!
//! Options: `--gpu-architecture=<target>` and `--fmad=false` (no contraction into fused
//! multiply-adds, so results follow the host reference's evaluation order).
//!
//! **Disk cache**: core's one kernel cache ([`KernelCache`]) in
//! `$XDG_CACHE_HOME/xthunk/kernels/cuda/` (default `~/.cache/xthunk/kernels/cuda/`, beside the
//! ROCm backend's `kernels/rocm/`), keyed by the SHA-256 of everything that determines the
//! image ([`Compiler::cache_key`]: the complete translation unit, the options, the target and
//! its output kind, NVRTC's version), verified when read, written atomically, owner-only. An
//! entry that fails its checks is recompiled and replaced ([`CacheStatus::Rebuilt`]); failing
//! to write the cache only logs a warning.

use crate::loader::{NVRTC_LIBRARY_NAMES, NVRTC_WHEEL_DIRS, NotFound, NvrtcApi, SearchConfig};
use crate::result::{BACKEND, nvrtc_describe, nvrtc_error};
use crate::sys;
use crate::target::{Output, Target};
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use xthunk_core::Error;
use xthunk_core::backend::dylib::{Loader, Probe, Version};
use xthunk_core::backend::kernel_cache::{CacheKey, KeyInputs, Lookup};
pub use xthunk_core::backend::kernel_cache::{CacheStatus, KernelCache};
use xthunk_core::ir::{Module, ModuleImage};
use xthunk_core::kernels::portable;

// ---- NVRTC ------------------------------------------------------------------------------

/// A loaded NVRTC.
pub struct Nvrtc {
    /// The table (which keeps the library open).
    table: NvrtcApi,
    /// The file loaded (resolved through `/proc/self/maps` when found by bare name).
    path: PathBuf,
    version: (i32, i32),
    archs: Vec<u32>,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.path)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// The outcome of one compilation: the program's log and, on success, the requested output.
#[derive(Debug)]
pub enum Compiled {
    Ok { image: Vec<u8>, log: String },
    Failed { status: String, log: String },
}

/// An `nvrtcProgram`, destroyed on drop.
struct ProgramHandle<'a> {
    nvrtc: &'a Nvrtc,
    raw: sys::nvrtcProgram,
}

impl Drop for ProgramHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by nvrtcCreateProgram and is destroyed exactly once.
        let r = unsafe { (self.nvrtc.table.nvrtcDestroyProgram)(&mut self.raw) };
        if r != 0 {
            tracing::warn!("nvrtcDestroyProgram failed: {}", self.nvrtc.status_text(r));
        }
    }
}

impl Nvrtc {
    /// Loads the first usable NVRTC of `config`'s search.
    pub fn load(config: &SearchConfig) -> Result<Nvrtc, NotFound> {
        Self::load_max_major(config, None)
    }

    /// Loads the first usable NVRTC whose major version is at most `max_major` (a newer
    /// NVRTC emits cubins and PTX that an older driver cannot load).
    pub fn load_max_major(
        config: &SearchConfig,
        max_major: Option<i32>,
    ) -> Result<Nvrtc, NotFound> {
        let candidates = config.candidates(&NVRTC_LIBRARY_NAMES, &NVRTC_WHEEL_DIRS);
        let loaded = Loader::new("NVRTC")
            .load(&candidates, |table: &NvrtcApi| {
                let (mut major, mut minor) = (0, 0);
                // SAFETY: nvrtcVersion writes two ints through valid pointers.
                let r = unsafe { (table.nvrtcVersion)(&mut major, &mut minor) };
                if r != 0 {
                    return Err(format!("nvrtcVersion failed: {}", nvrtc_describe(r)));
                }
                if let Some(m) = max_major
                    && major > m
                {
                    return Err(format!(
                        "NVRTC {major}.{minor} is newer than the driver's CUDA {m}"
                    ));
                }
                let version = Version::new(major.max(0) as u32, minor.max(0) as u32, 0);
                Ok(Probe::with(Some(version), (major, minor)))
            })
            .map_err(|e| NotFound::from_load("NVRTC", e))?;
        let mut n = Nvrtc {
            table: loaded.table,
            path: loaded.path,
            version: loaded.extra,
            archs: vec![],
        };
        n.archs = n.query_archs();
        tracing::info!(
            path = %n.path.display(),
            "loaded NVRTC {}.{} ({} targets)",
            n.version.0,
            n.version.1,
            n.archs.len()
        );
        Ok(n)
    }

    /// The NVRTC of the environment's search, loaded once per process.
    pub fn global() -> Result<Arc<Nvrtc>, Error> {
        static G: OnceLock<Result<Arc<Nvrtc>, String>> = OnceLock::new();
        G.get_or_init(|| {
            Nvrtc::load(&SearchConfig::from_env())
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|reason| Error::Unavailable {
            backend: BACKEND.into(),
            reason,
        })
    }

    /// `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `sm_XX` numbers this NVRTC can compile for (empty when it cannot say).
    pub fn supported_archs(&self) -> &[u32] {
        &self.archs
    }

    fn query_archs(&self) -> Vec<u32> {
        let (Some(num), Some(get)) = (
            self.table.nvrtcGetNumSupportedArchs,
            self.table.nvrtcGetSupportedArchs,
        ) else {
            return vec![];
        };
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        if unsafe { num(&mut n) } != 0 || n <= 0 {
            return vec![];
        }
        let mut v = vec![0 as c_int; n as usize];
        // SAFETY: `v` holds the `n` ints the call writes.
        if unsafe { get(v.as_mut_ptr()) } != 0 {
            return vec![];
        }
        v.into_iter()
            .filter_map(|a| u32::try_from(a).ok())
            .collect()
    }

    /// NVRTC's text for a status code, with the code.
    fn status_text(&self, code: sys::nvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string (or null).
        let p = unsafe { (self.table.nvrtcGetErrorString)(code) };
        if p.is_null() {
            return nvrtc_describe(code);
        }
        // SAFETY: non-null, NUL-terminated, static.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        format!("{s} ({code})")
    }

    fn check(&self, call: &str, code: sys::nvrtcResult) -> Result<(), Error> {
        if code == 0 {
            Ok(())
        } else {
            Err(Error::backend(BACKEND, call, self.status_text(code)))
        }
    }

    /// Compiles `source` (named `name` in messages) with `options` and takes `output` out of
    /// it. A compile error is `Ok(Compiled::Failed)` carrying NVRTC's log; `Err` is for
    /// failures of NVRTC itself.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[String],
        output: Output,
    ) -> Result<Compiled, Error> {
        let src = CString::new(source)
            .map_err(|_| Error::InvalidArgument("kernel source contains a NUL byte".into()))?;
        let cname = CString::new(name).unwrap_or_default();
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).unwrap_or_default())
            .collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings; no headers (count 0, null arrays).
        let r = unsafe {
            (self.table.nvrtcCreateProgram)(
                &mut raw,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(nvrtc_error("nvrtcCreateProgram", r));
        }
        let prog = ProgramHandle { nvrtc: self, raw };
        let n_opts = c_int::try_from(opt_ptrs.len())
            .map_err(|_| Error::InvalidArgument("too many NVRTC options".into()))?;
        // SAFETY: `prog` is a live program; `opt_ptrs` holds `n_opts` valid C strings that
        // outlive the call.
        let r = unsafe { (self.table.nvrtcCompileProgram)(prog.raw, n_opts, opt_ptrs.as_ptr()) };
        let log = self.log(&prog)?;
        if r != 0 {
            return Ok(Compiled::Failed {
                status: self.status_text(r),
                log,
            });
        }
        let (size_fn, get_fn, what) = match output {
            Output::Cubin => (
                self.table.nvrtcGetCUBINSize,
                self.table.nvrtcGetCUBIN,
                "nvrtcGetCUBIN",
            ),
            Output::Ptx => (
                self.table.nvrtcGetPTXSize,
                self.table.nvrtcGetPTX,
                "nvrtcGetPTX",
            ),
        };
        let mut size = 0usize;
        // SAFETY: writes one size_t.
        self.check(what, unsafe { size_fn(prog.raw, &mut size) })?;
        let mut image = vec![0u8; size];
        if size > 0 {
            // SAFETY: `image` holds the `size` bytes the call writes.
            self.check(what, unsafe { get_fn(prog.raw, image.as_mut_ptr().cast()) })?;
        }
        if output == Output::Ptx {
            // PTX comes NUL-terminated: keep the text only.
            while image.last() == Some(&0) {
                image.pop();
            }
        }
        Ok(Compiled::Ok { image, log })
    }

    fn log(&self, prog: &ProgramHandle<'_>) -> Result<String, Error> {
        let mut size = 0usize;
        // SAFETY: writes one size_t.
        self.check("nvrtcGetProgramLogSize", unsafe {
            (self.table.nvrtcGetProgramLogSize)(prog.raw, &mut size)
        })?;
        if size <= 1 {
            return Ok(String::new());
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes (NUL included) the call writes.
        self.check("nvrtcGetProgramLog", unsafe {
            (self.table.nvrtcGetProgramLog)(prog.raw, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string())
    }
}

// ---- the disk cache ----------------------------------------------------------------------

/// A compiled image.
#[derive(Clone, Debug)]
pub struct CompileOutput {
    pub target: Target,
    /// A cubin (`Target::Sm`) or PTX text (`Target::Compute`).
    pub image: Vec<u8>,
    /// What the disk cache did.
    pub cache: CacheStatus,
    /// The cache entry's path, when there is a cache.
    pub cache_path: Option<PathBuf>,
    /// NVRTC's log (warnings), empty on a cache hit.
    pub log: String,
}

/// The default disk cache: `$XDG_CACHE_HOME/xthunk/kernels/cuda` or
/// `~/.cache/xthunk/kernels/cuda`; `None` when neither variable is set.
pub fn default_cache() -> Option<KernelCache> {
    KernelCache::default_location(BACKEND)
}

// ---- the compiler -------------------------------------------------------------------------

/// An NVRTC compiler with a disk cache.
pub struct Compiler {
    nvrtc: Arc<Nvrtc>,
    cache: Option<KernelCache>,
    compilations: AtomicU64,
}

/// Options every compilation gets besides the target.
const BASE_OPTIONS: [&str; 1] = ["--fmad=false"];

/// The disk cache key of a complete translation unit (prelude included) for `target` with
/// NVRTC `nvrtc_version`: everything that determines the image.
fn cache_key(nvrtc_version: (i32, i32), source: &str, target: Target) -> CacheKey {
    let (maj, min) = nvrtc_version;
    CacheKey::new(&KeyInputs {
        backend: BACKEND,
        compiler: "NVRTC",
        compiler_version: &format!("{maj}.{min}"),
        target: &target.to_string(),
        kind: match target.output() {
            Output::Cubin => "cubin",
            Output::Ptx => "ptx",
        },
        options: &Compiler::options(target, portable::fast_math(source)),
        source,
    })
}

impl Compiler {
    /// A compiler using `nvrtc`; `cache` is the disk cache, if any ([`default_cache`] is
    /// the usual one).
    pub fn new(nvrtc: Arc<Nvrtc>, cache: Option<KernelCache>) -> Self {
        Compiler {
            nvrtc,
            cache,
            compilations: AtomicU64::new(0),
        }
    }

    pub fn nvrtc(&self) -> &Arc<Nvrtc> {
        &self.nvrtc
    }

    /// The disk cache, if any.
    pub fn cache(&self) -> Option<&KernelCache> {
        self.cache.as_ref()
    }

    /// How many times this compiler called NVRTC (cache hits do not count).
    pub fn compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    /// The options of a compilation for `target`; `fast`: the unit asks for fast math
    /// ([`portable::fast_math`]), which replaces `--fmad=false` with `--use_fast_math`.
    fn options(target: Target, fast: bool) -> Vec<String> {
        let mut o = vec![format!("--gpu-architecture={target}")];
        if fast {
            o.push("--use_fast_math".into());
        } else {
            o.extend(BASE_OPTIONS.iter().map(|s| s.to_string()));
        }
        o
    }

    /// The disk cache key of a complete translation unit for `target` with this NVRTC.
    pub fn cache_key(&self, source: &str, target: Target) -> CacheKey {
        cache_key(self.nvrtc.version(), source, target)
    }

    /// The target to compile for a device of architecture `sm`: a cubin when NVRTC knows the
    /// architecture (or cannot list what it knows), else PTX for the newest architecture it
    /// supports below `sm` (the driver JIT-compiles that PTX for the device).
    pub fn target_for_device(&self, sm: u32) -> Result<Target, Error> {
        let archs = self.nvrtc.supported_archs();
        if archs.is_empty() || archs.contains(&sm) {
            return Ok(Target::Sm(sm));
        }
        match archs.iter().copied().filter(|&a| a <= sm).max() {
            Some(a) => Ok(Target::Compute(a)),
            None => Err(Error::Unsupported {
                backend: BACKEND.into(),
                feature: format!(
                    "compiling for sm_{sm} with NVRTC {}.{} (it supports sm_{})",
                    self.nvrtc.version().0,
                    self.nvrtc.version().1,
                    archs
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", sm_")
                ),
            }),
        }
    }

    /// Compiles for a device of architecture `sm` (see [`Compiler::target_for_device`]).
    pub fn compile_for_device(&self, source: &str, sm: u32) -> Result<CompileOutput, Error> {
        let t = self.target_for_device(sm)?;
        if let Target::Compute(a) = t {
            tracing::info!("NVRTC cannot compile for sm_{sm}: using PTX for compute_{a}");
        }
        self.compile(source, t)
    }

    /// Compiles a module image that needs compiling (`Standard`, `Source`) for a device of
    /// architecture `sm` (as ROCm's `Compiler::compile_image` does for a gfx target).
    /// Messages name the module `module` and point at the user's lines.
    pub fn compile_image(
        &self,
        module: &Module,
        image: &ModuleImage,
        sm: u32,
    ) -> Result<CompileOutput, Error> {
        let Some(unit) = xthunk_gpu::image::portable_source(module, image) else {
            return Err(Error::InvalidArgument(xthunk_gpu::image::not_portable(
                image,
            )));
        };
        self.compile_for_device(&unit, sm)
    }

    /// Compiles a complete translation unit (prelude included) for `target`, through the
    /// disk cache. A compile error is `Error::Module` carrying NVRTC's log.
    pub fn compile(&self, source: &str, target: Target) -> Result<CompileOutput, Error> {
        let key = self.cache_key(source, target);
        let cache_path = self.cache.as_ref().map(|c| c.path_for(&key));
        let status = match self.cache.as_ref().map(|c| c.get(&key)) {
            None => CacheStatus::Disabled,
            Some(Lookup::Hit(image)) => {
                return Ok(CompileOutput {
                    target,
                    image,
                    cache: CacheStatus::Hit,
                    cache_path,
                    log: String::new(),
                });
            }
            Some(Lookup::Miss) => CacheStatus::Miss,
            Some(Lookup::Corrupt(_)) => CacheStatus::Rebuilt,
        };
        self.compilations.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let compiled = self.nvrtc.compile(
            source,
            "xthunk_portable.cu",
            &Self::options(target, portable::fast_math(source)),
            target.output(),
        )?;
        let (image, log) = match compiled {
            Compiled::Ok { image, log } => (image, log),
            Compiled::Failed { status, log } => {
                return Err(Error::Module {
                    module: portable::module_of(source)
                        .unwrap_or("portable source")
                        .into(),
                    message: format!(
                        "NVRTC {}.{} failed to compile for {target}: {status}\nNVRTC log:\n{log}",
                        self.nvrtc.version().0,
                        self.nvrtc.version().1
                    ),
                });
            }
        };
        if !log.trim().is_empty() {
            tracing::warn!(
                module = portable::module_of(source).unwrap_or("portable source"),
                "NVRTC warnings for {target}:\n{log}"
            );
        }
        tracing::info!(
            "NVRTC compiled {} bytes of source for {target} in {:.2?} ({} bytes)",
            source.len(),
            started.elapsed(),
            image.len()
        );
        if let Some(c) = &self.cache
            && let Err(e) = c.put(&key, &image)
        {
            tracing::warn!(dir = %c.dir().display(), "could not write the kernel cache: {e}");
        }
        Ok(CompileOutput {
            target,
            image,
            cache: status,
            cache_path,
            log,
        })
    }
}

/// Compiles a complete portable translation unit (as [`portable::standard_source`] or
/// [`portable::with_prelude`] give) for `target` (`sm_XX`: a cubin; `compute_XX`: PTX text)
/// with the environment's NVRTC, through the disk cache. Needs no GPU. For
/// `xthunk compile`.
pub fn compile_for_target(source: &str, target: &str) -> Result<Vec<u8>, Error> {
    let target = Target::parse(target)?;
    let nvrtc = Nvrtc::global()?;
    Ok(Compiler::new(nvrtc, default_cache())
        .compile(source, target)?
        .image)
}

/// The precompiled image of a portable module image for `target`: `Standard` and `Source`
/// become `Cubin { arch, data }` (for `sm_XX`) or `Ptx` (for `compute_XX`); other images
/// give `None` (they need no compiling).
pub fn precompile(image: &ModuleImage, target: &str) -> Result<Option<ModuleImage>, Error> {
    precompile_module(&xthunk_gpu::image::bare_module(), image, target)
}

/// [`precompile`] of an image of `module`: compiled with the module's options, messages name
/// the module and the user's lines.
pub fn precompile_module(
    module: &Module,
    image: &ModuleImage,
    target: &str,
) -> Result<Option<ModuleImage>, Error> {
    let Some(source) = xthunk_gpu::image::portable_source(module, image) else {
        return Ok(None);
    };
    let t = Target::parse(target)?;
    let data = compile_for_target(&source, target)?;
    Ok(Some(match t {
        Target::Sm(_) => ModuleImage::Cubin {
            arch: t.to_string(),
            data,
        },
        Target::Compute(_) => ModuleImage::Ptx {
            code: String::from_utf8_lossy(&data).into_owned(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_covers_source_target_kind_and_nvrtc_version() {
        let src = portable::with_prelude("extern \"C\" __global__ void k() {}");
        let base = cache_key((12, 9), &src, Target::Sm(90));
        assert_eq!(base, cache_key((12, 9), &src, Target::Sm(90)));
        for other in [
            cache_key((12, 8), &src, Target::Sm(90)),
            cache_key((12, 9), &src, Target::Sm(80)),
            cache_key((12, 9), &src, Target::Compute(90)),
            cache_key((12, 9), &portable::with_prelude("// other"), Target::Sm(90)),
        ] {
            assert_ne!(other, base);
        }
        assert_eq!(
            Compiler::options(Target::Sm(90), false),
            ["--gpu-architecture=sm_90", "--fmad=false"]
        );
    }

    #[test]
    fn missing_nvrtc_names_the_places() {
        let dir = std::env::temp_dir().join(format!("xthunk-nvrtc-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let e = Nvrtc::load(&SearchConfig::only(vec![dir.clone()]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("NVRTC not found; tried: "), "{e}");
        assert!(e.contains(&dir.display().to_string()), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
