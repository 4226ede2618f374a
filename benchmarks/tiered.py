"""Tiered execution under loads users make: how many compile processes, how much memory, how
long, and what is left after exit.

    python benchmarks/tiered.py                        # every load, default settings and tiered off
    python benchmarks/tiered.py --loads sweep40 --modes default
    python benchmarks/tiered.py --fusegrad /path/to/other/checkout     # e.g. an older commit

Each load is a script run in a fresh process with an empty cache: `default` runs it with the
settings a user has (no FUSEGRAD_* variable), `drain` the same but waits at the end until every
queued compile is done (as a long-running program would see them all), `untiered` with
FUSEGRAD_TIERED=0 (every call compiles first). While it runs, the parent samples /proc every
20 ms for fusegrad's compile processes (children of the script whose command lines name
fusegrad.codegen.worker, or fusegrad.codegen.background of older versions) and records the
most alive at once and their largest total resident memory; after the script exits it counts
the ones still alive, waits 5 s and counts again.

Loads (plain NumPy functions, each distinct, value and gradient jitted as tests do):
- sweep40: a parameter sweep, 40 gradient functions called once each.
- sweep40x3: the same 40, called three times each.
- suite200: a test suite's load, 200 functions (float64 and float32, elementwise, reductions,
  indexing), each jitted as value and as gradient and each of those called twice.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

LOADS = ("sweep40", "sweep40x3", "suite200")


def parse_load(name):
    """'sweep40' -> ("sweep", 40, 1); 'sweep40x3' -> ("sweep", 40, 3); 'suite200' -> ("suite",
    200, 2): any count works, e.g. suite60 for a lighter run of an older version."""
    kind = "sweep" if name.startswith("sweep") else "suite"
    count, _, calls = name[len(kind):].partition("x")
    return kind, int(count), int(calls or (1 if kind == "sweep" else 2))

SCRIPT = """
import sys, numpy as np, fusegrad as fg
kind, n, calls, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
UNARY = [np.sin, np.cos, np.tanh, np.exp, np.arctan, lambda v: np.log1p(v * v),
         lambda v: np.sqrt(v * v + 1.0), lambda v: np.maximum(v, 0.1 * v)]

def make(k):
    op, c = UNARY[k % len(UNARY)], 1.0 + k / 7.0
    if kind == "sweep" or k % 4 == 0:
        def f(x):
            return np.sum(op(x * c) * x)
    elif k % 4 == 1:
        def f(x):
            return np.mean(op(x[1:] * c) - x[:-1])
    elif k % 4 == 2:
        def f(x):
            return np.sum(np.max(op(x.reshape(2, -1) * c), axis=1))
    else:
        def f(x):
            return np.sum(op(x[::2] * c) * x[np.array([0, 3, 5])][0])
    return f

total, alive = 0.0, []     # every jitted function stays alive, as module-level ones do
for k in range(n):
    x = np.linspace(-1.0, 1.0, 8, dtype=np.float32 if kind == "suite" and k % 2 else np.float64)
    f = make(k)
    jitted = [fg.jit(fg.grad(f))] if kind == "sweep" else [fg.jit(f), fg.jit(fg.grad(f))]
    alive += jitted
    for g in jitted:
        for _ in range(calls):
            total += float(np.sum(g(x)))
if mode == "drain":           # wait for every queued compile, as a long-running program would
    from fusegrad.tiering import COMPILES
    COMPILES.join()
print(total)
"""


def _parent(pid) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def _compile_processes(parent=None) -> dict:
    """pid -> resident bytes of every live fusegrad compile process (whose parent is `parent`,
    when given: other programs' compiles on the machine do not count)."""
    found = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"fusegrad.codegen.worker" not in cmd and b"fusegrad.codegen.background" not in cmd:
                continue
            if parent is not None and _parent(pid) != parent:
                continue
            with open(f"/proc/{pid}/statm") as f:
                found[int(pid)] = int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return found


def run_load(name, mode, fusegrad_root):
    kind, n, calls = parse_load(name)
    cache = tempfile.mkdtemp(prefix="fg-tiered-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env.update(FUSEGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
    if mode == "untiered":
        env["FUSEGRAD_TIERED"] = "0"
    if fusegrad_root:
        env["PYTHONPATH"] = fusegrad_root + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, kind, str(n), str(calls), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tempfile.gettempdir())
    most = peak = 0
    seen = set()
    while proc.poll() is None:
        live = _compile_processes(parent=proc.pid)
        seen |= set(live)
        most, peak = max(most, len(live)), max(peak, sum(live.values()))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out, err = proc.communicate()
    left_now = len(seen & set(_compile_processes()))
    time.sleep(5)
    left_later = len(seen & set(_compile_processes()))
    shutil.rmtree(cache, ignore_errors=True)
    ok = proc.returncode == 0
    return {"wall": wall, "most": most, "peak_mb": peak / 2**20, "started": len(seen),
            "left": left_now, "left_5s": left_later,
            "error": None if ok else (err.strip().splitlines() or ["?"])[-1][:100]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default=",".join(LOADS))
    ap.add_argument("--modes", default="default,untiered")
    ap.add_argument("--fusegrad", default=None, help="a checkout to import fusegrad from")
    opts = ap.parse_args()
    root = os.path.abspath(opts.fusegrad) if opts.fusegrad else None
    print("| load | mode | wall s | compile processes: most at once | started | "
          "their peak memory | left at exit | left 5 s later |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in opts.loads.split(","):
        for mode in opts.modes.split(","):
            r = run_load(name, mode, root)
            cells = (f"{r['wall']:.1f}", r["most"], r["started"], f"{r['peak_mb']:.0f} MB",
                     r["left"], r["left_5s"])
            note = f" (failed: {r['error']})" if r["error"] else ""
            print(f"| {name} | {mode}{note} | " + " | ".join(map(str, cells)) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
