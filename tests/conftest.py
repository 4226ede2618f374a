"""The suite runs in poison mode unless told otherwise (FUSEGRAD_POISON=0): every buffer that
generated code allocates or reuses starts as NaN (integers: the most negative int64), so a
kernel that reads a buffer before it is written fails the test on the first call instead of
passing on a lucky stale value. tests/test_poison.py checks the unpoisoned text too.

Tiered execution is off (FUSEGRAD_TIERED=0) unless a test turns it on: a test of the numba
backend checks Numba's code from the first call, not the interpreter that runs while Numba
compiles. tests/test_tiered.py tests the tiers themselves."""

import os

os.environ.setdefault("FUSEGRAD_POISON", "1")
os.environ.setdefault("FUSEGRAD_TIERED", "0")


import pytest  # noqa: E402 - after the environment above, which fusegrad reads on import


@pytest.fixture
def numba_codegen(monkeypatch):
    """Functions compile through Numba's generated Python, never through the kernel IR
    (codegen/kernel_ir, which tests/test_kernel_ir*.py test): for tests of the Numba code
    generator itself (its kernels, buffers, chunks, pool, templates and disk cache)."""
    monkeypatch.setattr("fusegrad.codegen.choose.KERNEL_IR", False)
    monkeypatch.setenv("FUSEGRAD_KERNEL_IR", "0")   # and in child processes
