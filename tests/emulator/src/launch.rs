//! Modules, functions and kernel launches.
//!
//! A module is loaded from a real image (cubin, PTX, AMD code object): the emulator reads its
//! architecture (refusing images the device could not run), its function names and what it
//! says about each kernel ([`crate::kernel_info`]). A function exists when its name is in the
//! image *and* in the xthunk standard kernel library, whose host implementation runs it; when
//! the image declares the kernel's parameters, their sizes must be the signature's (the
//! emulator runs the standard kernel, not the image's code). A launch, as on a GPU:
//!
//! - checks its shape against the device's limits and the function's own (its launch bound,
//!   its static shared memory: [`crate::limits`]);
//! - takes the parameters from `kernelParams` (one pointer per parameter) or from `extra`'s
//!   packed buffer, whose size must be the kernel's parameter buffer size;
//! - decodes them by the kernel's declared signature (buffers are device pointers; immediates
//!   by their C type: f16/bf16 as 2 raw bytes, i64 as 8, pred as 1), computes every buffer's
//!   length from the signature's extents, and checks each range against the live allocations
//!   — at launch and again when the kernel runs: inside one allocation, of the launch's own
//!   context when it is device memory (pinned and managed memory are reachable from every
//!   context), and aligned to its element type (AMD hardware tolerates some misaligned
//!   accesses; the portable contract does not, and CUDA faults: both APIs refuse them).

use crate::context::{Api, Ctx};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use crate::image::{Image, Target};
use crate::kernel_info::{self, KernelInfo, Kernels, ParamSlot};
use crate::memory::{AllocInfo, MemKind};
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
    /// What the image says about its kernels.
    kernels: Kernels,
    /// Function handles handed out, by name.
    handles: Mutex<HashMap<String, usize>>,
}

/// A function of a module.
pub struct FunctionCore {
    pub ctx_id: u64,
    pub module: usize,
    pub name: String,
    pub kernel: &'static HostKernel,
    /// What the image says about the kernel.
    pub info: KernelInfo,
    /// Where each parameter lies in a packed parameter buffer (`extra`): the image's layout,
    /// or the signature's by natural alignment when the image does not say.
    params: Vec<ParamSlot>,
}

impl FunctionCore {
    /// The size of the kernel's parameter buffer.
    pub fn param_buffer_size(&self) -> usize {
        kernel_info::buffer_end(&self.params)
    }
}

/// The size of each parameter of a signature as a launch passes it (buffers are pointers).
fn signature_sizes(kernel: &HostKernel) -> Vec<usize> {
    kernel
        .signature
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Buffer { .. } => 8,
            ParamKind::Scalar(dt) => dt.size(),
        })
        .collect()
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
        kernels: img.kernels,
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
    // xthunk's set-condition kernels, recognized by their module (EMULATED; see
    // `crate::cuda::conditional`).
    let set_kernel = || {
        crate::context::by_id(m.ctx_id)
            .filter(|c| c.api == Api::Cuda)
            .and_then(|_| crate::cuda::conditional::set_kernel(&m.functions, name))
    };
    let Some(kernel) = standard_library().get(name).or_else(set_kernel) else {
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
    let info = m
        .kernels
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, i)| i.clone())
        .unwrap_or_default();
    let sizes = signature_sizes(kernel);
    let params = match &info.params {
        Some(p) if p.iter().map(|s| s.size).eq(sizes.iter().copied()) => p.clone(),
        Some(p) => {
            let list = |v: &mut dyn Iterator<Item = usize>| {
                v.map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
            };
            return Err(EmuError::new(
                Code::NotFound,
                Kind::Unsupported,
                call,
                format!(
                    "`{name}` in the image takes parameters of [{}] bytes, the standard \
                     library's `{name}` of [{}]: the emulator runs the standard kernel, so it \
                     cannot run this one",
                    list(&mut p.iter().map(|s| s.size)),
                    list(&mut sizes.iter().copied())
                ),
            ));
        }
        None => kernel_info::natural_layout(sizes.iter().map(|&s| (s, s))).unwrap_or_default(),
    };
    let f = FUNCTIONS.insert(Arc::new(FunctionCore {
        ctx_id: m.ctx_id,
        module,
        name: name.to_string(),
        kernel,
        info,
        params,
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
    /// The context the kernel runs in (its buffers' device memory must be its own).
    ctx_id: u64,
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
    if !params.is_null() {
        let mut out = vec![];
        for (i, size) in f.params.iter().map(|p| &p.size).enumerate() {
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
        if f.params.is_empty() {
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
    // The parameter buffer's size, or that rounded up to its alignment (a C struct's size).
    let end = f.param_buffer_size();
    let align = f
        .params
        .iter()
        .map(|p| p.size)
        .max()
        .unwrap_or(1)
        .clamp(1, 8);
    if len != end && len != end.next_multiple_of(align) {
        return Err(crate::error::invalid(
            call,
            format!(
                "the `extra` buffer is {len} bytes; `{}`'s parameters take {end}",
                f.name
            ),
        ));
    }
    let mut out = vec![];
    for p in &f.params {
        // SAFETY: `buf` holds `len` bytes (as the caller declared), and every parameter ends
        // within the parameter buffer's size, at most `len`.
        out.push(unsafe { std::slice::from_raw_parts(buf.add(p.offset), p.size) }.to_vec());
    }
    Ok(out)
}

/// Checks that a kernel buffer of `len > 0` bytes at `ptr`, inside the allocation `info`, is
/// reachable from context `ctx_id`: device memory of another context (another device, or
/// another CUDA context of the same device) is not mapped there. Pinned and managed memory
/// are reachable from every context.
fn check_owner(info: &AllocInfo, ctx_id: u64, what: &str, call: &str) -> EmuResult<()> {
    if info.kind != MemKind::Device || info.ctx == ctx_id {
        return Ok(());
    }
    let name = |id: u64| {
        crate::context::by_id(id).map(|c| match c.api {
            Api::Cuda => format!("context #{} of device {}", c.id, c.device),
            Api::Hip => format!("device {}", c.device),
        })
    };
    let owner = name(info.ctx).unwrap_or_else(|| "another context".into());
    let here = name(ctx_id).unwrap_or_else(|| "the launch's context".into());
    Err(EmuError::new(
        Code::IllegalAddress,
        Kind::ForeignMemory,
        call,
        format!(
            "{what}: {} belongs to {owner}, not to {here}, where the kernel runs",
            info.describe()
        ),
    ))
}

/// Checks that a kernel buffer's address is aligned to its element type (a GPU faults on a
/// misaligned access).
fn check_aligned(ptr: usize, dtype: DType, what: &str, call: &str) -> EmuResult<()> {
    let es = dtype.size();
    if ptr % es == 0 {
        return Ok(());
    }
    Err(EmuError::new(
        Code::MisalignedAddress,
        Kind::Misaligned,
        call,
        format!(
            "{what} at {ptr:#x} is not aligned to its {es}-byte element type (offset {} in \
             its allocation)",
            crate::memory::allocation_containing(ptr).map_or(0, |a| ptr - a.base)
        ),
    ))
}

/// Decodes and checks a launch of `f` on a device of `api` (argument pointers as the launch
/// API takes them).
///
/// # Safety
/// See [`raw_params`].
pub unsafe fn prepare(
    f: &FunctionCore,
    api: Api,
    dims: ([u32; 3], [u32; 3], u32),
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    tags: ExtraTags,
    api_call: &str,
) -> EmuResult<Launch> {
    let call = format!("{api_call}({})", f.name);
    crate::limits::check_launch(api, &f.name, &f.info, dims, &call)?;
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
                let what = format!(
                    "kernel buffer `{}` ({} x {dtype})",
                    p.name,
                    count.unwrap_or(0)
                );
                let info = crate::memory::check(ptr, len, &what, &call, Code::IllegalAddress)?;
                if len > 0 {
                    check_owner(&info, f.ctx_id, &what, &call)?;
                    check_aligned(ptr, *dtype, &what, &call)?;
                }
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
        ctx_id: f.ctx_id,
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
                    let what = format!(
                        "kernel buffer `{}` ({})",
                        self.kernel.signature.params[i].name,
                        access.name()
                    );
                    let info =
                        crate::memory::check(ptr, len, &what, &self.call, Code::IllegalAddress)?;
                    if len > 0 {
                        check_owner(&info, self.ctx_id, &what, &self.call)?;
                    }
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
