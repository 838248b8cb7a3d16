"""The trainer registry: what `rfteval export-reward`, `export-dataset` and `export-environment` write for each
trainer, looked up by its --target name.

Each trainer's module registers its entry (`register`): the module text export-reward writes, the dataset shape
export-dataset writes, or the package export-environment writes, whichever the trainer has. Importing
rfteval.reward imports every built-in trainer module, in the order --target lists them, so a new trainer is its
module plus one line there, as a new grader type is."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject, JSONValue
    from rfteval.graders.base import GraderConfig

# The three exports a trainer may have, each a command's --target.
Export = Literal["reward", "dataset", "environment"]


@dataclass(frozen=True)
class ModuleRequest:
    """What a trainer's part of an export-reward module is written from."""

    grader: str  # the grader's name
    stem: str  # the module's name (the file's stem)
    out: str | Path  # the file, as the user gave it
    options: Mapping[str, object]  # the factory's options the module stores


@dataclass(frozen=True)
class ModuleText:
    """A trainer's part of an export-reward module: the docstring's title and usage, and the module's tail (the
    functions the trainer calls, over the shared `_get()`)."""

    title: str
    usage: str
    tail: str


@dataclass(frozen=True)
class RewardModule:
    """`export-reward --target NAME`: a module whose functions serve the trainer's reward contract."""

    summary: str  # the name and what the module exposes, as --help lists it: "trl (a reward function)"
    factory: str  # the factory the module builds its reward with, imported from factory_module
    text: Callable[[ModuleRequest], ModuleText]
    keys: tuple[str, ...] = ()  # the factory's options besides RewardOptions (their flags refuse other targets)
    check: Callable[[Mapping[str, object]], None] | None = None  # refuses options the trainer cannot take
    # The trainer's name when it hands the reward text only (no messages): a grader reading sample.rollout is refused
    text_only: str | None = None
    factory_module: str = "rfteval.reward"


@dataclass(frozen=True)
class RowParts:
    """One line as a dataset row is built from it."""

    prompt: JSONValue  # the messages as the trainer's chat template gets them
    line: JSONObject  # the line (its id added when a line lacked one)
    fields: JSONObject  # the line's fields, those its reader would change as JSON text
    meta: str  # the META column (rfteval.reward.items.META)
    data_source: str
    reference_field: str

    @property
    def reference(self) -> str:
        """The line's reference as the text column a trainer expects (verl's ground_truth, verifiers' answer)."""
        value = self.line.get(self.reference_field)
        if value is None:
            return ""
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class DatasetShape:
    """`export-dataset --target NAME`: the rows the trainer's loader reads. Either `row`, whose fields must come
    back from the trainer's reader exactly (export_dataset checks that), or `text_row`, which holds the line as
    JSON text (nothing for a reader to change)."""

    summary: str  # the name as --help lists it, perhaps with a word: "verl (parquet)"
    row: Callable[[RowParts], JSONObject] | None = None
    text_row: Callable[[JSONValue, JSONObject, str], JSONObject] | None = None  # (prompt, the line, its id)
    parquet: bool = False  # the file is train.parquet (read back through parquet), else train.jsonl
    prompt_column: bool = False  # the prompt column is also the line's messages when it reads back exactly

    @property
    def file(self) -> str:
        return "train.parquet" if self.parquet else "train.jsonl"


@dataclass(frozen=True)
class ExportedEnvironment:
    path: Path
    name: str  # the id a trainer's config names
    module: str
    tasks: int


class PackageWriter(Protocol):
    def __call__(self, config: GraderConfig, items: Path, out: Path, *, grader_source: str, name: str | None,
                 reference_field: str, options: Mapping[str, JSONValue]) -> ExportedEnvironment: ...


@dataclass(frozen=True)
class EnvironmentPackage:
    """`export-environment --target NAME`: a package the trainer installs, holding the dataset and the grader."""

    summary: str  # the name and the package, as --help lists it: "prime-rl: a verifiers 0.4 taskset package"
    write: PackageWriter  # writes the package into a new or empty folder, whole or not at all


@dataclass(frozen=True)
class Trainer:
    """One registry entry: a trainer and the exports it has."""

    name: str
    reward: RewardModule | None = None
    dataset: DatasetShape | None = None
    environment: EnvironmentPackage | None = None


TRAINERS: dict[str, Trainer] = {}


def register(trainer: Trainer) -> Trainer:
    """A trainer's module registers its entry; --target lists the entries in the order they were registered."""
    TRAINERS[trainer.name] = trainer
    return trainer


def doc_text(text: str) -> str:
    """Text safe inside a triple-quoted docstring of a written module (names and paths are the user's)."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _part(trainer: Trainer, export: Export) -> RewardModule | DatasetShape | EnvironmentPackage | None:
    return trainer.reward if export == "reward" else trainer.dataset if export == "dataset" else trainer.environment


def targets(export: Export) -> list[str]:
    """The --target names of one export, in registration order."""
    return [name for name, trainer in TRAINERS.items() if _part(trainer, export) is not None]


def summaries(export: Export) -> str:
    """The targets as --help lists them: "a (what it is), b (...) or c (...)"."""
    parts = [part.summary for trainer in TRAINERS.values() if (part := _part(trainer, export)) is not None]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


def _unknown(export: Export, name: str) -> ValueError:
    return ValueError(f"unknown target {name!r}; expected {', '.join(targets(export))}")


def reward_module(name: str) -> RewardModule:
    """export-reward's entry for --target NAME."""
    trainer = TRAINERS.get(name)
    if trainer is None or trainer.reward is None:
        raise _unknown("reward", name)
    return trainer.reward


def dataset_shape(name: str) -> DatasetShape:
    """export-dataset's entry for --target NAME."""
    trainer = TRAINERS.get(name)
    if trainer is None or trainer.dataset is None:
        raise _unknown("dataset", name)
    return trainer.dataset


def environment_package(name: str) -> EnvironmentPackage:
    """export-environment's entry for --target NAME."""
    trainer = TRAINERS.get(name)
    if trainer is None or trainer.environment is None:
        raise _unknown("environment", name)
    return trainer.environment
