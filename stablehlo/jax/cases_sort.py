"""Per-op cases of `sort` and `chlo.top_k`, bit-exact.

`sort`: `jnp.sort` and `jnp.argsort` (stable; JAX's comparator maps -0 to +0 and every NaN
to +NaN, then compares TOTALORDER, so -0/+0 and NaNs of either sign keep their order and
their bits), `lax.sort` of one to three operands with `num_keys` 1 or 2 (the `and`/`or`
chain of a multi-key comparator), descending through a negated comparator written as
`lax.sort` of the keys negated back (`-jnp.sort(-x)` for ints would wrap: a `GT` comparator
text instead, JAX's own text with LT renamed to GT), unstable (`is_stable = false`; stable
results are accepted: the case's keys are distinct where instability could show), sorting
along any dimension, rows of length 0, 1, short (a thread per row) and long (merged).
`top_k`: JAX's `lax.top_k`, lowered to `chlo.top_k`: the k largest along the last
dimension, largest first, +NaN above +inf, +0 above -0, lower index first on ties.
Keys draw no subnormals: XLA:CPU compares them flushed to zero, unlike the spec.
"""

from __future__ import annotations

import re

import jax.numpy as jnp
import numpy as np
from jax import lax

import values as V
from cases import Case

SORT_TYPES = ["f32", "bf16", "f16", "f64", "i32", "i8", "u8", "u32", "i64", "u64", "i16", "u16",
              "i1"]


def _shape(rng, long: bool):
    """A shape of rank 1..3 and a dimension to sort along; `long` rows are merged (by a thread
    per row up to 512, a block per row for 700, a kernel per pass for a few rows of 4,100)."""
    rank = int(rng.integers(1, 4))
    dims = [int(rng.choice([1, 2, 3, 5])) for _ in range(rank)]
    dim = int(rng.integers(0, rank))
    sizes = [20, 33, 64, 100, 700, 4100] if long else [0, 1, 2, 7, 16]
    dims[dim] = int(rng.choice(sizes))
    return tuple(dims), dim


def _keys(rng, d, shape):
    """Values with repeats (so stability shows) and the type's specials; no subnormals:
    XLA:CPU compares with them flushed to zero (equal to ±0), the spec does not."""
    x = V.draw(rng, d, shape, subnormals=False)
    if x.size and rng.random() < 0.5:
        pool = V.draw(rng, d, (4,), subnormals=False)
        x = np.where(rng.random(shape) < 0.5, pool[rng.integers(0, 4, shape)], x).astype(x.dtype)
    return x


def _descending(text: str) -> str:
    """JAX's sort comparator with its last LT made GT: a descending sort."""
    m = list(re.finditer(r"compare\s+LT", text))
    if not m:
        return text
    last = m[-1]
    return text[:last.start()] + last.group(0).replace("LT", "GT") + text[last.end():]


def _unstable(text: str) -> str:
    return text.replace("is_stable = true", "is_stable = false")


def gen_sort(rng, count):
    cases = []
    for d in SORT_TYPES:
        for k in range(count * 2):
            long = k % 2 == 1
            shape, dim = _shape(rng, long)
            x = _keys(rng, d, shape)
            form = ["sort", "argsort", "two_keys", "three", "descending", "unstable"][
                (k + int(rng.integers(0, 6))) % 6]
            if form == "unstable" and (d == "i1" or (d in ("i8", "u8") and shape[dim] > 256)):
                form = "sort"  # no distinct keys for a row this long
            attrs = {"form": form, "dim": dim}
            expect = ("stablehlo.sort",)
            if form == "sort":
                cases.append(Case("sort", d, [x], fn=lambda v, a=dim: jnp.sort(v, axis=a),
                                  attrs=attrs, expect=expect))
            elif form == "argsort":
                cases.append(Case("sort", d, [x], fn=lambda v, a=dim: jnp.argsort(v, axis=a),
                                  attrs=attrs, expect=expect))
            elif form == "two_keys":
                e = str(rng.choice(["i32", "f32", "u8"]))
                y = _keys(rng, e, shape)
                p = np.arange(x.size, dtype=np.int32).reshape(shape)
                attrs["types"] = f"{d},{e}"
                cases.append(Case("sort", f"{d},{e}", [x, y, p], attrs=attrs, expect=expect,
                                  fn=lambda a, b, c, dm=dim: lax.sort(
                                      (a, b, c), dimension=dm, num_keys=2)))
            elif form == "three":
                y = V.draw(rng, "f64", shape)
                z = V.draw(rng, "i1", shape)
                cases.append(Case("sort", d, [x, y, z], attrs=attrs, expect=expect,
                                  fn=lambda a, b, c, dm=dim: lax.sort(
                                      (a, b, c), dimension=dm, num_keys=1)))
            else:
                patch = _descending if form == "descending" else _unstable
                if form == "unstable":
                    # Distinct keys: an unstable sort may order equivalent ones either way.
                    x = _distinct(rng, d, shape, dim)
                p = np.arange(x.size, dtype=np.int32).reshape(shape)
                cases.append(Case("sort", d, [x, p], attrs=attrs, expect=expect, patch=patch,
                                  fn=lambda a, b, dm=dim: lax.sort(
                                      (a, b), dimension=dm, num_keys=1)))
    return cases


def _distinct(rng, d, shape, dim):
    """Keys distinct within each row along `dim` (small values, exact in every type)."""
    order = np.argsort(rng.random(shape), axis=dim, kind="stable")
    if d in V.UINTS:
        return order.astype(V.dt(d))
    if d in ("f16", "bf16"):
        # Consecutive bit patterns from 1.0 up: distinct for rows longer than the type's
        # exact small integers.
        one = 0x3C00 if d == "f16" else 0x3F80
        return (order + one).astype(np.uint16).view(V.dt(d))
    v = order - shape[dim] // 2
    return (v / 2.0 if d in V.FLOATS else v).astype(V.dt(d))


def gen_top_k(rng, count):
    cases = []
    for d in ["f32", "bf16", "f16", "f64", "i32", "u8", "i8", "u64"]:
        for _ in range(count * 2):
            rank = int(rng.integers(1, 4))
            dims = [int(rng.choice([1, 2, 3])) for _ in range(rank - 1)]
            n = int(rng.choice([1, 2, 5, 8, 17, 40]))
            x = _keys(rng, d, tuple(dims + [n]))
            k = int(rng.integers(0, n + 1))
            cases.append(Case("top_k", d, [x], fn=lambda v, k=k: lax.top_k(v, k),
                              attrs={"k": k}, expect=("chlo.top_k",)))
    return cases


GENERATORS = {
    "sort": gen_sort,
    "top_k": gen_top_k,
}
