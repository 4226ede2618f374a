"""Compiling a kernel-IR program with llvmlite, and calling it.

The hot groups (outline.hot) that visit the most elements, up to HOT_LOOPS loops of them,
and the program's scalar Functions go through LLVM's O2 pipeline for this CPU with its loop
vectorizer; the rest, often thousands of short loops in an unrolled program, are compiled at
level 0 with FastISel, linear in their length. The parts take the table of the array objects
themselves ([arena, params..., results..., constants...]) and int64 status cells; an entry
takes the address of one tuple (status cells, arena, params...) whose items are that table, so
a call is one ctypes call of one integer (a table built in ctypes cost microseconds a call),
and returns 0 or the number of the error a Raise met; the runner raises it. A program of one
compiled step gets a quick runner (`_quick`: Python written out once, f64[] params passed as
floats, the arena and status on the entry's stack when nothing raises), so a call of a short
function costs what a call of Numba's entry does (W3: 1.5 us through fg.jit). Host steps
(nodes.Host) split the program: each run of groups between them is an entry of its own, and
the runner calls entries and host steps (host.py) in order on the same table of arrays.
Parallel loops run by chunks on threads.py's workers, started on the first compile of a
program that has one; the bits are the same on any number of threads.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import sys
from typing import NamedTuple

import numpy as np

from .poison import POISON_VALUE, empty, poison_on
from . import llvm as render
from . import host
from .jit import FLOAT_OFFSET, ITEMS_OFFSET, machine_code
from .nodes import Gemm, Host, Loop, Raise, While, walk

HOT_ELEMENTS = 1024
HOT_LOOPS = 32
_COUNT = itertools.count()


def steps(program) -> list:
    """The program split at its host steps: lists of group indices (one compiled entry each)
    and the Host nodes between them, in order."""
    out: list = []
    for g, stmts in enumerate(program.groups):
        host = next((s for s in stmts if isinstance(s, Host)), None)
        if host is not None:
            out.append(host)
        elif out and isinstance(out[-1], list):
            out[-1].append(g)
        else:
            out.append([g])
    return out


def source(program, data_offset: int, hot_loops: int | None = None, quick=None,
           slots: int = 0) -> tuple:
    """(hot text, cold text, hot function names, the entry name of each compiled step, the
    text `.source` shows: the parts in full, each scalar Function and entry one line; under
    FUSEGRAD_DEBUG=3 compile_program shows both modules in full)."""
    prefix = f"kir{next(_COUNT)}"
    loops = [sum(isinstance(s, Loop) for s in walk(g)) for g in program.groups]
    hot, budget = set(), HOT_LOOPS if hot_loops is None else hot_loops
    for g in sorted(range(len(program.groups)), key=lambda g: -program.work[g]):
        if program.work[g] < HOT_ELEMENTS or loops[g] > budget:
            break
        if program.hot and not program.hot[g]:
            continue
        hot.add(g)
        budget -= loops[g]
    names, texts = itertools.count(), {True: [], False: []}
    shown: dict = {True: [], False: []}     # what .source shows of each module: its parts,
    lines: dict = {True: [], False: []}     # and a line for each function it does not show
    entries, hot_names, count = [], [], itertools.count()
    for name, fn in program.functions.items():       # at O2, called from either module
        texts[True].append(render.scalar_function(name, fn)[0])
        lines[True].append(render.summary(name, fn))
        hot_names.append(name)
    for gs in (s for s in steps(program) if isinstance(s, list)):
        parts: list = []                 # (is hot, [group indices], lines)
        for g in gs:
            size = sum(1 for _ in walk(program.groups[g]))
            if parts and parts[-1][0] == (g in hot) and parts[-1][2] + size < render.PART_LINES:
                parts[-1][1].append(g)
                parts[-1][2] += size
            else:
                parts.append([g in hot, [g], size])
        called = []
        for is_hot, part, _ in parts:
            name = f"{prefix}_part{next(count)}"
            called.append(name)
            texts[is_hot].append(render.function(name, [program.groups[g] for g in part],
                                                 names, data_offset, internal=not is_hot))
            shown[is_hot].append(texts[is_hot][-1])
            if is_hot:
                texts[False].append(f"declare i64 @{name}(ptr, ptr)")
                hot_names.append(name)
        entries.append(f"{prefix}_entry{len(entries)}")
        texts[False].append(_entry(entries[-1], called, data_offset, quick, slots))
        lines[False].append(f"; @{entries[-1]}: calls " + ", ".join(f"@{c}" for c in called)
                            + " in order, returning the first error number one returns")
    hot_text, cold_text, shown_text = _modules(program, hot, texts, (lines, shown), data_offset)
    return hot_text, cold_text, hot_names, entries, shown_text


def _modules(program, hot: set, texts: dict, shown: tuple, data_offset: int) -> tuple:
    """(hot text, cold text, the text shown): each module's declarations (only what its
    statements call: a query on the nodes) and its texts, render.data_function in each module
    that has parts."""
    functions = program.functions
    groups = {True: [program.groups[g] for g in sorted(hot)],
              False: [program.groups[g] for s in steps(program) if isinstance(s, list)
                      for g in s if g not in hot]}
    full, visible = {}, {}
    for module in (True, False):
        data = [render.data_function(data_offset)] if groups[module] else []
        bodies = [fn.body for fn in functions.values()] if module else []
        declared = render.declarations(groups[module] + bodies, functions, defined=module)
        full[module] = "\n".join([*declared, "\n\n".join([*data, *texts[module]])])
        declared = render.declarations(groups[module], functions, defined=module)
        summary = [render.summary(render.DATA, None)] if data else []
        visible[module] = "\n".join(x for x in [*declared, *summary, *shown[0][module],
                                                "\n\n".join(shown[1][module])] if x)
    hot_part = f"\n; the longest loops, optimized:\n{visible[True]}" if texts[True] else ""
    return full[True], full[False], visible[False] + hot_part


def _entry(name: str, parts: list, data_offset: int, quick=None, slots: int = 0) -> str:
    """An entry of the address of the runner's tuple, calling parts in order and returning the
    first error number one returns. The tuple is (status cells, arena, params..., results...,
    constants...): from the arena on, its items are the table of arrays. For the quick runner
    (a Quick) the tuple starts with the floats of params `scalars`, and the entry copies the
    table (`slots` long) onto its stack, where each such param's slot gets an object of its
    own whose data is the float's value; with `stack` (not None), the arena (`stack` bytes,
    all ones if `poison`) and the status cells are on the stack too (the tuple holds None)."""
    scalars, stack = (quick.scalars, quick.stack) if quick else ((), None)
    n = len(scalars)
    lines = [f"define i64 @{name}(ptr %objects) nounwind {{", "entry:",
             f"  %items = getelementptr i8, ptr %objects, i64 {ITEMS_OFFSET + 8 * n}"]
    if stack is None:
        lines += ["  %cells = load ptr, ptr %items", _at("%data", "%cells", data_offset),
                  "  %status = load ptr, ptr %data"]
    else:
        lines += ["  %status = alloca [2 x i64]", "  store [2 x i64] zeroinitializer, ptr %status",
                  f"  %arena = alloca i64, i64 {max(stack // 8, 1)}, align 64",
                  *_object("arena", "%arena", data_offset)]
    for k in range(n):
        lines += [f"  %x{k}.at = getelementptr ptr, ptr %objects, i64 {ITEMS_OFFSET // 8 + k}",
                  f"  %x{k} = load ptr, ptr %x{k}.at", _at(f"%v{k}.at", f"%x{k}", FLOAT_OFFSET),
                  f"  %v{k} = load double, ptr %v{k}.at", f"  %c{k} = alloca double",
                  f"  store double %v{k}, ptr %c{k}", *_object(f"x{k}", f"%c{k}", data_offset)]
    if quick is None:
        lines.append("  %arrays = getelementptr ptr, ptr %items, i64 1")
    else:                                   # the allocas above stay in the entry block
        lines += [f"  %arrays = alloca ptr, i64 {slots}", *_loop("copy", slots, [
            "  %copy.j = add i64 %copy.i, 1",
            "  %copy.src = getelementptr ptr, ptr %items, i64 %copy.j",
            "  %copy.item = load ptr, ptr %copy.src",
            "  %copy.to = getelementptr ptr, ptr %arrays, i64 %copy.i",
            "  store ptr %copy.item, ptr %copy.to"])]
    if stack is not None:
        lines.append("  store ptr %arena.object, ptr %arrays")
        if quick.poison:
            lines += _loop("fill", stack // 8, ["  %fill.at = getelementptr i64, ptr %arena, "
                                                "i64 %fill.i", "  store i64 -1, ptr %fill.at"])
    for k, i in enumerate(scalars):         # param i is in slot 1 + i
        lines += [f"  %s{k} = getelementptr ptr, ptr %arrays, i64 {1 + i}",
                  f"  store ptr %x{k}.object, ptr %s{k}"]
    for k, part in enumerate(parts):
        lines += [f"  %r{k} = call i64 @{part}(ptr %arrays, ptr %status)",
                  f"  %f{k} = icmp ne i64 %r{k}, 0", f"  br i1 %f{k}, label %out{k}, "
                  f"label %next{k}", f"out{k}:", f"  ret i64 %r{k}", f"next{k}:"]
    return "\n".join([*lines, "  ret i64 0", "}", ""])


def _at(name: str, base: str, offset: int) -> str:
    return f"  {name} = getelementptr i8, ptr {base}, i64 {offset}"


def _object(name: str, data: str, data_offset: int) -> list:
    """%name.object: an object on the stack as the parts see an array, its data at `data`."""
    return [f"  %{name}.object = alloca i8, i64 {data_offset + 8}, align 8",
            _at(f"%{name}.data", f"%{name}.object", data_offset),
            f"  store ptr {data}, ptr %{name}.data"]


def _loop(name: str, count: int, body: list) -> list:
    """body for %name.i in range(count), in blocks of its own."""
    if count <= 0:
        return []
    return [f"  br label %{name}.from", f"{name}.from:", f"  br label %{name}", f"{name}:",
            f"  %{name}.i = phi i64 [0, %{name}.from], [%{name}.next, %{name}]", *body,
            f"  %{name}.next = add i64 %{name}.i, 1",
            f"  %{name}.done = icmp eq i64 %{name}.next, {count}",
            f"  br i1 %{name}.done, label %{name}.end, label %{name}", f"{name}.end:"]


# The quick runner's arena lives on the entry's stack up to this many bytes, so that a call
# takes no state from the pool, and its table of arrays (8 bytes a slot) up to this many slots:
# 48 KiB at most, little next to a thread's stack (8 MiB by default on Linux).
STACK_ARENA = 1 << 14
STACK_SLOTS = 1 << 12


class Quick(NamedTuple):
    """How the quick runner calls a program of one compiled step on one thread: the f64[]
    params it passes as floats (`scalars`: not a param a result copies), the arena's bytes if
    it and the status cells go on the entry's stack (`stack`: a program that raises nothing,
    with at most STACK_ARENA bytes of arena, and no result copied out of it; else None: from
    the pool), and whether the arena starts all ones and the results as poison (`poison`)."""
    scalars: list
    stack: int | None
    poison: bool


def _quick_of(program, plan, split, threaded: bool) -> Quick | None:
    slots = 1 + len(plan.fn.params) + len(plan.fn.results) + len(plan.consts)
    if len(split) != 1 or not isinstance(split[0], list) or threaded or slots > STACK_SLOTS:
        return None
    copied = {c[1] for c in _copies(plan)}          # slots results are copied from
    scalars = [i for i, p in enumerate(plan.fn.params) if FLOAT_OFFSET is not None
               and p.shape == () and p.type.np_dtype == np.float64 and 1 + i not in copied]
    raises = program.errors or any(isinstance(s, Raise) for g in program.groups
                                   for s in walk(g))
    stack = plan.arena if not raises and plan.arena <= STACK_ARENA and 0 not in copied \
        else None
    return Quick(scalars, stack, poison_on())


# A quick call of a program visiting at most this many elements keeps the GIL (ctypes'
# PYFUNCTYPE): letting it go and taking it back costs more (60 ns) than such a call's loops.
# Not one with a While (trips unknown) or a Gemm (NumPy's ?gemm: its work is not counted).
GIL_ELEMENTS = 4096


def _keeps_gil(program, quick) -> bool:
    return quick is not None and sum(program.work) <= GIL_ELEMENTS and not any(
        isinstance(s, (While, Gemm)) for g in program.groups for s in walk(g))


def compile_program(program, plan, data_offset: int, compile_fn=None):
    """`run(leaves) -> list of arrays`, and the LLVM text. compile_fn compiles the nested
    Functions of host steps' control flow (codegen.compile.compile_numba)."""
    import llvmlite.binding as llvm
    split = steps(program)
    threaded = any(isinstance(s, Loop) and s.parallel for g in program.groups for s in walk(g))
    quick = _quick_of(program, plan, split, threaded)
    slots = 1 + len(plan.fn.params) + len(plan.fn.results) + len(plan.consts)
    hot, cold, hot_names, entry_names, shown = source(program, data_offset, quick=quick,
                                                        slots=slots)
    if hot_names:
        for name, address in zip(hot_names, machine_code(hot, hot_names, 2)):
            llvm.add_symbol(name, address)
    addresses = iter(machine_code(cold, entry_names, 0, fast_isel=True)
                     if entry_names else ())
    kind = (ctypes.PYFUNCTYPE if _keeps_gil(program, quick) else ctypes.CFUNCTYPE)(
        ctypes.c_int64, ctypes.c_void_p)
    calls, hosts = [], []
    for s in split:
        if isinstance(s, list):
            calls.append(kind(next(addresses)))
        else:
            calls.append(host.step(s, compile_fn))
            hosts.append(f"; host step {s.op.prim} at {s.op.loc or '?'} between compiled parts")
    if os.environ.get("FUSEGRAD_DEBUG", "") >= "3":      # every function in full
        shown = cold + (f"\n; the longest loops, optimized:\n{hot}" if hot_names else "")
    text = (f"; fusegrad: @{program.name} as kernel IR (codegen/kernel_ir)\n"
            + "".join(line + "\n" for line in hosts) + shown)
    from .threads import available, pool
    if threaded and available():
        pool().start()
    run = runner(calls, plan, program.errors, quick)
    run.compiled = {k: v for c in calls for k, v in getattr(c, "compiled", {}).items()}
    return run, text


python_function = type(lambda: None)


def _copies(plan) -> list:
    """(result, slot, byte offset, size, dtype, shape) of each result that is not its own array
    (a param, a constant, another result, a part of the arena): the runner copies it out."""
    owned = {i: r for r, i in plan.result_slot.items()}
    out = []
    for i, r in enumerate(plan.fn.results):
        root = plan.of(r)
        if owned.get(i) is not root:
            b = plan.where[root]
            out.append((i, b.slot, b.byte, r.type.size, r.type.np_dtype, r.shape))
    return out


# A result of at least this many bytes is made from the array a former call returned when
# nothing holds that array any more (its reference count says so): a fresh np.empty of
# megabytes is new pages, faulted in on first touch (W1 at 10**6: 800 faults, 3 ms of the
# kernel's 9 a call), as NumPy's allocator never keeps them.
RECYCLE_BYTES = 1 << 16


def _allocator(shape, dtype, new, poison):
    """make(): a new array for a result, or the one a former call returned if nobody holds
    it now. The array is listed as spare while the call (then its caller) holds it, so no
    other call takes it before it is free; under poison it is filled again."""
    if math.prod(shape) * dtype.itemsize < RECYCLE_BYTES:
        return None
    spare, refs, garbage = [], sys.getrefcount, POISON_VALUE[dtype.name]

    def make():
        try:
            a = spare.pop()
        except IndexError:
            a = None
        if a is None or refs(a) != 2:        # held elsewhere: the caller kept it
            a = new(shape, dtype)
        elif poison:
            a.fill(garbage)
        spare.append(a)
        return a
    return make


def runner(calls, plan, errors, quick=None):
    """run(leaves): the compiled entries (ctypes functions of the address of one tuple, the
    status cells and the table of arrays) and Python steps (host steps, Numba entries:
    functions of the table of arrays and the status cells) called in order; a result that is
    not its own array is copied out. A call takes an idle state (status cells, an arena with
    its views of the results it holds) or makes one, and leaves it idle when done: two threads
    calling at once never share one, and the results are arrays no one else holds (new, or
    big ones _allocator recycles). With `quick` (compile_program's _quick_of), the quick
    runner."""
    poison = poison_on()
    fn = plan.fn
    results = [(r.shape, np.dtype(r.type.np_dtype)) for r in fn.results]
    params = [np.dtype(p.type.np_dtype) for p in fn.params]
    copies = _copies(plan)
    from_arena = [c for c in copies if c[1] == 0]
    elsewhere = [c for c in copies if c[1] != 0]
    consts = tuple(plan.consts)
    ascontiguous = np.ascontiguousarray
    new = (lambda shape, dtype: empty(shape, dtype.name, True)) if poison else np.empty
    idle: list = []                 # states no call holds
    recycled = [_allocator(shape, dtype, new, poison) for shape, dtype in results]

    def state():
        arena = np.empty(plan.arena, np.uint8)
        return np.zeros(2, np.int64), arena, \
            [(i, arena[byte:byte + size * np.dtype(dt).itemsize].view(dt).reshape(shape))
             for i, _, byte, size, dt, shape in from_arena]

    def fail(code, status):
        if status is None:
            raise RuntimeError(f"kernel IR entry returned error {code} with no Raise")
        kind, message = errors[code - 1]
        raise kind(message.format(int(status[0])))

    if quick is not None:
        return _quick(calls[0], quick, params, [p.shape for p in fn.params], results, consts,
                      copies, (idle, state, fail, new, recycled))

    def in_order(objects):
        status, arrays = objects[0], objects[1:]
        for call in calls:
            code = call(arrays, status) if call.__class__ is python_function else \
                call(id(objects))
            if code:
                return code
        return 0

    def run(leaves):
        held = idle.pop() if idle else state()
        status, arena, views = held
        if poison:
            arena.fill(0xFF)
        outs = [make() if make else new(shape, dtype)
                for make, (shape, dtype) in zip(recycled, results)]
        objects = (status, arena, *[ascontiguous(x, dt) for x, dt in zip(leaves, params)],
                   *outs, *consts)
        try:
            code = in_order(objects)
            for i, view in views:
                outs[i] = view.copy()
        finally:
            idle.append(held)
        if code:
            fail(code, status)
        for i, slot, _, size, _, shape in elsewhere:
            outs[i] = objects[slot + 1].reshape(-1)[:size].reshape(shape).copy()
        return outs
    return run


def _quick(entry, quick, params, shapes, results, consts, copies, helpers):
    """run for one compiled entry (_entry's quick form), written out as Python text once (as
    api._rebuilder is): no loop, no list built but the results'. Params in `scalars` go as
    floats (float(x)); with `stack`, no state is taken: the entry has its own. A result that
    is not its own array is copied out of the state's view of the arena (before the state is
    left idle) or out of its slot's array."""
    scalars, stack, poison = quick
    n, base = len(params), 1 + len(scalars)      # objects[base + slot] is slot's array
    items = [*[f"float(x{i})" for i in scalars],
             *(["None", "None"] if stack is not None else ["held[0]", "held[1]"]),
             *["None" if i in scalars else f"asc(x{i}, p{i})" for i in range(n)],
             *[f"m{j}()" if helpers[4][j] else f"new(s{j}, d{j})" for j in range(len(results))],
             *[f"c{k}" for k in range(len(consts))]]
    outs = [f"objects[{base + 1 + n + j}]" for j in range(len(results))]
    shapes = [None, *shapes, *(shape for shape, _ in results), *(c.shape for c in consts)]
    views = []
    for i, slot, _, size, _, _ in copies:
        if slot == 0:
            views.append(f"    r{i} = held[2][{len(views)}][1].copy()")
            outs[i] = f"r{i}"
        elif math.prod(shapes[slot]) == size:       # all of the slot's array
            outs[i] = f"objects[{base + slot}].reshape(s{i}).copy()"
        else:
            outs[i] = f"objects[{base + slot}].reshape(-1)[:{size}].reshape(s{i}).copy()"
    call = [f"    objects = ({', '.join(items)},)", "    code = entry(id(objects))"]
    if stack is None:
        call = ["    held = idle.pop() if idle else state()",
                *(["    held[1].fill(255)"] if poison else []), *call, *views,
                "    idle.append(held)", "    if code:", "        fail(code, held[0])"]
    else:                               # nothing raises: a code would be a bug, never ignored
        call += ["    if code:", "        fail(code, None)"]
    text = "\n".join([
        "def quick(leaves):",
        f"    {''.join(f'x{i}, ' for i in range(n))}= leaves" if n else "", *call,
        f"    return [{', '.join(outs)}]"])
    idle, state, fail, new, recycled = helpers
    scope = {"idle": idle, "state": state, "fail": fail, "entry": entry, "new": new,
             **{f"m{j}": make for j, make in enumerate(recycled)},
             "asc": np.ascontiguousarray, **{f"p{i}": dt for i, dt in enumerate(params)},
             **{f"s{j}": shape for j, (shape, _) in enumerate(results)},
             **{f"d{j}": dt for j, (_, dt) in enumerate(results)},
             **{f"c{k}": c for k, c in enumerate(consts)}}
    exec(text, scope)
    return scope["quick"]
