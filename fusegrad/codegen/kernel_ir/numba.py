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
in order. A Loop marked `parallel` is a numba.prange. The first line of each run of
statements one IR op made ends with its note as a comment: the op's equation and the user's
file:line; a group's Note adds the equations no statement carries.
"""

from __future__ import annotations

import math
import struct

from .builder import LIBM
from .nodes import (ITEMSIZE, Alu, Call, Gemm, Get, If, Load, Loop, Note, Raise, Reg, Set,
                    Store, While, walk)

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
    """A register's (or Var's) Python name: LLVM's `%i0.s5` (a nested Function's register,
    control.py's) is `i0__s5`."""
    return reg.name.lstrip("%").replace(".", "__")


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
    xs = [a if isinstance(a, str) else literal(a) for a in args]
    dtype = args[-1].dtype
    if op == "libm":                    # args[0] names a C function of out's type
        return f"{LIBM[args[0]][2]}({', '.join(xs[1:])})"
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

    def __init__(self, names=None):
        self.names = names or {}        # a scalar Function's name -> its name in this module
        self.lines: list = []
        self.gemms = 0
        self.note = ""                  # the note of the statement rendered last
        self.pending = ""               # a note for the end of the next line emitted
        self.carried: set = set()       # the notes the current group's statements carry

    def emit(self, depth: int, line: str):
        self.lines.append("    " * depth + line)
        if self.pending:                    # the note of the statement this line begins
            self.lines[-1] += f"  # {self.pending}"
            self.pending = ""

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
            note = getattr(s, "note", "")
            if note and note != self.note:          # once for a run of one op's statements
                if "\n" in note:
                    self.lines += ["    " * depth + f"# {line}" for line in note.splitlines()]
                else:
                    self.pending = note
                self.note = note
            _RENDER[type(s)](self, s, depth)
            self.pending = ""


def _loop(part, s, depth):
    ranged = "prange" if s.parallel and not any(isinstance(t, Raise) for t in walk(s.body)) \
        else "range"                            # a prange cannot return
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


def _body(part, stmts, depth):
    part.render(stmts, depth)
    if not stmts:
        part.emit(depth, "pass")


def _if(part, s, depth):
    part.emit(depth, f"if {literal(s.cond)}:")
    _body(part, s.then, depth + 1)
    if s.orelse:
        part.emit(depth, "else:")
        _body(part, s.orelse, depth + 1)


def _while(part, s, depth):
    part.emit(depth, "while True:")
    part.render(s.test, depth + 1)
    part.emit(depth + 1, f"if not {literal(s.cond)}:")
    part.emit(depth + 2, "break")
    part.render(s.body, depth + 1)


_RENDER = {
    Alu: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = {alu(s)}"),
    Load: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = "
                                                  f"{part.element(s.buf, s.index)}"),
    Store: lambda part, s, depth: part.emit(depth, f"{part.element(s.buf, s.index)} = "
                                                   f"{literal(s.value)}"),
    Loop: _loop, Raise: _raise, Gemm: _gemm, If: _if, While: _while,
    Call: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = {part.names[s.fn]}("
                                                  f"{', '.join(literal(a) for a in s.args)})"),
    Get: lambda part, s, depth: part.emit(depth, f"{name(s.out)} = {name(s.var)}"),
    Set: lambda part, s, depth: part.emit(depth, f"{name(s.var)} = {literal(s.value)}"),
    Note: lambda part, s, depth: [part.emit(depth, f"# {line}") for line in
                                  s.text.splitlines() if line not in part.carried],
}


def scalar_function(fname: str, fn, options) -> str:
    """A scalar Function of the program (outline.py): its Alus, then its result."""
    body = [f"    {name(s.out)} = {alu(s)}" for s in fn.body]
    return "\n".join([_decorator(options), f"def {fname}({', '.join(map(name, fn.params))}):",
                      *body, f"    return {literal(fn.result)}"])


def _decorator(options: dict) -> str:
    return "@njit(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")"


def function(fname: str, groups: list, params: str, options, names=None) -> str:
    """One function running groups in order; options(parallel) -> njit's keyword arguments."""
    part = Part(names)
    for stmts in groups:
        part.carried = {s.note for s in walk(stmts) if getattr(s, "note", "")}
        part.render(stmts, 1)
    parallel = any(isinstance(s, Loop) and s.parallel and not any(
        isinstance(t, Raise) for t in walk(s.body)) for g in groups for s in walk(g))
    return "\n".join([_decorator(options(parallel)), f"def {fname}({params}):", *part.lines,
                      "    return 0"])


def parts(program, groups) -> list:
    """Consecutive groups (of the indices given) up to PART_STATEMENTS statements: lists of
    group indices."""
    out, size = [], 0
    for g in groups:
        n = sum(1 for _ in walk(program.groups[g]))
        if out and size + n < PART_STATEMENTS:
            out[-1].append(g)
            size += n
        else:
            out.append([g])
            size = n
    return out


def source(program, steps, slots: int, options, header: str = "") -> str:
    """The module's text: imports, and `entry0`, `entry1`... one per compiled step (a list of
    group indices: run.steps, the program split at its host steps), each calling its parts
    (all one function when one part). options(kind, parallel) gives njit's keyword arguments
    ("entry" or "kernel")."""
    params = ", ".join([*(f"arena_{d}" for d in ARENA), *(f"a{k}" for k in range(1, slots)),
                        "status"])
    lines = [header + f"# fusegrad: @{program.name} as kernel IR, rendered for Numba",
             "import math  # noqa: F401",
             "import numpy as np",
             "from numba import njit, prange  # noqa: F401",
             "from fusegrad.codegen.kernel_ir.numba_support import (  # noqa: F401",
             "    as_f32, as_f64, as_i32, as_i64, copysign, fabs, floor, fma, gemm, rint,",
             "    sdiv, select, sqrt, srem)", ""]
    names = {f: f"{f.split('.')[0]}_{k}" for k, f in enumerate(program.functions)}  # the same
    for fname, fn in program.functions.items():                 # text for the same program
        lines += ["", scalar_function(names[fname], fn, options("kernel", False)), ""]
    for e, step in enumerate(steps):
        groups = parts(program, step)
        if len(groups) == 1:
            lines += ["", function(f"entry{e}", [program.groups[g] for g in groups[0]], params,
                                   lambda p: options("entry", p), names), ""]
            continue
        for k, gs in enumerate(groups):
            lines += ["", function(f"part{e}_{k}", [program.groups[g] for g in gs], params,
                                   lambda p: options("kernel", p), names), ""]
        lines += ["", _decorator(options("entry", False)), f"def entry{e}({params}):"]
        for k in range(len(groups)):
            lines += [f"    code = part{e}_{k}({params})", "    if code:", "        return code"]
        lines += ["    return 0", ""]
    return "\n".join(lines)


def compile_program(program, plan, cache, compile_fn=None):
    """(run, source): the module compiled by Numba through compile.py's module cache, handed
    in as cache = (load_module, njit_options, versions) (compile.py imports this package, not
    the other way): its file is written first and its entries are njit(cache=True), so a new
    process loads them from disk. Host steps run between entries (run.steps); compile_fn
    compiles the nested Functions of control flow that stays a host step."""
    import hashlib
    from pathlib import Path

    import numba
    import numpy as np

    from ...ir.types import NP_DTYPES
    from . import host
    from .run import runner, steps
    load_module, njit_options, versions = cache
    fn = plan.fn
    split = steps(program)
    compiled = [s for s in split if isinstance(s, list)]
    support = hashlib.sha256(Path(__file__).with_name("numba_support.py").read_bytes())
    header = f"# {versions()}, kernel_ir support {support.hexdigest()[:16]}\n"
    text = source(program, compiled, 1 + len(fn.params) + len(fn.results) + len(plan.consts),
                  lambda kind, parallel: njit_options(kind, parallel=parallel), header)
    dtypes = [*(NP_DTYPES[d] for d in ARENA), *(v.type.np_dtype for v in fn.params),
              *(v.type.np_dtype for v in fn.results), *(c.dtype for c in plan.consts), np.int64]
    signature = tuple(numba.types.Array(numba.from_dtype(np.dtype(d)), 1, "C") for d in dtypes)
    key = hashlib.sha256(text.encode()).hexdigest()
    module, _ = load_module(text, key, program.name,
                            sum(len(parts(program, s)) for s in compiled),
                            {f"entry{e}": signature for e in range(len(compiled))})
    views = [np.dtype(NP_DTYPES[d]) for d in ARENA]

    def entry(function):
        def call(arrays, status):
            arena, *rest = arrays
            cells = np.zeros(2, np.int64)
            code = function(*[arena.view(d) for d in views], *[a.reshape(-1) for a in rest],
                            cells)
            status[0] = cells[0]
            return code
        return call
    entries = iter(getattr(module, f"entry{e}") for e in range(len(compiled)))
    calls = [entry(next(entries)) if isinstance(s, list) else host.step(s, compile_fn)
             for s in split]
    run = runner(calls, plan, program.errors)
    run.compiled = {k: v for c in calls for k, v in getattr(c, "compiled", {}).items()}
    return run, text
