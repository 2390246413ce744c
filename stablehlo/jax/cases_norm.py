"""Per-op cases of `batch_norm_inference`, `batch_norm_training` and `batch_norm_grad`.

JAX never emits these ops (its normalizations are written with reductions), TensorFlow's
fused batch norm does: the cases are StableHLO text, and XLA:CPU runs the same text for the
expected outputs. Shapes of rank 1 to 4 with the feature dimension anywhere; `epsilon` from
1e-5 to 0.1; moderate values (no specials: the spec defines these ops by their decomposition,
whose NaN handling is the elementwise ops'). The means and sums are reductions whose order
XLA does not promise: the bound is relative to each result, plus a multiple of the largest
result (the gradient subtracts nearly equal terms). XLA computes the variance as
E[x^2] - E[x]^2, which in f16 and bf16 cancels away most digits (a training case with
variances near 0.05 and means near 3: XLA -0.1997 where the f64 value is -0.3368): the spec's
decomposition in f64, rounded to the type, is accepted too (numpy, below).
"""

from __future__ import annotations

import numpy as np

import values as V
from cases import Case, Rel

FLOATS = V.FLOATS

TOL = {
    "f64": Rel(1e-11, atol_of_max=1e-11),
    "f32": Rel(2e-4, atol_of_max=2e-4),
    "f16": Rel(2e-2, atol_of_max=2e-2),
    "bf16": Rel(1e-1, atol_of_max=1e-1),
}


def _ty(d: str, dims) -> str:
    return "tensor<" + "".join(f"{n}x" for n in dims) + f"{d}>"


def _text(op: str, d: str, dims, feature: int, eps: float) -> str:
    x = _ty(d, dims)
    c = _ty(d, [dims[feature]])
    ins = {
        "batch_norm_inference": [x, c, c, c, c],
        "batch_norm_training": [x, c, c],
        "batch_norm_grad": [x, c, c, c, x],
    }[op]
    outs = {
        "batch_norm_inference": [x],
        "batch_norm_training": [x, c, c],
        "batch_norm_grad": [x, c, c],
    }[op]
    params = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(ins))
    args = ", ".join(f"%arg{i}" for i in range(len(ins)))
    res = f"%0:{len(outs)}" if len(outs) > 1 else "%0"
    rets = ", ".join(f"%0#{i}" for i in range(len(outs))) if len(outs) > 1 else "%0"
    out_ty = f"({', '.join(outs)})" if len(outs) > 1 else outs[0]
    return (
        "module @m {\n"
        f"  func.func public @main({params}) -> ({', '.join(outs)}) {{\n"
        f"    {res} = \"stablehlo.{op}\"({args}) <{{epsilon = {eps:.6e} : f32, "
        f"feature_index = {feature} : i64}}> : ({', '.join(ins)}) -> {out_ty}\n"
        f"    return {rets} : {', '.join(outs)}\n"
        "  }\n"
        "}\n"
    )


def _reference(op: str, feature: int, eps: float):
    """The spec's decomposition in f64, results rounded to the operands' type."""
    def ref(*args):
        d = np.asarray(args[0]).dtype
        a = [np.asarray(v, np.float64) for v in args]
        x = a[0]
        axes = tuple(i for i in range(x.ndim) if i != feature)

        def feat(v):
            shape = [1] * x.ndim
            shape[feature] = -1
            return v.reshape(shape)

        if op == "batch_norm_inference":
            scale, offset, mean, var = a[1:]
            outs = [feat(scale) * (x - feat(mean)) / np.sqrt(feat(var) + eps) + feat(offset)]
        elif op == "batch_norm_training":
            scale, offset = a[1:]
            mean = x.mean(axis=axes)
            var = ((x - feat(mean)) ** 2).mean(axis=axes)
            y = feat(scale) * (x - feat(mean)) / np.sqrt(feat(var) + eps) + feat(offset)
            outs = [y, mean, var]
        else:
            scale, mean, var, dy = a[1:]
            n = x.size / x.shape[feature]
            c = x - feat(mean)
            sd = np.sqrt(feat(var) + eps)
            i6 = dy * n - feat(dy.sum(axis=axes)) - feat((dy * c).sum(axis=axes)) * c / (sd * sd)
            outs = [feat(scale) / sd / n * i6, (dy * c / sd).sum(axis=axes), dy.sum(axis=axes)]
        return [o.astype(d) for o in outs]
    return ref


def gen(op: str, rng, count: int) -> list:
    cases = []
    for d in FLOATS:
        for _ in range(count):
            rank = int(rng.integers(1, 5))
            dims = [int(rng.integers(1, 7)) for _ in range(rank)]
            feature = int(rng.integers(0, rank))
            eps = float(np.float32(10.0 ** rng.uniform(-5, -1)))
            c = dims[feature]
            center = rng.uniform(-3, 3)
            x = (center + rng.uniform(0.2, 4) * rng.standard_normal(dims)).astype(V.dt(d))
            scale = rng.uniform(-2, 2, c).astype(V.dt(d))
            offset = rng.uniform(-2, 2, c).astype(V.dt(d))
            mean = (center + rng.uniform(-1, 1, c)).astype(V.dt(d))
            var = rng.uniform(0.05, 5, c).astype(V.dt(d))
            dy = rng.standard_normal(dims).astype(V.dt(d))
            args = {
                "batch_norm_inference": [x, scale, offset, mean, var],
                "batch_norm_training": [x, scale, offset],
                "batch_norm_grad": [x, scale, mean, var, dy],
            }[op]
            cases.append(Case(op, d, args, text=_text(op, d, dims, feature, eps), tol=TOL[d],
                              shape=tuple(dims), attrs={"feature": feature},
                              alt_fn=_reference(op, feature, eps),
                              expect=(f"stablehlo.{op}",)))
    return cases


GENERATORS: dict = {
    op: (lambda op: lambda rng, count: gen(op, rng, count))(op)
    for op in ("batch_norm_inference", "batch_norm_training", "batch_norm_grad")
}
