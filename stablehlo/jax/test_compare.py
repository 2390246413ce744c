"""Self-test of compare.py: each kind of difference the op tests rely on is caught."""

import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare as cmp  # noqa: E402
from compare import Exact, Rel, Ulp, compare, ulp_distance  # noqa: E402

FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def next_up(x):
    a = np.asarray(x)
    bits = a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
    return (bits + 1).view(a.dtype)


def test_identical_passes():
    for dt in FLOATS:
        a = np.array([1.5, -0.0, np.inf, np.nan, 3.0], dt)
        assert compare(a.copy(), a, Exact()) is None


def test_one_ulp_caught_where_exact():
    for dt in FLOATS:
        want = np.array([1.0, 2.0, 3.0], dt)
        got = want.copy()
        got[1] = next_up(want[1])
        m = compare(got, want, Exact())
        assert m is not None and m.index == (1,), m
        assert compare(got, want, Ulp(1)) is None


def test_ulp_bound_counts():
    want = np.array([1.0], np.float32)
    got = want.view(np.uint32) + np.uint32(3)
    got = got.view(np.float32)
    assert compare(got, want, Ulp(2)) is not None
    assert compare(got, want, Ulp(3)) is None
    assert ulp_distance(np.array([-0.0], np.float32), np.array([0.0], np.float32))[0] == 0
    big = np.array([np.finfo(np.float32).max], np.float32)
    assert ulp_distance(np.array([np.inf], np.float32), big)[0] == 1


def test_nan_vs_number():
    for dt in FLOATS:
        want = np.array([np.nan, 1.0], dt)
        got = np.array([0.0, 1.0], dt)
        for tol in (Exact(), Ulp(1000), Rel(1.0)):
            m = compare(got, want, tol)
            assert m is not None and m.index == (0,), (tol, m)
            m = compare(want, got, tol)
            assert m is not None and m.index == (0,), (tol, m)


def test_nan_payloads_are_equal():
    want = np.array([np.nan], np.float32)
    got = np.array([0xFFC00001], np.uint32).view(np.float32)
    assert compare(got, want, Exact()) is None


def test_signed_zero():
    for dt in FLOATS:
        want = np.array([-0.0], dt)
        got = np.array([0.0], dt)
        assert compare(got, want, Exact()) is not None
        assert compare(want, got, Exact()) is not None
        assert compare(got, want, Ulp(0)) is None


def test_shape_and_dtype_mismatch():
    want = np.zeros((2, 3), np.float32)
    assert compare(np.zeros((3, 2), np.float32), want, Exact()).reason == "shape"
    assert compare(np.zeros((6,), np.float32), want, Exact()).reason == "shape"
    assert compare(np.zeros((2, 3), np.float64), want, Exact()).reason == "dtype"
    assert compare(np.zeros((2, 3), np.int32), want, Exact()).reason == "dtype"
    assert compare(np.zeros((), np.float32), np.zeros((1,), np.float32), Exact()) is not None


def test_integers_and_bools():
    want = np.array([np.iinfo(np.int64).min, 5], np.int64)
    got = want.copy()
    got[0] += 1
    assert compare(got, want, Exact()).index == (0,)
    assert compare(np.array([True, False]), np.array([True, True]), Exact()).index == (1,)
    u = np.array([2**64 - 1], np.uint64)
    assert compare(u - np.uint64(1), u, Exact()) is not None


def test_bf16_raw_bits_accepted():
    want = np.array([1.0, -2.5], ml_dtypes.bfloat16)
    assert compare(want.view(np.uint16), want, Exact()) is None
    bad = want.view(np.uint16).copy()
    bad[0] += 1
    assert compare(bad, want, Exact()) is not None


def test_infinities():
    want = np.array([np.inf], np.float32)
    assert compare(np.array([-np.inf], np.float32), want, Rel(1.0)) is not None
    assert compare(np.array([1e38], np.float32), want, Rel(1.0)) is not None
    assert compare(np.array([np.inf], np.float32), want, Rel(0.0)) is None


def test_relative_with_magnitude():
    want = np.array([0.0], np.float32)
    got = np.array([1e-6], np.float32)
    assert compare(got, want, Rel(1e-7)) is not None
    assert compare(got, want, Rel(1e-7), mag=np.array([100.0])) is None


def test_alternative_reference():
    want = np.array([0.0, 1.0], np.float32)
    alt = np.array([1e-40, 1.0], np.float32)
    got = np.array([1e-40, 1.0], np.float32)
    assert compare(got, want, Exact()) is not None
    assert compare(got, want, Exact(), alts=[alt]) is None
    assert compare(np.array([2e-40, 1.0], np.float32), want, Exact(), alts=[alt]) is not None


def test_relative_to_the_largest_element():
    want = np.array([1000.0, 1e-3], np.float32)
    got = np.array([1000.0, 2e-3], np.float32)
    assert compare(got, want, Rel(1e-6)) is not None
    assert compare(got, want, Rel(1e-6, atol_of_max=1e-5)) is None
    assert compare(got, want, Rel(1e-6, atol_of_max=1e-7)) is not None


def test_complex_parts_and_magnitude():
    want = np.array([1 + 2j, np.nan + 0j, 3 - 4j], np.complex64)
    assert cmp.compare(want.copy(), want, cmp.Exact()) is None
    bad = want.copy()
    bad[2] = 3 - 4.5j
    m = cmp.compare(bad, want, cmp.Exact())
    assert m is not None and m.index == (2,) and "imag part" in m.reason
    # A relative bound is taken against |want| (5 here), so a part may be off by 5*rtol.
    near = want.copy()
    near[2] = 3 - (4 + 4e-6) * 1j
    assert cmp.compare(near, want, cmp.Rel(1e-6)) is None
    assert cmp.compare(near, want, cmp.Rel(1e-7)) is not None


def test_f8_travels_as_bytes():
    f8 = cmp.F8[0]
    want = np.array([0x7F, 0x80, 0x01], np.uint8).view(f8)
    got = np.array([0xFF, 0x80, 0x01], np.uint8)  # NaN of the other sign, -0, the subnormal
    assert cmp.compare(got, want, cmp.Exact()) is None
    got[2] = 0x02
    assert cmp.compare(got, want, cmp.Exact()) is not None
