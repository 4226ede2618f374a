"""Eager engine cost per op on a scalar chain y = y * 1.0000001, record and backward timed
apart, with Python's cyclic GC on and off: shows how the record cost grows with the graph.

    python benchmarks/eager_chain.py
"""

import gc
import time

import numpy as np

import fusegrad as fg


def run(n):
    x = fg.tensor(1.0, requires_grad=True)
    y = x
    t0 = time.perf_counter()
    for _ in range(n):
        y = y * 1.0000001
    t1 = time.perf_counter()
    y.backward()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main():
    for label in ("gc on", "gc off"):
        if label == "gc off":
            gc.disable()
        for n in (1000, 10000, 50000):
            record, backward = np.median([run(n) for _ in range(5)], axis=0)
            print(f"{label:6s} {n:6d} ops: record {record:.2f} us/op, "
                  f"backward {backward:.2f} us/op")
    gc.enable()


if __name__ == "__main__":
    main()
