"""fusegrad.dask: compiled gradients of a loss summed over the chunks of Dask arrays.

A loss that is a sum over examples, plus a regularizer of the parameters alone, has a gradient
that is the sum of per-chunk gradients plus the regularizer's. `value_and_grad` maps
`fg.jit(fg.value_and_grad(chunk_loss))` over the aligned chunks of the data arrays along their
first axis; each chunk's value and gradient leaves become one float64 row, and Dask's own tree
reduction (dask.array's sum, `split_every` as given) adds the rows. The driver cuts the sum back
into the gradient's tree, divides by the number of examples for reduce="mean", and adds the
regularizer's value and gradient once.

Workers compile once per chunk signature (a ragged last chunk is one more), tiering off: the
compile runs in the worker's thread, never in a child process, and the host's workers share the
disk cache (FUSEGRAD_CACHE_DIR). The parameters enter the graph once per call (scattered to every
worker under a dask.distributed client), never once per chunk.

The core package never imports this module, nor Dask: `import fusegrad.dask` needs the optional
extra, `pip install fusegrad[dask]`.
"""

from __future__ import annotations

import collections
import string
import threading
import uuid

import dask
import dask.array as da
import numpy as np

from . import transforms
from .api import jit
from .tree import flatten, unflatten

REDUCTIONS = ("sum", "mean")


class ChunkError(RuntimeError):
    """chunk_loss (or its gradient) raised on one chunk; the message names its examples."""


def value_and_grad(chunk_loss, argnums=0, reduce="sum", regularizer=None, split_every=None,
                   backend=None):
    """The value and gradient of a loss summed over the chunks of Dask arrays.

    Args:
        chunk_loss: `chunk_loss(*args) -> scalar`, called with NumPy blocks in place of the Dask
            arrays among `args`; it must be a sum over the block's examples (first axis).
        argnums: the arguments to differentiate (int or tuple), as in `fg.value_and_grad`;
            never a Dask array.
        reduce: "sum" adds the chunks' losses; "mean" divides the sum by the number of
            examples (the arrays' length along axis 0, whatever the chunking).
        regularizer: `regularizer(*params) -> scalar`, called once per call with the arguments
            that are not Dask arrays, in order; its value and gradient are added.
        split_every: the fan-in of Dask's tree reduction (None: Dask's default).
        backend: `fg.jit`'s backend for the chunks and the regularizer (None: the default).

    Returns:
        `vg(*args, compute=True) -> (value, grads)`: value a float64 0-d array, grads NumPy
        arrays in the structure (and dtypes) of the chosen arguments. With `compute=False`, a
        dask Delayed that computes that pair. The scheduler is Dask's current one (threads by
        default, `dask.config.set(scheduler="processes")`, or a distributed Client).
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"fusegrad.dask.value_and_grad: reduce={reduce!r}; "
                         f"use one of {REDUCTIONS}")
    return DaskValueAndGrad(chunk_loss, argnums, reduce, regularizer, split_every, backend)


class DaskValueAndGrad:
    """What value_and_grad returns: call it with the parameters and the Dask arrays."""

    def __init__(self, chunk_loss, argnums, reduce, regularizer, split_every, backend):
        self.chunk_loss, self.argnums, self.reduce = chunk_loss, argnums, reduce
        self.regularizer, self.split_every, self.backend = regularizer, split_every, backend
        self.token = uuid.uuid4().hex       # names this function's jits in every process

    def __call__(self, *args, compute=True):
        data_at = tuple(i for i, a in enumerate(args) if isinstance(a, da.Array))
        nums = _argnums(self.argnums, len(args), data_at)
        arrays = _aligned([args[i] for i in data_at], data_at)
        n = arrays[0].shape[0]
        if self.reduce == "mean" and n == 0:
            raise ValueError("fusegrad.dask: reduce='mean' over arrays of no examples")
        at = [i for i in range(len(args)) if i not in data_at]
        params = [args[i] for i in at]
        chosen = args[nums[0]] if isinstance(self.argnums, int) else tuple(args[i] for i in nums)
        layout = _Layout(chosen)
        chunk = _Chunk(self.token, self.chunk_loss, self.argnums, self.backend, data_at,
                       len(args), layout.width)
        shipped = _ship(params)
        rows = _rows(chunk, shipped, arrays)
        total = rows.sum(axis=0, split_every=self.split_every)
        reg_nums = tuple(at.index(i) for i in nums)
        finish = _Finish(self.token, self.regularizer, _same_form(self.argnums, reg_nums),
                         self.backend, layout, n if self.reduce == "mean" else 1)
        if not compute:
            return dask.delayed(finish, pure=True)(total, shipped)
        return finish(total.compute(), params)

    @property
    def cache_size(self) -> int:
        """How many chunk signatures this process has compiled (the threaded scheduler's)."""
        fn = _JITTED.get((self.token, "chunk"))
        return 0 if fn is None else fn.cache_size


def _argnums(argnums, nargs: int, data_at: tuple) -> tuple:
    if not data_at:
        raise TypeError("fusegrad.dask.value_and_grad: no argument is a dask array; pass the "
                        "data as dask.array arrays chunked along axis 0 (da.from_array, "
                        "da.from_zarr, ...), or use fg.value_and_grad for in-memory data")
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"fusegrad.dask.value_and_grad: argnums {argnums} out of range "
                             f"for {nargs} arguments")
        if i % nargs in data_at:
            raise ValueError(f"fusegrad.dask.value_and_grad: argument {i % nargs} (argnums) is "
                             f"a dask array; gradients are taken with respect to in-memory "
                             f"parameters, the dask arrays are the data")
    return tuple(i % nargs for i in nums)


def _same_form(argnums, nums: tuple):
    """nums as an int when argnums was one (the gradient is then one tree, not a tuple)."""
    return nums[0] if isinstance(argnums, int) else nums


def _aligned(arrays, data_at):
    """The data arrays, each in one chunk along every axis but the first; their chunks along
    the first axis must be the same (a ValueError names the arrays that differ)."""
    out = []
    for a, i in zip(arrays, data_at):
        if a.ndim == 0:
            raise ValueError(f"fusegrad.dask: argument {i} is a 0-d dask array; the data "
                             f"arrays need a first axis of examples")
        if any(np.isnan(c) for c in a.chunks[0]):
            raise ValueError(f"fusegrad.dask: argument {i} has unknown chunk sizes; call "
                             f"its .compute_chunk_sizes() first")
        out.append(a.rechunk({k: -1 for k in range(1, a.ndim)}) if a.ndim > 1 else a)
    first = out[0].chunks[0]
    for a, i in zip(out[1:], data_at[1:]):
        if a.chunks[0] != first:
            raise ValueError(
                f"fusegrad.dask: the data arrays' chunks along axis 0 do not line up: argument "
                f"{data_at[0]} (shape {arrays[0].shape}) has {_fmt_chunks(first)}, argument "
                f"{i} (shape {a.shape}) has {_fmt_chunks(a.chunks[0])}; rechunk one like the "
                f"other, e.g. arg{i} = arg{i}.rechunk({{0: arg{data_at[0]}.chunks[0]}})")
    return out


def _fmt_chunks(chunks) -> str:
    shown = ", ".join(str(c) for c in chunks[:6]) + (", ..." if len(chunks) > 6 else "")
    return f"{len(chunks)} chunks ({shown}) of {sum(chunks)} rows"


def _ship(params):
    """The parameters as the graph will see them: scattered to every worker, once, under a
    distributed client; else one Delayed key that every chunk's task reads."""
    client = _distributed_client()
    if client is not None:
        return client.scatter(list(params), broadcast=True, hash=False)
    return dask.delayed(list(params), pure=True, traverse=False)


def _distributed_client():
    try:
        from distributed import Client
    except ImportError:
        return None
    client = getattr(dask.base.get_scheduler(), "__self__", None)
    return client if isinstance(client, Client) else None


def _rows(chunk, params, arrays):
    """One float64 row per chunk: [value, gradient leaves raveled], as a (chunks, width) array."""
    bounds = np.cumsum((0,) + arrays[0].chunks[0])
    spans = np.stack([np.arange(len(bounds) - 1), bounds[:-1], bounds[1:]], axis=1)
    spans = da.from_array(spans, chunks=(1, 3))
    letters = iter(string.ascii_letters.replace("i", "").replace("z", ""))
    pairs = [params, None, spans, "i" + next(letters)]
    for a in arrays:
        pairs += [a, "i" + "".join(next(letters) for _ in range(a.ndim - 1))]
    return da.blockwise(chunk, "iz", *pairs, new_axes={"z": chunk.width}, align_arrays=False,
                        concatenate=True, dtype=np.float64, meta=np.empty((0, 0)),
                        token="fusegrad-chunk")


class _Layout:
    """Where each gradient leaf sits in a chunk's row (after the value, at 0)."""

    def __init__(self, chosen):
        leaves, self.treedef = flatten(chosen)
        self.shapes = [np.shape(x) for x in leaves]
        self.dtypes = [np.asarray(x).dtype for x in leaves]
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.width = 1 + sum(self.sizes)

    def unravel(self, row):
        leaves, start = [], 1
        for shape, size, dtype in zip(self.shapes, self.sizes, self.dtypes):
            leaves.append(row[start:start + size].reshape(shape).astype(dtype))
            start += size
        return np.asarray(row[0]), unflatten(self.treedef, leaves)


class _Chunk:
    """The task run on each chunk: the compiled value and gradient, as one float64 row."""

    def __init__(self, token, fun, argnums, backend, data_at, nargs, width):
        self.token, self.fun, self.argnums, self.backend = token, fun, argnums, backend
        self.data_at, self.nargs, self.width = data_at, nargs, width

    def __dask_tokenize__(self):
        return (self.token, self.data_at, self.nargs, self.width)

    def __call__(self, params, span, *blocks):
        index, start, stop = (int(v) for v in span[0])
        args, params, blocks = [], iter(params), iter(blocks)
        for i in range(self.nargs):
            args.append(next(blocks) if i in self.data_at else next(params))
        try:
            vg = _jitted(self.token, "chunk", self.fun, self.argnums, self.backend)
            value, grads = vg(*args)
            row = np.concatenate([np.ravel(np.asarray(x, np.float64))
                                  for x in [value, *flatten(grads)[0]]])
        except Exception as e:
            raise ChunkError(f"chunk {index} (examples {start}:{stop}) of "
                             f"{_name(self.fun)}: {type(e).__name__}: {e}") from e
        return row[None, :]


class _Finish:
    """The driver's last step: divide by the number of examples for reduce="mean", cut the row
    into the gradient's tree and add the regularizer's value and gradient."""

    def __init__(self, token, regularizer, reg_nums, backend, layout, divisor):
        self.token, self.regularizer, self.reg_nums = token, regularizer, reg_nums
        self.backend, self.layout, self.divisor = backend, layout, divisor

    def __dask_tokenize__(self):
        return (self.token, self.reg_nums, self.layout.width, self.divisor)

    def __call__(self, total, params):
        value, grads = self.layout.unravel(total / self.divisor)
        if self.regularizer is None:
            return value, grads
        vg = _jitted(self.token, "regularizer", self.regularizer, self.reg_nums, self.backend)
        reg_value, reg_grads = vg(*params)
        grads = unflatten(self.layout.treedef, [
            np.asarray(g + r, g.dtype)
            for g, r in zip(flatten(grads)[0], flatten(reg_grads)[0])])
        return np.asarray(value + np.float64(reg_value)), grads


_JITTED: collections.OrderedDict = collections.OrderedDict()
_JITTED_LOCK = threading.Lock()
_JITTED_KEEP = 64       # the jits of the 32 newest dask value_and_grads in this process


def _jitted(token, role, fun, argnums, backend):
    """This process's compiled value_and_grad of fun, one per (token, role): the chunks of one
    call share it, and so do later calls, whichever worker thread runs them. Tiering is off:
    the compile runs here, in the worker's thread, not in a child process."""
    key = (token, role)
    with _JITTED_LOCK:
        fn = _JITTED.get(key)
        if fn is None:
            fn = _JITTED[key] = jit(transforms.value_and_grad(fun, argnums=argnums),
                                    backend=backend, tiered=False)
            while len(_JITTED) > _JITTED_KEEP:
                _JITTED.popitem(last=False)
        _JITTED.move_to_end(key)
    return fn


def _name(fun) -> str:
    return getattr(fun, "__qualname__", None) or repr(fun)
