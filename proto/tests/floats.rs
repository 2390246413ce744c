//! Float immediates survive every conversion bit for bit: IR -> binary -> IR -> text -> IR for
//! every f32 and f64 bit pattern (NaNs with any sign and payload, infinities, zeros of both
//! signs, subnormals), checked with proptest over raw bits and on the values known to be hard.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use xthunk_core::ir::{
    ABI_VERSION, Dim3, Executable, KernelArg, KernelThunk, Module, ModuleImage, Scalar, Signature,
    Thunk,
};
use xthunk_proto::{decode, encode, parse_text, to_text};

/// A program whose one kernel launch takes `f32` and `f64` immediates.
fn program(f32s: &[u32], f64s: &[u64]) -> Executable {
    let args = f32s
        .iter()
        .map(|b| Scalar::F32(f32::from_bits(*b)))
        .chain(f64s.iter().map(|b| Scalar::F64(f64::from_bits(*b))))
        .map(KernelArg::Scalar)
        .collect();
    Executable {
        abi_version: ABI_VERSION,
        name: "floats".into(),
        allocations: vec![],
        modules: vec![Module {
            name: "m".into(),
            images: vec![ModuleImage::Source {
                code: "__global__ void k() {}".into(),
            }],
            options: Default::default(),
        }],
        entry: vec![Thunk::Kernel(KernelThunk {
            module: "m".into(),
            name: "k".into(),
            grid: Dim3::x(1),
            block: Dim3::x(1),
            shared_mem: 0,
            args,
        })],
        signature: Signature::default(),
        aliases: vec![],
    }
}

/// The bits of every float immediate of the program, in order (f32 widened to u64).
fn bits(exe: &Executable) -> Vec<u64> {
    let Thunk::Kernel(k) = &exe.entry[0] else {
        panic!("not a kernel: {:?}", exe.entry[0]);
    };
    k.args
        .iter()
        .map(|a| match a {
            KernelArg::Scalar(Scalar::F32(v)) => u64::from(v.to_bits()),
            KernelArg::Scalar(Scalar::F64(v)) => v.to_bits(),
            other => panic!("not a float immediate: {other:?}"),
        })
        .collect()
}

/// `.pb -> IR -> .txtpb -> IR -> .pb`, as `xthunk convert` does it: the bits and the binary
/// encoding are unchanged.
fn check_round_trip(f32s: &[u32], f64s: &[u64]) -> Result<(), TestCaseError> {
    let exe = program(f32s, f64s);
    let want = bits(&exe);
    let pb = encode(&exe);
    let from_pb = decode(&pb).unwrap();
    prop_assert_eq!(bits(&from_pb), want.clone(), "binary");
    let text = to_text(&from_pb);
    let from_text = match parse_text(&text) {
        Ok(e) => e,
        Err(e) => panic!("{e}\n{text}"),
    };
    prop_assert_eq!(bits(&from_text), want, "text:\n{}", text);
    prop_assert_eq!(encode(&from_text), pb, "binary after the text");
    Ok(())
}

/// f32 bit patterns: uniform, plus NaNs and the neighbourhood of special values.
fn f32_bits() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        // NaNs: exponent all ones, non-zero mantissa, either sign.
        (any::<bool>(), 1u32..(1 << 23)).prop_map(|(s, m)| (u32::from(s) << 31) | 0x7F80_0000 | m),
        prop::sample::select(vec![
            0,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            1,
            0x0080_0000
        ]),
    ]
}

fn f64_bits() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (any::<bool>(), 1u64..(1 << 52))
            .prop_map(|(s, m)| (u64::from(s) << 63) | 0x7FF0_0000_0000_0000 | m),
        prop::sample::select(vec![
            0,
            0x8000_0000_0000_0000,
            0x7FF0_0000_0000_0000,
            0xFFF0_0000_0000_0000,
            1,
        ]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn every_float_bit_pattern_round_trips(
        f32s in prop::collection::vec(f32_bits(), 1..8),
        f64s in prop::collection::vec(f64_bits(), 1..8),
    ) {
        check_round_trip(&f32s, &f64s)?;
    }
}

#[test]
fn nan_payloads_and_hard_decimals_round_trip() {
    let f32s = [
        0xFFFF_FFFF, // the NaN of the issue: was 0x7FC00000 after the text
        0x7FC0_0000,
        0xFFC0_0000,
        0x7F80_0001,
        0x7FA0_0000,
        // Its shortest decimal reads back (through an f64) as 0x15ae43fc.
        0x15AE_43FD,
        0x8000_0000,
        0x0000_0001,
    ];
    let f64s = [
        0xFFFF_FFFF_FFFF_FFFF,
        0x7FF8_0000_0000_0000,
        0x7FF0_0000_0000_0001,
        0x8000_0000_0000_0000,
    ];
    check_round_trip(&f32s, &f64s).unwrap();
}

#[test]
fn ordinary_values_stay_decimal_and_the_rest_are_bits() {
    let exe = program(&[0.5f32.to_bits(), 0xFFFF_FFFF], &[(-2.25f64).to_bits(), 1]);
    let text = to_text(&exe);
    assert!(text.contains("f32: 0.5"), "{text}");
    assert!(text.contains("f32_bits: 4294967295"), "{text}");
    assert!(text.contains("f64: -2.25"), "{text}");
    // The smallest subnormal f64 is a decimal that reads back exactly.
    assert!(text.contains("f64: 0.000"), "{text}");
    assert!(!text.contains("nan"), "{text}");
    // A hand-written text may give bits in hex.
    let hand = text.replace("f32_bits: 4294967295", "f32_bits: 0x7fa00001");
    let back = parse_text(&hand).unwrap();
    assert_eq!(bits(&back)[1], 0x7FA0_0001);
}
