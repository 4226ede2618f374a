"""docs/numpy.md lists every NumPy and SciPy name fusegrad handles, and is current.

Like tests/test_registry.py for docs/ir.md: the page is generated from the HANDLED tables by
fusegrad/numpy/docs.py, and a stale page fails here with the command that regenerates it.
"""

import sys
import types

import numpy as np
import pytest
import scipy.special

import fusegrad
import fusegrad.numpy as fnp
from fusegrad.numpy import docs

STALE = f"docs/numpy.md is stale: run {docs.COMMAND}"


def test_the_page_is_current():
    assert docs.DOC_PATH.read_text() == docs.page(), STALE


def test_every_handled_key_is_listed():
    text = docs.DOC_PATH.read_text()
    keys = list(fnp.HANDLED_UFUNCS) + list(fnp.HANDLED_FUNCTIONS)
    missing = [docs.display(docs.public_name(k)) for k in keys
               if f"| `{docs.display(docs.public_name(k))}` |" not in text]
    missing += [name for name, _, _ in docs.scipy_rows() if f"| `{name}` |" not in text]
    assert not missing, f"{STALE} (missing {missing})"
    rows = sum(line.startswith("| `np.") or line.startswith("| `scipy.")
               for line in text.splitlines())
    assert rows >= len(keys)


def test_public_names_are_the_names_users_write():
    assert docs.public_name(np.tanh) == "numpy.tanh"
    assert docs.public_name(np.linalg.norm) == "numpy.linalg.norm"
    assert docs.public_name(np.sum) == "numpy.sum"
    assert docs.public_name(scipy.special.expit) == "scipy.special.expit"       # a ufunc
    assert docs.public_name(scipy.special.logsumexp) == "scipy.special.logsumexp"
    assert docs.public_name("scipy.stats.norm.logpdf") == "scipy.stats.norm.logpdf"
    assert docs.display("numpy.linalg.norm") == "np.linalg.norm"
    assert docs.display("scipy.special.erf") == "scipy.special.erf"
    with pytest.raises(ValueError, match="no public NumPy or SciPy name"):
        docs.public_name(lambda x: x)


def test_unsupported_names_drop_out_once_handled():
    before = "\n".join(docs._unsupported_table(set()))
    assert "`np.unique`" in before and "`np.linalg.eigh` (not supported yet)" in before
    after = "\n".join(docs._unsupported_table({"np.unique", "np.linalg.eigh"}))
    assert "`np.unique`" not in after and "`np.nonzero`" in after
    assert "`np.linalg.eigh` for" not in before and "`np.linalg.eigh` /" in after
    # the page's table never lists a handled name in its first column
    table = docs.page().split("## Deliberately unsupported")[1]
    first = " ".join(row.split(" | ")[0] for row in table.splitlines() if row.startswith("| "))
    assert not {n for n in docs.handled_names() if f"`{n}`" in first}


def _no_fusegrad_scipy(monkeypatch):
    monkeypatch.delattr(fusegrad, "scipy", raising=False)
    monkeypatch.setitem(sys.modules, "fusegrad.scipy", None)     # import raises ImportError


def test_the_scipy_section_without_fusegrad_scipy(monkeypatch):
    _no_fusegrad_scipy(monkeypatch)
    assert docs.scipy_rows() == []
    assert "None yet: fusegrad.scipy handles no SciPy names." in docs.page()


def test_the_scipy_section_from_covered_names(monkeypatch):
    _no_fusegrad_scipy(monkeypatch)
    fake = types.ModuleType("fusegrad.scipy")
    fake.covered_names = lambda: ["scipy.special.logsumexp", scipy.special.expit]
    monkeypatch.setitem(sys.modules, "fusegrad.scipy", fake)
    monkeypatch.setattr(fusegrad, "scipy", fake, raising=False)
    assert docs.scipy_rows() == [("scipy.special.expit", "", ""),
                                 ("scipy.special.logsumexp", "", "")]
    page = docs.page()
    assert "| `scipy.special.logsumexp` |  |  |" in page and "2 SciPy names" in page


def test_the_command_line_prints_the_page(capsys):
    docs.main([])
    assert capsys.readouterr().out == docs.page()
