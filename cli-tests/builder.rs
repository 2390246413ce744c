//! The builder's checked calls (issue 28, item 5): programs built with memsets and fills, gemms
//! with transposes, control flow, command buffers, async scopes and collectives with replica
//! groups run on the host (collectives SPMD on 4 host devices) against independent references
//! with fresh random data; wrong shapes, dtypes and arguments are refused at the call with a
//! `BuildError` naming the argument.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{Rng, SeedableRng};
use std::sync::Arc;
use xthunk::builder::*;
use xthunk::core::collectives::{CliqueProvider, Timeouts};
use xthunk::core::executor::ExecutorConfig;
use xthunk::core::executor::spmd::run_spmd;
use xthunk::core::host::{HostBackend, HostCliqueProvider};
use xthunk::ir::*;
use xthunk::{Backend, Device, ExecuteOptions, LoadedExecutable};

fn rng() -> rand_chacha::ChaCha8Rng {
    let seed: u64 = std::env::var("XTHUNK_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (XTHUNK_TEST_SEED={seed} replays it)");
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

fn random(n: usize, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn run(exe: Executable, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let device = HostBackend::new().device(0).unwrap();
    let loaded = LoadedExecutable::load(device, exe).unwrap();
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    loaded
        .run_with_host_data(&refs, &ExecuteOptions::default())
        .unwrap()
}

/// `t *= factor` with the standard library.
fn scale(b: &mut ExecutableBuilder, t: &Tensor, factor: f32) {
    let m = b.standard_module();
    let n = t.elements();
    b.kernel(
        &m,
        "scale_f32",
        n,
        vec![t.rw(), factor.into(), (n as i64).into()],
    );
}

fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn fills_and_memsets_run() {
    let mut r = rng();
    let v: f32 = r.random_range(-10.0..10.0);
    let k: i32 = r.random_range(-1000..1000);
    let mut b = ExecutableBuilder::new("fills");
    let f = b.output("f", DType::F32, &[9]);
    let i = b.output("i", DType::I32, &[5]);
    let m = b.output("m", DType::U16, &[3]);
    b.try_fill(&f, Scalar::F32(v)).unwrap();
    b.try_fill(&i, Scalar::I32(k)).unwrap();
    b.try_memset(&m, MemsetPattern::U16(0xBEEF)).unwrap();
    let out = run(b.build().unwrap(), &[]);
    assert_eq!(floats(&out[0]), vec![v; 9]);
    assert_eq!(out[1], k.to_le_bytes().repeat(5));
    assert_eq!(out[2], 0xBEEFu16.to_le_bytes().repeat(3));
}

#[test]
fn gemm_transposes_run() {
    let mut r = rng();
    let (m, n, k) = (4usize, 6usize, 3usize);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a = random(m * k, &mut r);
        let bm = random(k * n, &mut r);
        let mut b = ExecutableBuilder::new("gemm");
        let a_dims: [u64; 2] = if ta {
            [k as u64, m as u64]
        } else {
            [m as u64, k as u64]
        };
        let b_dims: [u64; 2] = if tb {
            [n as u64, k as u64]
        } else {
            [k as u64, n as u64]
        };
        let pa = b.parameter("a", DType::F32, &a_dims);
        let pb = b.parameter("b", DType::F32, &b_dims);
        let c = b.output("c", DType::F32, &[m as u64, n as u64]);
        b.try_gemm(&pa, &pb, &c, ta, tb, 1.0, 0.0).unwrap();
        let out = floats(&run(b.build().unwrap(), &[bytes(&a), bytes(&bm)])[0]);
        // op(x)[i][j] of a row-major matrix stored with `cols` columns.
        let at = |i: usize, j: usize| f64::from(if ta { a[j * m + i] } else { a[i * k + j] });
        let bt = |i: usize, j: usize| f64::from(if tb { bm[j * k + i] } else { bm[i * n + j] });
        let want: Vec<f64> = (0..m * n)
            .map(|ij| (0..k).map(|p| at(ij / n, p) * bt(p, ij % n)).sum())
            .collect();
        close(&out, &want, 1e-5, &format!("gemm ta={ta} tb={tb}"));
    }
}

#[test]
fn control_flow_command_buffers_and_async_scopes_run() {
    let mut r = rng();
    let x = random(16, &mut r);
    let trips: u64 = r.random_range(1..5);
    let mut b = ExecutableBuilder::new("flow");
    let px = b.parameter("x", DType::F32, &[16]);
    let pi = b.parameter("i", DType::I32, &[]);
    let y = b.output("y", DType::F32, &[16]);
    let z = b.output("z", DType::F32, &[16]);
    let w = b.output("w", DType::F32, &[16]);
    let t = b.temp(DType::F32, &[16]);
    let pred = b.temp(DType::Pred, &[]);
    b.copy(px.slice(), y.slice());
    b.copy(px.slice(), z.slice());
    b.try_while_loop(
        &pred,
        Some(trips),
        |_| Ok(()),
        |b| {
            scale(b, &y, 2.0);
            Ok(())
        },
    )
    .unwrap();
    let branches = (0..3)
        .map(|k| {
            b.block(|b| {
                scale(b, &z, (k + 2) as f32);
                Ok(())
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    b.try_conditional(&pi, branches).unwrap();
    let cb = b
        .block(|b| {
            b.copy(px.slice(), w.slice());
            scale(b, &w, -1.0);
            Ok(())
        })
        .unwrap();
    b.command_buffer(cb);
    let body = b
        .block(|b| {
            b.copy(w.slice(), t.slice());
            scale(b, &t, 0.5);
            Ok(())
        })
        .unwrap();
    let id = b.async_start(AsyncKind::Compute, body);
    b.try_async_done(id).unwrap();
    let err = b.try_async_done(id).unwrap_err();
    assert_eq!((err.call, err.arg), ("async_done", "id"), "{err}");
    b.copy(t.slice(), w.slice());
    let exe = b.build().unwrap();
    for index in [0i32, 2, 9] {
        let out = run(exe.clone(), &[bytes(&x), index.to_le_bytes().to_vec()]);
        let xs = x.iter().map(|v| f64::from(*v));
        let f = 2f64.powi(trips as i32);
        close(
            &floats(&out[0]),
            &xs.clone().map(|v| v * f).collect::<Vec<_>>(),
            1e-6,
            "while",
        );
        let kz = f64::from(index.clamp(0, 2) + 2);
        close(
            &floats(&out[1]),
            &xs.clone().map(|v| v * kz).collect::<Vec<_>>(),
            1e-6,
            "cond",
        );
        close(
            &floats(&out[2]),
            &xs.map(|v| -0.5 * v).collect::<Vec<_>>(),
            1e-6,
            "async",
        );
    }
}

#[test]
fn collectives_with_groups_run_spmd() {
    let mut r = rng();
    let n = 8u64;
    let mut b = ExecutableBuilder::new("collectives");
    let x = b.parameter("x", DType::F32, &[n]);
    let sum = b.output("sum", DType::F32, &[n]);
    let gather = b.output("gather", DType::F32, &[2 * n]);
    let rank = b.output("rank", DType::I32, &[]);
    let groups = vec![vec![0, 2], vec![1, 3]];
    let op = CollectiveOp::AllReduce { op: ReduceOp::Sum };
    b.try_collective(op, &x, &sum, &groups).unwrap();
    b.try_collective(CollectiveOp::AllGather, &x, &gather, &groups)
        .unwrap();
    b.try_rank_id(&rank).unwrap();
    let exe = b.build().unwrap();
    let xs: Vec<Vec<f32>> = (0..4).map(|_| random(n as usize, &mut r)).collect();
    let hb = HostBackend::with_devices(4);
    let devs: Vec<Arc<dyn Device>> = (0..4).map(|i| hb.device(i).unwrap()).collect();
    let t = std::time::Duration::from_secs(30);
    let cliques: Arc<dyn CliqueProvider> =
        Arc::new(HostCliqueProvider::new(devs.clone(), Timeouts::new(t / 6, t)).unwrap());
    let inputs: Vec<Vec<Vec<u8>>> = xs.iter().map(|x| vec![bytes(x)]).collect();
    let outs = run_spmd(
        &exe,
        &devs,
        cliques,
        &inputs,
        1,
        &ExecutorConfig::default(),
        &ExecuteOptions::default(),
    )
    .unwrap();
    for (r, o) in outs.iter().enumerate() {
        let g = &groups[r % 2];
        let want: Vec<f64> = (0..n as usize)
            .map(|i| g.iter().map(|&m| f64::from(xs[m as usize][i])).sum())
            .collect();
        close(
            &floats(&o.outputs[0]),
            &want,
            1e-6,
            &format!("rank {r} sum"),
        );
        let cat: Vec<f32> = g.iter().flat_map(|&m| xs[m as usize].clone()).collect();
        assert_eq!(floats(&o.outputs[1]), cat, "rank {r} gather");
        assert_eq!(o.outputs[2], (r as i32).to_le_bytes().to_vec());
    }
}

#[test]
fn wrong_arguments_are_refused_naming_the_argument() {
    let mut b = ExecutableBuilder::new("bad");
    let a = b.parameter("a", DType::F32, &[4, 3]);
    let bm = b.parameter("b", DType::F32, &[4, 2]);
    let c = b.output("c", DType::F32, &[3, 2]);
    let h = b.parameter("h", DType::F16, &[3]);
    let i16 = b.parameter("s", DType::I16, &[8]);
    let y8 = b.output("y8", DType::F32, &[8]);
    let x8 = b.parameter("x8", DType::F32, &[8]);
    let f = b.temp(DType::F32, &[]);
    let at = |e: BuildError| (e.call, e.arg);
    assert_eq!(
        at(b.try_gemm(&a, &bm, &c, false, false, 1.0, 0.0).unwrap_err()),
        ("gemm", "b")
    );
    b.try_gemm(&a, &bm, &c, true, false, 1.0, 0.0).unwrap();
    assert_eq!(
        at(b.try_gemm(&a, &bm, &c, true, true, 1.0, 0.0).unwrap_err()),
        ("gemm", "b")
    );
    assert_eq!(
        at(b.try_memset(&h, MemsetPattern::U32(1)).unwrap_err()),
        ("memset", "dst")
    );
    assert_eq!(
        at(b.try_fill(&h, Scalar::F32(1.0)).unwrap_err()),
        ("fill", "value")
    );
    let sum = CollectiveOp::AllReduce { op: ReduceOp::Sum };
    assert_eq!(
        at(b.try_collective(sum.clone(), &i16, &i16, &[]).unwrap_err()),
        ("all_reduce", "src")
    );
    assert_eq!(
        at(
            b.try_collective(sum.clone(), &x8, &y8, &[vec![0, 1], vec![1]])
                .unwrap_err()
        ),
        ("all_reduce", "groups")
    );
    let e = b
        .try_collective(CollectiveOp::AllGather, &x8, &y8, &[vec![0, 1]])
        .unwrap_err();
    assert_eq!(at(e.clone()), ("all_gather", "dst"), "{e}");
    assert!(e.to_string().contains("needs 64 bytes, dst has 32"), "{e}");
    let bc = CollectiveOp::Broadcast { root: 2 };
    assert_eq!(
        at(b.try_collective(bc, &x8, &y8, &[vec![0, 1]]).unwrap_err()),
        ("broadcast", "root")
    );
    assert_eq!(
        at(b.try_collective_permute(&x8, &y8, &[(0, 1), (2, 1)])
            .unwrap_err()),
        ("collective_permute", "pairs")
    );
    assert_eq!(at(b.try_rank_id(&y8).unwrap_err()), ("rank_id", "dst"));
    assert_eq!(
        at(b.try_while_blocks(&f, Some(1), vec![], vec![]).unwrap_err()),
        ("while", "pred")
    );
    assert_eq!(
        at(b.try_conditional(&f, vec![vec![]]).unwrap_err()),
        ("conditional", "index")
    );
    let opts = CustomCallOptions::default();
    assert_eq!(
        at(b.try_custom_call("", &[&x8], &[&y8], opts.clone())
            .unwrap_err()),
        ("custom_call", "target")
    );
    assert_eq!(
        at(b.try_custom_call("t", &[&x8], &[&y8, &y8], opts)
            .unwrap_err()),
        ("custom_call", "results")
    );
    let code =
        "extern \"C\" __global__ void k(float* y, long long n) { XT_FOR(i, n) y[i] = 1.0f; }";
    b.try_source_module("mine", code, ModuleOptions::default())
        .unwrap();
    let e = b.try_source_module("mine", code, ModuleOptions::default());
    assert_eq!(at(e.unwrap_err()), ("source_module", "name"));
    let e = b.try_source_module("other", " ", ModuleOptions::default());
    assert_eq!(at(e.unwrap_err()), ("source_module", "code"));
    assert_eq!(at(b.try_send(&i16, 1).unwrap_err()), ("send", "src"));
    assert_eq!(at(b.try_recv(&i16, 1).unwrap_err()), ("recv", "dst"));
    let rows = b.parameter("rows", DType::F32, &[4, 2]);
    let out3 = b.output("out3", DType::F32, &[4, 3]);
    let out2 = b.output("out2", DType::F32, &[4, 2]);
    let i64s = b.parameter("idx", DType::I64, &[2]);
    let i32s = b.parameter("idx32", DType::I32, &[2]);
    let e = b.try_ragged_all_to_all(&rows, &out3, [&i64s; 4], &[]);
    assert_eq!(at(e.unwrap_err()), ("ragged_all_to_all", "output"));
    let e = b.try_ragged_all_to_all(&rows, &out2, [&i64s, &i64s, &i32s, &i64s], &[]);
    assert_eq!(at(e.unwrap_err()), ("ragged_all_to_all", "output_offsets"));
    let e = b.try_ragged_all_to_all(&rows, &out2, [&i64s; 4], &[vec![0, 1, 2]]);
    assert_eq!(at(e.unwrap_err()), ("ragged_all_to_all", "input_offsets"));
    b.try_ragged_all_to_all(&rows, &out2, [&i64s; 4], &[vec![0, 1], vec![2, 3]])
        .unwrap();
}
