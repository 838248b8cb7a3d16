"""rfteval.data.sampling_check: a label whose every item's epochs are identical although sampling was asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rfteval.data.records import error_dict, make_record, write_jsonl, write_parquet
from rfteval.data.rundir import RESOLVED_SPEC
from rfteval.data.sampling_check import (
    Asked,
    NotSampling,
    SameEpochs,
    asked_temperature,
    check_file,
    check_path,
    check_records,
    identical_epochs,
    not_sampling,
    record_answers,
)


def rec(item: str, epoch: int, text: str | None, label: str = "base", **kw: object) -> dict[str, object]:
    """A record line as a dict (what `read_records` rows and JSON lines look like)."""
    return {"model_label": label, "item_id": item, "epoch": epoch, "output_text": text, "output_tools": None,
            "reasoning_text": None, "error": None, **kw}


def greedy(items: int = 3, epochs: int = 3, label: str = "base") -> list[dict[str, object]]:
    """Every epoch of an item the same answer; items differ from each other (the greedy server's records)."""
    return [rec(f"q{i}", e, f"answer {i}", label) for i in range(items) for e in range(1, epochs + 1)]


# ---------------------------------------------------------------- the pure check


def test_every_item_identical_across_its_epochs_is_flagged_with_its_counts() -> None:
    assert identical_epochs(record_answers(greedy(4, 3))) == SameEpochs(items=4, epochs_min=3, epochs_max=3)


def test_one_item_whose_epochs_differ_clears_the_label() -> None:
    records = greedy(4, 3)
    records[-1]["output_text"] = "another answer"  # the last epoch of the last item: sampled after all
    assert identical_epochs(record_answers(records)) is None


def test_it_stops_at_the_first_item_whose_epochs_differ() -> None:
    """A sampling server's records cost a few lines: nothing after the first differing item is read."""
    read: list[str] = []

    def answers() -> Iterator[tuple[str, object, object]]:
        for item, epoch, text in [("q0", 1, "a"), ("q0", 2, "b"), ("q1", 1, "c"), ("q1", 2, "c")]:
            read.append(f"{item}/{epoch}")
            yield item, epoch, text

    assert identical_epochs(answers()) is None
    assert read == ["q0/1", "q0/2"]


def test_a_tiny_run_does_not_trip_it() -> None:
    """One item with 2+ epochs proves nothing; items with one answered epoch do not count."""
    one_item = greedy(1, 3) + [rec("q9", 1, "x")]
    assert identical_epochs(record_answers(one_item)) is None
    one_epoch = greedy(5, 1)
    assert identical_epochs(record_answers(one_epoch)) is None
    assert identical_epochs(record_answers(greedy(2, 2))) == SameEpochs(2, 2, 2)


def test_failed_generations_and_refusals_are_no_answer_grading_errors_are() -> None:
    records = greedy(3, 3)
    # an epoch that never answered, and a refusal: left out; q2 keeps one answered epoch, so it does not count
    records[6] = rec("q2", 1, None, error=error_dict("generate", "timeout", "no answer"))
    records[7] = rec("q2", 2, "I can't help with that", error=error_dict("generate", "refusal", "refused"))
    assert identical_epochs(record_answers(records)) == SameEpochs(2, 3, 3)
    # a grading error keeps the answer: a different text there is a different sample
    records[0] = rec("q0", 1, "changed", error=error_dict("grade", "GraderError", "bad"))
    assert identical_epochs(record_answers(records)) is None


def test_epochs_counted_per_item_and_a_cell_given_twice_once() -> None:
    records = greedy(2, 2) + [rec("q0", 3, "answer 0"), rec("q0", 3, "answer 0")]  # q0: 3 epochs, one repeated
    assert identical_epochs(record_answers(records)) == SameEpochs(2, 2, 3)


def test_same_text_but_different_tool_calls_or_thinking_is_sampling() -> None:
    tools = greedy(2, 2)
    tools[1]["output_tools"] = [{"name": "f", "arguments": "{\"x\": 2}"}]
    assert identical_epochs(record_answers(tools)) is None
    thinking = greedy(2, 2)
    thinking[3]["reasoning_text"] = "a different thought"
    assert identical_epochs(record_answers(thinking)) is None


def test_records_of_another_label_are_not_this_labels() -> None:
    mixed = greedy(3, 3, "base") + [rec(f"q{i}", e, f"{i}-{e}", "tuned") for i in range(3) for e in (1, 2, 3)]
    assert identical_epochs(record_answers(mixed, "base")) == SameEpochs(3, 3, 3)
    assert identical_epochs(record_answers(mixed, "tuned")) is None


# ---------------------------------------------------------------- the temperature asked for


def test_the_warning_names_the_label_epochs_and_temperature_asked() -> None:
    found = check_records(greedy(4, 3), "base", Asked(1.0))
    assert found == NotSampling("base", SameEpochs(4, 3, 3), 1.0)
    assert found.line == ("base: every item's 3 epochs are identical (4 items) at temperature 1.0: the server is not "
                          "sampling (a greedy generation config?); zero-signal and pass@k figures from these epochs "
                          "say nothing about the task")
    assert "\n" not in found.line
    assert NotSampling.from_json(found.to_json()) == found


def test_temperature_zero_asked_for_greedy_answers_no_warning() -> None:
    assert check_records(greedy(4, 3), "base", Asked(0.0)) is None
    assert not_sampling("base", SameEpochs(4, 3, 3), Asked(0.0)) is None


def test_no_temperature_sent_is_the_servers_default_and_warned_of() -> None:
    found = check_records(greedy(4, 3), "base", Asked(None))
    assert found is not None and found.temperature is None
    assert "at the server's default temperature (rfteval sent none)" in found.line


def test_an_unknown_temperature_is_not_checked() -> None:
    assert check_records(greedy(4, 3), "base", None) is None


def write_spec(directory: Path, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RESOLVED_SPEC).write_text(text, encoding="utf-8")


def test_asked_temperature_reads_the_models_own_key_else_the_runs(tmp_path: Path) -> None:
    write_spec(tmp_path, 'dataset = "d.jsonl"\n\n[sampling]\ntemperature = 0.7\n\n[models.base]\nmodel = "m"\n\n'
                         '[models.tuned]\nmodel = "t"\ntemperature = 0.0\n\n[models.old]\nmodel = "replay:old.jsonl"\n')
    assert asked_temperature(tmp_path, "base") == Asked(0.7)
    assert asked_temperature(tmp_path, "tuned") == Asked(0.0)
    assert asked_temperature(tmp_path, "old") is None  # a replay sends nothing
    assert asked_temperature(tmp_path, "absent") is None
    write_spec(tmp_path / "unset", '[models.base]\nmodel = "m"\n')
    assert asked_temperature(tmp_path / "unset", "base") == Asked(None)
    assert asked_temperature(tmp_path / "nothing", "base") is None  # no spec: not known


# ---------------------------------------------------------------- record files


def records_of(rows: list[dict[str, object]]) -> list:
    out = []
    for r in rows:
        record = make_record(run_id="r", model_label=str(r["model_label"]), model="m", item_id=str(r["item_id"]),
                             epoch=int(r["epoch"]), output_text=r["output_text"])  # type: ignore[arg-type]
        record.score = 0.0
        out.append(record)
    return out


@pytest.mark.parametrize("suffix", ["jsonl", pytest.param("parquet", marks=pytest.mark.slow)])
def test_record_files_of_a_run_directory(tmp_path: Path, suffix: str) -> None:
    """A JSONL file read line by line and a Parquet file (two labels in it) batch by batch give the same answer."""
    sampled = [rec(f"q{i}", e, f"{i}-{e}", "tuned") for i in range(3) for e in (1, 2, 3)]
    write_spec(tmp_path, '[sampling]\ntemperature = 1.0\n\n[models.base]\nmodel = "m"\n\n[models.tuned]\nmodel = "t"\n')
    path = tmp_path / f"results.{suffix}"
    (write_jsonl if suffix == "jsonl" else write_parquet)(records_of(greedy(3, 3) + sampled), path)
    found = check_path(path, "base")
    assert found is not None and found.same == SameEpochs(3, 3, 3) and found.temperature == 1.0
    assert check_path(path, "tuned") is None
    assert check_file(path, "base", Asked(0.0)) is None


def test_a_file_it_cannot_read_is_not_checked(tmp_path: Path) -> None:
    bad = tmp_path / "base.jsonl"
    bad.write_text('{"item_id": "q0", "epoch": "one"}\n')
    assert check_file(bad, "base", Asked(1.0)) is None
    assert check_file(tmp_path / "missing.jsonl", "base", Asked(1.0)) is None
