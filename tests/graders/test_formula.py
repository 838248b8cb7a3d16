import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfteval.graders.formula import FormulaError, FormulaEvalError, compile_formula

KEYS = ("a", "b", "c", "name", "email")
ENV = {"a": 2.0, "b": 3.0, "c": 0.5, "name": 0.8, "email": 1.0}


def ev(text: str, env: dict[str, float] = ENV) -> float:
    return compile_formula(text, KEYS)(env)


@pytest.mark.parametrize("text, expected", [
    ("1", 1.0),
    ("a + b * c", 2 + 3 * 0.5),            # * before +
    ("(a + b) * c", (2 + 3) * 0.5),
    ("a - b - c", (2 - 3) - 0.5),          # left-associative
    ("a / b / c", (2 / 3) / 0.5),
    ("a * b / c", 2 * 3 / 0.5),
    ("a ^ b", 8.0),
    ("a ^ b ^ 2", 2 ** 9),                 # right-associative: 2^(3^2)
    ("-a ^ 2", -4.0),                      # power binds tighter than unary minus
    ("a ^ -1", 0.5),
    ("2 * a ^ 2", 8.0),
    ("--a", 2.0),
    ("+a", 2.0),
    ("-(a + b)", -5.0),
    ("(name + email) / 2", 0.9),
    ("0.5 * name + 0.5 * email", 0.9),
    (".5 * a", 1.0),
    ("1e-1 * 10", 1.0),
    ("2.5E1", 25.0),
    ("  a\t+\nb  ", 5.0),
])
def test_precedence_and_literals(text, expected):
    assert ev(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("min(a, b)", 2.0),
    ("max(a, b, c)", 3.0),
    ("min(a)", 2.0),
    ("abs(c - a)", 1.5),
    ("floor(2.7)", 2.0),
    ("ceil(2.1)", 3.0),
    ("floor(-0.5)", -1.0),
    ("exp(0)", 1.0),
    ("exp(1)", math.e),
    ("sqrt(16)", 4.0),
    ("log(exp(2))", 2.0),                  # natural log
    ("log(10)", 2.302585092994046),
    ("max(0, min(1, a - b))", 0.0),        # clipping idiom
    ("min(name, email) * 0.5 + max(name, email) * 0.5", 0.9),
])
def test_functions(text, expected):
    assert ev(text) == pytest.approx(expected, rel=1e-12)


def test_names_used_are_recorded():
    f = compile_formula("a + min(b, 2)", KEYS)
    assert f.names == {"a", "b"}
    assert f.text == "a + min(b, 2)"


@pytest.mark.parametrize("text, fragment", [
    ("a + d", "unknown name 'd' at column 5"),
    ("pow(a, 2)", "unknown function 'pow'"),
    ("round(a)", "unknown function 'round'"),
    ("a.real", "'.' at column 2: attribute access is not supported"),
    ("a ** 2", "use ^ for a power"),
    ("a % 2", "% is not an operator"),
    ("a > b", "comparisons are not supported"),
    ("a == b", "comparisons are not supported"),
    ("'x'", "strings are not supported"),
    ('"x" + a', "strings are not supported"),
    ("[a for a in b]", "brackets (indexing, lists) are not supported"),
    ("a if b else c", "unexpected 'if'"),
    ("lambda: 1", "':' at column 7"),
    ("__import__(a)", "unknown function '__import__'"),
    ("__import__('os')", "strings are not supported"),
    ("{{item.x}}", "braces are not supported"),
    ("a[0]", "'[' at column 2: brackets"),
    ("a b", "unexpected 'b' at column 3"),
    ("(a + b", "expected ')' at column 7, found the end of the formula"),
    ("a + ", "found the end of the formula"),
    ("a +* b", "found '*'"),
    (")", "found ')'"),
    ("", "the formula is empty"),
    ("   ", "the formula is empty"),
    ("min()", "min() at column 1 needs an argument"),
    ("abs(a, b)", "abs() at column 1 takes one argument, got 2"),
    ("log", "log at column 1 is a function"),
    ("min(a,)", "found ')'"),
    ("1e999", "too large"),
    ("a;b", "unexpected ';'"),
])
def test_rejected_with_a_clear_message(text, fragment):
    with pytest.raises(FormulaError) as exc:
        compile_formula(text, KEYS)
    assert fragment in str(exc.value)
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize("text, env, fragment", [
    ("a / b", {"a": 1.0, "b": 0.0}, "division by zero"),
    ("log(a)", {"a": 0.0}, "log(0) is undefined"),
    ("log(a)", {"a": -1.0}, "log(-1) is undefined"),
    ("sqrt(a)", {"a": -1.0}, "sqrt(-1) is undefined"),
    ("exp(a)", {"a": 1000.0}, "overflows"),
    ("a ^ 0.5", {"a": -8.0}, "not a real number"),
    ("a ^ -1", {"a": 0.0}, "divides by zero"),
    ("a ^ b", {"a": 10.0, "b": 400.0}, "overflows"),
    ("a * b", {"a": 1e308, "b": 10.0}, "not a finite number"),
    ("a + b", {"a": 1.0}, "no score for 'b'"),
])
def test_runtime_errors_are_formula_eval_errors(text, env, fragment):
    f = compile_formula(text, ("a", "b"))
    with pytest.raises(FormulaEvalError) as exc:
        f(env)
    assert fragment in str(exc.value)
    assert not isinstance(exc.value, FormulaError)


def test_no_python_eval_is_reachable():
    # Names that Python would resolve are unknown here: the formula only sees its variables.
    for text in ("True", "None", "print", "sum(a)", "globals()"):
        with pytest.raises(FormulaError):
            compile_formula(text, KEYS)


@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(-1e6, 1e6))
def test_matches_python_arithmetic(x, y, z):
    f = compile_formula("x + y * z - (x - z) / 4 + min(x, y, z) - abs(y)", ("x", "y", "z"))
    expected = x + y * z - (x - z) / 4 + min(x, y, z) - abs(y)
    assert f({"x": x, "y": y, "z": z}) == pytest.approx(expected, rel=1e-9, abs=1e-6)
