"""Where a cold compile goes, stage by stage, for the programs of compile_time.py.

    python benchmarks/compile_stages.py --programs chain1500,mlp,lstm,hmm,rnn_scan

Each program runs in a fresh child with empty FUSEGRAD_CACHE_DIR and NUMBA_CACHE_DIR and
tiered execution off. The child wraps fusegrad's stage functions with timers: trace
(api.trace_signature), passes (passes.pipeline.optimize), Numba (compile.load_module, under
FUSEGRAD_RENDERER=numba), and the kernel IR: built (kernel_ir.build), rewritten
(rewrite.optimize), rendered (run.source) and compiled by LLVM (jit.machine_code); "other" is
the rest of the first call. Nested bodies add into the same stages.
"""

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ("trace", "passes", "numba", "kir build", "kir rewrite", "kir render", "LLVM")


def child(name):
    sys.path[:0] = [os.path.dirname(HERE), HERE]
    import compile_time

    import fusegrad.api as api
    import fusegrad.codegen.compile as compile_
    import fusegrad.codegen.kernel_ir as kernel_ir
    import fusegrad.codegen.kernel_ir.rewrite as rewrite
    import fusegrad.codegen.kernel_ir.run as run
    import fusegrad.passes.pipeline as pipeline
    spent = collections.Counter()

    def timed(owner, attr, stage):
        inner = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[stage] += time.perf_counter() - start
        setattr(owner, attr, wrapper)

    for owner, attr, stage in ((api, "trace_signature", "trace"), (pipeline, "optimize", "passes"),
                               (compile_, "load_module", "numba"),
                               (kernel_ir, "build", "kir build"),
                               (rewrite, "optimize", "kir rewrite"),
                               (run, "source", "kir render"), (run, "machine_code", "LLVM")):
        timed(owner, attr, stage)
    result = compile_time.child(name, "fusegrad")
    return {"first": result["first"], "ok": result["ok"], **spent,
            "other": result["first"] - sum(spent.values())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default="chain1500,mlp,lstm,hmm,rnn_scan")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        print(json.dumps(child(opts.child)))
        return
    print("| program | " + " | ".join(STAGES) + " | other | first call |")
    print("|---|" + "---:|" * (len(STAGES) + 2))
    for name in opts.programs.split(","):
        cache = tempfile.mkdtemp(prefix="fg-stages-")
        env = dict(os.environ, FUSEGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache,
                   FUSEGRAD_TIERED="0")
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                                  capture_output=True, text=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if proc.returncode != 0:
            print(f"| {name} | failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]} |")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        cells = [f"{r[s]:.2f}" if s in r else "-" for s in STAGES]
        wrong = "" if r["ok"] else " WRONG"
        cells += [f"{r['other']:.2f}", f"{r['first']:.2f}{wrong}"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
