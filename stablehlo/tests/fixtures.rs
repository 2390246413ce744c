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
    let all: Vec<String> = ["", ".generic", ".loc", ".src"]
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
        "stablehlo.if",
        "stablehlo.tuple",
        "stablehlo.get_tuple_element",
        "stablehlo.map",
        "stablehlo.after_all",
        "stablehlo.real",
        "stablehlo.imag",
        "stablehlo.rng",
        "stablehlo.einsum",
        "stablehlo.dynamic_broadcast_in_dim",
        "stablehlo.set_dimension_size",
        "stablehlo.get_dimension_size",
        "stablehlo.dynamic_iota",
        "stablehlo.broadcast",
        "stablehlo.dot",
        "stablehlo.replica_id",
        "stablehlo.partition_id",
        "sdy.mesh",
        "sdy.sharding_constraint",
    ] {
        assert!(seen.contains(op), "no {op} in the fixtures; seen: {seen:?}");
    }
    println!("{count} ops, {} distinct", seen.len());
    assert!(count > 1500, "{count}");
}

/// With locations (`as_text(debug_info=True)`) the tree is the same but for the locations.
#[test]
fn located_forms_agree_without_locations() {
    use xthunk_stablehlo::canon::without_locations;
    let located = names(".loc");
    assert!(located.len() >= 5);
    for name in located {
        let stem = name.trim_end_matches(".loc.mlir");
        let with = parse(&read(&name)).unwrap();
        assert!(!with.loc_aliases.is_empty(), "{name}");
        let plain = parse(&read(&format!("{stem}.mlir"))).unwrap();
        assert!(
            canonical(&without_locations(&with)).op == canonical(&plain).op,
            "{stem}: located and plain forms differ"
        );
    }
}

/// Locations keep what they say: files, names, call sites, fused lists, aliases resolved.
#[test]
fn locations_resolve() {
    use xthunk_stablehlo::Location;
    let m = parse(&read("handwritten.loc.mlir")).unwrap();
    let names: Vec<_> = m.functions().filter_map(|f| f.symbol()).collect();
    assert_eq!(names, ["main", "pair", "quoted.name"]);
    let entry = m.function("main").unwrap().block(0).unwrap();
    assert!(
        matches!(&entry.args[0].loc, Some(Location::Name { name, child: None }) if name == "x")
    );
    let tuple = &entry.ops[0];
    assert_eq!(tuple.name, "stablehlo.tuple");
    assert_eq!((tuple.pos.line, tuple.pos.col), (14, 5));
    let Location::Fused { metadata, locs } = m.resolve(tuple.loc.as_ref().unwrap()) else {
        panic!("{:?}", tuple.loc)
    };
    assert!(matches!(metadata.as_deref(), Some(xthunk_stablehlo::Attr::Str(s)) if s == "meta"));
    assert!(
        matches!(m.resolve(&locs[0]), Location::File { file, line: 3, col: 4, .. } if file == "a.py")
    );
    let gte = &entry.ops[1];
    let Location::CallSite { callee, caller } = m.resolve(gte.loc.as_ref().unwrap()) else {
        panic!("{:?}", gte.loc)
    };
    assert!(matches!(m.resolve(callee), Location::Name { name, .. } if name == "f"));
    assert!(matches!(m.resolve(caller), Location::Name { name, .. } if name == "g"));
    // JAX's own: `loc("jit(f)/dot_general"(#loc15))` style names with callsite children.
    let m = parse(&read("mlp.loc.mlir")).unwrap();
    let ranges = m
        .loc_aliases
        .iter()
        .filter(|(_, l)| matches!(l, Location::File { end: Some(_), .. }))
        .count();
    assert!(ranges > 5, "{ranges}");
}

/// The comparison is not blind: a changed op or value is a difference.
#[test]
fn differences_are_seen() {
    let text = read("binary.mlir");
    let base = canonical(&parse(&text).unwrap());
    let changed = text.replacen("stablehlo.subtract", "stablehlo.add", 1);
    assert!(canonical(&parse(&changed).unwrap()).op != base.op);
    let text = read("constants.mlir");
    let base = canonical(&parse(&text).unwrap());
    let changed = text.replacen("-2147483648", "-2147483647", 1);
    assert!(canonical(&parse(&changed).unwrap()).op != base.op);
    let text = read("shapes.mlir");
    let base = canonical(&parse(&text).unwrap());
    let changed = text.replacen("dims = [0, 1, 3]", "dims = [0, 1, 2]", 1);
    assert_ne!(changed, text);
    assert!(canonical(&parse(&changed).unwrap()).op != base.op);
}

/// The accessors a lowering reads attributes and types through.
#[test]
fn attribute_and_type_accessors() {
    use xthunk_stablehlo::ElementType;
    let find = |file: &str, op: &str| {
        let m = parse(&read(file)).unwrap();
        let mut ops = Vec::new();
        walk(&m.op, &mut ops);
        ops.into_iter().find(|o| o.name == op).cloned().unwrap()
    };
    let dot = find("dot.mlir", "stablehlo.dot_general");
    let dims = dot.attr("dot_dimension_numbers").unwrap();
    assert_eq!(
        dims.field("lhs_batching_dimensions").unwrap().as_ints(),
        Some(vec![0])
    );
    assert_eq!(
        dims.field("rhs_contracting_dimensions").unwrap().as_ints(),
        Some(vec![1])
    );
    assert_eq!(dot.operand_types[0].static_shape(), Some(vec![2, 3, 4]));
    assert_eq!(dot.result_types[0].element(), Some(ElementType::F32));
    let cmp = find("argmax.mlir", "stablehlo.compare");
    assert_eq!(
        cmp.attr("comparison_direction").unwrap().enum_value(),
        Some("GT")
    );
    assert_eq!(
        cmp.attr("compare_type").unwrap().enum_value(),
        Some("FLOAT")
    );
    let iota = find("argmax.mlir", "stablehlo.iota");
    assert_eq!(iota.attr("iota_dimension").unwrap().as_int(), Some(1));
    let gather = find("gather_scatter.mlir", "stablehlo.gather");
    let g = gather.attr("dimension_numbers").unwrap();
    assert_eq!(g.field("start_index_map").unwrap().as_ints(), Some(vec![0]));
    assert_eq!(
        gather.attr("slice_sizes").unwrap().as_ints(),
        Some(vec![1, 4])
    );
    assert_eq!(
        gather.attr("indices_are_sorted").unwrap().as_bool(),
        Some(false)
    );
    let cc = find("custom_call.mlir", "stablehlo.custom_call");
    assert_eq!(
        cc.attr("call_target_name").unwrap().as_str(),
        Some("lapack_sgeqrf_ffi")
    );
    let dynamic = find("handwritten.mlir", "stablehlo.get_dimension_size");
    assert_eq!(dynamic.operand_types[0].static_shape(), None);
}

/// Every type of every fixture is written back as MLIR writes it: the text reads back to the
/// same type.
#[test]
fn types_display_as_mlir_writes_them() {
    let mut seen = std::collections::BTreeSet::new();
    for name in names(".generic") {
        let text = read(&name);
        let m = parse(&text).unwrap();
        let mut ops = Vec::new();
        walk(&m.op, &mut ops);
        for op in ops {
            for t in op.operand_types.iter().chain(&op.result_types) {
                let shown = t.to_string();
                // The generic form prints every operand and result type as it is.
                assert!(text.contains(&shown), "{name}: {shown}");
                seen.insert(shown);
            }
        }
    }
    assert!(seen.len() > 150, "{}", seen.len());
    for text in &seen {
        let src = format!("module attributes {{t = {text}}} {{\n}}\n");
        let m = parse(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
        let Some(xthunk_stablehlo::Attr::Type(t)) = m.op.attr("t") else {
            panic!("{text}: {:?}", m.op.attr("t"))
        };
        assert_eq!(&t.to_string(), text);
    }
    for t in [
        "tensor<4x?xf32>",
        "tensor<*xbf16>",
        "tuple<tensor<i1>, !stablehlo.token>",
        "(tensor<f32>) -> (tensor<f32>, tensor<ui8>)",
        "tensor<2xcomplex<f64>>",
        "tensor<f4E2M1FN>",
    ] {
        assert!(
            seen.contains(t)
                || {
                    let m = parse(&format!("module attributes {{t = {t}}} {{\n}}\n")).unwrap();
                    matches!(m.op.attr("t"), Some(xthunk_stablehlo::Attr::Type(x)) if x.to_string() == t)
                },
            "{t}"
        );
    }
}
