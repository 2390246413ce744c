"""xthunk.jax: run a JAX function through xthunk. ``jit(f)`` lowers ``f`` with JAX once per
signature, imports the StableHLO into an xthunk program, loads it and runs it there.

    import numpy as np, xthunk.jax

    @xthunk.jax.jit                     # or xthunk.jax.jit(f, backend="cuda")
    def step(params, x):
        ...
    loss, new_params = step(params, x)  # numpy arrays, in f's own pytree structure

Needs jax (``pip install xthunk[jax]``); ``import xthunk`` works without it.
See docs/stablehlo.md.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence, Union

try:
    import jax as _jax
except ImportError as _e:  # pragma: no cover - exercised where jax is absent
    raise ImportError(
        f"xthunk.jax needs jax, which is not importable ({_e}): pip install xthunk[jax]"
    ) from _e

import numpy as np

from . import _xthunk
from .errors import InvalidArgumentError, ProgramError

__all__ = ["Jitted", "jit"]

# One runtime per backend name, shared by every jitted function that names no runtime.
_RUNTIMES: dict = {}
_RUNTIMES_LOCK = threading.Lock()


def _runtime(backend: str) -> _xthunk.Runtime:
    with _RUNTIMES_LOCK:
        rt = _RUNTIMES.get(backend)
        if rt is None:
            rt = _xthunk.Runtime(backend)
            _RUNTIMES[backend] = rt
        return rt


def _numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a parameter's dtype name (bf16 and the 8-bit floats through
    ml_dtypes)."""
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _leaf_key(x: Any):
    """What of a leaf decides the lowering: a Python scalar's type (JAX gives it a weak type,
    whatever its value), an array's shape, dtype and weak type."""
    if type(x) in (bool, int, float, complex):
        return type(x)
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        a = np.asarray(x)
        return (a.shape, a.dtype, False)
    return (tuple(np.shape(x)), np.dtype(dtype), bool(getattr(x, "weak_type", False)))


class _Entry:
    """One signature's program: the loaded executable and the pytree of f's outputs."""

    def __init__(self, text: str, exe, out_tree, n_leaves: int):
        self.text = text
        self.exe = exe
        self.out_tree = out_tree
        if exe is None:  # f returns no arrays: nothing to run
            self.params, self.outputs = [], []
            return
        params = exe.parameters
        if len(params) != n_leaves:
            raise InvalidArgumentError(
                f"the lowered module has {len(params)} parameters for {n_leaves} array "
                "arguments",
            )
        self.params = [(p.name, _numpy_dtype(p.dtype)) for p in params]
        self.outputs = [o.name for o in exe.outputs]
        if len(self.outputs) != out_tree.num_leaves:
            raise ProgramError(
                f"the program has {len(self.outputs)} outputs, f returns "
                f"{out_tree.num_leaves} arrays",
            )


class Jitted:
    """A JAX function compiled through xthunk per signature (``jit(f)``). Calling it runs the
    program for the arguments' signature (lowered, imported and loaded on the first call with
    that signature) and returns numpy arrays in f's output structure."""

    def __init__(
        self,
        fun: Callable,
        *,
        backend: Optional[str] = None,
        runtime: Optional[_xthunk.Runtime] = None,
        device: int = 0,
        static_argnums: Union[int, Sequence[int]] = (),
        static_argnames: Union[str, Sequence[str]] = (),
    ):
        if not callable(fun):
            raise TypeError(f"jit needs a callable, got {type(fun).__name__}")
        if runtime is not None and backend is not None and runtime.backend != backend:
            raise ValueError(f"backend={backend!r} but the runtime's backend is {runtime.backend!r}")
        self._fun = fun
        self._backend = runtime.backend if runtime is not None else (backend or "auto")
        self._rt = runtime
        self._device = device
        self._static_argnums = (
            (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        )
        self._static_argnames = (
            (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        )
        self._jitted = _jax.jit(
            fun,
            keep_unused=True,
            static_argnums=self._static_argnums,
            static_argnames=self._static_argnames,
        )
        self._cache: dict = {}
        self._lock = threading.Lock()
        self.lowerings = 0
        """How many times f was lowered (once per new signature)."""
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "jitted")
        self.__qualname__ = getattr(fun, "__qualname__", self.__name__)
        self.__doc__ = getattr(fun, "__doc__", None)

    @property
    def runtime(self) -> _xthunk.Runtime:
        """The runtime programs are loaded into (created on first use)."""
        if self._rt is None:
            self._rt = _runtime(self._backend)
        return self._rt

    def _split(self, args: tuple, kwargs: dict):
        """The dynamic arguments (a pytree, as JAX flattens it) and the static ones."""
        n = len(args)
        static_pos = {i % n for i in self._static_argnums if -n <= i < n}
        dyn = tuple(a for i, a in enumerate(args) if i not in static_pos)
        static = tuple((i, args[i]) for i in sorted(static_pos))
        dyn_kw = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_argnames))
        return (dyn, dyn_kw), (static, static_kw)

    @staticmethod
    def _key(treedef, leaves, static):
        """The signature: what of the arguments decides the lowering."""
        key = (
            treedef,
            tuple(_leaf_key(x) for x in leaves),
            static,
            bool(_jax.config.read("jax_enable_x64")),
        )
        try:
            hash(key)
        except TypeError as e:  # an unhashable static argument
            raise ValueError(f"static arguments must be hashable: {e}") from e
        return key

    def _entry(self, args: tuple, kwargs: dict):
        tree_args, static = self._split(args, kwargs)
        leaves, treedef = _jax.tree_util.tree_flatten(tree_args)
        key = self._key(treedef, leaves, static)
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._compile(args, kwargs, treedef, len(leaves))
                    self._cache[key] = entry
        return entry, leaves

    def _compile(self, args, kwargs, treedef, n_leaves) -> _Entry:
        lowered = self._jitted.lower(*args, **kwargs)
        self.lowerings += 1
        if lowered.in_tree != treedef:
            raise InvalidArgumentError(
                f"JAX flattened the arguments as {lowered.in_tree}, xthunk.jax as {treedef}",
            )
        text = lowered.as_text()
        if lowered.out_tree.num_leaves == 0:
            # xthunk refuses a program without results; a pure function without array
            # results computes nothing, so none is loaded.
            return _Entry(text, None, lowered.out_tree, n_leaves)
        exe = self.runtime.load(text.encode(), self._device)
        return _Entry(text, exe, lowered.out_tree, n_leaves)

    def __call__(self, *args, **kwargs):
        entry, leaves = self._entry(args, kwargs)
        inputs = {}
        for (name, dtype), x in zip(entry.params, leaves):
            a = np.asarray(x)
            if a.dtype != dtype:  # Python scalars, and what JAX canonicalizes (f64 without x64)
                a = a.astype(dtype)
            inputs[name] = a
        if entry.outputs:
            results = entry.exe.run(inputs)
            outs = [results[name] for name in entry.outputs]
        else:
            outs = []
        return _jax.tree_util.tree_unflatten(entry.out_tree, outs)

    def lower(self, *args, **kwargs) -> str:
        """The StableHLO text xthunk runs for these arguments: the cached program's, else
        JAX's lowering (nothing imported or loaded, so it shows a module xthunk refuses)."""
        tree_args, static = self._split(args, kwargs)
        leaves, treedef = _jax.tree_util.tree_flatten(tree_args)
        entry = self._cache.get(self._key(treedef, leaves, static))
        if entry is not None:
            return entry.text
        return self._jitted.lower(*args, **kwargs).as_text()

    def executable(self, *args, **kwargs) -> Optional[_xthunk.Executable]:
        """The xthunk executable for these arguments' signature (loaded, and cached):
        its parameters are arg0, arg1, ... (the arguments' leaves), its outputs out0, ...
        None when f returns no arrays."""
        return self._entry(args, kwargs)[0].exe

    def cache_size(self) -> int:
        """How many signatures have a loaded program."""
        return len(self._cache)

    def clear_cache(self) -> None:
        """Forgets every loaded program (the next call lowers again)."""
        with self._lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"xthunk.jax.jit({self.__qualname__}, backend={self._backend!r})"


def jit(
    fun: Optional[Callable] = None,
    *,
    backend: Optional[str] = None,
    runtime: Optional[_xthunk.Runtime] = None,
    device: int = 0,
    static_argnums: Union[int, Sequence[int]] = (),
    static_argnames: Union[str, Sequence[str]] = (),
):
    """``f`` compiled through xthunk: ``jit(f)(*args)`` gives f's result as numpy arrays in
    f's own pytree structure, computed by xthunk on ``backend`` ("host", "cuda", "rocm";
    None: "auto", the first available) or in ``runtime``, on device ``device``.

    Per signature (the arguments' pytree structure, shapes, dtypes and weak types, the
    static arguments' values) f is lowered once with ``jax.jit(f, keep_unused=True)``, the
    StableHLO imported and loaded; later calls with that signature only run it. Python
    scalars are weakly typed, as in JAX: their values are inputs, not part of the signature.
    An op xthunk refuses raises ``xthunk.ProgramError`` naming it and its line:column in the
    lowered module (``.lower(*args)`` gives the text, even then). Usable as a decorator, with or
    without arguments."""
    kw = dict(
        backend=backend,
        runtime=runtime,
        device=device,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
    )
    if fun is None:
        return lambda f: Jitted(f, **kw)
    return Jitted(fun, **kw)
