//! `--trace FILE` and `--trace-device-times` of `xthunk run` (and of each process of a
//! launched job): the tracer a run records into, and writing it as a Chrome JSON trace; in a
//! job, the first process merging every process's trace into one; and `xthunk trace-merge`,
//! which joins traces into one file on one clock.

use super::error::{CliError, CliResult};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xthunk::core::trace::{TraceConfig, Tracer, chrome};

/// The trace options of a run.
#[derive(Debug, Default, clap::Args)]
pub struct TraceArgs {
    /// Write a Chrome JSON trace of every execution (open it in ui.perfetto.dev or
    /// chrome://tracing): a track per rank and stream, a slice per thunk. `{rank}` in FILE is
    /// replaced by the first rank of the process (in a job of several processes; join the
    /// files with `xthunk trace-merge`).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// With --trace: also record timing events around every thunk and show when it ran on
    /// its stream (device time on GPUs, the stream's worker time on the host). Costs two events
    /// per thunk and turns off implicit command buffers.
    #[arg(long, requires = "trace")]
    pub trace_device_times: bool,
}

impl TraceArgs {
    /// The tracer to record into, when a trace was asked for.
    pub fn tracer(&self) -> Option<Arc<Tracer>> {
        self.trace.as_ref().map(|_| {
            Arc::new(Tracer::new(TraceConfig {
                device_times: self.trace_device_times,
            }))
        })
    }

    /// Writes `tracer` to the --trace file (`{rank}` replaced by `rank`) and says so on
    /// stderr.
    pub fn save(&self, tracer: Option<&Tracer>, rank: usize) -> CliResult<()> {
        let (Some(path), Some(tracer)) = (&self.trace, tracer) else {
            return Ok(());
        };
        let path = PathBuf::from(path.to_string_lossy().replace("{rank}", &rank.to_string()));
        tracer.save(&path).map_err(|e| CliError::io(&path, e))?;
        let dropped = tracer.dropped_executions();
        if dropped > 0 {
            super::logging::note(format_args!(
                "xthunk: trace: {dropped} executions left out (over {} thunk records)",
                xthunk::core::trace::MAX_THUNK_RECORDS
            ));
        }
        super::logging::note(format_args!("xthunk: wrote trace {}", path.display()));
        Ok(())
    }
}

impl TraceArgs {
    /// In a job of several processes, after all wrote their traces (`{rank}` replaced by
    /// each one's first rank, `firsts`): merges them into the --trace name with `{rank}`
    /// replaced by `all`. Nothing without a trace, or without `{rank}` in its name.
    pub fn merge_job(&self, firsts: impl Iterator<Item = usize>) -> CliResult<()> {
        let Some(pattern) = &self.trace else {
            return Ok(());
        };
        let pattern = pattern.to_string_lossy();
        if !pattern.contains("{rank}") {
            return Ok(());
        }
        let name = |r: &str| PathBuf::from(pattern.replace("{rank}", r));
        let docs = firsts
            .map(|r| read_trace(&name(&r.to_string())))
            .collect::<CliResult<Vec<_>>>()?;
        let n = docs.len();
        let output = name("all");
        write_merged(&output, docs)?;
        super::logging::note(format_args!(
            "xthunk: wrote the job's trace {} ({n} processes merged)",
            output.display()
        ));
        Ok(())
    }
}

/// Writes the merge of `docs` to `output`.
fn write_merged(output: &Path, docs: Vec<serde_json::Value>) -> CliResult<()> {
    let merged = chrome::merge(docs);
    let bytes = serde_json::to_vec(&merged)
        .map_err(|e| CliError::Usage(format!("encoding the merged trace: {e}")))?;
    xthunk::core::files::write_atomic(output, &bytes, 0o644).map_err(|e| CliError::io(output, e))
}

/// `xthunk trace-merge OUT IN...`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The merged trace to write.
    pub output: PathBuf,
    /// Traces written by `--trace` in the processes of one job (on one machine: they share
    /// its clock).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
}

/// Largest trace file `trace-merge` reads.
const MAX_TRACE_BYTES: u64 = 1 << 30;

fn read_trace(path: &Path) -> CliResult<serde_json::Value> {
    let io = |e| CliError::io(path, e);
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_TRACE_BYTES {
        return Err(CliError::Usage(format!(
            "{}: {len} bytes, more than the {MAX_TRACE_BYTES} trace-merge reads",
            path.display()
        )));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Usage(format!("{}: not a JSON trace: {e}", path.display())))?;
    if !v["traceEvents"].is_array() {
        return Err(CliError::Usage(format!(
            "{}: no `traceEvents` list (not a Chrome JSON trace)",
            path.display()
        )));
    }
    Ok(v)
}

pub fn merge(args: &MergeArgs, out: &mut dyn Write) -> CliResult<()> {
    let docs = args
        .inputs
        .iter()
        .map(|p| read_trace(p))
        .collect::<CliResult<Vec<_>>>()?;
    write_merged(&args.output, docs)?;
    writeln!(
        out,
        "wrote {} ({} traces merged)",
        args.output.display(),
        args.inputs.len()
    )?;
    Ok(())
}
