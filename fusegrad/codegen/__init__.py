"""The numba backend: fused loop kernels emitted as Python source, compiled by Numba, cached
on disk. `compile_numba(fn)` turns an optimized Function into an Executable (the caller,
api.compile_function, runs the pass pipeline; codegen never does).

Reproducibility: on one machine results are bit-identical from run to run and for any thread
count. Parallel kernels split their work into fixed-size chunks (or rows) whose partial
reductions are folded in a fixed order, independent of how many threads ran them. Across
machines the last bits of reductions may differ: kernels with a reduction allow reassociation
(fastmath 'reassoc') so LLVM can vectorize the accumulation, and the vector width it picks
(AVX-512, AVX2, SSE) decides the order of the additions.

Buffers: the runner keeps the arrays a call allocated in a pool and hands one to the next call
only when the pool holds the last reference to it, so results the caller keeps are never
overwritten and workspace is not allocated (and page-faulted) again on every call.

Threads: parallel kernels run on Numba's OpenMP pool and matmuls on NumPy's OpenBLAS pool;
big 2-D kernels that would otherwise run serially run as parts on the OpenBLAS pool (pool.py).
GNU OpenMP threads spin for up to 300 000 rounds after each parallel loop by default, and on a
machine with few cores they take the cores OpenBLAS threads need (an MLP step with one parallel
kernel ran 3x slower on 2 cores); threads that sleep at once, though, take 20-40 us to wake,
which doubles a 10**4-element kernel. So, when Numba loads OpenMP and unless set already,
OMP_WAIT_POLICY=PASSIVE with GOMP_SPINCOUNT=1000: a thread spins a few microseconds, enough
for back-to-back kernels, then yields its core. The two variables are set only while Numba
loads OpenMP (compile.start_threads) and removed again: the user's environment stays theirs."""

from .compile import Executable, cache_dir, compile_numba, njit_options

__all__ = ["Executable", "cache_dir", "compile_numba", "njit_options"]
