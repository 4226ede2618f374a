"""Composites: single ops with their own stable, small-state VJP."""

from __future__ import annotations

import math

from .. import lax
from .table import _expand, _mean, _vjp


@_vjp("softmax", "SoftmaxBackward", reads="out")
def softmax(g, out, x, *, axis):
    axes = (axis % len(out.shape),)
    return (out * (g - _expand(lax.reduce_sum(g * out, axes), out.shape, axes)),)


@_vjp("log_softmax", "LogSoftmaxBackward", reads="out")
def log_softmax(g, out, x, *, axis):
    axes = (axis % len(out.shape),)
    return (g - lax.exp(out) * _expand(lax.reduce_sum(g, axes), out.shape, axes),)


@_vjp("logsumexp", "LogsumexpBackward", reads="x")
def logsumexp(g, out, x, *, axes):
    return (_softmax_over(x, axes) * _expand(g, x.shape, axes),)


def _softmax_over(x, axes):
    """exp(x - max) / sum(exp(x - max)) over axes: exact for ties, 0 for an all -inf slice."""
    m = lax.reduce_max(x, axes)
    w = lax.exp(x - _expand(lax.select(lax.lt(lax.abs(m), math.inf), m, 0.0), x.shape, axes))
    s = lax.reduce_sum(w, axes)
    return w / _expand(lax.select(lax.eq(s, 0.0), 1.0, s), x.shape, axes)


@_vjp("cross_entropy", "CrossEntropyBackward", reads="logits targets")
def cross_entropy(g, out, logits, targets):
    n, c = logits.shape
    onehot = lax.scatter_add_along_axis(lax.reshape(targets, (n, 1)),
                                        lax.full((n, 1), 1.0, logits.dtype), 1, (n, c))
    return (lax.softmax(logits, 1) - onehot) * (g / n), None


@_vjp("layer_norm", "LayerNormBackward", reads="out x")
def layer_norm(g, out, x, *, ndim, eps):
    axes = tuple(range(len(x.shape) - ndim, len(x.shape)))
    centered = x - _mean(x, axes)
    sigma = lax.sqrt(_mean(centered * centered, axes) + eps)
    return ((g - _mean(g, axes) - out * _mean(g * out, axes)) / sigma,)


def _gelu_slope(x):
    """Phi(x) + x phi(x): the standard normal CDF plus x times its density."""
    cdf = 0.5 * (1 + lax.erf(x * (1 / math.sqrt(2))))
    return cdf + x * lax.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))


def _gelu_tanh_slope(x):
    """Derivative of 0.5 x (1 + tanh(c (x + 0.044715 x^3)))."""
    c = math.sqrt(2 / math.pi)
    t = lax.tanh(c * (x + 0.044715 * x * x * x))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


@_vjp("gelu", "GeluBackward", reads="x")
def gelu(g, out, x, *, approximate):
    return (g * (_gelu_tanh_slope(x) if approximate else _gelu_slope(x)),)


# ---------------------------------------------------------------------------------------------
