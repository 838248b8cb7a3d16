"""`rfteval export-environment`: an RFT dataset and its grader as an environment package a trainer installs.

`--target prime-rl` writes a verifiers 0.4 taskset package (prime-rl loads tasksets by id from installed packages:
`vf.load_taskset` in its orchestrator, `vf.load_environment` in its env server): DIR/pyproject.toml and DIR/PKG/
holding the dataset (items.jsonl, byte for byte), the grader (grader.json) and the classes verifiers asks for (a
TaskData, a Task whose `@vf.reward` is the grader, a TasksetConfig, the Taskset, and a chat harness, so the run's
config names none). A prime-rl config then names the taskset id and, to train on other files than the bundled
ones, `dataset` and `grader`:

    [orchestrator.train.source.env.taskset]
    id = "rfteval-milo"
    dataset = "datasets/milo/items.jsonl"   # optional: the package's own copy by default
    grader = "graders/milo.json"            # optional: likewise

The work (tasks from the lines, the sampled reply, the score) is rfteval.reward.taskset's, so rfteval must be
installed where the env server runs. A target is a trainer's entry in rfteval.reward.targets; this module's is
prime-rl's."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from rfteval.data.dataset import iter_items
from rfteval.data.json_types import JSONValue
from rfteval.errors import InputError
from rfteval.graders.base import GraderConfig, needs_groups
from rfteval.reward.options import RewardOptions, RewardOptionsArgs
from rfteval.reward.targets import (
    EnvironmentPackage,
    ExportedEnvironment,
    Trainer,
    doc_text,
    environment_package,
    register,
)

NAME = re.compile(r"[a-z][a-z0-9-]*[a-z0-9]")

_PYPROJECT = '''\
[project]
name = "{dash}"
version = "0.1.0"
description = "RFT dataset and grader {grader!r} as a verifiers taskset (written by rfteval export-environment)"
requires-python = ">=3.11"
# rfteval scores the traces (installed where the env server runs); not listed, as it may come from a checkout
dependencies = ["verifiers>=0.4"]

[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{pkg}"]

[tool.setuptools.package-data]
"{pkg}" = ["grader.json", "items.jsonl"]
'''

_INIT = '''\
"""{doc}"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import model_validator
from verifiers.v1.harnesses.null import NullHarness

HERE = Path(__file__).resolve().parent
OPTIONS: dict[str, Any] = json.loads(r"""{options}""")
REFERENCE_FIELD = {reference_field!r}


class {prefix}Data(vf.TaskData):
    """One RFT line: verifiers' id and prompt, the reference as text, and the line itself as JSON text."""

    answer: str = ""
    item: str = ""


class {prefix}TaskConfig(vf.TaskConfig):
    grader: str = ""
    """The grader file; empty: the package's grader.json."""


class {prefix}Task(vf.Task[{prefix}Data, vf.State, {prefix}TaskConfig]):
    @vf.reward(weight=1.0)
    async def rfteval(self, trace: vf.Trace) -> float:
        """The grader's score of the last sampled reply, as `rfteval grade` gives it."""
        from rfteval.reward.taskset import score_trace

        prompt = self.data.prompt
        return await score_trace(self.config.grader or HERE / "grader.json", OPTIONS, self.data.item,
                                 len(prompt) if isinstance(prompt, list) else 0, trace)


class {prefix}Config(vf.TasksetConfig):
    dataset: str = ""
    """The RFT dataset (JSONL); empty: the package's items.jsonl."""
    grader: str = ""
    """The grader file; empty: the package's grader.json (passed on to each task)."""
    task: {prefix}TaskConfig = {prefix}TaskConfig()

    @model_validator(mode="after")
    def _grader_to_task(self) -> {prefix}Config:
        if self.grader and not self.task.grader:
            self.task = self.task.model_copy(update={{"grader": self.grader}})
        return self


class {prefix}Taskset(vf.Taskset[{prefix}Task, {prefix}Config]):
    def load(self) -> list[{prefix}Task]:
        from rfteval.reward.taskset import task_rows

        rows = task_rows(self.config.dataset or HERE / "items.jsonl", REFERENCE_FIELD)
        return [{prefix}Task({prefix}Data.model_validate(row), self.config.task) for row in rows]


class {prefix}Harness(NullHarness):
    """A chat (no tools, no container): the taskset's own harness, so a run's config names none."""


__all__ = ["{prefix}Taskset", "{prefix}Harness"]
'''


def _names(name: str) -> tuple[str, str, str]:
    """(the id and distribution name, the module, the class prefix), as verifiers' own scaffold derives them."""
    dash = name.strip().replace("_", "-").lower()
    if not NAME.fullmatch(dash):
        raise InputError(f"{name!r} is not a package name (lowercase letters, digits and dashes)", field="--name")
    pkg = dash.replace("-", "_")
    prefix = "".join(part[:1].upper() + part[1:] for part in pkg.split("_") if part)
    return dash, pkg, prefix


def default_name(items: Path) -> str:
    """rfteval-<the dataset's name>: its folder for DIR/items.jsonl, else the file's stem."""
    stem = items.parent.name if items.stem == "items" else items.stem
    return "rfteval-" + re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")


def export_environment(config: GraderConfig, items: str | Path, target: str, out: str | Path, *, grader_source: str,
                       name: str | None = None, reference_field: str = "reference_answer",
                       options: Mapping[str, JSONValue] | None = None) -> ExportedEnvironment:
    """Write the package for `target` into `out` (a new or empty folder), whole or not at all."""
    package = environment_package(target)
    options = dict(options or {})
    try:  # fails here, not in the env server (kept as JSON there)
        RewardOptions(**cast(RewardOptionsArgs, options))
    except ValueError as exc:
        raise InputError(str(exc), field="--think-tags" if "think_tags" in str(exc) else "--reasoning") from None
    return package.write(config, Path(items), Path(out), grader_source=grader_source, name=name,
                         reference_field=reference_field, options=options)


def _write_taskset(config: GraderConfig, items: Path, out: Path, *, grader_source: str, name: str | None,
                   reference_field: str, options: Mapping[str, JSONValue]) -> ExportedEnvironment:
    """prime-rl's package: a verifiers taskset."""
    if needs_groups(config):
        raise InputError(f"grader {config.name!r} ranks an item's samples together (group_judge); a verifiers "
                         "taskset scores each trace alone, so its score would mean nothing there", field="type")
    dash, pkg, prefix = _names(name or default_name(items))
    tasks = sum(1 for _ in iter_items(items))  # the file's own errors, named by line, before anything is written
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("exists and is not an empty folder: give a new one", out, field="--out")
    doc = (f"The RFT dataset {items.name} and grader {config.name!r} ({config.type}) as a verifiers taskset, "
           f"written by\n`rfteval export-environment --target prime-rl` from {grader_source}.\n\n"
           f"Install it (pip install -e {out}) beside rfteval, then name it in a prime-rl config:\n\n"
           f"    [orchestrator.train.source.env.taskset]\n    id = \"{dash}\"\n\n"
           "`dataset = \"FILE.jsonl\"` and `grader = \"FILE.json\"` there replace the bundled copies.\n")
    files = {
        "pyproject.toml": _PYPROJECT.format(dash=dash, pkg=pkg, grader=config.name),
        f"{pkg}/__init__.py": _INIT.format(doc=doc_text(doc), prefix=prefix, options=json.dumps(options),
                                           reference_field=reference_field),
        f"{pkg}/grader.json": json.dumps(config.model_dump(mode="json", exclude_unset=True), indent=2) + "\n",
    }
    compile(files[f"{pkg}/__init__.py"], "<export>", "exec")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text, encoding="utf-8")
        shutil.copyfile(items, tmp / pkg / "items.jsonl")
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(f"cannot write ({exc.strerror})", out, field="--out") from None
    return ExportedEnvironment(out, dash, pkg, tasks)


register(Trainer("prime-rl",
                 environment=EnvironmentPackage("prime-rl: a verifiers 0.4 taskset package", _write_taskset)))
