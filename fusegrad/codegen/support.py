"""Numba helpers that generated modules import: scalar functions too long for a template and
the batched matmul. Part of the disk-cache key (compile.py hashes this file)."""

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


@njit(error_model="numpy")
def bmm(a, b, out):
    """out = a @ b with batch axes: [..., m, k] @ [..., k, n], equal batch shapes.

    np.dot with an out argument: Numba compiles `out[i] = np.dot(...)` ten times slower."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = 1
    for d in a.shape[:-2]:
        batch *= d
    a3 = np.ascontiguousarray(a).reshape((batch, m, k))
    b3 = np.ascontiguousarray(b).reshape((batch, k, n))
    o3 = out.reshape((batch, m, n))
    for i in range(batch):
        np.dot(a3[i], b3[i], o3[i])
