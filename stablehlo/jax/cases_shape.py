"""Per-op cases of the data-movement ops, dot_general and reduce (see cases.py for Case).

Data movement is bit-exact on every type (subnormals included: no arithmetic). Float dots
and sums compare with `dot_tol`/`sum_tol`: |got - want| <= 2 (K + 2) eps * mag + K * tiny,
K the reduction length and mag the same computation on |inputs| in f64 (the bound of any
summation order, accumulation in the output type included). Integer dots and reductions,
max/min/and/or reductions and argmax are bit-exact (order does not change them).
"""

from __future__ import annotations

import numpy as np
from jax import lax

import compare as cmp
import values as V
from cases import Case, Exact, Rel

DATA = V.ALL


def dot_tol(dtype: str, k: int) -> Rel:
    d = V.dt(dtype)
    return Rel(2 * (k + 2) * cmp.eps(d), max(k, 1) * cmp.tiny(d))


sum_tol = dot_tol


def gen_broadcast(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=2, max_elems=32)
            out_rank = len(src) + int(rng.integers(0 if 1 in src else 1, 3))
            dims = sorted(rng.choice(out_rank, size=len(src), replace=False).tolist())
            out = [int(rng.integers(1, 5)) for _ in range(out_rank)]
            for s, k in zip(src, dims):
                out[k] = s if s != 1 or rng.random() < 0.5 else int(rng.integers(1, 4))
            if tuple(out) == tuple(src):  # JAX would elide the op
                out, dims = [2] + out, [k + 1 for k in dims]
            x = V.draw(rng, d, src)
            # wide: XLA:CPU may flush a bf16/f16 subnormal it broadcasts; the same broadcast
            # of the inputs widened to f64 gives the exact values, accepted too.
            cases.append(Case("broadcast_in_dim", d, [x], shape=src, wide=True,
                              fn=lambda a, o=tuple(out), k=tuple(dims):
                              lax.broadcast_in_dim(a, o, k),
                              attrs={"out": V.shape_str(out), "dims": list(dims)},
                              expect=("stablehlo.broadcast_in_dim",)))
    return cases


def gen_reshape(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3, allow_empty=False)
            n = int(np.prod(src, dtype=np.int64))
            facs = [f for f in range(1, n + 1) if n % f == 0]
            a = int(rng.choice(facs))
            out = [a, n // a] if rng.random() < 0.5 else [n]
            if rng.random() < 0.3:
                out = out + [1]
            x = V.draw(rng, d, src)
            if tuple(out) == tuple(src):
                out = [1] + out
            cases.append(Case("reshape", d, [x], fn=lambda v, o=tuple(out): lax.reshape(v, o),
                              attrs={"out": V.shape_str(out)}, expect=("stablehlo.reshape",)))
    return cases


def gen_transpose(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=4, max_elems=512)
            if len(src) < 2:
                src = (3, 2)
            perm = tuple(int(p) for p in rng.permutation(len(src)))
            if perm == tuple(range(len(src))):
                perm = perm[::-1]
            x = V.draw(rng, d, src)
            cases.append(Case("transpose", d, [x], fn=lambda v, p=perm: lax.transpose(v, p),
                              attrs={"perm": list(perm)}, expect=("stablehlo.transpose",)))
    return cases


def gen_concatenate(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            base = list(V.rand_shape(rng, max_rank=3, allow_empty=False))
            if not base:
                base = [2]
            dim = int(rng.integers(0, len(base)))
            k = int(rng.integers(2, 5))
            xs = []
            for _ in range(k):
                s = list(base)
                s[dim] = int(rng.choice([0, 1, 2, 5]))
                xs.append(V.draw(rng, d, s))
            cases.append(Case("concatenate", d, xs, fn=lambda *a, dim=dim: lax.concatenate(a, dim),
                              attrs={"dim": dim, "n": k}, expect=("stablehlo.concatenate",)))
    return cases


def gen_slice(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3, allow_empty=False)
            start, limit, strides = [], [], []
            for s in src:
                a = int(rng.integers(0, s + 1))
                b = int(rng.integers(a, s + 1))
                start.append(a)
                limit.append(b)
                strides.append(int(rng.integers(1, 4)))
            x = V.draw(rng, d, src)
            cases.append(Case("slice", d, [x],
                              fn=lambda v, a=tuple(start), b=tuple(limit), st=tuple(strides):
                              lax.slice(v, a, b, st),
                              attrs={"start": start, "limit": limit, "strides": strides},
                              expect=("stablehlo.slice",)))
    return cases


def _indices(rng, src, itype):
    out = []
    for s in src:
        lo = 0 if itype.startswith("u") else -3
        out.append(np.asarray(rng.integers(lo, s + 4), V.dt(itype)))
    return out


def gen_dynamic_slice(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3, allow_empty=False)
            if not src:
                src = (4,)
            sizes = tuple(int(rng.integers(0, s + 1)) for s in src)
            itype = str(rng.choice(["i32", "i64", "u32"]))
            neg = bool(rng.random() < 0.3)
            x = V.draw(rng, d, src)
            idx = _indices(rng, src, itype)
            cases.append(Case("dynamic_slice", d, [x] + idx, shape=src,
                              fn=lambda v, *i, sz=sizes, neg=neg:
                              lax.dynamic_slice(v, i, sz, allow_negative_indices=neg),
                              attrs={"sizes": list(sizes), "index": itype,
                                     "start": [int(i) for i in idx], "jax_negative": neg},
                              expect=("stablehlo.dynamic_slice",)))
    return cases


def gen_dynamic_update_slice(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3, allow_empty=False)
            if not src:
                src = (4,)
            ushape = tuple(int(rng.integers(0, s + 1)) for s in src)
            itype = str(rng.choice(["i32", "i64", "u32"]))
            x, u = V.draw(rng, d, src), V.draw(rng, d, ushape)
            idx = _indices(rng, src, itype)
            cases.append(Case("dynamic_update_slice", d, [x, u] + idx, shape=src,
                              fn=lambda v, w, *i:
                              lax.dynamic_update_slice(v, w, i, allow_negative_indices=False),
                              attrs={"update": V.shape_str(ushape), "index": itype,
                                     "start": [int(i) for i in idx]},
                              expect=("stablehlo.dynamic_update_slice",)))
    return cases


def gen_pad(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3, max_elems=64)
            cfg = []
            for s in src:
                interior = int(rng.integers(0, 3)) if s > 0 else 0
                full = s + max(s - 1, 0) * interior
                lo = int(rng.integers(-min(full, 3), 4))
                hi = int(rng.integers(-min(full + lo, 3) if full + lo > 0 else 0, 4))
                cfg.append((lo, hi, interior))
            x, pv = V.draw(rng, d, src), V.draw(rng, d, ())
            cases.append(Case("pad", d, [x, pv], fn=lambda v, p, c=tuple(cfg): lax.pad(v, p, c),
                              attrs={"config": cfg}, expect=("stablehlo.pad",)))
    return cases


def gen_reverse(rng, count):
    cases = []
    for d in DATA:
        for _ in range(count):
            src = V.rand_shape(rng, max_rank=3)
            if not src:
                src = (3,)
            dims = sorted(set(int(k) for k in rng.integers(0, len(src), size=2)))
            x = V.draw(rng, d, src)
            cases.append(Case("reverse", d, [x], fn=lambda v, k=tuple(dims): lax.rev(v, k),
                              attrs={"dims": dims}, expect=("stablehlo.reverse",)))
    return cases


def _dot_layout(rng):
    nb, nc = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    nfl, nfr = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    size = lambda: int(rng.choice([1, 2, 3, 4, 8]))  # noqa: E731
    b = [size() for _ in range(nb)]
    c = [size() for _ in range(nc)]
    fl = [size() for _ in range(nfl)]
    fr = [size() for _ in range(nfr)]
    lperm = rng.permutation(nb + nc + nfl)
    rperm = rng.permutation(nb + nc + nfr)
    lsh = [0] * (nb + nc + nfl)
    rsh = [0] * (nb + nc + nfr)
    common = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)]
    roles_l = common + [("f", i) for i in range(nfl)]
    roles_r = common + [("f", i) for i in range(nfr)]
    pos_l, pos_r = {}, {}
    for role, p in zip(roles_l, lperm):
        pos_l[role] = int(p)
        lsh[int(p)] = {"b": b, "c": c, "f": fl}[role[0]][role[1]]
    for role, p in zip(roles_r, rperm):
        pos_r[role] = int(p)
        rsh[int(p)] = {"b": b, "c": c, "f": fr}[role[0]][role[1]]
    contract = (tuple(pos_l[("c", i)] for i in range(nc)),
                tuple(pos_r[("c", i)] for i in range(nc)))
    batch = (tuple(pos_l[("b", i)] for i in range(nb)), tuple(pos_r[("b", i)] for i in range(nb)))
    dims = (contract, batch)
    return tuple(lsh), tuple(rsh), dims, int(np.prod(c, dtype=np.int64))


DOT_TYPES = [("f32", None), ("f64", None), ("f16", None), ("bf16", None), ("bf16", "f32"),
             ("i8", "i32"), ("i32", None), ("i64", None), ("u8", None), ("u32", None),
             ("i16", "i64")]


def gen_dot_general(rng, count):
    cases = []
    for d, pref in DOT_TYPES:
        for _ in range(count):
            lsh, rsh, dims, k = _dot_layout(rng)
            if d in V.FLOATS:
                a = V.draw(rng, d, lsh, "moderate")
                b = V.draw(rng, d, rsh, "moderate")
                if a.size and rng.random() < 0.2:
                    a.flat[int(rng.integers(0, a.size))] = rng.choice([np.nan, np.inf, -np.inf])
                tol = dot_tol(pref or d, k)
            else:
                a, b = V.draw(rng, d, lsh, p_special=0.1), V.draw(rng, d, rsh, p_special=0.1)
                tol = Exact()
            pt = V.dt(pref) if pref else None

            def fn(x, y, dims=dims, pt=pt):
                p = pt if pt is not None and x.dtype != np.float64 else None
                return lax.dot_general(x, y, dims, preferred_element_type=p)

            (cl, cr), (bl, br) = dims
            cases.append(Case("dot_general", d + (f"->{pref}" if pref else ""), [a, b], fn=fn,
                              tol=tol, mag=d in V.FLOATS, shape=lsh,
                              attrs={"rhs": V.shape_str(rsh), "contract": [list(cl), list(cr)],
                                     "batch": [list(bl), list(br)]},
                              expect=("stablehlo.dot_general",)))
    return cases


def _reduce_dims(rng, shape):
    k = int(rng.integers(1, len(shape) + 1))
    return tuple(sorted(int(i) for i in rng.choice(len(shape), size=k, replace=False)))


def gen_reduce(rng, count):
    cases = []
    bodies = [("sum", V.FLOATS + V.INTS), ("max", V.FLOATS + V.INTS), ("min", V.FLOATS + V.INTS),
              ("prod", V.FLOATS + V.INTS), ("and", ["i1"]), ("or", ["i1"]),
              ("argmax", V.FLOATS + ["i32", "u8"]), ("argmin", V.FLOATS + ["i64"]),
              ("sum_and_max", ["f32", "i32"])]
    for body, dtypes in bodies:
        for d in dtypes:
            for _ in range(count):
                arg = body in ("argmax", "argmin")  # one dimension, never empty
                shape = V.rand_shape(rng, max_rank=3, max_elems=128, allow_empty=not arg)
                if not shape:
                    shape = (5,)
                dims = _reduce_dims(rng, shape)
                if arg:
                    dims = dims[:1]
                k = int(np.prod([shape[i] for i in dims], dtype=np.int64))
                tol, mag, kind = Exact(), False, "any"
                if d in V.FLOATS and body in ("sum", "prod", "sum_and_max"):
                    tol, mag, kind = sum_tol(d, k), True, "moderate"
                    if body == "sum_and_max":
                        tol = [tol, Exact()]
                if body == "prod" and d in V.FLOATS:
                    x = (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.8, 1.25, shape))
                    x = x.astype(V.dt(d))
                else:
                    # no subnormals: XLA's max/min/compare would see them as 0
                    x = V.draw(rng, d, shape, kind, subnormals=False)
                if kind == "moderate" and x.size and rng.random() < 0.2:
                    x.flat[int(rng.integers(0, x.size))] = rng.choice([np.nan, np.inf])
                fn = _reduce_fn(body, d, dims)
                cases.append(Case("reduce", d, [x], fn=fn, tol=tol, mag=mag,
                                  attrs={"body": body, "dims": list(dims)},
                                  expect=("stablehlo.reduce",)))
    return cases


def _reduce_fn(body, d, dims):
    t = V.dt(d)
    if body in ("argmax", "argmin"):
        f = lax.argmax if body == "argmax" else lax.argmin
        it = np.int32 if d != "f64" else np.int64
        return lambda x: f(x, dims[0], it)
    if body == "sum_and_max":
        lo = -np.inf if d in V.FLOATS else np.iinfo(t).min

        def two(x):
            z, m = np.asarray(0).astype(x.dtype), np.asarray(lo).astype(x.dtype)
            return lax.reduce((x, x), (z, m),
                              lambda a, b: (lax.add(a[0], b[0]), lax.max(a[1], b[1])), dims)

        return two
    init, op = {
        "sum": (0, lax.add), "prod": (1, lax.mul), "and": (True, lax.bitwise_and),
        "or": (False, lax.bitwise_or),
        "max": (-np.inf if d in V.FLOATS else (np.iinfo(t).min if d != "i1" else 0), lax.max),
        "min": (np.inf if d in V.FLOATS else (np.iinfo(t).max if d != "i1" else 1), lax.min),
    }[body]
    return lambda x: lax.reduce(x, np.asarray(init).astype(x.dtype), op, dims)


GENERATORS = {
    "broadcast_in_dim": gen_broadcast,
    "reshape": gen_reshape,
    "transpose": gen_transpose,
    "concatenate": gen_concatenate,
    "slice": gen_slice,
    "dynamic_slice": gen_dynamic_slice,
    "dynamic_update_slice": gen_dynamic_update_slice,
    "pad": gen_pad,
    "reverse": gen_reverse,
    "dot_general": gen_dot_general,
    "reduce": gen_reduce,
}
