"""The registry of primitives: everything fusegrad knows about a primitive, in one entry.

A primitive is a name, as in jax.lax. Its entry, written once in one of the category modules
(elementwise.py, structural.py, reductions.py, linalg.py, composites.py), holds side by side:

    category    how consumers treat it: "elementwise", "shape", "index", "reduction", "scan",
                "linalg", "nullary", "host" (compiled code calls `impl` between kernels) or
                "composite" (a single op for autodiff, expanded by `lower` before fusion)
    shape_rule  rule(prim, *input_types, **params) -> output type(s), or ShapeError
    impl        the NumPy reference implementation: impl(*arrays, **params). It is the
                semantics of the IR; interp, constant folding, the eager engine and compiled
                host steps all evaluate it (evaluate.apply)
    scalar      elementwise: the scalar math as a rule over codegen/kernel_ir's builder,
                rule(b, *operands, **params) -> register; the kernel IR's renderers share it
    lower       composites: lower(lax, *inputs, **params), written with the `lax` module it is
                passed, so this package never imports the layers above it
    doc         the row of docs/ir.md's table: operands, params, output, semantics
    domain      elementwise: where tests draw inputs, a tests/domains.py sampler per operand
                ("normal", "positive", "away_from_zero", "distinct", "unit")
    regions     control flow (control.py): the params that hold nested Functions (a loop's
                body, a cond's branches), which the printer, parser, verifier, DOT drawing
                and passes look into
    batch       fg.vmap's rule for operands with a leading batch axis, or batching.FALLBACK
                (a scan over the batch); filled per category by batching.install()

The derivative is the one thing not here: VJP rules live in fusegrad/formulas/, the one derivative
table, keyed by the same names (or listed there as NON_DIFFERENTIABLE).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Callable

from .types import FLOAT_DTYPES, TensorType

CATEGORIES = ("elementwise", "shape", "index", "reduction", "scan", "linalg", "nullary", "host",
              "composite")


class ShapeError(ValueError):
    """A primitive was applied to operands of incompatible shapes or dtypes."""


class Prim:
    """Primitive names as attributes: `Prim.tanh == "tanh"`."""


@dataclass(frozen=True)
class Doc:
    operands: str = ""
    params: str = ""
    output: str = "same as x"
    semantics: str = ""


@dataclass
class Primitive:
    name: str
    category: str
    shape_rule: Callable
    impl: Callable
    scalar: Callable | None = None
    lower: Callable | None = None
    doc: Doc = field(default_factory=Doc)
    domain: tuple = ()
    section: str = ""
    regions: tuple = ()
    batch: Callable | str | None = None

    def __repr__(self) -> str:
        return f"<primitive {self.name}: {self.category}>"

    @property
    def arity(self) -> int | None:
        """The number of operands (from the shape rule's signature); None if variadic."""
        params = list(inspect.signature(self.shape_rule).parameters.values())[1:]
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return None
        return sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)


PRIMITIVES: dict[str, Primitive] = {}


def define(name: str, category: str, shape_rule: Callable, impl: Callable, *,
           section: str, **fields) -> Primitive:
    """Register a primitive (once: a second definition of a name is a bug)."""
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name!r} is defined twice")
    if category not in CATEGORIES:
        raise ValueError(f"primitive {name!r}: unknown category {category!r}")
    domain = fields.pop("domain", ())
    prim = PRIMITIVES[name] = Primitive(name, category, shape_rule, impl, section=section,
                                        domain=(domain,) if isinstance(domain, str) else domain,
                                        **fields)
    setattr(Prim, name, name)
    return prim


def names(*categories: str) -> frozenset:
    """The names of the primitives in these categories."""
    return frozenset(p.name for p in PRIMITIVES.values() if p.category in categories)


def infer_types(prim: str, in_types: list[TensorType], params: dict) -> tuple[TensorType, ...]:
    entry = PRIMITIVES.get(prim)
    if entry is None:
        raise ShapeError(f"unknown primitive {prim!r}")
    try:
        out = entry.shape_rule(prim, *in_types, **params)
    except TypeError as e:                      # wrong operand count or params
        detail = re.sub(r"^_?\w+[(][)] ", "", str(e))
        raise ShapeError(f"{prim} {detail}") from None
    return out if isinstance(out, tuple) else (out,)


# -- helpers for shape rules -----------------------------------------------------------------

def fail(prim, msg, *types):
    shapes = ", ".join(str(t) for t in types)
    raise ShapeError(f"{prim}: {msg} (operands {shapes})")


def check_axis(prim, axis, ndim, t):
    if not -ndim <= axis < max(ndim, 1):
        fail(prim, f"axis {axis} out of range for rank {ndim}", t)
    return axis % max(ndim, 1)


def require_float(prim, *types):
    for t in types:
        if t.dtype not in FLOAT_DTYPES:
            fail(prim, f"needs floating-point operands, got {t.dtype}", *types)


def require_same(prim, *types):
    if any(t != types[0] for t in types):
        fail(prim, "operands must have equal shapes and dtypes (broadcast and convert first)",
             *types)


def reduced_shape(prim, x, axes):
    axes = tuple(axes)
    if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
        fail(prim, f"bad axes {axes} for rank {x.ndim}", x)
    return tuple(n for i, n in enumerate(x.shape) if i not in axes)
