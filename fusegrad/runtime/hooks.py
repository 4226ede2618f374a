"""Debug hooks of the eager engine: the per-node backward trace and anomaly detection.

The trace prints one line per node the engine runs, with the shape and L2 norm of the gradient
arriving at it (`backward TanhBackward shape=[2] norm=1.41421`). It goes to the stream given to
`set_backward_trace`, or to stderr when FUSEGRAD_TRACE_BACKWARD=1 and no stream was set.
Anomaly detection checks every gradient a node returns for NaN and names the node, and the
user's line that ran its forward op.
"""

from __future__ import annotations

import os
import sys

import numpy as np

_UNSET = object()
_trace_stream = _UNSET
anomaly_enabled = False  # read by the recording hot path: a plain module global


def set_backward_trace(stream) -> None:
    """Print one line per backward node to `stream` (a file-like object); None turns it off."""
    global _trace_stream
    _trace_stream = stream


def trace_stream():
    """The stream to trace to for this backward call, or None."""
    if _trace_stream is not _UNSET:
        return _trace_stream
    if os.environ.get("FUSEGRAD_TRACE_BACKWARD", "") not in ("", "0"):
        return sys.stderr
    return None


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def trace_node(stream, name: str, gradient) -> None:
    data = np.asarray(getattr(gradient, "data", gradient), dtype=np.float64)
    norm = float(np.sqrt(np.sum(data * data)))
    stream.write(f"backward {name} shape={_fmt_shape(data.shape)} norm={norm:g}\n")


def set_anomaly_detection(flag: bool) -> None:
    """Check every gradient for NaN during backward (and remember where each op ran)."""
    global anomaly_enabled
    anomaly_enabled = bool(flag)


class detect_anomaly:
    """`with fg.detect_anomaly(): ...` turns anomaly detection on for the block (nests)."""

    def __init__(self, enabled: bool = True):
        self._flag = bool(enabled)

    def __enter__(self):
        self._prev = anomaly_enabled
        set_anomaly_detection(self._flag)
        return self

    def __exit__(self, *exc):
        set_anomaly_detection(self._prev)
        return False


def check_anomaly(node, gradients) -> None:
    for g in gradients:
        if g is None:
            continue
        if np.isnan(np.asarray(getattr(g, "data", g))).any():
            where = f" (its forward op ran at {node.where})" if node.where else ""
            raise RuntimeError(f"Function {node.name} returned NaN in its gradient{where}")
