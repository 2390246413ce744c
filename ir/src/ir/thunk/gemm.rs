//! `gemm`: the thunk side of a matrix product (the shape itself, shared with the backends'
//! launches, is [`crate::ir::Gemm`] in `ir/gemm.rs`).

use super::kind::{Checker, Nested, ThunkKind, TraceCost, read};
use crate::ir::error::{ValidationError, err};
use crate::ir::{Access, BufferUse, GEMM_DTYPES, GemmError, GemmMatrix, GemmThunk, ThunkPath};
use serde_json::{Map, Value, json};

impl ThunkKind for GemmThunk {
    fn name(&self) -> &'static str {
        "gemm"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![
            read(self.a),
            read(self.b),
            BufferUse {
                slice: self.c,
                access: if self.beta != 0.0 {
                    Access::ReadWrite
                } else {
                    Access::Write
                },
            },
        ]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let g = self;
        if !GEMM_DTYPES.contains(&g.dtype) {
            return Err(err(
                path,
                "dtype",
                format!("gemm does not support {}", g.dtype),
            ));
        }
        let shape = |e: GemmError| err(path, e.field, e.message);
        g.check_batch().map_err(shape)?;
        if !g.alpha.is_finite() || !g.beta.is_finite() {
            return Err(err(path, "alpha", "alpha and beta must be finite"));
        }
        for m in GemmMatrix::ALL {
            cx.slice(&g.operand(m), path, m.name(), m == GemmMatrix::C)?;
            g.check_operand(m).map_err(shape)?;
        }
        g.check_disjoint().map_err(shape)
    }

    fn label(&self) -> String {
        format!("gemm {} {}x{}x{}", self.dtype, self.m, self.n, self.k)
    }

    fn describe(&self) -> String {
        let g = self;
        let t = |b: bool| if b { "T" } else { "N" };
        let batch = if g.batch != 1 {
            format!(
                " batch={} strides=({},{},{})",
                g.batch, g.stride_a, g.stride_b, g.stride_c
            )
        } else {
            String::new()
        };
        format!(
            "gemm {} {}{} m={} n={} k={} a={} r (ld {}) b={} r (ld {}) c={} {} (ld {}) alpha={} beta={}{batch}",
            g.dtype,
            t(g.trans_a),
            t(g.trans_b),
            g.m,
            g.n,
            g.k,
            g.a,
            g.lda,
            g.b,
            g.ldb,
            g.c,
            if g.beta != 0.0 { "rw" } else { "w" },
            g.ldc,
            g.alpha,
            g.beta
        )
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        let g = self;
        args.insert("dtype".into(), json!(g.dtype.to_string()));
        args.insert("m".into(), json!(g.m));
        args.insert("n".into(), json!(g.n));
        args.insert("k".into(), json!(g.k));
        args.insert("batch".into(), json!(g.batch.max(1)));
        let flops = 2u64
            .saturating_mul(g.m)
            .saturating_mul(g.n)
            .saturating_mul(g.k)
            .saturating_mul(g.batch.max(1));
        let bytes = g.a.size.saturating_add(g.b.size).saturating_add(g.c.size);
        TraceCost {
            bytes,
            flops,
            communicates: false,
        }
    }
}

impl<T> Nested<T> for GemmThunk {}
