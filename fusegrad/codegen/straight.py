"""Straight-line scalar functions compiled through LLVM directly, skipping Numba's front end.

A function whose values are all 0-d float64 (with bool masks) has nothing to fuse or vectorize:
it is one basic block of arithmetic. Numba types and lowers such code at about 3 ms per line,
whatever its opt level, so a 10 000-op gradient would take minutes; LLVM itself turns the same
block into machine code in well under a second. So this module writes one LLVM function, one
instruction per IR value, and compiles it with llvmlite's MCJIT (the LLVM inside Numba) without
IR optimization passes, at codegen level 0 and in basic blocks of 256 instructions. That keeps
compile time linear: level 1's register allocator, or one huge block, grows faster (3 s instead
of 0.3 s for 22 500 instructions), and the code runs as fast as Numba's at -O3 here.

Semantics are those of the Numba backend's scalar templates (codegen/templates.py with `math`):
IEEE add/sub/mul/div without fast-math flags, libm for the transcendental functions, maximum
and minimum propagate nan. The module is kept in memory only (compiling is fast); the entry is
called through ctypes and returns 0-d arrays, like every backend.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import threading

import numpy as np

from ..ir.primitives import PRIMITIVES
from .templates import poison_on

# Functions at least this long take this path; shorter ones stay with Numba, whose disk cache
# and direct call are worth more to them than the compile time saved.
MIN_OPS = int(os.environ.get("FUSEGRAD_STRAIGHT_MIN_OPS", "400"))

BLOCK = 256

# The registry's straight-line forms (`llvm` of each entry in ir/elementwise.py): one instruction
# or a few lines ending in `{out} = ...`. select, full and convert depend on dtypes and params and
# are written here.
_FORMS = {p.name: p.llvm for p in PRIMITIVES.values() if p.llvm is not None}
_BOOL_OUT = {name for name, form in _FORMS.items() if str(form).startswith("fcmp")}
_BOOL_IN = {"and", "or", "not"}
_SUPPORTED = {*_FORMS, "select", "full", "convert"}

_LOCK = threading.Lock()
_ENGINES: list = []         # compiled modules stay alive as long as the process


def supports(fn) -> bool:
    """Whether fn is long, all 0-d f64 (bool masks inside) and in primitives this module knows."""
    if len(fn.ops) < MIN_OPS:
        return False
    if any(v.shape != () or v.dtype != "f64" for v in (*fn.params, *fn.results)):
        return False
    return all(len(op.outputs) == 1 and op.out.shape == () and _typed(op) for op in fn.ops)


def _typed(op) -> bool:
    """Whether op's operand and result dtypes are the ones its instruction is written for."""
    prim, out, ins = op.prim, op.out.dtype, [v.dtype for v in op.inputs]
    if prim == "full":
        return out in ("f64", "bool")
    if prim == "select":
        return ins[0] == "bool" and ins[1] == ins[2] == out and out in ("f64", "bool")
    if prim in _BOOL_OUT:
        return out == "bool" and all(d == "f64" for d in ins)
    if prim in _BOOL_IN:
        return out == "bool" and all(d == "bool" for d in ins)
    return prim in _SUPPORTED and out == "f64" and all(d == "f64" for d in ins)


def _double(x: float) -> str:
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def _pointer() -> str:
    """LLVM 15 and later spell pointers `ptr`; older ones `double*`."""
    import llvmlite.binding as llvm
    return "ptr" if llvm.llvm_version_info >= (15,) else "double*"


def source(fn) -> str:
    """The LLVM IR text of `void @entry(double params..., double* out)`."""
    ptr = _pointer()
    names: dict = {}
    for i, p in enumerate(fn.params):
        names[p] = f"%p{i}"
    lines = []
    for i, op in enumerate(fn.ops):
        if i and i % BLOCK == 0:            # LLVM's per-block work grows faster than linearly
            lines += [f"  br label %b{i}", f"b{i}:"]
        name = f"%v{i}"
        names[op.out] = name
        lines.extend(_lines(op, name, [names[v] for v in op.inputs]))
        lines[-1] += f"  ; {op.prim} at {op.loc}"      # the user's line, for people reading
    for i, r in enumerate(fn.results):
        value = names[r]
        lines.append(f"  %o{i} = getelementptr double, {ptr} %out, i64 {i}")
        lines.append(f"  store double {value}, {ptr} %o{i}")
    params = ", ".join(f"double %p{i}" for i in range(len(fn.params)))
    decls = _declarations()
    head = f"define void @entry({params}{', ' if params else ''}{ptr} %out) {{"
    return "\n".join([*decls, head, *lines, "  ret void", "}", ""])


def _declarations() -> list:
    """One `declare` per function the forms call, with its arity."""
    calls = {}
    for form in _FORMS.values():
        for line in (form,) if isinstance(form, str) else form:
            for fname, args in re.findall(r"call double @([\w.]+)\(([^)]*)\)", line):
                calls[fname] = args.count("double")
    return [f"declare double @{f}({', '.join(['double'] * n)})" for f, n in sorted(calls.items())]


def _lines(op, name, a) -> list:
    form = _FORMS.get(op.prim)
    if form is None:
        return [f"  {name} = {_instruction(op, a)}"]
    if isinstance(form, str):
        return [f"  {name} = {form.format(*a)}"]
    return ["  " + line.format(*a, out=name) for line in form]


def _instruction(op, a) -> str:
    """The forms that depend on dtypes or params."""
    if op.prim == "select":
        ty = "i1" if op.out.dtype == "bool" else "double"
        return f"select i1 {a[0]}, {ty} {a[1]}, {ty} {a[2]}"
    if op.prim == "full":
        value = op.params["value"]
        if op.out.dtype == "bool":
            return f"or i1 {'true' if value else 'false'}, false"
        return f"fadd double {_double(value)}, {_double(-0.0)}"     # x + -0.0 is x, exactly
    if op.prim == "convert":
        return f"fadd double {a[0]}, {_double(-0.0)}"
    raise NotImplementedError(op.prim)


def compile_straight(fn):
    """Compile fn (which `supports`) and return `run(leaves) -> list of 0-d arrays`."""
    import llvmlite.binding as llvm
    text = source(fn)
    with _LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        machine = target.create_target_machine(opt=0)
        module = llvm.parse_assembly(text)
        module.verify()
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
        _ENGINES.append(engine)
        address = engine.get_function_address("entry")
    n_in, n_out = len(fn.params), len(fn.results)
    cfunc = ctypes.CFUNCTYPE(None, *[ctypes.c_double] * n_in, ctypes.c_void_p)(address)
    return _runner(cfunc, n_out), text


def _runner(cfunc, n_out):
    poison = poison_on()

    def run(leaves):
        out = np.full(n_out, np.nan) if poison else np.empty(n_out)
        cfunc(*[float(x) for x in leaves], out.ctypes.data)
        return [np.asarray(v) for v in out.tolist()]
    return run
