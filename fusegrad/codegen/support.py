"""Numba helpers that generated modules import: scalar functions too long for a template, and
the streaming row store (the matrix products are in blas.py). Part of the disk-cache key
(compile.py hashes this file)."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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


# -- index bounds ---------------------------------------------------------------------------
# A gather or scatter reads or writes at a data-dependent index; Numba does not check it, so an
# index out of range would read garbage or write past a buffer. Indices follow NumPy's rules:
# -n <= i < n, negative ones counting from the end (Numba's indexing wraps them once). An index
# array in memory is checked once, before the kernels that use it run (one min/max pass); an
# index a kernel computes itself is checked where it is used.

@njit(error_model="numpy", nogil=True)
def _out_of_bounds(i, n, axis, where):
    raise IndexError("index " + str(i) + " is out of bounds for axis " + str(axis) +
                     " with size " + str(n) + where)


@njit(error_model="numpy", nogil=True)
def check_indices(idx, n, axis, where):
    """Raise NumPy's IndexError unless every entry of idx is in [-n, n)."""
    lo, hi = 0, -1
    for i in idx.ravel():
        lo = min(lo, i)
        hi = max(hi, i)
    if lo < -n:
        _out_of_bounds(lo, n, axis, where)
    if hi >= n:
        _out_of_bounds(hi, n, axis, where)


@njit(error_model="numpy", nogil=True)
def check_index(i, n, axis, where):
    """i itself if it is in [-n, n), else NumPy's IndexError."""
    if i < -n or i >= n:
        _out_of_bounds(i, n, axis, where)
    return i


# -- streaming stores -------------------------------------------------------------------------
# A kernel output that only a multi-threaded BLAS call reads is stored with non-temporal stores:
# the rows go to memory instead of staying dirty in the writing core's cache, where the BLAS
# threads on the other cores would have to fetch them line by line (benchmarks/w2_parts.py
# measures that hand-off). The kernel computes a row into a scratch array and stream_row
# copies it out.

_STREAM_CHUNK = 16  # bytes per non-temporal store: one SSE register, legal on any x86-64
# Below this, a BLAS call's input is cheap to fetch from another core's cache, and streaming it
# to memory would cost a round trip of its own.
STREAM_MIN_BYTES = 1 << 18


@intrinsic
def _stream_copy(typingctx, dst, src, nbytes):
    """Copy nbytes, a multiple of 16, from address src to the 16-byte aligned address dst with
    non-temporal stores."""
    if not all(isinstance(t, types.Integer) for t in (dst, src, nbytes)):
        return None

    def codegen(context, builder, sig, args):
        i64, chunk = ir.IntType(64), ir.VectorType(ir.IntType(32), _STREAM_CHUNK // 4)
        d, s, n = (builder.zext(a, i64) if a.type.width < 64 else a for a in args)
        bytes_ = ir.IntType(8).as_pointer()
        d, s = builder.inttoptr(d, bytes_), builder.inttoptr(s, bytes_)
        nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        count = builder.udiv(n, ir.Constant(i64, _STREAM_CHUNK))
        with cgutils.for_range(builder, count) as loop:
            offset = builder.mul(loop.index, ir.Constant(i64, _STREAM_CHUNK))
            at = [offset]
            value = builder.load(builder.bitcast(builder.gep(s, at), chunk.as_pointer()),
                                 align=1)
            store = builder.store(value, builder.bitcast(builder.gep(d, at),
                                                         chunk.as_pointer()),
                                  align=_STREAM_CHUNK)
            store.set_metadata("nontemporal", nontemporal)
        return context.get_dummy_value()

    return types.none(dst, src, nbytes), codegen


@intrinsic
def stream_fence(typingctx):
    """Order the non-temporal stores before everything after them (they are weakly ordered):
    a kernel that streamed calls it once before returning. Rows streamed by prange threads
    are ordered by the join of the parallel region, whose atomics drain the write-combining
    buffers, before the fence."""
    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@njit(inline="always", error_model="numpy")
def stream_row(dst, src, nontemporal):
    """dst[:] = src for two contiguous 1-D arrays of one dtype. With `nontemporal`, the 16-byte
    aligned middle of dst is written with non-temporal stores, its ends (and a dst not aligned
    to its own itemsize) with plain ones."""
    n, size = src.shape[0], src.itemsize
    addr = dst.ctypes.data
    head = n if addr % size or not nontemporal else \
        min(n, ((-addr) % _STREAM_CHUNK) // size)
    for j in range(head):
        dst[j] = src[j]
    body = (n - head) * size // _STREAM_CHUNK * _STREAM_CHUNK
    if body:
        _stream_copy(addr + head * size, src.ctypes.data + head * size, body)
    for j in range(head + body // size, n):
        dst[j] = src[j]
