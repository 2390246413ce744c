//! hipRTC (run-time compilation of HIP C++ to AMD GPU code objects) and comgr's ISA list.
//!
//! hipRTC is `libhiprtc.so.*` on ROCm ≥ 6 and part of `libamdhip64` on ROCm 5 (Debian's
//! 5.2): the dedicated library is searched first, then the HIP runtime's own symbols.
//!
//! On ROCm 5.2 a target hipRTC does not know *aborts the process* (a crash inside comgr), so
//! every target is checked against comgr's ISA list (`amd_comgr_get_isa_count` /
//! `amd_comgr_get_isa_name`, names like `amdgcn-amd-amdhsa--gfx90a`) before compiling; comgr
//! is the library hipRTC itself uses (the copy already mapped in the process is preferred).

use crate::loader::{
    COMGR_LIBRARY_NAMES, ComgrApi, HIPRTC_LIBRARY_NAMES, HiprtcApi, LoadError, SearchConfig,
    file_containing, mapped_library, open_first,
};
use crate::result::{comgr_describe, hiprtc_describe};
use crate::sys;
use libloading::Library;
use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        let (api, path) = match open_first("hipRTC", &candidates, HiprtcApi::bind) {
            Ok(found) => found,
            Err(mut e) => match hip_library {
                Some((lib, p)) => match HiprtcApi::bind(lib.clone()) {
                    Ok(api) => (api, p.to_path_buf()),
                    Err(why) => {
                        e.tried
                            .push(format!("{} (the HIP runtime: {why})", p.display()));
                        return Err(e);
                    }
                },
                None => {
                    e.tried
                        .push("libamdhip64 (the HIP runtime was not found either)".into());
                    return Err(e);
                }
            },
        };
        let path = file_containing(api.hiprtcCreateProgram as usize).unwrap_or(path);
        let version = api.hiprtcVersion.and_then(|f| {
            let (mut major, mut minor): (c_int, c_int) = (0, 0);
            // SAFETY: `hiprtcVersion` writes two ints through valid pointers.
            let rc = unsafe { f(&mut major, &mut minor) };
            (rc == sys::HIPRTC_SUCCESS).then_some((major, minor))
        });
        tracing::info!(path = %path.display(), ?version, "loaded hipRTC");
        Ok(Hiprtc { api, path, version })
    }

    /// Compiles one translation unit. `Ok` holds the code object; `Err` the failing call, its
    /// status and the compiler's log.
    pub(crate) fn compile(
        &self,
        source: &str,
        name: &str,
        options: &[String],
    ) -> Result<Vec<u8>, RtcFailure> {
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
        Ok(code)
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
        let ((api, isa_names), path) = open_first("comgr", &candidates, |lib| {
            let api = ComgrApi::bind(lib)?;
            isa_names(&api).map(|names| (api, names))
        })?;
        let path = file_containing(api.amd_comgr_get_isa_count as usize).unwrap_or(path);
        let version = api.amd_comgr_get_version.map(|f| {
            let (mut major, mut minor) = (0usize, 0usize);
            // SAFETY: writes two size_t values through valid pointers.
            unsafe { f(&mut major, &mut minor) };
            (major, minor)
        });
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
