//! Modules, functions and kernel launches.
//!
//! A module is loaded from a real image (cubin, PTX, AMD code object): the emulator reads its
//! architecture (refusing images the device could not run) and its function names. A function
//! exists when its name is in the image *and* in the xthunk standard kernel library, whose
//! host implementation runs it. A launch decodes the raw parameter array by the kernel's
//! declared signature (buffers are device pointers; immediates by their C type: f16/bf16 as 2
//! raw bytes, i64 as 8, pred as 1), computes every buffer's length from the signature's
//! extents, and checks each range against the live allocations — at launch and again when
//! the kernel runs.

use crate::context::Ctx;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use crate::image::{Image, Target};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::ir::{Access, DType, Scalar};
use xthunk_core::kernels::{Extent, HostArg, HostKernel, ParamKind, standard_library};

pub static MODULES: Table<ModuleCore> = Table::new(HandleKind::Module);
pub static FUNCTIONS: Table<FunctionCore> = Table::new(HandleKind::Function);

/// A loaded module.
pub struct ModuleCore {
    pub ctx_id: u64,
    /// `cubin sm_90`, `PTX sm_90`, `code object gfx90a`.
    pub what: String,
    pub functions: Vec<String>,
    /// Function handles handed out, by name.
    handles: Mutex<HashMap<String, usize>>,
}

/// A function of a module.
pub struct FunctionCore {
    pub ctx_id: u64,
    pub module: usize,
    pub name: String,
    pub kernel: &'static HostKernel,
}

/// Checks that a device of `ctx` can run `img`.
fn check_target(img: &Image, ctx: &Ctx, call: &str) -> EmuResult<String> {
    let cfg = crate::config::get();
    match (&img.target, ctx.api) {
        (Target::Cubin { sm }, crate::context::Api::Cuda) => {
            let dev = cfg.sm;
            if sm / 10 != dev / 10 || *sm > dev {
                return Err(EmuError::new(
                    Code::NoBinaryForGpu,
                    Kind::InvalidValue,
                    call,
                    format!("the cubin is for sm_{sm}; the device is sm_{dev}"),
                ));
            }
            Ok(format!("cubin sm_{sm}"))
        }
        (Target::Ptx { sm }, crate::context::Api::Cuda) => {
            let dev = cfg.sm;
            if let Some(sm) = sm {
                if *sm > dev {
                    return Err(EmuError::new(
                        Code::InvalidPtx,
                        Kind::InvalidValue,
                        call,
                        format!("the PTX targets sm_{sm}, newer than the device (sm_{dev})"),
                    ));
                }
            }
            Ok(format!(
                "PTX {}",
                sm.map(|s| format!("sm_{s}")).unwrap_or_default()
            ))
        }
        (Target::Hsaco { mach }, crate::context::Api::Hip) => {
            if let Some(want) = crate::image::amdgpu_mach(&cfg.gfx) {
                if want != *mach {
                    return Err(EmuError::new(
                        Code::NoBinaryForGpu,
                        Kind::InvalidValue,
                        call,
                        format!(
                            "the code object is for EF_AMDGPU_MACH {mach:#x}; the device is {} ({want:#x})",
                            cfg.gfx
                        ),
                    ));
                }
            }
            Ok(format!("code object {}", cfg.gfx))
        }
        (t, api) => Err(EmuError::new(
            Code::InvalidImage,
            Kind::InvalidValue,
            call,
            format!("a {t:?} image cannot be loaded through the {api:?} API"),
        )),
    }
}

/// Loads the image at `image` into `ctx`; returns the module handle.
///
/// # Safety
/// `image` must point to a complete image, as the vendor APIs require.
pub unsafe fn load_module(ctx: &Arc<Ctx>, image: *const c_void, call: &str) -> EmuResult<usize> {
    // SAFETY: forwarded from the caller.
    let img = unsafe { crate::image::read_raw(image.cast()) }
        .map_err(|e| EmuError::new(Code::InvalidImage, Kind::InvalidValue, call, e))?;
    let what = check_target(&img, ctx, call)?;
    Ok(MODULES.insert(Arc::new(ModuleCore {
        ctx_id: ctx.id,
        what,
        functions: img.functions,
        handles: Mutex::new(HashMap::new()),
    })))
}

/// Unloads a module: its functions become invalid handles.
pub fn unload_module(handle: usize, call: &str) -> EmuResult<()> {
    let m = MODULES.remove(handle, call)?;
    for (_, f) in m.handles.lock().drain() {
        let _ = FUNCTIONS.remove(f, call);
    }
    Ok(())
}

pub fn destroy_context_modules(ctx: u64) {
    for h in MODULES.handles_where(|m| m.ctx_id == ctx) {
        let _ = unload_module(h, "context destruction");
    }
}

/// The function `name` of module `module`.
pub fn get_function(module: usize, name: &str, call: &str) -> EmuResult<usize> {
    let m = MODULES.get(module, call)?;
    if let Some(h) = m.handles.lock().get(name) {
        return Ok(*h);
    }
    if !m.functions.iter().any(|f| f == name) {
        let mut listed: Vec<&str> = m.functions.iter().map(String::as_str).take(8).collect();
        if m.functions.len() > 8 {
            listed.push("…");
        }
        return Err(EmuError::new(
            Code::NotFound,
            Kind::InvalidValue,
            call,
            format!(
                "no function `{name}` in the module ({}; it has {})",
                m.what,
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            ),
        ));
    }
    let Some(kernel) = standard_library().get(name) else {
        return Err(EmuError::new(
            Code::NotFound,
            Kind::Unsupported,
            call,
            format!(
                "`{name}` is in the image but is not a kernel of the xthunk standard library, \
                 which is all the emulator can run"
            ),
        ));
    };
    let f = FUNCTIONS.insert(Arc::new(FunctionCore {
        ctx_id: m.ctx_id,
        module,
        name: name.to_string(),
        kernel,
    }));
    m.handles.lock().insert(name.to_string(), f);
    Ok(f)
}

/// A decoded kernel argument.
#[derive(Clone, Debug)]
pub enum RawArg {
    Buffer {
        ptr: usize,
        len: usize,
        access: Access,
    },
    Scalar(Scalar),
}

/// A launch ready to run.
pub struct Launch {
    pub name: String,
    kernel: &'static HostKernel,
    args: Vec<RawArg>,
    call: String,
}

/// `CU_LAUNCH_PARAM_END`, `…_BUFFER_POINTER`, `…_BUFFER_SIZE` (HIP: 3, 1, 2).
#[derive(Clone, Copy)]
pub struct ExtraTags {
    pub end: usize,
    pub pointer: usize,
    pub size: usize,
}

pub const CUDA_EXTRA: ExtraTags = ExtraTags {
    end: 0,
    pointer: 1,
    size: 2,
};
pub const HIP_EXTRA: ExtraTags = ExtraTags {
    end: 3,
    pointer: 1,
    size: 2,
};

fn scalar_from(dt: DType, b: &[u8]) -> Option<Scalar> {
    Some(match dt {
        DType::Pred => Scalar::Pred(*b.first()? != 0),
        DType::I8 => Scalar::I8(*b.first()? as i8),
        DType::U8 => Scalar::U8(*b.first()?),
        DType::I32 => Scalar::I32(i32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::I64 => Scalar::I64(i64::from_le_bytes(b.get(..8)?.try_into().ok()?)),
        DType::F16 => Scalar::F16(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::BF16 => Scalar::BF16(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::F32 => Scalar::F32(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F64 => Scalar::F64(f64::from_le_bytes(b.get(..8)?.try_into().ok()?)),
    })
}

/// The raw bytes of each parameter: from `kernelParams` (one pointer per parameter) or from
/// `extra`'s packed buffer (natural alignment).
///
/// # Safety
/// As the launch APIs require: `params` holds one valid pointer per parameter of the kernel,
/// each to a value of the parameter's type; or `extra` is a valid tag list.
unsafe fn raw_params(
    f: &FunctionCore,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    tags: ExtraTags,
    call: &str,
) -> EmuResult<Vec<Vec<u8>>> {
    let sig = &f.kernel.signature;
    let sizes: Vec<usize> = sig
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Buffer { .. } => 8,
            ParamKind::Scalar(dt) => dt.size(),
        })
        .collect();
    if !params.is_null() {
        let mut out = vec![];
        for (i, size) in sizes.iter().enumerate() {
            // SAFETY: the caller passes one pointer per parameter.
            let p = unsafe { *params.add(i) };
            if p.is_null() {
                return Err(crate::error::invalid(
                    call,
                    format!("kernelParams[{i}] (`{}`) is null", sig.params[i].name),
                ));
            }
            // SAFETY: `p` points to a value of the parameter's type, `size` bytes.
            out.push(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), *size) }.to_vec());
        }
        return Ok(out);
    }
    if extra.is_null() {
        if sizes.is_empty() {
            return Ok(vec![]);
        }
        return Err(crate::error::invalid(
            call,
            "both kernelParams and extra are null, but the kernel has parameters",
        ));
    }
    let (mut buf, mut len): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        // SAFETY: `extra` is a tag list ending with the END tag, as the API requires.
        let tag = unsafe { *extra.add(i) } as usize;
        if tag == tags.end {
            break;
        }
        // SAFETY: every tag but END is followed by its value.
        let val = unsafe { *extra.add(i + 1) };
        if tag == tags.pointer {
            buf = val as *const u8;
        } else if tag == tags.size {
            // SAFETY: the size tag's value points to a size_t.
            len = Some(unsafe { *(val as *const usize) });
        } else {
            return Err(crate::error::invalid(
                call,
                format!("unknown `extra` tag {tag}"),
            ));
        }
        i += 2;
        if i > 64 {
            return Err(crate::error::invalid(call, "`extra` is not terminated"));
        }
    }
    let (Some(len), false) = (len, buf.is_null()) else {
        return Err(crate::error::invalid(
            call,
            "`extra` needs both a buffer pointer and its size",
        ));
    };
    let mut out = vec![];
    let mut off = 0usize;
    for (i, size) in sizes.iter().enumerate() {
        off = off.next_multiple_of(*size);
        if off + size > len {
            return Err(crate::error::invalid(
                call,
                format!(
                    "the `extra` buffer ({len} bytes) ends before parameter {i} `{}`",
                    sig.params[i].name
                ),
            ));
        }
        // SAFETY: `buf` holds `len` bytes (as the caller declared), `off + size <= len`.
        out.push(unsafe { std::slice::from_raw_parts(buf.add(off), *size) }.to_vec());
        off += size;
    }
    Ok(out)
}

/// Decodes and checks a launch of `f` (argument pointers as the launch API takes them).
///
/// # Safety
/// See [`raw_params`].
pub unsafe fn prepare(
    f: &FunctionCore,
    dims: ([u32; 3], [u32; 3], u32),
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    tags: ExtraTags,
    api_call: &str,
) -> EmuResult<Launch> {
    let call = format!("{api_call}({})", f.name);
    let (grid, block, shared) = dims;
    if grid.contains(&0) || block.contains(&0) {
        return Err(crate::error::invalid(
            &call,
            format!("empty launch: grid {grid:?}, block {block:?}"),
        ));
    }
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    if threads > 1024 || block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 {
        return Err(crate::error::invalid(
            &call,
            format!("launch shape out of range: grid {grid:?}, block {block:?}"),
        ));
    }
    if shared > 48 * 1024 {
        return Err(crate::error::invalid(
            &call,
            format!("{shared} bytes of dynamic shared memory (at most 48 KiB without opt-in)"),
        ));
    }
    if crate::config::launch_fails() {
        return Err(EmuError::new(
            Code::LaunchOutOfResources,
            Kind::Injected,
            &call,
            "injected launch failure (XTHUNK_EMU_FAIL_LAUNCH)",
        ));
    }
    // SAFETY: forwarded from the caller.
    let raw = unsafe { raw_params(f, params, extra, tags, &call) }?;
    let sig = &f.kernel.signature;
    let mut scalars: Vec<Option<Scalar>> = vec![None; sig.params.len()];
    for (i, (p, b)) in sig.params.iter().zip(&raw).enumerate() {
        if let ParamKind::Scalar(dt) = p.kind {
            let s = scalar_from(dt, b).ok_or_else(|| {
                crate::error::invalid(&call, format!("parameter {i} `{}` is short", p.name))
            })?;
            if let Scalar::Pred(_) = s {
                if b[0] > 1 {
                    return Err(crate::error::invalid(
                        &call,
                        format!("pred parameter `{}` holds {} (not 0 or 1)", p.name, b[0]),
                    ));
                }
            }
            scalars[i] = Some(s);
        }
    }
    let mut args = vec![];
    for (i, (p, b)) in sig.params.iter().zip(&raw).enumerate() {
        match &p.kind {
            ParamKind::Scalar(_) => {
                if let Some(s) = scalars[i] {
                    args.push(RawArg::Scalar(s));
                }
            }
            ParamKind::Buffer {
                dtype,
                access,
                elems,
            } => {
                let ptr = usize::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
                let count = match elems {
                    Extent::Fixed(n) => Some(*n),
                    Extent::Product(idx) => idx.iter().try_fold(1u64, |acc, &j| {
                        let v = scalars.get(j).copied().flatten()?.as_i64()?;
                        if v < 0 {
                            return None;
                        }
                        acc.checked_mul(v as u64)
                    }),
                };
                let len = count
                    .and_then(|c| c.checked_mul(dtype.size() as u64))
                    .and_then(|l| usize::try_from(l).ok())
                    .ok_or_else(|| {
                        crate::error::invalid(
                            &call,
                            format!("`{}`: the element count is negative or overflows", p.name),
                        )
                    })?;
                crate::memory::check(
                    ptr,
                    len,
                    &format!(
                        "kernel buffer `{}` ({} x {dtype})",
                        p.name,
                        count.unwrap_or(0)
                    ),
                    &call,
                    Code::IllegalAddress,
                )?;
                args.push(RawArg::Buffer {
                    ptr,
                    len,
                    access: *access,
                });
            }
        }
    }
    Ok(Launch {
        name: f.name.clone(),
        kernel: f.kernel,
        args,
        call,
    })
}

impl Launch {
    /// Runs the host implementation (re-checking every buffer first).
    pub fn execute(&self) -> EmuResult<()> {
        let _x = crate::stream::EXEC.lock();
        let mut host = Vec::with_capacity(self.args.len());
        for (i, a) in self.args.iter().enumerate() {
            match *a {
                RawArg::Buffer { ptr, len, access } => {
                    crate::memory::check(
                        ptr,
                        len,
                        &format!(
                            "kernel buffer `{}` ({})",
                            self.kernel.signature.params[i].name,
                            access.name()
                        ),
                        &self.call,
                        Code::IllegalAddress,
                    )?;
                    host.push(HostArg::Buffer {
                        ptr: if len == 0 {
                            std::ptr::null_mut()
                        } else {
                            ptr as *mut u8
                        },
                        len,
                    });
                }
                RawArg::Scalar(s) => host.push(HostArg::Scalar(s)),
            }
        }
        // SAFETY: every buffer lies inside a live allocation (checked just now, under the
        // execution lock, which every emulated access holds), so it is valid for `len` bytes
        // and no other emulator thread touches it during the call.
        let r = unsafe { (self.kernel.func)(&host) };
        r.map_err(|e| {
            EmuError::new(
                Code::LaunchFailed,
                Kind::InvalidValue,
                &self.call,
                format!("the host kernel failed: {e}"),
            )
        })
    }
}
