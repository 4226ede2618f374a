"""The registry of primitives is complete: each test walks every entry and names the
primitives that lack something (an implementation, a derivative, a code path, a docs row, a test
case), so forgetting one when adding a primitive fails here with its name."""

from pathlib import Path

import numpy as np
import pytest
from domains import Domains, case_prim, primitive_cases

from fusegrad.codegen.kernel_ir import cover
from fusegrad.formulas import NON_DIFFERENTIABLE, vjp_rules
from fusegrad.ir import docs
from fusegrad.ir.evaluate import apply
from fusegrad.ir.primitives import PRIMITIVES
from fusegrad.ir.registry import CATEGORIES, Doc, Primitive, define
from fusegrad.ir.types import TensorType

def _missing(predicate) -> list:
    """The primitives, by name, for which predicate(entry) is false."""
    return sorted(p.name for p in PRIMITIVES.values() if not predicate(p))


def test_every_entry_is_well_formed():
    assert _missing(lambda p: p.category in CATEGORIES) == []
    assert _missing(lambda p: callable(p.impl) and callable(p.shape_rule)) == []


def test_every_primitive_has_a_vjp_rule_or_is_non_differentiable():
    assert _missing(lambda p: (p.name in vjp_rules) != (p.name in NON_DIFFERENTIABLE)) == []
    assert sorted((set(vjp_rules) | NON_DIFFERENTIABLE) - set(PRIMITIVES)) == []


def _codegen_path(p: Primitive) -> str | None:
    """How compiled code computes p (the kernel IR, codegen/kernel_ir/cover.py), or None when
    codegen has no way to. tests/test_kernel_ir_render.py compiles every one in every dtype."""
    if p.category == "elementwise":
        return "scalar rule" if p.scalar is not None else None
    if p.category == "composite":
        return "lowered" if p.lower is not None else None
    if p.category == "host":
        return "compiled" if p.name in cover.COMPILED | set(cover.LOOPS) else "host step"
    return "kernel IR" if p.name in cover._OTHER else None


def test_every_primitive_has_a_code_path():
    assert _missing(_codegen_path) == []


def test_every_primitive_has_a_docs_row_and_the_docs_are_current():
    text = (Path(__file__).resolve().parents[1] / "docs" / "ir.md").read_text()
    assert docs.splice(text) == text, "docs/ir.md is stale: run python -m fusegrad.ir.docs --write"
    assert _missing(lambda p: p.doc.semantics and p.section in docs.SECTIONS) == []
    rows = [line for line in docs.primitive_tables().splitlines() if line.startswith("| `")]
    assert sorted(row.split("`")[1] for row in rows) == sorted(PRIMITIVES)


def test_every_differentiable_primitive_has_a_test_case():
    """tests/domains.py's rows, most of them made from the registry entries' domains, feed the
    gradient checks of test_formulas.py and test_autodiff.py."""
    covered = {case_prim(c) for c in primitive_cases(Domains(0, 0.2))}
    assert _missing(lambda p: p.name in covered or p.name in NON_DIFFERENTIABLE) == []


def test_every_primitive_has_a_batching_rule_or_the_declared_fallback():
    """fg.vmap's rule (ir/batching.py), or FALLBACK: a scan over the batch, with a warning."""
    from fusegrad.ir.batching import FALLBACK
    assert _missing(lambda p: callable(p.batch) or p.batch == FALLBACK) == []
    assert {p.name for p in PRIMITIVES.values() if p.batch == FALLBACK} == {"ode_solve"}
    assert all(callable(PRIMITIVES[p].batch) for p in ("tanh", "matmul", "take", "scan", "cond",
                                                        "while_loop", "custom_vjp_call", "eigh"))


def test_elementwise_domains_name_samplers():
    d = Domains(0, 0.2)
    for p in PRIMITIVES.values():
        for domain in p.domain:
            assert callable(getattr(d, domain, None)), (p.name, domain)
        if p.domain:
            assert len(p.domain) == p.arity, p.name


def test_apply_evaluates_the_registry_implementation():
    x = np.array([0.5, -1.5])
    assert apply("tanh", [x], {}).tolist() == np.tanh(x).tolist()
    assert apply("div", [np.array([7]), np.array([2])], {}).tolist() == [3]   # floor division


def test_defining_a_name_twice_is_an_error(monkeypatch):
    monkeypatch.setattr("fusegrad.ir.registry.PRIMITIVES", dict(PRIMITIVES))
    with pytest.raises(ValueError, match="'tanh' is defined twice"):
        define("tanh", "elementwise", lambda prim, x: x, np.tanh, section="Elementwise")
    with pytest.raises(ValueError, match="unknown category 'kernel'"):
        define("new_op", "kernel", lambda prim, x: x, np.tanh, section="Elementwise")


def test_a_new_primitive_is_reported_until_it_is_complete(monkeypatch):
    """What the tests above say about an entry with only a shape rule and an implementation."""
    half = Primitive("halve", "elementwise", lambda prim, x: x, lambda x: x / 2, doc=Doc())
    monkeypatch.setitem(PRIMITIVES, "halve", half)
    assert _missing(lambda p: (p.name in vjp_rules) != (p.name in NON_DIFFERENTIABLE)) == \
        ["halve"]
    assert _missing(_codegen_path) == ["halve"]
    assert _missing(lambda p: p.doc.semantics) == ["halve"]
    assert apply("halve", [np.array(3.0)], {}) == 1.5
    assert half.shape_rule("halve", TensorType("f64", (2,))) == TensorType("f64", (2,))
