//! The `mlir` target: StableHLO text (as JAX prints it) through `xthunk_stablehlo::parse`,
//! its seeds (the reader's JAX fixtures, embedded), the words its text mutations draw from,
//! and its generator. Included by `stablehlo/tests/fuzz.rs` and `fuzz/fuzz_targets/mlir.rs`
//! (not by `mod.rs`: the program targets' users do not depend on the reader).
//!
//! Properties besides "no panic, no hang": a refusal is one non-empty line whose position
//! lies inside the text; a module that parses has every `dense`/`dense_resource` value
//! decodable or refused with such an error (what decodes has exactly the type's byte size),
//! and renaming its values canonically twice gives the same tree; it imports (and what imports
//! lowers) or is refused, without a panic.

use super::outcome::Outcome;
use super::pool::Pool;
use super::rng::Rng;
use super::text::{self, Vocabulary};
use xthunk_stablehlo::ast::{Attr, Dim, Op, Type};
use xthunk_stablehlo::canon::canonical;
use xthunk_stablehlo::dense::{decode, element_size};
use xthunk_stablehlo::{Module, ParseError, parse};

/// Seeds: (file name, text), the reader's fixtures (pretty, generic, located, hand-written).
pub const SEEDS: &[(&str, &str)] = &[
    (
        "argmax.mlir",
        include_str!("../../stablehlo/tests/fixtures/argmax.mlir"),
    ),
    (
        "argmax.loc.mlir",
        include_str!("../../stablehlo/tests/fixtures/argmax.loc.mlir"),
    ),
    (
        "barrier_tuple.generic.mlir",
        include_str!("../../stablehlo/tests/fixtures/barrier_tuple.generic.mlir"),
    ),
    (
        "binary.mlir",
        include_str!("../../stablehlo/tests/fixtures/binary.mlir"),
    ),
    (
        "compare.mlir",
        include_str!("../../stablehlo/tests/fixtures/compare.mlir"),
    ),
    (
        "composite.mlir",
        include_str!("../../stablehlo/tests/fixtures/composite.mlir"),
    ),
    (
        "cond.mlir",
        include_str!("../../stablehlo/tests/fixtures/cond.mlir"),
    ),
    (
        "constants.mlir",
        include_str!("../../stablehlo/tests/fixtures/constants.mlir"),
    ),
    (
        "convert.mlir",
        include_str!("../../stablehlo/tests/fixtures/convert.mlir"),
    ),
    (
        "dot.mlir",
        include_str!("../../stablehlo/tests/fixtures/dot.mlir"),
    ),
    (
        "dtypes.mlir",
        include_str!("../../stablehlo/tests/fixtures/dtypes.mlir"),
    ),
    (
        "ffi.mlir",
        include_str!("../../stablehlo/tests/fixtures/ffi.mlir"),
    ),
    (
        "fft.mlir",
        include_str!("../../stablehlo/tests/fixtures/fft.mlir"),
    ),
    (
        "handwritten.src.mlir",
        include_str!("../../stablehlo/tests/fixtures/handwritten.src.mlir"),
    ),
    (
        "handwritten.generic.mlir",
        include_str!("../../stablehlo/tests/fixtures/handwritten.generic.mlir"),
    ),
    (
        "handwritten.loc.mlir",
        include_str!("../../stablehlo/tests/fixtures/handwritten.loc.mlir"),
    ),
    (
        "linalg.mlir",
        include_str!("../../stablehlo/tests/fixtures/linalg.mlir"),
    ),
    (
        "pmap.generic.mlir",
        include_str!("../../stablehlo/tests/fixtures/pmap.generic.mlir"),
    ),
    (
        "scan.loc.mlir",
        include_str!("../../stablehlo/tests/fixtures/scan.loc.mlir"),
    ),
    (
        "select_clamp.mlir",
        include_str!("../../stablehlo/tests/fixtures/select_clamp.mlir"),
    ),
    (
        "shapes.mlir",
        include_str!("../../stablehlo/tests/fixtures/shapes.mlir"),
    ),
    (
        "shard_map.mlir",
        include_str!("../../stablehlo/tests/fixtures/shard_map.mlir"),
    ),
    (
        "sort.mlir",
        include_str!("../../stablehlo/tests/fixtures/sort.mlir"),
    ),
    (
        "unary_int.mlir",
        include_str!("../../stablehlo/tests/fixtures/unary_int.mlir"),
    ),
    (
        "transformer.mlir",
        include_str!("../../stablehlo/tests/fixtures/transformer.mlir"),
    ),
    (
        "embedding.generic.mlir",
        include_str!("../../stablehlo/tests/fixtures/embedding.generic.mlir"),
    ),
    (
        "while.mlir",
        include_str!("../../stablehlo/tests/fixtures/while.mlir"),
    ),
    (
        "while.generic.mlir",
        include_str!("../../stablehlo/tests/fixtures/while.generic.mlir"),
    ),
    (
        "windows.mlir",
        include_str!("../../stablehlo/tests/fixtures/windows.mlir"),
    ),
];

/// MLIR's words: op names, keywords of the pretty forms, types, attribute and location syntax.
const IDENTS: &[&str] = &[
    "stablehlo.add",
    "stablehlo.reduce",
    "stablehlo.while",
    "stablehlo.compare",
    "stablehlo.constant",
    "stablehlo.dot_general",
    "stablehlo.convolution",
    "stablehlo.slice",
    "stablehlo.custom_call",
    "stablehlo.composite",
    "stablehlo.broadcast_in_dim",
    "stablehlo.fft",
    "stablehlo.iota",
    "stablehlo.pad",
    "stablehlo.select",
    "stablehlo.tuple",
    "stablehlo.get_tuple_element",
    "stablehlo.optimization_barrier",
    "stablehlo.complex",
    "stablehlo.real",
    "stablehlo.reduce_precision",
    "stablehlo.cholesky",
    "stablehlo.return",
    "chlo.top_k",
    "chlo.erf",
    "sdy.mesh",
    "sdy.manual_computation",
    "func.func",
    "func.call",
    "call",
    "return",
    "module",
    "attributes",
    "public",
    "private",
    "dims",
    "dim",
    "sizes",
    "low",
    "high",
    "interior",
    "across",
    "dimensions",
    "applies",
    "init",
    "reducer",
    "cond",
    "do",
    "x",
    "batching_dims",
    "contracting_dims",
    "precision",
    "algorithm",
    "window",
    "stride",
    "pad",
    "lhs_dilate",
    "rhs_dilate",
    "reverse",
    "dim_numbers",
    "type",
    "length",
    "format",
    "e5m10",
    "lower",
    "GT",
    "FLOAT",
    "SIGNED",
    "TOTALORDER",
    "DEFAULT",
    "tensor",
    "tuple",
    "complex",
    "f32",
    "f16",
    "bf16",
    "f64",
    "i1",
    "i4",
    "i8",
    "i32",
    "i64",
    "ui8",
    "ui64",
    "i128",
    "i0",
    "index",
    "f8E4M3FN",
    "f8E5M2FNUZ",
    "none",
    "dense",
    "dense_resource",
    "array",
    "loc",
    "callsite",
    "fused",
    "unknown",
    "at",
    "to",
    "true",
    "false",
    "unit",
    "inf",
    "nan",
    "in_shardings",
    "manual_axes",
    "k",
];

/// MLIR-shaped fragments: sigils, value uses, result groups, types, blobs, trailers.
const FRAGMENTS: &[&str] = &[
    "%",
    "%0",
    "%0#1",
    "%0#99999999999",
    "%0:2 = ",
    "%0:0 = ",
    "@",
    "@\"q\"",
    "^bb0(",
    "^bb1:",
    "#loc",
    "#loc1",
    "#stablehlo<",
    "#stablehlo.dot<",
    "#sdy<",
    "tensor<",
    "tensor<?x",
    "tensor<*x",
    "x",
    "4x",
    "0x",
    "->",
    "(",
    ")",
    "<{",
    "}>",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    ",",
    ":",
    "=",
    "dense<",
    "dense<\"0x",
    "dense<[",
    "\"0x0400000000\"",
    "{-#",
    "#-}",
    "loc(",
    "\"",
    "\n",
    " : tensor<f32>",
    " : () -> ()",
    "(tensor<f32>) -> tensor<f32>",
    "array<i64: ",
    "//",
    "!stablehlo.token",
    "!quant.uniform<i8:f32, 1.0>",
    "complex<",
    "tuple<",
    "\"\\",
    "dense_resource<blob>",
    "(1.0,2.0)",
    "0x7FC00000",
    "-0x1",
];

/// Number-like replacements: boundaries of the widths, bit patterns, float limits, bad forms.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "4",
    "255",
    "256",
    "65535",
    "65536",
    "2147483648",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211455",
    "340282366920938463463374607431768211456",
    "0x7FC00000",
    "0xFF800000",
    "0x7E00",
    "0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF",
    "1.0e39",
    "-0.0",
    "1e-46",
    "3.4028236e38",
    "65504",
    "448",
    "1e400",
    "00",
    "1.",
    "1e",
    "0x",
];

pub const MLIR: Vocabulary = Vocabulary {
    numbers: NUMBERS,
    idents: IDENTS,
    fragments: FRAGMENTS,
    nest: (
        "\"a.b\"() ({\n",
        "\"a.c\"() : () -> ()\n",
        "}) : () -> ()\n",
    ),
};

/// The most bytes a `dense` value of an accepted input decodes to.
const DECODE_CAP: u64 = 1 << 20;

/// A coarse error class: the variant (the stage), the operation being read, and the message's
/// words before any quoted or numbered part.
fn class_of(e: &ParseError) -> String {
    let variant = match e {
        ParseError::Syntax { .. } => "syntax",
        ParseError::TooDeep { .. } => "deep",
        ParseError::TooLarge { .. } => "large",
        ParseError::Dense { .. } => "dense",
        ParseError::Thread { .. } => "thread",
    };
    let text = e.to_string();
    let message = text.split_once(": ").map_or("", |(_, m)| m);
    let words: String = message
        .split(['`', '(', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
        .next()
        .unwrap_or("")
        .chars()
        .take(40)
        .collect();
    let op: String = e.op().chars().take(40).collect();
    format!("{variant}/{op}/{}", words.trim())
}

/// An error must be one line with a position inside the text.
fn check_error(e: &ParseError, text: &str) -> Result<(), String> {
    let line = e.to_string();
    if line.trim().is_empty() || line.contains('\n') {
        return Err(format!("error is not one non-empty line: {line:?}"));
    }
    let lines = text.split('\n').count() as u32;
    let pos = e.pos();
    if pos.line == 0 || pos.col == 0 || pos.line > lines {
        return Err(format!(
            "error position {pos} outside the text ({lines} lines): {line}"
        ));
    }
    if e.op().is_empty() {
        return Err(format!("error names no operation: {line}"));
    }
    Ok(())
}

fn dense_attrs<'m>(a: &'m Attr, out: &mut Vec<&'m Attr>) {
    match a {
        Attr::Dense { .. } | Attr::DenseResource { .. } => out.push(a),
        Attr::Array(items) => items.iter().for_each(|i| dense_attrs(i, out)),
        Attr::Dict(entries)
        | Attr::Struct {
            fields: entries, ..
        } => entries.iter().for_each(|(_, v)| dense_attrs(v, out)),
        _ => {}
    }
}

fn walk<'m>(op: &'m Op, out: &mut Vec<&'m Op>) {
    out.push(op);
    for r in &op.regions {
        for b in &r.blocks {
            b.ops.iter().for_each(|o| walk(o, out));
        }
    }
}

/// The byte size a decoded value of type `ty` has, if the type is static.
fn byte_size(ty: &Type) -> Option<u64> {
    let Type::Tensor {
        dims: Some(dims),
        elem,
        ..
    } = ty
    else {
        return None;
    };
    dims.iter()
        .try_fold(element_size(*elem) as u64, |acc, d| match d {
            Dim::Static(n) => acc.checked_mul(*n),
            Dim::Dynamic => None,
        })
}

fn check_module(m: &Module, text: &str) -> Result<(), String> {
    let mut ops = Vec::new();
    walk(&m.op, &mut ops);
    for op in ops {
        let mut values = Vec::new();
        op.attrs
            .iter()
            .for_each(|(_, a)| dense_attrs(a, &mut values));
        for v in values {
            match decode(v, &m.resources, DECODE_CAP, &op.name) {
                Ok(bytes) => {
                    let ty = match v {
                        Attr::Dense { ty, .. } | Attr::DenseResource { ty, .. } => ty,
                        _ => continue,
                    };
                    if byte_size(ty) != Some(bytes.len() as u64) {
                        return Err(format!(
                            "decoded {} bytes for {ty:?} in {}",
                            bytes.len(),
                            op.name
                        ));
                    }
                }
                Err(e) => check_error(&e, text)?,
            }
        }
    }
    let once = canonical(m);
    if canonical(&once) != once {
        return Err("canonical names are not idempotent".into());
    }
    Ok(())
}

/// The `mlir` target (bytes read as UTF-8, lossily).
pub fn target(bytes: &[u8]) -> Result<Outcome, String> {
    let text = String::from_utf8_lossy(bytes);
    match parse(&text) {
        Ok(m) => {
            check_module(&m, &text)?;
            // The importer and the lowering behind it: a graph or a refusal, never a panic.
            if let Ok(imported) = xthunk_stablehlo::import::import(&m) {
                let _ = xthunk_tensor::lower::lower(&imported.graph);
            }
            Ok(Outcome::Accepted { ran: false })
        }
        Err(e) => {
            check_error(&e, &text)?;
            Ok(Outcome::Rejected {
                class: class_of(&e),
            })
        }
    }
}

/// Digit runs the reader must bound: shape extents, result counts and indices, widths,
/// location lines, blob lengths.
const DIGITS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "8",
    "64",
    "65",
    "128",
    "129",
    "255",
    "65536",
    "2147483648",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999999999999999999999",
];

/// Replaces one run of decimal digits anywhere (inside `4x3xf32`, `%0#1`, `i32`, `:12:3`)
/// with a boundary value: shapes, counts and widths the token mutations do not reach.
fn mutate_digits(rng: &mut Rng, text: &mut String) {
    let b = text.as_bytes();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    if let (Some(&(s, e)), Some(d)) = (rng.pick(&runs), rng.pick(DIGITS)) {
        text.replace_range(s..e, d);
    }
}

/// How many texts a run keeps to mutate (seeds included).
const POOL: usize = 256;

/// The generator: a seed or a text from the pool (inputs that parsed, or were refused in a
/// new way) with one to four token, line, nesting or byte mutations.
pub struct MlirFuzzer {
    texts: Pool<String>,
    classes: std::collections::BTreeSet<String>,
    accepted: u64,
}

impl MlirFuzzer {
    pub fn new() -> Self {
        MlirFuzzer {
            texts: Pool::new(SEEDS.iter().map(|(_, t)| t.to_string()).collect(), POOL),
            classes: Default::default(),
            accepted: 0,
        }
    }
}

impl Default for MlirFuzzer {
    fn default() -> Self {
        Self::new()
    }
}

impl super::runner::Fuzzer for MlirFuzzer {
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        // Half the cases start from a seed, so that a pool full of refused texts does not
        // keep the run away from what parses.
        let start = if rng.chance(1, 2) {
            self.texts.pick_seed(rng)
        } else {
            self.texts.pick(rng)
        };
        let mut t = start.cloned().unwrap_or_default();
        let other = self.texts.pick_seed(rng).cloned().unwrap_or_default();
        if rng.chance(1, 4) {
            // Numbers only: most of these still parse, and reach the decoding of `dense`
            // values with shapes and counts that no longer agree.
            for _ in 0..rng.range(1, 4) {
                mutate_digits(rng, &mut t);
            }
        } else {
            text::mutate_with(rng, &mut t, &other, &MLIR);
            if rng.chance(1, 3) {
                mutate_digits(rng, &mut t);
            }
        }
        t.into_bytes()
    }

    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        target(input)
    }

    fn learn(&mut self, rng: &mut Rng, input: &[u8], outcome: &Outcome) {
        let t = String::from_utf8_lossy(input).into_owned();
        match outcome {
            Outcome::Accepted { .. } => {
                self.accepted += 1;
                if rng.chance(1, 4) {
                    self.texts.add(rng, t);
                }
            }
            Outcome::Rejected { class } => {
                if self.classes.insert(class.clone()) {
                    self.texts.add(rng, t);
                }
            }
            Outcome::Skipped => {}
        }
    }

    fn reductions(&self, input: &[u8]) -> Vec<Vec<u8>> {
        text::reductions(&String::from_utf8_lossy(input))
            .into_iter()
            .map(String::into_bytes)
            .collect()
    }

    fn show(&self, input: &[u8]) -> Option<String> {
        Some(String::from_utf8_lossy(input).into_owned())
    }

    fn stats(&self) -> String {
        format!("pool {} texts", self.texts.len())
    }
}
