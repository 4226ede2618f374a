"""OpenBLAS's own thread pool, bound without Numba: `blas_level1_thread` (it splits a range of
`n` iterations into one part per thread and calls a task with each part's first index and
length) and the thread count, registered with LLVM as fusegrad_pool_split and
fusegrad_pool_threads, for the kernel IR's parallel loops.
A probe checks what the internal function does before `AVAILABLE` is true.
"""

from __future__ import annotations

import ctypes
import os

import llvmlite.binding as llvm

from . import cblas

_LONG = ctypes.c_int64
_ARGS = (_LONG, _LONG, _LONG, ctypes.c_double, _LONG, _LONG, _LONG, _LONG, _LONG, _LONG, _LONG)
# BLAS_DOUBLE in OpenBLAS's mode bits: 3 since 0.3.22 (bfloat16 took 1), 1 before
_MODES = (3, 1)
SHIFT = 3  # a part's first index arrives in `a` as first << SHIFT (8-byte elements)


def _threads_function(lib):
    for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                 "openblas_get_num_threads"):
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, []
            return fn
    return None


def _probe(split, threads) -> bool:
    """Whether split(mode, m=10, ...) gives two parts of 5 with offsets 0 and 5 << SHIFT and
    passes alpha by value, as this module's tasks expect."""
    seen = []
    callback = ctypes.CFUNCTYPE(ctypes.c_int, *_ARGS)(
        lambda m, n, k, alpha, a, *rest: seen.append((m, a, alpha)) or 0)
    alpha = ctypes.c_double(2.5)
    split(10, 0, 0, ctypes.addressof(alpha), 0, 1, 0, 1, 0, 0,
          ctypes.cast(callback, ctypes.c_void_p).value, 2)
    return threads() >= 2 and sorted(seen) == [(5, 0, 2.5), (5, 5 << SHIFT, 2.5)]


def _bind() -> tuple[int, str] | None:
    """(mode, description) after registering fusegrad_pool_split and fusegrad_pool_threads
    with LLVM, or None when NumPy's BLAS has no pool this module can use."""
    if not cblas.LIBRARY or os.environ.get("FUSEGRAD_POOL", "1") == "0":
        return None
    lib = ctypes.CDLL(cblas.LIBRARY)
    threads = _threads_function(lib)
    if threads is None or not hasattr(lib, "blas_level1_thread") or threads() < 2:
        return None  # one thread now: nothing to split over, and the probe would wait forever
    raw = lib.blas_level1_thread
    raw.restype, raw.argtypes = ctypes.c_int, [ctypes.c_int] + [_LONG] * 11 + [ctypes.c_int]
    for mode in _MODES:
        if _probe(lambda *args, mode=mode: raw(mode, *args), threads):
            for name, fn in (("split", raw), ("threads", threads)):
                llvm.add_symbol(f"fusegrad_pool_{name}",
                                ctypes.cast(fn, ctypes.c_void_p).value)
            return mode, f"blas_level1_thread mode {mode}"
    return None


_BOUND = _bind()
AVAILABLE = _BOUND is not None
DESCRIPTION = _BOUND[1] if _BOUND else "none"
