"""The ordered pass pipeline from a traced (and differentiated) Function to optimized IR.

FUSEGRAD_DEBUG=2 prints the IR after every pass; any FUSEGRAD_DEBUG other than 0 verifies it.
"""

from __future__ import annotations

import os

from ..ir.verify import verify
from .cse import cse
from .dce import dce
from .lower import lower, lower_barriers
from .simplify import simplify

PASSES: list = [           # (name, Function -> Function), in order
    ("lower", lower),
    ("simplify", simplify),
    ("cse", cse),
    ("dce", dce),
    ("lower_barriers", lower_barriers),
]


def optimize(fn):
    debug = os.environ.get("FUSEGRAD_DEBUG", "")
    for name, run in PASSES:
        fn = run(fn)
        if debug >= "2":
            print(f"// ---- after {name} ----\n{fn}")
        if debug not in ("", "0"):
            verify(fn)
    return fn
