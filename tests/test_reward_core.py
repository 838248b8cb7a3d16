"""rfteval.reward.core: the options' checks, items= lookups that fail loudly, and the one function every
completion's text passes through on its way to sample.output_text."""

from __future__ import annotations

import json

import pytest

import rfteval.reward.core as core
from rfteval.errors import InputError
from rfteval.reward import RewardOptions, for_openrlhf, for_trl, for_verifiers, for_verl

SC = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}", "reference": "ANSWER", "operation": "eq"}


def test_options_are_checked():
    with pytest.raises(ValueError, match="on_error"):
        RewardOptions(on_error="skip")
    with pytest.raises(ValueError, match="reasoning"):
        RewardOptions(reasoning="drop")
    assert RewardOptions(reasoning="keep").reasoning == "keep"


def test_every_trainers_completion_text_goes_through_answer(monkeypatch):
    """_answer is the one place the lead wires rfteval.reasoning in: every adapter's text must pass through it."""
    seen: list[str] = []

    def answer(text: str, options: RewardOptions) -> str:
        seen.append(text)
        return text.upper()

    monkeypatch.setattr(core, "_answer", answer)
    with for_trl(SC) as trl:
        assert trl(prompts=["p", "p"], completions=["answer", [{"role": "assistant", "content": "answer"}]]) == [1.0, 1.0]
    with for_verl(SC) as verl:
        assert verl("d", "answer", "g", {}) == 1.0
        assert verl.batch(["d"], ["answer"], ["g"], [{}]) == [1.0]
    with for_verifiers(SC, asynchronous=False) as vf:
        assert vf(completion=[{"role": "assistant", "content": "answer"}], answer="x", info={}) == 1.0
    with for_openrlhf(SC) as orl:
        assert list(orl(["p answer"], ["p "], ["x"])["rewards"]) == [1.0]  # a tensor with torch, else a list
    assert seen == ["answer"] * 6


def test_answer_is_the_text_for_now():
    assert core._answer("<think>x</think>y", RewardOptions()) == "<think>x</think>y"


def test_items_lookups_fail_loudly(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"id": 7, "messages": [{"role": "user", "content": "q"}]}) + "\n")
    with for_trl(SC, items=str(path)) as reward:
        assert reward(prompts=["p"], completions=["ANSWER"], id=[7]) == [1.0]  # ids compare as text, as in rfteval
        with pytest.raises(InputError, match="no line with id '8'"):
            reward(prompts=["p"], completions=["ANSWER"], id=[8])
        with pytest.raises(InputError, match="no 'id' column"):
            reward(prompts=["p"], completions=["ANSWER"], other=[1])
    path.write_text("{not json\n")
    with pytest.raises(InputError, match="invalid JSON"):
        for_trl(SC, items=str(path))
