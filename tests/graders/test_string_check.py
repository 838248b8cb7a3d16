import json

import pytest

from rfteval.data.sample import make_sample
from rfteval.errors import InputError
from rfteval.graders import GradingEngine, load_grader, parse_config
from rfteval.graders.base import INVALID_VARIABLE
from rfteval.graders.string_check import compare


def grade(operation: str, output: str, reference: str):
    cfg = parse_config({"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
                        "reference": "{{item.reference_answer}}", "operation": operation})
    with GradingEngine(cfg) as engine:
        return engine.grade(make_sample(output), {"reference_answer": reference})


@pytest.mark.parametrize("operation, output, reference, expected", [
    ("eq", "Paris", "Paris", 1.0),
    ("eq", "Paris", "paris", 0.0),          # case-sensitive
    ("eq", "Paris ", "Paris", 0.0),         # no trimming
    ("eq", "", "", 1.0),
    ("eq", "", "x", 0.0),
    ("ne", "Paris", "paris", 1.0),
    ("ne", "Paris", "Paris", 0.0),
    ("ne", "", "", 0.0),
    ("neq", "a", "b", 1.0),                 # the guide's spelling, an alias of ne
    ("neq", "a", "a", 0.0),
    ("like", "The capital is Paris.", "Paris", 1.0),   # input contains reference
    ("like", "Paris", "The capital is Paris.", 0.0),   # not the other way round
    ("like", "The capital is PARIS", "Paris", 0.0),    # case-sensitive
    ("like", "abc", "a%c", 0.0),            # no SQL wildcards
    ("like", "a%c", "a%c", 1.0),
    ("like", "a_c", "a_c", 1.0),
    ("like", "abc", "a_c", 0.0),
    ("like", "anything", "", 1.0),          # the empty string is in every string
    ("like", "", "x", 0.0),
    ("ilike", "The capital is PARIS", "paris", 1.0),
    ("ilike", "paris", "Capital PARIS", 0.0),
    ("ilike", "STRASSE", "straße", 1.0),    # casefold: ß -> ss
    ("ilike", "ΣΊΣΥΦΟΣ", "σίσυφος", 1.0),   # Greek final sigma folds too
    ("eq", "日本語", "日本語", 1.0),
    ("eq", "é", "e\u0301", 0.0),             # no Unicode normalisation: NFC vs NFD differ
    ("like", "emoji 🎉 here", "🎉", 1.0),
])
def test_operations(operation, output, reference, expected):
    result = grade(operation, output, reference)
    assert result.score == expected
    assert result.passed is (expected == 1.0)
    assert result.error is None


@pytest.mark.parametrize("operation, text, reference, expected", [
    ("eq", "a", "a", True), ("ne", "a", "a", False), ("like", "xay", "a", True), ("ilike", "XAY", "a", True),
])
def test_compare_function(operation, text, reference, expected):
    assert compare(operation, text, reference) is expected


def test_compare_rejects_unknown_operation():
    with pytest.raises(ValueError):
        compare("regex", "a", "a")


def test_missing_variable_is_an_invalid_variable_error():
    cfg = parse_config({"type": "string_check", "name": "s", "input": "{{sample.output_json.answer}}",
                        "reference": "{{item.reference_answer}}", "operation": "eq"})
    with GradingEngine(cfg) as engine:
        result = engine.grade(make_sample("not json"), {"reference_answer": "x"})
    assert result.score == 0.0
    assert result.error is not None and result.error.type == INVALID_VARIABLE
    assert "sample.output_json.answer" in result.error.message


def test_literal_input_and_template_reference():
    # The guide's tool-call pattern: the literal in `input`, the template in `reference`.
    cfg = parse_config({"type": "string_check", "name": "tool", "input": "get_weather",
                        "reference": "{{sample.output_tools[0].function.name}}", "operation": "eq"})
    tools = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]
    with GradingEngine(cfg) as engine:
        assert engine.grade(make_sample("", tools), {}).score == 1.0
        assert engine.grade(make_sample("", [{**tools[0], "function": {"name": "x", "arguments": "{}"}}]),
                            {}).score == 0.0


def test_batch_grades_each_pair():
    cfg = parse_config({"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
                        "reference": "{{item.a}}", "operation": "eq"})
    pairs = [(make_sample(t), {"a": r}) for t, r in [("x", "x"), ("x", "y"), ("", "")]]
    with GradingEngine(cfg) as engine:
        assert [r.score for r in engine.grade_batch(pairs)] == [1.0, 0.0, 1.0]
        assert engine.grade_batch([]) == []


@pytest.mark.parametrize("operation", ["equals", "EQ", "like%", ""])
def test_unknown_operation_rejected_at_load(tmp_path, operation):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
                             "reference": "x", "operation": operation}, indent=2))
    with pytest.raises(InputError) as exc:
        load_grader(p)
    assert str(exc.value).startswith(f"{p}:6: operation: ")


def test_neq_is_read_as_ne_with_a_note():
    from rfteval.graders.base import load_notes
    from rfteval.graders.loader import parse_config

    config = parse_config({"type": "string_check", "name": "n", "input": "{{ sample.output_text }}",
                           "reference": "x", "operation": "neq"})
    assert config.operation == "ne"
    assert load_notes(config) == ["operation 'neq' read as 'ne' (the graders guide writes neq; the API lists ne: "
                                  "upload ne)"]
