//! Mutations of text programs at the level of tokens and lines: numbers replaced by boundary
//! values (overflowing, negative, floats, hex, `nan`), identifiers by other names of the
//! format, lines deleted, duplicated or swapped, brackets and quotes inserted, deep nesting,
//! damaged strings; plus byte havoc now and then. The words come from a [`Vocabulary`]:
//! [`TXTPB`] for `.txtpb` programs ([`mutate`]), another for StableHLO (`mlir.rs`).

use super::bytes;
use super::rng::Rng;

/// Number-like replacements.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "255",
    "256",
    "1024",
    "4096",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "0x10",
    "0xFFFFFFFF",
    "0xFFFFFFFFFFFFFFFF",
    "0x1FFFFFFFFFFFFFFFF",
    "010",
    "0777",
    "1.5",
    "-0",
    "-0.0",
    "1e309",
    "-1e309",
    "3.4028236e38",
    "1e-46",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "infinity",
    "1f",
    "0.0f",
    ".5",
    "5.",
    "1e",
    "0x",
];

/// Identifier replacements: field names, enum values and literals.
const IDENTS: &[&str] = &[
    "abi_version",
    "name",
    "allocations",
    "modules",
    "entry",
    "signature",
    "index",
    "size",
    "alignment",
    "parameter",
    "output",
    "temp",
    "constant",
    "memory_space",
    "allocation",
    "offset",
    "copy",
    "memset",
    "kernel",
    "gemm",
    "sequence",
    "while",
    "conditional",
    "async_start",
    "async_done",
    "command_buffer",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "collective_permute",
    "send",
    "recv",
    "rank_id",
    "execution_seed",
    "src",
    "dst",
    "width",
    "value",
    "module",
    "grid",
    "block",
    "shared_mem",
    "args",
    "buffer",
    "scalar",
    "slice",
    "access",
    "x",
    "y",
    "z",
    "m",
    "n",
    "k",
    "lda",
    "ldb",
    "ldc",
    "trans_a",
    "trans_b",
    "alpha",
    "beta",
    "dtype",
    "batch",
    "stride_a",
    "stride_b",
    "stride_c",
    "thunks",
    "cond",
    "pred",
    "body",
    "trip_count",
    "index_type",
    "branches",
    "id",
    "kind",
    "op",
    "groups",
    "ranks",
    "root",
    "pairs",
    "source",
    "target",
    "peer",
    "images",
    "standard",
    "source",
    "ptx",
    "cubin",
    "hsaco",
    "host",
    "code",
    "arch",
    "data",
    "library",
    "parameters",
    "outputs",
    "dims",
    "i8",
    "u8",
    "i32",
    "i64",
    "f16",
    "bf16",
    "f32",
    "f64",
    "DTYPE_UNSPECIFIED",
    "DTYPE_PRED",
    "DTYPE_I8",
    "DTYPE_U8",
    "DTYPE_I32",
    "DTYPE_I64",
    "DTYPE_F16",
    "DTYPE_BF16",
    "DTYPE_F32",
    "DTYPE_F64",
    "DTYPE_I16",
    "DTYPE_U16",
    "DTYPE_U32",
    "DTYPE_U64",
    "DTYPE_C64",
    "DTYPE_C128",
    "DTYPE_F8E4M3FN",
    "DTYPE_F8E5M2",
    "ACCESS_READ",
    "ACCESS_WRITE",
    "ACCESS_READ_WRITE",
    "ACCESS_UNSPECIFIED",
    "MEMSET_WIDTH_U8",
    "MEMSET_WIDTH_U16",
    "MEMSET_WIDTH_U32",
    "MEMORY_SPACE_HOST_PINNED",
    "MEMORY_SPACE_COLLECTIVE",
    "ASYNC_KIND_COMPUTE",
    "ASYNC_KIND_COMMUNICATION",
    "REDUCE_OP_SUM",
    "REDUCE_OP_MAX",
    "true",
    "false",
    "True",
    "t",
    "nan",
    "inf",
    "[xthunk.v1.Executable]",
    "unknown_field",
    "10",
    "-5",
];

/// Small fragments inserted as they are.
const FRAGMENTS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    ";",
    "<",
    ">",
    "\"",
    "'",
    "#",
    "\n",
    " ",
    "\\",
    "\"\\x\"",
    "\"\\u12\"",
    "\"\\377\"",
    "\"\\400\"",
    "\"é☃\"",
    "\"\0\"",
    "{}",
    "[]",
    "[,]",
    "{{",
    "}}",
    ": {",
    "entry {",
    "entry: [",
    "sequence { thunks {",
    "/* */",
    "0x",
    "-",
    "e",
    ".",
];

/// What a text format's mutations draw from.
pub struct Vocabulary {
    /// Number-like replacements.
    pub numbers: &'static [&'static str],
    /// Identifier replacements.
    pub idents: &'static [&'static str],
    /// Fragments inserted as they are.
    pub fragments: &'static [&'static str],
    /// Deep nesting: `open` repeated, `leaf`, `close` repeated (10 to 129 times).
    pub nest: (&'static str, &'static str, &'static str),
}

/// The `.txtpb` format's words.
pub const TXTPB: Vocabulary = Vocabulary {
    numbers: NUMBERS,
    idents: IDENTS,
    fragments: FRAGMENTS,
    nest: (
        "entry { sequence { thunks ",
        "{ rank_id { dst { size: 4 } } }",
        " } }",
    ),
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tok {
    Ident,
    Number,
    Str,
    Other,
}

/// Splits text into tokens (byte ranges) with a coarse kind.
fn tokens(text: &str) -> Vec<(usize, usize, Tok)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Ident
        } else if c.is_ascii_digit() || (c == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'+' || b[i] == b'-')
            {
                i += 1;
            }
            Tok::Number
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            Tok::Str
        } else {
            i += 1;
            while i < b.len() && !text.is_char_boundary(i) {
                i += 1;
            }
            Tok::Other
        };
        if kind != Tok::Other || !c.is_ascii_whitespace() {
            out.push((start, i, kind));
        }
    }
    out
}

/// Applies one to four text mutations; `other` is another text for line splices.
pub fn mutate(rng: &mut Rng, text: &mut String, other: &str) {
    mutate_with(rng, text, other, &TXTPB);
}

/// [`mutate`] with the words of another text format.
pub fn mutate_with(rng: &mut Rng, text: &mut String, other: &str, words: &Vocabulary) {
    for _ in 0..rng.range(1, 4) {
        mutate_once(rng, text, other, words);
    }
    if text.len() > bytes::MAX_LEN {
        let mut cut = bytes::MAX_LEN;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

fn replace_token(rng: &mut Rng, text: &mut String, want: Tok, with: &[&str]) {
    let toks: Vec<_> = tokens(text).into_iter().filter(|t| t.2 == want).collect();
    if let Some(&(s, e, _)) = rng.pick(&toks) {
        let w = rng.pick(with).copied().unwrap_or("");
        text.replace_range(s..e, w);
    }
}

fn mutate_once(rng: &mut Rng, text: &mut String, other: &str, words: &Vocabulary) {
    match rng.below(12) {
        0 | 1 => replace_token(rng, text, Tok::Number, words.numbers),
        2 | 3 => replace_token(rng, text, Tok::Ident, words.idents),
        4 => {
            let toks = tokens(text);
            if let Some(&(s, e, _)) = rng.pick(&toks) {
                text.replace_range(s..e, "");
            }
        }
        5 => {
            let toks = tokens(text);
            let at = rng.pick(&toks).map(|t| t.0).unwrap_or(0);
            let f = rng.pick(words.fragments).copied().unwrap_or("");
            text.insert_str(at, f);
        }
        6 | 7 => {
            // Lines: delete, duplicate, swap, or take one from the other text.
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            let len = lines.len();
            match rng.below(4) {
                0 => {
                    if let Some(i) = rng.index(len) {
                        let n = rng.range(1, 4).min(len - i);
                        lines.drain(i..i + n);
                    }
                }
                1 => {
                    if let Some(i) = rng.index(len) {
                        let n = rng.range(1, 8).min(len - i);
                        let chunk: Vec<String> = lines[i..i + n].to_vec();
                        let to = rng.below(len + 1);
                        lines.splice(to..to, chunk);
                    }
                }
                2 => {
                    if let (Some(i), Some(j)) = (rng.index(len), rng.index(len)) {
                        lines.swap(i, j);
                    }
                }
                _ => {
                    let theirs: Vec<&str> = other.lines().collect();
                    if let Some(l) = rng.pick(&theirs) {
                        let to = rng.below(len + 1);
                        lines.insert(to, l.to_string());
                    }
                }
            }
            *text = lines.join("\n");
        }
        8 => {
            // Deep nesting, valid as far as the format goes.
            let depth = rng.range(10, 130);
            let (open, leaf, close) = words.nest;
            let mut s = String::new();
            for _ in 0..depth {
                s.push_str(open);
            }
            s.push_str(leaf);
            for _ in 0..depth {
                s.push_str(close);
            }
            let toks = tokens(text);
            let at = rng.pick(&toks).map(|t| t.0).unwrap_or(0);
            text.insert_str(at, &format!("\n{s}\n"));
        }
        9 => {
            // Damage a string literal.
            let toks: Vec<_> = tokens(text)
                .into_iter()
                .filter(|t| t.2 == Tok::Str)
                .collect();
            if let Some(&(s, e, _)) = rng.pick(&toks) {
                let repl = *rng
                    .pick(&[
                        "\"",
                        "\"\\",
                        "\"a\\\"",
                        "\"\\xZZ\"",
                        "\"\\u{}\"",
                        "\"\u{1F600}\"",
                        "''",
                        "\"std\" \"std\"",
                    ])
                    .unwrap_or(&"\"\"");
                text.replace_range(s..e, repl);
            }
        }
        10 => {
            // Truncate.
            let toks = tokens(text);
            if let Some(&(s, _, _)) = rng.pick(&toks) {
                text.truncate(s);
            }
        }
        _ => {
            let mut raw = std::mem::take(text).into_bytes();
            bytes::mutate_once(rng, &mut raw, other.as_bytes());
            *text = String::from_utf8_lossy(&raw).into_owned();
        }
    }
}

/// Byte ranges of bracketed fields (`name: { ... }`, `name [ ... ]`, array elements with their
/// comma), largest first: deleting one keeps the brackets balanced.
fn blocks(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut stack = Vec::new();
    let mut in_string = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'{' | b'[' if !in_string => stack.push(i),
            b'}' | b']' if !in_string => {
                if let Some(open) = stack.pop() {
                    let mut start = open;
                    // The field name before the bracket (and a `:`).
                    let mut k = start;
                    while k > 0 && (b[k - 1] == b' ' || b[k - 1] == b':') {
                        k -= 1;
                    }
                    while k > 0 && (b[k - 1].is_ascii_alphanumeric() || b[k - 1] == b'_') {
                        k -= 1;
                    }
                    if k < start && (k == 0 || !b[k - 1].is_ascii_alphanumeric()) {
                        start = k;
                    }
                    let mut end = i + 1;
                    // An array element's comma.
                    let mut e = end;
                    while e < b.len() && b[e] == b' ' {
                        e += 1;
                    }
                    if e < b.len() && b[e] == b',' {
                        end = e + 1;
                    }
                    out.push((start, end));
                }
            }
            _ => {}
        }
        i += 1;
    }
    out.sort_by_key(|(s, e)| std::cmp::Reverse(e - s));
    out.truncate(2000);
    out
}

/// Candidate reductions of a text for the minimizer: bracketed fields removed, line ranges
/// removed, then (for short texts) single tokens.
pub fn reductions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (s, e) in blocks(text) {
        if text.is_char_boundary(s) && text.is_char_boundary(e) {
            let mut t = text.to_string();
            t.replace_range(s..e, "");
            out.push(t);
        }
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut chunk = lines.len().div_ceil(2).max(1);
    while chunk >= 1 {
        let mut i = 0;
        while i < lines.len() {
            let end = (i + chunk).min(lines.len());
            let mut v = lines[..i].to_vec();
            v.extend_from_slice(&lines[end..]);
            out.push(v.join("\n"));
            i += chunk;
        }
        if chunk == 1 {
            break;
        }
        chunk /= 2;
    }
    if lines.len() <= 4 {
        for (s, e, _) in tokens(text) {
            let mut t = text.to_string();
            t.replace_range(s..e, "");
            out.push(t);
        }
    }
    out
}
