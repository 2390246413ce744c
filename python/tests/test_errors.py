"""Bad inputs raise clear exceptions carrying xthunk's message and cause chain."""

import re

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
    # Extended precision: no xthunk type (complex64 was the example until xthunk took it).
    a["x"] = a["x"].astype(np.longdouble)
    name = re.escape(np.dtype(np.longdouble).name)
    with pytest.raises(xthunk.InvalidArgumentError, match=f"{name} have no xthunk element type"):
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


# Each message of the embedding issue's "Why" list names its cause and its argument.


def test_a_negative_dimension_names_the_tensor_and_the_axis():
    b = xthunk.ProgramBuilder("p")
    with pytest.raises(xthunk.InvalidArgumentError, match=r"parameter `x`: shape\[1\] is -3"):
        b.parameter("x", "f32", [2, -3])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"output `y`: shape\[0\] is -1"):
        b.output("y", "f32", [-1])
    with pytest.raises(xthunk.InvalidArgumentError, match=r"a temp: shape\[0\] is -5"):
        b.temp("f32", [-5])


def test_from_dlpack_of_something_without_dlpack(host):
    for bad, name in (([1, 2, 3], "list"), (None, "NoneType")):
        with pytest.raises(TypeError, match=rf"from_dlpack takes an object that exports DLPack.*not {name}"):
            xthunk.from_dlpack(bad)
        with pytest.raises(TypeError, match=rf"from_dlpack takes an object that exports DLPack.*not {name}"):
            host.from_dlpack(bad)


def _gelu_program():
    b = xthunk.ProgramBuilder("p")
    x = b.parameter("x", "f32", [4])
    o = b.output("o", "f32", [4])
    std = b.standard_module()
    b.kernel(std, "gelu_f32", 4, [x.r(), o.w(), 4])
    return b.build()


def test_none_and_strings_as_inputs_name_the_parameter(host):
    exe = host.load(_gelu_program())
    with pytest.raises(xthunk.InvalidArgumentError, match=r"`x` must be f32\[4\], got a Python object that is not an array"):
        exe(x=None)
    with pytest.raises(xthunk.InvalidArgumentError, match=r"`x` must be f32\[4\], got an array: arrays of str"):
        exe(x="abcd")


def test_a_float_where_an_extent_is_expected_names_that_argument():
    b = xthunk.ProgramBuilder("p")
    x = b.parameter("x", "f32", [4])
    o = b.output("o", "f32", [4])
    std = b.standard_module()
    b.kernel(std, "gelu_f32", 4, [x.r(), o.w(), xthunk.scalar(4.0, "f32")])
    with pytest.raises(xthunk.ProgramError, match=r"args\[2\]: `n` must be an integer immediate \(an extent of `in`\), got f32"):
        b.build()
    b = xthunk.ProgramBuilder("p")
    x = b.parameter("x", "f32", [4])
    o = b.output("o", "f32", [4])
    std = b.standard_module()
    b.kernel(std, "gelu_f32", 4, [x.r(), o.w(), -4])
    with pytest.raises(xthunk.ProgramError, match=r"args\[2\]: `n` = -4 is negative"):
        b.build()


@pytest.mark.parametrize(
    "a, c, out, dtypes, message",
    [
        ([4], [4], [4], ("f32", "f32", "f32"), r"matmul: `a` must be a matrix \[m, k\] or a batch of them"),
        ([4, 3], [3, 2], [4, 2], ("f32", "f16", "f32"), r"matmul: `b` is f16, `a` is f32: a matmul takes one element type"),
        ([4, 3], [5, 2], [4, 2], ("f32", "f32", "f32"), r"matmul: `b` has 5 rows \(shape \[5, 2\]\), `a` has 3 columns"),
        ([4, 3], [3, 2], [4, 3], ("f32", "f32", "f32"), r"matmul: `c` has shape \[4, 3\]; `a` @ `b` is 4 x 2"),
        ([2, 4, 3], [3, 3, 2], [2, 4, 2], ("f32", "f32", "f32"), r"matmul: `b` has batch size 3, `a` has 2"),
        ([2, 4, 3], [3, 2], [2, 4, 2], ("f32", "f32", "f32"), r"matmul: `b` has shape \[3, 2\]; with `a` of shape \[2, 4, 3\] it needs rank 3"),
    ],
)
def test_matmul_checks_shapes_and_dtypes_at_the_call(a, c, out, dtypes, message):
    b = xthunk.ProgramBuilder("p")
    ta = b.parameter("a", dtypes[0], a)
    tb = b.parameter("b", dtypes[1], c)
    to = b.output("o", dtypes[2], out)
    with pytest.raises(xthunk.InvalidArgumentError, match=message):
        b.matmul(ta, tb, to)


def test_empty_programs_say_they_are_empty(host, tmp_path):
    for empty in (b"", bytearray()):
        with pytest.raises(xthunk.ProgramError, match=r"the program is empty \(0 bytes\)"):
            host.load(empty)
    f = tmp_path / "empty.txtpb"
    f.write_text("# nothing here\n\n")
    with pytest.raises(xthunk.ProgramError, match=r"the program is empty \(text with no fields\)"):
        host.load(f)
    f = tmp_path / "empty.pb"
    f.write_bytes(b"")
    with pytest.raises(xthunk.ProgramError, match=r"the program is empty \(0 bytes\)"):
        host.load(f)
