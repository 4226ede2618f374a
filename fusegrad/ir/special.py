"""Special functions (issue 14): scipy.special's gammaln, digamma, erfinv, ... as primitives,
each with its shape rule, reference implementation and docs row."""

from __future__ import annotations
