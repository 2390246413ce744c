"""SPMD on 4 host devices (collectives among them), and DLPack with numpy."""

import numpy as np
import pytest

import xthunk
from conftest import EXAMPLES

RANKS = 4


@pytest.fixture(scope="module")
def rt4():
    return xthunk.Runtime("host", host_devices=RANKS)


def test_permute_ring_on_4_host_devices(rt4, rng):
    exe = rt4.load(EXAMPLES / "permute_ring.txtpb")
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(RANKS)]
    out = exe.run_spmd([{"x": x} for x in xs])
    assert len(out) == RANKS
    for r, o in enumerate(out):
        src = (r - 1) % RANKS
        np.testing.assert_array_equal(o["shifted"], xs[src])
        assert o["from_rank"].tolist() == [float(src)]


def test_dp_step_all_reduces_on_4_host_devices(rt4, rng):
    exe = rt4.load(EXAMPLES / "dp_step.txtpb")
    lr, (b, f, t) = 0.05, (32, 64, 16)
    ins = [
        {
            "x": rng.standard_normal((b, f)).astype(np.float32),
            "y": rng.standard_normal((b, t)).astype(np.float32),
            "w0": rng.standard_normal((f, t)).astype(np.float32),
        }
        for _ in range(RANKS)
    ]
    out = exe.run_spmd(ins)
    w0 = ins[0]["w0"].astype(np.float64)  # rank 0's weights are broadcast
    grad = sum(i["x"].astype(np.float64).T @ (i["x"].astype(np.float64) @ w0 - i["y"]) for i in ins)
    w_new = w0 - lr / (b * RANKS) * grad
    for r, o in enumerate(out):
        np.testing.assert_allclose(o["grad"], grad, rtol=1e-3, atol=1e-3, err_msg=f"rank {r}")
        np.testing.assert_allclose(o["w"], w_new, rtol=1e-5, atol=1e-5, err_msg=f"rank {r}")


def test_spmd_refuses_more_ranks_than_devices(rt4, rng):
    exe = rt4.load(EXAMPLES / "permute_ring.txtpb")
    x = rng.standard_normal(256).astype(np.float32)
    with pytest.raises(xthunk.InvalidArgumentError, match="5 devices asked of backend `host`, which has 4"):
        exe.run_spmd([{"x": x}] * 5)
    with pytest.raises(xthunk.InvalidArgumentError, match="rank 2: "):
        exe.run_spmd([{"x": x}, {"x": x}, {"x": x[:8]}, {"x": x}])


def test_dlpack_round_trip_with_numpy(host, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    d = xthunk.from_dlpack(a)
    assert isinstance(d, xthunk.DeviceArray) and d.shape == (3, 5) and d.dtype == "float32"
    assert d.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(d)
    np.testing.assert_array_equal(back, a)
    # Export shares the device memory: a write through numpy is seen by the device array.
    back[1, 2] = 42.0
    assert d.numpy()[1, 2] == 42.0
    # Import copies: the source is independent of the device array.
    a[0, 0] = -7.0
    assert d.numpy()[0, 0] != -7.0
    # The shared view keeps the memory alive after the device array is gone.
    del d
    assert back[1, 2] == 42.0


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "float16", "float64", "bool",
                                   "complex64", "complex128"])
def test_dlpack_dtypes(dtype, rng):
    a = (np.abs(rng.standard_normal(7)) * 10).astype(dtype)
    np.testing.assert_array_equal(np.from_dlpack(xthunk.from_dlpack(a)), a)


def test_dlpack_refuses_strided_arrays():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    with pytest.raises((xthunk.InvalidArgumentError, BufferError)):
        xthunk.from_dlpack(a)
