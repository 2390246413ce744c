//! Portable source templates of the training kernels (fused bias + GELU, cross-entropy, AdamW,
//! embedding gather), with the evaluation order of their host implementations
//! (`kernels/training.rs`).

use super::emit::{ROWS, compute, ctype, declaration, lit, load, math, store};
use crate::ir::DType;
use crate::kernels::KernelSignature;
use std::fmt::Write as _;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    BiasGelu { erf: bool },
    CrossEntropy,
    AdamW,
    Embedding,
}

fn family(name: &str) -> Option<(Family, DType)> {
    let (op, t) = name.rsplit_once('_')?;
    let t = DType::from_name(t)?;
    if !t.is_float() {
        return None;
    }
    let f = match op {
        "bias_gelu" => Family::BiasGelu { erf: false },
        "bias_gelu_erf" => Family::BiasGelu { erf: true },
        "cross_entropy" => Family::CrossEntropy,
        "adamw" => Family::AdamW,
        "embedding" => Family::Embedding,
        _ => return None,
    };
    Some((f, t))
}

fn expected_params(f: Family) -> &'static [&'static str] {
    match f {
        Family::BiasGelu { .. } => &["a", "b", "out", "rows", "cols"],
        Family::CrossEntropy => &["logits", "labels", "loss", "rows", "cols"],
        Family::AdamW => &[
            "param",
            "grad",
            "m",
            "v",
            "lr",
            "beta1",
            "beta2",
            "eps",
            "weight_decay",
            "step",
            "n",
        ],
        Family::Embedding => &["table", "ids", "out", "n", "vocab", "dim"],
    }
}

/// A quiet NaN of compute type `c`.
fn nan(c: &str) -> &'static str {
    if c == "float" {
        "xt_bits_f32(0x7fc00000u)"
    } else {
        "xt_bits_f64(0x7ff8000000000000ull)"
    }
}

/// The definition of a training kernel, or `None` when `sig` is not one (or its parameters are
/// not the ones its template is written for).
pub(super) fn definition(sig: &KernelSignature) -> Option<String> {
    let (f, t) = family(&sig.name)?;
    let names: Vec<&str> = sig.params.iter().map(|p| p.name).collect();
    if names != expected_params(f) {
        return None;
    }
    let c = compute(t);
    let mut s = String::new();
    macro_rules! w {
        ($($a:tt)*) => { let _ = writeln!(s, $($a)*); };
    }
    match f {
        Family::BiasGelu { erf } => {
            let g = if erf { "xt_gelu_erf" } else { "xt_gelu" };
            w!("  XT_FOR(i, rows * cols) {{");
            w!("    const long long c = i % cols;");
            w!(
                "    const {c} x = {} + {};",
                load(t, "a[i]"),
                load(t, "b[c]")
            );
            w!("    out[i] = {};", store(t, &format!("{g}(x)")));
            w!("  }}");
        }
        Family::CrossEntropy => {
            let ninf = if t == DType::F64 {
                "XT_NEG_INF_F64"
            } else {
                "XT_NEG_INF_F32"
            };
            w!("  __shared__ {c} sh[XT_MAX_BLOCK];");
            s.push_str(ROWS);
            w!("    const {}* x = logits + r * cols;", ctype(t));
            w!("    const int label = labels[r];");
            w!("    {c} m = {ninf};");
            w!(
                "    for (long long c = t; c < cols; c += nt) m = xt_max(m, {});",
                load(t, "x[c]")
            );
            w!("    m = xt_block_reduce(m, sh, xt_op_max());");
            w!("    {c} s = {};", lit(c, 0.0));
            w!(
                "    for (long long c = t; c < cols; c += nt) s += {}({} - m);",
                math(c, "exp"),
                load(t, "x[c]")
            );
            w!("    s = xt_block_reduce(s, sh, xt_op_add());");
            w!("    if (t == 0) {{");
            w!("      {c} v = {};", lit(c, 0.0));
            w!(
                "      if (label >= 0 && (long long)label >= cols) v = {};",
                nan(c)
            );
            w!(
                "      else if (label >= 0) v = m + {}(s) - {};",
                math(c, "log"),
                load(t, "x[label]")
            );
            w!("      loss[r] = {};", store(t, "v"));
            w!("    }}");
            w!("  }}");
        }
        Family::AdamW => {
            let cv = |n: &str| format!("({c}){n}");
            w!(
                "  const {c} lr_ = {}, b1 = {}, b2 = {}, eps_ = {}, wd = {};",
                cv("lr"),
                cv("beta1"),
                cv("beta2"),
                cv("eps"),
                cv("weight_decay")
            );
            w!("  const {c} bc1 = ({c})(1.0 - pow((double)beta1, (double)step));");
            w!("  const {c} bc2 = ({c})(1.0 - pow((double)beta2, (double)step));");
            w!("  const {c} one = {};", lit(c, 1.0));
            w!("  const {c} decay = one - lr_ * wd;");
            w!("  XT_FOR(i, n) {{");
            w!("    const {c} g = {};", load(t, "grad[i]"));
            w!("    const {c} p = {} * decay;", load(t, "param[i]"));
            w!("    const {c} mi = b1 * m[i] + (one - b1) * g;");
            w!("    const {c} vi = b2 * v[i] + (one - b2) * g * g;");
            w!(
                "    const {c} upd = lr_ * (mi / bc1) / ({}(vi / bc2) + eps_);",
                math(c, "sqrt")
            );
            w!("    m[i] = mi;");
            w!("    v[i] = vi;");
            w!("    param[i] = {};", store(t, "p - upd"));
            w!("  }}");
        }
        Family::Embedding => {
            w!("  const {} bad = {};", ctype(t), store(t, nan(c)));
            w!("  XT_FOR(j, n * dim) {{");
            w!("    const long long i = j / dim, d = j % dim;");
            w!("    const int id = ids[i];");
            w!(
                "    out[j] = (id >= 0 && (long long)id < vocab) ? table[(long long)id * dim + d] : bad;"
            );
            w!("  }}");
        }
    }
    Some(format!("{} {{\n{s}}}\n", declaration(sig)))
}
