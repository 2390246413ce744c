"""Programs as a user writes them, with fresh random inputs per seed and stated tolerances.

Each program is a plain JAX function of a pytree of arrays (parameters, a batch), lowered as
`jax.jit(f).lower(params, batch, ...)`: main's parameters are the pytree's leaves in JAX's
flattening order (arg0, arg1, ...), its results the leaves of f's result (out0, out1, ...).

Tolerances (compare.py `Rel`: |got - want| <= rtol * |want| + atol_of_max * max|want|, per
output array):
* f32 programs with dots, reductions and transcendental ops (the MLP, the transformer block,
  the RNN, the embedding, the CNN): rtol 2e-4, atol_of_max 2e-5 (summation order and a few ulp of
  exp/tanh/rsqrt, carried through a forward and a backward pass);
* the bf16 program: rtol 5e-2, atol_of_max 2e-2 (bf16 keeps 8 bits; whether an elementwise
  chain rounds to bf16 after every op or only at its end changes the last bits);
* the Newton iteration (only +, -, *, /, |x| and compares: correctly rounded or exact, and
  no multiply feeding an add, which XLA:CPU contracts into an FMA) and the integer program:
  bit-exact, iteration counts included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

import cases as C
from compare import Exact, Rel

F32_TOL = Rel(2e-4, atol_of_max=2e-5)
BF16_TOL = Rel(5e-2, atol_of_max=2e-2)


def _normal(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ----------------------------------------------------------------------------- MLP


def mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    h = jax.nn.relu(h @ params["w2"] + params["b2"])
    out = h @ params["w3"] + params["b3"]
    return jnp.mean((out - y) ** 2)


def mlp_train_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    new = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return loss, new


def mlp_inputs(rng):
    d_in, d_h, d_out, batch = 16, 32, 4, 8
    params = {
        "w1": _normal(rng, (d_in, d_h), d_in ** -0.5), "b1": _normal(rng, (d_h,), 0.1),
        "w2": _normal(rng, (d_h, d_h), d_h ** -0.5), "b2": _normal(rng, (d_h,), 0.1),
        "w3": _normal(rng, (d_h, d_out), d_h ** -0.5), "b3": _normal(rng, (d_out,), 0.1),
    }
    return (params, _normal(rng, (batch, d_in)), _normal(rng, (batch, d_out)), np.float32(0.05))


# ----------------------------------------------------------------------------- transformer


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def attention(p, x, heads):
    bsz, t, d = x.shape
    hd = d // heads

    def split(z):
        return z.reshape(bsz, t, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split(x @ p["wq"]), split(x @ p["wk"]), split(x @ p["wv"])
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.float32(hd))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, jnp.float32(-1e30))
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", a, v).transpose(0, 2, 1, 3).reshape(bsz, t, d)
    return o @ p["wo"]


def block(p, x, heads=2):
    x = x + attention(p, layer_norm(x, p["ln1_g"], p["ln1_b"]), heads)
    h = jax.nn.gelu(layer_norm(x, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"], approximate=True)
    return x + h @ p["w2"] + p["b2"]


def transformer_train_step(p, x, target, lr):
    def loss_fn(p):
        return jnp.mean((block(p, x) - target) ** 2)

    loss, g = jax.value_and_grad(loss_fn)(p)
    return loss, jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g)


def transformer_inputs(rng):
    d, f, bsz, t = 16, 32, 2, 8
    p = {"ln1_g": 1 + _normal(rng, (d,), 0.1), "ln1_b": _normal(rng, (d,), 0.1),
         "ln2_g": 1 + _normal(rng, (d,), 0.1), "ln2_b": _normal(rng, (d,), 0.1)}
    for k in ("wq", "wk", "wv", "wo"):
        p[k] = _normal(rng, (d, d), d ** -0.5)
    p["w1"], p["b1"] = _normal(rng, (d, f), d ** -0.5), _normal(rng, (f,), 0.1)
    p["w2"], p["b2"] = _normal(rng, (f, d), f ** -0.5), _normal(rng, (d,), 0.1)
    return (p, _normal(rng, (bsz, t, d)), _normal(rng, (bsz, t, d)), np.float32(0.01))


# ----------------------------------------------------------------------------- RNN (scan)


def rnn_loss(p, xs, h0, ys):
    def cell(h, x):
        h = jnp.tanh(h @ p["wh"] + x @ p["wx"] + p["b"])
        return h, h @ p["wy"]

    h, outs = lax.scan(cell, h0, xs)
    return jnp.mean((outs - ys) ** 2) + 0.1 * jnp.mean(h ** 2)


def rnn_step(p, xs, h0, ys):
    loss, g = jax.value_and_grad(rnn_loss)(p, xs, h0, ys)
    return loss, g


def rnn_inputs(rng):
    t, bsz, d_in, d_h = 10, 3, 5, 8
    p = {"wh": _normal(rng, (d_h, d_h), d_h ** -0.5),
         "wx": _normal(rng, (d_in, d_h), d_in ** -0.5),
         "b": _normal(rng, (d_h,), 0.1), "wy": _normal(rng, (d_h, 2), d_h ** -0.5)}
    xs, h0 = _normal(rng, (t, bsz, d_in)), _normal(rng, (bsz, d_h), 0.5)
    return (p, xs, h0, _normal(rng, (t, bsz, 2)))


# ----------------------------------------------------------------------------- while loop


def newton_sqrt(a, tol):
    """sqrt(a) by Newton's iteration until no element moves by more than tol * x."""
    def cond(c):
        x, prev, i = c
        # a compare, not |x - prev| - tol * x > 0: XLA:CPU would fuse that into an FMA
        return jnp.logical_and(i < 100, jnp.any(jnp.abs(x - prev) > tol * x))

    def body(c):
        x, _, i = c
        return (x + a / x) * 0.5, x, i + 1

    x0 = jnp.maximum(a, 1.0)
    x, _, n = lax.while_loop(cond, body, ((x0 + a / x0) * 0.5, x0, jnp.int32(1)))
    return x, n


def newton_inputs(rng):
    a = np.exp2(rng.uniform(-20, 20, size=(7,))).astype(np.float32)
    return (a, np.float32(1e-6))


# ----------------------------------------------------------------------------- embedding


def embedding_loss(p, ids, labels):
    e = p["emb"][ids]  # [batch, seq, d]
    pooled = jnp.mean(e, axis=1)
    logits = pooled @ p["w"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def embedding_step(p, ids, labels):
    return jax.value_and_grad(embedding_loss)(p, ids, labels)


def embedding_inputs(rng):
    vocab, d, bsz, seq, classes = 20, 8, 4, 6, 3
    p = {"emb": _normal(rng, (vocab, d)), "w": _normal(rng, (d, classes), d ** -0.5)}
    ids = rng.integers(0, vocab, size=(bsz, seq)).astype(np.int32)  # repeated ids: scatter-add
    return (p, ids, rng.integers(0, classes, size=(bsz,)).astype(np.int32))


# ----------------------------------------------------------------------------- CNN


def cnn_loss(p, x, y):
    dn = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, p["k1"], (1, 1), "SAME", dimension_numbers=dn) + p["c1"]
    h = jax.nn.relu(h)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = lax.conv_general_dilated(h, p["k2"], (2, 2), ((1, 1), (1, 1)), dimension_numbers=dn,
                                 feature_group_count=2) + p["c2"]
    h = jnp.tanh(h)
    h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "SAME") / 4.0
    out = h.reshape(h.shape[0], -1) @ p["w"]
    return jnp.mean((out - y) ** 2)


def cnn_train_step(p, x, y, lr):
    """Convolutions (a grouped, strided one), max and average pooling, and their gradients:
    transposed convolutions, batch-grouped kernel gradients, `select_and_scatter`."""
    loss, grads = jax.value_and_grad(cnn_loss)(p, x, y)
    return loss, jax.tree_util.tree_map(lambda a, g: a - lr * g, p, grads)


def cnn_inputs(rng):
    bsz, hw, cin, c1, c2, out = 4, 12, 3, 8, 6, 5
    p = {"k1": _normal(rng, (3, 3, cin, c1), (9 * cin) ** -0.5), "c1": _normal(rng, (c1,), 0.1),
         "k2": _normal(rng, (3, 3, c1 // 2, c2), (9 * c1 // 2) ** -0.5),
         "c2": _normal(rng, (c2,), 0.1),
         "w": _normal(rng, (3 * 3 * c2, out), (9 * c2) ** -0.5)}
    return (p, _normal(rng, (bsz, hw, hw, cin)), _normal(rng, (bsz, out)), np.float32(0.05))


# ----------------------------------------------------------------------------- integers


def integer_program(x, y, k):
    """Hashing and arithmetic on u32/i32/i64/u8: wraps, shifts, divisions, bit counts."""
    h = x.astype(jnp.uint32)
    for _ in range(3):  # xorshift-multiply rounds, wrapping
        h = h ^ (h >> 16)
        h = h * jnp.uint32(0x7FEB352D)
        h = h ^ (h << 5)
    q = y // jnp.where(k == 0, 1, k)  # floor division and modulo of signed values
    r = y % jnp.where(k == 0, 1, k)
    bits = lax.population_count(h) + lax.clz(h)
    acc = jnp.sum(y.astype(jnp.int64) * y.astype(jnp.int64)) + jnp.sum(bits.astype(jnp.int64))
    small = (x.astype(jnp.uint8) + jnp.uint8(200)) * jnp.uint8(3)
    return h, q, r, acc, jnp.max(y), jnp.argmin(y), small, jnp.clip(y, -1000, 1000)


def integer_inputs(rng):
    n = 33
    x = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, size=n, dtype=np.int64).astype(np.int32)
    k = rng.integers(-9, 10, size=n).astype(np.int32)
    return (x, y, k)


# ----------------------------------------------------------------------------- bf16


def bf16_program(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    logits = h @ w2
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(jnp.bfloat16)
    scaled = jnp.tanh(h * jnp.bfloat16(0.5)) + h.mean(axis=0)
    return logits, probs, scaled


def bf16_inputs(rng):
    bf = ml_dtypes.bfloat16
    return (_normal(rng, (16, 32), 0.25, bf), _normal(rng, (32, 8), 0.2, bf),
            _normal(rng, (4, 16), 1.0, bf))


PROGRAMS = [
    ("mlp_train_step", mlp_train_step, mlp_inputs, F32_TOL, "f32"),
    ("transformer_train_step", transformer_train_step, transformer_inputs, F32_TOL, "f32"),
    ("rnn_scan", rnn_step, rnn_inputs, F32_TOL, "f32"),
    ("newton_while", newton_sqrt, newton_inputs, Exact(), "f32"),
    ("embedding_grad", embedding_step, embedding_inputs, F32_TOL, "f32"),
    ("integer", integer_program, integer_inputs, Exact(), "i32"),
    ("bf16", bf16_program, bf16_inputs, BF16_TOL, "bf16"),
    ("cnn_train_step", cnn_train_step, cnn_inputs, F32_TOL, "f32"),
]


def cases(seed: int) -> list:
    out = []
    for i, (name, fn, inputs, tol, dtype) in enumerate(PROGRAMS):
        rng = np.random.default_rng([seed, 1000 + i])
        args = inputs(rng)
        leaves, tree = jax.tree_util.tree_flatten(args)
        leaves = [np.asarray(a) for a in leaves]
        out.append(C.Case(f"program:{name}", dtype, leaves, fn=fn, tol=tol, tree=tree,
                          shape=(), attrs={"inputs": len(leaves)}))
    return out


def ops_used(text: str) -> list:
    import re

    return sorted(set(re.findall(r"\b((?:stablehlo|chlo|mhlo)\.\w+|func\.call|call)\b", text)))


if __name__ == "__main__":
    for case in cases(0):
        print(case.op, ops_used(C.lower(case)))
