"""The numba backend: fused loop kernels emitted as Python source, compiled by Numba, cached
on disk. `compile_numba(fn)` turns a traced Function into an Executable."""

from .compile import Executable, cache_dir, compile_numba, njit_options

__all__ = ["Executable", "cache_dir", "compile_numba", "njit_options"]
