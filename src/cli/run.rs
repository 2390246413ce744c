//! `xthunk run`: load a program, bind inputs, execute, summarise (and save) the outputs.

use super::error::{CliError, CliResult};
use super::{npy, outfiles, tensor};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xthunk::{BackendChoice, DeviceMemory, ExecuteOptions, LoadedExecutable, Runtime};

/// Everything `xthunk run` was asked to do.
#[derive(Debug)]
pub struct RunArgs {
    pub program: PathBuf,
    pub backend: String,
    pub device: usize,
    pub inputs: Vec<(String, PathBuf)>,
    pub output_dir: Option<PathBuf>,
    pub seed: u64,
    pub iterations: u32,
    pub deadline: Option<Duration>,
}

/// How many leading values of each output are printed.
const SHOWN_VALUES: usize = 8;

/// `auto` or a backend name.
pub fn backend_choice(name: &str) -> BackendChoice {
    if name == "auto" {
        BackendChoice::Auto
    } else {
        BackendChoice::Named(name.to_string())
    }
}

/// Picks the backend and opens the device, telling stderr which one and why others were
/// skipped.
pub fn open_device(
    rt: &Runtime,
    backend: &str,
    ordinal: usize,
) -> CliResult<std::sync::Arc<dyn xthunk::Device>> {
    let choice = backend_choice(backend);
    let (b, skipped) = rt.select(&choice)?;
    let device = b.device(ordinal)?;
    let info = device.info();
    let how = match choice {
        BackendChoice::Auto => "auto-selected",
        BackendChoice::Named(_) => "requested",
    };
    let emulated = if info.emulated {
        " [EMULATED, not a GPU]"
    } else {
        ""
    };
    eprintln!(
        "xthunk: backend `{}` ({how}), device {}: {}{emulated}",
        b.name(),
        info.ordinal,
        info.name
    );
    for s in skipped {
        eprintln!("xthunk:   skipped {s}");
    }
    Ok(device)
}

pub fn run(args: &RunArgs, out: &mut dyn Write) -> CliResult<()> {
    let program =
        xthunk::proto::load_file(&args.program).map_err(|e| CliError::program(&args.program, e))?;
    let sig = program.signature.clone();

    // Check every input file (name, dtype, shape) before touching a device.
    let mut given: BTreeMap<&str, &Path> = BTreeMap::new();
    for (name, path) in &args.inputs {
        if !sig.parameters.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = sig.parameters.iter().map(|p| p.name.as_str()).collect();
            return Err(CliError::Usage(format!(
                "--input {name}=...: `{}` has no parameter `{name}` (parameters: {})",
                program.name,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
        if given.insert(name, path).is_some() {
            return Err(CliError::Usage(format!(
                "--input {name}=... is given more than once"
            )));
        }
    }
    let mut host_inputs = Vec::with_capacity(sig.parameters.len());
    for (i, p) in sig.parameters.iter().enumerate() {
        let bytes = match given.get(p.name.as_str()) {
            Some(path) => npy::read_input(p, path)?,
            None => {
                let count = p.element_count().ok_or_else(|| {
                    CliError::Usage(format!("parameter `{}` is too large", p.name))
                })?;
                let count = usize::try_from(count)
                    .map_err(|_| CliError::Usage(format!("parameter `{}` is too large", p.name)))?;
                tracing::info!(parameter = %p.name, seed = args.seed, "random input");
                tensor::random_bytes(p.dtype, count, args.seed, i as u64)
            }
        };
        host_inputs.push(bytes);
    }
    let plan = match &args.output_dir {
        Some(dir) => Some(outfiles::Plan::new(dir, &sig.outputs)?),
        None => None,
    };

    let rt = Runtime::new();
    let device = open_device(&rt, &args.backend, args.device)?;
    let t = Instant::now();
    let exe = LoadedExecutable::load(device.clone(), program)?;
    tracing::info!(
        elapsed_ms = t.elapsed().as_secs_f64() * 1e3,
        "loaded `{}`",
        exe.executable().name
    );

    let params = exe.allocate_parameters()?;
    for (buf, bytes) in params.iter().zip(&host_inputs) {
        device.copy_from_host(bytes, buf.ptr())?;
    }
    let outputs = exe.allocate_outputs()?;
    let pr: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let or: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let opts = ExecuteOptions {
        deadline: args.deadline,
        ..Default::default()
    };
    let mut times = Vec::with_capacity(args.iterations as usize);
    for i in 0..args.iterations {
        let t = Instant::now();
        exe.execute(&pr, &or, &opts)?;
        let dt = t.elapsed();
        tracing::debug!(
            iteration = i,
            elapsed_us = dt.as_micros() as u64,
            "executed"
        );
        times.push(dt);
    }
    let mut results = Vec::with_capacity(outputs.len());
    for o in &outputs {
        let mut v = vec![0u8; o.size() as usize];
        device.copy_to_host(o.ptr(), &mut v)?;
        results.push(v);
    }

    let e = exe.executable();
    writeln!(
        out,
        "program {} ({} thunks) on {}:{} {}",
        e.name,
        e.thunk_count(),
        device.backend_name(),
        device.info().ordinal,
        device.info().name
    )?;
    for (spec, bytes) in sig.outputs.iter().zip(&results) {
        writeln!(
            out,
            "output {}: {}  sum={}  fnv1a={:016x}",
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
    let total: Duration = times.iter().sum();
    let mean = total / times.len().max(1) as u32;
    let min = times.iter().min().copied().unwrap_or_default();
    writeln!(
        out,
        "time per iteration: mean {:.3} ms, min {:.3} ms ({} iteration{})",
        mean.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3,
        times.len(),
        if times.len() == 1 { "" } else { "s" }
    )?;
    if let Some(plan) = plan {
        let written = plan.write(&results)?;
        for p in written {
            writeln!(out, "wrote {}", p.display())?;
        }
    }
    Ok(())
}
