"""Numba helpers that generated modules import: scalar functions too long for a template (the
matrix products are in blas.py). Part of the disk-cache key (compile.py hashes this file)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_scalar = njit(inline="always", error_model="numpy")


@_scalar
def stable_logistic_f64(x):
    e = math.exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e)


@_scalar
def stable_logistic_f32(x):
    e = math.exp(-abs(x))
    return (np.float32(1.0) if x >= 0 else e) / (np.float32(1.0) + e)


@_scalar
def ipow(a, b):
    """Integer power as np.power: negative exponents are an error."""
    if b < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    result = 1
    while b:
        if b & 1:
            result *= a
        a *= a
        b >>= 1
    return result
