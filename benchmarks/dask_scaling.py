"""fusegrad.dask: gradient throughput per scheduler, and the driver's memory on big data.

    python benchmarks/dask_scaling.py                 # 4M rows in memory; 50M rows lazily
    python benchmarks/dask_scaling.py --n 1000000 --big-n 5000000 --repeats 3    # quicker

Throughput: the value and gradient of examples/dask_regression.py's logistic loss (mean over
the rows, 8 features) on data that fits, in examples per second, median of --repeats calls
after a warm-up call (which compiles): the in-memory `fg.jit(fg.value_and_grad(loss))` on the
whole arrays, then fusegrad.dask on the same rows in chunks with Dask's threaded scheduler and
with a dask.distributed LocalCluster of 1 and 2 single-threaded worker processes (the same rows
generated and persisted on the workers first, so a call moves the parameters and the sums,
not the data).

Memory: one gradient pass over --big-n rows generated chunk by chunk (never held whole), each
in a fresh process: the driver's peak resident memory (Linux's VmHWM, reset just before) above
what it held before the pass, with the threaded scheduler (the driver computes the chunks: a
few chunks per thread at once) and as the client of a distributed cluster (the workers
compute; the driver holds the parameters and the sums).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import dask  # noqa: E402 - after the path above
import dask.array as da  # noqa: E402
import dask_regression as ex  # noqa: E402

import fusegrad as fg  # noqa: E402
import fusegrad.dask  # noqa: E402

D = 8


def per_second(call, n, repeats):
    call()                                    # compiles (in each worker, for a cluster)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return n / statistics.median(times)


def throughput(n, chunk, repeats):
    X, y = (a.compute() for a in ex.dataset(n, D, chunk))
    params = {"w": np.full(D, 0.1), "b": np.float64(0.0)}
    in_memory = fg.jit(fg.value_and_grad(lambda p, X, y: ex.chunk_loss(p, X, y) / n),
                       tiered=False)
    vg = fusegrad.dask.value_and_grad(ex.chunk_loss, reduce="mean")
    lazy_X, lazy_y = da.from_array(X, chunks=(chunk, D)), da.from_array(y, chunks=chunk)
    rows = [("in memory: fg.jit(fg.value_and_grad)", per_second(
        lambda: in_memory(params, X, y), n, repeats))]
    with dask.config.set(scheduler="threads", num_workers=2):
        rows.append(("fusegrad.dask, threaded scheduler (2 threads)", per_second(
            lambda: vg(params, lazy_X, lazy_y), n, repeats)))
    from distributed import Client, LocalCluster
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=":0") \
                as cluster, Client(cluster) as client:
            on_workers = client.persist(list(ex.dataset(n, D, chunk)))   # made there
            rows.append((f"fusegrad.dask, distributed, {workers} worker"
                         f"{'s' if workers > 1 else ''}", per_second(
                             lambda: vg(params, *on_workers), n, repeats)))
    return rows


def memory_child(scheduler, n, chunk):
    """One pass over n lazily generated rows; prints the driver's peak memory as JSON."""
    X, y = ex.dataset(n, D, chunk)
    params = {"w": np.full(D, 0.1), "b": np.float64(0.0)}
    vg = fusegrad.dask.value_and_grad(ex.chunk_loss, reduce="mean")
    small_X, small_y = ex.dataset(2 * chunk, D, chunk)
    cluster = client = None
    if scheduler == "distributed":
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
        client = Client(cluster)
    with dask.config.set(scheduler=client or "threads", num_workers=2):
        vg(params, small_X, small_y)                  # imports and compiles before measuring
        before = reset_peak_rss()
        start = time.perf_counter()
        value, _ = vg(params, X, y)
        seconds = time.perf_counter() - start
        peak = peak_rss()
    if client is not None:
        client.close()
        cluster.close()
    print(json.dumps({"before": before, "peak": peak, "seconds": seconds,
                      "loss": float(value)}))


def reset_peak_rss() -> int:
    """Linux: restart the peak (VmHWM) at the resident memory now, which is returned."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") * 1024


def peak_rss() -> int:
    return _status_kib("VmHWM") * 1024


def _status_kib(field) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def memory(n, chunk):
    rows = []
    for scheduler in ("threads", "distributed"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", scheduler,
                              "--big-n", str(n), "--chunk", str(chunk)],
                             capture_output=True, text=True, check=True)
        rows.append((scheduler, json.loads(out.stdout.strip().splitlines()[-1])))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4_000_000, help="rows that fit")
    parser.add_argument("--big-n", type=int, default=50_000_000, help="rows that do not")
    parser.add_argument("--chunk", type=int, default=500_000, help="rows per chunk")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-child", choices=["threads", "distributed"])
    args = parser.parse_args()
    if args.memory_child:
        return memory_child(args.memory_child, args.big_n, args.chunk)
    mib = 2.0**20
    chunk_mib = args.chunk * (D + 1) * 8 / mib
    print(f"throughput: {args.n:,} rows x {D} features in memory, chunks of {args.chunk:,} "
          f"rows ({chunk_mib:.0f} MiB), {os.cpu_count()} cores")
    rows = throughput(args.n, args.chunk, args.repeats)
    base = rows[0][1]
    print(f"| {'':48} | {'examples/s':>12} | {'vs in memory':>12} |")
    print(f"|{'-' * 50}|{'-' * 14}|{'-' * 14}|")
    for name, rate in rows:
        print(f"| {name:48} | {rate:12.3g} | {rate / base:11.2f}x |")
    whole = args.big_n * (D + 1) * 8 / mib
    print(f"\ndriver memory: one pass over {args.big_n:,} rows ({whole:,.0f} MiB if held "
          f"whole), chunks of {chunk_mib:.0f} MiB")
    print(f"| {'scheduler':12} | {'peak growth MiB':>15} | {'chunks':>6} | {'seconds':>8} |")
    print(f"|{'-' * 14}|{'-' * 17}|{'-' * 8}|{'-' * 10}|")
    for scheduler, m in memory(args.big_n, args.chunk):
        grown = max(m["peak"] - m["before"], 0) / mib
        print(f"| {scheduler:12} | {grown:15.0f} | {grown / chunk_mib:6.1f} | "
              f"{m['seconds']:8.1f} |")


if __name__ == "__main__":
    main()
