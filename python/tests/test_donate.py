"""Donation and preallocated outputs (issue 28, item 2): a JAX training step of the MLP of
docs/python.md (x @ w1 + b1, tanh GELU, @ w2 + b2, softmax cross-entropy, SGD), lowered with
`donate_argnums=(0,)` so that every weight is aliased to its updated output
(`data/mlp_step_donated.mlir`, batch 8, 16 -> 32 -> 10; written by the generator in its
docstring below), runs 200 steps with donated weights and a preallocated loss: no allocation
per step, the same numbers as the blocking numpy path, and the first step against numpy."""

import asyncio
import time

import numpy as np
import pytest
import xthunk
from conftest import gelu

PROGRAM = __import__("pathlib").Path(__file__).resolve().parent / "data" / "mlp_step_donated.mlir"
B, D, H, C = 8, 16, 32, 10
# main's parameters: b1, b2, w1, w2 (donated to out0..out3), x, y, lr; out4 is the loss.
WEIGHTS = ["arg0", "arg1", "arg2", "arg3"]

GENERATOR = """
import jax, jax.numpy as jnp
B, D, H, C = 8, 16, 32, 10
def loss(p, x, y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"], approximate=True)
    z = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(z), axis=1))
def step(p, x, y, lr):
    l, g = jax.value_and_grad(loss)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), l
s = lambda *sh: jax.ShapeDtypeStruct(sh, jnp.float32)
p = {"w1": s(D, H), "b1": s(H), "w2": s(H, C), "b2": s(C)}
text = jax.jit(step, donate_argnums=(0,), keep_unused=True).lower(
    p, s(B, D), s(B, C), s()).as_text(debug_info=False)
"""


def inputs(rng):
    f = np.float32
    w = {
        "arg0": (rng.uniform(-0.1, 0.1, H)).astype(f),
        "arg1": (rng.uniform(-0.1, 0.1, C)).astype(f),
        "arg2": (rng.uniform(-1, 1, (D, H)) * np.sqrt(3 / D)).astype(f),
        "arg3": (rng.uniform(-1, 1, (H, C)) * np.sqrt(3 / H)).astype(f),
    }
    y = np.eye(C, dtype=f)[rng.integers(0, C, B)]
    data = {"arg4": rng.uniform(-1, 1, (B, D)).astype(f), "arg5": y, "arg6": np.array(0.1, f)}
    return w, data


def reference_step(w, data):
    """One SGD step in f64: the updated (b1, b2, w1, w2) and the loss."""
    b1, b2, w1, w2 = (w[k].astype(np.float64) for k in WEIGHTS)
    x, y, lr = (data[k].astype(np.float64) for k in ("arg4", "arg5", "arg6"))
    u = x @ w1 + b1
    h = gelu(u)
    z = h @ w2 + b2
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    loss = -np.mean((y * logp).sum(1))
    dz = (np.exp(logp) * y.sum(1, keepdims=True) - y) / B
    dw2, db2 = h.T @ dz, dz.sum(0)
    k = 0.7978845608028654
    t = np.tanh(k * (u + 0.044715 * u**3))
    du = (dz @ w2.T) * (0.5 * (1 + t) + 0.5 * u * (1 - t**2) * k * (1 + 3 * 0.044715 * u**2))
    dw1, db1 = x.T @ du, du.sum(0)
    return [b1 - lr * db1, b2 - lr * db2, w1 - lr * dw1, w2 - lr * dw2], loss


def test_the_program_declares_the_weights_donated(host):
    exe = host.load(PROGRAM)
    assert exe.aliases == {"out0": "arg0", "out1": "arg1", "out2": "arg2", "out3": "arg3"}


def test_one_donated_step_matches_numpy(host, rng):
    exe = host.load(PROGRAM)
    w, data = inputs(rng)
    want, loss = reference_step(w, data)
    dev = {k: host.put(v) for k, v in w.items()}
    out = exe.run({**dev, **data}, keep_on_device=True, donate=WEIGHTS)
    for i, k in enumerate(WEIGHTS):
        got = out[f"out{i}"].numpy()
        np.testing.assert_allclose(got, want[i], rtol=0, atol=1e-5)
        # The donated array holds the output: one memory.
        np.testing.assert_array_equal(dev[k].numpy(), got)
    assert abs(float(out["out4"].numpy()) - loss) < 1e-5


def test_200_donated_steps_allocate_nothing_per_step_and_match_the_blocking_path(host, rng):
    exe = host.load(PROGRAM)
    w, data = inputs(rng)
    # The blocking path: numpy in, numpy out, new outputs every step.
    plain = dict(w)
    t0 = time.perf_counter()
    losses = []
    for _ in range(200):
        r = exe.run({**plain, **data})
        plain = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
        losses.append(float(r["out4"]))
    blocking = time.perf_counter() - t0
    assert losses[-1] < 0.8 * losses[0], f"the loss went from {losses[0]} to {losses[-1]}"

    dev = host.device(0)
    weights = {k: host.put(v) for k, v in w.items()}
    fixed = {k: host.put(v) for k, v in data.items()}
    loss = host.put(np.zeros((), np.float32))
    counts = []
    t0 = time.perf_counter()
    for _ in range(200):
        r = exe.run({**weights, **fixed}, keep_on_device=True, donate=WEIGHTS, out={"out4": loss})
        assert r["out4"] is loss
        weights = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
        counts.append(dev.memory_stats()["allocations_made"])
    donated = time.perf_counter() - t0
    print(f"200 steps: blocking numpy path {blocking * 5e3:.1f} us/step, "
          f"donated device arrays {donated * 5e3:.1f} us/step "
          f"(allocations: {counts[0]} after step 1, {counts[-1]} after step 200)")
    # The first step makes the pooled execution state; none after it allocates.
    assert counts[1:] == [counts[0]] * 199, counts[:5]
    for i, k in enumerate(WEIGHTS):
        np.testing.assert_array_equal(weights[k].numpy(), plain[k])
    assert float(loss.numpy()) == losses[-1]


def test_200_async_donated_steps_allocate_nothing_per_step_and_match_the_blocking_path(host, rng):
    """The training loop with execute_async (issue 28, item 1's done-when): each step awaited
    (asyncio) with donated weights and a preallocated loss; no allocation per step; the same
    numbers as the blocking donated loop; the per-step cost of both printed."""
    exe = host.load(PROGRAM)
    w, data = inputs(rng)
    dev = host.device(0)
    fixed = {k: host.put(v) for k, v in data.items()}

    def blocking_loop():
        weights = {k: host.put(v) for k, v in w.items()}
        loss = host.put(np.zeros((), np.float32))
        t0 = time.perf_counter()
        for _ in range(200):
            r = exe.run({**weights, **fixed}, keep_on_device=True, donate=WEIGHTS, out={"out4": loss})
            weights = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
        return weights, loss, time.perf_counter() - t0

    async def async_loop(counts):
        weights = {k: host.put(v) for k, v in w.items()}
        loss = host.put(np.zeros((), np.float32))
        t0 = time.perf_counter()
        for _ in range(200):
            r = await exe.execute_async(
                {**weights, **fixed}, keep_on_device=True, donate=WEIGHTS, out={"out4": loss}
            )
            assert r["out4"] is loss
            weights = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
            counts.append(dev.memory_stats()["allocations_made"])
        return weights, loss, time.perf_counter() - t0

    want_w, want_loss, blocking = blocking_loop()
    counts = []
    got_w, got_loss, asynchronous = asyncio.run(async_loop(counts))
    print(f"200 donated steps: blocking run {blocking * 5e3:.1f} us/step, "
          f"awaited execute_async {asynchronous * 5e3:.1f} us/step "
          f"(+{(asynchronous - blocking) * 5e3:.1f} us/step; "
          f"allocations: {counts[0]} after step 1, {counts[-1]} after step 200)")
    # The first step may make a pooled execution state; none after it allocates.
    assert counts[1:] == [counts[0]] * 199, counts[:5]
    for k in WEIGHTS:
        np.testing.assert_array_equal(got_w[k].numpy(), want_w[k].numpy())
    assert float(got_loss.numpy()) == float(want_loss.numpy())
    # And the loop learned: its loss against the first step's, from numpy.
    _, first = reference_step(w, data)
    assert float(got_loss.numpy()) < 0.8 * first


def test_wrong_donations_and_outputs_are_refused_by_name(host, rng):
    exe = host.load(PROGRAM)
    w, data = inputs(rng)
    with pytest.raises(xthunk.InvalidArgumentError, match="parameter `arg4` .* aliased to no output"):
        exe.run({**w, **data}, donate=["arg4"])
    with pytest.raises(xthunk.InvalidArgumentError, match="has no parameter `w9`"):
        exe.run({**w, **data}, donate=["w9"])
    with pytest.raises(xthunk.InvalidArgumentError, match="has no output `loss`"):
        exe.run({**w, **data}, out={"loss": host.put(np.zeros((), np.float32))})
    with pytest.raises(xthunk.InvalidArgumentError, match="out4"):
        exe.run({**w, **data}, out={"out4": host.put(np.zeros(3, np.float32))})
    with pytest.raises(xthunk.InvalidArgumentError, match="not an xthunk.DeviceArray"):
        exe.run({**w, **data}, out={"out4": np.zeros((), np.float32)})
    with pytest.raises(xthunk.InvalidArgumentError, match="output `out0` is in `out` but"):
        exe.run({**w, **data}, donate=["arg0"], out={"out0": host.put(w["arg0"])})
    # numpy inputs may be donated too (their upload becomes the output).
    r = exe.run({**w, **data}, donate=WEIGHTS)
    want, _ = reference_step(w, data)
    np.testing.assert_allclose(r["out2"], want[2], rtol=0, atol=1e-5)


def test_a_builder_alias_runs_the_issues_case_right(host):
    """o1 = copy(a), o2 = b + b with b donated to o1: o2 reads b as it was."""
    b = xthunk.ProgramBuilder("copy_and_double")
    a = b.parameter("a", "f32", [4])
    p = b.parameter("b", "f32", [4])
    o1 = b.output("o1", "f32", [4])
    o2 = b.output("o2", "f32", [4])
    std = b.standard_module()
    b.copy(a, o1)
    b.kernel(std, "add_f32", 4, [p.r(), p.r(), o2.w(), 4])
    with pytest.raises(xthunk.InvalidArgumentError, match="alias: the output tensor"):
        b.alias(a, p)
    b.alias(o1, p)
    exe = host.load(b.build())
    assert exe.aliases == {"o1": "b"}
    av = np.ones(4, np.float32)
    bd = host.put(np.array([10, 20, 30, 40], np.float32))
    r = exe.run({"a": av, "b": bd}, keep_on_device=True, donate=["b"])
    np.testing.assert_array_equal(r["o2"].numpy(), [20, 40, 60, 80])
    np.testing.assert_array_equal(bd.numpy(), av)
    # Not donated: o1 in its own memory, b untouched.
    bd = np.array([10, 20, 30, 40], np.float32)
    o1v, o2v = exe(a=av, b=bd)
    np.testing.assert_array_equal(o1v, av)
    np.testing.assert_array_equal(o2v, [20, 40, 60, 80])
