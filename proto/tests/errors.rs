//! Bad inputs: every one is an error (never a panic) that says where the problem is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use prost::Message;
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, BufferAllocation, Executable, MemorySpace, Signature, Slice, Thunk,
};
use xthunk_proto::{ProtoError, decode, encode, from_proto, parse_text, pb, to_proto, to_text};

/// A valid program: two allocations, a host module and a standard module, a nested sequence.
const BASE: &str = r#"
# proto-message: xthunk.v1.Executable
abi_version: 1
name: "base"
allocations { index: 0 size: 64 alignment: 16 parameter: 0 }
allocations { index: 1 size: 64 alignment: 16 output: 0 }
allocations { index: 2 size: 8 alignment: 8 constant: "\001\002\003\004\005\006\007\010" }
modules { name: "host" images { host { library: "mylib" } } }
modules { name: "std" images { standard {} } }
entry { copy { src { allocation: 0 size: 64 } dst { allocation: 1 size: 64 } } }
entry {
  sequence {
    thunks { memset { dst { allocation: 1 size: 16 } width: MEMSET_WIDTH_U32 value: 7 } }
    thunks {
      kernel {
        module: "host"
        name: "k"
        grid { x: 1 y: 1 z: 1 }
        block { x: 32 y: 1 z: 1 }
        args { buffer { slice { allocation: 1 size: 64 } access: ACCESS_READ_WRITE } }
        args { scalar { u8: 3 } }
      }
    }
  }
}
signature {
  parameters { name: "x" dtype: DTYPE_F32 dims: 16 allocation: 0 }
  outputs { name: "y" dtype: DTYPE_F32 dims: 16 allocation: 1 }
}
"#;

fn base() -> Executable {
    parse_text(BASE).unwrap()
}

/// `BASE` with one replacement, which must apply.
fn variant(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} is not in BASE");
    BASE.replacen(from, to, 1)
}

/// The error of a text program, checked against its thunk path and field.
fn expect_err(text: &str, path: &str, field: &str) -> ProtoError {
    let e = parse_text(text).expect_err("the program should be rejected");
    let msg = e.to_string();
    assert_eq!(
        e.thunk_path().map(|p| p.to_string()).as_deref(),
        Some(path),
        "path of: {msg}"
    );
    assert_eq!(e.field(), Some(field), "field of: {msg}");
    if path != "<executable>" {
        assert!(msg.contains(path), "{msg:?} should name {path}");
    }
    assert!(msg.contains(field), "{msg:?} should name {field}");
    assert!(!msg.contains('\n'), "{msg:?} should be one line");
    e
}

#[test]
fn base_is_valid() {
    let exe = base();
    assert_eq!(exe.thunk_count(), 4);
    assert_eq!(decode(&encode(&exe)).unwrap(), exe);
}

// ---------------------------------------------------------------------------------------------
// Binary
// ---------------------------------------------------------------------------------------------

#[test]
fn truncated_binary() {
    let bytes = encode(&base());
    // The signature is the last field: cutting its last byte leaves a length prefix that
    // points past the end.
    let e = decode(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(matches!(e, ProtoError::Decode { .. }), "{e}");
    assert!(
        e.to_string().starts_with("cannot decode binary program"),
        "{e}"
    );
    // Every prefix is an error or a smaller valid program, never a panic.
    let mut errors = 0;
    for cut in 0..bytes.len() {
        if decode(&bytes[..cut]).is_err() {
            errors += 1;
        }
    }
    assert!(
        errors > bytes.len() / 2,
        "{errors} of {} prefixes rejected",
        bytes.len()
    );
}

#[test]
fn garbage_binary() {
    for junk in [
        &[0xffu8; 16][..],
        b"\x0a\xff\xff\xff\xff\x0f",
        b"hello, world",
        b"\x08", // abi_version tag without a value
    ] {
        assert!(matches!(decode(junk), Err(ProtoError::Decode { .. })));
    }
    // Valid wire format, but not a program.
    assert!(matches!(decode(&[]), Err(ProtoError::Invalid { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn corrupted_programs_never_panic(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = encode(&base());
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        let _ = decode(&bytes);
    }

    #[test]
    fn random_text_never_panics(text in "(?s).{0,200}") {
        let _ = parse_text(&text);
    }

    #[test]
    fn mangled_text_never_panics(pos in any::<prop::sample::Index>(), junk in "[{}<>\"#: a-z0-9\n]{1,4}") {
        let mut text = BASE.to_string();
        let mut i = pos.index(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        text.insert_str(i, &junk);
        let _ = parse_text(&text);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // Binary: 1 000 nested sequences (encoding is quadratic in the depth). Building, encoding
    // and dropping such a message recurses in prost, so the test does that on a big stack;
    // decoding must not need one.
    let bytes = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let mut t = pb::Thunk { kind: None };
            for _ in 0..1_000 {
                t = pb::Thunk {
                    kind: Some(pb::thunk::Kind::Sequence(pb::SequenceThunk {
                        thunks: vec![t],
                    })),
                };
            }
            pb::Executable {
                abi_version: ABI_VERSION,
                entry: vec![t],
                ..Default::default()
            }
            .encode_to_vec()
        })
        .unwrap()
        .join()
        .unwrap();
    assert!(matches!(decode(&bytes), Err(ProtoError::Decode { .. })));

    // Text: 100 001 nested messages.
    let text = format!(
        "abi_version: 1\nentry {{ {}{}}}",
        "sequence { thunks { ".repeat(50_000),
        "} } ".repeat(50_000)
    );
    let e = parse_text(&text).unwrap_err();
    assert!(matches!(e, ProtoError::TextParse { line: 2, .. }), "{e}");

    // A program too deep to decode cannot be formatted either; to_text says so.
    let mut t = Thunk::Sequence(vec![]);
    for _ in 0..60 {
        t = Thunk::Sequence(vec![t]);
    }
    let exe = Executable {
        entry: vec![t],
        ..empty()
    };
    assert!(to_text(&exe).contains("# cannot format this program"));
}

#[test]
fn text_and_binary_accept_the_same_nesting() {
    // Runs on the default 2 MiB test thread: deep programs must not need a bigger caller stack.
    let mut deepest = 0;
    for levels in 0..60 {
        let mut t = Thunk::Sequence(vec![]);
        for _ in 0..levels {
            t = Thunk::Sequence(vec![t]);
        }
        let exe = Executable {
            entry: vec![t],
            ..empty()
        };
        let binary = decode(&encode(&exe));
        let text = parse_text(&to_text(&exe));
        match (binary, text) {
            (Ok(b), Ok(t)) => {
                assert_eq!(b, exe);
                assert_eq!(t, exe);
                deepest = levels;
            }
            (Err(b), Err(_)) => assert!(matches!(b, ProtoError::Decode { .. })),
            (b, t) => panic!("{levels} levels: binary {b:?}, text {t:?}"),
        }
    }
    assert!(deepest >= 45, "only {deepest} nested sequences load");
}

fn empty() -> Executable {
    Executable {
        abi_version: ABI_VERSION,
        name: String::new(),
        allocations: vec![],
        modules: vec![],
        entry: vec![],
        signature: Signature::default(),
    }
}

// ---------------------------------------------------------------------------------------------
// Text syntax
// ---------------------------------------------------------------------------------------------

#[test]
fn syntax_error_reports_line_and_column() {
    let text = "abi_version: 1\nname: \"x\"\nallocations { size: 4 alignment: }\n";
    match parse_text(text).unwrap_err() {
        ProtoError::TextParse { line, col, message } => {
            assert_eq!((line, col), (3, 34), "{message}");
            assert!(message.contains("expected"), "{message}");
        }
        e => panic!("unexpected {e}"),
    }
    let e = parse_text("abi_version: 1\nnmae: \"x\"\n").unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::TextParse {
                line: 2,
                col: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("line 2, column 1"), "{e}");
    assert!(e.to_string().contains("nmae"), "{e}");

    let line = BASE[..BASE.find("DTYPE_F32").unwrap()]
        .matches('\n')
        .count()
        + 1;
    let e = parse_text(&variant("DTYPE_F32", "DTYPE_F33")).unwrap_err();
    assert!(
        matches!(e, ProtoError::TextParse { line: l, col: 33, .. } if l == line),
        "{e}"
    );

    // Unterminated message: reported at the end of the input.
    let e = parse_text("abi_version: 1\nentry {\n").unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::TextParse {
                line: 3,
                col: 1,
                ..
            }
        ),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// Conversion and validation: thunk path and field
// ---------------------------------------------------------------------------------------------

#[test]
fn slice_outside_its_allocation() {
    let e = expect_err(
        &variant(
            "dst { allocation: 1 size: 16 }",
            "dst { allocation: 1 offset: 56 size: 16 }",
        ),
        "entry[1].thunks[0]",
        "dst",
    );
    assert!(matches!(e, ProtoError::Validation(_)));
    assert!(
        e.to_string().contains("past the end of allocation 1"),
        "{e}"
    );

    expect_err(
        &variant(
            "slice { allocation: 1 size: 64 }",
            "slice { allocation: 7 size: 64 }",
        ),
        "entry[1].thunks[1]",
        "args[0]",
    );
}

#[test]
fn writes_to_a_constant() {
    expect_err(
        &variant(
            "dst { allocation: 1 size: 64 }",
            "dst { allocation: 2 size: 64 }",
        ),
        "entry[0]",
        "dst",
    );
}

#[test]
fn unknown_module() {
    let e = expect_err(
        &variant("module: \"host\"", "module: \"nope\""),
        "entry[1].thunks[1]",
        "module",
    );
    assert!(e.to_string().contains("unknown module `nope`"), "{e}");
}

#[test]
fn unknown_standard_kernel() {
    let e = expect_err(
        &variant(
            "module: \"host\"\n        name: \"k\"",
            "module: \"std\"\n        name: \"no_such_kernel\"",
        ),
        "entry[1].thunks[1]",
        "name",
    );
    assert!(e.to_string().contains("no_such_kernel"), "{e}");
}

#[test]
fn unspecified_dtype() {
    let e = expect_err(
        &variant(
            "dtype: DTYPE_F32 dims: 16 allocation: 0",
            "dims: 16 allocation: 0",
        ),
        "<executable>",
        "signature.parameters[0].dtype",
    );
    assert!(matches!(e, ProtoError::Invalid { .. }));
    assert!(e.to_string().contains("unspecified"), "{e}");

    let gemm = "thunks { gemm { a { allocation: 0 size: 64 } b { allocation: 0 size: 64 } \
                c { allocation: 1 size: 64 } m: 4 n: 4 k: 4 lda: 4 ldb: 4 ldc: 4 } }\n    thunks { memset";
    expect_err(
        &variant("thunks { memset", gemm),
        "entry[1].thunks[0]",
        "dtype",
    );
    // With a dtype it is valid, with alpha defaulting to 1 and batch to 1.
    let exe = parse_text(&variant(
        "thunks { memset",
        &gemm.replace("ldc: 4", "ldc: 4 dtype: DTYPE_F32"),
    ))
    .unwrap();
    let Thunk::Sequence(body) = &exe.entry[1] else {
        panic!()
    };
    let Thunk::Gemm(g) = &body[0] else { panic!() };
    assert_eq!((g.alpha, g.beta, g.batch), (1.0, 0.0, 1));
}

#[test]
fn wrong_abi_version() {
    let e = expect_err(
        &variant("abi_version: 1", "abi_version: 2"),
        "<executable>",
        "abi_version",
    );
    assert!(
        e.to_string().contains("ABI version 2 is not supported"),
        "{e}"
    );
    let e = expect_err(
        &variant("abi_version: 1", ""),
        "<executable>",
        "abi_version",
    );
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn missing_oneofs_and_messages() {
    expect_err(
        &variant(
            "entry { copy { src { allocation: 0 size: 64 } dst { allocation: 1 size: 64 } } }",
            "entry {}",
        ),
        "entry[0]",
        "kind",
    );
    expect_err(
        &variant("src { allocation: 0 size: 64 } ", ""),
        "entry[0]",
        "src",
    );
    expect_err(
        &variant("grid { x: 1 y: 1 z: 1 }", ""),
        "entry[1].thunks[1]",
        "grid",
    );
    expect_err(
        &variant("args { scalar { u8: 3 } }", "args {}"),
        "entry[1].thunks[1]",
        "args[1]",
    );
    expect_err(
        &variant("args { scalar { u8: 3 } }", "args { scalar {} }"),
        "entry[1].thunks[1]",
        "args[1].scalar",
    );
    expect_err(
        &variant(" access: ACCESS_READ_WRITE", ""),
        "entry[1].thunks[1]",
        "args[0].access",
    );
    expect_err(
        &variant("slice { allocation: 1 size: 64 } access", "access"),
        "entry[1].thunks[1]",
        "args[0].slice",
    );
    expect_err(
        &variant(" parameter: 0", ""),
        "<executable>",
        "allocations[0].kind",
    );
    expect_err(
        &variant("images { standard {} }", "images {}"),
        "<executable>",
        "modules[1].images[0]",
    );
    expect_err(
        &variant(" width: MEMSET_WIDTH_U32", ""),
        "entry[1].thunks[0]",
        "width",
    );
}

#[test]
fn out_of_range_values() {
    let e = expect_err(
        &variant("u8: 3", "u8: 256"),
        "entry[1].thunks[1]",
        "args[1].scalar.u8",
    );
    assert!(
        e.to_string().contains("256 is out of range (0..=255)"),
        "{e}"
    );
    expect_err(
        &variant("u8: 3", "i8: -129"),
        "entry[1].thunks[1]",
        "args[1].scalar.i8",
    );
    expect_err(
        &variant("u8: 3", "f16: 65536"),
        "entry[1].thunks[1]",
        "args[1].scalar.f16",
    );
    expect_err(
        &variant("u8: 3", "bf16: 70000"),
        "entry[1].thunks[1]",
        "args[1].scalar.bf16",
    );
    let e = expect_err(
        &variant(
            "width: MEMSET_WIDTH_U32 value: 7",
            "width: MEMSET_WIDTH_U8 value: 511",
        ),
        "entry[1].thunks[0]",
        "value",
    );
    assert!(
        e.to_string()
            .contains("0x1ff does not fit the 8-bit pattern"),
        "{e}"
    );
    expect_err(
        &variant(
            "width: MEMSET_WIDTH_U32 value: 7",
            "width: MEMSET_WIDTH_U16 value: 65536",
        ),
        "entry[1].thunks[0]",
        "value",
    );
    // In range at the edges.
    parse_text(&variant("u8: 3", "i8: -128")).unwrap();
    parse_text(&variant(
        "width: MEMSET_WIDTH_U32 value: 7",
        "width: MEMSET_WIDTH_U16 value: 65535",
    ))
    .unwrap();
}

#[test]
fn unknown_enum_numbers() {
    let mut msg = to_proto(&base());
    msg.allocations[0].memory_space = 42;
    let e = from_proto(&msg).unwrap_err();
    assert_eq!(e.field(), Some("allocations[0].memory_space"));
    assert!(e.to_string().contains("42"), "{e}");

    let mut msg = to_proto(&base());
    msg.signature.as_mut().unwrap().outputs[0].dtype = 99;
    let e = from_proto(&msg).unwrap_err();
    assert_eq!(e.field(), Some("signature.outputs[0].dtype"));

    let mut msg = to_proto(&base());
    let Some(pb::thunk::Kind::Sequence(s)) = &mut msg.entry[1].kind else {
        panic!()
    };
    let Some(pb::thunk::Kind::Memset(m)) = &mut s.thunks[0].kind else {
        panic!()
    };
    m.width = 9;
    let e = from_proto(&msg).unwrap_err();
    assert_eq!(e.thunk_path().unwrap().to_string(), "entry[1].thunks[0]");
    assert_eq!(e.field(), Some("width"));
}

#[test]
fn a_newer_thunk_kind_is_reported() {
    // Field 20 of Thunk (planned: custom_call) as a newer writer would emit it.
    let mut bytes = Vec::new();
    pb::Executable {
        abi_version: ABI_VERSION,
        ..Default::default()
    }
    .encode(&mut bytes)
    .unwrap();
    // entry (field 5, length-delimited) { field 20, length-delimited, empty }
    bytes.extend_from_slice(&[0x2a, 0x03, 0xa2, 0x01, 0x00]);
    let e = decode(&bytes).unwrap_err();
    assert_eq!(e.thunk_path().unwrap().to_string(), "entry[0]");
    assert_eq!(e.field(), Some("kind"));
    assert!(e.to_string().contains("does not know"), "{e}");
}

#[test]
fn device_memory_space_is_the_default() {
    let mut msg = to_proto(&base());
    assert_eq!(msg.allocations[0].memory_space, 0);
    msg.allocations[0].memory_space = pb::MemorySpace::Device as i32;
    let exe = from_proto(&msg).unwrap();
    assert_eq!(exe.allocations[0].memory_space, MemorySpace::Device);
    assert_eq!(exe, base());
}

#[test]
fn to_proto_of_an_invalid_program_is_rejected_on_the_way_back() {
    let mut exe = empty();
    exe.allocations.push(BufferAllocation {
        index: 0,
        size: 8,
        alignment: 3,
        kind: AllocationKind::Temp,
        memory_space: MemorySpace::Device,
    });
    exe.entry.push(Thunk::Copy {
        src: Slice::new(0, 0, 4),
        dst: Slice::new(0, 4, 4),
    });
    let e = decode(&encode(&exe)).unwrap_err();
    assert_eq!(e.field(), Some("allocations[0].alignment"));
}
