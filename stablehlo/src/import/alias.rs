//! Input–output aliases from `main`'s argument attributes: `tf.aliasing_output = N` (JAX's
//! `donate_argnums` when an output matches) names the output; `jax.buffer_donor = true` (a
//! donated argument with no output named) takes the first output of the same type that no
//! other argument claims, as XLA would; a donor with none is left unaliased.

use super::ImportError;
use crate::ast::{Attr, Op};
use xthunk_tensor::graph::{Graph, TensorType};

/// The aliases of the imported `main` (`f`) over the finished graph `g`, as
/// `(output, parameter)` pairs; a wrong `tf.aliasing_output` (no such output, another type, an
/// output named twice) is refused naming the argument and the output.
pub(super) fn aliases(f: &Op, g: &Graph) -> Result<Vec<(u32, u32)>, ImportError> {
    let Some(Attr::Array(dicts)) = f.attr("arg_attrs") else {
        return Ok(vec![]);
    };
    let results = g.results();
    let mut claimed = vec![false; results.len()];
    let mut out = vec![];
    let mut donors = vec![];
    for (i, d) in dicts.iter().enumerate() {
        let (Attr::Dict(entries), Some(&p)) = (d, g.params().get(i)) else {
            continue;
        };
        let find = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        if let Some(v) = find("tf.aliasing_output") {
            let n = v.as_int().and_then(|n| usize::try_from(n).ok());
            let Some((o, (name, r))) = n.and_then(|n| results.get(n).map(|r| (n, r))) else {
                return Err(ImportError::invalid(
                    f,
                    format!(
                        "parameter {i}: tf.aliasing_output = {v:?} names no result (`main` has {})",
                        results.len()
                    ),
                ));
            };
            if g.ty(*r) != g.ty(p) {
                return Err(ImportError::invalid(
                    f,
                    format!(
                        "parameter {i} ({}) is aliased to result {o} `{name}` of another type ({})",
                        show(g.ty(p)),
                        show(g.ty(*r))
                    ),
                ));
            }
            if std::mem::replace(&mut claimed[o], true) {
                return Err(ImportError::invalid(
                    f,
                    format!("parameter {i}: result {o} `{name}` is aliased by two parameters"),
                ));
            }
            out.push((o as u32, i as u32));
        } else if find("jax.buffer_donor").and_then(Attr::as_bool) == Some(true) {
            donors.push((i, p));
        }
    }
    for (i, p) in donors {
        let free = results
            .iter()
            .enumerate()
            .find(|(o, (_, r))| !claimed[*o] && g.ty(*r) == g.ty(p));
        if let Some((o, _)) = free {
            claimed[o] = true;
            out.push((o as u32, i as u32));
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn show(t: &TensorType) -> String {
    format!("{:?} x {}", t.dims, t.dtype)
}
