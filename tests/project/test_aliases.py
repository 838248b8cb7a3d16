"""The public import paths of the Python API (docs/python.md): the modules the examples import from hand on their
own public names in __all__ and nothing they merely imported (msgspec, numpy, the stats package); a lazily
re-exported name is never a submodule of its package."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

# the modules docs/python.md imports from directly (the alias packages rfteval.records, .series, .passk and .sample
# that once re-exported them are gone: issue 40)
PUBLIC = ["rfteval.data.records", "rfteval.compare.series", "rfteval.stats.passk", "rfteval.data.sample"]


@pytest.mark.parametrize("module", PUBLIC)
def test_a_public_module_s_all_is_its_own_public_names(module: str) -> None:
    t = importlib.import_module(module)
    assert defined_names(t) == set(t.__all__), "__all__ is not the module's own public names"
    assert all(hasattr(t, name) for name in t.__all__)


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


@pytest.mark.parametrize("package", ["rfteval.compare", "rfteval.readiness", "rfteval.stats"])
def test_a_lazily_re_exported_name_is_never_a_submodule_of_its_package(package: str) -> None:
    """`from rfteval.readiness import assess` gave the module readiness/assess.py, not the function, once anything
    had imported that submodule (the import system sets the package's attribute): no re-exported name may be a
    submodule's name."""
    import pkgutil

    pkg = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    for sub in submodules:
        importlib.import_module(f"{package}.{sub}")  # as a run or a test suite would have
    for name in _targets_of(package):
        target = importlib.import_module(name)
        clashes = set(getattr(target, "__all__", vars(target))) & submodules
        assert not clashes, f"{package} re-exports names of {name} that are also its submodules: {sorted(clashes)}"


def _targets_of(package: str) -> tuple[str, ...]:
    parts: tuple[str, ...] = importlib.import_module(package)._PARTS
    return parts


def test_readiness_re_exports_each_part_s_names() -> None:
    """The assessment's parts share one public path: the README's and docs/readiness.md's names come from it."""
    from rfteval.readiness import Thresholds, assess, grpo_advantages, label_skew, verdict_of

    assert [f.__module__ for f in (Thresholds, assess, grpo_advantages, label_skew, verdict_of)] == [
        "rfteval.readiness.report", "rfteval.readiness.assessment", "rfteval.readiness.advantages",
        "rfteval.readiness.labels", "rfteval.readiness.verdict"]


def test_readiness_assess_is_the_function_after_its_module_was_imported() -> None:
    import rfteval.readiness.assessment  # noqa: F401
    from rfteval.readiness import assess

    assert callable(assess) and assess.__module__ == "rfteval.readiness.assessment"
