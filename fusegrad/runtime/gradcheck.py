"""gradcheck: compare analytic gradients with central finite differences.

The function may return any shape, so both sides look at one scalar, the output projected on a
fixed random direction v (standard normal, seeded): L(x) = sum(f(x) * v). One backward gives
dL/dx = v^T J for every input element; the numeric side perturbs one element at a time in place,
evaluates L at x + eps and x - eps under no_grad, and restores the element exactly. A pair passes
when |analytic - numeric| <= atol + rtol * |numeric|; every failure is one report line.

Inputs: float64 tensors that require grad and are leaves (the differentiated ones), float64 NumPy
arrays (differentiated through eager tensors), and anything else (integer arrays, scalars) passed
through unchanged. float32 is refused: with eps = 1e-6 the difference f(x+eps) - f(x-eps) would
keep almost no significant digits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .engine import grad as _grad
from .grad_mode import enable_grad, no_grad
from .tensor import Tensor, _wrap


@dataclass
class GradcheckResult:
    passed: bool
    report: str

    def __bool__(self) -> bool:
        return self.passed


def gradcheck(fun, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0) -> GradcheckResult:
    """Check fun's gradient at `inputs` against central differences (see the module doc).

    Args:
        fun: any callable taking the inputs positionally and returning an array-like
            (a tensor, an array, or a tuple/list of them).
        inputs: a sequence of tensors / arrays / constants.
    Returns:
        GradcheckResult with .passed and .report (one line per mismatching element).
    """
    inputs = list(inputs)
    checked = _checked_inputs(inputs)
    as_tensors = [_wrap(np.array(x, dtype=np.float64)).requires_grad_() if i in checked
                  and not isinstance(x, Tensor) else x for i, x in enumerate(inputs)]
    with enable_grad():
        outputs = _outputs(fun(*as_tensors))
    directions = _directions(outputs, seed)
    analytic = _analytic(outputs, directions, [as_tensors[i] for i in checked])
    lines = []
    for i, a in zip(checked, analytic):
        buffer = inputs[i].data if isinstance(inputs[i], Tensor) else inputs[i]
        for index in np.ndindex(buffer.shape):
            n = _numeric(fun, inputs, buffer, index, directions, eps)
            if not abs(a[index] - n) <= atol + rtol * abs(n):
                where = ", ".join(map(str, index))
                lines.append(f"input {i} element [{where}]: analytic {a[index]:.6g} != "
                             f"numeric {n:.6g}")
    return GradcheckResult(not lines, "\n".join(lines))


def _checked_inputs(inputs) -> list[int]:
    checked = []
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor):
            if x.dtype.kind != "f":
                continue
            if x.dtype != np.float64:
                raise TypeError(f"gradcheck needs float64 inputs (float32 keeps too few digits "
                                f"for finite differences): input {i} is {x.dtype}")
            if not x.requires_grad or not x.is_leaf:
                raise ValueError(f"gradcheck input {i} must be a leaf that requires grad; call "
                                 f".requires_grad_() on it")
            checked.append(i)
        elif isinstance(x, np.ndarray) and x.dtype.kind == "f":
            if x.dtype != np.float64:
                raise TypeError(f"gradcheck needs float64 inputs (float32 keeps too few digits "
                                f"for finite differences): input {i} is {x.dtype}")
            checked.append(i)
    if not checked:
        raise ValueError("gradcheck needs at least one float64 input to differentiate")
    return checked


def _outputs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _directions(outputs, seed) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(_data(o))) for o in outputs]


def _data(x):
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def _analytic(outputs, directions, tensors) -> list[np.ndarray]:
    """v^T J per checked input, from the eager engine (0 where no gradient arrives)."""
    if not any(isinstance(o, Tensor) for o in outputs):
        raise TypeError("gradcheck: fun returned no fusegrad tensor, so there is no analytic "
                        "gradient to check (does it convert its inputs to NumPy, or run "
                        "compiled code? pass a function that computes on fusegrad tensors)")
    pairs = [(o, d) for o, d in zip(outputs, directions)
             if isinstance(o, Tensor) and o.requires_grad]  # the rest are constants: grad 0
    if not pairs:
        return [np.zeros(t.shape) for t in tensors]
    roots = [o for o, _ in pairs]
    seeds = [Tensor(d.astype(o.dtype)) for o, d in pairs]
    grads = _grad(roots, tensors, seeds, retain_graph=False, allow_unused=True)
    return [np.zeros(t.shape) if g is None else np.asarray(g.data, np.float64)
            for t, g in zip(tensors, grads)]


def _numeric(fun, inputs, buffer, index, directions, eps) -> float:
    original = buffer[index]
    try:
        buffer[index] = original + eps
        above = _projected(fun, inputs, directions)
        buffer[index] = original - eps
        below = _projected(fun, inputs, directions)
    finally:
        buffer[index] = original
    return (above - below) / (2 * eps)


def _projected(fun, inputs, directions) -> float:
    with no_grad():
        outputs = _outputs(fun(*inputs))
    return float(sum(np.sum(np.asarray(_data(o), np.float64) * v)
                     for o, v in zip(outputs, directions)))
