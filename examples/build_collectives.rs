//! Builds the two SPMD example programs with the builder API and writes them:
//!
//! ```text
//! cargo run --example build_collectives -- examples
//! xthunk run --devices 4 examples/dp_step.txtpb
//! xthunk run --devices 4 examples/permute_ring.txtpb
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
//!
//! The checked-in `.txtpb` files are these programs; a test keeps them identical.

use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{
    AsyncKind, CollectiveOp, CollectiveThunk, DType, Executable, GemmThunk, ReduceOp, Thunk,
    ValidationError,
};

pub const RANKS: u32 = 4;
pub const BATCH: u64 = 32;
pub const FEATURES: u64 = 64;
pub const TARGETS: u64 = 16;
pub const LR: f32 = 0.05;
pub const RING: u64 = 256;

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
    b.push(Thunk::Collective(CollectiveThunk {
        op: CollectiveOp::Broadcast { root: 0 },
        src: w0.slice(),
        dst: w.slice(),
        dtype: DType::F32,
        groups: vec![],
    }));
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
    b.push(Thunk::Gemm(GemmThunk {
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
    }));
    // grad = sum over ranks of local, on the communication stream.
    b.push(Thunk::AsyncStart {
        id: 1,
        kind: AsyncKind::Communication,
        body: vec![Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
            src: local.slice(),
            dst: grad.slice(),
            dtype: DType::F32,
            groups: vec![],
        })],
    });
    b.push(Thunk::AsyncDone { id: 1 });
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
    b.push(Thunk::RankId { dst: id.slice() });
    b.kernel(
        &std,
        "convert_i32_f32",
        1,
        vec![id.r(), idf.w(), 1i64.into()],
    );
    b.push(Thunk::CollectivePermute {
        src: x.slice(),
        dst: shifted.slice(),
        dtype: DType::F32,
        pairs: pairs.clone(),
    });
    b.push(Thunk::CollectivePermute {
        src: idf.slice(),
        dst: from.slice(),
        dtype: DType::F32,
        pairs,
    });
    b.build()
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "examples".into());
    let dir = std::path::Path::new(&dir);
    xthunk::proto::save_file(dir.join("dp_step.txtpb"), &build_dp_step()?)?;
    xthunk::proto::save_file(dir.join("permute_ring.txtpb"), &build_permute_ring()?)?;
    println!(
        "wrote {0}/dp_step.txtpb and {0}/permute_ring.txtpb",
        dir.display()
    );
    Ok(())
}
