"""The kernel IR's nodes: what a compiled function does, before any text exists.

A program is a list of groups, each a list of statements run in order by one function:

    Loop(var, extent, body)     for var in range(extent): body   (var an i64 register)
    Load(out, buf, index)       out = buf[index]
    Store(buf, index, value)    buf[index] = value
    Alu(out, op, args)          out = op(args), a scalar instruction of out's dtype
    Raise(cond, error, value)   stop the call with error number `error` if cond holds
    Gemm(dtype, m, n, k, a, b, c)   c = a @ b (row-major, contiguous), NumPy's own ?gemm
    Note(text)                  the IR equation and the user's file:line a group computes

A `Buffer` is where an array lives: slot `slot` of the table of arrays the entry takes, `byte`
bytes in, holding `dtype` elements. An `Index` is affine: offset + sum(reg * stride) over i64
registers (loop counters, or indices a gather loaded: the one non-affine part, checked against
its bounds once per index array by a `Raise` loop before use). Registers are SSA: `Reg` names
are unique within a group, and a `Const` is a literal of a dtype. Scalar ops (`Alu.op`) are a
small fixed set (builder.py lists them); the renderers are tables over it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPES = ("f32", "f64", "i64", "bool")
ITEMSIZE = {"f32": 4, "f64": 8, "i64": 8, "bool": 1}


@dataclass(frozen=True)
class Reg:
    name: str
    dtype: str


@dataclass(frozen=True)
class Const:
    value: object
    dtype: str


@dataclass(frozen=True)
class Buffer:
    slot: int
    byte: int
    dtype: str


@dataclass(frozen=True)
class Index:
    offset: int = 0
    terms: tuple = ()          # (Reg of i64, stride in elements)

    def plus(self, offset: int = 0, terms: tuple = ()) -> "Index":
        return Index(self.offset + offset, self.terms + tuple(terms))


@dataclass
class Loop:
    var: Reg
    extent: int
    body: list = field(default_factory=list)
    parallel: bool = False      # iterations independent: threads may split it (prange)


@dataclass(frozen=True)
class Load:
    out: Reg
    buf: Buffer
    index: Index


@dataclass(frozen=True)
class Store:
    buf: Buffer
    index: Index
    value: object               # Reg or Const


@dataclass(frozen=True)
class Alu:
    out: Reg
    op: str
    args: tuple


@dataclass(frozen=True)
class Raise:
    cond: Reg
    error: int
    value: object               # an i64 the message quotes (the bad index)


@dataclass(frozen=True)
class Gemm:
    dtype: str
    m: int
    n: int
    k: int
    a: tuple                    # (Buffer, Index) of the first element
    b: tuple
    c: tuple


@dataclass(frozen=True)
class Note:
    text: str


@dataclass
class Program:
    """A function's kernel IR: its groups, the table of arrays, the errors a Raise names."""
    name: str
    groups: list                # lists of statements
    notes: list                 # a group's Note text (its op and line)
    errors: list                # error number - 1 -> (exception class, message)
    work: list                  # about how many elements each group visits


def walk(stmts):
    """Every statement, loops' bodies included, in order."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)
