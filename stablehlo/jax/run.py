#!/usr/bin/env python3
"""Runs the StableHLO test set against xthunk and compares with JAX's CPU results.

    run.py --xthunk PATH --backend host [--ops PATTERN] [--programs] [--seed N] [--count N]
           [--keep DIR] [--allow-unsupported]
    run.py --via jit --backend host ...   (through xthunk.jax.jit in this Python, no CLI)
    run.py --self-check ...   (XLA:CPU runs each module from its text: checks the test set)

For each case: the module text and the inputs (.npy, bf16 as its raw bits `<u2`) go to a
fresh folder; `xthunk run case.mlir --backend B --input arg0=arg0.npy ... --output-dir out`
runs it (out/ starts empty: a missing output is a failure, so is an extra one); the outputs
out0.npy, out1.npy, ... are compared per the case's tolerance (compare.py). A refusal at
import (xthunk exits non-zero with `unsupported` in its error) is counted apart, per op, and
fails the run unless --allow-unsupported. One line per failure, then a summary per op.
Exit code: 0 when every case passed (or was refused, with --allow-unsupported), else 1.

An adapter runs one lowered case: `CliAdapter` (the xthunk CLI), `JitAdapter` (`--via jit`:
the Python package's `xthunk.jax.jit`, no CLI needed), `SelfCheckAdapter` (jaxlib).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import cases as C  # noqa: E402
import compare as cmp  # noqa: E402


class Outcome:
    """What an adapter returns: ok with outputs, a refusal, or an error."""

    def __init__(self, kind: str, outs=None, message: str = ""):
        self.kind, self.outs, self.message = kind, outs, message


def write_inputs(args, folder: str) -> list:
    paths = []
    for i, a in enumerate(args):
        a = np.asarray(a)
        if a.dtype == cmp.BF16:
            a = a.view(np.uint16)
        elif a.dtype in cmp.F8:
            a = a.view(np.uint8)
        p = os.path.join(folder, f"arg{i}.npy")
        np.save(p, a, allow_pickle=False)
        paths.append(p)
    return paths


class CliAdapter:
    """`xthunk run` on one backend; with compile targets, the module is first compiled ahead
    of time (`xthunk compile case.mlir --target … -o case.pb`) and the .pb is run, and a GPU
    backend must have loaded one of those images (the executor's log says which), not
    compiled the source itself."""

    # The image a GPU backend must load from a compiled .pb, per target prefix.
    IMAGE = {"cuda": ("sm_", "image=cubin({})"), "rocm": ("gfx", "image=hsaco({})")}

    def __init__(self, xthunk: str, backend: str, unsupported: str, timeout: float,
                 compile_targets=None, portable=False):
        self.xthunk, self.backend = xthunk, backend
        self.targets = list(compile_targets or [])
        self.portable = portable
        self.name = (f"cli-{backend}" + ("-aot" if self.targets else "")
                     + ("-portable" if portable else ""))
        self.unsupported = re.compile(unsupported)
        self.timeout = timeout

    def call(self, cmd, workdir, env=None):
        """Runs cmd; None on success, else the failed Outcome."""
        with open(os.path.join(workdir, "cmd.txt"), "a") as f:
            f.write(" ".join(cmd) + "\n")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, env=env)
        except subprocess.TimeoutExpired:
            return Outcome("error", message=f"timed out after {self.timeout}s"), None
        if r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip()).splitlines()
            line = msg[-1] if msg else f"exit code {r.returncode}"
            kind = "unsupported" if self.unsupported.search(r.stderr + r.stdout) else "error"
            return Outcome(kind, message=f"{cmd[1]}: exit {r.returncode}: {line}"), r
        return None, r

    def run(self, case, text: str, n_out: int, workdir: str) -> Outcome:
        prog = os.path.join(workdir, "case.mlir")
        with open(prog, "w") as f:
            f.write(text)
        if self.portable and case.fn is not None and case.text is None and case.patch is None:
            # jax.export's serialized bytes (a StableHLO portable artifact) in place of the text.
            prog = os.path.join(workdir, "case.jaxexport")
            with open(prog, "wb") as f:
                f.write(C.export_bytes(case))
        env = None
        if self.targets:
            pb = os.path.join(workdir, "case.pb")
            cmd = [self.xthunk, "compile", prog, "-o", pb]
            for t in self.targets:
                cmd += ["--target", t]
            failed, _ = self.call(cmd, workdir)
            if failed:
                return failed
            prog = pb
            env = dict(os.environ, RUST_LOG="xthunk_executor::executor::loaded=debug")
        inputs = write_inputs(case.args, workdir)
        outdir = os.path.join(workdir, "out")
        os.mkdir(outdir)
        cmd = [self.xthunk, "run", prog, "--backend", self.backend]
        for i, p in enumerate(inputs):
            cmd += ["--input", f"arg{i}={p}"]
        cmd += ["--output-dir", outdir]
        failed, r = self.call(cmd, workdir, env)
        if failed:
            return failed
        if self.targets and self.backend in self.IMAGE:
            prefix, form = self.IMAGE[self.backend]
            want = [form.format(t) for t in self.targets if t.startswith(prefix)]
            if not any(w in r.stderr for w in want):
                loaded = re.findall(r"image=\S+(?: \([^)]*\))?", r.stderr)
                return Outcome("error", message=f"{self.backend} did not load a compiled image "
                               f"({' or '.join(want) or 'none compiled for it'}); "
                               f"it loaded: {loaded or 'nothing logged'}")
        return read_outputs(outdir, n_out)


def read_outputs(outdir: str, n_out: int) -> Outcome:
    want = {f"out{i}.npy" for i in range(n_out)}
    present = set(os.listdir(outdir))
    if want - present:
        return Outcome("error", message=f"missing outputs: {sorted(want - present)}")
    if present - want:
        return Outcome("error", message=f"unexpected outputs: {sorted(present - want)}")
    outs = [np.load(os.path.join(outdir, f"out{i}.npy"), allow_pickle=False)
            for i in range(n_out)]
    return Outcome("ok", outs)


class SelfCheckAdapter:
    """XLA:CPU compiles each module's text (not the JAX function): the set checks itself."""

    name = "self-check"

    def run(self, case, text: str, n_out: int, workdir: str) -> Outcome:
        return Outcome("ok", C.run_text(text, case.args))


class JitAdapter:
    """The Python door: `xthunk.jax.jit(case.fn)` called on the case's arguments (its pytree
    when it has one), the result's leaves compared. A case with a module text of its own (an
    op JAX never emits, a patched module) runs that text through `Runtime.load`."""

    def __init__(self, backend: str, unsupported: str, runtime=None):
        import xthunk
        import xthunk.jax

        self.name = f"jit-{backend}"
        self.xthunk = xthunk
        self.rt = runtime if runtime is not None else xthunk.Runtime(backend)
        self.unsupported = re.compile(unsupported)

    def run(self, case, text: str, n_out: int, workdir: str) -> Outcome:
        import jax

        try:
            if case.fn is not None and case.text is None and case.patch is None:
                f = self.xthunk.jax.jit(case.fn, runtime=self.rt)
                outs = jax.tree_util.tree_leaves(f(*C.call_args(case, case.args)))
            else:
                exe = self.rt.load(text.encode())
                res = exe.run({p.name: np.asarray(a) for p, a in zip(exe.parameters, case.args)})
                outs = [res[o.name] for o in exe.outputs]
        except self.xthunk.XthunkError as e:
            kind = "unsupported" if self.unsupported.search(str(e)) else "error"
            lines = str(e).splitlines()
            return Outcome(kind, message=f"{type(e).__name__}: {lines[0] if lines else ''}")
        return Outcome("ok", [np.asarray(o) for o in outs])


class WideAdapter:
    """A second, more accurate implementation: the case evaluated on inputs widened to f64
    (XLA:CPU), rounded to the output types. Checks that the ULP and relative tolerances
    admit an implementation better than XLA's own; only cases with such tolerances."""

    name = "self-check-wide"

    @staticmethod
    def wanted(case) -> bool:
        return not all(isinstance(t, cmp.Exact) for t in case.tols(1))

    def run(self, case, text: str, n_out: int, workdir: str) -> Outcome:
        wargs = [C.widen(a) for a in case.args]
        outs = C.run_text(C.lower(case, wargs), wargs)
        ref = C.run_text(text, case.args)
        with np.errstate(all="ignore"):
            return Outcome("ok", [np.asarray(o).astype(r.dtype) for o, r in zip(outs, ref)])


def check(case, text, exp, outcome) -> str | None:
    """None when outcome matches exp, else the failure's description."""
    if outcome.kind != "ok":
        return outcome.message
    if len(outcome.outs) != len(exp.outs):
        return f"{len(outcome.outs)} outputs, want {len(exp.outs)}"
    if case.stat is not None:
        outs = [cmp.normalize(np.asarray(g), w.dtype) for g, w in zip(outcome.outs, exp.outs)]
        for i, (got, like) in enumerate(zip(outs, exp.outs)):
            if got.dtype != like.dtype or got.shape != like.shape:
                return f"out{i} {got.dtype}{list(got.shape)}, want {like.dtype}{list(like.shape)}"
        return case.stat(outs)
    for i, (got, want, tol) in enumerate(zip(outcome.outs, exp.outs, case.tols(len(exp.outs)))):
        m = cmp.compare(got, want, tol, exp.alts[i], exp.mags[i])
        if m is not None:
            return f"out{i} {want.dtype}{list(want.shape)}: {m}"
    return None


class Tally:
    def __init__(self):
        self.by_op = collections.defaultdict(collections.Counter)
        self.refused = collections.defaultdict(list)

    def add(self, op, kind):
        self.by_op[op][kind] += 1

    def summary(self) -> str:
        lines = [f"{'op':<32}{'cases':>7}{'passed':>8}{'failed':>8}{'refused':>9}{'set-err':>9}"]
        tot = collections.Counter()
        for op in sorted(self.by_op):
            c = self.by_op[op]
            n = sum(c.values())
            tot.update(c)
            lines.append(f"{op:<32}{n:>7}{c['passed']:>8}{c['failed']:>8}{c['refused']:>9}"
                         f"{c['set-error']:>9}")
        n = sum(tot.values())
        lines.append(f"{'total':<32}{n:>7}{tot['passed']:>8}{tot['failed']:>8}"
                     f"{tot['refused']:>9}{tot['set-error']:>9}")
        if self.refused:
            lines.append("refused at import, by op:")
            for op, msgs in sorted(self.refused.items()):
                lines.append(f"  {op}: {len(msgs)} ({msgs[0]})")
        return "\n".join(lines), tot


def run_cases(cases, adapters, folder, keep, tallies):
    """Each case lowered once (module text and JAX's results), then run by every adapter, each
    in a folder of its own under folder; kept (and named on failure) if keep."""
    for case in cases:
        stem = re.sub(r'[^A-Za-z0-9_]+', '_', case.op)
        try:
            text = C.lower(case)
            exp = C.expected(case, text)
        except Exception as e:  # an error of the test set itself, not of xthunk
            for tally in tallies:
                tally.add(case.op, "set-error")
            print(f"SET-ERROR {case.label()}: {type(e).__name__}: {str(e).splitlines()[0]}")
            if os.environ.get("XTHUNK_JAXT_DEBUG"):
                traceback.print_exc()
            continue
        for adapter, tally in zip(adapters, tallies):
            work = tempfile.mkdtemp(prefix=f"{stem}-{adapter.name}-", dir=folder)
            run_one(case, text, exp, adapter, work, keep, tally)


def run_one(case, text, exp, adapter, work, keep, tally):
    if case.stat is not None and isinstance(adapter, (SelfCheckAdapter, WideAdapter)):
        return  # no XLA values to check the set against (see Case.stat)
    if keep and not isinstance(adapter, CliAdapter):
        with open(os.path.join(work, "case.mlir"), "w") as f:
            f.write(text)
        write_inputs(case.args, work)
    outcome = adapter.run(case, text, len(exp.outs), work)
    if outcome.kind == "unsupported":
        tally.add(case.op, "refused")
        tally.refused[case.op].append(outcome.message)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        return
    failure = check(case, text, exp, outcome)
    if failure is None:
        tally.add(case.op, "passed")
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        return
    tally.add(case.op, "failed")
    where = f" [{work}]" if keep else ""
    print(f"FAIL {case.label()} on {adapter.name}: {failure}{where}", flush=True)
    if keep:
        with open(os.path.join(work, "want.txt"), "w") as f:
            f.write(f"{case.label()}\n{failure}\n")
        for i, w in enumerate(exp.outs):
            np.save(os.path.join(work, f"want{i}.npy"),
                    w.view(np.uint16) if w.dtype == cmp.BF16 else w)


def list_ops(pattern) -> int:
    """One line per op: its element types and how its results are compared."""
    import programs

    rows = collections.defaultdict(lambda: (set(), set()))
    for case in C.generate(0, 1, pattern) + programs.cases(0):
        types, tols = rows[case.op]
        types.add(case.dtype)
        tols.update(t.describe() for t in case.tols(1))
    for op, (types, tols) in sorted(rows.items()):
        kinds = ", ".join(sorted(types)) if len(types) <= 16 else f"{len(types)} type pairs"
        print(f"{op}: {kinds} | {'; '.join(sorted(tols))}")
    return 0


def per_op(cases, n: int, seed: int) -> list:
    """At most n cases of each op, drawn with the seed, in their first order."""
    by_op = collections.defaultdict(list)
    for i, c in enumerate(cases):
        by_op[c.op].append(i)
    rng = np.random.default_rng(seed)
    keep = set()
    for idx in by_op.values():
        keep.update(rng.choice(idx, size=min(n, len(idx)), replace=False).tolist())
    return [c for i, c in enumerate(cases) if i in keep]


def backends(text: str) -> list:
    """The --backend list: host, cuda, rocm, comma-separated, each once."""
    names = [b.strip() for b in text.split(",") if b.strip()]
    for b in names:
        if b not in ("host", "cuda", "rocm"):
            raise argparse.ArgumentTypeError(f"unknown backend {b!r} (host, cuda, rocm)")
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: name each backend once")
    return names


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--xthunk", help="the xthunk executable")
    p.add_argument("--backend", default="host", type=backends,
                   help="host, cuda or rocm; a comma list (host,cuda,rocm) runs each case on\n"
                        "each, lowered by JAX once")
    p.add_argument("--via", default="cli", choices=["cli", "jit"],
                   help="cli: the xthunk executable (--xthunk); jit: xthunk.jax.jit in this Python")
    p.add_argument("--self-check", nargs="?", const="xla", choices=["xla", "wide"],
                   help="instead of xthunk: run each module with XLA:CPU from its text (xla),\n"
                        "or the cases with tolerances evaluated in f64 (wide)")
    p.add_argument("--ops", help="regular expression: only the ops it matches")
    p.add_argument("--programs", action="store_true", help="run the user programs too")
    p.add_argument("--programs-only", action="store_true", help="run only the user programs")
    p.add_argument("--seed", type=int, default=None, help="default: random, printed")
    p.add_argument("--count", type=int, default=2, help="random cases per op and type")
    p.add_argument("--per-op", type=int, default=None, metavar="N",
                   help="at most N of the generated cases per op, drawn with the seed\n"
                        "(the programs are all kept)")
    p.add_argument("--compile", metavar="TARGETS", type=lambda t: [x for x in t.split(",") if x],
                   help="compile each module ahead of time for these targets (sm_90,gfx90a)\n"
                        "into one .pb and run that; a GPU backend must load its image")
    p.add_argument("--portable", action="store_true",
                   help="run jax.export's serialized bytes (VHLO bytecode) instead of the text, "
                        "where the case is a JAX function (not a patched or written text)")
    p.add_argument("--keep", help="keep every case's folder (module, inputs, outputs) here")
    p.add_argument("--allow-unsupported", action="store_true")
    p.add_argument("--unsupported-pattern", default=r"(?i)unsupported")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per xthunk run")
    p.add_argument("--list", action="store_true",
                   help="print each op's types and comparisons, run nothing")
    a = p.parse_args(argv)
    if a.list:
        return list_ops(a.ops)
    if not a.self_check and a.via == "cli" and not a.xthunk:
        p.error("--xthunk PATH (or --self-check) is required")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (rerun with --seed {seed})", flush=True)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    if a.self_check == "xla":
        adapters = [SelfCheckAdapter()]
    elif a.self_check == "wide":
        adapters = [WideAdapter()]
    elif a.via == "jit":
        adapters = [JitAdapter(b, a.unsupported_pattern) for b in a.backend]
    else:
        adapters = [CliAdapter(a.xthunk, b, a.unsupported_pattern, a.timeout, a.compile,
                               a.portable)
                    for b in a.backend]
    keep = a.keep
    tmp = None
    if not keep:
        tmp = tempfile.mkdtemp(prefix="xthunk-jaxt-")
    t0 = time.time()
    tallies = [Tally() for _ in adapters]
    todo = []
    if not a.programs_only:
        todo = C.generate(seed, a.count, a.ops)
        if a.per_op is not None:
            todo = per_op(todo, a.per_op, seed)
    if a.programs or a.programs_only:
        import programs

        todo += programs.cases(seed)
    if a.self_check == "wide":
        todo = [c for c in todo if WideAdapter.wanted(c)]
    print(f"{len(todo)} cases, on {', '.join(x.name for x in adapters)}", flush=True)
    try:
        run_cases(todo, adapters, keep or tmp, bool(keep), tallies)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    bad = 0
    for adapter, tally in zip(adapters, tallies):
        text, tot = tally.summary()
        print(f"== {adapter.name}\n{text}")
        print(f"{adapter.name}: set size {sum(tot.values())}: passed {tot['passed']}, "
              f"failed {tot['failed']}, refused at import {tot['refused']}, "
              f"test-set errors {tot['set-error']}")
        bad += tot["failed"] + tot["set-error"] + (0 if a.allow_unsupported else tot["refused"])
    print(f"{time.time() - t0:.0f}s, seed {seed}: {'FAILED' if bad else 'passed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
