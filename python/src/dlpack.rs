//! DLPack (the legacy, unversioned `dltensor` capsule): exporting an array's memory without a
//! copy where it is the host's (or a real GPU's), importing a host array by copying it into
//! device memory. It works on an array's parts (buffer, device, element type, dimensions);
//! `DeviceArray` (`device_array.rs`) wraps them.

use crate::errors::{XResult, invalid, unsupported};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::{PyErr, ffi};
use std::ffi::c_void;
use std::sync::Arc;
use xthunk::Buffer;
use xthunk::ir::{DType, MemorySpace};

const CAPSULE: &std::ffi::CStr = c"dltensor";
const CAPSULE_VERSIONED: &std::ffi::CStr = c"dltensor_versioned";
/// DLPack's device types.
const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;
const KDL_ROCM: i32 = 10;
/// The most dimensions an imported array may have.
const MAX_NDIM: i32 = 64;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// DLPack 1.x's managed tensor (with a version and flags: not read-only).
#[repr(C)]
struct DLManagedTensorVersioned {
    version: [u32; 2],
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What an exported tensor keeps alive: its shape and the buffer.
struct Export {
    shape: Vec<i64>,
    _buffer: Arc<Buffer>,
}

fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::Pred => (6, 8),
        DType::I8 => (0, 8),
        DType::I32 => (0, 32),
        DType::I64 => (0, 64),
        DType::U8 => (1, 8),
        DType::F16 => (2, 16),
        DType::F32 => (2, 32),
        DType::F64 => (2, 64),
        DType::BF16 => (4, 16),
        DType::I16 => (0, 16),
        DType::U16 => (1, 16),
        DType::U32 => (1, 32),
        DType::U64 => (1, 64),
        // kDLComplex; the 8-bit floats' codes are DLPack 1.1's (kDLFloat8_e4m3fn,
        // kDLFloat8_e5m2), as ml_dtypes registers them.
        DType::C64 => (5, 64),
        DType::C128 => (5, 128),
        DType::F8E4M3FN => (10, 8),
        DType::F8E5M2 => (12, 8),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn from_dl_dtype(t: DLDataType) -> Option<DType> {
    if t.lanes != 1 {
        return None;
    }
    DType::ALL.into_iter().find(|d| {
        let e = dl_dtype(*d);
        e.code == t.code && e.bits == t.bits
    })
}

/// DLPack's `(device_type, device_id)` of a device whose memory can be shared: the host's,
/// or a real (not emulated) NVIDIA or AMD GPU's.
pub fn device_of(device: &dyn xthunk::Device) -> XResult<(i32, i32)> {
    let info = device.info();
    let id = i32::try_from(info.ordinal).map_err(|_| invalid("device ordinal too large"))?;
    if info.emulated {
        return Err(unsupported(format!(
            "DLPack export of {}'s memory: an emulated device's memory is not the GPU's",
            info.name
        ))
        .into());
    }
    Ok(match info.vendor {
        xthunk::core::backend::Vendor::Host => (KDL_CPU, id),
        xthunk::core::backend::Vendor::Nvidia => (KDL_CUDA, id),
        xthunk::core::backend::Vendor::Amd => (KDL_ROCM, id),
    })
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `export` from two boxes and are freed once
    // (DLPack calls the deleter once).
    unsafe {
        drop(Box::from_raw((*m).manager_ctx.cast::<Export>()));
        drop(Box::from_raw(m));
    }
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as `delete_managed`, for the versioned struct.
    unsafe {
        drop(Box::from_raw((*m).manager_ctx.cast::<Export>()));
        drop(Box::from_raw(m));
    }
}

unsafe extern "C" fn capsule_destructor_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as `capsule_destructor`, for "dltensor_versioned".
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, CAPSULE_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(d) = m.as_ref().and_then(|m| m.deleter) {
                d(m);
            }
        }
    }
}

unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed. A consumer that took the
    // tensor renamed the capsule ("used_dltensor") and owns it; otherwise it is freed here.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, CAPSULE.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, CAPSULE.as_ptr()).cast::<DLManagedTensor>();
            if let Some(d) = m.as_ref().and_then(|m| m.deleter) {
                d(m);
            }
        }
    }
}

/// The parts of an array that [`export`] shares.
pub struct Tensor<'a> {
    /// The memory, kept alive by the capsule until the consumer deletes the tensor.
    pub buffer: &'a Arc<Buffer>,
    /// The device that allocated it.
    pub device: &'a dyn xthunk::Device,
    pub dtype: DType,
    /// Row-major dimensions.
    pub dims: &'a [u64],
}

/// A capsule sharing `array`'s memory (kept alive until the consumer deletes the tensor):
/// DLPack 1.0's versioned, writable tensor when the consumer takes it (`versioned`), else the
/// legacy one.
pub fn export<'py>(
    py: Python<'py>,
    array: Tensor<'_>,
    copy: bool,
    versioned: bool,
) -> XResult<Bound<'py, PyAny>> {
    if copy {
        return Err(unsupported("DLPack export with copy=True (export shares the memory)").into());
    }
    let (device_type, device_id) = device_of(array.device)?;
    let shape = array
        .dims
        .iter()
        .map(|d| i64::try_from(*d).map_err(|_| invalid("dimension too large for DLPack")))
        .collect::<Result<Vec<i64>, _>>()?;
    let ndim = i32::try_from(shape.len()).map_err(|_| invalid("too many dimensions"))?;
    let mut ctx = Box::new(Export {
        shape,
        _buffer: array.buffer.clone(),
    });
    let dl_tensor = DLTensor {
        data: array.buffer.ptr().0 as *mut c_void,
        device: DLDevice {
            device_type,
            device_id,
        },
        ndim,
        dtype: dl_dtype(array.dtype),
        shape: ctx.shape.as_mut_ptr(),
        strides: std::ptr::null_mut(), // compact, row-major
        byte_offset: 0,
    };
    let manager_ctx = Box::into_raw(ctx).cast();
    let capsule = if versioned {
        let raw = Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: [1, 0],
            manager_ctx,
            deleter: Some(delete_versioned),
            flags: 0,
            dl_tensor,
        }));
        // SAFETY: `raw` is a live tensor; the capsule's destructor frees it unless a consumer
        // took it.
        let c = unsafe {
            ffi::PyCapsule_New(
                raw.cast(),
                CAPSULE_VERSIONED.as_ptr(),
                Some(capsule_destructor_versioned),
            )
        };
        if c.is_null() {
            // SAFETY: not handed to Python: freed here, once.
            unsafe { delete_versioned(raw) };
        }
        c
    } else {
        let raw = Box::into_raw(Box::new(DLManagedTensor {
            dl_tensor,
            manager_ctx,
            deleter: Some(delete_managed),
        }));
        // SAFETY: as above, for the legacy tensor.
        let c =
            unsafe { ffi::PyCapsule_New(raw.cast(), CAPSULE.as_ptr(), Some(capsule_destructor)) };
        if c.is_null() {
            // SAFETY: not handed to Python: freed here, once.
            unsafe { delete_managed(raw) };
        }
        c
    };
    if capsule.is_null() {
        return Err(PyErr::fetch(py).into());
    }
    // SAFETY: a new reference, owned from here on.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// Copies an array exported through DLPack (host memory, row-major) into new device memory
/// on `device` (aligned to `alignment`); returns the buffer, its element type and its
/// dimensions. The producer's capsule is left unconsumed: its own destructor frees it.
pub fn import(
    obj: &Bound<'_, PyAny>,
    device: &dyn xthunk::Device,
    alignment: u64,
) -> XResult<(Buffer, DType, Vec<u64>)> {
    let py = obj.py();
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "from_dlpack takes an object that exports DLPack (has `__dlpack__`: a numpy array, a \
             torch or jax array, ...), not {}; for a list use numpy.asarray first",
            obj.get_type().name()?
        ))
        .into());
    }
    let capsule = obj.call_method0("__dlpack__")?;
    // SAFETY: `capsule` is a live object; GetPointer checks its type and name.
    let m = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE.as_ptr()) }
        .cast::<DLManagedTensor>();
    if m.is_null() {
        return Err(PyErr::fetch(py).into());
    }
    // SAFETY: a live DLManagedTensor owned by `capsule`, which lives to the end of this call.
    let t = unsafe { &(*m).dl_tensor };
    if t.device.device_type != KDL_CPU {
        return Err(unsupported(format!(
            "DLPack import from device type {} (only host memory is imported)",
            t.device.device_type
        ))
        .into());
    }
    let dtype = from_dl_dtype(t.dtype).ok_or_else(|| {
        invalid(format!(
            "DLPack dtype code {} bits {} lanes {} has no xthunk element type",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        ))
    })?;
    if !(0..=MAX_NDIM).contains(&t.ndim) {
        return Err(invalid(format!("DLPack tensor of {} dimensions", t.ndim)).into());
    }
    let ndim = t.ndim as usize;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        // SAFETY: DLPack gives `ndim` dimensions at `shape`.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let dims = shape
        .iter()
        .map(|d| u64::try_from(*d).map_err(|_| invalid("negative DLPack dimension")))
        .collect::<Result<Vec<u64>, _>>()?;
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: DLPack gives `ndim` strides (in elements) when `strides` is not NULL.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut expect = 1i64;
        for (d, s) in shape.iter().zip(strides).rev() {
            if *d > 1 && *s != expect {
                return Err(invalid("DLPack tensor is not row-major contiguous").into());
            }
            expect = expect.saturating_mul(*d);
        }
    }
    let size = dims
        .iter()
        .try_fold(dtype.size() as u64, |a, d| a.checked_mul(*d))
        .ok_or_else(|| invalid("DLPack tensor size overflows"))?;
    let len = usize::try_from(size).map_err(|_| invalid("DLPack tensor too large"))?;
    let buffer = device.allocate(size, alignment, MemorySpace::Device)?;
    if len > 0 {
        if t.data.is_null() {
            return Err(invalid("DLPack tensor of non-zero size with NULL data").into());
        }
        let offset = usize::try_from(t.byte_offset).map_err(|_| invalid("DLPack offset"))?;
        // SAFETY: a row-major host tensor of `len` bytes at `data + byte_offset` (checked
        // above), alive while `capsule` is.
        let src = unsafe { std::slice::from_raw_parts(t.data.cast::<u8>().add(offset), len) };
        device.copy_from_host(src, buffer.ptr())?;
    }
    drop(capsule);
    Ok((buffer, dtype, dims))
}
