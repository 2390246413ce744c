//! The importer on every fixture: which import and lower, which are refused (with a
//! position), and imported programs run on the host backend against numbers computed here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::path::Path;
use xthunk_core::backend::Backend;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, Session};
use xthunk_core::host::HostBackend;
use xthunk_core::program::Program;
use xthunk_stablehlo::import::{ImportError, import_text};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn fixtures() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".mlir"))
        .collect();
    out.sort();
    out
}

/// The fixtures that import and lower (every form: pretty, generic, located); each other
/// one is refused, with the reason's start given here.
const IMPORTED: &[&str] = &[
    "argmax",
    "barrier_tuple",
    "chlo",
    "composite",
    "cond",
    "dot",
    "embedding",
    "convert",
    "ffi",
    "fft",
    "gather_scatter",
    "linalg",
    "binary",
    "binary_int",
    "compare",
    "mlp",
    "mlp_bf16",
    "pmap",
    "random",
    "reduce",
    "scan",
    "select_clamp",
    "shapes",
    "shard_map",
    "sort",
    "transformer",
    "unary",
    "unary_int",
    "while",
    "windows",
];

const REFUSED: &[(&str, &str)] = &[
    (
        "constants",
        "result 0 tensor<6xf4E2M1FN>: element type f4E2M1FN",
    ),
    ("custom_call", "custom_call @lapack_sgeqrf_ffi"),
    (
        "dtypes",
        "parameter 4 tensor<2xf8E4M3FNUZ>: element type f8E4M3FNUZ",
    ),
    (
        "handwritten",
        "parameter 2 tensor<?x4xf32>: a dynamic or unranked shape",
    ),
    (
        "sharded",
        "a sharding constraint outside a manual computation",
    ),
    (
        "rare",
        "parameter 0 tensor<?x4xf32>: a dynamic or unranked shape",
    ),
];

#[test]
fn every_fixture_imports_or_is_refused_with_a_position() {
    let mut seen = 0;
    for name in fixtures() {
        let base = name.split('.').next().unwrap();
        let text = fixture(&name);
        let got = import_text(&text);
        if IMPORTED.contains(&base) {
            let imp = got.unwrap_or_else(|e| panic!("{name}: {e}"));
            let low = xthunk_tensor::lower::lower(&imp.graph)
                .unwrap_or_else(|e| panic!("{name}: lowering: {e}"));
            println!(
                "{name}: imported, {} kernels, {} gemms",
                low.kernels, low.gemms
            );
        } else {
            let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == base) else {
                panic!("{name} is in neither list");
            };
            let e = got.err().unwrap_or_else(|| panic!("{name} imported"));
            let msg = e.to_string();
            println!("{name}: refused: {msg}");
            assert!(
                msg.contains(&format!("unsupported: {why}")),
                "{name}: {msg}"
            );
            let pos = format!("{}:{}: ", e.pos().line, e.pos().col);
            assert!(e.pos().line > 0 && msg.starts_with(&pos), "{name}: {msg}");
            assert!(!msg.contains('\n'));
        }
        seen += 1;
    }
    assert_eq!(seen, 86);
}

/// Imports `text`, lowers it, runs it on the host with `inputs`; the outputs' bytes.
fn run(text: &str, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let imp = import_text(text).unwrap();
    let low = xthunk_tensor::lower::lower(&imp.graph).unwrap();
    let program = Program::new(low.executable).unwrap();
    let dev = HostBackend::new().device(0).unwrap();
    let session = Session::load(dev, &program, &ExecutorConfig::default(), None).unwrap();
    session.bind(inputs).unwrap();
    session.execute(&ExecuteOptions::default()).unwrap();
    session.read_outputs().unwrap()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn while_fixture_runs() {
    let out = run(
        &fixture("while.mlir"),
        &[f32s(&[2.5]), f32s(&[1.0, 2.0, 3.0])],
    );
    // x += 1 while x < 10: eight trips from 2.5; the array doubles each trip.
    assert_eq!(to_f32(&out[0]), [10.5]);
    assert_eq!(to_f32(&out[1]), [256.0, 512.0, 768.0]);
}

#[test]
fn cond_fixture_runs_both_ways() {
    let xs = [0.5f32, -1.0, 2.0];
    for k in [-3i32, 0, 1, 5] {
        let out = run(
            &fixture("cond.mlir"),
            &[k.to_le_bytes().to_vec(), f32s(&xs)],
        );
        let want0: Vec<f32> = if k > 0 {
            xs.iter().map(|x| x + 1.0).collect()
        } else {
            xs.iter().map(|x| x * 2.0).collect()
        };
        let want1: Vec<f32> = match k.clamp(0, 2) {
            0 => xs.to_vec(),
            1 => xs.iter().map(|x| -x).collect(),
            _ => xs.iter().map(|x| x.sin()).collect(),
        };
        assert_eq!(to_f32(&out[0]), want0, "k = {k}");
        let got1 = to_f32(&out[1]);
        for (g, w) in got1.iter().zip(&want1) {
            assert!((g - w).abs() <= 1e-6, "k = {k}: {got1:?} against {want1:?}");
        }
    }
}

#[test]
fn argmax_fixture_runs() {
    let nan = f32::NAN;
    #[rustfmt::skip]
    let x = [
        1.0, 5.0, 3.0, 5.0, 0.0,
        -1.0, -2.0, -0.5, -3.0, -4.0,
        2.0, nan, 9.0, nan, 1.0,
        7.0, 7.0, 7.0, 7.0, 7.0,
    ];
    let out = run(&fixture("argmax.mlir"), &[f32s(&x)]);
    let got: Vec<i64> = out[0]
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // First maximum, a NaN counting as the largest.
    assert_eq!(got, [1, 2, 1, 0]);
}

#[test]
fn mlp_fixture_loss_matches_a_reference() {
    let (n, d, h, c) = (8usize, 4usize, 16usize, 2usize);
    let val = |i: usize, s: f32| ((i as f32 * 0.37 + s).sin()) * 0.5;
    let x: Vec<f32> = (0..n * d).map(|i| val(i, 0.1)).collect();
    let w1: Vec<f32> = (0..d * h).map(|i| val(i, 1.3)).collect();
    let b1: Vec<f32> = (0..h).map(|i| val(i, 2.1)).collect();
    let w2: Vec<f32> = (0..h * c).map(|i| val(i, 0.7)).collect();
    let y: Vec<f32> = (0..n * c)
        .map(|i| if i % c == (i / c) % c { 1.0 } else { 0.0 })
        .collect();
    let out = run(
        &fixture("mlp.mlir"),
        &[f32s(&x), f32s(&w1), f32s(&b1), f32s(&w2), f32s(&y)],
    );
    let mut loss = 0f64;
    for r in 0..n {
        let mut logits = vec![0f64; c];
        for j in 0..h {
            let mut a = b1[j] as f64;
            for k in 0..d {
                a += x[r * d + k] as f64 * w1[k * h + j] as f64;
            }
            let g = 0.5 * a * (1.0 + (0.7978845608 * (a + 0.044715 * a * a * a)).tanh());
            for (o, l) in logits.iter_mut().enumerate() {
                *l += g * w2[j * c + o] as f64;
            }
        }
        let m = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        for o in 0..c {
            loss -= (logits[o] - lse) * y[r * c + o] as f64;
        }
    }
    loss /= n as f64;
    let got = to_f32(&out[0])[0] as f64;
    assert!((got - loss).abs() < 1e-5, "{got} against {loss}");
    assert_eq!(out.len(), 4);
}

const HAND: &str = r#"
module @m {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<i32>) -> (tensor<3xf32>, tensor<i32>, tensor<f32>) {
    %0:2 = call @pair(%arg0, %arg1) : (tensor<3xf32>, tensor<i32>) -> (tensor<3xf32>, tensor<i32>)
    %1 = stablehlo.tuple %0#0, %0#1 : tuple<tensor<3xf32>, tensor<i32>>
    %2 = stablehlo.get_tuple_element %1[1] : (tuple<tensor<3xf32>, tensor<i32>>) -> tensor<i32>
    %3:2 = stablehlo.optimization_barrier %0#0, %2 : tensor<3xf32>, tensor<i32>
    %cst = stablehlo.constant dense<0.0> : tensor<f32>
    %4 = stablehlo.reduce(%3#0 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
    return %3#0, %3#1, %4 : tensor<3xf32>, tensor<i32>, tensor<f32>
  }
  func.func private @pair(%a: tensor<3xf32>, %b: tensor<i32>) -> (tensor<3xf32>, tensor<i32>) {
    %0 = stablehlo.multiply %a, %a : tensor<3xf32>
    %c = stablehlo.constant dense<7> : tensor<i32>
    %1 = stablehlo.add %b, %c : tensor<i32>
    return %0, %1 : tensor<3xf32>, tensor<i32>
  }
}
"#;

#[test]
fn calls_tuples_and_barriers_resolve_at_import() {
    let imp = import_text(HAND).unwrap();
    let names: Vec<&str> = imp
        .graph
        .results()
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["out0", "out1", "out2"]);
    let out = run(HAND, &[f32s(&[1.0, 2.0, 3.0]), 5i32.to_le_bytes().to_vec()]);
    assert_eq!(to_f32(&out[0]), [1.0, 4.0, 9.0]);
    assert_eq!(out[1], 12i32.to_le_bytes());
    assert_eq!(to_f32(&out[2]), [14.0]);
}

#[test]
fn jax_names_are_kept() {
    let imp = import_text(&fixture("mlp.mlir")).unwrap();
    assert_eq!(imp.result_info[0].as_deref(), Some("result[0]"));
    assert_eq!(imp.result_info[3].as_deref(), Some("result[1][2]"));
    let params: Vec<String> = imp
        .graph
        .params()
        .iter()
        .enumerate()
        .map(|(i, _)| format!("arg{i}"))
        .collect();
    assert_eq!(params.len(), 5);
}

fn refusal(text: &str) -> ImportError {
    import_text(text).expect_err("refused")
}

#[test]
fn recursion_unknown_attributes_and_ops_are_refused_with_positions() {
    let rec = "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n    %0 = call @f(%a) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }\n  func.func @f(%a: tensor<f32>) -> tensor<f32> {\n    %0 = call @f(%a) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }\n}\n";
    let e = refusal(rec).to_string();
    assert!(e.starts_with("7:5: unsupported: recursion: @f"), "{e}");
    let attr = "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n    %0 = \"stablehlo.negate\"(%a) {odd = 1 : i32, mhlo.x = 2 : i32} : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }\n}\n";
    let e = refusal(attr).to_string();
    assert_eq!(e, "3:5: unsupported: attribute `odd` (in stablehlo.negate)");
    let cc = "module {\n  func.func @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n    %0 = stablehlo.custom_call @foo(%a) {operand_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n    return %0 : tensor<2x3xf32>\n  }\n}\n";
    assert_eq!(
        refusal(cc).to_string(),
        "3:5: unsupported: custom_call @foo: operand_layouts[0] = [0, 1] (xthunk passes \
         row-major tensors only) (in stablehlo.custom_call)"
    );
    let bad_type = "module {\n  func.func @main(%a: tensor<4xf8E4M3FNUZ>) -> tensor<4xf8E4M3FNUZ> {\n    return %a : tensor<4xf8E4M3FNUZ>\n  }\n}\n";
    assert!(
        refusal(bad_type)
            .to_string()
            .contains("element type f8E4M3FNUZ")
    );
    let no_main = "module {\n  func.func @f(%a: tensor<f32>) -> tensor<f32> {\n    return %a : tensor<f32>\n  }\n}\n";
    assert!(refusal(no_main).to_string().contains("no function `main`"));
    let parse = "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n    %0 = stablehlo.negate %a : \n";
    assert!(matches!(refusal(parse), ImportError::Parse(_)));
}

#[test]
fn a_splat_constant_is_not_expanded() {
    // 4 GB if expanded: a scalar constant and a broadcast instead.
    let text = "module {\n  func.func @main() -> tensor<1000000x1000xf32> {\n    %0 = stablehlo.constant dense<1.5> : tensor<1000000x1000xf32>\n    return %0 : tensor<1000000x1000xf32>\n  }\n}\n";
    let imp = import_text(text).unwrap();
    let g = &imp.graph;
    assert_eq!(g.nodes().len(), 2);
    assert_eq!(g.ty(g.results()[0].1).dims, [1000000, 1000]);
}

#[test]
fn a_while_whose_regions_take_too_few_arguments_is_refused() {
    let text = "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n    %0 = \"stablehlo.while\"(%a) ({\n      %c = stablehlo.constant dense<true> : tensor<i1>\n      stablehlo.return %c : tensor<i1>\n    }, {\n      %c = stablehlo.constant dense<1.0> : tensor<f32>\n      stablehlo.return %c : tensor<f32>\n    }) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>\n  }\n}\n";
    let e = import_text(text).expect_err("refused").to_string();
    assert!(
        e.starts_with("3:5: a condition and a body taking the 1 operands"),
        "{e}"
    );
}

#[test]
fn long_call_chains_are_refused() {
    let mut text = String::from("module {\n");
    for i in 0..300 {
        let body = if i == 299 {
            "return %a : tensor<f32>".to_string()
        } else {
            format!(
                "%0 = call @f{}(%a) : (tensor<f32>) -> tensor<f32>\n    return %0 : tensor<f32>",
                i + 1
            )
        };
        let name = if i == 0 {
            "main".to_string()
        } else {
            format!("f{i}")
        };
        text +=
            &format!("  func.func @{name}(%a: tensor<f32>) -> tensor<f32> {{\n    {body}\n  }}\n");
    }
    text += "}\n";
    let e = import_text(&text).expect_err("refused").to_string();
    assert!(e.contains("nested deeper than 256"), "{e}");
}

/// 120 `if`s nested in each other's true branch (each returning 2x + 1 at the bottom, the
/// false branches x - 1): imported and lowered from a thread with a 1 MiB stack (the reader,
/// the importer and the lowering run on a stack of their own), in time linear in the depth.
#[test]
fn a_hundred_nested_conditionals_import_and_lower() {
    let depth = 120;
    let t = "tensor<f32>";
    let mut body = format!(
        "%c2 = stablehlo.constant dense<2.0> : {t}\n%c1 = stablehlo.constant dense<1.0> : {t}\n\
         %m = stablehlo.multiply %a, %c2 : {t}\n%s = stablehlo.add %m, %c1 : {t}\n\
         stablehlo.return %s : {t}\n"
    );
    for level in 0..depth {
        body = format!(
            "%r{level} = \"stablehlo.if\"(%p) ({{\n{body}}}, {{\n\
             %o{level} = stablehlo.constant dense<1.0> : {t}\n\
             %d{level} = stablehlo.subtract %a, %o{level} : {t}\n\
             stablehlo.return %d{level} : {t}\n}}) : (tensor<i1>) -> {t}\n\
             stablehlo.return %r{level} : {t}\n"
        );
    }
    // The outermost level returns from main.
    let body = body.replacen(
        &format!("stablehlo.return %r{} : {t}\n", depth - 1),
        &format!("return %r{} : {t}\n", depth - 1),
        1,
    );
    let text = format!(
        "module {{\n  func.func @main(%p: tensor<i1>, %a: {t}) -> {t} {{\n{body}  }}\n}}\n"
    );
    let started = std::time::Instant::now();
    let r = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let imported = import_text(&text).map_err(|e| e.to_string())?;
            let lowered = xthunk_tensor::lower::lower(&imported.graph).map_err(|e| e.to_string());
            lowered.map(|l| l.executable.entry.len())
        })
        .unwrap()
        .join();
    let thunks = r.expect("no stack overflow").expect("imported and lowered");
    assert!(thunks >= 1, "{thunks} thunks");
    eprintln!("{depth} nested ifs: {:?}", started.elapsed());
}

/// A module with one `custom_call @t` on a `tensor<2x3xf32>`; `attrs` its attribute dict.
fn call_module(attrs: &str) -> String {
    format!(
        "module {{\n  func.func @main(%a: tensor<2x3xf32>, %b: tensor<3xi32>) -> (tensor<2x3xf32>, tensor<i64>) {{\n    %0:2 = stablehlo.custom_call @t(%a, %b) {attrs} : (tensor<2x3xf32>, tensor<3xi32>) -> (tensor<2x3xf32>, tensor<i64>)\n    return %0#0, %0#1 : tensor<2x3xf32>, tensor<i64>\n  }}\n}}\n"
    )
}

fn custom_calls(text: &str) -> Vec<xthunk_core::ir::Thunk> {
    let imp = import_text(text).unwrap();
    let low = xthunk_tensor::lower::lower(&imp.graph).unwrap();
    low.executable.entry.clone()
}

#[test]
fn custom_call_becomes_a_custom_call_thunk_with_typed_attributes() {
    use xthunk_core::ir::{AttrArray, AttrValue, Thunk};
    // JAX's `ffi_call` form: the typed attributes in `mhlo.backend_config`; result 0 aliases
    // operand 0, so it starts as a copy of it.
    let text = call_module(
        "{backend_config = \"\", has_side_effect = true, mhlo.backend_config = {b = true, i8 = -3 : i8, u32 = 7 : ui32, n = 9 : i64, h = 1.5 : f16, f = 2.5 : f32, d = 0.25 : f64, s = \"x\", a = array<i64: 1, 2>, l = [1.0 : f32, 2.0 : f32], inner = {w = 4 : i32}}, output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>]}",
    );
    let thunks = custom_calls(&text);
    assert_eq!(thunks.len(), 2, "{thunks:?}");
    let Thunk::Copy(copy) = &thunks[0] else {
        panic!("first a copy of the aliased operand: {thunks:?}")
    };
    let Thunk::CustomCall(c) = &thunks[1] else {
        panic!("then the call: {thunks:?}")
    };
    assert_eq!(c.target, "t");
    assert!(c.side_effect);
    assert_eq!(copy.dst, c.results[0].slice);
    assert_eq!(copy.src, c.operands[0].slice);
    assert_eq!(
        (c.operands.len(), c.results.len(), c.results[1].dims.clone()),
        (2, 2, vec![])
    );
    let a = |n: &str| c.attributes.get(n).cloned().unwrap();
    assert_eq!(a("b"), AttrValue::Bool(true));
    assert_eq!(a("i8"), AttrValue::I32(-3));
    assert_eq!(a("u32"), AttrValue::I32(7));
    assert_eq!(a("n"), AttrValue::I64(9));
    assert_eq!(a("h"), AttrValue::F32(1.5));
    assert_eq!(a("f"), AttrValue::F32(2.5));
    assert_eq!(a("d"), AttrValue::F64(0.25));
    assert_eq!(a("s"), AttrValue::Str("x".into()));
    assert_eq!(a("a"), AttrValue::Array(AttrArray::I64(vec![1, 2])));
    assert_eq!(a("l"), AttrValue::Array(AttrArray::F32(vec![1.0, 2.0])));
    let AttrValue::Dict(inner) = a("inner") else {
        panic!("a dictionary")
    };
    assert_eq!(inner.get("w"), Some(&AttrValue::I32(4)));
    // API version 4: the dictionary is `backend_config` itself; an opaque string otherwise.
    let typed = custom_calls(&call_module(
        "{api_version = 4 : i32, backend_config = {k = 2 : i64}}",
    ));
    let Thunk::CustomCall(c) = &typed[0] else {
        panic!("{typed:?}")
    };
    assert_eq!(c.attributes.get("k"), Some(&AttrValue::I64(2)));
    assert!(!c.side_effect);
    let opaque = custom_calls(&call_module("{backend_config = \"opaque bytes\"}"));
    let Thunk::CustomCall(c) = &opaque[0] else {
        panic!("{opaque:?}")
    };
    assert_eq!(
        c.attributes.get("backend_config"),
        Some(&AttrValue::Str("opaque bytes".into()))
    );
}

#[test]
fn custom_call_refusals_name_what_and_where() {
    for (attrs, why) in [
        (
            "{called_computations = [@f]}",
            "custom_call @t: called_computations",
        ),
        ("{api_version = 0 : i32}", "custom_call @t: api_version"),
        (
            "{mhlo.backend_config = {m = dense<1> : tensor<2x2xi32>}}",
            "custom_call @t: attribute `m`: a dense tensor of rank 2",
        ),
        (
            "{mhlo.backend_config = {m = 18446744073709551615 : ui64}}",
            "custom_call @t: attribute `m`: 18446744073709551615 does not fit an i64",
        ),
        (
            "{mhlo.backend_config = {m = [1 : i32, \"x\"]}}",
            "custom_call @t: attribute `m`: a list of mixed",
        ),
        (
            "{output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = [1]>]}",
            "custom_call @t: an output_operand_alias into a tuple",
        ),
        (
            "{result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]}",
            "custom_call @t: result_layouts[0] = [0, 1]",
        ),
        ("{odd = 1 : i32}", "attribute `odd`"),
    ] {
        let e = refusal(&call_module(attrs)).to_string();
        assert!(
            e.starts_with(&format!("3:5: unsupported: {why}")),
            "{attrs}: {e}"
        );
    }
    // An alias between different types is invalid (the graph's rule), with the position.
    let e = refusal(&call_module(
        "{output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [1], operand_index = 1, operand_tuple_indices = []>]}",
    ))
    .to_string();
    assert!(
        e.starts_with("3:5:") && e.contains("aliases operand 1"),
        "{e}"
    );
}

#[test]
fn the_ffi_fixture_passes_jaxs_keyword_arguments_typed() {
    use xthunk_core::ir::{AttrArray, AttrValue, Thunk};
    for name in ["ffi.mlir", "ffi.generic.mlir"] {
        let thunks = custom_calls(&fixture(name));
        let calls: Vec<_> = thunks
            .iter()
            .filter_map(|t| match t {
                Thunk::CustomCall(c) => Some(c),
                _ => None,
            })
            .collect();
        let targets: Vec<&str> = calls.iter().map(|c| c.target.as_str()).collect();
        assert_eq!(
            targets,
            ["test.scaled_add", "test.top_k", "test.attrs"],
            "{name}"
        );
        let a = &calls[2].attributes;
        let want = [
            ("flag", AttrValue::Bool(true)),
            ("count", AttrValue::I32(7)),
            ("big", AttrValue::I64(1 << 40)),
            ("ratio", AttrValue::F32(0.5)),
            ("precise", AttrValue::F64(0.125)),
            ("label", AttrValue::Str("xthunk".into())),
            ("sizes", AttrValue::Array(AttrArray::I32(vec![1, 2]))),
            ("offsets", AttrValue::Array(AttrArray::I64(vec![3, 4]))),
            ("weights", AttrValue::Array(AttrArray::F32(vec![0.5]))),
        ];
        for (k, v) in want {
            assert_eq!(a.get(k), Some(&v), "{name}: {k}");
        }
        assert_eq!(calls[1].attributes.get("k"), Some(&AttrValue::I64(3)));
        // The scaled add's result aliases x: a copy of x into it comes first.
        let Thunk::Copy(c) = &thunks[0] else {
            panic!("{name}: {thunks:?}")
        };
        assert_eq!(
            (c.src, c.dst),
            (calls[0].operands[0].slice, calls[0].results[0].slice)
        );
    }
}

#[test]
fn sort_fixture_runs() {
    let nan = f32::NAN;
    #[rustfmt::skip]
    let x = [
        1.0, -0.0, 0.0, nan,
        3.0, 3.0, -1.0, 3.0,
        -nan, 2.0, 0.0, -0.0,
        f32::INFINITY, 1.0, f32::NEG_INFINITY, 1.0,
        0.5, nan, 0.5, -2.0,
    ];
    let y: Vec<i32> = (0..20).map(|k| 100 - k).collect();
    let ys: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = run(&fixture("sort.mlir"), &[f32s(&x), ys]);
    // JAX's comparator: -0 as +0, every NaN as +NaN, then the total order; stable.
    let canon = |v: f32| {
        if v == 0.0 {
            0.0
        } else if v.is_nan() {
            f32::NAN
        } else {
            v
        }
    };
    let asc = |a: &f32, b: &f32| canon(*a).total_cmp(&canon(*b));
    let row = |r: usize| -> Vec<usize> {
        let mut o: Vec<usize> = (0..4).collect();
        o.sort_by(|&i, &j| asc(&x[r * 4 + i], &x[r * 4 + j]));
        o
    };
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    // out0: each column sorted (dimension 0).
    let mut want0 = vec![0f32; 20];
    for c in 0..4 {
        let mut col: Vec<f32> = (0..5).map(|r| x[r * 4 + c]).collect();
        col.sort_by(asc);
        for (r, v) in col.into_iter().enumerate() {
            want0[r * 4 + c] = v;
        }
    }
    assert_eq!(bits(&to_f32(&out[0])), bits(&want0));
    // out1: argsort of rows (i64); out2, out3: rows with the payload.
    let got1: Vec<i64> = out[1]
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let got3: Vec<i32> = out[3]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let got2 = bits(&to_f32(&out[2]));
    for r in 0..5 {
        let o = row(r);
        for (i, &k) in o.iter().enumerate() {
            assert_eq!(got1[r * 4 + i], k as i64, "argsort row {r}");
            assert_eq!(got2[r * 4 + i], x[r * 4 + k].to_bits(), "sorted row {r}");
            assert_eq!(got3[r * 4 + i], y[r * 4 + k], "payload row {r}");
        }
    }
    // top_k(2): the total order, descending, lower index first on ties.
    let got4 = bits(&to_f32(&out[4]));
    let got5: Vec<i32> = out[5]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for r in 0..5 {
        let mut o: Vec<usize> = (0..4).collect();
        o.sort_by(|&i, &j| x[r * 4 + j].total_cmp(&x[r * 4 + i]));
        for i in 0..2 {
            assert_eq!(got5[r * 2 + i], o[i] as i32, "top_k row {r}");
            assert_eq!(got4[r * 2 + i], x[r * 4 + o[i]].to_bits(), "top_k row {r}");
        }
    }
}

const SORT_TEXT: &str = r#"module @m {
  func.func public @main(%arg0: tensor<2x5xi32>, %arg1: tensor<i32>) -> (tensor<2x5xi32>, tensor<2x5xi32>) {
    %0:2 = "stablehlo.sort"(%arg0, %arg0) <{DIMENSION}> ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>, %c: tensor<i32>, %d: tensor<i32>):
      %1 = stablehlo.compare GT, %a, %READ, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    }) : (tensor<2x5xi32>, tensor<2x5xi32>) -> (tensor<2x5xi32>, tensor<2x5xi32>)
    return %0#0, %0#1 : tensor<2x5xi32>, tensor<2x5xi32>
  }
}
"#;

#[test]
fn sort_takes_the_spec_defaults_and_refusals_name_what_and_where() {
    // No attributes: the last dimension (-1), descending by the comparator, two operands.
    let text = SORT_TEXT
        .replace("<{DIMENSION}>", "")
        .replace("%READ", "%b");
    let x: Vec<i32> = vec![3, -1, 7, 0, 7, 5, 5, -9, 2, 8];
    let xs: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = run(&text, &[xs, 0i32.to_le_bytes().to_vec()]);
    let got: Vec<i32> = out[1]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, [7, 7, 3, 0, -1, 8, 5, 5, 2, -9]);
    let refused = |dim: &str, read: &str| -> String {
        let t = SORT_TEXT.replace("DIMENSION", dim).replace("%READ", read);
        let e = import_text(&t).unwrap_err();
        assert!(e.pos().line == 3, "{e}");
        println!("{e}");
        e.to_string()
    };
    assert!(refused("dimension = -3 : i64", "%b").contains("`dimension` -3 of rank 2"));
    assert!(refused("dimension = 2 : i64", "%b").contains("`dimension` 2 of rank 2"));
    assert!(
        refused("dimension = 0 : i64", "%arg1")
            .contains("its body reads %arg1 from outside (only constants may be)")
    );
    assert!(refused("dimension = 0 : i64, foo = 1 : i64", "%b").contains("foo"));
    // top_k's k past the last dimension, and result types that are not top_k's.
    let top = |k: u64, idx: &str| {
        format!(
            "module @m {{\n  func.func public @main(%arg0: tensor<3x4xf32>) -> (tensor<3x{k}xf32>, tensor<3x{k}x{idx}>) {{\n    %v, %i = chlo.top_k(%arg0, k = {k}) : tensor<3x4xf32> -> (tensor<3x{k}xf32>, tensor<3x{k}x{idx}>)\n    return %v, %i : tensor<3x{k}xf32>, tensor<3x{k}x{idx}>\n  }}\n}}\n"
        )
    };
    let e = import_text(&top(5, "i32")).unwrap_err().to_string();
    assert!(
        e.starts_with("3:") && e.contains("k = 5 of a last dimension of 4"),
        "{e}"
    );
    let e = import_text(&top(2, "i64")).unwrap_err().to_string();
    assert!(
        e.contains("result 1 is tensor<3x2xi64>, top_k gives tensor<3x2xi32>"),
        "{e}"
    );
    assert!(import_text(&top(4, "i32")).is_ok());
}

/// `select_and_scatter` with a `padding` attribute (JAX pads explicitly, so its cases never
/// set one): padding is never selected, a window of padding only scatters nothing, ties
/// keep the first element in row-major order. Values are halves and small integers, so
/// every sum is exact and the reference (the spec's loop, written here) compares exactly.
#[test]
fn select_and_scatter_with_padding_runs() {
    let text = r#"module {
  func.func public @main(%arg0: tensor<5x7xf32>, %arg1: tensor<3x6xf32>) -> tensor<5x7xf32> {
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %0 = "stablehlo.select_and_scatter"(%arg0, %arg1, %cst) <{padding = dense<[[1, 1], [2, 4]]> : tensor<2x2xi64>, window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 2, 2>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<5x7xf32>, tensor<3x6xf32>, tensor<f32>) -> tensor<5x7xf32>
    return %0 : tensor<5x7xf32>
  }
}"#;
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Values from a pool of 9 halves: ties are common.
    let x: Vec<f32> = (0..35).map(|_| (next() % 9) as f32 * 0.5 - 2.0).collect();
    let src: Vec<f32> = (0..18).map(|_| (next() % 16) as f32).collect();
    let mut want = vec![0.5f32; 35];
    for (w, s) in src.iter().enumerate() {
        let (oi, oj) = (w / 6, w % 6);
        let mut best: Option<(usize, f32)> = None;
        for di in 0..3 {
            for dj in 0..3 {
                let i = (oi * 2 + di) as i64 - 1;
                let j = (oj * 2 + dj) as i64 - 2;
                if !(0..5).contains(&i) || !(0..7).contains(&j) {
                    continue;
                }
                let k = (i * 7 + j) as usize;
                match best {
                    Some((_, b)) if b >= x[k] => {}
                    _ => best = Some((k, x[k])),
                }
            }
        }
        if let Some((k, _)) = best {
            want[k] += s;
        }
    }
    let out = run(text, &[f32s(&x), f32s(&src)]);
    assert_eq!(to_f32(&out[0]), want, "x = {x:?}, source = {src:?}");
}

#[test]
fn the_excluded_op_classes_are_refused_naming_why() {
    let module = |body: &str| {
        format!(
            "module {{\n  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {{\n{body}\n    return %a : tensor<4xf32>\n  }}\n}}\n"
        )
    };
    let cases = [
        (
            "    %t = stablehlo.after_all : !stablehlo.token",
            "tokens and transfers to the host are not supported",
        ),
        (
            "    %s = stablehlo.constant dense<4> : tensor<1xi64>\n    %i = stablehlo.dynamic_iota %s, dim = 0 : (tensor<1xi64>) -> tensor<4xf32>",
            "dynamic shapes are not supported",
        ),
        (
            "    %e = stablehlo.einsum %a, %a, config = \"i,i->i\" : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>",
            "outside the StableHLO specification",
        ),
    ];
    for (body, want) in cases {
        let e = refusal(&module(body)).to_string();
        assert!(e.contains("unsupported") && e.contains(want), "{e}");
    }
    // A map body with what is not elementwise (rng's shape operand, a constant of 0
    // elements, is met first).
    let map = "module {\n  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n    %0 = \"stablehlo.map\"(%a) <{dimensions = array<i64: 0>}> ({\n    ^bb0(%x: tensor<f32>):\n      %c = stablehlo.constant dense<[]> : tensor<0xi64>\n      %r = stablehlo.rng %x, %x, %c, distribution = UNIFORM : (tensor<f32>, tensor<f32>, tensor<0xi64>) -> tensor<f32>\n      stablehlo.return %r : tensor<f32>\n    }) : (tensor<4xf32>) -> tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n";
    let e = refusal(map).to_string();
    assert!(
        e.starts_with("3:5: unsupported: `constant` in a map body"),
        "{e}"
    );
}
