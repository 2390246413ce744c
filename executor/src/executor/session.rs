//! [`Session`]: the one way to run a program on one device — load it, bind its inputs,
//! execute it (once, or a number of iterations), read its outputs. `xthunk run`, `profile`
//! and `bench`, every rank of an SPMD run or of a launched job ([`super::spmd::Ranks`]) and
//! [`LoadedExecutable::run_with_host_data`] all go through it, so that an option
//! ([`ExecutorConfig`], [`ExecuteOptions`], a trace, a deadline, iterations) given to one
//! path reaches every path.

use super::config::{ExecuteOptions, ExecutorConfig};
use super::loaded::LoadedExecutable;
use crate::backend::{Buffer, Device, DeviceMemory};
use crate::error::{Error, Result};
use crate::ir::TensorSpec;
use crate::program::Program;
use crate::trace::Tracer;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where an output's host bytes come from when it is read back: given the output's
/// signature entry and its buffer's size, a zeroed vector of that size (or why not).
pub type HostAlloc<'a> = &'a (dyn Fn(&TensorSpec, u64) -> Result<Vec<u8>> + Sync);

/// The plain [`HostAlloc`]: a zeroed vector.
pub fn zeroed(_: &TensorSpec, size: u64) -> Result<Vec<u8>> {
    Ok(vec![0u8; size as usize])
}

/// A program loaded on one device with a buffer for each parameter and each output.
pub struct Session {
    exe: LoadedExecutable,
    io: Io,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("exe", &self.exe)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Loads `program` on `device` with `config` (each module's compile-and-load and the
    /// whole load as spans of `trace`: a tracer and the rank whose host track they go on),
    /// and allocates its parameter and output buffers. The program is not verified again.
    pub fn load(
        device: Arc<dyn Device>,
        program: &Program,
        config: &ExecutorConfig,
        trace: Option<(&Tracer, u32)>,
    ) -> Result<Session> {
        Session::new(LoadedExecutable::load_program(
            device, program, config, trace,
        )?)
    }

    /// A session of an already loaded program: its parameter and output buffers allocated.
    pub fn new(exe: LoadedExecutable) -> Result<Session> {
        let io = Io::allocate(&exe)?;
        Ok(Session { exe, io })
    }

    /// The loaded program (its schedule, temp plan, scratch path, executable).
    pub fn loaded(&self) -> &LoadedExecutable {
        &self.exe
    }

    /// The device it runs on.
    pub fn device(&self) -> &Arc<dyn Device> {
        self.exe.device()
    }

    /// Copies every parameter's host bytes (signature order) to its buffer; their number and
    /// sizes must be the signature's.
    pub fn bind<B: AsRef<[u8]>>(&self, inputs: &[B]) -> Result<()> {
        self.io.upload(&self.exe, inputs)
    }

    /// Copies parameter `i`'s host bytes to its buffer (their size must be the buffer's).
    pub fn bind_parameter(&self, i: usize, bytes: &[u8]) -> Result<()> {
        self.io.upload_one(&self.exe, i, bytes)
    }

    /// Parameter `i`'s buffer.
    pub fn parameter(&self, i: usize) -> Result<&dyn DeviceMemory> {
        buffer(&self.io.params, i, "parameter")
    }

    /// Output `i`'s buffer.
    pub fn output(&self, i: usize) -> Result<&dyn DeviceMemory> {
        buffer(&self.io.outputs, i, "output")
    }

    /// Executes once with `opts`; returns how long it took (issue to completion).
    pub fn execute(&self, opts: &ExecuteOptions) -> Result<Duration> {
        self.io.execute(&self.exe, opts)
    }

    /// Executes `iterations` times with `opts`, calling `each` after each execution with
    /// its number and time; returns the times. The first failure ends the loop.
    pub fn execute_iterations(
        &self,
        iterations: u32,
        opts: &ExecuteOptions,
        mut each: impl FnMut(u32, Duration),
    ) -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(iterations as usize);
        for iteration in 0..iterations {
            let dt = self.execute(opts)?;
            tracing::debug!(iteration, elapsed_us = dt.as_micros() as u64, "executed");
            each(iteration, dt);
            times.push(dt);
        }
        Ok(times)
    }

    /// The output buffers (signature order), the session ended.
    pub fn into_outputs(self) -> Vec<Buffer> {
        self.io.outputs
    }

    /// Every output's bytes (signature order), each in a zeroed vector.
    pub fn read_outputs(&self) -> Result<Vec<Vec<u8>>> {
        self.read_outputs_with(&zeroed)
    }

    /// Every output's bytes (signature order), each in a vector from `alloc`.
    pub fn read_outputs_with(&self, alloc: HostAlloc<'_>) -> Result<Vec<Vec<u8>>> {
        self.io.download(&self.exe, alloc)
    }
}

impl LoadedExecutable {
    /// Convenience: uploads host bytes for every parameter, runs, and downloads every output,
    /// through the buffers of a session's, allocated for this call.
    pub fn run_with_host_data(
        &self,
        inputs: &[&[u8]],
        opts: &ExecuteOptions,
    ) -> Result<Vec<Vec<u8>>> {
        Io::check_count(self, inputs.len())?;
        let io = Io::allocate(self)?;
        io.upload(self, inputs)?;
        io.execute(self, opts)?;
        io.download(self, &zeroed)
    }
}

fn buffer<'a>(bufs: &'a [Buffer], i: usize, what: &str) -> Result<&'a dyn DeviceMemory> {
    bufs.get(i)
        .map(|b| b.as_ref() as &dyn DeviceMemory)
        .ok_or_else(|| Error::InvalidArgument(format!("no {what} {i}")))
}

/// The parameter and output buffers of one loaded program, in signature order.
struct Io {
    params: Vec<Buffer>,
    outputs: Vec<Buffer>,
}

impl Io {
    fn allocate(exe: &LoadedExecutable) -> Result<Io> {
        Ok(Io {
            params: exe.allocate_parameters()?,
            outputs: exe.allocate_outputs()?,
        })
    }

    /// Checks the number of `inputs` against the signature (before anything is allocated).
    fn check_count(exe: &LoadedExecutable, inputs: usize) -> Result<()> {
        let e = exe.executable();
        if inputs != e.signature.parameters.len() {
            return Err(Error::InvalidArgument(format!(
                "`{}` takes {} parameters, got {inputs}",
                e.name,
                e.signature.parameters.len()
            )));
        }
        Ok(())
    }

    fn upload<B: AsRef<[u8]>>(&self, exe: &LoadedExecutable, inputs: &[B]) -> Result<()> {
        Io::check_count(exe, inputs.len())?;
        for (i, data) in inputs.iter().enumerate() {
            self.upload_one(exe, i, data.as_ref())?;
        }
        Ok(())
    }

    fn upload_one(&self, exe: &LoadedExecutable, i: usize, data: &[u8]) -> Result<()> {
        let p = buffer(&self.params, i, "parameter")?;
        if data.len() as u64 != p.size() {
            let name = exe
                .executable()
                .signature
                .parameters
                .get(i)
                .map_or("?", |s| s.name.as_str());
            return Err(Error::InvalidArgument(format!(
                "parameter `{name}` needs {} bytes, got {}",
                p.size(),
                data.len()
            )));
        }
        exe.device().copy_from_host(data, p.ptr())
    }

    /// Executes once; returns how long the execution took (issue to completion).
    fn execute(&self, exe: &LoadedExecutable, opts: &ExecuteOptions) -> Result<Duration> {
        let pr: Vec<&dyn DeviceMemory> = self.params.iter().map(|b| b.as_ref() as _).collect();
        let or: Vec<&dyn DeviceMemory> = self.outputs.iter().map(|b| b.as_ref() as _).collect();
        let t = Instant::now();
        exe.execute(&pr, &or, opts)?;
        Ok(t.elapsed())
    }

    fn download(&self, exe: &LoadedExecutable, alloc: HostAlloc<'_>) -> Result<Vec<Vec<u8>>> {
        let specs = &exe.executable().signature.outputs;
        let mut out = Vec::with_capacity(self.outputs.len());
        for (o, spec) in self.outputs.iter().zip(specs) {
            let mut v = alloc(spec, o.size())?;
            exe.device().copy_to_host(o.ptr(), &mut v)?;
            out.push(v);
        }
        Ok(out)
    }
}
