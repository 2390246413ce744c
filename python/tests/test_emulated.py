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
    # Kept on the devices: each rank's outputs on its own emulated device.
    kept = exe.run_spmd([{"x": x} for x in xs], keep_on_device=True)
    for r, o in enumerate(kept):
        d = o["shifted"]
        assert isinstance(d, xthunk.DeviceArray) and d.device.ordinal == r and d.device.emulated
        np.testing.assert_array_equal(d.numpy(), xs[(r - 1) % n])
        assert o["from_rank"].numpy().tolist() == [float((r - 1) % n)]


def test_donated_training_steps_on_emulated_cuda(cuda, rng):
    """The donated MLP training step (test_donate.py) on the emulated device: the same
    numbers as the blocking path, and no output allocated per step. (Each execution takes its
    temp arena from the device's stream-ordered pool, one allocation per step by design on
    CUDA: the count compared is the difference from the same loop without donation.)"""
    from test_donate import PROGRAM, WEIGHTS, inputs

    exe = cuda.load(PROGRAM)
    dev = cuda.device(0)
    w, data = inputs(rng)
    plain = dict(w)
    for _ in range(5):
        r = exe.run({**plain, **data})
        plain = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
    fixed = {k: cuda.put(v) for k, v in data.items()}

    def per_step(donate):
        weights = {k: cuda.put(v) for k, v in w.items()}
        loss = cuda.put(np.zeros((), np.float32))
        counts = []
        for _ in range(5):
            if donate:
                r = exe.run({**weights, **fixed}, keep_on_device=True, donate=WEIGHTS,
                            out={"out4": loss})
            else:
                r = exe.run({**weights, **fixed}, keep_on_device=True)
            weights = {k: r[f"out{i}"] for i, k in enumerate(WEIGHTS)}
            counts.append(dev.memory_stats()["allocations_made"])
        steps = {b - a for a, b in zip(counts, counts[1:])}
        assert len(steps) == 1, counts
        return steps.pop(), weights

    fresh, _ = per_step(False)
    donated, weights = per_step(True)
    assert fresh - donated == 5, (fresh, donated)
    for k in WEIGHTS:
        np.testing.assert_allclose(weights[k].numpy(), plain[k], rtol=0, atol=1e-6)


def test_async_runs_cancel_and_deadline_on_emulated_cuda(cuda, rng):
    """execute_async, cancel and deadline (test_async.py) on the emulated device: the endless
    host-driven `while` stops with CancelledError or DeadlineExceededError, a short run gives
    x + n."""
    from test_async import ENDLESS, PROGRAM, inputs

    exe = cuda.load(PROGRAM)
    args, want = inputs(rng, int(rng.integers(1, 40)))
    got = exe.execute_async(args).result(timeout=120)
    np.testing.assert_array_equal(got["out0"].astype(np.float64), want)
    endless, _ = inputs(rng, ENDLESS)
    e = exe.execute_async(endless)
    with pytest.raises(TimeoutError):
        e.result(timeout=0.1)
    e.cancel()
    with pytest.raises(xthunk.CancelledError):
        e.result(timeout=120)
    with pytest.raises(xthunk.DeadlineExceededError):
        exe.run(endless, deadline=0.2)


def test_device_array_views_on_emulated_cuda(cuda, rng):
    """Views are offsets into the device allocation: run in place when aligned, copied on the
    device when not, written through `out=`, and keep no extra allocation."""
    b = xthunk.ProgramBuilder("double")
    x = b.parameter("x", "f32", [3, 4])
    y = b.output("y", "f32", [3, 4])
    m = b.standard_module()
    b.copy(x, y)
    b.kernel(m, "scale_f32", 12, [y.rw(), xthunk.scalar(2.0, "f32"), 12])
    exe = cuda.load(b.build())
    arr = rng.standard_normal((8, 3, 4)).astype(np.float32)
    a = cuda.put(arr)
    stats = cuda.device(0).memory_stats
    before = stats()["allocations_made"]
    views = {i: a[i] for i in (4, 1)}  # 192 bytes in (aligned), 48 bytes in (not)
    assert stats()["allocations_made"] == before
    for i, v in views.items():
        np.testing.assert_array_equal(exe.run({"x": v})["y"], 2 * arr[i], err_msg=f"row {i}")
    base = cuda.put(np.zeros((8, 3, 4), np.float32))
    exe.run({"x": views[4]}, out={"y": base[4]})
    want = np.zeros((8, 3, 4), np.float32)
    want[4] = 2 * arr[4]
    np.testing.assert_array_equal(base.numpy(), want)
    np.testing.assert_array_equal(a.reshape(24, 4)[4:16].numpy(), arr.reshape(24, 4)[4:16])
