"""scripts/restructure.py, issue 20's codemod: each rewrite rule on the kinds of text it meets, in memory.

The script and this file are left alone by the rewrite (they name the old modules on purpose), so these cases
hold before and after the move.
"""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "restructure.py"


@pytest.fixture(scope="module")
def rs():
    spec = importlib.util.spec_from_file_location("restructure", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rewrite(rs):
    rewriter = rs.Rewriter(rs.MOVES, {"rfteval.commands"}, set(rs.REEXPORT) | set(rs.ALIASES))
    return rewriter.text


def test_imports_of_every_form(rewrite):
    assert rewrite("from rfteval.runner import run\n", False) == "from rfteval.run.runner import run\n"
    assert rewrite("import rfteval.commands.common as c\n", False) == "import rfteval.cli.commands.common as c\n"
    assert rewrite("    from rfteval.stats import holm  # lazy\n", False) == "    from rfteval.stats.paired import holm  # lazy\n"
    assert rewrite("from rfteval.graders.base import walk\n", False) == "from rfteval.graders.base import walk\n"


def test_from_rfteval_import_is_split_per_name(rewrite):
    assert rewrite("    from rfteval import passk, rundir as rd, __version__\n", False) == (
        "    from rfteval import __version__\n"
        "    from rfteval.stats import passk\n"
        "    from rfteval.data import rundir as rd\n")
    assert rewrite("from rfteval import stats\n", False) == "from rfteval.stats import paired as stats\n"


def test_strings_paths_and_entry_points(rewrite):
    assert rewrite('monkeypatch.setattr("rfteval.runner.asyncio.sleep", f)', False) == \
        'monkeypatch.setattr("rfteval.run.runner.asyncio.sleep", f)'
    assert rewrite('[sys.executable, "-m", "rfteval.cli"]', False) == '[sys.executable, "-m", "rfteval.cli.app"]'
    assert rewrite('rfteval = "rfteval.cli:main"', False) == 'rfteval = "rfteval.cli.app:main"'
    assert rewrite("see rfteval/stats.py and rfteval/commands/run_cmd.py", False) == \
        "see rfteval/stats/paired.py and rfteval/cli/commands/run_cmd.py"
    unrelated = "rfteval/statsx.py rfteval.statsx myrfteval.stats"
    assert rewrite(unrelated, False) == unrelated


def test_names_that_only_look_like_modules_are_kept(rewrite):
    assert rewrite('ITEMS_SUITE = "rfteval.compare.items"', False) == 'ITEMS_SUITE = "rfteval.compare.items"'
    assert rewrite('logging.getLogger("rfteval.sandbox")', False) == 'logging.getLogger("rfteval.sandbox")'


def test_docs_keep_the_public_paths(rewrite):
    text = "from rfteval.compare import compare_paths\nfrom rfteval.series import compare_series\n`rfteval.reasoning.x`"
    assert rewrite(text, True) == \
        "from rfteval.compare import compare_paths\nfrom rfteval.series import compare_series\n`rfteval.data.reasoning.x`"


def test_a_module_moved_deeper_still_finds_the_repository(rs):
    line = 'here = Path(__file__).resolve().parents[2] / "graders"'
    assert rs.deepen_parents(line, 1) == 'here = Path(__file__).resolve().parents[3] / "graders"'
    assert rs.deepen_parents(line, 0) == line


def test_every_move_goes_into_a_package(rs):
    existing = {"rfteval.graders", "rfteval.providers"}
    for old, new in rs.MOVES.items():
        package = new.rpartition(".")[0]
        assert package in existing or package in rs.PACKAGE_DOCS or package == "rfteval.cli.commands", old
