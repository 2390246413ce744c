//! Point to point: collective permutes (rings, partial) and send/receive pairs.

use super::common::{RUN_LIMIT, check};
use super::runner::{RankRun, all_ok, spmd};
use crate::check::Check;
use crate::util::{compare_bytes, fail, poison_byte, random_bytes};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::ExecutorConfig;
use xthunk_core::ir::{CollectivePermuteThunk, DType, RecvThunk, SendThunk, Thunk};

/// The messages of the permute and send/receive checks: (dtype, elements).
pub(super) const MESSAGES: [(DType, usize); 3] = [
    (DType::F16, 1),
    (DType::I8, 1001),
    (DType::F32, (64 << 10) / 4),
];

/// A collective permute on `n` ranks: a ring (`r → r+1 mod n`), or a partial permute whose
/// non-targets must receive zeros.
pub(super) fn permute(n: usize, partial: bool) -> Check {
    let kind = if partial { "partial" } else { "ring" };
    let name = format!("permute_{kind}_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let pairs: Vec<(u32, u32)> = match (partial, n) {
            (false, _) => (0..n as u32).map(|r| (r, (r + 1) % n as u32)).collect(),
            (true, 1) => vec![],
            (true, 2) => vec![(0, 1)],
            (true, 3) => vec![(0, 2), (2, 0)],
            (true, _) => vec![(0, 2), (2, 1)],
        };
        let mut b = ExecutableBuilder::new(prog.as_str());
        for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
            let x = b.parameter(&format!("x{i}"), dtype, &[count as u64]);
            let y = b.output(&format!("y{i}"), dtype, &[count as u64]);
            b.push(
                CollectivePermuteThunk {
                    src: x.slice(),
                    dst: y.slice(),
                    dtype,
                    pairs: pairs.clone(),
                }
                .into(),
            );
        }
        let exe = b
            .build()
            .map_err(|e| fail(format!("building `{prog}`: {e}")))?;
        let inputs: Vec<Vec<Vec<u8>>> = (0..n)
            .map(|_| {
                MESSAGES
                    .iter()
                    .map(|(d, c)| random_bytes(rng, c * d.size()))
                    .collect()
            })
            .collect();
        let inits: Vec<Vec<u8>> = MESSAGES
            .iter()
            .map(|(d, c)| vec![poison_byte(*d); c * d.size()])
            .collect();
        let runs = inputs
            .iter()
            .map(|x| RankRun {
                exe: exe.clone(),
                params: x.clone(),
                outputs_init: inits.clone(),
            })
            .collect();
        let outputs = all_ok(spmd(
            ctx,
            ctx.cliques()?,
            runs,
            &ExecutorConfig::default(),
            RUN_LIMIT,
        )?)?;
        for (t, out) in outputs.iter().enumerate() {
            let from = pairs
                .iter()
                .find(|p| p.1 as usize == t)
                .map(|p| p.0 as usize);
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                let what =
                    format!("rank {t} of {n}: collective_permute {pairs:?} of {dtype} × {count}");
                match from {
                    Some(s) => {
                        compare_bytes(&format!("{what} (from rank {s})"), &out[i], &inputs[s][i])?
                    }
                    None => compare_bytes(
                        &format!("{what} (no source: zeros)"),
                        &out[i],
                        &vec![0u8; count * dtype.size()],
                    )?,
                }
            }
        }
        Ok(())
    })
}

/// Pairs `0↔1`, `2↔3` exchange three messages each way with `Send`/`Recv` (the even rank sends
/// first, the odd one receives first; the `k`-th send meets the `k`-th receive); on 3 ranks,
/// rank 2 takes no part and keeps its poisoned outputs.
pub(super) fn send_recv(n: usize) -> Check {
    let name = format!("send_recv_{n}ranks");
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let peer = |r: usize| Some(r ^ 1).filter(|&p| p < n);
        let mut runs = Vec::new();
        let mut inputs = Vec::new();
        let inits: Vec<Vec<u8>> = MESSAGES
            .iter()
            .map(|(d, c)| vec![poison_byte(*d); c * d.size()])
            .collect();
        for r in 0..n {
            let mut b = ExecutableBuilder::new(format!("{prog}_rank{r}"));
            let mut xs = Vec::new();
            let mut ys = Vec::new();
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                xs.push((b.parameter(&format!("x{i}"), dtype, &[count as u64]), dtype));
                ys.push((b.output(&format!("y{i}"), dtype, &[count as u64]), dtype));
            }
            if let Some(p) = peer(r) {
                let sends: Vec<Thunk> = xs
                    .iter()
                    .map(|(x, dtype)| {
                        SendThunk {
                            src: x.slice(),
                            dtype: *dtype,
                            peer: p as u32,
                        }
                        .into()
                    })
                    .collect();
                let recvs: Vec<Thunk> = ys
                    .iter()
                    .map(|(y, dtype)| {
                        RecvThunk {
                            dst: y.slice(),
                            dtype: *dtype,
                            peer: p as u32,
                        }
                        .into()
                    })
                    .collect();
                let (first, second) = if r % 2 == 0 {
                    (sends, recvs)
                } else {
                    (recvs, sends)
                };
                for t in first.into_iter().chain(second) {
                    b.push(t);
                }
            }
            let exe = b
                .build()
                .map_err(|e| fail(format!("building the program of rank {r}: {e}")))?;
            let x: Vec<Vec<u8>> = MESSAGES
                .iter()
                .map(|(d, c)| random_bytes(rng, c * d.size()))
                .collect();
            runs.push(RankRun {
                exe,
                params: x.clone(),
                outputs_init: inits.clone(),
            });
            inputs.push(x);
        }
        let outputs = all_ok(spmd(
            ctx,
            ctx.cliques()?,
            runs,
            &ExecutorConfig::default(),
            RUN_LIMIT,
        )?)?;
        for (r, out) in outputs.iter().enumerate() {
            for (i, (dtype, count)) in MESSAGES.into_iter().enumerate() {
                let what = format!("rank {r} of {n}: message {i} ({dtype} × {count})");
                match peer(r) {
                    Some(p) => {
                        compare_bytes(&format!("{what} from rank {p}"), &out[i], &inputs[p][i])?
                    }
                    None => compare_bytes(
                        &format!("{what}: rank {r} has no peer and must keep its poison"),
                        &out[i],
                        &inits[i],
                    )?,
                }
            }
        }
        Ok(())
    })
}
