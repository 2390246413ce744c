//! What `run` prints about a run, on one device, on N ranks and in a launched job's ranks alike:
//! the temp-memory line, each output's summary, the times per iteration.

use super::tensor;
use std::io::Write;
use std::time::Duration;
use xthunk::LoadedExecutable;

/// How many leading values of each output are printed.
const SHOWN_VALUES: usize = 8;

/// Prints `temp memory: PLAN; scratch: PATH` of a loaded program.
pub(super) fn print_temp_memory(
    out: &mut dyn Write,
    exe: &LoadedExecutable,
) -> std::io::Result<()> {
    writeln!(
        out,
        "temp memory: {}; scratch: {}",
        exe.temp_plan().summary(),
        exe.scratch_path()
    )
}

/// Prints each output's name, type, sum, hash and first values, each line behind `prefix`
/// (e.g. `rank 2 `).
pub(super) fn print_outputs(
    out: &mut dyn Write,
    prefix: &str,
    outputs: &[xthunk::ir::TensorSpec],
    results: &[Vec<u8>],
) -> std::io::Result<()> {
    for (spec, bytes) in outputs.iter().zip(results) {
        writeln!(
            out,
            "{prefix}output {}: {}  sum={}  fnv1a={:016x}",
            spec.name,
            tensor::type_text(spec.dtype, &spec.dims),
            tensor::float_text(tensor::sum(spec.dtype, bytes)),
            tensor::fnv1a(bytes)
        )?;
        writeln!(
            out,
            "  first values: {}",
            tensor::first_values(spec.dtype, bytes, SHOWN_VALUES)
        )?;
    }
    Ok(())
}

/// Prints `what: mean X ms, min Y ms (N iterations)`.
pub(super) fn print_times(
    out: &mut dyn Write,
    what: &str,
    times: &[Duration],
) -> std::io::Result<()> {
    let total: Duration = times.iter().sum();
    let mean = total / times.len().max(1) as u32;
    let min = times.iter().min().copied().unwrap_or_default();
    writeln!(
        out,
        "{what}: mean {:.3} ms, min {:.3} ms ({} iteration{})",
        mean.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3,
        times.len(),
        if times.len() == 1 { "" } else { "s" }
    )
}
