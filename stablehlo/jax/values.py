"""Element types, special values and random inputs of the StableHLO test cases.

Every draw takes a numpy Generator, so a case set is a function of its seed. Floats mix
special values (NaN of both signs, +-0, +-inf, the largest finite value, the smallest normal,
subnormals, ties for rounding) with values spread over the type's exponent range; integers
mix their extremes (min, max, 0, -1, 1) with values over the whole range and small ones.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
}
FLOATS = ["f16", "bf16", "f32", "f64"]
SINTS = ["i8", "i16", "i32", "i64"]
UINTS = ["u8", "u16", "u32", "u64"]
INTS = SINTS + UINTS
ALL = ["i1"] + INTS + FLOATS
COMPLEX = ["c64", "c128"]
F8 = ["f8e4m3fn", "f8e5m2"]
NAME_OF = {v: k for k, v in DTYPES.items()}
# Exponent spread of the ordinary (non-special) random floats, by type.
_EXP_RANGE = {"f16": (-14, 15), "bf16": (-40, 40), "f32": (-40, 40), "f64": (-80, 80)}


def dt(name: str) -> np.dtype:
    return DTYPES[name]


def bits(name: str) -> int:
    return 1 if name == "i1" else DTYPES[name].itemsize * 8


def float_specials(name: str, subnormals: bool = True) -> list[float]:
    fi = ml_dtypes.finfo(DTYPES[name])
    big, tiny = float(fi.max), float(fi.tiny)
    sub = float(fi.smallest_subnormal)
    v = [np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, big, -big, tiny, -tiny]
    v += [1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.5, -0.49999997, 1e300, -1e300]
    if subnormals:
        v += [sub, -sub, tiny - sub, -(tiny / 2)]
    return v


def int_specials(name: str) -> list[int]:
    if name == "i1":
        return [0, 1]
    ii = np.iinfo(DTYPES[name])
    v = [int(ii.min), int(ii.max), 0, 1, 2, int(ii.max) - 1]
    if ii.min < 0:
        v += [-1, int(ii.min) + 1, -2]
    return v


def _cast(name: str, values) -> np.ndarray:
    d = DTYPES[name]
    if name in FLOATS:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.asarray(values, np.float64).astype(d)
    return np.asarray(values, dtype=object).astype(d)


def draw(rng, name: str, shape, kind: str = "any", p_special: float = 0.3,
         subnormals: bool = True) -> np.ndarray:
    """Random values of one type and shape.

    kind: "any" (the whole range and specials), "moderate" (floats ~N(0,1), small ints,
    no specials), "trig" (floats of magnitude up to 2**10 and specials), "positive"
    (ordinary values > 0, specials included), "small" (ints in [-3, 3]).
    """
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if name == "i1":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if name in FLOATS:
        lo, hi = _EXP_RANGE[name]
        if kind == "moderate":
            return _cast(name, rng.standard_normal(n)).reshape(shape)
        if kind == "trig":
            lo, hi = -12, 10
        mant = rng.uniform(1.0, 2.0, n)
        e = rng.integers(lo, hi + 1, n)
        sign = 1.0 if kind == "positive" else rng.choice([-1.0, 1.0], n)
        vals = sign * mant * np.exp2(e.astype(np.float64))
        halves = rng.integers(-12, 13, n) / 2.0
        vals = np.where(rng.random(n) < 0.15, halves, vals)
        sp = float_specials(name, subnormals)
        pick = rng.random(n) < p_special
        vals = np.where(pick, np.asarray(sp)[rng.integers(0, len(sp), n)], vals)
        return _cast(name, vals).reshape(shape)
    ii = np.iinfo(DTYPES[name])
    if kind in ("moderate", "small"):
        r = 3 if kind == "small" else 8
        lo = 0 if ii.min == 0 else -r
        return rng.integers(lo, r + 1, size=shape).astype(DTYPES[name])
    full = rng.integers(int(ii.min), int(ii.max), size=n, dtype=DTYPES[name], endpoint=True)
    lo_small = 0 if ii.min == 0 else -10
    small = rng.integers(lo_small, 11, size=n).astype(DTYPES[name])
    vals = np.where(rng.random(n) < 0.4, small, full)
    sp = _cast(name, int_specials(name))
    pick = rng.random(n) < p_special
    vals = np.where(pick, sp[rng.integers(0, len(sp), n)], vals).astype(DTYPES[name])
    return vals.reshape(shape)


def shift_amounts(rng, name: str, shape) -> np.ndarray:
    """Shift amounts: in range, equal to and past the bit width, negative (as unsigned: huge)."""
    w = bits(name)
    ii = np.iinfo(DTYPES[name])
    cands = list(range(0, w)) + [w, w + 1, w + 7, int(ii.max)]
    if ii.min < 0:
        cands += [-1, int(ii.min)]
    return _cast(name, rng.choice(np.asarray(cands, dtype=object), size=tuple(shape)))


def rand_shape(rng, max_rank: int = 3, allow_empty: bool = True, max_elems: int = 256):
    """A random shape: rank 0..max_rank, dims from small sizes, sometimes one empty dim."""
    while True:
        rank = int(rng.integers(0, max_rank + 1))
        dims = [int(rng.choice([1, 2, 3, 4, 5, 7, 8, 16])) for _ in range(rank)]
        if allow_empty and rank and rng.random() < 0.1:
            dims[int(rng.integers(0, rank))] = 0
        if int(np.prod(dims, dtype=np.int64)) <= max_elems:
            return tuple(dims)


def shape_str(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
