"""`xthunk.jax.jit` against JAX's own CPU results: the user programs of the StableHLO test set
(stablehlo/jax/programs.py, compared by its compare.py with each program's tolerance) on the
host, and on emulated CUDA and ROCm under ci/with-emulator.sh; pytrees in and out, Python
scalars, the signature cache, bf16, static arguments and a refused op's error.
Skipped (with the reason) where jax is not installed."""

import os
import subprocess
import sys
import typing

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install xthunk[jax])")
pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (pip install xthunk[jax])")

import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402

import xthunk  # noqa: E402
import xthunk.jax as xj  # noqa: E402
from conftest import REPO  # noqa: E402

# The test set's own lowering, JAX results, comparison and jit adapter (stablehlo/jax/).
sys.path.insert(0, str(REPO / "stablehlo" / "jax"))
import cases as C  # noqa: E402
import programs as P  # noqa: E402
import run as R  # noqa: E402

PROGRAMS = [name for name, *_ in P.PROGRAMS]


def _check_program(name, runtime, rng):
    seed = int(rng.integers(2**32))
    (case,) = [c for c in P.cases(seed) if c.op == f"program:{name}"]
    text = C.lower(case)
    exp = C.expected(case, text)
    adapter = R.JitAdapter(runtime.backend, r"(?!)", runtime=runtime)  # a refusal fails here
    outcome = adapter.run(case, text, len(exp.outs), None)
    failure = R.check(case, text, exp, outcome)
    assert failure is None, f"{case.label()} (programs seed {seed}): {failure}"


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_on_host(name, host, rng):
    _check_program(name, host, rng)


@pytest.fixture(scope="module", params=["cuda", "rocm"])
def emulated(request):
    if "XTHUNK_EMULATOR_LIB" not in os.environ:
        if os.environ.get("XTHUNK_PY_REQUIRE_EMULATOR"):
            pytest.fail("XTHUNK_PY_REQUIRE_EMULATOR is set but the emulator is not loaded")
        pytest.skip("not under ci/with-emulator.sh (no XTHUNK_EMULATOR_LIB)")
    rt = xthunk.Runtime(request.param)
    assert rt.device(0).emulated
    return rt


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_emulated(name, emulated, rng):
    _check_program(name, emulated, rng)


class Pair(typing.NamedTuple):
    left: typing.Any
    right: typing.Any


def test_pytrees_in_and_out(host, rng):
    def f(d, pair, xs):
        return {
            "sum": d["a"] + d["b"],
            "pair": Pair(pair.left * 2, pair.right - 1),
            "list": [x * x for x in xs],
            "none": None,
            "scalar": jnp.sum(d["a"]),
        }

    d = {"a": rng.standard_normal((3, 4)).astype(np.float32),
         "b": rng.standard_normal((3, 4)).astype(np.float32)}
    pair = Pair(np.arange(5, dtype=np.int32), rng.standard_normal(2).astype(np.float32))
    xs = (rng.standard_normal(3).astype(np.float32), np.arange(4, dtype=np.int64))
    got = xj.jit(f, runtime=host)(d, pair, xs)
    want = jax.jit(f)(d, pair, xs)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    assert isinstance(got["pair"], Pair) and got["none"] is None
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape
    for k in ("sum", "pair", "list"):
        for g, w in zip(jax.tree_util.tree_leaves(got[k]), jax.tree_util.tree_leaves(want[k])):
            np.testing.assert_array_equal(g, np.asarray(w))
    np.testing.assert_allclose(got["scalar"], np.asarray(want["scalar"]), rtol=1e-6)


def test_signature_cache(host):
    f = xj.jit(lambda x, s: x * s + 1, runtime=host)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(f(x, 2.0), x * 2 + 1)
    # Same shapes and dtypes; a Python scalar's value is an input, not part of the signature.
    np.testing.assert_array_equal(f(x + 1, 3.0), (x + 1) * 3 + 1)
    assert (f.lowerings, f.cache_size()) == (1, 1)
    # A new shape, a new dtype: lowered and loaded again.
    np.testing.assert_array_equal(f(np.ones(4, np.float32), 2.0), np.full(4, 3, np.float32))
    assert (f.lowerings, f.cache_size()) == (2, 2)
    np.testing.assert_array_equal(f(np.ones(4, np.int32), 2), np.full(4, 3, np.int32))
    assert (f.lowerings, f.cache_size()) == (3, 3)
    f(x, 5.0)
    assert (f.lowerings, f.cache_size()) == (3, 3)
    assert "stablehlo.multiply" in f.lower(x, 2.0)
    assert [p.name for p in f.executable(x, 2.0).parameters] == ["arg0", "arg1"]
    f.clear_cache()
    f(x, 2.0)
    assert (f.lowerings, f.cache_size()) == (4, 1)


def test_unused_arguments_static_and_keywords(host):
    def f(x, unused, n, *, scale):
        return x * n * scale

    g = xj.jit(f, runtime=host, static_argnums=2)
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(g(x, np.zeros(7), 2, scale=np.float32(1.5)), x * 3)
    np.testing.assert_array_equal(g(x, np.zeros(7), 4, scale=np.float32(1.5)), x * 6)
    assert g.lowerings == 2
    assert [p.name for p in g.executable(x, np.zeros(7), 2, scale=np.float32(1.5)).parameters] \
        == ["arg0", "arg1", "arg2"]


def test_bf16(host, rng):
    bf = ml_dtypes.bfloat16
    a = rng.standard_normal((4, 8)).astype(bf)
    b = rng.standard_normal((4, 8)).astype(bf)
    f = xj.jit(lambda a, b: (a * b, (a * b).astype(jnp.float32)), runtime=host)
    prod, wide = f(a, b)
    want = jax.jit(lambda a, b: a * b)(a, b)
    assert prod.dtype == np.dtype(bf) and wide.dtype == np.float32
    # a bf16 product is exact in f32, then rounded once: bit-exact
    np.testing.assert_array_equal(prod.view(np.uint16), np.asarray(want).view(np.uint16))
    np.testing.assert_array_equal(wide, np.asarray(want).astype(np.float32))


def test_complex_fft_and_f8(host, rng):
    """Complex arrays in and out (numpy's complex64), an fft, and an f8 result (ml_dtypes')."""
    x = (rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6))).astype(np.complex64)

    def fn(a):
        return jnp.fft.fft(a), jnp.abs(a * a), jnp.real(a).astype(ml_dtypes.float8_e5m2)

    spec, mag, f8 = xj.jit(fn, runtime=host)(x)
    want = jax.jit(fn)(x)
    assert spec.dtype == np.complex64 and mag.dtype == np.float32
    assert f8.dtype == np.dtype(ml_dtypes.float8_e5m2)
    scale = float(np.abs(np.asarray(want[0])).max())
    assert np.abs(spec - np.asarray(want[0])).max() <= 64 * np.finfo(np.float32).eps * scale
    np.testing.assert_allclose(mag, np.asarray(want[1]), rtol=4 * np.finfo(np.float32).eps)
    # A conversion is exact: the same bits.
    np.testing.assert_array_equal(f8.view(np.uint8), np.asarray(want[2]).view(np.uint8))


def test_no_outputs(host):
    f = xj.jit(lambda x: None, runtime=host)
    assert f(np.ones(3, np.float32)) is None


def test_refused_op_names_op_and_position(host):
    # JAX's CPU QR is a LAPACK custom call on column-major layouts, which xthunk refuses.
    f = xj.jit(lambda x: jnp.linalg.qr(x)[0], runtime=host)
    x = np.ones((4, 4), np.float32)
    with pytest.raises(xthunk.XthunkError) as e:
        f(x)
    msg = str(e.value)
    m = R.re.search(r"\b(\d+):(\d+)\b", msg)
    assert "lapack_sgeqrf_ffi" in msg and m, msg
    # .lower gives the module even though xthunk refuses it; the position points at the op.
    line = f.lower(x).splitlines()[int(m.group(1)) - 1]
    assert "lapack_sgeqrf_ffi" in line[int(m.group(2)) - 1:], (msg, line)
    assert f.cache_size() == 0


def test_import_xthunk_without_jax():
    code = (
        "import sys; sys.modules['jax'] = None\n"
        "import xthunk\n"
        "try:\n"
        "    import xthunk.jax\n"
        "except ImportError as e:\n"
        "    assert 'pip install xthunk[jax]' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('xthunk.jax imported without jax')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
