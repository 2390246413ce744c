"""Loading and running the examples on the host, compared with numpy references computed in
f64; device arrays that stay on the device; the GIL released while a program runs."""

import threading
import time

import numpy as np
import xthunk
from conftest import EXAMPLES, mlp_inputs, mlp_reference

TOL = 1e-4


def test_devices_lists_the_host():
    devs = xthunk.devices()
    host = [d for d in devs if d["backend"] == "host"]
    assert len(host) == 1 and host[0]["ordinal"] == 0 and not host[0]["emulated"]


def test_mlp_from_a_path_matches_numpy(host, rng):
    exe = host.load(str(EXAMPLES / "mlp.txtpb"))
    assert exe.name == "mlp"
    assert [p.name for p in exe.parameters] == ["x", "w1", "b1", "w2", "b2"]
    assert exe.parameters[1].shape == (512, 1024) and exe.parameters[1].dtype == "float32"
    assert [(o.name, o.shape) for o in exe.outputs] == [("probs", (64, 10))]
    a = mlp_inputs(rng)
    probs = exe(**a)
    assert probs.dtype == np.float32 and probs.shape == (64, 10)
    ref = mlp_reference(a)
    np.testing.assert_allclose(probs, ref, rtol=0, atol=TOL)
    assert (probs.max(axis=1) < 0.99).sum() > 32, "rows are spread, not one-hot"
    # run() gives the same, by name.
    out = exe.run(a)
    assert list(out) == ["probs"]
    np.testing.assert_array_equal(out["probs"], probs)


def test_loads_text_bytes_and_a_pathlike(host, rng):
    text = (EXAMPLES / "mlp.txtpb").read_bytes()
    from_text = host.load(text)
    a = mlp_inputs(rng)
    ref = mlp_reference(a)
    np.testing.assert_allclose(from_text(**a), ref, rtol=0, atol=TOL)
    np.testing.assert_allclose(host.load(EXAMPLES / "mlp.txtpb")(**a), ref, rtol=0, atol=TOL)


def test_while_async_matches_its_closed_form(host, rng):
    exe = host.load(EXAMPLES / "while_async.txtpb")
    w0, target, x = (rng.standard_normal(256).astype(np.float32) for _ in range(3))
    out = exe.run({"w0": w0, "target": target, "x": x})
    t64 = target.astype(np.float64)
    np.testing.assert_allclose(out["w"], t64 + 0.75**10 * (w0 - t64), rtol=0, atol=1e-5)
    np.testing.assert_allclose(out["y"], 2.0 * np.tanh(x.astype(np.float64)), rtol=0, atol=1e-5)


def test_device_arrays_stay_on_the_device(host, rng):
    exe = host.load(EXAMPLES / "mlp.txtpb")
    a = mlp_inputs(rng)
    on_device = {k: host.put(v) for k, v in a.items()}
    assert on_device["w1"].shape == (512, 1024) and on_device["w1"].dtype == "float32"
    out = exe.run(on_device, keep_on_device=True)
    probs = out["probs"]
    assert isinstance(probs, xthunk.DeviceArray)
    np.testing.assert_allclose(probs.numpy(), mlp_reference(a), rtol=0, atol=TOL)
    np.testing.assert_array_equal(np.asarray(probs), probs.numpy())
    # Mixed: weights on the device, a new batch from numpy.
    x2 = rng.uniform(-1, 1, size=(64, 512)).astype(np.float32)
    mixed = exe(**{**on_device, "x": x2})
    np.testing.assert_allclose(mixed, mlp_reference({**a, "x": x2}), rtol=0, atol=TOL)


def test_the_gil_is_released_while_running(host, rng):
    exe = host.load(EXAMPLES / "mlp.txtpb")
    a = mlp_inputs(rng)
    exe(**a)  # warm: modules loaded, state pooled
    ticks = []
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=counter)
    t.start()
    try:
        start = time.perf_counter()
        for _ in range(3):
            exe(**a)
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    during = [x for x in ticks if start <= x <= end]
    # With the GIL held for the whole run the counter could not tick at all meanwhile.
    assert len(during) >= 3, f"{len(during)} ticks in {end - start:.3f} s of running"


def test_loads_stablehlo_from_a_path_and_from_text(host):
    from conftest import REPO

    path = REPO / "stablehlo" / "tests" / "fixtures" / "while.mlir"
    a = {"arg0": np.array(2.5, dtype=np.float32), "arg1": np.array([1, 2, 3], dtype=np.float32)}
    for program in (path, str(path), path.read_bytes(), path.read_text()):
        exe = host.load(program)
        assert [p.name for p in exe.parameters] == ["arg0", "arg1"]
        out = exe.run(a)
        assert list(out) == ["out0", "out1"]
        # x += 1 while x < 10: eight trips from 2.5; the array doubles each trip.
        np.testing.assert_array_equal(out["out0"], np.float32(10.5))
        np.testing.assert_array_equal(out["out1"], np.array([256, 512, 768], dtype=np.float32))
