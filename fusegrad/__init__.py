"""fusegrad: trace NumPy code into an SSA IR, differentiate it with one formula table, fuse
and JIT-compile it with Numba; or run it eagerly on a define-by-run tape."""

from . import ir
from .api import jit, make_ir

__version__ = "0.1.0"

__all__ = ["ir", "jit", "make_ir"]
