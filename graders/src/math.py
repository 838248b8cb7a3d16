"""Math with verifiable answers (DeepSeek-R1's rule-based accuracy reward): 1 when the last \\boxed{...} answer
equals the reference answer as a number or expression, else 0.

Written for rfteval. The check is sympy's: both sides are parsed after a small LaTeX clean-up (\\frac, \\sqrt,
\\cdot, \\pi, ^, \\left/\\right) and are equal when their difference simplifies to 0. Like the rule verifiers
studied in arXiv:2505.22203 it is precise but misses answers written another way: a unit, a percent sign, an
equation "x = 3", a thousands separator, words, or no \\boxed{} at all score 0. `rfteval agree` against a judge
measures how often. A reference that does not parse raises (a bug in the dataset, not a wrong answer).
"""

import re

import sympy
from sympy.parsing.sympy_parser import implicit_multiplication_application, parse_expr, standard_transformations

TRANSFORMS = standard_transformations + (implicit_multiplication_application,)


def last_boxed(text):
    """The content of the last \\boxed{...}, braces balanced; None when there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None


def _frac(s):
    """\\frac{a}{b} -> ((a)/(b)), innermost first."""
    pattern = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
    while True:
        new = pattern.sub(r"((\1)/(\2))", s)
        if new == s:
            return s
        s = new


def to_expr(text):
    s = text.strip().strip("$")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\left|\\right|\\!|\\,|\\;", "", s)
    s = _frac(s)
    s = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", s)
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\pi", "pi").replace("^", "**")
    s = s.replace("{", "(").replace("}", ")")
    return parse_expr(s, transformations=TRANSFORMS, evaluate=True)


def grade(sample, item):
    reference = to_expr(str(item["reference_answer"]))
    answer = last_boxed(sample["output_text"])
    if answer is None:
        return 0.0
    try:
        value = to_expr(answer)
        return 1.0 if sympy.simplify(value - reference) == 0 else 0.0
    except Exception:
        return 0.0
