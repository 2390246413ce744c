"""Per-op cases of CHLO's elementwise ops (the special functions JAX lowers to `chlo.*`).

Expected values: XLA:CPU's own result; also accepted, element by element, XLA's f64 result
rounded to the case's type (`wide`) and scipy's / numpy's f64 function rounded to it (for the
inverse error function, digamma, lgamma and the Bessel function XLA's f32 versions are
approximations off by several ulp, and a correctly rounded result is what xthunk aims at).
Inputs cover each function's domain, its edges and the specials (NaN, ±inf, ±0, poles).
`is_inf`, `is_neg_inf` and `is_pos_inf` are not emitted by JAX (it compares): their cases are
written as text.
"""

from __future__ import annotations

import jax.numpy as jnp
import mpmath
import numpy as np
import scipy.special as sp
from jax import lax

import values as V
from cases import Case, Exact, Rel, Ulp

FLOATS = V.FLOATS

def _erfc_40(x):
    """erfc in 40-digit arithmetic, rounded to f64: XLA's and scipy's f64 erfc are tens of ulp
    off in the far tail (erfc(18.963991461195278): XLA 1.9332066643438437e-158, scipy
    ...433e-158, the 40-digit value ...324e-158, which xthunk gives)."""
    x = np.asarray(x, np.float64)
    out = np.empty(x.shape, np.float64)
    with mpmath.workdps(40):
        for i, v in np.ndenumerate(x):
            # From 27.3 the value rounds to 0 in f64 (erfc(27) is 5.2e-319, a subnormal that
            # scipy gives as 0), below -10 it rounds to 2.
            out[i] = (float(mpmath.erfc(mpmath.mpf(float(v)))) if -10.0 < v < 28.0
                      else sp.erfc(v))
    return out


# name: (jax function, numpy/scipy f64 reference, input kind)
UNARY = {
    "acos": (jnp.arccos, np.arccos, "unit"),
    "acosh": (jnp.arccosh, np.arccosh, "above_one"),
    "asin": (jnp.arcsin, np.arcsin, "unit"),
    "asinh": (jnp.arcsinh, np.arcsinh, "any"),
    "atan": (jnp.arctan, np.arctan, "any"),
    "atanh": (jnp.arctanh, np.arctanh, "unit"),
    "bessel_i1e": (lax.bessel_i1e, sp.i1e, "bessel"),
    "cosh": (jnp.cosh, np.cosh, "moderate_range"),
    "digamma": (lax.digamma, sp.psi, "gamma"),
    "erf": (lax.erf, sp.erf, "any"),
    "erfc": (lax.erfc, _erfc_40, "erfc"),
    "erf_inv": (lax.erf_inv, sp.erfinv, "unit"),
    "lgamma": (lax.lgamma, sp.gammaln, "gamma"),
    "sinh": (jnp.sinh, np.sinh, "moderate_range"),
}

# Tolerance per op for f64 (f16, bf16 and f32 are held to 2 ulp: xthunk computes erfc, lgamma,
# erf_inv, digamma and bessel_i1e in double and rounds to the type (f16/bf16 through float),
# the others through the C library's float functions). digamma has a root near 1.4616 and
# lgamma roots at 1 and 2, where only an absolute bound means anything.
F64_TOL = {
    "digamma": Rel(1e-13, atol=1e-14),
    "lgamma": Rel(1e-13, atol=1e-14),
    "erf_inv": Rel(1e-13),
    "bessel_i1e": Rel(1e-13),
}


def _draw(rng, d: str, shape, kind: str) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "any":
        return V.draw(rng, d, shape, subnormals=d != "f64")
    if kind == "unit":
        vals = rng.uniform(-1.0, 1.0, n)
        edge = np.asarray([1.0, -1.0, 0.0, -0.0, 0.999999, -0.9999, 1e-8, 1.5, -2.0,
                           np.nan, np.inf, -np.inf])
    elif kind == "above_one":
        vals = 1.0 + np.exp2(rng.uniform(-20, 20, n))
        edge = np.asarray([1.0, 0.5, -1.0, 0.0, np.nan, np.inf, -np.inf, 1.0000001])
    elif kind == "moderate_range":
        vals = rng.uniform(-12.0, 12.0, n)
        edge = np.asarray([0.0, -0.0, 80.0, -80.0, 700.0, 1e5, np.nan, np.inf, -np.inf])
    elif kind == "bessel":
        vals = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-10, 9, n))
        edge = np.asarray([0.0, -0.0, 21.9, 22.1, -22.0, 1e4, 1e30, np.nan, np.inf, -np.inf])
    elif kind == "gamma":
        vals = np.where(rng.random(n) < 0.7, rng.uniform(-8.0, 25.0, n),
                        rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-20, 60, n)))
        # -3.9221902 and -4.0287895: glibc's lgammaf is 6 and 3 ulp off there.
        edge = np.asarray([0.0, -0.0, -1.0, -2.0, -7.0, 1.0, 2.0, 0.5, -0.5, 1.4616321449683622,
                           -2.5, 1e-30, 3e38, np.nan, np.inf, -np.inf, -3.9221902, -4.0287895])
    elif kind == "erfc":
        vals = rng.uniform(-6.0, 12.0, n)
        # 2.04285455: glibc's erfcf is 3 ulp off there.
        edge = np.asarray([0.0, -0.0, 2.04285455, 1e-30, 10.0, 27.0, -10.0, np.nan, np.inf,
                           -np.inf])
    else:
        raise ValueError(kind)
    pick = rng.random(n) < 0.25
    vals = np.where(pick, edge[rng.integers(0, len(edge), n)], vals)
    with np.errstate(over="ignore", invalid="ignore"):
        return vals.astype(V.dt(d)).reshape(shape)


def _ref(f):
    def ref(*args):
        with np.errstate(all="ignore"):
            out = f(*[np.asarray(a, np.float64) for a in args])
        with np.errstate(over="ignore", invalid="ignore"):
            return [np.asarray(out).astype(np.asarray(args[0]).dtype)]
    return ref


def _tol(op: str, d: str):
    if d == "f64":
        return F64_TOL.get(op, Ulp(4))
    return Ulp(2)


def gen_unary(op: str, rng, count: int) -> list:
    fn, ref, kind = UNARY[op]
    cases = []
    for d in FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            x = _draw(rng, d, shape, kind)
            cases.append(Case(op, d, [x], fn=fn, tol=_tol(op, d), wide=True, alt_fn=_ref(ref),
                              expect=(f"chlo.{op}",)))
    return cases


def _next_inputs(rng, d: str, shape):
    x = V.draw(rng, d, shape, subnormals=False)
    y = V.draw(rng, d, shape, subnormals=False)
    # Equal operands, zeros toward either sign and the extremes.
    same = rng.random(shape) < 0.15
    y = np.where(same, x, y).astype(x.dtype)
    return [x, y]


def gen_next_after(rng, count: int) -> list:
    """`lax.nextafter`: one step of the type toward y. XLA:CPU flushes subnormal operands and
    results of f32 and f64 to zero, the spec does not: no subnormals are drawn, and a result
    that would be one (from ±0 or ±min normal) is accepted as numpy's nextafter gives it."""
    cases = []
    for d in FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = _next_inputs(rng, d, shape)
            alt = None
            if d in ("f32", "f64"):
                def alt(a, b):
                    with np.errstate(all="ignore"):
                        return [np.nextafter(a, b)]
            cases.append(Case("next_after", d, args, fn=lax.nextafter, tol=Exact(), alt_fn=alt,
                              expect=("chlo.next_after",)))
    return cases


def gen_square(rng, count: int) -> list:
    """`lax.square` of a float lowers to `chlo.square`: x * x, rounded once (JAX multiplies
    integers itself)."""
    cases = []
    for d in FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            x = V.draw(rng, d, shape, subnormals=d != "f64")
            cases.append(Case("square", d, [x], fn=lax.square, tol=Exact(),
                              wide=False, expect=("chlo.square",)))
    return cases


def _zeta_inputs(rng, d: str, shape):
    n = int(np.prod(shape, dtype=np.int64))
    s = np.where(rng.random(n) < 0.5, rng.integers(1, 12, n).astype(np.float64),
                 rng.uniform(1.0, 12.0, n))
    q = np.where(rng.random(n) < 0.6, rng.uniform(0.01, 30.0, n),
                 np.where(rng.random(n) < 0.8, rng.uniform(-6.0, 0.0, n),
                          rng.uniform(-1e4, -64.0, n)))
    s_edge = np.asarray([1.0, 0.5, 2.0, 3.0, np.inf, np.nan, 60.0])
    q_edge = np.asarray([0.0, -1.0, -2.5, 1.0, 1e-6, 1e6, np.inf, np.nan, -0.0])
    s = np.where(rng.random(n) < 0.15, s_edge[rng.integers(0, len(s_edge), n)], s)
    q = np.where(rng.random(n) < 0.15, q_edge[rng.integers(0, len(q_edge), n)], q)
    with np.errstate(over="ignore"):
        return [s.astype(V.dt(d)).reshape(shape), q.astype(V.dt(d)).reshape(shape)]


def _polygamma_inputs(rng, d: str, shape):
    n_el = int(np.prod(shape, dtype=np.int64))
    n = rng.integers(0, 7, n_el).astype(np.float64)
    n = np.where(rng.random(n_el) < 0.1, np.asarray([1.5, -1.0, np.nan])[rng.integers(0, 3, n_el)], n)
    x = _draw(rng, "f64", (n_el,), "gamma")
    # scipy's zeta steps through every negative term: below -1e5 it takes forever. Between
    # -1e5 and -64 xthunk switches to its closed form for the negative terms.
    far = rng.uniform(-1e5, -64.0, n_el)
    x = np.where(x < -1e5, far, np.where(rng.random(n_el) < 0.1, far, x))
    with np.errstate(over="ignore"):
        return [n.astype(V.dt(d)).reshape(shape), x.astype(V.dt(d)).reshape(shape)]


def _zeta_direct(s: float, q: float) -> float:
    """zeta(s, q) for an integer s > 1 and -64 < q < 0 (not an integer): the negative terms
    summed one by one in 40-digit arithmetic, plus zeta(s, f) over positive arguments.
    scipy's f64 sum loses digits next to a cancellation (zeta(7, -2.5): 4e-11 off), and
    mpmath's own zeta is wrong for a negative q (zeta(5, -34996.22) = 1.7e-19, the sum being
    -1937.2)."""
    with mpmath.workdps(40):
        qm = mpmath.mpf(q)
        m = int(-mpmath.floor(qm))
        neg = mpmath.fsum((qm + k) ** -int(s) for k in range(m))
        return float(neg + mpmath.zeta(int(s), qm + m))


def _zeta_ref(s, q):
    shape = np.shape(s)
    s = np.asarray(s, np.float64).reshape(-1)
    q = np.asarray(q, np.float64).reshape(-1)
    with np.errstate(all="ignore"):
        out = np.asarray(sp.zeta(s, q), np.float64)
        near = (q < 0) & (q > -64) & (q != np.floor(q)) & (s > 1) & (s == np.floor(s)) & (s < 200)
    for i in np.flatnonzero(near):
        out[i] = _zeta_direct(s[i], q[i])
    return out.reshape(shape)


def _polygamma_ref(n, x):
    shape = np.shape(n)
    n = np.asarray(n, np.float64).reshape(-1)
    x = np.asarray(x, np.float64).reshape(-1)
    with np.errstate(all="ignore"):
        out = np.asarray(sp.polygamma(n, x), np.float64)
        near = (x < 0) & (x > -64) & (x != np.floor(x)) & (n >= 1) & (n == np.floor(n)) & (n < 100)
    for i in np.flatnonzero(near):
        k = int(n[i])
        out[i] = (-1.0) ** (k + 1) * float(mpmath.factorial(k)) * _zeta_direct(k + 1, x[i])
    return out.reshape(shape)


# XLA's f32 zeta and polygamma are approximations far from correctly rounded, and its f16 and
# bf16 ones are the f32 ones rounded; the f64 references (XLA's, scipy's, the direct sum) are
# the ones to match, within a bound relative to the result (absolute next to polygamma(0, x)'s
# root). For q far below 0 XLA's zeta loses every digit (polygamma(4, -34996.22): XLA -4e-18,
# the 40-digit sum of the terms 46493.861100884078, xthunk 46493.861100884074, scipy close):
# scipy's value is the reference there, the direct sum above between -64 and 0.
BINARY_SPECIAL = {
    "zeta": (lax.zeta, _zeta_ref, _zeta_inputs),
    "polygamma": (lax.polygamma, _polygamma_ref, _polygamma_inputs),
}


def gen_binary_special(op: str, rng, count: int) -> list:
    fn, ref, inputs = BINARY_SPECIAL[op]
    cases = []
    for d in FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            tol = Rel(1e-12, atol=1e-14) if d == "f64" else Ulp(2)
            cases.append(Case(op, d, inputs(rng, d, shape), fn=fn, tol=tol, wide=True,
                              alt_fn=_ref(ref), expect=(f"chlo.{op}",)))
    return cases


def _text(op: str, d: str, shape) -> str:
    t = "tensor<" + "".join(f"{n}x" for n in shape) + f"{d}>"
    r = "tensor<" + "".join(f"{n}x" for n in shape) + "i1>"
    return (
        "module @m {\n"
        f"  func.func public @main(%arg0: {t}) -> {r} {{\n"
        f"    %0 = chlo.{op} %arg0 : {t} -> {r}\n"
        f"    return %0 : {r}\n"
        "  }\n"
        "}\n"
    )


IS = {"is_inf": np.isinf, "is_neg_inf": np.isneginf, "is_pos_inf": np.isposinf}


def gen_is(op: str, rng, count: int) -> list:
    cases = []
    for d in FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            x = V.draw(rng, d, shape, p_special=0.5)
            f = IS[op]
            cases.append(Case(op, d, [x], text=_text(op, d, shape), tol=Exact(),
                              alt_fn=lambda a, f=f: [f(np.asarray(a, np.float64))],
                              expect=(f"chlo.{op}",)))
    return cases


GENERATORS: dict = {
    "next_after": gen_next_after,
    "square": gen_square,
}
for _op in UNARY:
    GENERATORS[_op] = (lambda op: lambda rng, count: gen_unary(op, rng, count))(_op)
for _op in BINARY_SPECIAL:
    GENERATORS[_op] = (lambda op: lambda rng, count: gen_binary_special(op, rng, count))(_op)
for _op in IS:
    GENERATORS[_op] = (lambda op: lambda rng, count: gen_is(op, rng, count))(_op)
