"""The ordered pass pipeline from a traced (and differentiated) Function to optimized IR."""

from __future__ import annotations

import os

PASSES: list = []          # (name, Function -> Function), filled as passes land


def optimize(fn):
    debug = os.environ.get("FUSEGRAD_DEBUG", "")
    for name, run in PASSES:
        fn = run(fn)
        if debug >= "2":
            print(f"// ---- after {name} ----\n{fn}")
    return fn
