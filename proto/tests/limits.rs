//! Sizes at the edges of their types: validation refuses what would overflow a product, a sum
//! or a signed offset (an error naming the thunk and the field, never a panic or a wrapped
//! value that passes), and accepts what is merely large.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_core::ir::{
    CollectiveOp, CollectiveThunk, DType, ReduceOp, Slice, check_collective_sizes,
};
use xthunk_proto::{ProtoError, parse_text};

/// The error of a text program, checked against its thunk path and field.
fn expect_err(text: &str, path: &str, field: &str, needle: &str) -> ProtoError {
    let e = match parse_text(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert_eq!(
        e.thunk_path().map(|p| p.to_string()).as_deref(),
        Some(path),
        "path of: {msg}"
    );
    assert_eq!(e.field(), Some(field), "field of: {msg}");
    assert!(msg.contains(needle), "{msg:?} should contain {needle:?}");
    e
}

const GEMM: &str = r#"
abi_version: 1
allocations { index: 0 size: 64 alignment: 16 temp {} }
allocations { index: 1 size: 64 alignment: 16 temp {} }
entry {
  gemm {
    a { allocation: 0 size: 4 }
    b { allocation: 0 offset: 16 size: 4 }
    c { allocation: 1 size: 4 }
    m: 1 n: 1 k: 1 lda: 1 ldb: 1 ldc: 1
    dtype: DTYPE_F32
  }
}
"#;

fn gemm(from: &str, to: &str) -> String {
    assert!(GEMM.contains(from), "{from:?} is not in the gemm program");
    GEMM.replacen(from, to, 1)
}

#[test]
fn gemm_strides_that_do_not_fit_a_signed_offset_are_refused() {
    parse_text(GEMM).unwrap();
    // One row: the shape needs no row stride, but the backends still turn it into an isize.
    expect_err(
        &gemm("lda: 1", "lda: 9223372036854775808"),
        "entry[0]",
        "lda",
        "signed 64-bit",
    );
    // 2^61 f32 elements are 2^63 bytes.
    expect_err(
        &gemm("ldb: 1", "ldb: 2305843009213693952"),
        "entry[0]",
        "ldb",
        "2305843009213693952",
    );
    expect_err(
        &gemm("ldc: 1", "ldc: 18446744073709551615"),
        "entry[0]",
        "ldc",
        "signed 64-bit",
    );
    // One batch entry: the batch stride is never used, and still must fit.
    expect_err(
        &gemm("ldc: 1", "ldc: 1 stride_a: 9223372036854775808"),
        "entry[0]",
        "stride_a",
        "signed 64-bit",
    );
    expect_err(
        &gemm("ldc: 1", "ldc: 1 stride_c: 4611686018427387904"),
        "entry[0]",
        "stride_c",
        "signed 64-bit",
    );
    // Large but representable strides are fine: 2^40 elements of f32.
    parse_text(&gemm("lda: 1", "lda: 1099511627776")).unwrap();
    parse_text(&gemm("ldc: 1", "ldc: 1 stride_b: 1099511627776")).unwrap();
}

#[test]
fn gemm_extents_of_empty_matrices_are_bounded() {
    // m = 2^63 with n = k = 0: every matrix is empty, so no operand bounds m.
    expect_err(
        &gemm("m: 1 n: 1 k: 1", "m: 9223372036854775808 n: 0 k: 0"),
        "entry[0]",
        "m",
        "9223372036854775808",
    );
    expect_err(
        &gemm("ldc: 1", "ldc: 1 batch: 18446744073709551615"),
        "entry[0]",
        "batch",
        "18446744073709551615",
    );
}

#[test]
fn block_extents_whose_product_overflows_u64_are_refused() {
    // (2^22, 2^22, 2^20) threads: 2^64, which wrapped to 0 in 64-bit arithmetic and passed.
    let text = r#"
abi_version: 1
modules { name: "m" images { source { code: "__global__ void k() {}" } } }
entry {
  kernel {
    module: "m" name: "k"
    grid { x: 1 y: 1 z: 1 }
    block { x: 4194304 y: 4194304 z: 1048576 }
  }
}
"#;
    expect_err(text, "entry[0]", "block", "18446744073709551616 threads");
    // The largest extents of all: (2^32-1)^3, exactly.
    let max = text.replace(
        "x: 4194304 y: 4194304 z: 1048576",
        "x: 4294967295 y: 4294967295 z: 4294967295",
    );
    expect_err(
        &max,
        "entry[0]",
        "block",
        "79228162458924105385300197375 threads",
    );
}

#[test]
fn allocations_larger_than_i64_are_refused() {
    let text = r#"
abi_version: 1
allocations { index: 0 size: 9223372036854775807 alignment: 16 temp {} }
allocations { index: 1 size: 9223372036854775808 alignment: 16 temp {} }
"#;
    let e = parse_text(text).unwrap_err();
    assert_eq!(e.field(), Some("allocations[1].size"), "{e}");
    assert!(e.to_string().contains("9223372036854775808"), "{e}");
}

/// A collective over 4 ranks whose src is 2^62 bytes.
fn collective(kind: &str, src: u64, dst: u64) -> String {
    format!(
        r#"
abi_version: 1
allocations {{ index: 0 size: 4611686018427387904 alignment: 16 temp {{}} }}
allocations {{ index: 1 size: 4611686018427387904 alignment: 16 temp {{}} }}
entry {{
  {kind} {{
    src {{ allocation: 0 size: {src} }}
    dst {{ allocation: 1 size: {dst} }}
    dtype: DTYPE_F32
    {op}
    groups {{ ranks: [0, 1, 2, 3] }}
  }}
}}
"#,
        op = if kind == "reduce_scatter" {
            "op: REDUCE_OP_SUM"
        } else {
            ""
        }
    )
}

#[test]
fn collective_sizes_that_overflow_are_mismatches() {
    // 4 · 2^62 = 2^64 wrapped to 0: a dst of 0 bytes passed.
    expect_err(
        &collective("all_gather", 1 << 62, 0),
        "entry[0]",
        "dst",
        "overflows",
    );
    expect_err(
        &collective("reduce_scatter", 0, 1 << 62),
        "entry[0]",
        "src",
        "overflows",
    );
    // Representable sizes are checked as before.
    parse_text(&collective("all_gather", 1 << 60, 1 << 62)).unwrap();
    expect_err(
        &collective("all_gather", 1 << 60, 1 << 61),
        "entry[0]",
        "dst",
        "needs 4611686018427387904 bytes",
    );
}

#[test]
fn run_time_collective_checks_take_any_group_size() {
    let c = |op: CollectiveOp, src: u64, dst: u64| CollectiveThunk {
        op,
        src: Slice::new(0, 0, src),
        dst: Slice::new(1, 0, dst),
        dtype: DType::F64,
        groups: vec![],
    };
    // The executor checks against the world size at run time: n · 8 overflowing in the
    // all-to-all block size, or n = 0, is an error, not a panic.
    let a2a = c(CollectiveOp::AllToAll, 64, 64);
    assert!(check_collective_sizes(&a2a, u64::MAX).is_err());
    assert!(check_collective_sizes(&a2a, 1 << 61).is_err());
    assert!(check_collective_sizes(&a2a, 0).is_err());
    assert_eq!(check_collective_sizes(&a2a, 8), Ok(()));
    let gather = c(CollectiveOp::AllGather, 1 << 40, 0);
    assert_eq!(
        check_collective_sizes(&gather, 1 << 24).unwrap_err().0,
        "dst"
    );
    let scatter = c(
        CollectiveOp::ReduceScatter { op: ReduceOp::Sum },
        0,
        1 << 40,
    );
    assert_eq!(
        check_collective_sizes(&scatter, 1 << 24).unwrap_err().0,
        "src"
    );
    let bcast = c(CollectiveOp::Broadcast { root: 3 }, 8, 8);
    assert_eq!(check_collective_sizes(&bcast, 3).unwrap_err().0, "root");
    assert_eq!(check_collective_sizes(&bcast, u64::MAX), Ok(()));
}
