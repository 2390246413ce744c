//! Bad inputs: every one is an error (never a panic) that says where the problem is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use prost::Message;
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, AsyncDoneThunk, AsyncStartThunk, BufferAllocation,
    CommandBufferThunk, ConditionalThunk, CopyThunk, Executable, MemorySpace, Signature, Slice,
    Thunk, WhileThunk,
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
    // Valid wire format, but not a program (abi_version 0).
    assert!(matches!(
        decode(b"\x08\x00"),
        Err(ProtoError::Invalid { .. })
    ));
    // Nothing at all is said to be nothing, not a program missing its first field.
    assert!(matches!(decode(&[]), Err(ProtoError::Empty { .. })));
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
        aliases: vec![],
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
    // Field 23 of Thunk (the first number not yet used: 22 is execution_seed) as a newer
    // writer would emit it.
    let mut bytes = Vec::new();
    pb::Executable {
        abi_version: ABI_VERSION,
        ..Default::default()
    }
    .encode(&mut bytes)
    .unwrap();
    // entry (field 5, length-delimited) { field 23, length-delimited, empty }
    bytes.extend_from_slice(&[0x2a, 0x03, 0xba, 0x01, 0x00]);
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
    exe.entry.push(Thunk::Copy(CopyThunk {
        src: Slice::new(0, 0, 4),
        dst: Slice::new(0, 4, 4),
    }));
    let e = decode(&encode(&exe)).unwrap_err();
    assert_eq!(e.field(), Some("allocations[0].alignment"));
}

// ---------------------------------------------------------------------------------------------
// Control flow, async scopes and command buffers
// ---------------------------------------------------------------------------------------------

/// A valid program with every control-flow kind: an async scope (entry[1] .. entry[4]) around
/// a while loop (entry[2]) and a conditional (entry[3]), and a command buffer (entry[5]).
const CF: &str = r#"
# proto-message: xthunk.v1.Executable
abi_version: 1
name: "control_flow"
allocations { index: 0 size: 64 alignment: 16 parameter: 0 }
allocations { index: 1 size: 64 alignment: 16 output: 0 }
allocations { index: 2 size: 16 alignment: 16 temp {} }
modules { name: "host" images { host { library: "mylib" } } }
entry { memset { dst { allocation: 2 size: 8 } width: MEMSET_WIDTH_U8 value: 1 } }
entry {
  async_start {
    id: 7
    kind: ASYNC_KIND_COMPUTE
    body { copy { src { allocation: 0 size: 32 } dst { allocation: 1 size: 32 } } }
  }
}
entry {
  while {
    cond { memset { dst { allocation: 2 offset: 8 size: 4 } width: MEMSET_WIDTH_U32 value: 0 } }
    cond { memset { dst { allocation: 2 size: 1 } width: MEMSET_WIDTH_U8 value: 0 } }
    pred { allocation: 2 size: 1 }
    body { copy { src { allocation: 0 offset: 32 size: 32 } dst { allocation: 1 offset: 32 size: 32 } } }
    trip_count: 3
  }
}
entry {
  conditional {
    index { allocation: 2 offset: 4 size: 4 }
    index_type: DTYPE_I32
    branches { thunks { memset { dst { allocation: 1 size: 4 } width: MEMSET_WIDTH_U32 value: 1 } } }
    branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } }
  }
}
entry { async_done { id: 7 } }
entry {
  command_buffer {
    body { copy { src { allocation: 1 size: 16 } dst { allocation: 2 size: 16 } } }
    body { sequence { thunks { memset { dst { allocation: 2 size: 16 } width: MEMSET_WIDTH_U8 value: 0 } } } }
  }
}
signature {
  parameters { name: "x" dtype: DTYPE_F32 dims: 16 allocation: 0 }
  outputs { name: "y" dtype: DTYPE_F32 dims: 16 allocation: 1 }
}
"#;

/// `CF` with replacements, each of which must apply.
fn cf(edits: &[(&str, &str)]) -> String {
    let mut text = CF.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} is not in CF");
        text = text.replacen(from, to, 1);
    }
    text
}

const ASYNC_START: &str = "entry {
  async_start {
    id: 7
    kind: ASYNC_KIND_COMPUTE
    body { copy { src { allocation: 0 size: 32 } dst { allocation: 1 size: 32 } } }
  }
}";
const ASYNC_DONE: &str = "entry { async_done { id: 7 } }";
const WHILE_BODY: &str = "body { copy { src { allocation: 0 offset: 32 size: 32 } dst { allocation: 1 offset: 32 size: 32 } } }";
const CB_BODY: &str =
    "body { copy { src { allocation: 1 size: 16 } dst { allocation: 2 size: 16 } } }";

#[test]
fn control_flow_base_is_valid() {
    use xthunk_core::ir::{AsyncKind, DType};
    let exe = parse_text(CF).unwrap();
    assert_eq!(exe.thunk_count(), 15);
    assert_eq!(decode(&encode(&exe)).unwrap(), exe);
    assert_eq!(parse_text(&to_text(&exe)).unwrap(), exe);
    let Thunk::AsyncStart(AsyncStartThunk { id: 7, kind, body }) = &exe.entry[1] else {
        panic!("{:?}", exe.entry[1])
    };
    assert_eq!((*kind, body.len()), (AsyncKind::Compute, 1));
    let Thunk::While(WhileThunk {
        cond,
        pred,
        body,
        trip_count,
    }) = &exe.entry[2]
    else {
        panic!("{:?}", exe.entry[2])
    };
    assert_eq!((cond.len(), body.len(), *trip_count), (2, 1, Some(3)));
    assert_eq!(*pred, Slice::new(2, 0, 1));
    let Thunk::Conditional(ConditionalThunk {
        index_type,
        branches,
        ..
    }) = &exe.entry[3]
    else {
        panic!("{:?}", exe.entry[3])
    };
    assert_eq!((*index_type, branches.len()), (DType::I32, 2));
    assert_eq!(exe.entry[4], Thunk::AsyncDone(AsyncDoneThunk { id: 7 }));
    assert!(
        matches!(&exe.entry[5], Thunk::CommandBuffer(CommandBufferThunk { body }) if body.len() == 2)
    );

    // Without a trip count the field is absent, not 0; 0 is kept as 0.
    for (edit, want) in [("", None), ("\n    trip_count: 0", Some(0))] {
        let exe = parse_text(&cf(&[("\n    trip_count: 3", edit)])).unwrap();
        let Thunk::While(WhileThunk { trip_count, .. }) = &exe.entry[2] else {
            panic!()
        };
        assert_eq!(*trip_count, want);
        assert_eq!(decode(&encode(&exe)).unwrap(), exe);
    }
    // A pred index with exactly two branches, and an i32 index with one or three.
    parse_text(&cf(&[
        ("offset: 4 size: 4 }", "offset: 4 size: 1 }"),
        ("DTYPE_I32", "DTYPE_PRED"),
    ]))
    .unwrap();
    let second_branch = "    branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } }\n";
    parse_text(&cf(&[(second_branch, "")])).unwrap();
    parse_text(&cf(&[(
        second_branch,
        &format!("{second_branch}{second_branch}"),
    )]))
    .unwrap();
}

#[test]
fn nested_thunk_paths() {
    // Errors inside nested lists name the full path.
    expect_err(
        &cf(&[("offset: 32 size: 32 } dst", "offset: 40 size: 32 } dst")]),
        "entry[2].body[0]",
        "src",
    );
    expect_err(
        &cf(&[(
            "dst { allocation: 2 size: 1 } width: MEMSET_WIDTH_U8 value: 0",
            "dst { allocation: 2 offset: 16 size: 1 } width: MEMSET_WIDTH_U8 value: 0",
        )]),
        "entry[2].cond[1]",
        "dst",
    );
    expect_err(
        &cf(&[(
            "dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2",
            "dst { allocation: 1 size: 6 } width: MEMSET_WIDTH_U32 value: 2",
        )]),
        "entry[3].branches[1].thunks[0]",
        "dst",
    );
    expect_err(
        &cf(&[(
            "dst { allocation: 1 size: 32 }",
            "dst { allocation: 1 size: 31 }",
        )]),
        "entry[1].body[0]",
        "dst",
    );
    expect_err(
        &cf(&[(
            "dst { allocation: 2 size: 16 } width: MEMSET_WIDTH_U8 value: 0",
            "dst { allocation: 3 size: 16 } width: MEMSET_WIDTH_U8 value: 0",
        )]),
        "entry[5].body[1].thunks[0]",
        "dst",
    );
    // Conversion errors too (here an unset kind in a branch).
    expect_err(
        &cf(&[(
            "branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } }",
            "branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } thunks {} }",
        )]),
        "entry[3].branches[1].thunks[1]",
        "kind",
    );
}

#[test]
fn unpaired_async_start() {
    let e = expect_err(&cf(&[(ASYNC_DONE, "")]), "entry[1]", "id");
    assert!(matches!(e, ProtoError::Validation(_)), "{e}");
    assert!(
        e.to_string()
            .contains("async_start 7 has no matching async_done"),
        "{e}"
    );
}

#[test]
fn unpaired_async_done() {
    let e = expect_err(
        &cf(&[(ASYNC_DONE, "entry { async_done { id: 8 } }")]),
        "entry[4]",
        "id",
    );
    assert!(
        e.to_string()
            .contains("async_done 8 has no matching async_start"),
        "{e}"
    );
    // A second done for the same start.
    expect_err(
        &cf(&[(ASYNC_DONE, &format!("{ASYNC_DONE}\n{ASYNC_DONE}"))]),
        "entry[5]",
        "id",
    );
}

#[test]
fn async_done_before_its_start() {
    let e = expect_err(
        &cf(&[
            (ASYNC_START, "@START@"),
            (ASYNC_DONE, ASYNC_START),
            ("@START@", ASYNC_DONE),
        ]),
        "entry[1]",
        "id",
    );
    assert!(e.to_string().contains("async_done 7"), "{e}");
}

#[test]
fn async_scope_crossing_a_sequence_boundary() {
    // The done inside a nested sequence, the start outside.
    expect_err(
        &cf(&[(
            ASYNC_DONE,
            "entry { sequence { thunks { async_done { id: 7 } } } }",
        )]),
        "entry[4].thunks[0]",
        "id",
    );
    // The start inside a while body, the done outside.
    expect_err(
        &cf(&[
            (ASYNC_START, "entry { sequence {} }"),
            (
                WHILE_BODY,
                &format!(
                    "{WHILE_BODY}\n    body {{ async_start {{ id: 7 kind: ASYNC_KIND_COMPUTE }} }}"
                ),
            ),
        ]),
        "entry[2].body[1]",
        "id",
    );
    // The done inside the async body of its own start.
    expect_err(
        &cf(&[
            (ASYNC_DONE, ""),
            (
                "body { copy { src { allocation: 0 size: 32 }",
                "body { async_done { id: 7 } }\n    body { copy { src { allocation: 0 size: 32 }",
            ),
        ]),
        "entry[1].body[0]",
        "id",
    );
    // The done in a conditional branch.
    expect_err(
        &cf(&[
            (ASYNC_DONE, ""),
            (
                "branches { thunks { memset { dst { allocation: 1 size: 4 }",
                "branches { thunks { async_done { id: 7 } } thunks { memset { dst { allocation: 1 size: 4 }",
            ),
        ]),
        "entry[3].branches[0].thunks[0]",
        "id",
    );
    // Pairs inside nested lists are fine.
    parse_text(&cf(&[(
        WHILE_BODY,
        &format!(
            "body {{ async_start {{ id: 9 kind: ASYNC_KIND_COMMUNICATION }} }}\n    {WHILE_BODY}\n    body {{ async_done {{ id: 9 }} }}"
        ),
    )]))
    .unwrap();
}

#[test]
fn duplicate_async_id() {
    // A second, properly paired scope with the same id, in another list.
    let e = expect_err(
        &cf(&[(
            WHILE_BODY,
            &format!(
                "{WHILE_BODY}\n    body {{ async_start {{ id: 7 kind: ASYNC_KIND_COMPUTE }} }}\n    body {{ async_done {{ id: 7 }} }}"
            ),
        )]),
        "entry[2].body[1]",
        "id",
    );
    assert!(e.to_string().contains("async id 7 is used twice"), "{e}");
    // And in the same list, after the first scope closed.
    expect_err(
        &cf(&[(
            ASYNC_DONE,
            &format!("{ASYNC_DONE}\n{ASYNC_START}\n{ASYNC_DONE}"),
        )]),
        "entry[5]",
        "id",
    );
}

#[test]
fn unspecified_async_kind() {
    expect_err(
        &cf(&[("kind: ASYNC_KIND_COMPUTE\n", "")]),
        "entry[1]",
        "kind",
    );
}

#[test]
fn predicate_of_two_bytes() {
    let e = expect_err(
        &cf(&[(
            "pred { allocation: 2 size: 1 }",
            "pred { allocation: 2 size: 2 }",
        )]),
        "entry[2]",
        "pred",
    );
    assert!(e.to_string().contains("1-byte pred"), "{e}");
    // Missing, and outside its allocation.
    expect_err(
        &cf(&[("pred { allocation: 2 size: 1 }", "")]),
        "entry[2]",
        "pred",
    );
    expect_err(
        &cf(&[(
            "pred { allocation: 2 size: 1 }",
            "pred { allocation: 2 offset: 16 size: 1 }",
        )]),
        "entry[2]",
        "pred",
    );
}

#[test]
fn index_of_the_wrong_type() {
    let e = expect_err(&cf(&[("DTYPE_I32", "DTYPE_F32")]), "entry[3]", "index_type");
    assert!(e.to_string().contains("must be i32 or pred"), "{e}");
    expect_err(
        &cf(&[("index_type: DTYPE_I32\n", "")]),
        "entry[3]",
        "index_type",
    );
    // Sizes: an i32 index is 4 bytes, a pred index 1.
    expect_err(
        &cf(&[("offset: 4 size: 4 }", "offset: 4 size: 2 }")]),
        "entry[3]",
        "index",
    );
    expect_err(&cf(&[("DTYPE_I32", "DTYPE_PRED")]), "entry[3]", "index");
}

#[test]
fn pred_conditional_with_three_branches() {
    let second_branch = "    branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } }\n";
    let pred = [
        ("offset: 4 size: 4 }", "offset: 4 size: 1 }"),
        ("DTYPE_I32", "DTYPE_PRED"),
    ];
    let three = format!("{second_branch}{second_branch}");
    let e = expect_err(
        &cf(&[pred[0], pred[1], (second_branch, &three)]),
        "entry[3]",
        "branches",
    );
    assert!(e.to_string().contains("2 branches, found 3"), "{e}");
    expect_err(
        &cf(&[pred[0], pred[1], (second_branch, "")]),
        "entry[3]",
        "branches",
    );
}

#[test]
fn conditional_without_branches() {
    let branches = "    branches { thunks { memset { dst { allocation: 1 size: 4 } width: MEMSET_WIDTH_U32 value: 1 } } }
    branches { thunks { memset { dst { allocation: 1 size: 8 } width: MEMSET_WIDTH_U32 value: 2 } } }
";
    let e = expect_err(&cf(&[(branches, "")]), "entry[3]", "branches");
    assert!(e.to_string().contains("at least one branch"), "{e}");
    // An empty branch is a branch.
    parse_text(&cf(&[(branches, "    branches {}\n")])).unwrap();
}

#[test]
fn negative_trip_count() {
    let e = expect_err(
        &cf(&[("trip_count: 3", "trip_count: -1")]),
        "entry[2]",
        "trip_count",
    );
    assert!(matches!(e, ProtoError::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("-1 is negative"), "{e}");
    // The same through the binary format.
    let mut msg = to_proto(&parse_text(CF).unwrap());
    let Some(pb::thunk::Kind::While(w)) = &mut msg.entry[2].kind else {
        panic!()
    };
    w.trip_count = Some(i64::MIN);
    let e = decode(&msg.encode_to_vec()).unwrap_err();
    assert_eq!(e.thunk_path().unwrap().to_string(), "entry[2]");
    assert_eq!(e.field(), Some("trip_count"));
    // The largest count the schema can hold is accepted.
    let exe = parse_text(&cf(&[("trip_count: 3", "trip_count: 9223372036854775807")])).unwrap();
    let Thunk::While(WhileThunk { trip_count, .. }) = &exe.entry[2] else {
        panic!()
    };
    assert_eq!(*trip_count, Some(i64::MAX as u64));
}

#[test]
fn control_flow_inside_a_command_buffer() {
    // `while` and `conditional` are allowed (conditional graph nodes).
    let inner = [
        (
            "async_start",
            "body { async_start { id: 1 kind: ASYNC_KIND_COMPUTE } }\n    body { async_done { id: 1 } }",
        ),
        ("command_buffer", "body { command_buffer {} }"),
    ];
    for (kind, text) in inner {
        let e = expect_err(
            &cf(&[(CB_BODY, &format!("{CB_BODY}\n    {text}"))]),
            "entry[5].body[1]",
            "kind",
        );
        assert!(
            e.to_string()
                .contains(&format!("{kind} is not allowed inside a command buffer")),
            "{e}"
        );
        // At any depth: inside a sequence of the command buffer.
        let nested = text.replace("body {", "thunks {");
        let e = expect_err(
            &cf(&[(
                CB_BODY,
                &format!("{CB_BODY}\n    body {{ sequence {{ {nested} }} }}"),
            )]),
            "entry[5].body[1].thunks[0]",
            "kind",
        );
        assert!(e.to_string().contains(kind), "{e}");
    }
    // An async_done alone in a command buffer (its start outside) is rejected too.
    expect_err(
        &cf(&[
            (ASYNC_DONE, ""),
            (
                CB_BODY,
                &format!("{CB_BODY}\n    body {{ async_done {{ id: 7 }} }}"),
            ),
        ]),
        "entry[4].body[1]",
        "kind",
    );
    // Outside command buffers the same thunks are fine, e.g. a command buffer in a while body.
    parse_text(&cf(&[(
        WHILE_BODY,
        &format!("{WHILE_BODY}\n    body {{ command_buffer {{ {CB_BODY} }} }}"),
    )]))
    .unwrap();
}
