//! Modules and kernels: image selection, loading (`hipModuleLoadData`), kernel lookup, and
//! the marshalling of launch arguments for `hipModuleLaunchKernel`.
//!
//! Image choice for a device with `gcnArchName` `D` (e.g. `gfx90a:sramecc+:xnack-`):
//! an HSACO whose arch names `D` exactly, else one for the same processor with no conflicting
//! feature (`gfx90a` or `gfx90a:xnack-` run on `D`; `gfx90a:xnack+` does not), else the
//! portable source (`standard` or `source`) compiled by hipRTC for `D`. An HSACO must also
//! *be* a code object for its label (ELF `EM_AMDGPU`, `e_flags` mach of that processor).
//!
//! Arguments: `hipModuleLaunchKernel` takes an array of pointers, one per explicit kernel
//! parameter, each to the parameter's value; HIP copies as many bytes as the code object's
//! metadata says the parameter has. Every argument therefore lives in its own 8-byte slot
//! (buffers as device addresses, scalars as their C type: `pred`/`i8`/`u8` 1 byte, `f16`/
//! `bf16` 2 bytes of raw bits, `i32`/`f32` 4, `i64`/`f64` 8), and when the code object
//! carries metadata (every code object hipRTC or clang makes), the number, sizes and kinds of
//! the arguments are checked against it first: a mismatch is an error, never a launch reading
//! past the array.

use crate::compile::{CacheStatus, check_code_object};
use crate::context::DeviceContext;
use crate::image::{ArgInfo, CodeObject, unbundle};
use crate::result::{self, hip_describe};
use crate::sys;
use crate::target::Target;
use crate::vendor::{MemoryRegistry, Rocm};
use parking_lot::Mutex;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;
use xthunk_core::backend::{KernelHandle, LaunchArg, LoadedModule};
use xthunk_core::ir::{Module, ModuleImage, Scalar};
use xthunk_core::kernels::portable::stamp;
use xthunk_core::{Error, Result};
#[cfg(test)]
use xthunk_gpu::args::scalar_slot;

/// The image a device will use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ImageChoice<'a> {
    /// A code object, with its label.
    Hsaco { arch: &'a str, data: &'a [u8] },
    /// Portable source to compile for the device.
    Compile(&'a ModuleImage),
}

/// Picks the image for a device (see the module documentation); the error names what the
/// module has and what the device needs.
pub(crate) fn select_image<'a>(
    module: &'a Module,
    device: &Target,
) -> std::result::Result<ImageChoice<'a>, String> {
    let mut best: Option<(u8, ImageChoice<'a>)> = None;
    for img in &module.images {
        if let ModuleImage::Hsaco { arch, data } = img {
            let Ok(t) = Target::parse(arch) else {
                continue;
            };
            let score = if t.full == device.full {
                2
            } else if t.runs_on(device) {
                1
            } else {
                0
            };
            if score > 0 && best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, ImageChoice::Hsaco { arch, data }));
            }
        }
    }
    if let Some((_, c)) = best {
        return Ok(c);
    }
    if let Some(img) = module
        .images
        .iter()
        .find(|i| matches!(i, ModuleImage::Standard | ModuleImage::Source { .. }))
    {
        return Ok(ImageChoice::Compile(img));
    }
    let have: Vec<String> = module.images.iter().map(|i| i.describe()).collect();
    Err(format!(
        "no image the ROCm backend can run on {}: the module has [{}]; it needs hsaco({}) or portable source (`standard` or `source`)",
        device.full,
        have.join(", "),
        device.base
    ))
}

/// The code object of an HSACO image for `device`, and the target it is for: the image
/// itself, or the matching entry of a clang offload bundle (`hipcc --genco` output).
pub(crate) fn device_code<'a>(
    data: &'a [u8],
    arch: &str,
    device: &Target,
) -> std::result::Result<(&'a [u8], Target), String> {
    let label = Target::parse(arch).map_err(|e| e.to_string())?;
    let entries = match unbundle(data) {
        Ok(None) => return Ok((data, label)),
        Ok(Some(e)) => e,
        Err(e) => return Err(format!("the hsaco({arch}) image: {e}")),
    };
    let mut best: Option<(u8, &'a [u8], Target)> = None;
    for e in &entries {
        let Ok(t) = Target::parse(&e.target) else {
            continue;
        };
        let score = if t.full == device.full {
            2
        } else if t.runs_on(device) {
            1
        } else {
            0
        };
        if score > 0 && best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, e.code, t));
        }
    }
    match best {
        Some((_, code, t)) => Ok((code, t)),
        None => Err(format!(
            "the hsaco({arch}) offload bundle has no code for {} (it has: {})",
            device.full,
            entries
                .iter()
                .map(|e| e.target.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Loads a module on a device.
pub(crate) fn load(ctx: &Arc<DeviceContext>, module: &Module) -> Result<Arc<dyn LoadedModule>> {
    let merr = |message: String| Error::Module {
        module: module.name.clone(),
        message,
    };
    let portable = module
        .images
        .iter()
        .find(|i| matches!(i, ModuleImage::Standard | ModuleImage::Source { .. }));
    let (image, describe) = match select_image(module, &ctx.arch).map_err(merr)? {
        ImageChoice::Hsaco { arch, data } => {
            let (code, label) = device_code(data, arch, &ctx.arch).map_err(merr)?;
            let co = check_code_object(code, &label).map_err(|e| {
                merr(format!(
                    "the hsaco({arch}) image is not a code object for {}: {e}",
                    label.full
                ))
            })?;
            match check_stamp(module, arch, &co) {
                Ok(()) => (Arc::new(code.to_vec()), format!("hsaco({arch})")),
                Err(why) => match portable {
                    Some(img) => {
                        tracing::warn!(module = %module.name, "{why}: compiling the module's {} instead", img.kind());
                        compile_portable(ctx, module, img)?
                    }
                    None => return Err(merr(why)),
                },
            }
        }
        ImageChoice::Compile(img) => compile_portable(ctx, module, img)?,
    };
    let code = CodeObject::parse(&image).map_err(|e| merr(e.to_string()))?;
    ctx.bind()?;
    let mut raw: sys::hipModule_t = std::ptr::null_mut();
    // SAFETY: `image` is a complete code object (checked above) kept alive by the module for
    // as long as the HIP module exists; `raw` receives the module.
    let rc = unsafe { (ctx.hip.api.hipModuleLoadData)(&mut raw, image.as_ptr().cast()) };
    if rc != sys::hipSuccess || raw.is_null() {
        return Err(merr(format!(
            "hipModuleLoadData of {describe} failed: {}",
            hip_describe(rc)
        )));
    }
    let handle = Arc::new(ModuleHandle {
        ctx: ctx.clone(),
        raw,
        _image: image,
    });
    tracing::debug!(module = %module.name, image = %describe, kernels = code.kernels.len(), "loaded ROCm module");
    Ok(Arc::new(RocmModule {
        name: module.name.clone(),
        image: describe,
        handle,
        code,
        kernels: Mutex::new(HashMap::new()),
    }))
}

/// Compiles a module's `standard` or `source` image for the device with hipRTC: the code
/// object and its description.
fn compile_portable(
    ctx: &Arc<DeviceContext>,
    module: &Module,
    img: &ModuleImage,
) -> Result<(Arc<Vec<u8>>, String)> {
    let merr = |message: String| Error::Module {
        module: module.name.clone(),
        message,
    };
    let compiler = ctx.compiler()?;
    let c = compiler
        .compile_image(module, img, &ctx.arch.full)
        .map_err(|e| merr(e.to_string()))?;
    let how = match c.cache {
        CacheStatus::Miss | CacheStatus::Rebuilt | CacheStatus::Disabled => "compiled by hipRTC",
        CacheStatus::Hit => "hipRTC, from the disk cache",
        CacheStatus::Memory => "hipRTC, cached",
    };
    Ok((
        c.image,
        format!("{}→hsaco({}) ({how})", img.kind(), ctx.arch.full),
    ))
}

/// Refuses an HSACO image for `module` whose source stamp differs from the module's source
/// ([`stamp`], checked by [`xthunk_gpu::image::check_stamp`]): why, or `Ok`. An image without
/// a stamp is used with a warning.
fn check_stamp(module: &Module, arch: &str, co: &CodeObject) -> std::result::Result<(), String> {
    let Some(expected) = stamp::expected_stamp(module) else {
        return Ok(());
    };
    xthunk_gpu::image::check_stamp(
        &module.name,
        &expected,
        &format!("hsaco({arch})"),
        co.kernels.iter().map(String::as_str),
    )
}

/// A HIP module, unloaded on drop (after every kernel of it is gone).
struct ModuleHandle {
    ctx: Arc<DeviceContext>,
    raw: sys::hipModule_t,
    _image: Arc<Vec<u8>>,
}

// SAFETY: a hipModule_t may be used from any thread; it is unloaded once, in `drop`.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above; the handle is never mutated.
unsafe impl Sync for ModuleHandle {}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        let _ = self.ctx.bind();
        // SAFETY: `raw` is a live module loaded by hipModuleLoadData, unloaded once here; no
        // kernel of it remains (each holds an Arc to this handle).
        let rc = unsafe { (self.ctx.hip.api.hipModuleUnload)(self.raw) };
        if rc != sys::hipSuccess {
            tracing::warn!("hipModuleUnload: {}", hip_describe(rc));
        }
    }
}

/// A loaded module.
pub struct RocmModule {
    name: String,
    image: String,
    handle: Arc<ModuleHandle>,
    code: CodeObject,
    kernels: Mutex<HashMap<String, Arc<RocmKernel>>>,
}

impl LoadedModule for RocmModule {
    fn name(&self) -> &str {
        &self.name
    }

    fn image(&self) -> String {
        self.image.clone()
    }

    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>> {
        if let Some(k) = self.kernels.lock().get(name) {
            return Ok(k.clone());
        }
        let missing = || {
            // The user's kernels (not the source stamp).
            let own: Vec<&str> = self
                .code
                .kernels
                .iter()
                .map(String::as_str)
                .filter(|k| !k.starts_with(stamp::STAMP_PREFIX))
                .collect();
            let listed = &own[..own.len().min(16)];
            Error::Module {
                module: self.name.clone(),
                message: format!(
                    "no kernel `{name}` in {} (it has {} kernels: {}{})",
                    self.image,
                    own.len(),
                    listed.join(", "),
                    if own.len() > listed.len() {
                        ", …"
                    } else {
                        ""
                    }
                ),
            }
        };
        if !self.code.kernels.is_empty() && !self.code.kernels.iter().any(|k| k == name) {
            return Err(missing());
        }
        let cname = CString::new(name).map_err(|_| missing())?;
        let ctx = &self.handle.ctx;
        ctx.bind()?;
        let mut f: sys::hipFunction_t = std::ptr::null_mut();
        // SAFETY: the module is live (held by `self.handle`); `cname` is NUL-terminated.
        let rc =
            unsafe { (ctx.hip.api.hipModuleGetFunction)(&mut f, self.handle.raw, cname.as_ptr()) };
        if rc != sys::hipSuccess || f.is_null() {
            return Err(Error::Module {
                module: self.name.clone(),
                message: format!(
                    "hipModuleGetFunction(`{name}`) failed: {}",
                    hip_describe(rc)
                ),
            });
        }
        let params = self
            .code
            .kernel_args
            .get(name)
            .map(|a| a.iter().filter(|a| a.is_explicit()).cloned().collect());
        let k = Arc::new(RocmKernel {
            name: name.to_string(),
            func: f,
            ordinal: ctx.ordinal,
            params,
            _module: self.handle.clone(),
        });
        self.kernels.lock().insert(name.to_string(), k.clone());
        Ok(k)
    }
}

/// A kernel of a loaded module.
pub struct RocmKernel {
    name: String,
    pub(crate) func: sys::hipFunction_t,
    pub(crate) ordinal: i32,
    /// Explicit parameters from the code object's metadata, when it has any.
    pub(crate) params: Option<Vec<ArgInfo>>,
    _module: Arc<ModuleHandle>,
}

// SAFETY: a hipFunction_t is an immutable handle usable from any thread while its module is
// loaded (the kernel holds the module).
unsafe impl Send for RocmKernel {}
// SAFETY: as above.
unsafe impl Sync for RocmKernel {}

impl KernelHandle for RocmKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Launch arguments ready for `hipModuleLaunchKernel`.
pub(crate) type KernelArgs = xthunk_gpu::args::KernelArgs<Rocm>;

/// The C size of a scalar argument.
pub(crate) fn scalar_size(s: &Scalar) -> u64 {
    match s {
        Scalar::Pred(_) | Scalar::I8(_) | Scalar::U8(_) => 1,
        Scalar::F16(_) | Scalar::BF16(_) | Scalar::I16(_) | Scalar::U16(_) => 2,
        Scalar::I32(_) | Scalar::U32(_) | Scalar::F32(_) => 4,
        Scalar::I64(_) | Scalar::U64(_) | Scalar::F64(_) => 8,
    }
}

/// Checks `args` against the kernel's parameters and the device's live allocations, and lays
/// them out for the launch.
pub(crate) fn marshal(
    kernel: &RocmKernel,
    args: &[LaunchArg],
    memory: &MemoryRegistry,
) -> Result<KernelArgs> {
    if let Some(params) = &kernel.params {
        check_against_metadata(&kernel.name, params, args)?;
    }
    KernelArgs::marshal(args, memory, |e| Error::Kernel {
        kernel: kernel.name.clone(),
        message: e.to_string(),
    })
}

/// The arguments against the code object's explicit parameters: count, size, kind. Public
/// only for the crate's integration tests.
#[doc(hidden)]
pub fn check_against_metadata(kernel: &str, params: &[ArgInfo], args: &[LaunchArg]) -> Result<()> {
    let err = |message: String| Error::Kernel {
        kernel: kernel.to_string(),
        message,
    };
    if params.len() != args.len() {
        return Err(err(format!(
            "the code object declares {} parameters, the launch passes {}",
            params.len(),
            args.len()
        )));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let pname = p
            .name
            .as_deref()
            .map(|n| format!(" `{n}`"))
            .unwrap_or_default();
        match a {
            LaunchArg::Buffer { .. } => {
                if p.value_kind != "global_buffer" || p.size != 8 {
                    return Err(err(format!(
                        "argument {i}{pname}: a buffer was passed, the code object declares a {}-byte {} parameter",
                        p.size, p.value_kind
                    )));
                }
            }
            LaunchArg::Scalar(s) => {
                if p.value_kind != "by_value" || p.size != scalar_size(s) {
                    return Err(err(format!(
                        "argument {i}{pname}: {s} ({} bytes) was passed, the code object declares a {}-byte {} parameter",
                        scalar_size(s),
                        p.size,
                        p.value_kind
                    )));
                }
            }
        }
    }
    Ok(())
}

/// `hipModuleLaunchKernel` on `stream` with marshalled arguments.
pub(crate) fn launch(
    ctx: &DeviceContext,
    kernel: &RocmKernel,
    dims: &xthunk_core::backend::LaunchDims,
    args: &mut KernelArgs,
    stream: sys::hipStream_t,
) -> Result<()> {
    let (g, b) = (dims.grid, dims.block);
    if g.count() == 0 || b.count() == 0 {
        return Err(Error::Kernel {
            kernel: kernel.name.clone(),
            message: format!("empty launch shape: grid {g}, block {b}"),
        });
    }
    let mut ptrs = args.pointers();
    let params = if ptrs.is_empty() {
        std::ptr::null_mut()
    } else {
        ptrs.as_mut_ptr()
    };
    // SAFETY: `kernel.func` is a live function of a loaded module (the kernel holds it);
    // `params` points to one pointer per explicit parameter (count and sizes checked against
    // the code object's metadata when it has any), each to an 8-byte slot in `args` that
    // outlives the call (HIP copies the values before returning); `extra` is null.
    let rc = unsafe {
        (ctx.hip.api.hipModuleLaunchKernel)(
            kernel.func,
            g.x,
            g.y,
            g.z,
            b.x,
            b.y,
            b.z,
            dims.shared_mem,
            stream,
            params,
            std::ptr::null_mut(),
        )
    };
    result::hip("hipModuleLaunchKernel", rc).map_err(|e| match e {
        Error::Backend { message, .. } => Error::Kernel {
            kernel: kernel.name.clone(),
            message: format!("hipModuleLaunchKernel failed: {message}"),
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_hsaco_of_other_source_is_refused() {
        let m = Module {
            name: "m".into(),
            images: vec![ModuleImage::Source { code: "new".into() }],
            options: Default::default(),
        };
        let co = |kernels: &[String]| CodeObject {
            e_machine: 0,
            e_flags: 0,
            os_abi: 0,
            abi_version: 0,
            kernels: kernels.to_vec(),
            symbols: vec![],
            kernel_args: Default::default(),
        };
        let want = stamp::stamp_name(&stamp::source_hash("new"));
        let old = stamp::stamp_name(&stamp::source_hash("old"));
        assert_eq!(
            check_stamp(&m, "gfx90a", &co(&["k".into(), want])).err(),
            None
        );
        assert_eq!(check_stamp(&m, "gfx90a", &co(&["k".into()])).err(), None);
        let why = check_stamp(&m, "gfx90a", &co(&["k".into(), old.clone()]))
            .err()
            .unwrap_or_default();
        assert!(
            why.contains("the hsaco(gfx90a) image was compiled from other source")
                && why.contains(&old),
            "{why}"
        );
    }
    use super::*;
    use xthunk_core::backend::DevicePtr;

    fn t(s: &str) -> Target {
        Target::parse(s).unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn hsaco(arch: &str) -> ModuleImage {
        ModuleImage::Hsaco {
            arch: arch.into(),
            data: arch.as_bytes().to_vec(),
        }
    }

    #[test]
    fn picks_the_matching_hsaco_then_source() {
        let m = Module {
            name: "m".into(),
            images: vec![
                ModuleImage::Cubin {
                    arch: "sm_90".into(),
                    data: vec![],
                },
                hsaco("gfx908"),
                hsaco("gfx90a"),
                hsaco("gfx90a:sramecc+:xnack-"),
                ModuleImage::Standard,
            ],
            options: Default::default(),
        };
        let dev = t("gfx90a:sramecc+:xnack-");
        assert_eq!(
            select_image(&m, &dev),
            Ok(ImageChoice::Hsaco {
                arch: "gfx90a:sramecc+:xnack-",
                data: b"gfx90a:sramecc+:xnack-"
            })
        );
        assert!(matches!(
            select_image(&m, &t("gfx90a:xnack+")),
            Ok(ImageChoice::Hsaco { arch: "gfx90a", .. })
        ));
        assert_eq!(
            select_image(&m, &t("gfx1030")),
            Ok(ImageChoice::Compile(&ModuleImage::Standard))
        );
        let m = Module {
            name: "m".into(),
            images: vec![hsaco("gfx908"), hsaco("gfx90a:xnack+")],
            options: Default::default(),
        };
        let e = select_image(&m, &dev).err().unwrap_or_default();
        assert!(
            e.contains("hsaco(gfx908), hsaco(gfx90a:xnack+)") && e.contains("needs hsaco(gfx90a)"),
            "{e}"
        );
    }

    #[test]
    fn bundles_give_the_entry_for_the_device() {
        let b = crate::image::tests::bundle(&[
            ("host-x86_64-unknown-linux", b"host"),
            ("hipv4-amdgcn-amd-amdhsa--gfx908", b"908"),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"90a"),
            (
                "hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-",
                b"90a-exact",
            ),
        ]);
        let got = device_code(&b, "gfx90a", &t("gfx90a:sramecc+:xnack-"));
        assert!(matches!(got, Ok((b"90a-exact", ref l)) if l.full == "gfx90a:sramecc+:xnack-"));
        let got = device_code(&b, "gfx90a", &t("gfx90a:xnack+"));
        assert!(matches!(got, Ok((b"90a", _))));
        let e = device_code(&b, "gfx90a", &t("gfx1030"))
            .err()
            .unwrap_or_default();
        assert!(
            e.contains("has: gfx908, gfx90a, gfx90a:sramecc+:xnack-"),
            "{e}"
        );
        let plain = b"\x7fELF";
        assert!(matches!(device_code(plain, "gfx90a", &t("gfx90a")), Ok((d, _)) if d == plain));
    }

    #[test]
    fn scalars_are_laid_out_as_their_c_types() {
        assert_eq!(scalar_slot(&Scalar::F32(1.0)), 0x3f80_0000);
        assert_eq!(scalar_slot(&Scalar::F16(0x3c00)), 0x3c00);
        assert_eq!(scalar_slot(&Scalar::BF16(0x3f80)), 0x3f80);
        assert_eq!(scalar_slot(&Scalar::I8(-1)), 0xff);
        assert_eq!(scalar_slot(&Scalar::I32(-1)), 0xffff_ffff);
        assert_eq!(scalar_slot(&Scalar::I64(-2)), (-2i64) as u64);
        assert_eq!(scalar_slot(&Scalar::Pred(true)), 1);
        assert_eq!(scalar_slot(&Scalar::F64(2.0)), 2.0f64.to_bits());
        assert_eq!(scalar_size(&Scalar::U8(0)), 1);
        assert_eq!(scalar_size(&Scalar::BF16(0)), 2);
        assert_eq!(scalar_size(&Scalar::F64(0.0)), 8);
    }

    #[test]
    fn arguments_are_checked_against_the_metadata() {
        let p = |size, kind: &str| ArgInfo {
            name: None,
            size,
            offset: 0,
            value_kind: kind.into(),
        };
        let params = vec![p(8, "global_buffer"), p(4, "by_value"), p(8, "by_value")];
        let buf = LaunchArg::Buffer {
            ptr: DevicePtr(0x1000),
            len: 4,
        };
        let ok = [
            buf,
            LaunchArg::Scalar(Scalar::F32(1.0)),
            LaunchArg::Scalar(Scalar::I64(3)),
        ];
        assert!(check_against_metadata("k", &params, &ok).is_ok());
        let e = check_against_metadata("k", &params, &ok[..2])
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("declares 3 parameters, the launch passes 2")));
        let wrong = [
            buf,
            LaunchArg::Scalar(Scalar::F64(1.0)),
            LaunchArg::Scalar(Scalar::I64(3)),
        ];
        let e = check_against_metadata("k", &params, &wrong)
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("argument 1") && e.contains("4-byte by_value")));
        let wrong = [LaunchArg::Scalar(Scalar::I64(0)), ok[1], ok[2]];
        assert!(check_against_metadata("k", &params, &wrong).is_err());
    }
}
