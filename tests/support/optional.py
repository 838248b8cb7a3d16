"""What a test needs that the Makefile installs, asked for one way: where it is missing the test skips naming the real
cause, and with CI set it fails.

`make test` installs the trainers, Ray, llama.cpp's server and its model, BFCL, Chromium, bubblewrap and a Python that
`nobody` can run (its targets trainers, ray, realserver, bfcl, browser, sandbox, nobody), and `make setup` the dev and
graders extras. With CI set those targets install everything or fail, so a test that skips for want of one of them is
a broken install that a green run would hide: tests/conftest.py loads the two hooks below, which turn these skips
(MissingDependency), and only these, into failures. Every other skip (a machine without root, the published grader
sources beside the checkout) stays a skip. A skip's reason comes from the ImportError itself: a package that is not
installed reads differently from one that is installed but cannot import a dependency of its own.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Generator
from types import ModuleType
from typing import NoReturn

import pytest

UNSET = {"", "0", "false", "no"}  # CI="false" (or empty) reads as unset, as the Makefile reads it


def on_ci() -> bool:
    """CI is set, as CI services set it (GitHub Actions and GitLab: "true")."""
    return os.environ.get("CI", "").strip().lower() not in UNSET


class MissingDependency(pytest.skip.Exception):
    """A skip caused by something `make <target>` installs: a failure when CI is set."""

    def __init__(self, cause: str, target: str) -> None:
        super().__init__(f"{cause} (`make {target}` installs it)", allow_module_level=True)
        self.cause, self.target = cause, target


def missing(cause: str, target: str) -> NoReturn:
    """Skip (fail, with CI set): `cause` says what is missing, `target` is the make target that installs it."""
    raise MissingDependency(cause, target)


def _distribution(top: str) -> str | None:
    """The installed distribution that provides the top-level module `top` (openpipe-art for art), if any."""
    names = importlib.metadata.packages_distributions().get(top) or []
    return names[0] if names else None


def import_failure(module: str, exc: ImportError, package: str | None = None) -> str:
    """Why `module` did not import, in one line: its package is not installed; or it is, and lacks what was imported
    (another version); or it is, and a dependency of it is missing or lacks what was imported."""
    top = module.partition(".")[0]
    dist = _distribution(top)
    package = package or dist or top
    name = exc.name  # the module not found, or the one a name could not be imported from
    if isinstance(exc, ModuleNotFoundError) and name == top:
        return f"{package} is not installed"
    version = ""
    if dist is not None:
        try:
            version = " " + importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if name is None:
        return f"{module}: import failed: {exc}"
    if name == top or name.startswith(top + "."):
        return f"{module}: import failed: {exc} (the installed {package}{version} lacks it)"
    return f"{module}: import failed: {exc} (a dependency of {package}{version})"


def require(module: str, target: str, package: str | None = None) -> ModuleType:
    """`module`, imported; else a MissingDependency naming why (at a module's top, the whole module skips)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(import_failure(module, exc, package), target)


def sandbox_refused(refused: str, bwrap_found: bool) -> NoReturn:
    """Skip for want of the python grader sandbox (rfteval.sandbox.host().refused): what `make sandbox`
    installs (bubblewrap, libseccomp2) missing is a MissingDependency; a host that refuses it otherwise (root
    without a writable cgroup, AppArmor, not Linux) is a plain skip, CI or not."""
    if not bwrap_found or refused.startswith("seccomp is unavailable: the filter could not be built"):
        missing(f"no sandbox here: {refused}", "sandbox")
    pytest.skip(f"no sandbox here: {refused}", allow_module_level=True)


# ---------------------------------------------------------------------------------------------- the CI rule

# How pytest words a module-level skip of this type in its report: the exception's type, then its message
PREFIX = f"{MissingDependency.__module__}.{MissingDependency.__qualname__}: "


def require_sandbox() -> None:
    """Go on only where the python grader sandbox can be had (rfteval.sandbox.host()); else sandbox_refused."""
    from rfteval.sandbox import host

    refused = host().refused
    if refused:
        sandbox_refused(refused, host().bwrap is not None)


def in_ci(reason: str) -> str:
    return (f"{reason}; CI is set, so the Makefile installed it or failed: missing here, it is a broken install, "
            "not a machine without it")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                         pytest.TestReport]:
    """With CI set, a test (or its fixture) that skipped on a MissingDependency fails instead."""
    report = yield
    excinfo = call.excinfo
    if report.skipped and excinfo is not None and isinstance(excinfo.value, MissingDependency) and on_ci():
        report.outcome = "failed"
        report.longrepr = in_ci(excinfo.value.msg or "")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport,
                                                                           pytest.CollectReport]:
    """With CI set, a test module that skipped whole on a MissingDependency is a collection error instead (pytest
    lists every such module, then stops before running any test)."""
    report = yield
    if report.skipped and on_ci() and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if reason.startswith(PREFIX):
            report.outcome = "failed"
            report.longrepr = in_ci(reason.removeprefix(PREFIX))
    return report
