"""Asynchronous execution (issue 28, item 1): ``Executable.execute_async`` and
``xthunk.Execution`` — results against an independent reference, awaited with asyncio,
``result(timeout=...)``, ``done()``, ``cancel()``, deadlines and cancels as distinct errors, and
Ctrl-C (SIGINT) stopping a long blocking run, or a wait for an asynchronous one, within 1 s.

The long program is a StableHLO ``while`` adding 1 to ``x`` ``n`` times (``n = 2**31 - 1``:
hours of host-driven trips), the one examples/c/async.c runs."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xthunk

PROGRAM = b"""module {
  func.func public @main(%n: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %r:3 = stablehlo.while(%i = %c0, %v = %x, %m = %n) : tensor<i32>, tensor<4xf32>, tensor<i32>
    cond {
      %p = stablehlo.compare LT, %i, %m, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %i2 = stablehlo.add %i, %one : tensor<i32>
      %onef = stablehlo.constant dense<1.000000e+00> : tensor<4xf32>
      %v2 = stablehlo.add %v, %onef : tensor<4xf32>
      stablehlo.return %i2, %v2, %m : tensor<i32>, tensor<4xf32>, tensor<i32>
    }
    return %r#1 : tensor<4xf32>
  }
}
"""
ENDLESS = 2**31 - 1


@pytest.fixture(scope="module")
def exe(host):
    return host.load(PROGRAM)


def inputs(rng, n):
    # Multiples of 1/8 in [-60, 60]: x + n is exact in f32.
    x = (rng.integers(-480, 480, 4) / 8).astype(np.float32)
    return {"arg0": np.array(n, np.int32), "arg1": x}, x.astype(np.float64) + n


def test_an_execution_returns_what_run_returns(exe, rng):
    for n in rng.integers(0, 40, 3):
        args, want = inputs(rng, int(n))
        e = exe.execute_async(args)
        got = e.result(timeout=60)
        assert set(got) == {"out0"}
        np.testing.assert_array_equal(got["out0"].astype(np.float64), want)
        assert e.done()
        # The result is kept: asked again, the same.
        np.testing.assert_array_equal(e.result()["out0"], got["out0"])
        np.testing.assert_array_equal(exe.run(args)["out0"], got["out0"])
    d = exe.execute_async(args, keep_on_device=True).result(timeout=60)
    assert isinstance(d["out0"], xthunk.DeviceArray)
    np.testing.assert_array_equal(d["out0"].numpy().astype(np.float64), want)


def test_executions_are_awaitable_and_overlap_on_one_executable(exe, rng):
    cases = [inputs(rng, int(n)) for n in rng.integers(0, 40, 6)]

    async def main():
        # An endless run first: the short ones complete while it still runs.
        endless = exe.execute_async({"arg0": np.array(ENDLESS, np.int32), "arg1": cases[0][0]["arg1"]})
        got = await asyncio.gather(*(exe.execute_async(a) for a, _ in cases))
        still_running = not endless.done()
        endless.cancel()
        with pytest.raises(xthunk.CancelledError):
            await endless
        return got, still_running

    got, still_running = asyncio.run(main())
    assert still_running
    for r, (_, want) in zip(got, cases):
        np.testing.assert_array_equal(r["out0"].astype(np.float64), want)


def test_cancelling_the_awaiting_task_cancels_the_run(exe, rng):
    args, _ = inputs(rng, ENDLESS)
    e = exe.execute_async(args)

    async def main():
        task = asyncio.ensure_future(e)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    with pytest.raises(xthunk.CancelledError, match="cancelled"):
        e.result(timeout=60)


def test_timeout_cancel_and_deadline_are_told_apart(exe, rng):
    args, _ = inputs(rng, ENDLESS)
    e = exe.execute_async(args)
    with pytest.raises(TimeoutError, match="not finished"):
        e.result(timeout=0.05)
    assert not e.done()
    assert e.cancel()
    with pytest.raises(xthunk.CancelledError, match=r"cancelled.*while") as c:
        e.result(timeout=60)
    assert not isinstance(c.value, xthunk.DeadlineExceededError)
    assert isinstance(c.value, xthunk.ExecutionError)
    assert e.done() and not e.cancel()

    with pytest.raises(xthunk.DeadlineExceededError, match="deadline") as d:
        exe.execute_async(args, deadline=0.1).result(timeout=60)
    assert isinstance(d.value, TimeoutError)
    assert not isinstance(d.value, xthunk.CancelledError)
    with pytest.raises(xthunk.DeadlineExceededError):
        exe.run(args, deadline=0.1)
    with pytest.raises(xthunk.InvalidArgumentError, match="deadline must be"):
        exe.run(args, deadline=-1.0)
    with pytest.raises(xthunk.InvalidArgumentError, match="timeout must be"):
        exe.execute_async(inputs(rng, 1)[0]).result(timeout=float("nan"))


def test_a_blocking_run_on_another_thread_keeps_its_deadline(exe, rng):
    """Off the main thread signal handlers never run: the run's signal check stops there, and
    the run still ends at its deadline."""
    import threading

    args, _ = inputs(rng, ENDLESS)
    caught = []

    def run():
        try:
            exe.run(args, deadline=0.3)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            caught.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert len(caught) == 1 and isinstance(caught[0], xthunk.DeadlineExceededError), caught


def test_input_errors_are_raised_by_execute_async_itself(exe):
    with pytest.raises(xthunk.InvalidArgumentError, match="no parameter `n`"):
        exe.execute_async({"n": np.array(1, np.int32)})


# The child restores Python's SIGINT handler: a process started from a background job (as CI
# runs its steps) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
# handler at all; a terminal's Ctrl-C reaches a process that has one.
CHILD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np, xthunk
exe = xthunk.Runtime("host").load(sys.stdin.buffer.read())
args = {"arg0": np.array(2**31 - 1, np.int32), "arg1": np.zeros(4, np.float32)}
mode = sys.argv[1]
print("running", flush=True)
try:
    if mode == "blocking":
        exe.run(args)
    else:
        exe.execute_async(args).result()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(0)
sys.exit(3)
"""


@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_ctrl_c_stops_a_long_run_within_a_second(mode):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    child.stdin.write(PROGRAM)
    child.stdin.close()
    assert child.stdout.readline().strip() == b"running", child.stderr.read()
    time.sleep(0.5)  # well into the loop, past the first signal check
    assert child.poll() is None, "the endless run ended by itself"
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        code = child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    took = time.monotonic() - sent
    out, err = child.stdout.read(), child.stderr.read()
    print(f"{mode}: SIGINT to exit {took * 1e3:.0f} ms")
    assert code == 0 and b"interrupted" in out, (code, out, err)
    assert took < 1.0, f"{mode}: the run stopped {took:.2f} s after SIGINT"
