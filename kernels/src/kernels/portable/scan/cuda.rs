//! CUDA's spellings in portable source (`docs/kernels.md`, "bringing CUDA kernels"): the CUDA
//! headers that resolve to the prelude ([`without_covered_includes`]), the cooperative groups
//! that cannot be mapped ([`group_findings`]), source that does not parse
//! ([`structure_findings`]), and the warp-width hazards `compile --check` warns about
//! ([`warp_width_warnings`], [`shuffling_functions`]).

use super::finding::Finding;
use super::lex::{Kind, Token, lex};

/// The headers whose names `cuda.cuh` and the prelude define: `#include` of one of them is
/// dropped (the line is kept empty, so lines do not move).
pub(super) const COVERED_HEADERS: &[&str] = &[
    "cuda_runtime.h",
    "cuda_runtime_api.h",
    "cuda.h",
    "device_launch_parameters.h",
    "vector_types.h",
    "cuda_fp16.h",
    "cuda_bf16.h",
    "cooperative_groups.h",
    "cooperative_groups/reduce.h",
    "math.h",
    "cmath",
    "float.h",
    "cfloat",
    "limits.h",
    "climits",
];

/// The header a preprocessor line includes (`<name>` or `"name"`), if it is an include.
pub(super) fn included(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix("include")?.trim_start();
    let (open, close) = match rest.chars().next()? {
        '<' => ('<', '>'),
        '"' => ('"', '"'),
        _ => return None,
    };
    rest.strip_prefix(open)?.split_once(close).map(|(n, _)| n)
}

/// Whether `#include` of `name` resolves to the prelude.
pub(super) fn is_covered(name: &str) -> bool {
    COVERED_HEADERS.contains(&name)
}

/// `code` with every `#include` of a covered CUDA header ([`COVERED_HEADERS`]) replaced by an
/// empty line.
pub fn without_covered_includes(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    for line in code.split_inclusive('\n') {
        if included(line).is_some_and(is_covered) {
            if line.ends_with('\n') {
                out.push('\n');
            }
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Why a cooperative-groups name cannot be mapped, and what to write instead; `qualified` when
/// it is written after `::` (names that user code may well use for its own are refused only
/// then).
fn group_hint(id: &str, qualified: bool) -> Option<&'static str> {
    Some(match id {
        "this_grid" | "grid_group" | "this_multi_grid" | "multi_grid_group" => {
            "grid-wide groups need a cooperative launch, which the portable subset has not: end the kernel and launch another"
        }
        "this_cluster" | "cluster_group" => {
            "thread-block clusters are NVIDIA-only: use one block, or several kernels"
        }
        "coalesced_threads" | "coalesced_group" | "labeled_partition" | "binary_partition" => {
            "groups of the lanes that happen to be active differ between targets: keep the warp converged and use thread_block_tile<N>"
        }
        "thread_group" => {
            "the dynamically sized thread_group is not covered: use thread_block or thread_block_tile<N>"
        }
        "memcpy_async" | "wait_prior" => {
            "asynchronous copies are not covered: copy through registers and block.sync()"
        }
        "inclusive_scan" | "exclusive_scan" if qualified => {
            "cooperative-group scans are not covered: write the scan with tile.shfl_up"
        }
        "invoke_one" | "invoke_one_broadcast" | "reduce_store_async" | "reduce_update_async"
            if qualified =>
        {
            "not covered: use thread_rank() == 0 and tile.shfl"
        }
        "bit_and" | "bit_or" | "bit_xor" if qualified => {
            "only cg::plus, cg::greater and cg::less are covered: write the operator as a functor"
        }
        _ => return None,
    })
}

/// The cooperative-groups names of `toks` that cannot be mapped, each a [`Finding`].
pub(super) fn group_findings(toks: &[Token<'_>], line_offset: usize) -> Vec<Finding> {
    let mut out = vec![];
    for (i, t) in toks.iter().enumerate() {
        if t.kind != Kind::Ident {
            continue;
        }
        let qualified = i >= 2 && toks[i - 1].text == ":" && toks[i - 2].text == ":";
        if let Some(hint) = group_hint(t.text, qualified) {
            out.push(Finding {
                line: line_offset + t.line - 1,
                construct: t.text.to_string(),
                hint,
            });
        }
    }
    out
}

/// Calls of CUDA's masked warp operations whose mask is a literal that does not name the whole
/// warp (`0xffff`, `1u`, ...): partial masks are not supported, every lane must take part.
/// Full masks are `0xffffffff`, `0xffffffffffffffff` (any suffix), `~0`, `~0u`, `~0ull`, `-1`.
pub(super) fn mask_findings(toks: &[Token<'_>]) -> Vec<Finding> {
    let mut out = vec![];
    for (i, t) in toks.iter().enumerate() {
        let masked = matches!(
            t.text,
            "__shfl_sync"
                | "__shfl_up_sync"
                | "__shfl_down_sync"
                | "__shfl_xor_sync"
                | "__ballot_sync"
                | "__any_sync"
                | "__all_sync"
                | "__syncwarp"
        );
        if t.kind != Kind::Ident || !masked || toks.get(i + 1).is_none_or(|p| p.text != "(") {
            continue;
        }
        // The first argument, when it is a literal alone: `N`, `~N` or `-N`.
        let rest = toks.get(i + 2..).unwrap_or(&[]);
        let (sign, lit, end) = match rest {
            [n, e, ..] if n.kind == Kind::Number => ("", n.text, e.text),
            [s, n, e, ..] if matches!(s.text, "~" | "-") && n.kind == Kind::Number => {
                (s.text, n.text, e.text)
            }
            _ => continue,
        };
        if !matches!(end, "," | ")") {
            continue;
        }
        let digits = lit
            .trim_end_matches(['u', 'U', 'l', 'L'])
            .to_ascii_lowercase();
        let full = match sign {
            "~" | "-" => matches!(digits.as_str(), "0" | "1") && (sign == "~") == (digits == "0"),
            _ => matches!(digits.as_str(), "0xffffffff" | "0xffffffffffffffff"),
        };
        if !full {
            out.push(Finding {
                line: t.line,
                construct: format!("{}({sign}{lit}, ...)", t.text),
                hint: "a partial mask is not supported: every lane of the warp must take part (use 0xffffffff, and keep the lanes converged)",
            });
        }
    }
    out
}

/// Source that no compiler can parse: an unterminated comment or string, a `}` that closes
/// nothing, a `{` (or `(`) never closed. Each a [`Finding`] at its line.
pub fn structure_findings(code: &str) -> Vec<Finding> {
    let mut out = vec![];
    let mut open: Vec<(&str, usize)> = vec![];
    let bad = |line: usize, construct: &str, hint: &'static str| Finding {
        line,
        construct: construct.to_string(),
        hint,
    };
    for t in lex(code) {
        match (t.kind, t.text) {
            (Kind::Punct, "/*") => out.push(bad(
                t.line,
                "/*",
                "the module does not parse: this comment is never closed",
            )),
            (Kind::Str, s) if s.len() < 2 || !s.ends_with(&s[..1]) => out.push(bad(
                t.line,
                &s[..s.len().min(1)],
                "the module does not parse: this literal is never closed",
            )),
            (Kind::Punct, "{" | "(") => open.push((t.text, t.line)),
            (Kind::Punct, "}" | ")") => {
                let want = if t.text == "}" { "{" } else { "(" };
                match open.pop() {
                    Some((o, _)) if o == want => {}
                    Some((o, line)) => {
                        out.push(bad(
                            t.line,
                            t.text,
                            if t.text == "}" {
                                "the module does not parse: this `}` closes a `(` (a `)` is missing)"
                            } else {
                                "the module does not parse: this `)` closes a `{` (a `}` is missing)"
                            },
                        ));
                        let _ = (o, line);
                        return out;
                    }
                    None => {
                        out.push(bad(
                            t.line,
                            t.text,
                            "the module does not parse: this closes nothing (unbalanced braces or parentheses)",
                        ));
                        return out;
                    }
                }
            }
            _ => {}
        }
    }
    if let Some((o, line)) = open.first() {
        out.push(bad(
            *line,
            o,
            "the module does not parse: this is never closed (unbalanced braces or parentheses)",
        ));
    }
    out
}

/// A warp-width hazard `compile --check` warns about (the program may still be right).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarpWarning {
    /// 1-based line in the user's source.
    pub line: usize,
    /// What is wrong, and what to write instead.
    pub message: String,
}

impl std::fmt::Display for WarpWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A warp shuffle or vote of CUDA or of the subset (not a tile's: a tile has its own width).
fn is_shuffle(id: &str) -> bool {
    matches!(
        id,
        "__shfl_sync"
            | "__shfl_up_sync"
            | "__shfl_down_sync"
            | "__shfl_xor_sync"
            | "__ballot_sync"
            | "__any_sync"
            | "__all_sync"
            | "xt_shfl"
            | "xt_shfl_up"
            | "xt_shfl_down"
            | "xt_shfl_xor"
            | "xt_ballot"
    )
}

/// The functions of `toks` (name, first and last token of the body), at any depth of
/// namespaces: an identifier, its parenthesised parameters, then `{`.
fn functions<'a>(toks: &[Token<'a>]) -> Vec<(&'a str, usize, usize)> {
    let mut out = vec![];
    let mut i = 0;
    while i < toks.len() {
        if toks[i].kind == Kind::Ident && toks.get(i + 1).is_some_and(|t| t.text == "(") {
            // The parameters.
            let mut depth = 0usize;
            let mut j = i + 1;
            while j < toks.len() {
                match toks[j].text {
                    "(" => depth += 1,
                    ")" => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            // Qualifiers up to the body (`const`, attributes), or not a definition.
            let mut k = j + 1;
            while k < toks.len() && !matches!(toks[k].text, "{" | ";" | "=" | "," | ")" | "(") {
                k += 1;
            }
            if toks.get(k).is_some_and(|t| t.text == "{") && !is_keyword(toks[i].text) {
                let mut depth = 0usize;
                let mut e = k;
                while e < toks.len() {
                    match toks[e].text {
                        "{" => depth += 1,
                        "}" => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    e += 1;
                }
                out.push((toks[i].text, k, e.min(toks.len())));
                i = e;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn is_keyword(id: &str) -> bool {
    matches!(
        id,
        "if" | "for" | "while" | "switch" | "return" | "sizeof" | "__launch_bounds__" | "catch"
    )
}

/// The functions of `toks` that shuffle, directly or through functions that do.
fn shufflers<'a>(toks: &[Token<'a>]) -> Vec<(&'a str, usize, usize)> {
    let fns = functions(toks);
    let mut names: Vec<&str> = vec![];
    loop {
        let before = names.len();
        for &(name, a, b) in &fns {
            if names.contains(&name) {
                continue;
            }
            let body = toks.get(a..b).unwrap_or(&[]);
            if body
                .iter()
                .any(|t| t.kind == Kind::Ident && (is_shuffle(t.text) || names.contains(&t.text)))
            {
                names.push(name);
            }
        }
        if names.len() == before {
            break;
        }
    }
    fns.into_iter().filter(|f| names.contains(&f.0)).collect()
}

/// The functions of `code` that shuffle or vote across the warp, directly or through
/// functions that do.
pub(super) fn shuffling_functions(code: &str) -> Vec<String> {
    shufflers(&lex(code))
        .into_iter()
        .map(|(n, ..)| n.to_string())
        .collect()
}

/// Literal lane counts, offsets and masks in functions that shuffle: `32` or `16` as a lane
/// count or butterfly offset, `31` as a lane mask, `0xffffffff` as a shuffle mask. Each is
/// right on 32-lane warps only; `warpSize` (or a tile of a fixed width) is right on every
/// target.
pub fn warp_width_warnings(code: &str) -> Vec<WarpWarning> {
    let toks = lex(code);
    let mut out = vec![];
    for (name, a, b) in shufflers(&toks) {
        let body = toks.get(a..b).unwrap_or(&[]);
        for (i, t) in body.iter().enumerate() {
            if t.kind != Kind::Number {
                continue;
            }
            let prev = i
                .checked_sub(1)
                .and_then(|j| body.get(j))
                .map_or("", |p| p.text);
            let lit = t
                .text
                .trim_end_matches(['u', 'U', 'l', 'L'])
                .to_ascii_lowercase();
            let message = match lit.as_str() {
                "0xffffffff" => format!(
                    "`{}` in `{name}` is a 32-lane mask: a warp has 64 lanes on AMD CDNA (gfx90a); xthunk reads it as the full warp, but code that pairs it with 32-lane arithmetic is wrong there (use warpSize, or a cg::thread_block_tile<32>)",
                    t.text
                ),
                "32" | "16" if matches!(prev, "=" | "%" | "/" | "<" | "," | "(" | ">") => format!(
                    "`{}` in `{name}`, which shuffles, looks like a lane count or offset for 32-lane warps: a warp has 64 lanes on AMD CDNA (gfx90a) (use warpSize, warpSize / 2, or a cg::thread_block_tile<32>)",
                    t.text
                ),
                "31" if prev == "&" => format!(
                    "`& {}` in `{name}` takes a lane of a 32-lane warp: a warp has 64 lanes on AMD CDNA (gfx90a) (use % warpSize)",
                    t.text
                ),
                _ => continue,
            };
            out.push(WarpWarning {
                line: t.line,
                message,
            });
        }
    }
    out.sort_by_key(|w| w.line);
    out
}
