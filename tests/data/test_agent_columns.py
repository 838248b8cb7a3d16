"""rfteval.data.agent_columns: an agent run's record fields in the normalised frame, from JSONL (fast and line by line)
and Parquet alike, and its transcripts never parsed: a Parquet column left unread, each JSONL line cut before its
transcript a chunk at a time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rfteval.data import agent_columns
from rfteval.data.frame import TOOL_ERROR, frame_from_records, load_frame, read_frame
from rfteval.data.records import read_records
from rfteval.errors import InputError
from tests.support.agent_records import Rollout, agent_record, transcript_text, write_agent, write_plain

FAILED = {"stage": "generate", "type": "timeout", "message": "gone"}


def _records():
    """Four rollouts and a failed generation with no rollout; usage and latency per record, two models."""
    return [
        agent_record("m", "a", 0, 1.0, Rollout(3, "no_tool_calls", 2, {"ValueError": 1}),
                     usage={"input_tokens": 300, "output_tokens": 40, "reasoning_tokens": None}, latency_s=2.5),
        agent_record("m", "a", 1, 0.0, Rollout(10, "max_turns", 9, {"ToolTimeout": 2, "ValueError": 1}),
                     usage={"input_tokens": 900, "output_tokens": 90, "reasoning_tokens": 5}, latency_s=9.0),
        agent_record("m", "b", 0, 1.0, Rollout(1, "no_tool_calls", 0), model="other",
                     usage={"input_tokens": 80, "output_tokens": None, "reasoning_tokens": None}, latency_s=None),
        agent_record("m", "b", 1, None, None, error=FAILED),
        agent_record("m", "c", 0, 0.5, Rollout(2, "length", 1, {})),
    ]


# what the five records above are as the frame's columns
EXPECTED = {
    "turns": [3, 10, 1, None, 2], "tool_calls": [2, 9, 0, None, 1],
    "stop_reason": ["no_tool_calls", "max_turns", "no_tool_calls", None, "length"],
    "tool_errors": [1, 3, 0, None, 0], TOOL_ERROR + "ValueError": [1, 1, None, None, None],
    TOOL_ERROR + "ToolTimeout": [None, 2, None, None, None],
    "input_tokens": [300, 900, 80, 100, 100], "output_tokens": [40, 90, None, 20, 20],
    "latency_s": [2.5, 9.0, None, 1.0, 1.0], "model": ["m-m", "m-m", "other", "m-m", "m-m"],
}


def _plain(values: list) -> list:
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]


def _check(frame) -> None:
    for name, expected in EXPECTED.items():
        assert _plain(frame[name].tolist()) == expected, name


@pytest.fixture(params=["jsonl", "parquet"])
def agent_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return write_agent(_records(), tmp_path / f"m.{request.param}")


def test_an_agent_runs_fields_are_read_as_columns(agent_file: Path) -> None:
    _check(read_frame(agent_file))
    assert load_frame(agent_file).agent


def test_the_line_by_line_reader_reads_the_same(agent_file: Path) -> None:
    """Asking for a record field sends JSONL through the line-by-line reader; its agent columns agree."""
    frame = read_frame(agent_file, columns=("output_text",))
    _check(frame)
    assert frame["output_text"].tolist()[0] == "final answer"


def test_records_in_memory_read_the_same(tmp_path: Path) -> None:
    """A Parquet file read as records (tool errors a map, pandas' list of pairs) and then framed."""
    path = write_agent(_records(), tmp_path / "m.parquet")
    _check(frame_from_records(read_records(path), "m").frame)


def test_a_plain_run_has_no_agent_columns(tmp_path: Path) -> None:
    for suffix in ("jsonl", "parquet"):
        path = write_plain(_records(), tmp_path / f"p.{suffix}")
        frame = read_frame(path)
        assert not set(agent_columns.AGENT_COLUMNS) & set(frame.columns)
        assert not load_frame(path).agent


def test_parquet_never_reads_the_transcript(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column read (the record's, then the agent fields' a batch at a time) is named, the transcript never."""
    import pyarrow.parquet as pq

    from rfteval.data import frame as frame_mod

    path = write_agent(_records(), tmp_path / "m.parquet")
    asked: list[str] = []
    real_read, real_batches = frame_mod.read_parquet_records, pq.ParquetFile.iter_batches
    monkeypatch.setattr(frame_mod, "read_parquet_records",
                        lambda p, columns=None: asked.extend(columns or ["*"]) or real_read(p, columns))
    monkeypatch.setattr(pq.ParquetFile, "iter_batches",
                        lambda self, *a, columns=None, **kw: asked.extend(columns or ["*"])
                        or real_batches(self, *a, columns=columns, **kw))
    _check(read_frame(path))
    assert "turns" in asked and "usage" in asked and "transcript" not in asked and "*" not in asked


def test_jsonl_is_parsed_without_its_transcripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What pyarrow parses holds no transcript: each line was cut before it, and nothing else was lost."""
    import pyarrow.json as pj

    path = write_agent(_records(), tmp_path / "m.jsonl")
    assert path.read_bytes().count(b'"transcript":') == 4
    parsed: list[bytes] = []
    real = pj.read_json

    def spy(source, **kw):  # type: ignore[no-untyped-def]
        data = source.read()
        parsed.append(data)
        import pyarrow as pa

        return real(pa.BufferReader(data), **kw)

    monkeypatch.setattr(pj, "read_json", spy)
    _check(read_frame(path))
    assert parsed and not any(b'"transcript"' in p for p in parsed)


def test_cutting_keeps_every_other_field(tmp_path: Path) -> None:
    """Each cut line is its record less the transcript: a nested transcript key (a grader's details) stays, and a
    line longer than the chunk read at a time is cut all the same."""
    recs = _records()
    recs[0][0].grade_details = {"transcript": "the grader's own", "n": 1}
    recs[2] = (recs[2][0], Rollout(1, transcript=transcript_text(60, 59, result_chars=5000)))  # ~300 KB
    path = write_agent(recs, tmp_path / "m.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    old = agent_columns._CHUNK
    try:
        agent_columns._CHUNK = 4096
        cut = [json.loads(line) for line in agent_columns.without_transcripts(path).decode().splitlines()]
    finally:
        agent_columns._CHUNK = old
    assert cut == [{k: v for k, v in line.items() if k != "transcript"} for line in lines]
    assert cut[0]["grade_details"] == {"transcript": "the grader's own", "n": 1}


def test_a_line_whose_transcript_is_not_last_is_kept_whole(tmp_path: Path) -> None:
    lines = [{"item_id": "a", "score": 1.0, "stop_reason": "no_tool_calls", "turns": 1, "transcript": "[]"},
             {"item_id": "b", "score": 0.0, "stop_reason": "max_turns", "transcript": "[]", "turns": 4}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")
    cut = [json.loads(line) for line in agent_columns.without_transcripts(path).decode().splitlines()]
    assert cut[0] == {"item_id": "a", "score": 1.0, "stop_reason": "no_tool_calls", "turns": 1}
    assert cut[1] == lines[1]
    assert read_frame(path)["turns"].tolist() == [1.0, 4.0]


def test_a_file_whose_first_record_ends_otherwise_is_not_cut(tmp_path: Path) -> None:
    """Another writer's field order: the first line's last key is not the transcript, so no line is cut (a field after
    the transcript would be lost) and the whole file is parsed."""
    lines = [{"item_id": "a", "transcript": "[]", "score": 1.0, "stop_reason": "no_tool_calls", "turns": 2}]
    head = ("".join(json.dumps(line) + "\n" for line in lines)).encode()
    assert not agent_columns.transcript_last(head)
    path = tmp_path / "m.jsonl"
    path.write_bytes(head)
    assert read_frame(path)["turns"].tolist() == [2.0]


def test_tool_errors_on_some_lines_only(tmp_path: Path) -> None:
    """A record without a rollout has no tool_errors key, and a grader's details may hold one: each record still
    gets its own."""
    recs = _records()
    recs[4][0].grade_details = {"tool_errors": {"Nested": 7}}
    path = write_agent(recs, tmp_path / "m.jsonl")
    frame = read_frame(path)
    assert _plain(frame["tool_errors"].tolist()) == [1, 3, 0, None, 0]
    assert TOOL_ERROR + "Nested" not in frame


@pytest.mark.parametrize("field, value, message", [
    ("turns", "3", "turns: must be a whole number >= 0 or null"),
    ("tool_calls", -1, "tool_calls: must be a whole number >= 0 or null"),
    ("stop_reason", 3, "stop_reason: must be text or null"),
    ("tool_errors", [1], "tool_errors: must be null or an object {error type: count}"),
])
def test_a_bad_agent_field_names_its_line(tmp_path: Path, field: str, value: object, message: str) -> None:
    path = write_agent(_records(), tmp_path / "m.jsonl")
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad[field] = value
    lines[1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"m\.jsonl:2: " + message.replace("{", r"\{").replace("}", r"\}")):
        read_frame(path)


def test_the_tool_error_counts_are_the_types_summed(agent_file: Path) -> None:
    frame = read_frame(agent_file)
    by_type = frame[[c for c in frame.columns if c.startswith(TOOL_ERROR)]].fillna(0).sum(axis=1).to_numpy()
    has = frame["tool_errors"].notna().to_numpy()
    assert np.array_equal(by_type[has], frame["tool_errors"].to_numpy()[has])


def test_a_bad_count_in_parquet_names_its_row(tmp_path: Path) -> None:
    recs = _records()
    recs[1] = (recs[1][0], Rollout(-2, "max_turns", 1))
    path = write_agent(recs, tmp_path / "m.parquet")
    with pytest.raises(InputError, match=r"m\.parquet: turns: must be a whole number >= 0 \(row 2\)"):
        read_frame(path)
