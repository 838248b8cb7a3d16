"""The `calculate_output` formula of a `multi` grader, parsed by hand and compiled to closures (no eval).

Grammar (OpenAI documents the operators and functions; precedence is the usual one):

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom ("^" unary)?          # right-associative; -2^2 = -(2^2); 2^-1 = 0.5
    atom   := NUMBER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"

Functions: min, max (one or more arguments), abs, floor, ceil, exp, sqrt, log (natural log; one argument).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

Env = Mapping[str, float]
Node = Callable[[Env], float]


class FormulaError(ValueError):
    """The formula text is not a valid calculate_output (found when the config is loaded)."""


class FormulaEvalError(ArithmeticError):
    """The formula is valid but its value is not a finite number for these scores (log(0), x/0, overflow)."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>\*\*|[-+*/^(),])
      | (?P<bad>\S)
    )""",
    re.VERBOSE,
)

_HINTS = {
    "**": "use ^ for a power",
    "%": "% is not an operator in calculate_output",
    "<": "comparisons are not supported", ">": "comparisons are not supported", "=": "comparisons are not supported",
    "!": "comparisons are not supported", ":": "only arithmetic on grader keys is supported",
    ".": "attribute access is not supported", "[": "brackets (indexing, lists) are not supported",
    "]": "brackets (indexing, lists) are not supported",
    "'": "strings are not supported", '"': "strings are not supported",
    "{": "braces are not supported (calculate_output uses grader keys, not templates)",
}


def _finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise FormulaEvalError(f"{what} is not a finite number")
    return value


def _log(x: float) -> float:
    if x <= 0:
        raise FormulaEvalError(f"log({x:g}) is undefined (log needs a positive argument)")
    return math.log(x)


def _sqrt(x: float) -> float:
    if x < 0:
        raise FormulaEvalError(f"sqrt({x:g}) is undefined (negative argument)")
    return math.sqrt(x)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        raise FormulaEvalError(f"exp({x:g}) overflows") from None


def _pow(a: float, b: float) -> float:
    if a == 0 and b < 0:
        raise FormulaEvalError(f"{a:g}^{b:g} divides by zero")
    try:
        return math.pow(a, b)  # math.pow raises where ** would return a complex number
    except ValueError:
        raise FormulaEvalError(f"{a:g}^{b:g} is not a real number") from None
    except OverflowError:
        raise FormulaEvalError(f"{a:g}^{b:g} overflows") from None


def _div(a: float, b: float) -> float:
    if b == 0:
        raise FormulaEvalError(f"division by zero ({a:g} / 0)")
    return a / b


UNARY_FUNCTIONS: dict[str, Callable[[float], float]] = {
    "abs": abs, "floor": lambda x: float(math.floor(x)), "ceil": lambda x: float(math.ceil(x)),
    "exp": _exp, "sqrt": _sqrt, "log": _log,
}
VARIADIC_FUNCTIONS: dict[str, Callable[..., float]] = {"min": min, "max": max}
FUNCTIONS = frozenset(UNARY_FUNCTIONS) | frozenset(VARIADIC_FUNCTIONS)

_BINARY: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _div, "^": _pow,
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # num | name | op | end
    text: str
    col: int  # 1-based column, for messages


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # only trailing whitespace is left
            break
        kind = m.lastgroup or "end"
        value = m.group(kind) if kind != "end" else ""
        col = m.start(kind) + 1 if kind != "end" else pos + 1
        if kind == "bad" or value == "**":
            hint = _HINTS.get(value, "")
            raise FormulaError(f"unexpected {value!r} at column {col}" + (f": {hint}" if hint else ""))
        toks.append(_Tok(kind, value, col))
        pos = m.end()
    toks.append(_Tok("end", "", len(text) + 1))
    return toks


@dataclass
class _Parser:
    toks: list[_Tok]
    variables: frozenset[str]
    pos: int = 0
    used: set[str] = field(default_factory=set)

    def peek(self) -> _Tok:
        return self.toks[self.pos]

    def take(self) -> _Tok:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, text: str) -> None:
        tok = self.take()
        if tok.text != text or tok.kind != "op":
            raise FormulaError(f"expected {text!r} at column {tok.col}, found {_describe(tok)}")

    def expr(self) -> Node:
        node = self.term()
        while self.peek().kind == "op" and self.peek().text in "+-":
            node = _binary(self.take().text, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in "*/":
            node = _binary(self.take().text, node, self.unary())
        return node

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in "+-":
            self.take()
            inner = self.unary()
            return inner if tok.text == "+" else (lambda env: -inner(env))
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek().kind == "op" and self.peek().text == "^":
            self.take()
            return _binary("^", base, self.unary())
        return base

    def atom(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            value = float(tok.text)
            if not math.isfinite(value):
                raise FormulaError(f"number {tok.text} at column {tok.col} is too large")
            return lambda env: value
        if tok.kind == "op" and tok.text == "(":
            node = self.expr()
            self.expect(")")
            return node
        if tok.kind == "name":
            if self.peek().kind == "op" and self.peek().text == "(":
                return self.call(tok)
            return self.variable(tok)
        raise FormulaError(f"expected a number, a grader key or '(' at column {tok.col}, found {_describe(tok)}")

    def variable(self, tok: _Tok) -> Node:
        name = tok.text
        if name not in self.variables:
            if name in FUNCTIONS:
                raise FormulaError(f"{name} at column {tok.col} is a function: call it as {name}(...)")
            known = ", ".join(sorted(self.variables)) or "none"
            raise FormulaError(f"unknown name {name!r} at column {tok.col} (grader keys: {known})")
        self.used.add(name)

        def get(env: Env) -> float:
            try:
                return float(env[name])
            except KeyError:
                raise FormulaEvalError(f"no score for {name!r}") from None

        return get

    def call(self, tok: _Tok) -> Node:
        name = tok.text
        if name not in FUNCTIONS:
            allowed = ", ".join(sorted(FUNCTIONS))
            raise FormulaError(f"unknown function {name!r} at column {tok.col} (allowed: {allowed})")
        self.expect("(")
        if self.peek().kind == "op" and self.peek().text == ")":
            raise FormulaError(f"{name}() at column {tok.col} needs an argument")
        args = [self.expr()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        if name in UNARY_FUNCTIONS:
            if len(args) != 1:
                raise FormulaError(f"{name}() at column {tok.col} takes one argument, got {len(args)}")
            fn, (arg,) = UNARY_FUNCTIONS[name], args
            return lambda env: _finite(fn(arg(env)), f"{name}(...)")
        vfn = VARIADIC_FUNCTIONS[name]
        return lambda env: vfn(a(env) for a in args)


def _describe(tok: _Tok) -> str:
    return "the end of the formula" if tok.kind == "end" else repr(tok.text)


def _binary(op: str, left: Node, right: Node) -> Node:
    fn = _BINARY[op]

    def run(env: Env) -> float:
        return _finite(fn(left(env), right(env)), f"the result of {op!r}")

    return run


@dataclass(frozen=True)
class Formula:
    """A compiled formula: call it with {key: score} to get the combined score."""

    text: str
    names: frozenset[str]  # the variables it uses
    _node: Node

    def __call__(self, env: Env) -> float:
        try:
            return _finite(float(self._node(env)), "the formula's value")
        except (OverflowError, ZeroDivisionError) as exc:  # arithmetic the guards above did not foresee
            raise FormulaEvalError(str(exc)) from None


def compile_formula(text: str, variables: Collection[str]) -> Formula:
    """Parse `text` once; raise FormulaError (a ValueError) naming the column of the first problem."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("the formula is empty")
    parser = _Parser(_tokenize(text), frozenset(variables))
    node = parser.expr()
    tok = parser.peek()
    if tok.kind != "end":
        raise FormulaError(f"unexpected {tok.text!r} at column {tok.col}")
    return Formula(text, frozenset(parser.used), node)
