"""Benchmark fusegrad against hand-written NumPy, hand-fused Numba, jax.jit and torch.

The idea: one table per workload, one column per implementation, medians measured in one run on
one machine, with the hand NumPy version as both baseline (ratio = time / numpy (hand), lower is
faster) and oracle (every column's value and gradients are compared with it before timing).
Each column group runs in its own child process (`run.py --only GROUP --workloads W --json`,
one JSON record per line), so jax's, torch's and Numba's thread pools never share the two cores;
the parent merges the records into tables. A column that cannot run (package missing, failed
trace or compile, child timeout) shows n/a with its reason in a footnote, so the script runs
whatever state fusegrad is in. Reference implementations live in references.py.
"""

import argparse
import contextlib
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

OMP_USER = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before anything loads OpenMP; see OMP_NOTE
os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")  # cold compile times
os.environ.setdefault("FUSEGRAD_TIERED", "0")  # time compiled code from the first call
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # references.py, and the working tree's fusegrad
import references as ref  # noqa: E402 - needs the sys.path line above

WORKLOADS = {
    "W1": "value and grad of sum(tanh(x*w+b)*sigmoid(x)) w.r.t. x, w, b (1-D arrays)",
    "W2": "MLP 784-512-10 training step, batch 256, tanh, softmax cross entropy: loss, 4 grads",
    "W3": "scalar f(x)=sin(x)*x+exp(-x*x), value and grad, per call with a Python float",
    "W4": "scalar chain of y=y*1.0000001+1e-7*sin(y) (4 ops per step), value and grad",
    "W5": "sum(softmax(layer_norm(x))*c) over rows of 4096x1024 f32, value and grad w.r.t. x",
}
GROUPS = {
    "fusegrad-numba": ["fusegrad numba"], "fusegrad-interp": ["fusegrad interp"],
    "fusegrad-eager": ["fusegrad eager"], "fusegrad-nr": ["fusegrad numba-renderer"],
    "numpy": ["numpy (hand)", "GEMMs alone"],
    "numba": ["numba (hand fused)"], "numba-prange": ["numba (prange)"], "jax": ["jax.jit"],
    "torch": ["torch"], "torch.compile": ["torch.compile"],
}
ALIASES = {"fusegrad": ["fusegrad-numba", "fusegrad-interp", "fusegrad-eager"]}
COLUMNS = [c for cols in GROUPS.values() for c in cols] + ["mem floor"]
BASELINE = "numpy (hand)"
APPLIES = {"GEMMs alone": {"W2"}, "numba (prange)": {"W1", "W5"}, "mem floor": {"W1"}}
COMPILES = {"fusegrad numba", "fusegrad numba-renderer", "fusegrad interp", "numba (hand fused)",
            "jax.jit", "torch.compile"}
QUICK_SKIPS = {"torch.compile": "skipped in --quick"}
NOISY = 0.25  # cores used by other processes above which a child's timings count as disturbed
RERUN_BUDGET = 180  # s of waiting for idle and rerunning disturbed children
OMP_NOTE = ("OMP_WAIT_POLICY={} ({}): spinning OpenMP threads stall torch and numba prange "
            "10-100x on 2 cores as soon as anything else runs")
JOB_LIMITS = {"torch.compile": 360, ("torch.compile", "W4"): 90}  # s per child; default 240


def applies(col, w):
    return w in APPLIES.get(col, WORKLOADS)


def cases(w, quick):
    """[(row label, params)] for workload w."""
    if w == "W1":
        sizes = [(4, 1), (6, 1)] + ([] if quick else [(6, 4)])
        return [(f"N={m}e{e} {d}", (m * 10**e, dt)) for e, m in sizes
                for d, dt in [("f64", np.float64), ("f32", np.float32)]]
    if w == "W2":
        return [("B=256 f32", np.float32)] + ([] if quick else [("B=256 f64", np.float64)])
    if w == "W4":
        return [(f"{n} ops", n // 4) for n in ([1000] if quick else [1000, 10000])]
    return [("4096x1024 f32" if w == "W5" else "f64 scalar", None)]


PAIRED = "fusegrad numba"  # also timed against the GEMMs alone, interleaved in its own child


def metrics(w, col):
    if w in ref.GEMMS and col == PAIRED:
        return ["run", "paired"]
    return ["compile", "run"] if w == "W4" and col in COMPILES else ["run"]


# ---- fusegrad columns ----------------------------------------------------------------------


def fusegrad_column(mode):
    """fg.jit(fg.value_and_grad(f), backend=mode), or plain fg.value_and_grad for eager;
    mode numba-renderer is backend numba with the kernel IR rendered to Numba source."""
    if mode == "numba-renderer":
        os.environ["FUSEGRAD_RENDERER"] = "numba"
        mode = "numba"
    fg = importlib.import_module("fusegrad")

    def vg(f, argnums):
        g = fg.value_and_grad(f, argnums=argnums)
        return g if mode == "eager" else fg.jit(g, backend=mode)

    def arrays(f, argnums):
        def make(*args):
            g = vg(f, argnums)
            return lambda: g(*args)
        return make

    def fnn():  # imported when first traced, so W1, W3, W4 run without it
        return importlib.import_module("fusegrad.nn")

    def scalar(f):
        return vg(f, 0)

    def w1(x, w, b):
        return np.sum(np.tanh(x * w + b) * (1 / (1 + np.exp(-x))))

    def w2(W1, b1, W2, b2, X, y):
        return fnn().cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)

    def w3(x):
        return np.sin(x) * x + np.exp(-x * x)

    def w4(steps):
        def chain(x):
            for _ in range(steps):
                x = x * ref.W4_A + ref.W4_C * np.sin(x)
            return x
        return chain

    def w5(x, c):
        return np.sum(fnn().softmax(fnn().layer_norm(x, eps=ref.W5_EPS)) * c)

    return {"W1": arrays(w1, ref.ARGNUMS["W1"]), "W2": arrays(w2, ref.ARGNUMS["W2"]),
            "W3": lambda: scalar(w3), "W4": lambda steps: scalar(w4(steps)),
            "W5": arrays(w5, ref.ARGNUMS["W5"])}


def column(col):
    """The {workload: maker} dict of one column; raises when its framework is unavailable."""
    if col.startswith("fusegrad"):
        return fusegrad_column(col.split()[1])
    return {"numpy (hand)": lambda: ref.NUMPY, "GEMMs alone": lambda: ref.GEMMS,
            "numba (hand fused)": lambda: ref.numba_column(False),
            "numba (prange)": lambda: ref.numba_column(True), "jax.jit": ref.jax_column,
            "torch": lambda: ref.torch_column(False),
            "torch.compile": lambda: ref.torch_column(True)}[col]()


# ---- measuring (inside one child) ----------------------------------------------------------


def bench(*calls, opts):
    """Median seconds per call() over opts.repeats repeats of >= opts.min_time each, after
    warming up for 4 * opts.min_time; for several calls, their repeats interleaved, a list of
    medians and the median ratio of each to the first, repeat by repeat (drift cancels)."""
    gc.collect()
    gc.disable()
    try:
        counts = []
        for call in calls:
            warm_until = time.perf_counter() + opts.min_time * 4  # lazy inits, thread pools
            while time.perf_counter() < warm_until:
                call()
            t0 = time.perf_counter()
            call()
            counts.append(max(1, round(opts.min_time / max(time.perf_counter() - t0, 1e-7))))
        times = [[] for _ in calls]
        for _ in range(opts.repeats):
            for call, n, ts in zip(calls, counts, times):
                t0 = time.perf_counter()
                for _ in range(n):
                    call()
                ts.append((time.perf_counter() - t0) / n)
    finally:
        gc.enable()
    if len(calls) == 1:
        return statistics.median(times[0])
    return ([statistics.median(ts) for ts in times],
            [statistics.median(t / t0 for t, t0 in zip(ts, times[0])) for ts in times])


def mismatch(out, want, dtype):
    """None when out == want (value, grads) to the dtype's tolerance, else what differs."""
    rtol = 1e-7 if dtype == np.float64 else 1e-3
    value, grads = out
    grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
    if len(grads) != len(want[1]):
        return f"{len(grads)} gradients, want {len(want[1])}"
    errs = []
    for name, a, b in zip(["value"] + [f"grad {i}" for i in range(len(grads))],
                          (value, *grads), (want[0], *want[1])):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        scale = max(float(np.abs(b).max(initial=0.0)), 1e-300)
        if a.shape != b.shape:
            errs.append(f"{name} shape {a.shape}, want {b.shape}")
        elif not np.allclose(a, b, rtol=rtol, atol=rtol * scale):
            errs.append(f"{name} max|err|/max|ref| = {np.abs(a - b).max() / scale:.1e}")
    return "; ".join(errs) or None


def inputs(w, p):
    return {"W1": lambda: ref.w1_inputs(*p), "W2": lambda: ref.w2_inputs(p),
            "W5": lambda: ref.w5_inputs()}[w]()


def measure_case(w, p, maker, opts, paired=False):
    """{metric: seconds} for one column on one case; raises on failure. Checks against numpy."""
    if w in ("W3", "W4"):
        static = () if p is None else (p,)
        xs, want = ref.w3_inputs() if w == "W3" else [0.3], ref.NUMPY[w](*static)
        t0 = time.perf_counter()
        fn = maker(*static)
        first = fn(xs[0])
        first_t = time.perf_counter() - t0
        bad = [mismatch(got, (want(x)[0], (want(x)[1],)), np.float64)
               for x, got in [(xs[0], first)] + [(x, fn(x)) for x in xs[1:5]]]
        run = bench(lambda: [fn(x) for x in xs], opts=opts) / len(xs)
        return {"run": run, "compile": max(first_t - run, 0.0)}, next(filter(None, bad), None)
    args = inputs(w, p)
    t0 = time.perf_counter()
    call = maker(*args)
    out = call()
    first_t = time.perf_counter() - t0
    bad = None
    if maker not in (ref.NUMPY[w], ref.GEMMS.get(w)):
        bad = mismatch(out, ref.NUMPY[w](*args)(), args[0].dtype)
        if w == "W2":
            time.sleep(0.2)  # let numpy's OpenBLAS threads stop spinning before we time
    if paired:   # a ratio to the GEMMs alone that machine drift cannot skew
        gemms = ref.GEMMS[w](*args)
        time.sleep(0.2)
        (_, run), (_, ratio) = bench(gemms, call, opts=opts)
        return {"run": run, "compile": max(first_t - run, 0.0), "paired": ratio}, bad
    run = bench(call, opts=opts)
    return {"run": run, "compile": max(first_t - run, 0.0)}, bad


def measure(cols, workloads, opts, emit):
    """Run every (workload, case, column) this process owns, emitting one record per cell."""
    makers = {}
    for w in workloads:
        skip = {}  # col -> why its later (longer) rows are skipped
        for row, p in cases(w, opts.quick):
            for col in [c for c in cols if applies(c, w)]:
                cell = {"w": w, "row": row, "col": col}
                try:
                    if col in QUICK_SKIPS and opts.quick or col in skip:
                        raise RuntimeError(QUICK_SKIPS.get(col) or skip[col])
                    if col not in makers:
                        makers[col] = column(col)
                    with time_limit(opts.cell_limit):
                        times, bad = measure_case(w, p, makers[col][w], opts,
                                                  "paired" in metrics(w, col))
                except Exception as e:  # noqa: BLE001 - any failure is a cell's n/a
                    if w == "W4" or isinstance(e, TimeoutError):
                        skip[col] = skip.get(col) or f"skipped: {row} failed"
                    for m in metrics(w, col):
                        emit(dict(cell, metric=m, na=short(e)))
                    continue
                if w == "W4" and col in COMPILES and times["compile"] * 10 > opts.cell_limit:
                    skip[col] = f"skipped: {row} compiled in {times['compile']:.0f} s"
                for m in metrics(w, col):
                    emit(dict(cell, metric=m, t=times[m]))
                if bad:
                    emit({"warn": f"{w} {row} {col}: mismatch vs numpy (hand): {bad}"})


@contextlib.contextmanager
def time_limit(seconds):
    """Raise TimeoutError in the main thread after `seconds` (a hung trace or compile), and
    every 0.5 s after that, since a compiler may catch the first one and carry on."""
    message, expired = f"cell ran past {seconds:.0f} s", []

    def expire(*_):
        expired.append(True)
        raise TimeoutError(message)
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    except Exception as e:
        if expired and not isinstance(e, TimeoutError):
            raise TimeoutError(message) from e  # whatever the compiler wrapped it in
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def short(e):
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, RuntimeError) and text.startswith("skipped"):
        return text
    return f"{type(e).__name__}: {text}"[:90]


# ---- children --------------------------------------------------------------------------------


def run_children(groups, workloads, opts, emit):
    """One child per group (per group and workload in a full run). The machine may be shared:
    each child waits a while for it to go idle; at the end, for up to RERUN_BUDGET seconds,
    children that other processes disturbed run again when it is idle; the quieter run counts."""
    jobs = [(g, workloads) for g in groups] if opts.quick else [
        (g, [w]) for g in groups for w in workloads]
    jobs = [(g, [w for w in ws if any(applies(c, w) for c in GROUPS[g])]) for g, ws in jobs]
    tries = {(g, tuple(ws)): [attempt(g, ws, opts, True)] for g, ws in jobs if ws}
    deadline = time.perf_counter() + RERUN_BUDGET  # reruns: the baseline's first
    for _ in range(opts.retries):
        for (g, ws), got in sorted(tries.items(), key=lambda kv: kv[0][0] != "numpy"):
            if min(t[3] for t in got) > NOISY and time.perf_counter() < deadline:
                got += filter(None, [attempt(g, list(ws), opts, False)])
    for (g, ws), got in tries.items():
        emit_job(g, ws, min(got, key=lambda t: t[3]), opts, emit)


def attempt(g, ws, opts, must):
    """run_job after waiting for idle; None when not `must` and the machine stayed busy. After
    a wait that found no idle moment, wait only 1 s until one is found again."""
    waited, idle = wait_idle(opts.settle if opts.was_idle or not must else 1.0)
    opts.was_idle = idle
    if not (idle or must):
        return None
    _, failure, wall, others = got = run_job(g, ws, opts)
    print(f"  [{g} {','.join(ws)}] {wall:.1f} s, other processes {others:.2f} cores"
          + (f", waited {waited:.0f} s for idle" if idle else ", machine never idle")
          * (waited >= 1) + (f" ({failure})" if failure else ""), file=sys.stderr, flush=True)
    return got


def emit_job(g, ws, got, opts, emit):
    """A child's records, its background load, and n/a for every cell it left out."""
    records, failure, _, others = got
    emit({"load": others, "ws": list(ws), "group": g})
    seen = {(r.get("w"), r.get("row"), r.get("col"), r.get("metric")) for r in records}
    for r in records:
        emit(r)
    for w in ws:
        for row, _ in cases(w, opts.quick):
            for col in [c for c in GROUPS[g] if applies(c, w)]:
                for m in [m for m in metrics(w, col) if (w, row, col, m) not in seen]:
                    emit({"w": w, "row": row, "col": col, "metric": m,
                          "na": failure or "no result from child"})


def run_job(g, ws, opts):
    """(records, failure or None, wall seconds, cores other processes used meanwhile)."""
    limit = 120 if opts.quick else JOB_LIMITS.get((g, *ws), JOB_LIMITS.get(g, 240))
    cmd = [sys.executable, os.path.abspath(__file__), "--only", g, "--workloads", ",".join(ws),
           "--json"] + (["--quick"] if opts.quick else [])
    t0, busy0, mine0 = time.perf_counter(), cpu_busy(), children_cpu()
    with cold_cache():
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=limit)
            failure = None if p.returncode == 0 else f"child exit {p.returncode}: " + (
                err.strip().splitlines() or [""])[-1][:70]
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the child's session: its compile workers too
            out, err = p.communicate()
            failure = f"timeout after {limit} s"
    wall = time.perf_counter() - t0
    others = max(0.0, cpu_busy() - busy0 - (children_cpu() - mine0)) / wall
    records = []
    for line in out.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records, failure, wall, others


@contextlib.contextmanager
def cold_cache():
    """A fresh, temporary FUSEGRAD_CACHE_DIR (unless set), so compile times are never disk
    cache hits from an earlier run or child."""
    if "FUSEGRAD_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["FUSEGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="fusegrad-bench-")
    try:
        yield
    finally:
        shutil.rmtree(os.environ.pop("FUSEGRAD_CACHE_DIR"), ignore_errors=True)


def wait_idle(limit, window=0.5):
    """(seconds waited, whether idle): sleep until all processes use < NOISY / 2 cores over
    `window` s, at most `limit` s."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        busy0 = cpu_busy()
        time.sleep(window)
        if (cpu_busy() - busy0) / window < NOISY / 2:
            return time.perf_counter() - t0, True
    return time.perf_counter() - t0, False


def cpu_busy():
    """CPU seconds all processes spent busy so far (from /proc/stat; 0 where there is none)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


# ---- machine facts ---------------------------------------------------------------------------


def copy_bandwidth(nbytes=256 * 2**20, repeats=5):
    """GB/s of np.copyto on 256 MiB (one thread), counting the bytes read and written."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 2 * nbytes / statistics.median(times) / 1e9


def blas_info():
    try:
        from threadpoolctl import threadpool_info

        return "; ".join(f"{d.get('internal_api')} {d.get('version')} "
                         f"({d.get('architecture')}, {d.get('num_threads')} threads)"
                         for d in threadpool_info() if d.get("user_api") == "blas")
    except ImportError:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        config = " ".join(str(blas.get("openblas configuration", "")).split())
        return (f"{blas.get('name')} {blas.get('version')} ({config}) [np.show_config]; "
                f"runtime core {openblas_core()}")


def openblas_core():
    """The kernel set OpenBLAS picked at load (what OPENBLAS_CORETYPE overrides), via ctypes."""
    np.ones((2, 2)) @ np.ones((2, 2))
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return "unknown"
    for path in sorted(paths):
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(ctypes.CDLL(path), name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return "unknown"


def versions():
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ["numpy", "numba", "jax", "jaxlib", "torch"]:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} missing")
    spec = importlib.util.find_spec("fusegrad")
    where = os.path.dirname(spec.origin) if spec and spec.origin else "not importable"
    return ", ".join(out) + f"; fusegrad: {where}"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return "unknown cpu"


def machine_info(opts):
    wait_idle(opts.settle)
    bw = copy_bandwidth()
    floors = {row: 6 * n * np.dtype(dt).itemsize / (bw * 1e9)
              for row, (n, dt) in cases("W1", False)}
    return {"cpu": f"{cpu_name()}, {os.cpu_count()} cpus", "python": sys.version.split()[0],
            "versions": versions(), "blas": blas_info(), "loadavg": os.getloadavg(),
            "coretype": os.environ.get("OPENBLAS_CORETYPE", "(unset)"), "bandwidth": bw,
            "floors": floors}


def print_header(info, opts):
    mode = "quick" if opts.quick else "full"
    print(f"fusegrad benchmarks ({mode}: medians of {opts.repeats} repeats, each >= "
          f"{opts.min_time * 1e3:.0f} ms; compile time excluded except in W4)")
    print(f"machine: {info['cpu']}; python {info['python']}; load average "
          + " ".join(f"{v:.2f}" for v in info["loadavg"]))
    print(f"versions: {info['versions']}")
    print(f"numpy BLAS: {info['blas']}")
    print(f"OPENBLAS_CORETYPE: {info['coretype']}")
    print(OMP_NOTE.format(os.environ["OMP_WAIT_POLICY"], "set by you" if OMP_USER is not None
                          else "set by run.py"))
    print(f"copy bandwidth: {info['bandwidth']:.1f} GB/s (np.copyto of 256 MiB, one thread, "
          "bytes read + written)")
    print("W1 memory floor (read x, w, b; write gx, gw, gb: 6 * N * itemsize / bandwidth):")
    for row, t in info["floors"].items():
        print(f"  {row:<12}{fmt_time(t):>10}")
    print()


# ---- tables ----------------------------------------------------------------------------------


def fmt_time(t):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if t >= scale or unit == "ns":
            return f"{t / scale:.3g} {unit}"


def fmt_ratio(x):
    digits = 3 if x < 0.1 else 2 if x < 10 else 1 if x < 100 else 0
    return f"{x:.{digits}f}x"


def render(rows, cols, cell, fmt, notes, mark, width=11):
    head = [textwrap.wrap(c.replace(".", ". "), width - 2) for c in cols]
    head = [[part.replace(". ", ".").rstrip() for part in h] for h in head]
    label = max(map(len, rows)) + 2
    lines = [" " * label + "".join(f"{h[k] if k < len(h) else '':>{width}}" for h in head)
             for k in range(max(map(len, head)))]
    for r in rows:
        text = []
        for c in cols:
            v = cell(r, c)
            if isinstance(v, str):
                v = f"n/a[{notes.setdefault(v, chr(ord('a') + len(notes)))}]"
            v = "-" if v is None else v if isinstance(v, str) else fmt(v) + mark(c)
            text.append(f"{v:>{width}}")
        lines.append(f"{r:<{label}}" + "".join(text))
    return "\n".join(lines)


def print_workload(w, res, cols, warnings, loads, quick):
    """Time tables (W4: compile and run), the ratio table, footnotes, background load."""
    rows, notes = [r for r, _ in cases(w, quick)], {}
    cols = [c for c in cols if applies(c, w)]
    timed = {c for (w_, m, _, c), v in res.items() if w_ == w and isinstance(v, float)}
    noisy = {c: x for c, x in loads.get(w, {}).items() if x > NOISY and c in timed}

    def mark(c):
        return "*" if c in noisy else ""

    def table(title, cols, cell, fmt=fmt_time):
        print(title)
        print(render(rows, cols, cell, fmt, notes, mark))

    print(f"== {w}: {WORKLOADS[w]} ==")
    if w == "W4" and any(c in COMPILES for c in cols):
        table("trace + compile time (first call minus one run):",
              [c for c in cols if c in COMPILES], lambda r, c: res.get((w, "compile", r, c)))
    table("median time per call:", cols, lambda r, c: res.get((w, "run", r, c)))
    if BASELINE in cols:
        def ratio(r, c):
            t, base = res.get((w, "run", r, c)), res.get((w, "run", r, BASELINE))
            return t / base if isinstance(t, float) and isinstance(base, float) else (
                t if isinstance(t, str) else None)
        table(f"time / {BASELINE} (lower is faster):", cols, ratio, fmt_ratio)
    if PAIRED in cols and w in ref.GEMMS:
        pairs = [f"{fmt_ratio(v)} ({r})" for r in rows
                 if isinstance(v := res.get((w, "paired", r, PAIRED)), float)]
        print(f"{PAIRED} / GEMMs alone, interleaved in one process: {', '.join(pairs)}")
    for reason, letter in notes.items():
        print(f"  [{letter}] n/a ({reason})")
    if noisy:
        lo, hi = min(noisy.values()), max(noisy.values())
        text = (f"every column ({lo:.2f}-{hi:.2f})" if len(noisy) == len(loads[w]) > 2 else
                ", ".join(f"{c} ({x:.2f})" for c, x in noisy.items()))
        print(textwrap.fill(f"* disturbed: cores other processes used while measuring {text}",
                            98, initial_indent="  ", subsequent_indent="    "))
    elif loads.get(w):
        print(f"  other processes used at most {max(loads[w].values()):.2f} cores meanwhile")
    for msg in warnings.get(w, []):
        print(f"  WARNING {msg}")
    print()


# ---- main ------------------------------------------------------------------------------------


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="e.g. W1,W3")
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no N=4e6, no 10k chain")
    ap.add_argument("--only", help="run these groups in this process: "
                    + ", ".join([*GROUPS, *ALIASES]))
    ap.add_argument("--json", action="store_true", help="JSON instead of tables")
    ap.add_argument("--settle", type=float, help="max s to wait for an idle machine per child")
    ap.add_argument("--retries", type=int, help="reruns of a child others disturbed")
    opts = ap.parse_args(argv)
    opts.repeats, opts.min_time = (3, 0.01) if opts.quick else (7, 0.05)
    opts.settle = (1 if opts.quick else 10) if opts.settle is None else opts.settle
    opts.cell_limit = 20 if opts.quick else 120
    opts.was_idle = True
    opts.retries = (0 if opts.quick else 1) if opts.retries is None else opts.retries
    opts.workloads = [w.strip().upper() for w in opts.workloads.split(",") if w.strip()]
    groups = [g.strip() for g in (opts.only or ",".join(GROUPS)).split(",") if g.strip()]
    opts.groups = [h for g in groups for h in ALIASES.get(g, [g])]
    for bad in set(opts.workloads) - set(WORKLOADS) or set(opts.groups) - set(GROUPS):
        ap.error(f"unknown workload or group: {bad}")
    return opts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["transforms"]:     # forward mode, vmap, remat: benchmarks/transforms.py
        import transforms
        return transforms.main(argv[1:])
    opts = parse(argv)
    if opts.json and opts.only:  # a child: records on stdout, nothing else
        cols = [c for g in opts.groups for c in GROUPS[g]]
        return measure(cols, opts.workloads, opts, lambda r: print(json.dumps(r), flush=True))
    info = machine_info(opts)
    if not opts.json:
        print_header(info, opts)
    records = [{"w": "W1", "row": r, "col": "mem floor", "metric": "run", "t": t}
               for r, t in info["floors"].items() if "W1" in opts.workloads]
    if opts.only:
        with cold_cache():
            measure([c for g in opts.groups for c in GROUPS[g]], opts.workloads, opts,
                    records.append)
    else:
        run_children(opts.groups, opts.workloads, opts, records.append)
    if opts.json:
        print(json.dumps({"info": info, "records": records}, indent=1))
        return
    print_tables(records, opts)


def print_tables(records, opts):
    """Sort the records into cells, warnings and background loads; print each workload."""
    res = {(r["w"], r["metric"], r["row"], r["col"]): r.get("t", r.get("na"))
           for r in records if "w" in r}
    warnings, loads = {}, {}
    for r in records:
        if "warn" in r:
            warnings.setdefault(r["warn"].split()[0], []).append(r["warn"])
        for w in r.get("ws", ()):
            loads.setdefault(w, {}).update(
                {c: r["load"] for c in GROUPS[r["group"]] if applies(c, w)})
    cols = [c for c in COLUMNS if any(k[3] == c for k in res)]
    for w in opts.workloads:
        print_workload(w, res, cols, warnings, loads, opts.quick)


if __name__ == "__main__":
    main()
