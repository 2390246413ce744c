//! Safe wrappers over the emulator's C ABI for the tests (each test binary links the rlib and
//! calls the exported functions directly), plus NVRTC / hipRTC helpers to make real images.
//!
//! Tests of one binary share the process-wide emulator state (contexts, diagnostics, settings),
//! so every test takes [`serial`] first. A [`Cuda`] retains the primary context of device 0
//! and releases it when dropped, so each test runs in a fresh context and the emulator's leak
//! check runs at the end of every test.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};
use xthunk_emulator::diag::{self, Diagnostic, Kind};
use xthunk_emulator::{cuda, hip};

static LOCK: Mutex<()> = Mutex::new(());

/// Serializes the tests of one binary and clears the diagnostics.
pub fn serial() -> MutexGuard<'static, ()> {
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let _ = diag::take();
    g
}

/// Changes an emulator setting.
pub fn set(key: &str, value: &str) {
    xthunk_emulator::config::set(key, value).unwrap();
}

/// Diagnostics recorded since the last call, of `kind`.
pub fn take(kind: Kind) -> Vec<Diagnostic> {
    diag::take()
        .into_iter()
        .filter(|d| d.kind == kind)
        .collect()
}

/// Asserts a CUDA result is success, naming it otherwise.
#[track_caller]
pub fn ok(r: u32, what: &str) {
    assert_eq!(r, 0, "{what} returned {r}; diagnostics: {:?}", diag::take());
}

/// The CUDA device 0's primary context, current on this thread while this lives.
pub struct Cuda {
    pub ctx: usize,
}

impl Cuda {
    pub fn new() -> Cuda {
        ok(cuda::cuInit(0), "cuInit");
        let mut ctx = 0usize;
        // SAFETY: valid out-pointer.
        ok(
            unsafe { cuda::cuDevicePrimaryCtxRetain(&mut ctx, 0) },
            "retain",
        );
        // SAFETY: a retained context.
        ok(unsafe { cuda::cuCtxSetCurrent(ctx) }, "set current");
        Cuda { ctx }
    }

    pub fn alloc(&self, n: usize) -> u64 {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuda::cuMemAlloc_v2(&mut p, n) }, "cuMemAlloc_v2");
        p
    }

    pub fn try_alloc(&self, n: usize) -> Result<u64, u32> {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        match unsafe { cuda::cuMemAlloc_v2(&mut p, n) } {
            0 => Ok(p),
            e => Err(e),
        }
    }

    pub fn alloc_host(&self, n: usize) -> *mut u8 {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(
            unsafe { cuda::cuMemAllocHost_v2(&mut p, n) },
            "cuMemAllocHost_v2",
        );
        p.cast()
    }

    pub fn free(&self, p: u64) -> u32 {
        // SAFETY: any value may be passed; the emulator checks it.
        unsafe { cuda::cuMemFree_v2(p) }
    }

    pub fn free_host(&self, p: *mut u8) -> u32 {
        // SAFETY: as above.
        unsafe { cuda::cuMemFreeHost(p.cast()) }
    }

    pub fn htod(&self, dst: u64, src: &[u8]) -> u32 {
        // SAFETY: `src` is a live host slice of `len` bytes.
        unsafe { cuda::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) }
    }

    pub fn dtoh(&self, dst: &mut [u8], src: u64) -> u32 {
        // SAFETY: `dst` is a live host slice of `len` bytes.
        unsafe { cuda::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) }
    }

    pub fn read(&self, src: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        ok(self.dtoh(&mut v, src), "cuMemcpyDtoH_v2");
        v
    }

    pub fn write_f32(&self, dst: u64, v: &[f32]) {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        ok(self.htod(dst, &b), "cuMemcpyHtoD_v2");
    }

    pub fn read_f32(&self, src: u64, n: usize) -> Vec<f32> {
        self.read(src, 4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A stream (non-blocking unless `blocking`).
    pub fn stream(&self, blocking: bool) -> usize {
        let mut s = 0usize;
        // SAFETY: valid out-pointer.
        ok(
            unsafe { cuda::cuStreamCreate(&mut s, if blocking { 0 } else { 1 }) },
            "cuStreamCreate",
        );
        s
    }

    pub fn destroy_stream(&self, s: usize) {
        // SAFETY: a handle we created.
        ok(unsafe { cuda::cuStreamDestroy_v2(s) }, "cuStreamDestroy_v2");
    }

    pub fn sync(&self, s: usize) -> u32 {
        // SAFETY: any handle; the emulator checks it.
        unsafe { cuda::cuStreamSynchronize(s) }
    }

    pub fn memset8(&self, dst: u64, v: u8, n: usize, s: usize) -> u32 {
        // SAFETY: any values; the emulator checks them.
        unsafe { cuda::cuMemsetD8Async(dst, v, n, s) }
    }

    pub fn memset32(&self, dst: u64, v: u32, n: usize, s: usize) -> u32 {
        // SAFETY: any values; the emulator checks them.
        unsafe { cuda::cuMemsetD32Async(dst, v, n, s) }
    }

    pub fn copy(&self, dst: u64, src: u64, n: usize, s: usize) -> u32 {
        // SAFETY: any values; the emulator checks them.
        unsafe { cuda::cuMemcpyAsync(dst, src, n, s) }
    }

    pub fn event(&self) -> usize {
        let mut e = 0usize;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuda::cuEventCreate(&mut e, 2) }, "cuEventCreate");
        e
    }

    pub fn destroy_event(&self, e: usize) {
        // SAFETY: a handle we created.
        ok(unsafe { cuda::cuEventDestroy_v2(e) }, "cuEventDestroy_v2");
    }

    /// Loads an image (cubin bytes, or PTX text with its NUL).
    pub fn load(&self, image: &[u8]) -> Result<usize, u32> {
        let mut m = 0usize;
        // SAFETY: `image` is a complete image that outlives the call.
        match unsafe { cuda::cuModuleLoadData(&mut m, image.as_ptr().cast()) } {
            0 => Ok(m),
            e => Err(e),
        }
    }

    pub fn function(&self, m: usize, name: &str) -> Result<usize, u32> {
        let mut f = 0usize;
        let n = CString::new(name).unwrap();
        // SAFETY: valid out-pointer and NUL-terminated name.
        match unsafe { cuda::cuModuleGetFunction(&mut f, m, n.as_ptr()) } {
            0 => Ok(f),
            e => Err(e),
        }
    }

    pub fn unload(&self, m: usize) {
        // SAFETY: a handle we loaded.
        ok(unsafe { cuda::cuModuleUnload(m) }, "cuModuleUnload");
    }

    /// Launches `f` with one 8-byte slot per argument (the CUDA backend's marshalling).
    pub fn launch(&self, f: usize, args: &[u64], s: usize) -> u32 {
        self.launch_with(f, ([4, 1, 1], [128, 1, 1], 0), args, s)
    }

    /// [`Self::launch`] with a shape: grid, block, dynamic shared memory bytes.
    pub fn launch_with(
        &self,
        f: usize,
        (grid, block, shared): ([u32; 3], [u32; 3], u32),
        args: &[u64],
        s: usize,
    ) -> u32 {
        let mut slots = args.to_vec();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|x| (x as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: one pointer per parameter, each to an 8-byte slot that outlives the call.
        unsafe {
            cuda::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared,
                s,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        // SAFETY: releases the reference taken in `new`.
        let r = unsafe { cuda::cuDevicePrimaryCtxRelease_v2(0) };
        if !std::thread::panicking() {
            assert_eq!(r, 0, "cuDevicePrimaryCtxRelease_v2");
        }
    }
}

/// f32 slot bits.
pub fn f32_slot(v: f32) -> u64 {
    v.to_bits() as u64
}

// ---- HIP -------------------------------------------------------------------------------------

#[track_caller]
pub fn hok(r: c_int, what: &str) {
    assert_eq!(r, 0, "{what} returned {r}; diagnostics: {:?}", diag::take());
}

pub fn hip_alloc(n: usize) -> usize {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    hok(unsafe { hip::hipMalloc(&mut p, n) }, "hipMalloc");
    p as usize
}

pub fn hip_free(p: usize) -> c_int {
    // SAFETY: any value; the emulator checks it.
    unsafe { hip::hipFree(p as *mut c_void) }
}

pub fn hip_copy(dst: usize, src: usize, n: usize, kind: c_int) -> c_int {
    // SAFETY: host sides are live buffers of `n` bytes in the tests.
    unsafe { hip::hipMemcpy(dst as *mut c_void, src as *const c_void, n, kind) }
}

// ---- real compilers --------------------------------------------------------------------------

/// The pip wheel's NVRTC, if installed (`python3 -m pip install --target
/// "$HOME/.cache/xthunk/pip" nvidia-cuda-nvrtc-cu12`).
pub fn nvrtc() -> Option<libloading::Library> {
    let home = std::env::var_os("HOME")?;
    let base = std::path::Path::new(&home).join(".cache/xthunk/pip/nvidia/cuda_nvrtc/lib");
    for name in ["libnvrtc.so.12", "libnvrtc.so.13"] {
        let p = base.join(name);
        if p.exists() {
            // SAFETY: loading NVIDIA's NVRTC runs its initializers, which have no preconditions.
            if let Ok(l) = unsafe { libloading::Library::new(&p) } {
                return Some(l);
            }
        }
    }
    None
}

type Prog = *mut c_void;

/// Compiles `src` with NVRTC for `arch` (`sm_90`: a cubin; `compute_90`: PTX with its NUL).
pub fn nvrtc_compile(lib: &libloading::Library, src: &str, arch: &str) -> Result<Vec<u8>, String> {
    type Create = unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    type Compile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
    type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
    type Get = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
    let cubin = arch.starts_with("sm_");
    // SAFETY: the types are NVRTC's declarations (nvrtc.h); the library stays loaded.
    unsafe {
        let create: libloading::Symbol<Create> =
            lib.get(b"nvrtcCreateProgram").map_err(|e| e.to_string())?;
        let compile: libloading::Symbol<Compile> =
            lib.get(b"nvrtcCompileProgram").map_err(|e| e.to_string())?;
        let (size_name, get_name): (&[u8], &[u8]) = if cubin {
            (b"nvrtcGetCUBINSize", b"nvrtcGetCUBIN")
        } else {
            (b"nvrtcGetPTXSize", b"nvrtcGetPTX")
        };
        let size: libloading::Symbol<Size> = lib.get(size_name).map_err(|e| e.to_string())?;
        let get: libloading::Symbol<Get> = lib.get(get_name).map_err(|e| e.to_string())?;
        let log_size: libloading::Symbol<Size> = lib
            .get(b"nvrtcGetProgramLogSize")
            .map_err(|e| e.to_string())?;
        let log: libloading::Symbol<Get> =
            lib.get(b"nvrtcGetProgramLog").map_err(|e| e.to_string())?;
        let destroy: libloading::Symbol<Destroy> =
            lib.get(b"nvrtcDestroyProgram").map_err(|e| e.to_string())?;
        let csrc = CString::new(src).unwrap();
        let mut prog: Prog = std::ptr::null_mut();
        let r = create(
            &mut prog,
            csrc.as_ptr(),
            c"t.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        );
        if r != 0 {
            return Err(format!("nvrtcCreateProgram: {r}"));
        }
        let opts = [
            format!("--gpu-architecture={arch}"),
            "--fmad=false".to_string(),
        ];
        let copts: Vec<CString> = opts
            .iter()
            .map(|o| CString::new(o.as_str()).unwrap())
            .collect();
        let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
        let r = compile(prog, ptrs.len() as c_int, ptrs.as_ptr());
        if r != 0 {
            let mut n = 0;
            log_size(prog, &mut n);
            let mut buf = vec![0u8; n.max(1)];
            log(prog, buf.as_mut_ptr().cast());
            destroy(&mut prog);
            return Err(format!(
                "nvrtcCompileProgram: {r}: {}",
                String::from_utf8_lossy(&buf)
            ));
        }
        let mut n = 0;
        size(prog, &mut n);
        let mut out = vec![0u8; n];
        get(prog, out.as_mut_ptr().cast());
        destroy(&mut prog);
        Ok(out)
    }
}

/// Compiles `src` for `arch` with the real hipRTC (Debian's libamdhip64.so.5 holds it).
pub fn hiprtc_compile(src: &str, arch: &str) -> Option<Vec<u8>> {
    let lib = [
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5",
        "/opt/rocm/lib/libhiprtc.so",
    ]
    .iter()
    .filter(|p| std::path::Path::new(p).exists())
    // SAFETY: loading AMD's HIP runtime runs its initializers; they need no GPU.
    .find_map(|p| unsafe { libloading::Library::new(*p) }.ok())?;
    type Prog = *mut c_void;
    type Create = unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int;
    type Compile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
    type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
    type Get = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
    // SAFETY: hipRTC's declarations (hiprtc.h); the library stays loaded (leaked below: hipRTC
    // keeps threads that must not run unmapped code).
    let out = unsafe {
        let create: libloading::Symbol<Create> = lib.get(b"hiprtcCreateProgram").ok()?;
        let compile: libloading::Symbol<Compile> = lib.get(b"hiprtcCompileProgram").ok()?;
        let size: libloading::Symbol<Size> = lib.get(b"hiprtcGetCodeSize").ok()?;
        let get: libloading::Symbol<Get> = lib.get(b"hiprtcGetCode").ok()?;
        let csrc = CString::new(src).unwrap();
        let mut prog: Prog = std::ptr::null_mut();
        if create(
            &mut prog,
            csrc.as_ptr(),
            c"t.hip".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        ) != 0
        {
            return None;
        }
        let opt = CString::new(format!("--offload-arch={arch}")).unwrap();
        let opts = [opt.as_ptr()];
        let r = compile(prog, 1, opts.as_ptr());
        assert_eq!(r, 0, "hiprtcCompileProgram");
        let mut n = 0usize;
        size(prog, &mut n);
        let mut code = vec![0u8; n];
        get(prog, code.as_mut_ptr().cast());
        code
    };
    std::mem::forget(lib);
    Some(out)
}

/// The hand-written kernel of the brief: enough to test symbol reading.
pub const ADD_F32: &str = r#"extern "C" __global__ void add_f32(const float* a, const float* b, float* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
"#;

/// A minimal PTX text declaring `add_f32` (what NVRTC emits for compute_90, reduced to what
/// the emulator reads: `.version`, `.target`, `.entry`) and carrying, as NVRTC's images do,
/// the portable unit it stands for: the standard library's (`xt_portable_source`), which the
/// emulator runs.
pub static ADD_F32_PTX: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    ptx_with_source(
        ".version 8.5\n.target sm_90\n.address_size 64\n\n\t// .globl\tadd_f32\n.visible .entry add_f32(\n\t.param .u64 add_f32_param_0,\n\t.param .u64 add_f32_param_1,\n\t.param .u64 add_f32_param_2,\n\t.param .u64 add_f32_param_3\n)\n{\n\tret;\n}\n",
        xthunk_core::kernels::portable::standard_unit(),
    )
});

/// PTX text `entries` carrying `unit` as NVRTC writes a `const char` device array, NUL
/// terminated as a PTX image is.
pub fn ptx_with_source(entries: &str, unit: &str) -> String {
    let mut bytes: Vec<String> = unit.bytes().map(|b| b.to_string()).collect();
    bytes.push("0".into());
    format!(
        "{entries}.global .align 1 .b8 {}[{}] = {{{}}};\n\0",
        xthunk_core::kernels::portable::EMBEDDED_SOURCE_SYMBOL,
        bytes.len(),
        bytes.join(", ")
    )
}
