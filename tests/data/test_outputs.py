"""rfteval.data.outputs: outputs lines for `rfteval grade`, the fields a reasoning model's server sends included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfteval.data.outputs import iter_outputs
from rfteval.errors import InputError


def _read(tmp_path: Path, *rows: dict) -> list:
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return list(iter_outputs(path))


def test_the_reasoning_fields_and_finish_reason_are_read(tmp_path: Path) -> None:
    outs = _read(tmp_path,
                 {"item_id": "a", "output_text": "x", "reasoning_content": "sglang's", "finish_reason": "length"},
                 {"item_id": "b", "output_text": "x", "reasoning": "vllm's"},
                 {"item_id": "c", "output_text": "x", "reasoning_content": "", "reasoning": "the text one"},
                 {"item_id": "d", "output_text": "x", "reasoning_content": "", "finish_reason": None},
                 {"item_id": "e", "output_text": "x"})
    assert [(o.reasoning, o.finish_reason) for o in outs] == [
        ("sglang's", "length"), ("vllm's", None), ("the text one", None),
        ("", None),  # sent empty: reasoned and showed none of it, as a run reads the server's ""
        (None, None)]


@pytest.mark.parametrize("row, field", [
    ({"finish_reason": 1}, "finish_reason"),
    ({"reasoning_content": ["a"]}, "reasoning_content"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
])
def test_a_field_of_the_wrong_type_is_one_error_naming_line_and_field(tmp_path: Path, row: dict, field: str) -> None:
    with pytest.raises(InputError) as info:
        _read(tmp_path, {"item_id": "ok", "output_text": "x"}, {"item_id": "q", "output_text": "x", **row})
    assert str(info.value).startswith(f"{tmp_path / 'outputs.jsonl'}:2: {field}: ")


def test_outputs_model_label_must_be_text_and_epochs_count_per_label(tmp_path: Path) -> None:
    """Issue 27 item 10: a run's records used as outputs keep their label; one model under two labels is two."""
    outs = tmp_path / "o.jsonl"
    # one endpoint model under two labels (two prompts of one model): not duplicates of each other
    outs.write_text("".join(json.dumps({"item_id": "q1", "output_text": "x", "model": "m", "model_label": label})
                            + "\n" for label in ("a", "b", "a")))
    got = [(o.label, o.model, o.epoch) for o in iter_outputs(outs)]
    assert got == [("a", "m", 1), ("b", "m", 1), ("a", "m", 2)]
    outs.write_text(json.dumps({"item_id": "q1", "output_text": "x", "model_label": 3}) + "\n")
    with pytest.raises(InputError, match="model_label") as exc:
        list(iter_outputs(outs))
    assert exc.value.line == 1
