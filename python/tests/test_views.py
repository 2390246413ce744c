"""Views of device arrays (issue 28, item 3): `reshape`, leading-axis slices and layout-keeping
transposes share their base's memory (no allocation; writes through `out=` show in the base;
DLPack sees the same host memory), keep the base alive, and run as inputs; strided selections
are refused naming what would need a copy. `run_spmd(keep_on_device=True)` gives each rank's
outputs as device arrays on its device."""

import gc

import numpy as np
import pytest

import xthunk
from conftest import EXAMPLES


def allocations(rt):
    return rt.device(0).memory_stats()["allocations_made"]


def doubler(rt, rows, cols):
    """`y = 2 * x` over f32[rows, cols] (a copy and the standard library's scale)."""
    b = xthunk.ProgramBuilder("double")
    x = b.parameter("x", "f32", [rows, cols])
    y = b.output("y", "f32", [rows, cols])
    m = b.standard_module()
    n = rows * cols
    b.copy(x, y)
    b.kernel(m, "scale_f32", n, [y.rw(), xthunk.scalar(2.0, "f32"), n])
    return rt.load(b.build())


def test_reshape_is_a_view_of_the_same_memory(host, rng):
    arr = rng.standard_normal((6, 4)).astype(np.float32)
    a = host.put(arr)
    before = allocations(host)
    r = a.reshape(4, 6)
    r2 = a.reshape((2, -1, 3))
    assert allocations(host) == before
    assert (r.shape, r2.shape, r2.ndim, r2.size) == ((4, 6), (2, 4, 3), 3, 24)
    np.testing.assert_array_equal(r.numpy(), arr.reshape(4, 6))
    np.testing.assert_array_equal(r2.numpy(), arr.reshape(2, 4, 3))
    assert np.shares_memory(np.from_dlpack(r), np.from_dlpack(a))


def test_reshape_errors_name_the_extent(host):
    a = host.put(np.zeros((6, 4), np.float32))
    with pytest.raises(xthunk.InvalidArgumentError, match=r"shape \[5, 5\] has 25 elements"):
        a.reshape(5, 5)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"shape\[1\] is a second -1"):
        a.reshape(-1, -1)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"shape\[0\] is -2"):
        a.reshape(-2, 3)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"cannot infer shape\[1\]"):
        a.reshape(5, -1)


def test_leading_axis_slices_are_views(host, rng):
    arr = rng.standard_normal((8, 3, 4)).astype(np.float32)
    a = host.put(arr)
    before = allocations(host)
    cases = {
        "2:5": (a[2:5], arr[2:5]),
        "int": (a[1], arr[1]),
        "negative": (a[-1], arr[-1]),
        "int then slice": (a[3, 1:3], arr[3, 1:3]),
        "ellipsis": (a[..., :], arr[..., :]),
        "full inner": (a[5:, :, :], arr[5:, :, :]),
        "empty": (a[4:4], arr[4:4]),
        "scalar": (a[7, 2, 3], arr[7, 2, 3]),
        "length-1 slice then slice": (a[1:2, 1:3], arr[1:2, 1:3]),
    }
    assert allocations(host) == before
    host_a = np.from_dlpack(a)
    for name, (view, want) in cases.items():
        assert view.shape == want.shape, name
        np.testing.assert_array_equal(view.numpy(), want, err_msg=name)
        if want.size:
            assert np.shares_memory(np.from_dlpack(view), host_a), name


def test_strided_selections_are_refused_naming_the_copy(host):
    a = host.put(np.zeros((6, 4), np.float32))
    with pytest.raises(xthunk.UnsupportedError, match="a step of 2 on axis 0"):
        a[::2]
    with pytest.raises(xthunk.UnsupportedError, match="slicing axis 1 after an earlier axis kept several positions"):
        a[1:3, 1:3]
    with pytest.raises(xthunk.UnsupportedError, match=r"rt\.put\(a\.numpy\(\)"):
        a[:, 1]
    with pytest.raises(xthunk.UnsupportedError, match="an integer on axis 1 after an axis that kept"):
        a[..., 2]
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 6"):
        a[6]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="index 0 is a str"):
        a["x"]


def test_transpose_is_a_view_only_where_the_layout_stays(host, rng):
    arr = rng.standard_normal((3, 1, 4)).astype(np.float32)
    a = host.put(arr)
    before = allocations(host)
    t = a.transpose(1, 0, 2)
    row = host.put(arr[0, 0][None, :])  # (1, 4)
    assert allocations(host) == before + 1
    np.testing.assert_array_equal(t.numpy(), arr.transpose(1, 0, 2))
    np.testing.assert_array_equal(row.T.numpy(), arr[0, 0][None, :].T)
    assert np.shares_memory(np.from_dlpack(t), np.from_dlpack(a))
    with pytest.raises(xthunk.UnsupportedError, match="would reorder its elements"):
        a.transpose()
    with pytest.raises(xthunk.UnsupportedError, match="would reorder its elements"):
        a.reshape(3, 4).T
    with pytest.raises(xthunk.InvalidArgumentError, match=r"axes\[1\] = 0 is out of range or repeated"):
        a.transpose(0, 0, 1)


def test_views_run_as_inputs_aligned_or_not(host, rng):
    exe = doubler(host, 3, 4)
    arr = rng.standard_normal((8, 3, 4)).astype(np.float32)
    a = host.put(arr)
    # Row i starts at 48·i bytes: a[4] is 64-byte aligned (run in place), a[1] is not
    # (copied on the device for the run).
    for i in (4, 1):
        got = exe.run({"x": a[i]})["y"]
        np.testing.assert_allclose(got, 2 * arr[i], rtol=0, atol=0, err_msg=f"row {i}")
    flat = host.put(arr.reshape(-1))
    got = exe.run({"x": flat[12:24].reshape(3, 4)})["y"]
    np.testing.assert_array_equal(got, 2 * arr.reshape(-1)[12:24].reshape(3, 4))


def test_a_view_keeps_its_base_alive(host, rng):
    exe = doubler(host, 2, 4)
    arr = rng.standard_normal((5, 2, 4)).astype(np.float32)
    a = host.put(arr)
    v = a[2:4].reshape(8, 2)[2:6].reshape(2, 4)
    live = host.device(0).memory_stats()["live_allocations"]
    del a
    gc.collect()
    assert host.device(0).memory_stats()["live_allocations"] == live
    want = arr[2:4].reshape(8, 2)[2:6].reshape(2, 4)
    np.testing.assert_array_equal(v.numpy(), want)
    np.testing.assert_array_equal(exe.run({"x": v})["y"], 2 * want)
    live = host.device(0).memory_stats()["live_allocations"]
    del v
    gc.collect()
    assert host.device(0).memory_stats()["live_allocations"] == live - 1  # the base's


def test_writing_through_a_view_in_out_changes_the_base(host, rng):
    exe = doubler(host, 2, 8)  # rows of 32 bytes
    base_arr = rng.standard_normal((8, 8)).astype(np.float32)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    base = host.put(base_arr)
    dx = host.put(np.zeros_like(x))
    target = base[2:4]  # 64 bytes in: aligned for the program
    exe.run({"x": dx}, out={"y": target})  # the first run may set up what runs keep
    before = allocations(host)
    dx = host.put(x)
    r = exe.run({"x": dx}, out={"y": target}, keep_on_device=True)
    assert r["y"] is target
    assert allocations(host) == before + 1  # `dx`'s: no output was allocated
    want = base_arr.copy()
    want[2:4] = 2 * x
    np.testing.assert_array_equal(base.numpy(), want)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"out\[`y`\] cannot be written in place: .*not aligned"):
        exe.run({"x": x}, out={"y": base[1:3]})


def test_run_spmd_keeps_results_on_each_ranks_device(rng):
    ranks = 4
    rt4 = xthunk.Runtime("host", host_devices=ranks)
    exe = rt4.load(EXAMPLES / "permute_ring.txtpb")
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(ranks)]
    out = exe.run_spmd([{"x": x} for x in xs], keep_on_device=True)
    assert len(out) == ranks
    for r, o in enumerate(out):
        assert isinstance(o["shifted"], xthunk.DeviceArray)
        assert o["shifted"].device.ordinal == r
        src = (r - 1) % ranks
        np.testing.assert_array_equal(o["shifted"].numpy(), xs[src])
        assert o["from_rank"].numpy().tolist() == [float(src)]
    # They run as inputs on their device: one more step of the ring, from device arrays.
    again = exe.run_spmd([{"x": o["shifted"].numpy()} for o in out])
    for r, o in enumerate(again):
        np.testing.assert_array_equal(o["shifted"], xs[(r - 2) % ranks])
