"""When a tensor or tracer would become a NumPy constant: the error that says so.

NumPy builds an array from a foreign object through `__array__` (np.r_, np.sum of a list,
SciPy functions, `h[1:] = x` into an ndarray, and np.array/np.asarray where
constructors.numpy_constructors does not catch them) or `__float__` (np.float64(x),
`h[0] = x`), and keeps only the numbers. Neither hook can hand back a recorded value, so on a
tensor that requires grad (eager) or a tracer (jit) the conversion would drop the gradient or
need values a trace does not have. It raises instead, quoting the user's expression and line,
naming the SciPy function when the call came through one, and saying what records: np.stack,
fusegrad.numpy.array, fusegrad.numpy.index_update.
"""

from __future__ import annotations

import dis
import os
import sys

from .state import eager_transforms
from .tracer.location import foreign_caller, instruction, source_text, user_frame

_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# The SciPy functions fusegrad implements (fusegrad.scipy fills this in): reaching one of them
# here means the user called SciPy's original, bound before fusegrad was imported.
SCIPY_COVERED: set = set()
_STORE_LOSES = {False: "the gradient would be lost", True: "a traced value has none yet"}


class ConcretizationError(TypeError):
    """A traced value was needed as a concrete Python value (bool, int, iteration, ...).

    Defined here, below the tracer that raises it, so that tracer.py can import this module's
    errors; fusegrad.tracer.tracer re-exports it."""


class ConversionError(ConcretizationError):
    """A tensor that requires grad, or a traced value, was turned into a NumPy constant."""


def storing() -> bool:
    """Whether the user's line is executing an item assignment (`h[0] = x`): one byte read."""
    frame = user_frame()
    code = None if frame is None else frame.f_code.co_code
    return code is not None and 0 <= frame.f_lasti < len(code) \
        and code[frame.f_lasti] == _STORE_SUBSCR


def refuse(what: str) -> None:
    """np.asarray, float() or .item() of a tensor that requires grad, under grad mode: an error
    inside an eager grad (the function is NumPy code the jit could not run either), and where
    the conversion is hidden: `h[0] = x` into an ndarray, a SciPy function. Otherwise the user
    holds the tensor in PyTorch style and asks for its numbers: np.asarray(t) is t.numpy(),
    float(loss) prints."""
    if eager_transforms.depth or storing() or foreign_caller() is not None:
        raise conversion_error(what, traced=False)


def conversion_error(what: str, traced: bool) -> ConversionError:
    """The error for turning a tensor (traced=False) or a tracer into a constant through
    `what` (NumPy's __array__, float(), ...) at the user's current line."""
    frame = user_frame()
    ins = None if frame is None else instruction(frame)
    where = "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
    subject = "a traced value" if traced else "a tensor that requires grad"
    loses = ("needs numbers that are not known while tracing" if traced
             else "would drop its gradient")
    library = foreign_caller()
    if library is not None:
        return ConversionError(_library_message(library, where + _quoted(frame, ins), loses))
    if ins is not None and ins.opname == "STORE_SUBSCR":
        return ConversionError(
            f"{where}{_quoted(frame, None)} stores {subject} into a NumPy array, which keeps only "
            f"numbers: {_STORE_LOSES[traced]}. Build the array with fusegrad: collect the values "
            f"in a list and np.stack(values), or update it functionally with h = "
            f"fusegrad.numpy.index_update(h, index, value); item assignment into that result "
            f"records the update.")
    if traced and ins is not None and (ins.opname == "BINARY_SUBSCR" or ins.argrepr == "[]") \
            and _asked_by(frame):
        return ConversionError(
            f"{where}{_quoted(frame, ins)} indexes a NumPy array with a traced index: "
            f"NumPy's indexing has no protocol that hands the index to fusegrad, so NumPy asks "
            f"for its numbers, which are not known while tracing. Write "
            f"fusegrad.numpy.take(array, index, axis=0) (or np.take_along_axis(array, index, "
            f"axis)), which records a take from the array as a constant, or pass the array "
            f"in as an argument.")
    return ConversionError(f"{where}{_quoted(frame, ins)} turns {subject} into a NumPy "
                           f"constant ({what}), which {loses}. {_instead(traced)}")


def _asked_by(frame) -> bool:
    """Whether `frame` itself (through C: an ndarray's indexing) asked for the conversion, not
    Python code it called (np.r_'s __getitem__)."""
    caller = sys._getframe(1)
    while caller is not None and caller is not frame \
            and caller.f_code.co_filename.startswith(_PACKAGE_DIR):
        caller = caller.f_back
    return caller is frame


def _library_message(library, called, loses) -> str:
    if library in SCIPY_COVERED:
        return (f"{library} reached SciPy's own function (called at {called}), which converts "
                f"its arguments to NumPy arrays and {loses}: this name was bound before "
                f"fusegrad was imported (`from scipy... import ...` above `import fusegrad`, "
                f"kept where fusegrad cannot rebind it). Import fusegrad first, or call it "
                f"through its module ({library}(...)); fusegrad implements it.")
    return (f"{library} is not differentiable through fusegrad yet: it converts its arguments "
            f"to NumPy arrays, which {loses} (called at {called}). Instead, write the function "
            f"with NumPy operations; fusegrad traces NumPy functions, not SciPy's compiled code "
            f"(fusegrad.scipy.covered_names() lists the SciPy functions it implements).")


def _quoted(frame, ins) -> str:
    text = "" if frame is None else source_text(frame, ins)
    return f": `{text}`" if text else ""


def _instead(traced: bool) -> str:
    hint = ("To build an array from tensors or traced values use np.stack([...]) or "
            "fusegrad.numpy.array([...]) (nested lists too), and give np.sum, np.mean, "
            "np.linalg.norm, ... an array, not a list: those record. For a number, keep the "
            "0-d array x[i] (np.float64(x[i]) and float() are not needed).")
    if traced:
        return hint + " If the value is a constant, mark its argument with static_argnums."
    return hint + " For a constant on purpose, call .detach() first."
