"""Where Tensor.backward finds the engine, so that tensor.py never imports engine.py.

The engine (engine.py) walks the recorded graph and builds Tensors as it goes (the `.grad` it
stores, the values its rules run on under create_graph), so it imports tensor.py; and
`Tensor.backward` must run the engine. Of the two the engine is the upper layer: when it is
imported it installs its `backward` here, and Tensor.backward calls this module's `backward`.
Importing fusegrad imports the engine (through transforms.py), so it is installed before any
Tensor exists.
"""

from __future__ import annotations

_engine_backward = None


def install(backward) -> None:
    """Called once by engine.py with its `backward(tensors, grad_tensors, retain_graph,
    create_graph)`."""
    global _engine_backward
    _engine_backward = backward


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False) -> None:
    """engine.backward: accumulate the gradient of `tensors` into the leaves' `.grad`."""
    if _engine_backward is None:
        raise RuntimeError("the eager engine is not loaded: import fusegrad.runtime.engine")
    _engine_backward(tensors, grad_tensors, retain_graph, create_graph)
