"""Per-op cases of `rng_bit_generator` and `rng`. `rng_bit_generator`: XLA's bits, bit for bit. StableHLO text for every
algorithm (THREE_FRY, PHILOX, DEFAULT), both Philox state sizes, counters next to 2^64 (the
carry into the high word), shapes of rank 0 to 3 with odd, even and zero dimensions, and
result types of 8 to 64 bits, integer and float (the bits as they are: NaN patterns
included); and through JAX: `lax.rng_bit_generator` and `jax.random` with the `rbg` key
implementation, whose uniform floats are made from these bits. `rng`: statistical tests of
xthunk's own draws (below).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import values as V
from cases import Case, Exact

TYPES = ["ui8", "ui16", "ui32", "ui64", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"]


def _ty(dt: str, dims) -> str:
    return "tensor<" + "".join(f"{n}x" for n in dims) + f"{dt}>"


def _text(alg: str, words: int, dt: str, dims) -> str:
    s = f"tensor<{words}xui64>"
    t = _ty(dt, dims)
    return (
        "module @m {\n"
        f"  func.func public @main(%arg0: {s}) -> ({s}, {t}) {{\n"
        f"    %0, %1 = stablehlo.rng_bit_generator %arg0, algorithm = {alg} : ({s}) -> ({s}, {t})\n"
        f"    return %0, %1 : {s}, {t}\n"
        "  }\n"
        "}\n"
    )


# XLA:CPU returns every result of rng_bit_generator as the unsigned integer of its width
# (its bit generators are unsigned): the expected value is that result viewed as the declared
# type (the spec's result: the bits, in that type).
def _declared(dt: str):
    want = V.dt(dt.replace("ui", "u"))

    def view(outs):
        st, bits = outs
        bits = np.asarray(bits)
        return [st, bits.view(want) if bits.dtype != want else bits]
    return view


def _dims(rng):
    rank = int(rng.integers(0, 4))
    dims = [int(v) for v in rng.integers(1, 9, rank)]
    if rank and rng.random() < 0.08:
        dims[int(rng.integers(0, rank))] = 0
    return dims


def gen_rng_bit_generator(rng, count: int) -> list:
    cases = []
    for dt in TYPES:
        for _ in range(count):
            for alg in ["THREE_FRY", "PHILOX", "DEFAULT"]:
                words = 3 if alg != "THREE_FRY" and rng.random() < 0.5 else 2
                state = rng.integers(0, 2**63, words, dtype=np.int64).astype(np.uint64) * 2
                if rng.random() < 0.3:
                    state[1] = np.uint64(2**64 - 1 - int(rng.integers(0, 4)))
                dims = _dims(rng)
                cases.append(Case("rng_bit_generator", dt, [state], text=_text(alg, words, dt, dims),
                                  tol=Exact(), shape=tuple(dims), xla_view=_declared(dt),
                                  attrs={"algorithm": alg, "state": words},
                                  expect=("stablehlo.rng_bit_generator",)))
    # Through JAX: lax.rng_bit_generator on a u32[4] key, and jax.random's rbg keys.
    for _ in range(count):
        key = rng.integers(0, 2**32, 4, dtype=np.int64).astype(np.uint32)
        dims = tuple(int(v) for v in rng.integers(1, 7, int(rng.integers(1, 3))))
        for alg in [lax.RandomAlgorithm.RNG_THREE_FRY, lax.RandomAlgorithm.RNG_PHILOX]:
            for dtype in [jnp.uint32, jnp.uint64, jnp.uint8]:
                fn = (lambda a, s, d: lambda k: lax.rng_bit_generator(k, s, dtype=d, algorithm=a))(
                    alg, dims, dtype)
                cases.append(Case("rng_bit_generator", np.dtype(dtype).name, [key], fn=fn,
                                  tol=Exact(), attrs={"via": "lax", "algorithm": alg.name},
                                  expect=("stablehlo.rng_bit_generator",)))
        seed = int(rng.integers(0, 2**31))
        fn = (lambda s, d: lambda x: x + jax.random.uniform(
            jax.random.key(s, impl="rbg"), d, jnp.float32))(seed, dims)
        cases.append(Case("rng_bit_generator", "f32", [np.zeros(dims, np.float32)], fn=fn,
                          tol=Exact(), attrs={"via": "jax.random rbg"},
                          expect=("stablehlo.rng_bit_generator",)))
    return cases


GENERATORS: dict = {"rng_bit_generator": gen_rng_bit_generator}


# `rng`: the spec leaves the numbers to the implementation, so each case is a statistical test
# of xthunk's draws (no XLA values: XLA:CPU aborts on integer `rng`): every value in [a, b) for
# UNIFORM; a Kolmogorov–Smirnov test against the uniform or normal distribution (floats, and
# integers with wide ranges), a chi-square test over the values (integers with narrow ranges);
# separate draws, and a loop's trips, must differ. A test fails below p = 1e-6 (N = 4096 draws):
# the KS statistic's critical value there is about 0.043, while rounding to bf16 (the
# coarsest type) moves the empirical distribution by at most about 0.006 with the ranges drawn
# below (the range at least as wide as the largest magnitude).
P_FAIL = 1e-6
N_DRAWS = 4096
RNG_FLOATS = ["f16", "bf16", "f32", "f64"]
RNG_INTS = ["i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"]


def _rng_text(dist: str, dt: str, dims, draws: int = 1) -> str:
    t = f"tensor<{dt}>"
    r = _ty(dt, dims)
    shape = f"tensor<{len(dims)}xi64>"
    lines = [f"    %c = stablehlo.constant dense<{list(dims)}> : {shape}"]
    for i in range(draws):
        lines.append(f"    %{i} = stablehlo.rng %arg0, %arg1, %c, distribution = {dist} : "
                     f"({t}, {t}, {shape}) -> {r}")
    outs = ", ".join(f"%{i}" for i in range(draws))
    return (
        "module @m {\n"
        f"  func.func public @main(%arg0: {t}, %arg1: {t}) -> ({', '.join([r] * draws)}) {{\n"
        + "\n".join(lines) + "\n"
        f"    return {outs} : {', '.join([r] * draws)}\n"
        "  }\n"
        "}\n"
    )


def _ks(x: np.ndarray, cdf, what: str):
    from scipy import stats

    r = stats.kstest(np.asarray(x, np.float64).ravel(), cdf)
    if r.pvalue < P_FAIL:
        return f"{what}: KS statistic {r.statistic:.4f}, p = {r.pvalue:.2g} < {P_FAIL}"
    return None


def _distinct(outs) -> Optional[str]:
    flat = [np.asarray(o).ravel() for o in outs]
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            if np.array_equal(flat[i], flat[j]):
                return f"draws {i} and {j} are equal"
    return None


def _uniform_check(a, b, dt: str):
    def check(outs):
        for i, x in enumerate(outs):
            x = np.asarray(x)
            if dt in RNG_FLOATS:
                v = x.astype(np.float64)
                lo, hi = float(a), float(b)
                bad = ~((v >= lo) & (v < hi))
                if bad.any():
                    return f"draw {i}: {v[bad][:3]} outside [{lo}, {hi})"
                why = _ks((v - lo) / (hi - lo), "uniform", f"draw {i}")
            else:
                v = [int(e) for e in x.ravel().tolist()]
                lo, hi = int(a), int(b)
                bad = [e for e in v if not lo <= e < hi]
                if bad:
                    return f"draw {i}: {bad[:3]} outside [{lo}, {hi})"
                width = hi - lo
                if width == 1:
                    why = None
                elif width <= 64:
                    from scipy import stats

                    counts = np.bincount([e - lo for e in v], minlength=width)
                    r = stats.chisquare(counts)
                    why = (f"draw {i}: chi-square p = {r.pvalue:.2g} < {P_FAIL}"
                           if r.pvalue < P_FAIL else None)
                else:
                    u = np.array([(e - lo) / width for e in v], np.float64)
                    why = _ks(u, "uniform", f"draw {i}")
            if why:
                return why
        return _distinct(outs)
    return check


def _normal_check(mean, std):
    def check(outs):
        from scipy import stats

        for i, x in enumerate(outs):
            v = np.asarray(x).astype(np.float64)
            if not np.isfinite(v).all():
                return f"draw {i}: non-finite values {v[~np.isfinite(v)][:3]}"
            why = _ks(v, stats.norm(float(mean), float(std)).cdf, f"draw {i}")
            if why:
                return why
        return _distinct(outs)
    return check


def _rng_dims(rng):
    # N_DRAWS elements in one to three dimensions.
    return [[N_DRAWS], [64, 64], [16, 16, 16]][int(rng.integers(0, 3))]


def gen_rng(rng, count: int) -> list:
    cases = []
    for dt in RNG_FLOATS + RNG_INTS + ["i1"]:
        for _ in range(count):
            dims = _rng_dims(rng)
            draws = 1 if dt == "i1" else int(rng.integers(1, 3))
            npdt = np.bool_ if dt == "i1" else V.dt(dt.replace("ui", "u"))
            if dt in RNG_FLOATS:
                w = float(rng.uniform(0.5, 8.0))
                lo = -w * float(rng.uniform(0.0, 1.0))
                a, b = np.array(lo, npdt), np.array(lo + w, npdt)
                if not float(a) < float(b):
                    continue
            elif dt == "i1":
                a, b = np.array(False), np.array(True)
            else:
                info = np.iinfo(npdt)
                if rng.random() < 0.5:  # a narrow range: every value counted
                    lo = int(rng.integers(max(info.min, -100), min(info.max, 100) - 65))
                    a, b = np.array(lo, npdt), np.array(lo + int(rng.integers(2, 65)), npdt)
                else:  # a wide one, up to the whole type
                    a = np.array(info.min + int(rng.integers(0, 4)), npdt)
                    b = np.array(info.max - int(rng.integers(0, 4)), npdt)
            like = tuple(np.zeros(dims, npdt) for _ in range(draws))
            cases.append(Case("rng", dt, [a, b], text=_rng_text("UNIFORM", dt, dims, draws),
                              shape=tuple(dims), stat=_uniform_check(a, b, dt), stat_like=like,
                              attrs={"distribution": "UNIFORM", "draws": draws},
                              expect=("stablehlo.rng",)))
            if dt in RNG_FLOATS:
                mean = np.array(rng.uniform(-3, 3), npdt)
                std = np.array(rng.uniform(0.5, 3), npdt)
                cases.append(Case("rng", dt, [mean, std], text=_rng_text("NORMAL", dt, dims, draws),
                                  shape=tuple(dims), stat=_normal_check(mean, std),
                                  stat_like=like, attrs={"distribution": "NORMAL", "draws": draws},
                                  expect=("stablehlo.rng",)))
    # Through JAX: lax.rng_uniform, once directly and once per trip of a loop (each trip's
    # draw must be new).
    for _ in range(count):
        lo = float(rng.uniform(-4, 0))
        hi = lo + float(rng.uniform(0.5, 4))
        trips = 4

        def fn(a, b):
            def body(i, acc):
                return acc.at[i].set(lax.rng_uniform(a, b, (N_DRAWS // trips,)))
            first = lax.rng_uniform(a, b, (N_DRAWS,))
            return first, lax.fori_loop(0, trips, body, jnp.zeros((trips, N_DRAWS // trips),
                                                                   jnp.float32))

        a, b = np.float32(lo), np.float32(hi)
        check = _uniform_check(a, b, "f32")

        def stat(outs, check=check, trips=trips):
            loop = np.asarray(outs[1])
            return check([outs[0]] + [loop[i] for i in range(trips)])

        like = (np.zeros(N_DRAWS, np.float32), np.zeros((trips, N_DRAWS // trips), np.float32))
        cases.append(Case("rng", "f32", [a, b], fn=fn, stat=stat, stat_like=like,
                          attrs={"via": "lax.rng_uniform in a loop"}, expect=("stablehlo.rng",)))
    return cases


GENERATORS["rng"] = gen_rng
