//! `xthunk bench`: the runtime's benchmarks, run through the public APIs on one device and
//! compared, in the same run, with a baseline doing the same work without xthunk.
//!
//! | benchmark | xthunk | host baseline | GPU baseline (CUDA / ROCm) | goal (GPU / host) |
//! |---|---|---|---|---|
//! | `executor_overhead` | a chain of 10,000 `add_f32` kernels on 16 elements through `execute` | the host kernel function called in a plain loop | a bare `cuLaunchKernel` / `hipModuleLaunchKernel` loop of the same kernel | ≤ 1.1× / ≤ 1.5× time |
//! | `command_buffer` | 1,000 such kernels as one `CommandBuffer` (recorded once, replayed) | the same kernels launched directly (in the entry) | same | ≥ 3× / ≥ 2× faster |
//! | `copy_bandwidth` | 256 MiB device-to-device `Copy` thunks | `copy_nonoverlapping` (`copy_from_slice`) | `cuMemcpyDtoDAsync` / `hipMemcpyDtoDAsync` | ≥ 0.9× bandwidth |
//! | `gemm_<dtype>` | a `Gemm` thunk (f32 1024³ on the host; f32 4096³, bf16 and f16 8192³ on GPUs) | a plain triple loop at 256³, its rate scaled | cuBLAS `cublasGemmEx` / rocBLAS `rocblas_gemm_ex` called directly, same shapes | ≥ 0.95× of the vendor BLAS / none |
//! | `gemm_f32_numpy` | the same `Gemm` thunk, f32 1024³, on the host (its CPU BLAS, else the built-in gemm crate) | numpy's `matmul` of the same shape (numpy's own BLAS) in a Python child process ([`numpy`]); skipped with the reason without numpy | none: host only (skipped on GPUs) | ≥ 0.95× numpy's rate (host) |
//! | `wide_dag` | 8 independent chains of 4 elementwise kernels on 2 streams | the same on 1 stream | same | 2 streams faster (> 1×) |
//! | `device_loop` | a data-dependent `while` of 1,000 trips over a tiny body inside a `CommandBuffer` (a conditional `While` node where the backend has them) | the same loop in the entry (host-driven: the predicate read back every trip) | same | ≥ 10× faster / none |
//! | `stream_ordered_scratch` | 64 `add_f32` kernels, each writing a temp of its own, repeated, the temp arenas from the device's stream-ordered memory pool per execution | the same with the arenas kept in the pooled execution state | same | none (informational: the cost per execution, and in a note the memory held between executions) |
//! | `stablehlo_mlp_step`, `stablehlo_transformer_step`, `stablehlo_cnn_forward` | a JAX training step (MLP; transformer block) or a CNN forward (convolutions, max pooling, dense) as StableHLO text, imported, lowered and run through a `Session` (host backend) | XLA:CPU compiling the same text through jaxlib, in a Python child process ([`xla`]); skipped with the reason without jax | none: host only (skipped on GPUs) | none (informational; a note gives kernels per step vs XLA's fusions) |
//! | `stablehlo_load_cold`, `stablehlo_load_warm` | import + lower + `Session::load` (kernel compile) of the transformer step: the process's first load (salted, so no cache holds its kernels), then later loads of the same text ([`import`]) | none (warm: the ratio is to the cold load) | none: host only (skipped on GPUs) | none (informational; notes: each phase, compiles and cache hits) |
//! | `stablehlo_import_scale` | import + lower of generated elementwise chains of 2.5·10⁴, 5·10⁴ and 10⁵ ops, each with its peak memory; 50, 100 and 200 nested `if`s in a note | none (the ratio: peak memory per op, largest / smallest program) | none: host only (skipped on GPUs) | ≤ 1.5× (memory linear in the size) / same |
//! | `allreduce_sweep` | an f32 sum all-reduce over `--ranks` devices at 8 B, doubling, up to `--sweep-max` (256 MiB on a GPU), as `all_reduce` thunks through the executor; `--collective-memory on` puts its buffer in `MEMORY_SPACE_COLLECTIVE` | the same all-reduces on the same communicator called directly (the host collectives) | the same communicator called directly (`ncclAllReduce` / RCCL's), no executor | ≥ 0.95× busbw at the largest size / none; a per-size table like nccl-tests' (time, algbw, busbw) is printed before the rows ([`allreduce`]) |
//! | `graph_build` | loading 10,000 memsets to distinct offsets then 10,000 whole-buffer copies (the dependency graph's worst shape) | loading the same number of thunks, each copy taking one element | same | ≤ 3× time (and under 1 s, in a note) |
//!
//! The GPU baselines are the device's raw vendor baselines
//! ([`xthunk::core::backend::baseline::RawBaseline`], from [`Device::raw_baseline`]: CUDA's
//! `cuLaunchKernel` / `cuMemcpyDtoDAsync` / `cublasGemmEx`, ROCm's `hipModuleLaunchKernel` /
//! `hipMemcpyDtoDAsync` / `rocblas_gemm_ex`); a device without them gets rows with no
//! baseline.
//!
//! Every ratio is measured in interleaved rounds ([`stats`]): each round runs every variant
//! once, back to back (the order alternating from round to round), after one untimed warm-up
//! round. The table gives the median of each variant's times and the median of the per-round
//! ratios, with their spread (the 25th to 75th percentile of the per-round ratios). Results of
//! every variant are checked once (a wrong result is an error, not a number).
//!
//! Devices of the driver emulator are labelled `[EMULATED device, not a GPU result]`, run
//! smaller problems and get no verdict.
//!
//! Modules: [`stats`] (goals, spreads, interleaved rounds), [`report`] (rows, the table, the
//! JSON document), [`program`] (loaded programs and the shared tiny chain), [`load`] (machine
//! load), and one per benchmark: [`overhead`], [`replay`], [`copy`], [`gemm`], [`wide`],
//! [`graph`], [`device_loop`], [`scratch`], [`trace`], [`stablehlo`] (with [`xla`], its
//! baseline's child process), [`import`] (loading and importing StableHLO), [`numpy`] (its
//! child speaks [`xla`]'s protocol).

mod allreduce;
mod copy;
mod device_loop;
mod gemm;
mod graph;
mod import;
mod load;
mod numpy;
mod overhead;
mod program;
mod replay;
mod report;
mod scratch;
mod setup;
mod stablehlo;
mod stats;
mod trace;
mod wide;
mod xla;

use super::error::{CliError, CliResult, one_line};
use super::run::backend_choice;
use report::{Context, DeviceSummary, Status, table, write_json};
use setup::{BAR, Setup, one, selected};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;
use xthunk::Runtime;
use xthunk::core::backend::Vendor;

/// Exit status: every benchmark that could run ran (goals missed or not).
pub const EXIT_OK: u8 = 0;
/// Exit status: a benchmark failed (an error, or a wrong result).
pub const EXIT_FAILED: u8 = 1;
/// Exit status: the requested backend could not run.
pub const EXIT_SKIPPED: u8 = 2;

/// Every benchmark row name (a `--filter` must match one).
pub const NAMES: [&str; 20] = [
    "executor_overhead",
    "command_buffer",
    "copy_bandwidth",
    "gemm_f32",
    "gemm_bf16",
    "gemm_f16",
    "gemm_f32_numpy",
    "wide_dag",
    "graph_build",
    "device_loop",
    "stream_ordered_scratch",
    "trace_overhead",
    "stablehlo_mlp_step",
    "stablehlo_transformer_step",
    "stablehlo_cnn_forward",
    "stablehlo_load_cold",
    "stablehlo_load_warm",
    "stablehlo_import_scale",
    "allreduce_sweep",
    "allreduce_sweep_collective",
];

/// What `xthunk bench` was asked to do.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// auto (cuda, then rocm, then host), or a backend name (host, cuda, rocm).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Device ordinal within the backend.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Only benchmarks whose name contains this string (e.g. `gemm`, `copy`).
    #[arg(long)]
    pub filter: Option<String>,
    /// Fewer rounds (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// The Python (with jax and jaxlib) of the StableHLO rows' XLA:CPU baseline, and (with
    /// numpy) of `gemm_f32_numpy`'s numpy baseline [default: $XTHUNK_PYTHON, else the CI
    /// venv's (~/.cache/xthunk/venv), else python3].
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<PathBuf>,
    /// allreduce_sweep: ranks, one device each [default: every device of the backend; on
    /// the host, 2].
    #[arg(long)]
    pub ranks: Option<usize>,
    /// allreduce_sweep: the largest size, in bytes (K, M, G suffixes: KiB, MiB, GiB)
    /// [default: 256M on a GPU, 16M on the host, 1M on an emulated device].
    #[arg(long, value_parser = parse_size)]
    pub sweep_max: Option<u64>,
    /// allreduce_sweep: the xthunk program's buffer in MEMORY_SPACE_COLLECTIVE (on), in
    /// device memory (off), or one sweep each (both).
    #[arg(long, value_enum, default_value = "off")]
    pub collective_memory: CollectiveMemory,
    /// Also write the results as JSON to this file (atomically).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `--collective-memory`: where the sweep's xthunk buffer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CollectiveMemory {
    Off,
    On,
    Both,
}

/// A size in bytes with an optional K, M or G suffix (binary multiples).
fn parse_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|n| *n >= 8)
        .ok_or_else(|| format!("`{v}` is not a size of at least 8 bytes (e.g. 4096, 64K, 1M)"))
}

/// Runs the benchmarks; returns the exit status.
pub fn bench(rt: &Runtime, args: &BenchArgs, out: &mut dyn Write) -> CliResult<u8> {
    let filter = args.filter.as_deref();
    if let Some(f) = filter
        && !NAMES.iter().any(|n| n.contains(f))
    {
        return Err(CliError::Usage(format!(
            "no benchmark matches --filter `{f}` (benchmarks: {})",
            NAMES.join(", ")
        )));
    }
    let built = rt.registry().names();
    if args.backend != "auto" && !built.contains(&args.backend.as_str()) {
        return Err(CliError::Usage(format!(
            "unknown backend `{}` (auto, {})",
            args.backend,
            built.join(", ")
        )));
    }
    let skip = |reason: String, out: &mut dyn Write| -> CliResult<u8> {
        writeln!(out, "bench: backend {} SKIPPED: {reason}", args.backend)?;
        if let Some(path) = &args.json {
            let device = DeviceSummary {
                ordinal: args.device,
                ..DeviceSummary::default()
            };
            let ctx = Context::new(&args.backend, device, args.quick);
            write_json(path, &ctx, "skipped", Some(&reason), &[])?;
        }
        Ok(EXIT_SKIPPED)
    };
    if args.backend != "auto" && rt.registry().get(&args.backend).is_none() {
        return skip("not built into this binary".into(), out);
    }
    let (backend, skipped) = match rt.select(&backend_choice(&args.backend)) {
        Ok(b) => b,
        Err(e) => return skip(one_line(&e), out),
    };
    for s in skipped {
        eprintln!("xthunk bench: auto skipped {s}");
    }
    let dev = backend.device(args.device)?;
    let info = dev.info().clone();
    let setup = Setup {
        dev: dev.clone(),
        backend: backend.name(),
        baseline: dev.raw_baseline(),
        gpu: info.vendor != Vendor::Host && !info.emulated,
        emulated: info.emulated,
        quick: args.quick,
        python: args.python.clone(),
    };
    let ctx = Context::new(backend.name(), DeviceSummary::of(&info), args.quick);
    eprintln!(
        "xthunk bench: backend {}, device {}: {}",
        ctx.backend, ctx.device.ordinal, ctx.device.label
    );
    let start = Instant::now();
    let count = NAMES.iter().filter(|n| selected(n, filter)).count();
    let bar = BAR.get_or_init(|| super::progress::bar(count as u64, "bench"));
    let mut rows = vec![];
    one(
        "executor_overhead",
        filter,
        || overhead::executor_overhead(&setup),
        &mut rows,
    );
    one(
        "command_buffer",
        filter,
        || replay::command_buffer(&setup),
        &mut rows,
    );
    one(
        "copy_bandwidth",
        filter,
        || copy::copy_bandwidth(&setup),
        &mut rows,
    );
    rows.extend(gemm::gemms(&setup, filter));
    one(
        "gemm_f32_numpy",
        filter,
        || numpy::gemm_f32_numpy(&setup),
        &mut rows,
    );
    one("wide_dag", filter, || wide::wide_dag(&setup), &mut rows);
    one(
        "graph_build",
        filter,
        || graph::graph_build(&setup),
        &mut rows,
    );
    one(
        "device_loop",
        filter,
        || device_loop::device_loop(&setup),
        &mut rows,
    );
    one(
        "stream_ordered_scratch",
        filter,
        || scratch::stream_ordered_scratch(&setup),
        &mut rows,
    );
    one(
        "trace_overhead",
        filter,
        || trace::trace_overhead(&setup),
        &mut rows,
    );
    // First of the StableHLO rows: the cold load must be the process's first of its kernels.
    if ["stablehlo_load_cold", "stablehlo_load_warm"]
        .iter()
        .any(|n| selected(n, filter))
    {
        let mut pair = vec![];
        let mut warm = None;
        one(
            "stablehlo_load_cold",
            None,
            || {
                let (cold, w) = import::stablehlo_load(&setup)?;
                warm = w;
                Ok(cold)
            },
            &mut pair,
        );
        if let Some(w) = warm {
            pair.push(w);
        }
        rows.extend(pair.into_iter().filter(|r| selected(&r.name, filter)));
    }
    one(
        "stablehlo_import_scale",
        filter,
        || import::stablehlo_import_scale(&setup),
        &mut rows,
    );
    for step in [stablehlo::MLP, stablehlo::TRANSFORMER, stablehlo::CNN] {
        one(
            step.name,
            filter,
            || stablehlo::stablehlo_step(&setup, &step),
            &mut rows,
        );
    }
    let mut sweeps = String::new();
    let spaces: &[xthunk::ir::MemorySpace] = match args.collective_memory {
        CollectiveMemory::Off => &[xthunk::ir::MemorySpace::Device],
        CollectiveMemory::On => &[xthunk::ir::MemorySpace::Collective],
        CollectiveMemory::Both => &[
            xthunk::ir::MemorySpace::Device,
            xthunk::ir::MemorySpace::Collective,
        ],
    };
    for space in spaces {
        let sweep = allreduce::Sweep {
            rt,
            backend: &backend,
            ranks: match args.ranks {
                Some(n) => n,
                None => backend.probe().map_or(1, |i| i.devices.len()),
            },
            max: args.sweep_max.unwrap_or(if setup.emulated {
                1 << 20
            } else if setup.gpu {
                256 << 20
            } else {
                16 << 20
            }),
            space: *space,
            quick: args.quick,
            gpu: setup.gpu,
            emulated: setup.emulated,
        };
        one(
            sweep.name(),
            filter,
            || allreduce::allreduce_sweep(&sweep, &mut sweeps),
            &mut rows,
        );
    }
    bar.finish_and_clear();
    out.write_all(sweeps.as_bytes())?;
    eprintln!(
        "xthunk bench: done in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    out.write_all(table(&ctx, &rows).as_bytes())?;
    if let Some(path) = &args.json {
        write_json(path, &ctx, "ran", None, &rows)?;
        writeln!(out, "results written to {}", path.display())?;
    }
    let failed = rows.iter().any(|r| matches!(r.status, Status::Failed(_)));
    Ok(if failed { EXIT_FAILED } else { EXIT_OK })
}
