"""Evaluate one primitive on concrete arrays with its registered NumPy implementation.

This is the semantics every consumer shares: the interpreter's env/read/write loop, constant
folding, the eager engine, bind() on plain arrays and the host steps of compiled code.
"""

from __future__ import annotations

import operator

import numpy as np

from .primitives import PRIMITIVES

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
    returns an ndarray. (The eager engine calls this once per op: it sets NumPy's error state
    through its context variable, which np.errstate() does at ten times the cost.)

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
            return np.asarray(impl(*args, **params))
    token = _errstate_var.set(_IGNORE_ERRORS)
    try:
        return np.asarray(impl(*args, **params))
    finally:
        _errstate_var.reset(token)
