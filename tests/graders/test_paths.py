"""graders/paths.py: `rfteval grade` as one library call, its request checked on building it."""

import json
from pathlib import Path

import pytest

from rfteval.data.records import read_records
from rfteval.errors import InputError
from rfteval.graders.paths import GradeRequest, grade_paths

SC = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
      "reference": "{{item.reference_answer}}", "operation": "eq"}


def write_files(tmp_path: Path, outputs: list[dict]) -> tuple[Path, Path, Path]:
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}],
                                      "reference_answer": str(i)}) + "\n" for i in range(3)))
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SC))
    outs = tmp_path / "outputs.jsonl"
    outs.write_text("".join(json.dumps(o) + "\n" for o in outputs))
    return ds, grader, outs


@pytest.mark.parametrize(("kwargs", "field"), [({"reasoning": "drop"}, "--reasoning"),
                                               ({"think_tags": ["<t>"]}, "--think-tags")])
def test_a_bad_flag_is_refused_on_building_the_request(tmp_path, kwargs, field):
    with pytest.raises(InputError) as exc:
        GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "o", **kwargs)
    assert exc.value.field == field


def test_the_request_gives_the_sandbox_policy_of_its_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("RFTEVAL_UNSAFE_PYTHON_GRADERS", "1")  # the command's flag says, not the variable
    request = GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "o", python_timeout_s=4.0, python_memory_mb=64,
                           never_pass=("JUDGE_KEY", None))
    policy = request.sandbox_policy()
    assert (policy.unsafe, policy.never_pass, policy.timeout_s, policy.memory_mb) == (
        False, frozenset({"JUDGE_KEY"}), 4.0, 64)
    unsafe = GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "o", unsafe_python_graders=True)
    assert unsafe.sandbox_policy().unsafe is True


def test_grade_paths_writes_the_graded_records_and_warns_about_set_aside_outputs(tmp_path):
    ds, grader, outs = write_files(tmp_path, [{"item_id": "q0", "output_text": "0"},
                                              {"item_id": "q1", "output_text": "no"},
                                              {"item_id": "q9", "output_text": "9"}])
    warned: list[str] = []
    opened = []
    graded = grade_paths(GradeRequest(ds, grader, outs, skip_invalid=True), warned.append,
                         lambda config: opened.append(config.name))
    assert graded.path == tmp_path / "outputs.records.jsonl"
    assert [(r.item_id, r.score) for r in graded.records] == [("q0", 1.0), ("q1", 0.0)]
    assert sorted(read_records(graded.path)["score"]) == [0.0, 1.0]
    assert opened == ["exact"]
    assert len(warned) == 1 and "skipped 1 output(s)" in warned[0] and "'q9'" in warned[0]


@pytest.mark.slow
def test_a_python_grader_grades_each_models_epochs_of_an_item_in_one_process(tmp_path):
    """`rfteval grade`'s grading units: (model label, item id), passed with each batch down to the sandbox."""
    outputs = [{"item_id": item, "output_text": "x", "model_label": label}
               for label in ("base", "tuned", "base") for item in ("q0", "q1", "q0")]
    ds, grader, outs = write_files(tmp_path, outputs)
    grader.write_text(json.dumps({"type": "python", "name": "n", "source": "n = 0\ndef grade(sample, item):\n"
                                  "    global n\n    n += 1\n    return n / 10\n"}))
    graded = grade_paths(GradeRequest(ds, grader, outs), print, lambda config: None)
    assert [(r.model_label, r.item_id, r.epoch, r.score) for r in graded.records] == [
        ("base", "q0", 1, 0.1), ("base", "q1", 1, 0.1), ("base", "q0", 2, 0.2),
        ("tuned", "q0", 1, 0.1), ("tuned", "q1", 1, 0.1), ("tuned", "q0", 2, 0.2),
        ("base", "q0", 3, 0.3), ("base", "q1", 2, 0.2), ("base", "q0", 4, 0.4)]


def test_a_bad_outputs_line_stops_before_the_judge_and_writes_nothing(tmp_path):
    ds, grader, outs = write_files(tmp_path, [{"item_id": "q9", "output_text": "9"}])
    opened = []
    with pytest.raises(InputError):
        grade_paths(GradeRequest(ds, grader, outs), print, lambda config: opened.append(config))
    assert opened == [] and not (tmp_path / "outputs.records.jsonl").exists()


def test_the_judge_cache_lies_beside_the_records_unless_named(tmp_path):
    """Issue 27 item 7: grade's cache has run's file name, in the records' folder (agree --regrade's default too)."""
    from rfteval.compare.regrade import default_judge_cache

    request = GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "in" / "outs.jsonl", out=tmp_path / "o" / "r.jsonl")
    assert request.judge_cache_path == tmp_path / "o" / "judge_cache.jsonl" == default_judge_cache(request.records_path)
    assert GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "outs.jsonl").judge_cache_path == \
        tmp_path / "judge_cache.jsonl"
    named = GradeRequest(tmp_path / "d", tmp_path / "g", tmp_path / "outs.jsonl", judge_cache=tmp_path / "c.jsonl")
    assert named.judge_cache_path == tmp_path / "c.jsonl"
