"""Special functions: the VJP rules of ir/special.py's primitives."""

from __future__ import annotations
