"""The public transformations: thin compositions of tracing, passes, backends and the eager
engine. `jit` caches one compiled entry per call signature.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import os
import threading

import numpy as np

from .dispatch import level
from .numpy.constructors import numpy_constructors
from .scipy import covered_names as _scipy_hook  # noqa: F401 - routes SciPy calls on tensors
from .runtime.signature import Signature, explain_miss, leaf_array, log_compile, signature_of
from .runtime.writeback import run_writing_back
from .state import busy as _busy
from .state import eager_transforms as _eager_state
from .numpy.lazy_traced import make as lazy_traced
from .tracer.randomness import watch as watch_random
from .tracer.tracer import _state as _tracer_state
from .tiering import Tiered
from .tracer.tracer import is_tracing, trace_flat
from .tree import flatten, unflatten

BACKENDS = ("numba", "interp", "eager")


def default_backend() -> str:
    return os.environ.get("FUSEGRAD_BACKEND") or _DEFAULT_BACKEND


_DEFAULT_BACKEND = "numba"


def _check_backend(backend):
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    return backend


@contextlib.contextmanager
def gc_paused():
    """Tracing and passes allocate many small objects that live until the pass ends; the
    cyclic collector would rescan them again and again for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _normalize_argnums(argnums) -> tuple:
    if isinstance(argnums, int):
        return (argnums,)
    return tuple(argnums)


def _name_of(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


def trace_signature(fun, sig: Signature, static_argnums, name=None, writeback=None):
    """Trace fun for a signature; returns (Function, out_treedef). Arguments fun updates in
    place are listed in `writeback` (tracer.trace_flat); their values are extra results."""
    static = dict(sig.static)
    nargs = len(static) + len(sig.treedef[1])

    def flat_fun(*tracers):
        dynamic = iter(unflatten(sig.treedef, tracers))
        args = [static[i] if i in static else next(dynamic) for i in range(nargs)]
        return fun(*args)

    types = [t for t, _ in sig.types]
    weak = [w for _, w in sig.types]
    hints = _param_hints(fun, sig, nargs)
    with watch_random(fun, static), numpy_constructors(lazy_traced):  # draws here: warn
        fn, out_tree, _ = trace_flat(flat_fun, types, name or _name_of(fun), weak=weak,
                                     hints=hints, writeback=writeback)
    return fn, out_tree


def _param_hints(fun, sig: Signature, nargs) -> list:
    """IR parameter names from the Python ones: `x`, and `params.w1` for pytree leaves."""
    try:
        names = [p.name for p in inspect.signature(fun).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    static = dict(sig.static)
    dynamic_names = [names[i] if i < len(names) else None
                     for i in range(nargs) if i not in static]
    hints: list = []
    for name, subtree in zip(dynamic_names, sig.treedef[1]):
        _leaf_hints(subtree, name, hints)
    return hints


def _leaf_hints(treedef, prefix, out):
    kind = treedef[0]
    if kind == "leaf":
        out.append(prefix)
    elif kind == "dict":
        for key, child in zip(treedef[1], treedef[2]):
            ok = prefix is not None and isinstance(key, str) and key.isidentifier()
            _leaf_hints(child, f"{prefix}.{key}" if ok else None, out)
    elif kind in ("list", "tuple", "namedtuple"):
        for i, child in enumerate(treedef[1]):
            _leaf_hints(child, None if prefix is None else f"{prefix}.{i}", out)


def make_ir(fun, static_argnums=()):
    """make_ir(f)(*args) -> the traced fg.ir.Function for those arguments."""
    static_argnums = _normalize_argnums(static_argnums)

    @functools.wraps(fun)
    def traced(*args):
        sig, _ = signature_of(args, static_argnums)
        return trace_signature(fun, sig, static_argnums, writeback=[])[0]
    return traced


class Lowered:
    """What jit compiles for one signature: the optimized IR, the source and kernel count."""

    def __init__(self, traced, ir, executable, writeback=()):
        self.traced = traced
        self.ir = ir
        self.executable = executable
        self.writeback = tuple(writeback)    # (leaf index, line, kind): runtime/writeback.py

    def compiled(self):
        """The executable, after a tiered compile under way has finished."""
        if isinstance(self.executable, Tiered):
            self.executable = self.executable.wait()
        return self.executable

    @property
    def source(self) -> str:
        return getattr(self.compiled(), "source", "")

    @property
    def kernels(self) -> int:
        return len(self.clusters)

    @property
    def clusters(self) -> list:
        """The ops of each fused kernel, for `lowered.ir.to_dot(clusters=lowered.clusters)`."""
        from .passes.fusion import fuse
        return fuse(self.ir).clusters


def compile_function(fn, backend: str, tiered: bool = False):
    """Optimize fn and build an executable `run(leaves) -> list of arrays` for a backend: the
    passes run here, for every backend; codegen and the interpreter take optimized IR. With
    `tiered`, the numba backend's executable runs on the interpreter until it is worth
    compiling (tiering.py)."""
    from .passes.pipeline import optimize
    ir = optimize(fn)
    if backend == "numba":
        if tiered:
            return Tiered(ir)
        from .codegen import compile_numba
        return compile_numba(ir, log=log_compile)
    from .runtime.interpreter import Interpreted
    return Interpreted(ir)


def tiered_default() -> bool:
    """FUSEGRAD_TIERED=0 turns tiered execution off everywhere (fg.jit's tiered=True is the
    default, tiered=False turns it off for one function)."""
    return os.environ.get("FUSEGRAD_TIERED", "1") != "0"


class Jitted:
    def __init__(self, fun, static_argnums=(), backend=None, tiered=True):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = _normalize_argnums(static_argnums)
        self.backend = _check_backend(backend)
        self.tiered = tiered
        self._entries: dict = {}
        self._last_sig = None
        self._lock = threading.Lock()
        self._fast_by_backend: dict = {}     # backend -> {flat args key -> (run, rebuild)}
        self._fast: dict = {}       # the one of the backend last compiled for: no flattening
        self._fast_env = None        # the raw FUSEGRAD_BACKEND the fast path was made under
        self._by_keywords: dict = {}     # sorted keyword names -> a Jitted taking them last

    def _backend(self) -> str:
        forced = _forced_backend()
        if forced == "eager":                   # disables every jit, for debugging
            return "eager"
        backend = self.backend or forced or _DEFAULT_BACKEND
        return backend if backend in BACKENDS else _check_backend(backend)

    def _entry(self, sig: Signature, backend: str):
        key = (sig, backend)
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    log_compile(explain_miss(_name_of(self.fun), self._last_sig, sig))
                    writeback = []
                    with gc_paused():
                        fn, out_tree = trace_signature(self.fun, sig, self.static_argnums,
                                                       writeback=writeback)
                        executable = compile_function(fn, backend,
                                                      self.tiered and tiered_default())
                    entry = self._entries[key] = (Lowered(fn, getattr(executable, "ir", fn),
                                                          executable, writeback), out_tree)
                    self._last_sig = sig
        return entry

    def __call__(self, *args, **kwargs):
        # The fast path: a signature seen before, with only ndarrays and Python scalars, no
        # keywords, no trace or eager transform under way, and FUSEGRAD_BACKEND as it was when
        # the path was installed (about 0.3 us in all).
        fast = self._fast
        if fast and not kwargs:
            fast = fast.get(_fast_key(args))
            if fast and _ENV.get(_BACKEND_KEY) == self._fast_env and (
                    not _busy[0] or not (_tracer_state.stack or _eager_state.depth)):
                run, rebuild = fast
                return rebuild(run(args))
        if kwargs:
            return self._call_with_keywords(args, kwargs)
        return self._call_slow(args)

    def _call_with_keywords(self, args, kwargs):
        """Keyword arguments are dynamic, like positional ones: they are passed last to a
        Jitted of the same function, one per set of keyword names."""
        names = tuple(sorted(kwargs))
        jitted = self._by_keywords.get(names)
        if jitted is None:
            fun = self.fun

            @functools.wraps(fun)
            def positional(*all_args):
                n = len(all_args) - len(names)
                return fun(*all_args[:n], **dict(zip(names, all_args[n:])))
            jitted = self._by_keywords[names] = Jitted(positional, self.static_argnums,
                                                       self.backend, self.tiered)
        return jitted(*args, *(kwargs[k] for k in names))

    def _call_slow(self, args):
        env = _ENV.get(_BACKEND_KEY)
        backend = self._backend()
        if backend == "eager" or is_tracing():
            return self.fun(*args)
        if _differentiating_eagerly(args):
            return self.fun(*args)
        sig, leaves = signature_of(args, self.static_argnums)
        lowered, out_tree = self._entry(sig, backend)
        arrays = [leaf_array(x) for x in leaves]
        if lowered.writeback:                   # torch.compile's epilogue: see writeback.py
            return unflatten(out_tree, run_writing_back(lowered, leaves, arrays,
                                                        _name_of(self.fun)))
        key = None if self.static_argnums else _fast_key(args)
        if key is not None and all(a is x for a, x in zip(arrays, args)
                                   if type(x) is np.ndarray):
            executable = lowered.executable
            fast = self._fast_by_backend.setdefault(backend, {})
            rebuild = _rebuilder(out_tree)
            fast[key] = (getattr(executable, "run", executable), rebuild)
            if isinstance(executable, Tiered):      # then the compiled entry's run itself
                executable.when_switched(lambda run: fast.__setitem__(key, (run, rebuild)))
            self._fast, self._fast_env = fast, env
        return unflatten(out_tree, lowered.executable(arrays))

    def lower(self, *args) -> Lowered:
        """The compiled entry for these arguments, compiled now (a tiered compile under way
        is waited for): compile-then-run."""
        backend = self._backend()
        if backend == "eager":
            backend = "interp"
        sig, _ = signature_of(args, self.static_argnums)
        lowered = self._entry(sig, backend)[0]
        lowered.compiled()
        return lowered

    @property
    def cache_size(self) -> int:
        return len(self._entries)


_FAST_SCALARS = frozenset((float, int, bool))


# FUSEGRAD_BACKEND is read on every call. os.environ.get raises and catches a KeyError inside
# when the variable is unset, which costs microseconds; CPython's os.environ keeps a plain dict
# that answers in nanoseconds. The fast path compares the raw value (bytes on POSIX) undecoded.
if isinstance(getattr(os.environ, "_data", None), dict) and hasattr(os.environ, "encodekey"):
    _ENV, _BACKEND_KEY = os.environ._data, os.environ.encodekey("FUSEGRAD_BACKEND")
    _decode = os.environ.decodevalue
else:
    _ENV, _BACKEND_KEY, _decode = os.environ, "FUSEGRAD_BACKEND", str


def _forced_backend():
    value = _ENV.get(_BACKEND_KEY)
    return None if value is None else _decode(value)


def _fast_key(args):
    """A cache key for positional args that are all ndarrays or Python scalars, else None:
    the type of a scalar, (dtype, shape) of an array; a single argument's key is not wrapped
    in a tuple."""
    if len(args) == 1:
        a = args[0]
        t = type(a)
        if t in _FAST_SCALARS:
            return t
        return (a.dtype, a.shape) if t is np.ndarray else None
    key = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            key.append((a.dtype, a.shape))
        elif t in _FAST_SCALARS:
            key.append(t)
        else:
            return None
    return tuple(key)


def _rebuilder(treedef):
    """A function rebuilding the output tree from the flat outputs, written out once."""
    consts: dict = {}

    def expr(node, counter):
        kind = node[0]
        if kind == "leaf":
            counter[0] += 1
            return f"o[{counter[0] - 1}]"
        if kind == "none":
            return "None"
        if kind == "dict":
            items = []
            for k, child in zip(node[1], node[2]):
                consts[f"k{len(consts)}"] = k
                items.append(f"k{len(consts) - 1}: {expr(child, counter)}")
            return "{" + ", ".join(items) + "}"
        items = [expr(child, counter) for child in node[1]]
        if kind == "namedtuple":
            consts[f"k{len(consts)}"] = node[2]
            return f"k{len(consts) - 1}(" + ", ".join(items) + ")"
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    return eval(f"lambda o: {expr(treedef, [0])}", consts)


def _differentiating_eagerly(args) -> bool:
    """Whether an eager transform needs this call on the tape: a compiled call would hand it
    constants (inside an eager grad, or given tensors that require grad)."""
    return _eager_state.depth > 0 or any(
        level(x) == 1 and x.requires_grad for x in flatten(list(args))[0])


def jit(fun=None, static_argnums=(), backend=None, tiered=True):
    """Compile fun per call signature; usable as @fg.jit or @fg.jit(static_argnums=...).

    With `tiered` (the default; FUSEGRAD_TIERED=0 turns it off everywhere), the numba
    backend's first call of a signature runs on the interpreter, its second queues a compile
    on the one background compile worker, and later calls run the compiled code once it is
    ready (fusegrad/tiering.py). `jitted.lower(*args)` compiles and waits: call it first for
    compile-then-run."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums, backend=backend,
                                 tiered=tiered)
    return Jitted(fun, static_argnums, backend, tiered)


__all__ = ["jit", "make_ir", "Jitted", "Lowered", "flatten"]
