"""Where in the user's code an operation was called: the first frame outside fusegrad and NumPy."""

from __future__ import annotations

import functools
import os
import sys

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


@functools.lru_cache(maxsize=4096)
def _is_internal(filename: str) -> bool:
    return (filename.startswith(_PACKAGE_DIR) and os.sep + "tests" + os.sep not in filename) \
        or filename.startswith(_NUMPY_DIR) \
        or filename.startswith(("<__array_function__", "<frozen "))


def user_frame():
    """The innermost frame of user code (None if there is none)."""
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location(full: bool = False) -> str | None:
    """`file.py:12` of the user's call (`/path/to/file.py:12` with full=True)."""
    frame = user_frame()
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    return f"{filename if full else os.path.basename(filename)}:{frame.f_lineno}"
