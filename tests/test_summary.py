"""summary.json as a typed RunSummary: the file's content is what the dict-based code wrote, key for key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run_files import write_run_files
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.run.summary import ModelSummary, RunSummary, as_run_summary

# written by the dict-based build_summary (main at 95db486) for the replay run below, with what differs between
# two runs of it (ids, paths, times) masked as _masked does
V1 = Path(__file__).parent / "data" / "summary_v1" / "summary.json"


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
