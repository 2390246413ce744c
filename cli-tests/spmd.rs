//! SPMD runs on several host devices: the three collective examples against independent
//! references, `xthunk run --devices 4` (with per-rank `--input` patterns), a rank that
//! never reaches a collective, and a stuck-but-alive rank named with its position.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/build_collectives.rs"]
#[allow(dead_code)]
mod build_collectives;
mod shards;
mod stuck;

use build_collectives::*;
use rand::{Rng, SeedableRng};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk::builder::*;
use xthunk::core::collectives::{CliqueProvider, Timeouts};
use xthunk::core::executor::spmd::{RankOutput, run_spmd};
use xthunk::core::executor::{CollectiveContext, ExecutorConfig};
use xthunk::core::host::{HostBackend, HostCliqueProvider};
use xthunk::ir::*;
use xthunk::{Backend, Device, DeviceMemory, ExecuteOptions, LoadedExecutable};

fn devices(n: usize) -> Vec<Arc<dyn Device>> {
    let b = HostBackend::with_devices(n);
    (0..n).map(|i| b.device(i).unwrap()).collect()
}

fn run(
    exe: &Executable,
    inputs: &[Vec<Vec<u8>>],
    timeouts: Timeouts,
) -> xthunk::Result<Vec<RankOutput>> {
    let devs = devices(inputs.len());
    let cliques: Arc<dyn CliqueProvider> =
        Arc::new(HostCliqueProvider::new(devs.clone(), timeouts)?);
    run_spmd(
        exe,
        &devs,
        cliques,
        inputs,
        1,
        &ExecutorConfig::default(),
        &ExecuteOptions::default(),
    )
}

fn random(n: u64, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<f32> {
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

#[test]
fn checked_in_examples_match_the_builder() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for (file, exe) in [
        ("dp_step.txtpb", build_dp_step().unwrap()),
        ("permute_ring.txtpb", build_permute_ring().unwrap()),
        ("exchange.txtpb", build_exchange().unwrap()),
    ] {
        let on_disk = xthunk::proto::load_file(root.join(file)).unwrap();
        assert_eq!(
            on_disk, exe,
            "{file} differs from build_collectives.rs: regenerate it"
        );
    }
}

#[test]
fn dp_step_matches_an_f64_reference() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let ranks = RANKS as usize;
    let mut xs = vec![];
    let mut ys = vec![];
    let mut inputs = vec![];
    for _ in 0..ranks {
        let x = random(BATCH * FEATURES, &mut rng);
        let y = random(BATCH * TARGETS, &mut rng);
        // Every rank gets different initial weights: only rank 0's may be used (broadcast).
        let w0 = random(FEATURES * TARGETS, &mut rng);
        inputs.push(vec![bytes(&x), bytes(&y), bytes(&w0)]);
        xs.push(x);
        ys.push(y);
    }
    let w0: Vec<f64> = floats(&inputs[0][2]).iter().map(|v| *v as f64).collect();
    let (b, f, t) = (BATCH as usize, FEATURES as usize, TARGETS as usize);
    let mut grad = vec![0f64; f * t];
    for r in 0..ranks {
        for i in 0..b {
            for j in 0..t {
                let mut p = 0f64;
                for k in 0..f {
                    p += xs[r][i * f + k] as f64 * w0[k * t + j];
                }
                let d = p - ys[r][i * t + j] as f64;
                for k in 0..f {
                    grad[k * t + j] += xs[r][i * f + k] as f64 * d;
                }
            }
        }
    }
    let scale = LR as f64 / (BATCH as f64 * RANKS as f64);
    let w_new: Vec<f64> = w0.iter().zip(&grad).map(|(w, g)| w - scale * g).collect();
    let out = run(&build_dp_step().unwrap(), &inputs, Timeouts::default()).unwrap();
    for (r, o) in out.iter().enumerate() {
        let w = floats(&o.outputs[0]);
        let g = floats(&o.outputs[1]);
        for i in 0..f * t {
            // f32 sums of up to 4·32·64 products of magnitude ≤ ~64: 1e-3 relative bounds
            // the rounding comfortably; a wrong reduction is off by whole terms.
            assert!(
                (g[i] as f64 - grad[i]).abs() <= 1e-3 * (1.0 + grad[i].abs()),
                "rank {r} grad[{i}] = {}, reference {}",
                g[i],
                grad[i]
            );
            assert!(
                (w[i] as f64 - w_new[i]).abs() <= 1e-5 * (1.0 + w_new[i].abs()),
                "rank {r} w[{i}] = {}, reference {}",
                w[i],
                w_new[i]
            );
        }
        assert_eq!(
            o.outputs[0], out[0].outputs[0],
            "rank {r}'s weights differ from rank 0's"
        );
    }
}

#[test]
fn permute_ring_moves_data_and_ids_one_step() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
    let ranks = RANKS as usize;
    let xs: Vec<Vec<f32>> = (0..ranks).map(|_| random(RING, &mut rng)).collect();
    let inputs: Vec<Vec<Vec<u8>>> = xs.iter().map(|x| vec![bytes(x)]).collect();
    let out = run(&build_permute_ring().unwrap(), &inputs, Timeouts::default()).unwrap();
    for (r, o) in out.iter().enumerate() {
        let from = (r + ranks - 1) % ranks;
        assert_eq!(floats(&o.outputs[0]), xs[from], "rank {r}");
        assert_eq!(floats(&o.outputs[1]), vec![from as f32], "rank {r}");
    }
}

/// Runs `exe` on one host device per rank like `run_spmd`, but with every output buffer
/// filled with 0xFF bytes (NaN for floats) before the execution, so that an element no thunk
/// writes cannot pass for a computed one. The outputs of each rank, as f32.
fn run_poisoned(exe: &Executable, inputs: &[Vec<Vec<u8>>]) -> Vec<Vec<Vec<f32>>> {
    let world = inputs.len();
    let devs = devices(world);
    let cliques: Arc<dyn CliqueProvider> =
        Arc::new(HostCliqueProvider::new(devs.clone(), Timeouts::default()).unwrap());
    std::thread::scope(|scope| {
        let handles: Vec<_> = devs
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(rank, (dev, rank_inputs))| {
                let cliques = cliques.clone();
                scope.spawn(move || {
                    let loaded = LoadedExecutable::load(dev.clone(), exe.clone()).unwrap();
                    let params = loaded.allocate_parameters().unwrap();
                    for (p, bytes) in params.iter().zip(rank_inputs) {
                        dev.copy_from_host(bytes, p.ptr()).unwrap();
                    }
                    let outputs = loaded.allocate_outputs().unwrap();
                    for o in &outputs {
                        dev.copy_from_host(&vec![0xFF; o.size() as usize], o.ptr())
                            .unwrap();
                    }
                    let opts = ExecuteOptions {
                        collectives: Some(CollectiveContext {
                            rank: rank as u32,
                            world: world as u32,
                            cliques,
                        }),
                        ..Default::default()
                    };
                    let pr: Vec<&dyn DeviceMemory> =
                        params.iter().map(|b| b.as_ref() as _).collect();
                    let or: Vec<&dyn DeviceMemory> =
                        outputs.iter().map(|b| b.as_ref() as _).collect();
                    loaded
                        .execute(&pr, &or, &opts)
                        .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
                    outputs
                        .iter()
                        .map(|o| {
                            let mut v = vec![0u8; o.size() as usize];
                            dev.copy_to_host(o.ptr(), &mut v).unwrap();
                            floats(&v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Fresh random inputs of `exchange` for every rank: `x`, `w`, `z`.
fn exchange_inputs(seed: u64) -> Vec<[Vec<f32>; 3]> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..RANKS)
        .map(|_| {
            [
                random(GATHER, &mut rng),
                random(RANKS as u64 * GATHER, &mut rng),
                random(RANKS as u64 * A2A_BLOCK, &mut rng),
            ]
        })
        .collect()
}

/// Checks every output of every rank of `exchange` (`outputs[rank]`: gathered, scattered,
/// ring, exchanged, pair_sum) against an f64 reference computed from the inputs alone.
fn check_exchange(inputs: &[[Vec<f32>; 3]], outputs: &[Vec<Vec<f32>>]) {
    let ranks = RANKS as usize;
    let (a, blk) = (GATHER as usize, A2A_BLOCK as usize);
    assert_eq!(outputs.len(), ranks);
    let x = |k: usize, i: usize| inputs[k][0][i] as f64;
    let w = |k: usize, i: usize| inputs[k][1][i] as f64;
    let z = |k: usize, i: usize| inputs[k][2][i] as f64;
    // prod on rank k: element i of the transposed gather is x of rank i % 4 at i / 4.
    let prod = |k: usize, i: usize| x(i % ranks, i / ranks) * w(k, i);
    let scattered = |r: usize, j: usize| -> f64 { (0..ranks).map(|k| prod(k, r * a + j)).sum() };
    let exchanged = |r: usize, i: usize| z(i / blk, r * blk + i % blk);
    let partner = |r: usize| {
        let g = PAIR_GROUPS
            .iter()
            .find(|g| g.contains(&(r as u32)))
            .unwrap();
        (g[0] + g[1]) as usize - r
    };
    // Sums of 4 products of magnitude < 1, or of 2 such sums, rounded in f32 in any order:
    // 1e-5 bounds the rounding; a wrong block or peer is off by whole terms.
    let close = |got: f32, want: f64| (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
    for (r, o) in outputs.iter().enumerate() {
        assert_eq!(o.len(), 5, "rank {r}: outputs");
        let [gathered, scat, ring, exch, pair] = [&o[0], &o[1], &o[2], &o[3], &o[4]];
        assert_eq!(gathered.len(), ranks * a, "rank {r}: gathered");
        for i in 0..ranks * a {
            assert_eq!(
                gathered[i],
                inputs[i / a][0][i % a],
                "rank {r} gathered[{i}]"
            );
        }
        assert_eq!(
            (scat.len(), ring.len()),
            (a, a),
            "rank {r}: scattered, ring"
        );
        let from = (r + ranks - 1) % ranks;
        for j in 0..a {
            let want = scattered(r, j);
            assert!(
                close(scat[j], want),
                "rank {r} scattered[{j}] = {}, reference {want}",
                scat[j]
            );
            let want = scattered(from, j) + scattered(r, j);
            assert!(
                close(ring[j], want),
                "rank {r} ring[{j}] = {}, reference {want}",
                ring[j]
            );
            // The received block is exactly rank r−1's scattered output.
            assert_eq!(
                ring[j],
                outputs[from][1][j] + scat[j],
                "rank {r} ring[{j}]: not rank {from}'s scattered + its own"
            );
        }
        assert_eq!(exch.len(), ranks * blk, "rank {r}: exchanged");
        assert_eq!(pair.len(), ranks * blk, "rank {r}: pair_sum");
        for i in 0..ranks * blk {
            assert_eq!(exch[i] as f64, exchanged(r, i), "rank {r} exchanged[{i}]");
            let want = exchanged(r, i) + exchanged(partner(r), i);
            assert!(
                close(pair[i], want),
                "rank {r} pair_sum[{i}] = {}, reference {want}",
                pair[i]
            );
        }
    }
}

#[test]
fn exchange_matches_an_f64_reference() {
    let data = exchange_inputs(13);
    let inputs: Vec<Vec<Vec<u8>>> = data
        .iter()
        .map(|d| d.iter().map(|v| bytes(v)).collect())
        .collect();
    let out = run_poisoned(&build_exchange().unwrap(), &inputs);
    check_exchange(&data, &out);
}

/// Rank 0 reaches an all-reduce that the other ranks skip (a conditional on the rank id):
/// rank 0 fails at the terminate timeout naming the missing ranks; nothing hangs.
#[test]
fn a_rank_that_never_arrives_is_named_at_the_timeout() {
    let mut b = ExecutableBuilder::new("missing_rank");
    let x = b.parameter("x", DType::F32, &[16]);
    let y = b.output("y", DType::F32, &[16]);
    let id = b.temp(DType::I32, &[1]);
    b.push(Thunk::RankId(RankIdThunk { dst: id.slice() }));
    b.push(Thunk::Conditional(ConditionalThunk {
        index: id.slice(),
        index_type: DType::I32,
        branches: vec![
            vec![Thunk::Collective(CollectiveThunk {
                op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                src: x.slice(),
                dst: y.slice(),
                dtype: DType::F32,
                groups: vec![],
            })],
            vec![],
        ],
    }));
    let exe = b.build().unwrap();
    let inputs: Vec<Vec<Vec<u8>>> = (0..3).map(|_| vec![vec![0u8; 64]]).collect();
    let start = Instant::now();
    let err = run(
        &exe,
        &inputs,
        Timeouts::new(Duration::from_millis(100), Duration::from_millis(500)),
    )
    .unwrap_err();
    let took = start.elapsed();
    let msg = err.to_string();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(msg.contains("rank 0"), "{msg}");
    assert!(
        msg.contains("did not arrive") && msg.contains('1') && msg.contains('2'),
        "{msg}"
    );
}

fn xthunk(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "xthunk {args:?}: {out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    out
}

/// The fingerprints of output `name` of every rank in `run`'s report.
fn fingerprints<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines()
        .filter(|l| l.contains(&format!(" output {name}: ")))
        .filter_map(|l| l.split("fnv1a=").nth(1))
        .collect()
}

#[test]
fn run_devices_4_on_every_example() {
    let out = xthunk(&[
        "run",
        "--backend",
        "host",
        "--devices",
        "4",
        "examples/dp_step.txtpb",
    ]);
    let hashes = fingerprints(&out, "w");
    assert_eq!(hashes.len(), 4, "{out}");
    assert!(
        hashes.iter().all(|h| *h == hashes[0]),
        "weights differ across ranks:\n{out}"
    );
    let out = xthunk(&[
        "run",
        "--backend",
        "host",
        "--devices",
        "4",
        "examples/permute_ring.txtpb",
    ]);
    for r in 0..4 {
        let from = (r + 3) % 4;
        assert!(
            out.contains(&format!("rank {r} output from_rank: f32[1]  sum={from}")),
            "{out}"
        );
    }
    // Random inputs per rank: the gathered rows are the same on every rank, the pair sums
    // the same within a replica group, the other outputs differ between ranks.
    let out = xthunk(&[
        "run",
        "--backend",
        "host",
        "--devices",
        "4",
        "examples/exchange.txtpb",
    ]);
    let gathered = fingerprints(&out, "gathered");
    assert_eq!(gathered.len(), 4, "{out}");
    assert!(gathered.iter().all(|h| *h == gathered[0]), "{out}");
    for name in ["scattered", "ring", "exchanged"] {
        let mut h = fingerprints(&out, name);
        assert_eq!(h.len(), 4, "{name}: {out}");
        h.sort_unstable();
        h.dedup();
        assert_eq!(h.len(), 4, "{name} is the same on two ranks: {out}");
    }
    let pair = fingerprints(&out, "pair_sum");
    assert_eq!(pair.len(), 4, "{out}");
    for [a, b] in PAIR_GROUPS {
        assert_eq!(pair[a as usize], pair[b as usize], "group [{a},{b}]: {out}");
    }
    assert_ne!(pair[0], pair[1], "{out}");
}

/// `xthunk run ARGS` in the repository; its status, stdout and stderr.
fn xthunk_output(args: &[String]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (o.status.code(), out, err)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("xthunk-spmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spmd_args(program: &str, extra: &[String]) -> Vec<String> {
    let mut v: Vec<String> = ["run", "--backend", "host", "--devices", "4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend_from_slice(extra);
    v.push(program.to_string());
    v
}

/// `--input x=DIR/x{rank}.npy`: each rank reads its own shard; dp_step's all-reduced gradient
/// and weights equal an f64 reference over all the shards, and permute_ring's rank r holds
/// the shard of rank r−1.
#[test]
fn run_devices_4_reads_a_file_per_rank_from_a_pattern() {
    let dir = scratch("shards");
    let data = shards::Shards::new(21);
    data.write(&dir, &[0, 1, 2, 3]);
    let out_dir = dir.join("out");
    let mut extra = shards::Shards::inputs(&dir);
    extra.extend(["--output-dir".to_string(), out_dir.display().to_string()]);
    let (code, out, err) = xthunk_output(&spmd_args("examples/dp_step.txtpb", &extra));
    assert_eq!(code, Some(0), "{out}\n{err}");
    data.check(&out_dir);

    let ring: Vec<Vec<f32>> = (0..4)
        .map(|r| (0..RING).map(|i| (r * 1000 + i) as f32).collect())
        .collect();
    for (r, x) in ring.iter().enumerate() {
        shards::write_f32(&dir.join(format!("ring{r}.npy")), &[RING], x);
    }
    let ring_out = dir.join("ring-out");
    let extra = vec![
        "--input".to_string(),
        format!("x={}/ring{{rank}}.npy", dir.display()),
        "--output-dir".to_string(),
        ring_out.display().to_string(),
    ];
    let (code, out, err) = xthunk_output(&spmd_args("examples/permute_ring.txtpb", &extra));
    assert_eq!(code, Some(0), "{out}\n{err}");
    for r in 0..4 {
        let got = shards::read_f32(&ring_out.join(format!("rank{r}/shifted.npy")));
        assert_eq!(got, ring[(r + 3) % 4], "rank {r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `xthunk run --devices 4 examples/exchange.txtpb` with per-rank input files: every output
/// file of every rank equals the f64 reference.
#[test]
fn run_devices_4_on_exchange_matches_the_reference() {
    let dir = scratch("exchange");
    let data = exchange_inputs(23);
    let shapes = [
        vec![GATHER],
        vec![RANKS as u64 * GATHER],
        vec![RANKS as u64 * A2A_BLOCK],
    ];
    let names = ["x", "w", "z"];
    for (r, d) in data.iter().enumerate() {
        for ((name, dims), v) in names.iter().zip(&shapes).zip(d) {
            shards::write_f32(&dir.join(format!("{name}{r}.npy")), dims, v);
        }
    }
    let out_dir = dir.join("out");
    let mut extra = vec![];
    for name in names {
        extra.push("--input".to_string());
        extra.push(format!("{name}={}/{name}{{rank}}.npy", dir.display()));
    }
    extra.extend(["--output-dir".to_string(), out_dir.display().to_string()]);
    let (code, out, err) = xthunk_output(&spmd_args("examples/exchange.txtpb", &extra));
    assert_eq!(code, Some(0), "{out}\n{err}");
    let outputs: Vec<Vec<Vec<f32>>> = (0..RANKS)
        .map(|r| {
            ["gathered", "scattered", "ring", "exchanged", "pair_sum"]
                .iter()
                .map(|n| shards::read_f32(&out_dir.join(format!("rank{r}/{n}.npy"))))
                .collect()
        })
        .collect();
    check_exchange(&data, &outputs);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pattern whose file is missing for one rank, or does not fit the parameter for another,
/// fails before any device is touched, naming the rank, its file and the pattern.
#[test]
fn a_per_rank_input_that_is_missing_or_wrong_names_its_rank() {
    let dir = scratch("bad-shards");
    let data = shards::Shards::new(22);
    data.write(&dir, &[0, 1, 3]);
    let (code, out, err) = xthunk_output(&spmd_args(
        "examples/dp_step.txtpb",
        &shards::Shards::inputs(&dir),
    ));
    assert_ne!(code, Some(0), "{out}\n{err}");
    let missing = format!("{}/x2.npy", dir.display());
    assert!(
        err.contains("rank 2") && err.contains(&missing) && err.contains("x{rank}.npy"),
        "{err}"
    );
    assert!(!out.contains("output"), "{out}");

    // Rank 2's y has the shape of an x.
    data.write(&dir, &[2]);
    shards::write_f32(&dir.join("y2.npy"), &[32, 64], &data.x[2]);
    let (code, out, err) = xthunk_output(&spmd_args(
        "examples/dp_step.txtpb",
        &shards::Shards::inputs(&dir),
    ));
    assert_ne!(code, Some(0), "{out}\n{err}");
    assert!(
        err.contains("rank 2") && err.contains("y2.npy") && err.contains("shape [32,64]"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rank 3 is busy (alive) before the second all-reduce that ranks 0–2 time out in
/// (`run --devices 4 --collective-timeout 0.5`): the message names rank 3 as stuck after the
/// first all-reduce and the others as waiting in the second, with their thunk paths and
/// sequence numbers.
#[test]
fn a_stuck_but_alive_rank_is_named_with_its_position_at_the_timeout() {
    let dir = scratch("stuck");
    let file = stuck::write_stuck_rank(&dir);
    let start = Instant::now();
    let (code, out, err) = xthunk_output(&spmd_args(
        &file.display().to_string(),
        &["--collective-timeout".to_string(), "0.5".to_string()],
    ));
    let took = start.elapsed();
    assert_ne!(code, Some(0), "{out}\n{err}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(err.contains("did not arrive"), "{err}");
    stuck::check_positions(&err);
    let _ = std::fs::remove_dir_all(&dir);
}
