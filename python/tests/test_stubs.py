"""The type stubs name what the extension module has (no class or method missing or extra)."""

import ast
import inspect
import pathlib

import xthunk._xthunk as ext

STUBS = pathlib.Path(ext.__file__).parent / "_xthunk.pyi"


def public(names):
    return {n for n in names if not n.startswith("_") or n in ("__call__", "__dlpack__", "__dlpack_device__", "__array__")}


def test_stubs_match_the_module():
    tree = ast.parse(STUBS.read_text())
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            members |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            stubbed[node.name] = public(members) - {"__init__"}
        elif isinstance(node, ast.FunctionDef):
            stubbed[node.name] = None
    for name, obj in vars(ext).items():
        if inspect.isclass(obj) and not name.startswith("_"):
            assert name in stubbed, f"class {name} has no stub"
            have = public(dir(obj)) - public(dir(object))
            assert stubbed[name] == have, f"{name}: stub {sorted(stubbed[name] ^ have)} differ"
        elif callable(obj) and not name.startswith("_"):
            assert name in stubbed, f"function {name} has no stub"
