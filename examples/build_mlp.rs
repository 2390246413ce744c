//! Builds a 2-layer MLP forward pass with the builder API and writes it as a program file:
//!
//! ```text
//! cargo run --example build_mlp -- examples/mlp.txtpb
//! ```
//!
//! `probs = softmax(gelu(x @ w1 + b1) @ w2 + b2)` with x [64,512], w1 [512,1024], b1 [1024],
//! w2 [1024,10], b2 [10], all f32. The checked-in `examples/mlp.txtpb` is this program; the
//! `mlp` test checks that the two never drift apart.

use xthunk::builder::ExecutableBuilder;
use xthunk::ir::{DType, Executable, ValidationError};

pub const BATCH: u64 = 64;
pub const IN: u64 = 512;
pub const HIDDEN: u64 = 1024;
pub const CLASSES: u64 = 10;

/// The MLP program.
pub fn build_mlp() -> Result<Executable, ValidationError> {
    let mut b = ExecutableBuilder::new("mlp");
    let x = b.parameter("x", DType::F32, &[BATCH, IN]);
    let w1 = b.parameter("w1", DType::F32, &[IN, HIDDEN]);
    let b1 = b.parameter("b1", DType::F32, &[HIDDEN]);
    let w2 = b.parameter("w2", DType::F32, &[HIDDEN, CLASSES]);
    let b2 = b.parameter("b2", DType::F32, &[CLASSES]);
    let probs = b.output("probs", DType::F32, &[BATCH, CLASSES]);

    let h = b.temp(DType::F32, &[BATCH, HIDDEN]); // x @ w1
    let hb = b.temp(DType::F32, &[BATCH, HIDDEN]); // + b1
    let a = b.temp(DType::F32, &[BATCH, HIDDEN]); // gelu
    let z = b.temp(DType::F32, &[BATCH, CLASSES]); // a @ w2
    let logits = b.temp(DType::F32, &[BATCH, CLASSES]); // + b2

    let std = b.standard_module();
    let rows = BATCH as i64;

    // Layer 1: h = x @ w1; hb = h + b1 (per row); a = gelu(hb).
    b.matmul(&x, &w1, &h, 1.0, 0.0);
    b.kernel(
        &std,
        "add_row_f32",
        BATCH * HIDDEN,
        vec![h.r(), b1.r(), hb.w(), rows.into(), (HIDDEN as i64).into()],
    );
    b.kernel(
        &std,
        "gelu_f32",
        BATCH * HIDDEN,
        vec![hb.r(), a.w(), ((BATCH * HIDDEN) as i64).into()],
    );

    // Layer 2: z = a @ w2; logits = z + b2; probs = softmax(logits) per row.
    b.matmul(&a, &w2, &z, 1.0, 0.0);
    b.kernel(
        &std,
        "add_row_f32",
        BATCH * CLASSES,
        vec![
            z.r(),
            b2.r(),
            logits.w(),
            rows.into(),
            (CLASSES as i64).into(),
        ],
    );
    b.kernel(
        &std,
        "softmax_f32",
        BATCH,
        vec![logits.r(), probs.w(), rows.into(), (CLASSES as i64).into()],
    );
    b.build()
}

#[allow(dead_code)] // unused where this file is included as a module (the `mlp` test)
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: cargo run --example build_mlp -- OUT.txtpb|OUT.pb");
        std::process::exit(2);
    };
    let exe = build_mlp()?;
    xthunk::proto::save_file(&out, &exe)?;
    println!(
        "wrote {} ({} thunks)",
        std::path::Path::new(&out).display(),
        exe.thunk_count()
    );
    Ok(())
}
