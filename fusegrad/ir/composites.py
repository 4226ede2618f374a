"""Composites: single ops with their own stable VJP in the formula table and a small saved
state, expanded into primitives by the `lower` pass before fusion.

Each entry has a NumPy implementation (the reference) and a lowering written with the `lax`
module it is passed. Both are numerically stable in the same way: they subtract the maximum,
replaced by 0 where it is not finite, so rows of -inf give -inf (not nan) and +inf gives +inf.
"""

from __future__ import annotations

import math

import numpy as np

from .elementwise import _erf
from .registry import Doc, check_axis, define, fail, reduced_shape, require_float

SECTION = "Composites"


def _same_float(prim, x, **params):
    require_float(prim, x)
    return x


# -- NumPy implementations ---------------------------------------------------------------------

def _stable_max(x, axes):
    """max over axes, keepdims, with infinite maxima replaced by 0 so x - m never makes nan."""
    m = np.max(x, axis=axes, keepdims=True)
    return np.where(np.isfinite(m), m, 0).astype(x.dtype)


def _logsumexp(x, *, axes):
    x = np.asarray(x)
    axes = tuple(axes)
    m = _stable_max(x, axes)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return np.squeeze(out, axis=axes)


def _softmax(x, *, axis):
    x = np.asarray(x)
    e = np.exp(x - _stable_max(x, (axis,)))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, *, axis):
    x = np.asarray(x)
    return x - np.expand_dims(_logsumexp(x, axes=(axis,)), axis)


def _cross_entropy(logits, targets):
    logp = _log_softmax(logits, axis=1)
    picked = np.take_along_axis(logp, np.asarray(targets)[:, None], axis=1)
    return np.asarray(-np.mean(picked), dtype=logp.dtype)


def _layer_norm(x, *, ndim, eps):
    x = np.asarray(x)
    axes = tuple(range(x.ndim - ndim, x.ndim))
    centered = x - np.mean(x, axis=axes, keepdims=True)
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    return centered / np.sqrt(var + x.dtype.type(eps))


def _gelu(x, *, approximate):
    x = np.asarray(x)
    if approximate:
        c = x.dtype.type(math.sqrt(2 / math.pi))
        return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + _erf(x / x.dtype.type(math.sqrt(2))))


# -- lowerings: `lax` is fusegrad.lax, passed in by the lower pass --------------------------------

def _expand(lax, r, x, axes):
    """Broadcast a reduction result r back over x's shape (numpy's keepdims, explicit)."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    return lax.broadcast_in_dim(r, x.shape, kept)


def _lax_stable_max(lax, x, axes):
    m = lax.reduce_max(x, axes)
    return lax.select(lax.lt(lax.abs(m), math.inf), m, 0.0)


def _shifted_exp_sum(lax, x, axes):
    """(x - max, sum(exp(x - max))): the shared core of the softmax family."""
    shifted = lax.sub(x, _expand(lax, _lax_stable_max(lax, x, axes), x, axes))
    return shifted, lax.reduce_sum(lax.exp(shifted), axes)


def _lower_logsumexp(lax, x, *, axes):
    m = _lax_stable_max(lax, x, axes)
    s = lax.reduce_sum(lax.exp(lax.sub(x, _expand(lax, m, x, axes))), axes)
    return lax.add(lax.log(s), m)


def _lower_softmax(lax, x, *, axis):
    e = lax.exp(lax.sub(x, _expand(lax, _lax_stable_max(lax, x, (axis,)), x, (axis,))))
    return lax.div(e, _expand(lax, lax.reduce_sum(e, (axis,)), x, (axis,)))


def _lower_log_softmax(lax, x, *, axis):
    shifted, s = _shifted_exp_sum(lax, x, (axis,))
    return lax.sub(shifted, _expand(lax, lax.log(s), x, (axis,)))


def _lower_cross_entropy(lax, logits, targets):
    """-mean(log_softmax(logits)[row, target]); only the picked entries are normalized."""
    n = logits.shape[0]
    shifted, s = _shifted_exp_sum(lax, logits, (1,))
    picked = lax.take_along_axis(shifted, lax.reshape(targets, (n, 1)), 1)
    logp = lax.sub(lax.reshape(picked, (n,)), lax.log(s))
    return lax.neg(lax.div(lax.reduce_sum(logp, (0,)), n))


def _lower_layer_norm(lax, x, *, ndim, eps):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    n = math.prod(x.shape[a] for a in axes)
    mean = lax.div(lax.reduce_sum(x, axes), n)
    centered = lax.sub(x, _expand(lax, mean, x, axes))
    var = lax.div(lax.reduce_sum(lax.mul(centered, centered), axes), n)
    return lax.div(centered, _expand(lax, lax.sqrt(lax.add(var, eps)), x, axes))


def _lower_gelu(lax, x, *, approximate):
    if approximate:
        cube = lax.mul(lax.mul(lax.mul(0.044715, x), x), x)
        inner = lax.tanh(lax.mul(math.sqrt(2 / math.pi), lax.add(x, cube)))
    else:
        inner = lax.erf(lax.div(x, math.sqrt(2)))
    return lax.mul(lax.mul(0.5, x), lax.add(1.0, inner))


# -- the table ------------------------------------------------------------------------------

def _softmax_rule(prim, x, *, axis):
    require_float(prim, x)
    check_axis(prim, axis, x.ndim, x)
    return x


def _logsumexp_rule(prim, x, *, axes):
    require_float(prim, x)
    return x.with_shape(reduced_shape(prim, x, axes))


def _cross_entropy_rule(prim, logits, targets):
    require_float(prim, logits)
    if logits.ndim != 2 or targets.shape != logits.shape[:1] or targets.dtype != "i64":
        fail(prim, "needs logits [N, C] and i64 targets [N]", logits, targets)
    return logits.with_shape(())


def _layer_norm_rule(prim, x, *, ndim, eps):
    require_float(prim, x)
    if not 1 <= ndim <= x.ndim:
        fail(prim, f"cannot normalize {ndim} trailing axes of rank {x.ndim}", x)
    return x


define("softmax", "composite", _softmax_rule, _softmax, lower=_lower_softmax, section=SECTION,
       doc=Doc("x: f32/f64", "`axis` (may be negative)", "same as x",
               "`exp(x - max) / sum(exp(x - max))` along axis"))
define("log_softmax", "composite", _softmax_rule, _log_softmax, lower=_lower_log_softmax,
       section=SECTION, doc=Doc("x: f32/f64", "`axis` (may be negative)", "same as x",
                                "`x - logsumexp(x, axis)`"))
define("logsumexp", "composite", _logsumexp_rule, _logsumexp, lower=_lower_logsumexp,
       section=SECTION, doc=Doc("x: f32/f64", "`axes`", "x's shape without `axes`",
                                "`log(sum(exp(x), axes))`, computed stably"))
define("cross_entropy", "composite", _cross_entropy_rule, _cross_entropy,
       lower=_lower_cross_entropy, section=SECTION,
       doc=Doc("logits: f[N, C], targets: i64[N]", "", "f[] (logits' dtype)",
               "mean over rows of `-log_softmax(logits)[i, targets[i]]`"))
define("layer_norm", "composite", _layer_norm_rule, _layer_norm, lower=_lower_layer_norm,
       section=SECTION,
       doc=Doc("x: f32/f64", "`ndim` (1 ≤ ndim ≤ rank), `eps`", "same as x",
               "standardize over the trailing `ndim` axes: `(x - mean) / sqrt(var + eps)`, "
               "no affine"))
define("gelu", "composite", _same_float, _gelu, lower=_lower_gelu, section=SECTION,
       doc=Doc("x: f32/f64", "`approximate` (bool)", "same as x",
               "`x * Φ(x)` with the erf form, or the tanh approximation when `approximate`"))
