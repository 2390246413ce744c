"""Per-op cases of `cholesky` and `triangular_solve`: as StableHLO ops (text; JAX's CPU
lowering never emits them, it calls LAPACK) and as the LAPACK custom calls JAX emits
(`lapack_?potrf_ffi` from `jnp.linalg.cholesky`, `lapack_?trsm_ffi` from
`lax.linalg.triangular_solve`), which xthunk computes itself. Expected: XLA:CPU's results.
Inputs: symmetric positive definite matrices (M M^T + n I), some batches with one matrix that
is not (XLA and JAX give NaN for it); triangular matrices with a dominant diagonal and random
values in the triangle that must not be read. Every combination of side, triangle, transpose
(ADJOINT too) and unit diagonal. Bound: relative to each result plus a multiple of the
largest (the factorization's order differs from LAPACK's).
"""

from __future__ import annotations

import numpy as np
from jax import lax
import jax.numpy as jnp

from cases import Case, Rel

FLOATS = ["f32", "f64"]
TOL = {"f32": Rel(2e-4, atol_of_max=2e-5), "f64": Rel(1e-10, atol_of_max=1e-12)}


def _ty(d: str, dims) -> str:
    return "tensor<" + "".join(f"{n}x" for n in dims) + f"{d}>"


def _spd(rng, batch, n, d, broken: bool):
    m = rng.uniform(-1, 1, tuple(batch) + (n, n))
    a = m @ np.swapaxes(m, -1, -2) + n * np.eye(n)
    if broken and n > 1 and a.ndim > 2:
        flat = a.reshape(-1, n, n)
        flat[0, 1, 1] = -1.0
    return a.astype(np.dtype(d.replace("f", "float")))


def _batch(rng):
    return [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]


def gen_cholesky(rng, count: int) -> list:
    cases = []
    for d in FLOATS:
        for _ in range(count):
            batch = _batch(rng)
            n = int(rng.integers(1, 9))
            dims = batch + [n, n]
            a = _spd(rng, batch, n, d, broken=rng.random() < 0.3)
            lower = bool(rng.random() < 0.5)
            t = _ty(d, dims)
            text = (
                "module @m {\n"
                f"  func.func public @main(%arg0: {t}) -> {t} {{\n"
                f"    %0 = stablehlo.cholesky %arg0, lower = {str(lower).lower()} : {t}\n"
                f"    return %0 : {t}\n"
                "  }\n"
                "}\n"
            )
            cases.append(Case("cholesky", d, [a], text=text, tol=TOL[d],
                              attrs={"form": "stablehlo", "lower": lower},
                              expect=("stablehlo.cholesky",)))
            fn = (lambda lo: lambda x: lax.linalg.cholesky(x, symmetrize_input=False)
                  if lo else jnp.swapaxes(lax.linalg.cholesky(x, symmetrize_input=False),
                                          -1, -2))(lower)
            cases.append(Case("cholesky", d, [a], fn=fn, tol=TOL[d],
                              attrs={"form": "lapack"}, expect=("lapack_spotrf_ffi|lapack_dpotrf_ffi",)))
    return cases


def _triangular(rng, batch, m, d):
    a = rng.uniform(-1, 1, tuple(batch) + (m, m))
    idx = np.arange(m)
    a[..., idx, idx] = rng.choice([-1.0, 1.0], tuple(batch) + (m,)) * rng.uniform(2, 4, tuple(batch) + (m,))
    return a.astype(np.dtype(d.replace("f", "float")))


def gen_triangular_solve(rng, count: int) -> list:
    cases = []
    for d in FLOATS:
        for _ in range(count):
            for bits in range(16):
                left, lower = bool(bits & 1), bool(bits & 2)
                unit, transpose = bool(bits & 4), bool(bits & 8)
                batch = _batch(rng)
                m, k = int(rng.integers(1, 7)), int(rng.integers(1, 5))
                a = _triangular(rng, batch, m, d)
                bdims = batch + ([m, k] if left else [k, m])
                b = rng.uniform(-2, 2, bdims).astype(a.dtype)
                ta, tb = _ty(d, batch + [m, m]), _ty(d, bdims)
                tr = ["NO_TRANSPOSE", rng.choice(["TRANSPOSE", "ADJOINT"])][transpose]
                text = (
                    "module @m {\n"
                    f"  func.func public @main(%arg0: {ta}, %arg1: {tb}) -> {tb} {{\n"
                    f"    %0 = \"stablehlo.triangular_solve\"(%arg0, %arg1) <{{left_side = "
                    f"{str(left).lower()}, lower = {str(lower).lower()}, transpose_a = "
                    f"#stablehlo<transpose {tr}>, unit_diagonal = {str(unit).lower()}}}> : "
                    f"({ta}, {tb}) -> {tb}\n"
                    f"    return %0 : {tb}\n"
                    "  }\n"
                    "}\n"
                )
                attrs = {"left": left, "lower": lower, "unit": unit, "transpose": transpose}
                cases.append(Case("triangular_solve", d, [a, b], text=text, tol=TOL[d],
                                  attrs=dict(attrs, form="stablehlo"),
                                  expect=("stablehlo.triangular_solve",)))
                fn = (lambda l, lo, u, t: lambda x, y: lax.linalg.triangular_solve(
                    x, y, left_side=l, lower=lo, unit_diagonal=u, transpose_a=t))(
                    left, lower, unit, transpose)
                cases.append(Case("triangular_solve", d, [a, b], fn=fn, tol=TOL[d],
                                  attrs=dict(attrs, form="lapack"), expect=("lapack_strsm_ffi|lapack_dtrsm_ffi",)))
    return cases


GENERATORS: dict = {
    "cholesky": gen_cholesky,
    "triangular_solve": gen_triangular_solve,
}
