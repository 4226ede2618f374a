"""The generated module: one function per kernel, an njit entry that allocates buffers and runs
kernels, views and BLAS calls in order, and `make_run`, the plain-Python runner the Executable
calls with the argument leaves.

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

import numpy as np

from ..ir.printer import format_literal
from ..ir.printer import value_names as printed_names
from ..passes.schedule import CONST, INLINE, PARAM, Kernel, Step, is_view
from . import pool
from .kernel import KernelSource
from .templates import MATH_FUNCS, POISON_FILL, literal, mathlib_funcs, new_buffer, poison_on

SIZE_PARAMS = ("shape", "start", "stop", "step", "low", "high", "interior")
RESERVED = {"np", "math", "numba", "prange", "D", "C", "env", "leaves", "run", "make_run", "r",
            "bmm", "gemm", "ipow", "entry", "pool", "getrefcount", "TASKS", "address",
            "pool_run", "pool_threads", "task_signature", "task", "threads", "lo", "hi", "t", "f",
            "fma", "WHERE", "check_index", "check_indices"}
GENERATED = re.compile(r"(v|d|c|i|k|seg|host|r)\d+(_\w*)?\Z|.*_(out|best|take)\Z")
SYMBOL = re.compile(r"\b([dc])(\d+)\b")


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
            items = [self.syms.dim(n) for n in value]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
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


class ModuleSource:
    """Builds the module text for a Fusion; also the per-signature values its runner needs."""

    def __init__(self, fusion, memory, options, parallel=False):
        self.fusion, self.memory, self.options, self.parallel = fusion, memory, options, parallel
        fn = fusion.fn
        self.fn = fn
        self.syms = Symbols(fn)
        self.names = python_names(fn)
        self.describe = Describer(fn, self.syms)
        self.functions: list[str] = []
        self.tasks: list[str] = []     # the pool tasks' cfuncs: their addresses go in TASKS
        self.kernel_count = 0
        self.hosts: list = []          # host step ops, in order
        self.segment_args: dict = {}   # segment name -> (values, uses D, C, TASKS)
        self.pooled: list = []         # values whose fresh buffers the runner keeps in its pool
        self.buffer_root: dict = {}    # value in a pooled buffer -> the pooled value owning it
        self.seg_pooled: list = []     # the pooled values of the segment being built
        self.locations: list = []      # WHERE: the user's lines that index checks name
        self.checked: set = set()      # (index array, size, axis) checked in this segment
        self.consts = [op.out for op in fn.ops
                       if op.prim == "constant" and fusion.kind[op.out] == CONST]
        order = list(fn.params) + self.consts + [op.out for op in fn.ops]
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

    # -- kernels -------------------------------------------------------------------------

    def kernel(self, k: Kernel) -> str:
        """Emit kernel k's function; returns the call line for the entry."""
        name = f"k{self.kernel_count}"
        self.kernel_count += 1
        src = KernelSource(k, self.fusion, self.names, self.syms, self.describe, name,
                           self.parallel, self.streamed.get(k, frozenset()),
                           pool.AVAILABLE and not self.parallel, self.where)
        body = src.build()
        self.pending_checks = src.index_checks
        outputs = [v for v in self.fusion.outputs[k] if v.shape != ()]
        returns = src.scalar_outputs
        symbols = _symbols(body)
        args = symbols + [self.names[v] for v in src.inputs] + \
            [f"{self.names[v]}_out" for v in outputs]
        opts = self.options("kernel", reduction=src.has_reduction,
                            parallel=src.chunked or src.parallel_rows)
        doc = (f'    """kernel {name[1:]}: {len(k.ops)} ops over {_dom(k, self.syms)}, '
               f'{src.passes} pass{"es" if src.passes > 1 else ""}"""')
        if src.chunked:
            body = body.replace("ARGS)", f"{', '.join(args)})")
            chunk_opts = self.options("kernel", reduction=src.has_reduction)
            self.functions.append(f"@numba.njit({_options(chunk_opts)})\n"
                                  f"def {name}_chunk(lo, hi, {', '.join(args)}):\n"
                                  f'    """kernel {name[1:]} over elements lo:hi"""\n'
                                  f"{src.chunk_body}")
        split = ["lo", "hi"] if src.pool_split else []
        self.functions.append(f"@numba.njit({_options(opts)})\n"
                              f"def {name}({', '.join(split + args)}):\n{doc}\n{body}")
        call_args = symbols + [self.names[v] for v in src.inputs] + \
            [self.names[v] for v in outputs]
        call = f"{name}({', '.join(call_args)})"
        if src.pool_split:
            arrays = [(self.names[v], v) for v in src.inputs] + \
                [(f"{self.names[v]}_out", v) for v in outputs]
            call = self.pool_kernel(name, src, symbols, arrays, call_args)
        lhs = ", ".join(self.names[v] for v in returns)
        return f"{lhs} = {call}" if lhs else call

    def where(self, op) -> str:
        """The code naming op's source line in an error message: an entry of WHERE, a module
        constant (a file name in the code itself could read as a size symbol)."""
        text = f" (at {op.loc})" if op.loc else ""
        if text not in self.locations:
            self.locations.append(text)
        return f"WHERE[{self.locations.index(text)}]"

    def index_checks(self) -> list:
        """The entry's checks of the index arrays the kernel just emitted reads from memory,
        once per array, size and axis in a segment (support.check_indices)."""
        lines = []
        for (idx, n, axis), where in self.pending_checks.items():
            if (idx, n, axis) not in self.checked:
                self.checked.add((idx, n, axis))
                check = "check_indices" if idx.shape != () else "check_index"
                lines.append(f"{check}({self.names[idx]}, {self.syms.dim(n)}, {axis}, {where})")
        return lines

    def scan(self, op) -> str:
        """A cumsum as its own small kernel: the scanned axis innermost."""
        name = f"k{self.kernel_count}"
        self.kernel_count += 1
        x, v = op.inputs[0], op.out
        axis = op.params["axis"] % max(x.type.ndim, 1)
        rev = op.params.get("reverse", False)
        others = [a for a, n in enumerate(x.shape) if n != 1 and a != axis]
        index = ", ".join(f"i{a}" if n != 1 else "0" for a, n in enumerate(x.shape))
        lines, depth = [], 1
        for a in others:
            lines.append("    " * depth + f"for i{a} in range({self.syms.dim(x.shape[a])}):")
            depth += 1
        pad = "    " * depth
        lines.append(pad + f"acc = {literal(0, v.dtype)}  # {self.describe(op)}")
        n = self.syms.dim(x.shape[axis])
        rng = f"range({n} - 1, -1, -1)" if rev else f"range({n})"
        if x.shape[axis] != 1:
            lines.append(pad + f"for i{axis} in {rng}:")
            pad += "    "
        lines.append(pad + f"acc += {self.names[x]}[{index}]")
        lines.append(pad + f"{self.names[v]}_out[{index}] = acc")
        body = "\n".join(lines)
        symbols = _symbols(body)
        args = symbols + [self.names[x], f"{self.names[v]}_out"]
        opts = self.options("kernel", reduction=False, parallel=False)
        self.functions.append(f"@numba.njit({_options(opts)})\ndef {name}({', '.join(args)}):\n"
                              f'    """cumsum along axis {axis}"""\n{body}')
        return f"{name}({', '.join(symbols + [self.names[x], self.names[v]])})"

    def pool_kernel(self, name, src, symbols, arrays, call_args) -> str:
        """Emit the task and launcher that run kernel `name` as parts on OpenBLAS's threads
        (pool.py); returns the launcher's call for the entry."""
        loop = src.loops[0] if src.pool_split == "rows" else src.loops[-1]
        m = self.syms.dim(src.k.domain[loop])
        shapes = {a: self.shape(v.shape) for a, v in arrays}
        syms = _symbols(" ".join([*symbols, *shapes.values(), m]))
        kernel_args = symbols + [a for a, _ in arrays]
        slots = len(syms) + len(arrays)
        floats = any(s[0] == "c" for s in syms)
        what = f"kernel {name[1:]} over {src.pool_split} lo:hi"
        task = [f"t = numba.carray(address(c), {slots}, np.int64)"]
        task += [f"f = numba.carray(address(c), {slots}, np.float64)"] if floats else []
        task += [f"{s} = {'f' if s[0] == 'c' else 't'}[{i}]" for i, s in enumerate(syms)]
        task += [f"lo = a >> {pool.SHIFT}",
                 f"{name}(lo, lo + m, " + ", ".join(symbols + [
                     f"numba.carray(address(t[{len(syms) + i}]), {shapes[a]}, "
                     f"np.{_np_name(v.dtype)})" for i, (a, v) in enumerate(arrays)]) + ")",
                 "return 0"]
        self.functions.append(
            "@numba.cfunc(task_signature, error_model='numpy', cache=True)\n"
            f"def {name}_task(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb):\n"
            f'    """{what}, on a thread of OpenBLAS\'s pool: its arguments are in the int64 '
            f'array at c"""\n' + "\n".join("    " + line for line in task))
        params = syms + [a for a, _ in arrays]
        contiguous = " and ".join(f"{a}.flags.c_contiguous" for a, _ in arrays)
        fill = [f"{'f' if s[0] == 'c' else 't'}[{i}] = {s}" for i, s in enumerate(syms)]
        fill += [f"t[{len(syms) + i}] = {a}.ctypes.data" for i, (a, _) in enumerate(arrays)]
        launch = [f"threads = min(pool_threads(), {m})",
                  f"if threads > 1 and {contiguous}:",
                  f"    t = np.empty({slots}, np.int64)",
                  *(["    f = t.view(np.float64)"] if floats else []),
                  *["    " + line for line in fill],
                  f"    pool_run(task, t, {m}, threads)",
                  "else:",
                  f"    {name}(0, {m}, {', '.join(kernel_args)})"]
        opts = self.options("kernel")
        self.functions.append(
            f"@numba.njit({_options(opts)})\n"
            f"def {name}_launch(task, {', '.join(params)}):\n"
            f'    """{what} as parts on OpenBLAS\'s threads, or all here"""\n'
            + "\n".join("    " + line for line in launch))
        self.tasks.append(f"{name}_task")
        by_param = dict(zip(kernel_args, call_args))
        return f"{name}_launch(TASKS[{len(self.tasks) - 1}], " \
            f"{', '.join(by_param.get(p, p) for p in params)})"

    # -- entry ---------------------------------------------------------------------------

    def alloc(self, v) -> str:
        reuse = self.memory.get(v)
        if reuse is not None:
            if reuse in self.buffer_root:
                self.buffer_root[v] = self.buffer_root[reuse]
            return f"{self.names[v]} = {self.names[reuse]}  # reuses the buffer of " \
                   f"{self.describe.names[reuse]}"
        self.pooled.append(v)
        self.seg_pooled.append(v)
        self.buffer_root[v] = v
        return f"# {self.names[v]}: a pooled {self.describe.type(v)} buffer, passed in by run"

    def shape(self, shape) -> str:
        items = [self.syms.dim(n) for n in shape]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    def step(self, s: Step) -> str:
        op, name = s.op, self.names[s.op.out]
        ins = [self.names[v] for v in op.inputs]
        comment = f"  # {self.describe(op)}"
        if s.kind == "blas":
            fn = "gemm" if op.out.type.ndim == 2 else "bmm"
            return f"{fn}({ins[0]}, {ins[1]}, {name}){comment}"
        if op.prim == "transpose" and not is_view(op):
            return f"{name} = {ins[0]}.T{comment}"
        if s.kind == "view":
            src = op.inputs[0]
            base = ins[0] if self.contiguous(src) else f"np.ascontiguousarray({ins[0]})"
            return f"{name} = {base}.reshape({self.shape(op.out.shape)}){comment}"
        raise AssertionError(f"codegen: no entry code for step {s!r}")

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
        needed_later = self.needed_after(segments)
        for i, seg in enumerate(segments):
            if isinstance(seg, Step):
                self.hosts.append(seg.op)
                ins = ", ".join(self.names[v] for v in seg.op.inputs)
                runner.append(f"{self.names[seg.op.out]} = host{len(self.hosts) - 1}({ins})"
                              f"  # {self.describe(seg.op)}")
                defined.add(seg.op.out)
                continue
            if not seg and i > 0 and i < len(segments) - 1:
                continue
            outs = [v for v in needed_later[i]]
            name = "entry" if len(segments) == 1 else f"seg{seg_id}"
            seg_id += 1
            # a value in a pooled buffer is already the runner's: returning it would only
            # box the array again (0.25 us each)
            call, returned = self.segment(name, seg, defined, outs)
            lhs = ", ".join(self.names[v] for v in returned)
            runner.append(f"{lhs}{',' if len(returned) == 1 else ''} = {call}" if returned
                          else call)
            runner += [f"{self.names[v]} = {self.names[self.buffer_root[v]]}" for v in outs
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

    def segment(self, name, nodes, defined, outs) -> str:
        body, self.seg_pooled, self.checked = [], [], set()
        for node in nodes:
            if isinstance(node, Kernel):
                body += [self.alloc(v) for v in self.fusion.outputs[node] if v.shape != ()]
                call = self.kernel(node)
                body += self.index_checks()
                body.append(call)
            elif node.kind == "scan":
                body.append(self.alloc(node.op.out))
                body.append(self.scan(node.op))
            elif node.kind == "blas":
                body.append(self.alloc(node.op.out))
                body.append(self.step(node))
            else:
                body.append(self.step(node))
        used = _symbols("\n".join(body))
        reads = sorted(_unique(v for n in nodes for v in self.fusion.reads(n) if v in defined),
                       key=self.position.__getitem__)
        reads += self.seg_pooled
        args = [self.names[v] for v in reads]
        head = []
        for v in reads:
            if v.shape == () and v.dtype == "f32":
                head.append(f"{self.names[v]} = np.float32({self.names[v]})")
        for s in used:
            table = "D" if s[0] == "d" else "C"
            head.append(f"{s} = {table}[{s[1:]}]")
        if any(s[0] == "d" for s in used):
            args.append("D")
        if any(s[0] == "c" for s in used):
            args.append("C")
        if "TASKS[" in "\n".join(body):
            args.append("TASKS")
        self.segment_args[name] = (reads, "D" in args, "C" in args, "TASKS" in args)
        outs = [v for v in outs if v not in self.buffer_root]
        ret = ", ".join(self.names[v] for v in outs) + ("," if len(outs) == 1 else "")
        lines = head + body + [f"return {ret}" if outs else "return"]
        opts = self.options("entry")
        self.functions.append(f"@numba.njit({_options(opts)})\ndef {name}({', '.join(args)}):\n"
                              + "\n".join("    " + line for line in lines))
        return f"{name}({', '.join(args)})", outs

    def module(self, runner) -> str:
        fn, names = self.fn, self.names
        params = [names[p] for p in fn.params]
        unpack = [f"{', '.join(params)}{',' if len(params) == 1 else ''} = leaves"] \
            if params else []
        for p in fn.params:
            if p.shape == ():
                conv = {"f32": "float", "f64": "float", "i64": "int", "bool": "bool"}[p.dtype]
                unpack.append(f"{names[p]} = {conv}({names[p]})")
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
               *["        " + line for line in unpack + self.take_buffers() + runner],
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

    def pool_setup(self) -> list:
        """The runner's pool: one slot per fresh buffer, kept from call to call."""
        if not self.pooled:
            return []
        dims = _symbols("\n".join(self.shape(v.shape) for v in self.pooled))
        return [f"{d} = int(D[{d[1:]}])" for d in dims] + [f"pool = [None] * {len(self.pooled)}"]

    def take_buffers(self) -> list:
        """Reuse the buffer of the last call only when the pool holds the one reference left
        (getrefcount sees the pool, the local and its argument): a result the caller still
        holds, or a view of it (through .base), keeps its buffer out of reach."""
        lines = []
        for i, v in enumerate(self.pooled):
            n = self.names[v]
            lines += [f"{n} = pool[{i}]",
                      f"if {n} is None or getrefcount({n}) > 3:",
                      f"    {n} = pool[{i}] = "
                      f"{new_buffer(self.shape(v.shape), _np_name(v.dtype))}"]
            if poison_on():             # a reused buffer holds the last call's values
                lines += ["else:", f"    {n}.fill({POISON_FILL[_np_name(v.dtype)]})"]
        return lines

    def aliases_input(self, v) -> bool:
        node = self.fusion.buffer_of(v)
        while isinstance(node, Step) and node.kind == "view":
            v = node.op.inputs[0]
            if self.fusion.kind[v] in (PARAM, CONST):
                return True
            node = self.fusion.buffer_of(v)
        return False

    def imports(self) -> list:
        called = set(re.findall(r"\b(\w+)\(", "\n".join(self.functions)))
        lines = ["import math", "from sys import getrefcount", "", "import numba",
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
        if "fma" in called:
            lines.append("from fusegrad.codegen.mathlib import fma")
        if used:
            lines.append("from fusegrad.codegen.mathlib import FUNCS as _mathlib")
            lines += [f'{p}_{dt} = _mathlib[("{p}", "{dt}")]' for p, dt in used]
        return lines


def _dom(k: Kernel, syms) -> str:
    return f"[{', '.join(syms.dim(n) for n in k.domain)}]"


def _np_name(dtype: str) -> str:
    return {"f32": "float32", "f64": "float64", "i64": "int64", "bool": "bool_"}[dtype]


def _symbols(text: str) -> list[str]:
    """The dN and cN symbols a piece of code uses (comments excluded), in numeric order."""
    code = "\n".join(line.split("  # ")[0] for line in text.splitlines())
    found = {(m.group(1), int(m.group(2))) for m in SYMBOL.finditer(code)}
    return [f"{kind}{n}" for kind, n in sorted(found)]


def _options(opts: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in opts.items())


def _unique(items) -> list:
    return list(dict.fromkeys(items))


__all__ = ["INLINE", "ModuleSource", "Symbols", "python_names"]
