"""Logistic regression on 50 million examples that never sit in memory at once.

The data set is a Dask array generated lazily: block i of the rows comes from its own seeded
generator (numpy's default_rng([seed, i])), so every pass over the data regenerates the same
numbers chunk by chunk and the driver holds one chunk per thread at most. fusegrad.dask
compiles the gradient of the chunk's loss once per chunk shape, Dask sums the chunks' values and
gradients with its tree reduction, and scipy's L-BFGS-B steps on the driver.

    python examples/dask_regression.py                         # 50 million rows, threads
    python examples/dask_regression.py --scheduler distributed --workers 2
    python examples/dask_regression.py --n 200000 --chunk 20000     # a quick look

With --scheduler distributed a LocalCluster starts (its dashboard address is printed).
"""

import argparse
import time

import dask
import dask.array as da
import numpy as np
import scipy.optimize

import fusegrad as fg
import fusegrad.dask

SEED = 2024


def true_weights(d):
    return np.random.default_rng(SEED).normal(size=d + 1)     # d weights and a bias


def make_block(d, chunk, n, block_id=None):
    """Rows [i * chunk, ...) of the data: d features and a 0/1 label drawn from the model."""
    i = block_id[0]
    rows = min(chunk, n - i * chunk)
    rng = np.random.default_rng([SEED, i])
    X = rng.standard_normal((rows, d))
    wb = true_weights(d)
    p = 1.0 / (1.0 + np.exp(-(X @ wb[:d] + wb[d])))
    y = (rng.random(rows) < p).astype(np.float64)
    return np.concatenate([X, y[:, None]], axis=1)


def dataset(n, d, chunk):
    blocks = (chunk,) * (n // chunk) + ((n % chunk,) if n % chunk else ())
    table = da.map_blocks(make_block, d, chunk, n, chunks=(blocks, (d + 1,)), dtype=np.float64,
                          meta=np.empty((0, 0)))
    return table[:, :d], table[:, d]


def chunk_loss(params, X, y):
    """The summed negative log-likelihood of one chunk's examples."""
    z = X @ params["w"] + params["b"]
    return np.sum(np.logaddexp(0.0, z) - y * z)


def ridge(params):
    return 1e-6 * np.sum(params["w"] ** 2)


def train(X, y, d, iters):
    params = {"w": np.zeros(d), "b": np.float64(0.0)}
    flat, unravel = fg.tree.ravel(params)
    vg = fusegrad.dask.value_and_grad(chunk_loss, reduce="mean", regularizer=ridge)
    state = {"evals": 0, "last": None, "start": time.perf_counter()}

    def fun(flat):
        value, grads = vg(unravel(flat), X, y)
        state["evals"] += 1
        state["last"] = float(value)
        return float(value), fg.tree.ravel(grads)[0]

    def progress(flat):
        print(f"iteration {progress.count:3d}  loss {state['last']:.6f}  "
              f"({state['evals']} passes over the data, "
              f"{time.perf_counter() - state['start']:.1f} s)", flush=True)
        progress.count += 1

    progress.count = 1
    print(f"iteration   0  loss {fun(flat)[0]:.6f}", flush=True)
    result = scipy.optimize.minimize(fun, flat, jac=True, method="L-BFGS-B", callback=progress,
                                     options={"maxiter": iters})
    return unravel(result.x), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000_000, help="examples (rows)")
    parser.add_argument("--d", type=int, default=8, help="features")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows per chunk")
    parser.add_argument("--iters", type=int, default=15, help="L-BFGS iterations at most")
    parser.add_argument("--scheduler", choices=["threads", "processes", "distributed"],
                        default="threads")
    parser.add_argument("--workers", type=int, default=2, help="for processes/distributed")
    args = parser.parse_args()
    X, y = dataset(args.n, args.d, args.chunk)
    gib = args.n * (args.d + 1) * 8 / 2**30
    print(f"{args.n:,} examples x {args.d} features ({gib:.1f} GiB if held whole), "
          f"{X.numblocks[0]} chunks of {args.chunk:,} rows, scheduler {args.scheduler}")
    if args.scheduler == "distributed":
        from distributed import Client, LocalCluster
        with LocalCluster(n_workers=args.workers, threads_per_worker=1) as cluster, \
                Client(cluster) as client:
            print(f"Dask dashboard: {client.dashboard_link}")
            report(*train(X, y, args.d, args.iters), args.d)
    else:
        with dask.config.set(scheduler=args.scheduler, num_workers=args.workers):
            report(*train(X, y, args.d, args.iters), args.d)


def report(params, result, d):
    truth = true_weights(d)
    found = np.append(params["w"], params["b"])
    print(f"done: {result.nit} iterations, {result.nfev} passes, loss {result.fun:.6f} "
          f"({result.message})")
    print(f"largest |weight - true weight|: {np.max(np.abs(found - truth)):.4f}")


if __name__ == "__main__":
    main()
