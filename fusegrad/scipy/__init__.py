"""fusegrad's implementations of SciPy's public functions, and the hook that routes users' SciPy
calls on tensors and tracers to them (issue 14).

Each module of this package (special.py, stats.py, signal.py, and linalg.py when present) ends
with `HANDLED`, a dict from a SciPy function's public dotted name ("scipy.special.logsumexp",
"scipy.stats.norm.logpdf") to fusegrad's implementation; `covered_names()` lists them all, and
docs/numpy.md is generated from them. How a covered name reaches its implementation:

* SciPy ufuncs (gammaln, erfinv, xlogy, expit: most of scipy.special) already dispatch: NumPy
  calls the tensor's or tracer's __array_ufunc__, which looks the ufunc up in
  fusegrad.numpy.HANDLED_UFUNCS; the hook adds it there.
* Any other function (logsumexp, softmax, scipy.signal.convolve) is replaced in its SciPy
  module, and in the module that defines it, by a wrapper that calls fusegrad's implementation
  when an argument is a tensor or tracer (or a list holding one) and SciPy's original otherwise.
  functools.wraps keeps its name, signature and docstring. An implementation marked `traced`
  (odeint, solve_ivp: their func may close over traced values) runs whenever a trace or an
  eager transform is under way.
* A method of a distribution object (scipy.stats.norm.logpdf: `norm` is an instance of
  norm_gen) is wrapped on the object's class, so frozen distributions, `norm(mu, s).logpdf(x)`,
  which call the class's methods, dispatch too. A subclass (erlang of gamma) keeps SciPy's.
  Calling the object is its `__call__` (scipy.stats.multivariate_normal.__call__ makes a frozen
  distribution of tensors or tracers).
* A method named on a class (SciPy's frozen multivariate normal, by its module's path) is
  wrapped there, and fusegrad's implementation gets the instance first.

When. fusegrad never imports SciPy itself (scipy.stats costs ~2 s). Importing fusegrad installs
the hook into the SciPy modules already imported, and puts a finder on sys.meta_path that
installs it into scipy.special, scipy.stats, ... the moment each finishes importing, before
the importer's next line runs. So `scipy.special.logsumexp(x)`, SciPy's ufuncs and the
distributions' methods work whatever the import order, and `from scipy.special import
logsumexp` works when it runs after `import fusegrad`. For the other order, importing fusegrad
also rebinds the module globals that hold a SciPy original (the `logsumexp` a module imported
above its `import fusegrad`) to the wrapper. What remains is a SciPy original kept elsewhere (a
local variable, a default argument) and called on a tensor or tracer: it converts its argument
with __array__, which raises a ConversionError that names the function and says to import
fusegrad first (conversion.py). A SciPy function with no entry here raises the same error
naming it; there is never a silent constant.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
import types
import warnings

import numpy as np

from .. import conversion
from .. import numpy as fnp
from ..dispatch import level
from ..state import busy
from . import integrate, signal, special, stats

MODULES = [special, stats, signal, integrate]
if importlib.util.find_spec(f"{__name__}.linalg") is not None:     # another engineer's, if there
    from . import linalg
    MODULES.append(linalg)


def _merge(modules) -> dict:
    merged = {}
    for module in modules:
        for name, fn in module.HANDLED.items():
            if name in merged:
                raise ValueError(f"{name} is implemented twice, in {module.__name__} too")
            merged[name] = fn
    return merged


HANDLED = _merge(MODULES)


def covered_names() -> list:
    """The SciPy functions fusegrad implements, by public dotted name, sorted."""
    return sorted(HANDLED)


# -- the wrappers -----------------------------------------------------------------------------

def _boxed(values) -> bool:
    """Whether any value is, or a list or tuple among them holds, a tensor or tracer."""
    for x in values:
        if level(x) or isinstance(x, (list, tuple)) and _boxed(x):
            return True
    return False


def _function(original, impl):
    @functools.wraps(original)
    def dispatching(*args, **kwargs):
        if _boxed(args) or _boxed(kwargs.values()) or busy[0] and hasattr(impl, "traced"):
            return impl(*args, **kwargs)
        return original(*args, **kwargs)
    dispatching._fusegrad_impl = impl
    return dispatching


def _method(cls, original, impl, pass_self=False):
    @functools.wraps(original)
    def dispatching(self, *args, **kwargs):
        if type(self) is cls and (_boxed(args) or _boxed(kwargs.values())):
            return impl(self, *args, **kwargs) if pass_self else impl(*args, **kwargs)
        return original(self, *args, **kwargs)
    dispatching._fusegrad_impl = impl
    return dispatching


# -- installing them --------------------------------------------------------------------------

def _prefixes(name: str) -> list:
    """The dotted prefixes of name that may be modules ("scipy.stats" of
    "scipy.stats.norm.logpdf"), longest first; SciPy's top-level package is never one."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 1, -1)]


_WATCHED = frozenset(p for name in HANDLED for p in _prefixes(name))


def _resolve(name, finished):
    """(owner, attribute, current value) for name, or None while its module is not imported
    (or still executing, unless it is `finished`). Walking a module never imports: SciPy's
    lazy submodules stay unloaded."""
    for prefix in _prefixes(name):
        module = sys.modules.get(prefix)
        if module is None:
            continue
        spec = getattr(module, "__spec__", None)
        if prefix != finished and getattr(spec, "_initializing", False):
            return None
        owner, parts = module, name[len(prefix) + 1:].split(".")
        for part in parts[:-1]:
            owner = (vars(owner).get(part) if isinstance(owner, types.ModuleType)
                     else getattr(owner, part, None))
            if owner is None:
                return None
        value = (vars(owner).get(parts[-1]) if isinstance(owner, types.ModuleType)
                 else getattr(owner, parts[-1], None))
        return None if value is None else (owner, parts[-1], value)
    return None


def _install_one(name, impl, owner, attr, value) -> object | None:
    """Hook one name up; returns the SciPy original a wrapper replaced (None otherwise)."""
    if isinstance(value, np.ufunc):
        fnp.HANDLED_UFUNCS[value] = impl
        return None
    if hasattr(value, "_fusegrad_impl"):            # already wrapped
        return None
    if isinstance(owner, types.ModuleType):
        wrapper = _function(value, impl)
        setattr(owner, attr, wrapper)
        home = sys.modules.get(getattr(value, "__module__", None) or "")
        if home is not None and vars(home).get(value.__qualname__) is value:
            setattr(home, value.__qualname__, wrapper)      # so pickle finds it by its name
        _WRAPPERS[value] = wrapper
        return value
    if isinstance(owner, type):     # a method of a class (a frozen distribution's)
        setattr(owner, attr, _method(owner, value, impl, pass_self=True))
        return None
    cls = type(owner)
    original = getattr(cls, attr)
    setattr(cls, attr, _method(cls, original, impl))
    return None


_WRAPPERS: dict = {}        # SciPy original -> its wrapper


def install(finished: str | None = None) -> list:
    """Hook every covered name whose SciPy module is imported (`finished`: the module that has
    just executed, still marked as initializing); names already hooked are left alone. Returns
    the SciPy originals replaced by wrappers this time."""
    replaced = []
    for name, impl in HANDLED.items():
        found = _resolve(name, finished)
        if found is not None:
            original = _install_one(name, impl, *found)
            if original is not None:
                replaced.append(original)
    return replaced


_SKIP = ("scipy", "numpy", "fusegrad", "numba", "llvmlite")


def _rebind_early_imports(originals) -> None:
    """Module globals bound to a SciPy original before fusegrad was imported (a module's `from
    scipy.special import logsumexp` above its `import fusegrad`) now name the wrapper."""
    wrappers = {id(f): _WRAPPERS[f] for f in originals}
    for name, module in list(sys.modules.items()):
        if module is None or name.partition(".")[0] in _SKIP:
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            wrapper = wrappers.get(id(value))
            if wrapper is not None and wrapper.__wrapped__ is value:
                namespace[key] = wrapper


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched SciPy module it wraps the real loader so that the
    hook is installed as soon as the module has executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Installing(spec.loader)
        return spec


class _Installing(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader    # SciPy sees its own loader
        self.loader.exec_module(module)
        try:
            install(finished=module.__name__)
        except Exception as e:  # noqa: BLE001 - never break the user's import of SciPy
            warnings.warn(f"fusegrad could not hook {module.__name__} ({e!r}); its functions "
                          f"will raise on tensors and tracers", RuntimeWarning, stacklevel=2)


if not any(isinstance(f, _InstallAfterImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _InstallAfterImport())
conversion.SCIPY_COVERED.update(HANDLED)
_rebind_early_imports(install())

__all__ = ["HANDLED", "covered_names", "install", "integrate", "signal", "special", "stats"]
