//! StableHLO portable artifacts (MLIR bytecode of VHLO, `jax.export`'s serialized form):
//! a small one JAX wrote imports like its text; malformed ones (truncated, bad magic,
//! unsupported versions, huge counts, flipped bytes, attribute bombs) give a clear error,
//! never a panic. The fixtures are `jax.export` of `maximum(x * y + 1, 0).sum(axis=1)` on two
//! f32[2,3] (jax 0.10.2: bytecode version 6, StableHLO 1.15.0).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_stablehlo::bytecode::BytecodeError;
use xthunk_stablehlo::import::{ImportError, import_portable};

const VHLO: &[u8] = include_bytes!("fixtures/portable/add.vhlo");
const EXPORTED: &[u8] = include_bytes!("fixtures/portable/add.jaxexport");

fn err(bytes: &[u8]) -> String {
    match import_portable(bytes) {
        Ok(_) => panic!("accepted {} bytes", bytes.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn both_forms_import_to_the_same_graph() {
    let a = import_portable(VHLO).unwrap();
    let b = import_portable(EXPORTED).unwrap();
    assert_eq!(a.graph.params().len(), 2);
    assert_eq!(format!("{:?}", a.graph), format!("{:?}", b.graph));
    assert_eq!(a.result_info, vec![Some("result".to_string())]);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for n in 0..VHLO.len() {
        let e = err(&VHLO[..n]);
        assert!(!e.is_empty());
    }
    for n in 0..EXPORTED.len() {
        // A prefix of the flatbuffer is refused or (rarely) still reads; never a panic.
        let _ = import_portable(&EXPORTED[..n]);
    }
}

#[test]
fn bad_magic_is_refused() {
    let mut b = VHLO.to_vec();
    b[3] = b'X';
    let e = err(&b);
    assert!(e.contains("jax.export") || e.contains("magic"), "{e}");
    assert!(err(b"hello").contains("too short"), "{}", err(b"hello"));
}

#[test]
fn an_unknown_bytecode_version_is_refused_naming_it() {
    let mut b = VHLO.to_vec();
    assert_eq!(b[4], 0x0d, "the fixture is bytecode version 6");
    b[4] = (99 << 1) | 1;
    let e = err(&b);
    assert!(e.contains("version 99") && e.contains("1 to 6"), "{e}");
}

fn with_producer(p: &str) -> Vec<u8> {
    let start = VHLO.windows(11).position(|w| w == b"StableHLO_v").unwrap();
    let end = start + VHLO[start..].iter().position(|&b| b == 0).unwrap();
    let mut out = VHLO[..start].to_vec();
    out.extend_from_slice(p.as_bytes());
    out.extend_from_slice(&VHLO[end..]);
    out
}

#[test]
fn the_stablehlo_version_is_checked() {
    assert!(import_portable(&with_producer("StableHLO_v1.20.0")).is_ok());
    let e = err(&with_producer("StableHLO_v1.21.0"));
    assert!(
        e.contains("1.21.0") && e.contains("1.20.0") && e.contains("newer"),
        "{e}"
    );
    let e = err(&with_producer("StableHLO_v0.19.0"));
    assert!(e.contains("0.19.0") && e.contains("older"), "{e}");
    let e = err(&with_producer("MLIR22.0.0git"));
    assert!(e.contains("producer"), "{e}");
}

fn header() -> Vec<u8> {
    let mut b = b"ML\xefR".to_vec();
    b.push(0x0d);
    b.extend_from_slice(b"StableHLO_v1.15.0\0");
    b
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    // A string section claiming 2^56 strings.
    let mut b = header();
    b.push(0);
    b.push(19); // section length 9
    b.push(0x00);
    b.extend_from_slice(&(1u64 << 56).to_le_bytes());
    let e = err(&b);
    assert!(e.contains("count") && e.contains("bytes left"), "{e}");
    // A section longer than the file.
    let mut b = header();
    b.push(0);
    b.extend_from_slice(&[0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    let e = err(&b);
    assert!(e.contains("bytes wanted"), "{e}");
    // A section id outside the format's, and one given twice.
    let mut b = header();
    b.extend_from_slice(&[42, 1]);
    assert!(err(&b).contains("unknown section id 42"));
    let mut b = header();
    b.extend_from_slice(&[0, 3, 1, 0, 3, 1]);
    assert!(err(&b).contains("twice"));
}

#[test]
fn flipped_bytes_never_panic() {
    // Deterministic: every byte of the artifact set to a few values in turn.
    let mut outcomes = [0usize; 2];
    for i in 0..VHLO.len() {
        for v in [0x00, 0x01, 0x7f, 0x80, 0xff, VHLO[i] ^ 0x10] {
            let mut b = VHLO.to_vec();
            b[i] = v;
            outcomes[usize::from(import_portable(&b).is_ok())] += 1;
        }
    }
    assert!(outcomes[0] > 0, "no corruption was noticed");
}

#[test]
fn errors_are_typed() {
    match import_portable(&with_producer("StableHLO_v2.0.0")) {
        Err(ImportError::Bytecode(BytecodeError::Unsupported { .. })) => {}
        other => panic!("{other:?}"),
    }
    match import_portable(&VHLO[..20]) {
        Err(ImportError::Bytecode(BytecodeError::Malformed { .. })) => {}
        other => panic!("{other:?}"),
    }
}

/// A one-byte varint.
fn v(x: u8) -> u8 {
    assert!(x < 128);
    (x << 1) | 1
}

/// A varint below 2^14 (one or two bytes).
fn varint(x: usize) -> Vec<u8> {
    if x < 128 {
        vec![v(u8::try_from(x).unwrap())]
    } else {
        assert!(x < 1 << 14);
        u16::try_from(x << 2 | 0b10).unwrap().to_le_bytes().to_vec()
    }
}

fn section(id: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![id];
    out.extend(varint(body.len()));
    out.extend_from_slice(body);
    out
}

#[test]
fn an_attribute_bomb_is_refused() {
    // 60 arrays, each holding the next one twice: 2^60 nodes if copied out.
    let mut attrs: Vec<Vec<u8>> = (0..59)
        .map(|i| vec![v(0), v(2), v(i + 1), v(i + 1)])
        .collect();
    attrs.push(vec![v(7)]); // 59: unit
    attrs.push(vec![v(1), v(1), v(61), v(0)]); // 60: {attr61 = attr0}
    attrs.push(vec![v(2), v(1)]); // 61: "module"
    attrs.push(vec![v(15)]); // 62: unknown location
    let mut offsets = vec![v(63), v(0), v(0), v(63)];
    offsets.extend(
        attrs
            .iter()
            .map(|a| v(u8::try_from(a.len()).unwrap() << 1 | 1)),
    );
    let strings = [v(2), v(7), v(8)]
        .iter()
        .copied()
        .chain(b"builtin\0module\0".iter().copied())
        .collect::<Vec<u8>>();
    let mut b = header();
    b.extend(section(0, &strings));
    b.extend(section(1, &[v(1), v(0), v(1), v(0), v(1), v(3)]));
    let data: Vec<u8> = attrs.concat();
    b.extend(section(2, &data));
    b.extend(section(3, &offsets));
    b.extend(section(4, &[v(2), v(0), 0x01, v(62), v(60)]));
    let e = err(&b);
    assert!(e.contains("exceeds the limit"), "{e}");
}

#[test]
fn random_mutations_never_panic_in_reading_importing_or_lowering() {
    // A fixed xorshift: several bytes changed, inserted or removed per case, over both forms.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // `XTHUNK_PORTABLE_CASES=N` for a longer run.
    let cases: usize = std::env::var("XTHUNK_PORTABLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut imported = 0;
    for case in 0..cases {
        let mut b = if case % 2 == 0 { VHLO } else { EXPORTED }.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % b.len();
            match next() % 4 {
                0 => b.insert(at, next() as u8),
                1 if b.len() > 1 => {
                    b.remove(at);
                }
                _ => b[at] = next() as u8,
            }
        }
        if let Ok(m) = import_portable(&b) {
            imported += 1;
            let _ = xthunk_tensor::lower::lower(&m.graph);
        }
    }
    assert!(imported < cases, "no mutation was noticed");
}
