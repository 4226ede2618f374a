"""docs/numpy.md, written from the HANDLED tables: every NumPy and SciPy name fusegrad handles.

`python -m fusegrad.numpy.docs` prints the page; `python -m fusegrad.numpy.docs --write` writes
docs/numpy.md. tests/test_numpy_docs.py fails when the file and the tables differ, so adding a
function to fusegrad.numpy (or fusegrad.scipy) means regenerating the page.

The page has three parts:
* NumPy: one table per module of fusegrad.numpy (in fusegrad.numpy.MODULES order), one row per
  key of its HANDLED dict, by the name users write (`np.tanh`, `np.linalg.norm`); the SciPy
  ufuncs a module may handle (`scipy.special.expit`) are listed under it by their SciPy name.
* SciPy: `fusegrad.scipy.covered_names()` when that package defines it, else the keys of the
  HANDLED dicts of its modules; nothing when fusegrad.scipy is absent or empty.
* Deliberately unsupported: the hand-written UNSUPPORTED table. A name in it that becomes
  handled drops out of it by itself, and a workaround that names a function (`{np.x}`) says
  whether that function is supported yet.

This module imports fusegrad.numpy, so fusegrad.numpy's __init__ must never import it (that
would be an import cycle, which tests/test_layers.py rejects); only the command line and the
test use it.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from pathlib import Path

import numpy as np

from .. import numpy as fnp

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "numpy.md"
COMMAND = "python -m fusegrad.numpy.docs --write"

# module of fusegrad.numpy -> (heading, introduction); a module not listed gets its name.
SECTIONS = {
    "elementwise": ("Elementwise", "Ufuncs broadcast their operands with NumPy's rules and "
                    "promote dtypes as NumPy 2 does (Python scalars are weak)."),
    "shapes": ("Shapes", ""),
    "joining": ("Joining and splitting", ""),
    "reductions": ("Reductions and scans", "`axis` (an int, a tuple, negative, or None), "
                   "`keepdims` and `dtype` as NumPy's."),
    "linalg": ("Linear algebra", ""),
    "contractions": ("Contractions", ""),
    "indexing": ("Indexing", "`x[key]` on a tensor or tracer: basic slicing, integers, "
                 "None/newaxis, Ellipsis and integer arrays (`x[mask]` with a boolean mask is "
                 "refused: see below)."),
    "rounding": ("Rounding and remainders", ""),
    "constructors": ("Constructors", "Inside fg.jit and eager transforms these record: "
                     "`np.zeros_like(x)` is an op, not a constant."),
    "special": ("Special functions", ""),
}

_NAMESPACES = {
    "numpy": ("numpy", "numpy.linalg", "numpy.fft", "numpy.random"),
    "scipy": ("scipy.special", "scipy.linalg", "scipy.stats", "scipy.signal", "scipy"),
}

# (names or descriptions, why, instead). Entries starting with "np." or "scipy." are names:
# they drop out once handled. In `instead`, {np.name} becomes the name, marked if unsupported.
UNSUPPORTED = [
    (("complex64 and complex128 arrays", "np.real", "np.imag", "np.conj", "np.conjugate",
      "np.angle", "np.fft.fft", "np.fft.ifft", "np.fft.rfft", "np.fft.irfft", "np.fft.fft2",
      "np.fft.fftn"),
     "fusegrad's dtypes are float32, float64, int64 and bool (smaller integers and float16 are "
     "widened to these; complex arrays raise TypeError): the IR, the formula table and the "
     "kernels are real-valued.",
     "Carry real and imaginary parts as two float arrays; a short DFT is a matmul with cos and "
     "sin matrices."),
    (("np.unique", "np.nonzero", "np.argwhere", "np.flatnonzero", "np.extract", "np.compress",
      "np.trim_zeros", "`x[mask]` (boolean-mask indexing)"),
     "The result's shape depends on the values, and shapes are static in the IR: one compiled "
     "program per input signature.",
     "`np.where(mask, x, 0)` (or `x * mask`) keeps the shape; a masked mean is "
     "`np.sum(np.where(mask, x, 0)) / np.sum(mask)`. On concrete data, call them outside the "
     "traced function."),
    (("`np.add(a, b, out=a)` with a traced value written into a NumPy array made outside "
      "the traced function",
      "ufunc methods: `np.add.reduce`, `.accumulate`, `.reduceat`, `.outer`, `.at`"),
     "Writing a tensor or traced value into a NumPy array would drop its gradient. (`out=` "
     "a traced array, or an array made by np.zeros and friends inside the traced function, "
     "is an in-place update by functionalization; an eager tensor's own `out=` is one "
     "recorded in-place write: docs/design.md, \"In-place operations\".)",
     "`a = a + b`; {np.sum}, {np.prod}, {np.max} for `reduce`, {np.cumsum} for "
     "`add.accumulate`, {np.outer} or broadcasting (`a[:, None] * b`) for `outer`, item "
     "assignment `x[idx] = v` with distinct indices for `at`."),
    (("all of `np.random` (`np.random.normal`, `np.random.default_rng().normal`, ...)",),
     "Draws are not traced: under fg.jit a draw inside the function happens once, while "
     "tracing, and is frozen into the compiled program as a constant (fusegrad warns with "
     "fg.TracerRandomWarning); eagerly, draws are NumPy arrays, constants to the tape.",
     "Draw outside the function and pass the noise in as an argument."),
    (("object arrays", "strings (`np.str_`, `np.char.*`)", "`np.datetime64`, "
      "`np.timedelta64`", "structured (record) dtypes"),
     "Not numbers: the IR's dtypes are float32, float64, int64 and bool.",
     "Keep them outside the traced function; pass numeric arrays (timestamps as float64 "
     "seconds, categories as int64 codes)."),
    (("np.linalg.eig", "np.linalg.eigvals"),
     "A non-symmetric matrix has complex eigenvalues and eigenvectors, and complex dtypes are "
     "not supported.",
     "{np.linalg.eigh} / {np.linalg.eigvalsh} for symmetric matrices."),
    (("np.polyfit",),
     "Not implemented (its column scaling, rank warning and `cov=` are NumPy's own).",
     "{np.linalg.lstsq} on the design matrix "
     "`np.stack([x**k for k in range(deg, -1, -1)], axis=-1)`."),
    (("np.interp",),
     "Not implemented: the lookup is a search of the data (np.searchsorted).",
     "On a uniform grid: the index is `np.floor((x - x0) / dx).astype(np.int64)` (clipped), "
     "then {np.take} and linear weights."),
    (("np.vectorize", "np.frompyfunc", "np.apply_along_axis", "np.piecewise"),
     "They call a Python function per element or slice through NumPy's own machinery, which "
     "needs concrete values.",
     "Write the function on whole arrays: broadcasting, and {np.where} for branches."),
]


# ---- names ----------------------------------------------------------------------------------

def public_name(obj) -> str:
    """The dotted name users write for a NumPy/SciPy function or ufunc: "numpy.linalg.norm".

    A string key (fusegrad.scipy's HANDLED dicts are keyed by name) is its own name.
    """
    if isinstance(obj, str):
        return obj
    name = getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None) or ""
    root = module.partition(".")[0]
    public = module and not any(part.startswith("_") for part in module.split("."))
    candidates = [module] if public else []         # scipy.special._logsumexp is private
    candidates += [ns for r in (root, "numpy", "scipy") for ns in _NAMESPACES.get(r, ())]
    for ns in dict.fromkeys(candidates):
        mod = _module(ns)
        if name and mod is not None and getattr(mod, name, None) is obj:
            return f"{ns}.{name}"
    raise ValueError(f"no public NumPy or SciPy name for {obj!r}")


def _module(name: str):
    if name in sys.modules:
        return sys.modules[name]
    if name.partition(".")[0] not in ("numpy", "scipy"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def display(name: str) -> str:
    return "np." + name[len("numpy."):] if name.startswith("numpy.") else name


def _impl_name(fn, namespace, prefix: str, short: str) -> str:
    """How to call the implementation directly: `fnp.tanh`, else its module and qualname."""
    if getattr(namespace, short, None) is fn:
        return f"{prefix}.{short}"
    name = getattr(fn, "__name__", "")
    if name and not name.startswith("_") and getattr(namespace, name, None) is fn:
        return f"{prefix}.{name}"
    full = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return "fnp." + full[len("fusegrad.numpy."):] if full.startswith("fusegrad.numpy.") else full


def _summary(fn) -> str:
    """The first sentence of the implementation's docstring (its conventions), on one line."""
    doc = (getattr(fn, "__doc__", None) or "").strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in doc.splitlines())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).replace("|", "\\|")


# ---- the tables -----------------------------------------------------------------------------

def numpy_rows() -> dict:
    """{module short name: [(display name, kind, implementation, summary)]}, rows sorted."""
    out = {}
    for module in fnp.MODULES:
        short = module.__name__.rpartition(".")[2]
        rows = []
        for key, fn in module.HANDLED.items():
            name = public_name(key)
            kind = "ufunc" if isinstance(key, np.ufunc) else "function"
            rows.append((display(name), kind,
                         _impl_name(fn, fnp, "fnp", name.rpartition(".")[2]), _summary(fn)))
        out[short] = sorted(rows)
    return out


def scipy_rows() -> list:
    """[(name, implementation, summary)] for fusegrad.scipy; [] when it is absent or empty."""
    try:
        from .. import scipy as fscipy
    except ImportError:
        return []
    impls = {}
    for info in pkgutil.iter_modules(getattr(fscipy, "__path__", [])):
        module = importlib.import_module(f"{fscipy.__name__}.{info.name}")
        for key, fn in getattr(module, "HANDLED", {}).items():
            impls[public_name(key)] = (fn, module)
    covered = getattr(fscipy, "covered_names", None)
    names = [public_name(n) for n in covered()] if callable(covered) else list(impls)
    rows = []
    for name in dict.fromkeys(names):
        fn, module = impls.get(name, (None, None))
        impl = ""
        if fn is not None:      # fusegrad.scipy mirrors SciPy's names: stats.norm.pdf
            mirror = _walk(fscipy, name.split(".")[1:])
            impl = (f"{fscipy.__name__}.{name.partition('.')[2]}" if mirror is fn else
                    _impl_name(fn, module, module.__name__, name.rpartition(".")[2]))
        rows.append((name, impl, "" if fn is None else _summary(fn)))
    return sorted(rows)


def _walk(obj, path):
    for part in path:
        obj = getattr(obj, part, None)
    return obj


def handled_names() -> set:
    """Every display name the page lists as supported."""
    names = {row[0] for rows in numpy_rows().values() for row in rows}
    return names | {row[0] for row in scipy_rows()}


def _unsupported_table(handled: set) -> list:
    lines = ["| NumPy | why | instead |", "|---|---|---|"]
    for items, why, instead in UNSUPPORTED:
        left = [f"`{i}`" if _is_name(i) else i for i in items
                if not (_is_name(i) and i in handled)]
        if left:
            lines.append(f"| {', '.join(left)} | {why} | {_refs(instead, handled)} |")
    return lines


def _is_name(item: str) -> bool:
    return re.fullmatch(r"(np|scipy)(\.\w+)+", item) is not None


def _refs(text: str, handled: set) -> str:
    def ref(match):
        name = match.group(1)
        return f"`{name}`" + ("" if name in handled else " (not supported yet)")
    return re.sub(r"\{((?:np|scipy)(?:\.\w+)+)\}", ref, text)


def page() -> str:
    """The whole of docs/numpy.md."""
    numpy_tables, scipy = numpy_rows(), scipy_rows()
    n_ufuncs = sum(kind == "ufunc" for rows in numpy_tables.values() for _, kind, _, _ in rows)
    n_numpy = sum(map(len, numpy_tables.values()))
    parts = [
        "# fusegrad.numpy: the supported NumPy and SciPy names",
        "",
        f"<!-- generated by `{COMMAND}` from the HANDLED tables; do not edit by hand -->",
        "",
        "Unmodified NumPy code on eager tensors and tracers (inside `fg.jit`, `fg.grad`, ...) "
        "dispatches to fusegrad.numpy: ufuncs through `__array_ufunc__` (called directly; "
        "their methods and `out=` are below, under unsupported), functions through "
        "`__array_function__`. Each is also callable as the function in the `fusegrad` column "
        "(`import fusegrad.numpy as fnp`), which works on NumPy arrays too. A NumPy function "
        "not listed here raises a TypeError naming it (\"fusegrad has no rule for "
        "numpy.unique\"); it never silently becomes a constant. dtypes are float32, float64, "
        "int64 and bool. The `notes` column is the first sentence of the implementation's "
        "docstring: conventions at kinks and corner cases.",
        "",
        f"{n_numpy} NumPy names ({n_ufuncs} ufuncs, {n_numpy - n_ufuncs} functions) and "
        f"{len(scipy)} SciPy names.",
        "",
        "## NumPy",
        "",
    ]
    for short, rows in numpy_tables.items():
        if not rows:
            continue
        heading, intro = SECTIONS.get(short, (short.replace("_", " ").capitalize(), ""))
        parts += [f"### {heading} (`fusegrad/numpy/{short}.py`)", ""]
        if intro:
            parts += [intro, ""]
        parts += ["| name | kind | fusegrad | notes |", "|---|---|---|---|"]
        parts += [f"| `{n}` | {k} | `{i}` | {s} |" for n, k, i, s in rows]
        parts.append("")
    parts += ["## SciPy", ""]
    if scipy:
        parts += ["SciPy's functions do not take part in NumPy's dispatch; fusegrad.scipy "
                  "routes these names to its implementations (see its module docstring).", "",
                  "Frozen distributions are covered too, with tensors or traced values for the "
                  "parameters and for x: `scipy.stats.norm(loc, scale).logpdf(x)` and the other "
                  "univariate ones call the distribution's methods below; "
                  "`multivariate_normal(mean, cov)` of a tensor or traced mean or cov is "
                  "fusegrad's (the `__call__` row), and SciPy's frozen multivariate normal of "
                  "arrays has its logpdf and pdf routed (the `_multivariate` rows).", "",
                  "| name | fusegrad | notes |", "|---|---|---|"]
        parts += [f"| `{n}` | {f'`{i}`' if i else ''} | {s} |" for n, i, s in scipy]
    else:
        parts.append("None yet: fusegrad.scipy handles no SciPy names.")
    parts += ["", "## Deliberately unsupported", ""]
    parts += _unsupported_table(handled_names())
    return "\n".join(parts) + "\n"


def main(argv) -> None:
    if "--write" in argv:
        DOC_PATH.write_text(page())
    else:
        print(page(), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
