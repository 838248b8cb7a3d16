"""Is the server sampling? A label whose every item answered the same text in every epoch, although rfteval asked
for a temperature above 0, was not sampled: its epochs are one greedy answer repeated.

Why it matters: readiness's zero-signal shares, its floor and ceiling items and compare's pass@k all read the
spread of an item's epochs as the model's. A server that ignores the temperature (`transformers serve` with a
checkpoint whose generation config does not enable sampling answers every epoch with the same text) makes every
item look all-or-nothing, and readiness would report that as a property of the task.

What counts:
- an answer is a record whose model answered (no generation-stage error: a failure or a refusal is no answer);
  two answers are identical when their text, tool calls and thinking are byte for byte the same;
- an item counts with 2 or more answered epochs; a label is flagged only when at least 2 items count (a tiny run
  proves nothing) and every one of them is identical across its epochs;
- the temperature is what rfteval sent (DIR/spec.resolved.toml: the model's own, else [sampling]). None sent
  counts as asking for sampling: the server's default applies, which is 1.0 on OpenAI's API, and a self-hosted
  server that defaults to its checkpoint's greedy config is the case this check is for. Temperature 0 asked for
  greedy answers: identical epochs are what it asked, no warning. Records without a spec beside them (copied out
  of their run, written by `rfteval grade`), and replayed models, have no known temperature: not checked.

The check stops at the first item whose epochs differ, so a sampling server's records cost a few lines to read.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import msgspec

from rfteval.data.rundir import RESOLVED_SPEC
from rfteval.errors import InputError

if TYPE_CHECKING:
    from rfteval.data.records import RecordRows

MIN_ITEMS = 2  # items with 2+ answered epochs a label needs before its epochs say anything


@dataclass(frozen=True)
class Asked:
    """The temperature rfteval sent a label's model: a number, or None when it sent none (the server's default)."""

    temperature: float | None


@dataclass(frozen=True)
class SameEpochs:
    """Every counted item's epochs were identical: how many items counted, and their fewest and most epochs."""

    items: int
    epochs_min: int
    epochs_max: int


class NotSamplingJSON(TypedDict):
    """A label flagged as not sampled, as summary.json, compare's and readiness's `--format json` hold it."""

    label: str
    items: int
    epochs_min: int
    epochs_max: int
    temperature: float | None  # what rfteval sent; None: none (the server's default)
    message: str


@dataclass(frozen=True)
class NotSampling:
    """A label whose every item's epochs are identical although sampling was asked for."""

    label: str
    same: SameEpochs
    temperature: float | None

    @property
    def line(self) -> str:
        """The one line the run, readiness and compare print."""
        s = self.same
        epochs = f"{s.epochs_min}" if s.epochs_min == s.epochs_max else f"{s.epochs_min}-{s.epochs_max}"
        asked = (f"at temperature {self.temperature}" if self.temperature is not None
                 else "at the server's default temperature (rfteval sent none)")
        return (f"{self.label}: every item's {epochs} epochs are identical ({s.items} items) {asked}: the server is "
                "not sampling (a greedy generation config?); zero-signal and pass@k figures from these epochs say "
                "nothing about the task")

    def to_json(self) -> NotSamplingJSON:
        return {"label": self.label, "items": self.same.items, "epochs_min": self.same.epochs_min,
                "epochs_max": self.same.epochs_max, "temperature": self.temperature, "message": self.line}

    @classmethod
    def from_json(cls, data: NotSamplingJSON) -> NotSampling:
        """Read back from summary.json (the run's readiness takes the run's own check)."""
        return cls(data["label"], SameEpochs(data["items"], data["epochs_min"], data["epochs_max"]),
                   data["temperature"])


# ---------------------------------------------------------------- the pure check


def is_answer(error: object) -> bool:
    """A record whose model answered: no error, or one from grading (the answer is there, its grade failed)."""
    if isinstance(error, float) and math.isnan(error):  # pandas' missing value
        return True
    if not isinstance(error, Mapping):
        return error is None
    return (error.get("stage") or "grade") != "generate"


def identical_epochs(answers: Iterable[tuple[str, object, object]]) -> SameEpochs | None:
    """(item_id, epoch, answer) of a label's answered records in, `SameEpochs` out when every item with 2+ epochs
    answered identically in all of them and at least MIN_ITEMS such items exist; None as soon as one item's
    answers differ (the rest is not read), or when too few items count. An answer is any value compared with ==
    (`answer_key`); a cell given twice counts once."""
    first: dict[str, object] = {}
    epochs: dict[str, set[object]] = {}
    for item_id, epoch, answer in answers:
        if item_id not in first:
            first[item_id] = answer
            epochs[item_id] = set()
        elif first[item_id] != answer:
            return None
        epochs[item_id].add(epoch if epoch is not None else len(epochs[item_id]))
    counts = [len(e) for e in epochs.values() if len(e) >= 2]
    if len(counts) < MIN_ITEMS:
        return None
    return SameEpochs(len(counts), min(counts), max(counts))


def not_sampling(label: str, same: SameEpochs | None, asked: Asked | None) -> NotSampling | None:
    """The warning for a label, or None: its epochs differ, too few items count, its temperature is not known, or
    it was 0 (greedy answers were asked for)."""
    if same is None or asked is None or asked.temperature == 0:
        return None
    return NotSampling(label, same, asked.temperature)


def answer_key(output_text: object, output_tools: object, reasoning_text: object) -> tuple[object, object, object]:
    """What two answers must share to be the same sample: the text, the tool calls, the thinking."""
    if isinstance(output_tools, (list, dict)):
        output_tools = json.dumps(output_tools, sort_keys=True)
    return output_text, output_tools, reasoning_text


def record_answers(records: Iterable[Mapping[str, object]], label: str | None = None,
                   ) -> Iterator[tuple[str, object, object]]:
    """(item_id, epoch, answer) of records as dicts (a record line, a row of `read_records`' frame), the answered
    ones of `label` (every label when None)."""
    for r in records:
        if label is not None and r.get("model_label") not in (None, label):
            continue
        if not is_answer(r.get("error")):
            continue
        epoch = r.get("epoch")
        if isinstance(epoch, float):
            epoch = None if math.isnan(epoch) else int(epoch)
        yield (str(r.get("item_id")), epoch,
               answer_key(r.get("output_text"), r.get("output_tools"), r.get("reasoning_text")))


def check_records(records: Iterable[Mapping[str, object]], label: str, asked: Asked | None) -> NotSampling | None:
    """The check over records held in memory (the run's baseline, readiness's frame as dicts)."""
    if asked is None or asked.temperature == 0:
        return None  # nothing to warn of: no need to look at a single answer
    return not_sampling(label, identical_epochs(record_answers(records, label)), asked)


# ---------------------------------------------------------------- what was asked, what the files hold


def asked_temperature(directory: Path, label: str) -> Asked | None:
    """The temperature rfteval sent `label`'s model, from DIR/spec.resolved.toml (the model's own key, else
    [sampling]'s); None when it is not known: no readable spec, the label not in it, or a replayed model."""
    try:
        spec = tomllib.loads((directory / RESOLVED_SPEC).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    models = spec.get("models")
    model = models.get(label) if isinstance(models, dict) else None
    if not isinstance(model, dict) or "replay" in model or str(model.get("model", "")).startswith("replay:"):
        return None
    sampling = spec.get("sampling")
    value = model.get("temperature", sampling.get("temperature") if isinstance(sampling, dict) else None)
    if value is None:
        return Asked(None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return Asked(float(value))


class _Error(msgspec.Struct):
    stage: str | None = None


class _Line(msgspec.Struct):
    """The fields of a record line the check reads; the others are skipped by the decoder, unparsed."""

    model_label: str | None = None
    item_id: str | int | None = None
    epoch: int | None = None
    output_text: str | None = None
    output_tools: msgspec.Raw = msgspec.Raw(b"null")
    reasoning_text: str | None = None
    error: _Error | None = None


_COLUMNS = ("model_label", "item_id", "epoch", "output_text", "output_tools", "reasoning_text", "error")


def file_answers(path: Path, label: str | None) -> Iterator[tuple[str, object, object]]:
    """(item_id, epoch, answer) of a record file's answered records of `label`, read as they are needed (a JSONL
    file line by line, a Parquet file batch by batch). Raises ValueError (or OSError) on a file it cannot read."""
    from rfteval.data.records import iter_jsonl_fields, iter_parquet_records

    if path.suffix == ".parquet":
        yield from record_answers(iter_parquet_records(path, _COLUMNS), label)
        return
    for r in iter_jsonl_fields(path, _Line):
        assert isinstance(r, _Line)
        if label is not None and r.model_label not in (None, label):
            continue
        if r.error is not None and (r.error.stage or "grade") == "generate":
            continue
        yield str(r.item_id), r.epoch, (r.output_text, bytes(r.output_tools), r.reasoning_text)


def check_file(path: Path, label: str, asked: Asked | None) -> NotSampling | None:
    """The check over a record file (`label`'s records in it); a file it cannot read is not checked (the commands
    read it for their own figures, and say what is wrong with it there)."""
    if asked is None or asked.temperature == 0:
        return None
    try:
        same = identical_epochs(file_answers(path, label))
    except (OSError, ValueError, msgspec.MsgspecError, InputError):
        return None
    return not_sampling(label, same, asked)


def check_rows(rows: RecordRows, label: str) -> NotSampling | None:
    """check_path over a record file's records already read (read_record_rows), with the temperature its run's
    spec says rfteval sent: the file is not read again."""
    asked = asked_temperature(rows.path.parent, label)
    if asked is None or asked.temperature == 0:
        return None  # as check_records: nothing to warn of, no record looked at
    return check_records(rows.dicts(), label, asked)


def check_path(path: str | Path, label: str) -> NotSampling | None:
    """The check of `label`'s records in a record file, with the temperature its run's spec (beside the file)
    says rfteval sent."""
    path = Path(path)
    return check_file(path, label, asked_temperature(path.parent, label))
