//! Input–output aliases: text and binary round trips, and the verifier's refusals (each
//! naming the alias, the output and the parameter).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{DType, Executable};
use xthunk_proto::{decode, encode, parse_text, to_text};

/// `w_new = copy(w)`, `z = copy(x)`: `w` f32[4], `x` f32[4], `h` f16[4] parameters.
fn program(aliases: &[(u32, u32)]) -> Executable {
    let mut b = ExecutableBuilder::new("aliases");
    let w = b.parameter("w", DType::F32, &[4]);
    let x = b.parameter("x", DType::F32, &[4]);
    let _h = b.parameter("h", DType::F16, &[8]);
    let w_new = b.output("w_new", DType::F32, &[4]);
    let z = b.output("z", DType::F32, &[4]);
    b.copy(w.slice, w_new.slice);
    b.copy(x.slice, z.slice);
    for &(o, p) in aliases {
        b.alias(o, p);
    }
    b.build_unchecked()
}

fn refusal(aliases: &[(u32, u32)]) -> String {
    let text = to_text(&program(aliases));
    parse_text(&text).unwrap_err().to_string()
}

#[test]
fn aliases_round_trip_through_text_and_binary() {
    let exe = program(&[(0, 0), (1, 1)]);
    xthunk_core::verify(&exe).unwrap();
    let text = to_text(&exe);
    assert!(text.contains("aliases"), "{text}");
    assert_eq!(parse_text(&text).unwrap(), exe);
    assert_eq!(decode(&encode(&exe)).unwrap(), exe);
    let one = parse_text(&to_text(&program(&[(1, 0)]))).unwrap();
    assert_eq!(one.aliases.len(), 1);
    assert_eq!((one.aliases[0].output, one.aliases[0].parameter), (1, 0));
}

#[test]
fn the_verifier_names_both_sides_of_a_bad_alias() {
    let e = refusal(&[(0, 2)]);
    assert!(e.contains("aliases[0]"), "{e}");
    assert!(e.contains("output 0 `w_new` and parameter 2 `h`"), "{e}");
    assert!(e.contains("[4] x f32 against [8] x f16"), "{e}");
    let e = refusal(&[(0, 0), (1, 0)]);
    assert!(e.contains("aliases[1]"), "{e}");
    assert!(
        e.contains("parameter 0 is already aliased by aliases[0]"),
        "{e}"
    );
    let e = refusal(&[(0, 0), (0, 1)]);
    assert!(
        e.contains("output 0 is already aliased by aliases[0]"),
        "{e}"
    );
    let e = refusal(&[(2, 0)]);
    assert!(e.contains("output 2 and parameter 0"), "{e}");
    assert!(e.contains("2 outputs and 3 parameters"), "{e}");
}
