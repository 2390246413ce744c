//! `memory/collective_{n}ranks`: collective memory (`MEMORY_SPACE_COLLECTIVE` temps) on `n`
//! ranks. A program copies its input into a collective temp, all-reduces it over the world
//! into a second one and all-gathers that over pairs (the world on 2 ranks) into a third, and
//! copies both results out; every rank runs it three times. Checked: the outputs equal the
//! reference (exact: small integers in f32); the executable's collective memory
//! ([`LoadedExecutable::collective_memory`]) is one arena, from the collective library's
//! allocator exactly where the clique provider has one, registered once per clique the rank
//! uses, the same after the third execution as after the first (nothing per execution); and
//! the device's live memory is back where it was once the executable is dropped (everything
//! deregistered and freed at unload). What is registered how depends on the library: the
//! emulator's counters check that in `xthunk-nccl`'s `tests/collective_memory.rs`.
//!
//! [`LoadedExecutable::collective_memory`]: xthunk_core::executor::LoadedExecutable::collective_memory

use crate::check::Check;
use crate::context::Collectives;
use crate::util::{CheckResult, ensure, fail};
use std::sync::Arc;
use xthunk_core::backend::{Device, DeviceMemory};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::collectives::{CliqueProvider, ReduceOp};
use xthunk_core::executor::{CollectiveContext, ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::{
    CollectiveOp, CollectiveThunk, CopyThunk, DType, Executable, MemorySpace, Thunk,
};

const N: u64 = 1024;
const EXECUTIONS: usize = 3;

pub(super) fn checks() -> Vec<Check> {
    [2usize, 4]
        .into_iter()
        .map(|n| {
            let mut c = Check::collective(format!("memory/collective_{n}ranks"), n, move |ctx| {
                collective_memory(ctx, n)
            });
            // Alone: it compares the devices' live memory before load and after unload.
            c.exclusive = true;
            c
        })
        .collect()
}

/// The all-gather's groups: pairs on 4 ranks, the world on 2.
fn pairs(world: usize) -> Vec<Vec<u32>> {
    if world >= 4 {
        (0..world as u32 / 2)
            .map(|p| vec![2 * p, 2 * p + 1])
            .collect()
    } else {
        vec![]
    }
}

fn program(world: usize) -> CheckResult<Executable> {
    let mut b = ExecutableBuilder::new("collective_memory");
    let x = b.parameter("x", DType::F32, &[N]);
    let y = b.output("y", DType::F32, &[N]);
    let z = b.output("z", DType::F32, &[2 * N]);
    let g = if world >= 4 { 2 } else { world as u64 };
    let t1 = b.temp_in(DType::F32, &[N], MemorySpace::Collective);
    let t2 = b.temp_in(DType::F32, &[N], MemorySpace::Collective);
    let t3 = b.temp_in(DType::F32, &[g * N], MemorySpace::Collective);
    b.push(Thunk::Copy(CopyThunk {
        src: x.slice(),
        dst: t1.slice(),
    }));
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
        src: t1.slice(),
        dst: t2.slice(),
        dtype: DType::F32,
        groups: vec![],
    }));
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::AllGather,
        src: t2.slice(),
        dst: t3.slice(),
        dtype: DType::F32,
        groups: pairs(world),
    }));
    b.push(Thunk::Copy(CopyThunk {
        src: t2.slice(),
        dst: y.slice(),
    }));
    b.push(Thunk::Copy(CopyThunk {
        src: t3.slice(),
        dst: z.slice(),
    }));
    b.build()
        .map_err(|e| fail(format!("building the program: {e}")))
}

fn input(rank: usize, execution: usize) -> Vec<f32> {
    (0..N)
        .map(|i| ((i % 13) + rank as u64 * 3 + execution as u64) as f32)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn collective_memory(ctx: &Collectives, world: usize) -> CheckResult {
    let exe = program(world)?;
    let cliques = ctx.cliques()?;
    let devices = ctx.devices()[..world].to_vec();
    let results: Vec<CheckResult> = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let (exe, cliques) = (exe.clone(), cliques.clone());
                s.spawn(move || rank_run(device, rank, world, exe, cliques))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(fail("a rank's thread panicked")))
            })
            .collect()
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.map_err(|e| fail(format!("rank {rank}: {e}")))?;
    }
    Ok(())
}

fn rank_run(
    device: &Arc<dyn Device>,
    rank: usize,
    world: usize,
    exe: Executable,
    cliques: Arc<dyn CliqueProvider>,
) -> CheckResult {
    device.synchronize()?;
    let before = device.memory_stats();
    let library = cliques.collective_allocator(rank).is_some();
    {
        let loaded = LoadedExecutable::load_with(device.clone(), exe, &ExecutorConfig::default())?;
        let opts = ExecuteOptions {
            collectives: Some(CollectiveContext {
                rank: rank as u32,
                world: world as u32,
                cliques,
            }),
            ..Default::default()
        };
        let params = loaded.allocate_parameters()?;
        let outputs = loaded.allocate_outputs()?;
        let mut first = None;
        for e in 0..EXECUTIONS {
            device.copy_from_host(&bytes(&input(rank, e)), params[0].ptr())?;
            let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref()).collect();
            let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref()).collect();
            loaded.execute(&p, &o, &opts)?;
            check_outputs(device.as_ref(), &outputs, rank, world, e)?;
            let report = loaded
                .collective_memory()
                .ok_or_else(|| fail("the program has collective memory, the executable none"))?;
            match &first {
                None => {
                    let cliques_used = 2 - usize::from(world < 4);
                    ensure(
                        report.arenas == 1
                            && report.from_library == usize::from(library)
                            && report.registrations.len() == cliques_used,
                        || {
                            format!(
                                "after the first execution: {report:?}; expected one arena{}, \
                                 registered with {cliques_used} clique(s)",
                                if library {
                                    " from the collective library"
                                } else {
                                    " of device memory"
                                }
                            )
                        },
                    )?;
                    first = Some(report);
                }
                Some(f) => ensure(*f == report, || {
                    format!("execution {e} changed the collective memory: {f:?} then {report:?}")
                })?,
            }
        }
    }
    device.synchronize()?;
    let after = device.memory_stats();
    ensure(
        after.live_bytes == before.live_bytes && after.live_allocations == before.live_allocations,
        || format!("after unload: {after:?}, before load: {before:?}"),
    )
}

fn check_outputs(
    device: &dyn Device,
    outputs: &[Box<dyn DeviceMemory>],
    rank: usize,
    world: usize,
    e: usize,
) -> CheckResult {
    let sum: Vec<f32> = (0..N as usize)
        .map(|i| (0..world).map(|r| input(r, e)[i]).sum())
        .collect();
    let g = if world >= 4 { 2 } else { world };
    let gathered: Vec<f32> = (0..g).flat_map(|_| sum.iter().copied()).collect();
    let mut y = vec![0u8; sum.len() * 4];
    device.copy_to_host(outputs[0].ptr(), &mut y)?;
    crate::util::compare_bytes(
        &format!("rank {rank} execution {e}: all-reduced y"),
        &y,
        &bytes(&sum),
    )?;
    let mut z = vec![0u8; gathered.len() * 4];
    device.copy_to_host(outputs[1].ptr(), &mut z)?;
    crate::util::compare_bytes(
        &format!("rank {rank} execution {e}: all-gathered z"),
        &z,
        &bytes(&gathered),
    )
}
