"""Compiling in a child process, for tiered execution (api.Tiered).

A compile in a thread of the caller's process shares the GIL with the caller: Numba types and
lowers in Python, so a caller that keeps calling (on the interpreter, in Python too) halves the
compile's speed and the compile slows the caller (benchmarks/compile_time.py: chain380 took
78 s to switch instead of 30 s). A child process has its own interpreter and core, and its
memory (a long program's compile can take gigabytes) is returned when it exits.

The child gets the optimized Function (pickled) on stdin and runs `compile_numba` on it, which
writes the generated module and Numba's machine code into the disk cache (compile.py). The
module text depends only on the Function and the environment, both the child's too, so the
parent's own `compile_numba` afterwards finds that text and loads instead of compiling. A
module with host steps compiles its segments on their first call, which the child cannot make:
it says so, and the parent warms the compiled entry with a call of its own (api.Tiered).

    python -m fusegrad.codegen.background < function.pickle
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

PRECOMPILED = "precompiled"     # the child's last stdout line when the entry is in the cache


def compile_in_child(fn, nests_ok: bool = True) -> bool:
    """Compile fn in a child process, filling the disk cache; True when the whole entry was
    compiled there (False: its host segments compile on their first call). nests_ok=False:
    with Numba, even where the loop nests would take it. Raises RuntimeError with the
    child's last error line when the child fails."""
    env = dict(os.environ, **({} if nests_ok else {"FUSEGRAD_NESTS": "0"}))
    proc = subprocess.run([sys.executable, "-m", "fusegrad.codegen.background"],
                          input=pickle.dumps(fn), capture_output=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise RuntimeError(f"the compile process exited with {proc.returncode}: {lines[-1]}")
    return proc.stdout.decode().strip().endswith(PRECOMPILED)


def _main():
    from .compile import compile_numba
    fn = pickle.load(sys.stdin.buffer)
    executable = compile_numba(fn)
    print(PRECOMPILED if executable.precompiled else "lazy")


if __name__ == "__main__":
    _main()
