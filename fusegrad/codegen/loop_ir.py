"""Generated functions as a small tree of statements, built first and rendered to text last.

Codegen decides everything about a function on its tree (which loop runs under prange or
covers a pool part's lo:hi, which arrays a column part slices, which sizes and tables it
takes as arguments, which helpers the module imports) and renders it once, at the end, as
tinygrad linearizes before it renders.
Expressions stay text, one Python expression per IR value (templates.py, index_maps.py);
statements and loops are nodes:

    Let(name, expr)               name = expr
    Store(array, index, expr)     array[index] = expr
    Accumulate(prim, acc, x)      the update of a reduction: acc += x, acc = x if x > acc ...
    Call(func, args, targets)     stream_row(a, b, nt); a, b = k3_chunk(lo, hi, ...)
    Loop(var, stop, body)         for var in range(stop): ..., prange, lo:hi, unsigned
    If(cond, body, orelse)        if cond: ... else: ...
    Return(values)
    Comment(text)                 # text, a line of its own

A statement's comment (the IR equation and the user's line) is never code: the queries
(names, symbols, index_only) read only the code.
"""

from __future__ import annotations

import re

from .templates import reduction_update


class Cols:
    """An array that a part of a column split (pool.py) slices to its columns, lo:hi."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def render(self, cols: bool) -> str:
        return self.text + ("[lo:hi]" if cols else "")


def _text(item, cols: bool) -> str:
    return item.render(cols) if isinstance(item, Cols) else item


class Stmt:
    """A statement: its `code(cols)`, and the comment on its line."""

    comment = ""

    def lines(self, cols: bool) -> list:
        code = self.code(cols)
        return [f"{code}  # {self.comment}" if self.comment else code]


class Let(Stmt):
    def __init__(self, name: str, expr: str, comment: str = ""):
        self.name, self.expr, self.comment = name, expr, comment

    def code(self, cols=False) -> str:
        return f"{self.name} = {self.expr}"


class Store(Stmt):
    def __init__(self, array: str, index: str, expr: str, comment: str = ""):
        self.array, self.index, self.expr, self.comment = array, index, expr, comment

    def code(self, cols=False) -> str:
        return f"{self.array}[{self.index}] = {self.expr}"


class Accumulate(Stmt):
    def __init__(self, prim: str, acc: str, x: str, comment: str = ""):
        self.prim, self.acc, self.x, self.comment = prim, acc, x, comment

    def code(self, cols=False) -> str:
        return reduction_update(self.prim, self.acc, self.x)


def joined(items, unpack: bool) -> str:
    """Items joined; with unpack, one item still a tuple (`v2,`)."""
    return ", ".join(items) + ("," if unpack and len(items) == 1 else "")


class Call(Stmt):
    """func(args), assigned to targets (unpack: a tuple even of one); with obj, the method
    call obj.func(args)."""

    def __init__(self, func: str, args=(), targets=(), obj=None, comment: str = "",
                 unpack=False):
        self.func, self.args, self.targets, self.obj = func, list(args), list(targets), obj
        self.comment, self.unpack = comment, unpack

    def code(self, cols=False) -> str:
        func = self.func if self.obj is None else f"{_text(self.obj, cols)}.{self.func}"
        call = f"{func}({', '.join(_text(a, cols) for a in self.args)})"
        return f"{joined(self.targets, self.unpack)} = {call}" if self.targets else call


class Return(Stmt):
    """return values; as a tuple (even of one) with unpack."""

    def __init__(self, values, unpack=False):
        self.values, self.unpack = list(values), unpack

    def code(self, cols=False) -> str:
        return f"return {joined(self.values, self.unpack)}" if self.values else "return"


class Comment(Stmt):
    def __init__(self, text: str):
        self.text = text

    def code(self, cols=False) -> str:
        return ""

    def lines(self, cols: bool) -> list:
        return [f"# {self.text}"]


class Loop(Stmt):
    """for var in range(stop); from start (unsigned: LLVM vectorizes a loop over lo:hi only if
    it need not check for negative indices); under prange when parallel."""

    def __init__(self, var: str, stop: str, body, start=None, step=None, parallel=False,
                 unsigned=False):
        self.var, self.stop, self.body, self.start, self.step = var, stop, body, start, step
        self.parallel, self.unsigned = parallel, unsigned

    def code(self, cols=False) -> str:
        if self.parallel:
            rng = f"prange({self.stop})"
        elif self.unsigned:
            rng = f"range(numba.uint64({self.start}), numba.uint64({self.stop}))"
        else:
            bounds = [self.start, self.stop, self.step] if self.step else \
                [self.stop] if self.start is None else [self.start, self.stop]
            rng = f"range({', '.join(bounds)})"
        return f"for {self.var} in {rng}:"

    def lines(self, cols: bool) -> list:
        return [self.code(cols), *indent(render(self.body, cols))]


class If(Stmt):
    def __init__(self, cond: str, body, orelse=()):
        self.cond, self.body, self.orelse = cond, body, list(orelse)

    def code(self, cols=False) -> str:
        return f"if {self.cond}:"

    def lines(self, cols: bool) -> list:
        out = [self.code(cols), *indent(render(self.body, cols))]
        return out + (["else:", *indent(render(self.orelse, cols))] if self.orelse else [])


class Function:
    """A generated function: decorator, signature, docstring and its tree; with cols, a
    column part that slices its Cols arrays."""

    def __init__(self, decorator: str, name: str, params, doc: str, body, cols=False):
        self.decorator, self.name, self.params, self.doc = decorator, name, params, doc
        self.body, self.cols = body, cols

    def render(self) -> str:
        head = [self.decorator] if self.decorator else []
        head.append(f"def {self.name}({', '.join(self.params)}):")
        doc = [f'    """{self.doc}"""'] if self.doc else []
        return "\n".join(head + doc + indent(render(self.body, self.cols)))


def render(nodes, cols: bool = False) -> list:
    """The lines of a tree; `cols`: whether a column part slices its Cols arrays."""
    return [line for node in nodes for line in node.lines(cols)]


def indent(lines) -> list:
    return ["    " + line for line in lines]


def walk(nodes):
    """Every statement of a tree, loops and branches before their bodies."""
    for node in nodes:
        yield node
        yield from walk(getattr(node, "body", ()))
        yield from walk(getattr(node, "orelse", ()))


SYMBOL = re.compile(r"[dc]\d+")
_NAME = re.compile(r"\b[A-Za-z_]\w*")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")


def order_symbols(names) -> list:
    """Size symbols (dN) and size constants (cN), once each, in the order D and C hold them."""
    return sorted({n for n in names if SYMBOL.fullmatch(n)}, key=lambda s: (s[0], int(s[1:])))


def names(nodes, called=False) -> set:
    """The names a tree's code uses (its comments left out); with called, the functions it
    calls (the module imports them)."""
    pattern = _CALLED if called else _NAME
    return {n for node in walk(nodes) for n in pattern.findall(node.code())}


def symbols(nodes) -> list:
    """The dN and cN symbols a tree's code uses: the arguments its function takes."""
    return order_symbols(names(nodes))


_SUBSCRIPT = re.compile(r"\[([^\[\]]*)\]")


def index_only(nodes, i: str) -> bool:
    """Whether the loop variable i appears in a tree's statements only as a whole index
    (`a[i]`, `a[j, i]`), so it may be unsigned (arithmetic mixing uint64 and int64 would give
    floats). Loop headers are left out: this asks about the statements inside the loop."""
    code = "\n".join(n.code() for n in walk(nodes) if not isinstance(n, (Loop, If)))
    done = None
    while code != done:        # innermost subscripts first: a[i, b[i]]
        done, code = code, _SUBSCRIPT.sub(lambda m: "<" + ",".join(
            "_" if part.strip() == i else part for part in m.group(1).split(",")) + ">", code)
    return not re.search(rf"\b{i}\b", code)
