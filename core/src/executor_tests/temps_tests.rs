//! The temp plan checked against the schedule it was made for, independently of how the
//! planner reasons: in random programs on 1 to 4 streams, two temps whose bytes overlap are
//! never used by one node, and every use of one is ordered before every use of the other by
//! stream order and event waits (a transitive closure over the scheduled nodes).

#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

use super::white_box::{for_each_step, node_uses, schedule};
use super::{ExecutorConfig, LoadedExecutable};
use crate::backend::{Backend, Device};
use crate::builder::ExecutableBuilder;
use crate::host::HostBackend;
use crate::ir::{
    Access, AllocationKind, AsyncDoneThunk, AsyncKind, AsyncStartThunk, CopyThunk, DType, Dim3,
    Executable, KernelArg, KernelThunk, MemsetPattern, MemsetThunk, Scalar, Slice, Thunk,
    ThunkPath,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const OUTPUTS: u32 = 2;
const TEMPS: u32 = 24;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

fn size_of(a: u32) -> u64 {
    [64, 128, 256, 512][(a % 4) as usize]
}

fn thunk(rng: &mut ChaCha8Rng) -> Thunk {
    let pick = |rng: &mut ChaCha8Rng| {
        let a = rng.random_range(0..OUTPUTS + TEMPS);
        Slice::new(a, 0, 64)
    };
    match rng.random_range(0..3) {
        0 => Thunk::Memset(MemsetThunk {
            dst: pick(rng),
            pattern: MemsetPattern::U32(7),
        }),
        1 => {
            let (src, dst) = (pick(rng), pick(rng));
            if src.allocation == dst.allocation {
                Thunk::Memset(MemsetThunk {
                    dst,
                    pattern: MemsetPattern::U8(1),
                })
            } else {
                Thunk::Copy(CopyThunk { src, dst })
            }
        }
        _ => {
            let buf = |slice, access| KernelArg::Buffer { slice, access };
            Thunk::Kernel(KernelThunk {
                module: "std".into(),
                name: "add_f32".into(),
                grid: Dim3::x(1),
                block: Dim3::x(16),
                shared_mem: 0,
                args: vec![
                    buf(pick(rng), Access::Read),
                    buf(pick(rng), Access::Read),
                    buf(pick(rng), Access::Write),
                    KernelArg::Scalar(Scalar::I64(16)),
                ],
            })
        }
    }
}

fn program(rng: &mut ChaCha8Rng) -> Executable {
    let mut b = ExecutableBuilder::new("plan_check");
    for i in 0..OUTPUTS {
        b.output(&format!("o{i}"), DType::F32, &[size_of(i) / 4]);
    }
    for a in OUTPUTS..OUTPUTS + TEMPS {
        b.temp(DType::F32, &[size_of(a) / 4]);
    }
    b.standard_module();
    let mut id = 0;
    for _ in 0..rng.random_range(4..60) {
        if rng.random_bool(0.2) {
            let body = (0..rng.random_range(1..5)).map(|_| thunk(rng)).collect();
            let kind = if rng.random_bool(0.5) {
                AsyncKind::Communication
            } else {
                AsyncKind::Compute
            };
            b.push(Thunk::AsyncStart(AsyncStartThunk { id, kind, body }));
            b.push(Thunk::AsyncDone(AsyncDoneThunk { id }));
            id += 1;
        } else {
            b.push(thunk(rng));
        }
    }
    b.build().unwrap()
}

/// `hb[u][v]`: node `u` finishes before node `v` starts (stream order and event waits,
/// closed transitively).
fn happens_before(l: &LoadedExecutable) -> Vec<Vec<bool>> {
    let s = schedule(l);
    let nodes = &s.nodes;
    let n = nodes.len();
    let mut preds: Vec<Vec<usize>> = vec![vec![]; n];
    let mut last: Vec<Option<usize>> = vec![None; s.streams.max(1)];
    for (v, node) in nodes.iter().enumerate() {
        if let Some(u) = last[node.stream] {
            preds[v].push(u);
        }
        last[node.stream] = Some(v);
        for &w in &node.waits {
            assert!(
                nodes[w].record,
                "node {v} waits for {w}, which records no event"
            );
            preds[v].push(w);
        }
    }
    let mut hb = vec![vec![false; n]; n];
    for v in 0..n {
        for &u in &preds[v] {
            assert!(u < v);
            hb[u][v] = true;
            for x in 0..u {
                if hb[x][u] {
                    hb[x][v] = true;
                }
            }
        }
    }
    hb
}

#[test]
fn shared_temps_are_never_live_at_once() {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let mut shared_pairs = 0usize;
    let mut concurrent_programs = 0usize;
    for _ in 0..150 {
        let exe = program(&mut rng);
        let mut uses: Vec<Vec<u32>> = vec![];
        for (i, t) in exe.entry.iter().enumerate() {
            for_each_step(t, &ThunkPath::entry(i), None, &mut |t, _, _| {
                uses.push(
                    node_uses(t)
                        .buffers
                        .iter()
                        .map(|b| b.slice.allocation)
                        .collect(),
                );
                Ok(())
            })
            .unwrap();
        }
        for streams in 1..=4 {
            let cfg = ExecutorConfig {
                streams,
                sequential_below: 0,
                ..ExecutorConfig::default()
            };
            let l = LoadedExecutable::load_with(device(), exe.clone(), &cfg).unwrap();
            let s = schedule(&l);
            assert_eq!(uses.len(), s.nodes.len());
            concurrent_programs += usize::from(!s.sequential);
            let hb = happens_before(&l);
            let plan = l.temp_plan();
            for p in &plan.placements {
                let arena = &plan.arenas[p.arena];
                let size = exe.allocations[p.allocation as usize].size;
                let align = exe.allocations[p.allocation as usize].alignment;
                assert!(p.offset + size <= arena.size);
                assert_eq!(p.offset % align, 0);
                assert_eq!(arena.alignment % align, 0);
                assert_eq!(
                    exe.allocations[p.allocation as usize].kind,
                    AllocationKind::Temp
                );
            }
            for (i, p) in plan.placements.iter().enumerate() {
                for q in &plan.placements[i + 1..] {
                    let (sp, sq) = (
                        exe.allocations[p.allocation as usize].size,
                        exe.allocations[q.allocation as usize].size,
                    );
                    let overlap =
                        p.arena == q.arena && p.offset < q.offset + sq && q.offset < p.offset + sp;
                    if !overlap {
                        continue;
                    }
                    shared_pairs += 1;
                    let of = |a: u32| -> Vec<usize> {
                        (0..uses.len()).filter(|&v| uses[v].contains(&a)).collect()
                    };
                    let (ua, ub) = (of(p.allocation), of(q.allocation));
                    let a_first = ua.iter().all(|&x| ub.iter().all(|&y| hb[x][y]));
                    let b_first = ua.iter().all(|&x| ub.iter().all(|&y| hb[y][x]));
                    assert!(
                        a_first || b_first,
                        "%{} and %{} share bytes but may be live at once ({streams} streams): \
                         uses {ua:?} and {ub:?}",
                        p.allocation,
                        q.allocation
                    );
                }
            }
        }
    }
    assert!(shared_pairs > 1000, "{shared_pairs} shared pairs checked");
    assert!(concurrent_programs > 200, "{concurrent_programs}");
}
