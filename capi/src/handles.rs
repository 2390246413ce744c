//! Runtime, device and device-buffer handles, and the element types of the ABI.

use crate::error::{Result, XthunkError, arg, guard, guard_value, str_arg, write_out};
use std::ffi::{CString, c_char};
use std::sync::Arc;
use xthunk::ir::{DType, MemorySpace};
use xthunk::{Buffer, Device, Runtime};

/// Element types (the values are part of the ABI).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XthunkDtype {
    Pred = 0,
    I8 = 1,
    U8 = 2,
    I32 = 3,
    I64 = 4,
    F16 = 5,
    Bf16 = 6,
    F32 = 7,
    F64 = 8,
    I16 = 9,
    U16 = 10,
    U32 = 11,
    U64 = 12,
    C64 = 13,
    C128 = 14,
    F8e4m3fn = 15,
    F8e5m2 = 16,
}

impl From<DType> for XthunkDtype {
    fn from(d: DType) -> Self {
        match d {
            DType::Pred => XthunkDtype::Pred,
            DType::I8 => XthunkDtype::I8,
            DType::U8 => XthunkDtype::U8,
            DType::I32 => XthunkDtype::I32,
            DType::I64 => XthunkDtype::I64,
            DType::F16 => XthunkDtype::F16,
            DType::BF16 => XthunkDtype::Bf16,
            DType::F32 => XthunkDtype::F32,
            DType::F64 => XthunkDtype::F64,
            DType::I16 => XthunkDtype::I16,
            DType::U16 => XthunkDtype::U16,
            DType::U32 => XthunkDtype::U32,
            DType::U64 => XthunkDtype::U64,
            DType::C64 => XthunkDtype::C64,
            DType::C128 => XthunkDtype::C128,
            DType::F8E4M3FN => XthunkDtype::F8e4m3fn,
            DType::F8E5M2 => XthunkDtype::F8e5m2,
        }
    }
}

/// The backends of this build (cuda, rocm, host, in `auto` order).
pub struct XthunkRuntime {
    rt: Runtime,
}

/// One device of one backend.
pub struct XthunkDevice {
    pub(crate) device: Arc<dyn Device>,
    backend: CString,
    name: CString,
}

/// Memory on a device; it stays there between runs.
pub struct XthunkBuffer {
    pub(crate) buffer: Buffer,
    pub(crate) device: Arc<dyn Device>,
}

/// The alignment of buffers made by `xthunk_buffer_new` (at least any program's).
const BUFFER_ALIGNMENT: u64 = 256;

/// The most host devices a runtime may be asked for.
const MAX_HOST_DEVICES: usize = 1024;

/// Makes a runtime whose host backend has `host_devices` devices (0 means 1; at most 1024).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_runtime_new(
    host_devices: usize,
    out: *mut *mut XthunkRuntime,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's out-pointer (the ABI's contract).
        unsafe {
            write_out(out, "out", || {
                if host_devices > MAX_HOST_DEVICES {
                    return Err(XthunkError::invalid(format!(
                        "host_devices must be at most {MAX_HOST_DEVICES}, got {host_devices}"
                    )));
                }
                let rt = Runtime::with_host_devices(host_devices.max(1));
                Ok(Box::into_raw(Box::new(XthunkRuntime { rt })))
            })
        }
    })
}

/// Frees a runtime (devices opened from it stay usable).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_runtime_free(runtime: *mut XthunkRuntime) {
    guard_value((), || {
        if !runtime.is_null() {
            // SAFETY: a live runtime from this library, freed once (the ABI's contract).
            drop(unsafe { Box::from_raw(runtime) });
        }
    })
}

/// Opens device `ordinal` of `backend`: "auto" (the first available, GPUs first), "cuda",
/// "rocm" or "host".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_runtime_device(
    runtime: *const XthunkRuntime,
    backend: *const c_char,
    ordinal: usize,
    out: *mut *mut XthunkDevice,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle, string and out-pointer (the ABI's contract).
        unsafe {
            let rt = &arg(runtime, "runtime")?.rt;
            let choice = xthunk::embed::backend_choice(str_arg(backend, "backend")?);
            write_out(out, "out", || {
                let (b, _skipped) = rt.select(&choice)?;
                let device = b.device(ordinal)?;
                let handle = XthunkDevice {
                    backend: cstring(b.name()),
                    name: cstring(&device.info().name),
                    device,
                };
                Ok(Box::into_raw(Box::new(handle)))
            })
        }
    })
}

/// How many devices `backend` ("auto" or a name, as for `xthunk_runtime_device`) has.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_runtime_device_count(
    runtime: *const XthunkRuntime,
    backend: *const c_char,
    out: *mut usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle, string and out-pointer (the ABI's contract).
        unsafe {
            let rt = &arg(runtime, "runtime")?.rt;
            let choice = xthunk::embed::backend_choice(str_arg(backend, "backend")?);
            write_out(out, "out", || {
                let (b, _skipped) = rt.select(&choice)?;
                Ok(b.probe()?.devices.len())
            })
        }
    })
}

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

/// Frees a device handle (executables and buffers on it stay usable).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_device_free(device: *mut XthunkDevice) {
    guard_value((), || {
        if !device.is_null() {
            // SAFETY: a live device from this library, freed once (the ABI's contract).
            drop(unsafe { Box::from_raw(device) });
        }
    })
}

/// The device's backend name ("host", "cuda", "rocm"), valid while the handle lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_device_backend(device: *const XthunkDevice) -> *const c_char {
    guard_value(c"".as_ptr(), || {
        // SAFETY: NULL or a live device (the ABI's contract).
        unsafe { device.as_ref() }.map_or(c"".as_ptr(), |d| d.backend.as_ptr())
    })
}

/// The device's name, valid while the handle lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_device_name(device: *const XthunkDevice) -> *const c_char {
    guard_value(c"".as_ptr(), || {
        // SAFETY: NULL or a live device (the ABI's contract).
        unsafe { device.as_ref() }.map_or(c"".as_ptr(), |d| d.name.as_ptr())
    })
}

/// True for a device of the driver emulator (a test instrument: never a GPU result).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_device_emulated(device: *const XthunkDevice) -> bool {
    guard_value(false, || {
        // SAFETY: NULL or a live device (the ABI's contract).
        unsafe { device.as_ref() }.is_some_and(|d| d.device.info().emulated)
    })
}

/// Allocates `size` bytes of device memory (contents unspecified).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_buffer_new(
    device: *const XthunkDevice,
    size: u64,
    out: *mut *mut XthunkBuffer,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle and out-pointer (the ABI's contract).
        unsafe {
            let d = arg(device, "device")?;
            write_out(out, "out", || {
                let buffer = d
                    .device
                    .allocate(size, BUFFER_ALIGNMENT, MemorySpace::Device)?;
                Ok(Box::into_raw(Box::new(XthunkBuffer {
                    buffer,
                    device: d.device.clone(),
                })))
            })
        }
    })
}

/// Frees a buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_buffer_free(buffer: *mut XthunkBuffer) {
    guard_value((), || {
        if !buffer.is_null() {
            // SAFETY: a live buffer from this library, freed once (the ABI's contract).
            drop(unsafe { Box::from_raw(buffer) });
        }
    })
}

/// The buffer's size in bytes (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_buffer_size(buffer: *const XthunkBuffer) -> u64 {
    guard_value(0, || {
        // SAFETY: NULL or a live buffer (the ABI's contract).
        unsafe { buffer.as_ref() }.map_or(0, |b| b.buffer.size())
    })
}

fn check_size(b: &XthunkBuffer, size: usize) -> Result<()> {
    if size as u64 != b.buffer.size() {
        return Err(XthunkError::invalid(format!(
            "the buffer has {} bytes, the host memory {size}",
            b.buffer.size()
        )));
    }
    Ok(())
}

/// Copies `size` bytes (exactly the buffer's size) from host memory into the buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_buffer_write(
    buffer: *mut XthunkBuffer,
    data: *const u8,
    size: usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle; `data` valid for `size` bytes (the ABI's contract).
        unsafe {
            let b = arg(buffer, "buffer")?;
            check_size(b, size)?;
            let src = host_slice(data, size)?;
            b.device.copy_from_host(src, b.buffer.ptr())?;
        }
        Ok(())
    })
}

/// Copies the buffer into `size` bytes (exactly the buffer's size) of host memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_buffer_read(
    buffer: *const XthunkBuffer,
    data: *mut u8,
    size: usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle; `data` valid for `size` bytes (the ABI's contract).
        unsafe {
            let b = arg(buffer, "buffer")?;
            check_size(b, size)?;
            let dst = host_slice_mut(data, size)?;
            b.device.copy_to_host(b.buffer.ptr(), dst)?;
        }
        Ok(())
    })
}

/// `size` bytes at `data` (NULL allowed for 0 bytes).
///
/// # Safety
/// `data` is valid for reads of `size` bytes.
pub(crate) unsafe fn host_slice<'a>(data: *const u8, size: usize) -> Result<&'a [u8]> {
    if size == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(XthunkError::invalid("host data is NULL"));
    }
    // SAFETY: non-NULL and valid for `size` bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(data, size) })
}

/// `size` writable bytes at `data` (NULL allowed for 0 bytes).
///
/// # Safety
/// `data` is valid for writes of `size` bytes and not aliased during the call.
pub(crate) unsafe fn host_slice_mut<'a>(data: *mut u8, size: usize) -> Result<&'a mut [u8]> {
    if size == 0 {
        return Ok(&mut []);
    }
    if data.is_null() {
        return Err(XthunkError::invalid("host data is NULL"));
    }
    // SAFETY: non-NULL, valid for `size` writable bytes (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(data, size) })
}
