"""The verifier: well-formed IR passes; each kind of malformed IR (built by hand with Op and
Function, bypassing the Builder) is rejected with a message naming the op and its source line."""

import numpy as np
import pytest

from fusegrad.ir import Builder, Function, Op, TensorType, Value, VerifyError, parse, verify


def T(dtype, *shape):
    return TensorType(dtype, tuple(shape))


F4 = T("f64", 4)


def good_fn():
    b = Builder("model")
    x, w = b.param(F4, "x"), b.param(F4, "w")
    h = b.add1("mul", [x, w], loc="model.py:7")
    c = b.add1("constant", [], {"value": np.ones(4)}, loc="model.py:8")
    h = b.add1("add", [h, c], loc="model.py:8")
    return b.build([b.add1("reduce_sum", [h], {"axes": (0,)}, loc="model.py:9"), x])


def _errors(fn) -> list[str]:
    with pytest.raises(VerifyError) as info:
        verify(fn)
    assert str(info.value) == "\n".join(info.value.errors)
    return info.value.errors


def test_well_formed_functions_pass_and_are_returned():
    fn = good_fn()
    assert verify(fn) is fn
    assert verify(parse(str(fn))) is not None
    assert verify(Function("empty", [], [], [])).name == "empty"


def test_use_before_definition():
    x = Value(F4, "x")
    a, b = Value(F4), Value(F4)
    ops = [Op("neg", [b], {}, [a], "model.py:3"), Op("exp", [x], {}, [b], "model.py:4")]
    assert _errors(Function("f", [x], ops, [a])) == [
        "verify: %0 = neg at model.py:3: uses %1 before it is defined"]


def test_op_using_its_own_output():
    x = Value(F4, "x")
    a = Value(F4)
    fn = Function("f", [x], [Op("add", [x, a], {}, [a], "loop.py:1")], [a])
    assert _errors(fn) == ["verify: %0 = add at loop.py:1: uses %0 before it is defined"]


def test_value_that_is_never_defined():
    x, ghost, out = Value(F4, "x"), Value(F4), Value(F4)
    fn = Function("f", [x], [Op("mul", [x, ghost], {}, [out], "model.py:5")], [out])
    assert _errors(fn) == ["verify: %0 = mul at model.py:5: uses %undef0, which is never defined"]


def test_double_definition():
    x, a = Value(F4, "x"), Value(F4)
    ops = [Op("neg", [x], {}, [a], "model.py:1"), Op("exp", [x], {}, [a], "model.py:2")]
    message = ("verify: %0 = exp at model.py:2: defines %0 again (it is already defined by "
               "%0 = neg at model.py:1)")
    assert _errors(Function("f", [x], ops, [a])) == [message]


def test_op_redefining_a_parameter_and_duplicate_parameters():
    x = Value(F4, "x")
    fn = Function("f", [x], [Op("neg", [x], {}, [x], "p.py:9")], [x])
    assert _errors(fn) == [
        "verify: %x = neg at p.py:9: defines %x again (it is already defined as a parameter)"]
    assert _errors(Function("f", [x, x], [], [x])) == ["verify: parameter %arg0 is listed twice"]


def test_undefined_result():
    x, a, ghost = Value(F4, "x"), Value(F4), Value(T("f64"))
    fn = Function("f", [x], [Op("neg", [x], {}, [a], "model.py:1")], [a, ghost])
    assert _errors(fn) == ["verify: result 1 (%undef0) is never defined"]


def test_wrong_output_type():
    x, a = Value(F4, "x"), Value(T("f32", 4))
    fn = Function("f", [x], [Op("tanh", [x], {}, [a], "model.py:12")], [a])
    assert _errors(fn) == [
        "verify: %0 = tanh at model.py:12: output %0 has type f32[4] but tanh infers f64[4]"]


def test_wrong_number_of_outputs():
    x, a, b = Value(F4, "x"), Value(F4), Value(F4)
    fn = Function("f", [x], [Op("neg", [x], {}, [a, b], "model.py:2")], [a])
    assert _errors(fn) == ["verify: %0, %1 = neg at model.py:2: has 2 outputs but neg infers 1"]


def test_unknown_primitive():
    x, a = Value(F4, "x"), Value(F4)
    fn = Function("f", [x], [Op("frobnicate", [x], {}, [a], "model.py:21")], [a])
    assert _errors(fn) == ["verify: %0 = frobnicate at model.py:21: unknown primitive 'frobnicate'"]


def test_shape_rule_violations():
    x, y = Value(F4, "x"), Value(T("f64", 3), "y")
    a, s = Value(F4), Value(T("f64"))
    ops = [Op("mul", [x, y], {}, [a], "model.py:7"),
           Op("reduce_sum", [a], {"axes": (1,)}, [s], "model.py:8")]
    errors = _errors(Function("f", [x, y], ops, [s]))
    assert errors == [
        ("verify: %0 = mul at model.py:7: the shape rule rejects it: operands must have equal "
         "shapes and dtypes (broadcast and convert first) (operands f64[4], f64[3])"),
        ("verify: %1 = reduce_sum at model.py:8: the shape rule rejects it: "
         "bad axes (1,) for rank 1 (operands f64[4])")]


def test_missing_params_and_wrong_operand_count():
    x, a, b = Value(F4, "x"), Value(F4), Value(F4)
    ops = [Op("transpose", [x], {}, [a], "t.py:1"), Op("add", [x], {}, [b], "t.py:2")]
    errors = _errors(Function("f", [x], ops, [a, b]))
    assert len(errors) == 2
    assert errors[0].startswith("verify: %0 = transpose at t.py:1: the shape rule rejects it: ")
    assert "perm" in errors[0]
    assert errors[1].startswith("verify: %1 = add at t.py:2: the shape rule rejects it: ")


def test_ops_without_location_and_non_values():
    x, a = Value(F4, "x"), Value(F4)
    fn = Function("f", [x], [Op("neg", [np.ones(4)], {}, [a])], [a])
    assert _errors(fn) == ["verify: %0 = neg: operand 0 is not a Value but ndarray"]


def test_every_problem_is_reported_in_order():
    x, a, b, ghost = Value(F4, "x"), Value(F4), Value(T("f32", 4)), Value(F4)
    ops = [Op("neg", [ghost], {}, [a], "m.py:1"), Op("exp", [a], {}, [b], "m.py:2"),
           Op("nope", [a], {}, [a], "m.py:3")]
    errors = _errors(Function("f", [x], ops, [b, Value(F4)]))
    assert errors == [
        "verify: %0 = neg at m.py:1: uses %undef0, which is never defined",
        "verify: %1 = exp at m.py:2: output %1 has type f32[4] but exp infers f64[4]",
        ("verify: %0 = nope at m.py:3: defines %0 again (it is already defined by %0 = neg at "
         "m.py:1)"),
        "verify: %0 = nope at m.py:3: unknown primitive 'nope'",
        "verify: result 1 (%undef1) is never defined"]


# -- nested functions (control flow, issue 15) ----------------------------------------------------

def _scan(body, inputs, outputs, loc="rnn.py:9"):
    params = {"body": body, "length": 2, "num_carry": 1, "num_consts": 0, "reverse": False}
    return Op("scan", inputs, params, outputs, loc)


def test_a_body_is_checked_and_must_be_closed():
    x, xs, w = Value(F4, "x"), Value(T("f64", 2, 4), "xs"), Value(F4, "w")
    h, e = Value(F4, "h"), Value(F4, "e")
    out, ys = Value(F4), Value(T("f64", 2, 4))
    t, ghost = Value(F4), Value(F4)
    body = Function("step", [h, e], [Op("mul", [h, w], {}, [t], "rnn.py:7"),
                                     Op("add", [t, ghost], {}, [Value(F4)], "rnn.py:8")], [t, w])
    fn = Function("f", [x, xs, w], [_scan(body, [x, xs], [out, ys])], [out])
    assert _errors(fn) == [
        ("verify: %0, %1 = scan at rnn.py:9: body @step: %0 = mul at rnn.py:7: uses a value of "
         "the enclosing function (%undef0 here): a nested function is closed, so its op must "
         "pass the value in as an operand"),
        ("verify: %0, %1 = scan at rnn.py:9: body @step: %1 = add at rnn.py:8: uses %undef1, "
         "which is never defined"),
        ("verify: %0, %1 = scan at rnn.py:9: body @step: result 1 (%undef0) is a value of the "
         "enclosing function (pass it in as an operand)")]


def test_a_body_that_does_not_fit_its_operands():
    x, xs = Value(F4, "x"), Value(T("f64", 2, 4), "xs")
    h, e = Value(T("f32", 4), "h"), Value(F4, "e")
    body = Function("step", [h, e], [], [h, e])
    out, ys = Value(F4), Value(T("f64", 2, 4))
    fn = Function("f", [x, xs], [_scan(body, [x, xs], [out, ys])], [out])
    assert _errors(fn) == [
        ("verify: %0, %1 = scan at rnn.py:9: the shape rule rejects it: body @step takes "
         "(f32[4], f64[4]) but the operands give (f64[4], f64[4]) (operands f64[4], f64[2,4])")]
    good = Function("step", [Value(F4), e], [], [e, e])
    assert verify(Function("f", [x, xs], [_scan(good, [x, xs], [out, ys])], [out, ys]))
