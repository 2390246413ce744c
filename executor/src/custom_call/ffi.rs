//! The C ABI of custom calls (`include/xthunk_ffi.h`, version [`XTHUNK_FFI_API_VERSION`]):
//! the structures, mirrored field for field, and [`CHandler`], which adapts a C handler to
//! the [`Handler`] trait (builds its call frame, calls it on the native stream, or in the host
//! stream's order on the host, and turns its error return into an error).

use super::call::Call;
use super::errors::HandlerError;
use super::handler::{Handler, Traits};
use super::signature::{AttrType, HandlerSignature};
use crate::ir::{AttrArray, AttrValue, Attributes, DType};
use libloading::Library;
use std::ffi::{CStr, c_char, c_void};
use std::sync::Arc;

/// `XTHUNK_FFI_API_VERSION`: the call frame's and the registration's version.
pub const XTHUNK_FFI_API_VERSION: u32 = crate::ir::CUSTOM_CALL_API_VERSION;
/// The plugin's exported `uint32_t xthunk_ffi_api_version(void)`.
pub const XTHUNK_FFI_VERSION_SYMBOL: &str = "xthunk_ffi_api_version";
/// The plugin's exported `int32_t xthunk_ffi_register(const XthunkFfiRegistrar *)`.
pub const XTHUNK_FFI_REGISTER_SYMBOL: &str = "xthunk_ffi_register";
/// `XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE`.
pub const XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE: u32 = 1;

/// `XthunkFfiBuffer`.
#[repr(C)]
pub(super) struct CBuffer {
    data: *mut c_void,
    dtype: i32,
    rank: u32,
    dims: *const u64,
    size: u64,
}

/// `XthunkFfiString`.
#[repr(C)]
pub(super) struct CFfiString {
    data: *const c_char,
    len: u64,
}

/// The value union of `XthunkFfiAttr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) union CAttrValue {
    i32_: i32,
    i64_: i64,
    f32_: f32,
    f64_: f64,
    ptr: *const c_void,
}

/// `XthunkFfiAttr`.
#[repr(C)]
pub(super) struct CAttr {
    name: *const c_char,
    ty: i32,
    reserved: u32,
    count: u64,
    value: CAttrValue,
}

/// `XthunkFfiCallFrame`.
#[repr(C)]
pub(super) struct CFrame {
    api_version: u32,
    platform: u32,
    stream: *mut c_void,
    device_ordinal: i32,
    reserved: u32,
    target: *const c_char,
    thunk_path: *const c_char,
    num_operands: u64,
    operands: *const CBuffer,
    num_results: u64,
    results: *const CBuffer,
    num_attrs: u64,
    attrs: *const CAttr,
    error_context: *mut c_void,
    set_error: extern "C" fn(*mut c_void, *const c_char),
}

/// `XthunkFfiHandler`.
pub(super) type CHandlerFn = unsafe extern "C" fn(*const CFrame) -> i32;

/// `XthunkFfiPrepareFrame`.
#[repr(C)]
pub(super) struct CPrepareFrame {
    api_version: u32,
    platform: u32,
    device_ordinal: i32,
    reserved: u32,
    target: *const c_char,
    thunk_path: *const c_char,
    error_context: *mut c_void,
    set_error: extern "C" fn(*mut c_void, *const c_char),
}

/// `XthunkFfiPrepare`.
pub(super) type CPrepareFn = unsafe extern "C" fn(*const CPrepareFrame) -> i32;

/// The platform codes (`XTHUNK_FFI_PLATFORM_*`) and the backends they name.
pub(super) const PLATFORMS: [(u32, &str); 3] = [(0, "host"), (1, "cuda"), (2, "rocm")];

/// The attribute type codes (`XTHUNK_FFI_ATTR_*`).
pub(super) const ATTR_TYPES: [(i32, AttrType); 13] = [
    (1, AttrType::Bool),
    (2, AttrType::I32),
    (3, AttrType::I64),
    (4, AttrType::F32),
    (5, AttrType::F64),
    (6, AttrType::Str),
    (7, AttrType::BoolArray),
    (8, AttrType::I32Array),
    (9, AttrType::I64Array),
    (10, AttrType::F32Array),
    (11, AttrType::F64Array),
    (12, AttrType::StrArray),
    (13, AttrType::Dict),
];

fn attr_code(t: AttrType) -> i32 {
    ATTR_TYPES
        .iter()
        .find(|(_, a)| *a == t)
        .map(|(c, _)| *c)
        .unwrap_or(0)
}

/// The element type codes: the schema's `DType` numbers.
fn dtype_code(d: DType) -> i32 {
    match d {
        DType::Pred => 1,
        DType::I8 => 2,
        DType::U8 => 3,
        DType::I32 => 4,
        DType::I64 => 5,
        DType::F16 => 6,
        DType::BF16 => 7,
        DType::F32 => 8,
        DType::F64 => 9,
        DType::I16 => 10,
        DType::U16 => 11,
        DType::U32 => 12,
        DType::U64 => 13,
        DType::C64 => 14,
        DType::C128 => 15,
        DType::F8E4M3FN => 16,
        DType::F8E5M2 => 17,
    }
}

/// Storage the C attributes point into; moves of it keep every pointer valid (each pointer is
/// to a heap block it owns).
#[derive(Default)]
struct Keep {
    strings: Vec<Box<[u8]>>,
    bytes: Vec<Box<[u8]>>,
    i32s: Vec<Box<[i32]>>,
    i64s: Vec<Box<[i64]>>,
    f32s: Vec<Box<[f32]>>,
    f64s: Vec<Box<[f64]>>,
    strs: Vec<Box<[CFfiString]>>,
    dicts: Vec<Box<[CAttr]>>,
}

impl Keep {
    /// A NUL-terminated copy of `s`: all its bytes (an interior NUL stays; `len` counts it)
    /// and one NUL after them, so reading `s.len()` bytes or up to a NUL stays inside.
    fn cstr(&mut self, s: &str) -> *const c_char {
        let mut b = Vec::with_capacity(s.len() + 1);
        b.extend_from_slice(s.as_bytes());
        b.push(0);
        let b = b.into_boxed_slice();
        let p = b.as_ptr().cast();
        self.strings.push(b);
        p
    }

    fn attrs(&mut self, a: &Attributes) -> Box<[CAttr]> {
        a.0.iter().map(|(n, v)| self.attr(n, v)).collect()
    }

    fn attr(&mut self, name: &str, v: &AttrValue) -> CAttr {
        let name = self.cstr(name);
        let ty = attr_code(AttrType::of(v));
        let (count, value) = match v {
            AttrValue::Bool(b) => (
                1,
                CAttrValue {
                    i32_: i32::from(*b),
                },
            ),
            AttrValue::I32(x) => (1, CAttrValue { i32_: *x }),
            AttrValue::I64(x) => (1, CAttrValue { i64_: *x }),
            AttrValue::F32(x) => (1, CAttrValue { f32_: *x }),
            AttrValue::F64(x) => (1, CAttrValue { f64_: *x }),
            AttrValue::Str(s) => (
                s.len(),
                CAttrValue {
                    ptr: self.cstr(s).cast(),
                },
            ),
            AttrValue::Array(arr) => {
                let ptr: *const c_void = match arr {
                    AttrArray::Bool(v) => keep(&mut self.bytes, v.iter().map(|x| u8::from(*x))),
                    AttrArray::I32(v) => keep(&mut self.i32s, v.iter().copied()),
                    AttrArray::I64(v) => keep(&mut self.i64s, v.iter().copied()),
                    AttrArray::F32(v) => keep(&mut self.f32s, v.iter().copied()),
                    AttrArray::F64(v) => keep(&mut self.f64s, v.iter().copied()),
                    AttrArray::Str(v) => {
                        let strs: Vec<CFfiString> = v
                            .iter()
                            .map(|s| CFfiString {
                                data: self.cstr(s),
                                len: s.len() as u64,
                            })
                            .collect();
                        keep(&mut self.strs, strs)
                    }
                };
                (arr.len(), CAttrValue { ptr })
            }
            AttrValue::Dict(d) => {
                let b = self.attrs(d);
                let p = b.as_ptr().cast();
                let n = b.len();
                self.dicts.push(b);
                (n, CAttrValue { ptr: p })
            }
        };
        CAttr {
            name,
            ty,
            reserved: 0,
            count: count as u64,
            value,
        }
    }
}

/// Stores `items` as one heap block in `store` and returns a pointer to its first element
/// (valid while `store` keeps the block, however `store` moves).
fn keep<T>(store: &mut Vec<Box<[T]>>, items: impl IntoIterator<Item = T>) -> *const c_void {
    let b: Box<[T]> = items.into_iter().collect();
    let p = b.as_ptr().cast();
    store.push(b);
    p
}

/// A call frame and everything it points into.
struct Prepared {
    keep: Keep,
    dims: Vec<Box<[u64]>>,
    operands: Box<[CBuffer]>,
    results: Box<[CBuffer]>,
    attrs: Box<[CAttr]>,
    target: *const c_char,
    path: *const c_char,
    platform: u32,
    ordinal: i32,
}

// SAFETY: `Prepared` is read-only after construction; its raw pointers point into heap blocks
// it owns (`keep`, `dims`, the boxed slices) or at device memory the execution keeps alive,
// so sharing it with the host stream's worker thread is sound.
unsafe impl Send for Prepared {}
// SAFETY: as above: nothing mutates it after construction.
unsafe impl Sync for Prepared {}

fn prepare(call: &Call<'_>, platform: u32) -> Prepared {
    let mut keep = Keep::default();
    let mut dims = vec![];
    let mut buffers = |list: &[super::CallBuffer<'_>]| -> Box<[CBuffer]> {
        list.iter()
            .map(|b| {
                let d: Box<[u64]> = b.dims.into();
                let p = d.as_ptr();
                dims.push(d);
                CBuffer {
                    data: b.ptr.0 as usize as *mut c_void,
                    dtype: dtype_code(b.dtype),
                    rank: b.dims.len() as u32,
                    dims: p,
                    size: b.size,
                }
            })
            .collect()
    };
    let operands = buffers(call.operands());
    let results = buffers(call.results());
    let attrs = keep.attrs(call.attributes());
    let target = keep.cstr(call.target());
    let path = keep.cstr(&call.path().to_string());
    Prepared {
        keep,
        dims,
        operands,
        results,
        attrs,
        target,
        path,
        platform,
        ordinal: i32::try_from(call.device().info().ordinal).unwrap_or(-1),
    }
}

/// Where a handler's `set_error` puts its message.
#[derive(Default)]
struct ErrorSlot(Option<String>);

extern "C" fn set_error(context: *mut c_void, message: *const c_char) {
    if context.is_null() {
        return;
    }
    let text = if message.is_null() {
        "(no message)".to_string()
    } else {
        // SAFETY: the handler passes a NUL-terminated string (the ABI's contract); it is read
        // up to its NUL, within the call.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .chars()
            .take(4096)
            .collect()
    };
    // SAFETY: `context` is the `ErrorSlot` the frame was built with, alive for the call.
    let slot = unsafe { &mut *context.cast::<ErrorSlot>() };
    slot.0.get_or_insert(text);
}

/// Calls `func` with the frame of `p` on `stream` (null on the host); the error names the
/// handler's message.
fn invoke(func: CHandlerFn, p: &Prepared, stream: *mut c_void) -> Result<(), HandlerError> {
    let mut slot = ErrorSlot::default();
    let frame = CFrame {
        api_version: XTHUNK_FFI_API_VERSION,
        platform: p.platform,
        stream,
        device_ordinal: p.ordinal,
        reserved: 0,
        target: p.target,
        thunk_path: p.path,
        num_operands: p.operands.len() as u64,
        operands: p.operands.as_ptr(),
        num_results: p.results.len() as u64,
        results: p.results.as_ptr(),
        num_attrs: p.attrs.len() as u64,
        attrs: p.attrs.as_ptr(),
        error_context: (&mut slot as *mut ErrorSlot).cast(),
        set_error,
    };
    let _ = &p.keep;
    let _ = &p.dims;
    // SAFETY: `func` is a handler a plugin registered for this ABI version; the frame and
    // everything it points to are alive for the call, and the buffers' device pointers lie in
    // the execution's live allocations (checked against the program at load).
    let code = unsafe { func(&frame) };
    if code == 0 {
        return Ok(());
    }
    Err(HandlerError::Failed(slot.0.unwrap_or_else(|| {
        format!("the handler returned {code} without a message")
    })))
}

/// A handler registered by a C plugin.
pub(super) struct CHandler {
    pub(super) func: CHandlerFn,
    pub(super) traits: Traits,
    pub(super) signature: HandlerSignature,
    pub(super) platform: u32,
    pub(super) prepare: Option<CPrepareFn>,
    /// Keeps the plugin loaded while its handler is registered.
    pub(super) _library: Arc<Library>,
}

impl Handler for CHandler {
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        let p = prepare(call, self.platform);
        match call.native_stream() {
            Some(s) => invoke(self.func, &p, s as *mut c_void),
            None => {
                let func = self.func;
                call.enqueue_host(move || invoke(func, &p, std::ptr::null_mut()))
            }
        }
    }

    fn prepare(
        &self,
        device: &dyn crate::backend::Device,
        call: &crate::ir::CustomCallThunk,
        path: &crate::ir::ThunkPath,
    ) -> Result<(), HandlerError> {
        let Some(prepare) = self.prepare else {
            return Ok(());
        };
        let mut keep = Keep::default();
        let mut slot = ErrorSlot::default();
        let frame = CPrepareFrame {
            api_version: XTHUNK_FFI_API_VERSION,
            platform: self.platform,
            device_ordinal: i32::try_from(device.info().ordinal).unwrap_or(-1),
            reserved: 0,
            target: keep.cstr(&call.target),
            thunk_path: keep.cstr(&path.to_string()),
            error_context: (&mut slot as *mut ErrorSlot).cast(),
            set_error,
        };
        // SAFETY: `prepare` is a plugin's function for this ABI version; the frame and the
        // strings it points to (in `keep`) and the error slot are alive for the call.
        let code = unsafe { prepare(&frame) };
        drop(keep);
        if code == 0 {
            return Ok(());
        }
        Err(HandlerError::Failed(slot.0.unwrap_or_else(|| {
            format!("prepare returned {code} without a message")
        })))
    }

    fn traits(&self) -> Traits {
        self.traits
    }

    fn signature(&self) -> HandlerSignature {
        self.signature.clone()
    }
}

/// Reads the attribute type code `code`.
pub(super) fn attr_type(code: i32) -> Option<AttrType> {
    ATTR_TYPES.iter().find(|(c, _)| *c == code).map(|(_, t)| *t)
}
