//! Input–output aliases from C: which parameter an output may reuse
//! (`xthunk_executable_output_alias`), and running with donated parameters
//! (`xthunk_executable_run_donated`): an aliased output written into its parameter's buffer,
//! without a copy where the program allows it (docs/c-api.md).

use crate::error::{Result, XthunkError, arg, guard};
use crate::executable::{XthunkExecutable, array, check_counts, same_device};
use crate::handles::XthunkBuffer;
use xthunk::{DeviceMemory, ExecuteOptions};

/// The parameter whose buffer output `index` may reuse (an input–output alias, e.g. JAX's
/// `donate_argnums`), or -1 when it has none, the index is out of range or `exe` is NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_output_alias(
    exe: *const XthunkExecutable,
    index: usize,
) -> i64 {
    crate::error::guard_value(-1, || {
        // SAFETY: NULL or a live executable (the ABI's contract).
        let Some(e) = (unsafe { exe.as_ref() }) else {
            return -1;
        };
        e.loaded
            .executable()
            .aliases
            .iter()
            .find(|a| a.output as usize == index)
            .map_or(-1, |a| i64::from(a.parameter))
    })
}

/// `xthunk_executable_run` with donated parameters:
/// `donate` (NULL, or `param_count` flags) marks the parameters whose buffers the caller
/// gives up; each must be aliased to an output (`xthunk_executable_output_alias`), whose
/// entry in `outputs` is then NULL or that same buffer, and which is written there. Every
/// other output needs its own buffer; buffers that overlap where the program declares no alias
/// are refused (`XTHUNK_STATUS_INVALID_ARGUMENT`, naming both). After the call a donated
/// buffer holds the output, not the parameter. Returns when done.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn xthunk_executable_run_donated(
    exe: *const XthunkExecutable,
    params: *const *const XthunkBuffer,
    param_count: usize,
    donate: *const bool,
    outputs: *const *const XthunkBuffer,
    output_count: usize,
) -> *mut XthunkError {
    guard(|| {
        // SAFETY: the caller's handles and arrays of the counts given (the ABI's contract).
        unsafe {
            let e = arg(exe, "executable")?;
            let (p, o) = resolve(e, params, param_count, donate, outputs, output_count)?;
            e.loaded.execute(&p, &o, &ExecuteOptions::default())?;
        }
        Ok(())
    })
}

/// A run's parameter and output memory, in signature order.
pub(crate) type Bound<'a> = (Vec<&'a dyn DeviceMemory>, Vec<&'a dyn DeviceMemory>);

/// The parameter and output memory of a run with donated parameters (see
/// `xthunk_executable_run_donated`), checked: counts, devices, donations.
///
/// # Safety
/// The arrays are valid for the counts given and hold NULL or live buffers (`outputs` entries
/// may be NULL where a donated parameter fills them).
pub(crate) unsafe fn resolve<'a>(
    e: &XthunkExecutable,
    params: *const *const XthunkBuffer,
    param_count: usize,
    donate: *const bool,
    outputs: *const *const XthunkBuffer,
    output_count: usize,
) -> Result<Bound<'a>> {
    check_counts(e, param_count, output_count)?;
    // SAFETY: the caller's arrays of the counts given and live handles (this function's
    // contract).
    unsafe {
        let donate = if donate.is_null() {
            &[][..]
        } else {
            array(donate, param_count, "donate")?
        };
        let buf = |b: *const XthunkBuffer, what: &str| -> Result<&'a dyn DeviceMemory> {
            let b: &'a XthunkBuffer = arg(b, what)?;
            same_device(e, b)?;
            Ok(b.buffer.as_ref() as &dyn DeviceMemory)
        };
        let p = array(params, param_count, "params")?
            .iter()
            .map(|b| buf(*b, "params"))
            .collect::<Result<Vec<_>>>()?;
        let raw = array(outputs, output_count, "outputs")?;
        let exe_ir = e.loaded.executable();
        let sig = &exe_ir.signature;
        let mut o: Vec<Option<&dyn DeviceMemory>> = raw
            .iter()
            .map(|b| {
                if b.is_null() {
                    Ok(None)
                } else {
                    buf(*b, "outputs").map(Some)
                }
            })
            .collect::<Result<_>>()?;
        for (i, _) in donate.iter().enumerate().filter(|(_, d)| **d) {
            let name = &sig.parameters[i].name;
            let Some(a) = exe_ir.aliases.iter().find(|a| a.parameter as usize == i) else {
                return Err(XthunkError::invalid(format!(
                    "parameter {i} `{name}` is donated, but `{}` aliases no output to it",
                    exe_ir.name
                )));
            };
            let slot = &mut o[a.output as usize];
            match slot {
                None => *slot = Some(p[i]),
                Some(b) if b.ptr() == p[i].ptr() => {}
                Some(_) => {
                    return Err(XthunkError::invalid(format!(
                        "output {} `{}` is written into donated parameter {i} `{name}`: \
                         pass NULL or the parameter's buffer for it",
                        a.output, sig.outputs[a.output as usize].name
                    )));
                }
            }
        }
        let o = o
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                b.ok_or_else(|| {
                    XthunkError::invalid(format!(
                        "outputs[{i}] (`{}`) is NULL and no donated parameter is aliased \
                         to it",
                        sig.outputs[i].name
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((p, o))
    }
}
