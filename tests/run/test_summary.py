"""summary.json as a typed RunSummary: the file's content is what the dict-based code wrote, key for key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.run.summary import ModelSummary, RunSummary, as_run_summary
from tests.support import FIXTURES
from tests.support.cli_run_files import write_run_files

# written by the dict-based build_summary (main at 95db486) for the replay run below, with what differs between
# two runs of it (ids, paths, times) masked as _masked does; one change since: a model's ci95 is cut to the
# grader's range, as compare cuts it (issue 27: [-0.355, 0.755] became [0.0, 0.755] for a string_check)
V1 = FIXTURES / "summary_v1" / "summary.json"


def _masked(summary: dict[str, Any]) -> str:
    for key in ("run_id", "name", "dataset", "finished_at"):
        summary[key] = "*"
    for limiter in summary.get("concurrency", {}).values():
        limiter["history"] = [[0.0, n] for _, n in limiter["history"]]  # seconds since start: a timing
    return json.dumps(summary, indent=2, ensure_ascii=False) + "\n"


def _replay_run(tmp_path: Path) -> Path:
    files = write_run_files(tmp_path, 5, reference="tuned", name="says-tuned")
    rec = tmp_path / "rec"
    rec.mkdir()
    for label, text in (("base", "base says no"), ("tuned", "tuned says tuned")):
        (rec / f"{label}.jsonl").write_text("".join(
            json.dumps({"item_id": f"q{i}", "epoch": e, "output_text": text if i else "tuned"}) + "\n"
            for i in range(5) for e in range(1, 4)))
    res = CliRunner().invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                                   "--model", f"base=replay:{rec / 'base.jsonl'}",
                                   "--model", f"tuned=replay:{rec / 'tuned.jsonl'}", "--out", str(files["out"])])
    assert res.exit_code == 0, res.output
    return files["out"] / "summary.json"


@pytest.mark.slow
def test_summary_json_is_what_the_dict_based_code_wrote(tmp_path: Path) -> None:
    text = _replay_run(tmp_path).read_text(encoding="utf-8")
    assert _masked(json.loads(text)) == V1.read_text(encoding="utf-8")
    # read back, the typed summary gives the same content, in the same order
    typed = as_run_summary(json.loads(text))
    assert json.dumps(typed.to_dict(), indent=2, ensure_ascii=False) + "\n" == text
    assert typed.models["base"].pass_at_k == {"1": 0.2, "2": 0.2, "3": 0.2} and typed.models["tuned"].mean == 1.0
    assert typed.concurrency is not None and typed.batches is None and typed.judge is None


def test_unset_optional_keys_stay_out_of_the_file() -> None:
    summary = RunSummary(models={"m": ModelSummary(model="x")}, cells=3)
    out = summary.to_dict()
    assert not {"judge_results", "concurrency", "batches", "judge"} & set(out)
    assert not {"pass_at_k", "pass_all_k"} & set(out["models"]["m"])
    assert out["models"]["m"]["truncated_in_reasoning"] is None and out["cells"] == 3
    summary.judge = {"j": {"calls": 1}}
    assert list(summary.to_dict())[-1] == "judge" and summary.judge == {"j": {"calls": 1}}
    # a part of summary.json (what a reader holds) reads as the typed summary, missing keys at their defaults
    part = as_run_summary({"models": {"base": {"errors": {"by_type": {"generate:server": 2}}}}})
    assert part.models["base"].errors.by_type == {"generate:server": 2} and part.models["base"].errors.total == 0


@pytest.mark.slow
def test_one_error_policy_in_summary_json_grade_and_compare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generation failure is left out of every mean (and counted), a grading error scores 0: summary.json, the
    per-model summary `rfteval grade` prints and compare's side mean agree, and equal the mean worked by hand."""
    import asyncio

    from rfteval.compare.paths import compare_paths
    from rfteval.data.records import read_records
    from rfteval.graders.base import GradeResult
    from rfteval.graders.engine import GradingEngine
    from rfteval.providers.base import Generation, GenerationRequest, ProviderError, ServerlessProvider
    from rfteval.run.runner import RunOptions, run_eval
    from rfteval.run.spec import build_spec, flag_overrides
    from rfteval.run.summary import summarize_models

    class Fake(ServerlessProvider):
        """Always right, except that base's item 0 epoch 1 never answers."""

        def __init__(self, label: str) -> None:
            self.label = label

        def identity(self) -> dict[str, str]:
            return {"provider": "fake", "label": self.label}

        def request_body(self, request: GenerationRequest) -> dict[str, object]:
            return {"model": request.model, "messages": request.messages}

        async def generate(self, request: GenerationRequest, timeout_s: float) -> Generation:
            await asyncio.sleep(0)
            if self.label == "base" and (request.item_id, request.epoch) == ("0", 1):
                raise ProviderError("server", "HTTP 503: overloaded", status=503)
            return Generation(output_text="Right" if self.label == "base" else "right")  # which model graders see

        async def aclose(self) -> None:
            pass

    failed_once: list[bool] = []
    real = GradingEngine.grade_batch

    def grade_batch(self: GradingEngine, pairs: list[tuple[dict[str, object], dict[str, object]]],
                    units: list[tuple[str, str]] | None = None) -> list[GradeResult]:
        out = real(self, pairs, units)
        for i, (sample, item) in enumerate(pairs):  # one grading error: the first grade of base's item 1
            if item.get("id") == "1" and sample.get("output_text") == "Right" and not failed_once:
                failed_once.append(True)
                out[i] = GradeResult.failed("python_grader_runtime_error", "KeyError")
        return out

    monkeypatch.setattr(GradingEngine, "grade_batch", grade_batch)
    with open(tmp_path / "items.jsonl", "w") as fh:
        for i in range(3):
            fh.write(json.dumps({"id": str(i), "messages": [{"role": "user", "content": f"q{i}"}],
                                 "reference_answer": "right"}) + "\n")
    (tmp_path / "grader.json").write_text(json.dumps({"type": "string_check", "name": "exact", "operation": "ilike",
                                                      "input": "{{ sample.output_text }}",
                                                      "reference": "{{ item.reference_answer }}"}))
    spec = build_spec(None, flag_overrides(models=["base=m-base", "tuned=m-tuned"], dataset=str(tmp_path / "items.jsonl"),
                                           grader=str(tmp_path / "grader.json"), out=str(tmp_path / "run"),
                                           cwd=tmp_path, epochs=2, max_retries=0, max_error_rate=1))
    run_eval(spec, None, RunOptions(backoff_base_s=0.001, handle_signals=False),
             providers={"base": Fake("base"), "tuned": Fake("tuned")})

    records = read_records(tmp_path / "run" / "base.jsonl")
    kinds = sorted((r["item_id"], r["error"]["stage"]) for r in records.to_dict("records") if r["error"])
    assert kinds == [("0", "generate"), ("1", "grade")]  # the run made the two errors the test is about
    # item 0: its one answer (1.0); item 1: the grading error is 0, the other epoch 1.0; item 2: 1.0
    expected = (1.0 + 0.5 + 1.0) / 3
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())["models"]["base"]
    (graded,) = [s for s in summarize_models(read_records(tmp_path / "run" / "results.parquet"))
                 if s["label"] == "base"]
    side = compare_paths(tmp_path / "run" / "base.jsonl", tmp_path / "run" / "tuned.jsonl").to_json()["baseline"]
    assert on_disk["mean"] == pytest.approx(expected)
    assert graded["mean"] == pytest.approx(expected) and side["mean"] == pytest.approx(expected)
    assert graded["excluded"] == 1 and graded["errors"] == 2 and side["generation_errors"] == 1
    assert on_disk["errors"]["by_type"] == {"generate:server": 1, "grade:python_grader_runtime_error": 1}
