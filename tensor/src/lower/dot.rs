//! `dot_general`: a `Gemm` thunk when the element type is one `Gemm` takes and the result's
//! is the operands' (operands in a batch-major layout, through the gemm's transpose flags or
//! a fused transposing kernel; batch dimensions as a strided batch), else a generated kernel
//! (integer dots, mixed result types) that fuses the operands' producers.

use super::emit::{KernelText, Scope};
use super::{LowerError, Lowerer, scalar};
use crate::graph::{DotDims, Node, Value};
use xthunk_core::ir::{GEMM_DTYPES, GemmThunk, Slice, Thunk};

fn free(rank: usize, batch: &[usize], con: &[usize]) -> Vec<usize> {
    (0..rank)
        .filter(|d| !batch.contains(d) && !con.contains(d))
        .collect()
}

fn identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

fn prod(dims: &[u64], which: &[usize]) -> u64 {
    which.iter().map(|&d| dims[d]).product()
}

impl Lowerer {
    /// `v` in a buffer laid out as `transpose(v, perm)`; `trans` is another layout accepted
    /// as it is (the gemm's transposed operand): the flag says which was used.
    fn operand(
        &mut self,
        s: &Scope,
        v: Value,
        perm: &[usize],
        trans: &[usize],
        out: &mut Vec<Thunk>,
    ) -> Result<(Slice, bool), LowerError> {
        if let super::Home::Buf(b) = &s.homes[v.0 as usize] {
            if identity(perm) {
                return Ok((*b, false));
            }
            if identity(trans) {
                return Ok((*b, true));
            }
        }
        let t = s.graph.ty(v).clone();
        let dims: Vec<u64> = perm.iter().map(|&p| t.dims[p]).collect();
        let dest = self.b.temp(t.dtype, &dims).slice;
        let mut k = KernelText::new();
        let o = k.output(dest, t.dtype);
        k.open("XT_FOR(i, n) {");
        let idx = k.delinearize("i", &dims);
        let mut sub = vec![String::new(); perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            sub[p] = idx[i].clone();
        }
        let x = k.value_at(s, v, &sub)?;
        k.line(format!("{o}[i] = {};", scalar::store(t.dtype, &x)));
        k.close("}");
        out.extend(self.launch(k, t.elements()));
        Ok((dest, false))
    }

    pub(super) fn dot(
        &mut self,
        s: &Scope,
        node: &Node,
        d: &DotDims,
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let (lhs, rhs) = (node.operands[0], node.operands[1]);
        let (a, b) = (s.graph.ty(lhs).clone(), s.graph.ty(rhs).clone());
        let rt = s.graph.ty(node.results[0]).clone();
        let lf = free(a.rank(), &d.lhs_batch, &d.lhs_contracting);
        let rf = free(b.rank(), &d.rhs_batch, &d.rhs_contracting);
        let batch = prod(&a.dims, &d.lhs_batch);
        let (m, n, k) = (
            prod(&a.dims, &lf),
            prod(&b.dims, &rf),
            prod(&a.dims, &d.lhs_contracting),
        );
        if batch * m * n == 0 {
            return Ok(());
        }
        if a.dtype == rt.dtype && GEMM_DTYPES.contains(&a.dtype) && k > 0 {
            let cat = |x: &[usize], y: &[usize], z: &[usize]| [x, y, z].concat();
            let (sa, trans_a) = self.operand(
                s,
                lhs,
                &cat(&d.lhs_batch, &lf, &d.lhs_contracting),
                &cat(&d.lhs_batch, &d.lhs_contracting, &lf),
                out,
            )?;
            let (sb, trans_b) = self.operand(
                s,
                rhs,
                &cat(&d.rhs_batch, &d.rhs_contracting, &rf),
                &cat(&d.rhs_batch, &rf, &d.rhs_contracting),
                out,
            )?;
            self.gemms += 1;
            out.push(
                GemmThunk {
                    a: sa,
                    b: sb,
                    c: dest,
                    m,
                    n,
                    k,
                    lda: if trans_a { m } else { k },
                    ldb: if trans_b { k } else { n },
                    ldc: n,
                    trans_a,
                    trans_b,
                    alpha: 1.0,
                    beta: 0.0,
                    dtype: a.dtype,
                    batch,
                    stride_a: m * k,
                    stride_b: k * n,
                    stride_c: m * n,
                }
                .into(),
            );
            return Ok(());
        }
        // The generated kernel: one thread per result element, a loop over the contraction.
        let mut kt = KernelText::new();
        let o = kt.output(dest, rt.dtype);
        let ct = scalar::compute(rt.dtype);
        kt.open("XT_FOR(i, n) {");
        let idx = kt.delinearize("i", &rt.dims);
        let acc = kt.mut_var(ct, format!("({ct})0"));
        let cdims: Vec<u64> = d.lhs_contracting.iter().map(|&c| a.dims[c]).collect();
        kt.open(format!("for (long long c = 0; c < {k}LL; ++c) {{"));
        let cidx = kt.delinearize("c", &cdims);
        let nb = d.lhs_batch.len();
        let mut ai = vec![String::new(); a.rank()];
        let mut bi = vec![String::new(); b.rank()];
        for (j, (&x, &y)) in d.lhs_batch.iter().zip(&d.rhs_batch).enumerate() {
            ai[x] = idx[j].clone();
            bi[y] = idx[j].clone();
        }
        for (j, &x) in lf.iter().enumerate() {
            ai[x] = idx[nb + j].clone();
        }
        for (j, &y) in rf.iter().enumerate() {
            bi[y] = idx[nb + lf.len() + j].clone();
        }
        for (j, (&x, &y)) in d.lhs_contracting.iter().zip(&d.rhs_contracting).enumerate() {
            ai[x] = cidx[j].clone();
            bi[y] = cidx[j].clone();
        }
        let x = kt.value_at(s, lhs, &ai)?;
        let y = kt.value_at(s, rhs, &bi)?;
        let (x, y) = (
            scalar::convert(a.dtype, rt.dtype, &x),
            scalar::convert(b.dtype, rt.dtype, &y),
        );
        if rt.dtype.is_complex() {
            kt.line(format!("{acc} = xh_cadd({acc}, xh_cmul({x}, {y}));"));
        } else if crate::graph::is_float(rt.dtype) {
            kt.line(format!("{acc} = {acc} + ({ct})({x}) * ({ct})({y});"));
        } else {
            kt.line(format!(
                "{acc} = xh_add<{ct}>({acc}, xh_mul<{ct}>({x}, {y}));"
            ));
        }
        kt.close("}");
        kt.line(format!("{o}[i] = {};", scalar::store(rt.dtype, &acc)));
        kt.close("}");
        out.extend(self.launch(kt, rt.elements()));
        Ok(())
    }
}
