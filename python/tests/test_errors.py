"""Bad inputs raise clear exceptions carrying xthunk's message and cause chain."""

import numpy as np
import pytest

import xthunk
from conftest import EXAMPLES, mlp_inputs


@pytest.fixture
def mlp(host):
    return host.load(EXAMPLES / "mlp.txtpb")


def test_wrong_dtype(mlp, rng):
    a = mlp_inputs(rng)
    a["w1"] = a["w1"].astype(np.float64)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"`w1` must be f32\[512, 1024\], got an array of f64"):
        mlp(**a)


def test_wrong_shape(mlp, rng):
    a = mlp_inputs(rng)
    a["x"] = a["x"][:32]
    with pytest.raises(xthunk.InvalidArgumentError, match=r"`x` must have shape \[64, 512\], got \[32, 512\]"):
        mlp(**a)


def test_missing_and_unknown_inputs(mlp, rng):
    a = mlp_inputs(rng)
    del a["b2"]
    with pytest.raises(xthunk.InvalidArgumentError, match=r"missing input `b2` \(f32\[10\]\) of `mlp`"):
        mlp(**a)
    a = mlp_inputs(rng)
    a["bias"] = a["b2"]
    with pytest.raises(xthunk.InvalidArgumentError, match=r"`mlp` has no parameter `bias` \(its parameters: x, w1, b1, w2, b2\)"):
        mlp.run(a)


def test_an_unsupported_dtype_is_refused(mlp, rng):
    a = mlp_inputs(rng)
    a["x"] = a["x"].astype(np.complex64)
    with pytest.raises(xthunk.InvalidArgumentError, match="complex64 have no xthunk element type"):
        mlp(**a)


def test_corrupt_files(host, tmp_path):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff not a program")
    with pytest.raises(xthunk.ProgramError) as e:
        host.load(bad)
    assert e.value.causes, "the decoder's reason is a cause"
    assert isinstance(e.value.__cause__, xthunk.XthunkError)
    assert str(e.value.__cause__) == e.value.causes[0]

    typo = tmp_path / "typo.txtpb"
    typo.write_text((EXAMPLES / "mlp.txtpb").read_text().replace("allocations", "allocatoins", 1))
    with pytest.raises(xthunk.ProgramError, match=r"text program: line \d+"):
        host.load(typo)
    with pytest.raises(xthunk.ProgramError):
        host.load(b"\x0a\xff\xff garbage bytes")
    with pytest.raises(xthunk.InvalidArgumentError, match="no-such-file.txtpb"):
        host.load(tmp_path / "no-such-file.txtpb")
    with pytest.raises(xthunk.InvalidArgumentError, match="load takes a path, bytes or a Program"):
        host.load(42)


def test_exceptions_are_also_python_builtins(mlp, rng):
    a = mlp_inputs(rng)
    a["x"] = a["x"].T.copy()
    with pytest.raises(ValueError):
        mlp(**a)


def test_an_unknown_backend(host):
    with pytest.raises(xthunk.XthunkError, match="nosuch"):
        xthunk.Runtime("nosuch")
    with pytest.raises(xthunk.InvalidArgumentError, match="host_devices"):
        xthunk.Runtime("host", host_devices=0)


def test_byte_swapped_arrays_are_refused(mlp, rng):
    a = mlp_inputs(rng)
    a["b1"] = a["b1"].astype(">f4")
    with pytest.raises(xthunk.InvalidArgumentError, match="big-endian array of float32"):
        mlp(**a)
