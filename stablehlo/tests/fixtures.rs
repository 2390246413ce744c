//! The JAX fixtures (`tests/fixtures/*.mlir`, written by `tests/fixtures/make.py`): every file
//! parses, and the pretty and generic forms of each program give equal trees.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use xthunk_stablehlo::{canon::canonical, parse};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn names(suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".mlir"))
        .filter(|n| {
            let stem = n.trim_end_matches(".mlir");
            match suffix {
                "" => !stem.contains('.'),
                s => stem.ends_with(s),
            }
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_parses() {
    let mut failures = Vec::new();
    let all: Vec<String> = ["", ".generic", ".loc"]
        .iter()
        .flat_map(|s| names(s))
        .collect();
    assert!(all.len() >= 60, "{} fixtures", all.len());
    for name in &all {
        if let Err(e) = parse(&read(name)) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn pretty_and_generic_forms_agree() {
    let mut failures = Vec::new();
    for name in names("") {
        let stem = name.trim_end_matches(".mlir");
        let pretty = parse(&read(&name));
        let generic = parse(&read(&format!("{stem}.generic.mlir")));
        match (pretty, generic) {
            (Ok(p), Ok(g)) => {
                let (p, g) = (canonical(&p), canonical(&g));
                if p.op != g.op {
                    failures.push(format!("{stem}: {}", first_difference(&p.op, &g.op)));
                }
            }
            (p, g) => failures.push(format!("{stem}: {:?} / {:?}", p.err(), g.err())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The first op (depth first) whose pretty and generic trees differ, shallowly.
fn first_difference(p: &xthunk_stablehlo::Op, g: &xthunk_stablehlo::Op) -> String {
    let (pr, gr): (Vec<_>, Vec<_>) = (
        p.regions.iter().flat_map(|r| &r.blocks).collect(),
        g.regions.iter().flat_map(|r| &r.blocks).collect(),
    );
    if pr.len() == gr.len() {
        for (a, b) in pr.iter().zip(&gr) {
            if a.args != b.args {
                return format!(
                    "block args of {} at {}: {:?} vs {:?}",
                    p.name, p.pos, a.args, b.args
                );
            }
            if a.ops.len() == b.ops.len() {
                for (x, y) in a.ops.iter().zip(&b.ops) {
                    if x != y {
                        return first_difference(x, y);
                    }
                }
            }
        }
    }
    let mut shallow_p = p.clone();
    let mut shallow_g = g.clone();
    shallow_p.regions.clear();
    shallow_g.regions.clear();
    format!(
        "{} at {} / {}:\n  {shallow_p:?}\n  {shallow_g:?}",
        p.name, p.pos, g.pos
    )
}

fn walk<'m>(op: &'m xthunk_stablehlo::Op, out: &mut Vec<&'m xthunk_stablehlo::Op>) {
    out.push(op);
    for r in &op.regions {
        for b in &r.blocks {
            for o in &b.ops {
                walk(o, out);
            }
        }
    }
}

/// The fixtures cover the ops the reader must know (and the trees are not empty).
#[test]
fn fixtures_cover_the_ops() {
    let mut seen = std::collections::BTreeSet::new();
    let mut count = 0;
    for name in names("") {
        let m = parse(&read(&name)).unwrap();
        let mut ops = Vec::new();
        walk(&m.op, &mut ops);
        count += ops.len();
        seen.extend(ops.iter().map(|o| o.name.clone()));
    }
    for op in [
        "stablehlo.add",
        "stablehlo.compare",
        "stablehlo.select",
        "stablehlo.clamp",
        "stablehlo.convert",
        "stablehlo.bitcast_convert",
        "stablehlo.constant",
        "stablehlo.iota",
        "stablehlo.broadcast_in_dim",
        "stablehlo.reshape",
        "stablehlo.transpose",
        "stablehlo.concatenate",
        "stablehlo.slice",
        "stablehlo.dynamic_slice",
        "stablehlo.dynamic_update_slice",
        "stablehlo.pad",
        "stablehlo.reverse",
        "stablehlo.dot_general",
        "stablehlo.reduce",
        "stablehlo.while",
        "stablehlo.case",
        "stablehlo.optimization_barrier",
        "stablehlo.gather",
        "stablehlo.scatter",
        "stablehlo.custom_call",
        "stablehlo.sort",
        "stablehlo.reduce_window",
        "stablehlo.select_and_scatter",
        "stablehlo.convolution",
        "stablehlo.rng_bit_generator",
        "stablehlo.cholesky",
        "stablehlo.triangular_solve",
        "stablehlo.fft",
        "stablehlo.all_reduce",
        "stablehlo.all_gather",
        "stablehlo.reduce_scatter",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.composite",
        "chlo.erf",
        "chlo.top_k",
        "func.call",
        "func.return",
        "func.func",
        "builtin.module",
        "stablehlo.return",
        "sdy.manual_computation",
    ] {
        assert!(seen.contains(op), "no {op} in the fixtures; seen: {seen:?}");
    }
    println!("{count} ops, {} distinct", seen.len());
    assert!(count > 1500, "{count}");
}
