"""run/batch/journal.py: the batch journal: a torn last line cut, and the bytes the dict-based journal wrote
read back and written again alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfteval.run.batch.journal import Journal, read_journal
from tests.support import FIXTURES


def test_a_torn_journal_line_is_cut(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    good = {"event": "planned", "chunk": "base-0001", "label": "base", "model": "m", "endpoint": "/v1/chat/completions",
            "keys": ["k"], "sha256": "0" * 64, "path": "x", "lines": 1, "bytes": 1, "at": 1.0}
    (store / "batches.jsonl").write_text(json.dumps(good) + "\n" + '{"event": "uploaded", "chunk": "base-0001", "fi')
    j = Journal(store)
    assert list(j.chunks) == ["base-0001"] and j.chunks["base-0001"].file_id is None
    j.append({"event": "uploaded", "chunk": "base-0001", "file_id": "file-1"})
    j.close()
    assert read_journal(tmp_path)[0].file_id == "file-1"


JOURNAL_V1 = FIXTURES / "journal_v1" / "batches.jsonl"  # by the dict-based journal (95db486)


def test_a_journal_written_by_the_dict_based_code_reads_back(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "batches.jsonl").write_bytes(JOURNAL_V1.read_bytes())
    done, cancelled, gone = read_journal(tmp_path)
    assert (done.file_id, done.batch_id, done.status, done.done, done.counts) == (
        "file-1", "batch-1", "completed", True, {"completed": 1, "failed": 0, "total": 2})
    assert done.result == {"status": "completed", "batch_id": "batch-1", "stored": 2, "errors": 0, "requeued": 0}
    assert cancelled.phase == "judge" and cancelled.cancel_requested and cancelled.result["message"] == "batch failed: é"
    assert gone.done and gone.status == "abandoned" and gone.planned_at == 1764639000.123


def test_typed_journal_events_write_the_lines_the_dict_based_code_wrote(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    import rfteval.run.batch.journal as ph

    monkeypatch.setattr(ph.time, "time", lambda: 1764639000.1234)
    plan = dict(label="base", model="m", lines=1, bytes=5)
    j = Journal(tmp_path)
    for event in [
        ph.Planned(chunk="base-0001", label="base", model="m", endpoint="/v1/chat/completions", keys=["k1", "k2"],
                   sha256="0" * 64, path="/x/base-0001.jsonl", lines=2, bytes=10),
        ph.Uploaded(chunk="base-0001", file_id="file-1"),
        ph.Created(chunk="base-0001", batch_id="batch-1", status="validating"),
        ph.Status(chunk="base-0001", status="in_progress", counts={"completed": 1, "failed": 0, "total": 2}),
        ph.Collected(chunk="base-0001", status="completed", batch_id="batch-1", stored=2, errors=0, requeued=0),
        ph.Planned(chunk="base-0002", endpoint="/v1/responses", keys=["k3"], sha256="1" * 64,
                   path="/x/base-0002.jsonl", phase="judge", **plan),
        ph.Created(chunk="base-0002", batch_id="batch-2", status="in_progress", adopted=True),
        ph.CancelRequested(chunk="base-0002"),
        ph.Collected(chunk="base-0002", status="failed", batch_id="batch-2", stored=0, requeued=0,
                     message="batch failed: é"),
        ph.Planned(chunk="tuned-0001", endpoint="/v1/chat/completions", keys=["k4"], sha256="2" * 64,
                   path="/x/tuned-0001.jsonl", **{**plan, "label": "tuned", "model": "t"}),
        ph.Abandoned(chunk="tuned-0001", status="abandoned", reason="input file gone before it was submitted"),
    ]:
        j.append(event)
    j.close()
    assert (tmp_path / "batches.jsonl").read_bytes() == JOURNAL_V1.read_bytes()
