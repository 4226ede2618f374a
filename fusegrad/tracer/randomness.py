"""Random numbers drawn while tracing are frozen into the compiled function: NumPy draws them
once, at trace time, and they enter the IR as constants, so every later call returns the same
"random" values. JAX makes randomness an explicit argument (keys, jax.random.PRNGKey); fusegrad
keeps NumPy's API and warns (TracerRandomWarning) at trace time instead.

`watch(fun, static)` wraps the trace of a user function. Detection costs nothing outside a trace:

* np.random's module-level functions (the global RandomState's methods: randn, normal, seed,
  ...) and default_rng are replaced by wrappers while some thread traces, and put back after.
  A wrapper warns, naming the caller's line, when its own thread is tracing; default_rng only
  when unseeded (a seeded generator made inside draws the same numbers every call anyway).
* Generator and RandomState methods cannot be wrapped (the types are immutable), so the state
  of every generator the function reaches by name (globals its code reads, closure cells,
  defaults, static arguments, and so on through the Python functions it calls) is compared
  before and after the trace; a change names the generator and the lines that use it. This
  also catches aliases of the global functions (`from numpy.random import randn`).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import os
import threading
import types
import warnings

import numpy as np

from .location import user_frame
from .tracer import is_tracing


class TracerRandomWarning(UserWarning):
    """A random draw ran while tracing: its values are frozen into the compiled function."""


ADVICE = ("it ran once, at trace time, and its values are frozen into the compiled function, "
          "so every call returns the same numbers. Draw outside the jitted function and pass "
          "the noise in as an argument (as JAX passes explicit keys, jax.random.PRNGKey), or "
          "run with backend=\"eager\".")

_GENERATORS = (np.random.Generator, np.random.RandomState)
_GLOBAL = np.random.mtrand._rand        # the RandomState behind np.random.randn & co.
_METHODS = (types.MethodType, types.BuiltinMethodType)        # rng.normal, an alias of randn
_FUNCTIONS = (types.FunctionType, types.MethodType)
_LIBRARIES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,   # fusegrad
              os.path.dirname(os.path.abspath(np.__file__)) + os.sep)
_DEPTH = 4                  # how far to follow the functions a traced function calls


class _Local(threading.local):
    global_warned = False   # a wrapper warned in this trace: the global state needs no check


_local = _Local()
_lock = threading.Lock()
_installed: dict = {}       # name -> the original np.random function, while some trace runs
_wrappers: dict = {}        # name -> its wrapper, made once per original
_active = [0]


def _warn(what):
    """Warn as if from the user's line (once per line, as warnings.warn would)."""
    frame = user_frame()
    if frame is None:
        warnings.warn(f"{what} while tracing: {ADVICE}", TracerRandomWarning, stacklevel=3)
        return
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    warnings.warn_explicit(f"{what} at {filename}:{lineno} while tracing: {ADVICE}",
                           TracerRandomWarning, filename, lineno,
                           registry=frame.f_globals.setdefault("__warningregistry__", {}))


def _wrapper(name, fn):
    cached = _wrappers.get(name)
    if cached is not None and cached._fg_original is fn:
        return cached

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if is_tracing() and (name != "default_rng" or
                             (args[0] if args else kwargs.get("seed")) is None):
            _local.global_warned |= name != "default_rng"
            _warn(f"np.random.{name} called")
        return fn(*args, **kwargs)
    wrapper._fg_original = fn
    _wrappers[name] = wrapper
    return wrapper


def _install():
    with _lock:
        _active[0] += 1
        if _active[0] == 1:
            for name in dir(np.random):
                fn = getattr(np.random, name)
                if (getattr(fn, "__self__", None) is _GLOBAL and name != "get_state") \
                        or name == "default_rng":
                    _installed[name] = fn
                    setattr(np.random, name, _wrapper(name, fn))


def _uninstall():
    with _lock:
        _active[0] -= 1
        if _active[0] == 0:
            for name, fn in _installed.items():
                setattr(np.random, name, fn)
            _installed.clear()


@contextlib.contextmanager
def watch(fun, static=None):
    """Warn about random draws made while tracing fun (static: {index: its static argument})."""
    reachable = _reachable(fun, static or {})
    before = {key: _state(gen) for key, (gen, _, _) in reachable.items()}
    _install()
    _local.global_warned = False
    try:
        yield
    finally:
        _uninstall()
    for key, (gen, name, code) in reachable.items():
        if _state(gen) != before[key] and not (
                gen is _GLOBAL and _local.global_warned):
            _warn_generator(gen, name, code)


def _state(gen):
    """A comparable snapshot of a generator's state (MT19937 keeps its words in an array)."""
    state = gen.bit_generator.state if isinstance(gen, np.random.Generator) else \
        gen.get_state(legacy=False)
    return _frozen(state)


def _frozen(x):
    if isinstance(x, dict):
        return tuple((k, _frozen(v)) for k, v in x.items())
    return x.tobytes() if isinstance(x, np.ndarray) else x


def _warn_generator(gen, name, code):
    lines = sorted({ins.positions.lineno for c in _codes(code) for ins in dis.get_instructions(c)
                    if ins.opname.startswith("LOAD") and ins.argval == name
                    and ins.positions.lineno})
    where = code.co_filename if code is not None else "<unknown>"
    owner = "np.random's global" if gen is _GLOBAL else "the"
    used = f" (used at {where}:{', '.join(map(str, lines))})" if lines else ""
    warnings.warn_explicit(f"{owner} {type(gen).__name__} `{name}`{used} drew numbers while "
                           f"tracing: {ADVICE}", TracerRandomWarning, where,
                           lines[0] if lines else 0)


def _codes(code):
    """code and the code objects nested in it (lambdas, inner functions, comprehensions)."""
    if code is None:
        return
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _reachable(fun, static) -> dict:
    """{id: (generator, name, code that names it)} for the generators fun reaches by name."""
    found: dict = {}
    code = getattr(fun, "__code__", None)
    for i, value in static.items():
        if isinstance(value, _GENERATORS):
            named = code is not None and i < code.co_argcount
            found[id(value)] = (value, code.co_varnames[i] if named else f"argument {i}",
                                code if named else None)
    todo, seen = [(fun, 0)], set()
    while todo:
        f, depth = todo.pop()
        f = getattr(f, "__func__", f)                   # bound methods
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen or depth > _DEPTH:
            continue
        seen.add(id(code))
        for name, value in _names(f, code):
            gen = getattr(value, "__self__", None) if isinstance(value, _METHODS) else value
            if isinstance(gen, _GENERATORS):
                found.setdefault(id(gen), (gen, name, code))
            elif isinstance(value, _FUNCTIONS):
                todo.append((value, depth + 1))
    return found


def _names(f, code):
    """(name, value) of what f's code can read: closure cells and __wrapped__ always; globals
    and defaults only of user code (fusegrad's own wrappers hand the user function on)."""
    cells = zip(code.co_freevars, f.__closure__ or ())
    yield from ((name, cell.cell_contents) for name, cell in cells if _filled(cell))
    if hasattr(f, "__wrapped__"):
        yield "__wrapped__", f.__wrapped__
    if code.co_filename.startswith(_LIBRARIES):
        return
    defaults = f.__defaults__ or ()
    yield from zip(code.co_varnames[code.co_argcount - len(defaults):code.co_argcount], defaults)
    yield from (f.__kwdefaults__ or {}).items()
    names = {n for c in _codes(code) for n in c.co_names}
    g = f.__globals__
    yield from ((n, g[n]) for n in names if n in g)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:                                  # a cell not yet assigned
        return False
    return True
