//! What xthunk's benchmarks share (the CLI's `xthunk bench` and this crate's criterion
//! benches): the tiny `add_f32` chain that measures the executor's cost per thunk, the same
//! chain as a plain loop over the host kernel function (the host baseline), the wide DAG that
//! measures streams, the memsets-then-copies program that measures building the dependency
//! graph, and how busy the machine was meanwhile.

use crate::builder::ExecutableBuilder;
use crate::error::{Error, Result};
use crate::ir::{
    Access, CommandBufferThunk, DType, Dim3, Executable, KernelArg, KernelThunk, MemsetPattern,
    Scalar, Slice, Thunk,
};
use crate::kernels::{HostArg, HostKernelFn};
use std::hint::black_box;

/// Elements of the tiny kernels.
pub const TINY: u64 = 16;

/// `out = a + b` over `n` f32 with the standard `add_f32`, grid 1 x block 32.
fn add_kernel(a: Slice, b: Slice, out: Slice, n: u64) -> Thunk {
    let buffer = |slice, access| KernelArg::Buffer { slice, access };
    KernelThunk {
        module: "std".into(),
        name: "add_f32".into(),
        grid: Dim3::x(1),
        block: Dim3::x(32),
        shared_mem: 0,
        args: vec![
            buffer(a, Access::Read),
            buffer(b, Access::Read),
            buffer(out, Access::Write),
            KernelArg::Scalar(Scalar::I64(n as i64)),
        ],
    }
    .into()
}

/// A chain of `len` `add_f32` kernels on [`TINY`] f32 (parameter `x`, output `y`):
/// `t_i = t_{i-1} + x`, ping-ponging between a temp and the output, so every kernel reads the
/// previous one's result; the kernels are the entry, or the body of one command buffer. With
/// `x = v` the output is `(len + 1) * v` for even `len`.
pub fn tiny_chain(name: &str, len: usize, command_buffer: bool) -> Result<Executable> {
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
        b.push(CommandBufferThunk { body: thunks }.into());
    } else {
        for th in thunks {
            b.push(th);
        }
    }
    Ok(b.build()?)
}

/// [`tiny_chain`] as a plain loop: `add` (`add_f32`'s host function) called `len` times on
/// host buffers (`bufs` = [temp, output]) with the same ping-pong.
pub fn plain_chain(
    add: HostKernelFn,
    x: &[f32],
    bufs: &mut [Vec<f32>; 2],
    len: usize,
) -> Result<()> {
    let xp = x.as_ptr() as *mut u8;
    let [t, y] = bufs;
    if x.len() < TINY as usize || t.len() < TINY as usize || y.len() < TINY as usize {
        return Err(Error::InvalidArgument(
            "plain loop buffers too small".into(),
        ));
    }
    let ptrs = [t.as_mut_ptr() as *mut u8, y.as_mut_ptr() as *mut u8];
    let bytes = (TINY * 4) as usize;
    for i in 0..len {
        let prev = if i == 0 { xp } else { ptrs[(i - 1) % 2] };
        let args = [
            HostArg::Buffer {
                ptr: prev,
                len: bytes,
            },
            HostArg::Buffer {
                ptr: xp,
                len: bytes,
            },
            HostArg::Buffer {
                ptr: ptrs[i % 2],
                len: bytes,
            },
            HostArg::Scalar(Scalar::I64(TINY as i64)),
        ];
        // SAFETY: every pointer refers to a live buffer of at least `bytes` bytes (checked
        // above) exclusively borrowed by this function for the call (`x` is only read by the
        // kernel, through `xp`); in and out may alias only as the kernel contract allows
        // (an output starting where an input starts).
        let r = unsafe { add(black_box(&args)) };
        if let Err(e) = r {
            return Err(Error::Kernel {
                kernel: "add_f32".into(),
                message: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Independent chains of the wide DAG.
pub const WIDE_CHAINS: u64 = 8;
/// Kernels per chain of the wide DAG.
pub const WIDE_LEN: usize = 4;

/// The wide DAG: [`WIDE_CHAINS`] independent chains `exp -> tanh -> exp -> tanh` over `n` f32
/// each (parameter `x`, output `y`, a temp; values stay in [-1, e]), each chain reading its own
/// slice of the input and ending in its own slice of the output; every kernel has `grid`
/// blocks of 256 threads.
pub fn wide_dag(n: u64, grid: u32) -> Result<Executable> {
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
        // Ends in y: ts, ys, ts, ys.
        let mut prev = xs;
        for i in 0..WIDE_LEN {
            let out = if i % 2 == 0 { ts } else { ys };
            b.push(
                KernelThunk {
                    module: "std".into(),
                    name: if i % 2 == 0 { "exp_f32" } else { "tanh_f32" }.into(),
                    grid: Dim3::x(grid),
                    block: Dim3::x(256),
                    shared_mem: 0,
                    args: vec![
                        KernelArg::Buffer {
                            slice: prev,
                            access: Access::Read,
                        },
                        KernelArg::Buffer {
                            slice: out,
                            access: Access::Write,
                        },
                        KernelArg::Scalar(Scalar::I64(n as i64)),
                    ],
                }
                .into(),
            );
            prev = out;
        }
    }
    Ok(b.build()?)
}

/// The dependency graph's worst shape for a naive builder, when `whole`: `n` memsets of one
/// `i32` each to distinct offsets of a temp of `n` i32 (element `i` set to `i`), then `n`
/// copies of the whole temp to output `y` (every copy reads every memset's bytes and writes
/// over the previous copy). Otherwise the same number of thunks in a plain shape: copy `i`
/// takes element `i` only. `y` ends as `0, 1, …, n-1` either way.
pub fn memsets_then_copies(n: u64, whole: bool) -> Result<Executable> {
    let mut b = ExecutableBuilder::new("memsets_then_copies");
    let t = b.temp(DType::I32, &[n]);
    let y = b.output("y", DType::I32, &[n]);
    for i in 0..n {
        let v = u32::try_from(i)
            .map_err(|_| Error::InvalidArgument(format!("{n} memsets do not fit u32 values")))?;
        b.memset(t.elems(i, 1).slice(), MemsetPattern::U32(v));
    }
    for i in 0..n {
        if whole {
            b.copy(t.slice(), y.slice());
        } else {
            b.copy(t.elems(i, 1).slice(), y.elems(i, 1).slice());
        }
    }
    Ok(b.build()?)
}

/// CPU time counters (Linux, in clock ticks): all CPUs' total and busy time, and this
/// process's own user + system time.
pub struct CpuSnapshot {
    total: u64,
    busy: u64,
    own: u64,
}

/// The CPU time spent between two snapshots.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuUse {
    /// Clock ticks of all CPUs together (they tick every 10 ms per CPU).
    pub ticks: u64,
    /// This process's share of them, from 0 to 1.
    pub own: f64,
    /// Other processes' share.
    pub others: f64,
}

impl CpuSnapshot {
    /// The counters now; `None` where they cannot be read (not Linux).
    pub fn take() -> Option<CpuSnapshot> {
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

    /// The CPU time spent since this snapshot (taking a new one).
    pub fn since(&self) -> Option<CpuUse> {
        let now = CpuSnapshot::take()?;
        let ticks = now.total.saturating_sub(self.total);
        let total = ticks.max(1) as f64;
        let busy = now.busy.saturating_sub(self.busy) as f64;
        let own = now.own.saturating_sub(self.own) as f64;
        Some(CpuUse {
            ticks,
            own: own / total,
            others: (busy - own).max(0.0) / total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::standard_library;

    #[test]
    fn the_plain_loop_computes_the_chain() -> Result<()> {
        let add = standard_library()
            .get("add_f32")
            .map(|k| k.func)
            .ok_or_else(|| Error::InvalidArgument("no add_f32".into()))?;
        let x = vec![0.5f32; TINY as usize];
        let mut bufs = [vec![0f32; TINY as usize], vec![0f32; TINY as usize]];
        plain_chain(add, &x, &mut bufs, 10)?;
        assert_eq!(bufs[1], vec![5.5; TINY as usize]);
        assert!(plain_chain(add, &x[..4], &mut bufs, 10).is_err());
        let exe = tiny_chain("chain", 10, true)?;
        assert_eq!(exe.entry.len(), 1);
        assert_eq!(exe.entry[0].kind(), "command_buffer");
        assert_eq!(exe.entry[0].nested()[0].1.len(), 10);
        let wide = wide_dag(64, 1)?;
        assert_eq!(wide.entry.len(), WIDE_CHAINS as usize * WIDE_LEN);
        Ok(())
    }
}
