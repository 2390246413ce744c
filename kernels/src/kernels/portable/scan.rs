//! A small lexer over portable user source (CUDA-C subset v2, see `docs/kernels.md`), and what
//! is built on it: the refusal of vendor-only constructs ([`vendor_constructs`]), the kernels a
//! source defines ([`kernel_names`]), and C linkage applied to kernels by default
//! ([`with_c_linkage`]).
//!
//! The lexer is [`lex`]; the identifiers refused and their replacements are [`hints`]; CUDA's
//! spellings (covered headers, cooperative groups, parse errors, warp-width warnings) are
//! [`cuda`].

use crate::ir::HeaderSource;

mod cuda;
mod finding;
mod hints;
mod lex;
#[cfg(test)]
mod tests;

pub use cuda::{WarpWarning, structure_findings, warp_width_warnings, without_covered_includes};
pub use finding::Finding;
use hints::vendor_hint;
use lex::{Kind, lex};

/// The constructs of `code` (user source, without the prelude) outside the portable subset, in
/// source order: kernels that cannot be launched by name everywhere ([`kernel_findings`]), and
/// vendor-only constructs:
/// warp intrinsics of one vendor, vendor atomics, vendor half types, vendor API calls,
/// inline assembly, `warpSize`, `#include` (the prelude is all a kernel may include; carry
/// headers in the program instead). Identifiers inside preprocessor directives count too.
pub fn vendor_constructs(code: &str) -> Vec<Finding> {
    vendor_constructs_in(code, &[])
}

/// [`vendor_constructs`] for a module carrying `headers`: `#include "name"` of one of them is
/// allowed.
pub fn vendor_constructs_in(code: &str, headers: &[HeaderSource]) -> Vec<Finding> {
    let mut out = structure_findings(code);
    let toks = lex(code);
    out.extend(cuda::group_findings(&toks, 1));
    out.extend(cuda::mask_findings(&toks));
    for t in toks {
        match t.kind {
            Kind::Ident => {
                if let Some(hint) = vendor_hint(t.text) {
                    out.push(Finding {
                        line: t.line,
                        construct: t.text.to_string(),
                        hint,
                    });
                }
            }
            Kind::Directive => {
                let body = t.text.trim_start_matches('#').trim_start();
                let carried =
                    quoted_include(t.text).is_some_and(|n| headers.iter().any(|h| h.name == n));
                let covered = cuda::included(t.text).is_some_and(cuda::is_covered);
                if body.starts_with("include") && !carried && !covered {
                    out.push(Finding {
                        line: t.line,
                        construct: "#include".into(),
                        hint: "only the CUDA headers the prelude covers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h, cooperative_groups.h, cooperative_groups/reduce.h, ...; docs/kernels.md) and headers carried in the module may be included",
                    });
                }
                // A directive's own identifiers (`#define SHFL __shfl_sync`), each on its line.
                let offset = t.line;
                for inner in lex(body) {
                    if inner.kind == Kind::Ident
                        && let Some(hint) = vendor_hint(inner.text)
                    {
                        out.push(Finding {
                            line: offset + inner.line - 1,
                            construct: inner.text.to_string(),
                            hint,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out.extend(kernel_findings(code));
    out.sort_by_key(|f| f.line);
    out
}

/// The header a preprocessor line includes by quoted name (`#include "name"`), if it is one.
fn quoted_include(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest.strip_prefix("include")?.trim_start();
    let rest = rest.strip_prefix('"')?;
    rest.split_once('"').map(|(name, _)| name)
}

/// How deeply carried headers may include each other.
const MAX_INCLUDE_DEPTH: usize = 16;

/// `code` (of the file named `file` in `#line` directives) with every `#include "name"` of a
/// carried header replaced by the header's code, between `#line` directives so messages name
/// the header and the including file's lines. Headers may include headers (to a depth of 16;
/// a header including itself, directly or not, is left as the `#include` line, which the
/// compiler then reports). A header with a `#pragma once` line is inlined at its first include
/// only (the pragma itself becomes an empty line: in one inlined file it would mean nothing).
/// Other lines are kept as they are.
pub fn inline_headers(code: &str, file: &str, headers: &[HeaderSource]) -> String {
    struct Walk<'h> {
        headers: &'h [HeaderSource],
        stack: Vec<String>,
        /// Headers with `#pragma once` inlined already.
        once: Vec<String>,
        out: String,
    }
    fn is_pragma_once(line: &str) -> bool {
        let mut words = line.trim_start().trim_start_matches('#').split_whitespace();
        line.trim_start().starts_with('#')
            && words.next() == Some("pragma")
            && words.next() == Some("once")
    }
    fn go(w: &mut Walk<'_>, code: &str, file: &str) {
        for (i, line) in code.lines().enumerate() {
            if w.stack.len() > 1 && is_pragma_once(line) {
                w.out.push('\n');
                continue;
            }
            let found = quoted_include(line)
                .filter(|n| w.stack.len() < MAX_INCLUDE_DEPTH && !w.stack.iter().any(|s| s == n))
                .and_then(|n| w.headers.iter().find(|h| h.name == n));
            match found {
                Some(h) if w.once.contains(&h.name) => {
                    // Already inlined, and marked `#pragma once`: the include is empty.
                    w.out.push('\n');
                }
                Some(h) => {
                    if h.code.lines().any(is_pragma_once) {
                        w.once.push(h.name.clone());
                    }
                    w.out.push_str(&format!("#line 1 \"{}\"\n", h.name));
                    w.stack.push(h.name.clone());
                    go(w, &h.code, &h.name);
                    w.stack.pop();
                    w.out.push_str(&format!("#line {} \"{file}\"\n", i + 2));
                }
                None => {
                    w.out.push_str(line);
                    w.out.push('\n');
                }
            }
        }
    }
    if headers.is_empty() {
        return code.to_string();
    }
    let mut w = Walk {
        headers,
        stack: vec![file.to_string()],
        once: vec![],
        out: String::with_capacity(code.len()),
    };
    go(&mut w, code, file);
    w.out
}

/// A `__global__` function of the source: its name and where its declaration starts.
#[derive(Debug)]
struct KernelDecl {
    name: String,
    /// Byte offset of the first token of its declaration.
    start: usize,
    /// The declaration has a linkage of its own (`extern ...`), is a template, or is static.
    keeps_linkage: bool,
    /// Why the kernel cannot be launched by its plain name on every target, if it cannot.
    unlaunchable: Option<&'static str>,
    /// It is a definition (a body follows its parameters), not only a declaration.
    defines: bool,
    /// The line of its `__global__`.
    line: usize,
}

fn kernel_decls(code: &str) -> Vec<KernelDecl> {
    let toks = lex(code);
    // Open braces: `true` for a scope a kernel may be declared in (namespace, extern "C").
    let mut braces: Vec<bool> = vec![];
    let mut out = vec![];
    for (i, t) in toks.iter().enumerate() {
        match (t.kind, t.text) {
            (Kind::Punct, "{") => {
                let prev = |k: usize| i.checked_sub(k).and_then(|j| toks.get(j));
                let scope = matches!(prev(1), Some(p) if p.kind == Kind::Str)
                    && matches!(prev(2), Some(p) if p.text == "extern")
                    || matches!(prev(1), Some(p) if p.text == "namespace")
                    || matches!((prev(1), prev(2)), (Some(p), Some(q)) if p.kind == Kind::Ident && q.text == "namespace");
                braces.push(scope);
            }
            (Kind::Punct, "}") => {
                braces.pop();
            }
            (Kind::Ident, "__global__") if braces.iter().all(|s| *s) => {
                // The declaration starts after the previous `;`, `{`, `}` or directive.
                let mut s = i;
                while s > 0 {
                    let p = &toks[s - 1];
                    if p.kind == Kind::Directive
                        || (p.kind == Kind::Punct && matches!(p.text, ";" | "{" | "}"))
                    {
                        break;
                    }
                    s -= 1;
                }
                let head = &toks[s..i];
                let keeps_linkage = head
                    .iter()
                    .any(|h| matches!(h.text, "extern" | "template" | "static"));
                let other_linkage = head.windows(2).any(|w| {
                    w[0].text == "extern" && w[1].kind == Kind::Str && w[1].text != "\"C\""
                });
                let unlaunchable = if head.iter().any(|h| h.text == "template") {
                    Some(
                        "a template kernel has a mangled name that differs between compilers: launch an extern \"C\" kernel that calls it",
                    )
                } else if head.iter().any(|h| h.text == "static") {
                    Some("a static kernel cannot be launched by name")
                } else if other_linkage {
                    Some(
                        "only C linkage (the default) gives a kernel the same name in every image; C++ names are mangled differently by each compiler",
                    )
                } else {
                    None
                };
                // The name: the identifier before the first `(` after `__global__` that is not
                // an attribute's (`__launch_bounds__(256)`).
                let mut name = None;
                let mut j = i + 1;
                while j + 1 < toks.len() {
                    let (a, b) = (&toks[j], &toks[j + 1]);
                    if b.text == "(" && a.kind == Kind::Ident {
                        if a.text.starts_with("__") && a.text.ends_with("__") {
                            // Skip the attribute's parenthesised arguments.
                            let mut depth = 0usize;
                            j += 1;
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
                            j += 1;
                            continue;
                        }
                        name = Some((a.text.to_string(), j + 1));
                        break;
                    }
                    if matches!(a.text, ";" | "{") {
                        break;
                    }
                    j += 1;
                }
                if let Some((name, open)) = name {
                    // After the parameters' closing parenthesis (and any attributes), a `{`
                    // starts a definition, a `;` ends a declaration.
                    let mut depth = 0usize;
                    let mut k = open;
                    while k < toks.len() {
                        match toks[k].text {
                            "(" => depth += 1,
                            ")" => {
                                depth = depth.saturating_sub(1);
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    let defines = toks
                        .get(k + 1..)
                        .unwrap_or(&[])
                        .iter()
                        .find(|t| matches!(t.text, "{" | ";"))
                        .is_some_and(|t| t.text == "{");
                    out.push(KernelDecl {
                        name,
                        start: toks[s].at,
                        keeps_linkage,
                        unlaunchable,
                        defines,
                        line: t.line,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The names of the kernels (`__global__` functions) `code` declares or defines, in source
/// order, each once.
pub fn kernel_names(code: &str) -> Vec<String> {
    let mut names: Vec<String> = vec![];
    for d in kernel_decls(code) {
        if !names.contains(&d.name) {
            names.push(d.name);
        }
    }
    names
}

/// The kernels of `code` that shuffle or vote across the warp (directly or through helper
/// functions), by name: launched with blocks smaller than a 64-lane warp, their warps are
/// partial there.
pub fn shuffling_kernels(code: &str) -> Vec<String> {
    let kernels = kernel_names(code);
    cuda::shuffling_functions(code)
        .into_iter()
        .filter(|n| kernels.contains(n))
        .collect()
}

/// The kernels of `code` that cannot be launched by their plain name on every target:
/// templates, static kernels, kernels with a linkage other than C, and names defined more than
/// once (overloads), each a [`Finding`] at its `__global__` line.
pub fn kernel_findings(code: &str) -> Vec<Finding> {
    let decls = kernel_decls(code);
    let mut out = vec![];
    for (i, d) in decls.iter().enumerate() {
        if let Some(hint) = d.unlaunchable {
            out.push(Finding {
                line: d.line,
                construct: format!("kernel `{}`", d.name),
                hint,
            });
        } else if d.defines && decls[..i].iter().any(|e| e.defines && e.name == d.name) {
            out.push(Finding {
                line: d.line,
                construct: format!("a second definition of kernel `{}`", d.name),
                hint: "overloaded kernels have mangled names that differ between compilers: give each its own name",
            });
        }
    }
    out
}

/// `code` with `extern "C" ` inserted before every kernel declaration that has no linkage,
/// template or storage class of its own, on the same line (line numbers do not move). A
/// kernel is then found by its plain name in every image compiled from the source.
pub fn with_c_linkage(code: &str) -> String {
    let decls = kernel_decls(code);
    let mut out = String::with_capacity(code.len() + 12 * decls.len());
    let mut done = 0usize;
    for d in decls.iter().filter(|d| !d.keeps_linkage) {
        if d.start < done {
            continue;
        }
        out.push_str(code.get(done..d.start).unwrap_or(""));
        out.push_str("extern \"C\" ");
        done = d.start;
    }
    out.push_str(code.get(done..).unwrap_or(""));
    out
}
