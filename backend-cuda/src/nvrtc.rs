//! NVRTC through the project's own `libloading` table (cudarc only searches the names of the
//! CUDA major it was built for): `libnvrtc.so.13`, `.12`, `.11.2` in the places of
//! [`SearchConfig`], the PyPI wheel `nvidia-cuda-nvrtc-cu12` included. Declarations follow
//! `nvrtc.h` of CUDA 12.9 (from that wheel).

use crate::loader::{
    NVRTC_LIBRARY_NAMES, NVRTC_WHEEL_DIRS, NotFound, NvrtcApi, SearchConfig, check_symbols,
};
use crate::result::{BACKEND, nvrtc_describe, nvrtc_error};
use crate::sys;
use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::{Arc, OnceLock};
use xthunk_core::Error;

/// A loaded NVRTC.
pub struct Nvrtc {
    table: NvrtcApi,
    path: String,
    version: (i32, i32),
    archs: Vec<u32>,
    /// Keeps the function pointers of `table` valid; dropped last.
    _lib: libloading::Library,
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

/// What to take out of a compiled program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Cubin,
    Ptx,
}

/// An `nvrtcProgram`, destroyed on drop.
struct ProgramHandle<'a> {
    nvrtc: &'a Nvrtc,
    raw: sys::nvrtcProgram,
}

impl Drop for ProgramHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by nvrtcCreateProgram and is destroyed exactly once.
        let r = unsafe { (self.nvrtc.table.destroy)(&mut self.raw) };
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
        let search = config.library("NVRTC", &NVRTC_LIBRARY_NAMES, &NVRTC_WHEEL_DIRS);
        let mut found = None;
        let (opened, attempts) = search.open(|lib, _| {
            check_symbols(lib, &NvrtcApi::REQUIRED)?;
            let table = NvrtcApi::bind(lib)?;
            let (mut major, mut minor) = (0, 0);
            // SAFETY: nvrtcVersion writes two ints through valid pointers.
            let r = unsafe { (table.version)(&mut major, &mut minor) };
            if r != 0 {
                return Err(format!("nvrtcVersion failed: {}", nvrtc_describe(r)));
            }
            if let Some(m) = max_major {
                if major > m {
                    return Err(format!(
                        "NVRTC {major}.{minor} is newer than the driver's CUDA {m}"
                    ));
                }
            }
            found = Some((table, (major, minor)));
            Ok(())
        })?;
        let Some((table, version)) = found else {
            return Err(NotFound {
                what: "NVRTC",
                attempts,
            });
        };
        let mut n = Nvrtc {
            table,
            path: opened.path,
            version,
            archs: vec![],
            _lib: opened.lib,
        };
        n.archs = n.query_archs();
        tracing::info!(
            path = %n.path,
            "loaded NVRTC {}.{} ({} targets)",
            version.0,
            version.1,
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

    /// Where it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The `sm_XX` numbers this NVRTC can compile for (empty when it cannot say).
    pub fn supported_archs(&self) -> &[u32] {
        &self.archs
    }

    fn query_archs(&self) -> Vec<u32> {
        let (Some(num), Some(get)) = (self.table.num_archs, self.table.archs) else {
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
        let p = unsafe { (self.table.error_string)(code) };
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
            (self.table.create)(
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
        let r = unsafe { (self.table.compile)(prog.raw, n_opts, opt_ptrs.as_ptr()) };
        let log = self.log(&prog)?;
        if r != 0 {
            return Ok(Compiled::Failed {
                status: self.status_text(r),
                log,
            });
        }
        let (size_fn, get_fn, what) = match output {
            Output::Cubin => (self.table.cubin_size, self.table.cubin, "nvrtcGetCUBIN"),
            Output::Ptx => (self.table.ptx_size, self.table.ptx, "nvrtcGetPTX"),
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
            (self.table.log_size)(prog.raw, &mut size)
        })?;
        if size <= 1 {
            return Ok(String::new());
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes (NUL included) the call writes.
        self.check("nvrtcGetProgramLog", unsafe {
            (self.table.log)(prog.raw, buf.as_mut_ptr().cast())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
