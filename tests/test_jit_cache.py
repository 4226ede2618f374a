"""The jit signature cache: one trace per (tree structure, leaf types, static values), a log
line with the reason for every new trace, static_argnums, and FUSEGRAD_BACKEND=eager."""

import numpy as np
import pytest

import fusegrad as fg


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("FUSEGRAD_BACKEND", raising=False)
    monkeypatch.delenv("FUSEGRAD_LOG", raising=False)


class Counted:
    """A function that counts how often it runs (each trace runs it once)."""

    def __init__(self, body=lambda x: np.tanh(x) * 2):
        self.body = body
        self.calls = 0
        self.__name__ = "f"

    def __call__(self, *args):
        self.calls += 1
        return self.body(*args)


def compile_log(capsys):
    return [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("[fusegrad]")]


def test_same_signature_traces_once():
    f = Counted()
    jitted = fg.jit(f, backend="interp")
    a, b = np.ones(3), np.arange(3.0)
    np.testing.assert_allclose(jitted(a), np.tanh(a) * 2)
    np.testing.assert_allclose(jitted(b), np.tanh(b) * 2)    # new values, same signature
    np.testing.assert_allclose(jitted(a), np.tanh(a) * 2)
    assert f.calls == 1
    assert jitted.cache_size == 1


@pytest.mark.parametrize("first, second, reason", [
    ((np.ones(3),), (np.ones(5),), "retrace f: arg 0 shape (3,) -> (5,)"),
    ((np.ones(3),), (np.ones(3, np.float32),), "retrace f: arg 0 dtype f64 -> f32"),
    ((np.ones(3),), (np.ones(3, np.int64),), "retrace f: arg 0 dtype f64 -> i64"),
    ((np.ones(3), np.ones(2)), (np.ones(3), np.ones((2, 1))),
     "retrace f: arg 1 shape (2,) -> (2, 1)"),
    ((np.float64(1.0),), (1.0,), "retrace f: arg 0 dtype f64 -> f64 (weak)"),
    (({"a": np.ones(2)},), ({"a": np.ones(2), "b": np.ones(2)},),
     "retrace f: argument tree structure changed"),
    (([np.ones(2)],), ((np.ones(2),),), "retrace f: argument tree structure changed"),
    (([np.ones(2), None],), ([np.ones(2)],), "retrace f: argument tree structure changed"),
])
def test_new_signature_traces_anew_and_logs_why(first, second, reason, capsys, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    f = Counted(lambda *args: args)
    jitted = fg.jit(f, backend="interp")
    jitted(*first)
    jitted(*first)
    assert f.calls == 1
    jitted(*second)
    assert f.calls == 2
    jitted(*first)                              # the old entry is still there
    jitted(*second)
    assert f.calls == 2
    assert compile_log(capsys) == ["[fusegrad] trace f: first call", f"[fusegrad] {reason}"]


def test_no_log_without_fusegrad_log(capsys):
    fg.jit(Counted(), backend="interp")(np.ones(3))
    assert compile_log(capsys) == []


def test_static_argnums_trace_per_value(capsys, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    f = Counted(lambda x, n, mode: x ** n if mode == "pow" else x * n)
    jitted = fg.jit(f, static_argnums=(1, 2), backend="interp")
    x = np.arange(4.0)
    np.testing.assert_allclose(jitted(x, 2, "pow"), x ** 2)
    np.testing.assert_allclose(jitted(x, 2, "pow"), x ** 2)
    np.testing.assert_allclose(jitted(x, 3, "pow"), x ** 3)
    np.testing.assert_allclose(jitted(x, 3, "mul"), x * 3)
    assert f.calls == 3
    log = compile_log(capsys)
    assert log[1] == "[fusegrad] retrace f: static arguments ((1, 2), (2, 'pow')) -> " \
                     "((1, 3), (2, 'pow'))"
    assert len(log) == 3


def test_equal_static_values_of_different_types_do_not_share_a_trace():
    f = Counted(lambda x, s: x * s)
    jitted = fg.jit(f, static_argnums=1, backend="interp")
    x = np.arange(3)
    assert jitted(x, 2).dtype == np.int64
    assert jitted(x, 2.0).dtype == np.float64      # 2 == 2.0, but a different program
    assert jitted(x, True).dtype == np.int64
    assert f.calls == 3


def test_negative_static_argnums():
    f = Counted(lambda x, n: x * n)
    jitted = fg.jit(f, static_argnums=-1, backend="interp")
    np.testing.assert_allclose(jitted(np.ones(2), 3), [3.0, 3.0])
    np.testing.assert_allclose(jitted(np.ones(2), 4), [4.0, 4.0])
    assert f.calls == 2


def test_static_args_can_be_anything_hashable():
    jitted = fg.jit(lambda x, shape, fn: fn(x.reshape(shape)), static_argnums=(1, 2),
                    backend="interp")
    np.testing.assert_allclose(jitted(np.arange(6.0), (2, 3), np.sum), 15.0)


def test_unhashable_static_argument_is_a_clear_error():
    jitted = fg.jit(lambda x, shape: x.reshape(shape), static_argnums=1, backend="interp")
    with pytest.raises(TypeError, match=r"static argument 1 of type list is not hashable; "
                                        r"pass a tuple instead"):
        jitted(np.ones(6), [2, 3])
    np.testing.assert_allclose(jitted(np.ones(6), (2, 3)), np.ones((2, 3)))


def test_static_argnum_out_of_range():
    jitted = fg.jit(lambda x: x, static_argnums=3, backend="interp")
    with pytest.raises(TypeError, match="static_argnums names argument 3"):
        jitted(np.ones(2))


def test_decorator_forms():
    @fg.jit
    def f(x):
        """doc"""
        return x + 1

    @fg.jit(static_argnums=1, backend="interp")
    def g(x, n):
        return x * n

    assert f.__name__ == "f" and f.__doc__ == "doc"
    np.testing.assert_allclose(g(np.ones(2), 5), [5.0, 5.0])
    np.testing.assert_allclose(fg.jit(f, backend="interp")(np.ones(2)), [2.0, 2.0])


def test_pytree_args_and_outputs():
    def step(params, batch):
        x, y = batch
        err = x @ params["w"] + params["b"] - y
        return {"loss": np.mean(err ** 2), "grads": [None, (err, err.sum())]}

    params = {"w": np.ones((3, 2)), "b": np.zeros(2)}
    batch = (np.arange(12.0).reshape(4, 3), np.ones((4, 2)))
    out = fg.jit(step, backend="interp")(params, batch)
    ref = step(params, batch)
    assert set(out) == {"loss", "grads"}
    assert out["grads"][0] is None and isinstance(out["grads"][1], tuple)
    np.testing.assert_allclose(out["loss"], ref["loss"])
    np.testing.assert_allclose(out["grads"][1][0], ref["grads"][1][0])
    np.testing.assert_allclose(out["grads"][1][1], ref["grads"][1][1])


def test_outputs_are_numpy_arrays():
    out = fg.jit(lambda x: (x.sum(), x * 2, 3.0), backend="interp")(np.ones(3))
    assert all(isinstance(o, np.ndarray) for o in out)
    assert out[0].shape == () and out[2].shape == ()


def test_lower_gives_the_ir_and_shares_the_cache():
    f = Counted()
    jitted = fg.jit(f, backend="interp")
    lowered = jitted.lower(np.ones(3))
    assert isinstance(lowered.ir, fg.ir.Function)
    assert lowered.ir.param_types == (fg.ir.TensorType("f64", (3,)),)
    jitted(np.zeros(3))
    assert f.calls == 1
    assert jitted.lower(np.ones(3)) is lowered


def test_fusegrad_backend_eager_runs_the_python_function(monkeypatch):
    seen = []

    def f(x):
        seen.append(type(x))
        return np.tanh(x)
    monkeypatch.setenv("FUSEGRAD_BACKEND", "eager")
    jitted = fg.jit(f)
    forced = fg.jit(f, backend="interp")          # the environment disables every jit
    x = np.ones(3)
    np.testing.assert_allclose(jitted(x), np.tanh(x))
    np.testing.assert_allclose(jitted(x), np.tanh(x))
    np.testing.assert_allclose(forced(x), np.tanh(x))
    assert seen == [np.ndarray] * 3
    assert jitted.cache_size == 0 and forced.cache_size == 0


def test_fusegrad_backend_chooses_the_default(monkeypatch):
    seen = []
    monkeypatch.setenv("FUSEGRAD_BACKEND", "interp")
    jitted = fg.jit(lambda x: seen.append(type(x)) or x * 2)
    jitted(np.ones(2))
    jitted(np.ones(2))
    assert len(seen) == 1 and seen[0] is not np.ndarray and jitted.cache_size == 1
    monkeypatch.setenv("FUSEGRAD_BACKEND", "bogus")
    with pytest.raises(ValueError, match="unknown backend 'bogus'"):
        jitted(np.ones(2))


def test_the_fast_path_follows_fusegrad_backend_set_after_the_first_call(monkeypatch):
    seen = []
    jitted = fg.jit(lambda x: seen.append(type(x)) or x * 2, backend=None)
    jitted(1.5)
    jitted(1.5)                                     # the fast path, default backend
    monkeypatch.setenv("FUSEGRAD_BACKEND", "eager")
    assert jitted(1.5) == 3.0 and seen[-1] is float  # eager: the Python function runs
    monkeypatch.setenv("FUSEGRAD_BACKEND", "interp")
    jitted(1.5)
    jitted(1.5)
    monkeypatch.delenv("FUSEGRAD_BACKEND")
    jitted(1.5)
    assert len(seen) == 3 and jitted.cache_size == 2  # one trace per backend, no more


def test_eager_backend_argument():
    f = Counted()
    jitted = fg.jit(f, backend="eager")
    jitted(np.ones(2))
    jitted(np.ones(2))
    assert f.calls == 2 and jitted.cache_size == 0


def test_keyword_arguments_are_dynamic_and_cached():
    traces = []

    @fg.jit
    def f(x, scale=2.0, shift=None):
        traces.append(1)
        return x * scale + (0.0 if shift is None else shift)

    x = np.arange(3.0)
    np.testing.assert_array_equal(f(x, scale=3.0), [0.0, 3.0, 6.0])
    np.testing.assert_array_equal(f(x, scale=4.0), [0.0, 4.0, 8.0])    # same signature
    assert len(traces) == 1
    np.testing.assert_array_equal(f(x, shift=np.ones(3)), [1.0, 3.0, 5.0])
    assert len(traces) == 2
    np.testing.assert_array_equal(f(x), [0.0, 2.0, 4.0])
