"""Per-op cases of `map`, `broadcast` (deprecated in StableHLO: a `broadcast_in_dim` whose new
dimensions lead) and `get_dimension_size` (of a static dimension). JAX emits none of them:
the cases are StableHLO text, and XLA:CPU runs the same text for the expected outputs.

`map` bodies are chains of elementwise ops over every input type (floats, signed and unsigned
integers, pred), with captured scalar constants, a type change (`convert`) inside, one to
three inputs, rank 0 to 3 and empty shapes. Float inputs are moderate values (no subnormals:
XLA:CPU flushes them); the float bodies round once per op (no multiply feeding an add, which
XLA:CPU contracts into an FMA), so the comparison is exact.
"""

from __future__ import annotations

import numpy as np

import values as V
from cases import Case, Exact


def _mlir(d: str) -> str:
    return d.replace("u", "ui") if d.startswith("u") else d


def _ty(d: str, dims) -> str:
    return "tensor<" + "".join(f"{n}x" for n in dims) + f"{_mlir(d)}>"


def _const(d: str, v) -> str:
    if d == "i1":
        return f"dense<{'true' if v else 'false'}> : tensor<i1>"
    return f"dense<{v}> : tensor<{_mlir(d)}>"


# Body lines over %x, %y, %z (scalars of type d), ending in a value of type `out`: (inputs,
# lines, result name, result type).
def _bodies(d: str):
    s = f"tensor<{_mlir(d)}>"
    if d == "i1":
        return [
            (2, [f"%a = stablehlo.xor %x, %y : {s}", f"%b = stablehlo.not %a : {s}",
                 f"%c = stablehlo.constant {_const(d, True)}",
                 f"%r = stablehlo.and %b, %c : {s}"], "%r", d),
            (3, [f"%r = stablehlo.select %x, %y, %z : tensor<i1>, {s}"], "%r", d),
        ]
    if d in V.FLOATS:
        return [
            (2, [f"%m = stablehlo.maximum %x, %y : {s}", f"%n = stablehlo.negate %m : {s}",
                 f"%c = stablehlo.constant {_const(d, 1.5)}",
                 f"%r = stablehlo.subtract %n, %c : {s}"], "%r", d),
            (3, [f"%p = stablehlo.compare GT, %x, %y, FLOAT : ({s}, {s}) -> tensor<i1>",
                 f"%a = stablehlo.abs %z : {s}",
                 f"%r = stablehlo.select %p, %a, %y : tensor<i1>, {s}"], "%r", d),
            (1, [f"%h = stablehlo.multiply %x, %x : {s}",
                 "%r = stablehlo.convert %h : (" + s + ") -> tensor<f64>"], "%r", "f64"),
        ]
    return [
        (2, [f"%a = stablehlo.add %x, %y : {s}", f"%c = stablehlo.constant {_const(d, 5)}",
             f"%b = stablehlo.xor %a, %c : {s}",
             f"%p = stablehlo.compare LT, %x, %y : ({s}, {s}) -> tensor<i1>",
             f"%r = stablehlo.select %p, %b, %x : tensor<i1>, {s}"], "%r", d),
        (1, [f"%a = stablehlo.multiply %x, %x : {s}",
             "%r = stablehlo.convert %a : (" + s + ") -> tensor<f32>"], "%r", "f32"),
        (3, [f"%a = stablehlo.maximum %x, %y : {s}", f"%r = stablehlo.minimum %a, %z : {s}"],
         "%r", d),
    ]


def _map_text(d: str, dims, n: int, lines, res: str, out: str) -> str:
    ins = [("i1" if d == "i1" and n == 3 and i == 0 else d) for i in range(n)]
    args = ", ".join(f"%arg{i}: {_ty(t, dims)}" for i, t in enumerate(ins))
    uses = ", ".join(f"%arg{i}" for i in range(n))
    names = ["%x", "%y", "%z"][:n]
    bb = ", ".join(f"{v}: tensor<{_mlir(t)}>" for v, t in zip(names, ins))
    body = "\n".join(f"      {ln}" for ln in lines)
    rt = _ty(out, dims)
    tys = ", ".join(_ty(t, dims) for t in ins)
    return (
        "module @m {\n"
        f"  func.func public @main({args}) -> {rt} {{\n"
        f"    %0 = \"stablehlo.map\"({uses}) <{{dimensions = array<i64{': ' if dims else ''}"
        f"{', '.join(str(i) for i in range(len(dims)))}>}}> ({{\n"
        f"    ^bb0({bb}):\n{body}\n"
        f"      stablehlo.return {res} : tensor<{_mlir(out)}>\n"
        f"    }}) : ({tys}) -> {rt}\n"
        f"    return %0 : {rt}\n"
        "  }\n"
        "}\n"
    )


def gen_map(rng, count: int) -> list:
    cases = []
    for d in V.ALL:
        for _ in range(count):
            for n, lines, res, out in _bodies(d):
                dims = V.rand_shape(rng, 3)
                args = []
                for i in range(n):
                    t = "i1" if d == "i1" and n == 3 and i == 0 else d
                    kind = "moderate" if t in V.FLOATS else "any"
                    args.append(V.draw(rng, t, dims, kind))
                cases.append(Case("map", d, args, text=_map_text(d, dims, n, lines, res, out),
                                  tol=Exact(), shape=dims, attrs={"inputs": n, "to": out},
                                  expect=("stablehlo.map",)))
    return cases


def gen_broadcast(rng, count: int) -> list:
    cases = []
    for d in V.ALL:
        for _ in range(count):
            dims = V.rand_shape(rng, 2, max_elems=64)
            sizes = [int(v) for v in rng.integers(0, 4, int(rng.integers(0, 3)))]
            t, r = _ty(d, dims), _ty(d, sizes + list(dims))
            text = (
                "module @m {\n"
                f"  func.func public @main(%arg0: {t}) -> {r} {{\n"
                f"    %0 = stablehlo.broadcast %arg0, sizes = {sizes} : ({t}) -> {r}\n"
                f"    return %0 : {r}\n"
                "  }\n"
                "}\n"
            )
            cases.append(Case("broadcast", d, [V.draw(rng, d, dims)], text=text, tol=Exact(),
                              attrs={"sizes": sizes}, expect=("stablehlo.broadcast",)))
    return cases


def gen_get_dimension_size(rng, count: int) -> list:
    cases = []
    for d in ["f32", "i8", "i1"]:
        for _ in range(count):
            dims = V.rand_shape(rng, 3)
            if not dims:
                dims = (3,)
            k = int(rng.integers(0, len(dims)))
            t = _ty(d, dims)
            # The size added to an input, so that the result depends on a parameter too.
            text = (
                "module @m {\n"
                f"  func.func public @main(%arg0: {t}, %arg1: tensor<i32>) -> tensor<i32> {{\n"
                f"    %0 = stablehlo.get_dimension_size %arg0, dim = {k} : ({t}) -> tensor<i32>\n"
                "    %1 = stablehlo.add %0, %arg1 : tensor<i32>\n"
                "    return %1 : tensor<i32>\n"
                "  }\n"
                "}\n"
            )
            args = [V.draw(rng, d, dims), np.array(rng.integers(-100, 100), np.int32)]
            cases.append(Case("get_dimension_size", d, args, text=text, tol=Exact(),
                              attrs={"dim": k}, expect=("stablehlo.get_dimension_size",)))
    return cases


GENERATORS: dict = {
    "map": gen_map,
    "broadcast": gen_broadcast,
    "get_dimension_size": gen_get_dimension_size,
}
