//! Sharded programs: Shardy's manual computations and StableHLO's collectives imported,
//! lowered and run on 4 host devices (`run_spmd`, one thread per rank), every rank given the
//! GLOBAL inputs and giving the GLOBAL outputs, against references computed here; and the
//! refusals (automatic partitioning, partial manual axes, ...) with their positions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//!
//! Inputs are fresh random small integers held in f32, so every sum is exact in any order
//! and the comparisons are exact.

use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::collectives::{CliqueProvider, Timeouts};
use xthunk_core::executor::spmd::run_spmd;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::Thunk;
use xthunk_stablehlo::import::import_text;

const N: usize = 4;

/// A module over a 1-D mesh `x` of 4 (or the given mesh), `body` inside `main`.
fn module(mesh: &str, main: &str) -> String {
    format!(
        "module @m attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{\n  sdy.mesh @mesh = <[{mesh}]>\n{main}\n}}\n"
    )
}

/// `main(%g: GLOBAL) -> OUT` as one manual computation with `body` on `%l: LOCAL`.
fn manual(
    global: &str,
    out: &str,
    ins: &str,
    outs: &str,
    local: &str,
    res: &str,
    body: &str,
) -> String {
    format!(
        "  func.func public @main(%g: tensor<{global}>) -> tensor<{out}> {{\n    %0 = sdy.manual_computation(%g) in_shardings=[<@mesh, {ins}>] out_shardings=[<@mesh, {outs}>] manual_axes={{\"x\"}} (%l: tensor<{local}>) {{\n{body}\n      sdy.return %r : tensor<{res}>\n    }} : (tensor<{global}>) -> tensor<{out}>\n    return %0 : tensor<{out}>\n  }}"
    )
}

const ADD: &str = "({\n      ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n        %s = stablehlo.add %a, %b : tensor<f32>\n        stablehlo.return %s : tensor<f32>\n      })";

fn random(n: usize) -> Vec<f32> {
    let mut r = rand::rng();
    (0..n).map(|_| r.random_range(-50i32..50) as f32).collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs `text` on 4 host ranks, each given `input`; every rank's output 0, poisoned first
/// by the executor's own zeroing aside (outputs are written whole).
fn run4(text: &str, input: &[f32]) -> Vec<Vec<f32>> {
    let imp = import_text(text).unwrap();
    let low = xthunk_tensor::lower::lower(&imp.graph).unwrap();
    let b = HostBackend::with_devices(N);
    let devs: Vec<Arc<dyn Device>> = (0..N).map(|i| b.device(i).unwrap()).collect();
    let t = Timeouts::new(Duration::from_secs(5), Duration::from_secs(30));
    let cliques: Arc<dyn CliqueProvider> =
        Arc::new(HostCliqueProvider::new(devs.clone(), t).unwrap());
    let inputs = vec![vec![bytes(input)]; N];
    let out = run_spmd(
        &low.executable,
        &devs,
        cliques,
        &inputs,
        1,
        &ExecutorConfig::default(),
        &ExecuteOptions::default(),
    )
    .unwrap();
    out.iter().map(|r| floats(&r.outputs[0])).collect()
}

/// Every rank gave `want`.
fn all_ranks(got: &[Vec<f32>], want: &[f32], what: &str) {
    for (rank, g) in got.iter().enumerate() {
        assert_eq!(g, want, "{what}: rank {rank}");
    }
}

#[test]
fn psum_over_row_shards_gives_the_replicated_sum() {
    // 8x3 global, rows split over 4 ranks: each holds 2x3; the sum of the 4 shards.
    let body = format!(
        "      %r = \"stablehlo.all_reduce\"(%l) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}}> {ADD} : (tensor<2x3xf32>) -> tensor<2x3xf32>"
    );
    let text = module(
        "\"x\"=4",
        &manual(
            "8x3xf32",
            "2x3xf32",
            "[{\"x\"}, {}]",
            "[{}, {}]",
            "2x3xf32",
            "2x3xf32",
            &body,
        ),
    );
    let x = random(24);
    let want: Vec<f32> = (0..6).map(|i| (0..N).map(|r| x[r * 6 + i]).sum()).collect();
    all_ranks(&run4(&text, &x), &want, "psum");
}

#[test]
fn all_gather_along_columns_and_the_global_result() {
    // Rows split; each rank gathers its 2x3 shard along dim 1 → 2x12; out sharded by rows:
    // global 8x12, row block r = [shard 0 rows of r.. ] i.e. row i of block r is the
    // concatenation over ranks q of shard q's row i.
    let body = "      %r = \"stablehlo.all_gather\"(%l) <{all_gather_dim = 1 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<2x3xf32>) -> tensor<2x12xf32>";
    let text = module(
        "\"x\"=4",
        &manual(
            "8x3xf32",
            "8x12xf32",
            "[{\"x\"}, {}]",
            "[{\"x\"}, {}]",
            "2x3xf32",
            "2x12xf32",
            body,
        ),
    );
    let x = random(24);
    let mut want = vec![];
    for _r in 0..N {
        for i in 0..2 {
            for q in 0..N {
                want.extend_from_slice(&x[(q * 2 + i) * 3..(q * 2 + i) * 3 + 3]);
            }
        }
    }
    all_ranks(&run4(&text, &x), &want, "all_gather");
}

#[test]
fn reduce_scatter_all_to_all_permute_and_partition_id() {
    // Columns split (8x16 → 8x4 per rank); reduce_scatter along dim 1: rank r gets column r
    // of the sum of the shards; out sharded by columns: global 8x4, column r.
    let body = format!(
        "      %r = \"stablehlo.reduce_scatter\"(%l) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 1 : i64, use_global_device_ids}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x1xf32>"
    );
    let text = module(
        "\"x\"=4",
        &manual(
            "8x16xf32",
            "8x4xf32",
            "[{}, {\"x\"}]",
            "[{}, {\"x\"}]",
            "8x4xf32",
            "8x1xf32",
            &body,
        ),
    );
    let x = random(128);
    let want: Vec<f32> = (0..8)
        .flat_map(|i| {
            let x = &x;
            (0..N).map(move |r| (0..N).map(|q| x[i * 16 + q * 4 + r]).sum::<f32>())
        })
        .collect();
    all_ranks(&run4(&text, &x), &want, "reduce_scatter");

    // all_to_all: rows split (8x8 → 2x8), split dim 1 in 4, concat dim 0 → 8x2 per rank;
    // global 32x2: block r rows 2q..2q+2 = shard q's columns 2r..2r+2.
    let body = "      %r = \"stablehlo.all_to_all\"(%l) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 1 : i64}> : (tensor<2x8xf32>) -> tensor<8x2xf32>";
    let text = module(
        "\"x\"=4",
        &manual(
            "8x8xf32",
            "32x2xf32",
            "[{\"x\"}, {}]",
            "[{\"x\"}, {}]",
            "2x8xf32",
            "8x2xf32",
            body,
        ),
    );
    let x = random(64);
    let mut want = vec![];
    for r in 0..N {
        for q in 0..N {
            for i in 0..2 {
                want.extend_from_slice(&x[(q * 2 + i) * 8 + 2 * r..(q * 2 + i) * 8 + 2 * r + 2]);
            }
        }
    }
    all_ranks(&run4(&text, &x), &want, "all_to_all");

    // collective_permute 0→2, 3→1 (ranks 0 and 3 receive nothing: zeros), plus partition_id.
    let body = "      %p = \"stablehlo.collective_permute\"(%l) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 2], [3, 1]]> : tensor<2x2xi64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>\n      %id = stablehlo.partition_id : tensor<ui32>\n      %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>\n      %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n      %r = stablehlo.add %p, %b : tensor<2x3xf32>";
    let text = module(
        "\"x\"=4",
        &manual(
            "8x3xf32",
            "8x3xf32",
            "[{\"x\"}, {}]",
            "[{\"x\"}, {}]",
            "2x3xf32",
            "2x3xf32",
            body,
        ),
    );
    let x = random(24);
    let mut want = vec![];
    for r in 0..N {
        let from = match r {
            2 => Some(0),
            1 => Some(3),
            _ => None,
        };
        for k in 0..6 {
            want.push(from.map_or(0.0, |q| x[q * 6 + k]) + r as f32);
        }
    }
    all_ranks(&run4(&text, &x), &want, "permute + partition_id");
}

#[test]
fn a_two_dimensional_mesh_splits_and_gathers_by_coordinates() {
    // Mesh a=2 × b=2; 4x6 global split [{"a"}, {"b"}] → 2x3; psum over b (groups [0,1],[2,3]);
    // out [{"a"}, {}]: global 4x3, row block a = sum over b of shard (a, b).
    let body = format!(
        "      %r = \"stablehlo.all_reduce\"(%l) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, use_global_device_ids}}> {ADD} : (tensor<2x3xf32>) -> tensor<2x3xf32>"
    );
    let main = manual(
        "4x6xf32",
        "4x3xf32",
        "[{\"a\"}, {\"b\"}]",
        "[{\"a\"}, {}]",
        "2x3xf32",
        "2x3xf32",
        &body,
    )
    .replace("manual_axes={\"x\"}", "manual_axes={\"a\", \"b\"}");
    let text = module("\"a\"=2, \"b\"=2", &main);
    let x = random(24);
    let mut want = vec![];
    for a in 0..2 {
        for i in 0..2 {
            for j in 0..3 {
                want.push((0..2).map(|b| x[(a * 2 + i) * 6 + b * 3 + j]).sum());
            }
        }
    }
    all_ranks(&run4(&text, &x), &want, "2-D mesh");
}

#[test]
fn collectives_lower_to_the_irs_thunks_with_global_groups() {
    // Cross-replica groups (no channel) in a program of 2 replicas × 2 partitions: replica
    // groups [[0, 1]] are one group per partition: ranks {0, 2} and {1, 3}.
    let text = format!(
        "module attributes {{mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 2 : i32}} {{\n  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{\n    %r = \"stablehlo.all_reduce\"(%a) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {ADD} : (tensor<4xf32>) -> tensor<4xf32>\n    return %r : tensor<4xf32>\n  }}\n}}\n"
    );
    let imp = import_text(&text).unwrap();
    let low = xthunk_tensor::lower::lower(&imp.graph).unwrap();
    let groups: Vec<_> = low
        .executable
        .entry
        .iter()
        .filter_map(|t| match t {
            Thunk::Collective(c) => Some(c.groups.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(groups, vec![vec![vec![0, 2], vec![1, 3]]]);
}

fn refusal(text: &str) -> String {
    import_text(text).expect_err("refused").to_string()
}

#[test]
fn what_needs_an_automatic_partitioner_is_refused() {
    // A sharded parameter and no manual computation.
    let auto = "module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n  sdy.mesh @mesh = <[\"x\"=4]>\n  func.func public @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}]>}) -> tensor<8xf32> {\n    %0 = stablehlo.add %a, %a : tensor<8xf32>\n    return %0 : tensor<8xf32>\n  }\n}\n";
    let e = refusal(auto);
    assert!(e.contains("automatic partitioner"), "{e}");
    // Partial manual axes.
    let body = "      %r = stablehlo.negate %l : tensor<4x3xf32>";
    let main = manual(
        "8x3xf32",
        "8x3xf32",
        "[{\"a\"}, {}]",
        "[{\"a\"}, {}]",
        "4x3xf32",
        "4x3xf32",
        body,
    )
    .replace("manual_axes={\"x\"}", "manual_axes={\"a\"}");
    let e = refusal(&module("\"a\"=2, \"b\"=2", &main));
    assert!(
        e.contains("not manual") && e.contains("automatic partitioner"),
        "{e}"
    );
    assert!(e.starts_with("4:"), "{e}");
    // A sharded op result outside a manual computation.
    let op_sharding = "module @m attributes {mhlo.num_partitions = 4 : i32} {\n  sdy.mesh @mesh = <[\"x\"=4]>\n  func.func public @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n    %0 = stablehlo.add %a, %a {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{\"x\"}]>]>} : tensor<8xf32>\n    return %0 : tensor<8xf32>\n  }\n}\n";
    let e = refusal(op_sharding);
    assert!(
        e.starts_with("4:5:") && e.contains("automatic partitioner"),
        "{e}"
    );
    // A sharding constraint outside a manual computation.
    let constraint = "module @m attributes {mhlo.num_partitions = 4 : i32} {\n  sdy.mesh @mesh = <[\"x\"=4]>\n  func.func public @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n    %0 = sdy.sharding_constraint %a <@mesh, [{\"x\"}]> : tensor<8xf32>\n    return %0 : tensor<8xf32>\n  }\n}\n";
    let e = refusal(constraint);
    assert!(
        e.starts_with("4:") && e.contains("automatic partitioner"),
        "{e}"
    );
    // GSPMD's form: a tiled `@Sharding` no full-to-shard consumes (what `jax.jit` with
    // in_shardings gives with Shardy off), a full-to-shard with no sharding before it, a
    // transposed device order.
    let gspmd = |body: &str| {
        format!(
            "module @m attributes {{mhlo.num_partitions = 4 : i32}} {{\n  func.func public @main(%a: tensor<8xf32>) -> tensor<8xf32> {{\n{body}\n  }}\n}}\n"
        )
    };
    let e = refusal(&gspmd(
        "    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = \"{devices=[4]<=[4]}\"} : (tensor<8xf32>) -> tensor<8xf32>\n    %1 = stablehlo.add %0, %0 : tensor<8xf32>\n    return %1 : tensor<8xf32>",
    ));
    assert!(
        e.starts_with("3:5:") && e.contains("automatic partitioner"),
        "{e}"
    );
    let e = refusal(&gspmd(
        "    %0 = stablehlo.custom_call @SPMDFullToShardShape(%a) {mhlo.sharding = \"{manual}\"} : (tensor<8xf32>) -> tensor<2xf32>\n    %1 = stablehlo.custom_call @SPMDShardToFullShape(%0) {mhlo.sharding = \"{devices=[4]<=[4]}\"} : (tensor<2xf32>) -> tensor<8xf32>\n    return %1 : tensor<8xf32>",
    ));
    assert!(
        e.starts_with("3:5:") && e.contains("no tiled `@Sharding`"),
        "{e}"
    );
    let e = refusal(&gspmd(
        "    %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = \"{devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}\"} : (tensor<8xf32>) -> tensor<8xf32>\n    return %0 : tensor<8xf32>",
    ));
    assert!(e.starts_with("3:5:") && e.contains("device order"), "{e}");
}

#[test]
fn collectives_xthunk_cannot_express_are_refused() {
    let region = |op: &str, ty: &str| {
        format!(
            "module attributes {{mhlo.num_partitions = 4 : i32}} {{\n  func.func @main(%a: tensor<4x{ty}>) -> tensor<4x{ty}> {{\n    %r = \"stablehlo.all_reduce\"(%a) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}}> ({{\n      ^bb0(%x: tensor<{ty}>, %y: tensor<{ty}>):\n        %s = {op} %x, %y : tensor<{ty}>\n        stablehlo.return %s : tensor<{ty}>\n      }}) : (tensor<4x{ty}>) -> tensor<4x{ty}>\n    return %r : tensor<4x{ty}>\n  }}\n}}\n"
        )
    };
    let e = refusal(&region("stablehlo.subtract", "f32"));
    assert!(e.starts_with("3:") && e.contains("reduction region"), "{e}");
    let e = refusal(&region("stablehlo.add", "i16"));
    assert!(e.contains("not a collective element type"), "{e}");
    // An id outside the program's ranks.
    let text = region("stablehlo.add", "f32").replace("[[0, 1, 2, 3]]", "[[0, 1, 2, 7]]");
    let e = refusal(&text);
    assert!(e.contains("id 7"), "{e}");
    // An all_gather's group order places the blocks: an order xthunk's groups lack.
    let gather = "module attributes {mhlo.num_partitions = 4 : i32} {\n  func.func @main(%a: tensor<2xf32>) -> tensor<8xf32> {\n    %r = \"stablehlo.all_gather\"(%a) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[3, 2, 1, 0]]> : tensor<1x4xi64>, use_global_device_ids}> : (tensor<2xf32>) -> tensor<8xf32>\n    return %r : tensor<8xf32>\n  }\n}\n";
    let e = refusal(gather);
    assert!(
        e.starts_with("3:5:") && e.contains("not in ascending order"),
        "{e}"
    );
}

#[test]
fn gspmds_form_splits_and_gathers_like_shardys() {
    // Rows split 4 ways, each shard doubled plus its rank, put back in place.
    let text = "module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n  func.func public @main(%a: tensor<8x3xf32> {mhlo.sharding = \"{devices=[4,1]<=[4]}\"}) -> tensor<8x3xf32> {\n    %0 = stablehlo.custom_call @Sharding(%a) {backend_config = \"\", mhlo.sharding = \"{devices=[4,1]<=[4]}\"} : (tensor<8x3xf32>) -> tensor<8x3xf32>\n    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {backend_config = \"\", mhlo.sharding = \"{manual}\"} : (tensor<8x3xf32>) -> tensor<2x3xf32>\n    %2 = call @body(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>\n    %3 = stablehlo.custom_call @Sharding(%2) {backend_config = \"\", mhlo.sharding = \"{manual}\"} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n    %4 = stablehlo.custom_call @SPMDShardToFullShape(%3) {backend_config = \"\", mhlo.sharding = \"{devices=[4,1]<=[4]}\"} : (tensor<2x3xf32>) -> tensor<8x3xf32>\n    return %4 : tensor<8x3xf32>\n  }\n  func.func private @body(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {\n    %id = stablehlo.partition_id : tensor<ui32>\n    %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>\n    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<2x3xf32>\n    %d = stablehlo.add %x, %x : tensor<2x3xf32>\n    %r = stablehlo.add %d, %b : tensor<2x3xf32>\n    return %r : tensor<2x3xf32>\n  }\n}\n";
    let x = random(24);
    let want: Vec<f32> = (0..24).map(|i| 2.0 * x[i] + (i / 6) as f32).collect();
    all_ranks(&run4(text, &x), &want, "GSPMD form");
}

#[test]
fn collective_broadcast_sends_the_first_members_value() {
    // Groups [1, 0] and [3, 2]: ranks 0 and 1 get rank 1's shard, ranks 2 and 3 rank 3's.
    let body = "      %r = \"stablehlo.collective_broadcast\"(%l) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[1, 0], [3, 2]]> : tensor<2x2xi64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>";
    let text = module(
        "\"x\"=4",
        &manual(
            "8x3xf32",
            "8x3xf32",
            "[{\"x\"}, {}]",
            "[{\"x\"}, {}]",
            "2x3xf32",
            "2x3xf32",
            body,
        ),
    );
    let x = random(24);
    let from = [1, 1, 3, 3];
    let want: Vec<f32> = (0..4)
        .flat_map(|r| x[from[r] * 6..from[r] * 6 + 6].to_vec())
        .collect();
    all_ranks(&run4(&text, &x), &want, "collective_broadcast");
}

#[test]
fn a_replica_program_without_a_mesh_runs_per_rank() {
    // Older pmap: 4 replicas, per-replica inputs, a cross-replica sum (no channel) and
    // replica_id; not global (each rank its own inputs), so no split or gather.
    let text = format!(
        "module attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32}} {{\n  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {{\n    %s = \"stablehlo.all_reduce\"(%a) <{{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}> {ADD} : (tensor<3xf32>) -> tensor<3xf32>\n    %id = stablehlo.replica_id : tensor<ui32>\n    %f = stablehlo.convert %id : (tensor<ui32>) -> tensor<f32>\n    %b = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<3xf32>\n    %r = stablehlo.multiply %s, %b : tensor<3xf32>\n    return %r : tensor<3xf32>\n  }}\n}}\n"
    );
    let imp = import_text(&text).unwrap();
    assert_eq!(
        imp.spmd,
        Some(xthunk_stablehlo::import::SpmdInfo {
            ranks: 4,
            global: false
        })
    );
    let x = random(3);
    let got = run4(&text, &x);
    for (r, g) in got.iter().enumerate() {
        let want: Vec<f32> = x.iter().map(|v| 4.0 * v * r as f32).collect();
        assert_eq!(*g, want, "rank {r}");
    }
}
