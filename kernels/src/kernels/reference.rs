//! The reference of the standard kernels, generated from the catalogue itself: every kernel
//! with its parameters (kind, element type, access, element count) taken from its registered
//! signature, and its semantics from the family table below. `docs/kernels-reference.md` is
//! this text; a test compares the two, so the page cannot drift from the code.

use super::{Extent, KernelLibrary, KernelSignature, ParamKind};
use std::fmt::Write as _;

/// A kernel whose family has no semantics line here (a kernel added without its reference).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kernel `{0}` has no semantics in kernels/src/kernels/reference.rs (its family is unknown)"
)]
pub struct MissingSemantics(pub String);

/// The element-type suffixes of the library's names, longest first where one ends another.
const SUFFIXES: [&str; 8] = ["bf16", "f16", "f32", "f64", "i8", "u8", "i32", "i64"];

/// `name` without its element-type suffix (`add_row_f32` -> `add_row`; conversions keep
/// both types out: `convert_f32_i32` -> `convert`).
fn family(name: &str) -> &str {
    if name.starts_with("convert_") {
        return "convert";
    }
    SUFFIXES
        .iter()
        .find_map(|s| name.strip_suffix(s).and_then(|f| f.strip_suffix('_')))
        .unwrap_or(name)
}

/// The operator an elementwise binary family applies, as an expression of `a` and `b`.
fn binary_expr(op: &str) -> Option<&'static str> {
    Some(match op {
        "add" => "a + b",
        "sub" => "a - b",
        "mul" => "a * b",
        "div" => "a / b (integers: division by 0 gives 0, MIN / -1 wraps to MIN)",
        "max" => "max(a, b) (floats: a NaN operand gives the other operand)",
        "min" => "min(a, b) (floats: a NaN operand gives the other operand)",
        _ => return None,
    })
}

/// What the kernels of family `f` compute.
fn semantics(f: &str) -> Option<String> {
    if let Some(e) = binary_expr(f) {
        return Some(format!("`out[i] = a[i] op b[i]`, op: {e}"));
    }
    if let Some(e) = f.strip_suffix("_row").and_then(binary_expr) {
        return Some(format!(
            "`out[r,c] = a[r,c] op b[c]` (a row broadcast, e.g. a bias), op: {e}"
        ));
    }
    let s = match f {
        "fill" => "`out[i] = value`",
        "iota" => {
            "`out[i] = start + i * step` in the compute type (`(float)i` for floats, wrapping for integers)"
        }
        "convert" => {
            "float -> float and i32 -> float: round to nearest even (one rounding); float -> i32: toward zero, saturating, NaN -> 0"
        }
        "neg" => "`out[i] = -in[i]` (wrapping for integers)",
        "abs" => "`out[i] = |in[i]|` (wrapping for integers: `abs(MIN) = MIN`)",
        "relu" => "`out[i] = in[i] > 0 ? in[i] : 0` (NaN gives 0)",
        "exp" => "`out[i] = exp(in[i])`",
        "log" => "`out[i] = log(in[i])` (natural logarithm)",
        "sqrt" => "`out[i] = sqrt(in[i])`",
        "tanh" => "`out[i] = tanh(in[i])`",
        "rsqrt" => "`out[i] = 1 / sqrt(in[i])`",
        "sigmoid" => "`out[i] = 1 / (1 + exp(-in[i]))`",
        "gelu" => {
            "GELU, tanh approximation: `0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x^3)))`"
        }
        "gelu_erf" => "exact GELU: `0.5 * x * (1 + erf(x * 0.7071067811865476))`",
        "axpy" => "`y[i] = alpha * x[i] + y[i]`",
        "scale" => "`x[i] = alpha * x[i]`",
        "reduce_sum" => "`out[r] = sum of in[r, :]` (integers wrap; an empty row gives 0)",
        "reduce_max" => "`out[r] = max of in[r, :]` (an empty row gives -inf or the type's MIN)",
        "reduce_mean" => "`out[r] = sum of in[r, :] / cols` (an empty row gives NaN)",
        "softmax" => {
            "per row: `exp(x - max) / sum(exp(x - max))` (a row holding NaN or +inf gives NaN)"
        }
        "layer_norm" => {
            "per row: `(x - mean) / sqrt(var + eps) * gamma[c] + beta[c]`, biased variance (as PyTorch)"
        }
        "transpose" => "`out[c, r] = in[r, c]`",
        "bias_gelu" => "`out[r,c] = gelu(a[r,c] + b[c])`, tanh approximation",
        "bias_gelu_erf" => "`out[r,c] = gelu(a[r,c] + b[c])`, exact (erf) form",
        "cross_entropy" => {
            "`loss[r] = log(sum exp(logits[r, :])) - logits[r, labels[r]]`; a negative label gives 0 (ignored), a label >= cols NaN"
        }
        "adamw" => {
            "one AdamW step (PyTorch's), moments `m`, `v` in f32 (f64 for f64 parameters), `step` counted from 1"
        }
        "embedding" => "`out[i, :] = table[ids[i], :]`; an id outside `[0, vocab)` gives NaN",
        _ => return None,
    };
    Some(s.to_string())
}

/// One parameter as the reference shows it: `name: R f32 [rows*cols]` or `name: i64`.
fn param_text(sig: &KernelSignature, i: usize) -> String {
    let p = &sig.params[i];
    match &p.kind {
        ParamKind::Scalar(t) => format!("`{}: {t}`", p.name),
        ParamKind::Buffer {
            dtype,
            access,
            elems,
        } => {
            let count = match elems {
                Extent::Fixed(n) => n.to_string(),
                Extent::Product(idx) => idx
                    .iter()
                    .map(|&j| sig.params.get(j).map_or("?", |q| q.name))
                    .collect::<Vec<_>>()
                    .join("*"),
            };
            format!(
                "`{}: {} {dtype} [{count}]`",
                p.name,
                access.short().to_uppercase()
            )
        }
    }
}

/// The reference page of `lib` (Markdown), or the first kernel without semantics.
pub fn reference_markdown(lib: &KernelLibrary) -> Result<String, MissingSemantics> {
    let mut families: Vec<(&str, Vec<&KernelSignature>)> = Vec::new();
    for k in lib.kernels() {
        let f = family(&k.signature.name);
        match families.iter_mut().find(|(g, _)| *g == f) {
            Some((_, v)) => v.push(&k.signature),
            None => families.push((f, vec![&k.signature])),
        }
    }
    families.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::new();
    // Writing into a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(out, "# The standard kernels (`{}`): reference\n", lib.name);
    let _ = writeln!(
        out,
        "Generated from the catalogue by `cargo test -p xthunk-kernels --test reference` with \
         `XTHUNK_BLESS=1`; the same test, without it, fails when this page and the code differ. \
         Conventions (compute types, NaN rules, aliasing, grids) are in `docs/kernels.md`. A \
         buffer is `name: ACCESS dtype [element count]` (R read, W write, RW both), its count a \
         product of the `i64` immediates named in it; immediates are `name: dtype`.\n"
    );
    let _ = writeln!(
        out,
        "{} kernels in {} families.\n",
        lib.len(),
        families.len()
    );
    for (f, sigs) in &families {
        let sem = semantics(f).ok_or_else(|| MissingSemantics(sigs[0].name.clone()))?;
        let _ = writeln!(out, "## `{f}`\n\n{sem}\n");
        let _ = writeln!(out, "| kernel | parameters |\n|---|---|");
        for s in sigs {
            let params = (0..s.params.len())
                .map(|i| param_text(s, i))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(out, "| `{}` | {params} |", s.name);
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_strip_the_element_type() {
        assert_eq!(family("add_row_bf16"), "add_row");
        assert_eq!(family("gelu_erf_f16"), "gelu_erf");
        assert_eq!(family("convert_f32_i32"), "convert");
        assert_eq!(family("reduce_sum_i64"), "reduce_sum");
    }

    #[test]
    fn an_unknown_family_is_named() {
        let mut lib = KernelLibrary::new("t");
        lib.register(super::super::HostKernel {
            signature: KernelSignature {
                name: "frobnicate_f32".into(),
                params: vec![],
            },
            func: |_| Ok(()),
        });
        assert_eq!(
            reference_markdown(&lib),
            Err(MissingSemantics("frobnicate_f32".into()))
        );
    }
}
