"""`rfteval grade`, `validate` and `graders` end to end: typer's runner and a real subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.records import read_records
from tests.support import REPO

runner = CliRunner()
SC = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
      "reference": "{{item.reference_answer}}", "operation": "eq"}


@pytest.fixture
def files(tmp_path: Path):
    ds = tmp_path / "items.jsonl"
    ds.write_text("\n".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"say {i}"}],
                                        "reference_answer": str(i)}) for i in range(4)) + "\n")
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps(SC))
    outs = tmp_path / "outputs.jsonl"
    lines = []
    for i in range(4):
        for epoch in (1, 2):
            text = str(i) if (i + epoch) % 2 or i == 0 else "wrong"
            lines.append({"item_id": f"q{i}", "epoch": epoch, "output_text": text})
    outs.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    expected = {f"q{i}": sum(1.0 for x in lines if x["item_id"] == f"q{i}" and x["output_text"] == str(i)) / 2
                for i in range(4)}
    return ds, grader, outs, expected


def test_grade_writes_records_and_prints_means(files, tmp_path):
    ds, grader, outs, expected = files
    out = tmp_path / "records.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(out),
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    model = payload["models"][0]
    per_item = {r["item_id"]: r["mean"] for r in model["per_item"]}
    assert per_item == expected
    assert model["mean"] == pytest.approx(sum(expected.values()) / 4)
    assert model["records"] == 8 and model["items"] == 4 and model["errors"] == 0
    df = read_records(out)
    assert len(df) == 8 and set(df["model_label"]) == {"outputs"}


def test_grade_table_output(files, tmp_path):
    ds, grader, outs, _ = files
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs),
                              "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 0, res.output
    assert "Per item: outputs" in res.output and "95% interval" in res.output


@pytest.mark.parametrize("bad, expected", [
    ('{"item_id": "q9", "output_text": "x"}', "outputs.jsonl:1: item_id: no item 'q9' in the dataset"),
    ('{"item_id": "q1"}', "outputs.jsonl:1: output_text: missing or not a string"),
    ('{"item_id": "q1", "output_text": "x", "epoch": 0}', "outputs.jsonl:1: epoch: must be an integer >= 1"),
    ('{"item_id": "q1", "output_text": "x"}\n{"item_id": "q1", "output_text": "y", "epoch": 1}',
     "outputs.jsonl:2: duplicate"),
    ("not json", "outputs.jsonl:1: invalid JSON"),
])
def test_grade_bad_outputs_one_line_exit_2_no_file(files, tmp_path, bad, expected):
    ds, grader, outs, _ = files
    outs.write_text(bad + "\n")
    out = tmp_path / "r.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(out)])
    assert res.exit_code == 2
    assert expected in res.output and res.output.count("\n") == 1 and "Traceback" not in res.output
    assert not out.exists()


def test_grade_bad_dataset_and_grader(files):
    ds, grader, outs, _ = files
    ds.write_text('{"messages": []}\n')
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs)])
    assert res.exit_code == 2 and "items.jsonl:1: messages: must be a non-empty list" in res.output
    grader.write_text('{"type": "string_check"}')
    res = runner.invoke(app, ["validate", "grader", str(grader)])
    assert res.exit_code == 2 and "grader.json" in res.output and "input: Field required" in res.output


def test_validate_grader_reference_check(files):
    ds, grader, _, _ = files
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(ds)])
    assert res.exit_code == 0, res.output
    assert "at the maximum (1): 4/4 = 100.0%" in res.output


def test_validate_dataset_lists_every_problem(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{bad\n{"messages": [{"role": "user", "content": "x"}]}\n[]\n')
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 2
    assert "d.jsonl:1: invalid JSON" in res.output and "d.jsonl:3: expected a JSON object" in res.output
    assert "3 lines: 1 valid, 2 with problems" in res.output


def test_graders_lists_types():
    res = runner.invoke(app, ["graders"])
    assert res.exit_code == 0
    for name in ("string_check", "text_similarity", "python", "multi", "score_model", "label_model"):
        assert name in res.output


@pytest.mark.slow
def test_real_subprocess(files, tmp_path):
    ds, grader, outs, expected = files
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "rfteval", "grade", "-d", str(ds), "-g", str(grader), "--outputs",
                           str(outs), "--out", str(out), "--format", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["models"][0]["mean"] == pytest.approx(sum(expected.values()) / 4)
    bad = subprocess.run([sys.executable, "-m", "rfteval", "validate", "dataset", str(tmp_path / "none.jsonl")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("none.jsonl: no such file")
    assert "Traceback" not in bad.stderr


def test_grade_refuses_to_write_over_an_input(files):
    ds, grader, outs, _ = files
    before = outs.read_text()
    for target in (outs, ds, grader):
        res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(target)])
        assert res.exit_code == 2 and "is also an input of this command" in res.output
    assert outs.read_text() == before


def test_grade_output_path_problems_are_one_line_with_nothing_left_behind(files, tmp_path):
    ds, grader, outs, _ = files
    for target, message in ((tmp_path, "is a directory"), (outs / "x.jsonl", "it is a file, not a directory")):
        res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(target)])
        assert res.exit_code == 2 and message in res.output and res.output.count("\n") == 1
        assert "Traceback" not in res.output
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_a_template_no_item_can_fill_stops_before_grading(files):
    ds, grader, outs, _ = files
    grader.write_text(json.dumps(dict(SC, reference="{{ item.answer }}")))
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs)])
    assert res.exit_code == 2
    assert (f"rfteval: {grader}: reference: {{{{ item.answer }}}}: no item has field `answer` (0 of 4 items in "
            "items.jsonl; did you mean `reference_answer`?)") in res.output.splitlines()


@pytest.mark.slow
def test_grade_exits_3_when_records_fail_to_grade(files, tmp_path):
    ds, grader, outs, _ = files
    grader.write_text(json.dumps({"type": "python", "name": "boom", "source": "def grade(sample, item):\n"
                                  "    return 1 / 0"}))
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out",
                              str(tmp_path / "r.jsonl")])
    assert res.exit_code == 3 and "8 of 8 records failed to grade" in res.output
    assert (tmp_path / "r.jsonl").exists()  # the records are kept, the failure is the exit code
    ok = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out",
                             str(tmp_path / "r.jsonl"), "--max-error-rate", "1"])
    assert ok.exit_code == 0 and f"wrote {tmp_path / 'r.jsonl'}" in ok.output


def test_repeated_lines_without_epoch_are_epochs_in_file_order(tmp_path):
    from rfteval.data.outputs import iter_outputs

    outs = tmp_path / "o.jsonl"
    outs.write_text("\n".join(json.dumps({"item_id": i, "output_text": t}) for i, t in
                              (("a", "1"), ("b", "x"), ("a", "2"), ("a", "3"))) + "\n")
    assert [(o.item_id, o.epoch, o.output_text) for o in iter_outputs(outs)] == [
        ("a", 1, "1"), ("b", 1, "x"), ("a", 2, "2"), ("a", 3, "3")]


def test_skip_invalid_also_skips_the_outputs_of_skipped_items(files, tmp_path):
    ds, grader, outs, _ = files
    lines = ds.read_text().splitlines()
    lines[1] = json.dumps({"id": "q1", "messages": []})  # invalid: q1 is skipped
    ds.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--skip-invalid",
                              "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 0, res.output
    assert "skipped 2 output(s) of items not in the dataset" in res.output
    assert {r["item_id"] for r in read_records(tmp_path / "r.jsonl").to_dict("records")} == {"q0", "q2", "q3"}


def test_a_job_without_response_format_grades_output_json_as_openai_would(files, tmp_path):
    ds, _, outs, _ = files
    outs.write_text(json.dumps({"item_id": "q1", "output_text": '{"answer": "1"}'}) + "\n")
    reads = {"type": "string_check", "name": "j", "input": "{{ sample.output_json.answer }}",
             "reference": "{{ item.reference_answer }}", "operation": "eq"}
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"model": "m", "method": {"type": "reinforcement", "reinforcement": {"grader": reads}}}))
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(job), "--outputs", str(outs), "--out",
                              str(tmp_path / "r.jsonl"), "--max-error-rate", "1"])
    assert res.exit_code == 0, res.output
    assert "this fine-tuning job sets no response_format" in res.output
    (rec,) = read_records(tmp_path / "r.jsonl").to_dict("records")
    assert rec["error"]["type"] == "invalid_variable_error" and rec["score"] == 0
    with_format = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    job.write_text(json.dumps({"model": "m", "method": {"type": "reinforcement", "reinforcement": {
        "grader": reads, "response_format": with_format}}}))
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(job), "--outputs", str(outs), "--out",
                              str(tmp_path / "r.jsonl")])
    assert res.exit_code == 0 and "response_format" not in res.output
    assert read_records(tmp_path / "r.jsonl").to_dict("records")[0]["score"] == 1.0


def test_graders_lists_each_ready_made_config_once_with_a_path_that_exists(tmp_path, monkeypatch):
    import shutil

    from rfteval.cli.commands.graders_cmd import ready_made_files

    repo = REPO
    clone = tmp_path / "clone"
    shutil.copytree(repo / "graders", clone / "graders")
    monkeypatch.chdir(clone)  # another checkout of the same graders: listed once, from here
    files = ready_made_files()
    names = [p.name for p, _ in files]
    assert len(names) == len(set(names)) == len(list((repo / "graders").glob("*.json")))
    assert all(Path(shown).exists() for _, shown in files) and all(not Path(s).is_absolute() for _, s in files)
    monkeypatch.chdir(tmp_path)  # outside any checkout: absolute paths that exist
    assert all(Path(shown).is_absolute() and Path(shown).exists() for _, shown in ready_made_files())


def test_outputs_has_no_short_flag_beside_out(tmp_path: Path) -> None:
    # -o would read as "output" beside --out; --outputs is an input, spelled out so the two are never swapped
    res = runner.invoke(app, ["grade", "-d", "x.jsonl", "-g", "g.json", "-o", "outs.jsonl"])
    assert res.exit_code == 2 and "No such option: -o" in res.output


# ---- the judge-model check of grade, probe-grader and validate grader (run's is in tests/cli/test_run.py) ------

JUDGE_GRADER = {"type": "score_model", "name": "j", "model": "judge-mdl", "range": [0, 1],
                "input": [{"role": "user", "content": "Score {{ item.id }}: {{ sample.output_text }}"}]}


def _judge_command(command: str, files, tmp_path: Path, server) -> list[str]:
    ds, _, outs, _ = files
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps(JUDGE_GRADER))
    head = {"grade": ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs),
                      "--out", str(tmp_path / "judged.jsonl")],
            "probe-grader": ["probe-grader", str(grader), "--dataset", str(ds), "--limit", "2"],
            "validate": ["validate", "grader", str(grader), "--dataset", str(ds)]}[command]
    return [*head, "--judge-base-url", server.base_url, "--judge-api-key-env", "JUDGE_KEY"]


def _refused(res) -> str:
    said = [line for line in res.output.splitlines() if line.startswith("rfteval: ")]
    assert res.exit_code == 2 and len(said) == 1 and "Traceback" not in res.output, res.output
    return said[0]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["grade", "probe-grader", "validate"])
def test_judge_users_check_the_judge_model_before_spending(command, files, tmp_path, monkeypatch):
    from tests.support.fake_openai import FakeOpenAI

    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    with FakeOpenAI(lambda req: json.dumps({"steps": [], "result": 0.8}), models=["judge-model", "other"]) as fake:
        args = _judge_command(command, files, tmp_path, fake)
        line = _refused(runner.invoke(app, args))
        assert "grader model: unknown model 'judge-mdl'" in line and "serves judge-model, other" in line
        assert "--skip-model-check" in line and "--judge-model NAME judges with one it serves" in line
        line = _refused(runner.invoke(app, [*args, "--judge-model", "judge-modle"]))
        assert "--judge-model: unknown model 'judge-modle'" in line
        assert fake.requests == []  # no judge call was paid for
        assert not (tmp_path / "judged.jsonl").exists()  # nothing half-written

        fake.no_responses = True  # the Responses API is checked with the names skipped too
        line = _refused(runner.invoke(app, [*args, "--judge-model", "judge-model", "--judge-api", "responses",
                                            "--skip-model-check"]))
        assert "--judge-api: the endpoint has no Responses API" in line and "use --judge-api chat" in line

        fake.models, fake.listed = None, ["other"]  # a gateway: routes names it does not list
        assert "unknown model 'judge-mdl'" in _refused(runner.invoke(app, args))
        res = runner.invoke(app, [*args, "--skip-model-check"])
        assert res.exit_code == 0, res.output
        assert fake.requests and {r.model for r in fake.requests} == {"judge-mdl"}
        res = runner.invoke(app, [*args, "--judge-model", "other"])  # a listed override passes the check
        assert res.exit_code == 0, res.output


@pytest.mark.slow
@pytest.mark.parametrize("command", ["grade", "probe-grader", "validate"])
def test_ctrl_c_while_a_judge_answers_exits_130_without_a_traceback(command, files, tmp_path):
    """Tried as a new user against llama.cpp: Ctrl-C on a judging `grade`, `probe-grader` or `validate grader` exited
    130 after "Task was destroyed but it is pending!" and an "Event loop is closed" traceback per call still waiting
    for the judge (the judge closed its loop under them). The judge now cancels them first."""
    import signal
    import time

    from tests.support.cli_run_files import RFTEVAL
    from tests.support.fake_openai import FakeOpenAI

    with FakeOpenAI(lambda req: json.dumps({"steps": [], "result": 0.8}), delay_s=60.0) as fake:
        args = [*_judge_command(command, files, tmp_path, fake), "--judge-concurrency", "1", "--skip-model-check"]
        if command == "validate":
            args += ["--reference-template", "{{ item.reference_answer }}"]
        proc = subprocess.Popen([*RFTEVAL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(6000):  # until the first judge call is at the server (a guard, not a measurement)
            if fake.requests or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert fake.requests, proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    for noise in ("Traceback", "Task was destroyed", "Exception ignored", "Event loop is closed"):
        assert noise not in err, err


# ---- grade's judge cache and model labels (issue 27 items 7 and 10) ---------------------------------------------------


def _run_records(tmp_path: Path, tag: bool = False) -> Path:
    """A run's records as `rfteval run` writes them: model_label is the spec's label, model the endpoint's name.
    `tag`: every output text tells its sample apart, so no two judge requests are the same."""
    rows = [{"run_id": "r1", "model_label": label, "model": f"fake-{label}", "item_id": f"q{i}", "epoch": e,
             "output_text": (str(i) if (label == "tuned" or e == 1) else "wrong") + (f" ({label} #{e})" * tag),
             "score": 1.0 if (label == "tuned" or e == 1) else 0.0}
            for label in ("base", "tuned") for i in range(4) for e in (1, 2)]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_grade_keeps_the_outputs_model_label_so_agree_pairs_a_run_with_its_regrade(files, tmp_path):
    ds, grader, _, _ = files
    run = _run_records(tmp_path)
    regraded = tmp_path / "regraded.jsonl"
    res = runner.invoke(app, ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(run), "--out",
                              str(regraded)])
    assert res.exit_code == 0, res.output
    df = read_records(regraded)
    assert sorted(set(zip(df["model_label"], df["model"]))) == [("base", "fake-base"), ("tuned", "fake-tuned")]
    res = runner.invoke(app, ["agree", str(run), str(regraded), "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_samples"] == 16 and out["unmatched"]["a_only"] == out["unmatched"]["b_only"] == 0
    assert out["mae"] == 0.0 and out["verdict"][0]["candidate"] == "tuned"


@pytest.mark.slow
def test_a_rerun_of_grade_sends_no_judge_call_again_and_agree_regrade_shares_the_cache(files, tmp_path):
    """The README's claims: judge calls are cached so re-runs are free, and `agree --regrade` is cached like
    grade's: counted on the fake server's requests."""
    from tests.support.fake_openai import FakeOpenAI

    ds, _, _, _ = files
    run = _run_records(tmp_path, tag=True)
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps(JUDGE_GRADER))
    out = tmp_path / "graded" / "judged.jsonl"
    args = ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(run), "--out", str(out), "--format", "json"]
    score = lambda req: json.dumps({"steps": [], "result": 0.9 if "wrong" not in req.last_user_text() else 0.1})  # noqa: E731
    with FakeOpenAI(score, models=["judge-mdl"]) as fake:
        args += ["--judge-base-url", fake.base_url]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == 16
        cache = tmp_path / "graded" / "judge_cache.jsonl"
        assert len(cache.read_text().splitlines()) == 16  # beside the records, as a run directory keeps its own
        first = read_records(out)
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == 16  # the re-run: every answer from the cache, no request sent
        again = read_records(out)
        assert again["score"].tolist() == first["score"].tolist()
        assert again["grade_details"].map(lambda d: d["judge_cached"]).all()

        # agree --regrade of grade's records with the same grader and judge: the same cache, nothing sent
        res = runner.invoke(app, ["agree", str(out), "--regrade", str(grader), "--dataset", str(ds),
                                  "--judge-base-url", fake.base_url, "--format", "json"])
        assert res.exit_code == 0, res.output
        assert len(fake.requests) == 16
        agreed = json.loads(res.stdout)
        assert agreed["judge"]["judge-mdl"]["cache_hits"] == 16 and agreed["mae"] == 0.0

        # --judge-cache FILE elsewhere: a new cache, so the calls are paid once more, and only once
        elsewhere = tmp_path / "caches" / "grade.jsonl"
        res = runner.invoke(app, [*args, "--judge-cache", str(elsewhere)])
        assert res.exit_code == 0 and len(fake.requests) == 32 and elsewhere.is_file()
        res = runner.invoke(app, [*args, "--judge-cache", str(elsewhere)])
        assert res.exit_code == 0 and len(fake.requests) == 32

        # the cache is appended to: an input of the command is refused, before any call
        res = runner.invoke(app, [*args, "--judge-cache", str(ds)])
        assert res.exit_code == 2 and "--judge-cache" in res.output and "is also an input" in res.output
        assert len(fake.requests) == 32


def _azure_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Azure's RFT sample lines (azure-sdk-for-net, Azure.AI.Projects Sample18_FineTuning_Reinforcement.md): system +
    user + the assistant's answer, no reference field; ids added so outputs can name them."""
    ds = tmp_path / "azure.jsonl"
    ds.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "system", "content": "You are a helpful math tutor."}, {"role": "user", "content": f"What is {i}+{i}?"},
        {"role": "assistant", "content": str(2 * i)}]}) + "\n" for i in range(2)))
    grader = tmp_path / "like.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "has-2", "input": "{{ sample.output_text }}",
                                  "reference": "2", "operation": "like"}))
    outs = tmp_path / "azure.outputs.jsonl"
    outs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": str(2 * i)}) + "\n" for i in range(2)))
    return ds, grader, outs


@pytest.mark.slow
def test_grade_refuses_lines_ending_with_the_assistant_turn_unless_allowed(tmp_path):
    ds, grader, outs = _azure_files(tmp_path)
    out = tmp_path / "graded.jsonl"
    args = ["grade", "-d", str(ds), "-g", str(grader), "--outputs", str(outs), "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rfteval: ")]
    assert errors == [f"rfteval: {ds}:1: messages[2].role: the last message is the assistant's: an RFT line is a "
                      "prompt, so the model would be sent the answer and continue it; end the line with the user's "
                      "message and move the answer to a field the grader reads (e.g. reference_answer), or pass "
                      "--allow-trailing-assistant to send it anyway (and 1 more problem)"]
    assert not out.exists()
    res = runner.invoke(app, [*args, "--allow-trailing-assistant"])
    assert res.exit_code == 0, res.output
    assert f"warning: {ds}: 2 of 2 lines hold a system message (lines 1, 2)" in res.stderr
    assert "hold no field the grader reads" not in res.stderr  # the grader reads no item field: it needs none
    assert out.exists()


def test_grade_help_shows_each_default_once():
    res = runner.invoke(app, ["grade", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert res.stdout.count("[default: strip]") == 1


# ---- judges fail fast (issue 27): a refused judge request stops the command in one line --------------------------

# docs/judges.md's label_model example (OpenAI's API reference shape): the instructions are a developer message
LABEL_GRADER = {"type": "label_model", "name": "sentiment", "model": "judge-mdl",
                "input": [{"role": "developer", "content": "Classify as positive, neutral or negative"},
                          {"role": "user", "content": "Statement: {{ sample.output_text }}"}],
                "labels": ["positive", "neutral", "negative"], "passing_labels": ["positive"]}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["grade", "probe-grader", "validate"])
def test_a_judge_the_server_refuses_stops_the_command_in_one_line(command, files, tmp_path, monkeypatch):
    from tests.support.fake_openai import FakeOpenAI

    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    with FakeOpenAI(lambda req: json.dumps({"steps": [], "label": "positive"})) as fake:
        fake.refused_roles = {"developer"}
        args = _judge_command(command, files, tmp_path, fake)
        (tmp_path / "judge.json").write_text(json.dumps(LABEL_GRADER))
        res = runner.invoke(app, [*args, "--judge-concurrency", "2"])
        line = _refused(res)
        assert "the server refused 4 judge requests alike, caused by the developer role" in line
        assert "--developer-as system" in line and "(input: 'developer')" in line
        assert fake.stats["invalid"] <= 6  # not every cell's 10 retries
        assert not (tmp_path / "judged.jsonl").exists()  # no table of refusals read as grades
        res = runner.invoke(app, [*args, "--developer-as", "system"])
        assert res.exit_code == 0, res.output
        sent = [r for r in fake.requests if r.api == "chat"]
        assert sent and all(r.body["messages"][0]["role"] == "system" for r in sent)
