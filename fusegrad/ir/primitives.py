"""The primitive set: the registry (registry.py) filled by the category modules.

Each primitive is defined once, in elementwise.py, structural.py, reductions.py,
composites.py or a sibling (control.py: scan, while_loop, cond); consumers read its entry here
and keep no tables of their own. The name sets below are queries on the registry, for code
that asks "is this op elementwise?".
"""

from __future__ import annotations

from . import (composites, control, custom, elementwise, linalg, reductions,  # noqa: F401
               special, structural)  # they register
from .batching import install as _install_batching
from .registry import PRIMITIVES, Prim, Primitive, ShapeError, infer_types, names

_install_batching()

ELEMENTWISE = names("elementwise")
REDUCTIONS = frozenset(p for p in names("reduction") if p.startswith("reduce_"))
COMPOSITES = names("composite")
NULLARY = names("nullary")
UNARY_FLOAT = tuple(p.name for p in PRIMITIVES.values()
                    if p.shape_rule is elementwise._unary_float)
UNARY_NUMERIC = tuple(p.name for p in PRIMITIVES.values()
                      if p.shape_rule is elementwise._unary_numeric)
BINARY_NUMERIC = tuple(p.name for p in PRIMITIVES.values() if p.shape_rule is elementwise._binary)
COMPARISONS = tuple(p.name for p in PRIMITIVES.values() if p.shape_rule is elementwise._compare)

__all__ = ["PRIMITIVES", "Prim", "Primitive", "ShapeError", "infer_types", "names",
           "ELEMENTWISE", "REDUCTIONS", "COMPOSITES", "NULLARY", "UNARY_FLOAT", "UNARY_NUMERIC",
           "BINARY_NUMERIC", "COMPARISONS"]
