"""Compile time of one kernel IR Function using every elementwise primitive that had no scalar
rule before issue 24 (27 of them, each once, summed), in float64 and float32.

    python benchmarks/kernel_math_compile.py [f64] [f32]     # in the order given
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402

from fusegrad.codegen.kernel_ir import compile_kernel_ir, covers  # noqa: E402
from fusegrad.ir import Builder, TensorType  # noqa: E402

NEW = ("acos acosh asin asinh atan atan2 atanh cbrt ceil cos erf erfc expm1 floor fmod gamma "
       "hypot lgamma log1p pow remainder round rsqrt sign signbit sin trunc").split()
BINARY = {"atan2", "hypot", "fmod", "pow", "remainder"}


def every(dtype):
    b = Builder("every_" + dtype)
    x, y = (b.param(TensorType(dtype, (1000,)), n) for n in "xy")
    acc = None
    for prim in NEW:
        out = b.add1(prim, [x, y] if prim in BINARY else [x])
        if prim == "signbit":
            out = b.add1("select", [out, x, y])
        acc = out if acc is None else b.add1("add", [acc, out])
    return b.build([acc])


def timed(f, *args):
    t = time.perf_counter()
    out = f(*args)
    return out, time.perf_counter() - t


def main():
    warm = Builder("warm")
    x = warm.param(TensorType("f64", (4,)), "x")
    _, t = timed(compile_kernel_ir, warm.build([warm.add1("neg", [x])]))
    print(f"warm-up (llvmlite, a one-op function): {t:.2f} s")
    for dtype in sys.argv[1:] or ("f64", "f32"):
        fn = every(dtype)
        assert covers(fn) is None
        (run, text), t = timed(compile_kernel_ir, fn)
        ones = np.ones(1000, {"f64": np.float64, "f32": np.float32}[dtype])
        _, call = timed(run, [ones, ones])
        print(f"{dtype}: compile {t:.2f} s, first call {call * 1e3:.2f} ms, {len(fn.ops)} ops, "
              f"{text.count(chr(10))} lines of LLVM")


if __name__ == "__main__":
    main()
