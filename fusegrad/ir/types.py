"""Types of IR values: a dtype name and a static shape, printed as `f64[2,3]`.

Only four dtypes exist: f32, f64, i64 and bool. Every value has a fully static shape; a new
shape is a new trace. Types are immutable and hashable so they can key caches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NP_DTYPES = {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
             "i64": np.dtype(np.int64), "bool": np.dtype(np.bool_)}
FLOAT_DTYPES = ("f32", "f64")


def dtype_name(dtype) -> str:
    """The IR name of a NumPy dtype (int32 and friends widen to i64); raises for the rest."""
    dt = np.dtype(dtype)
    if dt.kind == "f" and dt.itemsize <= 4:
        return "f32"
    if dt.kind == "f" and dt.itemsize == 8:
        return "f64"
    if dt.kind in "iu":
        return "i64"
    if dt.kind == "b":
        return "bool"
    raise TypeError(f"fusegrad supports float32, float64, int64 and bool, not {dt}; "
                    f"convert the array with .astype(np.float64) first")


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self):
        if type(self.shape) is not tuple:
            object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if self.dtype not in NP_DTYPES:
            raise TypeError(f"unknown IR dtype {self.dtype!r}; expected one of {list(NP_DTYPES)}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)     # np.prod takes 40 us a call: plans ask often

    @property
    def np_dtype(self) -> np.dtype:
        return NP_DTYPES[self.dtype]

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def with_shape(self, shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @staticmethod
    def of(array) -> TensorType:
        array = np.asarray(array)
        return TensorType(dtype_name(array.dtype), tuple(array.shape))
