"""In-place operations on eager tensors: NumPy's aliasing with PyTorch's autograd rules.

`t += v`, `t.add_(v)` and `np.add(t, v, out=t)` all end in `_inplace`, which writes into t's own
buffer (every name bound to t, every view of it and `t.numpy()` see the change, as in NumPy)
and bumps the storage version, so a node that saved t's old value fails at backward time with
the seed's "modified by an inplace operation". With grad mode on:

* a leaf that requires grad raises (PyTorch's text): the graph was recorded against its value;
* when t has history or the source requires grad, t is rebased as in PyTorch: the op is
  recorded on a stand-in for t's old value (a copy only when the rule reads that value) and t
  takes the new node as its grad_fn, so `y = x * 2; y += 1` differentiates to 2;
* a rebase of a tensor whose storage is shared with a view raises: the view's history would
  not follow the write (PyTorch rebases views on their base; this engine keeps no view bases).

Under no_grad nothing is recorded: `w -= lr * w.grad` updates the leaf itself (the SGD step).
Inside fg.grad / fg.vjp of a function (NumPy code, not the tensor API) a recorded in-place op
follows NumPy by functionalization instead (`_functional`), as traced code does, so that
`logits -= np.max(logits)` is not refused for having overwritten a saved value.
"""

from __future__ import annotations

import numpy as np

from ..formulas import vjp_rules
from ..state import eager_transforms
from ..tracer.location import user_location
from ..tracer.methods import face
from .grad_mode import _state as _grad_state
from .graph import input_mode

# Views left behind by a recorded write that gave their base a new buffer (fg.grad of NumPy
# code: `v = y[1:]; y[1] = 5.0`): id -> (weakref, the write's label and line). NumPy's view
# would show the write; the eager view keeps the old numbers and history, so reading it in a
# forward op raises (tensor._fg_bind) rather than give a silently wrong value and gradient.
STALE: dict = {}


def orphan_views(t, label) -> None:
    """Mark every live tensor sharing t's storage as stale (t is about to take a new buffer)."""
    version = t._version
    if version is None or version.views is None:
        return
    where = user_location(full=True)
    if len(STALE) > 1024:
        for key in [k for k, (ref, _, _) in STALE.items() if ref() is None]:
            del STALE[key]
    for ref in version.views.values():
        view = ref()
        if view is not None and view is not t:
            STALE[id(view)] = (ref, label, where)


def stale_error(t):
    """The error for reading a stale view t, or None when t is not one."""
    entry = STALE.get(id(t))
    if entry is None or entry[0]() is not t or _grad_state.backward:
        return None
    _, label, where = entry
    return RuntimeError(
        f"a view of an array is read at {user_location(full=True)} after {label} at {where} "
        f"wrote into its base; NumPy's view would show that write, but the eager engine's "
        f"view keeps the old value. Take the view after the write (or copy it before), or "
        f"run under fg.jit, which recomputes views from their base")

# kind -> (the primitive recorded under grad mode, the NumPy ufunc that writes otherwise)
_KINDS = {
    "add": ("add", np.add), "sub": ("sub", np.subtract), "mul": ("mul", np.multiply),
    "div": ("div", np.true_divide), "pow": ("pow", np.power), "matmul": ("matmul", np.matmul),
    "mod": ("remainder", np.remainder),
    "and": ("and", np.logical_and), "or": ("or", np.logical_or), "fill": ("select", None),
}
_UFUNC_KINDS = {ufunc: kind for kind, (_, ufunc) in _KINDS.items() if ufunc is not None}


class InplaceMethods:
    """The in-place members of Tensor (a mixin: Tensor provides data, grad_fn, _version...)."""

    __slots__ = ()

    def add_(self, other): return self._inplace("add", other, "add_")
    def sub_(self, other): return self._inplace("sub", other, "sub_")
    def mul_(self, other): return self._inplace("mul", other, "mul_")
    def div_(self, other): return self._inplace("div", other, "div_")
    def zero_(self): return self._inplace("fill", 0, "zero_")
    def fill_(self, value): return self._inplace("fill", value, "fill_")

    # Without these Python would fall back to __add__ and rebind the name to a new tensor.
    def __iadd__(self, other): return self._inplace("add", other, "+=")
    def __isub__(self, other): return self._inplace("sub", other, "-=")
    def __imul__(self, other): return self._inplace("mul", other, "*=")
    def __itruediv__(self, other): return self._inplace("div", other, "/=")
    def __ipow__(self, other): return self._inplace("pow", other, "**=")
    def __imod__(self, other): return self._inplace("mod", other, "%=")

    def __ifloordiv__(self, other):
        """Floor division has no gradient: the quotient, detached, fills self."""
        other = other.detach() if isinstance(other, InplaceMethods) else other
        return self._inplace("fill", face().floor_divide(self.detach(), other), "//=")
    def __imatmul__(self, other): return self._inplace("matmul", other, "@=")
    def __iand__(self, other): return self._inplace("and", other, "&=")
    def __ior__(self, other): return self._inplace("or", other, "|=")

    def _inplace(self, kind, source, label):
        prim, ufunc = _KINDS[kind]
        if _grad_state.enabled and self._records(source, label):
            if eager_transforms.depth:
                self._functional(prim, source, label)
            else:
                self._rebase(prim, source, label)
        else:
            value = source.data if isinstance(source, InplaceMethods) else source
            if ufunc is None:
                self.data[...] = value
            else:
                ufunc(self.data, value, out=self.data, casting="same_kind")
            self._vc().bump(label, user_location(full=True))
        return self

    def _records(self, source, label) -> bool:
        """The grad-mode rules: whether the write must be recorded, or an error."""
        if not (self._requires_grad or isinstance(source, InplaceMethods)
                and source._requires_grad):
            return False
        where = user_location(full=True)
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError(
                f"a leaf Variable that requires grad is being used in an in-place operation. "
                f"(a leaf tensor that requires grad is being used in the in-place operation "
                f"{label} at {where}; make the update under `with fg.no_grad():`, or write "
                f"`x = x + ...` for a new tensor)")
        if self._version is not None and self._version.aliased(self):
            raise RuntimeError(
                f"in-place operation {label} at {where} on a tensor that shares its storage "
                f"with a live view (reshape, transpose, slicing, expand, or one a recorded op "
                f"keeps, as matmul does for a 1-D operand) while recording gradients: the "
                f"view's gradient would be wrong; write `y = y + ...` instead")
        return True

    def _rebase(self, prim, source, label) -> None:
        """Record the op on a stand-in for self's old value, write the result into self's
        buffer, and make the new node self's history (PyTorch's rebase_history)."""
        old = self.detach()
        old.grad_fn, old._requires_grad = self.grad_fn, self._requires_grad
        args, at = ((True, source, old), 2) if prim == "select" else ((old, source), 0)
        rule = vjp_rules.get(prim)
        if rule is not None and input_mode(rule, at) == "data":
            old.data, old._version = self.data.copy(), None     # the write would clobber it
        new = type(self)._fg_bind(prim, args, {})
        if new.shape != self.shape:
            raise ValueError(f"non-broadcastable output operand with shape {self.shape} "
                             f"doesn't match the broadcast shape {new.shape}")
        np.copyto(self.data, new.data, casting="same_kind")
        self._vc().bump(label, user_location(full=True))
        node, self.grad_fn, self._requires_grad = self.grad_fn, new.grad_fn, new._requires_grad
        if node is not None and node.retained is not None and self.grad_fn is not None:
            self.grad_fn.retained, node.retained = node.retained, None

    def _functional(self, prim, source, label) -> None:
        """Inside fg.grad of a NumPy function: NumPy's semantics by functionalization, as under
        jit. The op is recorded on a stand-in for self's old value, which keeps its buffer
        (saved for backward, it is not overwritten), and self takes the result's new buffer and
        history, so every name bound to self sees the update (`logits -= np.max(logits)`)."""
        old = self.detach()
        old.grad_fn, old._requires_grad = self.grad_fn, self._requires_grad
        args = (True, source, old) if prim == "select" else (old, source)
        new = type(self)._fg_bind(prim, args, {})
        if new.shape != self.shape:
            raise ValueError(f"non-broadcastable output operand with shape {self.shape} "
                             f"doesn't match the broadcast shape {new.shape}")
        if new.dtype != self.dtype:
            new = new.astype(self.dtype)
        node = self.grad_fn
        orphan_views(self, label)
        self.data, self.grad_fn, self._version = new.data, new.grad_fn, None
        self._requires_grad = new._requires_grad
        if node is not None and node.retained is not None and self.grad_fn is not None:
            self.grad_fn.retained, node.retained = node.retained, None

    def _ufunc_out(self, ufunc, method, inputs, kwargs):
        """`np.add(t, v, out=t)` is `t += v`; any other out= is an error (ArrayMethods')."""
        out = kwargs.get("out")
        out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        kind = _UFUNC_KINDS.get(ufunc)
        if kind and method == "__call__" and len(kwargs) == 1 and len(inputs) == 2 \
                and isinstance(out, InplaceMethods) and out is inputs[0]:
            return out._inplace(kind, inputs[1], f"numpy.{ufunc.__name__}(out=)")
        return None
