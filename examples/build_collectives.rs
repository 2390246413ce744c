//! Builds the three SPMD example programs with the builder API and writes them:
//!
//! ```text
//! cargo run --example build_collectives -- examples
//! xthunk run --devices 4 examples/dp_step.txtpb
//! xthunk run --devices 4 examples/permute_ring.txtpb
//! xthunk run --devices 4 examples/exchange.txtpb
//! ```
//!
//! - `dp_step`: one data-parallel training step of a linear model. Rank 0's weights are
//!   broadcast to every rank; each rank computes the gradient of the squared error on its own
//!   batch shard, `grad = x^T (x w - y)`; the gradients are all-reduced (sum) on the
//!   communication stream inside an async scope; every rank applies the same update
//!   `w -= lr / (batch * ranks) * grad`. Outputs: the new weights (identical on every rank)
//!   and the summed gradient.
//! - `permute_ring`: each rank writes its rank id, converts it to f32, and a ring of collective
//!   permutes (rank r sends to r+1 mod 4) moves both its data and its id one step along.
//! - `exchange`: the other collectives and point-to-point transfers, f32, on 4 ranks. With
//!   `A = GATHER` (150) and `B = A2A_BLOCK` (75); parameters `x: [A]`, `w: [4A]`, `z: [4B]`:
//!   1. `gathered = all_gather(x)`, `[4, A]` (row k is rank k's `x`);
//!   2. `prod = transpose(gathered) * w`: the transpose is `[A, 4]`, so element `i` of it is
//!      `x_{i mod 4}[i / 4]` and every block of it holds data of all four ranks;
//!   3. `scattered = reduce_scatter_sum(prod)`, `[A]`: block r of the sum over ranks;
//!   4. a ring of point-to-point sends and receives (a conditional on the rank id; even ranks
//!      send first, odd ranks receive first, so that no cycle waits): rank r sends its
//!      `scattered` to r+1 mod 4 and receives that of r−1 mod 4 into `received`;
//!      `ring = received + scattered`, `[A]`;
//!   5. `exchanged = all_to_all(z)`, `[4B]`: block j is block r of rank j's `z`;
//!   6. `pair_sum = all_reduce_sum(exchanged)` within the replica groups `[[0,2],[1,3]]`.
//!
//!   Outputs: `gathered`, `scattered`, `ring`, `exchanged`, `pair_sum`. Cliques: the world,
//!   the groups {0,2} and {1,3}, and the ring's pairs {0,1}, {1,2}, {2,3}, {0,3}.
//!
//! The checked-in `.txtpb` files are these programs; a test keeps them identical.

use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{
    AsyncDoneThunk, AsyncKind, AsyncStartThunk, CollectiveOp, CollectivePermuteThunk,
    CollectiveThunk, ConditionalThunk, DType, Executable, GemmThunk, RankIdThunk, RecvThunk,
    ReduceOp, SendThunk, ValidationError,
};

pub const RANKS: u32 = 4;
pub const BATCH: u64 = 32;
pub const FEATURES: u64 = 64;
pub const TARGETS: u64 = 16;
pub const LR: f32 = 0.05;
pub const RING: u64 = 256;
/// `exchange`: elements of each rank's `x` (its row of the all-gather).
pub const GATHER: u64 = 150;
/// `exchange`: elements of each block of the all-to-all (`z` holds `RANKS` blocks).
pub const A2A_BLOCK: u64 = 75;
/// `exchange`: the replica groups of its grouped all-reduce.
pub const PAIR_GROUPS: [[u32; 2]; 2] = [[0, 2], [1, 3]];

/// The data-parallel training step, for `RANKS` ranks.
pub fn build_dp_step() -> Result<Executable, ValidationError> {
    let mut b = ExecutableBuilder::new("dp_step");
    let x = b.parameter("x", DType::F32, &[BATCH, FEATURES]);
    let y = b.parameter("y", DType::F32, &[BATCH, TARGETS]);
    let w0 = b.parameter("w0", DType::F32, &[FEATURES, TARGETS]);
    let w = b.output("w", DType::F32, &[FEATURES, TARGETS]);
    let grad = b.output("grad", DType::F32, &[FEATURES, TARGETS]);
    let pred = b.temp(DType::F32, &[BATCH, TARGETS]);
    let diff = b.temp(DType::F32, &[BATCH, TARGETS]);
    let local = b.temp(DType::F32, &[FEATURES, TARGETS]);
    let std = b.standard_module();
    // Every rank starts from rank 0's weights.
    b.push(
        CollectiveThunk {
            op: CollectiveOp::Broadcast { root: 0 },
            src: w0.slice(),
            dst: w.slice(),
            dtype: DType::F32,
            groups: vec![],
        }
        .into(),
    );
    // pred = x @ w; diff = pred - y.
    b.matmul(&x, &w, &pred, 1.0, 0.0);
    let n = (BATCH * TARGETS) as i64;
    b.kernel(
        &std,
        "sub_f32",
        BATCH * TARGETS,
        vec![pred.r(), y.r(), diff.w(), n.into()],
    );
    // local = x^T @ diff (x is stored [batch, features]: op(A) = x^T).
    b.push(
        GemmThunk {
            a: x.slice(),
            b: diff.slice(),
            c: local.slice(),
            m: FEATURES,
            n: TARGETS,
            k: BATCH,
            lda: FEATURES,
            ldb: TARGETS,
            ldc: TARGETS,
            trans_a: true,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            dtype: DType::F32,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        }
        .into(),
    );
    // grad = sum over ranks of local, on the communication stream.
    b.push(
        AsyncStartThunk {
            id: 1,
            kind: AsyncKind::Communication,
            body: vec![
                CollectiveThunk {
                    op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
                    src: local.slice(),
                    dst: grad.slice(),
                    dtype: DType::F32,
                    groups: vec![],
                }
                .into(),
            ],
        }
        .into(),
    );
    b.push(AsyncDoneThunk { id: 1 }.into());
    // w -= lr / (batch * ranks) * grad.
    let scale = -LR / (BATCH as f32 * RANKS as f32);
    b.kernel(
        &std,
        "axpy_f32",
        FEATURES * TARGETS,
        vec![
            grad.r(),
            w.rw(),
            scale.into(),
            ((FEATURES * TARGETS) as i64).into(),
        ],
    );
    b.build()
}

/// The ring of collective permutes, for `RANKS` ranks.
pub fn build_permute_ring() -> Result<Executable, ValidationError> {
    let mut b = ExecutableBuilder::new("permute_ring");
    let x = b.parameter("x", DType::F32, &[RING]);
    let shifted = b.output("shifted", DType::F32, &[RING]);
    let from = b.output("from_rank", DType::F32, &[1]);
    let id = b.temp(DType::I32, &[1]);
    let idf = b.temp(DType::F32, &[1]);
    let std = b.standard_module();
    let pairs: Vec<(u32, u32)> = (0..RANKS).map(|r| (r, (r + 1) % RANKS)).collect();
    b.push(RankIdThunk { dst: id.slice() }.into());
    b.kernel(
        &std,
        "convert_i32_f32",
        1,
        vec![id.r(), idf.w(), 1i64.into()],
    );
    b.push(
        CollectivePermuteThunk {
            src: x.slice(),
            dst: shifted.slice(),
            dtype: DType::F32,
            pairs: pairs.clone(),
        }
        .into(),
    );
    b.push(
        CollectivePermuteThunk {
            src: idf.slice(),
            dst: from.slice(),
            dtype: DType::F32,
            pairs,
        }
        .into(),
    );
    b.build()
}

/// The exchange of all-gather, reduce-scatter, point-to-point ring, all-to-all and grouped
/// all-reduce, for `RANKS` ranks.
pub fn build_exchange() -> Result<Executable, ValidationError> {
    let (a, n) = (GATHER, RANKS as u64 * GATHER);
    let z_len = RANKS as u64 * A2A_BLOCK;
    let mut b = ExecutableBuilder::new("exchange");
    let x = b.parameter("x", DType::F32, &[a]);
    let w = b.parameter("w", DType::F32, &[n]);
    let z = b.parameter("z", DType::F32, &[z_len]);
    let gathered = b.output("gathered", DType::F32, &[RANKS as u64, a]);
    let scattered = b.output("scattered", DType::F32, &[a]);
    let ring = b.output("ring", DType::F32, &[a]);
    let exchanged = b.output("exchanged", DType::F32, &[z_len]);
    let pair_sum = b.output("pair_sum", DType::F32, &[z_len]);
    let mixed = b.temp(DType::F32, &[a, RANKS as u64]);
    let prod = b.temp(DType::F32, &[n]);
    let received = b.temp(DType::F32, &[a]);
    let id = b.temp(DType::I32, &[1]);
    let std = b.standard_module();
    let collective = |op, src: &xthunk::builder::Tensor, dst: &xthunk::builder::Tensor| {
        CollectiveThunk {
            op,
            src: src.slice(),
            dst: dst.slice(),
            dtype: DType::F32,
            groups: vec![],
        }
        .into()
    };
    b.push(collective(CollectiveOp::AllGather, &x, &gathered));
    b.kernel(
        &std,
        "transpose_f32",
        n,
        vec![
            gathered.r(),
            mixed.w(),
            (RANKS as i64).into(),
            (a as i64).into(),
        ],
    );
    b.kernel(
        &std,
        "mul_f32",
        n,
        vec![mixed.r(), w.r(), prod.w(), (n as i64).into()],
    );
    b.push(collective(
        CollectiveOp::ReduceScatter { op: ReduceOp::Sum },
        &prod,
        &scattered,
    ));
    // The ring: branch r is rank r's (Send and Recv name a fixed peer).
    b.push(RankIdThunk { dst: id.slice() }.into());
    let branches = (0..RANKS)
        .map(|r| {
            let send = SendThunk {
                src: scattered.slice(),
                dtype: DType::F32,
                peer: (r + 1) % RANKS,
            }
            .into();
            let recv = RecvThunk {
                dst: received.slice(),
                dtype: DType::F32,
                peer: (r + RANKS - 1) % RANKS,
            }
            .into();
            if r % 2 == 0 {
                vec![send, recv]
            } else {
                vec![recv, send]
            }
        })
        .collect();
    b.push(
        ConditionalThunk {
            index: id.slice(),
            index_type: DType::I32,
            branches,
        }
        .into(),
    );
    b.kernel(
        &std,
        "add_f32",
        a,
        vec![received.r(), scattered.r(), ring.w(), (a as i64).into()],
    );
    b.push(collective(CollectiveOp::AllToAll, &z, &exchanged));
    b.push(
        CollectiveThunk {
            op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
            src: exchanged.slice(),
            dst: pair_sum.slice(),
            dtype: DType::F32,
            groups: PAIR_GROUPS.iter().map(|g| g.to_vec()).collect(),
        }
        .into(),
    );
    b.build()
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "examples".into());
    let dir = std::path::Path::new(&dir);
    xthunk::proto::save_file(dir.join("dp_step.txtpb"), &build_dp_step()?)?;
    xthunk::proto::save_file(dir.join("permute_ring.txtpb"), &build_permute_ring()?)?;
    xthunk::proto::save_file(dir.join("exchange.txtpb"), &build_exchange()?)?;
    println!(
        "wrote {0}/dp_step.txtpb, {0}/permute_ring.txtpb and {0}/exchange.txtpb",
        dir.display()
    );
    Ok(())
}
