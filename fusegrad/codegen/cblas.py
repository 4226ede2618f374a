"""NumPy's own CBLAS, bound by symbol for generated code, without importing Numba.

The shared libraries this process has loaded are searched for the CBLAS that NumPy links
(OpenBLAS in the NumPy wheels); its ?gemm are registered with LLVM as `fusegrad_sgemm` and
`fusegrad_dgemm`, which both renderings of the kernel IR call (llvm.py; numba_support.gemm),
so both give the bits of `np.matmul` and share NumPy's thread pool. Transposed operands are
copied by the kernel IR first. FUSEGRAD_BLAS=numba leaves them unbound: long matmuls then run
as host steps (np.matmul). `DESCRIPTION` says which library is in use; it and
this file's text are part of the disk-cache key.
"""

from __future__ import annotations

import ctypes
import glob
import os

import llvmlite.binding as llvm
import numpy as np

# (symbol prefix, suffix, integer bits): OpenBLAS as NumPy >= 2 wheels ship it (ILP64, renamed
# with a scipy_ prefix and 64_ suffix), plain ILP64 builds, then the usual LP64 CBLAS.
_FLAVOURS = (("scipy_cblas_", "64_", 64), ("cblas_", "64_", 64), ("scipy_cblas_", "", 32),
             ("cblas_", "", 32))
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _candidate_libraries() -> list[str]:
    """Shared libraries that may hold NumPy's CBLAS: its own bundled ones first, then any
    BLAS already mapped into this process (NumPy linked against a system BLAS)."""
    paths = sorted(glob.glob(os.path.join(os.path.dirname(np.__file__) + ".libs", "*.so*")))
    try:
        with open("/proc/self/maps") as maps:
            mapped = {line.split()[-1] for line in maps if line.rstrip().endswith(".so")
                      or ".so." in line}
        paths += sorted(p for p in mapped if "blas" in os.path.basename(p).lower())
    except OSError:
        pass
    return [p for p in dict.fromkeys(paths) if "blas" in os.path.basename(p).lower()]


def bind() -> tuple[int, str, str] | None:
    """Register fusegrad_sgemm/dgemm with LLVM; (integer bits, description, library path) or
    None."""
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, bits in _FLAVOURS:
            names = [f"{prefix}{t}gemm{suffix}" for t in "sd"]
            if all(hasattr(lib, n) for n in names):
                for t, n in zip("sd", names):
                    address = ctypes.cast(getattr(lib, n), ctypes.c_void_p).value
                    llvm.add_symbol(f"fusegrad_{t}gemm", address)
                return bits, f"{names[0]} ({bits}-bit ints) from {os.path.basename(path)}", path
    return None


BOUND = None if os.environ.get("FUSEGRAD_BLAS") == "numba" else bind()
DESCRIPTION = BOUND[1] if BOUND else "none"
BITS = BOUND[0] if BOUND else None   # the width of its integers
