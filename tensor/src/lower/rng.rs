//! `rng_bit_generator`, bit-exact with XLA (whose layout of counters and words JAX users
//! see through `jax.random` with the `rbg` implementations and `lax.rng_bit_generator`):
//!
//! - **ThreeFry-2x32** (20 rounds), key = state[0], 64-bit counter = state[1]. 64-bit
//!   results: one block per element, counter + i, the words as `lo | hi << 32`. Narrower
//!   results: the shape is split in halves along its first even dimension (else its first
//!   largest one; a scalar counts as `[1]`), one block per element of the half shape
//!   (counter + its row-major index), its two words going to indices `2k` and `2k + 1` along
//!   the split dimension; 8- and 16-bit results keep the low bits of the word. The new
//!   counter is the old plus the number of blocks.
//! - **Philox-4x32** (10 rounds), key = state[0], 128-bit counter = state[1] (low) and
//!   state[2] (high), or state[0] (high) when the state has two words. 32-bit and narrower
//!   results: block `b` gives elements `4b..4b+3` in row-major order; 64-bit ones: elements
//!   `2b` and `2b + 1` from words (0, 1) and (2, 3). The new counter is the old plus the
//!   number of blocks, the output state `[key, low]` or `[key, low, high]`.
//!
//! A thread per block; a second one-thread kernel writes the new state once every block has
//! read the old one (the two may share a buffer).
//!
//! `rng` (whose numbers the spec leaves to the implementation) draws from one generator per
//! program: a state of two u64 words in a temp, the key set from the execution's seed
//! (`execution_seed`, a different value for every execution of a loaded program) and the
//! counter from 0 before the program's first thunk. Element `i` of a draw is Philox-4x32
//! of counter + `i` (high words a fixed tag), and the draw then advances the counter by its
//! size — so every draw, each trip of a loop included, gets numbers of its own, and one
//! execution is reproducible from its seed. From the block's 128 bits: UNIFORM floats
//! `a + (b - a)·u` with `u` the top 53 bits of the first word over 2⁵³, computed in double
//! and rounded to the type (a value that rounds up to `b` is replaced by the type's next
//! value below `b`); UNIFORM integers and pred `a + w mod (b - a)` in 64 bits (`a` when
//! `b <= a`, which the spec leaves undefined); NORMAL `a + b·z` with `z` from Box–Muller
//! over two 53-bit uniforms.

use super::emit::{KernelText, Scope, offset};
use super::{LowerError, Lowerer};
use crate::graph::{Node, RngAlgorithm, RngDistribution};
use xthunk_core::ir::{DType, ExecutionSeedThunk, MemsetPattern, MemsetThunk, Slice, Thunk};

/// The Philox counter's high words for `rng`'s draws (ASCII `rng.`), so its blocks are not
/// `rng_bit_generator`'s for the same key.
const RNG_TAG: u32 = 0x2e67_6e72;

/// The unsigned type of `d`'s width, for writing raw bits.
fn bits_type(d: DType) -> DType {
    match d.size() {
        1 => DType::U8,
        2 => DType::U16,
        4 => DType::U32,
        _ => DType::U64,
    }
}

impl Lowerer {
    /// The thunks that set `rng`'s generator state (16 bytes), when a node draws: the key
    /// from the execution's seed, the counter 0 (run before the program's first thunk).
    pub(super) fn rng_prologue(&self) -> Vec<Thunk> {
        let Some(state) = self.rng_state else {
            return vec![];
        };
        let half = |offset| Slice {
            allocation: state.allocation,
            offset: state.offset + offset,
            size: 8,
        };
        vec![
            ExecutionSeedThunk { dst: half(0) }.into(),
            MemsetThunk {
                dst: half(8),
                pattern: MemsetPattern::U32(0),
            }
            .into(),
        ]
    }

    /// Lowers the rng_bit_generator `node` into `dests` (the new state, the bits).
    pub(super) fn rng_bit_generator(
        &mut self,
        s: &Scope,
        node: &Node,
        algorithm: RngAlgorithm,
        dests: &[Slice],
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let state = self.buffer_of(s, node.operands[0], out)?;
        let words = s.graph.ty(node.operands[0]).dims[0];
        let t = s.graph.ty(node.results[1]).clone();
        let wide = t.dtype.size() == 8;
        let n = t.elements();
        let bt = bits_type(t.dtype);
        let ct = super::scalar::storage(bt);
        let mut k = KernelText::new();
        let o = k.output(dests[1], bt);
        let p = k.input(state, DType::U64);
        k.open("XT_FOR(b, n) {");
        k.line(format!("const unsigned long long key = {p}[0];"));
        k.line("const unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);");
        let blocks = match algorithm {
            RngAlgorithm::ThreeFry => {
                k.line(format!(
                    "const unsigned long long c = {p}[1] + (unsigned long long)b;"
                ));
                k.line("unsigned int x0 = (unsigned int)c, x1 = (unsigned int)(c >> 32);");
                k.line("xh_threefry(&x0, &x1, k0, k1);");
                if wide {
                    k.line(format!(
                        "{o}[b] = ({ct})((unsigned long long)x0 | ((unsigned long long)x1 << 32));"
                    ));
                    n
                } else {
                    let dims: Vec<u64> = if t.dims.is_empty() {
                        vec![1]
                    } else {
                        t.dims.clone()
                    };
                    let split = dims.iter().position(|d| d % 2 == 0).unwrap_or_else(|| {
                        // The first of the largest dimensions.
                        let max = dims.iter().copied().max().unwrap_or(1);
                        dims.iter().position(|&d| d == max).unwrap_or(0)
                    });
                    let mut half = dims.clone();
                    half[split] = dims[split].div_ceil(2);
                    let h = k.delinearize("b", &half);
                    for (w, var) in ["x0", "x1"].iter().enumerate() {
                        let mut idx = h.clone();
                        idx[split] = format!("(2LL * {} + {w}LL)", h[split]);
                        let at = offset(&idx, &dims);
                        if w == 1 && dims[split] % 2 == 1 {
                            k.line(format!(
                                "if ({} < {}LL) {o}[{at}] = ({ct}){var};",
                                idx[split], dims[split]
                            ));
                        } else {
                            k.line(format!("{o}[{at}] = ({ct}){var};"));
                        }
                    }
                    half.iter().product()
                }
            }
            RngAlgorithm::Philox => {
                let high = if words == 3 {
                    format!("{p}[2]")
                } else {
                    format!("{p}[0]")
                };
                k.line(format!(
                    "const unsigned long long lo = {p}[1] + (unsigned long long)b;"
                ));
                k.line(format!(
                    "const unsigned long long hi = {high} + (lo < {p}[1] ? 1ULL : 0ULL);"
                ));
                k.line(
                    "unsigned int x[4] = {(unsigned int)lo, (unsigned int)(lo >> 32), \
                     (unsigned int)hi, (unsigned int)(hi >> 32)};",
                );
                k.line("xh_philox(x, k0, k1);");
                if wide {
                    k.open("for (int j = 0; j < 2; ++j) {");
                    k.line("const long long e = 2LL * b + j;");
                    k.line(format!(
                        "if (e < {n}LL) {o}[e] = ({ct})((unsigned long long)x[2 * j] | \
                         ((unsigned long long)x[2 * j + 1] << 32));"
                    ));
                    k.close("}");
                    n.div_ceil(2)
                } else {
                    k.open("for (int j = 0; j < 4; ++j) {");
                    k.line("const long long e = 4LL * b + j;");
                    k.line(format!("if (e < {n}LL) {o}[e] = ({ct})x[j];"));
                    k.close("}");
                    n.div_ceil(4)
                }
            }
        };
        k.close("}");
        out.extend(self.launch(k, blocks));
        // The new state, after every block has read the old one.
        let mut k = KernelText::new();
        let so = k.output(dests[0], DType::U64);
        let p = k.input(state, DType::U64);
        k.open("XT_FOR(i, n) {");
        k.line(format!(
            "const unsigned long long lo = {p}[1] + {blocks}ULL;"
        ));
        k.line(format!("{so}[0] = {p}[0];"));
        k.line(format!("{so}[1] = lo;"));
        if words == 3 {
            k.line(format!("{so}[2] = {p}[2] + (lo < {p}[1] ? 1ULL : 0ULL);"));
        }
        k.close("}");
        out.extend(self.launch(k, 1));
        Ok(())
    }
}

impl Lowerer {
    /// Lowers the `rng` `node` into `dest`: a kernel drawing one Philox block per element from
    /// the program's generator, then a one-thread kernel advancing its counter.
    pub(super) fn rng(
        &mut self,
        s: &Scope,
        node: &Node,
        distribution: RngDistribution,
        dest: Slice,
        out: &mut Vec<Thunk>,
    ) -> Result<(), LowerError> {
        let state = match self.rng_state {
            Some(state) => state,
            None => {
                let state = self.b.temp(DType::U64, &[2]).slice;
                self.rng_state = Some(state);
                state
            }
        };
        let t = s.graph.ty(node.results[0]).clone();
        let n = t.elements();
        let d = t.dtype;
        let ct = super::scalar::compute(d);
        let mut k = KernelText::new();
        let o = k.output(dest, d);
        let p = k.input(state, DType::U64);
        k.open("XT_FOR(i, n) {");
        let a = k.value_at(s, node.operands[0], &[])?;
        let b = k.value_at(s, node.operands[1], &[])?;
        k.line(format!("const unsigned long long key = {p}[0];"));
        k.line(format!(
            "const unsigned long long c = {p}[1] + (unsigned long long)i;"
        ));
        k.line(format!(
            "unsigned int x[4] = {{(unsigned int)c, (unsigned int)(c >> 32), {RNG_TAG}u, {RNG_TAG}u}};"
        ));
        k.line("xh_philox(x, (unsigned int)key, (unsigned int)(key >> 32));");
        k.line("const unsigned long long w0 = (unsigned long long)x[0] | ((unsigned long long)x[1] << 32);");
        k.line("const unsigned long long w1 = (unsigned long long)x[2] | ((unsigned long long)x[3] << 32);");
        // 2^-53: a 53-bit integer times this is a double in [0, 1), exactly.
        let scale = "(1.0 / 9007199254740992.0)";
        let r = match distribution {
            RngDistribution::Uniform if d.is_float() => {
                k.line(format!("const double u = (double)(w0 >> 11) * {scale};"));
                let wide = format!("((double){a} + ((double){b} - (double){a}) * u)");
                let narrowed = super::scalar::round(d, format!("({ct}){wide}"));
                let r = k.mut_var(ct, narrowed);
                let below = super::scalar::binary(crate::graph::BinaryOp::NextAfter, d, &b, &a);
                k.line(format!("if (!({r} < {b})) {r} = {below};"));
                r
            }
            RngDistribution::Uniform => {
                k.line(format!(
                    "const unsigned long long range = (unsigned long long)({b}) - (unsigned long long)({a});"
                ));
                k.var(
                    ct,
                    format!(
                        "({ct})((unsigned long long)({a}) + (({b}) > ({a}) ? w0 % range : 0ULL))"
                    ),
                )
            }
            RngDistribution::Normal => {
                k.line(format!(
                    "const double u1 = (double)((w0 >> 11) + 1ULL) * {scale};"
                ));
                k.line(format!("const double u2 = (double)(w1 >> 11) * {scale};"));
                k.line("const double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);");
                let e = format!("({ct})((double){a} + (double){b} * z)");
                k.var(ct, super::scalar::round(d, e))
            }
        };
        k.line(format!("{o}[i] = {};", super::scalar::store(d, &r)));
        k.close("}");
        out.extend(self.launch(k, n));
        // The counter moves past this draw's blocks.
        let mut k = KernelText::new();
        let st = k.inout(state, DType::U64);
        k.open("XT_FOR(i, n) {");
        k.line(format!("{st}[1] = {st}[1] + {n}ULL;"));
        k.close("}");
        out.extend(self.launch(k, 1));
        Ok(())
    }
}
