"""The XLA:CPU side of `xthunk bench`'s StableHLO rows (embedded in the xthunk binary and run by
it as a child process): compiles one StableHLO module's text once with jaxlib's CPU client,
then answers requests, one line each, on stdin/stdout.

    python xla_child.py MODULE.mlir INPUT_DIR N_INPUTS

First line written: `unavailable <reason>` (jax or jaxlib missing; the child then exits 0),
or `ready <json>` after compiling: `{"jaxlib": version, "kernels": counts}`, the counts
per opcode of the optimized HLO's instructions that run as kernels (see `kernels`). Then per request:

    run          -> `time <seconds>`: one execution (inputs already on the device), timed
                    from the call until every output is ready
    save DIR     -> `saved <n>`: the outputs of one execution written as DIR/out<i>.npy
    quit         -> exits

Any failure: `error <message>` and exit status 1.
"""

import json
import re
import sys
import time


def reply(line):
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


# Instructions that are no work of their own on XLA:CPU (names, views, tuples).
FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
        "partition-id", "replica-id", "opt-barrier"}


def kernels(hlo):
    """Counts, per opcode, the instructions of the computations that run at the top level
    (the entry and the bodies, conditions and branches of control flow reached from it; not
    fusion bodies or reducers): `fusion` split by its kind, the rest by opcode, FREE left out."""
    comps, cur, entry = {}, None, None
    for line in hlo.splitlines():
        m = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$", line)
        if m and not line.startswith(" "):
            cur = m.group(2)
            comps[cur] = []
            if m.group(1):
                entry = cur
        elif line.startswith("}"):
            cur = None
        elif cur is not None and line.strip():
            comps[cur].append(line)
    if entry is None:
        raise ValueError("no ENTRY computation in the optimized HLO")
    counts, seen, todo = {}, set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen or name not in comps:
            continue
        seen.add(name)
        for line in comps[name]:
            m = re.match(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*)$", line)
            if not m:
                continue
            rest = m.group(1)
            if rest.startswith("("):  # a tuple type: skip its balanced parentheses
                depth = 0
                for i, c in enumerate(rest):
                    depth += (c == "(") - (c == ")")
                    if depth == 0:
                        rest = rest[i + 1:]
                        break
            else:
                rest = rest.split(" ", 1)[1] if " " in rest else ""
            op = re.match(r"\s*([a-z][\w\-]*)\(", rest)
            if not op:
                continue
            op = op.group(1)
            for attr in ("body", "condition", "true_computation", "false_computation"):
                todo += re.findall(attr + r"=%?([\w.\-]+)", rest)
            for group in re.findall(r"branch_computations=\{([^}]*)\}", rest):
                todo += [b.strip().lstrip("%") for b in group.split(",")]
            if op == "call":
                todo += re.findall(r"to_apply=%?([\w.\-]+)", rest)
                continue
            if op in FREE or op in ("while", "conditional"):
                continue
            if op == "fusion":
                kind = re.search(r"kind=(k\w+)", rest)
                op = "fusion(" + (kind.group(1) if kind else "?") + ")"
            counts[op] = counts.get(op, 0) + 1
    return counts


def main():
    if len(sys.argv) != 4:
        reply("error usage: xla_child.py MODULE.mlir INPUT_DIR N_INPUTS")
        return 1
    try:
        import jax
        import numpy as np
        from jax.extend import backend
        from jaxlib import _jax
    except Exception as e:  # noqa: BLE001 - any import failure means: no jax here
        reply(f"unavailable {sys.executable} cannot import jax/jaxlib/numpy: "
              f"{type(e).__name__}: {e}")
        return 0
    try:
        path, inputs, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
        with open(path, encoding="utf-8") as f:
            text = f.read()
        cpu = backend.get_backend("cpu")
        dev = cpu.devices()[0]
        exe = cpu.compile_and_load(text, [dev], _jax.CompileOptions())
        args = [jax.device_put(np.load(f"{inputs}/arg{i}.npy"), dev) for i in range(n)]
        counts = kernels("\n".join(m.to_string() for m in exe.hlo_modules()))
        import jaxlib

        reply("ready " + json.dumps({"jaxlib": jaxlib.__version__, "kernels": counts}))
        for line in sys.stdin:
            cmd, _, rest = line.strip().partition(" ")
            if cmd == "run":
                start = time.perf_counter()
                outs = exe.execute(args)
                for o in outs:
                    o.block_until_ready()
                reply(f"time {time.perf_counter() - start!r}")
            elif cmd == "save":
                outs = exe.execute(args)
                for i, o in enumerate(outs):
                    np.save(f"{rest}/out{i}.npy", np.asarray(o))
                reply(f"saved {len(outs)}")
            elif cmd == "quit":
                return 0
            else:
                reply(f"error unknown request `{cmd}`")
                return 1
        return 0
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        reply(f"error {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
