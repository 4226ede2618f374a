"""A codegen bug is found in one step: assert_backends_agree names the first IR value where
the numba backend leaves the interpreter's semantics."""

import numpy as np
import pytest

from fusegrad.ir.primitives import PRIMITIVES
from fusegrad.testing import assert_backends_agree


def test_a_broken_scalar_rule_is_localized_to_its_first_ir_value(monkeypatch):
    def broken(b, x, y):
        return b.mul(b.mul(x, y), b.const(1.001, x.dtype))
    monkeypatch.setattr(PRIMITIVES["mul"], "scalar", broken)

    def f(x, w):
        a = np.tanh(x + w)
        return np.sum(np.sin(a * w) + x)     # the first mul: this line

    x, w = np.linspace(-1, 1, 8), np.ones(8)
    with pytest.raises(AssertionError) as info:
        assert_backends_agree(f, x, w, backends=("interp", "numba"))
    message = str(info.value)
    assert "first diverging IR value %2 = mul %1, %w : f64[8]" in message
    assert f"test_backend_debug.py:{f.__code__.co_firstlineno + 2}" in message
