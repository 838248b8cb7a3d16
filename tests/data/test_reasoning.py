"""rfteval.data.reasoning: the answer apart from the thinking, on hand-made text and on recorded server shapes, and end to
end through `rfteval run` / `rfteval grade` against the fake server."""

from __future__ import annotations

import collections
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.data.reasoning import (
    DEFAULT_TAGS,
    REASONING_MODES,
    TRUNCATION_HINT,
    Split,
    answer_of,
    answer_text,
    entry_sample,
    parse_tags,
    split_reasoning,
)
from rfteval.providers.openai_provider import parse_chat, parse_responses
from tests.support import REPO
from tests.support.cli_run_files import write_run_files
from tests.support.fake_openai import FakeOpenAI, Reply, Request

DATA = REPO / "tests" / "fixtures" / "reasoning"
FIXTURES = sorted(DATA.glob("*.json"))


# ---------------------------------------------------------------- the contract


def test_the_contract_api():
    assert REASONING_MODES == ("strip", "keep")
    assert DEFAULT_TAGS == (("<think>", "</think>"),)
    assert split_reasoning("x") == Split(answer="x", reasoning=None, truncated_in_reasoning=False)


@pytest.mark.parametrize("content, answer, reasoning", [
    ("Paris", "Paris", None),
    ("  Paris \n", "  Paris \n", None),  # no reasoning: the content exactly as sent, as before
    ("<think>hmm</think>Paris", "Paris", "hmm"),
    ("\n  <think>\nhmm\n</think>\n\nParis\n", "Paris", "hmm"),  # leading whitespace before the block
    ("<think>\n\n</think>\n\nParis", "Paris", None),  # an empty block (thinking switched off) is no reasoning
    ("hmm, France...\n</think>\n\nParis", "Paris", "hmm, France..."),  # the template opened the block
    ("a</think>b</think>c", "b</think>c", "a"),  # up to the FIRST lone closing tag
    ("<think>a</think>b</think>c", "b</think>c", "a"),
    ("<think>still thinking", "", "still thinking"),  # opened, never closed: all reasoning, no answer
    ("Paris <think>x</think>", "Paris <think>x</think>", None),  # not leading: part of the answer
    ("The tag <think> opens and </think> closes", "The tag <think> opens and </think> closes", None),
    ("<think>a</think>line one\n\n  line two  ", "line one\n\n  line two", "a"),  # interior kept exactly
    ("", "", None),
    (None, "", None),
])
def test_split_strip(content: str | None, answer: str, reasoning: str | None):
    split = split_reasoning(content)
    assert (split.answer, split.reasoning, split.truncated_in_reasoning) == (answer, reasoning, False)
    assert answer_text(content) == answer


@pytest.mark.parametrize("content", ["<think>hmm</think>\nParis", "hmm</think>Paris", "<think>hmm", " Paris "])
def test_keep_grades_the_content_as_sent_and_still_reports_the_reasoning(content: str):
    keep = split_reasoning(content, mode="keep")
    assert keep.answer == content
    assert keep.reasoning == split_reasoning(content).reasoning
    assert answer_text(content, mode="keep") == content


def test_an_answer_freed_of_its_thinking_loses_surrounding_whitespace_only():
    assert split_reasoning("<think>t</think>\n\n  A\n\nB  \n").answer == "A\n\nB"
    assert split_reasoning("\n\nA ", "t").answer == "A"
    assert split_reasoning("\n\nA ", "").answer == "A"  # reasoning shown as nothing is still reasoning


def test_a_reasoning_field_leaves_the_content_as_the_answer():
    split = split_reasoning("\n\nParis", "I recall Paris.")
    assert split == Split("Paris", "I recall Paris.", False)
    assert split_reasoning("\n\nParis", "I recall Paris.", mode="keep").answer == "\n\nParis"
    # the server parsed the reasoning out: a later block in the content is the answer's own text
    assert split_reasoning("<think>x</think>y", "r").answer == "<think>x</think>y"


@pytest.mark.parametrize("content, field, finish, truncated", [
    ("<think>still", None, "length", True),  # unterminated block at the limit
    ("<think>still", None, "stop", False),  # unterminated but not cut off (an odd model): not truncated
    ("<think>done</think>", None, "length", False),  # closed: the answer was cut off, not the thinking
    ("<think>done</think>Par", None, "length", False),
    (None, "thinking...", "length", True),  # a reasoning field and no content
    ("", "thinking...", "length", True),
    ("Par", "thinking...", "length", False),  # some answer came: the limit cut the answer
    ("", "thinking...", "stop", False),
    ("", "", "length", True),  # reasoning shown as nothing (the Responses API without a summary)
    ("", None, "length", False),  # nothing says it was thinking
    ("plain text cut o", None, "length", False),
])
def test_truncated_in_reasoning(content: str | None, field: str | None, finish: str, truncated: bool):
    split = split_reasoning(content, field, finish_reason=finish)
    assert split.truncated_in_reasoning is truncated
    if truncated:
        assert split.answer == ""


def test_other_tag_pairs():
    tags = parse_tags(["<reasoning>,</reasoning>"])
    assert tags == (("<reasoning>", "</reasoning>"),)
    assert split_reasoning("<reasoning>r</reasoning> A", tags=tags) == Split("A", "r", False)
    assert split_reasoning("<think>r</think> A", tags=tags).answer == "<think>r</think> A"  # not a tag pair given
    both = parse_tags(["<think>,</think>,<reasoning>,</reasoning>"])
    assert both == parse_tags(["<think>,</think>", "<reasoning>,</reasoning>"])
    assert split_reasoning("<reasoning>r</reasoning>A", tags=both).answer == "A"
    assert split_reasoning("r</reasoning>A", tags=both).answer == "A"
    assert split_reasoning("◁think▷r◁/think▷A", tags=parse_tags(["◁think▷,◁/think▷"])).answer == "A"  # Kimi
    assert parse_tags(None) == parse_tags([]) == DEFAULT_TAGS
    for bad in (["<think>"], ["<a>,"], [",</a>"], ["<a>,</a>,<b>"]):
        with pytest.raises(ValueError):
            parse_tags(bad)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="strip, keep"):
        split_reasoning("x", mode="drop")


def test_the_grader_sample_is_built_from_the_answer():
    from rfteval.run.store import decode_response

    entry = decode_response({
        "output_text": '<think>Let me write JSON.</think>\n{"city": "Paris"}', "output_json": None,
        "output_tools": None, "finish_reason": "stop",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": '<think>Let me write JSON.</think>\n{"city": "Paris"}'}}]})
    sample = entry_sample(entry)
    assert sample["output_text"] == '{"city": "Paris"}'
    assert sample["output_json"] == {"city": "Paris"}  # parsed from the answer, not the unparseable content
    assert sample["choices"][0]["message"]["content"] == '{"city": "Paris"}'
    kept = entry_sample(entry, mode="keep")
    assert kept["output_text"] == entry.output_text and kept["output_json"] is None
    # a server that sent the reasoning apart: OpenAI's sample carries no reasoning fields
    entry = decode_response({
        "output_text": "Paris", "output_json": None, "reasoning": "r", "finish_reason": "stop",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris", "reasoning_content": "r"}}]})
    assert entry_sample(entry)["choices"][0]["message"] == {"role": "assistant", "content": "Paris"}
    assert entry_sample(entry, mode="keep")["choices"][0]["message"]["reasoning_content"] == "r"


def test_answer_of_keeps_the_stored_parse_when_the_answer_is_the_content():
    marker = {"kept": True}  # a parse the provider made (structured outputs' lenient parse)
    assert answer_of("5", marker).output_json is marker
    assert answer_of(" 5 ", marker).output_json is marker
    assert answer_of("<think>x</think>5", marker).output_json is None  # another text: its own parse


# ---------------------------------------------------------------- recorded server shapes


def _parse(api: str, body: dict[str, Any]) -> Any:
    return parse_chat(body) if api == "chat" else parse_responses(body)


def _split(api: str, body: dict[str, Any], mode: str = "strip") -> tuple[Split, Any]:
    gen = _parse(api, body)
    return split_reasoning(gen.output_text, gen.reasoning, mode=mode, finish_reason=gen.finish_reason), gen


def test_every_listed_server_has_a_recording():
    names = {p.stem for p in FIXTURES}
    assert {"vllm_reasoning", "vllm_reasoning_content", "vllm_no_parser", "vllm_template_opened", "sglang",
            "llamacpp_deepseek", "llamacpp_none", "deepseek", "openai_responses"} <= names
    assert all({"present", "absent", "unterminated"} <= set(json.loads(p.read_text())["cases"]) for p in FIXTURES)
    assert (DATA / "README.md").read_text().count(".json") >= len(FIXTURES)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_recorded_reasoning_response_gives_the_answer_without_reasoning(path: Path):
    data = json.loads(path.read_text())
    api, cases = data["api"], data["cases"]
    plain, _ = _split(api, cases["absent"])
    assert plain == Split("Paris", None, False)
    for name, body in cases.items():
        if name in ("absent", "unterminated"):
            continue
        split, gen = _split(api, body)
        assert split.answer == plain.answer, name  # the same output_text as the same answer without reasoning
        assert split.truncated_in_reasoning is False
        if name != "empty_block" and name != "hidden":
            assert split.reasoning and "Paris" in split.reasoning  # the thinking is kept, apart
        assert _split(api, body, mode="keep")[0].answer == gen.output_text  # keep: the content as sent


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_recorded_response_cut_off_while_thinking(path: Path):
    data = json.loads(path.read_text())
    split, gen = _split(data["api"], data["cases"]["unterminated"])
    assert gen.finish_reason == "length"
    if path.stem == "vllm_template_opened":  # no tag arrives at all: documented as not detectable
        assert "note" in data and split.truncated_in_reasoning is False
        return
    assert split.truncated_in_reasoning is True and split.answer == ""


def test_reasoning_tokens_only_where_the_server_reports_them():
    usage = {p.stem: [_parse(json.loads(p.read_text())["api"], b).usage["reasoning_tokens"]
                      for b in json.loads(p.read_text())["cases"].values()] for p in FIXTURES}
    assert usage["deepseek"][0] == 38 and usage["openai_responses"][0] == 38
    assert set(usage["llamacpp_deepseek"]) == {None} and set(usage["sglang"]) == {None}  # never an invented 0
    assert set(usage["vllm_reasoning"]) == {None}


def test_the_responses_api_reasoning_text():
    data = json.loads((DATA / "openai_responses.json").read_text())["cases"]
    assert "capital of France is Paris" in (parse_responses(data["present"]).reasoning or "")
    assert parse_responses(data["hidden"]).reasoning == ""  # it reasoned, and showed none of it
    assert parse_responses(data["absent"]).reasoning is None
    item = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "raw thoughts"}]}
    body = {"status": "completed", "output": [item, {"type": "message", "content": [{"type": "output_text", "text": "A"}]}]}
    assert parse_responses(body).reasoning == "raw thoughts"  # open-weight models served behind a Responses API


# ---------------------------------------------------------------- end to end

runner = CliRunner()
N_ITEMS = 4
EPOCHS = 2


def thinking_responder() -> Any:
    """A reasoning model answering the exact reference after its thinking: `think-block` inside the content (no
    reasoning parser), `think-field` in reasoning_content; the first call for q3 of `think-block` ran out of tokens
    while thinking."""
    calls: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def respond(req: Request) -> Reply:
        item = int(req.last_user_text().split()[-1])
        with lock:
            calls[(req.model, item)] += 1
            first = calls[(req.model, item)] == 1
        if req.model == "think-field":
            return Reply(text="\n\nfake-tuned", reasoning_content=f"item {item}: say fake-tuned",
                         reports_reasoning_tokens=False)
        if item == 3 and first:
            return Reply(text="<think>item 3: let me think about th", finish_reason="length",
                         reports_reasoning_tokens=False)
        return Reply(text="fake-tuned", think=f"item {item}: say fake-tuned", reports_reasoning_tokens=False)

    return respond


def _run(files: dict[str, Path], server: FakeOpenAI, *extra: str) -> Any:
    return runner.invoke(app, ["run", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]),
                               "--model", "base=think-block", "--model", "tuned=think-field",
                               "--epochs", str(EPOCHS), "--base-url", server.base_url, "--concurrency", "2",
                               "--out", str(files["out"]), "--retry-base-delay", "0.01", "--no-readiness", *extra])


def _records(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_run_grades_answers_not_thinking_and_counts_the_cut_off(tmp_path: Path, fake_openai: FakeOpenAI):
    files = write_run_files(tmp_path, N_ITEMS, reference="fake-tuned", operation="eq")
    fake_openai.responder = thinking_responder()
    res = _run(files, fake_openai)
    assert res.exit_code == 0, res.output
    out = files["out"]
    base, tuned = _records(out, "base"), _records(out, "tuned")
    cut = [r for r in base if r["truncated_in_reasoning"]]
    assert len(cut) == 1 and cut[0]["item_id"] == "q3" and cut[0]["output_text"] == "" and cut[0]["score"] == 0.0
    assert cut[0]["reasoning_text"] == "item 3: let me think about th"
    rest = [r for r in base if not r["truncated_in_reasoning"]]
    assert all(r["score"] == 1.0 and r["output_text"] == "fake-tuned" for r in rest)  # exact match: 1.0, not 0
    assert all(r["reasoning_text"] == f"item {r['item_id'][1:]}: say fake-tuned" for r in rest)
    assert all(r["score"] == 1.0 and r["reasoning_text"].startswith("item ") and not r["truncated_in_reasoning"]
               for r in tuned)
    assert all(r["usage"]["reasoning_tokens"] is None for r in base + tuned)  # the server never said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"]["base"]["truncated_in_reasoning"] == {"n": 1, "share": 1 / (N_ITEMS * EPOCHS)}
    assert summary["models"]["tuned"]["truncated_in_reasoning"] == {"n": 0, "share": 0.0}
    assert summary["models"]["base"]["tokens"]["reasoning"] is None
    assert "ran out of tokens while reasoning" in res.stdout and "--max-output-tokens" in res.stdout
    import pandas as pd

    df = pd.read_parquet(out / "results.parquet")
    assert int(df["truncated_in_reasoning"].sum()) == 1 and df["reasoning_text"].notna().all()

    # compare says it too, in the terminal and in JSON
    res = runner.invoke(app, ["compare", str(out / "base.jsonl"), str(out / "tuned.jsonl")])
    assert "base: 1 sample(s) (12.5%) ran out of tokens while reasoning" in res.stdout, res.output
    res = runner.invoke(app, ["compare", str(out / "base.jsonl"), str(out / "tuned.jsonl"), "--format", "json"])
    payload = json.loads(res.stdout)
    assert payload["baseline"]["truncated_in_reasoning"] == 1
    assert payload["candidate"]["truncated_in_reasoning"] == 0

    # keep, on the same run directory: re-graded from the store, nothing re-sent
    sent = len(fake_openai.requests)
    res = _run(files, fake_openai, "--reasoning", "keep")
    assert res.exit_code == 0, res.output
    assert len(fake_openai.requests) == sent
    kept = _records(out, "base")
    assert all(r["score"] == 0.0 and r["output_text"].startswith("<think>") for r in kept)  # the thinking is graded
    assert all(r["reasoning_text"] for r in kept)
    assert all(r["score"] == 0.0 for r in _records(out, "tuned"))  # "\n\nfake-tuned" as sent is not "fake-tuned"
    # and back to the default: its grades were kept under their own key
    res = _run(files, fake_openai)
    assert res.exit_code == 0 and len(fake_openai.requests) == sent
    assert [r["score"] for r in _records(out, "base")] == [r["score"] for r in base]


def test_grade_reads_think_blocks_in_outputs_files(tmp_path: Path):
    files = write_run_files(tmp_path, 2, reference="Paris", operation="eq")
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text(json.dumps({"item_id": "q0", "output_text": "<think>France...</think>\n\nParis"}) + "\n"
                       + json.dumps({"item_id": "q1", "output_text": "<reasoning>r</reasoning> Paris"}) + "\n")
    out = tmp_path / "graded.jsonl"
    args = ["grade", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--outputs", str(outputs),
            "--out", str(out), "--format", "json", "--max-error-rate", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["score"] for r in recs] == [1.0, 0.0] and recs[0]["reasoning_text"] == "France..."
    res = runner.invoke(app, [*args, "--think-tags", "<think>,</think>", "--think-tags", "<reasoning>,</reasoning>"])
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert res.exit_code == 0 and [r["score"] for r in recs] == [1.0, 1.0] and recs[1]["reasoning_text"] == "r"
    res = runner.invoke(app, [*args, "--reasoning", "keep"])
    assert res.exit_code == 0 and [json.loads(x)["score"] for x in out.read_text().splitlines()] == [0.0, 0.0]
    res = runner.invoke(app, [*args, "--reasoning", "drop"])
    assert res.exit_code == 2 and "--reasoning" in res.output
    res = runner.invoke(app, [*args, "--think-tags", "<think>"])
    assert res.exit_code == 2 and "--think-tags" in res.output


@pytest.mark.slow
def test_grade_reads_the_reasoning_fields_and_finish_reason_of_outputs_files(tmp_path: Path):
    """An outputs line carries what the server sent: the thinking apart (reasoning_content or reasoning) and
    finish_reason. A sample the limit stopped while thinking is marked and counted, as a run counts it."""
    files = write_run_files(tmp_path, 4, reference="Paris", operation="eq")
    lines = [
        {"item_id": "q0", "output_text": "", "reasoning_content": "France's capital is", "finish_reason": "length"},
        {"item_id": "q1", "output_text": "Paris", "reasoning": "France, so Paris", "finish_reason": "stop"},
        {"item_id": "q2", "output_text": "<think>Let me list the cities of", "finish_reason": "length"},
        {"item_id": "q3", "output_text": "<think>Easy.</think>\n\nParis", "finish_reason": "stop"},
    ]
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "graded.jsonl"
    args = ["grade", "--dataset", str(files["dataset"]), "--grader", str(files["grader"]), "--outputs", str(outputs),
            "--out", str(out)]
    res = runner.invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["truncated_in_reasoning"] for r in recs] == [True, False, True, False]
    assert [r["score"] for r in recs] == [0.0, 1.0, 0.0, 1.0]
    assert [r["reasoning_text"] for r in recs] == ["France's capital is", "France, so Paris",
                                                   "Let me list the cities of", "Easy."]
    assert json.loads(res.output)["models"][0]["truncated_in_reasoning"] == {"n": 2, "share": 0.5}
    table = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "cut off thinking" in table.output and "2 (50%)" in table.output
    assert ("outputs: 2 sample(s) (50.0%) ran out of tokens while reasoning and were graded as empty answers; "
            f"{TRUNCATION_HINT}") in table.output
    # a limit reached after the answer began is not a cut-off thought; no finish_reason, nothing is inferred
    outputs.write_text(json.dumps({"item_id": "q0", "output_text": "Par", "reasoning": "r", "finish_reason": "length"})
                       + "\n" + json.dumps({"item_id": "q1", "output_text": "<think>no end"}) + "\n")
    res = runner.invoke(app, [*args, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["truncated_in_reasoning"] for x in out.read_text().splitlines()] == [False, False]
    table = runner.invoke(app, args)
    assert "cut off thinking" not in table.output and "ran out of tokens" not in table.output


# ---------------------------------------------------------------- shown: tables, compare, series


def _side(label: str, cut: int, n_items: int = 6, epochs: int = 2) -> Any:
    from rfteval.compare.sides import side_from_records
    from rfteval.data.records import make_record

    recs = []
    for i in range(n_items):
        for e in range(1, epochs + 1):
            rec = make_record(run_id="r", model_label=label, model=label, item_id=f"q{i}", epoch=e, output_text="x",
                              truncated_in_reasoning=(i * epochs + e - 1) < cut)
            rec.score = float((i + e) % 2)
            recs.append(rec)
    return side_from_records(recs, label)


def test_compare_counts_cut_off_samples_per_side_and_renders_them():
    from rfteval.compare.comparison import compare_sides
    from rfteval.compare.series import series_from_sides
    from rfteval.report.markdown import render_markdown
    from rfteval.report.terminal import series_lines, side_lines

    result = compare_sides(_side("base", 3), _side("tuned", 0))
    assert result.baseline["truncated_in_reasoning"] == 3 and result.baseline["truncated_in_reasoning_share"] == 0.25
    assert result.candidate["truncated_in_reasoning"] == 0
    lines = [line for line in side_lines(result) if "ran out of tokens" in line]
    assert lines == ["base: 3 sample(s) (25.0%) ran out of tokens while reasoning and were graded as empty answers; "
                     "raise --max-output-tokens (the limit counts reasoning tokens)"]
    assert "base: 3 sample(s) (25.0%) ran out of tokens" in render_markdown(result)
    assert "ran out of tokens" not in render_markdown(compare_sides(_side("base", 0), _side("tuned", 0)))
    series = series_from_sides(_side("base", 0), [_side("a", 1), _side("b", 2)])
    cut = [line for line in series_lines(series) if "ran out of tokens" in line]
    assert [line.split(":")[0] for line in cut] == ["a", "b"]


def test_the_models_table_shows_the_cut_off_share_only_when_some_were():
    from rich.console import Console

    from rfteval.report.run_table import models_table, truncation_lines
    from rfteval.run.summary import as_run_summary

    def model(n: int, reasoning: int | None) -> dict[str, Any]:
        return {"model": "m", "mean": 0.5, "ci95": [0.4, 0.6], "items": 4, "records": 8, "cells": 8,
                "errors": {"by_type": {}}, "tokens": {"input": 100, "output": 50, "reasoning": reasoning},
                "cost_usd": None, "truncated_in_reasoning": {"n": n, "share": n / 8}}

    def shown(summary: dict[str, Any]) -> str:
        console = Console(width=200, record=True)
        console.print(models_table(as_run_summary(summary)))
        return console.export_text()

    summary = {"name": "t", "items": 4, "epochs": 2, "grader": {"name": "g"},
               "models": {"base": model(2, None), "tuned": model(0, 7)}}
    text = shown(summary)
    assert "cut off thinking" in text and "2 (25%)" in text
    assert "100/50 (7)" in text and "(0)" not in text and "(—)" not in text  # never reported: nothing shown
    assert truncation_lines(as_run_summary(summary)) == ["base: 2 sample(s) (25.0%) ran out of tokens while reasoning and were "
                                         "graded as empty answers; raise --max-output-tokens (the limit counts "
                                         "reasoning tokens)"]
    summary["models"] = {"base": model(0, 0), "tuned": model(0, 0)}
    assert "cut off thinking" not in shown(summary) and truncation_lines(as_run_summary(summary)) == []


def test_records_from_the_store_split_under_the_mode_they_were_graded_with():
    from rfteval.run.results import build_record
    from rfteval.run.store import GradeEntry, decode_response

    line = {"output_text": "<think>t</think> A", "output_json": None, "output_tools": None, "usage": None,
            "finish_reason": "stop", "error": None, "reasoning": None}
    response, grade = decode_response(line), GradeEntry(score=1.0)
    rec = build_record("r", "m", "m", "q", 1, response, grade)
    assert rec is not None and (rec.output_text, rec.reasoning_text, rec.truncated_in_reasoning) == ("A", "t", False)
    rec = build_record("r", "m", "m", "q", 1, response, grade, reasoning="keep")
    assert rec is not None and (rec.output_text, rec.reasoning_text) == ("<think>t</think> A", "t")
    cut = decode_response({**line, "output_text": "<think>t", "finish_reason": "length"})
    rec = build_record("r", "m", "m", "q", 1, cut, grade)
    assert rec is not None and rec.truncated_in_reasoning and rec.output_text == ""
    failed = decode_response({**line, "output_text": None, "error": {"type": "timeout", "message": "m"}})
    rec = build_record("r", "m", "m", "q", 1, failed, None)
    assert rec is not None and rec.reasoning_text is None and not rec.truncated_in_reasoning


def test_the_store_keeps_what_the_server_sent():
    from rfteval.providers.base import Generation
    from rfteval.run.store import new_response_entry

    common: dict[str, Any] = dict(key="k", label="m", model="m", item_id="q", epoch=1)
    entry = new_response_entry(**common, generation=Generation(output_text="\n\nParis", reasoning="thought"))
    assert entry.output_text == "\n\nParis" and entry.reasoning == "thought"
    assert "reasoning" not in new_response_entry(**common, generation=Generation(output_text="Paris")).to_dict()


def test_a_spec_setting_other_than_the_default_files_grades_apart():
    from rfteval.graders.loader import load_grader
    from rfteval.run.runner import grades_key
    from rfteval.run.spec import build_spec

    def key(tmp: Path, **over: Any) -> str:
        files = write_run_files(tmp, 1)
        spec = build_spec(None, {"dataset": str(files["dataset"]), "grader": str(files["grader"]),
                                 "models": {"m": {"model": "x"}}, **over})
        return grades_key(load_grader(spec.grader), "h", spec, ["m"])

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        default, keep = key(Path(tmp)), key(Path(tmp), reasoning="keep")
        tags = key(Path(tmp), think_tags=["<r>,</r>"])
        explicit = key(Path(tmp), reasoning="strip", think_tags=["<think>,</think>"])
    assert default == explicit == "h"  # the default keeps the plain key: earlier runs' grades still count
    assert len({default, keep, tags}) == 3


def test_readiness_notes_samples_cut_off_while_thinking():
    import pandas as pd

    from rfteval.readiness.assessment import assess

    rows = [{"model_label": "base", "item_id": f"q{i}", "epoch": e, "score": float((i + e) % 2), "error": None,
             "output_text": "x", "truncated_in_reasoning": i == 0 and e == 1} for i in range(4) for e in (1, 2)]
    notes = assess(pd.DataFrame(rows)).notes
    assert [n for n in notes if "ran out of tokens" in n] == [
        "base: 1 sample(s) (12.5%) ran out of tokens while reasoning and were graded as empty answers; raise "
        "--max-output-tokens (the limit counts reasoning tokens)"]
    for row in rows:
        row["truncated_in_reasoning"] = False
    assert not [n for n in assess(pd.DataFrame(rows)).notes if "ran out of tokens" in n]
