"""The commands are documented where a reader looks (as sqlite-utils' tests/test_docs.py does): every option in the
generated command-line reference (docs/reference/cli.md, scripts/make_cli_reference.py, which must be current), every
command in the README's table of commands and shown in a guide page of docs/; every option has a help text and a
metavar from one vocabulary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from rfteval.cli.app import app
from tests.support import REPO
from tests.support.doc_blocks import blocks

README = (REPO / "README.md").read_text(encoding="utf-8")
REFERENCE = REPO / "docs" / "reference" / "cli.md"
SCRIPT = REPO / "scripts" / "make_cli_reference.py"
# The README and the guides are being rewritten on the `docs` branch (issue 40); until it lands the old README has
# no table of commands and docs/ no guide per command. The lead removes this marker at merge.


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


ROOT_GROUP = typer.main.get_command(app)
COMMANDS = _commands(ROOT_GROUP)
TOP = list(ROOT_GROUP.commands)  # init, run, ..., validate: what the README's table lists


def test_there_are_commands():
    names = {n for n, _ in COMMANDS}
    assert {"grade", "graders", "validate dataset", "validate grader"} <= names


# ---- the generated reference -----------------------------------------------------------------------------------


def run_script(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)


@pytest.mark.slow
def test_the_cli_reference_is_what_the_commands_print() -> None:
    checked = run_script("--check")
    assert checked.returncode == 0, f"{checked.stderr.strip()}: docs/reference/cli.md differs from the commands' --help"


@pytest.mark.slow
def test_the_script_names_a_stale_reference_and_rewrites_it(tmp_path: Path) -> None:
    out = tmp_path / "cli.md"
    assert run_script("--out", out).returncode == 0 and out.read_text() == REFERENCE.read_text()
    out.write_text(out.read_text().replace("Show this message and exit.", "Show this.", 1))
    stale = run_script("--check", "--out", out)
    assert stale.returncode == 1 and "cli.md" in stale.stderr and "make_cli_reference.py" in stale.stderr
    assert run_script("--out", out).returncode == 0 and run_script("--check", "--out", out).returncode == 0


def reference_sections() -> dict[str, str]:
    """`rfteval <command>` -> the --help text under its heading in docs/reference/cli.md."""
    text = REFERENCE.read_text(encoding="utf-8")
    heads = list(re.finditer(r"^#+ `(rfteval[^`]*)`$", text, re.M))
    return {m[1]: text[m.end():nxt.start() if nxt else len(text)] for m, nxt in zip(heads, [*heads[1:], None])}


def test_the_reference_has_a_section_per_command():
    missing = [f"rfteval {n}" for n, _ in COMMANDS if f"rfteval {n}" not in reference_sections()]
    assert not missing, f"docs/reference/cli.md has no section for {missing}: run scripts/make_cli_reference.py"


def _options(cmd):
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)]


WITH_OPTIONS = [(n, c) for n, c in COMMANDS if _options(c)]  # `graders`, `validate spec`: nothing to document


@pytest.mark.parametrize("name, cmd", WITH_OPTIONS, ids=[n for n, _ in WITH_OPTIONS])
def test_every_option_is_in_the_reference(name, cmd):
    section = reference_sections().get(f"rfteval {name}", "")
    missing = [opt for p in _options(cmd) for opt in p.opts[:1]
               if opt.startswith("--") and not re.search(re.escape(opt) + r"\b", section)]
    assert not missing, f"docs/reference/cli.md does not show {missing} of `rfteval {name}`: run {SCRIPT.name}"


# ---- the README's table and the guides -------------------------------------------------------------------------

TABLE_ROW = re.compile(r"^\|\s*`rfteval ([a-z][a-z-]*(?: [a-z][a-z-]*)*)[^`]*`\s*\|", re.M)


@pytest.mark.parametrize("name", TOP)
def test_every_command_has_a_row_in_the_readme_table(name):
    rows = TABLE_ROW.findall(README)  # `rfteval validate dataset` is a row of `validate` too
    assert any(row == name or row.startswith(name + " ") for row in rows), \
        f"README.md's table of commands has no row whose first cell is `rfteval {name}`"


def guide_commands() -> str:
    """The code blocks of the guide pages (docs/*.md and below, but not the generated reference), joined."""
    pages = [p for p in sorted((REPO / "docs").rglob("*.md")) if "reference" not in p.relative_to(REPO / "docs").parts]
    return "\n".join(b.source for p in pages for b in blocks(p))


@pytest.mark.parametrize("name", [n for n, _ in COMMANDS])
def test_every_command_is_shown_in_a_guide(name):
    shown = re.search(rf"(^|[\s$(]|`)rfteval {re.escape(name)}(\s|$)", guide_commands(), re.M)
    assert shown, f"no guide page in docs/ shows `rfteval {name}` in a code block"


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
