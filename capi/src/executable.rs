//! Executables: loading from a file or bytes, the signature, running with host memory or with
//! device buffers.

use crate::error::{Result, XthunkError, arg, guard, guard_value, str_arg, write_out};
use crate::handles::{XthunkBuffer, XthunkDevice, XthunkDtype, host_slice, host_slice_mut};
use std::ffi::{CString, c_char};
use std::sync::Arc;
use xthunk::core::executor::{ExecutorConfig, Program};
use xthunk::ir::TensorSpec;
use xthunk::{DeviceMemory, ExecuteOptions, LoadedExecutable};

/// A parameter or output of an executable. Pointers are valid while the executable lives.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XthunkTensorInfo {
    pub name: *const c_char,
    pub dtype: XthunkDtype,
    pub rank: usize,
    pub dims: *const u64,
    pub byte_size: u64,
}

/// Host memory passed as one parameter.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XthunkHostArray {
    pub data: *const u8,
    pub size: usize,
}

/// Host memory receiving one output.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct XthunkHostArrayMut {
    pub data: *mut u8,
    pub size: usize,
}

/// A program loaded onto one device.
pub struct XthunkExecutable {
    pub(crate) loaded: Arc<LoadedExecutable>,
    params: Vec<(CString, u64)>,
    outputs: Vec<(CString, u64)>,
}

fn names(specs: &[TensorSpec]) -> Result<Vec<(CString, u64)>> {
    specs
        .iter()
        .map(|s| {
            let size = s.byte_size().ok_or_else(|| {
                XthunkError::invalid(format!("`{}`: its byte size overflows", s.name))
            })?;
            Ok((
                CString::new(s.name.replace('\0', "?")).unwrap_or_default(),
                size,
            ))
        })
        .collect()
}

fn load(device: &XthunkDevice, program: Program) -> Result<*mut XthunkExecutable> {
    let params = names(&program.signature.parameters)?;
    let outputs = names(&program.signature.outputs)?;
    let loaded = Arc::new(LoadedExecutable::load_program(
        device.device.clone(),
        &program,
        &ExecutorConfig::default(),
        None,
    )?);
    Ok(Box::into_raw(Box::new(XthunkExecutable {
        loaded,
        params,
        outputs,
    })))
}

/// Loads a program file (`.txtpb` text, `.pb` binary or `.mlir` StableHLO text, by extension)
/// onto `device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_load_file(
    device: *const XthunkDevice,
    path: *const c_char,
    out: *mut *mut XthunkExecutable,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle, string and out-pointer (the ABI's contract).
        unsafe {
            let d = arg(device, "device")?;
            let path = str_arg(path, "path")?;
            write_out(out, "out", || load(d, xthunk::load_program(path)?))
        }
    })
}

/// Loads a program from `size` bytes of either encoding (text or binary) or of StableHLO text.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_load_bytes(
    device: *const XthunkDevice,
    data: *const u8,
    size: usize,
    out: *mut *mut XthunkExecutable,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle, `size` bytes at `data`, out-pointer (the ABI's contract).
        unsafe {
            let d = arg(device, "device")?;
            let bytes = host_slice(data, size)?;
            write_out(out, "out", || {
                load(d, xthunk::embed::load_program_bytes(bytes)?)
            })
        }
    })
}

/// Frees an executable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_free(exe: *mut XthunkExecutable) {
    guard_value((), || {
        if !exe.is_null() {
            // SAFETY: a live executable from this library, freed once (the ABI's contract).
            drop(unsafe { Box::from_raw(exe) });
        }
    })
}

/// The number of parameters (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_parameter_count(exe: *const XthunkExecutable) -> usize {
    guard_value(0, || {
        // SAFETY: NULL or a live executable (the ABI's contract).
        unsafe { exe.as_ref() }.map_or(0, |e| e.params.len())
    })
}

/// The number of outputs (0 for NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_output_count(exe: *const XthunkExecutable) -> usize {
    guard_value(0, || {
        // SAFETY: NULL or a live executable (the ABI's contract).
        unsafe { exe.as_ref() }.map_or(0, |e| e.outputs.len())
    })
}

fn info(exe: &XthunkExecutable, output: bool, index: usize) -> Result<XthunkTensorInfo> {
    let sig = &exe.loaded.executable().signature;
    let (specs, names, what) = if output {
        (&sig.outputs, &exe.outputs, "output")
    } else {
        (&sig.parameters, &exe.params, "parameter")
    };
    let (Some(spec), Some((name, size))) = (specs.get(index), names.get(index)) else {
        return Err(XthunkError::invalid(format!(
            "{what} {index} of {}",
            specs.len()
        )));
    };
    Ok(XthunkTensorInfo {
        name: name.as_ptr(),
        dtype: spec.dtype.into(),
        rank: spec.dims.len(),
        dims: spec.dims.as_ptr(),
        byte_size: *size,
    })
}

/// Describes parameter `index`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_parameter(
    exe: *const XthunkExecutable,
    index: usize,
    out: *mut XthunkTensorInfo,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle and out-pointer (the ABI's contract).
        unsafe {
            let e = arg(exe, "executable")?;
            write_out(out, "out", || info(e, false, index))
        }
    })
}

/// Describes output `index`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_output(
    exe: *const XthunkExecutable,
    index: usize,
    out: *mut XthunkTensorInfo,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle and out-pointer (the ABI's contract).
        unsafe {
            let e = arg(exe, "executable")?;
            write_out(out, "out", || info(e, true, index))
        }
    })
}

/// `n` elements at `p` (NULL allowed when `n` is 0).
///
/// # Safety
/// `p` is valid for `n` reads of `T`.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(XthunkError::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and valid for `n` elements (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

pub(crate) fn check_counts(exe: &XthunkExecutable, inputs: usize, outputs: usize) -> Result<()> {
    if inputs != exe.params.len() || outputs != exe.outputs.len() {
        return Err(XthunkError::invalid(format!(
            "`{}` takes {} parameters and {} outputs, got {inputs} and {outputs}",
            exe.loaded.executable().name,
            exe.params.len(),
            exe.outputs.len()
        )));
    }
    Ok(())
}

/// Runs with host memory: uploads every parameter (`inputs[i].size` must be its byte size),
/// runs, and copies every output into `outputs[i]` (its byte size exactly). Returns when done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_run_host(
    exe: *const XthunkExecutable,
    inputs: *const XthunkHostArray,
    input_count: usize,
    outputs: *const XthunkHostArrayMut,
    output_count: usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handle and arrays of the counts given (the ABI's contract).
        unsafe {
            let e = arg(exe, "executable")?;
            check_counts(e, input_count, output_count)?;
            let inputs = array(inputs, input_count, "inputs")?;
            let outputs = array(outputs, output_count, "outputs")?;
            let sig = &e.loaded.executable().signature;
            for ((o, (_, size)), spec) in outputs.iter().zip(&e.outputs).zip(&sig.outputs) {
                if o.size as u64 != *size {
                    return Err(XthunkError::invalid(format!(
                        "output `{}` needs {size} bytes, got {}",
                        spec.name, o.size
                    )));
                }
            }
            let data = inputs
                .iter()
                .map(|i| host_slice(i.data, i.size))
                .collect::<Result<Vec<_>>>()?;
            let results = e
                .loaded
                .run_with_host_data(&data, &ExecuteOptions::default())?;
            for (o, r) in outputs.iter().zip(&results) {
                host_slice_mut(o.data, o.size)?.copy_from_slice(r);
            }
        }
        Ok(())
    })
}

/// Runs with device buffers (on the executable's device, at least each entry's byte size):
/// the outputs stay on the device. Returns when done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_run(
    exe: *const XthunkExecutable,
    params: *const *const XthunkBuffer,
    param_count: usize,
    outputs: *const *const XthunkBuffer,
    output_count: usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handles and arrays of the counts given (the ABI's contract).
        unsafe {
            let e = arg(exe, "executable")?;
            check_counts(e, param_count, output_count)?;
            let bufs = |p, n, what: &str| -> Result<Vec<&dyn DeviceMemory>> {
                array(p, n, what)?
                    .iter()
                    .map(|b| {
                        let b = arg(*b, what)?;
                        same_device(e, b)?;
                        Ok(b.buffer.as_ref() as &dyn DeviceMemory)
                    })
                    .collect()
            };
            let p = bufs(params, param_count, "params")?;
            let o = bufs(outputs, output_count, "outputs")?;
            e.loaded.execute(&p, &o, &ExecuteOptions::default())?;
        }
        Ok(())
    })
}

pub(crate) fn same_device(e: &XthunkExecutable, b: &XthunkBuffer) -> Result<()> {
    let (d, bd) = (e.loaded.device(), &b.device);
    let same = d.backend_name() == bd.backend_name() && d.info().ordinal == bd.info().ordinal;
    if !same {
        return Err(XthunkError::invalid(format!(
            "a buffer on {} device {} passed to an executable on {} device {}",
            bd.backend_name(),
            bd.info().ordinal,
            d.backend_name(),
            d.info().ordinal
        )));
    }
    Ok(())
}
