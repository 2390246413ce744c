//! The `custom_call` thunk (field 20) in both formats: attributes of every type round-trip
//! exactly (text and binary), and bad input (an attribute of an unknown type, dims that do not
//! match their slice, a missing API version, duplicate attribute names, overlapping results)
//! is an error naming the thunk and the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::ir::{
    AttrValue, Attributes, CommandBufferThunk, CustomCallThunk, DType, Executable, Thunk,
};
use xthunk_proto::{ProtoError, decode, encode, parse_text, to_text};

fn with_call(c: impl FnOnce(CustomCallThunk) -> CustomCallThunk) -> Executable {
    let mut b = ExecutableBuilder::new("cc");
    let x = b.parameter("x", DType::F32, &[2, 3]);
    let y = b.output("y", DType::I32, &[4]);
    let call = CustomCallThunk::new("fw.op")
        .operand(x.buffer())
        .result(y.buffer());
    b.push(Thunk::CommandBuffer(CommandBufferThunk {
        body: vec![Thunk::CustomCall(c(call))],
    }));
    b.build_unchecked()
}

fn every_type(c: CustomCallThunk) -> CustomCallThunk {
    let inner = Attributes(vec![
        ("w".into(), 0.25f64.into()),
        (
            "deeper".into(),
            Attributes(vec![("z".into(), (-3i32).into())]).into(),
        ),
    ]);
    c.attr("flag", true)
        .attr("count", -7i32)
        .attr("big", i64::MIN)
        .attr("ratio", 0.1f32)
        .attr("odd", f32::from_bits(0x15ae_43fd))
        .attr("nan", f64::from_bits(0x7ff8_0000_dead_beef))
        .attr("precise", std::f64::consts::PI)
        .attr("label", "héllo \"quoted\"")
        .attr("mask", vec![true, false, true])
        .attr("sizes", vec![1i32, -2, 3])
        .attr("offsets", vec![i64::MAX, 0])
        .attr("weights", vec![0.5f32, f32::from_bits(0x15ae_43fd)])
        .attr("coeffs", vec![1e300f64, -0.0])
        .attr("names", vec!["a", "", "ccc"])
        .attr("inner", inner)
        .with_side_effect()
}

/// Bitwise equality of programs (NaN attributes compare by bits).
fn same(a: &Executable, b: &Executable) {
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let bits = |e: &Executable| {
        let Thunk::CommandBuffer(CommandBufferThunk { body }) = &e.entry[0] else {
            panic!()
        };
        let Thunk::CustomCall(c) = &body[0] else {
            panic!()
        };
        match c.attributes.get("nan") {
            Some(AttrValue::F64(v)) => v.to_bits(),
            _ => panic!(),
        }
    };
    assert_eq!(bits(a), bits(b));
}

#[test]
fn attributes_of_every_type_round_trip_exactly() {
    let exe = with_call(every_type);
    xthunk_core::verify(&exe).unwrap();
    let text = to_text(&exe);
    assert!(text.contains("custom_call {"), "{text}");
    assert!(text.contains("target: \"fw.op\""), "{text}");
    same(&parse_text(&text).unwrap(), &exe);
    same(&decode(&encode(&exe)).unwrap(), &exe);
}

fn invalid(e: ProtoError) -> (String, String, String) {
    match e {
        ProtoError::Invalid {
            path,
            field,
            message,
        } => (path.to_string(), field, message),
        ProtoError::Validation(v) => (v.path.to_string(), v.field, v.message),
        other => panic!("not a validation error: {other}"),
    }
}

#[test]
fn an_attribute_of_unknown_type_is_refused_naming_it() {
    let exe = with_call(|c| c.attr("scale", 2.0f32));
    let text = to_text(&exe);
    let at = text
        .find("f32: 2")
        .expect("the attribute's value in the text");
    let end = at + text[at..].find('\n').unwrap();
    // An empty value: what a value of a type this build does not know decodes as.
    let text = format!("{}{}", &text[..at], &text[end..]);
    let (path, field, message) = invalid(parse_text(&text).unwrap_err());
    assert_eq!(path, "entry[0].body[0]");
    assert_eq!(field, "attributes.scale");
    assert!(message.contains("custom call `fw.op`: attribute `scale` has no value, or one of a type this build does not know"), "{message}");
}

#[test]
fn dims_that_do_not_match_the_slice_are_refused() {
    let mut exe = with_call(|c| c);
    let Thunk::CommandBuffer(CommandBufferThunk { body }) = &mut exe.entry[0] else {
        panic!()
    };
    let Thunk::CustomCall(c) = &mut body[0] else {
        panic!()
    };
    c.operands[0].dims = vec![3, 3];
    let (path, field, message) = invalid(decode(&encode(&exe)).unwrap_err());
    assert_eq!(path, "entry[0].body[0]");
    assert_eq!(field, "operands[0].dims");
    assert!(
        message.contains("[3, 3] x f32 is 36 bytes, the slice %0[0..+24] has 24"),
        "{message}"
    );
}

#[test]
fn a_missing_or_other_api_version_is_refused() {
    let exe = with_call(|mut c| {
        c.api_version = 0;
        c
    });
    let (_, field, message) = invalid(decode(&encode(&exe)).unwrap_err());
    assert_eq!(field, "api_version");
    assert!(message.contains("the API version is missing"), "{message}");
    let exe = with_call(|mut c| {
        c.api_version = 2;
        c
    });
    let (_, field, message) = invalid(decode(&encode(&exe)).unwrap_err());
    assert_eq!(field, "api_version");
    assert!(message.contains("declares API version 2"), "{message}");
}

#[test]
fn duplicate_attributes_and_overlapping_results_are_refused() {
    let exe = with_call(|c| c.attr("k", 1i64).attr("k", 2i64));
    let (_, field, message) = invalid(decode(&encode(&exe)).unwrap_err());
    assert_eq!(field, "attributes.k");
    assert!(message.contains("given twice"), "{message}");
    let exe = with_call(|c| {
        let r = c.results[0].clone();
        c.result(r)
    });
    let (_, field, message) = invalid(decode(&encode(&exe)).unwrap_err());
    assert_eq!(field, "results[1]");
    assert!(message.contains("overlaps the result"), "{message}");
}
