"""Writes the StableHLO programs of `xthunk bench`'s rows stablehlo_mlp_step and
stablehlo_transformer_step: programs.py's MLP training step and transformer block training
step, lowered by JAX at bench sizes (and at the test set's small sizes, for `--quick`).

Every array is a parameter of main (the weights too, no constants), so the text stays small;
main's parameters are the leaves of (params, x, y, lr) in JAX's flattening order.

    ~/.cache/xthunk/venv/bin/python stablehlo/jax/bench_programs.py

writes src/cli/bench/jax/{mlp_step,transformer_step}{,.small}.mlir (the pretty form,
`as_text()`), which the xthunk binary embeds.

Sizes (f32):
* MLP step: batch 128, 784 -> 512 -> 512 -> 10 (tanh, relu, mean squared error, SGD);
  small: batch 8, 16 -> 32 -> 32 -> 4.
* transformer block step: batch 2, seq 128, d_model 256, 4 heads, MLP 4x (1024), pre-norm,
  causal softmax attention, tanh GELU, mean squared error, SGD; small: batch 2, seq 8,
  d_model 16, 2 heads, MLP 32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import programs as P  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "src" / "cli" / "bench" / "jax"
f32 = jnp.float32


def spec(*shape):
    return jax.ShapeDtypeStruct(shape, f32)


def mlp(batch, d_in, d_h, d_out):
    params = {"w1": spec(d_in, d_h), "b1": spec(d_h), "w2": spec(d_h, d_h), "b2": spec(d_h),
              "w3": spec(d_h, d_out), "b3": spec(d_out)}
    args = (params, spec(batch, d_in), spec(batch, d_out), spec())
    return P.mlp_train_step, args


def transformer(batch, seq, d, heads, ff):
    def step(p, x, target, lr):
        def loss_fn(p):
            return jnp.mean((P.block(p, x, heads) - target) ** 2)

        loss, g = jax.value_and_grad(loss_fn)(p)
        return loss, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)

    p = {"ln1_g": spec(d), "ln1_b": spec(d), "ln2_g": spec(d), "ln2_b": spec(d)}
    for k in ("wq", "wk", "wv", "wo"):
        p[k] = spec(d, d)
    p["w1"], p["b1"], p["w2"], p["b2"] = spec(d, ff), spec(ff), spec(ff, d), spec(d)
    return step, (p, spec(batch, seq, d), spec(batch, seq, d), spec())


PROGRAMS = {
    "mlp_step": mlp(128, 784, 512, 10),
    "mlp_step.small": mlp(8, 16, 32, 4),
    "transformer_step": transformer(2, 128, 256, 4, 1024),
    "transformer_step.small": transformer(2, 8, 16, 2, 32),
}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (fn, args) in PROGRAMS.items():
        text = jax.jit(fn, keep_unused=True).lower(*args).as_text()
        if len(text) > 200_000:  # weights are parameters: a large module holds a constant
            raise SystemExit(f"{name}: the module is {len(text)} bytes")
        path = OUT / f"{name}.mlir"
        path.write_text(text)
        print(f"{path}: {len(text)} bytes")


if __name__ == "__main__":
    main()
