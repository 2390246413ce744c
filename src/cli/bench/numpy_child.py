"""The numpy side of `xthunk bench`'s `gemm_f32_numpy` row (embedded in the xthunk binary and
run by it as a child process): one f32 matmul of N x N by N x N through numpy (its BLAS:
the OpenBLAS its wheel bundles, or whatever numpy was built with) per request, on
stdin/stdout, with the line protocol of the XLA:CPU child (`xla_child.py`).

    python numpy_child.py N

First line written: `unavailable <reason>` (no numpy; the child then exits 0), or
`ready <json>` once the inputs are made and one product was checked against float64:
`{"numpy": version, "blas": "name version (details)"}`. Then per request:

    run          -> `time <seconds>`: one `np.matmul(a, b, out=c)` on C-contiguous f32
                    arrays made once, timed around the call
    quit         -> exits

Any failure: `error <message>` and exit status 1.
"""

import json
import os
import sys
import time


def reply(line):
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def blas_of(np):
    """numpy's BLAS as `name version (details)`, from its build configuration."""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        text = "%s %s" % (blas.get("name", "?"), blas.get("version", "?"))
        details = blas.get("openblas configuration") or ""
        text = "%s (%s)" % (text, details) if details else text
    except Exception:  # older numpy: no dict form
        text = "unknown"
    # OpenBLAS's kernels are chosen at run time, and this variable pins them.
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    return text + ("; OPENBLAS_CORETYPE=%s pins its kernels" % pinned if pinned else "")


def main():
    n = int(sys.argv[1])
    try:
        import numpy as np
    except Exception as e:  # no numpy in this Python
        reply("unavailable numpy cannot be imported (%s: %s)" % (type(e).__name__, e))
        return 0
    rng = np.random.default_rng(27)
    a = (rng.random((n, n), dtype=np.float32) - np.float32(0.5))
    b = (rng.random((n, n), dtype=np.float32) - np.float32(0.5))
    c = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    for i, j in [(0, 0), (n - 1, n - 1), (n // 2, n // 3)]:
        want = float(np.dot(a[i, :].astype(np.float64), b[:, j].astype(np.float64)))
        bound = 1e-4 * float(np.dot(np.abs(a[i, :]).astype(np.float64),
                                    np.abs(b[:, j]).astype(np.float64))) + 1e-6
        if not abs(float(c[i, j]) - want) <= bound:
            reply("error numpy's c[%d][%d] = %r, expected %r" % (i, j, float(c[i, j]), want))
            return 1
    reply("ready " + json.dumps({"numpy": np.__version__, "blas": blas_of(np)}))
    for line in sys.stdin:
        req = line.strip()
        if req == "run":
            start = time.perf_counter()
            np.matmul(a, b, out=c)
            reply("time %.9f" % (time.perf_counter() - start))
        elif req == "quit":
            return 0
        else:
            reply("error unknown request %r" % req)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:
        reply("error %s: %s" % (type(e).__name__, e))
        sys.exit(1)
