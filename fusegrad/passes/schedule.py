"""The schedule fusion produces and codegen consumes: loop kernels and steps in execution order.

A Kernel is one loop nest over a domain (a shape) with the ops it computes; a Step is one op run
outside loop kernels (a BLAS call, a view, a scan, or the interpreter). A Fusion holds them in
order, with how each value is held: a param, a constant, an inline index map or a node's output
(PARAM, CONST, INLINE, NODE). The classification here (which ops loops compute, which are views)
is shared by the fuser (fusion.py), the sinking step (sinking.py), the memory plan (memory.py)
and codegen; none of them imports another to get it.
"""

from __future__ import annotations

from ..ir.core import Function, Op, Value
from ..ir.primitives import ELEMENTWISE, names

# Queries on the registry's categories. A loop computes an index map (a shape primitive, or a
# gather) at each point of its domain; scatters and reductions accumulate in loops; scans and
# everything else (`host` primitives: their NumPy implementation) are steps between kernels.
REDUCERS = names("reduction")
SCATTERS = frozenset(("scatter_add", "scatter_add_along_axis"))
INDEX_MAPS = names("shape", "index") - SCATTERS
NULLARY = names("nullary") - {"constant"}
SCANS = names("scan")

PARAM, CONST, INLINE, NODE = "param", "const", "inline", "node"
MAX_KERNEL_OPS = 256        # Numba's compile time grows faster than linearly with a function
# A float matmul of 2-D operands summing at most this many terms is a kernel member, not a
# BLAS call: SMALL_DOT_K fused multiply-adds per element in a loop that vectorizes over the
# output's columns (codegen/kernel_ir/build.py). ?gemm spends more on packing and on waking its
# threads than on such a product (an MLP's dH = dl @ W2.T with 10 classes: 115-365 us through
# OpenBLAS on 2 cores, against 70-150 us for the loop alone), and fused into its consumer the
# product never goes through memory.
SMALL_DOT_K = 12


class Kernel:
    """One loop nest over `domain`; `split` outer loops are shared by the passes over a row."""

    def __init__(self, id: int, domain: tuple, level: int):
        self.id, self.domain, self.level = id, tuple(domain), level
        self.ops: list[Op] = []
        self.split: int | None = None
        self.consumed: set[Op] = set()      # reductions whose results members read
        self.parent = None                  # set when merged into another kernel

    @property
    def loops(self) -> tuple[int, ...]:
        """The axes that get a loop (unit axes are indexed by 0)."""
        return tuple(a for a, n in enumerate(self.domain) if n != 1)

    def __repr__(self):
        return f"<Kernel {self.id} {list(self.domain)} level {self.level}: {len(self.ops)} ops>"


class Step:
    """One op run outside loop kernels: "blas", "view", "scan" or "host" (the interpreter)."""

    def __init__(self, id: int, op: Op, kind: str, level: int):
        self.id, self.op, self.kind, self.level = id, op, kind, level
        self.parent = None

    def __repr__(self):
        return f"<Step {self.id} {self.kind} {self.op.prim} level {self.level}>"


def unit_only(src: tuple, dst: tuple) -> bool:
    """Whether a reshape from src to dst only inserts or removes axes of size 1."""
    return [n for n in src if n != 1] == [n for n in dst if n != 1]


def is_view(op: Op, for_matmul=False) -> bool:
    """Whether op's result can share its operand's buffer: a reshape, a transpose that only
    moves unit axes (a reshape in disguise), or a 2-D transpose handed to BLAS."""
    if op.prim == "reshape":
        return True
    if op.prim != "transpose":
        return False
    shape = op.inputs[0].shape
    order = [p for p in op.params["perm"] if shape[p] != 1]
    return order == sorted(order) or (for_matmul and len(shape) == 2)


def domain_of(op: Op) -> tuple:
    if op.prim in REDUCERS or op.prim == "scatter_add_along_axis":
        return op.inputs[0].shape if op.prim in REDUCERS else op.inputs[1].shape
    if op.prim == "scatter_add":
        return op.inputs[1].shape
    return op.out.shape


def small_dot(op: Op) -> bool:
    """Whether op is a matmul that loop kernels compute (see SMALL_DOT_K)."""
    if op.prim != "matmul" or op.out.dtype not in ("f32", "f64"):
        return False
    a, b = op.inputs
    return a.type.ndim == b.type.ndim == 2 and 1 <= a.shape[1] <= SMALL_DOT_K


def step_kind(op: Op) -> str | None:
    """The step an op becomes, or None for ops that loops compute."""
    if small_dot(op):
        return None
    if op.prim == "matmul":
        return "blas" if op.out.dtype in ("f32", "f64") else "host"
    if op.prim in SCANS:
        return "scan"
    if op.prim in ELEMENTWISE or op.prim in REDUCERS or op.prim in SCATTERS \
            or op.prim in INDEX_MAPS or op.prim in NULLARY or op.prim == "constant":
        return None
    return "host"


class Fusion:
    """The result: nodes in execution order, plus what codegen needs to know about values."""

    def __init__(self, fn: Function, nodes, kind, node_of, role, mat, producer):
        self.fn, self.nodes, self.kind, self.node_of = fn, nodes, kind, node_of
        self.role, self.mat, self.producer = role, mat, producer
        self.kernels = [n for n in nodes if isinstance(n, Kernel)]
        self.outputs = _outputs(self)

    @property
    def clusters(self) -> list[list[Op]]:
        """The ops of each kernel, for Function.to_dot(clusters=...)."""
        return [list(k.ops) for k in self.kernels]

    def buffer_of(self, v: Value):
        """The node whose output buffer holds v in memory (None for params and constants)."""
        if self.kind[v] == NODE:
            return self.node_of[v]
        return self.mat.get(v)

    def reads(self, node) -> list[Value]:
        """Values in memory that node reads, in first-use order (inline maps looked through)."""
        seen: dict[Value, None] = {}
        ops = node.ops if isinstance(node, Kernel) else [node.op]
        members = {op.out for op in ops} if isinstance(node, Kernel) else set()
        for op in ops:
            for v in op.inputs:
                self._leaves(v, members, seen, node)
        return list(seen)

    def _leaves(self, v, members, seen, node):
        if v in members or v in seen:
            return
        if self.kind[v] == INLINE and (isinstance(node, Kernel) or v not in self.mat):
            for u in self.producer[v].inputs:
                self._leaves(u, members, seen, node)
        else:
            seen[v] = None


def _outputs(fusion: Fusion) -> dict:
    """For each node, the values it defines that other nodes or the caller read."""
    needed: set[Value] = set(fusion.fn.results)
    for node in fusion.nodes:
        needed.update(fusion.reads(node))
    out = {}
    for node in fusion.nodes:
        if isinstance(node, Kernel):
            out[node] = [op.out for op in node.ops if op.out in needed]
        else:
            out[node] = list(node.op.outputs)
    return out


def check_schedule(fusion: Fusion) -> None:
    """Every buffer a node reads is written by an earlier node (or is a param or constant).

    A node that ran before the writer of a buffer it reads would read whatever a pooled buffer
    held last: a wrong number on some calls, right on others. Such a schedule is a fusion bug;
    it fails compilation here instead of reaching a kernel.
    """
    written: set = set()
    for node in fusion.nodes:
        for v in fusion.reads(node):
            writer = fusion.buffer_of(v)
            if writer is not None and writer is not node and v not in written:
                op = fusion.producer.get(v)
                where = f" ({op.loc})" if op is not None and op.loc else ""
                raise AssertionError(f"fusion: {node!r} reads {v!r}{where} before "
                                     f"{writer!r} writes it; please report this program")
        written.update(fusion.outputs[node])
