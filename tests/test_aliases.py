"""The alias packages the README imports from (rfteval.records, .series, .passk, .sample) hand on their target's
public names and nothing the target merely imported (msgspec, numpy, the stats package)."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

ALIASES = {"rfteval.records": "rfteval.data.records", "rfteval.series": "rfteval.compare.series",
           "rfteval.passk": "rfteval.stats.passk", "rfteval.sample": "rfteval.data.sample"}


@pytest.mark.parametrize(("alias", "target"), ALIASES.items())
def test_an_alias_hands_on_the_public_names_alone(alias: str, target: str) -> None:
    a, t = importlib.import_module(alias), importlib.import_module(target)
    public = {name for name in vars(a) if not name.startswith("_")}
    assert public == set(t.__all__)
    assert all(getattr(a, name) is getattr(t, name) for name in public)
    assert defined_names(t) == set(t.__all__), "__all__ is not the module's own public names"


def defined_names(module: object) -> set[str]:
    """The public names a module's own top-level statements define (its imports left out)."""
    names: set[str] = set()
    for node in ast.parse(inspect.getsource(module)).body:  # type: ignore[arg-type]
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}
