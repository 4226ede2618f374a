"""Evaluate one primitive on concrete arrays with its registered NumPy implementation, and a
Function with the env/read/write loop over them.

This is the semantics every consumer shares: the interpreter, constant folding, the eager
engine, bind() on plain arrays, the host steps of compiled code, and the control-flow
primitives (control.py), whose implementations run their nested Functions with eval_function.
The registry is read from registry.py, not primitives.py, so that control.py can import this
module while primitives.py imports control.py.
"""

from __future__ import annotations

import operator
import weakref

import numpy as np

from .registry import PRIMITIVES

try:  # NumPy 2's error state is a context variable; np.errstate() costs ~1 us per op
    from numpy._core._ufunc_config import _extobj_contextvar as _errstate_var
    with np.errstate(all="ignore"):
        _IGNORE_ERRORS = _errstate_var.get()
except (ImportError, AttributeError):  # pragma: no cover - other NumPy versions
    _errstate_var = None


_F64 = np.dtype(np.float64)
_SCALAR_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def apply(prim: str, args, params) -> np.ndarray:
    """Evaluate one primitive on concrete operands, floating-point warnings off; always
    returns an ndarray (a tuple of them for a primitive with several outputs). (The eager
    engine calls this once per op: it sets NumPy's error state through its context variable,
    which np.errstate() does at ten times the cost.)

    Adding, subtracting or multiplying two float64 scalars is done in Python floats, which
    round exactly as NumPy does (IEEE binary64) and never warn, at a quarter of the cost of a
    ufunc call on 0-d arrays: scalar programs on the eager engine are made of these."""
    arith = _SCALAR_ARITH.get(prim)
    if arith is not None:
        a, b = args
        ta, tb = type(a), type(b)
        if (ta is float or ta is np.ndarray and a.dtype is _F64 and not a.shape) and \
                (tb is float or tb is np.ndarray and b.dtype is _F64 and not b.shape):
            return np.asarray(arith(float(a), float(b)))
    impl = PRIMITIVES[prim].impl
    if _errstate_var is None:
        with np.errstate(all="ignore"):
            return _arrays(impl(*args, **params))
    token = _errstate_var.set(_IGNORE_ERRORS)
    try:
        return _arrays(impl(*args, **params))
    finally:
        _errstate_var.reset(token)


def _arrays(out):
    return tuple(np.asarray(o) for o in out) if type(out) is tuple else np.asarray(out)


def eval_function(fn, args) -> list:
    """Run a Function on concrete arrays, one op at a time: the reference semantics."""
    env = {}

    def read(v):
        return env[v]

    def write(v, x):
        x = np.asarray(x)
        if x.dtype != v.type.np_dtype:
            x = x.astype(v.type.np_dtype)
        if x.shape != v.type.shape:
            raise RuntimeError(f"interpreter: got shape {x.shape} for a value of type {v.type}")
        env[v] = x

    for p, a in zip(fn.params, args, strict=True):
        write(p, a)
    deaths = _deaths(fn)
    for op, dead in zip(fn.ops, deaths):
        try:
            out = apply(op.prim, [read(v) for v in op.inputs], op.params)
        except IndexError as e:     # a gather's index out of bounds: say where it was used
            raise IndexError(f"{e} (at {op.loc})" if op.loc else str(e)) from None
        if len(op.outputs) == 1:
            write(op.outputs[0], out)
        else:
            for v, x in zip(op.outputs, out, strict=True):
                write(v, x)
        for v in dead:
            del env[v]
    return [read(r) for r in fn.results]


_DEATHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _deaths(fn) -> list:
    """Per op of fn, the values no later op reads and fn does not return: the interpreter lets
    go of them once the op ran, so its peak memory is the live values', as compiled code's."""
    cached = _DEATHS.get(fn)
    if cached is not None and cached[0] == len(fn.ops):   # not appended to since
        return cached[1]
    last = {}
    for i, op in enumerate(fn.ops):
        for v in (*op.inputs, *op.outputs):
            last[v] = i
    for p in fn.params:
        last.setdefault(p, 0)
    per_op: list = [[] for _ in fn.ops]
    keep = set(fn.results)
    for v, i in last.items():
        if v not in keep and per_op:
            per_op[i].append(v)
    _DEATHS[fn] = (len(fn.ops), per_op)
    return per_op
