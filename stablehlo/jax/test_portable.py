"""StableHLO portable artifacts (issue 27 item 4): programs exported with `jax.export` run
through xthunk from their bytes — the whole `Exported.serialize()` and the bare VHLO bytecode
it holds (`mlir_module_serialized`) — from the CLI (`xthunk run FILE`, told by content, not by
name) and from Python (`Runtime.load(bytes)`). Each gives JAX's results on fresh random inputs
(each program's tolerance, compared by compare.py) and the same outputs, bit for bit, as the
module's text through the same CLI. The artifacts are made here, never stored.

The CLI is $XTHUNK_CLI (default target/debug/xthunk); skipped, saying why, without jax,
flatbuffers (jax.export's serializer needs it), the CLI or, for the Python door, the package."""

import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
pytest.importorskip("flatbuffers", reason="flatbuffers is not installed (jax.export needs it)")

import jax.numpy as jnp  # noqa: E402
from jax import export, lax  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cases as C  # noqa: E402
import compare as cmp  # noqa: E402
import programs as P  # noqa: E402
import run as R  # noqa: E402

CLI = os.environ.get("XTHUNK_CLI", str(HERE.parent.parent / "target" / "debug" / "xthunk"))


def _sort(x):
    return jnp.sort(x, axis=-1), jnp.argsort(x, axis=0)


def _gather_scatter(x, idx, upd):
    return x[idx], x.at[idx].add(upd), x.at[idx].max(upd)


def _cond(p, x):
    return lax.cond(p > 0, lambda v: jnp.tanh(v) * 2.0, lambda v: v - 1.0, x)


def _extra_cases(rng):
    x = rng.standard_normal((6, 7)).astype(np.float32)
    n = 8
    idx = rng.permutation(n)[:5].astype(np.int32)  # distinct: scatter results are exact
    return [
        C.Case("portable:sort", "f32", [x], fn=_sort, shape=()),
        C.Case("portable:gather_scatter", "f32",
               [rng.standard_normal((n, 3)).astype(np.float32), idx,
                rng.standard_normal((5, 3)).astype(np.float32)],
               fn=_gather_scatter, shape=()),
        C.Case("portable:cond", "f32",
               [np.float32(rng.choice([-1.0, 1.0])), x], fn=_cond, tol=P.F32_TOL, shape=()),
    ]


def _all_cases(seed):
    return P.cases(seed) + _extra_cases(np.random.default_rng([seed, 27]))


NAMES = [c.op for c in _all_cases(0)]


def _case(name, rng):
    seed = int(rng.integers(2**32))
    (case,) = [c for c in _all_cases(seed) if c.op == name]
    return case, seed


def _exported(case):
    args = C.call_args(case, case.args)
    specs = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype), args)
    exp = export.export(jax.jit(case.fn, keep_unused=True))(*specs)
    assert exp.nr_devices == 1 and len(exp.in_avals) == len(case.args)
    return exp


def _cli_run(prog: str, case, n_out: int, workdir: str):
    inputs = R.write_inputs(case.args, workdir)
    outdir = os.path.join(workdir, "out-" + os.path.basename(prog))
    os.mkdir(outdir)
    cmd = [CLI, "run", prog, "--backend", "host", "--output-dir", outdir]
    for i, p in enumerate(inputs):
        cmd += ["--input", f"arg{i}={p}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr.strip()[-2000:]}"
    out = R.read_outputs(outdir, n_out)
    assert out.kind == "ok", out.message
    return out


def _check(case, seed, text, exp, outcome, how):
    failure = R.check(case, text, exp, outcome)
    assert failure is None, f"{case.label()} ({how}, seed {seed}): {failure}"


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("name", NAMES)
def test_cli_runs_exported_bytes(name, rng):
    if not os.access(CLI, os.X_OK):
        pytest.skip(f"no xthunk CLI at {CLI} (set XTHUNK_CLI)")
    case, seed = _case(name, rng)
    text = C.lower(case)
    exp = C.expected(case, text)
    exported = _exported(case)
    with tempfile.TemporaryDirectory() as d:
        # Names that say nothing: the CLI tells the forms by their content.
        files = {"serialized": exported.serialize(), "vhlo": exported.mlir_module_serialized}
        results = {}
        for form, data in files.items():
            prog = os.path.join(d, f"model-{form}.bin")
            pathlib.Path(prog).write_bytes(bytes(data))
            out = _cli_run(prog, case, len(exp.outs), d)
            _check(case, seed, text, exp, out, f"CLI, {form} bytes")
            results[form] = out.outs
        mlir = os.path.join(d, "model.mlir")
        pathlib.Path(mlir).write_text(text)
        from_text = _cli_run(mlir, case, len(exp.outs), d).outs
    for form, outs in results.items():
        for i, (a, b) in enumerate(zip(outs, from_text)):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), f"{case.label()} out{i}: {form} bytes and text differ"


@pytest.mark.parametrize("name", NAMES)
def test_python_loads_exported_bytes(name, rng):
    xthunk = pytest.importorskip("xthunk", reason="the xthunk Python package is not installed")
    case, seed = _case(name, rng)
    text = C.lower(case)
    exp = C.expected(case, text)
    exported = _exported(case)
    rt = xthunk.Runtime("host")
    for form, data in [("serialized", bytes(exported.serialize())),
                       ("vhlo", bytes(exported.mlir_module_serialized))]:
        exe = rt.load(data)
        res = exe.run({p.name: np.asarray(a) for p, a in zip(exe.parameters, case.args)})
        outs = [np.asarray(res[o.name]) for o in exe.outputs]
        _check(case, seed, text, exp, R.Outcome("ok", outs), f"Python, {form} bytes")


def test_cli_refuses_a_newer_artifact():
    if not os.access(CLI, os.X_OK):
        pytest.skip(f"no xthunk CLI at {CLI} (set XTHUNK_CLI)")
    exported = _exported(_all_cases(0)[-1])
    data = bytes(exported.mlir_module_serialized)
    start = data.index(b"StableHLO_v")
    end = data.index(b"\0", start)
    newer = data[:start] + b"StableHLO_v9.99.0".ljust(end - start, b"\0")[: end - start] + data[end:]
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "newer.bin")
        pathlib.Path(prog).write_bytes(newer)
        r = subprocess.run([CLI, "inspect", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "9.99.0" in r.stderr and "newer" in r.stderr, r.stderr
