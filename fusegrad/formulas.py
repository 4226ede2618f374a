"""THE formula table: one vector-Jacobian product rule per differentiable primitive.

This is the only place in fusegrad where a derivative is written down (like PyTorch's
derivatives.yaml). The eager tape engine calls these rules on NumPy arrays (or on eager tensors,
recording again, under create_graph=True); the IR autodiff pass calls them on tracers to append
the backward ops. So a rule is written only with `fusegrad.lax` functions and Python operators.

Signature:  rule(g, out, *inputs, **params) -> tuple, one cotangent per input.

Names in scope:
    g        the cotangent of the output (the gradient of the loss with respect to `out`);
             it has the output's shape and dtype
    out      the primal output of the op (use it when the derivative is cheaper through it:
             exp, tanh, logistic, sqrt, softmax, ...)
    x, y...  the primal inputs, in the op's argument order; a rule may read `.shape` and
             `.dtype` of array inputs (never of Python scalars)
    params   the op's static params as keywords (axes, axis, shape, perm, ...)

Each rule declares on registration which of its own arguments it reads besides g: `reads="x y"`
(the values), `reads="x.shape"` (only .shape / .dtype / .ndim), `reads="xs.shape"` (every one of
*xs), `reads=""` (none). The eager engine saves exactly these for backward (runtime/graph.py);
params are always passed. tests/test_formulas.py checks that each declaration is sufficient
(an undeclared argument is never touched) and minimal.

Conventions:
    * None means "no gradient flows to this input": indices, select's predicate. Primitives with
      no derivative at all (comparisons, logic, sign, argmax, nullary constructors) are listed in
      NON_DIFFERENTIABLE; their results are constants for autodiff.
    * Elementwise rules may return a cotangent in the *broadcast* shape and the *output* dtype.
      Un-broadcasting (sum_to_shape) and casting back to the input's dtype happen once, in the
      driver (`unbroadcast_and_cast`), never in a rule. Skipping None and summing fan-in also
      live in the driver.
    * Kinks follow PyTorch: relu'(0) = 0 (relu is traced as select(x > 0, x, 0) and needs no rule
      of its own); abs'(0) = sign(0) = 0; maximum/minimum and reduce_max/min split the gradient
      evenly among ties; clamp is maximum/minimum. nan propagates, in the value as in NumPy and
      in the gradient as PyTorch's max(): the nan operands are the result and share g, so
      maximum(nan, 1) sends g to the nan and 0 to the 1.
    * Rounding (floor, ceil, round, trunc) is piecewise constant: no gradient. remainder
      (x - y floor(x/y)) and fmod (x - y trunc(x/y)) have slope 1 in x and -floor(x/y),
      -trunc(x/y) in y, as PyTorch.
    * pow guards: the base gets 0 where the exponent is 0 (so d/dx x**0 = 0 even at x = 0), the
      exponent gets 0 where the base is 0 (instead of 0 * log 0 = nan).
    * prod: no zero in the slice -> out / x; exactly one zero -> the product of the others at the
      zero and 0 elsewhere; several zeros -> 0 everywhere.
    * softmax and log_softmax go through the saved output and logsumexp through a max-shifted
      softmax, so they stay finite (and exact for ties) for large inputs; a logsumexp slice
      that is entirely -inf gets a zero gradient, not nan.
    * cross_entropy is the mean over rows of -log_softmax(logits)[target]; its gradient is
      (softmax - onehot(target)) / N, the one-hot a scatter of ones: like the forward gather,
      it follows NumPy's index rules (-1 is the last class, out of range raises).
    * layer_norm backward is (g - mean(g) - y * mean(g * y)) / sigma, with sigma recomputed from x.
    * gelu: exact Phi(x) + x phi(x), or the derivative of the tanh approximation.
"""

from __future__ import annotations

import math
from itertools import accumulate

from . import lax
from .ir.types import NP_DTYPES, dtype_name

NON_DIFFERENTIABLE = frozenset((
    "sign", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not",
    "argmax", "argmin", "full", "iota", "constant", "floor", "ceil", "round", "trunc",
))

vjp_rules: dict = {}
node_names: dict = {}


def _vjp(prim, name, reads=None):
    """Register fn as prim's VJP rule, with its eager node's name and what it reads besides g
    (see the module docstring); the eager engine saves only that. Undeclared: it saves all."""
    def register(fn):
        if reads is not None:
            fn.reads = reads
        vjp_rules[prim] = fn
        node_names[prim] = name
        return fn
    return register


# ---------------------------------------------------------------------------------------------
# Shared helpers: shapes, broadcasting back over reduced axes.

def _fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def sum_to_shape(g, shape):
    """Undo broadcasting: sum g's leading axes and the axes where `shape` has size 1."""
    shape, gshape = tuple(shape), tuple(g.shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    if lead < 0 or any(n not in (1, m) for n, m in zip(shape, gshape[lead:])):
        raise ValueError(f"cannot reduce gradient of shape {_fmt(gshape)} to {_fmt(shape)}")
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and gshape[lead + i] != 1)
    return lax.reshape(lax.reduce_sum(g, axes), shape)


def _dtype_key(dtype) -> str:
    return dtype if isinstance(dtype, str) and dtype in NP_DTYPES else dtype_name(dtype)


def unbroadcast_and_cast(g, shape, dtype):
    """What a driver does with every cotangent: sum_to_shape, then cast to the input's dtype."""
    g = sum_to_shape(g, shape)
    if _dtype_key(g.dtype) != _dtype_key(dtype):
        g = lax.convert(g, dtype)
    return g


def _expand(v, shape, axes):
    """Broadcast a reduced value back over the reduced `axes` of `shape`."""
    if not axes:
        return v
    return lax.broadcast_in_dim(v, shape, tuple(i for i in range(len(shape)) if i not in axes))


def _mean(v, axes):
    """Mean over axes, broadcast back to v's shape (keepdims + expand)."""
    count = math.prod(v.shape[a] for a in axes)
    return _expand(lax.reduce_sum(v, axes) / count, tuple(v.shape), axes)


def _mT(x):
    n = len(x.shape)
    return lax.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


# ---------------------------------------------------------------------------------------------
# Elementwise: unary.

@_vjp("neg", "NegBackward", reads="")
def neg(g, out, x):
    return (-g,)


@_vjp("abs", "AbsBackward", reads="x")
def abs(g, out, x):
    return (g * lax.sign(x),)


@_vjp("exp", "ExpBackward", reads="out")
def exp(g, out, x):
    return (g * out,)


@_vjp("expm1", "Expm1Backward", reads="out")
def expm1(g, out, x):
    return (g * (out + 1),)


@_vjp("log", "LogBackward", reads="x")
def log(g, out, x):
    return (g / x,)


@_vjp("log1p", "Log1pBackward", reads="x")
def log1p(g, out, x):
    return (g / (x + 1),)


@_vjp("sqrt", "SqrtBackward", reads="out")
def sqrt(g, out, x):
    return (g / (2 * out),)


@_vjp("rsqrt", "RsqrtBackward", reads="out x")
def rsqrt(g, out, x):
    return (-0.5 * g * out / x,)


@_vjp("sin", "SinBackward", reads="x")
def sin(g, out, x):
    return (g * lax.cos(x),)


@_vjp("cos", "CosBackward", reads="x")
def cos(g, out, x):
    return (-g * lax.sin(x),)


@_vjp("tanh", "TanhBackward", reads="out")
def tanh(g, out, x):
    return (g * (1 - out * out),)


@_vjp("logistic", "SigmoidBackward", reads="out")
def logistic(g, out, x):
    return (g * out * (1 - out),)


@_vjp("erf", "ErfBackward", reads="x")
def erf(g, out, x):
    return (g * (2 / math.sqrt(math.pi)) * lax.exp(-x * x),)


@_vjp("atan", "AtanBackward", reads="x")
def atan(g, out, x):
    return (g / (1 + x * x),)


# ---------------------------------------------------------------------------------------------
# Elementwise: binary (results in the broadcast shape; the driver un-broadcasts).

@_vjp("add", "AddBackward", reads="")
def add(g, out, x, y):
    return g, g


@_vjp("sub", "SubBackward", reads="")
def sub(g, out, x, y):
    return g, -g


@_vjp("mul", "MulBackward", reads="x y")
def mul(g, out, x, y):
    return g * y, g * x


@_vjp("div", "DivBackward", reads="out y")
def div(g, out, x, y):
    return g / y, -g * out / y


def _pow_base(x, y):
    """d(x**y)/dx = y * x**(y-1), forced to 0 where y == 0 (0 * 0**-1 would be nan).

    The masked branch is computed at a safe exponent too (the double-where pattern), so that
    differentiating this rule again does not meet the where-trap (0 * inf) at x == 0."""
    zero = lax.eq(y, 0)
    return lax.select(zero, 0.0, y * lax.pow(x, lax.select(zero, 1.0, y - 1)))


def _pow_exponent(out, x):
    """d(x**y)/dy = x**y * log(x), forced to 0 where x == 0 (0 * log 0 would be nan)."""
    zero = lax.eq(x, 0)
    return lax.select(zero, 0.0, out * lax.log(lax.select(zero, 1.0, x)))


@_vjp("pow", "PowBackward", reads="out x y")
def pow(g, out, x, y):
    return g * _pow_base(x, y), g * _pow_exponent(out, x)


def _share(g, mine, theirs):
    """g where only this operand is the result, g/2 where both are (a tie), 0 elsewhere."""
    return lax.select(mine, lax.select(theirs, 0.5 * g, g), 0.0)


def _is_result(x, y, beats):
    """Whether x is max(x, y) (beats=ge) or min (le): it wins or ties, or is nan."""
    return lax.or_(beats(x, y), lax.ne(x, x))


@_vjp("maximum", "MaximumBackward", reads="x y")
def maximum(g, out, x, y):
    xr, yr = _is_result(x, y, lax.ge), _is_result(y, x, lax.ge)
    return _share(g, xr, yr), _share(g, yr, xr)


@_vjp("minimum", "MinimumBackward", reads="x y")
def minimum(g, out, x, y):
    xr, yr = _is_result(x, y, lax.le), _is_result(y, x, lax.le)
    return _share(g, xr, yr), _share(g, yr, xr)


@_vjp("remainder", "RemainderBackward", reads="x y")
def remainder(g, out, x, y):
    return g, -g * lax.floor(x / y)


@_vjp("fmod", "FmodBackward", reads="x y")
def fmod(g, out, x, y):
    return g, -g * lax.trunc(x / y)


@_vjp("select", "WhereBackward", reads="pred")
def select(g, out, pred, on_true, on_false):
    return None, lax.select(pred, g, 0.0), lax.select(pred, 0.0, g)


@_vjp("convert", "ToBackward", reads="")
def convert(g, out, x, *, dtype):
    return (g,)  # the driver casts back to x's dtype


# ---------------------------------------------------------------------------------------------
# Shape and indexing: route each output element back to where it was read.

@_vjp("broadcast_in_dim", "ExpandBackward", reads="x.shape")
def broadcast_in_dim(g, out, x, *, shape, dims):
    return (lax.reshape(lax.reduce_sum(g, _broadcast_axes(x.shape, shape, dims)), x.shape),)


def _broadcast_axes(x_shape, shape, dims):
    """The output axes a broadcast created or stretched: the ones its VJP sums over."""
    stretched = [d for axis, d in enumerate(dims) if x_shape[axis] == 1 and shape[d] != 1]
    return tuple(sorted([i for i in range(len(shape)) if i not in dims] + stretched))


@_vjp("reshape", "ViewBackward", reads="x.shape")
def reshape(g, out, x, *, shape):
    return (lax.reshape(g, x.shape),)


@_vjp("transpose", "TransposeBackward", reads="")
def transpose(g, out, x, *, perm):
    return (lax.transpose(g, _inverse(perm)),)


@_vjp("slice", "SliceBackward", reads="out.shape x.shape")
def slice(g, out, x, *, start, stop, step):
    return (lax.pad(g, start, _slice_high(x.shape, out.shape, start, step),
                    tuple(s - 1 for s in step)),)


def _slice_high(shape, out_shape, start, step):
    """Padding after a slice's last element, so padding g restores the input's shape."""
    return tuple(n - (a + (k - 1) * s + 1 if k else a)
                 for n, k, a, s in zip(shape, out_shape, start, step))


@_vjp("pad", "PadBackward", reads="x.shape")
def pad(g, out, x, *, low, high, interior):
    stop = tuple(lo + (n - 1) * (it + 1) + 1 if n else lo
                 for n, lo, it in zip(x.shape, low, interior))
    return (lax.slice(g, low, stop, tuple(it + 1 for it in interior)),)


@_vjp("concatenate", "CatBackward", reads="xs.shape")
def concatenate(g, out, *xs, axis):
    axis %= len(g.shape)
    full, ends = tuple(g.shape), list(accumulate(x.shape[axis] for x in xs))
    return tuple(lax.slice(g, (0,) * axis + (a,) + (0,) * (len(full) - axis - 1),
                           full[:axis] + (b,) + full[axis + 1:])
                 for a, b in zip([0] + ends[:-1], ends))


@_vjp("take", "IndexSelectBackward", reads="x.shape idx")
def take(g, out, x, idx, *, axis):
    return lax.scatter_add(idx, g, axis % len(x.shape), x.shape), None


@_vjp("take_along_axis", "GatherBackward", reads="x.shape idx")
def take_along_axis(g, out, x, idx, *, axis):
    return lax.scatter_add_along_axis(idx, g, axis % len(x.shape), x.shape), None


@_vjp("scatter_add", "ScatterAddBackward", reads="idx")
def scatter_add(g, out, idx, updates, *, axis, shape):
    return None, lax.take(g, idx, axis)


@_vjp("scatter_add_along_axis", "ScatterAddBackward", reads="idx")
def scatter_add_along_axis(g, out, idx, updates, *, axis, shape):
    return None, lax.take_along_axis(g, idx, axis)


# ---------------------------------------------------------------------------------------------
# Reductions and scans: broadcast g back over the reduced axes, times a local factor.

@_vjp("reduce_sum", "SumBackward", reads="x.shape")
def reduce_sum(g, out, x, *, axes):
    return (_expand(g, x.shape, axes),)


def _extreme_grad(g, out, x, axes):
    """Every element equal to the max (min) gets an equal share of g: ties split evenly. A nan
    in the slice is its max: the nans share g."""
    hit = lax.convert(lax.or_(lax.eq(x, _expand(out, x.shape, axes)), lax.ne(x, x)), x.dtype)
    return hit * _expand(g / lax.reduce_sum(hit, axes), x.shape, axes)


@_vjp("reduce_max", "MaxBackward", reads="out x")
def reduce_max(g, out, x, *, axes):
    return (_extreme_grad(g, out, x, axes),)


@_vjp("reduce_min", "MinBackward", reads="out x")
def reduce_min(g, out, x, *, axes):
    return (_extreme_grad(g, out, x, axes),)


def _prod_grad(g, out, x, axes):
    """out / x without dividing by zero: one zero -> product of the others there; several -> 0."""
    zero = lax.eq(x, 0)
    safe = lax.select(zero, 1.0, x)
    count = _expand(lax.reduce_sum(lax.convert(zero, x.dtype), axes), x.shape, axes)
    others = _expand(lax.reduce_prod(safe, axes), x.shape, axes)
    local = lax.select(zero, lax.select(lax.eq(count, 1), others, 0.0),
                       _expand(out, x.shape, axes) / safe)  # out == 0 if the slice has a zero
    return local * _expand(g, x.shape, axes)


@_vjp("reduce_prod", "ProdBackward", reads="out x")
def reduce_prod(g, out, x, *, axes):
    return (_prod_grad(g, out, x, axes),)


@_vjp("cumsum", "CumsumBackward", reads="")
def cumsum(g, out, x, *, axis, reverse=False):
    return (lax.cumsum(g, axis, reverse=not reverse),)


# ---------------------------------------------------------------------------------------------
# Linear algebra.

def _matmul_vjp(g, a, b):
    """g @ b^T and a^T @ g, with 1-D operands promoted to a row (a) or a column (b) and back.

    Batch dimensions that were broadcast come back in the broadcast shape; the driver sums them.
    """
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    a2 = lax.reshape(a, (1,) + tuple(a.shape)) if a_vec else a
    b2 = lax.reshape(b, tuple(b.shape) + (1,)) if b_vec else b
    batch = tuple(g.shape)[:len(g.shape) - (not a_vec) - (not b_vec)]
    g2 = lax.reshape(g, batch + (a2.shape[-2], b2.shape[-1]))
    ga, gb = lax.matmul(g2, _mT(b2)), lax.matmul(_mT(a2), g2)
    if a_vec:
        ga = lax.reshape(ga, batch + tuple(a.shape))
    if b_vec:
        gb = lax.reshape(gb, batch + tuple(b.shape))
    return ga, gb


@_vjp("matmul", "MatmulBackward", reads="a b")
def matmul(g, out, a, b):
    return _matmul_vjp(g, a, b)


# ---------------------------------------------------------------------------------------------
# Composites: single ops with their own stable, small-state VJP.

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
# Custom rules: the user's own VJP (fusegrad.custom_vjp).

@_vjp("custom_vjp_call", "CustomVjpBackward", reads="xs")
def custom_vjp_call(g, out, *xs, fun, n_in, n_res, call):
    """The user's bwd, called on the residual operands and g (unflattened into their trees),
    its result checked against the inputs: cotangents for the n_in primal inputs, None for the
    residuals and outputs, so no gradient goes through fwd's own ops to the output. The eager
    node saves only the residuals (fusegrad/custom.py records it)."""
    return call.vjp(g, xs)
