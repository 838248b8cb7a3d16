"""readiness/paths.py: assess_path finds the records, grader and dataset, and checks a re-grade's needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfteval.data.records import make_record, write_jsonl
from rfteval.errors import InputError
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade
from rfteval.readiness.paths import ReadinessRequest, assess_path

GRADER = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
          "reference": "{{item.reference_answer}}", "operation": "eq"}


def records_file(tmp_path: Path, item_ids: list[str]) -> Path:
    recs = [apply_grade(make_record(run_id="r", model_label="base", model="m", item_id=iid, epoch=e,
                                    output_text="yes"), GradeResult(float((e + i) % 2)))
            for i, iid in enumerate(item_ids) for e in range(4)]
    path = tmp_path / "base.jsonl"
    write_jsonl(recs, path)
    return path


def files(tmp_path: Path) -> tuple[Path, Path]:
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(GRADER))
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}],
                                           "reference_answer": "yes"}) + "\n" for i in range(3)))
    return grader, dataset


def test_assess_path_assesses_a_record_file(tmp_path):
    path = records_file(tmp_path, ["q0", "q1", "q2"])
    assessed = assess_path(ReadinessRequest(path))
    assert assessed.report.n_items == 3 and assessed.report.label == "base"
    assert assessed.grader is None and assessed.advantages_written == []


def test_a_regrade_needs_the_grader_and_the_dataset(tmp_path):
    with pytest.raises(InputError) as exc:
        assess_path(ReadinessRequest(records_file(tmp_path, ["q0"]), regrade=2))
    assert exc.value.field == "--regrade"


def test_a_regrade_refuses_records_of_items_the_dataset_lacks(tmp_path):
    grader, dataset = files(tmp_path)
    with pytest.raises(InputError) as exc:
        assess_path(ReadinessRequest(records_file(tmp_path, ["q0", "q7"]), grader=grader, dataset=dataset,
                                     regrade=2))
    assert "'q7'" in str(exc.value) and exc.value.field == "id"


def test_readiness_reads_the_records_once_and_checks_sampling_on_them(tmp_path, monkeypatch):
    """The sampling check takes the answers from the records the assessment read, not from the file again; the
    viewer's column selection (no texts) still checks the file."""
    from rfteval.data import records as records_mod
    from rfteval.data import sampling_check
    from tests.compare.test_paths import _run_dir

    base, _ = _run_dir(tmp_path, "jsonl")
    reads: list[Path] = []
    for module, name in ((records_mod, "read_record_rows"), (records_mod, "read_records"),
                         (sampling_check, "file_answers")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda path, *a, real=real, **k: reads.append(Path(path)) or real(path, *a,
                                                                                                             **k))
    whole = assess_path(ReadinessRequest(base)).report
    assert reads == [base] and whole.not_sampling is not None
    reads.clear()
    from rfteval.readiness.paths import SIGNAL_COLUMNS

    signal = assess_path(ReadinessRequest(base, columns=SIGNAL_COLUMNS)).report
    assert reads == [base, base] and signal.not_sampling is not None
    assert signal.not_sampling == whole.not_sampling
