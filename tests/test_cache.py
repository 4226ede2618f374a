"""The disk cache of compiled code: a new process with a warm cache loads instead of compiling,
and no change to the user's code, its globals, its helpers or the library versions is ever
served a stale kernel; broken cache files are recompiled; racing processes and threads agree.

Each scenario runs `python run.py` in a fresh process with FUSEGRAD_LOG=compile and its own
FUSEGRAD_CACHE_DIR, and reads the printed result and the log lines. FUSEGRAD_RENDERER=numba:
the disk cache is the Numba rendering's (the LLVM rendering compiles in milliseconds, in
memory).
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import fusegrad as fg

REPO = str(Path(__file__).resolve().parents[1])

MODEL = '''import numpy as np
from helper import scale

SCALE = 2.0
W = np.arange(5.0)


def f(x):
    return np.sum(scale(x) * SCALE + W * x)
'''
HELPER = '''def scale(x):
    return x * x
'''
RUN = '''import json, sys
import numpy as np
import fusegrad as fg
{setup}
from model import f
print(json.dumps(float(fg.jit(f, backend="numba")(np.arange(5.0) / 4))))
'''


def expected(scale=lambda x: x * x, SCALE=2.0, W=None):
    x = np.arange(5.0) / 4
    W = np.arange(5.0) if W is None else W
    return float(np.sum(scale(x) * SCALE + W * x))


def project(folder: Path, model=MODEL, helper=HELPER, setup="") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(model)
    (folder / "helper.py").write_text(helper)
    (folder / "run.py").write_text(RUN.format(setup=setup))
    return folder


def start(folder: Path, cache: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FUSEGRAD_BACKEND", "FUSEGRAD_DEBUG", "PYTHONDONTWRITEBYTECODE")}
    env.update(FUSEGRAD_CACHE_DIR=str(cache), FUSEGRAD_LOG="compile", FUSEGRAD_RENDERER="numba",
               PYTHONPATH=os.pathsep.join([str(folder), REPO]), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.Popen([sys.executable, "run.py"], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> tuple[float, str]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def run(folder: Path, cache: Path) -> tuple[float, str]:
    return finish(start(folder, cache))


def compiled(log: str) -> bool:
    return "compile f: " in log and "(cache miss)" in log


def loaded(log: str) -> bool:
    return "load f from disk cache" in log and "compile f:" not in log


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A project and a cache that already holds its compiled code."""
    root = tmp_path_factory.mktemp("warm")
    folder, cache = project(root / "project"), root / "cache"
    value, log = run(folder, cache)
    assert value == pytest.approx(expected()) and compiled(log), log
    return folder, cache


def copy_of(warm, tmp_path) -> tuple[Path, Path]:
    cache = warm[1]
    shutil.copytree(cache, tmp_path / "cache")
    return project(tmp_path / "project"), tmp_path / "cache"


def test_a_new_process_with_a_warm_cache_does_not_compile(warm):
    value, log = run(*warm)
    assert value == pytest.approx(expected())
    assert loaded(log) and "trace f: first call" in log, log


def test_corrupt_cache_files_are_recompiled(warm, tmp_path):
    folder, cache = copy_of(warm, tmp_path)
    broken = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.suffix == ".nbi" for p in broken) and any(p.suffix == ".py" for p in broken)
    for p in broken:
        p.write_bytes(b"\x80garbage" * 3)
    value, log = run(folder, cache)
    assert value == pytest.approx(expected()) and compiled(log), log
    value, log = run(folder, cache)             # and the repaired cache is warm again
    assert value == pytest.approx(expected()) and loaded(log), log


def test_edited_code_globals_and_helpers_are_never_served_stale_kernels(warm, tmp_path):
    folder, cache = copy_of(warm, tmp_path)
    (folder / "model.py").write_text(MODEL.replace("* SCALE + W * x", "* SCALE - W * x"))
    value, log = run(folder, cache)
    x = np.arange(5.0) / 4
    assert value == pytest.approx(float(np.sum(x * x * 2.0 - np.arange(5.0) * x)))
    assert compiled(log), log

    (folder / "model.py").write_text(MODEL.replace("SCALE = 2.0", "SCALE = 5.0"))
    value, log = run(folder, cache)
    assert value == pytest.approx(expected(SCALE=5.0)) and compiled(log), log

    (folder / "model.py").write_text(MODEL.replace("W = np.arange(5.0)", "W = np.arange(5.0) + 3"))
    value, log = run(folder, cache)             # constant arrays are arguments: same code
    assert value == pytest.approx(expected(W=np.arange(5.0) + 3)) and loaded(log), log

    (folder / "helper.py").write_text("def scale(x):\n    return x * x * x\n")
    value, log = run(folder, cache)
    assert value == pytest.approx(expected(scale=lambda x: x ** 3, W=np.arange(5.0) + 3))
    assert compiled(log), log


def test_a_version_bump_is_a_cache_miss(warm, tmp_path):
    folder, cache = copy_of(warm, tmp_path)
    project(folder, setup="import fusegrad.version; fusegrad.version.__version__ = '99.0-test'")
    value, log = run(folder, cache)
    assert value == pytest.approx(expected()) and compiled(log), log


def test_four_processes_compiling_at_once_agree(tmp_path):
    folder, cache = project(tmp_path / "project"), tmp_path / "cache"
    procs = [start(folder, cache) for _ in range(4)]
    for proc in procs:
        value, log = finish(proc)
        assert value == pytest.approx(expected()), log
    assert len(list(cache.glob("fg_*.py"))) == 1 and not list(cache.glob(".*.tmp"))
    value, log = run(folder, cache)
    assert value == pytest.approx(expected()) and loaded(log), log


def test_eight_threads_calling_a_new_function_at_once_agree():
    def f(x):
        return np.tanh(x) * 3.25 + np.sum(x * x)
    jitted = fg.jit(f, backend="numba")
    x = np.linspace(-1.0, 1.0, 33)
    barrier, results = threading.Barrier(8), [None] * 8

    def call(i):
        barrier.wait()
        results[i] = jitted(x)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], fg.jit(f, backend="interp")(x), rtol=1e-13)
    assert jitted.cache_size == 1
