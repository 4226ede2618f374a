"""The numba backend: `compile_numba(fn)` turns an optimized Function into an Executable (the
caller, api.compile_function, runs the pass pipeline; codegen never does) through the kernel IR
(kernel_ir/), rendered to LLVM IR by default or to Numba source (FUSEGRAD_RENDERER=numba);
choose.py says which path and why.

Reproducibility: on one machine results are bit-identical from run to run and for any thread
count, and both renderings give the same bits: parallel loops split their work into fixed
chunks whose partial reductions are folded in a fixed order. Matrix products call the CBLAS
NumPy links (cblas.py), so they give np.matmul's bits.

Threads: the LLVM rendering's parallel loops run by chunks on kernel_ir/threads.py's workers,
the Numba rendering's on Numba's OpenMP pool. GNU OpenMP threads spin for up to 300 000 rounds
after each parallel loop by default, and on a machine with few cores they take the cores
OpenBLAS threads need. So, when Numba loads OpenMP and unless set already,
OMP_WAIT_POLICY=PASSIVE with GOMP_SPINCOUNT=1000: a thread spins a few microseconds, enough
for back-to-back loops, then yields its core. The two variables are set only while Numba loads
OpenMP (compile.start_threads) and removed again: the user's environment stays theirs."""

from .compile import Executable, cache_dir, compile_numba, njit_options

__all__ = ["Executable", "cache_dir", "compile_numba", "njit_options"]
