"""Running folds and arg reductions as kernel IR: cumsum, cumprod, argmax, argmin.

- cumsum and cumprod are NumPy's sequential fold along the axis: out[0] = x[0] (so a -0.0
  stays -0.0, as np.cumsum keeps it), then out[j] = out[j - 1] + x[j] (or *), from the end
  with `reverse`; the running value lives in the output buffer, no register crosses a loop.
- argmax and argmin keep the index of the best element in the output buffer: it starts at 0,
  and element j replaces it when it is strictly better (>, or < for argmin), or is a nan
  where the best is not: NumPy's first occurrence on ties and first nan. bools compare as
  0 < 1. The best value is loaded back through the stored index (one more affine term).
"""

from __future__ import annotations

from .build import affine, strides


def _lines(x, axis):
    """(the other axes' extents, their strides, the axis' extent, its stride) of x."""
    st = strides(x.shape)
    others = [a for a in range(x.type.ndim) if a != axis]
    return [x.shape[a] for a in others], [st[a] for a in others], x.shape[axis], st[axis]


def running(k, plan, ops):
    """cumsum / cumprod along `axis`."""
    (op,) = ops
    x, out = op.inputs[0], op.out
    axis = op.params["axis"] % x.type.ndim
    combine = k.b.add if op.prim == "cumsum" else k.b.mul
    src, dst = plan.buffer(x), plan.buffer(out)
    shape, st, n, s = _lines(x, axis)
    first, d = ((n - 1) * s, -s) if op.params.get("reverse", False) else (0, s)

    def line(index):
        index = tuple(index)
        k.store(dst, affine(index, st, first), k.load(src, affine(index, st, first)))

        def step(j):
            prev = affine(index + (j,), (*st, d), first)
            cur = affine(index + (j,), (*st, d), first + d)
            k.store(dst, cur, combine(k.load(dst, prev), k.load(src, cur)))
        if n > 1:
            k.loop(n - 1, step)
    k.nest(tuple(shape), line)


def arg_best(k, plan, ops):
    """argmax / argmin along `axis`."""
    (op,) = ops
    x, out = op.inputs[0], op.out
    axis = op.params["axis"] % x.type.ndim
    better = k.b.gt if op.prim == "argmax" else k.b.lt
    src, dst = plan.buffer(x), plan.buffer(out)
    shape, st, n, s = _lines(x, axis)
    kept = strides(out.shape)

    def line(index):
        index = tuple(index)
        at = affine(index, kept)
        k.store(dst, at, k.b.const(0, "i64"))

        def step(j):
            pos = k.b.add(j, 1) if j is not None else k.b.const(1, "i64")
            cur = k.load(src, affine(index + (j,), (*st, s), s))
            best_at = k.load(dst, at)
            best = k.load(src, affine(index, st).plus(terms=((best_at, s),)))
            take = better(cur, best)
            if x.dtype in ("f32", "f64"):
                take = k.b.or_(take, k.b.and_(k.b.ne(cur, cur), k.b.eq(best, best)))
            k.store(dst, at, k.b.select(take, pos, best_at))
        if n > 1:
            k.loop(n - 1, step)
    k.nest(tuple(shape), line)


FOLDS = {"cumsum": running, "cumprod": running, "argmax": arg_best, "argmin": arg_best}
