//! Running a program on every rank: one thread per rank, each with its own loaded executable, under
//! a time limit, and checking the outputs of a case.

use super::common::RUN_LIMIT;
use super::inputs::{input, verify};
use super::program::{Coll, program};
use crate::context::Collectives;
use crate::util::panic_message;
use crate::util::{CheckResult, CheckRng, ensure, execute_loaded, fail, poison_byte};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use xthunk_core::collectives::CliqueProvider;
use xthunk_core::executor::{CollectiveContext, ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::ir::Executable;

/// Runs `colls` as one program on `world` ranks with fresh inputs and poisoned outputs, and
/// checks every rank's outputs.
pub(super) fn run_case(
    ctx: &Collectives,
    rng: &mut CheckRng,
    name: &str,
    world: usize,
    colls: &[Coll],
) -> CheckResult {
    let exe = program(name, colls, world)?;
    let inputs = (0..world)
        .map(|_| {
            colls
                .iter()
                .map(|c| input(rng, c, world))
                .collect::<CheckResult<Vec<_>>>()
        })
        .collect::<CheckResult<Vec<_>>>()?;
    let inits: Vec<Vec<Vec<u8>>> = inputs
        .iter()
        .map(|mine| {
            colls
                .iter()
                .zip(mine)
                .map(|(c, x)| {
                    if c.in_place {
                        x.clone()
                    } else {
                        vec![poison_byte(c.dtype); c.elems(world).1 * c.dtype.size()]
                    }
                })
                .collect()
        })
        .collect();
    let runs = (0..world)
        .map(|r| RankRun {
            exe: exe.clone(),
            params: colls
                .iter()
                .zip(&inputs[r])
                .filter(|(c, _)| !c.in_place)
                .map(|(_, x)| x.clone())
                .collect(),
            outputs_init: inits[r].clone(),
        })
        .collect();
    let outputs = all_ok(spmd(
        ctx,
        ctx.cliques()?,
        runs,
        &ExecutorConfig::default(),
        RUN_LIMIT,
    )?)?;
    for (i, c) in colls.iter().enumerate() {
        for (r, out) in outputs.iter().enumerate() {
            verify(c, world, r, i, &inputs, &inits[r][i], &out[i])?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running ranks.

/// What one rank runs.
pub(super) struct RankRun {
    pub(super) exe: Executable,
    pub(super) params: Vec<Vec<u8>>,
    pub(super) outputs_init: Vec<Vec<u8>>,
}

pub(super) type RankResult = CheckResult<Vec<Vec<u8>>>;

/// Runs `runs[r]` as rank `r` of `runs.len()` on device `r`, each rank on its own thread with
/// its own loaded executable, through [`execute_loaded`] (fresh buffers, poisoned outputs with
/// checked tails, parameters checked unchanged); returns each rank's outputs or error. Fails
/// as a hang if a rank has not returned after `limit` (its thread is left behind).
pub(super) fn spmd(
    ctx: &Collectives,
    cliques: Arc<dyn CliqueProvider>,
    runs: Vec<RankRun>,
    config: &ExecutorConfig,
    limit: Duration,
) -> CheckResult<Vec<RankResult>> {
    let world = runs.len();
    ensure(ctx.devices().len() >= world, || {
        format!("{world} ranks but {} devices", ctx.devices().len())
    })?;
    let (tx, rx) = mpsc::channel::<(usize, RankResult)>();
    for (rank, run) in runs.into_iter().enumerate() {
        let device = ctx.devices()[rank].clone();
        let tx = tx.clone();
        let config = config.clone();
        let opts = ExecuteOptions {
            collectives: Some(CollectiveContext {
                rank: rank as u32,
                world: world as u32,
                cliques: cliques.clone(),
            }),
            ..Default::default()
        };
        std::thread::Builder::new()
            .name(format!("conformance-rank-{rank}"))
            .spawn(move || {
                let body = || -> RankResult {
                    let loaded = LoadedExecutable::load_with(device.clone(), run.exe, &config)?;
                    execute_loaded(&device, &loaded, &run.params, &run.outputs_init, &opts)
                };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                    .unwrap_or_else(|p| Err(fail(format!("panicked: {}", panic_message(&*p)))));
                let _ = tx.send((rank, r));
            })
            .map_err(|e| fail(format!("spawning the thread of rank {rank}: {e}")))?;
    }
    drop(tx);
    let deadline = Instant::now() + limit;
    let mut results: Vec<Option<RankResult>> = (0..world).map(|_| None).collect();
    while results.iter().any(Option::is_none) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((rank, r)) => results[rank] = Some(r),
            Err(_) => {
                let missing: Vec<usize> = (0..world).filter(|&r| results[r].is_none()).collect();
                return Err(fail(format!(
                    "rank(s) {missing:?} of {world} had not returned after {limit:?}: the run \
                     hung (their threads are left behind)"
                )));
            }
        }
    }
    Ok(results.into_iter().flatten().collect())
}

/// Every rank's outputs, or a failure listing every rank's error.
pub(super) fn all_ok(results: Vec<RankResult>) -> CheckResult<Vec<Vec<Vec<u8>>>> {
    let errors: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(r, x)| x.as_ref().err().map(|e| format!("rank {r}: {e}")))
        .collect();
    if !errors.is_empty() {
        return Err(fail(errors.join("; ")));
    }
    Ok(results.into_iter().flatten().collect())
}

/// Runs `f` on a thread of its own; fails as a hang after `limit`.
pub(super) fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> CheckResult<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("conformance-spmd".into())
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        })
        .map_err(|e| fail(format!("spawning a thread: {e}")))?;
    match rx.recv_timeout(limit) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(p)) => Err(fail(format!("{what} panicked: {}", panic_message(&*p)))),
        Err(_) => Err(fail(format!(
            "{what} had not returned after {limit:?}: it hung (its thread is left behind)"
        ))),
    }
}
