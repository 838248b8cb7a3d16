"""tests/support/optional.py: a skip for want of what the Makefile installs names its real cause, and with CI set it is
a failure (the conftest's two hooks), while every other skip stays a skip."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.optional import MissingDependency, on_ci, require


def package(root: Path, name: str, init: str, modules: dict[str, str] | None = None) -> None:
    """A package `name` under `root` whose __init__.py is `init`, with more modules beside it."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(init)
    for module, text in (modules or {}).items():
        (folder / f"{module}.py").write_text(text)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path first on sys.path; the packages made there (rfteval_pkg_*) are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("rfteval_pkg_")]:
        del sys.modules[name]


def reason(module: str, target: str = "trainers") -> str:
    with pytest.raises(MissingDependency) as caught:
        require(module, target)
    assert caught.value.target == target
    return str(caught.value.msg)


def test_a_package_that_is_not_there_is_not_installed() -> None:
    assert reason("rfteval_no_such_package.sub") == "rfteval_no_such_package is not installed (`make trainers` installs it)"


def test_a_missing_dependency_is_named_as_the_cause_not_the_package(on_path: Path) -> None:
    package(on_path, "rfteval_pkg_a", "import rfteval_absent_dependency\n")
    assert reason("rfteval_pkg_a", "ray") == ("rfteval_pkg_a: import failed: No module named 'rfteval_absent_dependency' "
                                              "(a dependency of rfteval_pkg_a) (`make ray` installs it)")


def test_what_the_installed_package_lacks_is_named_so(on_path: Path) -> None:
    package(on_path, "rfteval_pkg_b", "", {"present": "import rfteval_pkg_b.absent\n"})
    assert reason("rfteval_pkg_b.present") == (
        "rfteval_pkg_b.present: import failed: No module named 'rfteval_pkg_b.absent' (the installed rfteval_pkg_b "
        "lacks it) (`make trainers` installs it)")
    package(on_path, "rfteval_pkg_c", "", {"present": "from rfteval_pkg_c import absent\n"})
    assert reason("rfteval_pkg_c.present").startswith(
        "rfteval_pkg_c.present: import failed: cannot import name 'absent' from 'rfteval_pkg_c'")
    assert reason("rfteval_pkg_c.present").endswith("(the installed rfteval_pkg_c lacks it) (`make trainers` installs it)")


def test_a_name_a_dependency_lacks_is_the_dependencys(on_path: Path) -> None:
    package(on_path, "rfteval_pkg_e", "from json import no_such_name\n")
    assert reason("rfteval_pkg_e").startswith("rfteval_pkg_e: import failed: cannot import name 'no_such_name' from "
                                              "'json'")
    assert reason("rfteval_pkg_e").endswith("(a dependency of rfteval_pkg_e) (`make trainers` installs it)")


def test_a_package_that_imports_is_returned(on_path: Path) -> None:
    package(on_path, "rfteval_pkg_d", "VALUE = 7\n")
    assert require("rfteval_pkg_d", "setup").VALUE == 7


@pytest.mark.parametrize("value, expected", [(None, False), ("", False), ("0", False), ("false", False),
                                             ("False", False), ("no", False), ("true", True), ("1", True),
                                             ("yes", True)])
def test_ci_is_set_as_ci_services_set_it(value: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert on_ci() is expected


def test_no_test_skips_for_a_dependency_but_through_optional() -> None:
    """pytest.importorskip would skip without the CI rule and with a reason of its own: every optional import goes
    through require()."""
    here = Path(__file__).resolve()
    bare = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "tests").rglob("*.py")) if p.resolve() != here
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "importorskip(" in line]
    assert not bare, bare


CASES = '''
import pytest
from tests.support.optional import require

def test_absent_package():
    require("rfteval_absent_package", "trainers")

def test_broken_dependency():
    require("rfteval_broken", "trainers")

@pytest.fixture
def ray_needed():
    return require("rfteval_absent_ray", "ray")

def test_in_a_fixture(ray_needed):
    pass

def test_a_host_without_root():
    pytest.skip("only root needs a cgroup here")

def test_passes():
    pass
'''
MODULE_LEVEL = '''
from tests.support.optional import require

require("rfteval_absent_module_level", "realserver")

def test_never_collected():
    pass
'''


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(folder)])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p",
                           "tests.support.optional", "--continue-on-collection-errors", str(folder / "cases")],
                          capture_output=True, text=True, cwd=folder, env=env, timeout=120)


@pytest.mark.slow
def test_with_ci_set_these_skips_fail_and_the_others_stay_skips(tmp_path: Path) -> None:
    """The hooks on a small suite of their own: without CI, four skips each naming its cause; with CI set, the three
    for want of what `make` installs fail (in the test, its fixture, and a whole module at import), the host's stays
    a skip."""
    package(tmp_path, "rfteval_broken", "import rfteval_absent_dependency\n")
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "test_cases.py").write_text(textwrap.dedent(CASES))
    (cases / "test_module_level.py").write_text(textwrap.dedent(MODULE_LEVEL))

    local = run_pytest(tmp_path, None)
    assert local.returncode == 0, local.stdout + local.stderr
    assert re.search(r"\b1 passed, 5 skipped\b", local.stdout), local.stdout
    for cause in ("rfteval_absent_package is not installed (`make trainers` installs it)",
                  "rfteval_broken: import failed: No module named 'rfteval_absent_dependency' (a dependency of "
                  "rfteval_broken) (`make trainers` installs it)",
                  "rfteval_absent_ray is not installed (`make ray` installs it)",
                  "rfteval_absent_module_level is not installed (`make realserver` installs it)",
                  "only root needs a cgroup here"):
        assert cause in local.stdout, (cause, local.stdout)

    for value in ("true", "1"):
        ci = run_pytest(tmp_path, value)
        assert ci.returncode == 1, ci.stdout + ci.stderr
        assert re.search(r"\b2 failed, 1 passed, 1 skipped, 2 errors\b", ci.stdout), ci.stdout
        failed = {line.split(" - ")[0] for line in ci.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))}
        assert failed == {"FAILED cases/test_cases.py::test_absent_package",
                          "FAILED cases/test_cases.py::test_broken_dependency",
                          "ERROR cases/test_cases.py::test_in_a_fixture", "ERROR cases/test_module_level.py"}, ci.stdout
        assert "SKIPPED [1] cases/test_cases.py" in ci.stdout and "only root needs a cgroup here" in ci.stdout
        assert "rfteval_absent_module_level is not installed (`make realserver` installs it); CI is set" in ci.stdout

    off = run_pytest(tmp_path, "false")  # CI=false reads as unset
    assert off.returncode == 0 and re.search(r"\b1 passed, 5 skipped\b", off.stdout), off.stdout
