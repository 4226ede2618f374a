"""Control flow on the numba backend (scan, while_loop, cond: ir/control.py).

A scan (fori_loop with static bounds is one) whose body compiles to a single njit entry runs
as a real loop: the body's module also gets `scan_loop` (scan_source), an njit function whose
loop runs the body entry's statements once per step, reading xs[i] as views and writing each
step's ys straight into the stacked buffers the runner allocates once. The body's buffers come
from one pool for the whole loop, and the carry lives in two buffers that trade places each
step, so a result that aliases its own or another carry is read before it is overwritten. The
body is Numba-compiled once, so a 1 000-step loop compiles in the time of one step.

A body that needs host steps (another loop, a factorization), a while_loop and a cond are
host steps of the generated module: the runner calls the function made here, which runs the
loop in Python around the compiled body, one call per iteration. A body compiled alone
computes what interp computes for it, so the loop does too.
"""

from __future__ import annotations

import numpy as np

from ..ir.control import nested
from .loop_ir import SYMBOL, Function, Let, Loop, Return, Store
from .templates import empty, new_buffer, np_name, poison_on, py_scalar, symbols_in

HOSTS = frozenset(("scan", "while_loop", "cond"))


def host(op, compile_fn):
    """The host function for a control-flow op: its nested Functions compiled now, the loop
    run when called. Takes the operands (arrays or scalars) and returns the outputs (one, or
    a tuple), 0-d ones as NumPy scalars, as compile.py's host steps do."""
    scan = (op.params["num_consts"], op.params["num_carry"]) if op.prim == "scan" else None
    compiled = {key: compile_fn(fn, scan=scan) for key, fn in nested(op)}
    run, params = _RUNS[op.prim], op.params
    in_types = [v.type for v in op.inputs]
    out_types = [v.type for v in op.outputs]

    def control(*args):
        outs = run(compiled, [np.asarray(a, t.np_dtype) for a, t in zip(args, in_types)],
                   **params)
        outs = [np.asarray(o, t.np_dtype) for o, t in zip(outs, out_types)]
        outs = [o[()] if o.ndim == 0 else np.ascontiguousarray(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)
    control.__name__ = f"host_{op.prim}"
    control.compiled = compiled
    return control


def _buffer(shape, t):
    return empty(shape, np_name(t.dtype), poison_on())


def _scan(compiled, args, *, body, length, reverse, num_consts, num_carry):
    step, n = compiled["body"], num_consts + num_carry
    if step.loop is not None:
        return step.loop(length, reverse, args)
    consts, carry, xs = args[:num_consts], args[num_consts:n], args[n:]
    ys = [_buffer((length,) + t.shape, t) for t in body.result_types[num_carry:]]
    for i in range(length - 1, -1, -1) if reverse else range(length):
        outs = step(consts + carry + [x[i] for x in xs])
        carry = outs[:num_carry]
        for y, out in zip(ys, outs[num_carry:]):
            y[i] = out
    return carry + ys


def _while_loop(compiled, args, *, cond, body, cond_nconsts, body_nconsts):
    test, step, n = compiled["cond"], compiled["body"], cond_nconsts + body_nconsts
    cond_consts, consts, carry = args[:cond_nconsts], args[cond_nconsts:n], args[n:]
    while test(cond_consts + carry)[0]:
        carry = step(consts + carry)
    return carry


def _cond(compiled, args, *, true_branch, false_branch):
    pred, *operands = args
    return compiled["true_branch" if pred else "false_branch"](operands)


_RUNS = {"scan": _scan, "while_loop": _while_loop, "cond": _cond}


# -- scan as an njit loop ----------------------------------------------------------------------

def scan_source(ms, num_consts: int, num_carry: int) -> tuple[str, list] | None:
    """The text that makes a scan body's module (ModuleSource ms, built) run the whole scan:
    the njit `scan_loop` and `make_loop`, its runner, and the values scan_loop's parameters
    hold, in order (for its Numba signature); None when the body is not one njit entry.

    scan_loop holds the entry's statements in its loop rather than calling the entry: Numba
    would compile the entry, then link and optimize it again into scan_loop (0.3-0.5 s)."""
    if ms.hosts or "entry" not in ms.calls:
        return None
    fn, names = ms.fn, ms.names
    consts, carry = fn.params[:num_consts], fn.params[num_consts:num_consts + num_carry]
    xs, ys = fn.params[num_consts + num_carry:], fn.results[num_carry:]
    _, returned = ms.calls["entry"]
    tables = [t for t, used in zip(("A", "D", "C", "TASKS"), ms.segment_args["entry"][1:])
              if used]
    roots = list(ms.pooled)
    params = [names[p] for p in consts + carry] + [f"xs_{names[x]}" for x in xs] + \
        [f"ys{k}" for k in range(len(ys))] + [f"{names[r]}_buf" for r in roots] + \
        [names[c] for c in ms.consts] + tables
    args = [names[p] for p in fn.params] + [f"ys{k}" for k in range(len(ys))] + \
        [names[r] for r in roots] + [names[c] for c in ms.consts] + tables   # the runner's

    def result(v) -> str:
        if v in ms.buffer_root and v not in returned:
            root = f"{names[ms.buffer_root[v]]}_buf"
            return root + (f"[{ms.row[v]}]" if v in ms.row else "")
        return names[v]

    (entry,) = [f for f in ms.trees if f.name == "entry"]
    hoisted = [n for n in entry.body if isinstance(n, Let) and
               (n.name == "at" or SYMBOL.fullmatch(n.name))]   # sizes and A's address
    statements = [n for n in entry.body if n not in hoisted and not isinstance(n, Return)]
    arrays = [(j, p) for j, p in enumerate(carry) if p.shape != ()]
    step = [Let(names[x], f"xs_{names[x]}[loop_i]") for x in xs] + statements
    step += [Let(f"r{k}", result(v)) for k, v in enumerate(fn.results)]
    step += [_copy(f"ys{k}", f"r{num_carry + k}", y.type.ndim, "loop_i")
             for k, y in enumerate(ys)]
    step += [_copy(f"next{j}", f"r{j}", p.type.ndim) for j, p in arrays]
    step += [Let(f"{names[p]}, next{j}", f"next{j}, {names[p]}") if p.shape != () else
             Let(names[p], f"r{j}") for j, p in enumerate(carry)]
    body = hoisted + [Let(f"next{j}", f"np.empty_like({names[p]})") for j, p in arrays]
    first = Let("loop_i", "loop_length - 1 - loop_step if loop_reverse else loop_step")
    body += [Loop("loop_step", "loop_length", [first, *step]),
             Return([names[p] for p in carry], unpack=True) if carry else Return(["()"])]
    options = ", ".join(f"{k}={v!r}" for k, v in ms.options("entry").items())
    loop = Function(f"@numba.njit({options})", "scan_loop",
                    ["loop_length", "loop_reverse", *params],
                    f"the scan of @{fn.name}: the entry's statements once per step loop_i "
                    "(reversed with loop_reverse), xs[loop_i] in, ys[loop_i] and the carry out",
                    body).render()

    leaves = [names[p] for p in fn.params]
    unpack = [f"{', '.join(leaves)}{',' if len(leaves) == 1 else ''} = leaves"] if leaves else []
    unpack += [f"{names[p]} = np.array({names[p]}, np.{np_name(p.dtype)})" if p in carry
               else f"{names[p]} = np.ascontiguousarray({names[p]})"
               for p in fn.params if p.shape != () or p in xs]  # a carry: the loop's own
    unpack += [f"{names[p]} = {py_scalar(p.dtype)}({names[p]})" for p in consts + carry
               if p.shape == ()]
    stacked = [f"ys{k} = {new_buffer('(loop_length, ' + ms.shape(y.shape)[1:], np_name(y.dtype))}"
               for k, y in enumerate(ys)]
    setup = ms.pool_setup()
    sizes = [d for d in symbols_in("\n".join(stacked)) if d not in symbols_in("\n".join(setup))]
    env = ["D", "C"] + [names[c] for c in ms.consts]
    run = ["def make_loop(env):",
           f"    {', '.join(env)}, = env",
           *["    " + line for line in setup],
           *[f"    {d} = int(D[{d[1:]}])" for d in sizes],
           "",
           "    def run_loop(loop_length, loop_reverse, leaves):",
           *["        " + line for line in unpack + ms.take_buffers() + stacked],
           f"        loop_finals = scan_loop(loop_length, loop_reverse, {', '.join(args)})",
           f"        return [*loop_finals, {''.join(f'ys{k}, ' for k in range(len(ys)))}]",
           "",
           "    return run_loop"]
    order = [*consts, *carry, *[("stacked", v) for v in xs + ys], *roots, *ms.consts]
    return "\n\n\n" + loop + "\n\n\n" + "\n".join(run) + "\n", order + tables


def _copy(dst: str, src: str, ndim: int, row: str | None = None):
    """The loop nest copying array src into dst (or into its row `row`) element by element:
    Numba takes seconds to compile an array assignment such as `dst[...] = src`, and
    milliseconds for these loops."""
    index = [f"j{a}" for a in range(ndim)]
    at = ", ".join(([row] if row else []) + index)
    node = Store(dst, at, f"{src}[{', '.join(index)}]" if ndim else src)
    for a in reversed(range(ndim)):
        node = Loop(f"j{a}", f"{src}.shape[{a}]", [node])
    return node
