"""Custom-call plugins from Python: ``xthunk.load_plugin`` loads the C test plugin
(cli-tests/plugins/test_plugin.c, built here with ``cc``), a StableHLO program calling its
targets as ``jax.ffi.ffi_call`` prints them runs on the host against numpy; a file that cannot
be loaded raises UnavailableError with the dynamic loader's reason; a target with no handler is
refused when the program is loaded (UnsupportedError), naming it."""


import numpy as np
import pytest

import xthunk


def module(target="test.scaled_add"):
    """`f(x, y) = top_k(target(x, y, scale=2.5), k=3)` as JAX prints it (4x8 f32)."""
    return f"""module @jit_f {{
  func.func public @main(%arg0: tensor<4x8xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xi32>) {{
    %0 = stablehlo.custom_call @{target}(%arg0, %arg1) {{backend_config = "", mhlo.backend_config = {{scale = 2.500000e+00 : f32}}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[1, 0]> : tensor<2xindex>]}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %1:2 = stablehlo.custom_call @test.top_k(%0) {{backend_config = "", mhlo.backend_config = {{k = 3 : i64, largest = true}}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>]}} : (tensor<4x8xf32>) -> (tensor<4x3xf32>, tensor<4x3xi32>)
    return %1#0, %1#1 : tensor<4x3xf32>, tensor<4x3xi32>
  }}
}}
"""


def test_a_target_without_a_handler_is_refused_at_load(host):
    with pytest.raises(xthunk.UnsupportedError) as e:
        host.load(module("test.nobody"))
    assert "custom call `test.nobody` has no handler on backend `host`" in str(e.value)


def test_a_file_that_cannot_be_loaded_names_the_loaders_reason(tmp_path):
    bogus = tmp_path / "libbogus.so"
    bogus.write_bytes(b"not an ELF file")
    with pytest.raises(xthunk.UnavailableError) as e:
        xthunk.load_plugin(bogus)
    msg = str(e.value)
    assert str(bogus) in msg and "cannot be loaded: dlopen failed: " in msg, msg
    with pytest.raises(xthunk.UnavailableError, match="cannot open shared object file"):
        xthunk.load_plugin(tmp_path / "missing.so")


def test_plugin_handlers_run_a_stablehlo_program(host, plugin, plugin_targets, rng):
    targets = plugin_targets
    assert ("host", "test.scaled_add") in targets and ("host", "test.top_k") in targets
    assert xthunk.load_plugin(str(plugin)) == []  # loaded once per process
    exe = host.load(module())
    x = rng.uniform(-4, 4, (4, 8)).astype(np.float32)
    y = rng.uniform(-4, 4, (4, 8)).astype(np.float32)
    out = exe.run({"arg0": x, "arg1": y})
    s = 2.5 * x.astype(np.float64) + y
    order = np.argsort(-s, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(out["out1"], order.astype(np.int32))
    np.testing.assert_allclose(out["out0"], np.take_along_axis(s, order, axis=1), rtol=1e-6,
                               atol=1e-6)
