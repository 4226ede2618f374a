"""Where in the user's code an operation was called: the first frame outside fusegrad, NumPy and
the libraries in _FOREIGN (SciPy), whose functions users call on tensors and tracers: an error
raised inside one names the user's line and the library function called there."""

from __future__ import annotations

import dis
import functools
import importlib.util
import inspect
import linecache
import os
import sys

import numpy as np

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


@functools.lru_cache(maxsize=4096)
def _is_internal(filename: str) -> bool:
    return (filename.startswith(_PACKAGE_DIR) and os.sep + "tests" + os.sep not in filename) \
        or filename.startswith(_NUMPY_DIR) \
        or filename.startswith(("<__array_function__", "<frozen "))


_FOREIGN = ("scipy",)


@functools.lru_cache(maxsize=1)
def _foreign_dirs() -> tuple:
    dirs = []
    for name in _FOREIGN:
        spec = importlib.util.find_spec(name)     # finds the package without importing it
        dirs += [os.path.abspath(p) + os.sep for p in (spec and spec.submodule_search_locations
                                                       or ())]
    return tuple(dirs)


@functools.lru_cache(maxsize=4096)
def _is_foreign(filename: str) -> bool:
    return filename.startswith(_foreign_dirs()) if _foreign_dirs() else False


def user_frame():
    """The innermost frame of user code (None if there is none)."""
    frame = sys._getframe(1)
    while frame is not None and (_is_internal(frame.f_code.co_filename)
                                 or _is_foreign(frame.f_code.co_filename)):
        frame = frame.f_back
    return frame


def foreign_caller() -> str | None:
    """The public name of the library function the user called, when the current operation runs
    inside one (`scipy.special.logsumexp`, `scipy.stats.norm.logpdf`); None otherwise."""
    frame, outer = sys._getframe(1), None
    while frame is not None:
        filename = frame.f_code.co_filename
        if _is_foreign(filename):
            outer = frame
        elif not _is_internal(filename):
            break
        frame = frame.f_back
    return None if outer is None else _public_name(outer)


def _public_name(frame) -> str:
    """`scipy.special._logsumexp` + `logsumexp` -> `scipy.special.logsumexp`; a method of a
    SciPy distribution object is named after the object (`norm_gen` -> `norm`), a decorator's
    wrapper after the function it wraps (scipy.stats' axis_nan_policy_wrapper)."""
    code, local = frame.f_code, frame.f_locals
    wrapped = [local[v] for v in code.co_freevars if inspect.isfunction(local.get(v))]
    if wrapped:
        return f"{_public_module(wrapped[0].__module__)}.{wrapped[0].__name__}"
    name = _public_module(frame.f_globals.get("__name__", "?"))
    if code.co_argcount and code.co_varnames[0] == "self" and "self" in local:
        name += "." + type(local["self"]).__name__.removesuffix("_gen")
    return f"{name}.{code.co_name}"


def _public_module(module: str) -> str:
    return ".".join(part for part in module.split(".") if not part.startswith("_"))


def instruction(frame):
    """The bytecode instruction `frame` is executing (a CALL, STORE_SUBSCR, ...), or None.
    f_lasti may point into the instruction's inline cache entries (a call into Python code)."""
    return instruction_at(frame.f_code, frame.f_lasti)


def instruction_at(code, lasti):
    """The instruction of `code` at offset `lasti` (or whose inline caches hold it), or None."""
    found = None
    for ins in dis.get_instructions(code):
        if ins.offset > lasti:
            break
        found = ins
    return found


def source_text(frame, ins=None, limit: int = 80) -> str:
    """The source of the expression `ins` evaluates in `frame` (`np.asarray(x)`), else its line."""
    pos = getattr(ins, "positions", None)
    filename = frame.f_code.co_filename
    if pos is None or None in (pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset):
        text = linecache.getline(filename, frame.f_lineno)
    else:
        lines = [linecache.getline(filename, n).encode()
                 for n in range(pos.lineno, pos.end_lineno + 1)]
        lines[-1] = lines[-1][:pos.end_col_offset]
        lines[0] = lines[0][pos.col_offset:]
        text = b" ".join(lines).decode(errors="replace")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def user_location(full: bool = False) -> str | None:
    """`file.py:12` of the user's call (`/path/to/file.py:12` with full=True)."""
    frame = user_frame()
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    return f"{filename if full else os.path.basename(filename)}:{frame.f_lineno}"


def located(e: BaseException) -> BaseException:
    """e, raised while fusegrad ran the user's function (a trace, an eager transform), with
    the user's file:line appended to its message when it lacks it: the innermost user frame of
    its traceback (the line that called the fusegrad or NumPy function that raised), else the
    user's call on the current stack (an output check after the function returned). An error
    the user's own code raised is returned as it is, and so is one located already (a nested
    trace's). The exception is rebuilt as type(e)(message), so `str(e)` and pytest's `match`
    see the location; a type that cannot be rebuilt that way gets it as a note instead."""
    if getattr(e, "_fg_located", False) or not isinstance(e, Exception):
        return e
    frames = []                                     # (filename, line), outermost first
    tb = e.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    user = [i for i, (name, _) in enumerate(frames)
            if not (_is_internal(name) or _is_foreign(name))]
    if user and user[-1] == len(frames) - 1:
        return e                                    # raised by the user's own code
    where = "%s:%d" % frames[user[-1]] if user else user_location(full=True)
    if where is None or os.path.basename(where) in str(e):
        return e
    return _with_message(e, f"{e} (at {where})")


def _with_message(e: Exception, message: str) -> Exception:
    try:
        new = type(e)(message)
    except Exception:  # noqa: BLE001 - a constructor of another shape: keep e, add a note
        new = None
    if new is None or str(new) != message:
        e.add_note(message)
        e._fg_located = True
        return e
    for key, value in e.__dict__.items():           # attributes, but not the old message
        new.__dict__.setdefault(key, value)
    new._fg_located = True
    new.__cause__, new.__suppress_context__ = e.__cause__, e.__suppress_context__
    return new.with_traceback(e.__traceback__)


def call_located(fun, *args):
    """fun(*args), an error it raises naming the user's file:line (located)."""
    try:
        return fun(*args)
    except Exception as e:
        new = located(e)
        if new is e:
            raise
        raise new from e.__cause__
