"""Per-op cases of control flow (while, case, if), optimization_barrier, tuples, gather and
scatter in the forms JAX emits for indexing, `x.at[i]` updates and embedding lookups.

`if` and `tuple`/`get_tuple_element` are never emitted by today's JAX: those cases are
StableHLO text written here, their expected outputs from XLA:CPU compiling that text.
Scatter-add of floats with repeated indices sums in an unspecified order: relative bound
with the magnitude (cases_shape.dot_tol); every other case here is bit-exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import values as V
from cases import Case, Exact
from cases_shape import dot_tol

_MLIR = {"i1": "i1", "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
         "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
         "u8": "ui8", "u16": "ui16", "u32": "ui32", "u64": "ui64"}


def tensor_type(d: str, shape) -> str:
    return "tensor<" + "".join(f"{s}x" for s in shape) + _MLIR[d] + ">"


def gen_while(rng, count):
    cases = []
    for d in ["f32", "f64", "bf16", "i32", "u8", "i64"]:
        for _ in range(count):
            shape = V.rand_shape(rng, max_rank=2, max_elems=16)
            n = np.asarray(rng.integers(-1, 12), np.int32)
            x = V.draw(rng, d, shape, "moderate" if d in V.FLOATS else "any")

            def fn(x, n):
                def body(i, c):
                    v, s = c
                    h = np.asarray(0.5 if x.dtype.kind == "f" else 3).astype(x.dtype)
                    return lax.add(lax.mul(v, h), v), s + i
                return lax.fori_loop(0, n, body, (x, np.int32(0)))

            cases.append(Case("while", d, [x, n], fn=fn, attrs={"trips": int(n)},
                              expect=("stablehlo.while",)))
    return cases


def gen_case(rng, count):
    cases = []
    for d in ["f32", "i32", "f16", "u64"]:
        for _ in range(count):
            shape = V.rand_shape(rng, max_rank=2, max_elems=16)
            i = np.asarray(rng.integers(-2, 5), np.int32)
            x = V.draw(rng, d, shape, "moderate")
            branches = [lambda v: (v, lax.neg(v)), lambda v: (lax.add(v, v), v),
                        lambda v: (lax.mul(v, v), lax.sub(v, v))]
            cases.append(Case("case", d, [i, x], shape=shape, attrs={"index": int(i)},
                              fn=lambda i, v, b=branches: lax.switch(i, b, v),
                              expect=("stablehlo.case",)))
            p = np.asarray(rng.random() < 0.5)
            cases.append(Case("case", d, [p, x], shape=shape, attrs={"cond": bool(p)},
                              fn=lambda p, v: lax.cond(p, lambda a: lax.add(a, a),
                                                       lambda a: lax.neg(a), v),
                              expect=("stablehlo.case",)))
    return cases


IF_TEXT = """module @if_case {{
  func.func public @main(%arg0: tensor<i1>, %arg1: {t}, %arg2: {t}) -> ({t}, {t}) {{
    %0:2 = "stablehlo.if"(%arg0) ({{
      %1 = stablehlo.{op} %arg1, %arg2 : {t}
      stablehlo.return %1, %arg1 : {t}, {t}
    }}, {{
      %1 = stablehlo.maximum %arg1, %arg2 : {t}
      stablehlo.return %arg2, %1 : {t}, {t}
    }}) : (tensor<i1>) -> ({t}, {t})
    return %0#0, %0#1 : {t}, {t}
  }}
}}
"""


def gen_if(rng, count):
    cases = []
    for d in ["f32", "i8", "bf16", "u32", "f64"]:
        for _ in range(count):
            shape = V.rand_shape(rng, max_rank=2)
            p = np.asarray(rng.random() < 0.5)
            a, b = V.draw(rng, d, shape, subnormals=False), V.draw(rng, d, shape, subnormals=False)
            op = "add" if d in V.FLOATS else "xor"
            text = IF_TEXT.format(t=tensor_type(d, shape), op=op)
            cases.append(Case("if", d, [p, a, b], text=text, shape=shape,
                              attrs={"pred": bool(p)}, expect=("stablehlo.if",)))
    return cases


TUPLE_TEXT = """module @tuple_case {{
  func.func public @main(%arg0: {a}, %arg1: {b}) -> ({b}, {a}, {a}) {{
    %0 = stablehlo.tuple %arg0, %arg1 : tuple<{a}, {b}>
    %1 = stablehlo.tuple %0, %arg0 : tuple<tuple<{a}, {b}>, {a}>
    %2 = stablehlo.get_tuple_element %1[0] : (tuple<tuple<{a}, {b}>, {a}>) -> tuple<{a}, {b}>
    %3 = stablehlo.get_tuple_element %2[1] : (tuple<{a}, {b}>) -> {b}
    %4 = stablehlo.get_tuple_element %1[1] : (tuple<tuple<{a}, {b}>, {a}>) -> {a}
    %5 = stablehlo.get_tuple_element %0[0] : (tuple<{a}, {b}>) -> {a}
    return %3, %4, %5 : {b}, {a}, {a}
  }}
}}
"""


def gen_tuple(rng, count):
    cases = []
    for d, e in [("f32", "i32"), ("bf16", "u8"), ("i1", "f64"), ("u64", "f16")]:
        for _ in range(count):
            sa, sb = V.rand_shape(rng, max_rank=2), V.rand_shape(rng, max_rank=2)
            a, b = V.draw(rng, d, sa), V.draw(rng, e, sb)
            text = TUPLE_TEXT.format(a=tensor_type(d, sa), b=tensor_type(e, sb))
            cases.append(Case("tuple", f"{d},{e}", [a, b], text=text,
                              expect=("stablehlo.tuple", "stablehlo.get_tuple_element")))
    return cases


def gen_optimization_barrier(rng, count):
    cases = []
    for d in ["f32", "i16", "bf16", "i1"]:
        for _ in range(count):
            shape = V.rand_shape(rng)
            a, b = V.draw(rng, d, shape), V.draw(rng, d, shape)

            def fn(a, b):
                x, y = lax.optimization_barrier((a, b))
                return y, x

            cases.append(Case("optimization_barrier", d, [a, b], fn=fn,
                              expect=("stablehlo.optimization_barrier",)))
    return cases


GATHER_TYPES = ["f32", "bf16", "i32", "i8", "f64", "u16", "i1", "f16"]


def gen_gather(rng, count):
    """x[i], x[i, :, j], x[idx], x[:, idx], jnp.take, embedding lookups; indices out of range."""
    cases = []
    forms = ["scalar", "two_scalars", "rows", "cols", "take", "embedding", "slice_dyn"]
    for d in GATHER_TYPES:
        for k in range(count * 2):
            form = forms[(k + int(rng.integers(0, len(forms)))) % len(forms)]
            shape = (int(rng.integers(1, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 4)))
            x = V.draw(rng, d, shape)
            it = V.dt(str(rng.choice(["i32", "i64"])))
            r = lambda n, hi: rng.integers(-hi - 2, hi + 2, size=n).astype(it)  # noqa: E731
            if form == "scalar":
                args, fn = [x, np.asarray(r((), shape[0]))], (lambda v, i: v[i])
            elif form == "two_scalars":
                args = [x, np.asarray(r((), shape[0])), np.asarray(r((), shape[2]))]
                fn = lambda v, i, j: v[i, :, j]  # noqa: E731
            elif form == "rows":
                args, fn = [x, r((int(rng.integers(1, 6)),), shape[0])], (lambda v, i: v[i])
            elif form == "cols":
                args, fn = [x, r((2, int(rng.integers(1, 4))), shape[1])], (lambda v, i: v[:, i])
            elif form == "take":
                args = [x, r((int(rng.integers(1, 5)),), shape[2])]
                fn = lambda v, i: jnp.take(v, i, axis=2, mode="clip")  # noqa: E731
            elif form == "embedding":
                emb = V.draw(rng, d, shape[:2])
                ids = rng.integers(0, shape[0], size=(int(rng.integers(1, 4)), 5)).astype(it)
                args, fn = [emb, ids], (lambda e, i: e[i])
            else:
                args = [x, np.asarray(r((), shape[0]))]
                fn = lambda v, i: lax.dynamic_index_in_dim(v, i, 1, keepdims=False)  # noqa: E731
            ops = ("stablehlo.gather|stablehlo.dynamic_slice",)
            cases.append(Case("gather", d, args, fn=fn, shape=np.shape(args[0]),
                              attrs={"form": form, "index": str(np.dtype(it))}, expect=ops))
    return cases


def gen_scatter(rng, count):
    """x.at[i].set/add/mul/min/max (indices out of range are dropped), the gradient of an
    embedding lookup (scatter-add with repeated indices)."""
    cases = []
    modes = ["set", "add", "min", "max", "mul", "set_rows", "add_rows", "grad"]
    for d in GATHER_TYPES:
        for k in range(count * 2):
            mode = modes[(k + int(rng.integers(0, len(modes)))) % len(modes)]
            if d == "i1" and mode not in ("set", "set_rows"):
                mode = "set"
            if mode == "grad" and d not in V.FLOATS:
                mode = "add_rows"
            shape = (int(rng.integers(2, 9)), int(rng.integers(1, 6)))
            kind = "moderate" if mode in ("add_rows", "grad", "mul") else "any"
            x = V.draw(rng, d, shape, kind, subnormals=False)  # XLA:CPU flushes them
            it = V.dt(str(rng.choice(["i32", "i64"])))
            tol, mag = Exact(), False
            if mode in ("set", "add", "min", "max", "mul"):
                i = np.asarray(rng.integers(-shape[0] - 1, shape[0] + 2), it)
                u = V.draw(rng, d, (shape[1],), "moderate" if mode == "mul" else "any",
                           subnormals=False)
                op = {"set": "set", "add": "add", "min": "min", "max": "max",
                      "mul": "multiply"}[mode]
                args = [x, i, u]
                fn = lambda v, i, u, op=op: getattr(v.at[i], op)(u)  # noqa: E731
            elif mode == "set_rows":
                n = int(rng.integers(1, shape[0] + 1))
                i = rng.permutation(shape[0] + 3)[:n].astype(it)  # unique, some out of range
                args = [x, i, V.draw(rng, d, (n, shape[1]))]
                fn = lambda v, i, u: v.at[i].set(u)  # noqa: E731
            elif mode == "add_rows":
                n = int(rng.integers(1, 7))
                i = rng.integers(0, shape[0], size=n).astype(it)  # repeated indices
                args = [x, i, V.draw(rng, d, (n, shape[1]), "moderate")]
                fn = lambda v, i, u: v.at[i].add(u)  # noqa: E731
                if d in V.FLOATS:
                    tol, mag = dot_tol(d, n + 1), True
            else:
                ids = rng.integers(0, shape[0], size=(2, 4)).astype(it)
                w = V.draw(rng, d, (2, 4, shape[1]), "moderate")

                def fn(e, i, w):
                    return jax.grad(lambda e: jnp.sum(e[i] * w).astype(jnp.float32))(e)

                args = [x, ids, w]
                tol, mag = dot_tol(d, 9), True
            if mag and d not in V.FLOATS:
                tol, mag = Exact(), False
            cases.append(Case("scatter", d, args, fn=fn, tol=tol, mag=mag, shape=shape,
                              attrs={"mode": mode, "index": str(np.dtype(it))},
                              expect=("stablehlo.scatter",)))
    return cases


GENERATORS = {
    "while": gen_while,
    "case": gen_case,
    "if": gen_if,
    "tuple": gen_tuple,
    "optimization_barrier": gen_optimization_barrier,
    "gather": gen_gather,
    "scatter": gen_scatter,
}
