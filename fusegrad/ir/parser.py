"""Reads the text IR (printer.py) back into a Function; `str(parse(str(fn))) == str(fn)`.

The parser is line based: a header line `func @name(%x: f64[4]) -> (f64[]) {`, one op per line,
`return ...` and `}`. A param written `@name` refers to a nested function, which follows its
op's line as a function of its own (indentation is not significant), in the order of the
references. Each op goes through `Builder.add`, so types are re-inferred by the shape
rules and must match the printed ones. Every error is a ParseError that names the line.
docs/ir.md has the grammar.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

import numpy as np

from .core import Builder, Function, Value
from .primitives import PRIMITIVES
from .types import NP_DTYPES, TensorType
from .verify import rule_error


class ParseError(ValueError):
    """Bad IR text; `.line` is the 1-based line number."""

    def __init__(self, message: str, line: int, text: str | None = None):
        self.message, self.line = message, line
        shown = f"\n    {text.strip()}" if text and text.strip() else ""
        super().__init__(f"line {line}: {message}{shown}")


class Token(NamedTuple):
    kind: str    # value, func, str, num, ident, opaque, punct
    text: str
    col: int


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<func>@(?:[A-Za-z_][A-Za-z0-9_.]*|"(?:[^"\\]|\\.)*"))
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<opaque><opaque[^>]*>)
  | (?P<punct>->|[-()\[\]{},=:])
""", re.VERBOSE)

_END = Token("end", "end of line", -1)


class _Line:
    """The tokens of one line, a cursor over them, and its trailing comment."""

    def __init__(self, number: int, text: str):
        self.number, self.text = number, text
        self.tokens: list[Token] = []
        self.comment: str | None = None
        self.pos = 0
        col = 0
        while col < len(text):
            if text[col] == "#":
                self.comment = text[col + 1:]
                break
            m = _TOKEN.match(text, col)
            if m is None:
                self.error(f"unexpected character {text[col]!r} at column {col + 1}")
            if m.lastgroup != "ws":
                self.tokens.append(Token(m.lastgroup, m.group(), col))
            col = m.end()

    def error(self, message: str):
        raise ParseError(message, self.number, self.text)

    def peek(self) -> Token:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else _END

    def take(self) -> Token:
        tok = self.peek()
        if tok is _END:
            self.error("unexpected end of line")
        self.pos += 1
        return tok

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in ("punct", "ident"):
            self.pos += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> Token:
        tok = self.peek()
        if tok.text != text or tok.kind not in ("punct", "ident"):
            self.error(f"expected {text!r}{what} but found {tok.text!r}")
        return self.take()

    def expect_kind(self, kind: str, what: str) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            self.error(f"expected {what} but found {tok.text!r}")
        return self.take()

    def done(self):
        if self.peek() is not _END:
            self.error(f"unexpected {self.peek().text!r}")

    def separated(self, item, close: str | None = None) -> list:
        """`item (, item)*`; with `close`, also the empty list when the next token is close."""
        if close is not None and self.peek().text == close:
            return []
        items = [item()]
        while self.accept(","):
            items.append(item())
        return items


def parse(text: str) -> Function:
    """Parse the text IR of one function; raises ParseError naming the line."""
    lines = [_Line(i, t) for i, t in enumerate(text.split("\n"), 1)]
    lines = [line for line in lines if line.tokens]
    if not lines:
        raise ParseError("expected 'func @name(...) -> (...) {' but the text is empty", 1)
    cursor = _Cursor(lines)
    fn = _function(cursor)
    if cursor.pos < len(lines):
        lines[cursor.pos].error("text after the end of the function")
    return fn


class _Cursor:
    """The lines of the text and the next one to read; nested functions read on from it."""

    def __init__(self, lines: list[_Line]):
        self.lines, self.pos = lines, 0

    def next(self) -> _Line | None:
        if self.pos == len(self.lines):
            return None
        self.pos += 1
        return self.lines[self.pos - 1]


def _function(cursor: _Cursor) -> Function:
    """One function from its header line to its closing brace (nested ones recursively)."""
    state = _State()
    result_types = _header(cursor.next(), state)
    while (line := cursor.next()) is not None:
        if line.peek().text == "}":
            line.take()
            line.done()
            if state.results is None:
                line.error("the function ends without a 'return'")
            return state.builder.build(state.results)
        if state.results is not None:
            line.error("nothing may follow 'return' but '}'")
        if line.peek().text == "return" and line.peek().kind == "ident":
            _return(line, state, result_types)
        else:
            _op(line, state, cursor)
    cursor.lines[-1].error("missing '}' at the end of the function")


class _Ref:
    """A param written `@name`: the nested function printed after the op's line."""

    def __init__(self, name: str):
        self.name = name


class _State:
    def __init__(self):
        self.builder = Builder()
        self.env: dict[str, Value] = {}
        self.results: list[Value] | None = None

    def lookup(self, line: _Line) -> Value:
        name = line.expect_kind("value", "a %value").text
        if name not in self.env:
            line.error(f"undefined value {name}")
        return self.env[name]

    def define(self, line: _Line, name: str, value: Value):
        if name in self.env:
            line.error(f"redefinition of {name}")
        self.env[name] = value


def _header(line: _Line, state: _State) -> list[TensorType]:
    line.expect("func", " (a function starts with 'func @name(...)')")
    name_tok = line.expect_kind("func", "a function name like @loss")
    name = name_tok.text[1:]
    state.builder.name = _string(line, name) if name.startswith('"') else name
    line.expect("(")

    def param():
        index = len(state.builder.params)
        name = line.expect_kind("value", "a parameter like %x").text
        line.expect(":")
        auto = name == f"%arg{index}"
        value = state.builder.param(_type(line), hint=None if auto else name[1:])
        state.define(line, name, value)
    line.separated(param, close=")")
    line.expect(")")
    line.expect("->")
    if line.accept("("):
        types = line.separated(lambda: _type(line), close=")")
        line.expect(")")
    else:
        types = [_type(line)]
    line.expect("{")
    line.done()
    return types


def _return(line: _Line, state: _State, result_types: list[TensorType]):
    line.take()
    results = [] if line.peek() is _END else line.separated(lambda: state.lookup(line))
    line.done()
    if len(results) != len(result_types):
        line.error(f"returns {len(results)} values but the header declares "
                   f"{len(result_types)}")
    for k, (value, declared) in enumerate(zip(results, result_types, strict=True)):
        if value.type != declared:
            line.error(f"result {k} has type {value.type} but the header declares {declared}")
    state.results = results


def _op(line: _Line, state: _State, cursor: _Cursor):
    names = []
    if line.peek().kind == "value":
        names = line.separated(lambda: line.expect_kind("value", "a %value").text)
        line.expect("=")
    prim = line.expect_kind("ident", "a primitive name").text
    if prim not in PRIMITIVES:
        line.error(f"unknown primitive {prim!r}")
    inputs = line.separated(lambda: state.lookup(line)) if line.peek().kind == "value" else []
    params = _params(line) if line.accept("{") else {}
    types = line.separated(lambda: _type(line)) if line.accept(":") else []
    line.done()
    if len(types) != len(names):
        line.error(f"{len(names)} results are named but {len(types)} types are written")
    loc, note = _comment(line)
    for key, value in params.items():
        if isinstance(value, _Ref):
            params[key] = _region(line, cursor, key, value.name)
    try:
        outputs = state.builder.add(prim, inputs, params, loc=loc, note=note)
    except Exception as e:  # noqa: BLE001 - ShapeError, TypeError for bad params, or worse
        message = f"{prim} rejects its operands or params: {rule_error(prim, e)}"
        raise ParseError(message, line.number, line.text) from None
    if len(outputs) != len(names):
        line.error(f"{prim} produces {len(outputs)} values but the line names {len(names)}")
    for name, value, written in zip(names, outputs, types, strict=True):
        if value.type != written:
            line.error(f"type mismatch for {name}: written {written} but {prim} infers "
                       f"{value.type}")
        state.define(line, name, value)


def _region(line: _Line, cursor: _Cursor, key: str, name: str) -> Function:
    """The function a param refers to: it must follow, in the order of the references."""
    if cursor.pos == len(cursor.lines):
        line.error(f"param {key}=@{name} refers to a function, but no 'func @{name}(...)' "
                   f"follows")
    header = cursor.lines[cursor.pos]
    fn = _function(cursor)
    if fn.name != name:
        header.error(f"expected the function @{name} of param {key} here, found @{fn.name}")
    return fn


def _type(line: _Line) -> TensorType:
    tok = line.expect_kind("ident", "a type like f64[2,3]")
    if tok.text not in NP_DTYPES:
        line.error(f"unknown dtype {tok.text!r}; expected one of {', '.join(NP_DTYPES)}")
    return TensorType(tok.text, _dims(line))


def _dims(line: _Line) -> tuple[int, ...]:
    line.expect("[", " (types are written with a shape, like f64[] or f64[2,3])")

    def dim():
        tok = line.expect_kind("num", "a dimension")
        if not tok.text.isdigit():
            line.error(f"dimension {tok.text} is not a non-negative integer")
        return int(tok.text)
    dims = line.separated(dim, close="]")
    line.expect("]")
    return tuple(dims)


def _params(line: _Line) -> dict:
    params = {}

    def item():
        tok = line.take()
        if tok.kind not in ("ident", "str"):
            line.error(f"expected a param name but found {tok.text!r}")
        key = _string(line, tok.text) if tok.kind == "str" else tok.text
        if key in params:
            line.error(f"param {key!r} is given twice")
        line.expect("=")
        if line.peek().kind == "func":
            name = line.take().text[1:]
            params[key] = _Ref(_string(line, name) if name.startswith('"') else name)
        else:
            params[key] = _literal(line)
    line.separated(item, close="}")
    line.expect("}")
    return params


_WORDS = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}


def _literal(line: _Line):
    tok = line.take()
    if tok.kind == "num":
        return _number(tok.text)
    if tok.kind == "str":
        return _string(line, tok.text)
    if tok.text == "-" and tok.kind == "punct":
        nxt = line.take()
        if nxt.kind == "num":
            return -_number(nxt.text)
        if nxt.text in ("inf", "nan"):
            return -_WORDS[nxt.text]
        line.error(f"expected a number after '-' but found {nxt.text!r}")
    if tok.kind == "ident" and tok.text in _WORDS:
        return _WORDS[tok.text]
    if tok.kind == "ident" and tok.text == "array":
        return _array(line)
    if tok.kind == "ident" and tok.text in NP_DTYPES:
        return TensorType(tok.text, _dims(line))
    if tok.text == "(" and tok.kind == "punct":
        return _tuple(line)
    if tok.text == "[" and tok.kind == "punct":    # lists read as tuples, as they print
        items = line.separated(lambda: _literal(line), close="]")
        line.expect("]")
        return tuple(items)
    if tok.kind == "opaque":
        line.error(f"param value {tok.text} is a Python object the text form cannot carry")
    if tok.kind == "func":
        line.error(f"a function reference ({tok.text}) may only be a param's whole value")
    hint = f" (strings are quoted: \"{tok.text}\")" if tok.kind == "ident" else ""
    line.error(f"unexpected {tok.text!r} in a param value{hint}")


def _number(text: str):
    return float(text) if any(c in text for c in ".eE") else int(text)


def _tuple(line: _Line):
    if line.accept(")"):
        return ()
    items = [_literal(line)]
    trailing = False
    while line.accept(","):
        trailing = True
        if line.peek().text == ")":
            break
        items.append(_literal(line))
        trailing = False
    line.expect(")")
    return items[0] if len(items) == 1 and not trailing else tuple(items)


def _array(line: _Line) -> np.ndarray:
    """`array(<nested list or scalar>, dtype)` or `array(<nested>, dtype[shape])`."""
    line.expect("(")
    data = _nested(line)
    line.expect(",")
    dtype = line.expect_kind("ident", "a dtype").text
    if dtype not in NP_DTYPES:
        line.error(f"unknown dtype {dtype!r} in array")
    shape = _dims(line) if line.peek().text == "[" else None
    line.expect(")")
    _check_elements(line, data, dtype)
    try:
        array = np.array(data, dtype=NP_DTYPES[dtype])
        return array if shape is None else array.reshape(shape)
    except (ValueError, OverflowError) as e:
        line.error(f"bad array literal: {e}")


def _nested(line: _Line):
    if not line.accept("["):
        return _literal(line)
    items = line.separated(lambda: _nested(line), close="]")
    line.expect("]")
    return items


def _check_elements(line: _Line, data, dtype: str):
    leaves = [data]
    while leaves:
        x = leaves.pop()
        if isinstance(x, list):
            leaves.extend(x)
            continue
        ok = {"bool": isinstance(x, bool), "i64": isinstance(x, int) and not isinstance(x, bool)
              }.get(dtype, isinstance(x, (int, float)) and not isinstance(x, bool))
        if not ok:
            line.error(f"array element {x!r} is not a {dtype} literal")


def _comment(line: _Line) -> tuple[str | None, str | None]:
    """`# loc  note`: loc is a bare word run, a JSON string or `-` (none); note is the rest."""
    text = line.comment
    if text is None:
        return None, None
    text = text.removeprefix(" ")
    if text.startswith('"'):
        loc, end = _json_prefix(line, text)
        rest = text[end:]
    else:
        cut = text.find("  ")
        loc, rest = (text, "") if cut < 0 else (text[:cut], text[cut:])
        loc = None if loc in ("-", "") else loc
    if not rest:
        return loc, None
    if not rest.startswith("  "):
        line.error("expected two spaces between the location and the note in the comment")
    note = rest[2:]
    if note.startswith('"'):
        note, end = _json_prefix(line, note)
        if rest[2 + end:].strip():
            line.error("unexpected text after the quoted note")
    return loc, note


def _string(line: _Line, text: str) -> str:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        line.error(f"bad string literal {text}: {e}")


def _json_prefix(line: _Line, text: str):
    try:
        return json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        line.error(f"bad quoted string in the comment: {e}")
