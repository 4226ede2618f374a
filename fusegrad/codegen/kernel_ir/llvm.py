"""The kernel IR rendered as LLVM IR text: a table from nodes and scalar ops to lines.

Each group becomes lines of one function `i64 @part(ptr arrays, ptr status)`; a part holds
consecutive groups up to PART_LINES lines and returns 0, or a Raise's error number after
storing the value it quotes in status[0]. Loops count with phi nodes (extents are known, so
a loop runs at least once or is not there), If and While branch between blocks; an
element's address is its buffer's base (an array's data pointer, loaded once per part, plus
the byte offset) and the index's terms.
Memory holds f32, f64, i64 and bool as i8; registers hold bool as i1. No fast-math flags:
fma is the explicit llvm.fma, so every optimization level gives the same bits. A Var is an
alloca of the function (LLVM's O2 keeps it in a register). A `parallel` loop becomes a task
function with the C signature of OpenBLAS's level-1 routines, handed to its thread pool
through pool.py's `blas_level1_thread` (or called once, for the whole range, when OpenBLAS may
use one thread now, or status[1], set by the runner, is 0); each part runs its iterations as
the serial loop would.
"""

from __future__ import annotations

import struct

from .nodes import Alu, Call, Gemm, Get, Host, If, Load, Loop, Note, Raise, Reg, Set, Store
from .nodes import While

LL = {"f32": "float", "f64": "double", "i64": "i64", "i32": "i32", "bool": "i1"}
MEM = {**LL, "bool": "i8"}
_SUFFIX = {"f32": "f32", "f64": "f64"}
_FLOAT_OP = {"add": "fadd", "sub": "fsub", "mul": "fmul", "fdiv": "fdiv"}
_INT_OP = {"add": "add", "sub": "sub", "mul": "mul", "sdiv": "sdiv", "srem": "srem",
           "and": "and", "or": "or", "xor": "xor", "shl": "shl", "lshr": "lshr",
           "ashr": "ashr"}
_FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une",
         "uno": "uno"}
_ICMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
_BCMP = {**_ICMP, "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}
_INTRINSIC = ("fma", "sqrt", "fabs", "rint", "floor", "copysign")
PART_LINES = 1000


def literal(x) -> str:
    """An operand: a register's name or a constant's LLVM spelling."""
    if isinstance(x, Reg):
        return x.name
    v, dtype = x.value, x.dtype
    if dtype == "bool":
        return "true" if v else "false"
    if dtype in ("f32", "f64"):
        if dtype == "f32":
            v = struct.unpack("<f", struct.pack("<f", float(v)))[0]
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(v)))[0]
    return str(int(v))


def _arg(x) -> str:
    return f"{LL[x.dtype]} {literal(x)}"


def _convert(x, to: str) -> str:
    src = x.dtype
    a = _arg(x)
    if to == "bool":
        return f"fcmp une {a}, 0.0" if src in _SUFFIX else f"icmp ne {a}, 0"
    if src == "bool":
        return f"uitofp {a} to {LL[to]}" if to in _SUFFIX else f"zext {a} to {LL[to]}"
    if src in _SUFFIX and to in _SUFFIX:
        return f"{'fpext' if to == 'f64' else 'fptrunc'} {a} to {LL[to]}"
    if src in _SUFFIX:
        return f"fptosi {a} to {LL[to]}"
    if to in _SUFFIX:
        return f"sitofp {a} to {LL[to]}"
    return f"{'sext' if to == 'i64' else 'trunc'} {a} to {LL[to]}"


def alu(node: Alu) -> str:
    """The instruction of one scalar op (its right-hand side)."""
    op, args, out = node.op, node.args, node.out
    x = args[0]
    if op == "libm":                    # x names a C function of out's type
        return f"call {LL[out.dtype]} @{x}(" + ", ".join(_arg(a) for a in args[1:]) + ")"
    t = LL[x.dtype]
    if op == "select":
        return f"select i1 {literal(x)}, {_arg(args[1])}, {_arg(args[2])}"
    if op == "convert":
        return _convert(x, out.dtype)
    if op == "bitcast":
        return f"bitcast {_arg(x)} to {LL[out.dtype]}"
    names = ", ".join(literal(a) for a in args)
    if x.dtype in _SUFFIX:
        if op in _FCMP:
            return f"fcmp {_FCMP[op]} {t} {names}"
        if op == "neg":
            return f"fneg {t} {names}"
        if op in _INTRINSIC:
            return f"call {t} @llvm.{op}.{_SUFFIX[x.dtype]}(" + \
                ", ".join(_arg(a) for a in args) + ")"
        return f"{_FLOAT_OP[op]} {t} {names}"
    if op in _ICMP:
        return f"icmp {(_BCMP if x.dtype == 'bool' else _ICMP)[op]} {t} {names}"
    if op == "neg":
        return f"sub {t} 0, {names}"
    return f"{_INT_OP[op]} {t} {names}"


class Part:
    """The lines of one function: its blocks, the arrays it uses, fresh names."""

    def __init__(self, names, name="part", data_offset=0):
        self.names = names
        self.name = name
        self.data_offset = data_offset
        self.lines: list = []
        self.slots: set = set()
        self.vars: set = set()
        self.tasks: list = []           # texts of the task functions of parallel loops
        self.current = "entry"

    def fresh(self, stem="t") -> str:
        return f"%{stem}{next(self.names)}"

    def emit(self, *lines):
        self.lines.extend("  " + line for line in lines)

    def address(self, buf, index) -> str:
        self.slots.add(buf.slot)
        base = f"%p{buf.slot}"
        if buf.byte:
            base, prev = self.fresh("q"), base
            self.emit(f"{base} = getelementptr i8, ptr {prev}, i64 {buf.byte}")
        total = None
        for reg, stride in index.terms:
            term = reg.name
            if stride != 1:
                term = self.fresh()
                self.emit(f"{term} = mul nsw i64 {reg.name}, {stride}")
            if total is not None:
                name = self.fresh()
                self.emit(f"{name} = add nsw i64 {total}, {term}")
                term = name
            total = term
        if index.offset:
            if total is None:
                total = str(index.offset)
            else:
                name = self.fresh()
                self.emit(f"{name} = add nsw i64 {total}, {index.offset}")
                total = name
        if total is None:
            return base
        name = self.fresh("a")
        self.emit(f"{name} = getelementptr {MEM[buf.dtype]}, ptr {base}, i64 {total}")
        return name

    def render(self, stmts):
        for s in stmts:
            _RENDER[type(s)](self, s)


def _load(part, s):
    at = part.address(s.buf, s.index)
    if s.buf.dtype == "bool":
        raw = part.fresh()
        part.emit(f"{raw} = load i8, ptr {at}", f"{s.out.name} = icmp ne i8 {raw}, 0")
    else:
        part.emit(f"{s.out.name} = load {MEM[s.buf.dtype]}, ptr {at}")


def _store(part, s):
    at = part.address(s.buf, s.index)
    value = literal(s.value)
    if s.buf.dtype == "bool":
        wide = part.fresh()
        part.emit(f"{wide} = zext i1 {value} to i8")
        value = wide
    part.emit(f"store {MEM[s.buf.dtype]} {value}, ptr {at}")


def _loop(part, s):
    if s.parallel:
        from .. import pool_bind as pool        # OpenBLAS's pool, without Numba
        if pool.AVAILABLE:
            _parallel(part, s, pool._BOUND[0])
            return
    before, head, done = part.current, part.fresh("h")[1:], part.fresh("x")[1:]
    part.lines.append(f"  br label %{head}")
    _counted(part, s, ("0", before), s.extent, head, done)


def _counted(part, s, start, stop, head, done):
    """Loop s's body from block `head`, entered from block start[1] with s.var = start[0],
    stepping while s.var + 1 < stop, then on to block `done`."""
    following, more = part.fresh(), part.fresh()
    part.lines.append(f"{head}:")
    phi = len(part.lines)
    part.current = head
    part.render(s.body)
    part.lines.insert(phi, f"  {s.var.name} = phi i64 [{start[0]}, %{start[1]}], "
                           f"[{following}, %{part.current}]")
    part.emit(f"{following} = add nuw nsw i64 {s.var.name}, 1",
              f"{more} = icmp ult i64 {following}, {stop}",
              f"br i1 {more}, label %{head}, label %{done}")
    part.lines.append(f"{done}:")
    part.current = done


_TASK_ARGS = ("i64 %m, i64 %n, i64 %k, double %alpha, i64 %a, i64 %lda, i64 %b, i64 %ldb, "
              "i64 %c, i64 %ldc, i64 %sb")


def _parallel(part, s, mode: int):
    """The loop as a task `(m, n, k, alpha, a = first << 3, ..., c = arrays, ...)` running
    iterations first .. first + m - 1, split over OpenBLAS's threads."""
    name = f"{part.name}_task{next(part.names)}"
    task = Part(part.names, name, part.data_offset)
    head, done = task.fresh("h")[1:], task.fresh("x")[1:]
    task.lines += ["  %first = lshr i64 %a, 3", "  %last = add i64 %first, %m",
                   "  %any = icmp ult i64 %first, %last", f"  br i1 %any, label %{head}, "
                   f"label %{done}"]
    _counted(task, s, ("%first", "entry"), "%last", head, done)
    task.lines += ["  ret i64 0", "}"]
    part.tasks += [*task.tasks, "\n".join([
        f"define internal i64 @{name}({_TASK_ARGS}) nounwind {{", "entry:",
        "  %arrays = inttoptr i64 %c to ptr", *_head(task, part.data_offset), *task.lines])]
    threads, several, table = part.fresh("n"), part.fresh(), part.fresh()
    cell, allowed, free, many = part.fresh(), part.fresh(), part.fresh(), part.fresh()
    pooled, alone, join = (part.fresh(stem)[1:] for stem in ("par", "ser", "join"))
    address = f"ptrtoint (ptr @{name} to i64)"
    part.emit(f"{threads} = call i32 @fusegrad_pool_threads()",
              f"{several} = icmp sgt i32 {threads}, 1",
              f"{cell} = getelementptr i64, ptr %status, i64 1",     # the runner's say
              f"{allowed} = load i64, ptr {cell}", f"{free} = icmp ne i64 {allowed}, 0",
              f"{many} = and i1 {several}, {free}", f"{table} = ptrtoint ptr %arrays to i64",
              f"br i1 {many}, label %{pooled}, label %{alone}")
    part.lines.append(f"{pooled}:")
    part.emit(f"call i32 @fusegrad_pool_split(i32 {mode}, i64 {s.extent}, i64 0, i64 0, "
              f"i64 {table}, i64 0, i64 1, i64 0, i64 1, i64 {table}, i64 0, i64 {address}, "
              f"i32 {threads})", f"br label %{join}")
    part.lines.append(f"{alone}:")
    part.emit(f"call i64 @{name}(i64 {s.extent}, i64 0, i64 0, double 0.0, i64 0, i64 0, "
              f"i64 0, i64 0, i64 {table}, i64 0, i64 0)", f"br label %{join}")
    part.lines.append(f"{join}:")
    part.current = join


def _get(part, s):
    part.vars.add(s.var)
    part.emit(f"{s.out.name} = load {LL[s.var.dtype]}, ptr {s.var.name}")


def _set(part, s):
    part.vars.add(s.var)
    part.emit(f"store {LL[s.var.dtype]} {literal(s.value)}, ptr {s.var.name}")


def _raise(part, s):
    bad, ok = part.fresh("e")[1:], part.fresh("c")[1:]
    part.emit(f"br i1 {s.cond.name}, label %{bad}, label %{ok}")
    part.lines += [f"{bad}:", f"  store i64 {literal(s.value)}, ptr %status",
                   f"  ret i64 {s.error}", f"{ok}:"]
    part.current = ok


def _gemm(part, s):
    from .. import cblas
    t, n = LL[s.dtype], f"i{cblas.BITS}"
    a, b, c = (part.address(*where) for where in (s.a, s.b, s.c))
    part.emit(f"call void @fusegrad_{'d' if s.dtype == 'f64' else 's'}gemm(i32 "
              f"{cblas.ROW_MAJOR}, i32 {cblas.NO_TRANS}, i32 {cblas.NO_TRANS}, {n} {s.m}, "
              f"{n} {s.n}, {n} {s.k}, {t} 1.0, ptr {a}, {n} {s.k}, ptr {b}, {n} {s.n}, "
              f"{t} 0.0, ptr {c}, {n} {s.n})")


def _note(part, s):
    part.lines += [f"  ; {line}" for line in s.text.splitlines()]


def _if(part, s):
    then, orelse, end = (part.fresh(stem)[1:] for stem in ("then", "else", "end"))
    part.emit(f"br i1 {literal(s.cond)}, label %{then}, label %{orelse}")
    for label, body in ((then, s.then), (orelse, s.orelse)):
        part.lines.append(f"{label}:")
        part.current = label
        part.render(body)
        part.emit(f"br label %{end}")
    part.lines.append(f"{end}:")
    part.current = end


def _while(part, s):
    head, body, done = (part.fresh(stem)[1:] for stem in ("test", "trip", "done"))
    part.emit(f"br label %{head}")
    part.lines.append(f"{head}:")
    part.current = head
    part.render(s.test)
    part.emit(f"br i1 {literal(s.cond)}, label %{body}, label %{done}")
    part.lines.append(f"{body}:")
    part.current = body
    part.render(s.body)
    part.emit(f"br label %{head}")
    part.lines.append(f"{done}:")
    part.current = done


def _host(part, s):
    raise TypeError(f"a host step ({s.op.prim}) is not LLVM: run.py splits the entry at it")


def _call(part, s):
    args = ", ".join(_arg(a) for a in s.args)
    part.emit(f"{s.out.name} = call {LL[s.out.dtype]} @{s.fn}({args})")


_RENDER = {Alu: lambda part, s: part.emit(f"{s.out.name} = {alu(s)}"), Call: _call,
           Load: _load,
           Store: _store, Loop: _loop, Raise: _raise, Gemm: _gemm, Note: _note, Host: _host,
           If: _if, While: _while, Get: _get, Set: _set}


def _head(part, data_offset: int) -> list:
    """The entry block's lines: each array's data pointer, each Var's cell."""
    head = []
    for slot in sorted(part.slots):
        head += [f"  %s{slot} = getelementptr ptr, ptr %arrays, i64 {slot}",
                 f"  %o{slot} = load ptr, ptr %s{slot}",
                 f"  %d{slot} = getelementptr i8, ptr %o{slot}, i64 {data_offset}",
                 f"  %p{slot} = load ptr, ptr %d{slot}"]
    return head + [f"  {v.name} = alloca {LL[v.dtype]}" for v in sorted(part.vars, key=str)]


def function(name: str, groups: list, names, data_offset: int, internal: bool) -> str:
    """One part: `i64 @name(ptr %arrays, ptr %status)` running groups in order, and the
    task functions of its parallel loops."""
    part = Part(names, name, data_offset)
    for stmts in groups:
        part.render(stmts)
    head = [f"define {'internal ' if internal else ''}i64 @{name}(ptr %arrays, ptr %status) "
            f"noinline nounwind {{", "entry:", *_head(part, data_offset)]
    return "\n\n".join([*part.tasks, "\n".join([*head, *part.lines, "  ret i64 0", "}"])])


def scalar_function(name: str, fn) -> tuple:
    """(definition, declaration) of a scalar Function (outline.py): `@name(params) -> result`,
    its statements Alus, no memory touched."""
    t = LL[fn.result.dtype]
    params = ", ".join(f"{LL[p.dtype]} {p.name}" for p in fn.params)
    lines = [f"define {t} @{name}({params}) nounwind {{", "entry:"]
    lines += [f"  {s.out.name} = {alu(s)}" for s in fn.body]
    lines += [f"  ret {t} {literal(fn.result)}", "}"]
    return "\n".join(lines), f"declare {t} @{name}({', '.join(LL[p.dtype] for p in fn.params)})"


def declarations(text: str) -> list:
    """The declarations text calls: only what is used."""
    from .. import cblas
    out = []
    for t, s in (("float", "f32"), ("double", "f64")):
        for f, arity in (("fma", 3), ("sqrt", 1), ("fabs", 1), ("rint", 1), ("floor", 1),
                         ("copysign", 2)):
            if f"@llvm.{f}.{s}(" in text:
                out.append(f"declare {t} @llvm.{f}.{s}({', '.join([t] * arity)})")
    from .builder import LIBM
    for f, (dtype, arity, _) in LIBM.items():
        if f"@{f}(" in text:
            out.append(f"declare {LL[dtype]} @{f}({', '.join([LL[dtype]] * arity)})")
    if "@fusegrad_pool_split(" in text:
        out += ["declare i32 @fusegrad_pool_threads()",
                f"declare i32 @fusegrad_pool_split(i32, {', '.join(['i64'] * 11)}, i32)"]
    for c, t in (("s", "float"), ("d", "double")):
        if f"@fusegrad_{c}gemm(" in text:
            n = f"i{cblas.BITS}"
            out.append(f"declare void @fusegrad_{c}gemm(i32, i32, i32, {n}, {n}, {n}, {t}, "
                       f"ptr, {n}, ptr, {n}, {t}, ptr, {n})")
    return out
