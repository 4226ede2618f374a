"""FUSEGRAD_POISON=1 (read when a program is compiled): every array the runner allocates, and
the arena before each call, starts out as garbage that cannot pass for a result (NaN; the most
negative int64, an index no bounds check accepts; True), so code that reads a buffer before its
writer ran gives NaN on the first call instead of a plausible number on some calls."""

from __future__ import annotations

import math
import os

import numpy as np

POISON_VALUE = {"float32": math.nan, "float64": math.nan, "int64": -2 ** 63, "bool": True,
                "bool_": True}


def poison_on() -> bool:
    return os.environ.get("FUSEGRAD_POISON", "") not in ("", "0")


def empty(shape, np_dtype: str, poison: bool) -> np.ndarray:
    """An array the runner allocates (np.empty), filled with POISON_VALUE's if poison."""
    if poison:
        return np.full(shape, POISON_VALUE[np_dtype], np_dtype)
    return np.empty(shape, np_dtype)
