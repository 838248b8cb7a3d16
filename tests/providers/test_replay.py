"""ReplayProvider: recorded outputs served back by (model, item, epoch); bad files are one InputError line."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.providers import make_provider
from rfteval.providers.base import Generation, GenerationRequest, ProviderError
from rfteval.providers.replay import ReplayProvider


def write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def gen(p: ReplayProvider, item_id: str, epoch: int, model: str = "base-model") -> Generation:
    request = GenerationRequest(model=model, messages=[{"role": "user", "content": "q"}], item_id=item_id, epoch=epoch)
    return asyncio.run(p.generate(request, 1.0))


ROWS = [
    {"item_id": "a", "epoch": 1, "output_text": "alpha one", "usage": {"input_tokens": 3, "output_tokens": 2}},
    {"item_id": "a", "epoch": 2, "output_text": '{"x": 1}'},
    {
        "item_id": "b",
        "epoch": 1,
        "output_text": "",
        "output_tools": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
    {"item_id": "b", "epoch": 1, "model": "tuned-model", "output_text": "tuned b"},
]


def test_hits(tmp_path: Path) -> None:
    p = ReplayProvider(write(tmp_path / "rec.jsonl", ROWS))
    g = gen(p, "a", 1)
    assert g.output_text == "alpha one" and g.output_json is None and g.finish_reason == "stop"
    assert g.usage == {"input_tokens": 3, "output_tokens": 2, "reasoning_tokens": None}
    assert gen(p, "a", 2).output_json == {"x": 1}
    b = gen(p, "b", 1)
    assert b.output_tools == ROWS[2]["output_tools"] and b.finish_reason == "tool_calls" and b.usage == {}
    assert gen(p, "b", 1, model="tuned-model").output_text == "tuned b"  # a model-specific line wins
    assert gen(p, "a", 1, model="tuned-model").output_text == "alpha one"  # a line without model answers any
    assert len(p) == 4


def test_misses(tmp_path: Path) -> None:
    p = ReplayProvider(write(tmp_path / "rec.jsonl", ROWS))
    for item_id, epoch in [("a", 3), ("zzz", 1)]:
        with pytest.raises(ProviderError) as info:
            gen(p, item_id, epoch)
        err = info.value
        assert err.kind == "missing" and not err.retryable and not err.fatal
        assert repr(item_id) in str(err) and f"epoch {epoch}" in str(err)


def test_model_specific_line_does_not_answer_other_models(tmp_path: Path) -> None:
    p = ReplayProvider(write(tmp_path / "rec.jsonl", [{"item_id": "a", "epoch": 1, "model": "m1", "output_text": "x"}]))
    assert gen(p, "a", 1, model="m1").output_text == "x"
    with pytest.raises(ProviderError, match="no recording"):
        gen(p, "a", 1, model="m2")


def test_identity_has_path_and_content_hash(tmp_path: Path) -> None:
    path = write(tmp_path / "rec.jsonl", ROWS)
    p = ReplayProvider(path)
    assert p.identity() == {
        "provider": "replay",
        "path": str(path.resolve()),
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    write(path, ROWS[:2])
    assert ReplayProvider(path).identity()["sha256"] != p.identity()["sha256"]
    req = GenerationRequest(model="m", messages=[], item_id="a", epoch=2)
    assert p.request_body(req) == {"model": "m", "item_id": "a", "epoch": 2}


def test_record_file_from_a_run_replays_and_skips_failed_cells(tmp_path: Path) -> None:
    rows = [
        {"run_id": "r1", "model_label": "base", "model": "m", "item_id": "a", "epoch": 1, "output_text": "ok",
         "output_json": None, "score": 1.0, "error": None,
         "usage": {"input_tokens": 1, "output_tokens": 1, "reasoning_tokens": None}},
        {"run_id": "r1", "model_label": "base", "model": "m", "item_id": "a", "epoch": 2, "output_text": None,
         "score": None, "error": {"stage": "generate", "type": "timeout", "message": "x"}},
    ]
    p = ReplayProvider(write(tmp_path / "records.jsonl", rows))
    assert gen(p, "a", 1, model="m").output_text == "ok"
    with pytest.raises(ProviderError):
        gen(p, "a", 2, model="m")


@pytest.mark.parametrize(
    ("row", "lineno", "field"),
    [
        ("{not json", 2, None),
        ('["a"]', 2, None),
        ({"epoch": 1, "output_text": "x"}, 2, "item_id"),
        ({"item_id": 5, "epoch": 1, "output_text": "x"}, 2, "item_id"),
        ({"item_id": "q", "epoch": 0, "output_text": "x"}, 2, "epoch"),
        ({"item_id": "q", "epoch": "1", "output_text": "x"}, 2, "epoch"),
        ({"item_id": "q", "epoch": True, "output_text": "x"}, 2, "epoch"),
        ({"item_id": "q", "epoch": 1}, 2, "output_text"),
        ({"item_id": "q", "epoch": 1, "output_text": 3}, 2, "output_text"),
        ({"item_id": "q", "epoch": 1, "output_text": "x", "model": 4}, 2, "model"),
        ({"item_id": "q", "epoch": 1, "output_text": "x", "output_tools": {"a": 1}}, 2, "output_tools"),
        ({"item_id": "q", "epoch": 1, "output_text": "x", "usage": [1]}, 2, "usage"),
        ({"item_id": "q", "epoch": 1, "output_text": "x", "usage": {"input_tokens": -1}}, 2, "usage.input_tokens"),
        ({"item_id": "a", "epoch": 1, "output_text": "again"}, 2, "item_id"),  # duplicate of line 1
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path: Path, row: Any, lineno: int, field: str | None) -> None:
    path = write(tmp_path / "rec.jsonl", [ROWS[0], row])
    with pytest.raises(InputError) as info:
        ReplayProvider(path)
    err = info.value
    assert (Path(err.file), err.line, err.field) == (path, lineno, field)
    assert str(err).startswith(f"{path}:{lineno}: ")


def test_duplicate_message_names_first_line(tmp_path: Path) -> None:
    path = write(tmp_path / "rec.jsonl", [ROWS[0], ROWS[1], ROWS[0]])
    with pytest.raises(InputError, match=r"rec.jsonl:3: item_id: duplicate recording for item 'a' epoch 1 \(first on line 1\)"):
        ReplayProvider(path)


def test_same_cell_for_two_models_is_not_a_duplicate(tmp_path: Path) -> None:
    rows = [{"item_id": "a", "epoch": 1, "model": m, "output_text": m} for m in ("m1", "m2")]
    p = ReplayProvider(write(tmp_path / "rec.jsonl", rows))
    assert [gen(p, "a", 1, model=m).output_text for m in ("m1", "m2")] == ["m1", "m2"]


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        ReplayProvider(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="no recordings"):
        ReplayProvider(write(tmp_path / "empty.jsonl", []))


def test_make_provider_replay(tmp_path: Path) -> None:
    path = write(tmp_path / "rec.jsonl", ROWS)
    p = make_provider("replay", path=str(path))
    assert isinstance(p, ReplayProvider) and gen(p, "a", 1).output_text == "alpha one"
    asyncio.run(p.aclose())


def test_replay_placeholder_model_reads_a_single_model_file(tmp_path):
    """`--model base=replay:FILE` asks for model "replay:FILE"; a file recorded for one model answers it."""
    import asyncio

    from rfteval.providers.base import GenerationRequest
    from rfteval.providers.base import ProviderError as _PE
    from rfteval.providers.replay import ReplayProvider as _RP

    p = tmp_path / "rec.jsonl"
    p.write_text('{"item_id": "a", "epoch": 1, "output_text": "x", "model": "illustrative-base"}\n')
    provider = _RP(p)
    gen = asyncio.run(provider.generate(GenerationRequest(model="replay:rec.jsonl", messages=[], item_id="a"), 1))
    assert gen.output_text == "x"
    try:  # a real model name still has to match
        asyncio.run(provider.generate(GenerationRequest(model="gpt-4o", messages=[], item_id="a"), 1))
    except _PE as exc:
        assert exc.kind == "missing"
    else:
        raise AssertionError("a recording for another model answered")
