//! What the benchmarks run: a loaded program with its buffers ([`Prepared`]), the check of
//! the tiny `add_f32` chain that the overhead and command-buffer benchmarks share (the chain
//! itself is core's, shared with the criterion benches), and the helpers that fill and check
//! buffers.

use super::setup::Res;
use std::sync::Arc;
pub use xthunk::core::bench::{TINY, tiny_chain};
use xthunk::core::executor::{ExecutorConfig, Program, Session};
use xthunk::ir::Executable;
use xthunk::{Device, DeviceMemory, ExecuteOptions, LoadedExecutable};

/// A loaded program with its parameter and output buffers: a [`Session`].
pub struct Prepared {
    session: Session,
}

impl Prepared {
    pub fn new(dev: &Arc<dyn Device>, exe: Executable, cfg: &ExecutorConfig) -> Res<Prepared> {
        let program = Program::new(exe)?;
        Ok(Prepared {
            session: Session::load(dev.clone(), &program, cfg, None)?,
        })
    }

    /// The loaded program.
    pub fn loaded(&self) -> &LoadedExecutable {
        self.session.loaded()
    }

    pub fn set_param(&self, i: usize, bytes: &[u8]) -> Res<()> {
        self.session.bind_parameter(i, bytes)
    }

    pub fn param(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.session.parameter(i)
    }

    pub fn output(&self, i: usize) -> Res<&dyn DeviceMemory> {
        self.session.output(i)
    }

    /// Executes once; returns the seconds it took (issue to completion).
    pub fn run(&self) -> Res<f64> {
        self.run_with(&ExecuteOptions::default())
    }

    /// [`Self::run`] with `opts`.
    pub fn run_with(&self, opts: &ExecuteOptions) -> Res<f64> {
        Ok(self.session.execute(opts)?.as_secs_f64())
    }

    /// Every output of the last execution, copied to the host.
    pub fn outputs(&self) -> Res<Vec<Vec<u8>>> {
        crate::cli::tensor::read_back(&self.session)
    }

    pub fn read(&self, buf: &dyn DeviceMemory, offset: u64, len: u64) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len as usize];
        self.session
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
