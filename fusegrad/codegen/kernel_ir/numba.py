"""The kernel IR rendered as Numba Python source: a table from nodes and scalar ops to lines.

The twin of llvm.py, with the same meaning for every node, so both give the same bits:
registers are Python locals of exactly their dtype (float32 ops of float32 operands stay
float32 in Numba; an int32 result is cast back, as Numba widens int32), constants are typed
literals (np.float32(0.5), so no operand is ever widened), integer ops wrap, comparisons are
Python's (ordered, `!=` unordered), and the ops Python has no spelling for (fma and the other
llvm.* intrinsics, bitcast, truncating division, a branchless select) are numba_support's,
each the LLVM instruction llvm.py writes. No fastmath.

The entry takes the table of arrays as flat 1-d arrays, the arena as a view of its bytes per
dtype: `entry(arena_f32, arena_f64, arena_i64, arena_bool, params..., results...,
constants..., status)` (Numba takes 0.2 s to compile one `arena.view`), and returns 0 or a
Raise's error number (its value in status[0]). A buffer's byte offset in the arena is an
element offset in its dtype's view (the plan aligns every buffer to 64 bytes). Consecutive
groups up to PART_STATEMENTS statements are one function (`part0`...); the entry calls them
in order. A Loop marked `parallel` is a numba.prange. Every group starts with its Note: the
IR equations it computes and the user's file:line, as comments.
"""

from __future__ import annotations

import math
import struct

from .nodes import ITEMSIZE, Alu, Gemm, Load, Loop, Note, Raise, Reg, Store, walk

NP = {"f32": "np.float32", "f64": "np.float64", "i64": "np.int64", "i32": "np.int32",
      "bool": "np.bool_"}
PART_STATEMENTS = 100        # Numba compiles a long function superlinearly
ARENA = ("f32", "f64", "i64", "bool")      # the arena's views the entry takes
_BINARY = {"add": "+", "sub": "-", "mul": "*", "fdiv": "/", "and": "&", "or": "|", "xor": "^",
           "shl": "<<", "ashr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==",
           "ne": "!="}
_CALLS = ("fma", "sqrt", "fabs", "rint", "floor", "copysign", "sdiv", "srem")
_NARROW = ("i32",)                # Numba computes int32 ops in int64: cast the result back


def name(reg: Reg) -> str:
    return reg.name.lstrip("%")


def literal(x) -> str:
    """An operand: a register's name or a constant's exact spelling of its dtype."""
    if isinstance(x, Reg):
        return name(x)
    v, dtype = x.value, x.dtype
    if dtype == "bool":
        return "True" if v else "False"
    if dtype in ("f32", "f64"):
        v = float(v)
        if dtype == "f32":
            v = struct.unpack("<f", struct.pack("<f", v))[0]
        text = ("np.nan" if math.isnan(v) else "np.inf" if v > 0 else "-np.inf") \
            if not math.isfinite(v) else repr(v)
        return f"np.float32({text})" if dtype == "f32" else text
    v = int(v)
    if dtype == "i64" and abs(v) >= 2 ** 62:        # an int64 literal Numba cannot misread
        return f"np.int64(np.uint64({v % 2 ** 64}))"
    return str(v) if dtype == "i64" else f"{NP[dtype]}({v})"


def _narrow(dtype: str, expr: str) -> str:
    return f"{NP[dtype]}({expr})" if dtype in _NARROW else expr


def _convert(x, to: str) -> str:
    src, a = x.dtype, literal(x)
    if to == "bool":
        return f"{a} != 0"               # a float's: une, so nan is True, as fcmp une
    return f"{NP[to]}({a})" if src != to else a


def alu(node: Alu) -> str:
    """The expression of one scalar op."""
    op, args, out = node.op, node.args, node.out
    xs = [literal(a) for a in args]
    dtype = args[0].dtype
    if op == "select":
        return f"select({', '.join(xs)})"
    if op == "convert":
        return _convert(args[0], out.dtype)
    if op == "bitcast":
        return f"as_{out.dtype}({xs[0]})"
    if op == "uno":
        return f"({xs[0]} != {xs[0]}) | ({xs[1]} != {xs[1]})"
    if op == "lshr":
        u = "np.uint32" if dtype == "i32" else "np.uint64"
        return f"{NP[dtype]}({u}({xs[0]}) >> {u}({xs[1]}))"
    if op == "neg":
        return _narrow(dtype, f"-{xs[0]}")
    if op in _CALLS:
        return _narrow(dtype, f"{op}({', '.join(xs)})")
    expr = f"{xs[0]} {_BINARY[op]} {xs[1]}"
    return expr if out.dtype == "bool" else _narrow(dtype, expr)


class Part:
    """The lines of one function."""

    def __init__(self):
        self.lines: list = []
        self.gemms = 0

    def emit(self, depth: int, line: str):
        self.lines.append("    " * depth + line)

    def array(self, buf) -> tuple:
        """(the array a buffer is in, the element offset of its start)."""
        if buf.slot:
            return f"a{buf.slot}", 0
        return f"arena_{buf.dtype}", buf.byte // ITEMSIZE[buf.dtype]

    def element(self, buf, index) -> str:
        array, start = self.array(buf)
        terms = [name(r) if s == 1 else f"{name(r)} * {s}" for r, s in index.terms if s > 0]
        negative = [name(r) if s == -1 else f"{name(r)} * {-s}" for r, s in index.terms
                    if s < 0]
        offset = start + index.offset
        text = " + ".join(terms + ([str(offset)] if offset or not terms else []))
        text += "".join(f" - {t}" for t in negative)
        return f"{array}[{text}]"

    def render(self, stmts, depth: int):
        for s in stmts:
            _RENDER[type(s)](self, s, depth)


def _loop(part, s, depth):
    ranged = "prange" if getattr(s, "parallel", False) else "range"
    part.emit(depth, f"for {name(s.var)} in {ranged}({s.extent}):")
    part.render(s.body, depth + 1)
    if not s.body:
        part.emit(depth + 1, "pass")


def _raise(part, s, depth):
    part.emit(depth, f"if {literal(s.cond)}:")
    part.emit(depth + 1, f"status[0] = {literal(s.value)}")
    part.emit(depth + 1, f"return {s.error}")


def _gemm(part, s, depth):
    operands = []
    for (buf, index), rows, cols in ((s.a, s.m, s.k), (s.b, s.k, s.n), (s.c, s.m, s.n)):
        at = part.element(buf, index)
        array, start = at[:at.index("[")], at[at.index("[") + 1:-1]
        if start.isdigit():
            stop = int(start) + rows * cols
        else:                                   # a batch's first element: computed once
            first, part.gemms = f"g{part.gemms}", part.gemms + 1
            part.emit(depth, f"{first} = {start}")
            start, stop = first, f"{first} + {rows * cols}"
        operands.append(f"{array}[{start}:{stop}].reshape(({rows}, {cols}))")
    part.emit(depth, "gemm(" + ",\n    ".join(operands).replace("\n", "\n" + "    " * depth)
              + ")")


_RENDER = {
    Alu: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = {alu(s)}"),
    Load: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = "
                                                  f"{part.element(s.buf, s.index)}"),
    Store: lambda part, s, depth: part.emit(depth, f"{part.element(s.buf, s.index)} = "
                                                   f"{literal(s.value)}"),
    Loop: _loop, Raise: _raise, Gemm: _gemm,
    Note: lambda part, s, depth: [part.emit(depth, f"# {line}") for line in
                                  s.text.splitlines()],
}


def _decorator(options: dict) -> str:
    return "@njit(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")"


def function(fname: str, groups: list, params: str, options) -> str:
    """One function running groups in order; options(parallel) -> njit's keyword arguments."""
    part = Part()
    for stmts in groups:
        part.render(stmts, 1)
    parallel = any(getattr(s, "parallel", False) for g in groups for s in walk(g)
                   if isinstance(s, Loop))
    return "\n".join([_decorator(options(parallel)), f"def {fname}({params}):", *part.lines,
                      "    return 0"])


def parts(program) -> list:
    """Consecutive groups up to PART_STATEMENTS statements: lists of group indices."""
    out, size = [], 0
    for g, stmts in enumerate(program.groups):
        n = sum(1 for _ in walk(stmts))
        if out and size + n < PART_STATEMENTS:
            out[-1].append(g)
            size += n
        else:
            out.append([g])
            size = n
    return out


def source(program, slots: int, options, header: str = "") -> str:
    """The module's text: imports, the parts, and `entry` (all one function when one part).
    options(kind, parallel) gives njit's keyword arguments ("entry" or "kernel")."""
    params = ", ".join([*(f"arena_{d}" for d in ARENA), *(f"a{k}" for k in range(1, slots)),
                        "status"])
    groups = parts(program)
    lines = [header + f"# fusegrad: @{program.name} as kernel IR, rendered for Numba",
             "import numpy as np",
             "from numba import njit, prange  # noqa: F401",
             "from fusegrad.codegen.kernel_ir.numba_support import (  # noqa: F401",
             "    as_f32, as_f64, as_i32, as_i64, copysign, fabs, floor, fma, gemm, rint,",
             "    sdiv, select, sqrt, srem)", ""]
    if len(groups) == 1:
        return "\n".join([*lines, "", function("entry", [program.groups[g] for g in groups[0]],
                                                params, lambda p: options("entry", p)), ""])
    body = []
    for k, gs in enumerate(groups):
        body += ["", "", function(f"part{k}", [program.groups[g] for g in gs], params,
                                  lambda p: options("kernel", p))]
    call = ["", "", _decorator(options("entry", False)), f"def entry({params}):"]
    for k in range(len(groups)):
        call += [f"    code = part{k}({params})", "    if code:", "        return code"]
    return "\n".join([*lines, *body, *call, "    return 0", ""])


def compile_program(program, plan, cache):
    """(run, source): the module compiled by Numba through compile.py's module cache, handed
    in as cache = (load_module, njit_options, versions) (compile.py imports this package, not
    the other way): its file is written first and its entry is njit(cache=True), so a new
    process loads it from disk."""
    import hashlib
    from pathlib import Path

    import numba
    import numpy as np

    from ...ir.types import NP_DTYPES
    from .run import runner
    load_module, njit_options, versions = cache
    fn = plan.fn
    support = hashlib.sha256(Path(__file__).with_name("numba_support.py").read_bytes())
    header = f"# {versions()}, kernel_ir support {support.hexdigest()[:16]}\n"
    text = source(program, 1 + len(fn.params) + len(fn.results) + len(plan.consts),
                  lambda kind, parallel: njit_options(kind, parallel=parallel), header)
    dtypes = [*(NP_DTYPES[d] for d in ARENA), *(v.type.np_dtype for v in fn.params),
              *(v.type.np_dtype for v in fn.results), *(c.dtype for c in plan.consts), np.int64]
    signature = tuple(numba.types.Array(numba.from_dtype(np.dtype(d)), 1, "C") for d in dtypes)
    key = hashlib.sha256(text.encode()).hexdigest()
    module, _ = load_module(text, key, program.name, len(parts(program)), {"entry": signature})
    entry = module.entry

    views = [np.dtype(NP_DTYPES[d]) for d in ARENA]

    def call(arrays, status):
        arena, *rest = arrays
        return entry(*[arena.view(d) for d in views], *[a.reshape(-1) for a in rest], status)
    return runner(call, plan, program.errors), text
