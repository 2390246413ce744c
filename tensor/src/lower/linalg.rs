//! `cholesky` and `triangular_solve`: the operand copied (or its fused kernel written) into
//! the result buffer, then one kernel factoring or solving in place. Cholesky takes a thread
//! per matrix (the Cholesky–Banachiewicz order: column j from the columns before it, each
//! element's dot product in the compute type); the solve takes a thread per right-hand side
//! (a column of b on the left side, a row on the right), by forward or backward substitution.
//! Both are sequential within a matrix: right for the small and batched matrices of the
//! programs seen so far, where a blocked factorization through the vendor's solver library
//! is what large ones want.

use super::emit::{KernelText, Scope};
use super::{LowerError, Lowerer, scalar};
use crate::graph::Node;
use xthunk_core::ir::{DType, Slice, Thunk};

/// The product of the batch dimensions (all but the last two).
fn batch(dims: &[u64]) -> u64 {
    dims[..dims.len().saturating_sub(2)].iter().product()
}

impl Lowerer {
    /// Lowers the cholesky `node` into `dests` (the factor, and LAPACK's `info`).
    pub(super) fn cholesky(
        &mut self,
        s: &Scope,
        node: &Node,
        lower: bool,
        lapack: bool,
        dests: &[Slice],
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let t = s.graph.ty(node.operands[0]).clone();
        let n = t.dims[t.rank() - 1];
        let count = batch(&t.dims);
        self.write_into(s, node.operands[0], dests[0], out)?;
        let d = t.dtype;
        let ct = scalar::compute(d);
        let mut k = KernelText::new();
        let o = k.inout(dests[0], d);
        let info = match (lapack, dests.get(1)) {
            (true, Some(slice)) => Some(k.output(*slice, DType::I32)),
            _ => None,
        };
        // Element (i, j), i >= j, of the factor L: in the lower triangle, or at (j, i) for
        // the upper factor U = L^T (the upper triangle read as the symmetric matrix's).
        let at = |i: &str, j: &str| {
            if lower {
                format!("base + ({i}) * {n}LL + ({j})")
            } else {
                format!("base + ({j}) * {n}LL + ({i})")
            }
        };
        let ld = |e: String| scalar::load(d, &format!("{o}[{e}]"));
        k.open("XT_FOR(b, n) {");
        k.line(format!("const long long base = b * {}LL;", n * n));
        k.line("int fail = 0;");
        k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
        k.line(format!("{ct} dj = {};", ld(at("j", "j"))));
        k.line(format!(
            "for (long long q = 0; q < j; ++q) {{ const {ct} l = {}; dj -= l * l; }}",
            ld(at("j", "q"))
        ));
        // Not positive definite (NaN included): LAPACK's info is the 1-based column.
        k.line("if (!(dj > 0)) { fail = (int)j + 1; break; }");
        k.line(format!(
            "{o}[{}] = {};",
            at("j", "j"),
            scalar::store(d, &format!("({ct})sqrt((double)dj)"))
        ));
        k.line(format!("const {ct} piv = {};", ld(at("j", "j"))));
        k.open(format!("for (long long i = j + 1; i < {n}LL; ++i) {{"));
        k.line(format!("{ct} v = {};", ld(at("i", "j"))));
        k.line(format!(
            "for (long long q = 0; q < j; ++q) v -= {} * {};",
            ld(at("i", "q")),
            ld(at("j", "q"))
        ));
        k.line(format!(
            "{o}[{}] = {};",
            at("i", "j"),
            scalar::store(d, "v / piv")
        ));
        k.close("}");
        k.close("}");
        if let Some(info) = info {
            k.line(format!("{info}[b] = fail;"));
        } else {
            // XLA's result: the other triangle zero, every element NaN on failure.
            let other = if lower { "j > i" } else { "j < i" };
            k.open(format!("for (long long i = 0; i < {n}LL; ++i) {{"));
            k.open(format!("for (long long j = 0; j < {n}LL; ++j) {{"));
            k.line(format!(
                "if (fail) {o}[base + i * {n}LL + j] = {}; else if ({other}) {o}[base + i * {n}LL + j] = {};",
                scalar::store(d, &format!("({ct})NAN")),
                scalar::store(d, &format!("({ct})0"))
            ));
            k.close("}");
            k.close("}");
        }
        k.close("}");
        out.extend(self.launch(k, count));
        Ok(())
    }

    /// Lowers the triangular_solve `node` into `dest`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn triangular_solve(
        &mut self,
        s: &Scope,
        node: &Node,
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: bool,
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let (a, b) = (node.operands[0], node.operands[1]);
        let tb = s.graph.ty(b).clone();
        let m = s.graph.ty(a).dims[s.graph.ty(a).rank() - 1];
        let r = tb.rank();
        let (rows, cols) = (tb.dims[r - 2], tb.dims[r - 1]);
        let a_buf = self.buffer_of(s, a, out)?;
        self.write_into(s, b, dest, out)?;
        let d = tb.dtype;
        let ct = scalar::compute(d);
        let mut k = KernelText::new();
        let x = k.inout(dest, d);
        let ab = k.input(a_buf, d);
        // The system M y = c each thread solves: M = op(a) on the left side, op(a)^T on the
        // right (x op(a) = b, row by row). M(p, q) reads a at (p, q), or at (q, p) when
        // `swap`; M is lower triangular (forward substitution) when `lower != swap`.
        let swap = left_side == transpose_a;
        let forward = lower != swap;
        let mat = |p: &str, q: &str| {
            let (i, j) = if swap { (q, p) } else { (p, q) };
            scalar::load(d, &format!("{ab}[abase + ({i}) * {m}LL + ({j})]"))
        };
        // Element p of the thread's right-hand side.
        let (rhs, stride) = if left_side {
            (cols, format!("{cols}LL"))
        } else {
            (rows, "1LL".to_string())
        };
        let elem = |p: &str| format!("{x}[xbase + ({p}) * {stride}]");
        k.open("XT_FOR(t, n) {");
        k.line(format!(
            "const long long bi = t / {rhs}LL, c = t % {rhs}LL;"
        ));
        k.line(format!("const long long abase = bi * {}LL;", m * m));
        if left_side {
            k.line(format!(
                "const long long xbase = bi * {}LL + c;",
                rows * cols
            ));
        } else {
            k.line(format!(
                "const long long xbase = bi * {}LL + c * {cols}LL;",
                rows * cols
            ));
        }
        let (range, inner) = if forward {
            (
                format!("for (long long p = 0; p < {m}LL; ++p) {{"),
                "for (long long q = 0; q < p; ++q)".to_string(),
            )
        } else {
            (
                format!("for (long long p = {m}LL - 1; p >= 0; --p) {{"),
                format!("for (long long q = p + 1; q < {m}LL; ++q)"),
            )
        };
        k.open(range);
        k.line(format!("{ct} v = {};", scalar::load(d, &elem("p"))));
        k.line(format!(
            "{inner} v -= {} * {};",
            mat("p", "q"),
            scalar::load(d, &elem("q"))
        ));
        if !unit_diagonal {
            k.line(format!("v = v / {};", mat("p", "p")));
        }
        k.line(format!("{} = {};", elem("p"), scalar::store(d, "v")));
        k.close("}");
        k.close("}");
        out.extend(self.launch(k, batch(&tb.dims) * rhs));
        Ok(())
    }
}
