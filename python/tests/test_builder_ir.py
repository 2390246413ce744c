"""The builder covers the IR (issue 28, item 5): memsets and fills, gemm with transposes,
collectives with replica groups (run SPMD on 4 host devices), while loops, conditionals,
command buffers, async scopes and custom calls, each built, run on the host and checked against
numpy with fresh random data; wrong shapes, dtypes and arguments are refused at the call, the
error naming the call and the argument."""

import numpy as np
import pytest

import xthunk
RANKS = 4


@pytest.fixture(scope="module")
def rt4():
    return xthunk.Runtime("host", host_devices=RANKS)


def scale(b, t, factor):
    """`t *= factor` (f32) with the standard library."""
    n = int(np.prod(t.shape))
    b.kernel(b.standard_module(), "scale_f32", n, [t.rw(), xthunk.scalar(factor, "f32"), n])


def test_fill_and_memset(host, rng):
    v = float(np.float32(rng.uniform(-10, 10)))
    k = int(rng.integers(-1000, 1000))
    b = xthunk.ProgramBuilder("fills")
    f = b.output("f", "f32", [17])
    i = b.output("i", "i32", [5])
    h = b.output("h", "f16", [6])
    z = b.output("z", "f64", [3])
    m = b.output("m", "u8", [7])
    b.fill(f, v)
    b.fill(i, k)
    b.fill(h, v)
    b.fill(z, 0.0)
    b.memset(m, 0xA5)
    out = host.load(b.build()).run({})
    np.testing.assert_array_equal(out["f"], np.full(17, v, np.float32))
    np.testing.assert_array_equal(out["i"], np.full(5, k, np.int32))
    np.testing.assert_array_equal(out["h"], np.full(6, v, np.float16))
    np.testing.assert_array_equal(out["z"], np.zeros(3))
    np.testing.assert_array_equal(out["m"], np.full(7, 0xA5, np.uint8))


def test_execution_seed_differs_per_run_and_repeats_per_load(host):
    def program():
        b = xthunk.ProgramBuilder("seed")
        b.execution_seed(b.output("s", "u64", []))
        return b.build()

    exe = host.load(program())
    seeds = [int(exe.run({})["s"]) for _ in range(3)]
    assert len(set(seeds)) == 3, seeds
    again = host.load(program())
    assert int(again.run({})["s"]) == seeds[0]
    b = xthunk.ProgramBuilder("bad")
    with pytest.raises(xthunk.InvalidArgumentError, match="execution_seed: `dst` is f32"):
        b.execution_seed(b.output("s", "f32", [2]))


def test_fill_and_memset_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    z = b.output("z", "f64", [3])
    h = b.output("h", "f16", [3])
    with pytest.raises(xthunk.InvalidArgumentError, match="fill: `value` .* halves differ"):
        b.fill(z, 1.5)
    with pytest.raises(xthunk.InvalidArgumentError, match="memset: `dst` has 6 bytes, not a multiple of the 4-byte pattern"):
        b.memset(h, 1, width=4)
    with pytest.raises(xthunk.InvalidArgumentError, match="memset: `pattern` 0x100 does not fit 1 bytes"):
        b.memset(h, 256)
    with pytest.raises(xthunk.InvalidArgumentError, match="memset: `width` is 3"):
        b.memset(h, 1, width=3)
    with pytest.raises(xthunk.InvalidArgumentError, match="fill: `value` x is not a float16"):
        b.fill(h, "x")


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_with_transposes(host, rng, trans_a, trans_b):
    m, n, k = 5, 7, 3
    alpha, beta = float(rng.uniform(0.5, 2)), float(rng.uniform(0.5, 2))
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    bm = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    b = xthunk.ProgramBuilder("gemm")
    ta, tb, tc = b.parameter("a", "f32", a.shape), b.parameter("b", "f32", bm.shape), b.parameter("c0", "f32", [m, n])
    c = b.output("c", "f32", [m, n])
    b.copy(tc, c)
    b.gemm(ta, tb, c, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta)
    got = host.load(b.build()).run({"a": a, "b": bm, "c0": c0})["c"]
    oa = a.T if trans_a else a
    ob = bm.T if trans_b else bm
    want = alpha * oa.astype(np.float64) @ ob.astype(np.float64) + beta * c0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    a = b.parameter("a", "f32", [4, 3])
    bm = b.parameter("b", "f32", [4, 2])
    c = b.output("c", "f32", [3, 2])
    h = b.parameter("h", "f16", [4, 2])
    i = b.parameter("i", "i32", [4, 3])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"gemm: `b` has 4 rows \(shape \[4, 2\]\), `a` has 3 columns"):
        b.gemm(a, bm, c)
    with pytest.raises(xthunk.InvalidArgumentError, match="gemm: `c` has shape"):
        b.gemm(a, bm, b.output("c2", "f32", [4, 2]), trans_a=True)
    with pytest.raises(xthunk.InvalidArgumentError, match="gemm: `b` is f16, `a` is f32"):
        b.gemm(a, h, c, trans_a=True)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"gemm: `a` is i32; a gemm takes f32, f64, f16, bf16"):
        b.gemm(i, i, c)
    b.gemm(a, bm, c, trans_a=True)  # [3,4] @ [4,2]: fits


def collectives_program():
    n = 8
    b = xthunk.ProgramBuilder("collectives")
    x = b.parameter("x", "f32", [n])
    outs = {
        "sum": b.output("sum", "f32", [n]),
        "max_pairs": b.output("max_pairs", "f32", [n]),
        "gather": b.output("gather", "f32", [2 * n]),
        "scatter": b.output("scatter", "f32", [n // RANKS]),
        "a2a": b.output("a2a", "f32", [n]),
        "bcast": b.output("bcast", "f32", [n]),
        "ring": b.output("ring", "f32", [n]),
        "rank": b.output("rank", "i32", []),
        "inplace": b.output("inplace", "f32", [n]),
    }
    b.all_reduce(x, outs["sum"])
    b.all_reduce(x, outs["max_pairs"], op="max", groups=[[0, 1], [2, 3]])
    b.all_gather(x, outs["gather"], groups=[[0, 2], [1, 3]])
    b.reduce_scatter(x, outs["scatter"], op="sum")
    b.all_to_all(x, outs["a2a"])
    b.broadcast(x, outs["bcast"], root=1, groups=[[0, 1], [2, 3]])
    b.collective_permute(x, outs["ring"], [(r, (r + 1) % RANKS) for r in range(RANKS)])
    b.rank_id(outs["rank"])
    b.copy(x, outs["inplace"])
    b.all_reduce(outs["inplace"], outs["inplace"], op="min")
    return b.build()


def test_collectives_with_groups_run_spmd(rt4, rng):
    exe = rt4.load(collectives_program())
    xs = [rng.standard_normal(8).astype(np.float32) for _ in range(RANKS)]
    out = exe.run_spmd([{"x": x} for x in xs])
    xs64 = [x.astype(np.float64) for x in xs]
    for r, o in enumerate(out):
        np.testing.assert_allclose(o["sum"], sum(xs64), rtol=1e-6, atol=1e-6)
        pair = [0, 1] if r < 2 else [2, 3]
        np.testing.assert_array_equal(o["max_pairs"], np.maximum(xs[pair[0]], xs[pair[1]]))
        group = [0, 2] if r % 2 == 0 else [1, 3]
        np.testing.assert_array_equal(o["gather"], np.concatenate([xs[g] for g in group]))
        blk = slice(2 * r, 2 * r + 2)
        np.testing.assert_allclose(o["scatter"], sum(x[blk] for x in xs64), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(o["a2a"], np.concatenate([xs[j][blk] for j in range(RANKS)]))
        root = 3 if r >= 2 else 1  # position 1 of [0, 1] and of [2, 3]
        np.testing.assert_array_equal(o["bcast"], xs[root])
        np.testing.assert_array_equal(o["ring"], xs[(r - 1) % RANKS])
        assert int(o["rank"]) == r
        np.testing.assert_array_equal(o["inplace"], np.minimum.reduce(xs))


def test_collective_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    x = b.parameter("x", "f32", [8])
    y16 = b.output("y16", "f32", [16])
    y8 = b.output("y8", "f32", [8])
    i16 = b.parameter("i16", "i16", [8])
    with pytest.raises(xthunk.InvalidArgumentError, match="all_gather: `dst` all_gather over 4 ranks needs 128 bytes, dst has 64"):
        b.all_gather(x, y16, groups=[[0, 1, 2, 3]])
    with pytest.raises(xthunk.InvalidArgumentError, match="all_reduce: `src` is i16"):
        b.all_reduce(i16, i16)
    with pytest.raises(xthunk.InvalidArgumentError, match="all_reduce: `groups` rank 1 is in two groups"):
        b.all_reduce(x, y8, groups=[[0, 1], [1, 2]])
    with pytest.raises(xthunk.InvalidArgumentError, match="all_reduce: `groups` groups\\[1\\] has 1 ranks"):
        b.all_reduce(x, y8, groups=[[0, 1], [2]])
    with pytest.raises(xthunk.InvalidArgumentError, match="broadcast: `root` is 2, a position in groups of 2 ranks"):
        b.broadcast(x, y8, root=2, groups=[[0, 1], [2, 3]])
    with pytest.raises(xthunk.InvalidArgumentError, match="all_gather: `dst` overlaps `src`"):
        b.all_gather(x, x)
    with pytest.raises(xthunk.InvalidArgumentError, match="op: \"avg\" is not one of"):
        b.all_reduce(x, y8, op="avg")
    with pytest.raises(xthunk.InvalidArgumentError, match="collective_permute: `pairs` pairs\\[1\\] = \\(0, 2\\)"):
        b.collective_permute(x, y8, [(0, 1), (0, 2)])
    with pytest.raises(xthunk.InvalidArgumentError, match="rank_id: `dst` is f32\\[8\\]"):
        b.rank_id(y8)


def test_while_loop_with_a_condition_and_with_a_trip_count(host, rng):
    x = rng.standard_normal(32).astype(np.float32)
    trips = int(rng.integers(1, 6))
    flags = np.array([True] * trips + [False])
    b = xthunk.ProgramBuilder("loops")
    tx = b.parameter("x", "f32", [32])
    y = b.output("y", "f32", [32])
    z = b.output("z", "f32", [32])
    pred = b.temp("bool", [])
    left = b.temp("bool", [trips + 1])
    shifted = b.temp("bool", [trips])
    b.copy(b.constant(flags), left)
    b.copy(tx, y)
    b.copy(tx, z)

    def cond(b):
        b.copy(left.elems(0, 1), pred)

    def body(b):
        scale(b, y, 2.0)
        b.copy(left.elems(1, trips), shifted)  # flags <<= 1 (through a temp: no overlap)
        b.copy(shifted, left.elems(0, trips))

    b.while_loop(pred, body, cond=cond)
    b.while_loop(pred, lambda b: scale(b, z, 3.0), trip_count=trips)
    out = host.load(b.build()).run({"x": x})
    np.testing.assert_allclose(out["y"], x * 2.0**trips, rtol=1e-6)
    np.testing.assert_allclose(out["z"], x * 3.0**trips, rtol=1e-6)


def test_conditional_by_index_and_by_pred(host, rng):
    x = rng.standard_normal(16).astype(np.float32)
    b = xthunk.ProgramBuilder("cond")
    tx = b.parameter("x", "f32", [16])
    i = b.parameter("i", "i32", [])
    p = b.parameter("p", "bool", [])
    y = b.output("y", "f32", [16])
    z = b.output("z", "f32", [16])
    b.copy(tx, y)
    b.copy(tx, z)
    b.conditional(i, [lambda b, k=k: scale(b, y, float(k + 2)) for k in range(3)])
    b.conditional(p, [lambda b: scale(b, z, 10.0), lambda b: scale(b, z, -1.0)])  # true first
    exe = host.load(b.build())
    for index in (0, 1, 2, 7, -1):  # out of range: the last branch
        flag = bool(rng.integers(0, 2))
        out = exe.run({"x": x, "i": np.int32(index), "p": np.bool_(flag)})
        k = index if 0 <= index < 3 else 2
        np.testing.assert_allclose(out["y"], x * (k + 2), rtol=1e-6, err_msg=f"index {index}")
        np.testing.assert_allclose(out["z"], x * (10.0 if flag else -1.0), rtol=1e-6)


def test_command_buffer_and_async_scope(host, rng):
    x = rng.standard_normal(64).astype(np.float32)
    b = xthunk.ProgramBuilder("scopes")
    tx = b.parameter("x", "f32", [64])
    y = b.output("y", "f32", [64])
    z = b.output("z", "f32", [64])
    t = b.temp("f32", [64])

    def graph(b):
        b.copy(tx, y)
        scale(b, y, 4.0)

    b.command_buffer(graph)
    sid = b.async_start(lambda b: (b.copy(tx, t), scale(b, t, -2.0)))
    b.async_done(sid)
    b.copy(t, z)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"async_done: `id` 0 is no async scope started and not yet done \(open: \[\]\)"):
        b.async_done(sid)
    out = host.load(b.build()).run({"x": x})
    np.testing.assert_allclose(out["y"], 4 * x, rtol=1e-6)
    np.testing.assert_allclose(out["z"], -2 * x, rtol=1e-6)


def test_control_flow_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    f = b.parameter("f", "f32", [])
    i = b.parameter("i", "i32", [])
    y = b.output("y", "f32", [4])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"while: `pred` is f32\[\]; it must be one pred"):
        b.while_loop(f, lambda b: None, trip_count=2)
    with pytest.raises(xthunk.InvalidArgumentError, match="while: `cond` is empty"):
        b.while_loop(b.temp("bool", []), lambda b: None)
    with pytest.raises(xthunk.InvalidArgumentError, match="conditional: `index` is f32"):
        b.conditional(f, [lambda b: None])
    with pytest.raises(xthunk.InvalidArgumentError, match="conditional: `branches` has 0 branches"):
        b.conditional(i, [])
    with pytest.raises(xthunk.InvalidArgumentError, match="conditional: `branches` has 3 branches; a pred index needs 2"):
        b.conditional(b.temp("bool", []), [lambda b: None] * 3)
    with pytest.raises(TypeError, match="`body` must be a callable taking the builder, got a int"):
        b.command_buffer(3)
    with pytest.raises(xthunk.InvalidArgumentError, match="async_start: `kind`"):
        b.async_start(lambda b: None, kind="gpu")

    def boom(b):
        b.fill(y, 1.0)
        raise RuntimeError("in the body")

    with pytest.raises(RuntimeError, match="in the body"):
        b.command_buffer(boom)
    # The builder is still usable, the failed block discarded.
    b.fill(y, 2.0)
    assert b.build().thunk_count == 1


def test_custom_call_runs_a_plugin_handler(host, plugin_targets, rng):
    assert ("host", "test.scaled_add") in plugin_targets
    s = float(np.float32(rng.uniform(-3, 3)))
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((4, 8)).astype(np.float32)
    b = xthunk.ProgramBuilder("call")
    tx, ty = b.parameter("x", "f32", [4, 8]), b.parameter("y", "f32", [4, 8])
    o = b.output("o", "f32", [4, 8])
    b.custom_call("test.scaled_add", [tx, ty], [o], attributes={"scale": xthunk.scalar(s, "f32")})
    got = host.load(b.build()).run({"x": x, "y": y})["o"]
    np.testing.assert_allclose(got, s * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_custom_call_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    x = b.parameter("x", "f32", [4])
    o = b.output("o", "f32", [4])
    with pytest.raises(xthunk.InvalidArgumentError, match="custom_call: `target`"):
        b.custom_call("", [x], [o])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"custom_call: `results` results\[1\] overlaps results\[0\]"):
        b.custom_call("t", [x], [o, o])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"attributes\[\"bad\"\]: a object is not an attribute value"):
        b.custom_call("t", [x], [o], attributes={"bad": object()})
    b.custom_call("t", [x], [o], attributes={"k": 3, "xs": [1.0, 2.0], "d": {"s": "v"}, "on": True})


SOURCE = """
extern "C" __global__ void axpb(const float* x, float* y, float a, long long n) {
  XT_FOR(i, n) y[i] = a * x[i] + B;
}
"""


def test_source_module_runs_a_users_kernel(host, rng):
    a = float(np.float32(rng.uniform(-2, 2)))
    x = rng.standard_normal(100).astype(np.float32)
    b = xthunk.ProgramBuilder("user")
    tx = b.parameter("x", "f32", [100])
    y = b.output("y", "f32", [100])
    m = b.source_module("mine", SOURCE, defines=["B=3.0f"])
    b.kernel(m, "axpb", 100, [tx.r(), y.w(), xthunk.scalar(a, "f32"), 100])
    try:
        exe = host.load(b.build())
    except xthunk.UnavailableError as e:  # the host compiles portable source with a C++ compiler
        pytest.skip(f"no C++ compiler for portable source on the host: {e}")
    got = exe.run({"x": x})["y"]
    np.testing.assert_allclose(got, np.float32(a) * x.astype(np.float64) + 3.0, rtol=1e-6, atol=1e-6)


def test_source_module_errors_name_the_argument():
    b = xthunk.ProgramBuilder("bad")
    b.source_module("mine", SOURCE)
    with pytest.raises(xthunk.InvalidArgumentError, match="source_module: `name` \"mine\""):
        b.source_module("mine", SOURCE)
    with pytest.raises(xthunk.InvalidArgumentError, match="source_module: `name` \"std\""):
        b.source_module("std", SOURCE)
    with pytest.raises(xthunk.InvalidArgumentError, match="source_module: `code` is empty"):
        b.source_module("other", "  ")


def test_send_and_recv_in_branches_on_the_rank(rt4, rng):
    """Rank 0 sends to rank 2, rank 2 receives from 0; the others keep their zeros."""
    b = xthunk.ProgramBuilder("p2p")
    x = b.parameter("x", "f32", [16])
    y = b.output("y", "f32", [16])
    r = b.temp("i32", [])
    b.fill(y, 0.0)
    b.rank_id(r)
    none = lambda b: None  # noqa: E731
    b.conditional(r, [lambda b: b.send(x, 2), none, lambda b: b.recv(y, 0), none])
    exe = rt4.load(b.build())
    xs = [rng.standard_normal(16).astype(np.float32) for _ in range(RANKS)]
    out = exe.run_spmd([{"x": v} for v in xs])
    for rank, o in enumerate(out):
        want = xs[0] if rank == 2 else np.zeros(16, np.float32)
        np.testing.assert_array_equal(o["y"], want, err_msg=f"rank {rank}")
    with pytest.raises(xthunk.InvalidArgumentError, match="send: `src` is i16"):
        b2 = xthunk.ProgramBuilder("bad")
        b2.send(b2.parameter("s", "i16", [2]), 1)


def test_ragged_all_to_all(rt4, rng):
    rows, width = 8, 2
    send = rng.integers(0, 3, size=(RANKS, RANKS))  # send[i][j]: rows rank i sends to rank j
    b = xthunk.ProgramBuilder("ragged")
    x = b.parameter("x", "f32", [rows, width])
    idx = {k: b.parameter(k, "i64", [RANKS]) for k in ("io", "ss", "oo", "rs")}
    y = b.output("y", "f32", [rows, width])
    b.fill(y, 0.0)
    b.ragged_all_to_all(x, y, idx["io"], idx["ss"], idx["oo"], idx["rs"])
    exe = rt4.load(b.build())
    xs = [rng.standard_normal((rows, width)).astype(np.float32) for _ in range(RANKS)]
    ins = []
    for i in range(RANKS):
        io = np.concatenate([[0], np.cumsum(send[i])[:-1]])
        # Where rank i's rows land in rank j's output: after those of the ranks before i.
        oo = np.array([send[:i, j].sum() for j in range(RANKS)])
        ins.append({"x": xs[i], "io": io.astype(np.int64), "ss": send[i].astype(np.int64),
                    "oo": oo.astype(np.int64), "rs": send[:, i].astype(np.int64)})
    out = exe.run_spmd(ins)
    for j, o in enumerate(out):
        want = np.zeros((rows, width), np.float32)
        at = 0
        for i in range(RANKS):
            start = int(ins[i]["io"][j])
            n = int(send[i][j])
            want[at:at + n] = xs[i][start:start + n]
            at += n
        np.testing.assert_array_equal(o["y"], want, err_msg=f"rank {j}")
    b = xthunk.ProgramBuilder("bad")
    x = b.parameter("x", "f32", [rows, width])
    i32 = b.parameter("i32", "i32", [RANKS])
    i64 = b.parameter("i64", "i64", [RANKS])
    with pytest.raises(xthunk.InvalidArgumentError, match="ragged_all_to_all: `output` is f32\\[8, 3\\]"):
        b.ragged_all_to_all(x, b.output("y3", "f32", [rows, 3]), i64, i64, i64, i64)
    y = b.output("y", "f32", [rows, width])
    with pytest.raises(xthunk.InvalidArgumentError, match="ragged_all_to_all: `send_sizes` is i32"):
        b.ragged_all_to_all(x, y, i64, i32, i64, i64)
    with pytest.raises(xthunk.InvalidArgumentError, match="ragged_all_to_all: `input_offsets` has 4 entries for groups of 2"):
        b.ragged_all_to_all(x, y, i64, i64, i64, i64, groups=[[0, 1], [2, 3]])
