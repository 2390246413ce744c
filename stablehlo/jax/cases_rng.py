"""Per-op cases of `rng_bit_generator`: XLA's bits, bit for bit. StableHLO text for every
algorithm (THREE_FRY, PHILOX, DEFAULT), both Philox state sizes, counters next to 2^64 (the
carry into the high word), shapes of rank 0 to 3 with odd, even and zero dimensions, and
result types of 8 to 64 bits, integer and float (the bits as they are: NaN patterns
included); and through JAX: `lax.rng_bit_generator` and `jax.random` with the `rbg` key
implementation, whose uniform floats are made from these bits.
"""

from __future__ import annotations

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
