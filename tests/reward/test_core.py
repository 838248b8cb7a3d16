"""rfteval.reward.core: the options' checks, items= lookups that fail loudly, and the one function every
completion's text passes through on its way to sample.output_text."""

from __future__ import annotations

import json
from typing import Any

import pytest

import rfteval.reward.core as core
from rfteval.errors import InputError
from rfteval.graders import GradeOptions, GradingEngine, parse_config
from rfteval.reward import RewardOptions, for_openrlhf, for_trl, for_verifiers, for_verl
from rfteval.sandbox import UNSAFE_ENV, Host, SandboxUnavailable, WorkerPool, host_probe

SC = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}", "reference": "ANSWER", "operation": "eq"}


def test_options_are_checked():
    with pytest.raises(ValueError, match="on_error"):
        RewardOptions(on_error="skip")
    with pytest.raises(ValueError, match="reasoning"):
        RewardOptions(reasoning="drop")
    assert RewardOptions(reasoning="keep").reasoning == "keep"
    with pytest.raises(ValueError, match="think_tags: expected OPEN,CLOSE"):
        RewardOptions(think_tags=["<r>"])
    assert RewardOptions().tags == (("<think>", "</think>"),)  # `rfteval grade`'s default
    one = RewardOptions(think_tags="<r>,</r>")
    assert one.think_tags == ("<r>,</r>",) and one.tags == (("<r>", "</r>"),)
    assert RewardOptions(think_tags=["<r>,</r>", "<a>,</a>"]).tags == (("<r>", "</r>"), ("<a>", "</a>"))


def test_the_options_give_the_sandbox_policy_of_grades_flags(monkeypatch):
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    policy = RewardOptions(judge_api_key_env="LC_JUDGE_KEY", grader_timeout=7, grader_memory=300).sandbox_policy()
    assert (policy.unsafe, policy.never_pass, policy.timeout_s, policy.memory_mb) == (
        False, frozenset({"LC_JUDGE_KEY"}), 7.0, 300)
    assert RewardOptions(unsafe_python_graders=True).sandbox_policy().unsafe is True
    monkeypatch.setenv(UNSAFE_ENV, "1")  # a reward that does not say follows the variable, as before
    assert RewardOptions().sandbox_policy().unsafe is True


@pytest.mark.slow
def test_a_reward_made_unsafe_leaves_every_later_pool_safe(monkeypatch):
    """unsafe_python_graders=True is that reward's sandbox policy, not the process's: building it once turned unsafe
    mode on for every pool made after it."""
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    monkeypatch.setattr(host_probe, "_HOST", Host(None, False, "no sandbox in this test"))
    python = {"type": "python", "name": "p", "source": "def grade(sample, item):\n    return 0.5\n"}
    with for_verl(python, unsafe_python_graders=True, python_workers=1, grader_memory=300) as reward:
        assert reward("d", "answer", "g", {}) == 0.5  # its own pool runs without the sandbox, as asked
        with WorkerPool(workers=1) as later, pytest.raises(SandboxUnavailable, match="no sandbox in this test"):
            later.grade(python["source"], [({}, {})])
        with GradingEngine(parse_config(python), GradeOptions(python_workers=1)) as engine, \
                pytest.raises(SandboxUnavailable, match="no sandbox in this test"):
            engine.grade({}, {})
        assert reward("d", "answer", "g", {}) == 0.5


@pytest.mark.slow
def test_a_prompts_completions_are_graded_in_one_unit():
    """The adapters' units (one item, one unit) reach the python grader with the batch."""
    counts = {"type": "python", "name": "n", "source": "n = 0\ndef grade(sample, item):\n    global n\n"
              "    n += 1\n    return n / 10\n"}
    with for_trl(counts, python_workers=1) as trl:
        scores = trl(prompts=["p"] * 4, completions=["a", "b", "c", "d"], answer=["g", "h", "g", "g"])
    assert scores == pytest.approx([0.1, 0.1, 0.2, 0.3])  # answer "g"'s item: one process


def test_every_trainers_completion_text_goes_through_answer(monkeypatch):
    """_answer is the one place the lead wires rfteval.data.reasoning in for a completion given as text; a
    completion given as messages is a rollout, built by rollout_sample (the run's rule, the same reasoning split)."""
    seen: list[str] = []

    def answer(text: str, options: RewardOptions, reasoning: str | None = None) -> str:
        seen.append(text)
        return text.upper()

    built = core.rollout_sample

    def rollout(messages: Any, **kwargs: Any) -> Any:
        seen.append(messages[-1]["content"])
        sample = built(messages, **kwargs)
        sample["output_text"] = str(sample["output_text"]).upper()
        return sample

    monkeypatch.setattr(core, "_answer", answer)
    monkeypatch.setattr(core, "rollout_sample", rollout)
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


THINKING = [
    "<think>The reference is ANSWER, so say it.</think>\n\nANSWER",  # vLLM / SGLang without a reasoning parser
    "The template opened the block; I'll answer.\n</think>\n\nANSWER",  # Qwen3's template-opened lone close
    "ANSWER",  # no reasoning at all: graded exactly as sent
    "<think>out of tokens while still thinking",  # cut off inside the block: its answer is empty
    "ANSWER <think>not leading</think>",  # a block that does not lead is the answer's own text
]


def test_answer_is_the_run_rule(tmp_path):
    """Every adapter reads a completion as `rfteval grade --reasoning strip|keep` reads the same text."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.graders.grading import grade_outputs
    from rfteval.graders.loader import parse_config

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "q", "messages": [{"role": "user", "content": "q"}]}) + "\n")
    for mode in ("strip", "keep"):
        graded = grade_outputs(load_dataset(items), parse_config(SC), [
            Output(item_id="q", epoch=i + 1, model="m", output_text=t) for i, t in enumerate(THINKING)], reasoning=mode)
        expected = [r.score for r in graded]
        assert expected == ([1.0, 1.0, 1.0, 0.0, 0.0] if mode == "strip" else [0.0, 0.0, 1.0, 0.0, 0.0])
        with for_trl(SC, reasoning=mode) as trl:
            assert trl(prompts=["p"] * 5, completions=THINKING) == expected
            conversational = [[{"role": "assistant", "content": t}] for t in THINKING]
            assert trl(prompts=["p"] * 5, completions=conversational) == expected
        with for_verl(SC, reasoning=mode) as verl:
            assert [verl("d", t, "g", {}) for t in THINKING] == expected
            assert verl.batch(["d"] * 5, THINKING, ["g"] * 5, [{}] * 5) == expected
        with for_verifiers(SC, asynchronous=False, reasoning=mode) as vf:
            assert [vf(completion=[{"role": "assistant", "content": t}], answer="x", info={})
                    for t in THINKING] == expected
        with for_openrlhf(SC, reasoning=mode) as orl:
            assert [float(x) for x in orl(["p " + t for t in THINKING], ["p "] * 5, ["x"] * 5)["rewards"]] == expected


CUSTOM = [
    "<reasoning>The reference is ANSWER.</reasoning>\n\nANSWER",  # a model trained to think in <reasoning> blocks
    "Opened by the template.\n</reasoning>\nANSWER",
    "<reasoning>cut off while thinking ANSWER",
    "<think>not a tag these name</think>ANSWER",
    "ANSWER",
]


def test_think_tags_are_grades_in_every_adapter(tmp_path):
    """think_tags on every adapter strips what `rfteval grade --think-tags` strips (the same parse, the same rule);
    without it, what grade strips without the flag."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.data.reasoning import parse_tags
    from rfteval.graders.grading import grade_outputs
    from rfteval.graders.loader import parse_config

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "q", "messages": [{"role": "user", "content": "q"}]}) + "\n")
    for flag in (None, ["<reasoning>,</reasoning>"]):
        graded = grade_outputs(load_dataset(items), parse_config(SC), [
            Output(item_id="q", epoch=i + 1, model="m", output_text=t) for i, t in enumerate(CUSTOM)],
            tags=parse_tags(flag))
        expected = [r.score for r in graded]
        assert expected == ([0.0, 0.0, 0.0, 1.0, 1.0] if flag is None else [1.0, 1.0, 0.0, 0.0, 1.0])
        options = {"think_tags": flag} if flag else {}
        with for_trl(SC, **options) as trl:
            assert trl(prompts=["p"] * 5, completions=CUSTOM) == expected
        with for_verl(SC, **options) as verl:
            assert verl.batch(["d"] * 5, CUSTOM, ["g"] * 5, [{}] * 5) == expected
        with for_verifiers(SC, asynchronous=False, **options) as vf:
            assert [vf(completion=[{"role": "assistant", "content": t}], answer="x", info={}) for t in CUSTOM] == expected
        with for_openrlhf(SC, **options) as orl:
            assert [float(x) for x in orl(["p " + t for t in CUSTOM], ["p "] * 5, ["x"] * 5)["rewards"]] == expected


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


def test_option_keywords_are_the_options_fields():
    """`**options: Unpack[RewardOptionsArgs]` checks a factory call only while the TypedDict is RewardOptions."""
    import dataclasses

    fields = {f.name: f.type for f in dataclasses.fields(RewardOptions)}  # the annotations' text
    keys = {k: getattr(t, "__forward_arg__", t) for k, t in core.RewardOptionsArgs.__annotations__.items()}
    assert keys == fields
    assert not core.RewardOptionsArgs.__required_keys__  # every option has a default


def test_plain_data_gives_json(caplog):
    """What no JSON line holds (bytes, a decimal) reaches the grader as text, noted once per column; JSON stays as
    it is, a Mapping becomes a dict and a tuple a list."""
    import datetime
    from decimal import Decimal

    notes = core.Coercions("r")
    value = {"b": b"x", "d": Decimal("1.50"), "t": datetime.timedelta(seconds=3), "j": [1, 2.5, "s", None, True]}
    with caplog.at_level("WARNING", logger="rfteval.reward"):
        got = core.plain_data(value, "col", notes)
        core.plain_data(Decimal("2"), "col", notes)
    assert got == {"b": "b'x'", "d": "1.50", "t": "0:00:03", "j": [1, 2.5, "s", None, True]}
    assert json.loads(json.dumps(got)) == got
    assert sum("value JSON has no form for" in r.getMessage() for r in caplog.records) == 1
    assert core.plain_data((1, {"a": (2,)})) == [1, {"a": [2]}]


def test_exported_row_with_a_non_text_json_column_is_refused():
    meta = json.dumps({"fields": ["id", "x"], "json": ["x"]})
    assert core.decode_exported({"id": "a", "x": "[1]", core.META: meta}) == {"id": "a", "x": [1]}
    with pytest.raises(TypeError, match="'x' should hold JSON text"):
        core.decode_exported({"id": "a", "x": [1], core.META: meta})
    assert core.decode_exported({"id": "a"}) is None


def test_tool_calls_as_openai_writes_them():
    calls = [{"function": {"name": "f", "arguments": {"a": "é"}}}, "not a call", {"type": "function", "id": "c",
                                                                                  "function": {"name": "g"}}]
    assert core.openai_tool_calls(calls) == [
        {"function": {"name": "f", "arguments": '{"a": "é"}'}, "type": "function"},
        {"type": "function", "id": "c", "function": {"name": "g"}}]
    assert core.openai_tool_calls(None) == [] == core.openai_tool_calls([])
    with pytest.raises(TypeError, match="tool_calls must be a list"):
        core.openai_tool_calls(3)


# A flat call as verifiers 0.4's traces hold it (verifiers/v1/types.py ToolCall: id, type, name, namespace,
# arguments), a custom tool's (type "custom", arguments the raw input), and the Responses API's items.
FLAT_CALLS = [
    ({"id": "c1", "type": "function", "name": "get_weather", "namespace": None, "arguments": '{"city": "Paris"}'},
     {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}),
    ({"id": "c2", "type": "custom", "name": "shell", "namespace": None, "arguments": "ls -la"},
     {"id": "c2", "type": "custom", "custom": {"name": "shell", "input": "ls -la"}}),
    ({"id": "c3", "type": "function", "name": "search", "namespace": "docs", "arguments": "{}"},
     {"id": "c3", "type": "function", "function": {"name": "search", "arguments": "{}"}, "namespace": "docs"}),
    ({"type": "function_call", "call_id": "c4", "name": "get_weather", "arguments": {"city": "Paris"}},
     {"id": "c4", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}),
    ({"type": "custom_tool_call", "call_id": "c5", "name": "shell", "input": "pwd"},
     {"id": "c5", "type": "custom", "custom": {"name": "shell", "input": "pwd"}}),
    ({"id": "c6", "type": "custom", "custom": {"name": "shell", "input": "pwd"}},
     {"id": "c6", "type": "custom", "custom": {"name": "shell", "input": "pwd"}}),
]


def test_flat_tool_calls_become_openais_and_grade_as_grade_does(tmp_path):
    """Every trainer's call shape is OpenAI's by the time a grader reads `sample.output_tools[0].function.name`, so
    the reward is `rfteval grade`'s on the OpenAI-shaped output (before, a flat call raised and scored 0)."""
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.graders.grading import grade_outputs
    from rfteval.graders.loader import parse_config

    assert [core.openai_tool_calls([given]) for given, _ in FLAT_CALLS] == [[want] for _, want in FLAT_CALLS]
    name = {"type": "string_check", "name": "n", "input": "{{sample.output_tools[0].function.name}}",
            "reference": "get_weather", "operation": "eq"}
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "q", "messages": [{"role": "user", "content": "weather?"}]}) + "\n")
    outs = [Output(item_id="q", epoch=i + 1, model="m", output_text="", output_tools=[want])
            for i, (_, want) in enumerate(FLAT_CALLS)]
    expected = [r.score for r in grade_outputs(load_dataset(items), parse_config(name), outs)]
    assert expected == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    completions = [[{"role": "assistant", "content": "", "tool_calls": [given]}] for given, _ in FLAT_CALLS]
    with for_verifiers(name, asynchronous=False) as vf:
        assert [vf(completion=c, info={}) for c in completions] == expected
    with for_trl(name, on_error="zero") as trl:
        assert trl(prompts=["p"] * len(completions), completions=completions) == expected


# A server with a reasoning parser (vLLM's deepseek_r1, SGLang, llama.cpp --reasoning-format) sends the thinking apart
# and leaves the text after </think> in the content, leading newlines and all.
REASONING_REPLIES = [
    {"role": "assistant", "content": "\n\nANSWER", "reasoning_content": "The reference is ANSWER."},
    {"role": "assistant", "content": "\n\nANSWER\n", "reasoning": "newer vLLM's field"},
    {"role": "assistant", "content": "  ANSWER", "reasoning_content": "", "reasoning": None},  # reasoned, showed none
    {"role": "assistant", "content": "\n\nANSWER"},  # no field: graded exactly as sent
    {"role": "assistant", "content": "", "reasoning_content": "out of tokens while thinking"},
]


def test_a_messages_reasoning_field_strips_the_answer_as_grade_does(tmp_path):
    from rfteval.data.dataset import load_dataset
    from rfteval.data.outputs import Output
    from rfteval.data.reasoning import message_reasoning
    from rfteval.graders.grading import grade_outputs
    from rfteval.graders.loader import parse_config

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "q", "messages": [{"role": "user", "content": "q"}]}) + "\n")
    for mode in ("strip", "keep"):
        outs = [Output(item_id="q", epoch=i + 1, model="m", output_text=str(m["content"]),
                       reasoning=message_reasoning(m)) for i, m in enumerate(REASONING_REPLIES)]
        expected = [r.score for r in grade_outputs(load_dataset(items), parse_config(SC), outs, reasoning=mode)]
        assert expected == ([1.0, 1.0, 1.0, 0.0, 0.0] if mode == "strip" else [0.0] * 5)
        with for_verifiers(SC, asynchronous=False, reasoning=mode) as vf:
            assert [vf(completion=[m], info={}) for m in REASONING_REPLIES] == expected
        with for_trl(SC, reasoning=mode) as trl:
            assert trl(prompts=["p"] * 5, completions=[[m] for m in REASONING_REPLIES]) == expected


def test_verifiers_legacy_task_is_a_string_and_state_holds_the_reasoning_field():
    """Legacy verifiers' Rubric (0.1-0.3) passes task="default" (the env id, a string): it is not verifiers 0.4's task
    data, so info keeps the item (and items= its id); a reply's reasoning field is on the rollout's response in
    state["trajectory"], as openai's ChatCompletion holds it (before: the item lost, "no 'id' column" with items=)."""
    from openai.types.chat import ChatCompletion

    response = ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [{
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "\n\nANSWER", "reasoning_content": "think"}}]})
    state = {"trajectory": [{"response": response}]}
    item = {"id": "q", "messages": [{"role": "user", "content": "q"}], "want": "ANSWER"}
    grader = {**SC, "reference": "{{item.want}}"}
    reply = [{"role": "assistant", "content": "\n\nANSWER"}]
    with for_verifiers(grader, asynchronous=False, items=[item]) as vf:
        assert vf(completion=reply, info={"id": "q"}, task="default", state=state) == 1.0
        assert vf(completion=reply, info={"id": "q"}, task="default", state={}) == 0.0  # no field: as sent
        assert vf(completion=[*reply, {"role": "user", "content": "bye"}], info={"id": "q"}, task="env",
                  state=state) == 1.0  # an environment's last message after the reply
    with for_verifiers(grader, asynchronous=False) as vf:
        assert vf(completion=reply, info=item, task="default", state=state) == 1.0


def test_verifiers_items_finds_the_exported_lines_own_id():
    """With items=, the id is the exported line's own: export-dataset stores a date-like id as JSON text (Arrow would
    make it a timestamp), so info's id is '"2025-03-14"'; a line without one has the id export-dataset added."""
    from rfteval.data.dataset import content_id
    from rfteval.reward.export_dataset import build_rows

    dated = {"id": "2025-03-14", "messages": [{"role": "user", "content": "q"}], "want": "ANSWER"}
    plain = {"messages": [{"role": "user", "content": "p"}], "want": "ANSWER"}
    rows, as_json, _ = build_rows([dated], ["2025-03-14"], "verifiers", data_source="d")
    assert as_json == {"id"} and rows[0]["info"]["id"] == '"2025-03-14"'
    more, _, added = build_rows([plain], [content_id(plain)], "verifiers", data_source="d")
    assert added and more[0]["info"]["id"] == content_id(plain)
    rows += more
    reply = [{"role": "assistant", "content": "ANSWER"}]
    with for_verifiers({**SC, "reference": "{{item.want}}"}, asynchronous=False, items=[dated, plain]) as vf:
        assert [vf(completion=reply, info=row["info"], task="default") for row in rows] == [1.0, 1.0]
