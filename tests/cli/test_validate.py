"""`rfteval validate spec` end to end."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support import REPO

ROOT = REPO
runner = CliRunner()


def spec(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "eval.toml"
    p.write_text(f'''dataset = "{ROOT}/datasets/chipstack/items.jsonl"
grader = "{ROOT}/graders/chipstack.json"
epochs = 2
{extra}
[models.base]
model = "replay:{ROOT}/datasets/chipstack/recordings/base.jsonl"
[models.tuned]
model = "o4-mini"
base_url = "http://127.0.0.1:9/v1"
''')
    return p


def test_valid_spec_is_described(tmp_path):
    res = runner.invoke(app, ["validate", "spec", str(spec(tmp_path))])
    assert res.exit_code == 0, res.output
    assert "24 items x 2 epochs" in res.output
    assert "tuned: o4-mini via openai http://127.0.0.1:9/v1" in res.output


@pytest.mark.parametrize("limit, said", [(2, "first 2 of 24 items x 2 epochs"), (24, "valid; 24 items x 2 epochs"),
                                         (30, "valid; 24 items x 2 epochs")])
def test_a_specs_limit_is_counted_as_run_counts_it(tmp_path, limit, said):
    """`limit = 2` was ignored: "24 items x 2 epochs" for a run of 2 items. A limit past the dataset cuts nothing."""
    res = runner.invoke(app, ["validate", "spec", str(spec(tmp_path, f"limit = {limit}"))])
    assert res.exit_code == 0, res.output
    assert said in res.output and ("first" in res.output) == (limit < 24), res.output


def test_bad_key_names_file_line_and_key(tmp_path):
    p = spec(tmp_path, "concurrency = 0")
    res = runner.invoke(app, ["validate", "spec", str(p)])
    assert res.exit_code == 2
    assert f"{p}:4: concurrency: " in res.output and "Traceback" not in res.output


def test_missing_dataset(tmp_path):
    p = spec(tmp_path)
    p.write_text(p.read_text().replace("chipstack/items.jsonl", "nope/items.jsonl"))
    res = runner.invoke(app, ["validate", "spec", str(p)])
    assert res.exit_code == 2 and "no such file" in res.output


def _judge_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    import json

    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-1", "range": [0, 1],
                                  "input": [{"role": "user", "content": "{{ item.id }}: {{ sample.output_text }}"}]}))
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}]}) + "\n"
                               for i in range(4)))
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(json.dumps({"item_id": f"q{i}", "output_text": f"answer {i}"}) + "\n"
                               for i in range(4)))
    return grader, dataset, outputs


@pytest.mark.slow
def test_validate_grader_repeat_flags_a_random_judge(tmp_path, fake_openai, monkeypatch):
    """Through the CLI and the real openai client: a judge answering at random is flagged (exit 1), a
    consistent one is not (exit 0); every repeat is a real call."""
    import json
    import random

    grader, dataset, outputs = _judge_files(tmp_path)
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    args = ["validate", "grader", str(grader), "--dataset", str(dataset), "--outputs", str(outputs), "--repeat", "3",
            "--judge-base-url", fake_openai.base_url, "--judge-api-key-env", "JUDGE_KEY"]
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": 0.8})
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == 4 * 3
    rng = random.Random(7)
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": rng.random()})
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    assert "flag" in res.output.lower()


def test_validate_grader_repeat_needs_outputs(tmp_path):
    grader, dataset, _ = _judge_files(tmp_path)
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(dataset), "--repeat", "3"])
    assert res.exit_code == 2 and "--repeat" in res.output


def test_validate_grader_dataset_names_every_failing_item(tmp_path):
    import json

    from typer.testing import CliRunner

    from rfteval.cli.app import app

    ds = tmp_path / "items.jsonl"
    rows = [{"id": "a", "answer": "1"}, {"id": "b", "reference_answer": "2"}, {"id": "c"}]
    ds.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": "q"}], **r}) for r in rows) + "\n")
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"type": "string_check", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.answer }}", "operation": "eq"}))
    res = CliRunner().invoke(app, ["validate", "grader", str(grader), "--dataset", str(ds)])
    assert res.exit_code == 2
    assert "note: no name given" in res.stdout
    assert res.stderr.splitlines() == [
        f"rfteval: {ds}:2: item b: {{{{ item.answer }}}} (grader reference): no key 'answer'",
        f"rfteval: {ds}:3: item c: {{{{ item.answer }}}} (grader reference): no key 'answer'"]


def test_a_python_grader_as_a_py_file_and_its_json_form(tmp_path):
    import json

    from typer.testing import CliRunner

    from rfteval.cli.app import app
    from rfteval.graders.loader import load_grader

    source = 'def grade(sample, item) -> float:\n    return 1.0 if "\\\\" not in sample["output_text"] else 0.0\n'
    py = tmp_path / "my_grader.py"
    py.write_text(source)
    config = load_grader(py)
    assert (config.type, config.name, config.source) == ("python", "my_grader", source)
    res = CliRunner().invoke(app, ["validate", "grader", str(py), "--emit-json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout) == {"type": "python", "name": "my_grader", "source": source}
    bad = tmp_path / "bad.py"
    bad.write_text("def score(sample, item):\n    return 1\n")
    res = CliRunner().invoke(app, ["validate", "grader", str(bad)])
    assert res.exit_code == 2 and "grade" in res.stderr


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize("given, label", [
    (SCHEMA, " (structured outputs)"),  # a bare schema: the json_schema request
    ({"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}, " (structured outputs)"),
    ({"type": "json_object"}, " (JSON mode)"),
    ({"type": "json_object", "schema": SCHEMA}, " (JSON mode)"),  # llama.cpp's JSON mode with a schema
    ({"type": "text"}, ""),
])
def test_the_response_format_is_named_by_what_it_asks_the_server(tmp_path: Path, given: dict, label: str) -> None:
    import json

    (tmp_path / "format.json").write_text(json.dumps(given))
    res = runner.invoke(app, ["validate", "spec", str(spec(tmp_path, f'[sampling]\nresponse_format = "{tmp_path}/format.json"'))])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("  tuned: "))
    assert line == f"  tuned: o4-mini via openai http://127.0.0.1:9/v1{label}"


# ---- the RFT format of a dataset (data.dataset.FormatCheck), end to end

# Azure's RFT sample training lines (azure-sdk-for-net, Azure.AI.Projects Sample18_FineTuning_Reinforcement.md):
# system + user + the assistant's answer, no reference field.
AZURE_LINES = [{"messages": [{"role": "system", "content": "You are a helpful math tutor."},
                             {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
               for q, a in (("What is 12 * 7?", "12 * 7 = 84."), ("What is the square root of 81?", "It is 9."))]


def _azure(tmp_path: Path) -> Path:
    import json

    p = tmp_path / "rft_training_set.jsonl"
    p.write_text("".join(json.dumps(line) + "\n" for line in AZURE_LINES))
    return p


def test_validate_dataset_refuses_a_trailing_assistant_turn_naming_each_line(tmp_path):
    p = _azure(tmp_path)
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert lines[0] == (f"{p}:1: messages[2].role: the last message is the assistant's: an RFT line is a prompt, so "
                        "the model would be sent the answer and continue it; end the line with the user's message and "
                        "move the answer to a field the grader reads (e.g. reference_answer), or pass "
                        "--allow-trailing-assistant to send it anyway")
    assert lines[1].startswith(f"{p}:2: messages[2].role: the last message is the assistant's")
    assert f"warning: {p}: 2 of 2 lines hold a system message (lines 1, 2)" in res.stderr
    assert lines[-1] == f"{p}: 2 lines: 0 valid, 2 with problems (2 warnings above, not counted as problems)"


def test_validate_dataset_takes_follow_ups_and_names_a_bad_one_by_line_and_field(tmp_path):
    user = [{"role": "user", "content": "2+2?"}]
    lines = [{"messages": user, "reference_answer": "4", "rfteval_followups": ["and 3+3?", {"role": "user",
                                                                                          "content": "thanks"}]},
             {"messages": user, "reference_answer": "4", "rfteval_followups": "and 3+3?"},
             {"messages": user, "reference_answer": "4", "rfteval_followups": ["ok", {"role": "assistant",
                                                                                    "content": "x"}]},
             {"messages": user, "reference_answer": "4", "rfteval_followups": [{"role": "user"}]},
             {"messages": user, "reference_answer": "4", "rfteval_followups": [3]}]
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [
        f'{p}:2: rfteval_followups: must be a list of user messages: strings or {{"role": "user", "content": ...}}',
        f"{p}:3: rfteval_followups[1].role: a scripted turn is the user's: role must be user, got 'assistant'",
        f"{p}:4: rfteval_followups[0].content: missing",
        f"{p}:5: rfteval_followups[0]: must be a string or a user message, got int",
        f"{p}: 5 lines: 1 valid, 4 with problems"]
    p.write_text(json.dumps(lines[0]) + "\n")
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 0, res.output  # the follow-ups are no reference field: the reference is still found


def test_validate_dataset_counts_each_line_once_valid_or_with_a_problem(tmp_path):
    """A line ending with the assistant's message is a problem, not also a valid item: the closing line's counts
    add up to the file's lines (it said "4 valid items, 1 problems" for these 4 lines)."""
    user = [{"role": "user", "content": "2+2?"}]
    good = [{"messages": user, "reference_answer": str(i)} for i in range(3)]
    answered = {"messages": [*user, {"role": "assistant", "content": "4"}], "reference_answer": "4"}
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps(line) + "\n" for line in [*good, answered]))
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 2
    lines = res.stderr.splitlines()
    assert lines[0].startswith(f"{p}:4: messages[1].role: the last message is the assistant's")
    assert lines[-1] == f"{p}: 4 lines: 3 valid, 1 with problems"
    # an unreadable line, the refused line and a warned one (a system message): the warning is not a problem
    system = {"messages": [{"role": "system", "content": "Be brief."}, *user], "reference_answer": "4"}
    p.write_text("{bad\n" + "".join(json.dumps(line) + "\n" for line in [*good, answered, system]))
    res = runner.invoke(app, ["validate", "dataset", str(p)])
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == (f"{p}: 6 lines: 4 valid, 2 with problems (1 warning above, not counted "
                                           "as a problem)")
    # valid, once the flag lets the answered line through: every line valid, the warning still apart
    res = runner.invoke(app, ["validate", "dataset", str(p), "--allow-trailing-assistant"])
    assert res.exit_code == 2 and res.stderr.splitlines()[-1] == (
        f"{p}: 6 lines: 5 valid, 1 with problems (1 warning above, not counted as a problem)")


def test_validate_dataset_with_the_flag_warns_of_system_and_missing_references(tmp_path):
    import json

    p = _azure(tmp_path)
    res = runner.invoke(app, ["validate", "dataset", str(p), "--allow-trailing-assistant"])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        f"warning: {p}: 2 of 2 lines hold a system message (lines 1, 2): Azure's RFT refuses them and OpenAI's RFT "
        "format has no system role (developer is its role)",
        f"warning: {p}: 2 of 2 lines hold no field but messages, so no grader can read a reference from them "
        "(lines 1, 2)"]
    assert res.stdout.strip() == f"{p}: 2 items, no problems (2 warnings above, not counted as problems)"
    grader = tmp_path / "py.json"  # a python grader reading item["answer"]: named as its reference field
    grader.write_text(json.dumps({"type": "python", "name": "py", "source":
                                  "def grade(sample, item):\n    return float(sample['output_text'] == item['answer'])\n"}))
    with p.open("a") as fh:
        fh.write(json.dumps({"messages": [{"role": "user", "content": "2+2?"}], "reference_answer": "4"}) + "\n")
    res = runner.invoke(app, ["validate", "dataset", str(p), "--allow-trailing-assistant", "--grader", str(grader)])
    assert res.exit_code == 0, res.output
    assert (f"warning: {p}: 3 of 3 lines hold no field the grader reads as a reference (item.answer) (lines 1, 2, 3)"
            in res.stderr.splitlines())


@pytest.mark.slow
def test_validate_spec_checks_the_dataset_as_run_does_and_the_spec_key_allows_it(tmp_path):
    p = _azure(tmp_path)
    grader = tmp_path / "g.json"
    grader.write_text('{"type": "string_check", "name": "s", "input": "{{ sample.output_text }}", '
                      '"reference": "84", "operation": "like"}')
    body = f'dataset = "{p}"\ngrader = "{grader}"\nepochs = 1\n{{extra}}\n[models.base]\nmodel = "m"\n'
    spec_file = tmp_path / "eval.toml"
    spec_file.write_text(body.replace("{extra}", ""))
    res = runner.invoke(app, ["validate", "spec", str(spec_file)])
    assert res.exit_code == 2 and f"rfteval: {p}:1: messages[2].role: the last message is the assistant's" in res.stderr
    assert "(and 1 more problem)" in res.stderr
    spec_file.write_text(body.replace("{extra}", "allow_trailing_assistant = true"))
    res = runner.invoke(app, ["validate", "spec", str(spec_file)])
    assert res.exit_code == 0, res.output
    assert "system message" in res.stderr
    assert "hold no field the grader reads" not in res.stderr  # its reference is in the grader: lines need none


def test_the_judge_calls_line_says_where_they_go_and_which_key():
    from rfteval.readiness.reference import judge_calls_note

    local = "http://127.0.0.1:8080/v1"
    assert judge_calls_note(4, local, "OPENAI_API_KEY", {}) == (
        f"4 judge call(s) to {local}, no key set ($OPENAI_API_KEY is empty; a local server needs none)")
    assert judge_calls_note(4, local, "JUDGE_KEY", {"JUDGE_KEY": "k"}) == (
        f"4 judge call(s) to {local}, with the key in $JUDGE_KEY")
    assert judge_calls_note(2, None, "OPENAI_API_KEY", {"OPENAI_API_KEY": "sk"}) == (
        "2 judge call(s) to OpenAI, billed to the key in $OPENAI_API_KEY")
    assert judge_calls_note(2, "https://api.openai.com/v1", "K", {}) == (
        "2 judge call(s) to https://api.openai.com/v1, but $K is not set: they will fail")


@pytest.mark.slow
def test_validate_grader_with_a_local_judge_and_no_key_says_so(tmp_path, fake_openai, monkeypatch):
    import json

    grader, dataset, _ = _judge_files(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": 1.0})
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(dataset), "--judge-base-url",
                              fake_openai.base_url, "--reference-template", "answer {{ item.id }}"])
    assert res.exit_code == 0, res.output
    assert (f"the references go to the judge model: 4 judge call(s) to {fake_openai.base_url}, no key set "
            "($OPENAI_API_KEY is empty; a local server needs none)") in res.stdout
    assert "billed" not in res.output
    assert len(fake_openai.requests) == 4  # the count announced is the count made


@pytest.mark.slow
def test_validate_grader_announces_judge_calls_only_when_it_makes_them(tmp_path, fake_openai):
    """Issue 36: a judge whose references cannot be read (no reference field, no --reference-template) was announced
    as "about 4 judge call(s)" and then made none. Now nothing is announced, nothing is sent, and the report says
    why; a multi of two judges announces two calls per reference, as many as it makes."""
    grader, dataset, _ = _judge_files(tmp_path)
    fake_openai.responder = lambda req: json.dumps({"steps": [], "result": 1.0})
    base = ["validate", "grader", str(grader), "--dataset", str(dataset), "--judge-base-url", fake_openai.base_url]
    res = runner.invoke(app, base)
    assert res.exit_code == 0, res.output
    assert "judge call" not in res.output and fake_openai.requests == []
    assert "reference answers graded as outputs: 0 of 4 items" in res.stdout
    assert "reference probes skipped: cannot tell how the grader reads an answer" in res.stdout
    judge = json.loads(grader.read_text())
    multi = tmp_path / "multi.json"
    multi.write_text(json.dumps({"type": "multi", "name": "m", "calculate_output": "(a + b) / 2", "graders": {
        "a": judge, "b": {**judge, "name": "k", "model": "judge-2"}}}))
    res = runner.invoke(app, [*base[:2], str(multi), *base[3:], "--reference-template", "answer {{ item.id }}"])
    assert res.exit_code == 0, res.output
    assert f"the references go to the judge model: 8 judge call(s) to {fake_openai.base_url}" in res.stdout
    assert len(fake_openai.requests) == 8


def test_the_cookbook_healthbench_rubric_judge_names_no_line_as_lacking_a_reference(tmp_path: Path) -> None:
    """openai-cookbook, examples/fine-tuned_qa/reinforcement_finetuning_healthbench.ipynb: lines of one user message
    (build_datapoints), graded by a score_model over {{item.messages}} and {{sample.output_text}}. A sound pair: it
    used to be told that every line holds "no field the grader reads as a reference (it reads no item field)"."""
    p = tmp_path / "rft_train.jsonl"
    p.write_text("".join(json.dumps({"messages": [{"role": "user", "content": text}]}) + "\n"
                         for text in ("my knee clicks climbing stairs", "how do I get to the station")))
    grader = tmp_path / "g.json"
    grader.write_text(json.dumps({"name": "score_health", "type": "score_model", "model": "o4-mini-2025-04-16",
                                  "input": [{"role": "user", "type": "message", "content": (
                                      "Conversation:\n{{item.messages}}\n\nAgent reply:\n{{sample.output_text}}\n\n"
                                      "Return only the numeric score")}],
                                  "sampling_params": {"reasoning_effort": "low"}}))
    res = runner.invoke(app, ["validate", "dataset", str(p), "--grader", str(grader)])
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr


# ---- grading errors are no verdict: the reference share and the judge's stability rest on grades, not errors

CUT = '{"steps": [{"description": "The answer'  # a judge answer stopped at max_tokens before its score


def _reference_judge(tmp_path: Path) -> tuple[Path, Path]:
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "judge-1", "input": [
        {"role": "user", "content": "Reference {{ item.reference_answer }}; answer {{ sample.output_text }}"}]}))
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": "x"}],
                                           "reference_answer": f"r{i}"}) + "\n" for i in range(4)))
    return grader, dataset


@pytest.mark.slow
def test_validate_grader_shows_what_a_raising_grader_raised(tmp_path):
    """It said "inconclusive: 48 grading errors (python_grader_runtime_error ×48)" and never what was raised."""
    ds, _ = _typo_files(tmp_path)
    grader = tmp_path / "key_error.py"
    grader.write_text("def grade(sample, item):\n    return float(sample['output_text'] == item['answer_num'])\n")
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(ds), "--reference-template",
                              "{{ item.answer }}"])
    assert res.exit_code == 3, res.output
    assert "  python_grader_runtime_error, the first: grade() raised KeyError: 'answer_num'" in res.stdout.splitlines()
    assert "Traceback" not in res.output  # one line: the first of the message


@pytest.mark.slow
def test_validate_grader_references_cut_off_by_the_judge_are_inconclusive(tmp_path, fake_openai):
    """It said "at the maximum (1): 0/4 = 0.0%" and exited 0 when every judge answer was cut off: the errors' 0s
    read as the references' grades. Errors are counted apart; with none scored the check is inconclusive."""
    from tests.support.fake_openai import Reply

    grader, dataset = _reference_judge(tmp_path)
    args = ["validate", "grader", str(grader), "--dataset", str(dataset), "--judge-base-url", fake_openai.base_url]
    fake_openai.responder = lambda req: Reply(text=CUT, finish_reason="length")
    res = runner.invoke(app, args)
    assert res.exit_code == 3, res.output
    assert "inconclusive: 4 grading errors (model_grader_truncated_error ×4): no reference answer was scored" \
        in res.stdout
    assert "at the maximum" not in res.stdout and "inconclusive" in res.stderr
    assert "probe" not in res.output  # once "note: every probe ended in a grading error", after the line above
    # one reference cut off: the other three decide, and the one is counted, not "below the maximum"
    fake_openai.responder = lambda req: (Reply(text=CUT, finish_reason="length") if "r0" in req.last_user_text()
                                         else json.dumps({"steps": [], "result": 1.0}))
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert ("at the maximum (1): 3/3 = 100.0% of the scored; 1 grading error (model_grader_truncated_error ×1) "
            "left out") in res.stdout
    assert "below the maximum" not in res.stdout


@pytest.mark.slow
def test_validate_grader_repeat_on_a_judge_whose_every_answer_is_cut_off_is_inconclusive(tmp_path, fake_openai):
    """No output scored twice read as "stable" (exit 0): an unmeasured spread is no stability."""
    grader, dataset, outputs = _judge_files(tmp_path)
    from tests.support.fake_openai import Reply

    fake_openai.responder = lambda req: Reply(text=CUT, finish_reason="length")
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(dataset), "--outputs",
                              str(outputs), "--repeat", "3", "--judge-base-url", fake_openai.base_url])
    assert res.exit_code == 3, res.output
    assert "12 grading errors (model_grader_truncated_error ×12), left out -> INCONCLUSIVE" in res.stdout
    assert "stable" not in res.stdout


def _typo_files(tmp_path: Path) -> tuple[Path, Path]:
    """48 items holding `answer`, and a grader whose template misspells it `anser`."""
    ds = tmp_path / "items.jsonl"
    ds.write_text("".join(json.dumps({"id": f"i{n}", "messages": [{"role": "user", "content": f"q{n}"}],
                                      "answer": str(n)}) + "\n" for n in range(48)))
    grader = tmp_path / "grader.json"
    grader.write_text(json.dumps({"type": "string_check", "name": "g", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.anser }}", "operation": "eq"}))
    return ds, grader


def test_a_template_typo_is_one_line_in_validate_grader_and_validate_dataset(tmp_path):
    ds, grader = _typo_files(tmp_path)
    expected = (f"{grader}: reference: {{{{ item.anser }}}}: no item has field `anser` (0 of 48 items in items.jsonl; "
                "did you mean `answer`?)")
    res = runner.invoke(app, ["validate", "grader", str(grader), "--dataset", str(ds)])
    assert res.exit_code == 2 and res.stderr.splitlines() == [f"rfteval: {expected}"]
    assert res.stdout == ""  # it said "grader 'g': type string_check, valid" before refusing it
    res = runner.invoke(app, ["validate", "dataset", str(ds), "--grader", str(grader)])
    assert res.exit_code == 2
    # the typo once: not again as 48 lines holding "no field the grader reads as a reference (item.anser)"
    assert res.stderr.splitlines() == [expected, f"{ds}: 48 lines: 48 valid, 0 with problems; 1 problem of the "
                                       "grader's item fields above"]


@pytest.mark.slow
def test_validate_grader_says_valid_only_after_every_refusal(tmp_path):
    """A judge model the endpoint does not serve was refused (exit 2) after "grader 'j': type score_model, valid"."""
    from tests.support.fake_openai import FakeOpenAI

    ds, _ = _typo_files(tmp_path)
    grader = tmp_path / "judge.json"
    grader.write_text(json.dumps({"type": "score_model", "name": "j", "model": "no-such-judge", "input": [
        {"role": "user", "content": "{{ item.answer }} {{ sample.output_text }}"}]}))
    with FakeOpenAI(models=["judge-model"]).start() as fake:
        args = ["validate", "grader", str(grader), "--dataset", str(ds), "--judge-base-url", fake.base_url]
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "unknown model 'no-such-judge'" in res.stderr, res.output
        assert "valid" not in res.stdout and not [r for r in fake.requests if r.api == "chat"]
        res = runner.invoke(app, [*args, "--skip-model-check"])
    assert res.stdout.splitlines()[0] == "grader 'j': type score_model, valid", res.output  # and then it is


def test_a_template_typo_is_said_once_by_validate_spec_and_run(tmp_path):
    """Issue 36 leftover: beside the one-line template error, `run` and `validate spec` warned that every line holds
    no field the grader reads as a reference (item.anser): the same cause twice. A field that is no typo, which some
    lines lack, is still warned about, with the typo left out of the fields it names."""
    ds, grader = _typo_files(tmp_path)
    expected = (f"rfteval: {grader}: reference: {{{{ item.anser }}}}: no item has field `anser` (0 of 48 items in "
                "items.jsonl; did you mean `answer`?)")
    p = tmp_path / "eval.toml"
    p.write_text(f'dataset = "{ds}"\ngrader = "{grader}"\n[models.base]\nmodel = "m"\nbase_url = '
                 '"http://127.0.0.1:9/v1"\n')
    for args in (["validate", "spec", str(p)], ["run", str(p), "-q", "--out", str(tmp_path / "run")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and res.stderr.splitlines() == [expected], res.output
    assert not (tmp_path / "run").exists()

    lines = ds.read_text().splitlines()
    lines[:2] = [json.dumps({k: v for k, v in json.loads(line).items() if k != "answer"}) for line in lines[:2]]
    ds.write_text("\n".join(lines) + "\n")
    grader.write_text(json.dumps({"type": "multi", "name": "m", "calculate_output": "a * b", "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{ sample.output_text }}",
              "reference": "{{ item.anser }}", "operation": "eq"},
        "b": {"type": "string_check", "name": "b", "input": "{{ sample.output_text }}",
              "reference": "{{ item.answer }}", "operation": "eq"}}}))
    res = runner.invoke(app, ["validate", "dataset", str(ds), "--grader", str(grader)])
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert res.exit_code == 2 and warnings == [
        f"warning: {ds}: 2 of 48 lines hold no field the grader reads as a reference (item.answer) (lines 1, 2)"]


def test_an_api_key_in_a_spec_is_refused_and_never_printed(tmp_path):
    secret = "sk-proj-4fGq9SECRETxx"
    p = spec(tmp_path)
    p.write_text(p.read_text().replace('base_url = "http://127.0.0.1:9/v1"',
                                       f'base_url = "http://127.0.0.1:9/v1"\napi_key = "{secret}"'))
    line = p.read_text().splitlines().index(f'api_key = "{secret}"') + 1
    for args in (["validate", "spec", str(p)], ["run", str(p), "-q", "--out", str(tmp_path / "run")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2
        assert res.stderr.splitlines() == [
            f"rfteval: {p}:{line}: models.tuned.api_key: an API key does not go in a spec file: put the NAME of the "
            "environment variable holding it in `models.tuned.api_key_env` (e.g. api_key_env = \"OPENAI_API_KEY\") "
            "and remove this key"]
        assert secret not in res.stdout + res.stderr and "SECRET" not in res.stdout + res.stderr
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- validate tools


def _tool_files(tmp_path: Path, tools_source: str) -> tuple[Path, Path]:
    def tool(name: str, required: list[str], *props: str) -> dict:
        return {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {p: {"type": "string"} for p in props}, "required": required}}}

    lines = [{"id": "q1", "messages": [{"role": "user", "content": "find it"}],
              "tools": [tool("search", ["query"], "query", "top_k")]},
             {"id": "q2", "messages": [{"role": "user", "content": "look it up"}],
              "tools": [tool("search", ["query"], "query", "top_k"), {"type": "function", "name": "lookup",
                                                                      "parameters": {"type": "object", "properties": {
                                                                          "id": {"type": "string"}},
                                                                          "required": ["id"]}}]},
             {"id": "q3", "messages": [{"role": "user", "content": "no tools here"}]}]
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    tools = tmp_path / "tools.py"
    tools.write_text(tools_source)
    return dataset, tools


FITTING_TOOLS = '''import json

def init_state(item):
    return {"seen": []}

def search(query: str, top_k: int = 3, *, item=None, state=None):
    return [query] * top_k

def lookup(id: str):
    return {"id": id}
'''


@pytest.mark.slow
def test_validate_tools_fits_loads_and_says_the_most_requests(tmp_path):
    dataset, tools = _tool_files(tmp_path, FITTING_TOOLS)
    res = runner.invoke(app, ["validate", "tools", "--dataset", str(dataset), "--tools", str(tools),
                              "--max-turns", "6", "--epochs", "4"])
    assert res.exit_code == 0, res.output
    assert "2 tools fit the items' schemas (lookup, search); 2 of 3 items declare tools" in res.output
    assert "the module loads in the sandbox" in res.output
    assert "3 items x 4 epochs = 12 cells per model: at most 72 requests per model" in res.output


@pytest.mark.slow
def test_validate_tools_names_each_misfit_at_its_def_line(tmp_path):
    source = FITTING_TOOLS.replace("def lookup(id: str):", "def lookup(key: str):").replace(
        "def search(query: str, top_k: int = 3,", "def search(query: str, top_k: int,")
    dataset, tools = _tool_files(tmp_path, source)
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tools", str(tools)])
    assert res.exit_code == 2, res.output
    problems = [line for line in res.output.splitlines() if line.startswith(str(tools))]
    assert problems == [
        f"{tools}:6: search: parameter 'top_k' has no default, but the schema does not require it (a call without it "
        "fails)",
        f"{tools}:9: lookup: parameter 'key' has no default and is not in the schema's properties (the model is never "
        "asked for it)",
        f"{tools}:9: lookup: the schema's property 'id' is not a parameter of lookup() (add it, or **kwargs)"]
    assert "Traceback" not in res.output and "requests per model" not in res.output


@pytest.mark.slow
def test_validate_tools_names_a_missing_function_and_a_module_that_does_not_load(tmp_path):
    dataset, tools = _tool_files(tmp_path, "import a_package_not_installed\n\ndef search(query, top_k=3):\n    pass\n")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tools", str(tools)])
    assert res.exit_code == 2, res.output
    assert f"{dataset}:2: tools.lookup: {tools} defines no function lookup()" in res.output
    assert (f"{tools}:1: does not load in the sandbox: ModuleNotFoundError: No module named "
            "'a_package_not_installed'") in res.output


def test_validate_tools_refuses_a_module_that_does_not_parse_in_one_line(tmp_path):
    dataset, tools = _tool_files(tmp_path, "def search(query:\n")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tools", str(tools), "--max-turns", "3"])
    assert res.exit_code == 2 and res.output.startswith(f"rfteval: {tools}:1: does not parse"), res.output
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tools", str(tools), "--max-turns", "0"])
    assert res.exit_code == 2 and "--max-turns: must be at least 1" in res.output


def _endpoints_config(tmp_path: Path, *names: str, header: str = "Bearer ${TOOLS_TOKEN}") -> Path:
    config = tmp_path / "tools-config.json"
    config.write_text(json.dumps([{"name": n, "server_url": "http://127.0.0.1:9/call", "headers": {
        "Authorization": header}} for n in names], indent=2))
    return config


def test_validate_tools_takes_agent_rft_endpoints_and_contacts_no_server(tmp_path, monkeypatch):
    # port 9 (discard) on loopback: a server contacted would refuse the connection; validate must not try
    dataset, _ = _tool_files(tmp_path, FITTING_TOOLS)
    config = _endpoints_config(tmp_path, "search", "lookup", "spare")
    monkeypatch.setenv("TOOLS_TOKEN", "sk-validate-secret-123456")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tool-endpoints", str(config)])
    assert res.exit_code == 0, res.output
    assert (f"{config}: 2 tools (lookup, search) at Agent RFT tool endpoints; every ${{VAR}} is set; no server "
            "contacted (validate sends nothing)") in res.output
    assert "2 of 3 items declare tools" in res.output and "note: spare is listed but no item declares it" in res.output
    assert "sk-validate-secret" not in res.output


def test_validate_tools_names_an_unset_variable_and_a_tool_no_box_has(tmp_path, monkeypatch):
    dataset, _ = _tool_files(tmp_path, FITTING_TOOLS)
    monkeypatch.delenv("TOOLS_TOKEN", raising=False)
    config = _endpoints_config(tmp_path, "search")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tool-endpoints", str(config)])
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1, res.output
    assert "[0].headers.Authorization" in res.stderr and "${TOOLS_TOKEN} is not set" in res.stderr
    monkeypatch.setenv("TOOLS_TOKEN", "t")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tool-endpoints", str(config)])
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines() == [f"{dataset}:2: tools.lookup: {config} lists no tool 'lookup'"]


def test_validate_tools_needs_some_tools_and_refuses_a_name_two_boxes_have(tmp_path, monkeypatch):
    dataset, tools = _tool_files(tmp_path, FITTING_TOOLS)
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset)])
    assert res.exit_code == 2 and "--tools: name the tools to check" in res.stderr, res.output
    monkeypatch.setenv("TOOLS_TOKEN", "t")
    config = _endpoints_config(tmp_path, "lookup")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--tools", str(tools), "--tool-endpoints",
                              str(config), "--unsafe-python-graders"])
    assert res.exit_code == 2, res.output
    assert f"tool 'lookup' is both in {tools} and in {config}" in res.stderr


@pytest.mark.slow
def test_validate_tools_starts_an_mcp_server_and_checks_the_items_schemas_against_its_tools(tmp_path):
    from tests.support.mcp_servers import fault_server, need_client, need_sandbox

    need_client()
    need_sandbox()
    dataset = tmp_path / "items.jsonl"
    echo = {"type": "function", "function": {"name": "echo", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}
    wrong = {"type": "function", "function": {"name": "echo", "parameters": {
        "type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}}}
    dataset.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "say hi"}], "tools": [echo]})
                       + "\n" + json.dumps({"id": "b", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    server = " ".join(fault_server())
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--mcp", server, "--epochs", "2"])
    assert res.exit_code == 0, res.output
    assert "(7 tools) started in the sandbox; 1 tool (echo) fit the items' schemas; every MCP tool offered to the 1 " \
        "items that declare none" in res.output
    assert "2 items x 2 epochs = 4 cells per model" in res.output
    dataset.write_text(json.dumps({"id": "a", "messages": [{"role": "user", "content": "say hi"}], "tools": [wrong]})
                       + "\n")
    res = runner.invoke(app, ["validate", "tools", "-d", str(dataset), "--mcp", server])
    assert res.exit_code == 2, res.output
    assert f"{dataset}:1: tools.echo: MCP server {server!r} requires 'text', which the item's schema never asks the " \
        "model for" in res.stderr
    assert f"{dataset}:1: tools.echo: the item's schema requires 'message', which MCP server {server!r}'s tool does " \
        "not take" in res.stderr
