"""docs/python-reference.md is generated from the package: each name of `xthunk` with its
signature from the type stubs (`_xthunk.pyi`) or the Python source, and its docstring from the
module. The test fails when the page and the package differ; `XTHUNK_BLESS=1` rewrites it."""

import ast
import inspect
import os
import pathlib

import xthunk
import xthunk._xthunk as ext

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "python-reference.md"
STUBS = pathlib.Path(ext.__file__).parent / "_xthunk.pyi"


def _doc(obj):
    d = inspect.getdoc(obj) if obj is not None else None
    return d.strip() if d else ""


def _signature(node):
    """`name(args) -> ret` of a stub's FunctionDef, without `self`."""
    args = ast.unparse(node.args)
    if args == "self":
        args = ""
    elif args.startswith("self, "):
        args = args[len("self, "):]
    ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{node.name}({args}){ret}"


def _entry(lines, title, doc):
    lines.append(f"- `{title}`" + (f": {doc.splitlines()[0]}" if doc else ""))
    for more in doc.splitlines()[1:]:
        lines.append(f"  {more}" if more else "")


def generate():
    tree = ast.parse(STUBS.read_text())
    lines = [
        "# The Python API: reference",
        "",
        "Generated from the package by `python/tests/test_reference.py` (`XTHUNK_BLESS=1` rewrites",
        "it; without it the test fails when this page and the package differ): signatures from the",
        "type stubs `python/xthunk/_xthunk.pyi` and the Python modules, text from the docstrings.",
        "The guide with examples is `docs/python.md`.",
        "",
        "## Functions and constants",
        "",
    ]
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and (node.target.id.startswith("__") or not node.target.id.startswith("_")):
            value = getattr(ext, node.target.id)
            _entry(lines, f"xthunk.{node.target.id}: {ast.unparse(node.annotation)}", f"= {value!r} in this build")
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    py_funcs = {"from_dlpack": xthunk.from_dlpack}
    for node in funcs:
        if node.name in py_funcs:
            continue
        _entry(lines, f"xthunk.{_signature(node)}", _doc(getattr(ext, node.name, None)))
    for name, f in py_funcs.items():
        _entry(lines, f"xthunk.{name}{inspect.signature(f)}", _doc(f))
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(ext, node.name, None)
        lines += ["", f"## `xthunk.{node.name}`", ""]
        if _doc(cls):
            lines += [_doc(cls), ""]
        for member in node.body:
            if isinstance(member, ast.AnnAssign):
                attr = getattr(cls, member.target.id, None)
                _entry(lines, f"{member.target.id}: {ast.unparse(member.annotation)}", _doc(attr) if attr is not None and not isinstance(attr, (int, str, float, bool)) else "")
            elif isinstance(member, ast.FunctionDef):
                _entry(lines, _signature(member), _doc(getattr(cls, member.name, None)))
    lines += ["", "## Exceptions", ""]
    errors = [n for n, v in vars(xthunk.errors).items() if inspect.isclass(v) and issubclass(v, Exception)]
    for name in errors:
        cls = getattr(xthunk.errors, name)
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        _entry(lines, f"xthunk.{name}({bases})", _doc(cls))
    return "\n".join(lines) + "\n"


def test_the_reference_page_matches_the_package():
    text = generate()
    for name in xthunk.__all__:
        if inspect.ismodule(getattr(xthunk, name)):
            continue
        assert f"xthunk.{name}" in text, f"{name} is not in the reference"
    if os.environ.get("XTHUNK_BLESS"):
        PAGE.write_text(text)
        return
    on_disk = PAGE.read_text() if PAGE.exists() else ""
    assert on_disk == text, (
        f"{PAGE} differs from the package; regenerate it with "
        "`XTHUNK_BLESS=1 python -m pytest python/tests/test_reference.py` and review the diff"
    )
