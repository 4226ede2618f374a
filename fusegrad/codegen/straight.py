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
import struct
import threading

import numpy as np

from .templates import poison_on

# Functions at least this long take this path; shorter ones stay with Numba, whose disk cache
# and direct call are worth more to them than the compile time saved.
MIN_OPS = int(os.environ.get("FUSEGRAD_STRAIGHT_MIN_OPS", "400"))

BLOCK = 256

_BINARY = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
_COMPARE = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_INTRINSIC = {"sin": "llvm.sin.f64", "cos": "llvm.cos.f64", "exp": "llvm.exp.f64",
              "log": "llvm.log.f64", "sqrt": "llvm.sqrt.f64", "abs": "llvm.fabs.f64",
              "tanh": "tanh", "log1p": "log1p", "expm1": "expm1", "erf": "erf",
              "floor": "llvm.floor.f64", "ceil": "llvm.ceil.f64", "round": "llvm.rint.f64",
              "trunc": "llvm.trunc.f64"}
_LOGICAL = {"and": "and", "or": "or"}
_SUPPORTED = {*_BINARY, *_COMPARE, *_INTRINSIC, *_LOGICAL, "neg", "pow", "maximum", "minimum",
              "select", "full", "not", "convert", "sign", "rsqrt", "fmod", "remainder"}

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
    if prim in _COMPARE:
        return out == "bool" and all(d == "f64" for d in ins)
    if prim in _LOGICAL or prim == "not":
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
    decls = [f"declare double @{f}(double)" for f in sorted(set(_INTRINSIC.values()))]
    decls += [f"declare double @llvm.{f}.f64(double, double)" for f in ("pow", "copysign")]
    head = f"define void @entry({params}{', ' if params else ''}{ptr} %out) {{"
    return "\n".join([*decls, head, *lines, "  ret void", "}", ""])


def _lines(op, name, a) -> list:
    if op.prim in ("maximum", "minimum"):
        # the first operand if it wins or is nan, else the second (as NumPy and templates.py)
        cmp = "oge" if op.prim == "maximum" else "ole"
        return [f"  {name}.w = fcmp {cmp} double {a[0]}, {a[1]}",
                f"  {name}.n = fcmp uno double {a[0]}, {a[0]}",
                f"  {name}.c = or i1 {name}.w, {name}.n",
                f"  {name} = select i1 {name}.c, double {a[0]}, double {a[1]}"]
    if op.prim == "sign":       # 1, -1, or x itself for zeros and nan
        return [f"  {name}.p = fcmp ogt double {a[0]}, 0.0",
                f"  {name}.m = fcmp olt double {a[0]}, 0.0",
                f"  {name}.s = select i1 {name}.m, double -1.0, double {a[0]}",
                f"  {name} = select i1 {name}.p, double 1.0, double {name}.s"]
    if op.prim == "remainder":
        return _remainder(name, a[0], a[1])
    if op.prim == "rsqrt":
        return [f"  {name}.r = call double @llvm.sqrt.f64(double {a[0]})",
                f"  {name} = fdiv double 1.0, {name}.r"]
    return [f"  {name} = {_instruction(op, a)}"]


def _remainder(name, x, y) -> list:
    """NumPy's npy_remainder: fmod moved to the divisor's sign; a zero takes y's sign."""
    return [f"  {name}.m = frem double {x}, {y}",
            f"  {name}.nz = fcmp une double {name}.m, 0.0",       # nonzero, or nan
            f"  {name}.yn = fcmp olt double {y}, 0.0",
            f"  {name}.mn = fcmp olt double {name}.m, 0.0",
            f"  {name}.d = xor i1 {name}.yn, {name}.mn",
            f"  {name}.f = and i1 {name}.nz, {name}.d",
            f"  {name}.s = fadd double {name}.m, {y}",
            f"  {name}.r = select i1 {name}.f, double {name}.s, double {name}.m",
            f"  {name}.z = call double @llvm.copysign.f64(double 0.0, double {y})",
            f"  {name} = select i1 {name}.nz, double {name}.r, double {name}.z"]


def _instruction(op, a) -> str:
    prim = op.prim
    if prim in _BINARY:
        return f"{_BINARY[prim]} double {a[0]}, {a[1]}"
    if prim == "neg":
        return f"fneg double {a[0]}"
    if prim in _INTRINSIC:
        return f"call double @{_INTRINSIC[prim]}(double {a[0]})"
    if prim == "pow":
        return f"call double @llvm.pow.f64(double {a[0]}, double {a[1]})"
    if prim == "fmod":
        return f"frem double {a[0]}, {a[1]}"
    if prim in _COMPARE:
        return f"fcmp {_COMPARE[prim]} double {a[0]}, {a[1]}"
    if prim in _LOGICAL:
        return f"{_LOGICAL[prim]} i1 {a[0]}, {a[1]}"
    if prim == "not":
        return f"xor i1 {a[0]}, true"
    if prim == "select":
        ty = "i1" if op.out.dtype == "bool" else "double"
        return f"select i1 {a[0]}, {ty} {a[1]}, {ty} {a[2]}"
    if prim == "full":
        value = op.params["value"]
        if op.out.dtype == "bool":
            return f"or i1 {'true' if value else 'false'}, false"
        return f"fadd double {_double(value)}, {_double(-0.0)}"     # x + -0.0 is x, exactly
    if prim == "convert":
        return f"fadd double {a[0]}, {_double(-0.0)}"
    raise NotImplementedError(prim)


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
