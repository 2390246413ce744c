//! SPMD execution: one program on N devices of one process, one thread per device, with
//! collectives among them.

use super::{CollectiveContext, ExecuteOptions, ExecutorConfig, LoadedExecutable, Progress};
use crate::backend::{Device, DeviceMemory};
use crate::collectives::CliqueProvider;
use crate::error::{Error, Result};
use crate::ir::Executable;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one rank produced.
#[derive(Clone, Debug, Default)]
pub struct RankOutput {
    /// Output bytes, in signature order.
    pub outputs: Vec<Vec<u8>>,
    /// Wall time of each iteration.
    pub times: Vec<Duration>,
}

/// Runs `exe` on every device (rank = position in `devices`), `iterations` times, with
/// `inputs[rank]` as that rank's parameters (host bytes in signature order). Every rank runs
/// on its own thread; all threads are joined before this returns, also on error. On failure
/// the first error (by rank) is returned, naming the rank; the communicators of a failing
/// rank are aborted so its peers fail promptly rather than at their terminate timeout, and
/// the error says where every rank was at the first failure ([`Progress`]: which ranks wait
/// in a collective, which is stuck before it).
pub fn run_spmd(
    exe: &Executable,
    devices: &[Arc<dyn Device>],
    cliques: Arc<dyn CliqueProvider>,
    inputs: &[Vec<Vec<u8>>],
    iterations: u32,
    config: &ExecutorConfig,
    opts: &ExecuteOptions,
) -> Result<Vec<RankOutput>> {
    let world = devices.len();
    if inputs.len() != world {
        return Err(Error::InvalidArgument(format!(
            "{world} devices but inputs for {} ranks",
            inputs.len()
        )));
    }
    // Every rank's progress in its communication steps, for the message of a hang (a given
    // record is kept, so the caller can read it too).
    let mut opts = opts.clone();
    let progress = opts
        .progress
        .get_or_insert_with(|| Arc::new(Progress::new(world)))
        .clone();
    let opts = &opts;
    let results: Vec<Result<RankOutput>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let cliques = cliques.clone();
                let rank_inputs = &inputs[rank];
                let builder = std::thread::Builder::new().name(format!("xthunk-rank-{rank}"));
                builder.spawn_scoped(scope, move || {
                    run_rank(
                        exe,
                        device.clone(),
                        cliques,
                        rank,
                        world,
                        rank_inputs,
                        iterations,
                        config,
                        opts,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(format!(
                        "rank {rank}: its thread panicked"
                    )))
                }),
                Err(e) => Err(Error::backend(
                    "executor",
                    "spawn rank thread",
                    format!("rank {rank}: {e}"),
                )),
            })
            .collect()
    });
    let mut out = Vec::with_capacity(world);
    let mut first: Option<Error> = None;
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => out.push(o),
            Err(e) => {
                tracing::error!(rank, "rank failed: {e}");
                if first.is_none() {
                    let mut message = e.to_string();
                    if let Some(at) = progress.frozen() {
                        message.push_str(&format!("; where each rank was: {at}"));
                    }
                    first = Some(Error::Backend {
                        backend: "spmd".into(),
                        call: format!("rank {rank} of {world}"),
                        message,
                    });
                }
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_rank(
    exe: &Executable,
    device: Arc<dyn Device>,
    cliques: Arc<dyn CliqueProvider>,
    rank: usize,
    world: usize,
    inputs: &[Vec<u8>],
    iterations: u32,
    config: &ExecutorConfig,
    opts: &ExecuteOptions,
) -> Result<RankOutput> {
    let span = tracing::info_span!("rank", rank);
    let _g = span.enter();
    let trace = opts.trace.as_deref().map(|t| {
        t.name_rank(rank as u32, device.info().name.clone());
        (t, rank as u32)
    });
    let loaded = LoadedExecutable::load_traced(device.clone(), exe.clone(), config, trace)?;
    let params = loaded.allocate_parameters()?;
    if params.len() != inputs.len() {
        return Err(Error::InvalidArgument(format!(
            "rank {rank}: {} parameters, {} inputs",
            params.len(),
            inputs.len()
        )));
    }
    for (p, bytes) in params.iter().zip(inputs) {
        if p.size() != bytes.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "rank {rank}: an input of {} bytes for a parameter of {}",
                bytes.len(),
                p.size()
            )));
        }
        device.copy_from_host(bytes, p.ptr())?;
    }
    let outputs = loaded.allocate_outputs()?;
    let pr: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let or: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let mut opts = opts.clone();
    opts.collectives = Some(CollectiveContext {
        rank: rank as u32,
        world: world as u32,
        cliques,
    });
    let mut times = Vec::with_capacity(iterations as usize);
    for _ in 0..iterations.max(1) {
        let t = Instant::now();
        loaded.execute(&pr, &or, &opts)?;
        times.push(t.elapsed());
    }
    let outputs = outputs
        .iter()
        .map(|o| {
            let mut v = vec![0u8; o.size() as usize];
            device.copy_to_host(o.ptr(), &mut v)?;
            Ok(v)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RankOutput { outputs, times })
}
