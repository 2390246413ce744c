//! Malformed input: one error with its line:column and the operation being read, never a
//! panic; nesting and sizes bounded.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_stablehlo::{ParseError, parse};

fn err(src: &str) -> ParseError {
    match parse(src) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e,
    }
}

#[track_caller]
fn at(src: &str, line: u32, col: u32, op: &str, words: &str) {
    let e = err(src);
    let msg = e.to_string();
    assert_eq!(
        (e.pos().line, e.pos().col, e.op()),
        (line, col, op),
        "{msg}"
    );
    assert!(msg.contains(words), "{msg}");
    assert!(msg.starts_with(&format!("{line}:{col}: ")), "{msg}");
}

/// The caller's stack: small (the reader runs on a thread of its own, `xthunk_stablehlo::STACK`).
const STACK: usize = 1 << 20;

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    for depth in [40usize, 300, 5000] {
        let src = format!(
            "module {{\n{}{}}}\n",
            "\"a.b\"() ({\n".repeat(depth),
            "}) : () -> ()\n".repeat(depth)
        );
        let r = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || parse(&src).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        match (depth, r) {
            (40 | 300, Ok(())) => {}
            (_, Err(ParseError::TooDeep { .. })) if depth > xthunk_stablehlo::MAX_DEPTH => {}
            (d, r) => panic!("depth {d}: {r:?}"),
        }
    }
    // Pretty forms with regions nest too.
    for (open, close) in [
        ("module {\n", "}\n"),
        ("stablehlo.while() cond {\n", "} do {\n}\n"),
        (
            "%0 = stablehlo.reduce(%a init: %b) across dimensions = [0] : (tensor<f32>, tensor<f32>) -> tensor<f32> reducer(%x: tensor<f32>, %y: tensor<f32>) {\n",
            "}\n",
        ),
    ] {
        let src = format!("module {{\n{}{}}}\n", open.repeat(3000), close.repeat(3000));
        let r = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || parse(&src).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        assert!(
            matches!(r, Err(ParseError::TooDeep { .. })),
            "{open}: {r:?}"
        );
    }
    for (open, close) in [
        ("[", "]"),
        ("{a = ", "}"),
        ("tuple<", ">"),
        ("loc(callsite(", " at \"a\")"),
        ("dense<", "]"),
    ] {
        let inner = match open {
            "loc(callsite(" => format!(
                "loc({}\"a\"{})",
                "callsite(".repeat(3000),
                close.repeat(3000)
            ),
            "dense<" => format!(
                "dense<{}1{}> : tensor<i32>",
                "[".repeat(3000),
                close.repeat(3000)
            ),
            _ => format!("{}i32{}", open.repeat(3000), close.repeat(3000)),
        };
        let src = format!("module attributes {{x = {inner}}} {{\n}}\n");
        let r = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(move || parse(&src).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        assert!(
            matches!(r, Err(ParseError::TooDeep { .. })),
            "{open}: {r:?}"
        );
    }
}

const GOOD: &str = "module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
";

#[test]
fn the_sample_parses() {
    parse(GOOD).unwrap();
}

#[test]
fn truncated_input() {
    // Cut after the add: the function's region is not closed.
    let cut = &GOOD[..GOOD.find("    return").unwrap()];
    at(
        cut,
        4,
        1,
        "func.func",
        "expected `}` closing a region, found end of input",
    );
    // Cut inside a type.
    let cut = &GOOD[..GOOD.find("4xf32>\n    return").unwrap() + 2];
    at(
        cut,
        3,
        48,
        "stablehlo.add",
        "expected an element type, found end of input",
    );
    // Cut inside the function's signature.
    let cut = &GOOD[..GOOD.find("-> tensor").unwrap()];
    // (a function without a body is a declaration; the module is what is left open)
    at(cut, 2, 48, "builtin.module", "end of input");
    at("", 1, 1, "module", "expected a module, found end of input");
    // Every prefix is an error with a position inside the text, never a panic.
    for n in 0..GOOD.len() - 1 {
        let e = err(&GOOD[..n]);
        let lines = GOOD[..n].split('\n').count() as u32;
        assert!(e.pos().line >= 1 && e.pos().line <= lines, "{n}: {e}");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[test]
fn bad_tokens() {
    at(
        &GOOD.replace("%arg0 : tensor<4xf32>", "%arg0 ; tensor<4xf32>"),
        3,
        37,
        "stablehlo.add",
        "expected `:`, found `;`",
    );
    at(
        &GOOD.replace("xf32> {\n", "xf33> {\n"),
        2,
        60,
        "func.func",
        "unknown element type `f33`",
    );
    at(
        &GOOD.replace("stablehlo.add", "mystery.add"),
        3,
        5,
        "mystery.add",
        "no pretty form of `mystery.add`",
    );
    at(
        &GOOD.replace("return %0 :", "return %0#x :"),
        4,
        15,
        "func.return",
        "expected a number",
    );
    at(
        &GOOD.replace("@m {", "@m attributes {a = \"open} {"),
        1,
        27,
        "builtin.module",
        "unterminated string",
    );
    at(
        &GOOD.replace("@m {", "@m attributes {a = 1, a = 2} {"),
        1,
        1,
        "builtin.module",
        "attribute `a` given twice",
    );
    at(&GOOD.replace("%0 = stablehlo.add", "%0 = \"stablehlo.add\"(%arg0, %arg0) : (tensor<4xf32>) -> tensor<4xf32>\n    %9 = stablehlo.add"), 3, 5, "stablehlo.add", "2 operands but 1 operand types");
    at(
        &format!("{GOOD}#loc1 = loc(callsite(\"a\" at))\n"),
        7,
        28,
        "module",
        "expected a location, found `))`",
    );
    at(
        &format!("{GOOD}{GOOD}"),
        7,
        1,
        "module",
        "a second top-level operation",
    );
    at(
        "func.func @f() {\n  return\n}\n",
        1,
        1,
        "module",
        "expected a module, found `func.func`",
    );
}

#[test]
fn unbalanced_braces() {
    at(
        &format!("{GOOD}}}\n"),
        7,
        1,
        "module",
        "expected an operation, found `}`",
    );
    at(
        GOOD.trim_end().trim_end_matches('}'),
        6,
        1,
        "builtin.module",
        "expected `}` closing a region, found end of input",
    );
    at(
        &GOOD.replace("tensor<4xf32> {\n", "tensor<4xf32> {{\n"),
        2,
        66,
        "func.func",
        "expected an operation, found `{`",
    );
    at(
        &GOOD.replace("  }\n}", "  }\n)"),
        6,
        1,
        "builtin.module",
        "expected an operation, found `)`",
    );
}

#[test]
fn wrong_counts() {
    at(
        &GOOD.replace("%0 = stablehlo.add", "%0:2 = stablehlo.add"),
        3,
        5,
        "stablehlo.add",
        "2 results but 1 result types",
    );
    at(
        &GOOD.replace("%0 = stablehlo.add", "%0:0 = stablehlo.add"),
        3,
        8,
        "func.func",
        "bad result count",
    );
    at(
        &GOOD.replace(
            "return %0 : tensor<4xf32>",
            "return %0 : tensor<4xf32>, tensor<4xf32>",
        ),
        4,
        5,
        "func.return",
        "1 operands but 2 operand types",
    );
    let reduce = "module {\n  func.func @f(%a: tensor<4xf32>, %z: tensor<f32>) -> tensor<f32> {\n    %0 = stablehlo.reduce(%a init: %z), (%a init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)\n    return %0 : tensor<f32>\n  }\n}\n";
    at(
        reduce,
        3,
        55,
        "stablehlo.reduce",
        "`applies` needs exactly one operand and one init",
    );
    let wh = "module {\n  func.func @f(%a: tensor<f32>) -> tensor<f32> {\n    %0 = stablehlo.while(%x = %a) : tensor<f32>, tensor<f32>\n    cond {\n    } do {\n    }\n    return %0 : tensor<f32>\n  }\n}\n";
    at(
        wh,
        3,
        37,
        "stablehlo.while",
        "1 iteration arguments but 2 types",
    );
}

/// Names quoted from the input keep an error on one line (control characters escaped).
#[test]
fn errors_stay_on_one_line() {
    let e = err("\"a\\0Ab\"() : () -> ()\n");
    assert_eq!(
        e.to_string(),
        "1:1: expected a module, found `a\\nb` (reading module)"
    );
    let e = err("module {\n  \"x\\0A\"() : (i32) -> ()\n}\n");
    assert_eq!(
        e.to_string(),
        "2:3: 0 operands but 1 operand types (reading x\\n)"
    );
}

/// Columns count characters, also past strings with multi-byte characters.
#[test]
fn columns_count_characters() {
    at(
        "module attributes {a = \"é☃x\", = 1} {\n}\n",
        1,
        31,
        "builtin.module",
        "expected a name, found `=`",
    );
}

/// Every prefix of a JAX fixture (pretty, generic, located) that cuts the module is refused
/// with a position inside it.
#[test]
fn truncated_fixtures() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for name in ["argmax.mlir", "argmax.generic.mlir", "while.loc.mlir"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        // Up to the module's closing brace (the location aliases after it may end anywhere).
        let close = text.rfind("\n}").unwrap() + 1;
        for (n, _) in text.char_indices().filter(|(i, _)| *i <= close) {
            let e = err(&text[..n]);
            let lines = text[..n].split('\n').count() as u32;
            assert!(
                e.pos().line >= 1 && e.pos().line <= lines,
                "{name}[..{n}]: {e}"
            );
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}

/// Values: used only where defined before (functions see nothing from outside), result
/// indices within their group, no name defined twice in a scope.
#[test]
fn value_uses_are_checked() {
    at(
        &GOOD.replace("return %0 :", "return %1 :"),
        4,
        5,
        "func.return",
        "use of undefined value `%1`",
    );
    at(
        &GOOD.replace("return %0 :", "return %0#1 :"),
        4,
        5,
        "func.return",
        "`%0#1` but `%0` has 1 result(s)",
    );
    at(
        &GOOD.replace(
            "    return",
            "    %0 = stablehlo.negate %arg0 : tensor<4xf32>\n    return",
        ),
        4,
        5,
        "stablehlo.negate",
        "value `%0` defined twice",
    );
    at(
        &GOOD.replace(
            "%0 = stablehlo.add %arg0, %arg0",
            "%0 = stablehlo.add %arg0, %0",
        ),
        3,
        5,
        "stablehlo.add",
        "use of undefined value `%0`",
    );
    // A second function does not see the first one's values.
    let two = GOOD.replace(
        "  }\n}\n",
        "  }\n  func.func @g() -> tensor<4xf32> {\n    return %0 : tensor<4xf32>\n  }\n}\n",
    );
    at(&two, 7, 5, "func.return", "use of undefined value `%0`");
    // A region sees its enclosing block's values (a while body using an outer value).
    let body = GOOD.replace(
        "    return %0",
        "    %1 = stablehlo.while(%i = %0) : tensor<4xf32>\n    cond {\n      %c = stablehlo.constant dense<true> : tensor<i1>\n      stablehlo.return %c : tensor<i1>\n    } do {\n      %n = stablehlo.add %i, %0 : tensor<4xf32>\n      stablehlo.return %n : tensor<4xf32>\n    }\n    return %1",
    );
    parse(&body).unwrap();
}
