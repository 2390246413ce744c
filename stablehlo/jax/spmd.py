#!/usr/bin/env python3
"""Sharded JAX programs (shard_map, pmap) through xthunk against JAX's own results.

    spmd.py --xthunk PATH [--backend host,cuda] [--mode devices,launch] [--cases PATTERN]
            [--seed N] [--keep DIR] [--list] [--gspmd]

JAX runs each case on 4 CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4,
set here before jax is imported) and gives the expected outputs; its lowered StableHLO
(`jax.jit(f).lower(...).as_text()`: `sdy.mesh` + `sdy.manual_computation`, pmap's too) runs
through xthunk with the GLOBAL inputs, every rank given the same files (`--gspmd`: lowered
with Shardy off, GSPMD's `@Sharding` / `@SPMDFullToShardShape` / `@SPMDShardToFullShape`
form):

    devices: xthunk run case.mlir --devices 4 --backend B --input arg0=arg0.npy ... --output-dir out
    launch:  xthunk launch -n 4 -- run case.mlir --backend B --input ... --output-dir out

Every rank writes out/rank<R>/out<i>.npy, each the GLOBAL output (xthunk gathers the shards
inside the program); each rank's is compared with JAX's. Inputs are fresh normal random
values (the seed is printed); tolerances are explicit per case: the collectives that only
move data are bit-exact (so is a bf16 sum of values whose partial sums are exact), sums use
a relative bound of a few ulp times the number of terms
(XLA:CPU and NCCL may add in other orders), the training step one of 1e-5 relative with a
1e-6 absolute floor. On emulated CUDA (ci/with-emulator.sh, XTHUNK_EMU_DEVICES=4) the
collectives go through the emulator's NCCL: within one process for `devices`, across four
processes for `launch`. Exit code 1 on any failure or refusal.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4").strip()

import argparse  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from functools import partial  # noqa: E402

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

N = 4


class Case:
    def __init__(self, name, fn, args, rtol=0.0, atol=0.0):
        self.name, self.fn, self.args, self.rtol, self.atol = name, fn, args, rtol, atol


def mesh1():
    return Mesh(np.array(jax.devices()[:N]), ("x",))


def mesh2():
    return Mesh(np.array(jax.devices()[:N]).reshape(2, 2), ("a", "b"))


def sm(fn, ins, outs, mesh=None):
    return jax.jit(shard_map(fn, mesh=mesh or mesh1(), in_specs=ins, out_specs=outs))


def mlp_loss(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    o = h @ p["w2"] + p["b2"]
    return jnp.mean((o - y) ** 2)


def train_step(p, x, y):
    loss, g = jax.value_and_grad(mlp_loss)(p, x, y)
    g = jax.lax.pmean(g, "x")
    loss = jax.lax.pmean(loss, "x")
    return jax.tree.map(lambda a, b: a - 0.05 * b, p, g), loss


def fsdp_step(w, x, y):
    # Parameters sharded by rows: gathered for the forward pass, gradients reduce-scattered.
    full = jax.lax.all_gather(w, "x", tiled=True)
    loss, g = jax.value_and_grad(lambda p: jnp.mean((x @ p - y) ** 2))(full)
    g = jax.lax.psum_scatter(g, "x", scatter_dimension=0, tiled=True) / N
    return w - 0.1 * g, jax.lax.pmean(loss, "x")


def cases(rng):
    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def ri(*shape):
        return rng.integers(-1000, 1000, shape).astype(np.int32)

    sums = dict(rtol=4 * N * np.finfo(np.float32).eps, atol=1e-6)
    ps = {"w1": P(), "b1": P(), "w2": P(), "b2": P()}
    params = {"w1": r(8, 16) * 0.3, "b1": r(16) * 0.1, "w2": r(16, 4) * 0.3, "b2": r(4) * 0.1}
    out = [
        Case("train_step", sm(train_step, (ps, P("x"), P("x")), (ps, P())),
             (params, r(32, 8), r(32, 4)), rtol=1e-5, atol=1e-6),
        Case("psum", sm(lambda v: jax.lax.psum(v, "x"), P("x"), P()), (r(8, 6),), **sums),
        Case("psum_i32", sm(lambda v: jax.lax.psum(v, "x"), P("x"), P()), (ri(8, 6),)),
        Case("pmax", sm(lambda v: jax.lax.pmax(v, "x"), P("x"), P()), (r(8, 6),)),
        Case("pmin", sm(lambda v: jax.lax.pmin(v, "x"), P("x"), P()), (r(8, 6),)),
        Case("pmean", sm(lambda v: jax.lax.pmean(v, "x"), P(None, "x"), P(None, None)),
             (r(3, 8),), **sums),
        Case("all_gather", sm(lambda v: jax.lax.all_gather(v, "x", axis=1, tiled=True),
                              P("x"), P("x")), (r(8, 6),)),
        Case("all_gather_stack", sm(lambda v: jax.lax.all_gather(v, "x"), P("x"), P("x")),
             (r(8, 3),)),
        Case("psum_scatter", sm(
            lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True),
            P(None, "x"), P(None, "x")), (r(8, 16),), **sums),
        Case("psum_scatter_0", sm(
            lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=0, tiled=True),
            P("x"), P("x")), (r(16, 5),), **sums),
        Case("all_to_all", sm(lambda v: jax.lax.all_to_all(v, "x", 1, 0, tiled=True),
                              P("x"), P("x")), (r(8, 8),)),
        Case("all_to_all_10", sm(lambda v: jax.lax.all_to_all(v, "x", 0, 1, tiled=True),
                                 P(None, "x"), P(None, "x")), (r(8, 12),)),
        Case("ppermute", sm(lambda v: jax.lax.ppermute(
            v, "x", [(i, (i + 1) % N) for i in range(N)]), P("x"), P("x")), (r(8, 6),)),
        Case("ppermute_partial", sm(lambda v: jax.lax.ppermute(v, "x", [(0, 2), (3, 1)]),
                                    P("x"), P("x")), (r(8, 6),)),
        Case("axis_index", sm(
            lambda v: v + jax.lax.axis_index("x").astype(jnp.float32), P("x"), P("x")),
            (r(8, 6),)),
        Case("mesh2d", sm(lambda v: jax.lax.psum(v, "b") * (1 + jax.lax.axis_index("a")),
                          P("a", "b"), P("a"), mesh2()), (r(8, 6),), **sums),
        Case("mesh2d_both", sm(lambda v: jax.lax.psum(v, ("a", "b")), P(None, ("a", "b")),
                               P(), mesh2()), (r(3, 8),), **sums),
        Case("outside_ops", jax.jit(lambda v: shard_map(
            lambda a: jax.lax.psum(a * 2, "x"), mesh=mesh1(), in_specs=P("x"),
            out_specs=P())(v + 1) - 3), (r(8, 6),), **sums),
        Case("loop_psum", sm(lambda v: jax.lax.fori_loop(
            0, 3, lambda i, a: jax.lax.psum(a, "x") * 0.25 + a, v), P("x"), P("x")),
            (r(8, 6),), rtol=1e-5, atol=1e-6),
        Case("fsdp_step", sm(fsdp_step, (P("x"), P("x"), P("x")), (P("x"), P())),
             (r(16, 4) * 0.3, r(8, 16), r(8, 4)), rtol=1e-5, atol=1e-6),
        # Multiples of 1/8 below 8 in magnitude: every partial sum of 4 is exact in bf16.
        Case("psum_bf16", sm(lambda v: jax.lax.psum(v, "x"), P("x"), P()),
             ((rng.integers(-63, 64, (8, 6)) / 8).astype(jnp.bfloat16),)),
        Case("pmap", jax.pmap(lambda v, w: jax.lax.psum(v * w, "i") + jax.lax.axis_index("i"),
                              axis_name="i"), (r(N, 3), r(N, 3)), **sums),
        Case("pmap_mean", jax.pmap(lambda v: (v - jax.lax.pmean(v, "i")) ** 2,
                                   axis_name="i"), (r(N, 5, 2),), **sums),
    ]
    return out


def save_inputs(leaves, folder):
    paths = []
    for i, a in enumerate(leaves):
        p = os.path.join(folder, f"arg{i}.npy")
        a = np.asarray(a)
        if a.dtype == jnp.bfloat16:  # bf16 travels as its raw bits (`<u2`)
            a = a.view(np.uint16)
        np.save(p, a, allow_pickle=False)
        paths.append(p)
    return paths


def check(name, got, want, rtol, atol):
    if want.dtype == jnp.bfloat16 and got.dtype == np.uint16:
        got = got.view(jnp.bfloat16)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}"
    if rtol == 0 and atol == 0:
        bad = got != want
    else:
        bad = ~(np.abs(got.astype(np.float64) - want.astype(np.float64))
                <= atol + rtol * np.abs(want.astype(np.float64)))
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return f"{name}: {int(bad.sum())} elements differ, first at {i}: got {got[i]!r}, want {want[i]!r}"
    return None


def run_case(case, xthunk, backend, mode, folder, timeout):
    lowered = case.fn.lower(*case.args)
    text = lowered.as_text()
    prog = os.path.join(folder, "case.mlir")
    with open(prog, "w") as f:
        f.write(text)
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(case.fn(*case.args))]
    leaves = jax.tree_util.tree_leaves(case.args)
    inputs = save_inputs(leaves, folder)
    out = os.path.join(folder, "out")
    run = ["run", prog, "--backend", backend]
    for i, p in enumerate(inputs):
        run += ["--input", f"arg{i}={p}"]
    run += ["--output-dir", out]
    if mode == "devices":
        cmd = [xthunk] + run[:2] + ["--devices", str(N)] + run[2:]
    else:
        cmd = [xthunk, "launch", "-n", str(N), "--"] + run
    with open(os.path.join(folder, "cmd.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [f"timed out after {timeout}s"]
    with open(os.path.join(folder, "log.txt"), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        lines = (r.stderr.strip() or r.stdout.strip()).splitlines()
        return [f"exit {r.returncode}: {lines[-1] if lines else ''}"]
    errors = []
    for rank in range(N):
        for i, w in enumerate(want):
            p = os.path.join(out, f"rank{rank}", f"out{i}.npy")
            if not os.path.exists(p):
                errors.append(f"rank {rank}: no out{i}.npy")
                continue
            e = check(f"rank {rank} out{i}", np.load(p), w, case.rtol, case.atol)
            if e:
                errors.append(e)
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xthunk", required=False)
    ap.add_argument("--backend", default="host")
    ap.add_argument("--mode", default="devices,launch")
    ap.add_argument("--cases", default="")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--keep")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--gspmd", action="store_true",
                    help="lower with Shardy off: GSPMD's @Sharding / @SPMDFullToShardShape form")
    a = ap.parse_args()
    if a.gspmd:
        jax.config.update("jax_use_shardy_partitioner", False)
    if len(jax.devices()) < N:
        print(f"spmd.py: JAX has {len(jax.devices())} devices, {N} needed", file=sys.stderr)
        return 1
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    pat = re.compile(a.cases)
    chosen = [c for c in cases(np.random.default_rng(seed)) if pat.search(c.name)]
    if a.list:
        for c in chosen:
            print(c.name)
        return 0
    if not a.xthunk:
        ap.error("--xthunk is required")
    failures = 0
    runs = 0
    for backend in a.backend.split(","):
        for mode in a.mode.split(","):
            for c in chosen:
                folder = tempfile.mkdtemp(prefix=f"spmd-{c.name}-")
                errors = run_case(c, a.xthunk, backend, mode, folder, a.timeout)
                runs += 1
                tag = f"{c.name} [{backend}, {mode}]"
                if errors:
                    failures += 1
                    print(f"FAIL {tag}: " + "; ".join(errors[:4]))
                else:
                    print(f"ok   {tag}")
                if a.keep:
                    dst = os.path.join(a.keep, f"{c.name}-{backend}-{mode}")
                    shutil.rmtree(dst, ignore_errors=True)
                    shutil.copytree(folder, dst)
                shutil.rmtree(folder, ignore_errors=True)
    print(f"{runs - failures} of {runs} passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
