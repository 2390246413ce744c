//! Builds a transformer-like encoder (pre-norm blocks of single-head self-attention and a
//! GELU feed-forward, residual adds, one set of weights shared by every layer) with the
//! builder API and writes it as a program file:
//!
//! ```text
//! cargo run --example build_transformer -- examples/transformer.txtpb
//! ```
//!
//! Every block makes 15 short-lived temps (16 but the last) (x [SEQ,MODEL], SEQ 64, MODEL 128, FF 512, f32),
//! so the program is where temp memory planning shows: `xthunk inspect` prints the plan (peak
//! temp bytes against their sum). The checked-in `examples/transformer.txtpb` is this
//! program; the `transformer` test checks that the two never drift apart, and that results
//! are the same with planning on and off and match an f64 reference.
//!
//! Per block, with `h` the block's input:
//! `a = ln(h); q,k,v = a@wq, a@wk, a@wv; p = softmax(q@kᵀ/√MODEL); h1 = h + (p@v)@wo;
//! out = h1 + gelu(ln(h1)@w1 + b1)@w2`.

use xthunk::builder::{ExecutableBuilder, Tensor};
use xthunk::ir::{DType, Executable, ValidationError};

pub const SEQ: u64 = 64;
pub const MODEL: u64 = 128;
pub const FF: u64 = 512;
pub const LAYERS: u64 = 4;
pub const EPS: f32 = 1e-5;

/// The transformer program: parameters `x, wq, wk, wv, wo, w1, b1, w2, gamma, beta`, output
/// `y` [SEQ, MODEL].
pub fn build_transformer() -> Result<Executable, ValidationError> {
    let mut b = ExecutableBuilder::new("transformer");
    let f = DType::F32;
    let x = b.parameter("x", f, &[SEQ, MODEL]);
    let wq = b.parameter("wq", f, &[MODEL, MODEL]);
    let wk = b.parameter("wk", f, &[MODEL, MODEL]);
    let wv = b.parameter("wv", f, &[MODEL, MODEL]);
    let wo = b.parameter("wo", f, &[MODEL, MODEL]);
    let w1 = b.parameter("w1", f, &[MODEL, FF]);
    let b1 = b.parameter("b1", f, &[FF]);
    let w2 = b.parameter("w2", f, &[FF, MODEL]);
    let gamma = b.parameter("gamma", f, &[MODEL]);
    let beta = b.parameter("beta", f, &[MODEL]);
    let y = b.output("y", f, &[SEQ, MODEL]);
    let std = b.standard_module();
    let (s, m, ff) = (SEQ as i64, MODEL as i64, FF as i64);
    let sm = SEQ * MODEL;

    let mut h: Tensor = x;
    for layer in 0..LAYERS {
        let t = |b: &mut ExecutableBuilder, dims: &[u64]| b.temp(f, dims);
        let a = t(&mut b, &[SEQ, MODEL]);
        let q = t(&mut b, &[SEQ, MODEL]);
        let k = t(&mut b, &[SEQ, MODEL]);
        let v = t(&mut b, &[SEQ, MODEL]);
        let kt = t(&mut b, &[MODEL, SEQ]);
        let scores = t(&mut b, &[SEQ, SEQ]);
        let p = t(&mut b, &[SEQ, SEQ]);
        let attn = t(&mut b, &[SEQ, MODEL]);
        let proj = t(&mut b, &[SEQ, MODEL]);
        let h1 = t(&mut b, &[SEQ, MODEL]);
        let a2 = t(&mut b, &[SEQ, MODEL]);
        let up = t(&mut b, &[SEQ, FF]);
        let upb = t(&mut b, &[SEQ, FF]);
        let g = t(&mut b, &[SEQ, FF]);
        let down = t(&mut b, &[SEQ, MODEL]);
        // The last block writes the output; the others a temp the next block reads.
        let out = if layer + 1 == LAYERS {
            y.clone()
        } else {
            t(&mut b, &[SEQ, MODEL])
        };
        let ln = |b: &mut ExecutableBuilder, i: &Tensor, o: &Tensor| {
            b.kernel(
                &std,
                "layer_norm_f32",
                SEQ,
                vec![
                    i.r(),
                    gamma.r(),
                    beta.r(),
                    o.w(),
                    EPS.into(),
                    s.into(),
                    m.into(),
                ],
            );
        };

        // Attention.
        ln(&mut b, &h, &a);
        b.matmul(&a, &wq, &q, 1.0, 0.0);
        b.matmul(&a, &wk, &k, 1.0, 0.0);
        b.matmul(&a, &wv, &v, 1.0, 0.0);
        b.kernel(
            &std,
            "transpose_f32",
            sm,
            vec![k.r(), kt.w(), s.into(), m.into()],
        );
        b.matmul(&q, &kt, &scores, 1.0 / (MODEL as f64).sqrt(), 0.0);
        b.kernel(
            &std,
            "softmax_f32",
            SEQ,
            vec![scores.r(), p.w(), s.into(), s.into()],
        );
        b.matmul(&p, &v, &attn, 1.0, 0.0);
        b.matmul(&attn, &wo, &proj, 1.0, 0.0);
        b.kernel(
            &std,
            "add_f32",
            sm,
            vec![h.r(), proj.r(), h1.w(), (sm as i64).into()],
        );

        // Feed-forward.
        ln(&mut b, &h1, &a2);
        b.matmul(&a2, &w1, &up, 1.0, 0.0);
        b.kernel(
            &std,
            "add_row_f32",
            SEQ * FF,
            vec![up.r(), b1.r(), upb.w(), s.into(), ff.into()],
        );
        b.kernel(
            &std,
            "gelu_f32",
            SEQ * FF,
            vec![upb.r(), g.w(), ((SEQ * FF) as i64).into()],
        );
        b.matmul(&g, &w2, &down, 1.0, 0.0);
        b.kernel(
            &std,
            "add_f32",
            sm,
            vec![h1.r(), down.r(), out.w(), (sm as i64).into()],
        );
        h = out;
    }
    b.build()
}

#[allow(dead_code)] // unused where this file is included as a module (the `transformer` test)
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: cargo run --example build_transformer -- OUT.txtpb|OUT.pb");
        std::process::exit(2);
    };
    let exe = build_transformer()?;
    xthunk::proto::save_file(&out, &exe)?;
    println!(
        "wrote {} ({} thunks)",
        std::path::Path::new(&out).display(),
        exe.thunk_count()
    );
    Ok(())
}
