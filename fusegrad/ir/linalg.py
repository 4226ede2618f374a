"""Linear algebra primitives beyond matmul (issue 14): each one's shape rule, NumPy (LAPACK)
implementation and docs row. Compiled code runs them as host steps (category "host")."""

from __future__ import annotations
