"""The per-op StableHLO test set: cases lowered by JAX, expected outputs from JAX's CPU backend.

A `Case` is a JAX function (or, for the few ops JAX never emits, a StableHLO text) with its
input arrays and the tolerance of its comparison. `lower(case)` gives the module text
(`jax.jit(f, keep_unused=True).lower(*args).as_text()`, so main's parameters are the inputs in
order, arg0, arg1, ...); `expected(case, text)` runs it on JAX's CPU backend and returns the
outputs (in main's result order, JAX's flattened pytree order) and the acceptable alternatives.

Where XLA:CPU departs from the spec, the IEEE result is accepted beside XLA's:
* XLA:CPU flushes subnormal inputs and results to zero. For elementwise ops on f16/bf16/f32,
  `wide=True` also evaluates the op on the inputs widened to f64 and rounds the result with
  numpy (round to nearest even, subnormals kept): for +,-,*,/,sqrt that double rounding is
  innocuous (53 >= 2p+2 bits), so it is the correctly rounded IEEE result; for the
  transcendental ops it is a reference more accurate than XLA's own f32 functions.
  f64 draws subnormals only for ops that do no arithmetic (data movement, bitcast).
* XLA rounds f64 -> f16/bf16 and integers -> bf16 through f32 (double rounding): the direct,
  correctly rounded numpy/ml_dtypes conversion is accepted too.
* XLA:CPU contracts a*b+c into an FMA: no bit-exact case chains a multiply into an add.

Comparison per op (see compare.py): bit-exact where the spec's result is exact (integer ops,
comparisons, data movement, convert, bitcast, negate, abs, sign, min/max, floor/ceil/round,
+,-,*,/,sqrt,remainder on floats, which IEEE rounds correctly); `ULP` bounds for the
transcendental ops (TRANSCENDENTAL_ULP below); a relative bound scaled by the reduction
length for float dots and sums (see cases_shape.py). Integer division by zero and
INT_MIN / -1, float -> int conversion out of range, integer power with a negative exponent:
the spec leaves these implementation-defined; the test expects XLA's values (x/0 = -1 for
signed, all ones for unsigned, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0, conversions
saturate with NaN -> 0), which are the results a JAX user sees.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from typing import Callable, Optional

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import compare as cmp  # noqa: E402
import values as V  # noqa: E402
from compare import Exact, Rel, Ulp  # noqa: E402,F401


@dataclasses.dataclass
class Case:
    op: str
    dtype: str
    args: list
    fn: Optional[Callable] = None
    text: Optional[str] = None
    patch: Optional[Callable[[str], str]] = None
    tol: object = dataclasses.field(default_factory=Exact)
    attrs: dict = dataclasses.field(default_factory=dict)
    wide: bool = False
    alt_fn: Optional[Callable] = None
    mag: bool = False
    expect: tuple = ()
    shape: Optional[tuple] = None
    tree: object = None  # the treedef of fn's arguments when they are a pytree of args
    # Applied to XLA's outputs before the comparison, where XLA:CPU returns another type than
    # the one the program declares (its rng_bit_generator's float results come back as the
    # unsigned integers of their width): a view of the same bits, never a recomputation.
    xla_view: Optional[Callable[[list], list]] = None
    # For ops whose values the spec leaves to the implementation (`rng`): no XLA run (XLA:CPU
    # aborts on integer `rng`); the outputs must have the types and shapes of `stat_like`
    # (arrays), and `stat(outs)` returns None or what is wrong (a statistical test).
    stat: Optional[Callable[[list], Optional[str]]] = None
    stat_like: tuple = ()

    def label(self) -> str:
        shape = self.shape if self.shape is not None else (
            np.shape(self.args[0]) if self.args else ())
        a = " ".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op} {self.dtype} {V.shape_str(shape)}{' ' + a if a else ''}"

    def tols(self, n: int) -> list:
        return list(self.tol) if isinstance(self.tol, (list, tuple)) else [self.tol] * n


@dataclasses.dataclass
class Expected:
    outs: list
    alts: list  # per output, a list of alternative acceptable arrays
    mags: list  # per output, a magnitude array or None


_CPU = None


def cpu_backend():
    global _CPU
    if _CPU is None:
        from jax.extend import backend

        _CPU = backend.get_backend("cpu")
    return _CPU


def run_text(text: str, args) -> list:
    """Compile StableHLO text with XLA:CPU (jaxlib) and run it on args."""
    b = cpu_backend()
    from jaxlib import _jax

    exe = b.compile_and_load(text, b.devices()[:1], _jax.CompileOptions())
    bufs = [jax.device_put(np.asarray(a), b.devices()[0]) for a in args]
    return [np.asarray(o) for o in exe.execute(bufs)]


def main_params(text: str) -> list:
    """The types of main's parameters, e.g. ["tensor<2x3xf32>"]."""
    m = re.search(r"func\.func public @main\((.*?)\)\s*->", text, re.S)
    if m is None:
        m = re.search(r"func\.func public @main\((.*?)\)\s*\{", text, re.S)
    return re.findall(r"%arg\d+: (tensor<[^>]*>)", m.group(1)) if m else []


def call_args(case: Case, args) -> list:
    """fn's arguments: the flat inputs, or the pytree they are the leaves of."""
    return list(jax.tree_util.tree_unflatten(case.tree, args)) if case.tree else list(args)


def lower(case: Case, args=None) -> str:
    args = case.args if args is None else args
    if case.text is not None:
        text = case.text
    else:
        text = jax.jit(case.fn, keep_unused=True).lower(*call_args(case, args)).as_text()
    if case.patch is not None:
        text = case.patch(text)
    params = main_params(text)
    if len(params) != len(args):
        raise AssertionError(f"{case.label()}: main has {len(params)} parameters, the case "
                             f"{len(args)} inputs (JAX dropped some)")
    for op in case.expect:  # "a|b": either op
        if not any(re.search(r"\b" + re.escape(o) + r"\b", text) for o in op.split("|")):
            raise AssertionError(f"{case.label()}: the lowered module has no {op}")
    return text


def export_bytes(case: Case) -> bytes:
    """`jax.export`'s serialization of case.fn for the case's argument shapes (needs the
    `flatbuffers` package): a StableHLO portable artifact."""
    from jax import export

    specs = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), call_args(case, case.args))
    return bytes(export.export(jax.jit(case.fn, keep_unused=True))(*specs).serialize())


def widen(a):
    a = np.asarray(a)
    if a.dtype in (V.DTYPES["f16"], V.DTYPES["bf16"], V.DTYPES["f32"]):
        return a.astype(np.float64)
    return a


def expected(case: Case, text: str) -> Expected:
    if case.stat is not None:
        outs = [np.asarray(o) for o in case.stat_like]
        return Expected(outs, [[] for _ in outs], [None] * len(outs))
    if case.fn is not None and case.patch is None and case.text is None:
        outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(
            jax.jit(case.fn, keep_unused=True)(*call_args(case, case.args)))]
    else:
        outs = run_text(text, case.args)
    if case.xla_view is not None:
        outs = [np.asarray(o) for o in case.xla_view(outs)]
    alts = [[] for _ in outs]
    if case.wide and any(np.asarray(a).dtype != widen(a).dtype for a in case.args):
        wargs = [widen(a) for a in case.args]
        wide = run_text(lower(case, wargs), wargs)
        for i, (w, o) in enumerate(zip(wide, outs)):
            with np.errstate(over="ignore", invalid="ignore"):
                alts[i].append(np.asarray(w).astype(o.dtype))
    if case.alt_fn is not None:
        for i, a in enumerate(case.alt_fn(*case.args)):
            alts[i].append(np.asarray(a))
    mags = [None] * len(outs)
    if case.mag:
        margs = [np.abs(np.asarray(a, np.float64)) if cmp.is_float(np.asarray(a).dtype)
                 else a for a in case.args]
        m = run_text(lower(case, margs), margs)
        mags = [np.asarray(x, np.float64) for x in m]
    return Expected(outs, alts, mags)


# ----------------------------------------------------------------------------- patches


def replace_op(old: str, new: str) -> Callable[[str], str]:
    def patch(text: str) -> str:
        assert f"stablehlo.{old}" in text
        return re.sub(rf"stablehlo\.{old}\b", f"stablehlo.{new}", text)

    return patch


def replace_compare_type(new: str) -> Callable[[str], str]:
    def patch(text: str) -> str:
        out, n = re.subn(r"(stablehlo\.compare\s+\w+,[^:]*,\s*)(FLOAT)\b", rf"\g<1>{new}", text)
        assert n, text
        return out

    return patch


def retype_results(old: str, new: str) -> Callable[[str], str]:
    """Element type old -> new in every tensor type: for a convert JAX spells differently."""
    def patch(text: str) -> str:
        return re.sub(rf"(tensor<(?:\d+x)*){old}>", rf"\g<1>{new}>", text)

    return patch


# ----------------------------------------------------------------------------- elementwise

# ULP bounds of the transcendental ops against the better of XLA's result and the widened
# reference (for f64: XLA's result alone): the implementation's own error (CUDA's and
# ROCm's documented bounds are 1-4 ulp for these in f32) plus the reference's.
TRANSCENDENTAL_ULP = {"f16": 2, "bf16": 2, "f32": 4, "f64": 4}
ULP_EXTRA = {"tan": 4, "power": 4, "atan2": 2}


def _ulp(op: str, d: str) -> Ulp:
    return Ulp(TRANSCENDENTAL_ULP[d] + (ULP_EXTRA.get(op, 0) if d in ("f32", "f64") else 0))


U, B = "unary", "binary"
# name: (arity, function, dtypes, exact?, input kind)
ELEMENTWISE = {
    "abs": (U, lax.abs, V.FLOATS + V.SINTS, True, "any"),
    "add": (B, lax.add, V.FLOATS + V.INTS, True, "any"),
    "and": (B, lax.bitwise_and, ["i1"] + V.INTS, True, "any"),
    "atan2": (B, lax.atan2, V.FLOATS, False, "any"),
    "cbrt": (U, lax.cbrt, V.FLOATS, False, "any"),
    "ceil": (U, lax.ceil, V.FLOATS, True, "any"),
    "count_leading_zeros": (U, lax.clz, V.INTS, True, "any"),
    "cosine": (U, lax.cos, V.FLOATS, False, "trig"),
    "divide": (B, lax.div, V.FLOATS + V.INTS, True, "any"),
    "exponential": (U, lax.exp, V.FLOATS, False, "any"),
    "exponential_minus_one": (U, lax.expm1, V.FLOATS, False, "any"),
    "floor": (U, lax.floor, V.FLOATS, True, "any"),
    "is_finite": (U, lax.is_finite, V.FLOATS, True, "any"),
    "log": (U, lax.log, V.FLOATS, False, "any"),
    "log_plus_one": (U, lax.log1p, V.FLOATS, False, "any"),
    "maximum": (B, lax.max, ["i1"] + V.INTS + V.FLOATS, True, "any"),
    "minimum": (B, lax.min, ["i1"] + V.INTS + V.FLOATS, True, "any"),
    "multiply": (B, lax.mul, V.FLOATS + V.INTS, True, "any"),
    "negate": (U, lax.neg, V.FLOATS + V.INTS, True, "any"),
    "not": (U, lax.bitwise_not, ["i1"] + V.INTS, True, "any"),
    "or": (B, lax.bitwise_or, ["i1"] + V.INTS, True, "any"),
    "popcnt": (U, lax.population_count, V.INTS, True, "any"),
    "power": (B, lax.pow, V.FLOATS, False, "any"),
    "remainder": (B, lax.rem, V.FLOATS + V.INTS, True, "any"),
    "round_nearest_afz": (U, lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
                          V.FLOATS, True, "any"),
    "round_nearest_even": (U, lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
                           V.FLOATS, True, "any"),
    "rsqrt": (U, lax.rsqrt, V.FLOATS, False, "any"),
    "shift_left": (B, lax.shift_left, V.INTS, True, "shift"),
    "shift_right_arithmetic": (B, lax.shift_right_arithmetic, V.INTS, True, "shift"),
    "shift_right_logical": (B, lax.shift_right_logical, V.INTS, True, "shift"),
    "sign": (U, lax.sign, V.FLOATS + V.SINTS, True, "any"),
    "sine": (U, lax.sin, V.FLOATS, False, "trig"),
    "sqrt": (U, lax.sqrt, V.FLOATS, True, "any"),
    "subtract": (B, lax.sub, V.FLOATS + V.INTS, True, "any"),
    "tan": (U, lax.tan, V.FLOATS, False, "trig"),
    "tanh": (U, lax.tanh, V.FLOATS, False, "any"),
    "xor": (B, lax.bitwise_xor, ["i1"] + V.INTS, True, "any"),
}


# numpy's (glibc's) functions in f64, rounded to the case's type: a further accepted reference
# for the float ops, since XLA:CPU's own f64 functions are off by up to ~120 ulp (log1p near
# -0.4) and it flushes subnormal results; for the exact ops, numpy is IEEE (no flush).
NUMPY_REF = {
    "cbrt": np.cbrt, "cosine": np.cos, "exponential": np.exp, "exponential_minus_one": np.expm1,
    "log": np.log, "log_plus_one": np.log1p, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sine": np.sin, "tan": np.tan, "tanh": np.tanh, "atan2": np.arctan2, "power": np.power,
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "sqrt": np.sqrt, "remainder": np.fmod,
}


def numpy_ref(op: str):
    f = NUMPY_REF[op]

    def ref(*args):
        with np.errstate(all="ignore"):
            out = f(*[np.asarray(a, np.float64) for a in args])
            return [np.asarray(out).astype(np.asarray(args[0]).dtype)]

    return ref


def _inputs(rng, d: str, shape, kind: str, arity: int, subnormals: bool) -> list:
    if kind == "shift":
        return [V.draw(rng, d, shape), V.shift_amounts(rng, d, shape)]
    return [V.draw(rng, d, shape, kind, subnormals=subnormals) for _ in range(arity)]


def gen_elementwise(op: str, rng, count: int) -> list:
    arity, fn, dtypes, exact, kind = ELEMENTWISE[op]
    n_args = 1 if arity == U else 2
    cases = []
    for d in dtypes:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = _inputs(rng, d, shape, kind, n_args, subnormals=d != "f64")
            tol = Exact() if exact else _ulp(op, d)
            alt = numpy_ref(op) if d in V.FLOATS and op in NUMPY_REF else None
            cases.append(Case(op, d, args, fn=fn, tol=tol, wide=d in V.FLOATS, alt_fn=alt,
                              expect=(f"stablehlo.{op}",)))
    return cases


def gen_logistic(rng, count: int) -> list:
    """JAX spells logistic as exp and divide: lower exp and rename it."""
    cases = []
    for d in V.FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            args = [V.draw(rng, d, shape, subnormals=d != "f64")]
            cases.append(Case("logistic", d, args, fn=lax.exp,
                              patch=replace_op("exponential", "logistic"), tol=_ulp("logistic", d),
                              wide=True, alt_fn=numpy_ref("logistic"),
                              expect=("stablehlo.logistic",), attrs={"via": "patch"}))
    return cases


def gen_int_power(rng, count: int) -> list:
    """JAX has no integer power op (it multiplies): lower multiply and rename it."""
    cases = []
    for d in V.INTS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            base = V.draw(rng, d, shape)
            lo = -3 if d in V.SINTS else 0
            exp = rng.integers(lo, V.bits(d) + 3, size=shape).astype(V.dt(d))
            cases.append(Case("power", d, [base, exp], fn=lax.mul,
                              patch=replace_op("multiply", "power"),
                              alt_fn=_wrapped_int_power,
                              expect=("stablehlo.power",), attrs={"via": "patch"}))
    return cases


def _wrapped_int_power(base, exp):
    """The spec's integer power for exponents XLA:CPU reads modulo 64: the exact power wrapped
    to the type's width (negative exponents as XLA gives them: 1 for a base of 1, ±1 by parity
    for -1, else 0)."""
    b = np.asarray(base)
    e = np.asarray(exp)
    bits = b.dtype.itemsize * 8
    signed = np.issubdtype(b.dtype, np.signedinteger)
    out = np.empty(b.shape, b.dtype)
    for i, (x, n) in enumerate(zip(b.flat, e.flat)):
        x, n = int(x), int(n)
        if n < 0:
            r = 1 if x == 1 else (1 if n % 2 == 0 else -1) if x == -1 else 0
        else:
            r = pow(x, n, 1 << bits)
        r %= 1 << bits
        if signed and r >= 1 << (bits - 1):
            r -= 1 << bits
        out.flat[i] = r
    return [out]


def gen_bool_arith(op: str, via: str, fn, rng, count: int) -> list:
    """add (logical or) and multiply (logical and) of i1, which JAX refuses: renamed or/and."""
    cases = []
    for _ in range(count):
        shape = V.rand_shape(rng)
        args = [V.draw(rng, "i1", shape), V.draw(rng, "i1", shape)]
        cases.append(Case(op, "i1", args, fn=fn, patch=replace_op(via, op),
                          expect=(f"stablehlo.{op}",), attrs={"via": "patch"}))
    return cases


DIRECTIONS = {"EQ": lax.eq, "NE": lax.ne, "GE": lax.ge, "GT": lax.gt, "LE": lax.le, "LT": lax.lt}


def gen_compare(rng, count: int) -> list:
    cases = []
    for d in V.ALL:
        ctype = "FLOAT" if d in V.FLOATS else "SIGNED" if d in V.SINTS else "UNSIGNED"
        types = [ctype, "TOTALORDER"] if d in V.FLOATS else [ctype]
        for direction, fn in DIRECTIONS.items():
            for t in types:
                for _ in range(count):
                    shape = V.rand_shape(rng)
                    a = V.draw(rng, d, shape, subnormals=d != "f64")
                    b = V.draw(rng, d, shape, subnormals=d != "f64")
                    if a.size:
                        b.flat[: a.size // 3] = a.flat[: a.size // 3]  # ties
                    patch = replace_compare_type("TOTALORDER") if t == "TOTALORDER" else None
                    cases.append(Case("compare", d, [a, b], fn=fn, patch=patch,
                                      wide=t == "FLOAT", attrs={"dir": direction, "type": t},
                                      expect=("stablehlo.compare",)))
    return cases


def gen_select(rng, count: int) -> list:
    cases = []
    for d in V.ALL:
        for _ in range(count):
            shape = V.rand_shape(rng)
            scalar_pred = rng.random() < 0.3
            p = V.draw(rng, "i1", () if scalar_pred else shape)
            a, b = V.draw(rng, d, shape), V.draw(rng, d, shape)
            cases.append(Case("select", d, [p, a, b], fn=lax.select, shape=shape,
                              attrs={"pred": "scalar" if scalar_pred else "tensor"},
                              expect=("stablehlo.select",)))
    return cases


def gen_clamp(rng, count: int) -> list:
    cases = []
    for d in V.INTS + V.FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng)
            scalar = rng.random() < 0.4
            bshape = () if scalar else shape
            sub = d != "f64"
            lo, hi = V.draw(rng, d, bshape, subnormals=sub), V.draw(rng, d, bshape, subnormals=sub)
            x = V.draw(rng, d, shape, subnormals=sub)
            cases.append(Case("clamp", d, [lo, x, hi], fn=lax.clamp, shape=shape, wide=True,
                              attrs={"bounds": "scalar" if scalar else "tensor"},
                              expect=("stablehlo.clamp",)))
    return cases


def _numpy_convert(to: np.dtype):
    def ref(x):
        with np.errstate(over="ignore", invalid="ignore"):
            if to == np.bool_:
                return [np.asarray(x).astype(np.float64) != 0]
            return [np.asarray(x).astype(to)]

    return ref


def gen_convert(rng, count: int) -> list:
    """convert between every pair of types (JAX spells x -> i1 as x != 0: patched)."""
    cases = []
    for src in V.ALL:
        for dst in V.ALL:
            if src == dst:
                continue
            for _ in range(count):
                shape = V.rand_shape(rng)
                x = V.draw(rng, src, shape, subnormals=True)
                to = V.dt(dst)
                patch, fn, alt = None, (lambda a, to=to: lax.convert_element_type(a, to)), None
                if dst == "i1":
                    via = "i8" if src != "i8" else "u8"
                    mlir_via = {"i8": "i8", "u8": "ui8"}[via]
                    fn = (lambda a, t=V.dt(via): lax.convert_element_type(a, t))
                    patch = retype_results(mlir_via, "i1")
                if (src in V.FLOATS and (dst in V.FLOATS or dst == "i1")) or (
                        src in V.INTS and dst in V.FLOATS):
                    alt = _numpy_convert(to)
                cases.append(Case("convert", f"{src}->{dst}", [x], fn=fn, patch=patch,
                                  alt_fn=alt, expect=("stablehlo.convert",)))
    return cases


def gen_bitcast(rng, count: int) -> list:
    names = [d for d in V.ALL if d != "i1"]
    cases = []
    for src in names:
        for dst in names:
            ws, wd = V.bits(src), V.bits(dst)
            if src == dst:
                continue
            for _ in range(count):
                shape = list(V.rand_shape(rng, max_rank=2))
                if wd > ws:
                    shape.append(wd // ws)
                x = V.draw(rng, src, tuple(shape))
                to = V.dt(dst)
                cases.append(Case("bitcast_convert", f"{src}->{dst}", [x],
                                  fn=lambda a, to=to: lax.bitcast_convert_type(a, to),
                                  expect=("stablehlo.bitcast_convert",)))
    return cases


# (exponent bits, mantissa bits, bit width) of each float type.
_FORMATS = {"f16": (5, 10, 16), "bf16": (8, 7, 16), "f32": (8, 23, 32), "f64": (11, 52, 64)}


def gen_reduce_precision(rng, count: int) -> list:
    """reduce_precision to random formats (narrower and wider than the type, no mantissa
    bit, one exponent bit, FP8's), on values that include exact ties at the cut."""
    cases = []
    for d in V.FLOATS:
        se, sm, nbits = _FORMATS[d]
        ut = np.dtype(f"uint{nbits}")
        for _ in range(count):
            shape = V.rand_shape(rng)
            fmts = [(5, 2), (4, 3), (2, 0), (1, 3), (se, sm), (11, 52), (8, 7), (5, 10)]
            e = int(rng.integers(1, 12)) if rng.random() < 0.5 else fmts[rng.integers(0, len(fmts))][0]
            m = int(rng.integers(0, 53)) if rng.random() < 0.5 else fmts[rng.integers(0, len(fmts))][1]
            x = V.draw(rng, d, shape)
            if m < sm:
                # Exact ties and their neighbours: the bits below the cut set to 100..0 (+-1).
                n = int(np.prod(shape, dtype=np.int64))
                b = np.array(x, copy=True).reshape(-1).view(ut)
                cut = sm - m
                half = np.asarray(1 << (cut - 1), ut)
                low = np.asarray((1 << cut) - 1, ut)
                tie = (b & ~low) | half
                delta = rng.integers(-1, 2, n).astype(np.int64)
                moved = (tie.astype(np.int64) + delta).astype(ut) if nbits < 64 else tie
                pick = rng.random(n) < 0.4
                b = np.where(pick, moved, b).astype(ut)
                x = b.view(x.dtype).reshape(shape)
            fn = (lambda e, m: lambda a: lax.reduce_precision(a, exponent_bits=e,
                                                            mantissa_bits=m))(e, m)
            cases.append(Case("reduce_precision", d, [x], fn=fn, tol=Exact(),
                              attrs={"format": f"e{e}m{m}"},
                              expect=("stablehlo.reduce_precision",)))
    return cases


def gen_iota(rng, count: int) -> list:
    cases = []
    for d in V.INTS + V.FLOATS:
        for _ in range(count):
            shape = V.rand_shape(rng, allow_empty=True)
            if not shape:
                shape = (int(rng.integers(1, 9)),)
            dim = int(rng.integers(0, len(shape)))
            t = V.dt(d)
            cases.append(Case("iota", d, [],
                              fn=lambda t=t, s=shape, k=dim: lax.broadcasted_iota(t, s, k),
                              shape=shape, attrs={"dim": dim}, expect=("stablehlo.iota",)))
    return cases


def gen_constant(rng, count: int) -> list:
    """Constants in the forms JAX prints: splats, lists with specials, hex blobs, bools."""
    cases = []
    for d in V.ALL:
        for i in range(count):
            shape = V.rand_shape(rng, max_rank=2, allow_empty=False)
            form = ["splat", "list", "big"][i % 3]
            if form == "big":
                shape = (int(rng.integers(17, 40)), 8)
            sub = d != "f64"
            c = V.draw(rng, d, shape, subnormals=sub)
            if form == "splat":
                c = np.full(shape, V.draw(rng, d, (), subnormals=sub), V.dt(d))
            x = V.draw(rng, d, shape, subnormals=sub)
            op = lax.add if d in V.FLOATS else lax.bitwise_xor

            def fn(a, c=c, op=op):
                return (jnp.asarray(c), op(a, jnp.asarray(c).astype(a.dtype)))

            cases.append(Case("constant", d, [x], fn=fn, attrs={"form": form}, wide=True,
                              expect=("stablehlo.constant",)))
    return cases


GENERATORS: dict = {
    "logistic": gen_logistic,
    "compare": gen_compare,
    "select": gen_select,
    "clamp": gen_clamp,
    "convert": gen_convert,
    "bitcast_convert": gen_bitcast,
    "iota": gen_iota,
    "reduce_precision": gen_reduce_precision,
    "constant": gen_constant,
}
for _op in ELEMENTWISE:
    GENERATORS[_op] = (lambda op: lambda rng, count: gen_elementwise(op, rng, count))(_op)
for _op, _via, _fn in [("add", "or", lax.bitwise_or), ("multiply", "and", lax.bitwise_and)]:
    GENERATORS[_op] = (lambda g, op, via, fn: lambda rng, count: g(rng, count)
                       + gen_bool_arith(op, via, fn, rng, count))(GENERATORS[_op], _op, _via, _fn)
_float_power = GENERATORS["power"]
GENERATORS["power"] = lambda rng, count: _float_power(rng, count) + gen_int_power(rng, count)


def all_ops() -> list:
    import cases_chlo
    import cases_complex
    import cases_ctrl
    import cases_f8
    import cases_fft
    import cases_linalg
    import cases_misc
    import cases_norm
    import cases_rng
    import cases_shape
    import cases_sort
    import cases_window

    ops = dict(GENERATORS)
    ops.update(cases_chlo.GENERATORS)
    ops.update(cases_complex.GENERATORS)
    ops.update(cases_fft.GENERATORS)
    ops.update(cases_f8.GENERATORS)
    ops.update(cases_shape.GENERATORS)
    ops.update(cases_ctrl.GENERATORS)
    ops.update(cases_norm.GENERATORS)
    ops.update(cases_linalg.GENERATORS)
    ops.update(cases_misc.GENERATORS)
    ops.update(cases_rng.GENERATORS)
    ops.update(cases_sort.GENERATORS)
    ops.update(cases_window.GENERATORS)
    return ops


def generate(seed: int, count: int, pattern: Optional[str] = None) -> list:
    """Every op's cases (`count` random ones per op and type), for the ops matching pattern
    (a regular expression searched in the op name). One op's cases do not depend on which
    other ops are selected."""
    out = []
    for op, gen in sorted(all_ops().items()):
        if pattern and not re.search(pattern, op):
            continue
        rng = np.random.default_rng([seed, zlib.crc32(op.encode())])
        out.extend(gen(rng, count))
    return out
