"""Issue 20's mechanical move: the flat rfteval/ modules into packages that show the layers.

A codemod, not a hand-made move, because other branches keep changing these modules until they merge: run it on
whatever tree is current (`python scripts/restructure.py`, from the repository root, on a clean work tree) and
commit what it did. It

- `git mv`s every module named in MOVES into its package (rfteval/commands/ as a whole into rfteval/cli/);
- rewrites every reference to a moved module in rfteval/, tests/, bench/, scripts/, docs, README and the build
  files: `from rfteval.X import`, `import rfteval.X`, `from rfteval import X` (split per name), lazy imports,
  strings naming modules ("rfteval.runner.foo" monkeypatch targets, `python -m rfteval.cli`), paths such as
  rfteval/stats.py, and `Path(__file__).parents[N]` in a module that moved deeper;
- writes each new package's `__init__.py`: a docstring, and for the public paths the README shows
  (rfteval.compare, .readiness, .stats) lazy re-exports of the module that used to be the package, so importing
  one submodule never loads the rest; rfteval.series, .records, .passk and .sample become tiny alias packages.

It refuses to run twice (rfteval/data/ exists) and refuses a tree holding a top-level module it has no place for
(it names it: add it to MOVES). Nothing here is clever on purpose: each rule is a regular expression over the
old names, applied once, so what it did is what `git diff --stat -M` shows.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

# old dotted module -> new dotted module. A package entry (rfteval.commands) carries its submodules along.
MOVES: dict[str, str] = {
    # data: what a record, a sample, a dataset line and an outputs line are; the run directory's file layout;
    # every file written atomically. Imports errors only (and each other).
    "rfteval.records": "rfteval.data.records",
    "rfteval.sample": "rfteval.data.sample",
    "rfteval.dataset": "rfteval.data.dataset",
    "rfteval.outputs": "rfteval.data.outputs",
    "rfteval.outfile": "rfteval.data.outfile",
    "rfteval.reasoning": "rfteval.data.reasoning",
    # rundir is file names and labels, read by compare and readiness as much as written by run: a data format,
    # so it sits below everything that reads a run directory.
    "rfteval.rundir": "rfteval.data.rundir",
    # stats: pure statistics, numpy in, typed results out.
    "rfteval.stats": "rfteval.stats.paired",
    "rfteval.passk": "rfteval.stats.passk",
    "rfteval.zero_signal": "rfteval.stats.zero_signal",
    "rfteval.agreement": "rfteval.stats.agreement",
    # providers: model clients. The judge client, the retry policy every client call follows (it classifies
    # providers.base's errors) and the price table sit here, below graders and run.
    "rfteval.judge": "rfteval.providers.judge",
    "rfteval.retry": "rfteval.providers.retry",
    "rfteval.pricing": "rfteval.providers.pricing",
    # graders: grading existing outputs is the grading engine over an outputs file.
    "rfteval.grading": "rfteval.graders.grading",
    # readiness: will RFT learn from this dataset and grader?
    "rfteval.readiness": "rfteval.readiness.assess",
    "rfteval.probes": "rfteval.readiness.probes",
    "rfteval.reference": "rfteval.readiness.reference",
    "rfteval.judge_stability": "rfteval.readiness.judge_stability",
    # compare: two sides (or a series) of record files, paired by item, and the gate over the result.
    "rfteval.compare": "rfteval.compare.comparison",
    "rfteval.sides": "rfteval.compare.sides",
    "rfteval.gate": "rfteval.compare.gate",
    "rfteval.series": "rfteval.compare.series",
    "rfteval.simulation": "rfteval.compare.simulation",
    "rfteval.agree": "rfteval.compare.agree",
    # run: the pipeline and what it writes. It ends with the run's comparison (summary.compare_run), so it sits
    # above compare.
    "rfteval.spec": "rfteval.run.spec",
    "rfteval.runner": "rfteval.run.runner",
    "rfteval.store": "rfteval.run.store",
    "rfteval.results": "rfteval.run.results",
    "rfteval.summary": "rfteval.run.summary",
    "rfteval.concurrency": "rfteval.run.concurrency",
    # preflight checks a run spec's models and judge before the run: it reads run.spec, so it leaves providers/.
    "rfteval.providers.preflight": "rfteval.run.preflight",
    "rfteval.batch": "rfteval.run.batch.phase",
    "rfteval.batch_judge": "rfteval.run.batch.judge_phase",
    "rfteval.ray_llm": "rfteval.run.batch.ray_llm",
    # cli: the Typer app and one module per command.
    "rfteval.cli": "rfteval.cli.app",
    "rfteval.commands": "rfteval.cli.commands",
}

# What may stay at the top level (reward may be a module or a package: its own branch decides).
KEEP = {"__init__", "__main__", "errors", "status", "reward", "graders", "providers", "report"}

PACKAGE_DOCS: dict[str, str] = {
    "rfteval.data": "What the files hold: records, samples, dataset and outputs lines, the run directory's layout, "
                    "atomic writes. Imports only rfteval.errors.",
    "rfteval.stats": "Pure statistics: per-item means, paired deltas, pass@k, zero-signal estimators, agreement. "
                     "Numpy in, typed results out; imports nothing above rfteval.errors.",
    "rfteval.readiness": "Will RFT learn from this dataset and grader: the assessment, grader probes, reference "
                         "checks, judge stability.",
    "rfteval.compare": "Two sides of record files (or a baseline and a series) paired by item; the gate; "
                       "two graders' agreement on the same samples.",
    "rfteval.run": "The eval run: the spec, the pipeline, its store and result files, summary.json.",
    "rfteval.run.batch": "The Batch API path: the journal and the batch phase, the judge batch phase, Ray Data.",
    "rfteval.cli": "The Typer app (rfteval.cli.app) and one module per command (rfteval.cli.commands).",
}

# A package whose old module held its contents re-exports that module's public names, lazily.
REEXPORT = {"rfteval.stats": "rfteval.stats.paired", "rfteval.compare": "rfteval.compare.comparison",
            "rfteval.readiness": "rfteval.readiness.assess"}
# Public paths the README shows that have no package of their own any more: tiny alias packages.
ALIASES = {"rfteval.series": "rfteval.compare.series", "rfteval.records": "rfteval.data.records",
           "rfteval.passk": "rfteval.stats.passk", "rfteval.sample": "rfteval.data.sample"}
# Strings that look like module paths but are names of something else (JUnit suite names): left alone.
PRESERVE = ("rfteval.compare.items", "rfteval.compare.gate")

OWN_FILES = {"scripts/restructure.py", "tests/test_restructure.py"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".sh", ".yml", ".yaml", ".cfg", ".ini", ".txt"}
TEXT_NAMES = {"Makefile"}
ROOTS = ("rfteval/", "tests/", "bench/", "scripts/", "docs/", ".github/")
ROOT_FILES = {"README.md", "pyproject.toml", "Makefile", "CONTRIBUTING.md", "CHANGELOG.md"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def fail(message: str) -> None:
    print(f"restructure: {message}", file=sys.stderr)
    raise SystemExit(2)


def module_file(dotted: str, root: Path) -> Path | None:
    """The file or package directory of a dotted module in the tree, or None when it is not there."""
    base = root / Path(*dotted.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base
    return None


def preflight(root: Path, force: bool) -> dict[str, str]:
    """The moves that apply to this tree; refuse a second run, a dirty tree and a module with no place."""
    # __init__.py, not the directory: a __pycache__ left behind by an earlier run's tests is not a package.
    if (root / "rfteval" / "data" / "__init__.py").exists() or (root / "rfteval" / "cli" / "__init__.py").exists():
        fail("already restructured (rfteval/data/ or rfteval/cli/ exists); it runs once, on the flat tree")
    if git("status", "--porcelain", "--untracked-files=no").strip() and not force:
        fail("the work tree has uncommitted changes; commit or stash them first (or --force)")
    present = {p.stem if p.is_file() else p.name for p in (root / "rfteval").iterdir()
               if (p.suffix == ".py") or (p / "__init__.py").is_file()}
    known = {m.split(".")[1] for m in MOVES} | KEEP
    unplaced = sorted(present - known)
    if unplaced:
        fail("no place for top-level module(s) " + ", ".join(f"rfteval/{m}" for m in unplaced)
             + ": add them to MOVES in scripts/restructure.py")
    return {old: new for old, new in MOVES.items() if module_file(old, root) is not None}


def tracked_text_files(root: Path) -> list[Path]:
    out = []
    for name in git("ls-files").splitlines():
        path = root / name
        if not path.is_file() or name in OWN_FILES:
            continue  # this script and its test name the old modules on purpose
        if not (name.startswith(ROOTS) or name in ROOT_FILES):
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            out.append(path)
    return out


def as_path(dotted: str, package: bool) -> str:
    return "/".join(dotted.split(".")) + ("" if package else ".py")


class Rewriter:
    """The text rules, built once from the moves; each applies to the old names only, in one pass."""

    def __init__(self, moves: dict[str, str], packages: set[str], public: set[str]) -> None:
        self.moves = moves
        self.public = public
        names = sorted(moves, key=len, reverse=True)
        self.dotted = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in names) + r")(?!\w)")
        path_alts = []
        self.paths: dict[str, str] = {}
        for old in names:
            is_pkg = old in packages
            old_path, new_path = as_path(old, is_pkg), as_path(moves[old], is_pkg)
            self.paths[old_path] = new_path
            path_alts.append(re.escape(old_path) + (r"(?=/)" if is_pkg else r"(?!\w)"))
        self.path = re.compile(r"(?<![\w/.])(" + "|".join(path_alts) + ")")
        self.from_import = re.compile(r"^([ \t]*)from rfteval import (\(([^)]*)\)|[^\n]*)$", re.MULTILINE)

    def _split_from_import(self, match: re.Match[str]) -> str:
        indent, body = match.group(1), match.group(3) if match.group(3) is not None else match.group(2)
        comment = ""
        if match.group(3) is None and "#" in body:
            body, comment = body.split("#", 1)
            comment = "  #" + comment
        kept, lines = [], []
        for part in (p.strip() for p in body.replace("\n", " ").split(",")):
            if not part:
                continue
            name, _, alias = (x.strip() for x in part.partition(" as "))
            new = self.moves.get(f"rfteval.{name}")
            if new is None:
                kept.append(part)
                continue
            parent, _, leaf = new.rpartition(".")
            local = alias or name
            lines.append(f"{indent}from {parent} import {leaf}" + ("" if leaf == local else f" as {local}"))
        if kept:
            lines.insert(0, f"{indent}from rfteval import {', '.join(kept)}")
        if not lines:
            return match.group(0)
        lines[0] += comment
        return "\n".join(lines)

    def text(self, text: str, markdown: bool) -> str:
        holders = {f"\x00{i}\x00": s for i, s in enumerate(PRESERVE)}
        for key, value in holders.items():
            text = text.replace(value, key)

        def dotted(m: re.Match[str]) -> str:
            # The README's public paths keep working (re-exports, alias packages): the docs keep showing them.
            if markdown and m.group(1) in self.public:
                return m.group(1)
            return self.moves[m.group(1)]

        text = self.dotted.sub(dotted, text)
        # after the dotted rule, which would otherwise rewrite the new `from rfteval.stats import paired`
        text = self.from_import.sub(self._split_from_import, text)
        text = self.path.sub(lambda m: self.paths[m.group(1)], text)
        for key, value in holders.items():
            text = text.replace(key, value)
        return text


def deepen_parents(text: str, delta: int) -> str:
    """`Path(__file__)...parents[N]` in a module that moved `delta` directories deeper still names the same place."""
    if delta == 0:
        return text
    return re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)(\])",
                  lambda m: f"{m.group(1)}{int(m.group(2)) + delta}{m.group(3)}", text)


def wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, width=116, initial_indent=indent, subsequent_indent=indent)


def lazy_init(doc: str, module: str) -> str:
    """A package that hands out its old module's names on first use (rfteval.lazy_reexport), typed for mypy by a
    star import.

    No list of names: the module may gain or lose names on other branches, and this file must not change then.
    """
    why = wrap(f"The names of {module} are re-exported here, lazily: this is the public path the README shows, "
               "and importing one submodule of the package must not load the others.")
    return f'''"""{wrap(doc)}

{why}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rfteval import lazy_reexport

if TYPE_CHECKING:
    from {module} import *  # noqa: F403

__getattr__ = lazy_reexport(globals(), lambda name: "{module}")
'''


def alias_init(old: str, new: str) -> str:
    doc = wrap(f"{old}, the public path the README shows: an alias of {new}, where the code lives.")
    return f'''"""{doc}"""

from {new} import *  # noqa: F403
'''


def move(root: Path, old: str, new: str, packages: set[str]) -> None:
    src = root / as_path(old, old in packages)
    dst = root / as_path(new, old in packages)
    if dst.exists():
        # What an earlier run's tests left at the destination: bytecode caches only, or it is someone's work.
        if any("__pycache__" not in p.relative_to(dst).parts for p in dst.rglob("*") if p.is_file()):
            fail(f"{dst.relative_to(root)} exists and holds files; move it away first")
        shutil.rmtree(dst)
    if src.is_file() and src.with_suffix("") in dst.parents:
        # rfteval/stats.py -> rfteval/stats/paired.py: the file must leave before its package can arrive.
        tmp = src.with_name(f"_restructure_{src.name}")
        git("mv", str(src), str(tmp))
        src = tmp
    dst.parent.mkdir(parents=True, exist_ok=True)
    git("mv", str(src), str(dst))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="run on a work tree with uncommitted changes")
    parser.add_argument("--no-ruff", action="store_true", help="skip sorting the rewritten imports with ruff")
    args = parser.parse_args()
    root = Path(git("rev-parse", "--show-toplevel").strip())
    moves = preflight(root, args.force)
    packages = {old for old in moves if (module_file(old, root) or Path()).is_dir()}
    public = set(REEXPORT) | set(ALIASES)
    rewriter = Rewriter(moves, packages, public)

    # 1. Rewrite every text file in place, before anything moves (the old paths are what the rules know).
    changed = 0
    depth = {old: new.count(".") - old.count(".") for old, new in moves.items()}
    for path in tracked_text_files(root):
        text = path.read_text(encoding="utf-8")
        new_text = rewriter.text(text, markdown=path.suffix == ".md")
        rel = path.relative_to(root).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for old in moves:
            if dotted == old or dotted.startswith(old + "."):
                new_text = deepen_parents(new_text, depth[old])
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")
            changed += 1

    # 2. Move the modules.
    for old, new in moves.items():
        move(root, old, new, packages)

    # 3. The packages' __init__s: a docstring saying what each owns; the public paths re-exported.
    new_packages = sorted({new.rsplit(".", 1)[0] for new in moves.values()} | set(PACKAGE_DOCS))
    for pkg in new_packages:
        init = root / as_path(pkg, True) / "__init__.py"
        if init.exists():
            continue
        doc = wrap(PACKAGE_DOCS.get(pkg, pkg))
        if pkg in REEXPORT:
            target = REEXPORT[pkg]
            body = lazy_init(doc, target)
        else:
            body = f'"""{doc}"""\n'
        init.parent.mkdir(parents=True, exist_ok=True)
        init.write_text(body, encoding="utf-8")
        git("add", str(init))
    for old, new in ALIASES.items():
        if old not in moves:
            continue
        init = root / as_path(old, True) / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.write_text(alias_init(old, new), encoding="utf-8")
        git("add", str(init))

    # 4. Imports sorted again where a rewrite changed their order (ruff's isort rule, the project's lint).
    git("add", "-u")
    if not args.no_ruff:
        result = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "--quiet",
                                 "rfteval", "tests", "bench", "scripts"], capture_output=True, text=True)
        if result.returncode not in (0, 1):
            print(f"restructure: ruff did not run ({result.stderr.strip()[:200]}); sort imports by hand",
                  file=sys.stderr)
        git("add", "-u")
    print(f"restructure: moved {len(moves)} modules, rewrote {changed} files; review `git diff --cached --stat -M`,"
          " then commit")


if __name__ == "__main__":
    main()
