//! `.npy` inputs: seed files (every dtype `xthunk run` reads, both byte orders, versions 1 to
//! 3, Fortran order, empty and scalar shapes), mutations of the header dictionary (type
//! strings, shapes with overflowing and negative extents, bounded extra nesting, the header
//! length) and of the data, and how an input names the parameter it is read as.
//!
//! An input is one selector byte followed by the file: the selector picks the parameter's
//! dtype and whether its shape is the one the header claims, a scalar, a vector of the data's
//! length or a shape off by one.

use super::bytes;
use super::rng::Rng;
use xthunk_core::ir::{DType, TensorSpec};

/// A `.npy` file of the given version with this header dictionary and data.
pub fn file(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let prefix = if version == 1 { 10 } else { 12 };
    let mut header = dict.as_bytes().to_vec();
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    header.resize(total - prefix - 1, b' ');
    header.push(b'\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.push(version);
    out.push(0);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

fn dict(descr: &str, fortran: bool, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let order = if fortran { "True" } else { "False" };
    format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}")
}

/// The seed inputs (selector byte included).
pub fn seeds() -> Vec<Vec<u8>> {
    let types: &[(&str, usize, u8)] = &[
        ("|b1", 1, 0),
        ("|i1", 1, 1),
        ("|u1", 1, 2),
        ("<i4", 4, 3),
        ("<i8", 8, 4),
        ("<f2", 2, 5),
        ("<u2", 2, 6),
        ("<f4", 4, 7),
        ("<f8", 8, 8),
        (">f4", 4, 7),
        (">i8", 8, 4),
        ("V2", 2, 6),
        ("<c8", 8, 7),
        ("<c8", 8, 13),
        ("<c16", 16, 14),
        ("<V1", 1, 15),
        ("<f1", 1, 0x40),
    ];
    let shapes: &[&[u64]] = &[&[], &[0], &[3], &[2, 3], &[1, 4], &[2, 1, 2]];
    let mut out = Vec::new();
    for (i, (descr, width, dtype)) in types.iter().enumerate() {
        for (j, shape) in shapes.iter().enumerate() {
            let n: u64 = shape.iter().product();
            let data: Vec<u8> = (0..n as usize * width).map(|k| (k % 2) as u8).collect();
            let version = [1, 1, 2, 3][(i + j) % 4];
            let fortran = j == 4;
            let mut input = vec![*dtype];
            input.extend(file(version, &dict(descr, fortran, shape), &data));
            out.push(input);
        }
    }
    out
}

const DESCRS: &[&str] = &[
    "<f4",
    ">f4",
    "|f4",
    "=f4",
    "<f16",
    "<U8",
    "|O",
    "|S3",
    "<c16",
    "<m8[s]",
    "<M8[D]",
    "V0",
    "V65536",
    "b1",
    "<i0",
    "<i18446744073709551616",
    "",
    "'",
    "[('a', '<f4')]",
    "[('a', '<f4', (2,))]",
    "f4",
];
const EXTENTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "4611686018427387904",
    "4294967296",
    "1e3",
    "0x10",
    "True",
    "None",
    "(2,)",
    "[1]",
    "1L",
    "",
];

/// Deepest bracket nesting a mutated header keeps: deeper nesting makes npyz's header parser
/// take exponential time, a known open case of issue 18 (its regression test is
/// `regression_npy_nested_header_is_quick`). Raise this when the fix lands.
pub const MAX_NESTING: usize = 6;

/// Replaces opening brackets past [`MAX_NESTING`] levels with spaces.
fn limit_nesting(input: &mut [u8]) {
    let mut depth = 0usize;
    for b in input.iter_mut() {
        match *b {
            b'{' | b'(' | b'[' => {
                if depth >= MAX_NESTING {
                    *b = b' ';
                } else {
                    depth += 1;
                }
            }
            b'}' | b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
}

/// Applies one or two mutations to an input.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..rng.range(1, 2) {
        mutate_once(rng, input, other);
    }
    limit_nesting(input);
}

fn mutate_once(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    if input.is_empty() {
        input.push(0);
    }
    match rng.below(8) {
        0 => input[0] = rng.byte(),
        1 => replace_quoted(rng, input, DESCRS),
        2 => replace_digits(rng, input),
        3 => {
            // A little nesting (the header parser must stay linear; deep nesting is a
            // separate, known case).
            let pos = find(input, b"'shape'").unwrap_or(input.len());
            let depth = rng.range(1, 3);
            let open = "{'a': ".repeat(depth);
            let close = "}".repeat(depth);
            let at = (pos + 9).min(input.len());
            input.splice(at..at, format!("{open}0{close}, ").into_bytes());
        }
        4 => {
            // The header length field.
            if input.len() > 11 {
                let v = *rng.pick(&[0u16, 1, 0x7fff, 0xffff, 118]).unwrap_or(&0);
                input[9..11].copy_from_slice(&v.to_le_bytes());
            }
        }
        5 => {
            // The data: truncated, extended, or a non-0/1 bool.
            if rng.chance(1, 2) {
                let n = input.len().saturating_sub(rng.range(1, 8));
                input.truncate(n.max(1));
            } else {
                input.extend(std::iter::repeat_n(2u8, rng.range(1, 8)));
            }
        }
        6 => {
            let b = if rng.chance(1, 2) {
                &b"True"[..]
            } else {
                &b"False"[..]
            };
            if let Some(p) = find(input, b"True").or_else(|| find(input, b"False")) {
                let end = p + if input[p] == b'T' { 4 } else { 5 };
                input.splice(p..end, b.iter().copied());
            }
        }
        _ => {
            let mut rest = input.split_off(1);
            bytes::mutate_once(rng, &mut rest, other.get(1..).unwrap_or(&[]));
            input.extend(rest);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_quoted(rng: &mut Rng, input: &mut Vec<u8>, with: &[&str]) {
    if let Some(p) = find(input, b"'descr': '") {
        let start = p + 10;
        if let Some(len) = input[start..].iter().position(|b| *b == b'\'') {
            let w = rng.pick(with).copied().unwrap_or("");
            input.splice(start..start + len, w.bytes());
        }
    }
}

fn replace_digits(rng: &mut Rng, input: &mut Vec<u8>) {
    let Some(p) = find(input, b"'shape': (") else {
        return;
    };
    let start = p + 10;
    let Some(close) = input[start..].iter().position(|b| *b == b')') else {
        return;
    };
    let n = rng.range(0, 4);
    let dims: Vec<&str> = (0..n)
        .map(|_| rng.pick(EXTENTS).copied().unwrap_or("1"))
        .collect();
    let mut s = dims.join(", ");
    if n == 1 {
        s.push(',');
    }
    input.splice(start..start + close, s.into_bytes());
}

/// The parameter an input is read as, and the file bytes.
pub fn spec_of(input: &[u8]) -> (TensorSpec, &[u8]) {
    let (sel, file) = match input.split_first() {
        Some((s, f)) => (*s, f),
        None => (0, &[][..]),
    };
    // Bits 0-3 and 6 pick the type (17 of them), bits 4-5 the shape.
    let pick = (sel & 0x0f) as usize | (((sel >> 6) & 1) as usize) << 4;
    let dtype = DType::ALL[pick % DType::ALL.len()];
    let claimed = claimed_shape(file);
    let dims = match (sel >> 4) & 3 {
        0 => claimed,
        1 => vec![],
        2 => vec![(file.len() / dtype.size()) as u64],
        _ => {
            let mut d = claimed;
            match d.first_mut() {
                Some(x) => *x = x.wrapping_add(1),
                None => d.push(1),
            }
            d
        }
    };
    let spec = TensorSpec {
        name: "x".into(),
        dtype,
        dims,
        allocation: 0,
    };
    (spec, file)
}

/// The extents after `'shape': (` in the header, as far as they parse (at most 8).
fn claimed_shape(file: &[u8]) -> Vec<u64> {
    let head = &file[..file.len().min(4096)];
    let Some(p) = find(head, b"'shape': (") else {
        return vec![];
    };
    let rest = &head[p + 10..];
    let end = rest.iter().position(|b| *b == b')').unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .take(8)
        .collect()
}
