//! The executor: loads a validated executable onto a device (modules, kernels, constants) and
//! runs it. This is the in-order executor: thunks are issued in program order on one stream.
//!
//! Per-execution state (temps, the stream, the pointer table) lives in the execution, so one
//! [`LoadedExecutable`] can be executed from many threads at once.

pub mod graph;

use crate::backend::{
    Buffer, Device, DeviceMemory, DevicePtr, GemmLaunch, KernelHandle, LaunchArg, LaunchDims,
    LoadedModule, Stream,
};
use crate::error::{Error, Result};
use crate::ir::{
    AllocationKind, Executable, GemmThunk, KernelArg, MemsetPattern, Slice, Thunk, ThunkPath,
    verify,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of one execution.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// Fail with `DeadlineExceeded` if the execution has not finished after this long.
    pub deadline: Option<Duration>,
}

/// One thunk, resolved at load.
#[derive(Clone)]
enum Step {
    Copy {
        src: Slice,
        dst: Slice,
    },
    Memset {
        dst: Slice,
        pattern: MemsetPattern,
    },
    Kernel {
        handle: Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: Vec<KernelArg>,
    },
    Gemm(GemmThunk),
}

struct PlannedStep {
    path: ThunkPath,
    kind: &'static str,
    step: Step,
}

/// An executable loaded onto one device.
pub struct LoadedExecutable {
    exe: Arc<Executable>,
    device: Arc<dyn Device>,
    modules: BTreeMap<String, Arc<dyn LoadedModule>>,
    steps: Vec<PlannedStep>,
    constants: BTreeMap<u32, Buffer>,
    streams: Mutex<Vec<Arc<dyn Stream>>>,
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedExecutable")
            .field("name", &self.exe.name)
            .field("device", &self.device.info().name)
            .finish_non_exhaustive()
    }
}

impl LoadedExecutable {
    /// Validates `exe`, checks the device supports what it needs, loads its modules, resolves
    /// every kernel and uploads constants.
    pub fn load(device: Arc<dyn Device>, exe: Executable) -> Result<Self> {
        verify(&exe)?;
        let caps = device.capabilities();
        for a in &exe.allocations {
            if !caps.memory_spaces.contains(&a.memory_space) {
                return Err(Error::Unsupported {
                    backend: device.backend_name().into(),
                    feature: format!("{} memory (allocation {})", a.memory_space, a.index),
                });
            }
        }
        let mut modules = BTreeMap::new();
        for m in &exe.modules {
            let lm = device.load_module(m)?;
            tracing::debug!(module = %m.name, image = %lm.image(), "loaded module");
            modules.insert(m.name.clone(), lm);
        }
        let mut steps = Vec::with_capacity(exe.thunk_count());
        for (i, t) in exe.entry.iter().enumerate() {
            plan(
                t,
                ThunkPath::entry(i),
                &modules,
                device.as_ref(),
                &mut steps,
            )?;
        }
        let mut constants = BTreeMap::new();
        for a in &exe.allocations {
            if let AllocationKind::Constant(bytes) = &a.kind {
                let buf = device.allocate(a.size, a.alignment, a.memory_space)?;
                device.copy_from_host(bytes, buf.ptr())?;
                constants.insert(a.index, buf);
            }
        }
        Ok(LoadedExecutable {
            exe: Arc::new(exe),
            device,
            modules,
            steps,
            constants,
            streams: Mutex::new(vec![]),
        })
    }

    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.device
    }

    /// The image each module was loaded from, e.g. `("std", "standard")`.
    pub fn module_images(&self) -> Vec<(String, String)> {
        self.modules
            .iter()
            .map(|(n, m)| (n.clone(), m.image()))
            .collect()
    }

    /// Allocates a buffer for every output (to pass to [`Self::execute`]).
    pub fn allocate_outputs(&self) -> Result<Vec<Buffer>> {
        self.exe
            .signature
            .outputs
            .iter()
            .map(|o| {
                let a = &self.exe.allocations[o.allocation as usize];
                self.device.allocate(a.size, a.alignment, a.memory_space)
            })
            .collect()
    }

    /// Allocates a buffer for every parameter.
    pub fn allocate_parameters(&self) -> Result<Vec<Buffer>> {
        self.exe
            .signature
            .parameters
            .iter()
            .map(|p| {
                let a = &self.exe.allocations[p.allocation as usize];
                self.device.allocate(a.size, a.alignment, a.memory_space)
            })
            .collect()
    }

    fn take_stream(&self) -> Result<Arc<dyn Stream>> {
        if let Some(s) = self.streams.lock().pop() {
            return Ok(s);
        }
        self.device.create_stream()
    }

    /// Runs the program with device buffers for the parameters and outputs (in signature
    /// order). Returns when all work finished. On error, queued work is drained and every
    /// temporary freed before the error (naming the thunk where known) is returned.
    pub fn execute(
        &self,
        params: &[&dyn DeviceMemory],
        outputs: &[&dyn DeviceMemory],
        opts: &ExecuteOptions,
    ) -> Result<()> {
        let sig = &self.exe.signature;
        if params.len() != sig.parameters.len() || outputs.len() != sig.outputs.len() {
            return Err(Error::InvalidArgument(format!(
                "`{}` takes {} parameters and {} outputs, got {} and {}",
                self.exe.name,
                sig.parameters.len(),
                sig.outputs.len(),
                params.len(),
                outputs.len()
            )));
        }
        let span = tracing::debug_span!("execute", program = %self.exe.name);
        let _g = span.enter();
        let start = Instant::now();
        let mut table = vec![DevicePtr(0); self.exe.allocations.len()];
        let mut temps: Vec<Buffer> = vec![];
        for a in &self.exe.allocations {
            let (buf, what): (Option<&dyn DeviceMemory>, String) = match &a.kind {
                AllocationKind::Parameter(n) => {
                    (params.get(*n as usize).copied(), format!("parameter {n}"))
                }
                AllocationKind::Output(n) => {
                    (outputs.get(*n as usize).copied(), format!("output {n}"))
                }
                AllocationKind::Constant(_) => (
                    self.constants
                        .get(&a.index)
                        .map(|b| b.as_ref() as &dyn DeviceMemory),
                    "constant".into(),
                ),
                AllocationKind::Temp => {
                    let t = self.device.allocate(a.size, a.alignment, a.memory_space)?;
                    table[a.index as usize] = t.ptr();
                    temps.push(t);
                    continue;
                }
            };
            let Some(buf) = buf else {
                return Err(Error::InvalidArgument(format!("missing buffer for {what}")));
            };
            if buf.size() < a.size {
                return Err(Error::InvalidArgument(format!(
                    "{what} of `{}` needs {} bytes, the buffer has {}",
                    self.exe.name,
                    a.size,
                    buf.size()
                )));
            }
            if buf.ptr().0 % a.alignment != 0 {
                return Err(Error::InvalidArgument(format!(
                    "{what} buffer at {} is not aligned to {}",
                    buf.ptr(),
                    a.alignment
                )));
            }
            table[a.index as usize] = buf.ptr();
        }
        let stream = self.take_stream()?;
        let issued = self.issue(stream.as_ref(), &table);
        let waited = wait(stream.as_ref(), opts.deadline, start);
        if let Err(e @ Error::DeadlineExceeded { .. }) = waited {
            // The work may never finish (a hung kernel): do not block the caller. A reaper
            // thread waits for the stream and only then frees the temporaries.
            let reaper = std::thread::Builder::new()
                .name("xthunk-reaper".into())
                .spawn(move || {
                    let _ = stream.synchronize();
                    drop(temps);
                });
            if let Err(spawn) = reaper {
                tracing::error!("could not spawn a reaper thread: {spawn}");
            }
            return Err(e);
        }
        // Drain before anything is freed, whatever happened.
        let drained = if waited.is_err() || issued.is_err() {
            stream.synchronize()
        } else {
            Ok(())
        };
        let result = issued.and(waited).and(drained);
        if result.is_ok() {
            self.streams.lock().push(stream);
        }
        drop(temps);
        tracing::debug!(elapsed_us = start.elapsed().as_micros() as u64, "executed");
        result
    }

    fn issue(&self, stream: &dyn Stream, table: &[DevicePtr]) -> Result<()> {
        let ptr = |s: &Slice| table[s.allocation as usize].offset(s.offset);
        for p in &self.steps {
            let r = match &p.step {
                Step::Copy { src, dst } => stream.copy(ptr(src), ptr(dst), src.size),
                Step::Memset { dst, pattern } => stream.memset(ptr(dst), dst.size, *pattern),
                Step::Kernel { handle, dims, args } => {
                    let la: Vec<LaunchArg> = args
                        .iter()
                        .map(|a| match a {
                            KernelArg::Buffer { slice, .. } => LaunchArg::Buffer {
                                ptr: ptr(slice),
                                len: slice.size,
                            },
                            KernelArg::Scalar(s) => LaunchArg::Scalar(*s),
                        })
                        .collect();
                    stream.launch(handle, *dims, &la)
                }
                Step::Gemm(g) => stream.gemm(&GemmLaunch {
                    a: ptr(&g.a),
                    b: ptr(&g.b),
                    c: ptr(&g.c),
                    a_len: g.a.size,
                    b_len: g.b.size,
                    c_len: g.c.size,
                    m: g.m,
                    n: g.n,
                    k: g.k,
                    lda: g.lda,
                    ldb: g.ldb,
                    ldc: g.ldc,
                    trans_a: g.trans_a,
                    trans_b: g.trans_b,
                    alpha: g.alpha,
                    beta: g.beta,
                    dtype: g.dtype,
                    batch: g.batch,
                    stride_a: g.stride_a,
                    stride_b: g.stride_b,
                    stride_c: g.stride_c,
                }),
            };
            r.map_err(|e| e.at_thunk(&p.path, p.kind))?;
        }
        Ok(())
    }

    /// Convenience: uploads host bytes for every parameter, runs, and downloads every output.
    pub fn run_with_host_data(
        &self,
        inputs: &[&[u8]],
        opts: &ExecuteOptions,
    ) -> Result<Vec<Vec<u8>>> {
        let sig = &self.exe.signature;
        if inputs.len() != sig.parameters.len() {
            return Err(Error::InvalidArgument(format!(
                "`{}` takes {} parameters, got {}",
                self.exe.name,
                sig.parameters.len(),
                inputs.len()
            )));
        }
        let params = self.allocate_parameters()?;
        for ((p, data), spec) in params.iter().zip(inputs).zip(&sig.parameters) {
            if data.len() as u64 != p.size() {
                return Err(Error::InvalidArgument(format!(
                    "parameter `{}` needs {} bytes, got {}",
                    spec.name,
                    p.size(),
                    data.len()
                )));
            }
            self.device.copy_from_host(data, p.ptr())?;
        }
        let outputs = self.allocate_outputs()?;
        let pr: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
        let or: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
        self.execute(&pr, &or, opts)?;
        outputs
            .iter()
            .map(|o| {
                let mut v = vec![0u8; o.size() as usize];
                self.device.copy_to_host(o.ptr(), &mut v)?;
                Ok(v)
            })
            .collect()
    }
}

fn wait(stream: &dyn Stream, deadline: Option<Duration>, start: Instant) -> Result<()> {
    let Some(d) = deadline else {
        return stream.synchronize();
    };
    let mut sleep = Duration::from_micros(20);
    loop {
        if stream.query()? {
            return Ok(());
        }
        if start.elapsed() >= d {
            return Err(Error::DeadlineExceeded {
                deadline: d,
                pending: "work queued on the execution stream".into(),
            });
        }
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(Duration::from_millis(5));
    }
}

fn plan(
    t: &Thunk,
    path: ThunkPath,
    modules: &BTreeMap<String, Arc<dyn LoadedModule>>,
    device: &dyn Device,
    out: &mut Vec<PlannedStep>,
) -> Result<()> {
    let step = match t {
        Thunk::Copy { src, dst } => Step::Copy {
            src: *src,
            dst: *dst,
        },
        Thunk::Memset { dst, pattern } => Step::Memset {
            dst: *dst,
            pattern: *pattern,
        },
        Thunk::Kernel(k) => {
            let Some(m) = modules.get(&k.module) else {
                return Err(Error::Module {
                    module: k.module.clone(),
                    message: "not loaded".into(),
                }
                .at_thunk(&path, "kernel"));
            };
            let handle = m.kernel(&k.name).map_err(|e| e.at_thunk(&path, "kernel"))?;
            Step::Kernel {
                handle,
                dims: LaunchDims {
                    grid: k.grid,
                    block: k.block,
                    shared_mem: k.shared_mem,
                },
                args: k.args.clone(),
            }
        }
        Thunk::Gemm(g) => {
            if !device.capabilities().gemm_dtypes.contains(&g.dtype) {
                return Err(Error::Unsupported {
                    backend: device.backend_name().into(),
                    feature: format!("{} gemm", g.dtype),
                }
                .at_thunk(&path, "gemm"));
            }
            Step::Gemm(g.clone())
        }
        Thunk::Sequence(body) => {
            for (i, c) in body.iter().enumerate() {
                plan(c, path.child("thunks", i), modules, device, out)?;
            }
            return Ok(());
        }
    };
    out.push(PlannedStep {
        kind: t.kind(),
        path,
        step,
    });
    Ok(())
}
