"""Writes the StableHLO programs of `xthunk bench`'s rows stablehlo_mlp_step,
stablehlo_transformer_step and stablehlo_cnn_forward: programs.py's MLP training step and
transformer block training step, and a small CNN's forward pass, lowered by JAX at bench
sizes (and at small sizes, for `--quick`).

Every array is a parameter of main (the weights too, no constants), so the text stays small;
main's parameters are the leaves of (params, x, y, lr) (the CNN: (params, x)) in JAX's
flattening order.

    ~/.cache/xthunk/venv/bin/python stablehlo/jax/bench_programs.py

writes src/cli/bench/jax/{mlp_step,transformer_step,cnn_forward}{,.small}.mlir (the pretty form,
`as_text()`), which the xthunk binary embeds.

Sizes (f32):
* MLP step: batch 128, 784 -> 512 -> 512 -> 10 (tanh, relu, mean squared error, SGD);
  small: batch 8, 16 -> 32 -> 32 -> 4.
* transformer block step: batch 2, seq 128, d_model 256, 4 heads, MLP 4x (1024), pre-norm,
  causal softmax attention, tanh GELU, mean squared error, SGD; small: batch 2, seq 8,
  d_model 16, 2 heads, MLP 32.
* CNN forward: batch 32 of 32x32x3 images (NHWC), conv 3x3 3->16 (stride 1, SAME) + bias +
  relu, 2x2 max pool (stride 2), conv 3x3 16->32 (SAME) + bias + relu, 2x2 max pool, dense
  2048 -> 10 + bias; small: batch 2 of 8x8x3, channels 4 and 8, dense 32 -> 10.
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


def cnn(batch, hw, c1, c2):
    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + b)

    def forward(p, x):
        h = pool(conv(x, p["k1"], p["c1"]))
        h = pool(conv(h, p["k2"], p["c2"]))
        return h.reshape(h.shape[0], -1) @ p["w"] + p["b"]

    flat = (hw // 4) * (hw // 4) * c2
    p = {"k1": spec(3, 3, 3, c1), "c1": spec(c1), "k2": spec(3, 3, c1, c2), "c2": spec(c2),
         "w": spec(flat, 10), "b": spec(10)}
    return forward, (p, spec(batch, hw, hw, 3))


PROGRAMS = {
    "mlp_step": mlp(128, 784, 512, 10),
    "mlp_step.small": mlp(8, 16, 32, 4),
    "transformer_step": transformer(2, 128, 256, 4, 1024),
    "transformer_step.small": transformer(2, 8, 16, 2, 32),
    "cnn_forward": cnn(32, 32, 16, 32),
    "cnn_forward.small": cnn(2, 8, 4, 8),
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
