"""Per-op cases of the 8-bit floats f8E4M3FN and f8E5M2 (ml_dtypes' float8_e4m3fn and
float8_e5m2): `convert` to and from every float type and an integer type, elementwise ops
(computed in f32 and rounded once to the type) and `dot_general` of f8 operands accumulating
in f32 (JAX's preferred_element_type=float32).

Inputs: every code of the type (f8 operands), or values spread over and beyond the type's
range with the specials (NaN, ±inf, ±0, the largest finite value, the overflow thresholds:
464 and 480 for e4m3fn, 61440 for e5m2, ties between neighbours, subnormals of the f8 type)
for conversions into it. Expected: XLA:CPU's; bit-exact for conversions and for +, -, *, /,
max, min, neg, abs, sqrt, compare (a once-rounded f32 result of exact f8 inputs is the
correctly rounded f8 result, since f32 has more than 2p+2 bits for these operations); within
1 ulp of the type for the transcendental ops (exp, log, tanh: f32 functions are themselves
within an ulp, and the f8 rounding of two nearby f32 values can differ by one step).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from jax import lax
import jax.numpy as jnp

import values as V
from cases import Case, Exact, Rel, Ulp

F8 = V.F8
EDGES = {
    "f8e4m3fn": [448.0, 464.0, 464.0001, 480.0, 500.0, 2.0**-9, 2.0**-10, 3 * 2.0**-10, 1.0625,
                 1.1875, 240.0, 1e30],
    "f8e5m2": [57344.0, 61439.0, 61440.0, 65504.0, 2.0**-16, 2.0**-17, 3 * 2.0**-17, 1.125,
               1.375, 1e30],
}


def every_code(d: str, shape, rng) -> np.ndarray:
    codes = rng.integers(0, 256, int(np.prod(shape, dtype=np.int64))).astype(np.uint8)
    return codes.view(V.dt(d)).reshape(shape)


def _wide_values(rng, d: str, n: int) -> np.ndarray:
    e = rng.uniform(-20 if d == "f8e4m3fn" else -28, 10 if d == "f8e4m3fn" else 17, n)
    vals = rng.choice([-1.0, 1.0], n) * np.exp2(e)
    sp = np.asarray(EDGES[d] + [np.nan, np.inf, -np.inf, 0.0, -0.0])
    sp = np.concatenate([sp, -sp])
    pick = rng.random(n) < 0.3
    return np.where(pick, sp[rng.integers(0, len(sp), n)], vals)


def _to(t):
    return lambda x: lax.convert_element_type(x, V.dt(t))


def gen_convert(rng, count: int) -> list:
    cases = []
    for d in F8:
        for _ in range(count):
            shape = V.rand_shape(rng)
            n = int(np.prod(shape, dtype=np.int64))
            # Into the 8-bit type: from f64, f32, f16, bf16 (no f32 subnormals, which XLA:CPU
            # flushes), from an integer type, from the other 8-bit type.
            for src in ["f64", "f32", "f16", "bf16"]:
                with np.errstate(over="ignore"):
                    x = _wide_values(rng, d, n).astype(V.dt(src)).reshape(shape)
                if src == "f32":
                    tiny = np.finfo(np.float32).tiny
                    x = np.where(np.abs(x) < tiny, np.float32(0), x).astype(np.float32)
                cases.append(Case("f8_convert", d, [x], fn=_to(d), attrs={"from": src},
                                  expect=("stablehlo.convert",)))
            x = rng.integers(-600, 600, shape).astype(np.int32)
            cases.append(Case("f8_convert", d, [x], fn=_to(d), attrs={"from": "i32"},
                              expect=("stablehlo.convert",)))
            other = [o for o in F8 if o != d][0]
            cases.append(Case("f8_convert", d, [every_code(other, shape, rng)], fn=_to(d),
                              attrs={"from": other}, expect=("stablehlo.convert",)))
            # Out of the 8-bit type: exact into every float type; truncated into i32.
            for dst in ["f64", "f32", "f16", "bf16", "i32"]:
                x = every_code(d, shape, rng)
                if dst == "i32":
                    x = np.where(np.isfinite(x.astype(np.float32)), x, np.zeros_like(x))
                cases.append(Case("f8_convert", dst, [x], fn=_to(dst), attrs={"from": d},
                                  expect=("stablehlo.convert",)))
    return cases


# name: (arity, jax function, tolerance)
OPS = {
    "add": (2, lax.add, Exact()),
    "subtract": (2, lax.sub, Exact()),
    "multiply": (2, lax.mul, Exact()),
    "divide": (2, lax.div, Exact()),
    "maximum": (2, lax.max, Exact()),
    "minimum": (2, lax.min, Exact()),
    "negate": (1, lax.neg, Exact()),
    "abs": (1, lax.abs, Exact()),
    "sqrt": (1, lax.sqrt, Exact()),
    "exponential": (1, lax.exp, Ulp(1)),
    "log": (1, lax.log, Ulp(1)),
    "tanh": (1, lax.tanh, Ulp(1)),
}


def _ref(fn):
    """The op on the inputs widened to f64, rounded once to the type (ml_dtypes): accepted
    beside XLA's (XLA may compute through f16 and round twice)."""
    def ref(*args):
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*[np.asarray(a, np.float64) for a in args]))
            return [out.astype(np.asarray(args[0]).dtype)]
    return ref


NUMPY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide, "sqrt": np.sqrt, "exponential": np.exp, "log": np.log,
         "tanh": np.tanh}


def gen_elementwise(op: str, rng, count: int) -> list:
    arity, fn, tol = OPS[op]
    cases = []
    for d in F8:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = [every_code(d, shape, rng) for _ in range(arity)]
            alt = _ref(NUMPY[op]) if op in NUMPY else None
            cases.append(Case(f"f8_{op}", d, args, fn=fn, tol=tol, alt_fn=alt,
                              expect=(f"stablehlo.{op}",)))
    return cases


def gen_compare(rng, count: int) -> list:
    cases = []
    for d in F8:
        for direction, fn in (("LT", lax.lt), ("EQ", lax.eq), ("GE", lax.ge)):
            for _ in range(count):
                shape = V.rand_shape(rng)
                x, y = every_code(d, shape, rng), every_code(d, shape, rng)
                y = np.where(rng.random(shape) < 0.3, x, y).astype(x.dtype)
                cases.append(Case("f8_compare", d, [x, y], fn=fn, attrs={"direction": direction},
                                  expect=("stablehlo.compare",)))
    return cases


def gen_dot(rng, count: int) -> list:
    """f8 x f8 -> f32 dot_general (the FP8 training matmul): exact products summed in f32;
    a bound of k·eps(f32) of the largest |x|·|y| sum (XLA sums in another order)."""
    cases = []
    eps = float(np.finfo(np.float32).eps)
    for d in F8:
        for _ in range(count):
            m, k, n = (int(v) for v in rng.integers(1, 9, 3))
            x = rng.standard_normal((m, k)).astype(V.dt(d))
            y = rng.standard_normal((k, n)).astype(V.dt(d))
            fn = lambda a, b: lax.dot_general(  # noqa: E731
                a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
            cases.append(Case("f8_dot_general", d, [x, y], fn=fn,
                              tol=Rel(4 * k * eps, atol_of_max=4 * k * eps),
                              expect=("stablehlo.dot_general",)))
    return cases


GENERATORS: dict = {
    "f8_convert": gen_convert,
    "f8_compare": gen_compare,
    "f8_dot_general": gen_dot,
}
for _op in OPS:
    GENERATORS[f"f8_{_op}"] = (lambda op: lambda rng, count: gen_elementwise(op, rng, count))(_op)
