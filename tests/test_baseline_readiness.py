"""baseline_readiness.py: a comparison's baseline assessed for readiness when it has two or more samples per item,
or why not (too many records to re-read, a file that cannot be read), and how the HTML report says why."""

from __future__ import annotations

import html
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rfteval.baseline_readiness import READINESS_MAX_RECORDS, BaselineReadiness, baseline_readiness
from rfteval.data.records import make_record, write_jsonl
from rfteval.data.sampling_check import NotSampling, SameEpochs
from rfteval.graders.base import GradeResult
from rfteval.graders.grading import apply_grade
from rfteval.report.readiness_render import readiness_sections


def compared(path: Path, records: int, not_sampling: dict[str, NotSampling] | None = None) -> Any:
    """What baseline_readiness reads of a comparison's result: its baseline side, the sides compare found not
    sampled, and the records compare kept (none here: the baseline is read from its file)."""
    return SimpleNamespace(baseline={"label": "base", "path": str(path), "records": records},
                           not_sampling=not_sampling or {}, rows={})


def write_records(path: Path, epochs: int) -> Path:
    rows = [apply_grade(make_record(run_id="r", model_label=label, model="m", item_id=f"q{i}", epoch=e,
                                    output_text="x"), GradeResult(float((i + e) % 2)))
            for label in ("base", "tuned") for i in range(3) for e in range(epochs)]
    write_jsonl(rows, path)
    return path


def test_the_baseline_is_assessed_on_its_own_records_when_it_has_two_samples_per_item(tmp_path: Path) -> None:
    two = baseline_readiness(compared(write_records(tmp_path / "two.jsonl", 2), 12), None)
    assert two is not None and two.label == "base" and two.report is not None
    assert two.report.n_records == 6 and two.report.label == "base"  # the tuned model's records left out
    assert baseline_readiness(compared(write_records(tmp_path / "one.jsonl", 1), 6), None) is None
    big = baseline_readiness(compared(tmp_path / "unread", READINESS_MAX_RECORDS + 1), None)
    assert big == BaselineReadiness("base", skipped_records=READINESS_MAX_RECORDS + 1, path=str(tmp_path / "unread"))
    gone = baseline_readiness(compared(tmp_path / "missing.jsonl", 6), None)
    assert gone is not None and gone.report is None and gone.failed and "missing.jsonl" in gone.failed



def test_compares_check_that_the_baseline_did_not_sample_reaches_its_readiness(tmp_path: Path) -> None:
    """Compare found the baseline's epochs one answer repeated: its readiness section gives no zero-signal verdict
    and says why; the candidate's check is not the baseline's."""
    path = write_records(tmp_path / "two.jsonl", 2)
    flat = NotSampling("base", SameEpochs(3, 2, 2), 1.0)
    found = baseline_readiness(compared(path, 12, {"baseline": flat}), None)
    assert found is not None and found.report is not None and found.report.not_sampling == flat.to_json()
    assert {c.name: c.status for c in found.report.checks}["zero_signal"] == "inconclusive"
    (_, body), = readiness_sections(found)
    assert html.escape(flat.line) in body
    other = baseline_readiness(compared(path, 12, {"candidate": NotSampling("tuned", SameEpochs(3, 2, 2), 1.0)}), None)
    assert other is not None and other.report is not None and other.report.not_sampling is None


def test_readiness_sections_say_why_there_is_no_report():
    assert readiness_sections(None) == []
    (title, body), = readiness_sections(BaselineReadiness("base", skipped_records=READINESS_MAX_RECORDS + 1,
                                                          path="runs/<a>"))
    assert title == "RFT readiness of the baseline (base)"
    assert f"{READINESS_MAX_RECORDS + 1:,} records" in body and "runs/&lt;a&gt;" in body
    (_, body), = readiness_sections(BaselineReadiness("base", failed="bad <line>"))
    assert body == "<p>Not assessed: bad &lt;line&gt;.</p>"
