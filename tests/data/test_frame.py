"""rfteval.data.frame: the one reader of record files (flags and effective score set once, `columns=`), the one
record-file lookup (rundir.find_records), the one pass rule (stats.passk.passes), and a run reading its record files
once after writing them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rfteval.data import frame as frame_mod
from rfteval.data import rundir
from rfteval.data.frame import load_frame, normalise, read_frame
from rfteval.data.records import effective_scores, read_records, write_jsonl, write_parquet
from rfteval.errors import InputError
from rfteval.stats.passk import passes
from tests.support.record_sides import rec

GRADE_ERROR = {"stage": "grade", "type": "grader_error", "message": "boom"}
REFUSAL = {"stage": "generate", "type": "refusal", "message": "no"}
FAILED = {"stage": "generate", "type": "timeout", "message": "gone"}


def _records() -> list:
    return [rec("m", "a", 0, 0.5), rec("m", "a", 1, None, error=GRADE_ERROR), rec("m", "b", 0, None, error=REFUSAL),
            rec("m", "b", 1, None, error=FAILED), rec("m", "c", 0, 1.0, passed=True)]


@pytest.fixture(params=["jsonl", "parquet"])
def record_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / f"m.{request.param}"
    (write_jsonl if request.param == "jsonl" else write_parquet)(_records(), path)
    return path


def test_the_error_flags_are_set_as_the_file_is_read(record_file: Path) -> None:
    f = read_frame(record_file)
    assert f["is_error"].tolist() == [False, True, True, True, False]
    assert f["is_generation_failure"].tolist() == [False, False, False, True, False]
    assert f["passed"].tolist()[4] == 1.0 and math.isnan(f["passed"].tolist()[0])


@pytest.mark.parametrize("errors, exclude", [("exclude", False), ("zero", False), ("exclude", True)])
def test_the_frame_and_the_records_as_written_score_alike(record_file: Path, errors: str, exclude: bool) -> None:
    """One error rule over both shapes: the frame's flags and the records' error dicts give the same scores."""
    via_flags = effective_scores(read_frame(record_file), errors, exclude_errors=exclude).tolist()
    via_dicts = effective_scores(read_records(record_file), errors, exclude_errors=exclude).tolist()
    assert [None if math.isnan(x) else x for x in via_flags] == [None if math.isnan(x) else x for x in via_dicts]


def test_normalise_scores_every_error_zero(record_file: Path) -> None:
    side = normalise(read_frame(record_file), "m", str(record_file))
    assert side.frame["score"].tolist() == [0.5, 0.0, 0.0, 0.0, 1.0]


def test_columns_carry_record_fields_as_the_file_holds_them(record_file: Path) -> None:
    f = read_frame(record_file, ("output_text", "error", "model"))
    assert f["output_text"].tolist() == ["out"] * 5 and f["model"].tolist() == ["m-m"] * 5
    assert f["error"].tolist()[1]["type"] == "grader_error" and f["error"].tolist()[0] is None
    assert f["is_error"].tolist() == [False, True, True, True, False]  # the flags as without columns


def test_an_ungraded_record_is_bad_input_unless_grades_are_not_required(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"item_id": "a", "epoch": 0, "score": 1.0}) + "\n"
                    + json.dumps({"item_id": "b", "epoch": 0, "score": None}) + "\n")
    with pytest.raises(InputError, match="never graded") as exc:
        read_frame(path)
    assert exc.value.line == 2
    f = read_frame(path, ("output_text",), require_grades=False)
    assert f["score"].tolist()[0] == 1.0 and math.isnan(f["score"].tolist()[1])


def test_find_records_is_the_one_lookup(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_jsonl([rec("base", "a", 0, 1.0)], run / "base.jsonl")
    (run / rundir.JUDGE_CACHE).write_text("{}\n")  # not a model's records
    assert rundir.find_records(run).files == [run / "base.jsonl"]
    write_jsonl([rec("tuned", "a", 0, 1.0)], run / "tuned.jsonl")
    with pytest.raises(InputError, match="several models"):
        rundir.find_records(run)
    assert rundir.find_records(run, "tuned") == rundir.RecordFiles([run / "tuned.jsonl"], "tuned", run)
    assert rundir.find_records(run, pick="base").label == "base"
    assert rundir.find_records(run, pick="all").files == [run / "base.jsonl", run / "tuned.jsonl"]
    with pytest.raises(InputError, match="no records for label 'x'"):
        rundir.find_records(run, "x")
    write_parquet([rec("x", "a", 0, 1.0)], run / rundir.RESULTS)
    assert rundir.find_records(run, "x").files == [run / rundir.RESULTS]
    assert rundir.find_records(run / "base.jsonl").directory == run
    with pytest.raises(InputError, match="no such file"):
        rundir.find_records(tmp_path / "absent")


def test_load_frame_filters_a_label_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    write_jsonl([rec("base", "a", 0, 1.0), rec("tuned", "a", 0, 0.0)], path)
    side = load_frame(path, "tuned")
    assert side.label == "tuned" and side.frame["score"].tolist() == [0.0] and side.path == str(path)
    with pytest.raises(InputError, match="several models"):
        load_frame(path)


def test_the_one_pass_rule() -> None:
    score = np.array([1.0, 0.2, 0.3, 0.9])
    passed = np.array([np.nan, 1.0, np.nan, np.nan])
    error = np.array([False, False, False, True])
    assert passes(score, passed, 0.1 + 0.2).tolist() == [True, True, True, True]
    assert passes(score, passed, 0.5, error=error).tolist() == [True, True, False, False]
    assert passes(score, passed, None, error=error) is None  # a sample with neither verdict nor threshold
    assert passes(score, np.array([1.0, 0.0, 1.0, np.nan]), None, error=error).tolist() == [True, False, True, False]


@pytest.mark.slow
def test_a_run_reads_its_record_files_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The finish reads each DIR/<label>.jsonl once, for the comparison and the pass curves together, and readiness
    assesses the baseline's records the run holds: no record file is read twice, by either reader."""
    from rfteval.cli.app import app
    from rfteval.data import records as records_mod
    from tests.support.cli_run_files import write_run_files

    reads: list[Path] = []

    def counting(real: Callable[..., object]) -> Callable[..., object]:
        def read(path: Path, *args: object, **kwargs: object) -> object:
            reads.append(Path(path))
            return real(path, *args, **kwargs)
        return read

    monkeypatch.setattr(frame_mod, "read_frame", counting(frame_mod.read_frame))
    monkeypatch.setattr(records_mod, "read_records", counting(records_mod.read_records))
    files = write_run_files(tmp_path, 3, reference="yes", operation="eq", name="yes")
    flags = []
    for label in ("base", "tuned"):
        replay = tmp_path / f"{label}.rec.jsonl"
        replay.write_text("".join(json.dumps({"item_id": f"q{i}", "epoch": e + 1, "output_text": "yes" if e else "no"})
                                  + "\n" for i in range(3) for e in range(2)))
        flags += ["--model", f"{label}=replay:{replay}"]
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                                   *flags, "--epochs", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "readiness" in res.output.lower()  # assessed, from the records the run held
    assert sorted(reads) == [out / "base.jsonl", out / "tuned.jsonl"]
    assert "pass_at_k" in json.loads((out / "summary.json").read_text())["models"]["base"]



def _agent_records() -> list:
    return [rec("m", "a", 0, 1.0, turns=2, stop_reason="no_tool_calls", tool_calls=1, tool_errors={},
                transcript='[{"role":"assistant","content":"x"}]'),
            rec("m", "a", 1, 0.0, turns=5, stop_reason="max_turns", tool_calls=7,
                tool_errors={"ValueError": 2, "UnknownTool": 1}, transcript="[]"),
            rec("m", "b", 0, None, error=FAILED, turns=1, stop_reason=None, tool_calls=0, tool_errors={},
                transcript="[]")]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_records_an_agent_run_writes_read_alike_from_either_file(tmp_path: Path, kind: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The Record writer (transcript last) and the frame's agent reader (cuts each line before it) agree."""
    path = tmp_path / f"m.{kind}"
    (write_jsonl if kind == "jsonl" else write_parquet)(_agent_records(), path)
    slow: list[Path] = []
    real_slow = frame_mod._read_jsonl_slow
    monkeypatch.setattr(frame_mod, "_read_jsonl_slow", lambda p, *a, **k: slow.append(p) or real_slow(p, *a, **k))
    f = read_frame(path)
    assert slow == []  # rfteval's own JSONL: the column-wise reader carries them, the transcripts unread
    assert f["turns"].tolist() == [2.0, 5.0, 1.0] and f["tool_calls"].tolist() == [1.0, 7.0, 0.0]
    assert f["stop_reason"].tolist()[:2] == ["no_tool_calls", "max_turns"]
    assert f["tool_errors"].tolist() == [0.0, 3.0, 0.0]
    assert f["tool_error:ValueError"].fillna(0).tolist() == [0.0, 2.0, 0.0]
    assert "transcript" not in f
    assert read_frame(path, ("transcript",))["transcript"].tolist()[0] == '[{"role":"assistant","content":"x"}]'
    assert f["is_generation_failure"].tolist() == [False, False, True]  # the flags as without the columns
