"""A codegen bug is found in one step: assert_backends_agree names the first IR value where
the numba backend leaves the interpreter's semantics."""

import numpy as np
import pytest

import fusegrad.codegen.templates as templates
from fusegrad.testing import assert_backends_agree

pytestmark = pytest.mark.usefixtures("numba_codegen")   # Numba's code generator


def test_a_broken_template_is_localized_to_its_first_ir_value(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(templates.TEMPLATES, "mul", "({0} * {1} * 1.001)")

    def f(x, w):
        a = np.tanh(x + w)
        return np.sum(np.sin(a * w) + x)     # the first mul: this line

    x, w = np.linspace(-1, 1, 8), np.ones(8)
    with pytest.raises(AssertionError) as info:
        assert_backends_agree(f, x, w, backends=("interp", "numba"))
    message = str(info.value)
    assert "first diverging IR value %2 = mul %1, %w : f64[8]" in message
    assert f"test_backend_debug.py:{f.__code__.co_firstlineno + 2}" in message
