"""rfteval.typos: the key a typo most likely meant, the keys a model takes at a location, curly quotes found."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from rfteval.typos import closest, curly_quotes, did_you_mean, model_keys, typo_first, unknown_key


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    temperature: float | None = None
    seed: int | None = None


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: str
    epochs: int = 3
    sampling: Inner | None = None
    models: dict[str, Inner] = {}
    steps: list[Inner] = []


@pytest.mark.parametrize("word, choices, expected", [
    ("epoch", ["epochs", "dataset"], "epochs"),  # a dropped letter
    ("refrence", ["reference", "input"], "reference"),
    ("opration", ["operation", "name"], "operation"),
    ("Dataset", ["dataset", "grader"], "dataset"),  # case aside
    ("metric", ["evaluation_metric", "input"], "evaluation_metric"),  # held whole by one key
    ("zzz", ["dataset", "grader"], None),
    ("in", ["input", "inline"], None),  # too short to be found inside a key
])
def test_closest_finds_the_likely_key(word: str, choices: list[str], expected: str | None) -> None:
    assert closest(word, choices) == expected
    assert did_you_mean(word, choices) == (f"did you mean `{expected}`?" if expected else "")


def test_model_keys_follow_optional_models_dicts_and_lists() -> None:
    assert model_keys(Outer, ()) == ["dataset", "epochs", "sampling", "models", "steps"]
    for loc in (("sampling",), ("models", "base"), ("steps", 0)):
        assert model_keys(Outer, loc) == ["temperature", "seed"], loc
    assert model_keys(Outer, ("dataset",)) is None  # a string holds no keys
    assert model_keys(Outer, ("nope",)) is None


def test_the_unknown_key_close_to_a_known_one_is_reported_first() -> None:
    with pytest.raises(ValidationError) as exc:
        Outer.model_validate({"datset": "d.jsonl", "zzz": 1})
    errors = exc.value.errors()
    assert errors[0]["type"] == "missing"  # what pydantic puts first: the symptom, not the cause
    first = typo_first(Outer, errors)
    assert first["loc"] == ("datset",)
    assert unknown_key(Outer, first["loc"]) == "unknown key (did you mean `dataset`?)"
    assert unknown_key(Outer, ("models", "base", "temprature")) == "unknown key (did you mean `temperature`?)"
    assert unknown_key(Outer, ("models", "base", "zzz")) == "unknown key (expected one of temperature, seed)"


def test_curly_quotes_are_found_with_their_line_and_column() -> None:
    assert curly_quotes('{\n  "type": \u201cstring_check\u201d\n}') == (
        "contains curly quotes (\u201c at line 2, column 11): replace them with straight quotes")
    assert curly_quotes("{\u2018a\u2019: 1}") == (
        "contains curly quotes (\u2018 at column 2): replace them with straight quotes")  # one line: no line number
    assert curly_quotes('{"a": "straight"}') is None
