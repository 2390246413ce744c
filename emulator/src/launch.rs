//! Modules, functions and kernel launches.
//!
//! A module is loaded from a real image (cubin, PTX, AMD code object): the emulator reads its
//! architecture (refusing images the device could not run), its function names, what it says
//! about each kernel ([`crate::kernel_info`]) and the portable source it carries. Kernels run
//! for real: the carried source is compiled for the CPU and executed by core's CPU execution
//! ([`xthunk_core::host::cpu`]; 32 lanes per warp under CUDA, 64 under HIP). A function
//! exists when its name is in the image *and* the carried source defines it (by its source
//! or linker name); an image that carries no source (binary only) has no function the
//! emulator can run, and a same-named standard kernel never stands in. When the image
//! declares the kernel's parameters, their sizes must be the source's. A launch, as on a GPU:
//!
//! - checks its shape against the device's limits and the function's own (its launch bound,
//!   its static shared memory: [`crate::limits`]);
//! - takes the parameters from `kernelParams` (one pointer per parameter: the array has no
//!   count, so a shorter one is read past its end, as a real driver would; null with a null
//!   `extra` is refused when the kernel has parameters, where a real driver would crash) or
//!   from `extra`'s packed buffer, whose size must be the kernel's parameter buffer size; the
//!   layout of that buffer (the image's, else the C ABI's: each parameter aligned to its
//!   size, up to 8 bytes) is what `cuFuncGetParamInfo` reports;
//! - for the standard library's source, decodes them by the kernel's declared signature
//!   (buffers are device pointers; immediates by their C type: f16/bf16 as 2 raw bytes, i64
//!   as 8, pred as 1) and computes every buffer's length from the signature's extents; for
//!   other source, a pointer parameter may reach the rest of the allocation it points into
//!   (the extents are the kernel's own; a null one is refused, since the CPU execution would
//!   crash on dereferencing it where a GPU faults); and checks each range against the live allocations
//!   — at launch and again when the kernel runs: inside one allocation, of the launch's own
//!   context when it is device memory (pinned and managed memory are reachable from every
//!   context), and aligned to its element type (AMD hardware tolerates some misaligned
//!   accesses; the portable contract does not, and CUDA faults: both APIs refuse them).

use crate::context::{Api, Ctx, Owned};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::handles::{HandleKind, Table};
use crate::image::{Image, Target};
use crate::kernel_info::{self, KernelInfo, Kernels, ParamSlot};
use crate::memory::AllocInfo;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::host::cpu::{self, Entry, Program, Shape};
use xthunk_core::ir::{Access, DType, Scalar};
use xthunk_core::kernels::{Extent, HostArg, HostKernel, ParamKind, portable, standard_library};

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
    /// The portable unit the image carries.
    source: Option<String>,
    /// That unit compiled for the CPU (on the first function lookup).
    program: Mutex<Option<Arc<Program>>>,
    /// Function handles handed out, by name.
    handles: Mutex<HashMap<String, usize>>,
}

/// A function of a module.
pub struct FunctionCore {
    pub ctx_id: u64,
    pub module: usize,
    pub name: String,
    /// The standard kernel's signature, when the module's source is the standard library's.
    pub kernel: Option<&'static HostKernel>,
    run: Runner,
    /// What the image says about the kernel.
    pub info: KernelInfo,
    /// Where each parameter lies in a packed parameter buffer (`extra`): the image's layout,
    /// or the signature's by natural alignment when the image does not say.
    params: Vec<ParamSlot>,
}

impl FunctionCore {
    /// Parameter `i`'s name: the signature's, else its position.
    fn param_name(&self, i: usize) -> String {
        self.kernel
            .and_then(|k| k.signature.params.get(i))
            .map_or_else(|| format!("#{i}"), |p| p.name.to_string())
    }

    /// The size of the kernel's parameter buffer.
    pub fn param_buffer_size(&self) -> usize {
        kernel_info::buffer_end(&self.params)
    }

    /// Where each parameter lies in the parameter buffer (what `cuFuncGetParamInfo` answers).
    pub fn params(&self) -> &[ParamSlot] {
        &self.params
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
            if let Some(sm) = sm
                && *sm > dev
            {
                return Err(EmuError::new(
                    Code::InvalidPtx,
                    Kind::InvalidValue,
                    call,
                    format!("the PTX targets sm_{sm}, newer than the device (sm_{dev})"),
                ));
            }
            Ok(format!(
                "PTX {}",
                sm.map(|s| format!("sm_{s}")).unwrap_or_default()
            ))
        }
        (Target::Hsaco { mach }, crate::context::Api::Hip) => {
            if let Some(want) = crate::image::amdgpu_mach(&cfg.gfx)
                && want != *mach
            {
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
    ctx.owns(Owned {
        kind: HandleKind::Module,
        what: "module(s)",
        count: |c| MODULES.handles_where(|m| m.ctx_id == c).len(),
        destroy: destroy_context_modules,
    });
    Ok(MODULES.insert(Arc::new(ModuleCore {
        ctx_id: ctx.id,
        what,
        functions: img.functions,
        kernels: img.kernels,
        source: img.source,
        program: Mutex::new(None),
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

/// Unloads every module of context `ctx` (when it is destroyed).
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
    // xthunk's set-condition kernels, recognized by their module and run on the host
    // (EMULATED; see `crate::cuda::set_condition`): their `cudaGraphSetConditional` has no CPU
    // counterpart.
    let set_kernel = crate::context::by_id(m.ctx_id)
        .filter(|c| c.api == Api::Cuda)
        .and_then(|_| crate::cuda::set_condition::set_kernel(&m.functions, name));
    if let Some(k) = set_kernel {
        return set_condition_function(&m, module, name, k, call);
    }
    let program = program_of(&m, call)?;
    let Some(entry) = program.entry(name).cloned() else {
        let mut names: Vec<&str> = program
            .entries()
            .iter()
            .map(|e| e.symbol.as_str())
            .take(8)
            .collect();
        if program.entries().len() > 8 {
            names.push("…");
        }
        return Err(EmuError::new(
            Code::NotFound,
            Kind::InvalidValue,
            call,
            format!(
                "`{name}` is in the image, but the portable source it carries defines no kernel \
                 of that name (it defines [{}]); the emulator runs only that source",
                names.join(", ")
            ),
        ));
    };
    let is_standard = m.source.as_deref() == Some(portable::standard_unit());
    let kernel = if is_standard {
        standard_library().get(&entry.name)
    } else {
        None
    };
    let info = m
        .kernels
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, i)| i.clone())
        .unwrap_or_default();
    let sizes = match kernel {
        Some(k) => signature_sizes(k),
        None => entry.params.iter().map(|p| p.size as usize).collect(),
    };
    let declared: Vec<usize> = entry.params.iter().map(|p| p.size as usize).collect();
    if declared != sizes {
        return Err(EmuError::new(
            Code::NotFound,
            Kind::Unsupported,
            call,
            format!(
                "the standard library's `{name}` takes parameters of {sizes:?} bytes, its \
                 portable source of {declared:?}"
            ),
        ));
    }
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
                    "`{name}` in the image takes parameters of [{}] bytes, the portable source \
                     it carries of [{}]: the image was not compiled from that source",
                    list(&mut p.iter().map(|s| s.size)),
                    list(&mut sizes.iter().copied())
                ),
            ));
        }
        None => {
            kernel_info::natural_layout(sizes.iter().map(|&s| (s, kernel_info::natural_align(s))))
                .unwrap_or_default()
        }
    };
    let f = FUNCTIONS.insert(Arc::new(FunctionCore {
        ctx_id: m.ctx_id,
        module,
        name: name.to_string(),
        kernel,
        run: Runner::Cpu { program, entry },
        info,
        params,
    }));
    m.handles.lock().insert(name.to_string(), f);
    Ok(f)
}

/// What runs a function: its carried source on the CPU, or (xthunk's set-condition kernels
/// only) a host implementation.
#[derive(Clone)]
enum Runner {
    Cpu { program: Arc<Program>, entry: Entry },
    Host(&'static HostKernel),
}

/// The function of set-condition kernel `k` of module `m` (parameter sizes as the image
/// declares them must be the kernel's).
fn set_condition_function(
    m: &ModuleCore,
    module: usize,
    name: &str,
    k: &'static HostKernel,
    call: &str,
) -> EmuResult<usize> {
    let info = m
        .kernels
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, i)| i.clone())
        .unwrap_or_default();
    let sizes = signature_sizes(k);
    let params = match &info.params {
        Some(p) if p.iter().map(|s| s.size).eq(sizes.iter().copied()) => p.clone(),
        Some(_) => {
            return Err(EmuError::new(
                Code::NotFound,
                Kind::Unsupported,
                call,
                format!(
                    "`{name}` in the image does not take the set-condition kernel's {sizes:?}-byte parameters"
                ),
            ));
        }
        None => {
            kernel_info::natural_layout(sizes.iter().map(|&s| (s, kernel_info::natural_align(s))))
                .unwrap_or_default()
        }
    };
    let f = FUNCTIONS.insert(Arc::new(FunctionCore {
        ctx_id: m.ctx_id,
        module,
        name: name.to_string(),
        kernel: Some(k),
        run: Runner::Host(k),
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
    /// An immediate of a kernel without a standard signature: its bytes.
    Bytes(Vec<u8>),
}

/// A launch ready to run.
pub struct Launch {
    pub name: String,
    /// Each parameter's name, for messages.
    param_names: Vec<String>,
    run: Runner,
    shape: Shape,
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
        DType::I16 => Scalar::I16(i16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::U16 => Scalar::U16(u16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
        DType::U32 => Scalar::U32(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::U64 => Scalar::U64(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)),
        // No immediates of these types exist (kernels take them through buffers).
        DType::C64 | DType::C128 | DType::F8E4M3FN | DType::F8E5M2 => return None,
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
    if !params.is_null() {
        let mut out = vec![];
        for (i, size) in f.params.iter().map(|p| &p.size).enumerate() {
            // SAFETY: the caller passes one pointer per parameter.
            let p = unsafe { *params.add(i) };
            if p.is_null() {
                return Err(crate::error::invalid(
                    call,
                    format!("kernelParams[{i}] (`{}`) is null", f.param_name(i)),
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
        // A real driver would read the parameters through the null array and crash.
        return Err(crate::error::invalid(
            call,
            format!(
                "both kernelParams and extra are null, but `{}` has {} parameters",
                f.name,
                f.params.len()
            ),
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
    if !info.kind.device_only() || info.ctx == ctx_id {
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
    check_aligned_to(ptr, dtype.size(), what, call)
}

/// Checks that `ptr` is a multiple of `es` (an element's size or alignment).
fn check_aligned_to(ptr: usize, es: usize, what: &str, call: &str) -> EmuResult<()> {
    if es <= 1 || ptr.is_multiple_of(es) {
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
    let args = match f.kernel {
        Some(k) => standard_args(f, k, &raw, &call)?,
        None => source_args(f, &raw, &call)?,
    };
    let (grid, block, shared_bytes) = dims;
    Ok(Launch {
        name: f.name.clone(),
        param_names: (0..raw.len()).map(|i| f.param_name(i)).collect(),
        run: f.run.clone(),
        shape: Shape {
            grid,
            block,
            shared_bytes,
            warp_size: match api {
                Api::Cuda => 32,
                Api::Hip => 64,
            },
        },
        args,
        ctx_id: f.ctx_id,
        call,
    })
}

/// The arguments of a kernel of no standard signature: a pointer parameter must point into a
/// live allocation of the launch's context and may reach the rest of it; immediates are
/// passed as their bytes. A null pointer parameter is refused: a GPU faults only if the kernel
/// dereferences it, but the kernel runs on the CPU here, where a dereference would crash the
/// process (stricter than a GPU, for a kernel that takes an optional pointer).
fn source_args(f: &FunctionCore, raw: &[Vec<u8>], call: &str) -> EmuResult<Vec<RawArg>> {
    let Runner::Cpu { entry, .. } = &f.run else {
        return Err(crate::error::invalid(
            call,
            "a host kernel without a signature",
        ));
    };
    let mut args = vec![];
    for (i, (p, b)) in entry.params.iter().zip(raw).enumerate() {
        if !p.pointer {
            args.push(RawArg::Bytes(b.clone()));
            continue;
        }
        let ptr =
            usize::from_le_bytes(b.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]));
        let what = format!("pointer parameter {i} of `{}`", f.name);
        if ptr == 0 {
            return Err(EmuError::new(
                Code::IllegalAddress,
                Kind::InvalidValue,
                call,
                format!(
                    "{what} is null: the emulator runs the kernel on the CPU, where a dereference \
                     would crash the process, so it refuses a null pointer parameter (a GPU \
                     faults when the kernel dereferences it)"
                ),
            ));
        }
        let Some(info) = crate::memory::allocation_containing(ptr) else {
            return Err(EmuError::new(
                Code::IllegalAddress,
                Kind::InvalidValue,
                call,
                format!("{what} ({ptr:#x}) points into no live allocation"),
            ));
        };
        check_owner(&info, f.ctx_id, &what, call)?;
        check_aligned_to(ptr, p.align as usize, &what, call)?;
        let len = info.base + info.size - ptr;
        args.push(RawArg::Buffer {
            ptr,
            len,
            access: Access::ReadWrite,
        });
    }
    Ok(args)
}

/// The arguments of a standard kernel, decoded and checked by its signature.
fn standard_args(
    f: &FunctionCore,
    k: &HostKernel,
    raw: &[Vec<u8>],
    call: &str,
) -> EmuResult<Vec<RawArg>> {
    let call = call.to_string();
    let sig = &k.signature;
    let mut scalars: Vec<Option<Scalar>> = vec![None; sig.params.len()];
    for (i, (p, b)) in sig.params.iter().zip(raw).enumerate() {
        if let ParamKind::Scalar(dt) = p.kind {
            let s = scalar_from(dt, b).ok_or_else(|| {
                crate::error::invalid(&call, format!("parameter {i} `{}` is short", p.name))
            })?;
            if let Scalar::Pred(_) = s
                && b[0] > 1
            {
                return Err(crate::error::invalid(
                    &call,
                    format!("pred parameter `{}` holds {} (not 0 or 1)", p.name, b[0]),
                ));
            }
            scalars[i] = Some(s);
        }
    }
    let mut args = vec![];
    for (i, (p, b)) in sig.params.iter().zip(raw).enumerate() {
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
    Ok(args)
}

impl Launch {
    /// Runs the kernel's portable source on the CPU (re-checking every buffer first).
    pub fn execute(&self) -> EmuResult<()> {
        let _x = crate::stream::EXEC.lock();
        let mut slots = Vec::with_capacity(self.args.len());
        for (i, a) in self.args.iter().enumerate() {
            match a {
                RawArg::Buffer { ptr, len, access } => {
                    let what = format!(
                        "kernel buffer `{}` ({})",
                        self.param_names.get(i).map_or("?", String::as_str),
                        access.name()
                    );
                    let info =
                        crate::memory::check(*ptr, *len, &what, &self.call, Code::IllegalAddress)?;
                    if *len > 0 {
                        check_owner(&info, self.ctx_id, &what, &self.call)?;
                    }
                    slots.push(*ptr as u64);
                }
                RawArg::Scalar(s) => slots.push(slot_of(&s.to_le_bytes())),
                RawArg::Bytes(b) => slots.push(slot_of(b)),
            }
        }
        // SAFETY: every buffer lies inside a live allocation (checked just now, under the
        // execution lock, which every emulated access holds), and no other emulator thread
        // touches emulated memory during the call. What the kernel does within its
        // allocations is the kernel's own, as on a GPU.
        let r = match &self.run {
            // SAFETY: as above.
            Runner::Cpu { program, entry } => unsafe {
                program.launch_as_asked(entry, self.shape, &slots)
            },
            Runner::Host(k) => return self.run_host(k),
        };
        r.map_err(|e| {
            EmuError::new(
                Code::LaunchFailed,
                Kind::InvalidValue,
                &self.call,
                format!("the kernel failed on the CPU: {e}"),
            )
        })
    }
}

impl crate::stream::Kernel for Launch {
    fn name(&self) -> &str {
        &self.name
    }

    fn execute(&self) -> EmuResult<()> {
        Launch::execute(self)
    }
}

impl Launch {
    /// Runs a host kernel (xthunk's set-condition kernels) on the buffers checked by
    /// [`Launch::execute`], under the execution lock it holds.
    fn run_host(&self, k: &HostKernel) -> EmuResult<()> {
        let host: Vec<HostArg> = self
            .args
            .iter()
            .map(|a| match a {
                RawArg::Buffer { ptr, len, .. } => HostArg::Buffer {
                    ptr: *ptr as *mut u8,
                    len: *len,
                },
                RawArg::Scalar(s) => HostArg::Scalar(*s),
                RawArg::Bytes(_) => HostArg::Scalar(Scalar::I64(0)),
            })
            .collect();
        // SAFETY: every buffer lies inside a live allocation (checked by `execute` under the
        // execution lock, held by the caller), valid for `len` bytes and touched by no other
        // emulator thread during the call.
        unsafe { (k.func)(&host) }.map_err(|e| {
            EmuError::new(
                Code::LaunchFailed,
                Kind::InvalidValue,
                &self.call,
                format!("the host kernel failed: {e}"),
            )
        })
    }
}

/// An immediate's bytes in an 8-byte slot (larger ones are refused at lookup: the CPU
/// runtime reads at most 8 bytes per parameter).
fn slot_of(b: &[u8]) -> u64 {
    let mut s = [0u8; 8];
    let n = b.len().min(8);
    s[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(s)
}

/// The module's carried source compiled for the CPU (once per module).
fn program_of(m: &ModuleCore, call: &str) -> EmuResult<Arc<Program>> {
    let mut slot = m.program.lock();
    if let Some(p) = slot.as_ref() {
        return Ok(p.clone());
    }
    let Some(source) = &m.source else {
        return Err(EmuError::new(
            Code::NotFound,
            Kind::Unsupported,
            call,
            format!(
                "the module ({}) carries no portable source (a binary-only image): the emulator \
                 runs kernels only from the source an image was compiled from",
                m.what
            ),
        ));
    };
    // The GPUs' forms of the portable prelude's CPU-specific loops (XT_FOR_EACH as a
    // grid-stride loop, barriers between XT_BLOCK_PHASEs): the emulator plays the GPU.
    let unit = format!("#define XT_CPU_GPU_FORMS 1\n{source}");
    let p = cpu::load(&m.what, &unit).map_err(|e| {
        EmuError::new(
            Code::NotFound,
            Kind::Unsupported,
            call,
            format!("cannot run the module's portable source on the CPU: {e}"),
        )
    })?;
    *slot = Some(p.clone());
    Ok(p)
}
