//! `sort`: the inputs written into the result buffers (a copy, or their fused kernel), then
//! one kernel sorting every row (the elements along the sort dimension; rows along another
//! dimension than the last are strided, no transpose) with the comparator region emitted
//! inline over scalar variables. Every schedule is stable whatever `is_stable` says, and
//! calls the comparator only as `comparator(lhs, rhs)` = "lhs goes first", so any strict weak
//! order (the spec's requirement) sorts as XLA's stable sort does. Elements move as their
//! stored bits (NaN payloads and the sign of zero are kept); only the comparator sees them
//! as computed values.
//!
//! - Short rows (at most [`INSERTION_MAX`] elements): a thread per row, insertion sort in
//!   place (few comparisons, no temp, no synchronization).
//! - Medium rows (at most [`ROW_MERGE_MAX`]): a thread per row, a bottom-up merge sort
//!   between the result buffer and a temp, each pass merging its runs in order:
//!   `O(len log len)` comparisons and no synchronization, which suits the CPU execution (a
//!   block's threads there are not free) and gives a GPU a thread per row.
//! - Longer rows: a block per row, a bottom-up merge sort in `ceil(log2(len))` passes
//!   between the result buffer and a temp, `__syncthreads()` between passes. In a pass
//!   every thread places elements independently: an element of a left run goes to its
//!   index plus the number of right-run elements that go before it
//!   (`comparator(right, it)`), one of a right run to its index plus the number of left-run
//!   elements that do not go after it (`!comparator(it, left)`), each count a binary
//!   search. So every thread of the block works in every pass (no serial final merge), in
//!   `O(len log² len)` comparisons, and the passes start in the temp or the result buffer
//!   so that the last one ends in the result.
//! - Few long rows (fewer than [`GRID_ROWS`] of at least [`GRID_LEN`]): the same passes, but
//!   a kernel each with a thread per element of every row, so a single long row uses the
//!   whole GPU (the kernel boundary is the synchronization between passes).

use super::emit::{Home, KernelText, Scope};
use super::reduce::check_body;
use super::{LowerError, Lowerer, scalar};
use crate::graph::{Graph, Node};
use xthunk_core::ir::{DType, Slice, Thunk};

/// Rows of at most this many elements are sorted by insertion, a thread per row.
pub(crate) const INSERTION_MAX: u64 = 16;

/// Rows of at most this many elements (and more than [`INSERTION_MAX`]) are merge-sorted by
/// a thread per row, through a temp.
pub(crate) const ROW_MERGE_MAX: u64 = 512;

/// Fewer rows than this, each of at least [`GRID_LEN`] elements, are merged by a kernel per
/// pass with a thread per element (all the GPU's blocks on a few long rows), not a block
/// per row.
pub(crate) const GRID_ROWS: u64 = 64;

/// See [`GRID_ROWS`].
pub(crate) const GRID_LEN: u64 = 4096;

/// Emits `r = comparator(lhs, rhs)` in a block of its own (so no value computed for one
/// call is taken for another's); returns `r`, a bool.
fn compare(
    k: &mut KernelText,
    body: &Graph,
    lhs: &[String],
    rhs: &[String],
) -> Result<String, LowerError> {
    let r = k.mut_var("bool", "false");
    k.open("{");
    let mut homes = vec![Home::Fused; body.values().len()];
    for (j, p) in body.params().iter().enumerate() {
        let side = if j % 2 == 0 { lhs } else { rhs };
        homes[p.0 as usize] = Home::Var(side[j / 2].clone());
    }
    let bs = Scope {
        graph: body,
        homes: &homes,
    };
    let (_, res) = body.results()[0];
    let v = k.value_at(&bs, res, &[])?;
    k.line(format!("{r} = {v};"));
    k.close("}");
    Ok(r)
}

/// The elements of one row position: their stored bits and their computed values.
struct Loaded {
    bits: Vec<String>,
    values: Vec<String>,
}

fn load_at(k: &mut KernelText, s: &Scope, node: &Node, bufs: &[String], at: &str) -> Loaded {
    let mut l = Loaded {
        bits: vec![],
        values: vec![],
    };
    for (j, b) in bufs.iter().enumerate() {
        let d = s.graph.ty(node.results[j]).dtype;
        let bits = k.var(scalar::storage(d), format!("{b}[{at}]"));
        l.values
            .push(k.var(scalar::compute(d), scalar::load(d, &bits)));
        l.bits.push(bits);
    }
    l
}

/// The kernel's buffers per input: its element type, the result (`o(2j)`) and the temp
/// (`o(2j+1)`), both read and written.
fn buffer_pairs(
    k: &mut KernelText,
    s: &Scope,
    node: &Node,
    dests: &[Slice],
    temps: &[Slice],
) -> Vec<(DType, String, String)> {
    let mut pairs = vec![];
    for (j, r) in node.results.iter().enumerate() {
        let d = s.graph.ty(*r).dtype;
        pairs.push((d, k.inout(dests[j], d), k.inout(temps[j], d)));
    }
    pairs
}

/// The pass's source and destination pointers per input (`s0`, `d0`, …): the temp is read
/// and the result written when `flip`, the other way otherwise.
fn pointers(k: &mut KernelText, pairs: &[(DType, String, String)]) -> (Vec<String>, Vec<String>) {
    let (mut src, mut dst) = (vec![], vec![]);
    for (j, (d, res, tmp)) in pairs.iter().enumerate() {
        let ty = scalar::storage(*d);
        k.line(format!("{ty}* s{j} = flip ? {tmp} : {res};"));
        k.line(format!("{ty}* d{j} = flip ? {res} : {tmp};"));
        src.push(format!("s{j}"));
        dst.push(format!("d{j}"));
    }
    (src, dst)
}

/// One merge pass's work for element `i` of the row at `b`, runs of `w` merged into runs of
/// `2w`: reads the temp and writes the result when `flip`, the other way otherwise.
#[allow(clippy::too_many_arguments)]
fn place(
    k: &mut KernelText,
    s: &Scope,
    node: &Node,
    comparator: &Graph,
    pairs: &[(DType, String, String)],
    b: &str,
    len: u64,
    inner: u64,
) -> Result<(), LowerError> {
    let at = |i: &str| format!("{b} + ({i}) * {inner}LL");
    let (src, dst) = pointers(k, pairs);
    k.line("const long long start = (i / (2 * w)) * (2 * w);");
    k.line(format!(
        "const long long mid = start + w < {len}LL ? start + w : {len}LL;"
    ));
    k.line(format!(
        "const long long end = start + 2 * w < {len}LL ? start + 2 * w : {len}LL;"
    ));
    let own = load_at(k, s, node, &src, &at("i"));
    k.line("long long pos = 0;");
    k.open("if (i < mid) {");
    k.line("long long lo = mid, hi = end;");
    k.open("while (lo < hi) {");
    k.line("const long long m = lo + (hi - lo) / 2;");
    let other = load_at(k, s, node, &src, &at("m"));
    let c = compare(k, comparator, &other.values, &own.values)?;
    k.line(format!("if ({c}) lo = m + 1; else hi = m;"));
    k.close("}");
    k.line("pos = i + (lo - mid);");
    k.else_branch("} else {");
    k.line("long long lo = start, hi = mid;");
    k.open("while (lo < hi) {");
    k.line("const long long m = lo + (hi - lo) / 2;");
    let other = load_at(k, s, node, &src, &at("m"));
    let c = compare(k, comparator, &own.values, &other.values)?;
    k.line(format!("if (!{c}) lo = m + 1; else hi = m;"));
    k.close("}");
    k.line("pos = (i - mid) + lo;");
    k.close("}");
    for (d, bits) in dst.iter().zip(&own.bits) {
        k.line(format!("{d}[{}] = {bits};", at("pos")));
    }
    Ok(())
}

impl Lowerer {
    /// Lowers the sort `node` along `dim` into `dests` (one per input).
    pub(super) fn sort(
        &mut self,
        s: &Scope,
        node: &Node,
        dim: usize,
        comparator: &Graph,
        dests: &[Slice],
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        check_body("sort", comparator)?;
        let t = s.graph.ty(node.operands[0]).clone();
        let len = t.dims[dim];
        let inner: u64 = t.dims[dim + 1..].iter().product();
        let rows = t.elements() / len.max(1);
        // Passes of the merge sort; they start where the last one ends in the result.
        let passes = u64::BITS - (len.max(1) - 1).leading_zeros();
        let merge = len > INSERTION_MAX;
        let temps: Vec<Slice> = if merge {
            node.results
                .iter()
                .map(|r| {
                    let ty = s.graph.ty(*r).clone();
                    self.temp(&ty)
                })
                .collect()
        } else {
            vec![]
        };
        for (j, (x, dest)) in node.operands.iter().zip(dests).enumerate() {
            let first = if merge && passes % 2 == 1 {
                temps[j]
            } else {
                *dest
            };
            self.write_into(s, *x, first, out)?;
        }
        if len <= 1 || rows == 0 {
            return Ok(());
        }
        let mut k = KernelText::new();
        let base = |k: &mut KernelText, r: &str| {
            k.var(
                "long long",
                format!("({r} / {inner}LL) * {}LL + ({r} % {inner}LL)", len * inner),
            )
        };
        let at = |b: &str, i: &str| format!("{b} + ({i}) * {inner}LL");
        if !merge {
            let bufs: Vec<String> = node
                .results
                .iter()
                .zip(dests)
                .map(|(r, d)| k.inout(*d, s.graph.ty(*r).dtype))
                .collect();
            k.open("XT_FOR(r, n) {");
            let b = base(&mut k, "r");
            k.open(format!("for (long long i = 1; i < {len}LL; ++i) {{"));
            let x = load_at(&mut k, s, node, &bufs, &at(&b, "i"));
            k.line("long long q = i;");
            k.open("while (q > 0) {");
            let y = load_at(&mut k, s, node, &bufs, &at(&b, "q - 1"));
            let c = compare(&mut k, comparator, &x.values, &y.values)?;
            k.line(format!("if (!{c}) break;"));
            for (o, bits) in bufs.iter().zip(&y.bits) {
                k.line(format!("{o}[{}] = {bits};", at(&b, "q")));
            }
            k.line("--q;");
            k.close("}");
            for (o, bits) in bufs.iter().zip(&x.bits) {
                k.line(format!("{o}[{}] = {bits};", at(&b, "q")));
            }
            k.close("}");
            k.close("}");
            out.extend(self.launch(k, rows));
            return Ok(());
        }
        if len <= ROW_MERGE_MAX {
            // A thread per row: each pass merges its runs in order.
            let pairs = buffer_pairs(&mut k, s, node, dests, &temps);
            k.open("XT_FOR(r, n) {");
            let b = base(&mut k, "r");
            k.open(format!("for (long long p = 0; p < {passes}LL; ++p) {{"));
            k.line("const long long w = 1LL << p;");
            k.line(format!("const bool flip = (({passes}LL + p) & 1LL) != 0;"));
            let (src, dst) = pointers(&mut k, &pairs);
            k.open(format!(
                "for (long long start = 0; start < {len}LL; start += 2 * w) {{"
            ));
            k.line(format!(
                "const long long mid = start + w < {len}LL ? start + w : {len}LL;"
            ));
            k.line(format!(
                "const long long end = start + 2 * w < {len}LL ? start + 2 * w : {len}LL;"
            ));
            k.line("long long li = start, ri = mid;");
            k.open("for (long long q = start; q < end; ++q) {");
            k.line("bool right = ri < end && li >= mid;");
            k.open("if (ri < end && li < mid) {");
            let l = load_at(&mut k, s, node, &src, &at(&b, "li"));
            let r = load_at(&mut k, s, node, &src, &at(&b, "ri"));
            let c = compare(&mut k, comparator, &r.values, &l.values)?;
            k.line(format!("right = {c};"));
            k.close("}");
            k.open("if (right) {");
            for (sj, dj) in src.iter().zip(&dst) {
                k.line(format!("{dj}[{}] = {sj}[{}];", at(&b, "q"), at(&b, "ri")));
            }
            k.line("++ri;");
            k.else_branch("} else {");
            for (sj, dj) in src.iter().zip(&dst) {
                k.line(format!("{dj}[{}] = {sj}[{}];", at(&b, "q"), at(&b, "li")));
            }
            k.line("++li;");
            k.close("}");
            k.close("}");
            k.close("}");
            k.close("}");
            k.close("}");
            out.extend(self.launch(k, rows));
            return Ok(());
        }
        if rows < GRID_ROWS && len >= GRID_LEN {
            // A kernel per pass, a thread per element of every row.
            for p in 0..passes {
                let mut k = KernelText::new();
                let pairs = buffer_pairs(&mut k, s, node, dests, &temps);
                k.open("XT_FOR(e, n) {");
                k.line(format!("const long long r = e / {len}LL;"));
                k.line(format!("const long long i = e % {len}LL;"));
                let b = base(&mut k, "r");
                k.line(format!("const long long w = {}LL;", 1u64 << p));
                k.line(format!("const bool flip = {};", (passes + p) % 2 == 1));
                place(&mut k, s, node, comparator, &pairs, &b, len, inner)?;
                k.close("}");
                out.extend(self.launch(k, rows * len));
            }
            return Ok(());
        }
        let pairs = buffer_pairs(&mut k, s, node, dests, &temps);
        k.open("for (long long r = xt_block_id(); r < n; r += xt_num_blocks()) {");
        let b = base(&mut k, "r");
        k.open(format!("for (long long p = 0; p < {passes}LL; ++p) {{"));
        k.line("const long long w = 1LL << p;");
        // Pass p reads the temp when (passes + p) is odd, and writes the other buffer.
        k.line(format!("const bool flip = (({passes}LL + p) & 1LL) != 0;"));
        k.open(format!(
            "for (long long i = (long long)xt_thread_in_block(); i < {len}LL; \
             i += (long long)xt_block_threads()) {{"
        ));
        place(&mut k, s, node, comparator, &pairs, &b, len, inner)?;
        k.close("}");
        k.line("__syncthreads();");
        k.close("}");
        k.close("}");
        let blocks = rows.clamp(1, 65535) as u32;
        out.extend(self.launch_grid(k, rows, blocks));
        Ok(())
    }
}
