"""Comparison of an xthunk output with JAX's: bit-exact, ULP-bounded or relative, per op.

Three kinds of tolerance, each a small class with a `describe()` for the failure line:

* `Exact()`: the same bits. Floats: NaN == NaN (any sign or payload), +0 != -0, every other
  value bit for bit. Integers and booleans: the same value.
* `Ulp(n)`: floats within n units in the last place, counted on the ordered line of the
  type's values (so -0 and +0 are 0 apart, the largest finite value and inf 1 apart). NaN
  only matches NaN.
* `Rel(rtol, atol)`: |got - want| <= rtol * mag + atol, where mag is a magnitude array the
  case supplies (for sums and dots: the same computation on |x|, the bound of any summation
  order) or |want|. Non-finite values must match exactly (NaN == NaN, inf with its sign).

`compare(got, want, tol, alts=(), mag=None)` returns None or a `Mismatch` naming the first
element that matches none of the references (`want` and the acceptable alternatives `alts`,
e.g. the IEEE result where XLA:CPU flushes subnormals).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))
FLOAT_DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)) + F8
_UINT_OF_WIDTH = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_INT_OF_WIDTH = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def is_float(dtype) -> bool:
    return np.dtype(dtype) in FLOAT_DTYPES


def eps(dtype) -> float:
    """The distance from 1 to the next larger value of a float type."""
    return float(ml_dtypes.finfo(dtype).eps)


def tiny(dtype) -> float:
    """The smallest positive normal value of a float type."""
    return float(ml_dtypes.finfo(dtype).tiny)


@dataclasses.dataclass(frozen=True)
class Exact:
    def describe(self) -> str:
        return "bit-exact"


@dataclasses.dataclass(frozen=True)
class Ulp:
    n: int

    def describe(self) -> str:
        return f"<= {self.n} ulp"


@dataclasses.dataclass(frozen=True)
class Rel:
    rtol: float
    atol: float = 0.0
    atol_of_max: float = 0.0  # adds atol_of_max * max(|want|) over the finite elements

    def describe(self) -> str:
        extra = f" + {self.atol_of_max:.3g}*max|want|" if self.atol_of_max else ""
        atol = f" + {self.atol:.3g}" if self.atol else ""
        return f"|d| <= {self.rtol:.3g}*mag{atol}{extra}"


Tol = Exact | Ulp | Rel


@dataclasses.dataclass
class Mismatch:
    index: tuple
    got: object
    want: object
    reason: str

    def __str__(self) -> str:
        return f"{self.reason} at {list(self.index)}: got {self.got!r} want {self.want!r}"


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(_UINT_OF_WIDTH[a.dtype.itemsize])


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float values mapped to int64 so that adjacent floats are adjacent integers."""
    width = a.dtype.itemsize
    s = a.view(_INT_OF_WIDTH[width]).astype(np.int64)
    mag_mask = np.int64((1 << (8 * width - 1)) - 1)
    mag = s & mag_mask
    return np.where(s < 0, -mag, mag)


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise ULP distance of two float arrays of one type, as float64 (inf for NaN)."""
    og, ow = _ordered(got), _ordered(want)
    same_sign = (og >= 0) == (ow >= 0)
    with np.errstate(over="ignore"):
        d_same = np.abs(og - ow).astype(np.float64)
    d_cross = np.abs(og).astype(np.float64) + np.abs(ow).astype(np.float64)
    d = np.where(same_sign, d_same, d_cross)
    gn, wn = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    d = np.where(gn & wn, 0.0, d)
    return np.where(gn ^ wn, np.inf, d)


def _matches(got: np.ndarray, want: np.ndarray, tol: Tol, mag) -> np.ndarray:
    """Boolean array: which elements of got are acceptable against this reference."""
    if not is_float(want.dtype):
        return got == want
    with np.errstate(all="ignore"):
        return _matches_float(got, want, tol, mag)


def _matches_float(got: np.ndarray, want: np.ndarray, tol: Tol, mag) -> np.ndarray:
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    gn, wn = np.isnan(g64), np.isnan(w64)
    if isinstance(tol, Exact):
        return (_bits(got) == _bits(want)) | (gn & wn)
    if isinstance(tol, Ulp):
        return ulp_distance(got, want) <= tol.n
    m = np.abs(w64) if mag is None else np.abs(np.asarray(mag, dtype=np.float64))
    finite = np.isfinite(g64) & np.isfinite(w64)
    atol = tol.atol
    if tol.atol_of_max and np.isfinite(w64).any():
        atol += tol.atol_of_max * float(np.abs(w64[np.isfinite(w64)]).max())
    close = np.abs(g64 - w64) <= tol.rtol * m + atol
    nonfinite_same = (gn & wn) | (~gn & ~wn & ~finite & (g64 == w64))
    return np.where(finite, close, nonfinite_same)


def _scalar(a: np.ndarray, idx: tuple):
    v = a[idx]
    if is_float(a.dtype):
        f = float(v)
        if f == 0.0 or np.isnan(f):
            return f"{f!r}(bits 0x{int(_bits(np.asarray(v))):x})"
        return f
    return v.item() if hasattr(v, "item") else v


def normalize(got: np.ndarray, want_dtype) -> np.ndarray:
    """bf16 travels in .npy files as its raw bits (`<u2` or `V2`): view it as bfloat16."""
    want_dtype = np.dtype(want_dtype)
    if want_dtype == BF16 and got.dtype != BF16 and got.dtype.itemsize == 2:
        if got.dtype.kind in "uV":
            return got.view(BF16)
    # The 8-bit floats likewise travel as their raw bits (`|u1`).
    if want_dtype in F8 and got.dtype != want_dtype and got.dtype.itemsize == 1:
        if got.dtype.kind in "uV":
            return got.view(want_dtype)
    return got


def _compare_complex(got, want, tol, alts, mag) -> Optional[Mismatch]:
    """Complex: the real and the imaginary parts each under tol; a relative bound is taken
    against the complex magnitude |want| (so a part that cancels to near zero is held to the
    accuracy of the whole value, as a complex result is)."""
    if isinstance(tol, Rel) and mag is None:
        # Where |want| is not finite the finite parts must match exactly.
        with np.errstate(all="ignore"):
            m = np.abs(want).astype(np.float64)
        mag = np.where(np.isfinite(m), m, 0.0)
    for part, name in ((np.real, "real"), (np.imag, "imag")):
        m = compare(np.ascontiguousarray(part(got)), np.ascontiguousarray(part(want)), tol,
                    [np.ascontiguousarray(part(np.asarray(a))) for a in alts
                     if np.asarray(a).dtype == want.dtype and np.asarray(a).shape == want.shape],
                    mag)
        if m is not None:
            m.reason = f"{name} part: {m.reason}"
            m.got, m.want = got[m.index] if m.index else got, want[m.index] if m.index else want
            return m
    return None


def compare(
    got: np.ndarray,
    want: np.ndarray,
    tol: Tol,
    alts: Sequence[np.ndarray] = (),
    mag: Optional[np.ndarray] = None,
) -> Optional[Mismatch]:
    """None if got matches want (or, element by element, one of alts) under tol."""
    got, want = np.asarray(got), np.asarray(want)
    got = normalize(got, want.dtype)
    if got.dtype != want.dtype:
        return Mismatch((), str(got.dtype), str(want.dtype), "dtype")
    if got.shape != want.shape:
        return Mismatch((), got.shape, want.shape, "shape")
    if np.iscomplexobj(want):
        return _compare_complex(got, want, tol, alts, mag)
    ok = _matches(got, want, tol, mag)
    for alt in alts:
        if ok.all():
            break
        alt = np.asarray(alt)
        if alt.dtype == want.dtype and alt.shape == want.shape:
            ok = ok | _matches(got, alt, tol, mag)
    if ok.all():
        return None
    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
    reason = tol.describe()
    if isinstance(tol, Ulp) and is_float(want.dtype):
        d = ulp_distance(got[idx][None], want[idx][None])[0]
        reason += f" (off by {d:g} ulp)"
    return Mismatch(idx, _scalar(got, idx), _scalar(want, idx), reason)
