"""The Makefile's install targets: a failed install is one line and the build goes on, or, with CI set, a failed
build (its INSTALL_FAILED), so that CI never passes on tests that skipped for want of what it should have installed
(the conftest's half of the rule: tests/support/optional.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

MAKEFILES = [REPO / "Makefile", *sorted((REPO / "make").glob("*.mk"))]
# what an install target prints when its install failed or cannot be done here
FAILED_LINE = re.compile(r'echo "make: (could not|[a-z]+ missing)')


def recipe_lines(path: Path) -> list[str]:
    """The file's logical lines: continuation lines joined."""
    return path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()


def test_every_failed_install_line_is_followed_by_the_ci_rule() -> None:
    """Each `make: could not ...` line of an install target goes with $(INSTALL_FAILED): a line without it would let
    CI go on past a failed install (an install line added later must keep the rule)."""
    found, bare = 0, []
    for path in MAKEFILES:
        for line in recipe_lines(path):
            for match in FAILED_LINE.finditer(line):
                found += 1
                rest = line[match.end():]
                upto = rest.find("echo ")
                if "$(INSTALL_FAILED)" not in (rest if upto < 0 else rest[:upto]):
                    bare.append(f"{path.name}: {line.strip()[:120]}")
    assert found >= 19 and not bare, bare  # browser 2, sandbox 2, nobody 1, realserver 2, ray 1, bfcl 2, trainers 9


@pytest.fixture
def fake_venv(tmp_path: Path) -> dict[str, str]:
    """make's variables for a venv whose python fails everything (so every install fails), set up already: the
    targets run in tmp_path, never touching .venv."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 1\n")
    python.chmod(0o755)
    stamp = venv / ".installed"
    stamp.touch()
    return {"VENV": str(venv), "BIN": str(venv / "bin"), "STAMP": str(stamp)}


def make(target: str, variables: dict[str, str], ci: str | None, path: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    maker = shutil.which("make")
    assert maker is not None, "make is not installed (`make test` runs these tests)"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    if ci is not None:
        env["CI"] = ci
    if path is not None:
        env["PATH"] = path
    return subprocess.run([maker, "-s", "-C", str(REPO), target, *(f"{k}={v}" for k, v in variables.items())],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("target, lines", [("ray", 1), ("realserver", 2), ("bfcl", 2), ("trainers", 9)])
def test_a_failed_install_goes_on_locally_and_fails_the_build_with_ci_set(target: str, lines: int,
                                                                         fake_venv: dict[str, str]) -> None:
    local = make(target, fake_venv, None)
    assert local.returncode == 0, local.stdout + local.stderr
    said = [line for line in local.stdout.splitlines() if line.startswith("make: could not")]
    assert len(said) == lines, local.stdout  # one line per install that failed, and on to the next
    assert "CI is set" not in local.stdout
    for stamp in Path(fake_venv["VENV"]).glob(".trainers-*"):
        stamp.unlink()  # the trainers' stamp: installed or not, locally the step is done
    ci = make(target, fake_venv, "true")
    assert ci.returncode != 0, ci.stdout + ci.stderr
    said = [line for line in ci.stdout.splitlines() if line.startswith("make: could not")]
    assert said == [local.stdout.splitlines()[0]]  # the first failed install stops the build
    assert "make: CI is set: a failed install fails the build" in ci.stdout
    assert not list(Path(fake_venv["VENV"]).glob(".trainers-*"))  # nothing marked as installed


@pytest.mark.slow
@pytest.mark.parametrize("target, what", [("browser", "chromium"), ("sandbox", "bubblewrap")])
def test_an_apt_install_that_fails_fails_the_build_with_ci_set(target: str, what: str, tmp_path: Path,
                                                             fake_venv: dict[str, str]) -> None:
    """As root with apt-get, where the package is missing: a PATH without it, whose apt-get fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "cksum", "cut", "grep", "sed"):  # what the Makefile's variables run
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    for name, body in (("id", "echo 0"), ("apt-get", "exit 100"), ("ldconfig", "exit 1")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    local = make(target, fake_venv, None, path=str(bin_dir))
    assert local.returncode == 0 and f"make: could not install {what}" in local.stdout, local.stdout + local.stderr
    ci = make(target, fake_venv, "1", path=str(bin_dir))
    assert ci.returncode != 0 and f"make: could not install {what}" in ci.stdout, ci.stdout + ci.stderr
    assert "make: CI is set: a failed install fails the build" in ci.stdout
