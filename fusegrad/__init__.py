"""fusegrad: trace NumPy code into an SSA IR, differentiate it with one formula table, fuse
and JIT-compile it with Numba; or run it eagerly on a define-by-run tape."""

from . import ir, nn, numpy, tree
from .api import jit, make_ir
from .custom import custom_vjp
from .runtime.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .remat import checkpoint, remat
from .runtime.gradcheck import gradcheck
from .runtime.graph_dot import graph_dot
from .runtime.hooks import detect_anomaly, set_anomaly_detection, set_backward_trace
from .runtime.tensor import Tensor, tensor
from .tracer.randomness import TracerRandomWarning
from .forward import hessian, hvp, jacfwd, jacobian, jacrev, jvp, linearize
from .transforms import elementwise_grad, grad, value_and_grad, vjp
from .vmap import vmap
from .version import __version__  # noqa: F401 - fusegrad.__version__

__all__ = [
    "ir", "nn", "numpy", "jit", "make_ir", "custom_vjp", "grad", "value_and_grad", "vjp",
    "hessian", "hvp", "elementwise_grad", "tree", "jvp", "linearize", "jacfwd", "jacrev",
    "jacobian", "checkpoint", "remat", "vmap",
    "Tensor", "tensor", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
    "gradcheck", "graph_dot", "set_backward_trace", "set_anomaly_detection", "detect_anomaly",
    "TracerRandomWarning",
]
