"""Per-op cases of `reduce_window` and `convolution` (see cases.py for Case).

`reduce_window`: `lax.reduce_window` with random window dimensions, strides, base and window
dilations and padding (negative padding included, which crops), ranks 1..4; bodies: sum,
max, min (JAX's monoid forms, init the identity), a sum from a non-identity init (JAX's
generic form: the padding holds the init value and every window adds it once more), a
two-operand sum-and-max, and the pooling JAX users write (max pool `SAME`, average pool as
a window sum divided by the counts). max/min and integer sums are bit-exact (order does
not change them; no subnormals: XLA:CPU's max/min would see them as 0); float sums compare
with `sum_tol` of the window size (cases_shape.py: any summation order).

`convolution`: `lax.conv_general_dilated` with random dimension numbers (any permutation of
the lhs, kernel and output dimensions), 1 to 3 spatial dimensions, strides, padding
(negative included), lhs and rhs dilation, `feature_group_count` or `batch_group_count`;
and `jax.grad` of a convolution (the transposed convolutions JAX derives: lhs dilation,
swapped dimension numbers, batch groups for a grouped kernel gradient). Floats compare with
`dot_tol` of the contraction length (input features per group × window elements): the
bound of any summation order, accumulation in the result type included; integers
bit-exact (wrapping products and sums do not depend on order).
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

import values as V
from cases import Case, Exact
from cases_shape import dot_tol, sum_tol

WINDOW_TYPES = ["f32", "f16", "bf16", "f64", "i32", "i8", "u32", "i64"]
CONV_TYPES = ["f32", "f16", "bf16", "f64", "i32"]


def _window(rng, shape):
    """Random window attributes for `shape` (every padded dimension holds at least 0
    windows)."""
    r = len(shape)
    dims, strides, base, wdil, pad = [], [], [], [], []
    for n in shape:
        w = int(rng.choice([1, 1, 2, 3]))
        s = int(rng.choice([1, 1, 2, 3]))
        b = int(rng.choice([1, 1, 1, 2]))
        d = int(rng.choice([1, 1, 1, 2]))
        inner = 0 if n == 0 else (n - 1) * b + 1
        lo = int(rng.choice([0, 0, 1, 2, -1]))
        hi = int(rng.choice([0, 0, 1, -1]))
        if inner + lo + hi < 0:
            lo, hi = 0, 0
        dims.append(w), strides.append(s), base.append(b), wdil.append(d), pad.append((lo, hi))
    assert len(dims) == r
    if all(w == 1 for w in dims) and all(s == 1 for s in strides):
        # XLA's algebraic simplifier rewrites this reduce_window as elementwise, keeping the
        # operand's shape: negative padding then aborts the process (a shape check fails)
        pad = [(max(lo, 0), max(hi, 0)) for lo, hi in pad]
    return tuple(dims), tuple(strides), tuple(base), tuple(wdil), tuple(pad)


def gen_reduce_window(rng, count):
    cases = []
    bodies = [("sum", WINDOW_TYPES), ("max", WINDOW_TYPES), ("min", ["f32", "i32", "u32"]),
              ("sum_init", ["f32", "i32"]), ("sum_and_max", ["f32", "i32"]),
              ("max_pool", ["f32", "bf16"]), ("avg_pool", ["f32", "f16"])]
    for body, dtypes in bodies:
        for d in dtypes:
            for _ in range(count):
                pool = body in ("max_pool", "avg_pool")
                if pool:
                    shape = (int(rng.integers(1, 3)), int(rng.choice([4, 5, 8])),
                             int(rng.choice([4, 7])), int(rng.integers(1, 4)))
                else:
                    shape = V.rand_shape(rng, max_rank=4, max_elems=256)
                    if not shape:
                        shape = (int(rng.integers(1, 6)),)
                win = _window(rng, shape)
                sums = body in ("sum", "sum_init", "sum_and_max", "avg_pool")
                flt = d in V.FLOATS
                kind = "moderate" if sums and flt else "any"
                x = V.draw(rng, d, shape, kind, subnormals=False)
                if body == "sum_init":  # small integers: every sum exact (see _spec_sum_init)
                    x = rng.integers(-8, 9, size=shape).astype(V.dt(d))
                k = int(np.prod(win[0]))
                tol, mag = Exact(), False
                if flt and sums and body != "sum_init":
                    tol, mag = sum_tol(d, k + 1), True
                    if body == "avg_pool":  # a rounding more for the division
                        tol = sum_tol(d, k + 2)
                    if body == "sum_and_max":
                        tol = [tol, Exact()]
                fn, attrs = _reduce_window_fn(body, d, shape, win)
                alt = _spec_sum_init(d, win) if body == "sum_init" else None
                cases.append(Case("reduce_window", d, [x], fn=fn, tol=tol, mag=mag,
                                  attrs=attrs, alt_fn=alt, expect=("stablehlo.reduce_window",)))
    return cases


def _spec_sum_init(d, win):
    """The spec's result of a sum from the init value 3, in numpy: the padding (and the base
    dilation's holes) hold the init value, so each padding element in a window adds 3 more.
    XLA:CPU skips those elements instead (it agrees with the spec only for an identity
    init). The case's inputs are small integers, so every sum is exact."""
    dims, strides, base, wdil, pad = win

    def f(x):
        init = 3
        p = np.asarray(x, np.float64)
        for i, ((lo, hi), b) in enumerate(zip(pad, base)):
            n = p.shape[i]
            shape = list(p.shape)
            shape[i] = 0 if n == 0 else (n - 1) * b + 1
            q = np.full(shape, init, np.float64)
            sl = [slice(None)] * p.ndim
            sl[i] = slice(0, None, b)
            q[tuple(sl)] = p
            widths = [(0, 0)] * p.ndim
            widths[i] = (max(lo, 0), max(hi, 0))
            q = np.pad(q, widths, constant_values=init)
            sl = [slice(None)] * p.ndim
            sl[i] = slice(max(-lo, 0), q.shape[i] - max(-hi, 0))
            p = q[tuple(sl)]
        counts = [max(0, (n - ((w - 1) * dl + 1)) // s + 1)
                  for n, w, s, dl in zip(p.shape, dims, strides, wdil)]
        out = np.zeros(counts, np.float64)
        for o in np.ndindex(*counts):
            sl = tuple(slice(oi * s, oi * s + (w - 1) * dl + 1, dl)
                       for oi, w, s, dl in zip(o, dims, strides, wdil))
            out[o] = init + p[sl].sum()
        return [out.astype(np.asarray(x).dtype)]

    return f


def _lowest(d):
    return -np.inf if d in V.FLOATS else np.iinfo(V.dt(d)).min


def _reduce_window_fn(body, d, shape, win):
    dims, strides, base, wdil, pad = win
    t = V.dt(d)
    attrs = {"body": body, "window": list(dims), "strides": list(strides),
             "base": list(base), "wdil": list(wdil), "pad": [list(p) for p in pad]}

    def rw(x, init, op):
        return lax.reduce_window(x, init, op, dims, strides, pad, base, wdil)

    if body == "sum":
        return (lambda x: rw(x, np.asarray(0, x.dtype), lax.add)), attrs
    if body == "max":
        return (lambda x: rw(x, np.asarray(_lowest(d), t), lax.max)), attrs
    if body == "min":
        hi = np.inf if d in V.FLOATS else np.iinfo(t).max
        return (lambda x: rw(x, np.asarray(hi, t), lax.min)), attrs
    if body == "sum_init":
        # not lax.add: JAX keeps a generic reduce_window with this init
        return (lambda x: rw(x, np.asarray(3, x.dtype), lambda a, b: a + b)), attrs
    if body == "sum_and_max":
        def two(x):
            z, lo = np.asarray(0, x.dtype), np.asarray(_lowest(d), x.dtype)
            return lax.reduce_window((x, x), (z, lo),
                                     lambda a, b: (a[0] + b[0], lax.max(a[1], b[1])),
                                     dims, strides, pad, base, wdil)
        return two, attrs
    r = len(shape)
    wd = (1, 2, 3, 1)[:r] if r == 4 else dims
    st = (1, 2, 2, 1)[:r] if r == 4 else strides
    attrs = {"body": body, "window": list(wd), "strides": list(st), "pad": "SAME"}
    if body == "max_pool":
        return (lambda x: lax.reduce_window(x, np.asarray(-np.inf, t), lax.max, wd, st,
                                            "SAME")), attrs

    def avg(x):
        s = lax.reduce_window(x, np.asarray(0, x.dtype), lax.add, wd, st, "SAME")
        ones = np.ones(shape, x.dtype)
        n = lax.reduce_window(ones, np.asarray(0, x.dtype), lax.add, wd, st, "SAME")
        return s / n
    return avg, attrs


def _conv_layout(rng, ns):
    """Random dimension numbers: each operand's dimensions a permutation."""
    r = ns + 2
    lhs = tuple(int(i) for i in rng.permutation(r))
    rhs = tuple(int(i) for i in rng.permutation(r))
    out = tuple(int(i) for i in rng.permutation(r))
    return lax.ConvDimensionNumbers(lhs, rhs, out)


def _conv_case(rng, d):
    """One random convolution: (lhs shape, rhs shape, kwargs, attrs, contraction length)."""
    ns = int(rng.choice([1, 2, 2, 3]))
    dn = _conv_layout(rng, ns)
    g, bgc = 1, 1
    which = rng.random()
    if which < 0.25:
        g = int(rng.choice([2, 3]))
    elif which < 0.45:
        bgc = int(rng.choice([2, 3]))
    cg = int(rng.integers(1, 4))
    og = int(rng.integers(1, 4))
    cin, cout = cg * g, og * g * bgc
    n = int(rng.integers(1, 3)) * bgc if rng.random() > 0.05 else 0
    size_choices = [3, 4, 5] if ns == 3 else [3, 5, 6, 8]
    sp = [int(rng.choice(size_choices)) for _ in range(ns)]
    ks = [int(rng.choice([1, 2, 3])) for _ in range(ns)]
    strides, pads, ldil, rdil = [], [], [], []
    for j in range(ns):
        s = int(rng.choice([1, 1, 2, 3]))
        ld = int(rng.choice([1, 1, 1, 2]))
        rd = int(rng.choice([1, 1, 1, 2]))
        inner = (sp[j] - 1) * ld + 1
        ext = (ks[j] - 1) * rd + 1
        lo = int(rng.choice([0, 0, 1, 2, -1]))
        hi = int(rng.choice([0, 0, 1, -1]))
        if inner + lo + hi < ext:
            lo, hi = ext - 1, 0
        strides.append(s), pads.append((lo, hi)), ldil.append(ld), rdil.append(rd)
    lhs = [0] * (ns + 2)
    lhs[dn.lhs_spec[0]], lhs[dn.lhs_spec[1]] = n, cin
    for j in range(ns):
        lhs[dn.lhs_spec[2 + j]] = sp[j]
    rhs = [0] * (ns + 2)
    rhs[dn.rhs_spec[0]], rhs[dn.rhs_spec[1]] = cout, cg
    for j in range(ns):
        rhs[dn.rhs_spec[2 + j]] = ks[j]
    kw = dict(window_strides=tuple(strides), padding=tuple(pads), lhs_dilation=tuple(ldil),
              rhs_dilation=tuple(rdil), dimension_numbers=dn, feature_group_count=g,
              batch_group_count=bgc)
    attrs = {"rhs": V.shape_str(rhs), "dn": [list(dn.lhs_spec), list(dn.rhs_spec),
                                               list(dn.out_spec)],
             "strides": strides, "pad": [list(p) for p in pads], "ldil": ldil, "rdil": rdil,
             "groups": [g, bgc]}
    return tuple(lhs), tuple(rhs), kw, attrs, cg * int(np.prod(ks))


def gen_convolution(rng, count):
    cases = []
    for d in CONV_TYPES:
        for i in range(count * 2):
            lsh, rsh, kw, attrs, k = _conv_case(rng, d)
            flt = d in V.FLOATS
            a = V.draw(rng, d, lsh, "moderate")
            b = V.draw(rng, d, rsh, "moderate")
            tol = dot_tol(d, k) if flt else Exact()
            grad = flt and d != "f16" and i % 4 == 3
            if grad:
                def fn(x, y, kw=kw):
                    return jax.grad(lambda x, y: lax.conv_general_dilated(x, y, **kw).sum(),
                                    argnums=(0, 1))(x, y)
                # each gradient element sums over at most the output's elements per window
                kg = int(np.prod(lsh) + np.prod(rsh))
                tol = dot_tol(d, kg)
                attrs = dict(attrs, grad=True)
            else:
                def fn(x, y, kw=kw):
                    return lax.conv_general_dilated(x, y, **kw)
            cases.append(Case("convolution", d, [a, b], fn=fn, tol=tol, mag=flt, shape=lsh,
                              attrs=attrs, expect=("stablehlo.convolution",)))
    # A wider result type (`preferred_element_type`): bf16/f16 products accumulated in f32,
    # i8 in i32 (the generated dot kernel; not a Gemm).
    for d, pref in [("bf16", "f32"), ("f16", "f32"), ("i8", "i32")]:
        for _ in range(count):
            lsh, rsh, kw, attrs, k = _conv_case(rng, d)
            a = V.draw(rng, d, lsh, "moderate")
            b = V.draw(rng, d, rsh, "moderate")
            pt = V.dt(pref)

            def fn(x, y, kw=kw, pt=pt):
                p = pt if x.dtype != np.float64 else None
                return lax.conv_general_dilated(x, y, **kw, preferred_element_type=p)

            flt = d in V.FLOATS
            cases.append(Case("convolution", f"{d}->{pref}", [a, b], fn=fn,
                              tol=dot_tol(pref, k) if flt else Exact(), mag=flt, shape=lsh,
                              attrs=attrs, expect=("stablehlo.convolution",)))
    return cases


def gen_select_and_scatter(rng, count):
    """`jax.grad` of max and min pooling (JAX lowers the gradient to `select_and_scatter`,
    GE or LE select, add scatter, the padding made explicitly with -inf/+inf before it):
    random windows, strides (overlapping windows included) and padding (`SAME`, `VALID` or
    explicit), weights on the pooled values so the scattered sources differ. Ties are drawn
    on purpose (values from a small pool): the first element of a window in row-major order
    wins. The weights are positive, so a sum of several sources has a rounding error bounded
    relative to itself: `sum_tol` of the overlap."""
    cases = []
    for d in ["f32", "f64", "bf16", "f16"]:
        for i in range(count * 2):
            r = int(rng.integers(1, 5))
            shape = tuple(int(rng.choice([1, 2, 3, 5, 6, 8])) for _ in range(r))
            dims = tuple(int(rng.choice([1, 2, 3])) for _ in range(r))
            strides = tuple(int(rng.choice([1, 2, 3])) for _ in range(r))
            pad = ["SAME", "VALID", "explicit"][i % 3]
            if pad == "explicit":
                pad = tuple((int(rng.integers(0, w)), int(rng.integers(0, w))) for w in dims)
            x = V.draw(rng, d, shape, "moderate")
            if x.size and rng.random() < 0.5:
                pool = V.draw(rng, d, (3,), "moderate")
                x = np.where(rng.random(shape) < 0.5, pool[rng.integers(0, 3, shape)], x)
                x = x.astype(V.dt(d))
            kind = ("max", lax.max, -np.inf) if i % 2 == 0 else ("min", lax.min, np.inf)
            out = jax.eval_shape(lambda v, k=kind: lax.reduce_window(
                v, np.asarray(k[2], v.dtype), k[1], dims, strides, pad), x).shape
            w = (np.abs(V.draw(rng, d, out, "moderate").astype(np.float64)) + 0.1)
            w = w.astype(V.dt(d))
            if 0 in out or x.size == 0:
                continue

            def fn(v, wt, k=kind, win=(dims, strides, pad)):
                def pooled(v):
                    p = lax.reduce_window(v, np.asarray(k[2], v.dtype), k[1], *win)
                    return (p * wt).sum()
                return jax.grad(pooled)(v)

            overlap = int(np.prod([-(-a // b) for a, b in zip(dims, strides)]))
            cases.append(Case("select_and_scatter", d, [x, w], fn=fn,
                              tol=sum_tol(d, overlap + 1),
                              attrs={"pool": kind[0], "window": list(dims),
                                     "strides": list(strides), "pad": pad},
                              expect=("stablehlo.select_and_scatter",)))
    return cases


GENERATORS = {
    "select_and_scatter": gen_select_and_scatter,
    "reduce_window": gen_reduce_window,
    "convolution": gen_convolution,
}
