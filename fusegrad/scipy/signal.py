"""scipy.signal's convolutions on tensors and tracers: convolve, correlate, fftconvolve,
convolve2d and correlate2d, in modes "full", "valid" and "same", in any number of dimensions.

All are fusegrad.numpy.special's direct convolution (a gather of windows and one matmul, so the
gradient needs no rule of its own); SciPy's `method` ("auto", "direct", "fft") changes only the
rounding, so it is accepted and ignored. SciPy's shape conventions: "same" has in1's shape,
centred on the full result; "valid" needs one operand at least as large as the other in every
dimension. The 2-D functions support the zero boundary only (boundary="fill", fillvalue=0);
fftconvolve supports axes=None only. Complex inputs are not supported.
"""

from __future__ import annotations

from .. import numpy as fnp
from ..numpy.constructors import asarray
from ..numpy.special import direct_convolution

_METHODS = ("auto", "direct", "fft")


def _output(name, in1, in2, mode):
    """(output shape, start in the full result) per dimension, as SciPy's: "same" is centred
    with the extra element after, except correlate2d's (before)."""
    a, v = fnp.shape(in1), fnp.shape(in2)
    if len(a) != len(v):
        raise ValueError(f"{name}: in1 and in2 should have the same dimensionality")
    if 0 in a or 0 in v:
        raise ValueError(f"{name}: empty inputs are not supported")
    if mode == "full":
        return tuple(n + m - 1 for n, m in zip(a, v)), (0,) * len(a)
    if mode == "same":
        return a, tuple((m - (name != "scipy.signal.correlate2d")) // 2 for m in v)
    if mode == "valid":
        if not (all(n >= m for n, m in zip(a, v)) or all(m >= n for n, m in zip(a, v))):
            raise ValueError(f"{name}: for 'valid' mode, one must be at least as large as the "
                             f"other in every dimension")
        return tuple(abs(n - m) + 1 for n, m in zip(a, v)), tuple(min(n, m) - 1
                                                                  for n, m in zip(a, v))
    raise ValueError(f"{name}: acceptable mode flags are 'valid', 'same', or 'full', got "
                     f"{mode!r}")


def _convolution(name, in1, in2, mode, correlate):
    in1, in2 = asarray(in1), asarray(in2)
    shape, start = _output(name, in1, in2, mode)
    if not shape:
        return fnp.multiply(in1, in2)
    return direct_convolution(in1, in2, shape, start, correlate=correlate)


def _method(name, method):
    if method not in _METHODS:
        raise ValueError(f"{name}: acceptable method flags are 'auto', 'direct', or 'fft', got "
                         f"{method!r}")


def convolve(in1, in2, mode="full", method="auto"):
    """The N-dimensional convolution of in1 and in2, computed directly."""
    _method("scipy.signal.convolve", method)
    return _convolution("scipy.signal.convolve", in1, in2, mode, correlate=False)


def correlate(in1, in2, mode="full", method="auto"):
    """The N-dimensional cross-correlation of in1 and in2, computed directly."""
    _method("scipy.signal.correlate", method)
    return _convolution("scipy.signal.correlate", in1, in2, mode, correlate=True)


def fftconvolve(in1, in2, mode="full", axes=None):
    """convolve, computed directly (axes=None only)."""
    if axes is not None:
        raise NotImplementedError("scipy.signal.fftconvolve: fusegrad supports axes=None only")
    return _convolution("scipy.signal.fftconvolve", in1, in2, mode, correlate=False)


def _two_d(name, in1, in2, mode, boundary, fillvalue, correlate):
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name}: fusegrad supports boundary='fill' with fillvalue=0 "
                                  f"only, got boundary={boundary!r}, fillvalue={fillvalue!r}")
    if fnp.ndim(in1) != 2 or fnp.ndim(in2) != 2:
        raise ValueError(f"{name}: inputs must both be 2-D arrays")
    return _convolution(name, in1, in2, mode, correlate)


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """The 2-D convolution with a zero boundary (boundary="fill", fillvalue=0 only)."""
    return _two_d("scipy.signal.convolve2d", in1, in2, mode, boundary, fillvalue, False)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """The 2-D cross-correlation with a zero boundary (boundary="fill", fillvalue=0 only)."""
    return _two_d("scipy.signal.correlate2d", in1, in2, mode, boundary, fillvalue, True)


HANDLED = {f"scipy.signal.{fn.__name__}": fn
           for fn in (convolve, correlate, fftconvolve, convolve2d, correlate2d)}

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "fftconvolve"]
