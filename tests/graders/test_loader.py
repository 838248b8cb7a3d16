import json
import re

import pytest

from rfteval.errors import InputError
from rfteval.graders import load_grader
from rfteval.graders.base import load_notes
from rfteval.graders.loader import load_response_format

SC = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
      "reference": "{{item.reference_answer}}", "operation": "eq"}


def dump(tmp_path, obj, name="g.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj, indent=2))
    return p


@pytest.mark.parametrize("wrap", [
    lambda g: g,
    lambda g: {"grader": g},
    lambda g: {"model": "o4-mini", "method": {"type": "reinforcement", "reinforcement": {"grader": g}}},
])
def test_accepts_the_shapes_people_paste(tmp_path, wrap):
    cfg = load_grader(dump(tmp_path, wrap(SC)))
    assert cfg.type == "string_check" and cfg.operation == "eq"


def test_bad_field_names_file_line_and_path(tmp_path):
    p = dump(tmp_path, {**SC, "operation": "equals"})
    with pytest.raises(InputError) as exc:
        load_grader(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:6: operation: ")  # line 6 of the indented JSON holds "operation"
    assert "'eq'" in msg


def test_bad_field_inside_a_job_keeps_the_job_path(tmp_path):
    job = {"method": {"reinforcement": {"grader": {**SC, "operation": "x"}}}}
    with pytest.raises(InputError) as exc:
        load_grader(dump(tmp_path, job))
    assert "method.reinforcement.grader.operation" in str(exc.value)


@pytest.mark.parametrize("obj, expected", [
    ({**SC, "type": "regex"}, "type: unknown grader type 'regex'"),
    ({k: v for k, v in SC.items() if k != "reference"}, "reference: Field required"),
    ({**SC, "operaton": "eq"}, "operaton: unknown key (did you mean `operation`?)"),
    ({**SC, "input": "{{ output_text }}"}, "must start with item. or sample."),
    ([SC], "a grader must be a JSON object"),
])
def test_validation_errors(tmp_path, obj, expected):
    with pytest.raises(InputError, match=re.escape(expected)):
        load_grader(dump(tmp_path, obj))


def test_a_misspelt_key_is_named_before_the_key_it_leaves_missing(tmp_path):
    """pydantic lists `reference: Field required` first; the typo beside it is the cause, and fixing it fixes both."""
    obj = {k: v for k, v in SC.items() if k != "reference"} | {"refrence": SC["reference"]}
    p = tmp_path / "g.json"
    p.write_text(json.dumps(obj, indent=2))
    with pytest.raises(InputError) as exc:
        load_grader(p)
    line = 1 + next(i for i, text in enumerate(p.read_text().splitlines()) if text.startswith('  "refrence": '))
    assert str(exc.value) == f"{p}:{line}: refrence: unknown key (did you mean `reference`?)"


def test_unknown_keys_inside_a_multi_and_a_misspelt_type_get_a_suggestion(tmp_path):
    multi = {"type": "multi", "name": "m", "calculate_output": "a",
             "graders": {"a": {**SC, "operation": "eq", "opration": "eq"}}}
    with pytest.raises(InputError) as exc:
        load_grader(dump(tmp_path, multi))
    assert exc.value.field == "graders.a.opration" and exc.value.message == "unknown key (did you mean `operation`?)"
    judge = {"type": "score_model", "name": "j", "model": "m", "input": [{"role": "user", "contnet": "x"}]}
    with pytest.raises(InputError) as exc:
        load_grader(dump(tmp_path, judge))
    assert exc.value.field == "input[0].contnet" and "did you mean `content`?" in exc.value.message
    with pytest.raises(InputError) as exc:
        load_grader(dump(tmp_path, {**SC, "type": "string_chek"}))
    assert "unknown grader type 'string_chek' (did you mean `string_check`? known: " in str(exc.value)


def test_curly_quotes_pasted_into_a_grader_are_named(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{\n  "type": \u201cstring_check\u201d,\n  "name": "x"\n}\n', encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert str(exc.value) == (f"{p}:2: invalid JSON: Expecting value (column 11); contains curly quotes (\u201c at "
                              "line 2, column 11): replace them with straight quotes")


def test_invalid_json_names_line(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{\n  "type": "string_check",\n  oops\n}')
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert str(exc.value).startswith(f"{p}:3: invalid JSON")


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_grader(tmp_path / "none.json")


def test_response_format_from_a_job(tmp_path):
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
    p = dump(tmp_path, {"method": {"reinforcement": {"grader": SC, "response_format": rf}}})
    assert load_response_format(p) == rf
    assert load_response_format(dump(tmp_path, SC, "b.json")) is None


def test_neq_is_an_alias_of_ne(tmp_path):
    assert load_grader(dump(tmp_path, {**SC, "operation": "neq"})).operation == "ne"


# ---------------------------------------------------------------------------------------------- OpenAI's own examples


def test_openai_examples_without_a_name_load_with_a_note(tmp_path):
    """The graders guide's python example, its combined grader and the RFT guide's job request omit `name`."""
    from rfteval.graders.base import load_notes
    from rfteval.graders.loader import load_grader

    python = {"type": "python", "source": "def grade(sample, item) -> float:\n    return 1.0"}
    combined = {"type": "multi", "calculate_output": "0.5 * name + 0.5 * email", "graders": {
        "name": {"type": "text_similarity", "input": "{{sample.output_json.name}}", "reference": "{{item.name}}",
                 "evaluation_metric": "fuzzy_match", "pass_threshold": 0.9},
        "email": {"type": "string_check", "input": "{{sample.output_json.email}}", "reference": "{{item.email}}",
                  "operation": "eq"}}}
    job = {"training_file": "file-abc", "model": "o4-mini-2025-04-16",
           "method": {"type": "reinforcement", "reinforcement": {"grader": python}}}
    for obj, name in ((python, "python"), (combined, "multi"), (job, "python")):
        path = tmp_path / "g.json"
        path.write_text(json.dumps(obj))
        config = load_grader(path)
        assert config.name == name
        assert any("no name given" in note for note in load_notes(config))
    path.write_text(json.dumps(combined))
    config = load_grader(path)
    assert config.graders["email"].name == "email"  # a sub-grader is named after its key
    assert sorted(n.split(":")[0] for n in load_notes(config))[:2] == ["graders.email", "graders.name"]
    named = dict(python, name="mine")
    path.write_text(json.dumps(named))
    assert load_notes(load_grader(path)) == []


@pytest.mark.parametrize("field, value", [("range", ["0", "1"]), ("range", [False, True])])
def test_numbers_given_as_strings_or_booleans_are_refused(field, value):
    from rfteval.errors import InputError
    from rfteval.graders.loader import parse_config

    grader = {"type": "score_model", "name": "judge", "model": "gpt-4.1-mini-2025-04-14",
              "input": [{"role": "user", "content": "Score {{ sample.output_text }}"}], field: value}
    with pytest.raises(InputError, match=field):
        parse_config(grader)
    assert list(parse_config({**grader, field: [0, 10]}).range) == [0.0, 10.0]  # JSON integers are numbers


def test_label_model_is_refused_as_a_fine_tuning_jobs_grader_but_not_inside_multi(tmp_path):
    from rfteval.errors import InputError
    from rfteval.graders.loader import load_grader

    label = {"type": "label_model", "name": "l", "model": "m", "labels": ["a", "b"], "passing_labels": ["a"],
             "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "m", "method": {"type": "reinforcement", "reinforcement": {"grader": label}}}))
    with pytest.raises(InputError, match="put it inside a multi grader") as exc:
        load_grader(path)
    assert exc.value.field == "method.reinforcement.grader.type"
    multi = {"type": "multi", "name": "m", "graders": {"l": label}, "calculate_output": "l"}
    path.write_text(json.dumps({"model": "m", "method": {"type": "reinforcement", "reinforcement": {"grader": multi}}}))
    assert load_grader(path).type == "multi"
    path.write_text(json.dumps(label))  # a bare grader file may be a label_model (evals, validate, grade)
    assert load_grader(path).type == "label_model"


def test_a_jobs_hyperparameters_are_named_in_one_note(tmp_path):
    """Azure's Sample18 job and the RFT guide's request carry hyperparameters beside the grader: the effort is
    carried to the run's sampling, the training-only ones are named as ignored, never dropped without a word."""
    from rfteval.graders.base import load_notes

    job = {"model": "o4-mini", "method": {"type": "reinforcement", "reinforcement": {
        "grader": SC, "hyperparameters": {"reasoning_effort": "medium", "n_epochs": 3, "eval_samples": 5,
                                          "batch_size": None}}}}
    notes = load_notes(load_grader(dump(tmp_path, job)))
    (note,) = [n for n in notes if "hyperparameters" in n]
    assert "reasoning_effort 'medium' is the models' sampling reasoning_effort" in note
    assert "eval_samples, n_epochs ignored" in note and "batch_size" not in note
    job["method"]["reinforcement"]["hyperparameters"] = {"reasoning_effort": "default"}
    assert not [n for n in load_notes(load_grader(dump(tmp_path, job))) if "hyperparameters" in n]
    assert not load_notes(load_grader(dump(tmp_path, SC)))  # a bare grader: nothing to say


def test_a_non_unit_range_without_pass_threshold_says_only_the_maximum_passes(tmp_path):
    judge = {"type": "score_model", "name": "j", "model": "m", "range": [0, 10],
             "input": [{"role": "user", "content": "{{ sample.output_text }}"}]}
    (note,) = [n for n in load_notes(load_grader(dump(tmp_path, judge))) if "pass_threshold" in n]
    assert note.startswith("range [0, 10] and no pass_threshold") and "only at 10, so 9 fails" in note
    for quiet in ({**judge, "pass_threshold": 7}, {**judge, "range": [0, 1]}, SC):
        assert not [n for n in load_notes(load_grader(dump(tmp_path, quiet))) if "pass_threshold" in n]


def test_a_job_that_is_not_reinforcement_says_it_has_no_grader(tmp_path):
    # FineTuningJob.model_dump() of a supervised job: method.reinforcement is null
    job = {"id": "ftjob-1", "object": "fine_tuning.job", "model": "gpt-4o-mini", "hyperparameters": {"n_epochs": 3},
           "method": {"type": "supervised", "dpo": None, "reinforcement": None, "supervised": {"hyperparameters": {}}}}
    with pytest.raises(InputError, match="method is 'supervised' has no grader"):
        load_grader(dump(tmp_path, job))
