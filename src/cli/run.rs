//! `xthunk run`: load a program, bind inputs, execute, summarise (and save) the outputs.

use super::error::{CliError, CliResult};
use super::summary::{print_outputs, print_temp_memory, print_times};
use super::{npy, outfiles, tensor};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use xthunk::core::executor::{Program, Session};
use xthunk::{BackendChoice, ExecuteOptions, Runtime};

pub use super::run_args::RunArgs;

/// `auto` or a backend name.
pub use xthunk::embed::backend_choice;

/// Picks the backend (its name checked by [`check_backend_name`]) and opens the device,
/// telling stderr which one and why others were skipped.
pub fn open_device(
    rt: &Runtime,
    backend: &str,
    ordinal: usize,
) -> CliResult<std::sync::Arc<dyn xthunk::Device>> {
    let choice = backend_choice(backend);
    let (b, skipped) = rt.select(&choice)?;
    check_device_count(
        b.as_ref(),
        ordinal.saturating_add(1),
        &format!("--device {ordinal}"),
    )?;
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

/// `--backend NAME` names a backend of this build (or is `auto`): a usage error otherwise.
pub(super) fn check_backend_name(rt: &Runtime, name: &str) -> CliResult<()> {
    let names = rt.registry().names();
    if name != "auto" && !names.contains(&name) {
        return Err(CliError::CommandLine(format!(
            "--backend {name}: no such backend in this build (expected auto, {})",
            names.join(", ")
        )));
    }
    Ok(())
}

/// The backend has at least `needed` devices (`asked`: the option that wants them, e.g.
/// `--device 3`): a usage error otherwise.
fn check_device_count(backend: &dyn xthunk::Backend, needed: usize, asked: &str) -> CliResult<()> {
    let have = backend.probe()?.devices.len();
    if needed > have {
        return Err(CliError::CommandLine(format!(
            "{asked}: backend `{}` has {have} device{}",
            backend.name(),
            if have == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// The random input of parameter `p` (see [`tensor::random_bytes`]), or an error naming the
/// parameter and its size when no host buffer of that size can be had.
pub(super) fn random_input(
    p: &xthunk::ir::TensorSpec,
    seed: u64,
    stream: u64,
) -> CliResult<Vec<u8>> {
    let what = || {
        let bytes = p
            .byte_size()
            .map_or_else(|| "overflowing".to_string(), |b| b.to_string());
        format!(
            "random input for parameter `{}` ({}, {bytes} bytes)",
            p.name,
            tensor::type_text(p.dtype, &p.dims)
        )
    };
    let count = p.element_count().ok_or_else(|| CliError::HostMemory {
        what: what(),
        source: tensor::HostAllocError {
            requested: u64::MAX,
            reason: "its element count overflows".into(),
        },
    })?;
    tensor::random_bytes(p.dtype, count, seed, stream).map_err(|source| CliError::HostMemory {
        what: what(),
        source,
    })
}

pub fn run(args: &RunArgs, out: &mut dyn Write) -> CliResult<()> {
    // Usage errors that need no program first (exit 2, nothing read or written).
    if let Some(dir) = &args.output_dir {
        outfiles::check_dir(dir)?;
    }
    // One runtime, its backend name checked once: its host backend has a device per rank
    // (one in a job's process, whose host jobs take one device per process).
    let rt = Runtime::with_host_devices(args.devices.max(1) as usize);
    check_backend_name(&rt, &args.backend)?;
    xthunk::plugins::load_plugins(&args.plugins).map_err(xthunk::Error::from)?;
    let (program, spmd) = xthunk::program_file::load_program_spmd(&args.program)
        .map_err(|e| CliError::program(&args.program, e))?;
    let sig = program.signature.clone();

    // Check every input file (name, dtype, shape) before touching a device.
    let mut given: BTreeMap<&str, &Path> = BTreeMap::new();
    for (name, path) in &args.inputs {
        if !sig.parameters.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = sig.parameters.iter().map(|p| p.name.as_str()).collect();
            return Err(CliError::CommandLine(format!(
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
            return Err(CliError::CommandLine(format!(
                "--input {name}=... is given more than once"
            )));
        }
    }
    // A process of a multi-process job (`xthunk launch`, Slurm, ...) is one rank of it: its
    // random inputs are those `run --devices N` gives that rank.
    let job = super::job::detect()?;
    let ranks = args.devices.max(1) as usize;
    let rank_range = match &job {
        Some(c) => super::job::global_ranks(c, ranks)?,
        None => 0..ranks,
    };
    // A sharded StableHLO program (shard_map, pmap) takes the GLOBAL inputs on every rank
    // and splits them itself: it needs exactly its ranks, and the same inputs everywhere.
    let global = spmd.is_some_and(|i| i.global);
    if let Some(info) = spmd.filter(|i| i.global) {
        let world = job
            .as_ref()
            .map_or(ranks, |c| c.world_size.saturating_mul(ranks));
        if u64::try_from(world).ok() != Some(info.ranks) {
            return Err(CliError::CommandLine(format!(
                "`{}` is a sharded program of {} ranks (its mesh); run it on {} ranks \
                 (`run --devices {}` or `launch -n {}`), not {world}",
                args.program.display(),
                info.ranks,
                info.ranks,
                info.ranks,
                info.ranks
            )));
        }
    }
    // Where the outputs of a single-device run go, checked before any input is made.
    let plan = match (&args.output_dir, &job) {
        (Some(dir), None) if ranks == 1 => Some(outfiles::Plan::new(dir, &sig.outputs)?),
        _ => None,
    };
    let mut rank_inputs: Vec<Vec<Vec<u8>>> = Vec::with_capacity(ranks);
    for rank in rank_range {
        let mut host_inputs = Vec::with_capacity(sig.parameters.len());
        for (i, p) in sig.parameters.iter().enumerate() {
            let bytes = match given.get(p.name.as_str()) {
                Some(path) => npy::read_rank_input(p, path, rank)?,
                None => {
                    tracing::info!(parameter = %p.name, seed = args.seed, rank, "random input");
                    // Rank 0 gets the same values as a single-device run; every rank gets
                    // rank 0's global values in a sharded program.
                    let of = if global { 0 } else { rank as u64 };
                    let stream = (i as u64).wrapping_add(of.wrapping_mul(0x1_0000));
                    random_input(p, args.seed, stream)?
                }
            };
            host_inputs.push(bytes);
        }
        rank_inputs.push(host_inputs);
    }
    if let Some(config) = &job {
        return super::job::run_job(args, &rt, config, program, rank_inputs, out);
    }
    if ranks > 1 {
        return run_spmd(args, &rt, program, rank_inputs, out);
    }
    let host_inputs = rank_inputs.pop().unwrap_or_default();

    let device = open_device(&rt, &args.backend, args.device.unwrap_or(0))?;
    let tracer = args.trace.tracer();
    if let Some(t) = &tracer {
        t.name_rank(0, device.info().name.clone());
    }
    let t = Instant::now();
    let session = Session::load(
        device.clone(),
        &program,
        &args.config(),
        tracer.as_deref().map(|t| (t, 0)),
    )?;
    let exe = session.loaded();
    tracing::debug!(plan = %exe.temp_plan().summary(), "temps");
    tracing::info!(
        elapsed_ms = t.elapsed().as_secs_f64() * 1e3,
        "loaded `{}`",
        exe.executable().name
    );
    session.bind(&host_inputs)?;
    let opts = ExecuteOptions {
        deadline: args.deadline,
        trace: tracer.clone(),
        ..Default::default()
    };
    // A bar for long runs only.
    let bar = if args.iterations >= 100 {
        super::progress::bar(u64::from(args.iterations), "iterations")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let times = match session.execute_iterations(args.iterations, &opts, |_, _| bar.inc(1)) {
        Ok(times) => times,
        Err(e) => {
            // The trace of a failed run shows how far it got.
            args.trace.save(tracer.as_deref(), 0)?;
            return Err(e.into());
        }
    };
    bar.finish_and_clear();
    let results = tensor::read_back(&session)?;
    args.trace.save(tracer.as_deref(), 0)?;

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
    print_temp_memory(out, exe)?;
    print_outputs(out, "", &sig.outputs, &results)?;
    print_times(out, "time per iteration", &times)?;
    if let Some(plan) = plan {
        let written = plan.write(&results)?;
        for p in written {
            writeln!(out, "wrote {}", p.display())?;
        }
    }
    Ok(())
}

/// `xthunk run --devices N`: the program on devices 0..N-1 of one backend, one thread per rank,
/// collectives among them; prints every rank's outputs and writes them under
/// `DIR/rank<R>/NAME.npy`.
fn run_spmd(
    args: &RunArgs,
    rt: &Runtime,
    program: Program,
    inputs: Vec<Vec<Vec<u8>>>,
    out: &mut dyn Write,
) -> CliResult<()> {
    use xthunk::core::collectives::Timeouts;
    let n = inputs.len();
    let sig = program.signature.clone();
    let plans = match &args.output_dir {
        Some(dir) => Some(
            (0..n)
                .map(|r| outfiles::Plan::new(&dir.join(format!("rank{r}")), &sig.outputs))
                .collect::<CliResult<Vec<_>>>()?,
        ),
        None => None,
    };
    let choice = backend_choice(&args.backend);
    let (backend, skipped) = rt.select(&choice)?;
    for s in skipped {
        eprintln!("xthunk:   skipped {s}");
    }
    check_device_count(backend.as_ref(), n, &format!("--devices {n}"))?;
    let devices = (0..n)
        .map(|i| backend.device(i))
        .collect::<xthunk::Result<Vec<_>>>()?;
    let timeouts = Timeouts::new(args.collective_timeout / 6, args.collective_timeout);
    // The clique provider registered with the backend (host, NCCL on CUDA, RCCL on ROCm).
    let (cliques, off) = xthunk::embed::spmd_cliques(rt, backend.as_ref(), &devices, timeouts)?;
    if let Some(why) = off {
        eprintln!(
            "xthunk: collectives are off on backend {}: {why}",
            backend.name()
        );
    }
    eprintln!(
        "xthunk: backend `{}`, {n} ranks on devices 0..{}: {}{}",
        backend.name(),
        n - 1,
        devices[0].info().name,
        if devices[0].info().emulated {
            " [EMULATED, not a GPU]"
        } else {
            ""
        }
    );
    let tracer = args.trace.tracer();
    let opts = ExecuteOptions {
        deadline: args.deadline,
        trace: tracer.clone(),
        ..Default::default()
    };
    let results = xthunk::core::executor::spmd::run_program(
        &program,
        &devices,
        cliques,
        &inputs,
        args.iterations,
        &args.config(),
        &opts,
    );
    // Also after a failure: the trace shows where each rank got.
    args.trace.save(tracer.as_deref(), 0)?;
    let results = results?;
    writeln!(
        out,
        "program {} ({} thunks) on {n} ranks of {}",
        program.name,
        program.thunk_count(),
        backend.name()
    )?;
    for (rank, r) in results.iter().enumerate() {
        print_outputs(out, &format!("rank {rank} "), &sig.outputs, &r.outputs)?;
    }
    let slowest: Vec<Duration> = (0..args.iterations as usize)
        .map(|i| {
            results
                .iter()
                .filter_map(|r| r.times.get(i).copied())
                .max()
                .unwrap_or_default()
        })
        .collect();
    let total: Duration = slowest.iter().sum();
    let mean = total / slowest.len().max(1) as u32;
    writeln!(
        out,
        "time per iteration (slowest rank): mean {:.3} ms ({} iteration{})",
        mean.as_secs_f64() * 1e3,
        slowest.len(),
        if slowest.len() == 1 { "" } else { "s" }
    )?;
    if let Some(plans) = plans {
        for (plan, r) in plans.into_iter().zip(&results) {
            for p in plan.write(&r.outputs)? {
                writeln!(out, "wrote {}", p.display())?;
            }
        }
    }
    Ok(())
}
