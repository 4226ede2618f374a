"""Where the entry's values live, and how generated code reaches them.

A kernel, scan or matrix product writes each output into a buffer that the runner keeps in
a pool between calls (or into a dead value's buffer: passes/memory.py). Numba compiles a call
that passes arrays 2-3x slower than one passing integers, and an unrolled program's entry
makes hundreds of calls (an LSTM over 20 steps: 330, on 250 buffers), or one kernel takes
hundreds of buffers (a long chain's residuals). So generated functions get such buffers by
address: the runner keeps the addresses in an int64 array `A`, one slot per use, the entry
passes a kernel the address of its block of slots (`k(d0, at + 96)`), and the kernel makes
its arrays with numba.carray. The entry makes an array itself only for what needs one (a
matrix product called in place, an index check, a Numba parallel kernel), and takes the
runner's array where a view of it may be returned (a reshape). Each thread has its own pool
and `A`, so concurrent calls never share a buffer.

numba.carray itself costs ~20 ms of compile time a line, so a kernel's fresh outputs of one
dtype and shape, at least STACK_MIN of them, are rows of one buffer (a `Stack`), and a kernel
that uses at least STACK_MIN rows of a stack makes one array of the rows it uses (`Rows`).
"""

from __future__ import annotations

from ..ir.types import TensorType
from ..passes.schedule import Kernel
from .loop_ir import Comment, Let, order_symbols
from .templates import POISON_FILL, new_buffer, np_name, poison_on

STACK_MIN = 4  # a kernel's fresh outputs of one dtype and shape, at least this many, are stacked


class Stack:
    """Same-shaped outputs of one kernel kept as the rows of one pooled buffer."""

    def __init__(self, values):
        self.rows, self.dtype, self.row_shape = len(values), values[0].dtype, values[0].shape
        self.shape = (self.rows, *self.row_shape)
        self.type = TensorType(self.dtype, self.shape)


class Rows:
    """Rows lo .. lo + count - 1 of a stack: what one kernel makes an array of."""

    def __init__(self, stack: Stack, lo: int, count: int):
        self.stack, self.lo, self.rows = stack, lo, count
        self.dtype, self.row_shape = stack.dtype, stack.row_shape


class Buffers:
    """The buffer placement and the runner's pool, for ModuleSource (which mixes it in and
    owns the state: names, syms, fusion, memory, pooled, buffer_root, row, slots, ...)."""

    def alloc(self, v) -> Comment:
        """The entry's comment for v's buffer: a fresh one from the pool, or a dead value's."""
        reuse = self.memory.get(v)
        if reuse in self.row and v in self.results:
            reuse = None    # a result the caller holds would keep the whole stack in use
        if reuse is not None:
            self.buffer_root[v] = self.buffer_root[reuse]
            if reuse in self.row:
                self.row[v] = self.row[reuse]
            return Comment(f"{self.names[v]} reuses the buffer of {self.describe.names[reuse]}")
        self.pooled.append(v)
        self.buffer_root[v] = v
        return Comment(f"{self.names[v]}: a pooled {self.describe.type(v)} buffer")

    def stacks(self, k: Kernel) -> list:
        """The groups of kernel k's outputs to stack (Stack): fresh buffers of one dtype
        and shape, at least STACK_MIN, that it stores element by element (computed values,
        not reductions into arrays or rows streamed out), and that are not results."""
        streamed = self.streamed.get(k, frozenset())
        groups: dict = {}
        for v in self.fusion.outputs[k]:
            if v.shape != () and self.memory.get(v) is None and v not in self.results and \
                    v not in streamed and self.fusion.role[self.fusion.producer[v]] in (
                        "full", "row"):
                groups.setdefault((v.dtype, v.shape), []).append(v)
        return [g for g in groups.values() if len(g) >= STACK_MIN]

    def alloc_stack(self, values) -> Comment:
        """The entry's comment for a fresh stack of these values."""
        stack = Stack(values)
        self.names[stack] = f"s{sum(isinstance(p, Stack) for p in self.pooled)}"
        self.pooled.append(stack)
        self.buffer_root[stack] = stack
        for i, v in enumerate(values):
            self.buffer_root[v], self.row[v] = stack, i
        self.stacked.update(values)
        return Comment(f"{self.names[stack]}: a pooled buffer, {self.buffer_type(stack)}: the "
                       f"rows {', '.join(self.names[v] for v in values)}")

    def stack_rows(self, k: Kernel) -> dict:
        """The values kernel k reaches as rows of a stack, -> (Rows, row): those of the
        stacks it uses at least STACK_MIN rows of, as rows of the part of the stack it uses.
        A few rows are buffers of their own to it, as is a later value that takes over a row,
        so that the kernels of an unrolled loop, each using other rows, stay one function."""
        used: dict = {}
        for v in (*self.fusion.reads(k), *self.fusion.outputs[k]):
            if v in self.stacked:
                used.setdefault(self.buffer_root[v], []).append(v)
        rows = {}
        for stack, values in used.items():
            if len(values) >= STACK_MIN:
                lo = min(self.row[v] for v in values)
                part = Rows(stack, lo, max(self.row[v] for v in values) - lo + 1)
                rows.update((v, (part, self.row[v] - lo)) for v in values)
        return rows

    def by_address(self, v) -> bool:
        """Whether v lives in a pooled buffer: kernels reach it by address."""
        return v.shape != () and v in self.buffer_root

    def block(self, values) -> str:
        """The entry's expression for the address of a block of slots of A holding the
        addresses of values' buffers."""
        self.slots += values
        return f"at + {8 * (len(self.slots) - len(values))}"

    def array(self, v, owned=False) -> str:
        """The entry's array for v. If v lives in a pooled buffer, it is made from the
        address (for a matrix product, an index check, a parallel kernel), or, when it must
        own its memory (a view of it may be returned to the runner), is the runner's
        array of the buffer, passed in as `<name>_buf`."""
        if owned and self.by_address(v):
            root = self.buffer_root[v]
            self.seg_owned[root] = None
            return f"{self.names[root]}_buf" + (f"[{self.row[v]}]" if v in self.row else "")
        if self.by_address(v) and v not in self.seg_arrays:
            self.seg_arrays.add(v)
            self.slots.append(v)
            self.pending.append(Let(self.names[v], self.carray(f"A[{len(self.slots) - 1}]", v)))
        return self.names[v]

    def carray(self, address: str, v) -> str:
        """The expression making the array of v's type (or a stack's) at `address`."""
        return f"numba.carray(address({address}), {self.buffer_shape(v)}, " \
            f"np.{np_name(v.dtype)})"

    def buffer_shape(self, root) -> str:
        """The shape of a pooled buffer: a value's, or a stack's (its row count is code)."""
        if isinstance(root, (Stack, Rows)):
            return "(" + ", ".join([str(root.rows)] + [self.syms.dim(n)
                                                       for n in root.row_shape]) + ")"
        return self.shape(root.shape)

    def buffer_type(self, root) -> str:
        if isinstance(root, Stack):
            row = ",".join(self.syms.dim(n) for n in root.row_shape)
            return f"{root.rows} rows of {root.dtype}[{row}]"
        return self.describe.type(root)

    def label(self, v) -> str:
        """What a comment calls a value, or a kernel's rows of a stack."""
        if isinstance(v, Rows):
            return f"{self.names[v.stack]}[{v.lo}:{v.lo + v.rows}]"
        return self.names[v]

    def pool_setup(self) -> list:
        """The sizes the runner's buffers need, and where each thread keeps its pool."""
        if not self.pooled:
            return []
        dims = order_symbols(self.syms.dim(n) for v in self.pooled
                             for n in (v.row_shape if isinstance(v, Stack) else v.shape))
        return [f"{d} = int(D[{d[1:]}])" for d in dims] + [
            "local = threading.local()  # per thread: A holds addresses of its own buffers"]

    def take_buffers(self) -> list:
        """The buffers of this call: each thread has its pool, one slot per fresh buffer, kept
        from call to call, and A, the addresses the compiled code reads (self.slots), set
        when a buffer is made. The buffer of the last call is reused only when the pool holds
        the one reference left (getrefcount sees the pool, the local and its argument): a
        result the caller still holds, or a view of it (through .base), keeps its buffer out
        of reach."""
        if not self.pooled:
            return []
        lines = ["try:",
                 "    pool, A = local.pool, local.A",
                 "except AttributeError:",
                 f"    pool, A = local.pool, local.A = [None] * {len(self.pooled)}, "
                 f"np.zeros({len(self.slots)}, np.int64)"]
        slots: dict = {}
        for i, v in enumerate(self.slots):
            root, row = (v.stack, v.lo) if isinstance(v, Rows) else \
                (self.buffer_root[v], self.row.get(v))
            slots.setdefault(root, {}).setdefault(row, []).append(i)
        for i, v in enumerate(self.pooled):
            n = self.names[v]
            lines += [f"{n} = pool[{i}]",
                      f"if {n} is None or getrefcount({n}) > 3:",
                      f"    {n} = pool[{i}] = "
                      f"{new_buffer(self.buffer_shape(v), np_name(v.dtype))}"]
            for row, at in slots.get(v, {}).items():
                lines.append(f"    A[{at[0] if len(at) == 1 else at}] = "
                             f"{n}{'' if row is None else f'[{row}]'}.ctypes.data")
            if poison_on():             # a reused buffer holds the last call's values
                lines += ["else:", f"    {n}.fill({POISON_FILL[np_name(v.dtype)]})"]
        return lines
