"""Per-op cases of `fft` against jnp.fft: FFT, IFFT, RFFT and IRFFT over the trailing 1 to 3
dimensions, lengths 1 to 12 (powers of two or not, odd and even) and powers of two up to 256
in 1 or 2 dimensions, batch dimensions in front,
c64 and c128 (f32 and f64 for the real sides).

Inputs: fresh standard-normal values (no NaN or inf: a NaN input makes every output along its
transformed dimensions NaN in both implementations, and inf gives NaN or inf depending on the
order of the sums). Tolerance: the error of an FFT is relative to the size of the whole
transform, not of each output (an output near zero is the difference of large terms), so the
bound is a multiple of eps of the largest output: 8·eps·(n1 + … + nk + 4), which covers XLA's
own rounding (O(eps·log n)) and xthunk's (direct sums in double, rounded once per pass).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import values as V
from cases import Case, Rel

EPS = {"c64": float(np.finfo(np.float32).eps), "c128": float(np.finfo(np.float64).eps)}
PART = {"c64": "f32", "c128": "f64"}


def _complex(rng, d: str, shape) -> np.ndarray:
    out = np.empty(shape, V.dt(d))
    out.real = rng.standard_normal(shape)
    out.imag = rng.standard_normal(shape)
    return out


def _shape(rng):
    k = int(rng.integers(1, 4))
    lengths = [int(v) for v in rng.integers(1, 13, k)]
    r = rng.random()
    if r < 0.3:  # powers of two up to 256 (the radix-2 passes)
        k = int(rng.integers(1, 3))
        lengths = [int(2 ** rng.integers(2, 9)) for _ in range(k)]
    elif r < 0.5:  # other lengths up to 300, primes too (Bluestein's passes)
        k = int(rng.integers(1, 3))
        lengths = [int(rng.choice([9, 17, 31, 100, 127, 243, 257, 300])) for _ in range(k)]
    batch = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
    return batch, lengths


def _tol(d: str, lengths) -> Rel:
    b = 8 * EPS[d] * (sum(lengths) + 4)
    return Rel(b, atol_of_max=b)


def gen_fft(rng, count: int) -> list:
    cases = []
    for d in ["c64", "c128"]:
        for kind in ["FFT", "IFFT", "RFFT", "IRFFT"]:
            for _ in range(count):
                batch, lengths = _shape(rng)
                axes = tuple(range(-len(lengths), 0))
                if kind == "FFT":
                    x = _complex(rng, d, batch + lengths)
                    fn = lambda a, axes=axes: jnp.fft.fftn(a, axes=axes)  # noqa: E731
                elif kind == "IFFT":
                    x = _complex(rng, d, batch + lengths)
                    fn = lambda a, axes=axes: jnp.fft.ifftn(a, axes=axes)  # noqa: E731
                elif kind == "RFFT":
                    x = rng.standard_normal(batch + lengths).astype(V.dt(PART[d]))
                    fn = lambda a, axes=axes: jnp.fft.rfftn(a, axes=axes)  # noqa: E731
                else:
                    half = lengths[:-1] + [lengths[-1] // 2 + 1]
                    x = _complex(rng, d, batch + half)
                    fn = (lambda a, axes=axes, s=tuple(lengths):  # noqa: E731
                          jnp.fft.irfftn(a, s=s, axes=axes))
                cases.append(Case("fft", d, [x], fn=fn, tol=_tol(d, lengths),
                                  attrs={"type": kind, "lengths": "x".join(map(str, lengths))},
                                  expect=("stablehlo.fft",)))
    return cases


GENERATORS: dict = {"fft": gen_fft}
