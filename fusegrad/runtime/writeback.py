"""Arguments a jitted function updates in place (`x += v`, `x[k] = v` on an argument): NumPy
would have changed the caller's array, so after the compiled call their final values, extra
results of the traced Function (tracer.trace_flat), are copied into it: torch.compile's
epilogue. Checked before the call, so nothing runs when the copy could not be made: the
caller's array must be a writeable ndarray (or eager tensor) that shares no memory with another
argument (the trace saw two arrays, NumPy would see one write through both). A 0-d argument
that `+=` rebound as a NumPy scalar (tracer/views.py) may not be a 0-d ndarray, which NumPy
would have updated in place.
"""

from __future__ import annotations

import numpy as np

from ..dispatch import level


def run_writing_back(lowered, leaves, arrays, name) -> list:
    """Run lowered's executable on arrays; write the updated arguments back into leaves."""
    for i, line, kind in lowered.writeback:
        if kind == "rebind" and isinstance(leaves[i], np.ndarray):
            raise TypeError(
                f"{name} rebinds argument leaf {i}, a 0-d array, with an augmented assignment "
                f"at {line}: fusegrad treats a 0-d traced value as a NumPy scalar (a new value "
                f"for the name), where NumPy would write into your 0-d array; pass a number "
                f"(float(x)), or write `x[...] = x + ...` to update the array")
    writes = [(i, line) for i, line, kind in lowered.writeback if kind == "write"]
    targets = [_target(leaves, i, line, name) for i, line in writes]
    outs = lowered.executable(arrays)
    n = len(outs) - len(targets)
    for leaf, (i, line), value in zip(targets, writes, outs[n:]):
        if level(leaf) == 1:
            leaf._inplace("fill", value, f"the in-place update at {line}")
        else:
            np.copyto(leaf, value, casting="same_kind")
    return outs[:n]


def _target(leaves, i, line, name):
    leaf = leaves[i]
    array = leaf.data if level(leaf) == 1 else leaf
    where = f"{name} updates argument leaf {i} in place (last at {line})"
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{where}, but the caller passed a {type(leaf).__name__}, not a NumPy "
                        f"array, so the update cannot reach it; pass an ndarray, or update a "
                        f"copy in the function (x = x.copy())")
    if not array.flags.writeable:
        raise ValueError(f"{where}, but the caller's array is read-only (NumPy: 'output array "
                         f"is read-only'); pass a writeable copy, or update a copy in the "
                         f"function (x = x.copy())")
    for j, other in enumerate(leaves):
        other = other.data if level(other) == 1 else other
        if j != i and isinstance(other, np.ndarray) and np.may_share_memory(array, other):
            raise ValueError(f"{where}, and the caller's array shares memory with argument "
                             f"leaf {j}: NumPy would show the write through both, the compiled "
                             f"function saw two arrays; pass a copy of one")
    return leaf
