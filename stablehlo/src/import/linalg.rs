//! `stablehlo.cholesky`, `stablehlo.triangular_solve`, and the LAPACK custom calls JAX emits
//! for them on the CPU (`lapack_{s,d}potrf_ffi`, `lapack_{s,d}trsm_ffi`): all become
//! xthunk-tensor's `cholesky` / `triangular_solve`. A LAPACK call's operand and result
//! layouts (column-major) say how LAPACK sees the memory; the op's meaning on the logical
//! tensors is the same whatever the layout, so xthunk computes it in its own row-major
//! buffers. `potrf` keeps LAPACK's contract: the other triangle as it was, and `info` (0, or
//! the 1-based column where the matrix is not positive definite), which JAX checks.

use super::ops::{R, result, tensors};
use super::{Env, ImportError, Importer, Item, check_attrs};
use crate::ast::{Attr, Op};
use xthunk_tensor::graph::Graph;

/// A boolean attribute (`default` when absent).
fn flag(op: &Op, name: &str, default: bool) -> R<bool> {
    match op.attr(name) {
        None => Ok(default),
        Some(a) => a
            .as_bool()
            .ok_or_else(|| ImportError::invalid(op, format!("`{name}`: a boolean expected"))),
    }
}

/// A LAPACK character option (`uplo = 76 : ui8`) from `mhlo.backend_config`.
fn lapack_char(op: &Op, name: &str, allowed: &[u8]) -> R<u8> {
    let Some(Attr::Dict(d)) = op.attr("mhlo.backend_config") else {
        return Err(ImportError::invalid(
            op,
            "no `mhlo.backend_config` dictionary",
        ));
    };
    let v = d
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_int())
        .and_then(|v| u8::try_from(v).ok())
        .ok_or_else(|| ImportError::invalid(op, format!("no `{name}` character option")))?;
    if !allowed.contains(&v) {
        return Err(ImportError::unsupported(
            op,
            format!("`{name}` = '{}'", char::from(v).escape_default()),
        ));
    }
    Ok(v)
}

impl Importer<'_> {
    /// `stablehlo.cholesky` (`lower` defaults to false, as in the spec).
    pub(super) fn cholesky(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(op, &["lower"])?;
        let x = tensors(env, op)?;
        let [a] = x.as_slice() else {
            return Err(ImportError::invalid(op, "one operand expected"));
        };
        let lower = flag(op, "lower", false)?;
        let vs = g
            .cholesky(*a, lower, false)
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vs.into_iter().map(Item::Tensor).collect())
    }

    /// `stablehlo.triangular_solve`.
    pub(super) fn triangular_solve(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        check_attrs(op, &["left_side", "lower", "unit_diagonal", "transpose_a"])?;
        let x = tensors(env, op)?;
        let [a, b] = x.as_slice() else {
            return Err(ImportError::invalid(op, "two operands expected"));
        };
        let transpose = match op.attr("transpose_a").and_then(Attr::enum_value) {
            Some("NO_TRANSPOSE") => false,
            // Real element types only: the adjoint is the transpose.
            Some("TRANSPOSE" | "ADJOINT") => true,
            other => {
                return Err(ImportError::invalid(op, format!("`transpose_a` {other:?}")));
            }
        };
        let v = g
            .triangular_solve(
                *a,
                *b,
                flag(op, "left_side", false)?,
                flag(op, "lower", false)?,
                flag(op, "unit_diagonal", false)?,
                transpose,
            )
            .map_err(|e| ImportError::graph(op, e))?;
        Ok(vec![Item::Tensor(v)])
    }

    /// A LAPACK custom call xthunk computes itself; `None` for another target.
    pub(super) fn lapack(
        &mut self,
        g: &mut Graph,
        op: &Op,
        env: &Env,
        target: &str,
    ) -> R<Option<Vec<Item>>> {
        let gr = |e| ImportError::graph(op, e);
        let x = tensors(env, op)?;
        let vs = match target {
            "lapack_spotrf_ffi" | "lapack_dpotrf_ffi" => {
                let [a] = x.as_slice() else {
                    return Err(ImportError::invalid(op, "potrf: one operand expected"));
                };
                let lower = lapack_char(op, "uplo", b"LU")? == b'L';
                g.cholesky(*a, lower, true).map_err(gr)?
            }
            "lapack_strsm_ffi" | "lapack_dtrsm_ffi" => {
                let [a, b] = x.as_slice() else {
                    return Err(ImportError::unsupported(
                        op,
                        format!(
                            "custom_call @{target} with {} operands (a and b, no alpha)",
                            x.len()
                        ),
                    ));
                };
                let left = lapack_char(op, "side", b"LR")? == b'L';
                let lower = lapack_char(op, "uplo", b"LU")? == b'L';
                let transpose = lapack_char(op, "trans_x", b"NTC")? != b'N';
                let unit = lapack_char(op, "diag", b"NU")? == b'U';
                vec![
                    g.triangular_solve(*a, *b, left, lower, unit, transpose)
                        .map_err(gr)?,
                ]
            }
            _ => return Ok(None),
        };
        if vs.len() != op.result_types.len() {
            return Err(ImportError::invalid(
                op,
                format!("{} results, {} computed", op.result_types.len(), vs.len()),
            ));
        }
        for (i, v) in vs.iter().enumerate() {
            let want = result(op, i)?;
            if *g.ty(*v) != want {
                return Err(ImportError::invalid(
                    op,
                    format!("result {i} {want}, {} computed", g.ty(*v)),
                ));
            }
        }
        Ok(Some(vs.into_iter().map(Item::Tensor).collect()))
    }
}
