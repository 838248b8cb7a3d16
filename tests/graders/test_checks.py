"""rfteval.graders.checks: templates resolved against the dataset and the sample's fields before spending."""

from __future__ import annotations

import json

import pytest

from rfteval.data.dataset import load_dataset
from rfteval.errors import InputError
from rfteval.graders.checks import check_item_paths, check_sample_paths, output_json_warning, template_paths
from rfteval.graders.loader import parse_config

MULTI = {
    "type": "multi", "name": "m", "calculate_output": "a + b",
    "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{ sample.output_json.label }}",
              "reference": "{{ item.answer }}", "operation": "eq"},
        "b": {"type": "python", "name": "b", "source": "def grade(sample, item):\n    return '{{ item.nope }}' and 1"},
    },
}


def write_items(tmp_path, rows):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": "q"}], **r}) for r in rows) + "\n")
    return load_dataset(p)


def test_template_paths_walk_sub_graders_and_skip_code():
    paths = [(field, path) for field, path, _, _ in template_paths(parse_config(MULTI))]
    assert paths == [("graders.a.input", "sample.output_json.label"), ("graders.a.reference", "item.answer")]


def test_every_item_is_checked_and_named_by_file_line_and_id(tmp_path):
    ds = write_items(tmp_path, [{"id": "x", "answer": "A"}, {"id": "y", "reference_answer": "B"},
                                {"id": "z", "answer": {"deep": 1}}])
    errors = check_item_paths(parse_config(MULTI), ds.items, ds.path)
    assert [str(e) for e in errors] == [f"{ds.path}:2: item y: {{{{ item.answer }}}} (grader graders.a.reference): "
                                        "no key 'answer'"]


def test_the_list_is_capped(tmp_path):
    ds = write_items(tmp_path, [{"id": "has", "answer": "A"}] + [{"id": str(i)} for i in range(8)])
    errors = check_item_paths(parse_config(MULTI), ds.items, ds.path, limit=3)
    assert len(errors) == 3 and errors[-1].message.endswith("(and 5 more)")
    assert [e.line for e in errors] == [2, 3, 4]


def test_a_field_no_item_has_is_one_line_with_the_count_and_the_field_meant(tmp_path):
    """A misspelt `{{ item.anser }}` fails on every item alike: one line naming the grader file, not 48."""
    ds = write_items(tmp_path, [{"id": f"i{n}", "answer": str(n)} for n in range(48)])
    typo = dict(MULTI["graders"]["a"], reference="{{ item.anser }}")
    errors = check_item_paths(parse_config(typo), ds.items, ds.path, grader="grader.json")
    assert [str(e) for e in errors] == ["grader.json: reference: {{ item.anser }}: no item has field `anser` "
                                        "(0 of 48 items in d.jsonl; did you mean `answer`?)"]


def test_a_field_no_item_has_is_left_out_of_the_reference_fields(tmp_path):
    """The typo's one line is the finding; the lines lacking `anser` are not a second one (issue 36 leftover). A
    nested typo (`meta.answr`) leaves its top-level field, which the items hold, a reference field."""
    from rfteval.graders.checks import reference_fields

    ds = write_items(tmp_path, [{"id": "i1", "answer": "1", "meta": {"answer": "A"}}])
    pair = parse_config(dict(MULTI, graders={
        "a": dict(MULTI["graders"]["a"], reference="{{ item.anser }}"),
        "b": dict(MULTI["graders"]["a"], reference="{{ item.meta.answr }}")}))
    errors = check_item_paths(pair, ds.items, ds.path)
    assert len(errors) == 2 and reference_fields(pair) == frozenset({"anser", "meta"})
    assert reference_fields(pair, errors) == frozenset({"meta"})
    assert reference_fields(pair, [InputError("{{ item.anser }}: something else")]) == frozenset({"anser", "meta"})


def test_a_nested_field_no_item_has_is_matched_among_its_neighbours(tmp_path):
    ds = write_items(tmp_path, [{"meta": {"answer": "A", "source": "s"}}, {"meta": {"answer": "B"}}])
    typo = dict(MULTI["graders"]["a"], reference="{{ item.meta.answr }}")
    (error,) = check_item_paths(parse_config(typo), ds.items, ds.path)
    assert error.file == ds.path and error.field == "reference"
    assert error.message == ("{{ item.meta.answr }}: no item has field `meta.answr` (0 of 2 items in d.jsonl; "
                             "did you mean `meta.answer`?)")
    far = dict(MULTI["graders"]["a"], reference="{{ item.meta.answer[5] }}")  # no missing key: the first failure
    (error,) = check_item_paths(parse_config(far), ds.items, ds.path)
    assert error.message.startswith("{{ item.meta.answer[5] }}: fails on every item (0 of 2 items in d.jsonl; first, "
                                    "line 1, item ")


def test_sample_paths_must_name_a_sample_field():
    bad = dict(MULTI["graders"]["a"], input="{{ sample.output }}")
    (error,) = check_sample_paths(parse_config(bad), "g.json")
    assert "a sample has no field 'output'" in str(error) and error.field == "input"
    assert check_sample_paths(parse_config(MULTI["graders"]["a"])) == []


def test_output_json_without_a_response_format_is_a_warning():
    reads = parse_config(MULTI["graders"]["a"])
    assert "sets no response_format" in output_json_warning(reads, has_response_format=False)
    assert output_json_warning(reads, has_response_format=True) is None
    python = parse_config({"type": "python", "name": "p", "source": "def grade(s, i):\n    return s['output_json']['x']"})
    assert output_json_warning(python, False) is not None
    plain = parse_config({"type": "python", "name": "p", "source": "def grade(s, i):\n    return 1"})
    assert output_json_warning(plain, False) is None


@pytest.mark.parametrize("template", ["{{ item }}", "{{sample}}"])
def test_a_bare_namespace_is_refused_at_load(template):
    with pytest.raises(InputError, match="names no variable"):
        parse_config(dict(MULTI["graders"]["a"], reference=template))


def test_reference_fields_are_the_item_fields_a_grader_reads():
    """What the RFT format check names a line without (data.dataset.FormatCheck): item.* template paths and a python
    grader's item[...] / item.get(...) reads, the prompt's own keys left out."""
    from rfteval.graders.checks import reference_fields
    from rfteval.graders.loader import parse_config

    multi = parse_config({"type": "multi", "name": "m", "calculate_output": "a + b", "graders": {
        "a": {"type": "string_check", "name": "a", "input": "{{ sample.output_text }}",
              "reference": "{{ item.reference_answer.text }}", "operation": "eq"},
        "b": {"type": "python", "name": "b", "source": "def grade(sample, item):\n    ref = item.get('labels') or {}\n"
              "    return float(sample['output_text'] in ref)\n"}}})
    assert reference_fields(multi) == frozenset({"reference_answer", "labels"})
    judge = parse_config({"type": "score_model", "name": "j", "model": "m", "input": [
        {"role": "user", "content": "{{ item.messages }} {{ item.id }}: {{ sample.output_text }}"}]})
    assert reference_fields(judge) == frozenset()  # the prompt and the id are not a reference


HELPER_GRADER = ("def _score(out, ref):\n    return 1.0 if out.strip() == ref else 0.0\n\n"
                 "def _check(s, it):\n    return _score(s['output_text'], it['reference_answer'])\n\n"
                 "def grade(sample, item):\n    return _check(sample, item)\n")


@pytest.mark.parametrize("source, expected", [
    (HELPER_GRADER, None),  # item handed to a helper whose parameter is named otherwise: not followed
    ("def grade(sample, item):\n    key = 'answer'\n    return float(sample['output_text'] == item[key])\n", None),
    ("def grade(sample, item):\n    return float(sample['output_text'] == item['answer'])\n", {"answer"}),
])
def test_a_python_grader_whose_item_reads_cannot_be_followed_names_no_line(tmp_path, source, expected):
    """A sound grader that reads the reference through a helper used to have every line named as holding "no
    field the grader reads as a reference (it reads no item field)": a false alarm on validate dataset and run."""
    from rfteval.data.dataset import check_format, iter_items
    from rfteval.graders.checks import reference_fields
    from rfteval.graders.loader import parse_config

    config = parse_config({"type": "python", "name": "p", "source": source})
    fields = reference_fields(config)
    assert fields == (None if expected is None else frozenset(expected))
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "2+2?"}], "reference_answer": "4"}) + "\n")
    warnings = check_format(iter_items(p), p, reference_fields=fields).warnings()
    assert warnings == ([] if expected is None else
                        [f"{p}: 1 of 1 lines hold no field the grader reads as a reference (item.answer) (line 1)"])


def test_a_path_no_item_fills_is_one_line_even_with_no_per_item_errors_kept(tmp_path):
    ds = write_items(tmp_path, [{"answer": [1]}, {"answer": [2]}])
    far = dict(MULTI["graders"]["a"], reference="{{ item.answer[3] }}")
    (error,) = check_item_paths(parse_config(far), ds.items, ds.path, limit=0)
    assert error.message == "{{ item.answer[3] }}: fails on every item (0 of 2 items in d.jsonl)"


def test_sample_rollout_is_a_field_of_an_agent_runs_samples_only():
    config = parse_config({"type": "string_check", "name": "s", "input": "{{ sample.rollout.messages }}",
                           "reference": "x", "operation": "like"})
    (error,) = check_sample_paths(config, "g.json")
    assert str(error) == ("g.json: input: {{ sample.rollout.messages }}: sample.rollout is an agent run's trajectory, "
                          "there only in `rfteval run --tools` (and `grade --outputs` of transcripts)")
    assert check_sample_paths(config, "g.json", rollout=True) == []
    typo = parse_config({"type": "string_check", "name": "s", "input": "{{ sample.rolout }}", "reference": "x",
                         "operation": "eq"})
    assert "a sample has no field 'rolout'" in str(check_sample_paths(typo, rollout=True)[0])
