//! Modules and kernels: picking the image for the device, loading it into a `CUmodule`,
//! kernel lookup, and the marshalling of launch arguments for `cuLaunchKernel`.
//!
//! Preference order: a `cubin` whose architecture is exactly the device's `sm_XX` (checked
//! against the ELF header too); the `standard` library or `source` compiled by NVRTC for the
//! device (a cubin, or PTX for the newest architecture NVRTC knows when it does not know the
//! device's; cached on disk, and the standard library once per device in memory); `ptx`
//! through the driver's JIT. An image that fails to load is logged and the next one tried;
//! when none loads, the error lists what the module has, what the device needs, and why each
//! candidate failed.
//!
//! Arguments: each is marshalled into one 8-byte slot (buffers as `CUdeviceptr`, immediates
//! as their C type's little-endian bytes), checked first against the kernel's signature when
//! it is a standard kernel, else against its parameters as the driver lays them out (count
//! and sizes, [`crate::params`]; unchecked on a driver that cannot say), and against the
//! device's live allocations, and passed to
//! `cuLaunchKernel` as the `kernelParams` array of pointers to the slots; the driver copies
//! the values at launch (and at capture), so the slots live only for the call.

use crate::context::DeviceContext;
use crate::image;
use crate::params::{self, ParamLayout};
use crate::result::{cu, cu_describe};
use crate::sys::{self, CUjit_option, CUresult};
use crate::vendor::{Cuda, MemoryRegistry};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use xthunk_core::backend::{KernelHandle, LaunchArg, LaunchDims, LoadedModule};
use xthunk_core::ir::{Module, ModuleImage};
use xthunk_core::kernels::portable::stamp;
use xthunk_core::kernels::{KernelSignature, ParamKind, portable, standard_library};
use xthunk_core::{Error, Result};
use xthunk_gpu::args::KernelArgs;
#[cfg(test)]
use xthunk_gpu::args::arg_slot;

/// A loaded `CUmodule`, unloaded on drop (after every kernel handle of it is gone).
#[derive(Debug)]
pub(crate) struct ModuleRaw {
    ctx: Arc<DeviceContext>,
    raw: sys::CUmodule,
}

// SAFETY: module and function handles are usable from any thread with the context current
// (done before every call); they are immutable after loading.
unsafe impl Send for ModuleRaw {}
// SAFETY: as above.
unsafe impl Sync for ModuleRaw {}

impl Drop for ModuleRaw {
    fn drop(&mut self) {
        let r = self.ctx.bind().and_then(|()| {
            // SAFETY: loaded by cuModuleLoadDataEx, unloaded once, here.
            cu("cuModuleUnload", unsafe { sys::cuModuleUnload(self.raw) })
        });
        if let Err(e) = r {
            tracing::error!("{e}");
        }
    }
}

impl ModuleRaw {
    /// The `CUmodule` (live while `self` is).
    pub(crate) fn raw(&self) -> sys::CUmodule {
        self.raw
    }
}

/// A device's standard library, compiled and loaded once and shared by every module using
/// it (with the description of the image).
#[derive(Default)]
pub(crate) struct StandardModule(Mutex<Option<(Arc<ModuleRaw>, String)>>);

/// Loads a cubin or (NUL-terminated) PTX image, with the JIT's error log in the error.
fn load_image(ctx: &Arc<DeviceContext>, image: &[u8]) -> Result<ModuleRaw> {
    ctx.bind()?;
    const LOG: usize = 16 * 1024;
    let mut log = vec![0u8; LOG];
    let mut options = [
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG as *mut c_void];
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `image` is a complete cubin or NUL-terminated PTX that lives for the call; the
    // two options point at a log buffer of LOG bytes (the size passed by value in the pointer
    // slot, as the driver API specifies); the context is current.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut raw,
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(0);
        let log = String::from_utf8_lossy(&log[..end]);
        let mut msg = format!("cuModuleLoadDataEx failed: {}", cu_describe(r));
        if !log.trim().is_empty() {
            msg.push_str(&format!("; JIT log: {}", log.trim()));
        }
        return Err(Error::backend(
            crate::result::BACKEND,
            "cuModuleLoadDataEx",
            msg,
        ));
    }
    Ok(ModuleRaw {
        ctx: ctx.clone(),
        raw,
    })
}

/// A candidate image, in the order tried.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ImageChoice<'a> {
    Cubin(&'a [u8]),
    Standard,
    Source(&'a str),
    Ptx(&'a str),
}

/// The images of `images` a device of architecture `sm` can use, best first.
pub(crate) fn select_images(images: &[ModuleImage], sm: u32) -> Vec<ImageChoice<'_>> {
    let arch = format!("sm_{sm}");
    let mut out = vec![];
    for img in images {
        if let ModuleImage::Cubin { arch: a, data } = img
            && *a == arch
        {
            out.push(ImageChoice::Cubin(data));
        }
    }
    if images.iter().any(|i| matches!(i, ModuleImage::Standard)) {
        out.push(ImageChoice::Standard);
    }
    for img in images {
        if let ModuleImage::Source { code } = img {
            out.push(ImageChoice::Source(code));
        }
    }
    for img in images {
        if let ModuleImage::Ptx { code } = img {
            out.push(ImageChoice::Ptx(code));
        }
    }
    out
}

fn describe(c: &ImageChoice<'_>, sm: u32) -> String {
    match c {
        ImageChoice::Cubin(_) => format!("cubin(sm_{sm})"),
        ImageChoice::Standard => "standard".into(),
        ImageChoice::Source(_) => "source".into(),
        ImageChoice::Ptx(_) => "ptx".into(),
    }
}

/// Compiles `source` with NVRTC for the device and loads it.
pub(crate) fn compile_and_load(
    ctx: &Arc<DeviceContext>,
    source: &str,
) -> Result<(ModuleRaw, String)> {
    let compiler = ctx.compiler().map_err(|e| Error::Unavailable {
        backend: crate::result::BACKEND.into(),
        reason: format!("NVRTC is needed to compile portable source: {e}"),
    })?;
    let out = compiler.compile_for_device(source, ctx.sm)?;
    let mut image = out.image;
    if out.target.output() == crate::target::Output::Ptx {
        image.push(0);
    }
    let (maj, min) = compiler.nvrtc().version();
    let desc = format!("{} by NVRTC {maj}.{min}", out.target);
    Ok((load_image(ctx, &image)?, desc))
}

/// Refuses a compiled image whose source stamp differs from the module's source
/// ([`portable::stamp`], checked by [`xthunk_gpu::image::check_stamp`]); an image without a
/// stamp is used with a warning.
fn check_stamp<'a>(
    module: &str,
    expected: Option<&str>,
    image: &str,
    symbols: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let Some(expected) = expected else {
        return Ok(());
    };
    xthunk_gpu::image::check_stamp(module, expected, image, symbols).map_err(|message| {
        Error::Module {
            module: module.to_string(),
            message,
        }
    })
}

fn try_choice(
    ctx: &Arc<DeviceContext>,
    standard: &StandardModule,
    m: &Module,
    expected: Option<&str>,
    c: &ImageChoice<'_>,
) -> Result<(Arc<ModuleRaw>, String, bool)> {
    let module = m.name.as_str();
    match *c {
        ImageChoice::Cubin(data) => {
            let info = image::inspect(data).map_err(|e| Error::Module {
                module: String::new(),
                message: format!("cubin: {e}"),
            })?;
            let what = format!("cubin(sm_{})", info.sm);
            check_stamp(
                module,
                expected,
                &what,
                info.functions.iter().map(String::as_str),
            )?;
            if info.sm != ctx.sm {
                return Err(Error::InvalidArgument(format!(
                    "the cubin labelled sm_{} is an ELF for sm_{}",
                    ctx.sm, info.sm
                )));
            }
            let m = load_image(ctx, data)?;
            Ok((Arc::new(m), format!("cubin(sm_{})", ctx.sm), false))
        }
        ImageChoice::Standard => {
            let mut cached = standard.0.lock();
            if let Some((m, d)) = cached.as_ref() {
                return Ok((m.clone(), d.clone(), true));
            }
            let (m, d) = compile_and_load(ctx, portable::standard_source())?;
            let m = Arc::new(m);
            let d = format!("standard ({d})");
            *cached = Some((m.clone(), d.clone()));
            Ok((m, d, true))
        }
        ImageChoice::Source(code) => {
            let unit = portable::module_source_with(module, code, &m.options);
            let (m, d) = compile_and_load(ctx, &unit)?;
            Ok((Arc::new(m), format!("source ({d})"), false))
        }
        ImageChoice::Ptx(code) => {
            check_stamp(module, expected, "ptx", stamp::ptx_entries(code))?;
            let text = CString::new(code)
                .map_err(|_| Error::InvalidArgument("PTX image contains a NUL byte".into()))?;
            let m = load_image(ctx, text.as_bytes_with_nul())?;
            Ok((Arc::new(m), "ptx (driver JIT)".into(), false))
        }
    }
}

/// Loads `module` on the device of `ctx` (`standard`: that device's compiled standard
/// library, compiled here on first use).
pub(crate) fn load(
    ctx: &Arc<DeviceContext>,
    standard: &StandardModule,
    module: &Module,
) -> Result<Arc<dyn LoadedModule>> {
    let sm = ctx.sm;
    let mut failures = vec![];
    let expected = stamp::expected_stamp(module);
    for c in select_images(&module.images, sm) {
        match try_choice(ctx, standard, module, expected.as_deref(), &c) {
            Ok((raw, image, standard)) => {
                tracing::debug!(module = %module.name, "loaded {image}");
                return Ok(Arc::new(CudaModule {
                    name: module.name.clone(),
                    image,
                    raw,
                    standard,
                    kernels: Mutex::new(HashMap::new()),
                }));
            }
            Err(e) => {
                tracing::warn!(module = %module.name, "image {} failed: {e}", describe(&c, sm));
                failures.push(format!("{}: {e}", describe(&c, sm)));
            }
        }
    }
    let have: Vec<String> = module.images.iter().map(|i| i.describe()).collect();
    let mut message = format!(
        "no image the CUDA device can load: the module has [{}]; the device ({}, sm_{sm}) needs cubin(sm_{sm}), ptx, or standard/source (compiled by NVRTC)",
        have.join(", "),
        ctx.name,
    );
    if !failures.is_empty() {
        message.push_str(&format!("; tried: {}", failures.join("; ")));
    }
    Err(Error::Module {
        module: module.name.clone(),
        message,
    })
}

/// A module loaded on a CUDA device.
pub struct CudaModule {
    name: String,
    image: String,
    raw: Arc<ModuleRaw>,
    /// Loaded from the standard library: kernels get their signatures checked at launch.
    standard: bool,
    kernels: Mutex<HashMap<String, Arc<CudaKernel>>>,
}

impl LoadedModule for CudaModule {
    fn name(&self) -> &str {
        &self.name
    }

    fn image(&self) -> String {
        self.image.clone()
    }

    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>> {
        let mut kernels = self.kernels.lock();
        if let Some(k) = kernels.get(name) {
            return Ok(k.clone());
        }
        let not_found = |why: String| Error::Module {
            module: self.name.clone(),
            message: format!("kernel `{name}` not found in {}: {why}", self.image),
        };
        let cname = CString::new(name).map_err(|_| not_found("name contains a NUL".into()))?;
        self.raw.ctx.bind()?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is live; writes one function handle.
        let r = unsafe { sys::cuModuleGetFunction(&mut f, self.raw.raw, cname.as_ptr()) };
        if r != CUresult::CUDA_SUCCESS {
            return Err(not_found(format!(
                "cuModuleGetFunction: {}",
                cu_describe(r)
            )));
        }
        let signature = if self.standard {
            standard_library().get(name).map(|k| k.signature.clone())
        } else {
            None
        };
        let layout = match &signature {
            Some(_) => None,
            None => params::query(f, name),
        };
        let k = Arc::new(CudaKernel {
            name: name.to_string(),
            func: f,
            _module: self.raw.clone(),
            signature,
            layout,
        });
        kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }
}

/// A kernel ready to launch; keeps its module loaded.
pub struct CudaKernel {
    name: String,
    func: sys::CUfunction,
    _module: Arc<ModuleRaw>,
    signature: Option<KernelSignature>,
    /// The parameters as the driver lays them out, for kernels without a known signature
    /// (when the driver can say).
    layout: Option<Vec<ParamLayout>>,
}

// SAFETY: a CUfunction is an immutable handle into a loaded module (kept alive by
// `_module`), usable from any thread with its context current.
unsafe impl Send for CudaKernel {}
// SAFETY: as above.
unsafe impl Sync for CudaKernel {}

impl CudaKernel {
    pub(crate) fn function(&self) -> sys::CUfunction {
        self.func
    }
    /// The declared signature, for standard kernels.
    pub fn signature(&self) -> Option<&KernelSignature> {
        self.signature.as_ref()
    }
    /// The parameters as the driver lays them out (kernels without a known signature, on a
    /// driver with `cuFuncGetParamInfo`).
    pub fn param_layout(&self) -> Option<&[ParamLayout]> {
        self.layout.as_deref()
    }
}

impl KernelHandle for CudaKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Checks `args` against a known kernel signature: count, buffer/immediate kinds and
/// immediate types (a wrong immediate type would make the kernel read the wrong bytes).
fn check_signature(kernel: &CudaKernel, args: &[LaunchArg]) -> Result<()> {
    let Some(sig) = kernel.signature() else {
        return Ok(());
    };
    let bad = |msg: String| {
        Err(Error::InvalidArgument(format!(
            "kernel `{}`: {msg}",
            kernel.name()
        )))
    };
    if sig.params.len() != args.len() {
        return bad(format!(
            "takes {} arguments, got {}",
            sig.params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in sig.params.iter().zip(args).enumerate() {
        match (&p.kind, a) {
            (ParamKind::Buffer { .. }, LaunchArg::Buffer { .. }) => {}
            (ParamKind::Scalar(dt), LaunchArg::Scalar(s)) if s.dtype() == *dt => {}
            (ParamKind::Scalar(dt), LaunchArg::Scalar(s)) => {
                return bad(format!(
                    "argument {i} `{}` must be a {dt} immediate, got {s}",
                    p.name
                ));
            }
            (ParamKind::Scalar(dt), LaunchArg::Buffer { .. }) => {
                return bad(format!(
                    "argument {i} `{}` must be a {dt} immediate, got a buffer",
                    p.name
                ));
            }
            (ParamKind::Buffer { dtype, .. }, LaunchArg::Scalar(_)) => {
                return bad(format!(
                    "argument {i} `{}` must be a {dtype} buffer, got an immediate",
                    p.name
                ));
            }
        }
    }
    Ok(())
}

/// Launch arguments ready for `cuLaunchKernel`, with what to add to a launch refused with an
/// illegal address ([`params::pointer_hint`]).
pub struct LaunchArgs {
    args: KernelArgs<Cuda>,
    hint: Option<String>,
}

/// Checks `args` against the kernel's signature (when known) or its parameters as the
/// driver lays them out (when it can say), and the device's live allocations, and lays them
/// out for the launch.
pub(crate) fn marshal(
    kernel: &CudaKernel,
    args: &[LaunchArg],
    memory: &MemoryRegistry,
) -> Result<LaunchArgs> {
    check_signature(kernel, args)?;
    if let Some(layout) = kernel.param_layout() {
        params::check(kernel.name(), layout, args)?;
    }
    Ok(LaunchArgs {
        args: KernelArgs::marshal(args, memory, |e| e)?,
        hint: params::pointer_hint(args),
    })
}

/// `cuLaunchKernel` on `stream` with marshalled arguments.
pub(crate) fn launch(
    ctx: &DeviceContext,
    kernel: &CudaKernel,
    dims: &LaunchDims,
    args: &mut LaunchArgs,
    stream: sys::CUstream,
) -> Result<()> {
    let mut params = args.args.pointers();
    ctx.bind()?;
    // SAFETY: `kernel.function()` is a live function of a loaded module (kept alive by the
    // handle); `params` holds one pointer per kernel parameter, each to an 8-byte slot of
    // `args` holding the value in the parameter's C type (count and types checked against the
    // signature when known, count and sizes against the driver's layout otherwise, unchecked
    // on a driver without `cuFuncGetParamInfo`); buffer ranges were checked by `marshal`; the
    // driver copies the values before returning.
    let r = unsafe {
        sys::cuLaunchKernel(
            kernel.function(),
            dims.grid.x,
            dims.grid.y,
            dims.grid.z,
            dims.block.x,
            dims.block.y,
            dims.block.z,
            dims.shared_mem,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    cu("cuLaunchKernel", r).map_err(|e| {
        let mut message = e.to_string();
        if let (CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, Some(hint)) = (r, &args.hint) {
            message.push_str(&format!(" ({hint})"));
        }
        Error::Kernel {
            kernel: kernel.name().to_string(),
            message,
        }
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_image_of_other_source_is_refused() {
        let want = stamp::stamp_name(&stamp::source_hash("new"));
        let old = stamp::stamp_name(&stamp::source_hash("old"));
        assert!(check_stamp("m", Some(&want), "cubin(sm_90)", ["k", want.as_str()]).is_ok());
        // No stamp (another tool's image): used, with a warning.
        assert!(check_stamp("m", Some(&want), "cubin(sm_90)", ["k"]).is_ok());
        // Nothing to check against (a module of binaries only).
        assert!(check_stamp("m", None, "ptx", [old.as_str()]).is_ok());
        let e = check_stamp("m", Some(&want), "cubin(sm_90)", ["k", old.as_str()])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("module `m`: the cubin(sm_90) image was compiled from other source")
                && e.contains(&old)
                && e.contains(&want),
            "{e}"
        );
    }
    use super::*;
    use xthunk_core::backend::DevicePtr;
    use xthunk_core::ir::Scalar;

    #[test]
    fn exact_cubin_first_then_nvrtc_then_ptx() {
        let images = vec![
            ModuleImage::Ptx { code: "ptx".into() },
            ModuleImage::Cubin {
                arch: "sm_80".into(),
                data: vec![1],
            },
            ModuleImage::Hsaco {
                arch: "gfx90a".into(),
                data: vec![],
            },
            ModuleImage::Standard,
            ModuleImage::Cubin {
                arch: "sm_90".into(),
                data: vec![2],
            },
        ];
        assert_eq!(
            select_images(&images, 90),
            vec![
                ImageChoice::Cubin(&[2]),
                ImageChoice::Standard,
                ImageChoice::Ptx("ptx")
            ]
        );
        // sm_86 does not take an sm_80 cubin (only exact matches are picked).
        assert_eq!(
            select_images(&images, 86),
            vec![ImageChoice::Standard, ImageChoice::Ptx("ptx")]
        );
        let hsaco_only = vec![ModuleImage::Hsaco {
            arch: "gfx90a".into(),
            data: vec![],
        }];
        assert!(select_images(&hsaco_only, 90).is_empty());
    }

    #[test]
    fn every_scalar_type_marshals_as_its_c_type() {
        let cases: [(Scalar, &[u8]); 9] = [
            (Scalar::Pred(true), &[1]),
            (Scalar::I8(-2), &[0xfe]),
            (Scalar::U8(200), &[200]),
            (Scalar::I32(-3), &(-3i32).to_le_bytes()),
            (Scalar::I64(-4), &(-4i64).to_le_bytes()),
            (Scalar::F16(0x3c00), &[0x00, 0x3c]),
            (Scalar::BF16(0x3f80), &[0x80, 0x3f]),
            (Scalar::F32(1.5), &1.5f32.to_le_bytes()),
            (Scalar::F64(-2.25), &(-2.25f64).to_le_bytes()),
        ];
        for (s, bytes) in cases {
            let slot = arg_slot(&LaunchArg::Scalar(s)).to_le_bytes();
            assert_eq!(&slot[..bytes.len()], bytes, "{s}");
            assert!(slot[bytes.len()..].iter().all(|&b| b == 0), "{s}");
            assert_eq!(s.dtype().size(), bytes.len());
        }
        let p = arg_slot(&LaunchArg::Buffer {
            ptr: DevicePtr(0x7f00_dead_beef),
            len: 4,
        });
        assert_eq!(p, 0x7f00_dead_beef);
    }
}
