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
function of a range of its iterations, run by chunks on the caller's and threads.py's worker
threads; each chunk runs its iterations as the serial loop would.

The first line each run of statements of one op renders ends with that op's note (`; %2 =
tanh %1 : f64[1000]   (tour.py:5)`); `declarations` is a query on the nodes, so a module
declares only what it calls; a part finds its arrays' data through `data_function`.
"""

from __future__ import annotations

import struct

from .nodes import Alu, Call, Gemm, Get, Host, If, Load, Loop, Note, Raise, Reg, Set, Store
from .nodes import While, walk

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
        self.note = ""                  # the note of the statement rendered last
        self.pending = ""               # a note for the end of the next line emitted
        self.carried: set = set()       # the notes the current group's statements carry

    def fresh(self, stem="t") -> str:
        return f"%{stem}{next(self.names)}"

    def emit(self, *lines):
        self.lines.extend("  " + line for line in lines)
        if self.pending and lines:          # the note of the statement these lines begin
            self.lines[-len(lines)] += f"  ; {self.pending}"
            self.pending = ""

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
            note = getattr(s, "note", "")
            if note and note != self.note:          # once for a run of one op's statements
                if "\n" in note:
                    self.lines += [f"  ; {line}" for line in note.splitlines()]
                else:
                    self.pending = note
                self.note = note
            _RENDER[type(s)](self, s)
            self.pending = ""


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
    from .threads import available
    if s.parallel and available():
        _parallel(part, s)
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


def _parallel(part, s):
    """The loop as a task `i64 (arrays, status, first, last)` running iterations first ..
    last - 1, its chunks taken by the caller and the workers (threads.py)."""
    from . import partials
    from .rewrite import visits
    name = f"{part.name}_task{next(part.names)}"
    task = Part(part.names, name, part.data_offset)
    head, done = task.fresh("h")[1:], task.fresh("x")[1:]
    task.lines += ["  %any = icmp ult i64 %first, %last",
                   f"  br i1 %any, label %{head}, label %{done}"]
    _counted(task, s, ("%first", "entry"), "%last", head, done)
    task.lines += ["  ret i64 0", "}"]
    part.tasks += [*task.tasks, "\n".join([
        f"define internal i64 @{name}(ptr %arrays, ptr %status, i64 %first, i64 %last) "
        f"nounwind {{", "entry:", *_head(task, part.data_offset), *task.lines])]
    chunk = max(1, -(-partials.CHUNK_VISITS * s.extent // max(1, visits(s))))
    code, ok = part.fresh("r"), part.fresh()
    bad, good = part.fresh("e")[1:], part.fresh("c")[1:]
    part.emit(f"{code} = call i64 @fusegrad_threads_run(ptr @{name}, ptr %arrays, "
              f"ptr %status, i64 {s.extent}, i64 {chunk})",
              f"{ok} = icmp eq i64 {code}, 0", f"br i1 {ok}, label %{good}, label %{bad}")
    part.lines += [f"{bad}:", f"  ret i64 {code}", f"{good}:"]
    part.current = good


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
    """The group's equations no statement carries (a constant folded into its users)."""
    part.lines += [f"  ; {line}" for line in s.text.splitlines() if line not in part.carried]


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
    head = [f"  %p{slot} = call ptr @{DATA}(ptr %arrays, i64 {slot})"
            for slot in sorted(part.slots)]
    return head + [f"  {v.name} = alloca {LL[v.dtype]}" for v in sorted(part.vars, key=str)]


DATA = "fusegrad.data"


def data_function(data_offset: int) -> str:
    """`@fusegrad.data(arrays, slot)`: where array `slot` of the table keeps its data (its
    pointer `data_offset` bytes into the array object), inlined at O2. Every module whose
    parts read arrays defines it."""
    return "\n".join([
        f"define internal ptr @{DATA}(ptr %arrays, i64 %slot) alwaysinline nounwind {{",
        "entry:", "  %cell = getelementptr ptr, ptr %arrays, i64 %slot",
        "  %array = load ptr, ptr %cell",
        f"  %field = getelementptr i8, ptr %array, i64 {data_offset}",
        "  %data = load ptr, ptr %field", "  ret ptr %data", "}"])


def function(name: str, groups: list, names, data_offset: int, internal: bool) -> str:
    """One part: `i64 @name(ptr %arrays, ptr %status)` running groups in order, and the
    task functions of its parallel loops."""
    part = Part(names, name, data_offset)
    for stmts in groups:
        part.carried = {s.note for s in walk(stmts) if getattr(s, "note", "")}
        part.render(stmts)
    head = [f"define {'internal ' if internal else ''}i64 @{name}(ptr %arrays, ptr %status) "
            f"noinline nounwind {{", "entry:", *_head(part, data_offset)]
    return "\n\n".join([*part.tasks, "\n".join([*head, *part.lines, "  ret i64 0", "}"])])


def scalar_function(name: str, fn) -> tuple:
    """(definition, declaration) of a scalar Function (outline.py): `@name(params) -> result`,
    its statements Alus, no memory touched; inlined where the module it is in calls it."""
    t = LL[fn.result.dtype]
    params = ", ".join(f"{LL[p.dtype]} {p.name}" for p in fn.params)
    lines = [f"define {t} @{name}({params}) alwaysinline nounwind {{", "entry:"]
    lines += [f"  {s.out.name} = {alu(s)}" for s in fn.body]
    lines += [f"  ret {t} {literal(fn.result)}", "}"]
    return "\n".join(lines), f"declare {t} @{name}({', '.join(LL[p.dtype] for p in fn.params)})"


def summary(name: str, fn) -> str:
    """A scalar Function (or, for fn None, data_function) as `.source` shows it: one line
    (FUSEGRAD_DEBUG=3: in full)."""
    if fn is None:
        return f"; @{name}(ptr, i64) -> ptr: the data pointer of array i64 of the table"
    params = ", ".join(LL[p.dtype] for p in fn.params)
    return (f"; @{name}({params}) -> {LL[fn.result.dtype]}: {len(fn.body)} instructions of "
            f"{name.split('.')[0]}'s scalar rule, inlined where called")


def declarations(groups, functions=None, defined: bool = False) -> list:
    """The `declare` lines of what the statements of groups call, a query on the nodes: C's
    and LLVM's math, ?gemm, the thread pool, and the program's scalar Functions (`functions`,
    name -> Function) unless `defined` beside them. Only what is used, each once."""
    out: dict = {}
    for s in (s for stmts in groups for s in walk(stmts)):
        line = _declaration(s, functions or {}, defined)
        for one in ([line] if isinstance(line, str) else line or ()):
            out.setdefault(one)
    return list(out)


def _declaration(s, functions, defined):
    from .builder import LIBM
    if isinstance(s, Alu) and s.op == "libm":
        dtype, arity, _ = LIBM[s.args[0]]
        return f"declare {LL[dtype]} @{s.args[0]}({', '.join([LL[dtype]] * arity)})"
    if isinstance(s, Alu) and s.op in _INTRINSIC and s.args[0].dtype in _SUFFIX:
        t, suffix = LL[s.args[0].dtype], _SUFFIX[s.args[0].dtype]
        return f"declare {t} @llvm.{s.op}.{suffix}({', '.join([t] * len(s.args))})"
    if isinstance(s, Call) and not defined:
        return scalar_function(s.fn, functions[s.fn])[1]
    if isinstance(s, Gemm):
        from .. import cblas
        t, n = LL[s.dtype], f"i{cblas.BITS}"
        return (f"declare void @fusegrad_{'d' if s.dtype == 'f64' else 's'}gemm(i32, i32, i32, "
                f"{n}, {n}, {n}, {t}, ptr, {n}, ptr, {n}, {t}, ptr, {n})")
    if isinstance(s, Loop) and s.parallel:
        from .threads import available
        if available():
            return "declare i64 @fusegrad_threads_run(ptr, ptr, ptr, i64, i64)"
    return None
