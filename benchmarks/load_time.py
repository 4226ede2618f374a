"""Cold compile and warm disk-cache load of the W2 MLP gradient, each in a fresh process.

    python benchmarks/load_time.py [--runs 3]

The disk cache is the kernel IR's Numba rendering's (FUSEGRAD_RENDERER=numba: the default LLVM
rendering compiles in memory, every time). A fresh FUSEGRAD_CACHE_DIR is filled by a first
process (cold: trace, passes, Numba compile) and read by the next ones (warm). Each child
reports its import time (numpy, numba, fusegrad: paid once by any Numba program) and its
first call, split into fusegrad's own work (trace,
passes, code text) and loading the compiled module (Numba's start-up and its cache).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import numba
import fusegrad as fg
import fusegrad.codegen
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import references as ref
import fusegrad.nn as fnn
from fusegrad.codegen import compile as cc


def w2(W1, b1, W2, b2, X, y):
    return fnn.cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)


load = [0.0]
real = cc.load_module


def timed(*a, **k):
    s = time.perf_counter()
    try:
        return real(*a, **k)
    finally:
        load[0] += time.perf_counter() - s


cc.load_module = timed
args = ref.w2_inputs(np.float32)
g = fg.jit(fg.value_and_grad(w2, argnums=(0, 1, 2, 3)), tiered=False)
t2 = time.perf_counter()
g(*args)
t3 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "first_call": t3 - t2, "numba_load": load[0],
                  "fusegrad": t3 - t2 - load[0], "scipy": "scipy.linalg" in sys.modules}))
"""


def child(cache):
    env = dict(os.environ, FUSEGRAD_CACHE_DIR=cache, FUSEGRAD_RENDERER="numba")
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="warm processes (median reported)")
    opts = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="fusegrad-load-")
    try:
        rows = [("cold", child(cache))]
        rows += [(f"warm {i + 1}", child(cache)) for i in range(opts.runs)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("W2 MLP gradient (f32, 784-512-10, batch 256), one fresh process per row, seconds:")
    print(f"{'':8s} {'imports':>8s} {'first call':>11s} {'fusegrad':>9s} {'numba load':>11s}"
          f"  scipy.linalg imported")
    for name, r in rows:
        print(f"{name:8s} {r['imports']:8.3f} {r['first_call']:11.3f} {r['fusegrad']:9.3f} "
              f"{r['numba_load']:11.3f}  {r['scipy']}")
    warm = sorted(r["first_call"] for _, r in rows[1:])
    print(f"warm first call, median: {warm[len(warm) // 2]:.3f} s")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t:.0f} s)")
