"""`python -m fusegrad`, run in a subprocess: the IR it prints, its files, and its errors.

The main flows run as real subprocesses; the long table of usage errors calls main() in this
process (the same code, without a second of interpreter start-up per row).
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fusegrad as fg

ROOT = Path(__file__).resolve().parent.parent
MODEL = "examples/model.py"
LOSS_ARGS = ["--arg", "f64[4]", "--arg", "f64[4]", "--arg", "f64[4]"]
MLP_PARAMS = "{w1: f64[3,8], b1: f64[8], w2: f64[8,2], b2: f64[2]}"


def cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for key in ("FUSEGRAD_DEBUG", "FUSEGRAD_BACKEND", "FUSEGRAD_LOG"):
        env.pop(key, None)
    return subprocess.run([sys.executable, "-m", "fusegrad", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_in_process(args, capsys, monkeypatch, cwd=ROOT):
    from fusegrad.__main__ import main
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code
    finally:
        for name in ("model", "broken", "user"):
            sys.modules.pop(name, None)
    out, err = capsys.readouterr()
    return Result(code, out, err)


# The subprocess commands, all started together when the first test needs one.
# `{tmp}` in an argument or as the cwd stands for a scratch folder holding the files below.
COMMANDS: dict = {}
FILES = {
    "user.py": "import numpy as np\n\n\ndef scale(x, n, mode):\n"
               "    return x * n if mode == 'mul' else x + n\n",
}
BROKEN = "import numpy as np\nraise RuntimeError('boom')\n"


def command(name, *args, cwd=None):
    COMMANDS[name] = (args, cwd)
    return name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    for name, text in FILES.items():
        (tmp / name).write_text(text)

    def start(args, cwd):
        return cli(*(a.replace("{tmp}", str(tmp)) for a in args),
                   cwd=tmp if cwd == "{tmp}" else ROOT)
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool:
        futures = {name: pool.submit(start, *spec) for name, spec in COMMANDS.items()}
    results = {name: future.result() for name, future in futures.items()}
    results["tmp"] = tmp
    return results


def model_line(text):
    """The line number of `text` in examples/model.py."""
    lines = (ROOT / MODEL).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def assert_usage_error(result, *words):
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusegrad: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


HELP = command("help", "--help")


def test_help_explains_every_subcommand_with_examples(runs, capsys, monkeypatch):
    result = runs[HELP]
    assert result.returncode == 0
    for word in ("ir", "demo", "--grad", "--optimized", "--dot", "examples:",
                 "python -m fusegrad ir examples/model.py:loss --arg f64[4]"):
        assert word in result.stdout, word
    result = run_in_process(["ir", "--help"], capsys, monkeypatch)
    assert result.returncode == 0
    for word in ("FILE.py:FUNCTION", "--arg", "--static", "--grad", "--optimized", "--dot",
                 "f64[2,3]", "bool[4]", "{name: T, ...}", "examples:"):
        assert word in result.stdout, word
    assert "train_mlp.py" in run_in_process(["demo", "--help"], capsys, monkeypatch).stdout


LOSS = command("loss", "ir", f"{MODEL}:loss", *LOSS_ARGS)


def test_ir_of_loss(runs):
    result = runs[LOSS]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("func @loss(%x: f64[4], %w: f64[4], %b: f64[4]) -> (f64[]) {\n")
    tanh_line = model_line("np.tanh(x * w + b)")
    assert re.search(rf"= mul %x, %w : f64\[4\] +# model\.py:{tanh_line}\n", out)
    assert re.search(rf"= tanh %\d+ : f64\[4\] +# model\.py:{tanh_line}\n", out)
    assert re.search(rf"= exp %\d+ : f64\[4\] +# model\.py:{model_line('np.exp(-x)')}\n", out)
    assert re.search(rf"= reduce_sum %\d+ {{axes=\(0,\)}} : f64\[\] +# model\.py:"
                     rf"{model_line('np.sum(y)')}\n", out)
    assert out.rstrip().endswith("}")
    assert str(fg.ir.parse(out)) == out.rstrip("\n")        # the text reads back


def test_ir_types_f32_and_0d(capsys, monkeypatch):
    result = run_in_process(["ir", f"{MODEL}:loss", "--arg", "f32[2,3]", "--arg", "f32[]",
                             "--arg", "f32[3]"], capsys, monkeypatch)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        "func @loss(%x: f32[2,3], %w: f32[], %b: f32[3]) -> (f32[]) {")
    assert "broadcast_in_dim %w {dims=(), shape=(2, 3)} : f32[2,3]" in result.stdout


MLP = command("mlp", "ir", f"{MODEL}:mlp_loss", "--arg", MLP_PARAMS, "--arg", "f64[5,3]",
              "--arg", "f64[5,2]")


def test_ir_with_pytree_argument(runs):
    result = runs[MLP]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("func @mlp_loss(%params.b1: f64[8], %params.b2: f64[2], "
                          "%params.w1: f64[3,8], %params.w2: f64[8,2], %x: f64[5,3], "
                          "%y: f64[5,2]) -> (f64[]) {")
    assert re.search(r"= matmul %x, %params\.w1 : f64\[5,8\] +# model\.py:"
                     rf"{model_line('x @ params')}\n", out)


STATIC = command("static", "ir", "user.py:scale", "--arg", "i64[3]", "--static", "1=2.5",
                 "--static", "2=mul", cwd="{tmp}")


def test_static_arguments(runs):
    result = runs[STATIC]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("func @scale(%x: i64[3]) -> (f64[3]) {")
    assert 'full {dtype="f64", shape=(3,), value=2.5} : f64[3]' in out
    assert re.search(r"= mul %\d+, %\d+ : f64\[3\] +# user\.py:5\n", out)


OPTIMIZED = command("optimized", "ir", f"{MODEL}:loss", *LOSS_ARGS, "--optimized")


def test_optimized_ir(runs):
    result = runs[OPTIMIZED]
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("func @loss(%x: f64[4], %w: f64[4], %b: f64[4]) -> (f64[])")
    fn = fg.ir.parse(result.stdout)
    assert fn.result_types == (fg.ir.TensorType("f64", ()),)
    assert "tanh" in result.stdout


GRAD = command("grad", "ir", f"{MODEL}:loss", *LOSS_ARGS, "--grad", "0,1")


def test_grad_ir(runs):
    result = runs[GRAD]
    if importlib.util.find_spec("fusegrad.transforms") is None and not hasattr(fg, "grad"):
        assert result.returncode == 1
        assert "fusegrad.transforms.grad" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert header.endswith("-> (f64[4], f64[4]) {"), header


DOT = command("dot", "ir", f"{MODEL}:loss", *LOSS_ARGS, "--dot", "{tmp}/loss.dot")
SVG = command("svg", "ir", f"{MODEL}:loss", *LOSS_ARGS, "--dot", "{tmp}/loss.svg")


def test_dot_file(runs):
    result = runs[DOT]
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("func @loss(")
    out = runs["tmp"] / "loss.dot"
    text = out.read_text()
    assert text.lstrip().startswith("digraph") and "tanh" in text and "f64[4]" in text
    assert f"wrote {out}" in result.stderr


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot program")
def test_dot_svg(runs):
    assert runs[SVG].returncode == 0, runs[SVG].stderr
    assert "<svg" in (runs["tmp"] / "loss.svg").read_text()


USAGE_ERRORS = [
    (["ir", MODEL], ["expected FILE.py:FUNCTION", "examples/model.py"]),
    (["ir", "examples/nope.py:loss"], ["no such file: examples/nope.py"]),
    (["ir", f"{MODEL}:nope"], ["has no function 'nope'"]),
    (["ir", f"{MODEL}:np"], ["not a function"]),
    (["ir", f"{MODEL}:loss", "--arg", "f65[3]"], ["bad argument type 'f65[3]'", "f64[2,3]"]),
    (["ir", f"{MODEL}:loss", "--arg", "f64[3"], ["bad argument type 'f64[3'"]),
    (["ir", f"{MODEL}:loss", "--arg", "f64[x]"], ["dimensions must be integers"]),
    (["ir", f"{MODEL}:loss", "--arg", "{w f64[2]}"], ["expected ':'"]),
    (["ir", f"{MODEL}:loss", "--arg", "[f64[2] f64[2]]"], ["expected ',' or ']'"]),
    (["ir", f"{MODEL}:loss", "--arg", "f64[2]", "--static", "x=1"], ["bad --static 'x=1'"]),
    (["ir", f"{MODEL}:loss", "--arg", "f64[2]", "--static", "5=1"], ["out of range"]),
    (["ir", f"{MODEL}:loss", *LOSS_ARGS, "--grad", "a"], ["bad --grad 'a'"]),
    (["ir", f"{MODEL}:loss", *LOSS_ARGS, "--grad", "3"], ["argument 3"]),
    (["ir", f"{MODEL}:loss", *LOSS_ARGS, "--dot", "out.txt"], [".dot, .svg, .png or .pdf"]),
    (["ir", f"{MODEL}:loss", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["nosuch"], ["invalid choice: 'nosuch'"]),
]
IN_SUBPROCESS = (0, 4)           # the rest run in-process: starting Python costs a second
for _i in IN_SUBPROCESS:
    command(f"usage {_i}", *USAGE_ERRORS[_i][0])


@pytest.mark.parametrize("i", range(len(USAGE_ERRORS)),
                         ids=[" ".join(args[1:] or args) for args, _ in USAGE_ERRORS])
def test_usage_errors_are_one_line_exit_2(runs, i, capsys, monkeypatch):
    args, words = USAGE_ERRORS[i]
    result = runs[f"usage {i}"] if i in IN_SUBPROCESS else \
        run_in_process(args, capsys, monkeypatch)
    assert_usage_error(result, *words)


TRACE_ERROR = command("trace error", "ir", f"{MODEL}:loss", "--arg", "f64[4]", "--arg",
                      "f64[3]", "--arg", "f64[4]")


def test_errors_while_tracing_are_one_line_exit_1(runs):
    result = runs[TRACE_ERROR]
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "ShapeError" in lines[0] and "[4] and [3]" in lines[0]
    assert f"model.py:{model_line('np.tanh(x * w + b)')}" in lines[0]


def test_errors_while_loading_are_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken.py").write_text(BROKEN)
    result = run_in_process(["ir", "broken.py:f", "--arg", "f64[2]"], capsys, monkeypatch,
                            cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == \
        "fusegrad: error: loading broken.py failed: RuntimeError: boom"


HAS_DEMO = (ROOT / "examples" / "train_mlp.py").exists()
DEMO = None if HAS_DEMO else command("demo", "demo", cwd="{tmp}")


@pytest.mark.skipif(HAS_DEMO, reason="examples/train_mlp.py exists and its own test runs it")
def test_demo_says_when_the_script_is_missing(runs):
    result = runs[DEMO]
    assert result.returncode == 1
    assert "examples/train_mlp.py is not there" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_subcommand_prints_help(capsys, monkeypatch):
    result = run_in_process([], capsys, monkeypatch)
    assert result.returncode == 2
    assert "usage:" in result.stdout and "ir" in result.stdout
