"""From optimized IR to a callable: fuse, plan memory, emit a module, compile it, cache it.

The module text is the cache key. It is written to a real file, `fg_<sha256>.py` in the cache
directory (FUSEGRAD_CACHE_DIR, else $XDG_CACHE_HOME/fusegrad or ~/.cache/fusegrad), and its
entry is `njit(cache=True)`, so Numba keeps the machine code next to it and a new process that
meets the same text loads instead of compiling. The hash covers the text and everything else
that shapes the machine code: the versions of fusegrad, Numba, NumPy and Python and the source
of the helper modules the text imports. Values that change without changing the code (sizes,
size-derived constants, constant arrays) are arguments, so they never go stale.

Robustness: the file is written to a temporary name and renamed, with a fixed mtime, so racing
processes write identical files and Numba's staleness stamp (mtime, size) agrees across them;
Numba writes its own cache files the same way. A file with the wrong text is rewritten, and a
cache entry Numba cannot read is deleted and compiled again. Compiled modules are also kept in
memory by key, so identical functions (or a new batch size) share one compilation.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
import types
import warnings
from pathlib import Path

import numpy as np

from ..ir.control import nested
from ..ir.core import Function
from ..passes.fusion import fuse
from ..passes.memory import plan_memory
from ..ir.evaluate import apply, eval_function
from ..runtime.signature import log_compile
from .. import version
from . import kernel_ir, loops
from .choose import (GLUE_MAX_ELEMENTS, GLUE_MAX_OPS, choose, glue_only,  # noqa: F401
                     numba_free, renderer)
from .buffers import Stack

# Numba itself (0.6 s to import), and the modules that need it, are imported where a function is
# compiled with it: the kernel IR never imports it.

FIXED_MTIME = 1_000_000_000          # every writer gives the module file the same stamp
_LOCK = threading.RLock()
_MODULES: dict[str, types.ModuleType] = {}
_HERE = Path(__file__).resolve().parent


def njit_options(kind: str, reduction: bool = False, parallel: bool = False) -> dict:
    """The one place that decides Numba's options for generated functions.

    error_model='numpy' everywhere: the Python model adds zero-division checks that stop
    vectorization. fastmath stays off except 'reassoc' in kernels with a reduction, which lets
    LLVM vectorize the accumulation (and nothing else: no nnan, no ninf, no contraction).
    Entries carry cache=True; the kernels they call are compiled into them, and only
    generated code calls kernels, so they go without the wrappers that let Python (or C) call
    them: those cost a third of a small kernel's compile time.
    """
    opts: dict = {"error_model": "numpy", "nogil": True,
                  "fastmath": {"reassoc"} if reduction else False}
    if kind == "entry":
        opts["cache"] = True
    else:
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    if parallel:
        opts["parallel"] = True
    return opts


def parallel_default() -> bool:
    return os.environ.get("FUSEGRAD_PARALLEL", "") not in ("", "0")


def cache_dir() -> Path:
    root = os.environ.get("FUSEGRAD_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fusegrad"


_WRITABLE: set = set()      # folders this process has written to
_PRIVATE: dict = {}         # cache folder that could not be written -> this process's own


def writable_cache_dir() -> Path:
    """The cache directory, or, when it cannot be created or written, a folder private to this
    process that is deleted at exit (one RuntimeWarning says so): modules are still compiled
    and loaded, only not kept for the next process. The compile worker is handed this folder,
    so the parent loads what the worker compiled."""
    folder = cache_dir()
    if folder in _WRITABLE:
        return folder
    if folder in _PRIVATE:
        return _PRIVATE[folder]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe.{os.getpid()}.{threading.get_ident()}"
        probe.write_bytes(b"")
        probe.unlink()
        _WRITABLE.add(folder)
        return folder
    except OSError as e:
        with _LOCK:
            if folder not in _PRIVATE:
                _PRIVATE[folder] = private = Path(tempfile.mkdtemp(prefix="fusegrad-"))
                warnings.warn(f"fusegrad: the cache directory {folder} cannot be written "
                              f"({e.strerror or e}); compiled modules go to {private}, "
                              f"which is deleted at exit. Set FUSEGRAD_CACHE_DIR to a "
                              f"writable folder to keep them.", RuntimeWarning, stacklevel=2)
        return _PRIVATE[folder]


@atexit.register
def _remove_private() -> None:
    """Registered before the compile worker's own handler (codegen/__init__ imports this module
    first), so it runs after every worker has stopped writing."""
    for private in _PRIVATE.values():
        shutil.rmtree(private, ignore_errors=True)


def forget_modules() -> None:
    """Drop the modules loaded so far (the compile worker's, once their files are written)."""
    with _LOCK:
        for module in _MODULES.values():
            sys.modules.pop(module.__name__, None)
        _MODULES.clear()


def versions() -> str:
    """Everything besides the text that decides the compiled code, as one header line."""
    import numba

    from . import blas, pool
    helpers = [(_HERE / name) for name in ("support.py", "mathlib.py", "mathlib_ops.py",
                                           "mathlib_arc.py", "math_tables.py", "blas.py",
                                           "cblas.py", "pool.py", "pool_bind.py")]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in helpers if p.exists()))
    return (f"fusegrad {version.__version__}, numba {numba.__version__}, numpy {np.__version__},"
            f" python {sys.version.split()[0]}, helpers {digest.hexdigest()[:16]},"
            f" blas {blas.DESCRIPTION}, pool {pool.DESCRIPTION}")


class Executable:
    """The numba backend's compiled function: `exe(leaves) -> list of arrays`."""

    precompiled = True      # False: host steps split the entry; segments compile when first run
    kind = "numba"          # or "kernel_ir", "glue": what compiled it
    loop = None             # a scan body's: (length, reverse, leaves) -> carry and ys

    def __init__(self, ir, source, kernels, clusters, run, path, fusion):
        self.ir, self.source, self.kernels, self.clusters = ir, source, kernels, clusters
        self.run, self.path, self.fusion = run, path, fusion

    def __call__(self, leaves) -> list:
        return self.run(leaves)

    def debug_values(self, leaves) -> dict:
        """Every IR value as compiled code computes it, for fusegrad.testing to find the first
        value where this backend and the interpreter diverge: the same ops, compiled again
        with every value made a result."""
        params = set(self.ir.params)
        values = [v for op in self.ir.ops for v in op.outputs if v not in params]
        probe = Function(f"{self.ir.name}_values", self.ir.params, self.ir.ops, values)
        return dict(zip(values, compile_numba(probe)(leaves)))


def compile_numba(ir: Function, parallel: bool | None = None, scan=None) -> Executable:
    """Compile an optimized Function (passes.pipeline.optimize: api.compile_function runs it)
    as choose.py decides: through the kernel IR (kernel_ir/, no Numba), as glue on the
    interpreter around compiled loops, or fused and generated as Numba source. With
    scan=(num_consts, num_carry), ir is a scan's body: on Numba the executable also runs the
    whole scan (`executable.loop`, loops.scan_source) where it can."""
    path, reason = choose(ir, scan)
    log_compile(f"choose {ir.name}: {path} ({reason})")
    if path == "kernel_ir":
        renderer()          # a FUSEGRAD_RENDERER naming no renderer raises, not falls back
    if path in _LLVM_PATHS:
        try:
            return _LLVM_PATHS[path](ir, scan)
        except Exception as e:  # noqa: BLE001 - Numba compiles it too, only slower
            log_compile(f"{path} failed for {ir.name} ({e}); using Numba")
    elif path == "glue":
        return _compile_glue(ir)
    from .emit import ModuleSource
    fusion = fuse(ir)
    parallel = parallel_default() if parallel is None else parallel
    ms = ModuleSource(fusion, plan_memory(fusion), njit_options, parallel)
    body = ms.build()
    loop = loops.scan_source(ms, *scan) if scan else None
    header = f"# fusegrad: generated from @{ir.name}; {versions()}\n"
    text = header + body + (loop[0] if loop else "")
    key = hashlib.sha256(text.encode()).hexdigest()
    if os.environ.get("FUSEGRAD_DEBUG", "") >= "3":
        print(f"// ---- generated source for @{ir.name} ----\n{text}")
    signatures = _signatures(ms)
    if loop and signatures:
        signatures = {"scan_loop": _loop_signature(loop[1])}
    module, path = load_module(text, key, ir.name, ms.kernel_count, signatures)
    env = (ms.syms.D, ms.syms.C, *[_const(fusion, c) for c in ms.consts],
           *[loops.host(op, compile_numba) if op.prim in loops.HOSTS else _host(op)
             for op in ms.hosts])
    executable = Executable(ir, text, ms.kernel_count, fusion.clusters, module.make_run(env),
                            path, fusion)
    executable.precompiled = bool(signatures)   # else segments compile on their first call
    if loop:
        executable.loop = module.make_loop(env[:2 + len(ms.consts)])
    return executable


def _compile_kernel_ir(ir) -> Executable:
    """The kernel IR (kernel_ir/) rendered to LLVM IR, or to Numba source (`renderer`)."""
    name, reason = renderer()
    log_compile(f"render {ir.name}: {name} ({reason})")
    cache = (load_module, njit_options, versions)
    return _compile_llvm(ir, lambda ir: kernel_ir.compile_kernel_ir(
        ir, compile_numba, renderer=name, cache=cache), "kernel_ir",
        f"kernel IR rendered to {'Numba' if name == 'numba' else 'LLVM'}")


_LLVM_PATHS = {"kernel_ir": lambda ir, scan: _compile_kernel_ir(ir)}


def _compile_llvm(ir, compile_, kind: str, what: str) -> Executable:
    start = time.perf_counter()
    run, text = compile_(ir)
    return _llvm_executable(ir, run, text, kind, what, start)


def _llvm_executable(ir, run, text, kind: str, what: str, start: float) -> Executable:
    """The Executable of a function fusegrad compiled with llvmlite alone, its text shown
    under FUSEGRAD_DEBUG=3 and its compile logged."""
    if os.environ.get("FUSEGRAD_DEBUG", "") >= "3":
        print(f"// ---- {what} for @{ir.name} ----\n{text}")
    log_compile(f"compile {ir.name}: {what}, {len(ir.ops)} ops, "
                f"{time.perf_counter() - start:.3f} s")
    executable = Executable(ir, text, 1, None, run, None, None)
    executable.kind = kind
    return executable


def without_numba(ir) -> bool:
    """Whether compile_numba compiles ir with llvmlite alone (the kernel IR, or glue around
    loops whose bodies it compiles): then compiling in the caller's thread is fast, and a child
    process would only repeat it (those modules are not cached on disk)."""
    path, _ = choose(ir)
    if path == "kernel_ir":
        return renderer()[0] == "llvm" and numba_free(ir)
    return path == "glue" and all(
        choose(fn, _scan_of(op))[0] == "kernel_ir" and numba_free(fn)
        for op in ir.ops if op.prim in loops.HOSTS for _, fn in nested(op))


def _scan_of(op):
    return (op.params["num_consts"], op.params["num_carry"]) if op.prim == "scan" else None


def _compile_glue(ir) -> Executable:
    """Control flow compiled (loops.host), the glue between run by the interpreter's ops."""
    hosts = {op: loops.host(op, compile_numba) for op in ir.ops if op.prim in loops.HOSTS}
    text = "\n\n".join(
        [f"# fusegrad: @{ir.name} is control flow and {len(ir.ops) - len(hosts)} glue ops: "
         f"the glue runs on the interpreter, each loop and branch compiled:"] +
        [f"# {op.prim} at {op.loc or '?'}, @{key}:\n{exe.source}"
         for op, host in hosts.items() for key, exe in host.compiled.items()])

    def run(leaves):
        return eval_function(ir, leaves, hosts)
    log_compile(f"compile {ir.name}: {len(hosts)} control-flow ops compiled, "
                f"{len(ir.ops) - len(hosts)} glue ops on the interpreter")
    executable = Executable(ir, text, 0, None, run, None, None)
    executable.kind = "glue"
    return executable


def _const(fusion, v) -> np.ndarray:
    return np.ascontiguousarray(fusion.producer[v].params["value"], dtype=v.type.np_dtype)


def _host(op):
    """A step run by the interpreter's implementation, between compiled segments."""
    prim, params = op.prim, op.params
    in_dtypes = [v.type.np_dtype for v in op.inputs]
    out_dtype = op.out.type.np_dtype

    def host(*args):
        out = apply(prim, [np.asarray(a, dt) for a, dt in zip(args, in_dtypes)], params)
        out = np.asarray(out, dtype=out_dtype)     # ascontiguousarray would make 0-d 1-d
        return out[()] if out.ndim == 0 else np.ascontiguousarray(out)
    host.__name__ = f"host_{prim}"
    return host


# -- loading ---------------------------------------------------------------------------------

def _signatures(ms) -> dict:
    """Numba signatures of the entry of a single-segment module (emit.ModuleSource), for
    compiling it at once."""
    import numba
    if ms.hosts:
        return {}
    values, uses_a, uses_d, uses_c, uses_tasks = ms.segment_args["entry"]
    sig = [_numba_type(v) for v in values]
    sig += [numba.types.Array(numba.int64, 1, "C")] * (uses_a + uses_d)
    sig += [numba.types.Array(numba.float64, 1, "C")] * uses_c
    sig += [numba.types.Array(numba.int64, 1, "C")] * uses_tasks
    return {"entry": tuple(sig)}


def _loop_signature(params) -> tuple:
    """Numba signature of scan_loop (loops.scan_source says what its parameters hold)."""
    import numba

    def array(dtype, ndim):
        return numba.types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C")

    sig = [numba.int64, numba.boolean]
    for p in params:
        if p in ("A", "D", "TASKS"):
            sig.append(array(np.int64, 1))
        elif p == "C":
            sig.append(array(np.float64, 1))
        elif isinstance(p, tuple):         # ("stacked", v): xs or ys, an axis more than v
            sig.append(array(p[1].type.np_dtype, p[1].type.ndim + 1))
        elif isinstance(p, Stack):
            sig.append(array(p.type.np_dtype, p.type.ndim))
        else:
            sig.append(_numba_type(p))
    return tuple(sig)


def _numba_type(v):
    import numba
    if v.shape == ():
        return {"f32": numba.float64, "f64": numba.float64, "i64": numba.int64,
                "bool": numba.boolean}[v.dtype]
    return numba.types.Array(numba.from_dtype(v.type.np_dtype), v.type.ndim, "C")


OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "1000"}


def start_threads() -> None:
    """Start Numba's thread pool with OPENMP_DEFAULTS for the variables the user left unset
    (codegen/__init__ says why). libgomp reads them once, when it loads; they are set for that
    moment only, so the process's environment is as the user left it."""
    from numba.np.ufunc import parallel
    if parallel._is_initialized:
        return
    added = {k: v for k, v in OPENMP_DEFAULTS.items() if k not in os.environ}
    os.environ.update(added)
    try:
        parallel._launch_threads()
    finally:
        for k in added:
            os.environ.pop(k, None)


def load_module(text: str, key: str, name: str, kernels: int, signatures: dict):
    """Import the module with this text (from memory, disk, or freshly compiled)."""
    with _LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module, module.__file__
        start_threads()
        start = time.perf_counter()
        path = _write(text, key)
        try:
            module, hits = _import_and_compile(text, path, key, signatures)
        except Exception:  # noqa: BLE001 - an unreadable cache entry: rebuild it once
            _purge_numba_cache(path)
            module, hits = _import_and_compile(text, path, key, signatures)
        elapsed = time.perf_counter() - start
        if signatures and hits:
            log_compile(f"load {name} from disk cache ({elapsed:.3f} s)")
        else:
            log_compile(f"compile {name}: {kernels} kernels, {elapsed:.3f} s (cache miss)")
        _MODULES[key] = module
        return module, str(path)


def _import_and_compile(text, path, key, signatures):
    modname = f"fg_{key[:32]}"
    module = types.ModuleType(modname)
    module.__file__ = str(path)
    sys.modules[modname] = module
    exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - our own module
    hits = True
    with _deep_recursion():
        for fname, sig in signatures.items():
            dispatcher = getattr(module, fname)
            dispatcher.compile(sig)
            hits = hits and sum(dispatcher.stats.cache_hits.values()) > 0
    return module, hits


@contextlib.contextmanager
def _deep_recursion(limit: int = 100_000):
    """Numba's SSA pass recurses once per basic block, and inlined math makes many blocks."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _write(text: str, key: str) -> Path:
    """The module file for key, (re)written atomically unless it already holds text."""
    path = writable_cache_dir() / f"fg_{key[:32]}.py"
    try:
        if path.is_file() and path.read_text() == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text)
        os.utime(tmp, (FIXED_MTIME, FIXED_MTIME))
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(f"fusegrad: cannot write the generated module {path} ({e}); set "
                      f"FUSEGRAD_CACHE_DIR to a writable folder") from e
    finally:
        tmp.unlink(missing_ok=True)         # also when the compile worker is told to stop
    return path


def _purge_numba_cache(path: Path):
    """Delete Numba's cache files for one module (after they failed to load)."""
    folder = path.parent / "__pycache__"
    for f in folder.glob(path.stem + ".*"):
        try:
            f.unlink()
        except OSError:
            pass
