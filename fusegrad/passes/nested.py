"""Passes look into nested Functions: a control-flow op (ir/control.py) holds its body or its
branches in its params, and every pass of the pipeline applies itself to them, so loop bodies
are lowered, simplified, deduplicated and cleaned like the function around them. To the pass
the op itself stays opaque: its operands and outputs are those of any other op.

DCE also trims what an op computes for nobody (`prune`): a scan's ys and carries no one reads
(the cotangents a reverse scan computes for inputs that need none, say), a cond's unread
results, and the operands a body never reads.
"""

from __future__ import annotations

from ..ir.control import nested
from ..ir.core import Function, Op
from ..ir.primitives import PRIMITIVES

HOLDERS = frozenset(p.name for p in PRIMITIVES.values() if p.regions)


def nested_params(op: Op, run) -> dict:
    """op's params with each nested Function replaced by run(fn); op.params itself when
    nothing changed."""
    params = op.params
    for key, fn in nested(op):
        new = run(fn)
        if new is not fn:
            params = {**params, key: new}
    return params


def with_nested(op: Op, run) -> Op:
    """op with run applied to its nested Functions (the same Op when nothing changed)."""
    params = nested_params(op, run)
    return op if params is op.params else Op(op.prim, op.inputs, params, op.outputs, op.loc,
                                             op.note)


def prune(op: Op, live: set, dce) -> Op:
    """op without the outputs not in `live` and the operands its Functions do not read (dce
    cleans the Functions)."""
    if op.prim == "scan":
        return _prune_scan(op, live, dce)
    if op.prim == "cond":
        return _prune_cond(op, live, dce)
    return with_nested(op, dce)


def _reads(fn: Function) -> set:
    return {v for f in fn.ops for v in f.inputs} | set(fn.results)


def _prune_scan(op: Op, live, dce) -> Op:
    p = op.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    carries = [k for k in range(nk) if op.outputs[k] in live]
    ys = [j for j in range(nk, len(body.results)) if op.outputs[j] in live]
    while True:     # a carry stays while a kept result depends on it
        new = dce(Function(body.name, body.params, body.ops,
                           [body.results[k] for k in carries + ys]))
        read = _reads(new)
        more = [k for k in range(nk) if k not in carries and body.params[nc + k] in read]
        if not more:
            break
        carries = sorted(carries + more)
    consts = [i for i in range(nc) if body.params[i] in read]
    xs = [i for i in range(nc + nk, len(body.params)) if body.params[i] in read]
    keep = consts + [nc + k for k in carries] + xs
    if len(keep) == len(body.params) and len(carries) + len(ys) == len(body.results):
        return with_nested(op, dce)
    body = Function(new.name, [body.params[i] for i in keep], new.ops, new.results)
    params = {**p, "body": body, "num_consts": len(consts), "num_carry": len(carries)}
    return Op(op.prim, [op.inputs[i] for i in keep], params,
              [op.outputs[j] for j in carries + ys], op.loc, op.note)


def _prune_cond(op: Op, live, dce) -> Op:
    p = op.params
    results = [j for j, v in enumerate(op.outputs) if v in live]
    branches = {key: dce(Function(fn.name, fn.params, fn.ops, [fn.results[j] for j in results]))
                for key, fn in nested(op)}
    read = set().union(*(_reads(fn) for fn in branches.values()))
    keep = [i for i, v in enumerate(p["true_branch"].params)
            if any(fn.params[i] in read for fn in branches.values())]
    if len(keep) == len(op.inputs) - 1 and len(results) == len(op.outputs):
        return with_nested(op, dce)
    params = {**p, **{key: Function(fn.name, [fn.params[i] for i in keep], fn.ops, fn.results)
                      for key, fn in branches.items()}}
    return Op(op.prim, [op.inputs[0]] + [op.inputs[1 + i] for i in keep], params,
              [op.outputs[j] for j in results], op.loc, op.note)
