"""The run directory store: append-only logs are the truth, and the index follows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfteval.errors import InputError
from rfteval.graders.base import GradeResult
from rfteval.run.store import (
    RolloutEntry,
    RunStore,
    ToolTurnEntry,
    cell_key,
    decode_grade,
    is_reusable_grade,
    is_reusable_response,
    new_grade_entry,
    read_stored,
    rollout_key,
    tool_turn_key,
)
from tests.support import FIXTURES
from tests.support.store_entries import failed, ok

IDENT = {"provider": "openai", "base_url": "http://127.0.0.1:1/v1", "api": "chat"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_cell_key_separates_epochs_endpoints_and_requests() -> None:
    k = cell_key(IDENT, BODY, 1)
    assert k == cell_key(dict(reversed(list(IDENT.items()))), BODY, 1)  # key order does not matter
    assert k != cell_key(IDENT, BODY, 2)
    assert k != cell_key({**IDENT, "base_url": "http://127.0.0.1:2/v1"}, BODY, 1)
    assert k != cell_key(IDENT, {**BODY, "temperature": 0.5}, 1)
    assert k != cell_key(IDENT, {**BODY, "model": "m2"}, 1)


def test_responses_persist_and_a_response_is_never_replaced_by_an_error(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run") as store:
        store.put_response(failed("a"))
        assert not is_reusable_response(store.get_response("a"))  # an error is retried on resume
        store.put_response(ok("a", "first"))
        store.put_response(failed("a"))
        store.put_response(ok("b", "bee"))
        run_id = store.run_id
    with RunStore(tmp_path / "run") as store:
        assert store.run_id == run_id
        assert store.get_response("a").output_text == "first"
        assert store.get_response("b").output_text == "bee"
        assert store.get_response("c") is None
    lines = (tmp_path / "run/store/responses.jsonl").read_text().splitlines()
    assert len(lines) == 4  # append-only: every attempt's outcome is in the log


def test_refusal_is_final(tmp_path: Path) -> None:
    assert is_reusable_response(failed("a", "refusal"))
    assert not is_reusable_response(failed("a", "timeout"))
    assert is_reusable_grade(decode_grade({"error": {"type": "python_grader_runtime_error"}}))
    assert not is_reusable_grade(decode_grade({"error": {"type": "python_grader_server_error"}}))
    assert not is_reusable_grade(None)


def test_index_is_rebuilt_and_caught_up_from_the_logs(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.put_response(ok("a"))
        store.put_grade(new_grade_entry("a", "g1", GradeResult(0.5)))
    # the index is lost: rebuilt from the logs
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        (tmp_path / "store" / name).unlink(missing_ok=True)
    with RunStore(tmp_path) as store:
        assert store.get_response("a").output_text == "out"
        assert store.get_grade("a", "g1").score == 0.5
    # lines the index never saw (a kill between the log write and the index commit) are picked up
    with open(tmp_path / "store/responses.jsonl", "a") as fh:
        fh.write(json.dumps(ok("late").to_dict()) + "\n")
    with RunStore(tmp_path) as store:
        assert store.get_response("late") is not None


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.put_response(ok("a"))
    log = tmp_path / "store/responses.jsonl"
    with open(log, "a") as fh:
        fh.write('{"key": "b", "output_te')  # SIGKILL mid-write
    with RunStore(tmp_path) as store:
        assert store.get_response("b") is None
        store.put_response(ok("c"))
        assert store.get_response("c") is not None
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["key"] for r in rows] == ["a", "c"]


def test_one_process_per_run_directory(tmp_path: Path) -> None:
    with RunStore(tmp_path):
        with pytest.raises(InputError, match="another rfteval run") as err:
            RunStore(tmp_path)
        assert err.value.field == "--out"
    RunStore(tmp_path).close()  # released on close


def test_out_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        RunStore(tmp_path / "file")


def test_fresh_removes_only_what_rfteval_wrote(tmp_path: Path) -> None:
    with RunStore(tmp_path) as store:
        store.put_response(ok("a"))
        old = store.run_id
    (tmp_path / "base.jsonl").write_text(json.dumps({"run_id": old, "model_label": "base", "epoch": 1}) + "\n")
    (tmp_path / "other.jsonl").write_text(json.dumps({"run_id": "another-run", "model_label": "x", "epoch": 1}) + "\n")
    (tmp_path / "notes.jsonl").write_text('{"mine": true}\n')
    with RunStore(tmp_path, fresh=True) as store:
        assert store.get_response("a") is None
        assert store.run_id != old
    assert not (tmp_path / "base.jsonl").exists()
    assert (tmp_path / "other.jsonl").exists()  # another run's records are not ours to delete
    assert (tmp_path / "notes.jsonl").read_text() == '{"mine": true}\n'


def test_a_run_directory_under_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="it is a file"):
        RunStore(tmp_path / "f" / "sub")


V1 = FIXTURES / "store_v1"  # written by the dict-based store (main at 95db486)


def test_a_store_written_by_the_dict_based_code_resumes_typed(tmp_path: Path) -> None:
    from rfteval.run.store import EntryError, GradeEntry, ResponseEntry

    (tmp_path / "store").mkdir()
    for name in ("responses.jsonl", "grades.jsonl"):
        (tmp_path / "store" / name).write_bytes((V1 / name).read_bytes())
    with RunStore(tmp_path) as store:
        ok1, refused, timed_out = (store.get_response(k) for k in ("k1", "k2", "k3"))
        assert isinstance(ok1, ResponseEntry) and ok1.error is None and ok1.reasoning == "thought"
        assert (ok1.tier, ok1.usage, ok1.latency_s) == ("flex", {"input_tokens": 3, "output_tokens": 5}, 0.25)
        assert refused is not None and refused.error == EntryError("refusal", "no") and refused.attempts == 3
        assert [is_reusable_response(e) for e in (ok1, refused, timed_out)] == [True, True, False]
        grade = store.get_grade("k1", "g")
        assert isinstance(grade, GradeEntry) and grade.error_type == "python_grader_runtime_error"
        assert (grade.score, grade.passed, grade.stdout, grade.details) == (0.5, False, "hi", {"x": [1, "y"]})
        assert is_reusable_grade(grade) and store.get_grade("k1", "h") == GradeEntry(
            key="k1", grader="h", score=1.0, at="2026-12-01T00:00:00Z")


def test_typed_entries_write_the_lines_the_dict_based_code_wrote(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    import rfteval.run.entries as entries_mod
    import rfteval.run.store as store_mod
    from rfteval.graders.base import GradeError
    from rfteval.providers.base import Generation

    monkeypatch.setattr(entries_mod, "now_iso", lambda: "2026-12-01T00:00:00Z")  # where the entries are made
    gen = Generation(output_text="<think>t</think> Paris é", usage={"input_tokens": 3, "output_tokens": 5},
                     finish_reason="stop", reasoning="thought", tier="flex")
    common = dict(label="base", model="m", session="s0")
    responses = [
        store_mod.new_response_entry(key="k1", item_id="1", epoch=1, generation=gen, latency_s=0.25, **common),
        store_mod.new_response_entry(key="k2", item_id="1", epoch=2, error=("refusal", "no"), attempts=3, **common),
        store_mod.new_response_entry(key="k3", item_id="2", epoch=1, error=("timeout", "slow"), **common),
    ]
    err = GradeError("python_grader_runtime_error", "KeyError")
    grades = [
        store_mod.new_grade_entry("k1", "g", GradeResult(0.5, sub_scores={"a": 1.0}, passed=False, stdout="hi",
                                                         details={"x": [1, "y"]}, error=err)),
        store_mod.new_grade_entry("k1", "h", GradeResult(1.0)),
    ]
    with RunStore(tmp_path) as store:
        for r in responses:
            store.put_response(r)
        for g in grades:
            store.put_grade(g)
    for name in ("responses.jsonl", "grades.jsonl"):
        assert (tmp_path / "store" / name).read_bytes() == (V1 / name).read_bytes()


def test_the_json_fields_of_an_entry_read_back_as_written() -> None:
    """Entry fields typed JSONField are free to msgspec: any JSON value comes back as the same Python value
    (an int stays an int, nesting is kept), so a rewritten line is the line read; a sub-score comes back a float."""
    import json

    import msgspec

    from rfteval.run.store import GradeEntry, ResponseEntry

    free = [1, 2.5, None, True, "x", {"a": [{"b": None}], "n": 10**20}]
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    line = {"key": "k", "output_text": "t", "output_tools": calls, "output_json": free,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "t", "tool_calls": calls}}],
            "usage": {"input_tokens": 3, "output_tokens": None}}
    entry = msgspec.convert(json.loads(json.dumps(line)), ResponseEntry)
    assert entry.output_json == free and type(entry.output_json[5]["n"]) is int and entry.output_tools == calls
    assert {k: entry.to_dict()[k] for k in line} == line
    grade = msgspec.convert({"key": "k", "sub_scores": {"a": 1}, "details": {"x": [1, "y"]}}, GradeEntry)
    assert grade.sub_scores == {"a": 1.0} and type(grade.sub_scores["a"]) is float
    assert grade.result().details == {"x": [1, "y"]}


# ---- read without writing: what a dry run sees (rfteval run --dry-run) --------------------------------------------


def test_read_stored_sees_what_the_index_would_without_writing(tmp_path: Path) -> None:
    from rfteval.run.store import read_stored

    with RunStore(tmp_path / "run") as store:
        store.put_response(failed("a"))  # retried on resume: not kept
        store.put_response(ok("b"))
        store.put_response(failed("b"))  # a kept response is never replaced by an error
        store.put_response(failed("c", kind="refusal"))  # a final error: kept, never graded
        store.put_grade(new_grade_entry("b", "g1", GradeResult(1.0)))
        store.put_grade(new_grade_entry("c", "g1", GradeResult.failed("model_grader_server_error", "down")))
        store.put_grade(new_grade_entry("b", "g2", GradeResult.failed("model_grader_server_error", "down")))
        store.put_grade(new_grade_entry("b", "g2", GradeResult(0.5)))  # a later grade replaces an earlier one
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")}
    seen = read_stored(tmp_path / "run", "g1")
    assert seen.responses == {"b": False, "c": True}
    assert seen.graded == {"b"}  # c's grade is a server error: graded again on resume
    assert read_stored(tmp_path / "run", "g2").graded == {"b"}
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")} == before
    empty = read_stored(tmp_path / "nothing", "g1")
    assert (empty.responses, empty.graded) == ({}, set()) and not (tmp_path / "nothing").exists()


def test_the_run_directory_checks_make_nothing(tmp_path: Path) -> None:
    from rfteval.run.store import check_run_dir, run_dir_busy

    (tmp_path / "file").write_text("x")
    for bad in (tmp_path / "file", tmp_path / "file" / "run"):
        with pytest.raises(InputError) as exc:
            check_run_dir(bad)
        assert exc.value.field == "--out"
    check_run_dir(tmp_path / "new" / "run")
    assert not (tmp_path / "new").exists() and not run_dir_busy(tmp_path / "new" / "run")
    with RunStore(tmp_path / "run"):
        assert run_dir_busy(tmp_path / "run")  # held by a run: a dry run says so, as the run would
    assert not run_dir_busy(tmp_path / "run")


# ---- an agent run's logs: tool turns and rollouts ------------------------------------------------------------------


def rollout_entry(key: str, stop: str | None = "no_tool_calls", error: bool = False) -> RolloutEntry:
    from rfteval.run.store import EntryError

    entry = RolloutEntry(key=key, label="base", model="m", item_id="1", epoch=1, output_text="done", turns=2,
                         stop_reason=stop, tool_calls=1, tool_errors={"ValueError": 1},
                         messages=[{"role": "assistant", "content": "done"}], call_errors={"c1": "ValueError"},
                         turn_keys=["t1", "t2"])
    if error:
        entry.output_text, entry.stop_reason, entry.error = None, None, EntryError("server", "HTTP 503")
    return entry


def test_rollout_and_tool_turn_keys_separate_what_changes_their_result() -> None:
    limits = {"max_turns": 10, "max_tool_calls": None, "timeout_s": None}
    k = rollout_key("first", "q0", "tools-v1", limits)
    assert k == rollout_key("first", "q0", "tools-v1", dict(reversed(list(limits.items()))))
    assert len({k, rollout_key("first2", "q0", "tools-v1", limits), rollout_key("first", "q1", "tools-v1", limits),
                rollout_key("first", "q0", "tools-v2", limits),
                rollout_key("first", "q0", "tools-v1", {**limits, "max_turns": 11})}) == 5
    t = tool_turn_key("turn", "tools-v1", "q0")
    assert len({t, tool_turn_key("turn2", "tools-v1", "q0"), tool_turn_key("turn", "tools-v2", "q0"),
                tool_turn_key("turn", "tools-v1", "q1")}) == 4


def test_a_run_without_tools_makes_no_agent_logs(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run") as store:
        store.put_response(ok("a", "x"))
    assert sorted(p.name for p in (tmp_path / "run" / "store").glob("*.jsonl")) == ["grades.jsonl", "responses.jsonl"]


def test_rollouts_and_tool_turns_persist_and_the_index_is_rebuilt_from_their_logs(tmp_path: Path) -> None:
    turn = ToolTurnEntry(key="tt", model_key="t1", rollout="r", turn=1,
                         calls=[{"id": "c1", "name": "add", "arguments": "{}"}],
                         results=[{"tool_call_id": "c1", "name": "add", "content": "2", "error": None}],
                         state={"n": 1}, duration_s=0.5)
    with RunStore(tmp_path / "run") as store:
        store.put_rollout(rollout_entry("r1", error=True))
        assert not is_reusable_response(store.get_rollout("r1"))  # a failed rollout is played again on resume
        store.put_rollout(rollout_entry("r1"))
        store.put_rollout(rollout_entry("r1", error=True))  # never replaces the finished one
        store.put_tool_turn(turn)
        store.put_tool_turn(ToolTurnEntry(key="tt", model_key="t1", rollout="r", turn=1, state={"n": 99}))
    (tmp_path / "run" / "store" / "index.sqlite").unlink()
    with RunStore(tmp_path / "run") as store:
        entry = store.get_rollout("r1")
        assert entry == rollout_entry("r1") and is_reusable_response(entry)
        assert store.get_tool_turn("tt") == turn  # the first executed turn is the one the rollout went on from
        assert store.get_response("r1") is None and store.get_rollout("nope") is None
        reader = store.reader()
        assert reader.get_rollout("r1") == entry
        reader.close()
    stored = read_stored(tmp_path / "run", "g")
    assert stored.responses == {"r1": False}  # a dry run sees the finished rollout


def test_fresh_removes_an_agent_runs_logs(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run") as store:
        store.put_rollout(rollout_entry("r1"))
        store.put_tool_turn(ToolTurnEntry(key="tt"))
    with RunStore(tmp_path / "run", fresh=True) as store:
        assert store.get_rollout("r1") is None and store.get_tool_turn("tt") is None
    assert not (tmp_path / "run" / "store" / "rollouts.jsonl").exists()
    assert not (tmp_path / "run" / "store" / "tools.jsonl").exists()
