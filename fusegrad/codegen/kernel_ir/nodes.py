"""The kernel IR's nodes: what a compiled function does, before any text exists.

A program is a list of groups, each a list of statements run in order by one function:

    Loop(var, extent, body)     for var in range(extent): body   (var an i64 register)
    Load(out, buf, index)       out = buf[index]
    Store(buf, index, value)    buf[index] = value
    Alu(out, op, args)          out = op(args), a scalar instruction of out's dtype
    Raise(cond, error, value)   stop the call with error number `error` if cond holds
    Gemm(dtype, m, n, k, a, b, c)   c = a @ b (row-major, contiguous), NumPy's own ?gemm
    Call(out, fn, args)         out = fn(args), a scalar Function of the program
    Note(text)                  the IR equations and the user's file:lines a group computes
    Host(op, inputs, outputs)   a step run in Python between compiled parts (host.py)
    If(cond, then, orelse)      if cond: then else: orelse        (cond a bool register)
    While(test, cond, body)     while True: test; if not cond: break; body
    Get(out, var), Set(var, value)   read and write a scalar variable a loop carries (an
                                accumulator, rewrite.py's), where registers are SSA

A `Buffer` is where an array lives: slot `slot` of the table of arrays the entry takes, `byte`
bytes in, holding `dtype` elements. An `Index` is affine: offset + sum(reg * stride) over i64
registers (loop counters, or indices a gather loaded: the one non-affine part, checked against
its bounds once per index array by a `Raise` loop before use). Registers are SSA: `Reg` names
are unique within a group, and a `Const` is a literal of a dtype. Scalar ops (`Alu.op`) are a
small fixed set (builder.py lists them); the renderers are tables over it.

Every Load, Store, Alu, Raise, Gemm and Call built for an IR op carries that op's equation
and the user's file:line in `note` (the builder's context when it was made; "" for
statements no op asked for); the renderers write it as a comment above each run of
statements with one note, and a group's `Note` lists its ops, for those no statement
carries (a constant folded into its users).

A `Host` is a group of its own and splits the entry: the runner calls the compiled parts
before it, then the step, then the parts after, all on the same table of arrays. The step
reads each input (Buffer, shape) as a NumPy view of that buffer (a C-contiguous array of the
buffer's dtype and that shape, starting `byte` bytes into slot `slot`), calls op's registry
implementation on them (for scan, while_loop and cond: the loop or branch run in Python
around its nested Functions, each compiled on its own: host.control), converts
each result to its output's dtype as the interpreter does (`astype`, unsafe casting; a 0-d
result is one element) and writes it into the output's buffer. Its inputs and outputs never
overlap (the plan gives a group's outputs ranges its operands do not use). An IndexError it
raises gets the op's file:line, as the interpreter's does. A renderer never sees a Host.

`If` and `While` are control flow inside a group (control.py builds cond and while_loop with
them): their bodies are lists of statements like a Loop's. No register crosses from one run
of a body to the next, nor out of a body: values that live on are in buffers, as with Loop.
`While.test` runs first on every trip, defining `cond` (bool); the body runs while it holds,
and registers the test defines may be read by the body of the same trip.
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
    parallel: bool = False     # iterations write apart: any split of the range, same bits


@dataclass(frozen=True)
class Load:
    out: Reg
    buf: Buffer
    index: Index
    note: str = field(default="", compare=False)    # its op's equation and file:line


@dataclass(frozen=True)
class Store:
    buf: Buffer
    index: Index
    value: object               # Reg or Const
    note: str = field(default="", compare=False)    # its op's equation and file:line


@dataclass(frozen=True)
class Alu:
    out: Reg
    op: str
    args: tuple
    note: str = field(default="", compare=False)    # its op's equation and file:line


@dataclass(frozen=True)
class Raise:
    cond: Reg
    error: int
    value: object               # an i64 the message quotes (the bad index)
    note: str = field(default="", compare=False)    # its op's equation and file:line


@dataclass(frozen=True)
class Gemm:
    dtype: str
    m: int
    n: int
    k: int
    a: tuple                    # (Buffer, Index) of the first element
    b: tuple
    c: tuple
    note: str = field(default="", compare=False)    # its op's equation and file:line


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
    hot: list = field(default_factory=list)     # per group: compiled at O2 (build.hot)
    functions: dict = field(default_factory=dict)   # name -> Function, what Calls call


@dataclass(frozen=True)
class Var:
    """A scalar variable of a group: registers are SSA, a Var is written again in loops."""
    name: str
    dtype: str


@dataclass(frozen=True)
class Get:
    out: Reg
    var: Var


@dataclass(frozen=True)
class Set:
    var: Var
    value: object               # Reg or Const


def walk(stmts):
    """Every statement, the bodies of loops and branches included, in order."""
    for s in stmts:
        yield s
        for body in bodies(s):
            yield from walk(body)


def bodies(s) -> tuple:
    """The statement lists a statement holds."""
    if isinstance(s, Loop):
        return (s.body,)
    if isinstance(s, If):
        return (s.then, s.orelse)
    if isinstance(s, While):
        return (s.test, s.body)
    return ()


@dataclass(frozen=True, eq=False)
class Host:
    op: object                  # the IR op (ir.values.Op) whose implementation runs
    inputs: tuple               # (Buffer, shape) per operand, in op.inputs' order
    outputs: tuple              # (Buffer, shape) per result, in op.outputs' order


@dataclass
class If:
    cond: Reg                   # bool
    then: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


@dataclass
class While:
    test: list                  # statements run first on every trip, defining cond
    cond: Reg                   # bool: run body (and test again) while it holds
    body: list = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    """out = fn(*args): a scalar Function of the program, one primitive's builder rule defined
    once and called from the groups compiled at level 0 (build.py), where inlining its
    statements at every use would cost more to compile than the call costs to run."""
    out: Reg
    fn: str
    args: tuple
    note: str = field(default="", compare=False)    # its op's equation and file:line


@dataclass(frozen=True)
class Function:
    """A scalar function: its parameter registers, its statements (Alus only), its result."""
    params: tuple
    body: tuple
    result: object              # Reg or Const
