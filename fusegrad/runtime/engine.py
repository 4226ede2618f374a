"""The eager backward engine: walk a recorded graph from the roots to the leaves.

One loop serves `Tensor.backward` and the functional `grad`. It counts, for every node reachable
from the roots, how many edges reach it (the dependency count), then runs Kahn's algorithm with
an explicit stack: a node runs once every consumer has delivered its gradient, so fan-in is summed
(out of place) in a buffer first. Per node: store the gradient for retain_grad, trace, call the
node's VJP rule, check for NaN under anomaly detection, release the saved values unless
retain_graph, and for each operand fit the returned cotangent to the shape and dtype recorded at
record time (un-broadcast, cast: done here once, never in a rule), add it to the target's buffer
and decrement the target's count. Nothing recurses, so graph depth is bounded by memory only.

Without create_graph the rules run on raw NumPy arrays under no_grad (the fast path); a 0-d
value (a saved scalar, the seed of a scalar loss) goes in as a NumPy scalar, whose arithmetic
rounds exactly as the ufunc on a 0-d array does at a fraction of the cost, and the gradients
stored or returned are arrays again. With create_graph they run on Tensors with grad mode on,
so the backward pass records its own graph and can be differentiated again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..formulas import unbroadcast_and_cast
from . import engine_entry, hooks
from .grad_mode import _state as _grad_state
from .grad_mode import set_grad_enabled
from .graph import AccumulateGrad, SavedTensor, gradient_edge
from .tensor import Tensor, _wrap


class GradientShapeError(RuntimeError, ValueError):
    """A seed gradient is missing for a non-scalar root, or has the wrong shape."""


def _fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


# -- public entry points ------------------------------------------------------------------------

def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False) -> None:
    """Accumulate the gradient of `tensors` (weighted by grad_tensors) into the leaves' `.grad`.

    retain_graph defaults to create_graph; without it, every node releases its saved values
    once it has run, and a second backward through it fails.
    """
    roots, seeds = _roots_and_seeds(tensors, grad_tensors, create_graph)
    retain = create_graph if retain_graph is None else retain_graph
    _run(roots, seeds, retain, create_graph)


engine_entry.install(backward)     # Tensor.backward runs it from there (see engine_entry.py)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=True) -> tuple:
    """The gradients of `outputs` with respect to `inputs`, like torch.autograd.grad.

    Returns one Tensor per input (None for an input the outputs do not depend on, or an error
    with allow_unused=False). Leaves' `.grad` are left untouched. With create_graph=True the
    results carry history and can be differentiated again.
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    roots, seeds = _roots_and_seeds(outputs, grad_outputs, create_graph)
    capture = {}
    for i, t in enumerate(inputs):
        capture.setdefault(gradient_edge(t), []).append(i)
    retain = create_graph if retain_graph is None else retain_graph
    found = _run(roots, seeds, retain, create_graph, capture)
    results = []
    for i in range(len(inputs)):
        g = found.get(i)
        if g is None and not allow_unused:
            raise RuntimeError("One of the differentiated Tensors appears to not have been used "
                               "in the graph. Set allow_unused=True if this is the desired "
                               "behavior.")
        results.append(None if g is None else _as_result(g, create_graph))
    return tuple(results)


def _as_result(g, create_graph) -> Tensor:
    if isinstance(g, Tensor):
        return g
    return _wrap(np.array(g))  # a copy: never alias an engine buffer or a read-only view


# -- seeding ------------------------------------------------------------------------------------

def _roots_and_seeds(tensors, gradients, create_graph):
    """One start node and one seed gradient per output (a tensor, or a sequence of them)."""
    if isinstance(tensors, Tensor):
        tensors, gradients = [tensors], [gradients]
    else:
        tensors = list(tensors)
        gradients = [None] * len(tensors) if gradients is None else list(gradients)
    if len(gradients) != len(tensors):
        raise ValueError(f"got {len(gradients)} gradients for {len(tensors)} outputs")
    roots, seeds = [], []
    for t, g in zip(tensors, gradients):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError("backward needs a tensor that requires grad")
        roots.append(gradient_edge(t))
        seeds.append(_seed(t, g, create_graph))
    return roots, seeds


def _seed(root: Tensor, gradient, create_graph):
    if gradient is None:
        if root.data.size != 1:
            raise GradientShapeError(f"grad can be implicitly created only for scalar outputs, "
                                     f"got shape {_fmt(root.shape)}")
        seed = np.ones(root.shape, root.dtype)[()]  # a NumPy scalar for a 0-d root
    else:
        data = gradient.data if isinstance(gradient, Tensor) else np.asarray(gradient)
        if data.shape != root.shape:
            raise GradientShapeError(f"gradient shape {_fmt(data.shape)} does not match output "
                                     f"shape {_fmt(root.shape)}")
        if create_graph and isinstance(gradient, Tensor):
            return gradient if gradient.dtype == root.dtype else gradient.astype(root.dtype)
        seed = data.astype(root.dtype, copy=False)
    return _wrap(seed) if create_graph else seed


# -- the loop -----------------------------------------------------------------------------------

def _run(roots, seeds, retain_graph, create_graph, capture=None) -> dict:
    """Run the graph from `roots`; with `capture` (node -> input indices) return their grads."""
    deps, needed = _count_dependencies(roots, capture)
    buffers: dict = {}
    for node, seed in zip(roots, seeds):
        _add_to_buffer(buffers, node, seed)
    ready = [node for node in dict.fromkeys(roots) if not deps.get(node)]
    found: dict = {}
    stream, anomaly = hooks.trace_stream(), hooks.anomaly_enabled
    plain = stream is None and not anomaly and not create_graph
    _grad_state.backward += 1
    try:
        _drain(ready, buffers, deps, found, needed, capture, retain_graph, create_graph, plain,
               stream, anomaly)
    finally:
        _grad_state.backward -= 1
    return found


def _drain(ready, buffers, deps, found, needed, capture, retain_graph, create_graph, plain,
           stream, anomaly) -> None:
    """Kahn's algorithm over the ready nodes (the hot loop of _run)."""
    with set_grad_enabled(create_graph), np.errstate(all="ignore"):
        while ready:
            node = ready.pop()
            g = buffers.pop(node, None)
            grads = ()
            if g is not None and capture is not None:
                for i in capture.get(node, ()):
                    found[i] = g
                if node not in needed if needed is not None else type(node) is AccumulateGrad:
                    g = None                    # a captured leaf, or leads to none
            if g is None:
                pass
            elif plain and node.rule is not None and node.retained is None:
                grads = _call_rule(node, g, False)     # _run_node's common case, inlined
            else:
                grads = _run_node(node, g, create_graph, stream, anomaly, capture is None)
            if not retain_graph and (g is not None or capture is None):
                node.saved = None  # release_variables(), inlined: this loop is the hot path
            for i, (edge, shape, dtype) in enumerate(node.inputs):
                if edge is None:
                    continue
                gi = grads[i] if i < len(grads) else None
                if gi is not None:
                    if create_graph or gi.shape != shape or gi.dtype != dtype:
                        gi = _fit(node, i, gi, shape, dtype, create_graph)
                    prev = buffers.get(edge)  # the sum is out of place: gi may alias a buffer
                    buffers[edge] = gi if prev is None else prev + gi
                left = deps[edge] - 1
                deps[edge] = left
                if not left:
                    ready.append(edge)


def _run_node(node, g, create_graph, stream, anomaly, store) -> Sequence:
    """Store a retained gradient, trace, then accumulate into a leaf or call the node's rule."""
    if store and node.retained is not None:
        _store_retained(node, g, create_graph)
    if stream is not None:
        hooks.trace_node(stream, node.name, g)
    if type(node) is AccumulateGrad:
        if store:
            _accumulate(node.variable, g, create_graph)
        return ()
    grads = _call_rule(node, g, create_graph)
    if anomaly:
        hooks.check_anomaly(node, grads)
    return grads


def _count_dependencies(roots, capture):
    """In-degree of every node reachable from the roots; with capture, the nodes worth running
    (None: all of them).

    A node is worth running in grad() when one of its edges leads to a captured node. Every
    path ends at a leaf's AccumulateGrad, so when all captured nodes are leaves and every leaf
    met is captured (value_and_grad's case), every node is worth running: no second pass.
    """
    deps: dict = {}
    seen = set(roots)
    pending = list(seen)
    check = capture is not None
    uncaptured = check and any(type(r) is AccumulateGrad and r not in capture for r in roots)
    while pending:
        node = pending.pop()
        for edge, _, _ in node.inputs:
            if edge is None:
                continue
            if edge in deps:
                deps[edge] += 1
                continue
            deps[edge] = 1
            if edge not in seen:
                seen.add(edge)
                pending.append(edge)
                if check and type(edge) is AccumulateGrad and edge not in capture:
                    uncaptured = True
    if not check or not uncaptured and all(type(n) is AccumulateGrad for n in capture):
        return deps, None
    consumers: dict = {}
    for node in seen:
        for edge, _, _ in node.inputs:
            if edge is not None:
                consumers.setdefault(edge, []).append(node)
    reaches, needed = set(), set()      # a consumer of a node that reaches is needed
    pending = [node for node in capture if node in seen]
    while pending:
        node = pending.pop()
        if node not in reaches:
            reaches.add(node)
            users = consumers.get(node)
            if users:
                needed.update(users)
                pending.extend(users)
    return deps, needed


def _add_to_buffer(buffers, node, g) -> None:
    prev = buffers.get(node)
    buffers[node] = g if prev is None else prev + g


# -- one node -----------------------------------------------------------------------------------

def _call_rule(node, g, create_graph) -> Sequence:
    saved = node.saved
    if saved is None:
        raise RuntimeError(
            f"Trying to backward through the graph a second time ({node.name}); specify "
            f"retain_graph=true (pass retain_graph=True to the first backward() call if you "
            f"need to backward through the graph again)")
    if create_graph:
        args = [_unpack_tensor(s, node) for s in saved]
        if not isinstance(g, Tensor):
            g = _wrap(np.asarray(g))
    else:
        args = []  # a loop, not a comprehension: cheaper for two or three values on 3.11
        for s in saved:
            args.append(s.unpack_plain() if type(s) is SavedTensor else s)
    params = node.params
    try:
        grads = node.rule(g, *args, **params) if params else node.rule(g, *args)
    except Exception as e:
        e.add_note(f"while running {node.name} in backward")
        raise
    if len(grads) != len(node.inputs):
        raise RuntimeError(f"Function {node.name} returned {len(grads)} gradients but expected "
                           f"{len(node.inputs)}")
    return grads


def _unpack_tensor(s, node):
    """A saved value for a create_graph rule: the input tensor itself, or the output rebuilt."""
    if type(s) is not SavedTensor:
        return s
    data = s.unpack()
    if s.tensor is not None:
        return s.tensor
    out = _wrap(data)  # the node's own output: its history is this node
    out._version, out.grad_fn, out._requires_grad = s.version, node, True
    return out


def _fit(node, i, g, shape, dtype, create_graph):
    """A rule's cotangent for operand i, un-broadcast and cast to the operand's shape/dtype."""
    if create_graph and not isinstance(g, Tensor):
        g = _wrap(np.asarray(g))
    gshape = tuple(g.shape)
    if gshape != shape and not _unbroadcastable(gshape, shape, node.shape):
        raise RuntimeError(f"Function {node.name} returned an invalid gradient at index {i} - "
                           f"got {_fmt(gshape)} but expected shape {_fmt(shape)}")
    if gshape != shape or g.dtype != dtype:
        g = unbroadcast_and_cast(g, shape, dtype)
    return g


def _unbroadcastable(gshape, shape, out_shape) -> bool:
    """Whether gshape is `shape` broadcast, and only along dimensions the op's output has.

    Elementwise rules return gradients in the output's shape and matmul in the broadcast batch
    shape; anything larger is a wrong formula, not broadcasting.
    """
    if len(shape) > len(gshape) or len(gshape) > len(out_shape):
        return False
    for k in range(1, len(gshape) + 1):
        n = shape[-k] if k <= len(shape) else 1
        if gshape[-k] != n and not (n == 1 and gshape[-k] == out_shape[-k]):
            return False
    return True


# -- leaves -------------------------------------------------------------------------------------

def _accumulate(t: Tensor, g, create_graph) -> None:
    if not t.requires_grad or t.grad_fn is not None:
        return  # detached in place after the graph was recorded: skip, as the seed's fix
    with AccumulateGrad.lock:
        _store(t, g, create_graph)


def _store_retained(node, g, create_graph) -> None:
    t = node.retained()
    if t is not None and t.grad_fn is node and t.requires_grad:
        with AccumulateGrad.lock:
            _store(t, g, create_graph)


def _store(t: Tensor, g, create_graph) -> None:
    """t.grad += g: a copy the first time, in place later unless either side has history."""
    if create_graph and isinstance(g, Tensor) and g.grad_fn is not None:
        t.grad = g if t.grad is None else t.grad + g
        return
    data = g.data if isinstance(g, Tensor) else g
    old = t.grad
    if old is None:
        t.grad = _wrap(np.array(data, dtype=t.dtype))
    elif old.grad_fn is None and old.data.flags.writeable:
        np.add(old.data, data, out=old.data, casting="same_kind")
        old._vc().bump("backward", None)
    else:
        t.grad = old + data
