//! Loading a C plugin: a shared library exporting `xthunk_ffi_api_version` (checked against
//! [`XTHUNK_FFI_API_VERSION`] before anything else is called) and `xthunk_ffi_register`, which
//! registers its handlers through the registrar it is given. Every error names the file; a
//! plugin whose registration fails registers nothing.

use super::errors::CustomCallError;
use super::ffi::{
    ATTR_TYPES, CHandler, CHandlerFn, CPrepareFn, PLATFORMS, XTHUNK_FFI_API_VERSION,
    XTHUNK_FFI_REGISTER_SYMBOL, XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE,
    XTHUNK_FFI_VERSION_SYMBOL, attr_type,
};
use super::handler::Traits;
use super::registry::Registry;
use super::signature::HandlerSignature;
use libloading::Library;
use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most handlers one plugin may register, and attributes one handler may declare.
const MAX_HANDLERS: usize = 4096;
const MAX_DECLARED_ATTRS: i64 = 1024;

/// A loaded plugin: its file and what it registered, as `(backend, target)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plugin {
    pub file: PathBuf,
    pub targets: Vec<(String, String)>,
}

/// `XthunkFfiAttrSpec`.
#[repr(C)]
struct CAttrSpec {
    name: *const c_char,
    ty: i32,
}

/// `XthunkFfiHandlerInfo`.
#[repr(C)]
struct CHandlerInfo {
    target: *const c_char,
    platform: u32,
    traits: u32,
    handler: Option<CHandlerFn>,
    num_operands: i32,
    num_results: i32,
    num_attrs: i64,
    attrs: *const CAttrSpec,
    prepare: Option<CPrepareFn>,
}

/// `XthunkFfiRegistrar`.
#[repr(C)]
struct CRegistrar {
    api_version: u32,
    reserved: u32,
    context: *mut c_void,
    register_handler: extern "C" fn(*mut c_void, *const CHandlerInfo) -> i32,
    set_error: extern "C" fn(*mut c_void, *const c_char),
}

/// What a registration collects before anything enters the registry.
struct Collected {
    library: Arc<Library>,
    handlers: Vec<(String, String, CHandler)>,
    error: Option<String>,
}

/// Reads a NUL-terminated string the plugin passed.
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn text(p: *const c_char, what: &str) -> Result<String, String> {
    if p.is_null() {
        return Err(format!("{what} is null"));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    let s = s
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))?
        .to_string();
    if s.is_empty() || s.len() > 256 {
        return Err(format!("{what} `{s}` must be 1 to 256 bytes"));
    }
    Ok(s)
}

fn read_info(c: &Collected, info: &CHandlerInfo) -> Result<(String, String, CHandler), String> {
    // SAFETY: the ABI says `target` is a NUL-terminated string alive for the call.
    let target = unsafe { text(info.target, "the target name") }?;
    let Some((_, backend)) = PLATFORMS.iter().find(|(p, _)| *p == info.platform) else {
        return Err(format!(
            "target `{target}`: unknown platform {} (0 host, 1 cuda, 2 rocm)",
            info.platform
        ));
    };
    let Some(func) = info.handler else {
        return Err(format!("target `{target}`: the handler is null"));
    };
    if info.traits & !XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE != 0 {
        return Err(format!(
            "target `{target}`: unknown trait bits {:#x}",
            info.traits
        ));
    }
    let count = |n: i32, what: &str| match n {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(n as usize)),
        n => Err(format!(
            "target `{target}`: {what} count {n} (-1 means any)"
        )),
    };
    let attributes = match info.num_attrs {
        -1 => None,
        n if (0..=MAX_DECLARED_ATTRS).contains(&n) => {
            if n > 0 && info.attrs.is_null() {
                return Err(format!(
                    "target `{target}`: {n} attributes declared, the list is null"
                ));
            }
            let mut v = Vec::new();
            for i in 0..n as usize {
                // SAFETY: the ABI says `attrs` holds `num_attrs` entries alive for the call.
                let spec = unsafe { &*info.attrs.add(i) };
                // SAFETY: as above, each name a NUL-terminated string.
                let name = unsafe { text(spec.name, "an attribute name") }
                    .map_err(|m| format!("target `{target}`: {m}"))?;
                let Some(ty) = attr_type(spec.ty) else {
                    return Err(format!(
                        "target `{target}`: attribute `{name}` has unknown type code {} \
                         (known: 1..={})",
                        spec.ty,
                        ATTR_TYPES.len()
                    ));
                };
                v.push((name, ty));
            }
            Some(v)
        }
        n => {
            return Err(format!(
                "target `{target}`: {n} attributes declared (-1 for any, at most {MAX_DECLARED_ATTRS})"
            ));
        }
    };
    let handler = CHandler {
        func,
        traits: Traits {
            command_buffer_compatible: info.traits & XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE
                != 0,
        },
        signature: HandlerSignature {
            operands: count(info.num_operands, "operand")?,
            results: count(info.num_results, "result")?,
            attributes,
        },
        platform: info.platform,
        prepare: info.prepare,
        _library: c.library.clone(),
    };
    Ok((backend.to_string(), target, handler))
}

extern "C" fn register_handler(context: *mut c_void, info: *const CHandlerInfo) -> i32 {
    if context.is_null() {
        return 1;
    }
    // SAFETY: `context` is the `Collected` of the registration in progress (this thread's).
    let c = unsafe { &mut *context.cast::<Collected>() };
    if c.error.is_some() {
        return 1;
    }
    if info.is_null() {
        c.error = Some("register_handler was given a null info".into());
        return 1;
    }
    if c.handlers.len() >= MAX_HANDLERS {
        c.error = Some(format!("more than {MAX_HANDLERS} handlers"));
        return 1;
    }
    // SAFETY: checked non-null; the ABI says it is a valid `XthunkFfiHandlerInfo`.
    match read_info(c, unsafe { &*info }) {
        Ok(h) => {
            c.handlers.push(h);
            0
        }
        Err(m) => {
            c.error = Some(m);
            1
        }
    }
}

extern "C" fn registrar_set_error(context: *mut c_void, message: *const c_char) {
    if context.is_null() || message.is_null() {
        return;
    }
    // SAFETY: as in `register_handler`.
    let c = unsafe { &mut *context.cast::<Collected>() };
    // SAFETY: the ABI says `message` is NUL-terminated.
    let m = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    c.error
        .get_or_insert_with(|| m.chars().take(4096).collect());
}

/// Loads the plugin at `file` and registers its handlers in `registry`.
pub fn load_plugin(file: &Path, registry: &Registry) -> Result<Plugin, CustomCallError> {
    let fail = |message: String| CustomCallError::Plugin {
        file: file.to_path_buf(),
        message,
    };
    // SAFETY: loading a library runs its initializers: the user named it as a plugin, which
    // is the trust decision (docs/custom-calls.md).
    let library = unsafe { Library::new(file) }.map_err(|e| {
        // libloading says "dlopen failed"; the loader's reason is its source.
        fail(format!(
            "cannot be loaded: {}",
            xthunk_backend::backend::search::error_chain(&e)
        ))
    })?;
    let library = Arc::new(library);
    // SAFETY: the symbol's type is the ABI's `uint32_t xthunk_ffi_api_version(void)`.
    let version = unsafe {
        library.get::<unsafe extern "C" fn() -> u32>(XTHUNK_FFI_VERSION_SYMBOL.as_bytes())
    }
    .map_err(|_| {
        fail(format!(
            "does not export `{XTHUNK_FFI_VERSION_SYMBOL}` (a plugin exports it and \
             `{XTHUNK_FFI_REGISTER_SYMBOL}`, see include/xthunk_ffi.h)"
        ))
    })?;
    // SAFETY: as declared above; it takes nothing and returns a number.
    let v = unsafe { version() };
    if v != XTHUNK_FFI_API_VERSION {
        return Err(fail(format!(
            "was built for custom-call API version {v}, this build implements version \
             {XTHUNK_FFI_API_VERSION}: rebuild it against this xthunk's include/xthunk_ffi.h"
        )));
    }
    // SAFETY: the symbol's type is the ABI's `int32_t xthunk_ffi_register(const XthunkFfiRegistrar *)`.
    let register = unsafe {
        library.get::<unsafe extern "C" fn(*const CRegistrar) -> i32>(
            XTHUNK_FFI_REGISTER_SYMBOL.as_bytes(),
        )
    }
    .map_err(|_| fail(format!("does not export `{XTHUNK_FFI_REGISTER_SYMBOL}`")))?;
    let mut collected = Collected {
        library: library.clone(),
        handlers: vec![],
        error: None,
    };
    let registrar = CRegistrar {
        api_version: XTHUNK_FFI_API_VERSION,
        reserved: 0,
        context: (&mut collected as *mut Collected).cast(),
        register_handler,
        set_error: registrar_set_error,
    };
    // SAFETY: the registrar and its context live for the call; the plugin calls back only
    // during it (the ABI forbids keeping the registrar).
    let code = unsafe { register(&registrar) };
    if let Some(m) = collected.error.take() {
        return Err(fail(format!("registration failed: {m}")));
    }
    if code != 0 {
        return Err(fail(format!("registration returned {code}")));
    }
    for (backend, target, _) in &collected.handlers {
        if registry.get(backend, target).is_some() {
            return Err(CustomCallError::Duplicate {
                backend: backend.clone(),
                target: target.clone(),
            }
            .into_plugin(file));
        }
    }
    let origin = file.display().to_string();
    let mut targets = vec![];
    for (backend, target, h) in collected.handlers {
        registry
            .register(&backend, &target, Arc::new(h), &origin)
            .map_err(|e| e.into_plugin(file))?;
        targets.push((backend, target));
    }
    Ok(Plugin {
        file: file.to_path_buf(),
        targets,
    })
}

impl CustomCallError {
    fn into_plugin(self, file: &Path) -> CustomCallError {
        CustomCallError::Plugin {
            file: file.to_path_buf(),
            message: self.to_string(),
        }
    }
}
