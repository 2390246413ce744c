//! Reading portable source for the CPU: the kernels it defines (the names the entry table
//! takes `&name` of) and the rewrite of `extern __shared__` declarations (dynamic shared
//! memory) into pointers to the running block's buffer. A small scanner that skips comments,
//! string and character literals (raw strings included) and preprocessor lines, and tracks
//! braces: no parser, so only what the portable subset writes is recognized.

/// What the scanner found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Kernels (`__global__` functions that are not templates), qualified by their namespaces,
    /// in source order, each once.
    pub kernels: Vec<String>,
    /// The source with every `extern __shared__ T name[];` rewritten.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(usize, usize),
    Punct(usize, u8),
    /// A string literal (its range).
    Str(usize, usize),
}

fn tokens(s: &[u8]) -> Vec<Tok> {
    let mut out = vec![];
    let mut i = 0;
    let mut line_start = true;
    while i < s.len() {
        let c = s[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if line_start && c == b'#' {
            // A preprocessor line, with its continuations.
            while i < s.len() && s[i] != b'\n' {
                if s[i] == b'\\' && s.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
            }
            continue;
        }
        line_start = false;
        if c == b'/' && s.get(i + 1) == Some(&b'/') {
            while i < s.len() && s[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && s.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < s.len() && !(s[i] == b'*' && s.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i = (i + 2).min(s.len());
            continue;
        }
        if c == b'R' && s.get(i + 1) == Some(&b'"') {
            // Raw string: R"delim( ... )delim"
            let start = i;
            let mut j = i + 2;
            while j < s.len() && s[j] != b'(' && j - i < 20 {
                j += 1;
            }
            let delim = &s[i + 2..j.min(s.len())];
            let mut close = Vec::with_capacity(delim.len() + 2);
            close.push(b')');
            close.extend_from_slice(delim);
            close.push(b'"');
            let body = j + 1;
            let end = s
                .get(body..)
                .and_then(|rest| {
                    rest.windows(close.len())
                        .position(|w| w == close.as_slice())
                })
                .map_or(s.len(), |p| body + p + close.len());
            out.push(Tok::Str(start, end));
            i = end;
            continue;
        }
        if c == b'"' || c == b'\'' {
            let start = i;
            i += 1;
            while i < s.len() && s[i] != c && s[i] != b'\n' {
                if s[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(s.len());
            out.push(Tok::Str(start, i));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(start, i));
            continue;
        }
        if c.is_ascii_digit() {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'.' || s[i] == b'_') {
                i += 1;
            }
            continue;
        }
        out.push(Tok::Punct(i, c));
        i += 1;
    }
    out
}

/// What an open brace belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scope {
    Namespace(String),
    ExternC,
    Other,
}

/// What `__global__` becomes when the unit is only preprocessed to find its kernels.
pub const KERNEL_MARKER: &str = "xt_cpu_kernel_marker";

const ATTRIBUTE_CALLS: [&str; 5] = [
    "__launch_bounds__",
    "__attribute__",
    "alignas",
    "__align__",
    "__declspec",
];

/// Scans `code` (see the module documentation).
pub fn scan(code: &str) -> Scanned {
    let s = code.as_bytes();
    let toks = tokens(s);
    let ident = |t: &Tok| match t {
        Tok::Ident(a, b) => Some(&code[*a..*b]),
        _ => None,
    };
    let punct = |t: &Tok| match t {
        Tok::Punct(_, c) => Some(*c),
        _ => None,
    };
    let mut scopes: Vec<Scope> = vec![];
    let mut kernels: Vec<String> = vec![];
    let mut edits: Vec<(usize, usize, String)> = vec![];
    // Whether `template` appeared since the last statement boundary.
    let mut templated = false;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        match (ident(t), punct(t)) {
            (Some("template"), _) => templated = true,
            (_, Some(b';')) => templated = false,
            (_, Some(b'}')) => {
                scopes.pop();
                templated = false;
            }
            (_, Some(b'{')) => {
                let scope = match (
                    i.checked_sub(2).map(|j| &toks[j]),
                    toks.get(i.wrapping_sub(1)),
                ) {
                    (Some(a), Some(b)) if ident(a) == Some("namespace") => {
                        Scope::Namespace(ident(b).unwrap_or("").to_string())
                    }
                    (_, Some(b)) if ident(b) == Some("namespace") => {
                        Scope::Namespace(String::new())
                    }
                    (Some(a), Some(Tok::Str(..))) if ident(a) == Some("extern") => Scope::ExternC,
                    _ => Scope::Other,
                };
                scopes.push(scope);
                templated = false;
            }
            (Some("__global__" | KERNEL_MARKER), _) => {
                let at_namespace = scopes.iter().all(|s| !matches!(s, Scope::Other));
                if let Some(name) = kernel_name(code, &toks[i + 1..])
                    && at_namespace
                    && !templated
                {
                    let mut q: Vec<&str> = scopes
                        .iter()
                        .filter_map(|s| match s {
                            Scope::Namespace(n) => Some(n.as_str()),
                            _ => None,
                        })
                        .collect();
                    // Anonymous namespaces are reachable from the table unqualified.
                    q.retain(|n| !n.is_empty());
                    q.push(name);
                    let full = q.join("::");
                    if !kernels.contains(&full) {
                        kernels.push(full);
                    }
                }
            }
            (Some("extern"), _) if toks.get(i + 1).and_then(ident) == Some("__shared__") => {
                if let Some((end, repl)) = dynamic_shared(code, &toks, i, scopes.is_empty()) {
                    let start = match t {
                        Tok::Ident(a, _) => *a,
                        _ => 0,
                    };
                    edits.push((start, end, repl));
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut text = code.to_string();
    for (a, b, r) in edits.into_iter().rev() {
        text.replace_range(a..b, &r);
    }
    Scanned { kernels, text }
}

/// The name of the function declared by the tokens after `__global__`.
fn kernel_name<'a>(code: &'a str, toks: &[Tok]) -> Option<&'a str> {
    let mut last: Option<&str> = None;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Ident(a, b) => last = Some(&code[*a..*b]),
            Tok::Punct(_, b'(') => {
                if last.is_some_and(|l| ATTRIBUTE_CALLS.contains(&l)) {
                    // Skip the balanced group.
                    let mut depth = 0usize;
                    while i < toks.len() {
                        match toks[i] {
                            Tok::Punct(_, b'(') => depth += 1,
                            Tok::Punct(_, b')') => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    last = None;
                } else {
                    return last;
                }
            }
            Tok::Punct(_, b';' | b'{' | b'}') => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// `extern __shared__ T name[];` starting at token `i`: the byte where it ends (after the `;`)
/// and its replacement.
fn dynamic_shared(code: &str, toks: &[Tok], i: usize, file_scope: bool) -> Option<(usize, String)> {
    let mut j = i + 2;
    let mut ty: Vec<&str> = vec![];
    let mut name: Option<&str> = None;
    while j < toks.len() {
        match &toks[j] {
            Tok::Ident(a, b) => {
                let w = &code[*a..*b];
                if ATTRIBUTE_CALLS.contains(&w) {
                    // __align__(16) and the like: the buffer is 64-byte aligned anyway.
                    let mut depth = 0usize;
                    j += 1;
                    while j < toks.len() {
                        match toks[j] {
                            Tok::Punct(_, b'(') => depth += 1,
                            Tok::Punct(_, b')') => {
                                depth = depth.saturating_sub(1);
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        j += 1;
                    }
                } else {
                    if let Some(n) = name.take() {
                        ty.push(n);
                    }
                    name = Some(w);
                }
            }
            Tok::Punct(_, b'*') => {
                if let Some(n) = name.take() {
                    ty.push(n);
                }
                ty.push("*");
            }
            Tok::Punct(_, b'[') => break,
            _ => return None,
        }
        j += 1;
    }
    let name = name?;
    // `[` `]` `;`
    if !matches!(toks.get(j + 1), Some(Tok::Punct(_, b']'))) {
        return None;
    }
    let Some(Tok::Punct(end, b';')) = toks.get(j + 2) else {
        return None;
    };
    let ty = ty.join(" ");
    if ty.is_empty() {
        return None;
    }
    let repl = if file_scope {
        format!(
            "\n#undef {name}\n#define {name} (reinterpret_cast<{ty}*>(xt_cpu_dynamic_shared()))\n"
        )
    } else {
        format!("{ty}* const {name} = reinterpret_cast<{ty}*>(xt_cpu_dynamic_shared());")
    };
    Some((end + 1, repl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kernels_and_skips_templates_comments_and_strings() {
        let code = r#"
// __global__ void commented(int* x) {}
/* __global__ void block_commented() {} */
#define NOT_A_KERNEL __global__ void macro_k() {}
const char* s = "__global__ void in_string() {}";
extern "C" __global__ void __launch_bounds__(256) plain(float* y, long long n) {}
__global__ void mangled(float* y) { int a = 0; }
template <typename T> __global__ void templ(T* y) {}
namespace ns { __global__ void inner(int* y) {} }
extern "C" { __global__ void in_block(int* y) {} }
__global__ void mangled(float* y);
"#;
        let s = scan(code);
        assert_eq!(s.kernels, ["plain", "mangled", "ns::inner", "in_block"]);
    }

    #[test]
    fn rewrites_dynamic_shared_memory() {
        let code = "extern __shared__ float gs[];\n__global__ void k(float* y) {\n  extern __shared__ __align__(16) unsigned char sm[];\n  y[0] = gs[0] + sm[0];\n}\n";
        let s = scan(code);
        assert!(
            s.text
                .contains("#define gs (reinterpret_cast<float*>(xt_cpu_dynamic_shared()))")
        );
        assert!(s.text.contains(
            "unsigned char* const sm = reinterpret_cast<unsigned char*>(xt_cpu_dynamic_shared());"
        ));
        assert!(!s.text.contains("extern __shared__"));
        assert_eq!(s.kernels, ["k"]);
    }
}
