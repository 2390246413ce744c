"""The CUDA backend through the driver emulator (EMULATED devices, never a GPU result): the MLP
run from Python matches the f64 reference, and SPMD on 4 emulated devices moves the data. Runs under ci/with-emulator.sh, which sets
XTHUNK_EMULATOR_LIB; without it the test is skipped (and fails where XTHUNK_REQUIRE_EMULATOR
is set, as in ci/test.sh's emulated step)."""

import os

import numpy as np
import pytest

import xthunk
from conftest import EXAMPLES, mlp_inputs, mlp_reference


@pytest.fixture
def cuda():
    if "XTHUNK_EMULATOR_LIB" not in os.environ:
        if os.environ.get("XTHUNK_PY_REQUIRE_EMULATOR"):
            pytest.fail("XTHUNK_PY_REQUIRE_EMULATOR is set but the emulator is not loaded")
        pytest.skip("not under ci/with-emulator.sh (no XTHUNK_EMULATOR_LIB)")
    return xthunk.Runtime("cuda")


def test_mlp_on_emulated_cuda(cuda, rng):
    dev = cuda.device(0)
    assert dev.backend == "cuda" and dev.emulated, dev
    exe = cuda.load(EXAMPLES / "mlp.txtpb")
    a = mlp_inputs(rng)
    np.testing.assert_allclose(exe(**a), mlp_reference(a), rtol=0, atol=1e-4)
    # Device arrays stay on the emulated device between calls.
    on_device = {k: cuda.put(v) for k, v in a.items()}
    out = exe.run(on_device, keep_on_device=True)["probs"]
    assert out.device.emulated
    np.testing.assert_allclose(out.numpy(), mlp_reference(a), rtol=0, atol=1e-4)
    # An emulated device's memory is not shared through DLPack.
    with pytest.raises(xthunk.UnsupportedError, match="emulated"):
        out.__dlpack__()


def test_spmd_on_emulated_cuda_devices(cuda, rng):
    """permute_ring on 4 emulated CUDA devices, through the emulator's NCCL."""
    ranks = len([d for d in xthunk.devices() if d["backend"] == "cuda"])
    if ranks < 4:
        pytest.skip(f"{ranks} emulated CUDA device(s), permute_ring needs 4 (XTHUNK_EMU_DEVICES=4)")
    exe = cuda.load(EXAMPLES / "permute_ring.txtpb")
    n = 4
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(n)]
    out = exe.run_spmd([{"x": x} for x in xs])
    for r, o in enumerate(out):
        np.testing.assert_array_equal(o["shifted"], xs[(r - 1) % n])
        assert o["from_rank"].tolist() == [float((r - 1) % n)]
