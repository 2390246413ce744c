//! The element types added after the first nine (i16, u16, u32, u64): their schema numbers,
//! signatures and scalars round-trip through the binary and the text format, and out-of-range
//! 16-bit scalars are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_core::ir::{DType, KernelArg, Scalar, Thunk};
use xthunk_proto::{decode, encode, parse_text, pb, to_proto, to_text};

/// A program whose parameter and output are 64 bytes of `dtype` and whose kernel takes
/// `scalar` (a text-format scalar, e.g. `u64: 7`).
fn program(dtype: &str, elems: usize, scalar: &str) -> String {
    format!(
        r#"
abi_version: 1
name: "dtypes"
allocations {{ index: 0 size: 64 alignment: 16 parameter: 0 }}
allocations {{ index: 1 size: 64 alignment: 16 output: 0 }}
modules {{ name: "host" images {{ host {{ library: "mylib" }} }} }}
entry {{
  kernel {{
    module: "host"
    name: "k"
    grid {{ x: 1 y: 1 z: 1 }}
    block {{ x: 32 y: 1 z: 1 }}
    args {{ buffer {{ slice {{ allocation: 0 size: 64 }} access: ACCESS_READ }} }}
    args {{ buffer {{ slice {{ allocation: 1 size: 64 }} access: ACCESS_WRITE }} }}
    args {{ scalar {{ {scalar} }} }}
  }}
}}
signature {{
  parameters {{ name: "x" dtype: {dtype} dims: {elems} allocation: 0 }}
  outputs {{ name: "y" dtype: {dtype} dims: {elems} allocation: 1 }}
}}
"#
    )
}

fn kernel_scalar(exe: &xthunk_core::ir::Executable) -> Scalar {
    let Thunk::Kernel(k) = &exe.entry[0] else {
        panic!("not a kernel: {:?}", exe.entry[0])
    };
    let KernelArg::Scalar(s) = k.args[2] else {
        panic!("not a scalar: {:?}", k.args[2])
    };
    s
}

#[test]
fn new_types_round_trip_with_their_extremes() {
    let cases = [
        (
            DType::I16,
            "DTYPE_I16",
            10,
            "i16: -32768",
            Scalar::I16(i16::MIN),
        ),
        (
            DType::I16,
            "DTYPE_I16",
            10,
            "i16: 32767",
            Scalar::I16(i16::MAX),
        ),
        (
            DType::U16,
            "DTYPE_U16",
            11,
            "u16: 65535",
            Scalar::U16(u16::MAX),
        ),
        (DType::U16, "DTYPE_U16", 11, "u16: 0", Scalar::U16(0)),
        (
            DType::U32,
            "DTYPE_U32",
            12,
            "u32: 4294967295",
            Scalar::U32(u32::MAX),
        ),
        (
            DType::U64,
            "DTYPE_U64",
            13,
            "u64: 18446744073709551615",
            Scalar::U64(u64::MAX),
        ),
    ];
    for (dtype, name, number, scalar, want) in cases {
        let elems = 64 / dtype.size();
        let exe = parse_text(&program(name, elems, scalar)).unwrap();
        assert_eq!(exe.signature.parameters[0].dtype, dtype);
        assert_eq!(exe.signature.outputs[0].dtype, dtype);
        assert_eq!(kernel_scalar(&exe), want);
        assert_eq!(want.dtype(), dtype);
        assert_eq!(want.to_le_bytes().len(), dtype.size());
        // The schema number.
        let msg = to_proto(&exe);
        let sig = msg.signature.as_ref().unwrap();
        assert_eq!(sig.parameters[0].dtype, number, "{dtype}");
        assert_eq!(pb::DType::try_from(number).unwrap().as_str_name(), name);
        // Binary and text round trips.
        assert_eq!(decode(&encode(&exe)).unwrap(), exe, "{dtype} binary");
        let text = to_text(&exe);
        assert!(text.contains(name), "{text}");
        assert!(text.contains(scalar), "{text}");
        assert_eq!(parse_text(&text).unwrap(), exe, "{dtype} text");
    }
}

#[test]
fn names_and_sizes() {
    for (d, name, size) in [
        (DType::I16, "i16", 2),
        (DType::U16, "u16", 2),
        (DType::U32, "u32", 4),
        (DType::U64, "u64", 8),
    ] {
        assert_eq!(d.name(), name);
        assert_eq!(d.size(), size);
        assert_eq!(DType::from_name(name), Some(d));
        assert!(d.is_int() && !d.is_float());
    }
    assert!(DType::I16.is_signed_int() && !DType::U16.is_signed_int());
    assert!(DType::U64.is_unsigned_int() && !DType::I64.is_unsigned_int());
}

#[test]
fn out_of_range_16_bit_scalars_are_refused() {
    for (scalar, field, bounds) in [
        ("i16: 32768", "args[2].scalar.i16", "(-32768..=32767)"),
        ("i16: -32769", "args[2].scalar.i16", "(-32768..=32767)"),
        ("u16: 65536", "args[2].scalar.u16", "(0..=65535)"),
    ] {
        let e = parse_text(&program("DTYPE_U16", 32, scalar)).unwrap_err();
        assert_eq!(e.field(), Some(field), "{e}");
        assert!(e.to_string().contains(bounds), "{e}");
    }
}

#[test]
fn complex_and_f8_types_round_trip_with_their_numbers() {
    for (dtype, name, number, size) in [
        (DType::C64, "DTYPE_C64", 14, 8),
        (DType::C128, "DTYPE_C128", 15, 16),
        (DType::F8E4M3FN, "DTYPE_F8E4M3FN", 16, 1),
        (DType::F8E5M2, "DTYPE_F8E5M2", 17, 1),
    ] {
        assert_eq!(dtype.size(), size);
        assert_eq!(DType::from_name(dtype.name()), Some(dtype));
        assert!(!dtype.is_float() && !dtype.is_int());
        assert_eq!(dtype.is_complex(), size >= 8);
        assert_eq!(dtype.is_f8(), size == 1);
        let elems = 64 / size;
        let exe = parse_text(&program(name, elems, "u8: 1")).unwrap();
        assert_eq!(exe.signature.parameters[0].dtype, dtype);
        assert_eq!(exe.signature.parameters[0].dims, vec![elems as u64]);
        let msg = to_proto(&exe);
        let sig = msg.signature.as_ref().unwrap();
        assert_eq!(sig.outputs[0].dtype, number, "{dtype}");
        assert_eq!(pb::DType::try_from(number).unwrap().as_str_name(), name);
        assert_eq!(decode(&encode(&exe)).unwrap(), exe, "{dtype} binary");
        let text = to_text(&exe);
        assert!(text.contains(name), "{text}");
        assert_eq!(parse_text(&text).unwrap(), exe, "{dtype} text");
    }
    assert_eq!(DType::C64.complex_part(), Some(DType::F32));
    assert_eq!(DType::C128.complex_part(), Some(DType::F64));
    assert_eq!(DType::F64.complex_of(), Some(DType::C128));
    assert_eq!(DType::F16.complex_of(), None);
    // The next number is not a type yet.
    let e = parse_text(&program("DTYPE_C64", 8, "u8: 1").replace("DTYPE_C64", "18"));
    assert!(e.is_err(), "{e:?}");
}
