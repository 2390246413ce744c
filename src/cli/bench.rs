//! `xthunk bench`: the runtime's benchmarks, run through the public APIs on one device and
//! compared, in the same run, with a baseline doing the same work without xthunk.
//!
//! | benchmark | xthunk | host baseline | CUDA baseline | goal (GPU / host) |
//! |---|---|---|---|---|
//! | `executor_overhead` | a chain of 10,000 `add_f32` kernels on 16 elements through `execute` | the host kernel function called in a plain loop | a bare `cuLaunchKernel` loop of the same kernel | ≤ 1.1× / ≤ 1.5× time |
//! | `command_buffer` | 1,000 such kernels as one `CommandBuffer` (recorded once, replayed) | the same kernels launched directly (in the entry) | same | ≥ 3× / ≥ 2× faster |
//! | `copy_bandwidth` | 256 MiB device-to-device `Copy` thunks | `copy_nonoverlapping` (`copy_from_slice`) | `cuMemcpyDtoDAsync` | ≥ 0.9× bandwidth |
//! | `gemm_<dtype>` | a `Gemm` thunk (f32 1024³ on the host; f32 4096³, bf16 and f16 8192³ on GPUs) | a plain triple loop at 256³, its rate scaled | cuBLAS `cublasGemmEx` called directly, same shapes | ≥ 0.95× of cuBLAS / none |
//! | `wide_dag` | 8 independent chains of 4 elementwise kernels on 2 streams | the same on 1 stream | same | 2 streams faster (> 1×) |
//!
//! Every ratio is measured in interleaved rounds: each round runs every variant once, back to
//! back (the order alternating from round to round), after one untimed warm-up round. The
//! table gives the median of each variant's times and the median of the per-round ratios,
//! with their spread (the 25th to 75th percentile of the per-round ratios). Results of every
//! variant are checked once (a wrong result is an error, not a number).
//!
//! Devices of the driver emulator are labelled `[EMULATED device, not a GPU result]`, run
//! smaller problems and get no verdict.

use super::devices::{KNOWN_BACKENDS, human_bytes};
use super::error::{CliError, CliResult, one_line};
use super::run::backend_choice;
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use xthunk::builder::ExecutableBuilder;
use xthunk::core::backend::{LaunchArg, LaunchDims, Vendor};
use xthunk::core::executor::ExecutorConfig;
use xthunk::core::kernels::{HostArg, HostKernelFn, standard_library};
use xthunk::ir::{
    Access, DType, Dim3, Executable, KernelArg, KernelThunk, MemorySpace, Module, ModuleImage,
    Scalar, Slice, Thunk,
};
use xthunk::{Buffer, Device, DeviceMemory, ExecuteOptions, LoadedExecutable, Runtime};

/// Exit status: every benchmark that could run ran (goals missed or not).
pub const EXIT_OK: u8 = 0;
/// Exit status: a benchmark failed (an error, or a wrong result).
pub const EXIT_FAILED: u8 = 1;
/// Exit status: the requested backend could not run.
pub const EXIT_SKIPPED: u8 = 2;

/// Every benchmark row name (a `--filter` must match one).
pub const NAMES: [&str; 7] = [
    "executor_overhead",
    "command_buffer",
    "copy_bandwidth",
    "gemm_f32",
    "gemm_bf16",
    "gemm_f16",
    "wide_dag",
];

/// What `xthunk bench` was asked to do.
#[derive(Debug)]
pub struct BenchArgs {
    pub backend: String,
    pub device: usize,
    pub filter: Option<String>,
    pub quick: bool,
    pub json: Option<PathBuf>,
}

type Res<T> = xthunk::Result<T>;

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cmp {
    Le,
    Ge,
    Gt,
}

/// A goal on the ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Goal {
    cmp: Cmp,
    value: f64,
}

impl Goal {
    fn le(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Le,
            value,
        })
    }
    fn ge(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Ge,
            value,
        })
    }
    fn gt(value: f64) -> Option<Goal> {
        Some(Goal {
            cmp: Cmp::Gt,
            value,
        })
    }
    fn met(&self, r: f64) -> bool {
        match self.cmp {
            Cmp::Le => r <= self.value,
            Cmp::Ge => r >= self.value,
            Cmp::Gt => r > self.value,
        }
    }
    fn op(&self) -> &'static str {
        match self.cmp {
            Cmp::Le => "<=",
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
        }
    }
    fn text(&self) -> String {
        format!("{} {}x", self.op(), fmt_num(self.value))
    }
}

/// A median with the 25th and 75th percentiles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    median: f64,
    p25: f64,
    p75: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| -> f64 {
            if s.is_empty() {
                f64::NAN
            } else {
                s[((s.len() - 1) as f64 * q).round() as usize]
            }
        };
        Spread {
            median: at(0.5),
            p25: at(0.25),
            p75: at(0.75),
        }
    }

    /// Applies `f` (monotonic increasing) to every statistic.
    fn map(self, f: impl Fn(f64) -> f64) -> Spread {
        Spread {
            median: f(self.median),
            p25: f(self.p25),
            p75: f(self.p75),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Status {
    Ran,
    Skipped(String),
    Failed(String),
}

/// One line of the table.
#[derive(Clone, Debug)]
struct Row {
    name: String,
    /// What xthunk runs.
    work: String,
    unit: &'static str,
    value: Option<Spread>,
    /// What the baseline is (short, for the table).
    baseline_label: String,
    /// What the baseline does (for the notes).
    baseline_work: String,
    baseline: Option<Spread>,
    ratio: Option<Spread>,
    /// How the ratio is formed.
    ratio_def: &'static str,
    goal: Option<Goal>,
    rounds: usize,
    status: Status,
    notes: Vec<String>,
}

impl Row {
    fn new(name: &str, unit: &'static str, ratio_def: &'static str, goal: Option<Goal>) -> Row {
        Row {
            name: name.into(),
            work: String::new(),
            unit,
            value: None,
            baseline_label: String::new(),
            baseline_work: String::new(),
            baseline: None,
            ratio: None,
            ratio_def,
            goal,
            rounds: 0,
            status: Status::Ran,
            notes: vec![],
        }
    }

    fn verdict(&self, emulated: bool) -> String {
        match &self.status {
            Status::Skipped(_) => "skipped".into(),
            Status::Failed(_) => "ERROR".into(),
            Status::Ran => match (self.ratio, self.goal) {
                (Some(r), Some(g)) if r.median.is_finite() => {
                    if emulated {
                        "emulated".into()
                    } else if g.met(r.median) {
                        "ok".into()
                    } else {
                        "MISSED".into()
                    }
                }
                _ => "info".into(),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------------------

/// How many rounds, and how long a benchmark may take before it stops early.
#[derive(Clone, Copy, Debug)]
struct Rounds {
    rounds: usize,
    budget: Duration,
}

/// Fewer rounds than this are never reported (unless the round count asked is smaller).
const MIN_ROUNDS: usize = 3;

type Variant<'a> = &'a mut dyn FnMut() -> Res<f64>;

/// Runs every variant once per round, back to back, after one untimed warm-up round; the order
/// alternates between rounds (forward, then backward) so that neither variant always runs
/// first. Each variant returns the seconds its work took. Stops after `plan.rounds` rounds, or
/// once `plan.budget` is spent and at least [`MIN_ROUNDS`] rounds are done. Returns each
/// variant's times, aligned by round.
fn interleaved(plan: Rounds, variants: &mut [Variant<'_>]) -> Res<Vec<Vec<f64>>> {
    let k = variants.len();
    let mut times = vec![Vec::with_capacity(plan.rounds); k];
    let start = Instant::now();
    for round in 0..=plan.rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..k).collect()
        } else {
            (0..k).rev().collect()
        };
        for i in order {
            let t = (variants[i])()?;
            if round > 0 {
                times[i].push(t);
            }
        }
        if round >= MIN_ROUNDS && start.elapsed() > plan.budget {
            break;
        }
    }
    Ok(times)
}

/// Per-round `num[i] / den[i]`.
fn ratios(num: &[f64], den: &[f64]) -> Vec<f64> {
    num.iter().zip(den).map(|(a, b)| a / b).collect()
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// `98.2`, `1.23`, `0.0456`, `12345`: about three significant digits.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "n/a".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

/// `10,000`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Programs and their buffers
// ---------------------------------------------------------------------------------------------

/// A loaded program with its parameter and output buffers.
struct Prepared {
    exe: LoadedExecutable,
    params: Vec<Buffer>,
    outputs: Vec<Buffer>,
}

impl Prepared {
    fn new(dev: &Arc<dyn Device>, exe: Executable, cfg: &ExecutorConfig) -> Res<Prepared> {
        let exe = LoadedExecutable::load_with(dev.clone(), exe, cfg)?;
        let params = exe.allocate_parameters()?;
        let outputs = exe.allocate_outputs()?;
        Ok(Prepared {
            exe,
            params,
            outputs,
        })
    }

    fn set_param(&self, i: usize, bytes: &[u8]) -> Res<()> {
        let p = self.param(i)?;
        self.exe.device().copy_from_host(bytes, p.ptr())
    }

    fn param(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.params
            .get(i)
            .map(|b| b.as_ref() as &dyn DeviceMemory)
            .ok_or_else(|| xthunk::Error::InvalidArgument(format!("no parameter {i}")))
    }

    fn output(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.outputs
            .get(i)
            .map(|b| b.as_ref() as &dyn DeviceMemory)
            .ok_or_else(|| xthunk::Error::InvalidArgument(format!("no output {i}")))
    }

    /// Executes once; returns the seconds it took (issue to completion).
    fn run(&self) -> Res<f64> {
        let p: Vec<&dyn DeviceMemory> = self.params.iter().map(|b| b.as_ref() as _).collect();
        let o: Vec<&dyn DeviceMemory> = self.outputs.iter().map(|b| b.as_ref() as _).collect();
        let start = Instant::now();
        self.exe.execute(&p, &o, &ExecuteOptions::default())?;
        Ok(secs(start))
    }

    fn read(&self, buf: &dyn DeviceMemory, offset: u64, len: u64) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len as usize];
        self.exe
            .device()
            .copy_to_host(buf.ptr().offset(offset), &mut v)?;
        Ok(v)
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn wrong(what: &str, detail: String) -> xthunk::Error {
    xthunk::Error::InvalidArgument(format!("wrong result in {what}: {detail}"))
}

fn buffer_arg(slice: Slice, access: Access) -> KernelArg {
    KernelArg::Buffer { slice, access }
}

/// `out = a + b` over `n` f32 with the standard `add_f32`, grid 1 x block 32.
fn add_kernel(a: Slice, b: Slice, out: Slice, n: u64) -> Thunk {
    Thunk::Kernel(KernelThunk {
        module: "std".into(),
        name: "add_f32".into(),
        grid: Dim3::x(1),
        block: Dim3::x(32),
        shared_mem: 0,
        args: vec![
            buffer_arg(a, Access::Read),
            buffer_arg(b, Access::Read),
            buffer_arg(out, Access::Write),
            KernelArg::Scalar(Scalar::I64(n as i64)),
        ],
    })
}

/// Elements of the tiny kernels.
const TINY: u64 = 16;

/// A chain of `len` `add_f32` on 16 elements, `t_i = t_{i-1} + x`, ping-ponging between a temp
/// and the output (every kernel reads the previous one's result); in the entry or as the body
/// of one command buffer. With `x = v` the output is `(len + 1) * v` for even `len`.
fn tiny_chain(name: &str, len: usize, command_buffer: bool) -> Res<Executable> {
    let mut b = ExecutableBuilder::new(name);
    let x = b.parameter("x", DType::F32, &[TINY]);
    let y = b.output("y", DType::F32, &[TINY]);
    let t = b.temp(DType::F32, &[TINY]);
    b.standard_module();
    let bufs = [t.slice(), y.slice()];
    let thunks: Vec<Thunk> = (0..len)
        .map(|i| {
            let prev = if i == 0 { x.slice() } else { bufs[(i - 1) % 2] };
            add_kernel(prev, x.slice(), bufs[i % 2], TINY)
        })
        .collect();
    if command_buffer {
        b.push(Thunk::CommandBuffer { body: thunks });
    } else {
        for th in thunks {
            b.push(th);
        }
    }
    Ok(b.build()?)
}

/// Checks a tiny chain's output.
fn check_chain(what: &str, got: &[f32], len: usize, x: f32) -> Res<()> {
    let want = (len as f32 + 1.0) * x;
    match got.iter().find(|v| **v != want) {
        None if got.len() == TINY as usize => Ok(()),
        _ => Err(wrong(
            what,
            format!(
                "expected {TINY} x {want}, got {:?}",
                &got[..got.len().min(4)]
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The device and what is expected of it
// ---------------------------------------------------------------------------------------------

/// The problem sizes and goals for this device.
struct Setup {
    dev: Arc<dyn Device>,
    backend: &'static str,
    /// A real GPU (not the host, not an emulated device).
    gpu: bool,
    emulated: bool,
    quick: bool,
}

impl Setup {
    fn is_cuda(&self) -> bool {
        self.backend == "cuda"
    }
    fn is_host(&self) -> bool {
        self.dev.info().vendor == Vendor::Host
    }
    fn rounds(&self, full: usize, quick: usize, budget_s: u64) -> Rounds {
        Rounds {
            rounds: if self.quick { quick } else { full },
            budget: Duration::from_secs(if self.quick {
                budget_s.div_ceil(3)
            } else {
                budget_s
            }),
        }
    }
    /// Whether `bytes` more can be allocated comfortably (half the device's memory at most).
    fn fits(&self, bytes: u64) -> bool {
        let total = self.dev.info().total_memory;
        total == 0 || bytes <= total / 2
    }
    fn no_baseline(&self) -> String {
        format!(
            "no raw baseline for the {} backend in this build",
            self.backend
        )
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Executor overhead per thunk
// ---------------------------------------------------------------------------------------------

const CHAIN: usize = 10_000;

/// The chain as a plain loop: `add_f32`'s host function called directly on host buffers,
/// with the same ping-pong as [`tiny_chain`]. Returns the seconds it took.
fn plain_chain(add: HostKernelFn, x: &[f32], bufs: &mut [Vec<f32>; 2]) -> Res<f64> {
    let xp = x.as_ptr() as *mut u8;
    let [t, y] = bufs;
    if x.len() < TINY as usize || t.len() < TINY as usize || y.len() < TINY as usize {
        return Err(xthunk::Error::InvalidArgument(
            "plain loop buffers too small".into(),
        ));
    }
    let ptrs = [t.as_mut_ptr() as *mut u8, y.as_mut_ptr() as *mut u8];
    let len = (TINY * 4) as usize;
    let start = Instant::now();
    for i in 0..CHAIN {
        let prev = if i == 0 { xp } else { ptrs[(i - 1) % 2] };
        let args = [
            HostArg::Buffer { ptr: prev, len },
            HostArg::Buffer { ptr: xp, len },
            HostArg::Buffer {
                ptr: ptrs[i % 2],
                len,
            },
            HostArg::Scalar(Scalar::I64(TINY as i64)),
        ];
        // SAFETY: every pointer refers to a live buffer of at least `len` bytes (checked
        // above) exclusively borrowed by this function for the call (`x` is only read by the
        // kernel, through `xp`); in and out may alias only as the kernel contract allows
        // (an output starting where an input starts).
        let r = unsafe { add(black_box(&args)) };
        if let Err(e) = r {
            return Err(xthunk::Error::Kernel {
                kernel: "add_f32".into(),
                message: e.to_string(),
            });
        }
    }
    Ok(secs(start))
}

fn executor_overhead(s: &Setup) -> Res<Row> {
    let goal = if s.is_host() {
        Goal::le(1.5)
    } else {
        Goal::le(1.1)
    };
    let mut row = Row::new(
        "executor_overhead",
        "ns/thunk",
        "xthunk time / baseline time",
        goal,
    );
    row.work = format!(
        "a chain of {} add_f32 kernels on {TINY} f32 (each reading the previous result), \
         through LoadedExecutable::execute (default config), grid 1 x block 32",
        thousands(CHAIN as u64)
    );
    let p = Prepared::new(
        &s.dev,
        tiny_chain("chain_10k", CHAIN, false)?,
        &ExecutorConfig::default(),
    )?;
    let xv = vec![0.5f32; TINY as usize];
    p.set_param(0, &f32_bytes(&xv))?;
    p.run()?;
    check_chain(
        "the executor's chain",
        &f32s(&p.read(p.output(0)?, 0, TINY * 4)?),
        CHAIN,
        0.5,
    )?;
    row.notes
        .push(format!("schedule: {:?}", p.exe.schedule_info()));
    let plan = s.rounds(200, 40, 20);
    let per = |v: f64| v / CHAIN as f64 * 1e9;
    let times = if s.is_host() {
        let add = standard_library()
            .get("add_f32")
            .map(|k| k.func)
            .ok_or_else(|| xthunk::Error::InvalidArgument("no host add_f32".into()))?;
        let mut bufs = [vec![0f32; TINY as usize], vec![0f32; TINY as usize]];
        plain_chain(add, &xv, &mut bufs)?;
        check_chain("the plain loop", &bufs[1], CHAIN, 0.5)?;
        row.baseline_label = "plain loop".into();
        row.baseline_work =
            "the same chain as a plain loop calling add_f32's host function directly".into();
        interleaved(
            plan,
            &mut [&mut || p.run(), &mut || plain_chain(add, &xv, &mut bufs)],
        )?
    } else if s.is_cuda() {
        let module = s.dev.load_module(&Module {
            name: "std".into(),
            images: vec![ModuleImage::Standard],
        })?;
        let kernel = module.kernel("add_f32")?;
        let stream = s.dev.create_stream()?;
        let alloc = || s.dev.allocate(TINY * 4, 256, MemorySpace::Device);
        let (x, t, y) = (alloc()?, alloc()?, alloc()?);
        s.dev.copy_from_host(&f32_bytes(&xv), x.ptr())?;
        let len = TINY * 4;
        let ptrs = [t.ptr(), y.ptr()];
        let launches: Vec<Vec<LaunchArg>> = (0..CHAIN)
            .map(|i| {
                let prev = if i == 0 { x.ptr() } else { ptrs[(i - 1) % 2] };
                vec![
                    LaunchArg::Buffer { ptr: prev, len },
                    LaunchArg::Buffer { ptr: x.ptr(), len },
                    LaunchArg::Buffer {
                        ptr: ptrs[i % 2],
                        len,
                    },
                    LaunchArg::Scalar(Scalar::I64(TINY as i64)),
                ]
            })
            .collect();
        let lent: [&dyn DeviceMemory; 3] = [x.as_ref(), t.as_ref(), y.as_ref()];
        let dims = LaunchDims {
            grid: Dim3::x(1),
            block: Dim3::x(32),
            shared_mem: 0,
        };
        let raw = xthunk_cuda::bench::RawLaunchLoop::new(
            stream.as_ref(),
            &kernel,
            dims,
            &launches,
            &lent,
        )?;
        raw.run()?;
        let mut got = vec![0u8; len as usize];
        s.dev.copy_to_host(y.ptr(), &mut got)?;
        check_chain("the raw launch loop", &f32s(&got), CHAIN, 0.5)?;
        row.baseline_label = "cuLaunchKernel loop".into();
        row.baseline_work = format!(
            "the same {} launches as bare cuLaunchKernel calls (arguments marshalled \
             beforehand) on one stream, then cuStreamSynchronize",
            thousands(raw.launches() as u64)
        );
        interleaved(
            plan,
            &mut [&mut || p.run(), &mut || raw.run().map(|d| d.as_secs_f64())],
        )?
    } else {
        let t = interleaved(plan, &mut [&mut || p.run()])?;
        row.baseline_label = "n/a".into();
        row.baseline_work = s.no_baseline();
        row.rounds = t[0].len();
        row.value = Some(Spread::of(&t[0]).map(per));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(Spread::of(&times[0]).map(per));
    row.baseline = Some(Spread::of(&times[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&times[0], &times[1])));
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// 2. Command-buffer replay vs direct launches
// ---------------------------------------------------------------------------------------------

const CB: usize = 1_000;

fn command_buffer(s: &Setup) -> Res<Row> {
    let goal = if s.is_host() {
        Goal::ge(2.0)
    } else {
        Goal::ge(3.0)
    };
    let mut row = Row::new(
        "command_buffer",
        "ns/kernel",
        "direct time / replay time (speedup)",
        goal,
    );
    let native = if s.is_host() {
        "a pre-resolved host graph"
    } else if s.dev.capabilities().supports_graphs {
        "a native graph (stream capture)"
    } else {
        "a pre-planned schedule"
    };
    row.work = format!(
        "{} add_f32 kernels on {TINY} f32 in a chain as the body of one CommandBuffer \
         (recorded once as {native}, then replayed), in-order executor",
        thousands(CB as u64)
    );
    row.baseline_label = "direct launches".into();
    row.baseline_work = "the same kernels directly in the entry (one stream launch each), \
                         in-order executor, same buffers"
        .into();
    let cfg = ExecutorConfig::in_order();
    let replay = Prepared::new(&s.dev, tiny_chain("command_buffer_1k", CB, true)?, &cfg)?;
    let direct = Prepared::new(&s.dev, tiny_chain("direct_1k", CB, false)?, &cfg)?;
    let xv = f32_bytes(&vec![0.25f32; TINY as usize]);
    replay.set_param(0, &xv)?;
    direct.set_param(0, &xv)?;
    // The first execution records, the later ones replay: check both.
    for _ in 0..2 {
        replay.run()?;
        direct.run()?;
        for (what, p) in [
            ("the replayed command buffer", &replay),
            ("direct", &direct),
        ] {
            check_chain(what, &f32s(&p.read(p.output(0)?, 0, TINY * 4)?), CB, 0.25)?;
        }
    }
    let t = interleaved(
        s.rounds(300, 60, 15),
        &mut [&mut || replay.run(), &mut || direct.run()],
    )?;
    let per = |v: f64| v / CB as f64 * 1e9;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(per));
    row.baseline = Some(Spread::of(&t[1]).map(per));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// 3. Copy bandwidth
// ---------------------------------------------------------------------------------------------

fn copy_program(bytes: u64, copies: usize) -> Res<Executable> {
    let mut b = ExecutableBuilder::new("copy_bandwidth");
    let x = b.parameter("x", DType::U8, &[bytes]);
    let y = b.output("y", DType::U8, &[bytes]);
    for _ in 0..copies {
        b.copy(x.slice(), y.slice());
    }
    Ok(b.build()?)
}

/// A byte pattern that differs at every offset of a 4 KiB window.
fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

fn copy_bandwidth(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "copy_bandwidth",
        "GB/s",
        "xthunk bandwidth / baseline bandwidth",
        Goal::ge(0.9),
    );
    let (bytes, copies) = if s.emulated {
        (16u64 << 20, 2usize)
    } else if s.gpu {
        (256u64 << 20, 8usize)
    } else {
        (256u64 << 20, 2usize)
    };
    row.work = format!(
        "{copies} device-to-device Copy thunks of {} each per execution (GB/s = bytes copied / \
         time, 1 GB = 1e9 bytes)",
        human_bytes(bytes)
    );
    let host_extra = if s.is_host() { 2 * bytes } else { 0 };
    if !s.fits(2 * bytes + host_extra) {
        row.status = Status::Skipped(format!(
            "needs {} of device memory; the device has {}",
            human_bytes(2 * bytes + host_extra),
            human_bytes(s.dev.info().total_memory)
        ));
        return Ok(row);
    }
    let p = Prepared::new(
        &s.dev,
        copy_program(bytes, copies)?,
        &ExecutorConfig::default(),
    )?;
    let src: Vec<u8> = (0..bytes).map(pattern_byte).collect();
    p.set_param(0, &src)?;
    p.run()?;
    for off in [0, bytes / 2, bytes - 4096] {
        let got = p.read(p.output(0)?, off, 4096)?;
        if got[..] != src[off as usize..off as usize + 4096] {
            return Err(wrong(
                "the Copy thunk",
                format!("bytes at offset {off} differ"),
            ));
        }
    }
    let gbs = |t: f64| (copies as u64 * bytes) as f64 / t / 1e9;
    let times = if s.is_host() {
        let mut dst = vec![0u8; bytes as usize];
        dst.copy_from_slice(&src);
        if dst != src {
            return Err(wrong("the baseline copy", "bytes differ".into()));
        }
        row.baseline_label = "copy_nonoverlapping".into();
        row.baseline_work = format!(
            "{copies} copies of {} between two host Vec<u8> with copy_from_slice \
             (ptr::copy_nonoverlapping, i.e. memcpy)",
            human_bytes(bytes)
        );
        interleaved(
            s.rounds(8, 3, 15),
            &mut [&mut || p.run(), &mut || {
                let start = Instant::now();
                for _ in 0..copies {
                    dst.copy_from_slice(black_box(&src));
                    black_box(&mut dst);
                }
                Ok(secs(start))
            }],
        )?
    } else if s.is_cuda() {
        drop(src);
        let stream = s.dev.create_stream()?;
        let (x, y) = (p.param(0)?, p.output(0)?);
        xthunk_cuda::bench::raw_memcpy_dtod(stream.as_ref(), x, y, bytes, copies)?;
        row.baseline_label = "cuMemcpyDtoDAsync".into();
        row.baseline_work = format!(
            "{copies} cuMemcpyDtoDAsync_v2 calls of {} on one stream between the same \
             buffers, then cuStreamSynchronize",
            human_bytes(bytes)
        );
        interleaved(
            s.rounds(10, 3, 15),
            &mut [&mut || p.run(), &mut || {
                xthunk_cuda::bench::raw_memcpy_dtod(stream.as_ref(), x, y, bytes, copies)
                    .map(|d| d.as_secs_f64())
            }],
        )?
    } else {
        drop(src);
        let t = interleaved(s.rounds(10, 3, 15), &mut [&mut || p.run()])?;
        row.baseline_label = "n/a".into();
        row.baseline_work = s.no_baseline();
        row.rounds = t[0].len();
        row.value = Some(inverse(Spread::of(&t[0]), gbs));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(inverse(Spread::of(&times[0]), gbs));
    row.baseline = Some(inverse(Spread::of(&times[1]), gbs));
    row.ratio = Some(Spread::of(&ratios(&times[1], &times[0])));
    Ok(row)
}

/// A spread of times turned into a spread of rates (`f` decreasing: the quartiles swap).
fn inverse(t: Spread, f: impl Fn(f64) -> f64) -> Spread {
    Spread {
        median: f(t.median),
        p25: f(t.p75),
        p75: f(t.p25),
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Gemm
// ---------------------------------------------------------------------------------------------

/// Deterministic input values in [-0.5, 0.5), a function of the element index.
fn gemm_value(i: u64, salt: u64) -> f32 {
    let h = (i ^ salt)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    ((h >> 40) % 1000) as f32 / 1000.0 - 0.5
}

/// The value as stored in `dtype` (rounded), as f32.
fn rounded(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_f32(v).to_f32(),
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

fn encode(count: u64, salt: u64, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(count as usize * dtype.size());
    for i in 0..count {
        let v = gemm_value(i, salt);
        match dtype {
            DType::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&(v as f64).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

fn decode(bytes: &[u8], dtype: DType) -> f64 {
    match (dtype, bytes) {
        (DType::F16, [a, b, ..]) => half::f16::from_le_bytes([*a, *b]).to_f64(),
        (DType::BF16, [a, b, ..]) => half::bf16::from_le_bytes([*a, *b]).to_f64(),
        (DType::F64, [a, b, c, d, e, f, g, h, ..]) => {
            f64::from_le_bytes([*a, *b, *c, *d, *e, *f, *g, *h])
        }
        (_, [a, b, c, d, ..]) => f32::from_le_bytes([*a, *b, *c, *d]) as f64,
        _ => f64::NAN,
    }
}

const SALT_A: u64 = 0xA;
const SALT_B: u64 = 0xB;

fn gemm_program(dtype: DType, n: u64, reps: usize) -> Res<Executable> {
    let mut b = ExecutableBuilder::new(format!("gemm_{dtype}_{n}"));
    let a = b.parameter("a", dtype, &[n, n]);
    let bm = b.parameter("b", dtype, &[n, n]);
    let c = b.output("c", dtype, &[n, n]);
    for _ in 0..reps {
        b.matmul(&a, &bm, &c, 1.0, 0.0);
    }
    Ok(b.build()?)
}

/// Checks a few entries of the row-major `c = a @ b` against an f64 reference computed from
/// the same (rounded) inputs, within a bound proportional to `sum |a||b|`.
fn check_gemm(p: &Prepared, dtype: DType, n: u64) -> Res<()> {
    let es = dtype.size() as u64;
    let tol = match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F64 => 1e-10,
        _ => 1e-4,
    };
    for (i, j) in [(0, 0), (n - 1, n - 1), (n / 2, n / 3), (n / 3, n - 1)] {
        let got = decode(&p.read(p.output(0)?, (i * n + j) * es, es)?, dtype);
        let (mut want, mut bound) = (0f64, 0f64);
        for k in 0..n {
            let a = rounded(gemm_value(i * n + k, SALT_A), dtype) as f64;
            let b = rounded(gemm_value(k * n + j, SALT_B), dtype) as f64;
            want += a * b;
            bound += (a * b).abs();
        }
        if (got - want).abs() > tol * bound + 1e-6 || !got.is_finite() {
            return Err(wrong(
                &format!("gemm {dtype} {n}^3"),
                format!(
                    "c[{i}][{j}] = {got}, expected {want} (within {})",
                    tol * bound
                ),
            ));
        }
    }
    Ok(())
}

/// A plain i-k-j triple loop, `c = a @ b` on `n x n` f32; returns the seconds it took.
fn triple_loop(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) -> f64 {
    let start = Instant::now();
    c.fill(0.0);
    for i in 0..n {
        let crow = &mut c[i * n..(i + 1) * n];
        for p in 0..n {
            let av = a[i * n + p];
            let brow = &b[p * n..(p + 1) * n];
            for (cv, bv) in crow.iter_mut().zip(brow) {
                *cv += av * bv;
            }
        }
    }
    black_box(&c);
    secs(start)
}

/// One gemm row: `dtype` at `n`^3, `reps` gemms per execution.
fn gemm(s: &Setup, dtype: DType, n: u64, reps: usize) -> Res<Row> {
    let goal = if s.is_host() { None } else { Goal::ge(0.95) };
    let mut row = Row::new(
        &format!("gemm_{dtype}"),
        "TFLOP/s",
        "xthunk TFLOP/s / baseline TFLOP/s",
        goal,
    );
    let acc = if dtype == DType::F64 { "f64" } else { "f32" };
    row.work = format!(
        "{reps} Gemm thunk(s) of {dtype} {n}x{n}x{n} (row-major, {acc} accumulation) per \
         execution; TFLOP/s = 2 n^3 per gemm / time"
    );
    if !s.dev.capabilities().gemm_dtypes.contains(&dtype) {
        row.status = Status::Skipped(format!(
            "the device has no {dtype} gemm (gemm dtypes: {:?})",
            s.dev.capabilities().gemm_dtypes
        ));
        return Ok(row);
    }
    let bytes = 3 * n * n * dtype.size() as u64;
    if !s.fits(bytes) {
        row.status = Status::Skipped(format!(
            "needs {} of device memory; the device has {}",
            human_bytes(bytes),
            human_bytes(s.dev.info().total_memory)
        ));
        return Ok(row);
    }
    let p = Prepared::new(
        &s.dev,
        gemm_program(dtype, n, reps)?,
        &ExecutorConfig::default(),
    )?;
    p.set_param(0, &encode(n * n, SALT_A, dtype))?;
    p.set_param(1, &encode(n * n, SALT_B, dtype))?;
    p.run()?;
    check_gemm(&p, dtype, n)?;
    let flops = 2.0 * (n as f64).powi(3) * reps as f64;
    let tflops = |f: f64| move |t: f64| f / t / 1e12;
    let plan = s.rounds(10, 3, 20);
    let (times, base_flops) = if s.is_host() {
        let m = 256usize;
        let a: Vec<f32> = (0..m * m).map(|i| gemm_value(i as u64, SALT_A)).collect();
        let b: Vec<f32> = (0..m * m).map(|i| gemm_value(i as u64, SALT_B)).collect();
        let mut c = vec![0f32; m * m];
        triple_loop(m, &a, &b, &mut c);
        let want: f64 = (0..m).map(|k| a[k] as f64 * b[k * m] as f64).sum();
        if (c[0] as f64 - want).abs() > 1e-3 {
            return Err(wrong("the triple loop", format!("{} vs {want}", c[0])));
        }
        row.baseline_label = "triple loop 256^3, scaled".into();
        row.baseline_work = "a plain i-k-j triple loop in Rust on f32 at 256x256x256, its \
                             FLOP rate taken as the baseline rate (a naive-code reference, not \
                             a tuned BLAS)"
            .into();
        let t = interleaved(
            plan,
            &mut [&mut || p.run(), &mut || Ok(triple_loop(m, &a, &b, &mut c))],
        )?;
        (t, 2.0 * (m as f64).powi(3))
    } else if s.is_cuda() {
        let stream = s.dev.create_stream()?;
        let raw = xthunk_cuda::bench::RawCublas::new(stream)?;
        let (a, b, c) = (p.param(0)?, p.param(1)?, p.output(0)?);
        raw.gemm_loop(dtype, n, n, n, a, b, c, reps)?;
        row.baseline_label = "cuBLAS direct".into();
        row.baseline_work = format!(
            "{reps} cublasGemmEx call(s) of the same shapes and dtypes ({acc} compute, default \
             algorithm) on its own handle and stream, then cuStreamSynchronize ({})",
            raw.library()
        );
        let t = interleaved(
            plan,
            &mut [&mut || p.run(), &mut || {
                raw.gemm_loop(dtype, n, n, n, a, b, c, reps)
                    .map(|d| d.as_secs_f64())
            }],
        )?;
        (t, flops)
    } else {
        let t = interleaved(plan, &mut [&mut || p.run()])?;
        row.baseline_label = "n/a".into();
        row.baseline_work = s.no_baseline();
        row.rounds = t[0].len();
        row.value = Some(inverse(Spread::of(&t[0]), tflops(flops)));
        return Ok(row);
    };
    row.rounds = times[0].len();
    row.value = Some(inverse(Spread::of(&times[0]), tflops(flops)));
    row.baseline = Some(inverse(Spread::of(&times[1]), tflops(base_flops)));
    let rate_ratio: Vec<f64> = times[0]
        .iter()
        .zip(&times[1])
        .map(|(te, tb)| (flops / te) / (base_flops / tb))
        .collect();
    row.ratio = Some(Spread::of(&rate_ratio));
    Ok(row)
}

fn gemms(s: &Setup, filter: Option<&str>) -> Vec<Row> {
    let configs: Vec<(DType, u64, usize)> = if s.emulated {
        vec![
            (DType::F32, 128, 1),
            (DType::BF16, 128, 1),
            (DType::F16, 128, 1),
        ]
    } else if s.gpu {
        vec![
            (DType::F32, 4096, 4),
            (DType::BF16, 8192, 4),
            (DType::F16, 8192, 4),
        ]
    } else {
        vec![(DType::F32, 1024, 1)]
    };
    configs
        .into_iter()
        .filter(|(dt, _, _)| selected(&format!("gemm_{dt}"), filter))
        .filter_map(|(dt, n, reps)| {
            let mut rows = vec![];
            one(
                &format!("gemm_{dt}"),
                None,
                || gemm(s, dt, n, reps),
                &mut rows,
            );
            rows.pop()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 5. A wide DAG on 2 streams vs 1
// ---------------------------------------------------------------------------------------------

const WIDE_CHAINS: u64 = 8;
const WIDE_LEN: usize = 4;

/// 8 independent chains `exp -> tanh -> exp -> tanh` over `n` f32 each, every kernel with
/// `grid` blocks of 256 threads.
fn wide_program(n: u64, grid: u32) -> Res<Executable> {
    let total = n * WIDE_CHAINS;
    let mut b = ExecutableBuilder::new("wide_dag");
    let x = b.parameter("x", DType::F32, &[total]);
    let y = b.output("y", DType::F32, &[total]);
    let t = b.temp(DType::F32, &[total]);
    b.standard_module();
    for c in 0..WIDE_CHAINS {
        let xs = x.elems(c * n, n).slice();
        let ys = y.elems(c * n, n).slice();
        let ts = t.elems(c * n, n).slice();
        let mut prev = xs;
        for i in 0..WIDE_LEN {
            let out = if i % 2 == 0 { ts } else { ys };
            b.push(Thunk::Kernel(KernelThunk {
                module: "std".into(),
                name: if i % 2 == 0 { "exp_f32" } else { "tanh_f32" }.into(),
                grid: Dim3::x(grid),
                block: Dim3::x(256),
                shared_mem: 0,
                args: vec![
                    buffer_arg(prev, Access::Read),
                    buffer_arg(out, Access::Write),
                    KernelArg::Scalar(Scalar::I64(n as i64)),
                ],
            }));
            prev = out;
        }
    }
    Ok(b.build()?)
}

fn wide_dag(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "wide_dag",
        "ms",
        "1-stream time / 2-stream time (speedup)",
        Goal::gt(1.0),
    );
    let (n, grid) = if s.emulated {
        (64 * 1024u64, 64u32)
    } else if s.gpu {
        // Few blocks per kernel, so that one kernel leaves most of the GPU idle and a second
        // stream has room to run.
        (1024 * 1024, 32)
    } else {
        (256 * 1024, 1024)
    };
    row.work = format!(
        "{WIDE_CHAINS} independent chains of {WIDE_LEN} kernels (exp, tanh, exp, tanh) over {} \
         f32 each, grid {grid} x block 256, on 2 streams (ms per execution)",
        thousands(n)
    );
    row.baseline_label = "1 stream".into();
    row.baseline_work = "the same program on 1 stream".into();
    let two = Prepared::new(
        &s.dev,
        wide_program(n, grid)?,
        &ExecutorConfig::with_streams(2),
    )?;
    let one = Prepared::new(
        &s.dev,
        wide_program(n, grid)?,
        &ExecutorConfig::with_streams(1),
    )?;
    let x = f32_bytes(
        &(0..n * WIDE_CHAINS)
            .map(|i| gemm_value(i, 7))
            .collect::<Vec<f32>>(),
    );
    two.set_param(0, &x)?;
    one.set_param(0, &x)?;
    two.run()?;
    one.run()?;
    let bytes = n * WIDE_CHAINS * 4;
    let (r2, r1) = (
        f32s(&two.read(two.output(0)?, 0, bytes)?),
        f32s(&one.read(one.output(0)?, 0, bytes)?),
    );
    if r1 != r2 {
        return Err(wrong(
            "wide_dag",
            "2 streams give other results than 1".into(),
        ));
    }
    let v = gemm_value(0, 7);
    let want = v.exp().tanh().exp().tanh();
    if (r1[0] - want).abs() > 1e-5 {
        return Err(wrong(
            "wide_dag",
            format!("y[0] = {}, expected {want}", r1[0]),
        ));
    }
    row.notes.push(format!(
        "schedule: 2 streams {:?}; 1 stream {:?}",
        two.exe.schedule_info(),
        one.exe.schedule_info()
    ));
    let t = interleaved(
        s.rounds(20, 5, 15),
        &mut [&mut || two.run(), &mut || one.run()],
    )?;
    let ms = |v: f64| v * 1e3;
    row.rounds = t[0].len();
    row.value = Some(Spread::of(&t[0]).map(ms));
    row.baseline = Some(Spread::of(&t[1]).map(ms));
    row.ratio = Some(Spread::of(&ratios(&t[1], &t[0])));
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

/// CPU time counters (Linux, in clock ticks): all CPUs' total and busy time, and this
/// process's own user + system time, to show how much other work shared the machine while a
/// benchmark ran.
struct CpuSnapshot {
    total: u64,
    busy: u64,
    own: u64,
}

impl CpuSnapshot {
    fn take() -> Option<CpuSnapshot> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3)? + cpu.get(4)?;
        let me = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = me.rsplit(')').next()?.split_whitespace().collect();
        let own = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(CpuSnapshot {
            total,
            busy: total.saturating_sub(idle),
            own,
        })
    }

    /// `machine load meanwhile: xthunk 48%, other processes 52% of 2 CPUs`.
    fn since(&self, cpus: usize) -> Option<String> {
        let now = CpuSnapshot::take()?;
        let ticks = now.total.saturating_sub(self.total);
        // Too short to say (the counters tick every 10 ms per CPU).
        if ticks < 20 {
            return None;
        }
        let total = ticks as f64;
        let busy = now.busy.saturating_sub(self.busy) as f64;
        let own = now.own.saturating_sub(self.own) as f64;
        Some(format!(
            "machine load meanwhile: this process {:.0}%, other processes {:.0}% of {cpus} CPUs",
            100.0 * (own / total).min(1.0),
            100.0 * ((busy - own).max(0.0) / total).min(1.0),
        ))
    }
}

fn selected(name: &str, filter: Option<&str>) -> bool {
    filter.is_none_or(|f| name.contains(f))
}

fn progress(name: &str) {
    eprintln!("xthunk bench: running {name} ...");
}

/// Runs one benchmark, turning an error into a failed row.
fn one(name: &str, filter: Option<&str>, f: impl FnOnce() -> Res<Row>, rows: &mut Vec<Row>) {
    if !selected(name, filter) {
        return;
    }
    progress(name);
    let start = Instant::now();
    let load = CpuSnapshot::take();
    let mut row = f().unwrap_or_else(|e| {
        let mut r = Row::new(name, "", "", None);
        r.status = Status::Failed(one_line(&e));
        r
    });
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(note) = load.and_then(|l| l.since(cpus)) {
        row.notes.push(note);
    }
    eprintln!(
        "xthunk bench:   {name}: {} ({:.1} s)",
        match &row.status {
            Status::Ran => format!("{} rounds", row.rounds),
            Status::Skipped(r) => format!("skipped: {r}"),
            Status::Failed(e) => format!("ERROR: {e}"),
        },
        start.elapsed().as_secs_f64()
    );
    rows.push(row);
}

/// Days since 1970-01-01 as a civil date (UTC).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `2026-05-01 12:34 UTC`.
fn utc_now() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (y, m, d) = civil(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        s / 3600,
        (s / 60) % 60
    )
}

/// Everything the report and the JSON need besides the rows.
struct Context {
    date: String,
    backend: String,
    device_label: String,
    ordinal: usize,
    name: String,
    arch: String,
    vendor: String,
    emulated: bool,
    total_memory: u64,
    compute_units: u32,
    cpus: usize,
    quick: bool,
}

fn device_label(d: &xthunk::DeviceInfo) -> String {
    let units = match d.vendor {
        Vendor::Host => "CPUs",
        Vendor::Nvidia => "SMs",
        Vendor::Amd => "CUs",
    };
    let mut s = format!(
        "{} ({}, {} {units}, {})",
        d.name,
        d.arch,
        d.compute_units,
        human_bytes(d.total_memory)
    );
    if d.emulated {
        s.push_str(" [EMULATED device, not a GPU result]");
    }
    s
}

fn table(ctx: &Context, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== xthunk bench: backend {}, device {}: {} ==",
        ctx.backend, ctx.ordinal, ctx.device_label
    );
    let _ = writeln!(
        s,
        "{}; xthunk {}; {} CPUs on this machine; {}; medians of interleaved rounds, ratio \
         spread = 25th-75th percentile of the per-round ratios",
        ctx.date,
        env!("CARGO_PKG_VERSION"),
        ctx.cpus,
        if ctx.quick { "--quick" } else { "full run" }
    );
    let header = [
        "benchmark",
        "xthunk",
        "baseline",
        "ratio (spread)",
        "goal",
        "verdict",
    ];
    let mut lines: Vec<[String; 6]> = vec![header.map(String::from)];
    for r in rows {
        let with_unit = |v: Option<Spread>| match v {
            Some(v) => format!("{} {}", fmt_num(v.median), r.unit),
            None => "-".into(),
        };
        let (value, baseline, ratio) = match &r.status {
            Status::Ran => (
                with_unit(r.value),
                match r.baseline {
                    Some(_) => format!("{} ({})", with_unit(r.baseline), r.baseline_label),
                    None => format!("- ({})", r.baseline_label),
                },
                match r.ratio {
                    Some(q) => format!(
                        "{}x ({}-{})",
                        fmt_num(q.median),
                        fmt_num(q.p25),
                        fmt_num(q.p75)
                    ),
                    None => "-".into(),
                },
            ),
            Status::Skipped(why) => (format!("skipped: {why}"), String::new(), String::new()),
            Status::Failed(e) => (format!("ERROR: {e}"), String::new(), String::new()),
        };
        lines.push([
            r.name.clone(),
            value,
            baseline,
            ratio,
            r.goal.map_or("-".into(), |g| g.text()),
            r.verdict(ctx.emulated),
        ]);
    }
    let mut widths = [0usize; 6];
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            // Long messages (skips, errors) do not widen the columns.
            if c.chars().count() <= 48 {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    for l in &lines {
        let mut line = String::new();
        for (i, (w, c)) in widths.iter().zip(l).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = write!(line, "{c:<w$}");
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(s, "what each row measures:");
    for r in rows.iter().filter(|r| r.status == Status::Ran) {
        let _ = writeln!(s, "  {}: {}", r.name, r.work);
        let _ = writeln!(s, "    baseline: {}", r.baseline_work);
        if r.ratio.is_some() {
            let _ = writeln!(
                s,
                "    ratio: {}, per round; {} rounds",
                r.ratio_def, r.rounds
            );
        } else {
            let _ = writeln!(s, "    ratio: none (no baseline); {} rounds", r.rounds);
        }
        for n in &r.notes {
            let _ = writeln!(s, "    {n}");
        }
    }
    if ctx.emulated {
        let _ = writeln!(
            s,
            "EMULATED device: these are driver-emulator figures (host memory, host kernels), not \
             GPU results; sizes are reduced and no verdict is given."
        );
    }
    s
}

// --- JSON (written by hand: the values are numbers and plain strings) ---

fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jnum(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn jspread(v: Option<Spread>) -> String {
    match v {
        Some(v) => format!(
            "{{\"median\": {}, \"p25\": {}, \"p75\": {}}}",
            jnum(v.median),
            jnum(v.p25),
            jnum(v.p75)
        ),
        None => "null".into(),
    }
}

fn json(ctx: &Context, status: &str, reason: Option<&str>, rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str("{\n");
    let _ = writeln!(s, "  \"format\": \"xthunk-bench/1\",");
    let _ = writeln!(
        s,
        "  \"xthunk_version\": {},",
        jstr(env!("CARGO_PKG_VERSION"))
    );
    let _ = writeln!(s, "  \"date\": {},", jstr(&ctx.date));
    let _ = writeln!(s, "  \"status\": {},", jstr(status));
    let _ = writeln!(s, "  \"reason\": {},", reason.map_or("null".into(), jstr));
    let _ = writeln!(s, "  \"quick\": {},", ctx.quick);
    let _ = writeln!(s, "  \"cpus\": {},", ctx.cpus);
    let _ = writeln!(s, "  \"backend\": {},", jstr(&ctx.backend));
    let _ = writeln!(
        s,
        "  \"device\": {{\"ordinal\": {}, \"name\": {}, \"vendor\": {}, \"arch\": {}, \
         \"emulated\": {}, \"total_memory\": {}, \"compute_units\": {}, \"label\": {}}},",
        ctx.ordinal,
        jstr(&ctx.name),
        jstr(&ctx.vendor),
        jstr(&ctx.arch),
        ctx.emulated,
        ctx.total_memory,
        ctx.compute_units,
        jstr(&ctx.device_label)
    );
    s.push_str("  \"results\": [");
    for (i, r) in rows.iter().enumerate() {
        let (st, why) = match &r.status {
            Status::Ran => ("ran", None),
            Status::Skipped(w) => ("skipped", Some(w.as_str())),
            Status::Failed(e) => ("failed", Some(e.as_str())),
        };
        let goal = match r.goal {
            Some(g) => format!("{{\"op\": {}, \"value\": {}}}", jstr(g.op()), jnum(g.value)),
            None => "null".into(),
        };
        let notes: Vec<String> = r.notes.iter().map(|n| jstr(n)).collect();
        let _ = write!(
            s,
            "{}\n    {{\"name\": {}, \"status\": {}, \"reason\": {}, \"work\": {}, \
             \"unit\": {}, \"value\": {}, \"baseline_label\": {}, \"baseline_work\": {}, \
             \"baseline\": {}, \"ratio_definition\": {}, \"ratio\": {}, \"goal\": {}, \
             \"verdict\": {}, \"rounds\": {}, \"notes\": [{}]}}",
            if i > 0 { "," } else { "" },
            jstr(&r.name),
            jstr(st),
            why.map_or("null".into(), jstr),
            jstr(&r.work),
            jstr(r.unit),
            jspread(r.value),
            jstr(&r.baseline_label),
            jstr(&r.baseline_work),
            jspread(r.baseline),
            jstr(r.ratio_def),
            jspread(r.ratio),
            goal,
            jstr(&r.verdict(ctx.emulated)),
            r.rounds,
            notes.join(", ")
        );
    }
    s.push_str("\n  ]\n}\n");
    s
}

/// Writes `text` to `path` through a temporary file in the same folder and a rename.
fn write_atomically(path: &Path, text: &str) -> CliResult<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| CliError::io(&dir, e))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CliError::Usage(format!("--json {}: not a file name", path.display())))?;
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::io(path, e));
    }
    Ok(())
}

fn unavailable_context(args: &BenchArgs) -> Context {
    Context {
        date: utc_now(),
        backend: args.backend.clone(),
        device_label: String::new(),
        ordinal: args.device,
        name: String::new(),
        arch: String::new(),
        vendor: String::new(),
        emulated: false,
        total_memory: 0,
        compute_units: 0,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        quick: args.quick,
    }
}

/// Runs the benchmarks; returns the exit status.
pub fn bench(rt: &Runtime, args: &BenchArgs, out: &mut dyn Write) -> CliResult<u8> {
    let filter = args.filter.as_deref();
    if let Some(f) = filter {
        if !NAMES.iter().any(|n| n.contains(f)) {
            return Err(CliError::Usage(format!(
                "no benchmark matches --filter `{f}` (benchmarks: {})",
                NAMES.join(", ")
            )));
        }
    }
    let known = args.backend == "auto" || KNOWN_BACKENDS.contains(&args.backend.as_str());
    if !known {
        return Err(CliError::Usage(format!(
            "unknown backend `{}` (auto, {})",
            args.backend,
            KNOWN_BACKENDS.join(", ")
        )));
    }
    let skip = |reason: String, out: &mut dyn Write| -> CliResult<u8> {
        writeln!(out, "bench: backend {} SKIPPED: {reason}", args.backend)?;
        if let Some(path) = &args.json {
            let ctx = unavailable_context(args);
            write_atomically(path, &json(&ctx, "skipped", Some(&reason), &[]))?;
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
        gpu: info.vendor != Vendor::Host && !info.emulated,
        emulated: info.emulated,
        quick: args.quick,
    };
    let ctx = Context {
        date: utc_now(),
        backend: backend.name().to_string(),
        device_label: device_label(&info),
        ordinal: info.ordinal,
        name: info.name.clone(),
        arch: info.arch.clone(),
        vendor: info.vendor.to_string(),
        emulated: info.emulated,
        total_memory: info.total_memory,
        compute_units: info.compute_units,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        quick: args.quick,
    };
    eprintln!(
        "xthunk bench: backend {}, device {}: {}",
        ctx.backend, ctx.ordinal, ctx.device_label
    );
    let start = Instant::now();
    let mut rows = vec![];
    one(
        "executor_overhead",
        filter,
        || executor_overhead(&setup),
        &mut rows,
    );
    one(
        "command_buffer",
        filter,
        || command_buffer(&setup),
        &mut rows,
    );
    one(
        "copy_bandwidth",
        filter,
        || copy_bandwidth(&setup),
        &mut rows,
    );
    rows.extend(gemms(&setup, filter));
    one("wide_dag", filter, || wide_dag(&setup), &mut rows);
    eprintln!(
        "xthunk bench: done in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    out.write_all(table(&ctx, &rows).as_bytes())?;
    if let Some(path) = &args.json {
        write_atomically(path, &json(&ctx, "ran", None, &rows))?;
        writeln!(out, "results written to {}", path.display())?;
    }
    let failed = rows.iter().any(|r| matches!(r.status, Status::Failed(_)));
    Ok(if failed { EXIT_FAILED } else { EXIT_OK })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_goals() {
        let s = Spread::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median, s.p25, s.p75), (3.0, 2.0, 4.0));
        assert!(Spread::of(&[]).median.is_nan());
        assert!(Goal::le(1.5).is_some_and(|g| g.met(1.5) && !g.met(1.6)));
        assert!(Goal::ge(2.0).is_some_and(|g| g.met(2.0) && !g.met(1.9)));
        assert!(Goal::gt(1.0).is_some_and(|g| !g.met(1.0) && g.met(1.01)));
        let inv = inverse(s, |t| 1.0 / t);
        assert_eq!((inv.median, inv.p25, inv.p75), (1.0 / 3.0, 0.25, 0.5));
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.345), "12.3");
        assert_eq!(fmt_num(1.2345), "1.23");
        assert_eq!(fmt_num(0.012345), "0.012");
        assert_eq!(fmt_num(f64::NAN), "n/a");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(20_513), (2026, 3, 1));
        assert_eq!(jstr("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(jnum(f64::INFINITY), "null");
    }

    #[test]
    fn interleaving_alternates_and_skips_warm_up() {
        let mut log = vec![];
        let log = std::cell::RefCell::new(&mut log);
        let plan = Rounds {
            rounds: 3,
            budget: Duration::from_secs(60),
        };
        let t = interleaved(
            plan,
            &mut [
                &mut || {
                    log.borrow_mut().push('a');
                    Ok(1.0)
                },
                &mut || {
                    log.borrow_mut().push('b');
                    Ok(2.0)
                },
            ],
        );
        assert_eq!(t.ok(), Some(vec![vec![1.0; 3], vec![2.0; 3]]));
        assert_eq!(log.borrow().iter().collect::<String>(), "abbaabba");
    }

    #[test]
    fn gemm_inputs_round_as_stored() {
        let bytes = encode(4, SALT_A, DType::BF16);
        for i in 0..4 {
            let v = decode(&bytes[i * 2..], DType::BF16);
            assert_eq!(v, rounded(gemm_value(i as u64, SALT_A), DType::BF16) as f64);
            assert!((-0.5..0.5).contains(&v));
        }
    }
}
