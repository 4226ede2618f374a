"""The generated module: one function per distinct kernel, an njit entry that runs kernels,
views and BLAS calls in order on the buffers the runner passes (by address: buffers.py), and
`make_run`, the plain-Python runner the Executable calls with the argument leaves.

Numba's cost is per function and per line, so an unrolled loop's repeated kernels share one
function (kernel), and so do the repeated matrix products of one kind (matmul); docs/design.md
("Compile time") has the measurements.

The text depends on ranks, dtypes and the broadcasting pattern, never on sizes: every size is a
symbol `dN` read from the int64 array D, and `full` constants that equal a size or its
reciprocal (a mean's 1/N) are symbols `cN` read from the float64 array C. So a new batch size
re-traces but produces the same text and reuses the compiled code. Constant arrays are passed
as arguments too, never printed. Host steps (what loops cannot run) split the entry into
segments that the runner calls in turn around the interpreter's implementation.
"""

from __future__ import annotations

import keyword
import math
import re
from collections import Counter

import numpy as np

from ..ir.printer import format_literal
from ..ir.printer import value_names as printed_names
from ..passes.schedule import CONST, INLINE, PARAM, Kernel, Step, is_view
from . import loop_ir, pool
from .buffers import Buffers
from .kernel import KernelSource
from .loop_ir import Accumulate, Call, Function, If, Let, Loop, Return, Store, joined
from .templates import MATH_FUNCS, literal, mathlib_funcs, py_scalar

SIZE_PARAMS = ("shape", "start", "stop", "step", "low", "high", "interior")
RESERVED = {"np", "math", "numba", "prange", "A", "D", "C", "at", "buf", "local", "threading",
            "env", "leaves", "run", "make_run", "r",
            "bmm", "gemm", "ipow", "entry", "pool", "getrefcount", "TASKS", "address",
            "pool_run", "pool_threads", "task_signature", "task", "threads", "lo", "hi", "t", "f",
            "fma", "WHERE", "check_index", "check_indices",
            "scan_loop", "make_loop", "run_loop"}
GENERATED = re.compile(r"(v|d|c|i|j|k|s|mm|seg|host|r|next|ys)\d+(_\w*)?\Z"
                       r"|.*_(out|best|take|buf)\Z|xs_|loop_")


class Symbols:
    """Sizes (dN) and size-derived scalar constants (cN): arguments, not text."""

    def __init__(self, fn):
        sizes = {n for v in _all_values(fn) for n in v.shape if n >= 3}
        self.sizes = sizes
        self.reciprocals = {1.0 / n for n in sizes} | {float(np.float32(1) / np.float32(n))
                                                       for n in sizes}
        self.dims: dict[int, str] = {}
        self.floats: dict[float, str] = {}

    def dim(self, n) -> str:
        n = int(n)
        if n in (0, 1) or n < 0:
            return str(n)
        if n not in self.dims:
            self.dims[n] = f"d{len(self.dims)}"
        return self.dims[n]

    def scalar(self, value, dtype: str) -> str:
        if dtype == "i64" and abs(int(value)) in self.sizes:
            return self.dim(value) if value > 0 else f"(-{self.dim(-value)})"
        if dtype in ("f32", "f64"):
            v = float(value)
            size_like = v in self.reciprocals or (v.is_integer() and abs(v) in self.sizes)
            if not math.isnan(v) and size_like:
                name = self.floats.setdefault(v, f"c{len(self.floats)}")
                return f"np.float32({name})" if dtype == "f32" else name
        return literal(value, dtype)

    @property
    def D(self) -> np.ndarray:
        return np.array(list(self.dims), np.int64)

    @property
    def C(self) -> np.ndarray:
        return np.array(list(self.floats), np.float64)


def _all_values(fn):
    yield from fn.params
    for op in fn.ops:
        yield from op.outputs


def python_names(fn) -> dict:
    """`v12` for `%12`; a parameter keeps its name when that is a safe identifier."""
    out = {}
    for v, name in printed_names(fn).items():
        name = name.lstrip("%")
        if name.isdigit():
            out[v] = f"v{name}"
        elif name.isidentifier() and not keyword.iskeyword(name) and name not in RESERVED \
                and not GENERATED.match(name):
            out[v] = name
        else:
            out[v] = f"p_{re.sub(r'[^0-9A-Za-z_]', '_', name)}"
    return out


class Describer:
    """The comment on each generated line: the IR equation with symbolic sizes, and op.loc."""

    def __init__(self, fn, syms: Symbols):
        self.names, self.syms = printed_names(fn), syms

    def type(self, v) -> str:
        return f"{v.dtype}[{','.join(self.syms.dim(n) for n in v.shape)}]"

    def param(self, op, key, value) -> str:
        if op.prim == "constant":
            return "<argument>"
        if key == "value" and op.prim == "full":
            return self.syms.scalar(value, op.params["dtype"])
        if key in SIZE_PARAMS:
            return f"({joined([self.syms.dim(n) for n in value], True)})"
        return format_literal(value)

    def __call__(self, op) -> str:
        outs = ", ".join(self.names.get(v, "?") for v in op.outputs)
        text = f"{outs} = {op.prim}"
        if op.inputs:
            text += " " + ", ".join(self.names.get(v, "?") for v in op.inputs)
        if op.params:
            text += " {" + ", ".join(f"{k}={self.param(op, k, op.params[k])}"
                                     for k in sorted(op.params)) + "}"
        text += " : " + ", ".join(self.type(v) for v in op.outputs)
        return text + (f"   {op.loc}" if op.loc else "")


PRODUCT_REPEATS = 3  # a kind of matrix product made this often gets a function (matmul)



class _Functions:
    """What kernel_functions makes: the functions, whether one is a pool task (the entry then
    calls the launcher), and what the entry passes (symbol names, and values it names)."""

    def __init__(self, src: KernelSource):
        self.src, self.functions, self.task, self.params = src, [], False, []
        self.block = []             # the values whose buffers' addresses it gets at `at`


class _Canonical(dict):
    """Names for a kernel's values in order of first use: x0, x1, ..."""

    def __missing__(self, v):
        name = self[v] = f"x{len(self)}"
        return name


def _no_comment(op) -> str:
    return ""


class ModuleSource(Buffers):
    """Builds the module text for a Fusion; also the per-signature values its runner needs."""

    def __init__(self, fusion, memory, options, parallel=False):
        self.fusion, self.memory, self.options, self.parallel = fusion, memory, options, parallel
        fn = fusion.fn
        self.fn = fn
        self.syms = Symbols(fn)
        self.names = python_names(fn)
        self.describe = Describer(fn, self.syms)
        self.trees: list[Function] = []  # the module's functions
        self.tasks: list[str] = []     # the pool tasks' cfuncs: their addresses go in TASKS
        self.kernel_count = 0
        self.shared: dict = {}         # a kernel's code, names left out -> (name, task index)
        self.products = 0              # matrix product functions (matmul)
        self.product_kinds = Counter(_product_kind(fusion, node.op) for node in fusion.nodes
                                     if isinstance(node, Step) and node.kind == "blas")
        self.row: dict = {}            # value in a row of a stack (a Stack) -> that row
        self.stacked: set = set()      # the values stacks were made for (not later tenants)
        self.results = set(fn.results)
        self.hosts: list = []          # host step ops, in order
        self.segment_args: dict = {}   # segment name -> (values, uses A, D, C, TASKS)
        self.pooled: list = []         # values whose fresh buffers the runner keeps in its pool
        self.buffer_root: dict = {}    # value in a pooled buffer -> the pooled value owning it
        self.slots: list = []          # A: per slot, the value whose buffer's address it holds
        self.seg_arrays: set = set()   # values in pooled buffers it has made arrays of
        self.seg_owned: dict = {}      # pooled buffers it takes as the runner's arrays
        self.pending: list = []        # entry statements the next one needs first
        self.locations: list = []      # WHERE: the user's lines that index checks name
        self.checked: set = set()      # (index array, size, axis) checked in this segment
        self.consts = [op.out for op in fn.ops
                       if op.prim == "constant" and fusion.kind[op.out] == CONST]
        order = list(fn.params) + self.consts + [v for op in fn.ops for v in op.outputs]
        self.position = {v: i for i, v in reversed(list(enumerate(order)))}
        self.streamed = self.stream_outputs()

    def stream_outputs(self) -> dict:
        """Per kernel, its outputs that only matrix products read (directly or through a
        transpose): a large one is stored with non-temporal stores, so the BLAS threads on
        other cores read it from memory rather than out of this core's cache
        (KernelSource.stream, support.stream_row)."""
        readers: dict = {}
        for node in self.fusion.nodes:
            for v in self.fusion.reads(node):
                readers.setdefault(v, []).append(node)

        def only_blas(v, hops=1) -> bool:
            nodes = readers.get(v, [])
            return bool(nodes) and all(
                isinstance(n, Step) and (n.kind == "blas" or hops and n.op.prim == "transpose"
                                         and only_blas(n.op.out, hops - 1))
                for n in nodes)

        results = set(self.fn.results)
        streamed: dict = {}
        for node in self.fusion.nodes:
            if isinstance(node, Kernel):
                outs = frozenset(v for v in self.fusion.outputs[node] if v not in results and
                                 v.type.ndim >= 2 and only_blas(v))
                if outs:
                    streamed[node] = outs
        return streamed

    @property
    def functions(self) -> list:
        """The texts of the module's functions."""
        return [fn.render() for fn in self.trees]

    # -- kernels -------------------------------------------------------------------------

    def kernel(self, k: Kernel) -> list:
        """The entry's call of kernel k, after its index checks. Its functions are emitted
        only if no earlier kernel has the same code: an unrolled Python loop repeats its
        kernels (the HMM's 299 kernels are 23 functions), and each function costs Numba
        0.1-0.3 s however often it runs. The code is compared with values renamed in order of
        use and without comments, so the function is written once, with the names and IR
        equations of its first kernel."""
        number = self.kernel_count
        self.kernel_count += 1
        key_form = self.kernel_functions(k, "k", _Canonical(), _no_comment)
        key = "\n\n\n".join(f.render() for f in key_form.functions)
        shared = self.shared.get(key)
        if shared is None:
            name = f"k{number}"
            built = self.kernel_functions(k, name, self.names, self.describe)
            self.trees += built.functions
            if built.task:
                self.tasks.append(f"{name}_task")
            shared = self.shared[key] = (name, len(self.tasks) - 1)
        name, task = shared
        args = [p if isinstance(p, str) else self.array(p) for p in key_form.params]
        if key_form.block:
            args.append(self.block(key_form.block))
        notes = [f"kernel {number}, the code of kernel {name[1:]}"] \
            if name != f"k{number}" else []
        notes += [f"at: {', '.join(map(self.label, key_form.block))}"] \
            if key_form.block else []
        if key_form.task:
            name, args = f"{name}_launch", [f"TASKS[{task}]", *args]
        return self.index_checks(key_form.src.index_checks) + [
            Call(name, args, [self.names[v] for v in key_form.src.scalar_outputs],
                 comment="; ".join(notes))]

    def kernel_functions(self, k: Kernel, name: str, names, describe) -> _Functions:
        """The functions of kernel k named `name` (the kernel, its chunk function, its pool
        task and launcher), with values called by `names` and lines commented by
        `describe`, and what the entry passes them."""
        src, body = self.kernel_source(k, name, names, describe, self.stack_rows(k))
        # Numba's parallel loops lose stores into arrays made by carray: those take arrays
        parallel = src.chunk is not None or src.parallel_rows
        if parallel and src.stacks:
            src, body = self.kernel_source(k, name, names, describe, {})
        out = _Functions(src)
        outputs = [v for v in self.fusion.outputs[k] if v.shape != ()]
        arrays = [(names[v], v) for v in src.inputs] + [(f"{names[v]}_out", v) for v in outputs]
        block = [(a, v) for a, v in arrays if not parallel and self.by_address(v)
                 and v not in src.stack_rows]
        block += [(a, stack) for stack, a in src.stacks.items()]
        passed = [(a, v) for a, v in arrays if not self.by_address(v) or parallel]
        body = self.carrays(block) + body
        symbols = loop_ir.symbols(body + (src.chunk[0] if src.chunk else []))
        args = symbols + [a for a, _ in arrays]
        params = symbols + [a for a, _ in passed] + (["at"] if block else [])
        opts = self.options("kernel", reduction=src.has_reduction, parallel=parallel)
        doc = (f'kernel {name[1:]}: {len(k.ops)} ops over {_dom(k, self.syms)}, '
               f'{src.passes} pass{"es" if src.passes > 1 else ""}')
        if src.chunk:
            chunk, call = src.chunk
            call.args += args
            chunk_opts = self.options("kernel", reduction=src.has_reduction)
            out.functions.append(Function(
                _njit(chunk_opts), f"{name}_chunk", ["lo", "hi", *args],
                f"kernel {name[1:]} over elements lo:hi", chunk))
        split = ["lo", "hi"] if src.pool_split else []
        out.functions.append(Function(_njit(opts), name, split + params, doc, body,
                                      cols=src.pool_split == "cols"))
        out.params = symbols + [v for _, v in passed]
        out.block = [v for _, v in block]
        if src.pool_split:
            self.pool_kernel(out, name, symbols, passed)
        return out

    def kernel_source(self, k, name, names, describe, rows):
        src = KernelSource(k, self.fusion, names, self.syms, describe, name,
                           self.parallel, self.streamed.get(k, frozenset()),
                           pool.AVAILABLE and not self.parallel, self.where, rows)
        return src, src.build()

    def carrays(self, block) -> list:
        """The statements making a function's arrays of the buffers whose addresses it gets
        at `at` (block: (name, value) pairs)."""
        made = [Let("buf", f"numba.carray(address(at), {len(block)}, np.int64)")] if block \
            else []
        return made + [Let(a, self.carray(f"buf[{i}]", v)) for i, (a, v) in enumerate(block)]

    def where(self, op) -> str:
        """The code naming op's source line in an error message: an entry of WHERE, a module
        constant (a file name in the code itself could read as a size symbol)."""
        text = f" (at {op.loc})" if op.loc else ""
        if text not in self.locations:
            self.locations.append(text)
        return f"WHERE[{self.locations.index(text)}]"

    def index_checks(self, checks) -> list:
        """The entry's checks of the index arrays a kernel reads from memory (checks:
        (array, size, axis) -> where), once per array, size and axis in a segment
        (support.check_indices)."""
        nodes = []
        for (idx, n, axis), where in checks.items():
            if (idx, n, axis) not in self.checked:
                self.checked.add((idx, n, axis))
                check = "check_indices" if idx.shape != () else "check_index"
                nodes.append(Call(check, [self.array(idx), self.syms.dim(n), str(axis), where]))
        return nodes

    def scan(self, op) -> Call:
        """A cumsum as its own small kernel: the scanned axis innermost."""
        name = f"k{self.kernel_count}"
        self.kernel_count += 1
        x, v = op.inputs[0], op.out
        axis = op.params["axis"] % max(x.type.ndim, 1)
        others = [a for a, n in enumerate(x.shape) if n != 1 and a != axis]
        index = ", ".join(f"i{a}" if n != 1 else "0" for a, n in enumerate(x.shape))
        stops = [self.syms.dim(x.shape[a]) for a in others]
        n = self.syms.dim(x.shape[axis])
        body = [Accumulate("reduce_sum", "acc", f"{self.names[x]}[{index}]"),
                Store(f"{self.names[v]}_out", index, "acc")]
        if x.shape[axis] != 1:
            body = [Loop(f"i{axis}", "-1", body, start=f"{n} - 1", step="-1")
                    if op.params.get("reverse", False) else Loop(f"i{axis}", n, body)]
        body = [Let("acc", literal(0, v.dtype), self.describe(op)), *body]
        for a, stop in reversed(list(zip(others, stops))):
            body = [Loop(f"i{a}", stop, body)]
        symbols = loop_ir.symbols(body)
        args = symbols + [self.names[x], f"{self.names[v]}_out"]
        opts = self.options("kernel", reduction=False, parallel=False)
        self.trees.append(Function(_njit(opts), name, args, f"cumsum along axis {axis}", body))
        return Call(name, symbols + [self.array(x), self.array(v)])

    def pool_kernel(self, out: _Functions, name, symbols, passed):
        """Add the task and launcher that run kernel `name` as parts on OpenBLAS's threads
        (pool.py) to its functions; the entry calls the launcher."""
        src = out.src
        loop = src.loops[0] if src.pool_split == "rows" else src.loops[-1]
        m = self.syms.dim(src.k.domain[loop])
        shapes = [self.syms.dim(n) for _, v in passed for n in v.shape]
        syms = loop_ir.order_symbols([*symbols, *shapes, m])
        params = [a for a, _ in passed] + (["at"] if out.block else [])
        slots = len(syms) + len(params)
        floats = any(s[0] == "c" for s in syms)
        what = f"kernel {name[1:]} over {src.pool_split} lo:hi"
        table = [("f" if s[0] == "c" else "t", str(i), s) for i, s in enumerate(syms)]
        task = [Let("t", f"numba.carray(address(c), {slots}, np.int64)")]
        task += [Let("f", f"numba.carray(address(c), {slots}, np.float64)")] if floats else []
        task += [Let(s, f"{t}[{i}]") for t, i, s in table]
        task += [Let("lo", f"a >> {pool.SHIFT}"),
                 Call(name, ["lo", "lo + m", *symbols,
                             *[self.carray(f"t[{len(syms) + i}]", v)
                               for i, (a, v) in enumerate(passed)],
                             *([f"t[{slots - 1}]"] if out.block else [])]),
                 Return(["0"])]
        out.functions.append(Function(
            "@numba.cfunc(task_signature, error_model='numpy', cache=True)", f"{name}_task",
            ["m", "n", "k", "alpha", "a", "lda", "b", "ldb", "c", "ldc", "sb"],
            f"{what}, on a thread of OpenBLAS's pool: its arguments are in the int64 array "
            "at c", task))
        fill = [Store(*row) for row in table]
        fill += [Store("t", str(len(syms) + i), f"{a}.ctypes.data")
                 for i, (a, _) in enumerate(passed)]
        fill += [Store("t", str(slots - 1), "at")] if out.block else []
        parts = [Let("t", f"np.empty({slots}, np.int64)"),
                 *([Let("f", "t.view(np.float64)")] if floats else []),
                 *fill, Call("pool_run", ["task", "t", m, "threads"])]
        launch = [Let("threads", f"min(pool_threads(), {m})"),
                  If(" and ".join(["threads > 1"] + [f"{a}.flags.c_contiguous"
                                                     for a, _ in passed]),
                     parts, [Call(name, ["np.int64(0)", m, *symbols, *params])])]
        out.functions.append(Function(
            _njit(self.options("kernel")), f"{name}_launch", ["task", *syms, *params],
            f"{what} as parts on OpenBLAS's threads, or all here", launch))
        out.task = True
        out.params = syms + [v for _, v in passed]

    # -- entry ---------------------------------------------------------------------------

    def shape(self, shape) -> str:
        return f"({joined([self.syms.dim(n) for n in shape], True)})"

    def step(self, s: Step):
        op, name = s.op, self.names[s.op.out]
        if s.kind == "blas":
            return self.matmul(op)
        ins = [self.array(v, owned=True) for v in op.inputs]
        if op.prim == "transpose" and not is_view(op):
            return Let(name, f"{ins[0]}.T", self.describe(op))
        if s.kind == "view":
            src = op.inputs[0]
            base = ins[0] if self.contiguous(src) else f"np.ascontiguousarray({ins[0]})"
            return Let(name, f"{base}.reshape({self.shape(op.out.shape)})", self.describe(op))
        raise AssertionError(f"codegen: no entry code for step {s!r}")

    def matmul(self, op) -> Call:
        """The entry's line running one matrix product (blas.py). A product of a kind the
        program makes at least PRODUCT_REPEATS times is a call of a function that, like a
        kernel, gets the operands in pooled buffers by address: an unrolled LSTM makes 190
        products of 4 kinds, and each would otherwise make its arrays in the entry
        (numba.carray: ~20 ms of compile time a line). A function costs ~0.15 s, so a
        product made once or twice (an MLP's) is called in the entry itself."""
        values = [*op.inputs, op.out]
        product = "gemm" if op.out.type.ndim == 2 else "bmm"
        if self.product_kinds[_product_kind(self.fusion, op)] < PRODUCT_REPEATS:
            return Call(product, map(self.array, values), comment=self.describe(op))
        operands = list(zip(("a", "b", "out"), values))
        block = [(n, v) for n, v in operands if self.by_address(v)]
        passed = [(n, v) for n, v in operands if not self.by_address(v)]
        body = self.carrays(block) + [Call(product, ["a", "b", "out"])]
        symbols = loop_ir.symbols(body)
        fn = Function(_njit(self.options("kernel")), "MM",
                      symbols + [n for n, _ in passed] + (["at"] if block else []),
                      "the matrix product out = a @ b", body)
        text = fn.render()      # the code, whatever the function's name: shared by kind
        name = self.shared.get(text)
        if name is None:
            name = fn.name = self.shared[text] = f"mm{self.products}"
            self.products += 1
            self.trees.append(fn)
        args = symbols + [self.array(v) for _, v in passed]
        args += [self.block([v for _, v in block])] if block else []
        at = f"; at: {', '.join(self.names[v] for _, v in block)}" if block else ""
        return Call(name, args, comment=self.describe(op) + at)

    def contiguous(self, v) -> bool:
        kind = self.fusion.kind[v]
        if kind == PARAM:
            return False
        node = self.fusion.buffer_of(v)
        if isinstance(node, Step) and node.kind in ("view", "host"):
            return node.kind == "view" and is_view(node.op) and \
                self.contiguous(node.op.inputs[0])
        return True

    def build(self) -> str:
        """The module text (without the header compile.py adds)."""
        segments = [[]]
        for node in self.fusion.nodes:
            if isinstance(node, Step) and node.kind == "host":
                segments.append(node)
                segments.append([])
            else:
                segments[-1].append(node)
        runner, seg_id, defined = [], 0, set(self.fn.params) | set(self.consts)
        self.calls = {}                 # segment name -> (its call, the values it returns)
        needed_later = self.needed_after(segments)
        for i, seg in enumerate(segments):
            if isinstance(seg, Step):
                self.hosts.append(seg.op)
                runner.append(Call(f"host{len(self.hosts) - 1}",  # control flow: several outs
                                   [self.names[v] for v in seg.op.inputs],
                                   [self.names[v] for v in seg.op.outputs],
                                   comment=self.describe(seg.op)))
                defined.update(seg.op.outputs)
                continue
            if not seg and len(segments) > 1:
                continue        # an empty segment around a host step: no function to compile
            outs = [v for v in needed_later[i]]
            name = "entry" if len(segments) == 1 else f"seg{seg_id}"
            seg_id += 1
            # a value in a pooled buffer is already the runner's: returning it would only
            # box the array again (0.25 us each)
            call, returned = self.segment(name, seg, defined, outs)
            self.calls[name] = (call.code(), returned)
            call.targets, call.unpack = [self.names[v] for v in returned], True
            runner.append(call)
            runner += [Let(self.names[v], self.names[self.buffer_root[v]]
                           + (f"[{self.row[v]}]" if v in self.row else "")) for v in outs
                       if v in self.buffer_root and self.buffer_root[v] is not v]
            defined.update(outs)
        return self.module(runner)

    def needed_after(self, segments) -> list:
        """Per segment, the values it defines that later segments, hosts or results read."""
        later: set = set(self.fn.results)
        out = [None] * len(segments)
        for i in range(len(segments) - 1, -1, -1):
            seg = segments[i]
            nodes = [seg] if isinstance(seg, Step) else seg
            defined = [v for n in nodes for v in self.fusion.outputs[n]] + \
                [v for v, m in self.fusion.mat.items() if m in nodes]
            out[i] = [v for v in _unique(defined) if v in later]
            for n in nodes:
                later.update(self.fusion.reads(n))
        return out

    def segment(self, name, nodes, defined, outs) -> tuple:
        """The entry function `name` running nodes; its call, and the values it returns."""
        body, self.checked, self.seg_arrays, self.seg_owned = [], set(), set(), {}
        for node in nodes:
            if isinstance(node, Kernel):
                stacks = self.stacks(node)
                stacked = {v for g in stacks for v in g}
                stmts = [self.alloc_stack(g) for g in stacks]
                stmts += [self.alloc(v) for v in self.fusion.outputs[node]
                          if v.shape != () and v not in stacked]
                stmts += self.kernel(node)
            elif node.kind in ("scan", "blas"):
                stmts = [self.alloc(node.op.out)]
                stmts.append(self.scan(node.op) if node.kind == "scan" else self.step(node))
            else:
                stmts = [self.step(node)]
            body += self.pending + stmts
            self.pending = []
        reads = sorted(_unique(v for n in nodes for v in self.fusion.reads(n) if v in defined
                               and not self.by_address(v)), key=self.position.__getitem__)
        owned = list(self.seg_owned)
        params = [self.names[v] for v in reads] + [f"{self.names[v]}_buf" for v in owned]
        args = [self.names[v] for v in reads + owned]
        head = [Let(self.names[v], f"np.float32({self.names[v]})") for v in reads
                if v.shape == () and v.dtype == "f32"]
        head += [Let(s, f"{'D' if s[0] == 'd' else 'C'}[{s[1:]}]") for s in loop_ir.symbols(body)]
        if "at" in loop_ir.names(body):
            head.append(Let("at", "A.ctypes.data", "the addresses of the buffers kernels use"))
        outs = [v for v in outs if v not in self.buffer_root]
        body = head + body + [Return([self.names[v] for v in outs], unpack=True)]
        used = loop_ir.names(body)
        tables = [t for t in ("A", "D", "C", "TASKS") if t in used]
        self.segment_args[name] = (reads + owned, *(t in used for t in ("A", "D", "C", "TASKS")))
        self.trees.append(Function(_njit(self.options("entry")), name, params + tables, "",
                                   body))
        return Call(name, args + tables), outs

    def module(self, runner) -> str:
        fn, names = self.fn, self.names
        params = [names[p] for p in fn.params]
        unpack = [f"{joined(params, True)} = leaves"] if params else []
        for p in fn.params:
            if p.shape == ():
                unpack.append(f"{names[p]} = {py_scalar(p.dtype)}({names[p]})")
        results = []
        for r in fn.results:
            text = names[r]
            if r.shape == ():           # numba returns Python scalars; float32 needs its dtype
                text = f"np.asarray({text}, np.float32)" if r.dtype == "f32" else \
                    f"np.asarray({text})"
            elif self.fusion.kind[r] in (PARAM, CONST) or self.aliases_input(r):
                text = f"{text}.copy()"
            results.append(text)
        env = ["D", "C"] + [names[c] for c in self.consts] + \
            [f"host{i}" for i in range(len(self.hosts))]
        run = ["def make_run(env):",
               f"    {', '.join(env)}, = env",
               *["    " + line for line in self.pool_setup()],
               "",
               "    def run(leaves):",
               *["        " + line for line in unpack + self.take_buffers()
                 + loop_ir.render(runner)],
               f"        return [{', '.join(results)}]",
               "",
               "    return run"]
        tasks = [f"TASKS = np.array([{', '.join(t + '.address' for t in self.tasks)}], "
                 "np.int64)  # run passes them: an address must not be frozen into the cache",
                 "", ""] if self.tasks else []
        where = [f"WHERE = ({''.join(repr(w) + ', ' for w in self.locations)})", "", ""] \
            if self.locations else []
        return "\n".join(self.imports() + ["", ""] + where + ["\n\n\n".join(self.functions)]
                         + ["", ""] + tasks + run) + "\n"

    def aliases_input(self, v) -> bool:
        node = self.fusion.buffer_of(v)
        while isinstance(node, Step) and node.kind == "view":
            v = node.op.inputs[0]
            if self.fusion.kind[v] in (PARAM, CONST):
                return True
            node = self.fusion.buffer_of(v)
        return False

    def imports(self) -> list:
        called = loop_ir.names([s for fn in self.trees for s in fn.body], called=True)
        lines = ["import math", "import threading", "from sys import getrefcount", "",
                 "import numba",
                 "import numpy as np", "from numba import prange", ""]
        funcs = mathlib_funcs() or {}
        used = [(p, dt) for p in MATH_FUNCS for dt in ("f64", "f32")
                if (p, dt) in funcs and f"{p}_{dt}" in called]
        support = [n for n in ("stable_logistic_f64", "stable_logistic_f32", "ipow",
                               "stream_row", "stream_fence", "check_index", "check_indices")
                   if n in called]
        if support:
            lines.append(f"from fusegrad.codegen.support import {', '.join(support)}")
        blas = [n for n in ("bmm", "gemm") if n in called]
        if blas:
            lines.append(f"from fusegrad.codegen.blas import {', '.join(blas)}")
        if self.tasks:
            lines.append("from fusegrad.codegen.pool import address, pool_run, pool_threads, "
                         "task_signature")
        elif "address" in called:
            lines.append("from fusegrad.codegen.pool import address")
        if "fma" in called:
            lines.append("from fusegrad.codegen.mathlib import fma")
        if used:
            lines.append("from fusegrad.codegen.mathlib import KERNEL_FUNCS as _mathlib")
            lines += [f'{p}_{dt} = _mathlib[("{p}", "{dt}")]' for p, dt in used]
        return lines


def _product_kind(fusion, op) -> tuple:
    """What decides a matrix product function's code: the types, and which operands live in
    buffers the entry allocates (those it passes by address)."""
    def allocated(v):
        node = fusion.buffer_of(v)
        return isinstance(node, Kernel) or isinstance(node, Step) and node.kind in ("blas",
                                                                                  "scan")
    return tuple((v.type, allocated(v)) for v in (*op.inputs, op.out))


def _dom(k: Kernel, syms) -> str:
    return f"[{', '.join(syms.dim(n) for n in k.domain)}]"


def _njit(opts: dict) -> str:
    return f"@numba.njit({', '.join(f'{k}={v!r}' for k, v in opts.items())})"


def _unique(items) -> list:
    return list(dict.fromkeys(items))


__all__ = ["INLINE", "ModuleSource", "Symbols", "python_names"]
