"""The four real programs of benchmarks/real_programs.py (a Gaussian-mixture fit, mixture-of-
Gaussians variational inference, a Gaussian process, a scipy.signal convnet), at small sizes:
each one's gradient against central finite differences of the plain NumPy program, on eager,
interp and numba from the first call (poison on, tiering off, as conftest.py sets), and under
the default tiered settings (the interpreter's calls, then the compiled entry's)."""

import importlib.util
import pathlib

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.tree import ravel
from domains import central_difference

_PATH = pathlib.Path(__file__).parent.parent / "benchmarks" / "real_programs.py"
_SPEC = importlib.util.spec_from_file_location("real_programs", _PATH)
real_programs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(real_programs)

SP = real_programs.scipy_names()
NAMES = sorted(real_programs.PROGRAMS)


def program(name):
    fun, args, argnums = real_programs.PROGRAMS[name](np, SP, "small")
    return fun, args, argnums if isinstance(argnums, tuple) else (argnums,)


def expected(name):
    """(value, flat gradient) of the plain NumPy program, by central differences."""
    fun, args, nums = program(name)
    flat, unravel = ravel(tuple(args[i] for i in nums))

    def of_flat(v):
        full = list(args)
        for i, leaf in zip(nums, unravel(v)):
            full[i] = leaf
        return fun(*full)
    return fun(*args), central_difference(of_flat, flat)


def check(name, value, grads, want):
    want_value, want_grad = want
    np.testing.assert_allclose(float(value), want_value, rtol=1e-12)
    got = np.asarray(ravel(tuple(grads))[0])
    np.testing.assert_allclose(got, want_grad, rtol=1e-6, atol=1e-7,
                               err_msg=f"{name}: gradient against central differences")


@pytest.fixture(scope="module")
def references():
    return {name: expected(name) for name in NAMES}


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
@pytest.mark.parametrize("name", NAMES)
def test_first_call_gradient_matches_finite_differences(name, backend, references):
    fun, args, nums = program(name)
    vg = fg.value_and_grad(fun, argnums=nums)
    value, grads = fg.jit(vg, backend=backend, tiered=False)(*args)
    check(name, value, grads, references[name])


@pytest.mark.parametrize("name", NAMES)
def test_default_tiered_calls_match_finite_differences(name, references, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")
    fun, args, nums = program(name)
    jitted = fg.jit(fg.value_and_grad(fun, argnums=nums))
    for _ in range(2):                   # the interpreter's; the second queues the compile
        check(name, *jitted(*args), references[name])
    jitted.lower(*args).compiled()       # waits for the compile
    check(name, *jitted(*args), references[name])
