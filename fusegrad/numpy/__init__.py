"""fusegrad.numpy: NumPy-named functions that work on arrays, eager tensors and tracers.

Each function normalizes NumPy's calling conventions (axis=None, negative axes, keepdims,
dtype promotion rules) and ends in lax, i.e. in bind. Each module of this package ends with
`HANDLED`, the NumPy (and SciPy) functions it implements; this file merges them into
HANDLED_UFUNCS and HANDLED_FUNCTIONS, so that `np.tanh(x)` or `np.sum(x, axis=0)` on a tensor or
tracer lands here through `__array_ufunc__` / `__array_function__`, and exports every module's
`__all__` as fusegrad.numpy's names.

The modules import in one direction: base (shapes, dtypes, axes, keyword checks) <- elementwise
<- shapes <- reductions <- linalg, and indexing, rounding and constructors on top.
"""

from __future__ import annotations

import sys

import numpy as np

from ..tracer.methods import install
from . import (constructors, contractions, elementwise, indexing, joining, linalg, reductions,
               rounding, shapes, special)
# The _helpers fusegrad.nn and transforms.py use, and NumPy's constants and dtypes.
from .base import (  # noqa: F401
    _axes, _dtype, _indices, _is_float, _keep, _ndim, _no_out, _numeric, _shape, astype, bool_,
    e, float32, float64, inf, int64, nan, newaxis, pi)
from .constructors import *  # noqa: F403
from .contractions import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .indexing import *  # noqa: F403
from .joining import *  # noqa: F403
from .linalg import *  # noqa: F403
from .reductions import *  # noqa: F403
from .rounding import *  # noqa: F403
from .shapes import *  # noqa: F403
from .special import *  # noqa: F403

MODULES = (elementwise, shapes, joining, reductions, linalg, contractions, indexing, rounding,
           constructors, special)

HANDLED_UFUNCS = {k: fn for m in MODULES for k, fn in m.HANDLED.items()
                  if isinstance(k, np.ufunc)}
HANDLED_FUNCTIONS = {k: fn for m in MODULES for k, fn in m.HANDLED.items()
                     if not isinstance(k, np.ufunc)}

# The operators and methods of tensors and tracers forward here (tracer/methods.py).
install(sys.modules[__name__], {**elementwise.FLOAT_UNARY, np.negative: "neg", np.absolute: "abs"})
