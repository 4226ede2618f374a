"""The suite runs in poison mode unless told otherwise (FUSEGRAD_POISON=0): every buffer that
compiled code allocates or reuses starts as NaN (integers: the most negative int64), so a
kernel that reads a buffer before it is written fails the test on the first call instead of
passing on a lucky stale value. tests/test_poison.py checks plain mode gives the same results.

Tiered execution is off (FUSEGRAD_TIERED=0) unless a test turns it on: a test of the numba
backend checks Numba's code from the first call, not the interpreter that runs while Numba
compiles. tests/test_tiered.py tests the tiers themselves."""

import os

os.environ.setdefault("FUSEGRAD_POISON", "1")
os.environ.setdefault("FUSEGRAD_TIERED", "0")

