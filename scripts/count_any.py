"""Count the function signatures under a package that mention `Any` (issue 20's measure of untyped seams).

Usage: python scripts/count_any.py [PACKAGE_DIR]  (default: rfteval). Prints "<with Any> of <signatures>".
A signature mentions Any when any parameter annotation or the return annotation names it (typing.Any or Any).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        text = node.value
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            return "Any" in text
    return any((isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any")
               for n in ast.walk(node))


def count(root: Path) -> tuple[int, int]:
    """(signatures mentioning Any, all function signatures) over every .py file under root."""
    with_any = total = 0
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            total += 1
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
            with_any += any(_mentions_any(p.annotation) for p in params) or _mentions_any(node.returns)
    return with_any, total


if __name__ == "__main__":
    n, total = count(Path(sys.argv[1] if len(sys.argv) > 1 else "rfteval"))
    print(f"{n} of {total} signatures mention Any")
