//! Decoded `dense` values against the bytes numpy gives (`tests/fixtures/constants.json`,
//! written by `make.py` beside the `constants` program), and the checks of decoding: counts,
//! ranges, splats, hex blobs, `dense_resource` blobs, float formats.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use xthunk_stablehlo::dense::{MAX_BYTES, decode};
use xthunk_stablehlo::{Module, Op, ParseError, parse};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn body(m: &Module) -> &[Op] {
    &m.function("main").unwrap().block(0).unwrap().ops
}

#[test]
fn constants_match_numpy() {
    let m = parse(&fixture("constants.mlir")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&fixture("constants.json")).unwrap();
    let ops = body(&m);
    let ret = ops.last().unwrap();
    assert_eq!(ret.name, "func.return");
    let mut checked = 0;
    for (name, v) in expected.as_object().unwrap() {
        let index = v[0].as_u64().unwrap() as usize;
        let want = v[1].as_str().unwrap();
        let value = &ret.operands[index];
        let def = ops
            .iter()
            .find(|o| o.results.iter().any(|g| g.name == value.name))
            .unwrap_or_else(|| panic!("{name}: no definition of %{}", value.name));
        assert_eq!(def.name, "stablehlo.constant", "{name}");
        let got = decode(
            def.attr("value").unwrap(),
            &m.resources,
            MAX_BYTES,
            &def.name,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(hex(&got), want, "{name}");
        checked += 1;
    }
    assert_eq!(checked, 28);
}

fn constant(text: &str) -> Result<Vec<u8>, ParseError> {
    let src = format!(
        "module {{\n  func.func @main() {{\n    %0 = stablehlo.constant {text}\n    return\n  }}\n}}\n"
    );
    let m = parse(&src)?;
    let op = &body(&m)[0];
    decode(op.attr("value").unwrap(), &m.resources, MAX_BYTES, &op.name)
}

#[test]
fn splats_hex_and_bit_patterns() {
    assert_eq!(
        hex(&constant("dense<1> : tensor<3xi16>").unwrap()),
        "010001000100"
    );
    assert_eq!(
        hex(&constant("dense<true> : tensor<2xi1>").unwrap()),
        "0101"
    );
    assert_eq!(hex(&constant("dense<-1> : tensor<i8>").unwrap()), "ff");
    assert_eq!(
        hex(&constant("dense<0x7E00> : tensor<2xf16>").unwrap()),
        "007e007e"
    );
    assert_eq!(
        hex(&constant("dense<[0x3C00, 1.0]> : tensor<2xf16>").unwrap()),
        "003c003c"
    );
    assert_eq!(hex(&constant("dense<1.0> : tensor<bf16>").unwrap()), "803f");
    assert_eq!(
        hex(&constant("dense<\"0x0100\"> : tensor<3xi16>").unwrap()),
        "010001000100"
    );
    assert_eq!(
        hex(&constant("dense<\"0x01000200\"> : tensor<2xi16>").unwrap()),
        "01000200"
    );
    assert_eq!(hex(&constant("dense<> : tensor<0xf32>").unwrap()), "");
    assert_eq!(
        hex(&constant("dense<(1.0,-2.0)> : tensor<complex<f32>>").unwrap()),
        "0000803f000000c0"
    );
    assert_eq!(
        hex(&constant("dense<-0.0> : tensor<f8E4M3FNUZ>").unwrap()),
        "00"
    );
    assert_eq!(
        hex(&constant("dense<0x7FF8000000000000> : tensor<f64>").unwrap()),
        "000000000000f87f"
    );
    assert_eq!(hex(&constant("dense<255> : tensor<ui8>").unwrap()), "ff");
    assert_eq!(
        hex(&constant("dense<[[1, 2], [3, 4]]> : tensor<2x2xi4>").unwrap()),
        "01020304"
    );
}

#[test]
fn dense_resource_blobs() {
    let src = "module {\n  func.func @main() {\n    %0 = stablehlo.constant dense_resource<blob1> : tensor<2xf32>\n    return\n  }\n}\n{-#\n  dialect_resources: {\n    builtin: {\n      blob1: \"0x040000000000803F00000040\"\n    }\n  }\n#-}\n";
    let m = parse(src).unwrap();
    assert_eq!(m.resources[0].alignment, 4);
    let op = &body(&m)[0];
    let got = decode(op.attr("value").unwrap(), &m.resources, MAX_BYTES, &op.name).unwrap();
    assert_eq!(hex(&got), "0000803f00000040");
    // Missing, short and misaligned blobs are refused.
    let missing = src.replace("dense_resource<blob1>", "dense_resource<blob2>");
    let m = parse(&missing).unwrap();
    let op = &body(&m)[0];
    let e = decode(op.attr("value").unwrap(), &m.resources, MAX_BYTES, &op.name).unwrap_err();
    assert!(e.to_string().contains("no resource `blob2`"), "{e}");
    assert_eq!((e.pos().line, e.pos().col), (3, 29));
    let short = src.replace("0x040000000000803F00000040", "0x0400");
    assert!(parse(&short).unwrap_err().to_string().contains("alignment"));
}

fn refused(text: &str, words: &str) {
    let e = constant(text).unwrap_err();
    assert!(
        matches!(e, ParseError::Dense { .. } | ParseError::TooLarge { .. }),
        "{text}: {e:?}"
    );
    assert!(e.to_string().contains(words), "{text}: {e}");
    assert_eq!((e.pos().line, e.pos().col), (3, 29), "{text}: {e}");
    assert_eq!(e.op(), "stablehlo.constant");
}

#[test]
fn wrong_values_are_refused() {
    refused(
        "dense<[1, 2]> : tensor<3xi32>",
        "2 elements where the shape has 3",
    );
    refused(
        "dense<[[1, 2], [3]]> : tensor<2x2xi32>",
        "1 elements where the shape has 2",
    );
    refused("dense<[1, 2]> : tensor<2x1xi32>", "less list nesting");
    refused("dense<[[1]]> : tensor<1xi32>", "more list nesting");
    refused("dense<256> : tensor<i8>", "does not fit i8");
    refused("dense<-129> : tensor<i8>", "does not fit i8");
    refused("dense<256> : tensor<ui8>", "does not fit");
    refused("dense<-1> : tensor<ui8>", "does not fit");
    refused("dense<0x10000> : tensor<f16>", "wider than the type");
    refused("dense<1.0e39> : tensor<f32>", "out of range");
    refused("dense<500.0> : tensor<f8E4M3FN>", "out of range");
    refused("dense<\"0x010203\"> : tensor<2xi16>", "holds 3 bytes");
    refused("dense<> : tensor<2xf32>", "no elements");
    refused("dense<1> : tensor<?xf32>", "static shape");
    refused("dense<1> : tensor<1000000000000xf32>", "exceeds the limit");
    refused(
        "dense<1> : tensor<4294967296x4294967296x4294967296xf32>",
        "overflows",
    );
    refused("dense<\"0x02\"> : tensor<i1>", "neither 0 nor 1");
    refused("dense<1.5> : tensor<i32>", "expected an integer");
    refused("dense<1.5> : tensor<complex<f32>>", "complex");
    refused(
        "dense<0x7FC00000> : tensor<f4E2M1FN>",
        "wider than the type",
    );
    refused(
        "dense<[1.0, 0x7E]> : tensor<2xf4E2M1FN>",
        "wider than the type",
    );
    refused("dense<7.0> : tensor<f4E2M1FN>", "out of range");
    refused(
        "dense<-1.0> : tensor<f8E8M0FNU>",
        "positive and finite only",
    );
    refused("dense<0.0> : tensor<f8E8M0FNU>", "positive and finite only");
    refused("dense<1.0e39> : tensor<f8E8M0FNU>", "out of range");
}

/// Rounding to the narrow float formats is to nearest, ties to even.
#[test]
fn narrow_floats_round_to_nearest_even() {
    // 1 + 2^-11 is halfway between two f16 values: ties go to the even one (1.0).
    assert_eq!(
        hex(&constant("dense<1.00048828125> : tensor<f16>").unwrap()),
        "003c"
    );
    // 1 + 3 * 2^-11 rounds up to 1 + 2^-9 (0x3C02).
    assert_eq!(
        hex(&constant("dense<1.00146484375> : tensor<f16>").unwrap()),
        "023c"
    );
    // The smallest f16 subnormal, and half of it (a tie with zero: even is zero).
    assert_eq!(
        hex(&constant("dense<5.9604644775390625e-08> : tensor<f16>").unwrap()),
        "0100"
    );
    assert_eq!(
        hex(&constant("dense<2.98023223876953125e-08> : tensor<f16>").unwrap()),
        "0000"
    );
    assert_eq!(
        hex(&constant("dense<448.0> : tensor<f8E4M3FN>").unwrap()),
        "7e"
    );
    assert_eq!(
        hex(&constant("dense<57344.0> : tensor<f8E5M2>").unwrap()),
        "7b"
    );
    // f8E8M0FNU: 3 * 2^0 is a tie between 2^1 and 2^2: the even exponent field (128, 2^1)
    // wins; 1.4 is nearer 1 than 2.
    assert_eq!(
        hex(&constant("dense<3.0> : tensor<f8E8M0FNU>").unwrap()),
        "80"
    );
    assert_eq!(
        hex(&constant("dense<1.4> : tensor<f8E8M0FNU>").unwrap()),
        "7f"
    );
    assert_eq!(
        hex(&constant("dense<0x7F> : tensor<f8E4M3FN>").unwrap()),
        "7f"
    );
}
