"""Random draws while tracing are frozen into the compiled function: fusegrad warns at trace
time (TracerRandomWarning) with the user's line and the remedy, and stays quiet otherwise."""

import warnings

import numpy as np
import pytest
from numpy.random import standard_normal as draw

import fusegrad as fg

RNG = np.random.default_rng(0)
LEGACY = np.random.RandomState(1)
X = np.zeros(3)
TRACED = ("interp", "numba")


def line_of(fun, text):
    """The line number of the first source line of fun that contains text."""
    import inspect
    lines, start = inspect.getsourcelines(fun)
    return start + next(i for i, line in enumerate(lines) if text in line)


def frozen_warnings(f, backend, *args):
    """The TracerRandomWarnings of a fresh jit's first call, and its two first results."""
    jitted = fg.jit(f, backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = jitted(*args), jitted(*args)
    return [w for w in caught if w.category is fg.TracerRandomWarning], first, second


def global_draw(x):
    return x + np.random.randn(3)


def generator_draw(x):
    return x + RNG.normal(size=3)


def alias_draw(x):
    return x + draw(3)


def helper(n):
    return LEGACY.uniform(size=n)


def helper_draw(x):
    return x + helper(3)


def unseeded_generator(x):
    return x + np.random.default_rng().normal(size=3)


@pytest.mark.parametrize("backend", TRACED)
@pytest.mark.parametrize("f, text, what", [
    (global_draw, "np.random.randn", "np.random.randn called at"),
    (generator_draw, "RNG.normal", "the Generator `RNG` (used at"),
    (alias_draw, "draw(3)", "np.random's global RandomState `draw` (used at"),
    (helper_draw, "LEGACY.uniform", "the RandomState `LEGACY` (used at"),
    (unseeded_generator, "default_rng()", "np.random.default_rng called at"),
])
def test_a_draw_while_tracing_warns_with_the_line_and_the_remedy(f, text, what, backend):
    fun = helper if f is helper_draw else f
    caught, first, second = frozen_warnings(f, backend, X)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert what in message and f"{__file__}:{line_of(fun, text)}" in message
    assert "frozen into the compiled function" in message and "jax.random.PRNGKey" in message
    assert "pass the noise in as an argument" in message
    assert caught[0].filename == __file__ and caught[0].lineno == line_of(fun, text)
    np.testing.assert_array_equal(first, second)        # what the warning is about
    assert np.all(first != 0)


def test_closures_defaults_and_static_arguments_are_watched():
    rng = np.random.default_rng(3)

    def closure(x):
        return x + rng.uniform(size=3)

    def default(x, gen=RNG):
        return x + gen.normal(size=3)

    def static(x, gen):
        return x + gen.normal(size=3)
    for f in (closure, default):
        caught, first, second = frozen_warnings(f, "interp", X)
        assert len(caught) == 1 and f":{line_of(f, 'size=3')}" in str(caught[0].message)
        np.testing.assert_array_equal(first, second)
    with pytest.warns(fg.TracerRandomWarning, match=f"the Generator `gen` \\(used at {__file__}:"
                                                    f"{line_of(static, 'size=3')}"):
        fg.jit(static, static_argnums=1, backend="interp")(X, np.random.default_rng(4))


def test_grad_inside_jit_is_watched_too():
    loss = fg.grad(lambda x: np.sum(x * np.random.normal(size=3)))
    caught, first, second = frozen_warnings(loss, "interp", X)
    assert len(caught) == 1 and "np.random.normal called at" in str(caught[0].message)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("backend", ("eager",) + TRACED)
def test_no_warning_without_a_frozen_draw(backend):
    """Eager runs draw every call; a generator seeded inside, or noise passed in as an
    argument, gives the same numbers under jit as eagerly."""
    def seeded(x):
        return x + np.random.default_rng(5).normal(size=3)

    def noise_in(x, noise):
        return x + noise
    caught, first, second = frozen_warnings(seeded, backend, X)
    assert caught == [] and np.array_equal(first, np.random.default_rng(5).normal(size=3))
    n1, n2 = np.random.randn(3), np.random.randn(3)
    jitted = fg.jit(noise_in, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fg.TracerRandomWarning)
        np.testing.assert_array_equal(jitted(X, n1), n1)
        np.testing.assert_array_equal(jitted(X, n2), n2)
    if backend == "eager":
        caught, first, second = frozen_warnings(global_draw, backend, X)
        assert caught == [] and not np.array_equal(first, second)


def test_np_random_is_restored_after_the_trace():
    originals = {name: getattr(np.random, name) for name in ("randn", "normal", "default_rng")}
    with pytest.warns(fg.TracerRandomWarning):
        fg.jit(global_draw, backend="interp")(X)
    for name, fn in originals.items():
        assert getattr(np.random, name) == fn and not hasattr(getattr(np.random, name),
                                                              "_fg_original")
    with warnings.catch_warnings():
        warnings.simplefilter("error", fg.TracerRandomWarning)
        assert np.random.randn(2).shape == (2,)             # outside a trace: silent
