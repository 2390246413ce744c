//! A small lexer over portable user source (CUDA-C subset v2, see `docs/kernels.md`), and what
//! is built on it: the refusal of vendor-only constructs ([`vendor_constructs`]), the kernels a
//! source defines ([`kernel_names`]), and C linkage applied to kernels by default
//! ([`with_c_linkage`]).
//!
//! The lexer knows comments, string and character literals, preprocessor lines (with `\`
//! continuations), identifiers, numbers and punctuation; it never fails (unknown bytes are
//! punctuation). It is linear in the source and allocates one token per lexeme.

use crate::ir::HeaderSource;

/// One lexeme of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    /// Byte offset in the source.
    at: usize,
    /// 1-based line.
    line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Number,
    Str,
    Punct,
    /// A whole preprocessor directive (continuations included).
    Directive,
}

fn lex(src: &str) -> Vec<Token<'_>> {
    let b = src.as_bytes();
    let mut out = vec![];
    let (mut i, mut line) = (0usize, 1usize);
    // Only whitespace since the start of the line: a `#` here starts a directive.
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            line_start = true;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let start_line = line;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            i = (i + 2).min(b.len());
            continue;
        }
        let was_line_start = line_start;
        line_start = false;
        let kind = if c == b'#' && was_line_start {
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'\n') {
                    line += 1;
                    i += 1;
                }
                i += 1;
            }
            Kind::Directive
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            Kind::Str
        } else if c == b'_' || c.is_ascii_alphabetic() {
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i] == b'_' || b[i] == b'.' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            Kind::Number
        } else {
            // One character (a multi-byte UTF-8 character as a whole).
            i += src[i..].chars().next().map_or(1, char::len_utf8);
            Kind::Punct
        };
        let end = i.min(b.len());
        out.push(Token {
            kind,
            text: src.get(start..end).unwrap_or(""),
            at: start,
            line: start_line,
        });
    }
    out
}

/// A vendor-only construct found in portable source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// 1-based line in the user's source.
    pub line: usize,
    /// The construct as written (the identifier, or the directive's first word).
    pub construct: String,
    /// What to use instead.
    pub hint: &'static str,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}: `{}` is not in the portable subset ({})",
            self.line, self.construct, self.hint
        )
    }
}

/// What an identifier that only one vendor (or one compiler) has should be replaced with, or
/// `None` for an identifier of the subset.
fn vendor_hint(id: &str) -> Option<&'static str> {
    let upper_after = |p: &str| {
        id.strip_prefix(p)
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    };
    Some(if id.starts_with("__shfl") {
        "use xt_shfl, xt_shfl_up, xt_shfl_down or xt_shfl_xor"
    } else if id.starts_with("__ballot") || id == "__activemask" {
        "use xt_ballot"
    } else if matches!(id, "__any" | "__any_sync") {
        "use xt_any"
    } else if matches!(id, "__all" | "__all_sync") {
        "use xt_all"
    } else if id == "__syncwarp"
        || id == "__uni_sync"
        || id.starts_with("__match_")
        || id.starts_with("__reduce_")
    {
        "use the xt_warp_* operations with converged lanes"
    } else if id.strip_prefix("atomic").is_some_and(|r| {
        let op = r.split('_').next().unwrap_or("");
        matches!(
            op,
            "Add" | "Sub" | "Exch" | "Min" | "Max" | "Inc" | "Dec" | "CAS" | "And" | "Or" | "Xor"
        ) && matches!(r.strip_prefix(op), Some("" | "_block" | "_system"))
    }) {
        "use xt_atomic_add, xt_atomic_min, xt_atomic_max, xt_atomic_cas or xt_atomic_exch"
    } else if id.starts_with("__half")
        || id.starts_with("__nv_")
        || id.starts_with("__float2half")
        || id.starts_with("__float2bfloat16")
        || id.starts_with("__bfloat16")
        || id == "hip_bfloat16"
        || id == "_Float16"
    {
        "use xt_f16 / xt_bf16"
    } else if upper_after("cuda") || upper_after("hip") || upper_after("cu") {
        "vendor API calls are not available in kernels"
    } else if matches!(id, "asm" | "__asm__" | "__asm") {
        "inline assembly is vendor-specific"
    } else if id == "warpSize" {
        "use xt_warp_size()"
    } else if id.starts_with("__popc") || id.starts_with("__clz") {
        "use xt_popc, xt_popcll, xt_clz or xt_clzll"
    } else if matches!(
        id,
        "__float_as_uint"
            | "__uint_as_float"
            | "__float_as_int"
            | "__int_as_float"
            | "__double_as_longlong"
            | "__longlong_as_double"
    ) {
        "use xt_f32_bits, xt_bits_f32, xt_f64_bits or xt_bits_f64"
    } else if matches!(id, "min" | "max" | "umin" | "umax" | "llmin" | "llmax") {
        "use xt_min / xt_max (every numeric type), or fminf / fmaxf"
    } else if matches!(
        id,
        "__ldg" | "__ldcg" | "__ldca" | "__ldcs" | "__stcg" | "__stcs"
    ) {
        "read and write through the pointer (`const T* __restrict__` lets the compiler use the read-only path)"
    } else if matches!(
        id,
        "printf" | "clock" | "clock64" | "__trap" | "assert" | "__brkpt"
    ) {
        "no printing, clocks or traps in portable kernels: write to an output buffer"
    } else if is_rounded_intrinsic(id) {
        "explicitly rounded arithmetic is vendor-specific: write the operation (contraction is off everywhere)"
    } else if is_vector_type(id) {
        "vector types differ between the vendors' headers and the CPU: use arrays or separate values"
    } else if matches!(
        id,
        "erfinvf"
            | "erfinv"
            | "erfcinvf"
            | "erfcinv"
            | "normcdff"
            | "normcdf"
            | "normcdfinvf"
            | "normcdfinv"
            | "rcbrtf"
            | "rcbrt"
            | "sincospif"
            | "sincospi"
    ) {
        "not a C math function: the portable subset has the C library's float and double math"
    } else if id.starts_with("__builtin_") || id.starts_with("__nvvm") {
        "compiler builtins differ between NVRTC, hipRTC and the CPU compiler (bit counts: xt_popc, xt_clz)"
    } else if matches!(
        id,
        "__CUDA_ARCH__" | "__HIP_DEVICE_COMPILE__" | "__HIP_PLATFORM_AMD__" | "__CUDACC__"
    ) {
        "branch on XT_CUDA / XT_HIP / XT_CPU if you must"
    } else {
        return None;
    })
}

/// `__fadd_rn`, `__dmul_rz`, `__fmaf_rd`, ...: arithmetic with an explicit rounding mode.
fn is_rounded_intrinsic(id: &str) -> bool {
    let Some(r) = id.strip_prefix("__") else {
        return false;
    };
    let Some((op, mode)) = r.rsplit_once('_') else {
        return false;
    };
    matches!(mode, "rn" | "rz" | "ru" | "rd")
        && (op.starts_with('f') || op.starts_with('d'))
        && op.len() > 1
        && op[1..].chars().all(|c| c.is_ascii_lowercase())
}

/// `float2`, `int4`, `make_uint3`, `double2`, ...: CUDA/HIP vector types.
fn is_vector_type(id: &str) -> bool {
    let base = id.strip_prefix("make_").unwrap_or(id);
    let Some(n) = base.chars().last() else {
        return false;
    };
    let stem = &base[..base.len() - 1];
    matches!(n, '1'..='4')
        && matches!(
            stem,
            "float"
                | "double"
                | "int"
                | "uint"
                | "short"
                | "ushort"
                | "char"
                | "uchar"
                | "long"
                | "ulong"
                | "longlong"
                | "ulonglong"
                | "half"
                | "bfloat16"
        )
}

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
    let mut out = vec![];
    for t in lex(code) {
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
                if body.starts_with("include") && !carried {
                    out.push(Finding {
                        line: t.line,
                        construct: "#include".into(),
                        hint: "the prelude is included already; carry other headers in the module",
                    });
                }
                // A directive's own identifiers (`#define SHFL __shfl_sync`), each on its line.
                let offset = t.line;
                for inner in lex(body) {
                    if inner.kind == Kind::Ident {
                        if let Some(hint) = vendor_hint(inner.text) {
                            out.push(Finding {
                                line: offset + inner.line - 1,
                                construct: inner.text.to_string(),
                                hint,
                            });
                        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_constructs_are_found_with_their_lines() {
        let src = "// __shfl_sync in a comment is fine\n\
                   const char* s = \"atomicAdd\";\n\
                   __global__ void k(float* x) {\n\
                   \x20 float v = __shfl_down_sync(0xffffffff, x[0], 1);\n\
                   \x20 atomicAdd(x, v); int w = warpSize;\n\
                   \x20 asm(\"trap;\");\n\
                   }\n\
                   #include <cuda_fp16.h>\n\
                   #define MY_BALLOT(p) \\\n  __ballot_sync(~0u, p)\n\
                   __half h; cudaMalloc(0, 0); hipLaunchKernelGGL(k);\n\
                   int c = __builtin_popcountll(7ull) + __popc(3u);\n";
        let f = vendor_constructs(src);
        let got: Vec<(usize, &str)> = f.iter().map(|f| (f.line, f.construct.as_str())).collect();
        assert_eq!(
            got,
            [
                (4, "__shfl_down_sync"),
                (5, "atomicAdd"),
                (5, "warpSize"),
                (6, "asm"),
                (8, "#include"),
                (10, "__ballot_sync"),
                (11, "__half"),
                (11, "cudaMalloc"),
                (11, "hipLaunchKernelGGL"),
                (12, "__builtin_popcountll"),
                (12, "__popc"),
            ]
        );
        assert!(f[0].to_string().starts_with("line 4: `__shfl_down_sync`"));
        let ok = "__global__ void k(float* atomic_count, int hipster, int cuda_like) {\n\
                  float v = xt_shfl_down(atomic_count[0], 1u); xt_atomic_add(atomic_count, v); }";
        assert_eq!(vendor_constructs(ok), []);
    }

    #[test]
    fn kernels_not_launchable_by_name_everywhere_are_found() {
        let code = "template <typename T> __global__ void t(T* x) {}\n\
                    static __global__ void s(float* x) {}\n\
                    extern \"C++\" __global__ void cxx(float* x) {}\n\
                    extern \"C\" __global__ void fine(float* x) {}\n\
                    __global__ void decl(float* x);\n\
                    __global__ void decl(float* x) {}\n\
                    __global__ void two(float* x) {}\n\
                    __global__ void two(int* x) {}\n";
        let got: Vec<(usize, String)> = vendor_constructs(code)
            .into_iter()
            .map(|f| (f.line, f.construct))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "kernel `t`".to_string()),
                (2, "kernel `s`".to_string()),
                (3, "kernel `cxx`".to_string()),
                (8, "a second definition of kernel `two`".to_string()),
            ]
        );
    }

    #[test]
    fn cuda_only_helpers_are_refused_and_user_names_are_not() {
        let code = "__global__ void k(float* x, unsigned* u) {\n\
                    u[0] = __float_as_uint(x[0]); x[1] = max(x[1], 0.0f); x[2] = __ldg(x);\n\
                    x[3] = __fmul_rn(x[0], x[1]); float2 v = make_float2(1, 2); x[4] = erfinvf(v.x);\n\
                    printf(\"%f\", x[0]);\n\
                    int atomicAddCount = 0, maxv = 1, atomics = 2; x[5] = __fadd(x[0]);\n\
                    atomicAdd_block(u, 1u); }\n";
        let got: Vec<(usize, String)> = vendor_constructs(code)
            .into_iter()
            .map(|f| (f.line, f.construct))
            .collect();
        let names: Vec<&str> = got.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(
            names,
            [
                "__float_as_uint",
                "max",
                "__ldg",
                "__fmul_rn",
                "float2",
                "make_float2",
                "erfinvf",
                "printf",
                "atomicAdd_block"
            ],
            "{got:?}"
        );
    }

    #[test]
    fn pragma_once_headers_are_inlined_once() {
        let h = |name: &str, code: &str| HeaderSource {
            name: name.into(),
            code: code.into(),
        };
        let headers = [
            h("a.h", "#pragma once\nint a;\n"),
            h("b.h", "#include \"a.h\"\nint b;\n"),
        ];
        let out = inline_headers(
            "#include \"a.h\"\n#include \"b.h\"\nint c;\n",
            "m",
            &headers,
        );
        assert_eq!(out.matches("int a;").count(), 1, "{out}");
        assert!(!out.contains("pragma"), "{out}");
        assert!(out.contains("int b;") && out.contains("int c;"), "{out}");
        // Without the pragma, each include inlines the header.
        let headers = [h("a.h", "int a;\n"), h("b.h", "#include \"a.h\"\nint b;\n")];
        let out = inline_headers("#include \"a.h\"\n#include \"b.h\"\n", "m", &headers);
        assert_eq!(out.matches("int a;").count(), 2, "{out}");
    }

    #[test]
    fn kernels_get_c_linkage_on_the_same_line() {
        let src = "__global__ void a(float* x) { x[0] = 1; }\n\
                   extern \"C\" __global__ void b() {}\n\
                   template <typename T> __global__ void c(T* x) {}\n\
                   static __global__ void d() {}\n\
                   namespace ns { __global__ void e() {} }\n\
                   struct S { void f(); };\n\
                   __global__ void __launch_bounds__(256) g(int n) {\n\
                   \x20 if (n) { return; }\n\
                   }\n\
                   __device__ float helper(float x) { return x; }\n\
                   #define K __global__\n\
                   __global__ void h();\n";
        assert_eq!(kernel_names(src), ["a", "b", "c", "d", "e", "g", "h"]);
        let out = with_c_linkage(src);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), src.lines().count());
        assert_eq!(
            lines[0],
            "extern \"C\" __global__ void a(float* x) { x[0] = 1; }"
        );
        assert_eq!(lines[1], "extern \"C\" __global__ void b() {}");
        assert!(lines[2].starts_with("template"));
        assert!(lines[3].starts_with("static"));
        assert_eq!(
            lines[4],
            "namespace ns { extern \"C\" __global__ void e() {} }"
        );
        assert!(lines[6].starts_with("extern \"C\" __global__ void __launch_bounds__(256) g"));
        assert_eq!(lines[10], "#define K __global__");
        assert_eq!(lines[11], "extern \"C\" __global__ void h();");
    }

    #[test]
    fn carried_headers_are_inlined_with_their_lines() {
        let h = |name: &str, code: &str| HeaderSource {
            name: name.into(),
            code: code.into(),
        };
        let headers = [
            h(
                "util.h",
                "#include \"inner.h\"\n__device__ float twice(float x) { return 2.0f * x; }",
            ),
            h("inner.h", "#define INNER 1\n#include \"util.h\""),
        ];
        let code = "#include \"util.h\"\n__global__ void k(float* x) { x[0] = twice(x[0]); }\n#include <cuda.h>\n";
        let out = inline_headers(code, "m", &headers);
        assert_eq!(
            out,
            "#line 1 \"util.h\"\n#line 1 \"inner.h\"\n#define INNER 1\n#include \"util.h\"\n#line 2 \"util.h\"\n\
             __device__ float twice(float x) { return 2.0f * x; }\n#line 2 \"m\"\n\
             __global__ void k(float* x) { x[0] = twice(x[0]); }\n#include <cuda.h>\n"
        );
        // Carried headers may be included; anything else is refused.
        let f = vendor_constructs_in(code, &headers);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].line, f[0].construct.as_str()), (3, "#include"));
        assert_eq!(vendor_constructs(code).len(), 2);
    }

    #[test]
    fn the_lexer_survives_anything() {
        for s in [
            "\"",
            "'",
            "/*",
            "#",
            "\\",
            "é__global__",
            "__global__",
            "{{{}}}}}",
        ] {
            let _ = with_c_linkage(s);
            let _ = vendor_constructs(s);
        }
    }
}
