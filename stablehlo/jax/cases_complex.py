"""Per-op cases of the complex types (c64 = complex<f32>, c128 = complex<f64>): `real`, `imag`,
`complex`, and the elementwise ops, comparisons, conversions and `select` on complex values.

Inputs: parts drawn from ordinary values of moderate magnitude, with a share of specials in
either part (NaN, ±inf, ±0, ±1) — no subnormals, which XLA:CPU flushes to zero. Expected
values: XLA:CPU's (through JAX). Comparison part by part (compare.py): bit-exact where the
result is exact (parts moved, negated, added or subtracted, comparisons, conversions); for the
others a relative bound against the complex magnitude |want|, since the formulas (products of
parts, Smith's division, hypot, exp·cos/sin) round differently from XLA's own ones by a few
ulp of the whole value, not of a part that cancels.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

import values as V
from cases import Case, Exact, Rel, replace_op

COMPLEX = V.COMPLEX
PART = {"c64": "f32", "c128": "f64"}
EPS = {"c64": float(np.finfo(np.float32).eps), "c128": float(np.finfo(np.float64).eps)}
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]


def _parts(rng, d: str, shape, kind: str, p_special: float) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "exp":  # exp's real part where exp neither overflows nor underflows
        vals = rng.uniform(-20.0, 20.0, n)
    elif kind == "moderate":  # trigonometric and hyperbolic arguments, finite
        vals = rng.uniform(-4.0, 4.0, n)
    else:
        vals = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-8, 8, n))
    pick = rng.random(n) < p_special
    vals = np.where(pick, np.asarray(SPECIALS)[rng.integers(0, len(SPECIALS), n)], vals)
    return vals.astype(V.dt(PART[d])).reshape(shape)


def draw(rng, d: str, shape, kind: str = "any", p_special: float = 0.1) -> np.ndarray:
    re = _parts(rng, d, shape, kind, p_special)
    im = _parts(rng, d, shape, "any" if kind == "exp" else kind, p_special)
    out = np.empty(shape, V.dt(d))
    out.real, out.imag = re, im
    return out


def _rel(d: str, n: float) -> Rel:
    return Rel(n * EPS[d])


# name: (arity, jax function, exact?, relative bound in eps, input kind)
OPS = {
    "add": (2, lax.add, True, 0, "any"),
    "subtract": (2, lax.sub, True, 0, "any"),
    "negate": (1, lax.neg, True, 0, "any"),
    "multiply": (2, lax.mul, False, 4, "any"),
    "divide": (2, lax.div, False, 8, "any"),
    "abs": (1, lax.abs, False, 2, "any"),
    "sign": (1, lax.sign, False, 4, "any"),
    "exponential": (1, lax.exp, False, 8, "exp"),
    "log": (1, lax.log, False, 8, "any"),
    "sqrt": (1, lax.sqrt, False, 8, "any"),
    "rsqrt": (1, lax.rsqrt, False, 8, "any"),
    # Finite, moderate arguments only (no specials): their non-finite corners are not
    # checked against XLA's.
    "cosine": (1, lax.cos, False, 16, "moderate"),
    "sine": (1, lax.sin, False, 16, "moderate"),
    "tan": (1, lax.tan, False, 32, "moderate"),
    "tanh": (1, lax.tanh, False, 32, "moderate"),
    "exponential_minus_one": (1, lax.expm1, False, 16, "moderate"),
    "log_plus_one": (1, lax.log1p, False, 16, "moderate"),
    # JAX spells logistic as exp and divide: lax.exp lowered and renamed (XLA runs the text).
    "logistic": (1, lax.exp, False, 32, "moderate"),
    "power": (2, lax.pow, False, 64, "moderate"),
}


def _numpy_log(x):
    """numpy's complex log in c128, rounded to the case's type: XLA's c128 log is tens of ulp
    off next to |z| = 1 (log(0.7845851486935911-0.05379363143039601j): XLA's real part
    -0.24025522830810972, the 40-digit value -0.2402552283081104685..., which xthunk and
    numpy give), so the correctly rounded result is accepted too."""
    with np.errstate(all="ignore"):
        return [np.log(np.asarray(x, np.complex128)).astype(np.asarray(x).dtype)]


ALT = {"log": _numpy_log}


def _specials_ok(op: str) -> float:
    # The non-finite corners of multiply, divide, exp, log, sqrt, rsqrt, abs and sign are
    # checked as XLA gives them; the moderate-input ops get none.
    return 0.0 if OPS[op][4] == "moderate" else 0.1


def gen_elementwise(op: str, rng, count: int) -> list:
    arity, fn, exact, rel, kind = OPS[op]
    cases = []
    for d in COMPLEX:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = [draw(rng, d, shape, kind, _specials_ok(op)) for _ in range(arity)]
            tol = Exact() if exact else _rel(d, rel)
            patch = replace_op("exponential", "logistic") if op == "logistic" else None
            cases.append(Case(f"complex_{op}", d, args, fn=fn, tol=tol, patch=patch,
                              alt_fn=ALT.get(op),
                              expect=(f"stablehlo.{op}|chlo.{op}",)))
    return cases


def gen_real_imag(op: str, rng, count: int) -> list:
    fn = lax.real if op == "real" else lax.imag
    cases = []
    for d in COMPLEX:
        for _ in range(count):
            shape = V.rand_shape(rng)
            cases.append(Case(op, d, [draw(rng, d, shape, p_special=0.3)], fn=fn,
                              expect=(f"stablehlo.{op}",)))
    return cases


def gen_complex(rng, count: int) -> list:
    cases = []
    for d in COMPLEX:
        p = PART[d]
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = [V.draw(rng, p, shape), V.draw(rng, p, shape)]
            cases.append(Case("complex", d, args, fn=lax.complex,
                              expect=("stablehlo.complex",)))
    return cases


def gen_compare(rng, count: int) -> list:
    cases = []
    for d in COMPLEX:
        for direction, fn in (("EQ", lax.eq), ("NE", lax.ne)):
            for _ in range(count):
                shape = V.rand_shape(rng)
                x = draw(rng, d, shape, p_special=0.3)
                y = draw(rng, d, shape, p_special=0.3)
                # Equal elements, and ones equal in one part only.
                same = rng.random(shape) < 0.3
                y = np.where(same, x, y).astype(x.dtype)
                half = rng.random(shape) < 0.2
                y = np.where(half, x.real + 1j * y.imag, y).astype(x.dtype)
                cases.append(Case("complex_compare", d, [x, y], fn=fn,
                                  attrs={"direction": direction},
                                  expect=("stablehlo.compare",)))
    return cases


def gen_select(rng, count: int) -> list:
    cases = []
    for d in COMPLEX:
        for _ in range(count):
            shape = V.rand_shape(rng)
            p = rng.random(shape) < 0.5
            cases.append(Case("complex_select", d, [p, draw(rng, d, shape), draw(rng, d, shape)],
                              fn=lax.select, expect=("stablehlo.select",)))
    return cases


def _to(t):
    return lambda x: lax.convert_element_type(x, V.dt(t))


def gen_convert(rng, count: int) -> list:
    """Complex from real types (imaginary part zero), between c64 and c128 (each part rounded
    once), and to real types: JAX takes the real part first (`real`, then `convert`)."""
    cases = []
    for d in COMPLEX:
        others = [c for c in COMPLEX if c != d]
        for _ in range(count):
            shape = V.rand_shape(rng)
            for src in ["f32", "f64", "i32", "i1", "f16"]:
                x = V.draw(rng, src, shape, subnormals=False)
                cases.append(Case("complex_convert", d, [x], fn=_to(d),
                                  attrs={"from": src}, expect=("stablehlo.convert",)))
            for o in others:
                x = draw(rng, o, shape, p_special=0.3)
                cases.append(Case("complex_convert", d, [x], fn=_to(d), attrs={"from": o},
                                  expect=("stablehlo.convert",)))
    return cases


def gen_chain(rng, count: int) -> list:
    """A fused chain mixing the ops, complex constants and broadcasts: what a JAX program with
    complex arithmetic lowers to."""
    def f(x, y):
        z = x * y + (1.5 - 2j) * x - jnp.exp(y / 4)
        return z, jnp.abs(z), jnp.real(z) * jnp.imag(x), lax.complex(jnp.imag(z), jnp.real(y))

    cases = []
    for d in COMPLEX:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = [draw(rng, d, shape, p_special=0.0), draw(rng, d, shape, p_special=0.0)]
            # real(z) and imag(z) cancel where z's parts do: held to the error of the whole
            # values, 16 eps of the largest.
            loose = Rel(16 * EPS[d], atol_of_max=16 * EPS[d])
            tol = [_rel(d, 16), _rel(d, 16), loose, loose]
            cases.append(Case("complex_chain", d, args, fn=f, tol=tol,
                              expect=("stablehlo.constant",)))
    return cases


def gen_dot(rng, count: int) -> list:
    """`dot_general` of complex matrices (a generated kernel, sequential sums): a relative
    bound of k·eps of the largest result (XLA sums in another order)."""
    cases = []
    for d in COMPLEX:
        for _ in range(count):
            b, m, k, n = (int(v) for v in rng.integers(1, 6, 4))
            x = draw(rng, d, (b, m, k), p_special=0.0)
            y = draw(rng, d, (b, k, n), p_special=0.0)
            tol = Rel(8 * k * EPS[d], atol_of_max=8 * k * EPS[d])
            cases.append(Case("complex_dot_general", d, [x, y],
                              fn=lambda p, q: jnp.einsum("bmk,bkn->bmn", p, q), tol=tol,
                              expect=("stablehlo.dot_general",)))
    return cases


def gen_reduce(rng, count: int) -> list:
    """`reduce` of complex values with an add body (jnp.sum) and a multiply body (jnp.prod,
    over at most 6 elements), over one axis: k·eps of the largest result for sums (another
    order than XLA's), 8k·eps of |want| for products."""
    cases = []
    for d in COMPLEX:
        for _ in range(count):
            shape = tuple(int(v) for v in rng.integers(1, 7, 2))
            axis = int(rng.integers(0, 2))
            x = draw(rng, d, shape, p_special=0.0)
            k = shape[axis]
            cases.append(Case("complex_reduce", d, [x],
                              fn=lambda a, axis=axis: jnp.sum(a, axis=axis),
                              tol=Rel(4 * k * EPS[d], atol_of_max=4 * k * EPS[d]),
                              attrs={"body": "add"}, expect=("stablehlo.reduce",)))
            cases.append(Case("complex_reduce", d, [x],
                              fn=lambda a, axis=axis: jnp.prod(a, axis=axis),
                              tol=_rel(d, 8 * k), attrs={"body": "multiply"},
                              expect=("stablehlo.reduce",)))
    return cases


GENERATORS: dict = {
    "complex_reduce": gen_reduce,
    "complex_dot_general": gen_dot,
    "real": lambda rng, count: gen_real_imag("real", rng, count),
    "imag": lambda rng, count: gen_real_imag("imag", rng, count),
    "complex": gen_complex,
    "complex_compare": gen_compare,
    "complex_select": gen_select,
    "complex_convert": gen_convert,
    "complex_chain": gen_chain,
}
for _op in OPS:
    GENERATORS[f"complex_{_op}"] = (lambda op: lambda rng, count: gen_elementwise(op, rng, count))(_op)
