"""Calling overhead: a 1-thunk program (one add_f32 kernel on 16 f32) called from Python and
from Rust (capi/examples/call_overhead.rs) on the host backend, in ns per call, and the ratio.

    python python/bench/call_overhead.py [ITERATIONS] [--profile release]

It builds the Rust side with cargo (the same profile as the installed extension is up to you:
`maturin develop` builds debug, `maturin develop --release` release)."""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

import xthunk

REPO = pathlib.Path(__file__).resolve().parents[2]
N = 16


def one_thunk_program():
    b = xthunk.ProgramBuilder("one_thunk")
    x = b.parameter("x", "f32", [N])
    y = b.output("y", "f32", [N])
    std = b.standard_module()
    b.kernel(std, "add_f32", N, [x.r(), x.r(), y.w(), N])
    return b.build()


def per_call(f, iterations):
    for _ in range(100):
        f()
    start = time.perf_counter_ns()
    for _ in range(iterations):
        f()
    return (time.perf_counter_ns() - start) / iterations


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iterations", type=int, nargs="?", default=20000)
    ap.add_argument("--profile", default="dev", choices=["dev", "release"])
    args = ap.parse_args()
    prog = one_thunk_program()
    assert prog.thunk_count == 1
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "one_thunk.pb"
        prog.save(path)
        rt = xthunk.Runtime("host")
        exe = rt.load(path)
        x = np.arange(N, dtype=np.float32)
        np.testing.assert_array_equal(exe(x=x), 2 * x)
        py_host = per_call(lambda: exe(x=x), args.iterations)
        dx = rt.put(x)
        py_dev = per_call(lambda: exe.run({"x": dx}, keep_on_device=True), args.iterations)
        cmd = ["cargo", "run", "-q", "-p", "xthunk-capi", "--example", "call_overhead"]
        if args.profile == "release":
            cmd.append("--release")
        out = subprocess.run(
            cmd + ["--", str(path), str(args.iterations)],
            cwd=REPO, check=True, capture_output=True, text=True,
        ).stdout
    rust = dict(line.split() for line in out.splitlines() if line.strip())
    rs_host, rs_exec = float(rust["host_data_ns"]), float(rust["execute_ns"])
    print(f"1-thunk program, {args.iterations} calls each, host backend ({args.profile} Rust side)")
    print(f"  numpy in/out:   Python {py_host:8.0f} ns/call   Rust run_with_host_data {rs_host:8.0f} ns/call   ratio {py_host / rs_host:.2f}")
    print(f"  device arrays:  Python {py_dev:8.0f} ns/call   Rust execute            {rs_exec:8.0f} ns/call   ratio {py_dev / rs_exec:.2f}")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
