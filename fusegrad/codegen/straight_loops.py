"""A whole scan as one LLVM function with a real loop, its body scalarized as straight.py does.

A scan body of small f64 arrays (an RNN step, its VJP) is a few hundred to a few thousand
scalar instructions, and the loop runs it a thousand times. Numba takes seconds to type and
optimize such a body; written as LLVM text here, it compiles in tens of milliseconds. The
function is

    scan(length, reverse, consts, carry, xs..., ys...)

consts and carry flat float64 buffers (the carry's final value written back in place), each
xs and ys a (length, ...) float64 array read or written at row i. Consts are loaded once
before the loop; each carry element is a phi node of the loop header (so carries that trade
places, or a y that is a carry, need no copies); step i reads its xs row, runs the body's
instructions and stores its ys row. Being small and hot, the function goes through LLVM's O2
pipeline for this CPU (no fast-math flags: IEEE arithmetic, libm calls, fma where the body
has a matmul, as in straight.py). A scan body's matmuls may have up to MAX_DOT_K terms,
summed in order by fma (the Numba backend calls BLAS past SMALL_DOT_K terms: the last bits may
differ). Bodies with other dtypes (an i64 counter: fori_loop), indexing or larger values stay
with loops.scan_source's njit loop.
"""

from __future__ import annotations

import ctypes

import numpy as np

from . import straight
from .templates import empty, poison_on

MAX_ELEMENTS = 256           # per value: a 16 x 16 weight's gradient, carried
MAX_DOT_K = 64
MAX_STEP_INSTRUCTIONS = 20_000
OPT = 2


def supports(fn, num_consts: int, num_carry: int) -> bool:
    """Whether scan body fn is all small f64 or bool values in ops straight.py writes."""
    return (straight.fits(fn, MAX_ELEMENTS, MAX_DOT_K)
            and sum(straight.cost(op) for op in fn.ops) <= MAX_STEP_INSTRUCTIONS)


def source(fn, num_consts: int, num_carry: int) -> str:
    """The LLVM IR text of @scan (see the module docstring)."""
    ptr, w = straight._pointer(), straight._Writer()
    n = num_consts + num_carry
    consts, carry, xs = fn.params[:num_consts], fn.params[num_consts:n], fn.params[n:]
    ys = fn.results[num_carry:]
    env: dict = {}
    for p, offset in zip(consts, _offsets(consts)):
        env[p] = straight._load(w, p, offset, ptr, "%consts")
    init = [straight._load(w, p, offset, ptr, "%carry") for p, offset in
            zip(carry, _offsets(carry))]
    w.emit(["br label %pre"])
    w.lines.append("pre:")
    w.emit(["br label %head"])
    head = len(w.lines)
    for p in carry:
        env[p] = [w.fresh() for _ in range(p.type.size)]
    w.lines.append("body:")
    _step(w, fn, env, xs, ys, ptr)
    w.emit(["br label %latch"])
    w.lines += ["latch:", "  %next = add i64 %step, 1", "  br label %head"]
    phis = ["head:", "  %step = phi i64 [0, %pre], [%next, %latch]"]
    for p, first, r in zip(carry, init, fn.results):
        ty = "i1" if p.dtype == "bool" else "double"
        phis += [f"  {c} = phi {ty} [{a}, %pre], [{b}, %latch]"
                 for c, a, b in zip(env[p], first, env[r])]
    phis += ["  %more = icmp slt i64 %step, %length", "  br i1 %more, label %body, label %exit"]
    w.lines[head:head] = phis
    w.lines.append("exit:")
    for p, offset in zip(carry, _offsets(carry)):
        straight._store(w, env[p], p.dtype, offset, ptr, "%carry")
    params = ["i64 %length", "i64 %reverse", f"{ptr} %consts", f"{ptr} %carry",
              *[f"{ptr} %xs{k}" for k in range(len(xs))],
              *[f"{ptr} %ys{k}" for k in range(len(ys))]]
    return straight.with_declarations("\n".join([
        f"define void @scan({', '.join(params)}) nounwind {{", "  %last = sub i64 %length, 1",
        *w.lines, "  ret void", "}", ""]))


def _step(w, fn, env, xs, ys, ptr):
    """Step i of the loop: xs rows in, the body's instructions, ys rows out."""
    w.emit(["%back = sub i64 %last, %step", "%rev = icmp ne i64 %reverse, 0",
            "%i = select i1 %rev, i64 %back, i64 %step"])
    for k, x in enumerate(xs):
        w.emit([f"%xrow{k} = mul i64 %i, {x.type.size}",
                f"%x{k} = getelementptr double, {ptr} %xs{k}, i64 %xrow{k}"])
        env[x] = straight._load(w, x, 0, ptr, f"%x{k}")
    for op in fn.ops:
        start = len(w.lines)
        env[op.out] = straight._scalarize(w, op, [env[v] for v in op.inputs])
        w.end_op(f"  ; {op.prim} at {op.loc}", start)
    for k, y in enumerate(ys):
        w.emit([f"%yrow{k} = mul i64 %i, {y.type.size}",
                f"%y{k} = getelementptr double, {ptr} %ys{k}, i64 %yrow{k}"])
        straight._store(w, env[y], y.dtype, 0, ptr, f"%y{k}")


def _offsets(values) -> list:
    return np.cumsum([0] + [v.type.size for v in values])[:-1].tolist()


def compile_scan(fn, num_consts: int, num_carry: int):
    """Compile scan body fn (which `supports`): `loop(length, reverse, leaves)` returning the
    final carries and the stacked ys, `run(leaves)` for one step, and the LLVM text."""
    text = source(fn, num_consts, num_carry)
    n = num_consts + num_carry
    nxs, nys = len(fn.params) - n, len(fn.results) - num_carry
    signature = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * (2 + nxs + nys)
    cfunc = ctypes.CFUNCTYPE(None, *signature)(straight.machine_code(text, "scan", OPT))
    carry_types = [p.type for p in fn.params[num_consts:n]]
    y_types = [r.type for r in fn.results[num_carry:]]
    poison = poison_on()

    def loop(length, reverse, leaves):
        consts, carry = _flat(leaves[:num_consts]), _flat(leaves[num_consts:n])
        xs = [np.ascontiguousarray(x, dtype=np.float64) for x in leaves[n:]]
        ys = [empty((length, *t.shape), "float64", poison) for t in y_types]
        cfunc(length, int(bool(reverse)), consts.ctypes.data, carry.ctypes.data,
              *[x.ctypes.data for x in xs], *[y.ctypes.data for y in ys])
        finals = np.split(carry, np.cumsum([t.size for t in carry_types])[:-1])
        finals = [f.reshape(t.shape) for f, t in zip(finals, carry_types)]
        return [_typed(v, t) for v, t in zip(finals + ys, carry_types + y_types)]

    def run(leaves):
        outs = loop(1, False, [*leaves[:n], *[np.asarray(x)[None] for x in leaves[n:]]])
        return outs[:num_carry] + [y[0] for y in outs[num_carry:]]
    return loop, run, text


def _flat(leaves) -> np.ndarray:
    """The leaves' elements one after another, as a new float64 buffer."""
    return np.concatenate([np.ravel(x) for x in leaves] or [np.empty(0)], dtype=np.float64)


def _typed(value, t):
    return value.astype(bool) if t.dtype == "bool" else value

