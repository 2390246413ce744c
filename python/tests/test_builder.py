"""The program builder: the MLP built in Python runs like the checked-in example and the
CLI runs the file it writes; bf16 through ml_dtypes."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

import xthunk
from conftest import EXAMPLES, REPO, mlp_inputs, mlp_reference

B, D, H, C = 64, 512, 1024, 10


def build_mlp():
    b = xthunk.ProgramBuilder("mlp")
    x = b.parameter("x", "f32", [B, D])
    w1 = b.parameter("w1", "f32", [D, H])
    b1 = b.parameter("b1", "f32", [H])
    w2 = b.parameter("w2", "f32", [H, C])
    b2 = b.parameter("b2", "f32", [C])
    probs = b.output("probs", "f32", [B, C])
    h, hb, a = (b.temp("f32", [B, H]) for _ in range(3))
    z, logits = (b.temp("f32", [B, C]) for _ in range(2))
    std = b.standard_module()
    b.matmul(x, w1, h)
    b.kernel(std, "add_row_f32", B * H, [h.r(), b1.r(), hb.w(), B, H])
    b.kernel(std, "gelu_f32", B * H, [hb.r(), a.w(), B * H])
    b.matmul(a, w2, z)
    b.kernel(std, "add_row_f32", B * C, [z.r(), b2.r(), logits.w(), B, C])
    b.kernel(std, "softmax_f32", B, [logits.r(), probs.w(), B, C])
    return b.build()


def test_builder_writes_the_checked_in_mlp(tmp_path):
    prog = build_mlp()
    assert prog.thunk_count == 6
    assert prog.to_text() == (EXAMPLES / "mlp.txtpb").read_text()
    prog.save(tmp_path / "mlp.txtpb")
    prog.save(tmp_path / "mlp.pb")
    assert (tmp_path / "mlp.txtpb").read_text() == prog.to_text()
    assert (tmp_path / "mlp.pb").read_bytes() == prog.to_bytes()


def test_built_program_runs_in_python(host, rng):
    a = mlp_inputs(rng)
    for source in (build_mlp(), build_mlp().to_bytes()):
        np.testing.assert_allclose(host.load(source)(**a), mlp_reference(a), rtol=0, atol=1e-4)


def xthunk_cli():
    """$XTHUNK_CLI (ci/test.sh passes the one its tests built), else this checkout's CLI, built
    if stale (CARGO_TARGET_DIR is honoured)."""
    if os.environ.get("XTHUNK_CLI"):
        return pathlib.Path(os.environ["XTHUNK_CLI"])
    subprocess.run(["cargo", "build", "-q", "--bin", "xthunk"], cwd=REPO, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "xthunk"


def test_the_cli_runs_what_the_builder_wrote(tmp_path, rng):
    path = tmp_path / "built.pb"
    build_mlp().save(path)
    a = mlp_inputs(rng)
    for k, v in a.items():
        np.save(tmp_path / f"{k}.npy", v)
    cmd = [str(xthunk_cli()), "run", "--backend", "host", str(path), "--output-dir", str(tmp_path / "out")]
    for k in a:
        cmd += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    probs = np.load(tmp_path / "out" / "probs.npy")
    np.testing.assert_allclose(probs, mlp_reference(a), rtol=0, atol=1e-4)


def test_builder_constants_scalars_and_copies(host, rng):
    b = xthunk.ProgramBuilder("axpb")
    x = b.parameter("x", np.float32, [256])
    y = b.output("y", "float32", [256])
    c = b.constant(np.full(256, 0.5, dtype=np.float32))
    std = b.standard_module()
    b.copy(x, y)
    b.kernel(std, "scale_f32", 256, [y.rw(), xthunk.scalar(3.0, "f32"), 256])
    b.kernel(std, "add_f32", 256, [y.r(), c.r(), y.w(), 256])
    exe = host.load(b.build())
    xv = rng.standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(exe(x=xv), 3.0 * xv.astype(np.float64) + 0.5, rtol=0, atol=1e-5)


def test_builder_errors(host):
    b = xthunk.ProgramBuilder("bad")
    x = b.parameter("x", "f32", [4])
    std = b.standard_module()
    with pytest.raises(TypeError, match=r"a float needs its type"):
        b.kernel(std, "scale_f32", 4, [x.rw(), 2.0, 4])
    with pytest.raises(TypeError, match=r"a tensor needs its access"):
        b.kernel(std, "scale_f32", 4, [x, xthunk.scalar(2.0, "f32"), 4])
    with pytest.raises(xthunk.InvalidArgumentError, match="larger than"):
        b.parameter("huge", "f64", [2**40, 2**40])
    with pytest.raises(xthunk.InvalidArgumentError, match="unknown element type `f33`"):
        b.temp("f33", [4])
    b.kernel(std, "no_such_kernel_f32", 4, [x.rw(), 4])
    with pytest.raises(xthunk.ProgramError, match="no_such_kernel_f32"):
        b.build()
    with pytest.raises(xthunk.InvalidArgumentError, match="already built"):
        b.build()


def test_bf16_through_ml_dtypes(host, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    b = xthunk.ProgramBuilder("bf16_scale")
    x = b.parameter("x", "bf16", [64])
    y = b.output("y", "bf16", [64])
    std = b.standard_module()
    b.copy(x, y)
    b.kernel(std, "scale_bf16", 64, [y.rw(), xthunk.scalar(2.0, "bf16"), 64])
    exe = host.load(b.build())
    assert exe.parameters[0].dtype == "bfloat16"
    xv = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    y = exe(x=xv)
    assert y.dtype == ml_dtypes.bfloat16
    # Doubling is exact in bf16.
    np.testing.assert_array_equal(y.astype(np.float64), 2.0 * xv.astype(np.float64))
    with pytest.raises(xthunk.InvalidArgumentError, match="got an array of f32"):
        exe(x=xv.astype(np.float32))


def test_zero_dimensional_tensors(host):
    b = xthunk.ProgramBuilder("scalar_copy")
    s = b.parameter("s", "f64", [])
    t = b.output("t", "f64", [])
    b.copy(s, t)
    exe = host.load(b.build())
    assert exe.parameters[0].shape == ()
    out = exe(s=np.float64(2.5))
    assert out.shape == () and out == 2.5
    with pytest.raises(xthunk.InvalidArgumentError, match=r"shape \[\], got \[1\]"):
        exe(s=np.array([2.5]))


@pytest.mark.parametrize(
    "name, np_dtype",
    [("i16", np.int16), ("u16", np.uint16), ("u32", np.uint32), ("u64", np.uint64)],
)
def test_new_integer_types_copy_round_trip(host, name, np_dtype):
    b = xthunk.ProgramBuilder(f"copy_{name}")
    x = b.parameter("x", name, [5])
    y = b.output("y", np_dtype, [5])
    b.copy(x, y)
    exe = host.load(b.build())
    assert exe.parameters[0].dtype == np.dtype(np_dtype).name
    info = np.iinfo(np_dtype)
    xv = np.array([info.min, info.max, 0, 1, info.max - 1], dtype=np_dtype)
    out = exe(x=xv)
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, xv)
    # The dtype must be the parameter's exactly: a same-width integer of the other sign is
    # refused.
    other = np.dtype(np_dtype).str.replace("u", "X").replace("i", "u").replace("X", "i")
    with pytest.raises(xthunk.InvalidArgumentError):
        exe(x=xv.astype(other))
    # Immediates of the type.
    assert xthunk.scalar(int(info.max), name) is not None


@pytest.mark.parametrize("name, np_name", [("c64", "complex64"), ("c128", "complex128"),
                                           ("f8e4m3fn", "float8_e4m3fn"),
                                           ("f8e5m2", "float8_e5m2")])
def test_complex_and_f8_types_copy_round_trip(host, name, np_name):
    """c64/c128 as numpy's complex types, the 8-bit floats as ml_dtypes'; a copy gives the
    bits back, the dtype is checked exactly, and no immediate of these types exists yet."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np_dtype = np.dtype(getattr(ml_dtypes, np_name) if name.startswith("f8") else np_name)
    b = xthunk.ProgramBuilder(f"copy_{name}")
    x = b.parameter("x", name, [6])
    y = b.output("y", np_name, [6])
    b.copy(x, y)
    exe = host.load(b.build())
    assert exe.parameters[0].dtype == np_name
    rng = np.random.default_rng(7)
    if name.startswith("f8"):
        # Every kind of code: NaN, +-0, the largest values, subnormals.
        xv = np.array([0x7F, 0x80, 0x7E, 0x01, 0xFE, 0x3C], np.uint8).view(np_dtype)
    else:
        xv = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np_dtype)
        xv[0] = complex(np.nan, -0.0)
    out = exe(x=xv)
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out.view(np.uint8), xv.view(np.uint8))
    with pytest.raises(xthunk.InvalidArgumentError):
        exe(x=xv.view(np.uint8) if name.startswith("f8") else np.ascontiguousarray(xv.real))
    with pytest.raises(xthunk.UnsupportedError, match="immediates"):
        xthunk.scalar(1.0, name)
