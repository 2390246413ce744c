//! What the benchmarks run: a loaded program with its buffers ([`Prepared`]), the tiny
//! `add_f32` chain that the overhead and command-buffer benchmarks share, and the helpers that
//! fill and check buffers.

use super::Res;
use super::stats::secs;
use std::sync::Arc;
use std::time::Instant;
use xthunk::builder::ExecutableBuilder;
use xthunk::core::executor::ExecutorConfig;
use xthunk::ir::{Access, DType, Dim3, Executable, KernelArg, KernelThunk, Scalar, Slice, Thunk};
use xthunk::{Buffer, Device, DeviceMemory, ExecuteOptions, LoadedExecutable};

/// A loaded program with its parameter and output buffers.
pub struct Prepared {
    pub exe: LoadedExecutable,
    params: Vec<Buffer>,
    outputs: Vec<Buffer>,
}

impl Prepared {
    pub fn new(dev: &Arc<dyn Device>, exe: Executable, cfg: &ExecutorConfig) -> Res<Prepared> {
        let exe = LoadedExecutable::load_with(dev.clone(), exe, cfg)?;
        let params = exe.allocate_parameters()?;
        let outputs = exe.allocate_outputs()?;
        Ok(Prepared {
            exe,
            params,
            outputs,
        })
    }

    pub fn set_param(&self, i: usize, bytes: &[u8]) -> Res<()> {
        let p = self.param(i)?;
        self.exe.device().copy_from_host(bytes, p.ptr())
    }

    pub fn param(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.params
            .get(i)
            .map(|b| b.as_ref() as &dyn DeviceMemory)
            .ok_or_else(|| xthunk::Error::InvalidArgument(format!("no parameter {i}")))
    }

    pub fn output(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.outputs
            .get(i)
            .map(|b| b.as_ref() as &dyn DeviceMemory)
            .ok_or_else(|| xthunk::Error::InvalidArgument(format!("no output {i}")))
    }

    /// Executes once; returns the seconds it took (issue to completion).
    pub fn run(&self) -> Res<f64> {
        let p: Vec<&dyn DeviceMemory> = self.params.iter().map(|b| b.as_ref() as _).collect();
        let o: Vec<&dyn DeviceMemory> = self.outputs.iter().map(|b| b.as_ref() as _).collect();
        let start = Instant::now();
        self.exe.execute(&p, &o, &ExecuteOptions::default())?;
        Ok(secs(start))
    }

    pub fn read(&self, buf: &dyn DeviceMemory, offset: u64, len: u64) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len as usize];
        self.exe
            .device()
            .copy_to_host(buf.ptr().offset(offset), &mut v)?;
        Ok(v)
    }
}

pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The error of a benchmark whose result is wrong.
pub fn wrong(what: &str, detail: String) -> xthunk::Error {
    xthunk::Error::InvalidArgument(format!("wrong result in {what}: {detail}"))
}

pub fn buffer_arg(slice: Slice, access: Access) -> KernelArg {
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
pub const TINY: u64 = 16;

/// A chain of `len` `add_f32` on 16 elements, `t_i = t_{i-1} + x`, ping-ponging between a temp
/// and the output (every kernel reads the previous one's result); in the entry or as the body
/// of one command buffer. With `x = v` the output is `(len + 1) * v` for even `len`.
pub fn tiny_chain(name: &str, len: usize, command_buffer: bool) -> Res<Executable> {
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
pub fn check_chain(what: &str, got: &[f32], len: usize, x: f32) -> Res<()> {
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
