//! `collectives/ragged_all_to_all_*`: the ragged all-to-all on 2 to 8 ranks, against a
//! reference computed here from the definition (JAX's `lax.ragged_all_to_all`: member `s`'s
//! rows `input_offsets[t] .. + send_sizes[t]` land at row `output_offsets[t]` of member `t`'s
//! output; every other output row keeps its contents).
//!
//! Each program holds two ragged all-to-alls: f32 rows of 3 elements with i32 indices, and i8
//! rows of 1 element with i64 indices. Part sizes are random with zeros among them (`uneven`),
//! or all zero (`empty`: every output unchanged); parts sit in a random order with random gaps
//! in both the operand and the output, so offsets are not prefix sums. Outputs start as random
//! bytes, which the rows nobody writes must keep. One check runs in groups (`[[0,2],[1,3]]`
//! on 4 ranks), and a rank in no group keeps its output (`[[0,1]]` on 3 ranks).

use super::common::{RUN_LIMIT, check};
use super::runner::{RankRun, all_ok, spmd};
use crate::check::Check;
use crate::util::{CheckRng, compare_bytes, fail, random_bytes};
use rand::Rng;
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::ExecutorConfig;
use xthunk_core::ir::{DType, RaggedAllToAllThunk};

/// The two operations of each program: (dtype, elements per row, index dtype).
const OPS: [(DType, usize, DType); 2] = [(DType::F32, 3, DType::I32), (DType::I8, 1, DType::I64)];

/// The checks: `uneven` and `empty` on 2 to 8 ranks, and the two group shapes.
pub(super) fn checks() -> Vec<Check> {
    let mut v = Vec::new();
    for n in 2..=8usize {
        v.push(ragged(
            format!("ragged_all_to_all_uneven_{n}ranks"),
            n,
            vec![],
            false,
        ));
        v.push(ragged(
            format!("ragged_all_to_all_empty_{n}ranks"),
            n,
            vec![],
            true,
        ));
    }
    v.push(ragged(
        "ragged_all_to_all_groups_4ranks".into(),
        4,
        vec![vec![0, 2], vec![1, 3]],
        false,
    ));
    v.push(ragged(
        "ragged_all_to_all_leave_out_3ranks".into(),
        3,
        vec![vec![0, 1]],
        false,
    ));
    v
}

/// One operation's layout over a group of `m`: `sizes[s][t]` rows from member `s` to `t`, and
/// where they sit in `s`'s operand (`input[s][t]`) and `t`'s output (`output[t][s]`).
struct Layout {
    sizes: Vec<Vec<usize>>,
    input: Vec<Vec<usize>>,
    output: Vec<Vec<usize>>,
    in_rows: usize,
    out_rows: usize,
}

/// Places parts of `sizes[k]` rows in a random order with gaps of 0 or 1 row; their offsets
/// and the rows used.
fn place(rng: &mut CheckRng, sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut offsets = vec![0; sizes.len()];
    let mut at = 0;
    for k in order {
        at += rng.random_range(0..=1usize);
        offsets[k] = at;
        at += sizes[k];
    }
    (offsets, at)
}

fn layout(rng: &mut CheckRng, m: usize, empty: bool) -> Layout {
    let sizes: Vec<Vec<usize>> = (0..m)
        .map(|_| {
            (0..m)
                .map(|_| {
                    // About a third of the parts empty, the rest 1 to 5 rows.
                    if empty || rng.random_range(0..3) == 0 {
                        0
                    } else {
                        rng.random_range(1..=5)
                    }
                })
                .collect()
        })
        .collect();
    let (mut input, mut output) = (Vec::new(), Vec::new());
    let (mut in_rows, mut out_rows) = (1, 1);
    for (r, mine) in sizes.iter().enumerate() {
        let (o, used) = place(rng, mine);
        input.push(o);
        in_rows = in_rows.max(used);
        let received: Vec<usize> = (0..m).map(|s| sizes[s][r]).collect();
        let (o, used) = place(rng, &received);
        output.push(o);
        out_rows = out_rows.max(used);
    }
    Layout {
        sizes,
        input,
        output,
        in_rows: in_rows + 1,
        out_rows: out_rows + 1,
    }
}

/// Index entries as bytes of `dtype` (i32 or i64, little-endian).
fn index_bytes(values: impl IntoIterator<Item = usize>, dtype: DType) -> Vec<u8> {
    values
        .into_iter()
        .flat_map(|v| match dtype {
            DType::I32 => (v as i32).to_le_bytes().to_vec(),
            _ => (v as i64).to_le_bytes().to_vec(),
        })
        .collect()
}

fn ragged(name: String, n: usize, groups: Vec<Vec<u32>>, empty: bool) -> Check {
    let prog = name.clone();
    check(name, n, move |ctx, rng| {
        let all: Vec<Vec<u32>> = vec![(0..n as u32).collect()];
        let gs = if groups.is_empty() { &all } else { &groups };
        let m = gs[0].len();
        // The group and position of each rank (None: in no group).
        let place_of = |r: usize| {
            gs.iter()
                .find_map(|g| g.iter().position(|x| *x as usize == r).map(|p| (g, p)))
        };
        // One layout per operation and group (every group has its own parts).
        let layouts: Vec<Vec<Layout>> = OPS
            .iter()
            .map(|_| gs.iter().map(|_| layout(rng, m, empty)).collect())
            .collect();
        let rows = |k: usize| {
            let ls = &layouts[k];
            (
                ls.iter().map(|l| l.in_rows).max().unwrap_or(1),
                ls.iter().map(|l| l.out_rows).max().unwrap_or(1),
            )
        };
        let mut b = ExecutableBuilder::new(prog.as_str());
        for (k, (dtype, row, ix)) in OPS.into_iter().enumerate() {
            let (ir, or) = rows(k);
            let x = b.parameter(&format!("x{k}"), dtype, &[(ir * row) as u64]);
            let arrays: Vec<_> = [
                "input_offsets",
                "send_sizes",
                "output_offsets",
                "recv_sizes",
            ]
            .iter()
            .map(|a| b.parameter(&format!("{a}{k}"), ix, &[m as u64]))
            .collect();
            let y = b.output(&format!("y{k}"), dtype, &[(or * row) as u64]);
            b.push(
                RaggedAllToAllThunk {
                    operand: x.slice(),
                    output: y.slice(),
                    input_offsets: arrays[0].slice(),
                    send_sizes: arrays[1].slice(),
                    output_offsets: arrays[2].slice(),
                    recv_sizes: arrays[3].slice(),
                    dtype,
                    index_dtype: ix,
                    row_elements: row as u64,
                    groups: groups.clone(),
                }
                .into(),
            );
        }
        let exe = b
            .build()
            .map_err(|e| fail(format!("building `{prog}`: {e}")))?;
        let mut runs = Vec::new();
        let mut operands: Vec<Vec<Vec<u8>>> = Vec::new();
        for r in 0..n {
            let (mut params, mut inits, mut xs) = (Vec::new(), Vec::new(), Vec::new());
            for (k, (dtype, row, ix)) in OPS.into_iter().enumerate() {
                let (ir, or) = rows(k);
                let x = random_bytes(rng, ir * row * dtype.size());
                params.push(x.clone());
                xs.push(x);
                let arrays = match place_of(r) {
                    Some((g, p)) => {
                        let gi = gs.iter().position(|h| h == g).unwrap_or(0);
                        let l = &layouts[k][gi];
                        [
                            index_bytes(l.input[p].iter().copied(), ix),
                            index_bytes(l.sizes[p].iter().copied(), ix),
                            index_bytes((0..m).map(|t| l.output[t][p]), ix),
                            index_bytes((0..m).map(|s| l.sizes[s][p]), ix),
                        ]
                    }
                    None => std::array::from_fn(|_| index_bytes(vec![0; m], ix)),
                };
                params.extend(arrays);
                inits.push(random_bytes(rng, or * row * dtype.size()));
            }
            runs.push(RankRun {
                exe: exe.clone(),
                params,
                outputs_init: inits,
            });
            operands.push(xs);
        }
        let inits: Vec<Vec<Vec<u8>>> = runs.iter().map(|r| r.outputs_init.clone()).collect();
        let outputs = all_ok(spmd(
            ctx,
            ctx.cliques()?,
            runs,
            &ExecutorConfig::default(),
            RUN_LIMIT,
        )?)?;
        for (t, out) in outputs.iter().enumerate() {
            for (k, (dtype, row, _)) in OPS.into_iter().enumerate() {
                let rb = row * dtype.size();
                let mut want = inits[t][k].clone();
                if let Some((g, p)) = place_of(t) {
                    let gi = gs.iter().position(|h| h == g).unwrap_or(0);
                    let l = &layouts[k][gi];
                    for (s, sender) in g.iter().enumerate() {
                        let rows = l.sizes[s][p];
                        let from = l.input[s][p] * rb;
                        let to = l.output[p][s] * rb;
                        want[to..to + rows * rb].copy_from_slice(
                            &operands[*sender as usize][k][from..from + rows * rb],
                        );
                    }
                }
                compare_bytes(
                    &format!("rank {t} of {n}: ragged_all_to_all {k} ({dtype}, rows of {row})"),
                    &out[k],
                    &want,
                )?;
            }
        }
        Ok(())
    })
}
