"""fusegrad.numpy's contractions functions (issue 14)."""

from __future__ import annotations

__all__: list = []

# NumPy's (and SciPy's ufunc) functions that land here through __array_ufunc__ /
# __array_function__.
HANDLED: dict = {}
