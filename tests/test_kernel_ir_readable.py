"""Generated code that reads like the kernel it is (issue 24, item 5): every statement the
kernel IR builds for an IR op carries that op's equation and the user's file:line, both
renderings write it as a comment once per run of that op's statements, and an LLVM module
declares only what it calls. Text only: nothing here compiles."""

import re

import numpy as np

import fusegrad as fg
from fusegrad.codegen.kernel_ir import build
from fusegrad.codegen.kernel_ir import llvm as llvm_render
from fusegrad.codegen.kernel_ir import numba as numba_render
from fusegrad.codegen.kernel_ir.jit import DATA_OFFSET
from fusegrad.codegen.kernel_ir.nodes import (Alu, Buffer, Call, Const, Gemm, Index, Load, Loop,
                                              Program, Raise, Reg, Store, walk)
from fusegrad.codegen.kernel_ir.rewrite import optimize
from fusegrad.codegen.kernel_ir.run import source as llvm_source

STATEMENTS = (Load, Store, Alu, Raise, Gemm, Call)


def small(x, w, idx):
    h = np.tanh(x @ w)
    return np.sum(h[:, idx] * 2.0)


def tour_loss(x, w, b):
    return np.sum(np.tanh(x * w + b) * (1 / (1 + np.exp(-x))))


def program_of(f, *args):
    fn = fg.jit(f, backend="interp").lower(*args).ir
    program, plan = build(fn)
    return optimize(program), plan


def comments_of(text: str, mark: str) -> list:
    """The comments of text's lines that carry one (`  ; ` in LLVM, `  # ` in Python), the
    lines that are only a comment included, in order."""
    out = []
    for line in text.splitlines():
        code, _, comment = (" " + line).partition(f" {mark}")
        if "   (" in comment:
            out.append(comment)
    return out


def numba_text(program, plan) -> str:
    slots = 1 + len(plan.fn.params) + len(plan.fn.results) + len(plan.consts)
    return numba_render.source(program, [list(range(len(program.groups)))], slots,
                               lambda kind, parallel: {})


def test_every_statement_carries_its_equation_and_the_users_line():
    x, w = np.linspace(-1, 1, 12).reshape(3, 4), np.linspace(0, 1, 20).reshape(4, 5)
    program, plan = program_of(fg.grad(small), x, w, np.array([0, -1, 2]))
    first = small.__code__.co_firstlineno
    notes = {line for lines in program.notes for line in lines}
    stmts = [s for g in program.groups for s in walk(g) if isinstance(s, STATEMENTS)]
    assert {type(s) for s in stmts} >= {Load, Store, Alu, Raise}
    unnoted = [s for s in stmts if s.note not in notes]
    assert not unnoted, unnoted[:3]
    lines = {int(re.search(r"test_kernel_ir_readable\.py:(\d+)\)$", s.note)[1]) for s in stmts}
    assert lines == {first + 1, first + 2}
    texts = {"; ": "\n".join(llvm_source(program, DATA_OFFSET)[:2]),
             "# ": numba_text(program, plan)}
    for mark, text in texts.items():
        comments = comments_of(text, mark)
        assert {s.note for s in stmts} <= set(comments), mark
        assert all(a != b for a, b in zip(comments, comments[1:])), mark   # once per run


def test_a_comment_opens_each_run_of_one_ops_statements():
    i, x, y, z = Reg("%i", "i64"), Reg("%x", "f64"), Reg("%y", "f64"), Reg("%z", "f64")
    a, b = "%1 = neg %0 : f64[4]   (here.py:1)", "%2 = mul %1, %1 : f64[4]   (here.py:2)"
    body = [Load(x, Buffer(1, 0, "f64"), Index(0, ((i, 1),)), a),
            Alu(y, "neg", (x,), a), Alu(z, "mul", (y, y), b),
            Store(Buffer(2, 0, "f64"), Index(0, ((i, 1),)), z, b),
            Store(Buffer(3, 0, "f64"), Index(0, ((i, 1),)), Const(1.0, "f64"))]
    program = Program("tiny", [[Loop(i, 4, body)]], [[a, b]], [], [4], [True])
    wants = {"; ": [a, b], "# ": [a, b]}
    texts = {"; ": llvm_render.function("tiny", program.groups, iter(range(99)), DATA_OFFSET,
                                        False),
             "# ": numba_render.source(program, [[0]], 4, lambda kind, parallel: {})}
    for mark, text in texts.items():
        assert comments_of(text, mark) == wants[mark], (mark, text)


def declared_and_called(module: str) -> tuple:
    declared = set(re.findall(r"^declare \S+ (@[\w.]+)\(", module, re.M))
    called = set(re.findall(r"\bcall \S+ (@[\w.]+)\(", module))
    defined = set(re.findall(r"^define [^@]*(@[\w.]+)\(", module, re.M))
    return declared, called, defined


def test_an_llvm_module_declares_only_what_it_calls():
    x, w, b = np.linspace(-2, 2, 3000).reshape(3, 1000)
    tiny = np.linspace(-2, 2, 12).reshape(3, 4)
    for f, args in ((fg.grad(tour_loss, argnums=(0, 1, 2)), (x, w, b)),    # hot: inline math
                    (fg.grad(tour_loss, argnums=(0, 1, 2)), tuple(tiny)),  # cold: Calls
                    (small, (np.ones((3, 40)), np.ones((40, 5)), np.array([1, -1])))):
        program, _ = program_of(f, *args)
        hot, cold, *_ = llvm_source(program, DATA_OFFSET)
        for module in (hot, cold):
            declared, called, defined = declared_and_called(module)
            assert declared == called - defined, (declared, called, defined)
        declared = declared_and_called(hot)[0] | declared_and_called(cold)[0]
        assert "@llvm.fma.f64" in declared
        assert ("@fusegrad_dgemm" in declared) == (f is small)


def test_the_readme_tours_source_fits_on_a_screen(monkeypatch):
    monkeypatch.delenv("FUSEGRAD_RENDERER", raising=False)
    x, w, b = np.random.default_rng(0).random((3, 1000))
    jitted = fg.jit(fg.grad(tour_loss, argnums=(0, 1, 2)), tiered=False)
    source = jitted.lower(x, w, b).source
    assert len(source.splitlines()) <= 64, source
    declared, called, defined = declared_and_called(source)
    summarized = set(re.findall(r"^; (@[\w.]+)\(", source, re.M))   # one line each
    assert declared <= called <= declared | defined | summarized, (declared, called)
    line = f"test_kernel_ir_readable.py:{tour_loss.__code__.co_firstlineno + 1})"
    for prim in ("tanh", "exp"):
        assert re.search(rf"call double @{prim}\.\d+\(double %\w+\)  ; %\d+ = {prim} %\d+ "
                         rf": f64\[1000\]   \({re.escape(line)}", source), prim
        assert re.search(rf"^; @{prim}\.\d+\(double\) -> double: \d+ instructions", source, re.M)
    monkeypatch.setenv("FUSEGRAD_DEBUG", "3")       # the scalar Functions in full
    full = fg.jit(fg.grad(tour_loss, argnums=(0, 1, 2)), tiered=False).lower(x, w, b).source
    assert re.search(r"^define double @tanh\.\d+\(double %a0\) alwaysinline", full, re.M)
