"""fusegrad.dask: a loss summed over the chunks of Dask arrays equals fg.value_and_grad on the
concatenated arrays, on Dask's threaded and processes schedulers and on a dask.distributed
LocalCluster (one per module, two single-threaded worker processes on loopback), which also
loses a worker mid-computation and still gives the exact result."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import cloudpickle  # noqa: E402 - after the skips above
import dask  # noqa: E402

import fusegrad as fg  # noqa: E402
import fusegrad.dask as fgd  # noqa: E402

RTOL = 1e-12


def logistic(p, X, y):
    z = X @ p["w"] + p["b"]
    return np.sum(np.logaddexp(0.0, z) - y * z)


def weighted_squares(w, scale, X, y, weight):
    r = np.tanh(X @ w) * scale - y
    return np.sum(weight * r * r)


def ridge(p):
    return 0.5 * np.sum(p["w"] ** 2) + 0.25 * p["b"] ** 2


def pairs_of_rows(w, X):
    return np.sum(X.reshape(-1, 2, 2) @ w)       # needs an even number of rows per chunk


def data(n=23, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) > 0.5).astype(np.float64)
    p = {"w": rng.normal(size=d), "b": np.float64(0.3)}
    return p, X, y


def reference(loss, divisor, reg=None, argnums=0, nparams=1):
    """fg.value_and_grad of loss / divisor + reg(the first nparams arguments)."""
    def total(*args):
        value = loss(*args) / divisor
        return value + reg(*args[:nparams]) if reg else value
    return fg.value_and_grad(total, argnums=argnums)


def assert_close(got, want):
    value, grads = got
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float64
    np.testing.assert_allclose(value, want[0], rtol=RTOL)
    got_leaves, got_tree = fg.tree.flatten(grads)
    want_leaves, want_tree = fg.tree.flatten(want[1])
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, np.ndarray) and g.shape == np.shape(w) and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=0)


# ---- the threaded scheduler (Dask's default) ---------------------------------------------------

@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_sum_and_mean_equal_the_in_memory_gradient_over_ragged_chunks(reduce):
    p, X, y = data()
    vg = fgd.value_and_grad(logistic, reduce=reduce, backend="interp")
    got = vg(p, da.from_array(X, chunks=(5, 2)), da.from_array(y, chunks=5))
    assert_close(got, reference(logistic, 23 if reduce == "mean" else 1)(p, X, y))
    assert vg.cache_size == 2                       # chunks of 5 rows, and the last of 3


def test_mean_divides_by_the_examples_whatever_the_chunking():
    p, X, y = data(n=30)
    vg = fgd.value_and_grad(logistic, reduce="mean", backend="interp")
    results = [vg(p, da.from_array(X, chunks=(c, 3)), da.from_array(y, chunks=(c,)))
               for c in (30, 7, (1, 2, 27))]
    for got in results:
        assert_close(got, reference(logistic, 30)(p, X, y))


def test_regularizer_tuple_argnums_and_several_data_arrays():
    rng = np.random.default_rng(1)
    X, y, weight = rng.normal(size=(17, 4)), rng.normal(size=17), rng.random(17)
    w, scale = rng.normal(size=4), np.float64(1.5)

    def reg(w, scale):
        return np.sum(w * w) * scale

    vg = fgd.value_and_grad(weighted_squares, argnums=(0, 1), reduce="mean", regularizer=reg,
                            split_every=2, backend="interp")
    chunks = (4, 4, 4, 4, 1)
    got = vg(w, scale, da.from_array(X, chunks=(chunks, 1)), da.from_array(y, chunks=chunks),
             da.from_array(weight, chunks=chunks))
    assert_close(got, reference(weighted_squares, 17, reg, (0, 1), 2)(w, scale, X, y,
                                                                             weight))


def test_numba_chunks_with_a_regularizer_on_the_first_call():
    p, X, y = data(n=40, d=5)
    vg = fgd.value_and_grad(logistic, regularizer=ridge)
    got = vg(p, da.from_array(X, chunks=(16, 5)), da.from_array(y, chunks=16))
    assert_close(got, reference(logistic, 1, ridge)(p, X, y))


def test_compute_false_gives_a_delayed_of_the_same_pair():
    p, X, y = data()
    vg = fgd.value_and_grad(logistic, reduce="mean", regularizer=ridge, backend="interp")
    lazy = vg(p, da.from_array(X, chunks=(6, 3)), da.from_array(y, chunks=6), compute=False)
    assert dask.is_dask_collection(lazy)
    assert_close(lazy.compute(), reference(logistic, 23, ridge)(p, X, y))


def test_parameters_enter_the_graph_once_not_once_per_chunk():
    p, X, y = data(n=40)
    p["w"] = np.array([0.1234567, -7.654321, 3.1415926])
    vg = fgd.value_and_grad(logistic, regularizer=ridge, backend="interp")
    counts = []
    for rows in (20, 1):
        lazy = vg(p, da.from_array(X, chunks=(rows, 3)), da.from_array(y, chunks=rows),
                  compute=False)
        tasks = dict(lazy.__dask_graph__()).values()
        counts.append(sum(p["w"].tobytes() in cloudpickle.dumps(t) for t in tasks))
    assert counts[0] == counts[1] <= 2, counts     # the chunks' key, and the Delayed's alias


# ---- errors ------------------------------------------------------------------------------------

def test_chunks_that_do_not_line_up_are_named():
    p, X, y = data()
    vg = fgd.value_and_grad(logistic, backend="interp")
    with pytest.raises(ValueError, match=r"argument 1 \(shape \(23, 3\)\) has 5 chunks "
                                         r"\(5, 5, 5, 5, 3\).*argument 2 \(shape \(23,\)\) has 3 "
                                         r"chunks \(10, 10, 3\).*rechunk"):
        vg(p, da.from_array(X, chunks=(5, 3)), da.from_array(y, chunks=10))


def test_an_error_in_a_chunk_names_its_examples():
    w = np.ones(2)
    X = np.arange(22.0).reshape(11, 2)
    vg = fgd.value_and_grad(pairs_of_rows, backend="interp")
    with pytest.raises(fgd.ChunkError, match=r"chunk 2 \(examples 8:11\) of pairs_of_rows: "
                                             r".*reshape"):
        vg(w, da.from_array(X, chunks=(4, 2)))


def test_bad_arguments_say_what_to_do():
    p, X, y = data()
    with pytest.raises(ValueError, match="reduce='max'"):
        fgd.value_and_grad(logistic, reduce="max")
    vg = fgd.value_and_grad(logistic, argnums=1, backend="interp")
    with pytest.raises(ValueError, match="argument 1 .* is a dask array"):
        vg(p, da.from_array(X, chunks=5), da.from_array(y, chunks=5))
    with pytest.raises(TypeError, match="no argument is a dask array"):
        fgd.value_and_grad(logistic)(p, X, y)


def test_the_core_package_does_not_import_dask():
    code = "import sys, fusegrad; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('dask', 'distributed') or m == 'fusegrad.dask'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


# ---- the processes scheduler -------------------------------------------------------------------

def test_processes_scheduler():
    p, X, y = data(n=31)
    vg = fgd.value_and_grad(logistic, reduce="mean", regularizer=ridge, backend="interp")
    with dask.config.set(scheduler="processes", num_workers=2):
        got = vg(p, da.from_array(X, chunks=(8, 3)), da.from_array(y, chunks=8))
    assert_close(got, reference(logistic, 31, ridge)(p, X, y))


# ---- dask.distributed --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=":0")
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_distributed_equals_the_in_memory_gradient_on_numba(client):
    p, X, y = data(n=50, d=4)
    vg = fgd.value_and_grad(logistic, reduce="mean", regularizer=ridge)
    with dask.config.set(scheduler=client):
        got = vg(p, da.from_array(X, chunks=(12, 4)), da.from_array(y, chunks=12))
        lazy = vg(p, da.from_array(X, chunks=(12, 4)), da.from_array(y, chunks=12),
                  compute=False).compute()
    want = reference(logistic, 50, ridge)(p, X, y)
    assert_close(got, want)
    assert_close(lazy, want)


def test_distributed_chunk_error_comes_back_with_its_examples(client):
    vg = fgd.value_and_grad(pairs_of_rows, backend="interp")
    X = da.from_array(np.arange(22.0).reshape(11, 2), chunks=(4, 2))
    with dask.config.set(scheduler=client), pytest.raises(
            fgd.ChunkError, match=r"chunk 2 \(examples 8:11\)"):
        vg(np.ones(2), X)


def slow_block(block, seconds):
    time.sleep(seconds)
    return block


def test_a_worker_lost_mid_computation_is_retried_and_the_result_is_exact(client):
    p, X, y = data(n=64, d=3, seed=2)
    lazy_X = da.from_array(X, chunks=(8, 3)).map_blocks(slow_block, 0.4, dtype=X.dtype)
    vg = fgd.value_and_grad(logistic, backend="interp", split_every=2)
    with dask.config.set(scheduler=client):
        calm = vg(p, lazy_X, da.from_array(y, chunks=8))
        future = client.compute(vg(p, lazy_X, da.from_array(y, chunks=8), compute=False))
        victim, pid = _busy_worker(client)
        os.kill(pid, signal.SIGKILL)
        got = future.result(timeout=120)
    assert victim not in client.scheduler_info()["workers"]      # it was lost, not idle
    assert got[0] == calm[0]                                      # the same tree of sums
    assert all(np.array_equal(a, b) for a, b in zip(fg.tree.flatten(got[1])[0],
                                                    fg.tree.flatten(calm[1])[0]))
    assert_close(got, reference(logistic, 1)(p, X, y))


def _busy_worker(client, timeout=60.0):
    """A worker that is running one of our tasks now, and its process id."""
    pids = client.run(os.getpid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for address, keys in client.processing().items():
            if any("slow_block" in str(k) for k in keys) and address in pids:
                return address, pids[address]
        time.sleep(0.05)
    raise AssertionError("no worker ever ran a chunk")

