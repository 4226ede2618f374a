"""The command line: print the IR of a function in a file, its gradient or its optimized form.

    python -m fusegrad ir examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4]

Argument types are written as in the IR (`f64[2,3]`, `f32[]`, `i64[5]`, `bool[4]`) and may be
nested into pytrees: `[f64[3], f64[]]`, `(f64[2], i64[2])`, `{w: f64[3,2], b: f64[2]}`. Each
becomes zeros of that type. Usage errors print one line and exit 2; an error raised while
tracing prints one line and exits 1 (FUSEGRAD_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import runpy
import sys
from pathlib import Path

import numpy as np

PROG = "python -m fusegrad"
DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.bool_}

DESCRIPTION = """\
fusegrad traces NumPy functions into an SSA IR, differentiates and compiles them.

subcommands:
  ir     print the IR of FILE.py:FUNCTION for given argument types
         (--grad: of its gradient; --optimized: after the pass pipeline; --dot: draw it)
  demo   run examples/train_mlp.py (eager vs compiled training of a small MLP)

Run `%(prog)s ir --help` for the details of a subcommand."""

EPILOG = """\
examples:
  %(prog)s ir examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4]
  %(prog)s ir examples/model.py:loss --arg f32[4] --arg f32[4] --arg f32[4] --grad 0,1
  %(prog)s ir examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4] --optimized
  %(prog)s ir examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4] --dot loss.svg
  %(prog)s ir examples/model.py:mlp_loss --arg '{w1: f64[3,8], b1: f64[8], w2: f64[8,2], \\
      b2: f64[2]}' --arg f64[5,3] --arg f64[5,2]
  %(prog)s demo"""

IR_EPILOG = """\
argument types:
  f64[2,3]  f32[]  i64[5]  bool[4]     an array of zeros (f64[] is a 0-d array)
  [T, ...]  (T, ...)  {name: T, ...}   lists, tuples and dicts of types (pytrees)
  --static N=VALUE                     argument N is the Python literal VALUE (or a string),
                                       passed through static_argnums; --arg fills the others

examples:
  %(prog)s examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4]
  %(prog)s examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4] --grad 0,1,2
  %(prog)s examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4] --optimized
  %(prog)s examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4] --dot loss.dot
  %(prog)s mymodule.py:step --arg f32[8,3] --static 1=True"""


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class RunError(Exception):
    """The command was well formed but could not be carried out: one line, exit status 1."""


# -- argument types ------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<type>(?:f32|f64|i64|bool)\[[^\]]*\])|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<quoted>'[^']*'|\"[^\"]*\")|(?P<punct>[\[\](){}:,]))")


def parse_arg_type(text: str):
    """`f64[2,3]` -> zeros((2, 3)); lists, tuples and dicts of types -> pytrees of zeros."""
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UsageError(f"bad argument type {text!r} at {text[pos:].strip()!r}; "
                             f"expected e.g. f64[2,3], f32[], i64[5], bool[4], [T, T] or "
                             f"{{name: T}}")
        tokens.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    reader = _Reader(tokens, text)
    value = reader.tree()
    if reader.pos != len(tokens):
        reader.fail("unexpected text after the type")
    return value


class _Reader:
    def __init__(self, tokens, text):
        self.tokens, self.text, self.pos = tokens, text, 0

    def fail(self, msg):
        raise UsageError(f"bad argument type {self.text!r}: {msg}; expected e.g. f64[2,3], "
                         f"f32[], i64[5], bool[4], [T, T] or {{name: T}}")

    def next(self):
        if self.pos >= len(self.tokens):
            self.fail("it ends too early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def tree(self):
        kind, text = self.next()
        if kind == "type":
            return _zeros(text, self)
        if kind == "name" and text == "None":
            return None
        if (kind, text) in (("punct", "["), ("punct", "(")):
            items = self.items("]" if text == "[" else ")", self.tree)
            return items if text == "[" else tuple(items)
        if (kind, text) == ("punct", "{"):
            return dict(self.items("}", self.entry))
        self.fail(f"unexpected {text!r}")

    def entry(self):
        kind, key = self.next()
        if kind == "quoted":
            key = key[1:-1]
        elif kind != "name":
            self.fail(f"a dict key must be a name, not {key!r}")
        if self.next() != ("punct", ":"):
            self.fail(f"expected ':' after the key {key!r}")
        return key, self.tree()

    def items(self, close, item):
        out = []
        while self.peek() != ("punct", close):
            out.append(item())
            if self.peek() == ("punct", ","):
                self.next()
            elif self.peek() != ("punct", close):
                self.fail(f"expected ',' or {close!r}")
        self.next()
        return out


def _zeros(text, reader):
    dtype, dims = text[:-1].split("[")
    dims = dims.strip()
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    except ValueError:
        reader.fail(f"dimensions must be integers, not {dims!r}")
    if any(n < 0 for n in shape):
        reader.fail("dimensions must be non-negative")
    return np.zeros(shape, DTYPES[dtype])


def parse_static(text: str) -> tuple[int, object]:
    """`N=VALUE`: VALUE is a Python literal, or else taken as a string."""
    index, sep, value = text.partition("=")
    if not sep or not index.strip().lstrip("-").isdigit():
        raise UsageError(f"bad --static {text!r}; expected N=VALUE, e.g. --static 1=3 or "
                         f"--static 2=True")
    try:
        return int(index), ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return int(index), value


def parse_argnums(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(a) for a in text.split(","))
    except ValueError:
        raise UsageError(f"bad --grad {text!r}; expected argument numbers such as 0 or "
                         f"0,1") from None


def build_args(arg_types: list[str], statics: list[str]):
    """The positional arguments and static_argnums for the --arg and --static options."""
    dynamic = [parse_arg_type(t) for t in arg_types]
    static = dict(parse_static(s) for s in statics)
    total = len(dynamic) + len(static)
    for i in static:
        if not 0 <= i < total:
            raise UsageError(f"--static {i}=... is out of range: the function gets {total} "
                             f"arguments ({len(dynamic)} --arg, {len(static)} --static)")
    it = iter(dynamic)
    args = [static[i] if i in static else next(it) for i in range(total)]
    return args, tuple(sorted(static))


# -- loading the function -----------------------------------------------------------------

def load_function(spec: str):
    """`path/to/file.py:name` (or `package.module:name`) -> the function object."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise UsageError(f"expected FILE.py:FUNCTION, got {spec!r}")
    module = _load_module(target)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{target} has no function {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{target}:{attr} is a {type(obj).__name__}, not a function")
    return obj


def _load_module(target: str):
    path = Path(target)
    if target.endswith(".py") or path.exists():
        if not path.is_file():
            raise UsageError(f"no such file: {target}")
        name = re.sub(r"\W", "_", path.stem)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))
        sys.modules[name] = module
        _run_user_code(lambda: spec.loader.exec_module(module), f"loading {target}")
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        raise UsageError(f"no such file or module: {target} ({e})") from None


def _run_user_code(thunk, what):
    try:
        return thunk()
    except (UsageError, RunError):
        raise
    except Exception as e:
        if os.environ.get("FUSEGRAD_DEBUG"):
            raise
        message = " ".join(str(e).split())
        raise RunError(f"{what} failed: {type(e).__name__}: {message}") from None


# -- subcommands --------------------------------------------------------------------------

def _grad_transform():
    try:
        from .transforms import grad
        return grad
    except ImportError as e:
        import fusegrad
        grad = getattr(fusegrad, "grad", None)
        if grad is not None:
            return grad
        raise RunError(f"--grad needs fusegrad.transforms.grad, which this build of fusegrad "
                       f"does not have yet ({e}); print the forward IR without --grad") from None


def cmd_ir(ns) -> int:
    import fusegrad as fg
    if ns.dot and Path(ns.dot).suffix.lower() not in (".dot", ".gv", ".svg", ".png", ".pdf"):
        raise UsageError(f"--dot {ns.dot}: the file must end in .dot, .svg, .png or .pdf")
    fun = load_function(ns.target)
    args, static_argnums = build_args(ns.arg or [], ns.static or [])
    if ns.grad is not None:
        argnums = parse_argnums(ns.grad)
        for i in argnums:
            if not 0 <= i < len(args) or i in static_argnums:
                raise UsageError(f"--grad {ns.grad}: argument {i} is not one of the "
                                 f"{len(args)} arguments, or it is static")
        fun = _grad_transform()(fun, argnums=argnums if len(argnums) > 1 else argnums[0])
    what = f"tracing {ns.target}"
    if ns.optimized:
        jitted = fg.jit(fun, static_argnums=static_argnums, backend="interp")
        fn = _run_user_code(lambda: jitted.lower(*args).ir, what)
    else:
        fn = _run_user_code(lambda: fg.make_ir(fun, static_argnums)(*args), what)
    print(fn)
    if ns.dot:
        _write_dot(fn, ns.dot)
    return 0


def _write_dot(fn, out: str):
    path = Path(out)
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("dot", "gv"):
        path.write_text(_run_user_code(fn.to_dot, "drawing the IR"))
    else:
        _run_user_code(lambda: fn.render(path), f"rendering {out}")
    print(f"wrote {path}", file=sys.stderr)


def cmd_demo(ns) -> int:
    candidates = [Path.cwd() / "examples" / "train_mlp.py",
                  Path(__file__).resolve().parent.parent / "examples" / "train_mlp.py"]
    script = next((p for p in candidates if p.is_file()), None)
    if script is None:
        looked = ", ".join(str(p) for p in dict.fromkeys(candidates))
        print(f"fusegrad demo: examples/train_mlp.py is not there (looked in {looked}); "
              f"it ships with a source checkout of fusegrad", file=sys.stderr)
        return 1
    sys.argv = [str(script), *ns.rest]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")
    return 0


def make_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", metavar="{ir,demo}")
    ir = sub.add_parser("ir", help="print the IR of FILE.py:FUNCTION", formatter_class=fmt,
                        description="Trace FILE.py:FUNCTION on zero arrays of the given types "
                                    "and print its IR.", epilog=IR_EPILOG)
    ir.add_argument("target", metavar="FILE.py:FUNCTION",
                    help="the function: a path to a .py file (or a module name), a colon and "
                         "the function's name")
    ir.add_argument("--arg", action="append", metavar="TYPE",
                    help="the type of the next dynamic argument, e.g. f64[2,3] (repeat per "
                         "argument)")
    ir.add_argument("--static", action="append", metavar="N=VALUE",
                    help="make argument N the static Python value VALUE (repeatable)")
    ir.add_argument("--grad", metavar="ARGNUMS",
                    help="print the IR of fg.grad(FUNCTION, argnums=ARGNUMS), e.g. 0 or 0,1")
    ir.add_argument("--optimized", action="store_true",
                    help="print the IR after the optimization pipeline "
                         "(fg.jit(...).lower(...).ir)")
    ir.add_argument("--dot", metavar="OUT",
                    help="also draw the IR: OUT.dot writes DOT source, OUT.svg / OUT.png / "
                         "OUT.pdf render it with Graphviz")
    ir.set_defaults(run=cmd_ir)
    demo = sub.add_parser("demo", help="run examples/train_mlp.py", formatter_class=fmt,
                          description="Run examples/train_mlp.py from a source checkout: "
                                      "train a small MLP eagerly and compiled, and compare.",
                          epilog=f"example:\n  {PROG} demo")
    demo.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the script")
    demo.set_defaults(run=cmd_demo)
    return parser


def main(argv=None) -> int:
    parser = make_parser()
    _one_line_errors(parser)
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help()
        return 2
    try:
        return ns.run(ns)
    except UsageError as e:
        print(f"fusegrad: error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"fusegrad: error: {e}", file=sys.stderr)
        return 1


def _one_line_errors(parser):
    """argparse's own usage errors as one line (exit 2), for every subparser."""
    def error(message, _parser=parser):
        print(f"fusegrad: error: {message} (see {_parser.prog} --help)", file=sys.stderr)
        sys.exit(2)
    parser.error = error
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _one_line_errors(sub)


if __name__ == "__main__":
    sys.exit(main())
