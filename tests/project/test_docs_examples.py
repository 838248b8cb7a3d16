"""The examples in README.md and docs/**/*.md run as printed: every ```sh, ```bash, ```console and ```python block
either runs here (one test per block, its id `file:line`) or carries a marker saying why not
(tests/support/doc_blocks.py's MARKERS: needs live endpoint, fragment, installs, interactive); the output shown after
a command (a ```text block right after a sh/bash/python block, or the lines under a `$ ` command of a console block)
is compared with what the command prints.

How a block runs (what a reader has after `make demo`, offline):
- in a working directory per documentation file, shared by that file's blocks in the order they appear (a reader
  runs them in order: an export, then the Python that loads it): a copy of the checkout's datasets/ and graders/,
  links to scripts/, examples/ and the rest, and the demo's ChipStack run at runs/demo-chipstack (made once, by
  replay, as scripts/demo.sh makes it);
- shell blocks with bash (`-e -o pipefail`), `rfteval` and `python` the venv's; Python blocks with the venv's
  interpreter; both at 120 columns (scripts/demo.sh's width in a log), no colour; every process the block started
  is stopped after it;
- with no network: proxies and OpenAI's base URL point at a closed port of 127.0.0.1, and an unmarked block naming a
  host other than 127.0.0.1/localhost fails before it runs.
Output is compared after normalising what changes from run to run (the working directory's path, timings, dates;
trailing spaces); a line `...` in the shown output stands for any number of lines.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli_run_files import RFTEVAL
from tests.support.doc_blocks import MARKERS, SHELLS, Block, all_blocks

ROOT = REPO
BLOCKS = all_blocks()
EXAMPLES = [b for b in BLOCKS if b.runnable]
TO_RUN = [b for b in EXAMPLES if b.marker is None]
PYTHON = [b for b in EXAMPLES if b.lang == "python"]
VENV_BIN = Path(sys.executable).parent
TIMEOUT = 300  # seconds: only keeps a hung block from stalling the suite
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, so a request fails at once instead of leaving

# ---- what every block must be ------------------------------------------------------------------------------------


def test_the_docs_have_examples_that_run() -> None:
    assert len(TO_RUN) >= 10, [b.where for b in TO_RUN]
    assert any(b.output for b in TO_RUN) and any(b.lang == "console" for b in TO_RUN)


def test_every_marker_is_one_of_the_known_ones() -> None:
    unknown = [(b.where, b.marker) for b in BLOCKS if b.marker is not None and b.marker not in MARKERS]
    assert not unknown, f"unknown example markers (tests/support/doc_blocks.py's MARKERS): {unknown}"
    on_other = [b.where for b in BLOCKS if b.marker is not None and not b.runnable]
    assert not on_other, f"a marker on a block that would not run anyway: {on_other}"


COMMAND_START = re.compile(r"^\s*(\$ |rfteval |python |make |pip |export |vllm |curl )")


def test_a_block_of_commands_says_its_language() -> None:
    """A command in an unlabelled block would escape the runner: it must be ```sh, ```bash or ```console."""
    bare = [b.where for b in BLOCKS if not b.lang and COMMAND_START.match(b.source)]
    assert not bare, f"blocks of commands without a language (```sh, or ```console for a transcript): {bare}"


HOST = re.compile(r"\b[a-z][a-z0-9+.-]*://(?!127\.0\.0\.1[:/]|localhost[:/])[^\s'\"]+")


@pytest.mark.parametrize("block", TO_RUN, ids=[b.where for b in TO_RUN])
def test_an_unmarked_example_reaches_no_other_host(block: Block) -> None:
    hosts = HOST.findall(block.source)
    assert not hosts, f"{block.where}: reaches {hosts}: mark it <!-- example: needs live endpoint -->"


# an install run by the tests would change the venv they run in (pip install -e of a temporary copy redirects the
# editable install there): such a block is refused unless marked `installs`, before anything runs
INSTALLS = re.compile(r"(^|[;&|(]\s*|\s)(pip3?|uv pip|apt-get|apt|make)\s+(install|[a-z][\w-]*)?|python3? -m pip\b",
                      re.M)


@pytest.mark.parametrize("block", TO_RUN, ids=[b.where for b in TO_RUN])
def test_an_unmarked_example_installs_nothing(block: Block) -> None:
    code = "\n".join(line for line in block.source.splitlines() if not line.lstrip().startswith("#"))
    found = INSTALLS.search(code) if block.lang in SHELLS else None
    assert not found, f"{block.where}: runs {found.group(0).strip()!r}: mark it <!-- example: installs -->"


def test_the_install_guard_knows_an_install_from_a_mention() -> None:
    for text in ("pip install -e '.[graders]'", "make demo", "cd x && make test", "python -m pip install rich",
                 "apt-get install bubblewrap"):
        assert INSTALLS.search(text), text
    for text in ("rfteval run --model base=m", "rfteval export-reward g.json --target trl", "echo makes sense"):
        assert not INSTALLS.search(text), text


# ---- the Python examples' imports --------------------------------------------------------------------------------


def rfteval_imports(source: str) -> list[tuple[str, str | None]]:
    """(module, name or None) of each rfteval import in a block."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rfteval":
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "rfteval"]
    return out


def test_the_docs_have_python_examples() -> None:
    # the parser finds the imports (docs/python.md's library example, judges.md, readiness.md)
    assert sum(1 for b in PYTHON if rfteval_imports(b.source)) >= 3


@pytest.mark.parametrize("block", PYTHON, ids=[b.where for b in PYTHON])
def test_every_rfteval_import_in_the_docs_resolves(block: Block) -> None:
    """Marked blocks too: a fragment that imports from a module that moved misleads as much as a whole program."""
    for module, name in rfteval_imports(block.source):
        mod = importlib.import_module(module)
        assert name is None or hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}"), \
            f"{block.where}: `from {module} import {name}` fails"


# ---- running them ------------------------------------------------------------------------------------------------


def make_demo_run(out: Path) -> None:
    """runs/demo-chipstack as scripts/demo.sh makes it: the ChipStack recordings replayed, 3 epochs."""
    data = ROOT / "datasets" / "chipstack"
    subprocess.run([*RFTEVAL, "run", "--dataset", str(data / "items.jsonl"), "--grader",
                    str(ROOT / "graders" / "chipstack.json"), "--model", f"base=replay:{data}/recordings/base.jsonl",
                    "--model", f"tuned=replay:{data}/recordings/tuned.jsonl", "--epochs", "3", "--out", str(out),
                    "--quiet"], check=True, capture_output=True, timeout=TIMEOUT)


COPIED = ("datasets", "graders")  # blocks may write beside them (an export, a grade's --out): never into the checkout
LINKED = ("scripts", "examples", "bench", "docs", "tests", "rfteval", "Makefile", "pyproject.toml")


@pytest.fixture(scope="session")
def workdirs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Block], Path]:
    """The working directory of a block's documentation file (made at its first block; the demo run copied in when
    a block of the file reads runs/)."""
    made: dict[Path, Path] = {}
    demo: list[Path] = []

    def workdir(block: Block) -> Path:
        if block.path not in made:
            where = tmp_path_factory.mktemp(re.sub(r"\W", "-", block.path.relative_to(ROOT).as_posix()))
            for name in COPIED:
                shutil.copytree(ROOT / name, where / name, symlinks=True)
            for name in LINKED:
                (where / name).symlink_to(ROOT / name)
            made[block.path] = where
        where = made[block.path]
        if "runs/demo-chipstack" in block.source and not (where / "runs" / "demo-chipstack").exists():
            if not demo:
                demo.append(tmp_path_factory.mktemp("demo-run") / "demo-chipstack")
                make_demo_run(demo[0])
            shutil.copytree(demo[0], where / "runs" / "demo-chipstack")
        return where

    return workdir


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("FORCE_COLOR", "CI")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT), COLUMNS="120",
               LINES="50", NO_COLOR="1", TERM="dumb", HTTP_PROXY=CLOSED, HTTPS_PROXY=CLOSED, http_proxy=CLOSED,
               https_proxy=CLOSED, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               OPENAI_BASE_URL=f"{CLOSED}/v1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """The exit status and the output (stdout and stderr in one, as a terminal shows them) of one process; when it
    ends, everything it started (a block's background server) is stopped. The output goes to a file, not a pipe, so
    a background process holding it open does not keep the block running."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=environment(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            status = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            status = -1
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        out.seek(0)
        printed = out.read()
    return status, printed + (f"\n(stopped after {TIMEOUT} s)" if status == -1 else "")


def shell(source: str, cwd: Path) -> tuple[int, str]:
    return run(["bash", "-e", "-o", "pipefail", "-c", source], cwd)


def python(source: str, cwd: Path) -> tuple[int, str]:
    return run([sys.executable, "-c", source], cwd)


def console(source: str) -> list[tuple[str, str]]:
    """(command, the output shown under it) of each `$ ` command of a console block; a command goes on over lines
    ending in a backslash."""
    out: list[tuple[str, list[str]]] = []
    going_on = False
    for line in source.splitlines():
        if going_on:
            out[-1] = (out[-1][0] + "\n" + line, out[-1][1])
        elif line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
        else:
            raise AssertionError(f"a console block starts with output, not a `$ ` command: {line!r}")
        going_on = (going_on or line.startswith("$ ")) and line.endswith("\\")
    return [(command, "\n".join(shown)) for command, shown in out]


TIMINGS = [(re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<date>"),
           (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds|min|minutes)\b"), "<time>"),
           (re.compile(r"\b\d+:\d\d:\d\d\b"), "<time>")]


def normalise(text: str, cwd: Path) -> list[str]:
    """The lines of `text` with what changes between runs replaced: the working directory (and the checkout it
    links to) as paths relative to it, timings and dates, trailing spaces and blank lines around."""
    for where in (cwd.resolve(), cwd):
        text = text.replace(f"{where}/", "").replace(str(where), ".")
    text = text.replace(f"{ROOT}/", "")
    for pattern, placeholder in TIMINGS:
        text = pattern.sub(placeholder, text)
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether `printed` is `shown`, a line `...` of `shown` standing for any number of lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line) + r"\n" for line in shown)
    return re.fullmatch(pattern, "".join(line + "\n" for line in printed)) is not None


def check_output(block: Block, command: str, shown: str, printed: str, cwd: Path) -> None:
    want, got = normalise(shown, cwd), normalise(printed, cwd)
    if not matches(want, got):
        diff = "\n".join(difflib.unified_diff(want, got, "shown in the docs", "printed", lineterm=""))
        pytest.fail(f"{block.where}: `{command.splitlines()[0]}` printed something other than the docs show "
                    f"(- shown, + printed):\n{diff}", pytrace=False)


def check_status(block: Block, status: int, printed: str) -> None:
    if status != 0:
        pytest.fail(f"{block.where}: exit {status}:\n{printed[-4000:]}", pytrace=False)


def test_the_runner_compares_as_documented(tmp_path: Path) -> None:
    """The comparison itself: `...` stands for any lines (none too), anything else must be printed as shown; the
    working directory, timings and trailing spaces are normalised; a console block splits into its commands."""
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"]) and not matches(["a", "...", "d"], ["a", "b"])
    printed = f"wrote {tmp_path}/runs/x/summary.json in 1.25 s   \n{tmp_path}\n"
    assert normalise(printed, tmp_path) == ["wrote runs/x/summary.json in <time>", "."]
    assert console("$ rfteval a \\\n    --b\nout 1\nout 2\n$ rfteval c\n") == [
        ("rfteval a \\\n    --b", "out 1\nout 2"), ("rfteval c", "")]


SLOW = re.compile(r"\brfteval (run|grade|agree|readiness|probe-grader|compare|view)\b|runs/|GradingEngine|compare_")


def params() -> Iterator[object]:
    for b in TO_RUN:
        yield pytest.param(b, id=b.where, marks=[pytest.mark.slow] if SLOW.search(b.source) else [])


@pytest.mark.parametrize("block", params())
def test_the_example_runs_as_printed(block: Block, workdirs: Callable[[Block], Path]) -> None:
    cwd = workdirs(block)
    if block.lang in SHELLS and INSTALLS.search("\n".join(line for line in block.source.splitlines()
                                                          if not line.lstrip().startswith("#"))):
        pytest.fail(f"{block.where}: installs: mark it <!-- example: installs -->", pytrace=False)
    if HOST.search(block.source):
        pytest.fail(f"{block.where}: reaches a host other than 127.0.0.1: mark it needs live endpoint", pytrace=False)
    if block.lang == "console":
        for command, shown in console(block.source):
            status, printed = shell(command, cwd)
            if shown.strip():
                check_output(block, command, shown, printed, cwd)  # a transcript may show a failing command
            else:
                check_status(block, status, printed)
        return
    status, printed = (shell if block.lang in SHELLS else python)(block.source, cwd)
    check_status(block, status, printed)
    if block.output is not None:
        check_output(block, block.source, block.output, printed, cwd)


# ---- what the library example (docs/python.md) computes -----------------------------------------------------


@pytest.mark.slow
def test_the_readme_library_example_computes_on_the_demo_run(workdirs: Callable[[Block], Path]) -> None:
    """The library example (docs/python.md's "From Python" block, once the README's), run in-process on the demo's
    ChipStack run: beyond running, it computes what it says (the grade of a right answer, a row per record, a paired
    delta, a readiness verdict)."""
    (block,) = [b for b in PYTHON if b.path == ROOT / "docs" / "python.md" and "compare_paths" in b.source]
    cwd = os.getcwd()
    os.chdir(workdirs(block))
    try:
        scope: dict[str, object] = {}
        exec(compile(block.source, block.where, "exec"), scope)  # noqa: S102  (our own documentation)
    finally:
        os.chdir(cwd)
    assert scope["r"].score == 1.0  # type: ignore[attr-defined]
    data = ROOT / "datasets" / "chipstack"
    items = sum(1 for line in (data / "items.jsonl").read_text().splitlines() if line.strip())
    assert len(scope["df"]) == items * 3 * 2  # type: ignore[arg-type]  (both models, every epoch)
    result = scope["result"]
    assert {"mean", "ci95"} <= set(result.delta)  # type: ignore[attr-defined]
    assert scope["report"].verdict  # type: ignore[attr-defined]
