"""Every example script runs and prints what it promises."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(   # this checkout's fusegrad
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_micrograd_neuron_prints_the_seed_numbers():
    out = run("examples/micrograd_neuron.py")
    for expected in (
        "L = 10.5; a.grad 4.5, b.grad 3.0, c.grad 1.5, d.grad 7.0",
        "z=1.2, loss=0.02; dw1=0.2, dw2=0.4, db=0.2, dx1=0.1, dx2=0.06",
        "y = 0.1974; dy/dw1 = 1.4416, dy/dw2 = -1.9221, dy/db = 0.9610, dy/dx1 = 0.5766",
        "df/da = 7.0", "df/da = 8.0",
        "= -0.269121; dL/da -1.263999, dL/db 1.742557, dL/dc 1.060796",
        "f' = 0.786448, f'' = -0.726862, f''' = -0.565209",
        "[[-4.0, 3.0], [3.0, 0.0]]",
        "[-4.0, 3.0]",
    ):
        assert expected in out


def test_train_mlp_reaches_its_accuracy_and_writes_the_ir(tmp_path):
    out = run("examples/train_mlp.py", "--out", str(tmp_path))
    assert "reached the target" in out
    assert "eager engine" in out and "time per step" in out
    text = (tmp_path / "grad_ir.txt").read_text()
    assert "func @" in text and "vjp[" in text
    dot = (tmp_path / "grad_ir.dot").read_text()
    assert dot.startswith("digraph") and "subgraph cluster_0" in dot   # kernels as clusters
    if shutil.which("dot") is None:     # CI installs Graphviz, so rendering stays tested there
        assert "(no SVG: rendering needs the Graphviz 'dot' program" in out
        pytest.skip("Graphviz's dot is not on PATH: the .dot text was checked, the SVG was not")
    assert (tmp_path / "grad_ir.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_dask_regression_trains_on_lazily_generated_chunks():
    pytest.importorskip("dask.array")
    out = run("examples/dask_regression.py", "--n", "60000", "--chunk", "7000", "--iters", "40")
    assert "60,000 examples x 8 features" in out and "9 chunks of 7,000 rows" in out
    losses = [float(line.split("loss")[1].split()[0]) for line in out.splitlines()
              if line.startswith("iteration")]
    assert len(losses) >= 5 and losses[0] == round(np.log(2.0), 6)   # w = 0: log 2
    assert all(b <= a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.4
    assert "CONVERGENCE" in out
    error = float(out.split("largest |weight - true weight|:")[1].split()[0])
    assert error < 0.1              # 60 000 draws pin 9 weights to a few hundredths
