"""Shared fixtures: the repository's paths, a host runtime, fresh random numbers (the seed is
printed, so a failure can be replayed with XTHUNK_TEST_SEED), and the MLP's f64 reference."""

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import xthunk

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def rng():
    seed = int(os.environ.get("XTHUNK_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"seed {seed} (XTHUNK_TEST_SEED={seed} replays it)")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def host():
    return xthunk.Runtime("host")


def gelu(x):
    """The tanh approximation of GELU (the standard library's), in f64."""
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def mlp_inputs(rng, batch=64, d_in=512, hidden=1024, classes=10):
    """Inputs scaled so that the softmax is far from one-hot (the check sees every value)."""

    def u(shape, scale):
        return (rng.uniform(-1.0, 1.0, size=shape) * scale).astype(np.float32)

    return {
        "x": u((batch, d_in), 1.0),
        "w1": u((d_in, hidden), 3.0 / np.sqrt(d_in)),
        "b1": u((hidden,), 0.1),
        "w2": u((hidden, classes), 2.0 * np.sqrt(3.0 / hidden)),
        "b2": u((classes,), 0.1),
    }


def mlp_reference(a):
    """softmax(gelu(x @ w1 + b1) @ w2 + b2), computed in f64."""
    f = {k: v.astype(np.float64) for k, v in a.items()}
    return softmax(gelu(f["x"] @ f["w1"] + f["b1"]) @ f["w2"] + f["b2"])


@pytest.fixture(scope="session")
def plugin(tmp_path_factory):
    """The C test plugin (cli-tests/plugins/test_plugin.c), built with `cc` (not loaded)."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (`cc`) to build the test plugin")
    out = tmp_path_factory.mktemp("plugin") / "libxthunk_py_test_plugin.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", str(REPO / "include"), "-o",
         str(out), str(REPO / "cli-tests" / "plugins" / "test_plugin.c"), "-ldl"],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def plugin_targets(plugin):
    """What the process's first `load_plugin` of the test plugin registered (a plugin loads
    once per process: later loads return [])."""
    return xthunk.load_plugin(plugin)
