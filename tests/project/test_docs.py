"""Every command is in the README, and every option is documented in the README or a guide under docs/ (as
sqlite-utils' tests/test_docs.py does)."""

import re

import pytest
import typer.main

from rfteval.cli.app import app
from tests.support import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
# The README is the newcomer's page; every option is spelled out in the guide of its job (issue 40). Until the
# generated command-line reference (docs/reference/cli.md) is checked instead, the options are looked for here.
DOCUMENTATION = "\n".join([README, *(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").rglob("*.md")))])


def _commands(group, prefix: str = "") -> list[tuple[str, object]]:
    # Duck-typed: typer may ship its own copy of click, so isinstance(click.Group) does not hold.
    out = []
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        if hasattr(cmd, "commands"):
            out += _commands(cmd, full + " ")
        else:
            out.append((full, cmd))
    return out


COMMANDS = _commands(typer.main.get_command(app))


def test_there_are_commands():
    names = {n for n, _ in COMMANDS}
    assert {"grade", "graders", "validate dataset", "validate grader"} <= names


@pytest.mark.parametrize("name, cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_command_is_documented(name, cmd):
    assert f"rfteval {name}" in README, f"README does not show `rfteval {name}`"


def _options(cmd):
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)]


WITH_OPTIONS = [(n, c) for n, c in COMMANDS if _options(c)]  # `graders`, `validate spec`: nothing to document


@pytest.mark.parametrize("name, cmd", WITH_OPTIONS, ids=[n for n, _ in WITH_OPTIONS])
def test_every_option_is_documented(name, cmd):
    options = _options(cmd)
    missing = [opt for p in options for opt in p.opts[:1]
               if opt.startswith("--") and not re.search(re.escape(opt) + r"\b", DOCUMENTATION)]
    assert not missing, f"neither README nor docs/ mention {missing} of `rfteval {name}`"


def test_readme_starts_with_the_two_commands():
    head = README[:1500]
    assert head.index("make demo") < head.index("make test")


@pytest.mark.parametrize("name, cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_option_has_help(name, cmd):
    bare = [p.opts[0] for p in _options(cmd) if not (p.help or "").strip()]
    assert not bare, f"`rfteval {name}`: no help text for {bare}"


# What an option's value is, in one vocabulary: a word in capitals (FILE, DIR, N, X, SECONDS, URL, ...), possibly
# with a shape (FILE.jsonl, LO,HI, LABEL=MODEL), or the choices themselves (table|json). Never Typer's <path>.
METAVAR = re.compile(r"[A-Z]+(\.jsonl|,[A-Z]+|=[A-Z]+)?|[a-z]+(\|[a-z@^K]+)+")


@pytest.mark.parametrize("name, cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_metavars_are_uniform(name, cmd):
    odd = [(p.opts[0], p.metavar) for p in cmd.params if getattr(p, "param_type_name", "") == "option"
           and not p.is_flag and not getattr(p, "hidden", False) and not METAVAR.fullmatch(p.metavar or "")]
    assert not odd, f"`rfteval {name}`: options without a metavar from the vocabulary: {odd}"
