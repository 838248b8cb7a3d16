"""The grader lint (rfteval/graders/lint.py): unit tests, and every command that grades refusing a judge that never
sees the answer, end to end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.errors import InputError
from rfteval.graders.lint import check_grader, grade_ignores_sample, lint_grader, retired_model
from rfteval.graders.loader import parse_config
from tests.support import REPO

runner = CliRunner()

# Azure's RFT sample job (azure-sdk-for-net, sdk/ai/Azure.AI.Projects/samples/Sample18_FineTuning_Reinforcement.md):
# a fine-tuning job whose score_model grader has one user message and no {{ sample.output_text }}; its `name` and
# `model` are both the grader deployment's name (o3-mini in the sample's prerequisites).
SAMPLE18_JOB = {
    "model": "o4-mini", "training_file": "file-train", "validation_file": "file-valid",
    "method": {"type": "reinforcement", "reinforcement": {
        "grader": {"type": "score_model", "name": "o3-mini", "model": "o3-mini",
                   "input": [{"role": "user", "content": "Evaluate the model's response based on correctness and "
                                                         "quality. Rate from 0 to 10."}],
                   "range": [0.0, 10.0]},
        "hyperparameters": {"n_epochs": 1, "batch_size": 4, "learning_rate_multiplier": 2, "eval_interval": 5,
                            "eval_samples": 2, "reasoning_effort": "medium"}}}}
SAMPLE18 = SAMPLE18_JOB["method"]["reinforcement"]["grader"]  # type: ignore[index]
SEES = {"type": "score_model", "name": "judge", "model": "judge-1", "range": [0, 10],
        "input": [{"role": "user", "content": "Rate from 0 to 10: {{ sample.output_text }}"}]}


def _line(config: dict) -> str:
    errors: list[str] = []
    try:
        check_grader(parse_config(config), "g.json", errors.append)
    except InputError as exc:
        return str(exc)
    return ""


def test_azure_sample18_judge_sees_no_answer_and_is_an_error_naming_it_and_the_fix() -> None:
    line = _line(SAMPLE18)
    assert line.startswith("g.json: score_model grader 'o3-mini': no message renders the answer")
    assert "{{ sample.output_text }}" in line and "--allow-grader-without-sample" in line
    assert "\n" not in line


@pytest.mark.parametrize("content", [
    "{{sample.output_text}}",
    "Answer: {{ sample.output_text }}",  # spaces inside the braces
    "{{ sample.output_json.answer }}",
    [{"type": "input_text", "text": "Rate: {{sample.output_text}}"}],  # a content part
    {"type": "input_text", "text": "{{ sample.output_tools[0].function.arguments }}"},
])
def test_any_sample_path_in_any_message_shape_passes(content: object) -> None:
    config = {**SAMPLE18, "input": [{"role": "developer", "content": "Rate from 0 to 10."},
                                    {"role": "user", "content": content}]}
    assert not [f for f in lint_grader(parse_config(config)) if f.error]


@pytest.mark.parametrize("content", [
    [{"type": "input_text", "text": "Rate from 0 to 10.", "note": "{{ sample.output_text }}"}],  # a key never sent
    {"type": "output_text", "text": "Rate from 0 to 10.", "answer": "{{ sample.output_text }}"},
])
def test_a_sample_path_in_a_field_that_never_renders_is_still_an_error(content: object) -> None:
    """A content part's unknown key loads (the SDK's parts are open dicts here), but only `text` reaches the judge:
    the judge still never sees the answer."""
    config = {**SAMPLE18, "model": "judge-1", "input": [{"role": "user", "content": content}]}
    assert [f.error for f in lint_grader(parse_config(config))] == [True]


def test_item_paths_alone_are_not_the_answer() -> None:
    config = {**SAMPLE18, "model": "judge-1",
              "input": [{"role": "user", "content": "Reference: {{ item.reference_answer }}. Rate from 0 to 10."}]}
    assert [f.error for f in lint_grader(parse_config(config))] == [True]


def test_label_model_inside_a_multi_is_named_by_its_key() -> None:
    multi = {"type": "multi", "name": "combo", "calculate_output": "0.5 * exact + 0.5 * tone", "graders": {
        "exact": {"type": "string_check", "name": "e", "input": "{{ sample.output_text }}",
                  "reference": "{{ item.reference_answer }}", "operation": "eq"},
        "tone": {"type": "label_model", "name": "polite", "model": "judge-1", "labels": ["polite", "rude"],
                 "passing_labels": ["polite"], "input": [{"role": "user", "content": "Is it polite?"}]}}}
    line = _line(multi)
    assert "label_model grader 'polite' (key 'tone' of multi 'combo')" in line
    assert "--allow-grader-without-sample" in line


def test_allow_lets_it_through_and_other_graders_are_never_errors() -> None:
    warnings: list[str] = []
    check_grader(parse_config(SAMPLE18), "g.json", warnings.append, allow_without_sample=True)
    assert len(warnings) == 1 and "model 'o3-mini' was retired" in warnings[0]  # the warning stays
    string_check = {"type": "string_check", "name": "s", "input": "yes", "reference": "{{ item.x }}",
                    "operation": "eq"}
    assert lint_grader(parse_config(string_check)) == []  # not a judge: the lint says nothing
    group = {"type": "group_judge", "name": "g", "model": "judge-1"}  # it shows the samples itself
    assert lint_grader(parse_config(group)) == []


def test_a_python_grader_that_never_reads_sample_is_a_warning() -> None:
    assert grade_ignores_sample("def grade(sample, item):\n    return 1.0 if item['x'] else 0.0\n") == "sample"
    assert grade_ignores_sample("def grade(s, item):\n    return float(item['x'] == s['output_text'])\n") is None
    assert grade_ignores_sample("def grade(sample, item):\n    def f():\n        return sample\n    return 1.0\n") is None
    assert grade_ignores_sample("def grade(*args):\n    return 1.0\n") is None  # nothing known
    py = {"type": "python", "name": "py", "source": "def grade(sample, item):\n    return 1.0\n"}
    warnings: list[str] = []
    check_grader(parse_config(py), "g.json", warnings.append)
    assert warnings == ["warning: python grader 'py': grade() never reads its first parameter 'sample' (the sample): "
                        "every output of an item scores the same"]


@pytest.mark.parametrize("model, retired", [("o3-mini", True), ("o4-mini-2025-04-16", True), ("O4-Mini", True),
                                            ("o3", False), ("gpt-4.1-mini", False), ("o4-mini-high", False)])
def test_retired_models(model: str, retired: bool) -> None:
    assert (retired_model(model) is not None) is retired


def test_a_retired_judge_model_is_a_warning_naming_the_flag_and_judge_model_silences_it() -> None:
    config = parse_config({**SEES, "model": "o4-mini-2025-04-16"})
    warnings: list[str] = []
    check_grader(config, "g.json", warnings.append)
    assert len(warnings) == 1 and "'o4-mini-2025-04-16' was retired by OpenAI on 23 October 2026" in warnings[0]
    assert "will not run on OpenAI" in warnings[0] and "--judge-model" in warnings[0]
    assert [f for f in lint_grader(config, judge_model="gpt-4.1-mini")] == []


@pytest.mark.slow
def test_the_ready_made_graders_pass_the_lint() -> None:
    """No shipped grader trips the lint's error (legal-review's o3-mini judge is a warning, as it should be)."""
    from rfteval.graders.loader import load_grader

    root = REPO / "graders"
    for path in sorted(root.glob("*.json")):
        assert not [f for f in lint_grader(load_grader(path)) if f.error], path


# ---------------------------------------------------------------- every command that grades, end to end


def _files(tmp_path: Path) -> dict[str, Path]:
    job = tmp_path / "job.json"
    job.write_text(json.dumps(SAMPLE18_JOB, indent=2))
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"What is {i}+{i}?"}],
                                      "reference_answer": str(2 * i)}) + "\n" for i in range(3)))
    outs = tmp_path / "outputs.jsonl"
    outs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": str(2 * i)}) + "\n" for i in range(3)))
    replay = tmp_path / "base.jsonl"
    replay.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": str(2 * i)}) + "\n" for i in range(3)))
    records = tmp_path / "a.records.jsonl"  # agree's A: graded records of those outputs
    records.write_text("".join(json.dumps({"run_id": "r", "model_label": "base", "model": "m", "item_id": f"q{i}",
                                           "epoch": 1, "output_text": str(2 * i), "score": 1.0}) + "\n"
                               for i in range(3)))
    return {"job": job, "dataset": ds, "outputs": outs, "replay": replay, "records": records,
            "out": tmp_path / "records.jsonl"}


def _commands(f: dict[str, Path], tmp_path: Path) -> dict[str, list[str]]:
    local = ["--judge-base-url", "http://127.0.0.1:9/v1"]  # never reached: the lint stops first
    return {
        "validate grader": ["validate", "grader", str(f["job"])],
        "grade": ["grade", "-d", str(f["dataset"]), "-g", str(f["job"]), "--outputs", str(f["outputs"]),
                  "--out", str(f["out"]), *local],
        "run": ["run", "--dataset", str(f["dataset"]), "--grader", str(f["job"]), "--model",
                f"base=replay:{f['replay']}", "--epochs", "1", "--out", str(tmp_path / "run"), "-q", *local],
        "probe-grader": ["probe-grader", str(f["job"]), "--dataset", str(f["dataset"]), *local],
        "agree --regrade": ["agree", str(f["records"]), "--regrade", str(f["job"]), "--dataset", str(f["dataset"]), *local],
        "export-reward": ["export-reward", str(f["job"]), "--target", "trl", "--out", str(tmp_path / "reward.py")],
    }


@pytest.mark.slow
def test_every_command_that_grades_refuses_sample18_with_one_line_exit_2(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    f = _files(tmp_path)
    for name, args in _commands(f, tmp_path).items():
        res = runner.invoke(app, args)
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rfteval: ")]
        assert res.exit_code == 2, (name, res.output)
        assert len(errors) == 1 and "Traceback" not in res.output, (name, res.output)
        assert errors[0] == (f"rfteval: {f['job']}: score_model grader 'o3-mini': no message renders the answer (no "
                             "{{ sample.output_text }} or other sample.* path), so the judge scores every output "
                             "alike; add {{ sample.output_text }} to a message, or pass --allow-grader-without-sample "
                             "if this judge truly needs no answer"), name
        assert not (tmp_path / "run").exists() and not (tmp_path / "reward.py").exists(), name


def test_validate_grader_allows_it_with_the_flag_and_warns_of_the_retired_model(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    f = _files(tmp_path)
    res = runner.invoke(app, ["validate", "grader", str(f["job"])])
    assert res.exit_code == 2 and "--allow-grader-without-sample" in res.stderr
    res = runner.invoke(app, ["validate", "grader", str(f["job"]), "--allow-grader-without-sample"])
    assert res.exit_code == 0, res.output
    assert ("warning: score_model grader 'o3-mini': model 'o3-mini' was retired by OpenAI on 23 October 2026 and will "
            "not run on OpenAI; point the judge at another model with --judge-model (and --judge-base-url for another "
            "server)") in res.stderr.splitlines()


@pytest.mark.slow
def test_the_spec_key_allows_it_for_run_and_validate_spec(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    f = _files(tmp_path)
    spec = tmp_path / "eval.toml"
    body = (f'dataset = "{f["dataset"]}"\ngrader = "{f["job"]}"\nepochs = 1\n{{extra}}\n'
            f'[models.base]\nmodel = "replay:{f["replay"]}"\n')
    spec.write_text(body.replace("{extra}", ""))
    res = runner.invoke(app, ["validate", "spec", str(spec)])
    assert res.exit_code == 2 and "--allow-grader-without-sample" in res.stderr
    spec.write_text(body.replace("{extra}", "allow_grader_without_sample = true"))
    res = runner.invoke(app, ["validate", "spec", str(spec)])
    assert res.exit_code == 0, res.output
    assert "3 items x 1 epochs" in res.stdout


def _constant_per_request(request: object) -> str:
    """A judge answering at random, but the same for the same request (as a cache makes any judge)."""
    digest = hashlib.sha256(json.dumps(request.body["messages"], sort_keys=True).encode()).digest()  # type: ignore[attr-defined]
    return json.dumps({"steps": [], "result": digest[0] % 11})


@pytest.mark.slow
def test_probe_grader_says_the_grader_ignores_the_output(tmp_path: Path) -> None:
    """Sample18's judge let through: every probe of an item gets one judge answer, whatever it is; the verdict is
    "ignores the output", never one that depends on that answer."""
    from rfteval.cli.app import app
    from tests.support.fake_openai import FakeOpenAI

    f = _files(tmp_path)
    with FakeOpenAI(_constant_per_request) as fake:
        args = ["probe-grader", str(f["job"]), "--dataset", str(f["dataset"]), "--judge-base-url", fake.base_url,
                "--allow-grader-without-sample", "--strict"]
        res = runner.invoke(app, args, env={"COLUMNS": "80"})
        assert res.exit_code == 1, res.output
        # its messages name no sample.* path: it is told to read the answer
        assert "every probe scored the same: this grader never reads the answer" in " ".join(res.stdout.split())
        js = runner.invoke(app, [*args, "--format", "json"])
        report = json.loads(js.stdout)
        assert report["ignores_output"] is True and report["notes"][0].startswith(
            "every probe scored the same: this grader never reads the answer; make it read it (a judge: put "
            "{{ sample.output_text }} in a message")
        assert all(p["status"] in ("flag", "skipped") for p in report["probes"])
        # the probe names stay whole at 80 columns (no name split across lines)
        names = [p["name"] for p in report["probes"]]
        assert all(any(name in line for line in res.stdout.splitlines()) for name in names), res.stdout

    sees = tmp_path / "sees.json"
    sees.write_text(json.dumps(SEES))
    with FakeOpenAI(lambda req: json.dumps({"steps": [], "result": min(10, len(req.last_user_text()) % 11)})) as fake:
        res = runner.invoke(app, ["probe-grader", str(sees), "--dataset", str(f["dataset"]), "--judge-base-url",
                                  fake.base_url, "--format", "json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["ignores_output"] is False


def test_ignores_output_needs_two_probes_on_an_item_and_leaves_errors_out() -> None:
    from rfteval.graders.base import GradeResult
    from rfteval.readiness.probes import ignores_output

    ok = GradeResult(0.5)
    assert ignores_output([("a", "q1", ok), ("b", "q1", GradeResult(0.5)), ("a", "q2", GradeResult(0.9)),
                           ("b", "q2", GradeResult(0.9))])
    assert not ignores_output([("a", "q1", ok), ("b", "q1", GradeResult(0.7))])
    assert not ignores_output([("a", "q1", ok), ("a", "q2", GradeResult(0.5))])  # one probe each: nothing compared
    failed = GradeResult.failed("model_grader_server_error", "down")
    assert not ignores_output([("a", "q1", failed), ("b", "q1", failed)])  # errors are not scores


def test_templates_no_item_fills_are_named_by_probe_grader(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    f = _files(tmp_path)
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.answer }}", "operation": "eq"}))
    res = runner.invoke(app, ["probe-grader", str(grader), "--dataset", str(f["dataset"])])
    assert res.exit_code == 2
    assert (f"{grader}: reference: {{{{ item.answer }}}}: no item has field `answer` (0 of 3 items in items.jsonl; "
            "did you mean `reference_answer`?)") in res.stderr


@pytest.mark.slow
def test_templates_no_item_fills_are_named_by_agree_regrade(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    f = _files(tmp_path)
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.answer }}", "operation": "eq"}))
    res = runner.invoke(app, ["agree", str(f["records"]), "--regrade", str(grader), "--dataset", str(f["dataset"])])
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [f"rfteval: {grader}: reference: {{{{ item.answer }}}}: no item has field "
                                       "`answer` (0 of 3 items in items.jsonl; did you mean `reference_answer`?)"]


def test_export_environment_refuses_a_judge_that_never_sees_the_answer(tmp_path: Path) -> None:
    """The prime-rl taskset export loads a grader too: it goes through the lint like export-reward."""
    from typer.testing import CliRunner

    from rfteval.cli.app import app

    grader = tmp_path / "blind.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "blind", "model": "judge-m", "range": [0, 10],
                                  "input": [{"role": "user", "content": "Rate from 0 to 10."}]}))
    ds = tmp_path / "d.jsonl"
    ds.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    res = CliRunner().invoke(app, ["export-environment", str(grader), "--dataset", str(ds), "--target", "prime-rl",
                                   "--out", str(tmp_path / "pkg")])
    assert res.exit_code == 2 and "--allow-grader-without-sample" in res.output, res.output
    assert not (tmp_path / "pkg").exists()


ROLLOUT_TEMPLATE = {"type": "string_check", "name": "stopped", "operation": "eq",
                    "input": "{{ sample.rollout.stop_reason }}", "reference": "no_tool_calls"}
ROLLOUT_PYTHON = {"type": "python", "name": "turns",
                  "source": "def grade(sample, item):\n    return 1.0 / sample['rollout']['turns']\n"}


@pytest.mark.parametrize("config", [
    ROLLOUT_TEMPLATE, ROLLOUT_PYTHON,
    {"type": "multi", "name": "m", "calculate_output": "a", "graders": {"a": ROLLOUT_TEMPLATE}},
])
def test_a_grader_reading_sample_rollout_is_flagged_once_as_not_uploadable_to_openai(config: dict) -> None:
    warnings = [f.message for f in lint_grader(parse_config(config)) if not f.error]
    assert len(warnings) == 1 and "reads sample.rollout" in warnings[0]
    assert "not uploadable to OpenAI" in warnings[0]


def test_a_grader_that_reads_no_rollout_is_not_flagged() -> None:
    config = {"type": "python", "name": "plain", "source": "def grade(sample, item):\n    return 1.0 if "
                                                           "sample['output_text'] else 0.0\n"}
    assert not [f for f in lint_grader(parse_config(config)) if "rollout" in f.message]


def test_validate_grader_says_a_rollout_grader_is_not_uploadable(tmp_path: Path) -> None:
    from rfteval.cli.app import app

    path = tmp_path / "g.json"
    path.write_text(json.dumps(ROLLOUT_TEMPLATE))
    res = runner.invoke(app, ["validate", "grader", str(path)])
    assert res.exit_code == 0, res.output
    assert "warning: string_check grader 'stopped': reads sample.rollout" in res.output
    assert "not uploadable to OpenAI as it is" in res.output
