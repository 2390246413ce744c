//! `executor/temps_freed` and `executor/concurrent_executions`: per-execution state is pooled
//! and freed, and one loaded executable runs from several threads at once.

use super::common::{configs, load};
use super::program::{Inputs, K, M, N, inputs, params, poisoned_y, program, verify};
use crate::util::{
    CheckResult, CheckRng, compare_bytes, ensure, execute_loaded, expect_live_bytes, fail, upload,
};
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::ir::MemorySpace;

/// Per-execution state is pooled: the first execution may keep its temporaries for reuse,
/// later ones must not grow the live bytes; `release_cached_state` frees the pool (live bytes
/// back to their value before the first execution) and dropping the executable frees its
/// constants (back to the value before loading).
pub(super) fn temps_freed(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    for (name, cfg) in configs() {
        device.synchronize()?;
        let before_load = device.memory_stats().live_bytes;
        let loaded = load(device, program(&i.bias)?, &cfg)?;
        let p = params(&i)?;
        let x = upload(device, &p[0], MemorySpace::Device)?;
        let w = upload(device, &p[1], MemorySpace::Device)?;
        let init = poisoned_y();
        let y = upload(device, &init[0], MemorySpace::Device)?;
        let z = upload(device, &init[1], MemorySpace::Device)?;
        device.synchronize()?;
        let baseline = device.memory_stats().live_bytes;
        let mut after_first = baseline;
        for run in 0..3 {
            loaded.execute(
                &[x.as_ref(), w.as_ref()],
                &[y.as_ref(), z.as_ref()],
                &ExecuteOptions::default(),
            )?;
            if run == 0 {
                device.synchronize()?;
                after_first = device.memory_stats().live_bytes;
                ensure(after_first >= baseline, || {
                    format!("{name}: live bytes fell below the baseline during execution")
                })?;
            } else {
                expect_live_bytes(
                    device,
                    after_first,
                    &format!("{name}: after execution {run} (pooled state reused)"),
                )?;
            }
        }
        let mut out = vec![vec![0u8; M * N * 4], vec![0u8; M * K * 4]];
        device.copy_to_host(y.ptr(), &mut out[0])?;
        device.copy_to_host(z.ptr(), &mut out[1])?;
        verify(&i, &out)?;
        loaded.release_cached_state();
        expect_live_bytes(
            device,
            baseline,
            &format!("{name}: after release_cached_state"),
        )?;
        drop((x, w, y, z, loaded));
        expect_live_bytes(
            device,
            before_load,
            &format!("{name}: after dropping the loaded executable"),
        )?;
    }
    Ok(())
}

/// One loaded executable, four threads, three executions each, own buffers: all results
/// identical and correct.
pub(super) fn concurrent(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    let i = inputs(rng);
    for (name, cfg) in configs() {
        concurrent_one(device, &i, &cfg).map_err(|e| fail(format!("{name}: {e}")))?;
    }
    Ok(())
}

fn concurrent_one(device: &Arc<dyn Device>, i: &Inputs, cfg: &ExecutorConfig) -> CheckResult {
    let loaded = load(device, program(&i.bias)?, cfg)?;
    let p = params(i)?;
    let results: Vec<CheckResult<Vec<Vec<u8>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (loaded, p) = (&loaded, &p);
                scope.spawn(move || {
                    let mut outs = Vec::new();
                    for _ in 0..3 {
                        let o = execute_loaded(
                            device,
                            loaded,
                            p,
                            &poisoned_y(),
                            &ExecuteOptions::default(),
                        )?;
                        outs.extend(o);
                    }
                    Ok(outs)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(fail("an executing thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::new();
    for (t, r) in results.into_iter().enumerate() {
        let outs = r.map_err(|e| fail(format!("thread {t}: {e}")))?;
        all.extend(outs.into_iter().map(|o| (t, o)));
    }
    let n_out = poisoned_y().len();
    ensure(!all.is_empty() && all.len() % n_out == 0, || {
        format!("{} outputs came back", all.len())
    })?;
    let reference: Vec<Vec<u8>> = all.iter().take(n_out).map(|(_, o)| o.clone()).collect();
    verify(i, &reference)?;
    for (k, (t, o)) in all.iter().enumerate() {
        compare_bytes(
            &format!("thread {t}'s output {} against thread 0's", k % n_out),
            o,
            &reference[k % n_out],
        )?;
    }
    Ok(())
}
