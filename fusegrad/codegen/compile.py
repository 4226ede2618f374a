"""From optimized IR to a callable: `compile_numba(fn)` compiles it as choose.py decides (the
kernel IR, rendered to LLVM or to Numba source), and keeps the Numba renderer's modules.

A Numba module's text is its cache key. It is written to a real file, `fg_<sha256>.py` in the
cache directory (FUSEGRAD_CACHE_DIR, else $XDG_CACHE_HOME/fusegrad or ~/.cache/fusegrad), and
its entries are `njit(cache=True)`, so Numba keeps the machine code next to it and a new
process that meets the same text loads instead of compiling. The text's header holds
everything else that shapes the machine code (`versions`: fusegrad, Numba, NumPy, Python and
the helper modules the text imports). The file is written to a temporary name and renamed,
with a fixed mtime, so racing processes write identical files and Numba's staleness stamp
(mtime, size) agrees across them. A cache entry Numba cannot read is deleted and compiled
again. Modules are also kept in memory by key. LLVM modules are compiled in memory only
(kernel_ir/jit.py): that takes a fraction of a second.

Logging: the caller hands in `log(message)` (fusegrad's FUSEGRAD_LOG=compile lines); codegen
prints nothing itself.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
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

from .. import version
from ..ir.core import Function
from ..ir.evaluate import eval_function
from . import kernel_ir
from .choose import choose, renderer

# Numba itself (0.6 s to import) is imported only where the Numba renderer is used.

FIXED_MTIME = 1_000_000_000          # every writer gives the module file the same stamp
_LOCK = threading.RLock()
_MODULES: dict[str, types.ModuleType] = {}
_HERE = Path(__file__).resolve().parent


def quiet(message: str) -> None:
    """The log of a caller that hands in none."""


def njit_options(kind: str, parallel: bool = False) -> dict:
    """Numba's options for the Numba renderer's functions: error_model='numpy' (the Python
    model adds zero-division checks that stop vectorization), no fastmath (the same bits as
    the LLVM rendering). Entries ("entry") carry cache=True; the functions they call are
    compiled into them, and go without the wrappers that let Python call them (a third of a
    small function's compile time)."""
    opts: dict = {"error_model": "numpy", "nogil": True, "fastmath": False}
    if kind == "entry":
        opts["cache"] = True
    else:
        opts.update(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    if parallel:
        opts["parallel"] = True
    return opts


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
    """Everything besides the text that decides a Numba module's machine code, as one line."""
    import numba

    from . import cblas
    helpers = [_HERE / name for name in ("math_tables.py", "cblas.py")]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in helpers))
    return (f"fusegrad {version.__version__}, numba {numba.__version__}, numpy {np.__version__},"
            f" python {sys.version.split()[0]}, helpers {digest.hexdigest()[:16]},"
            f" blas {cblas.DESCRIPTION}")


class Executable:
    """The numba backend's compiled function: `exe(leaves) -> list of arrays`; `kind` says
    what compiled it (choose.py's path), `source` is its text."""

    def __init__(self, ir, source, run, kind):
        self.ir, self.source, self.run, self.kind = ir, source, run, kind

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


def compile_numba(ir: Function, scan=None, log=quiet) -> Executable:
    """Compile an optimized Function (passes.pipeline.optimize: api.compile_function runs it)
    as choose.py decides: through the kernel IR, rendered as `renderer` says, or on the
    interpreter. scan=(num_consts, num_carry) when ir is a scan's body; log(message) takes
    the lines FUSEGRAD_LOG=compile prints."""
    path, reason = choose(ir, scan)
    log(f"choose {ir.name}: {path} ({reason})")
    if path == "interp":
        return Executable(ir, f"# fusegrad: @{ir.name} runs on the interpreter ({reason})\n",
                          lambda leaves: eval_function(ir, list(leaves)), path)
    name, why = renderer()
    log(f"render {ir.name}: {name} ({why})")
    start = time.perf_counter()
    cache = (functools.partial(load_module, log=log), njit_options, versions)
    run, text = kernel_ir.compile_kernel_ir(
        ir, functools.partial(compile_numba, log=log), renderer=name, cache=cache)
    what = f"kernel IR rendered to {'Numba' if name == 'numba' else 'LLVM'}"
    if os.environ.get("FUSEGRAD_DEBUG", "") >= "3":
        print(f"// ---- {what} for @{ir.name} ----\n{text}")
    log(f"built {ir.name}: {what}, {len(ir.ops)} ops, {time.perf_counter() - start:.3f} s")
    return Executable(ir, text, run, path)


def without_numba() -> bool:
    """Whether compile_numba compiles with llvmlite alone (the LLVM renderer): then compiling
    in the caller's thread is fast, and a compile process would only repeat it."""
    return renderer()[0] == "llvm"


# -- the Numba renderer's modules --------------------------------------------------------------

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


def load_module(text: str, key: str, name: str, kernels: int, signatures: dict, log=quiet):
    """Import the module with this text (from memory, disk, or freshly compiled), its
    functions `signatures` names compiled for those argument types."""
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
            log(f"load {name} from disk cache ({elapsed:.3f} s)")
        else:
            log(f"compile {name}: {kernels} kernels, {elapsed:.3f} s (cache miss)")
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
