"""rfteval.reward: graders as TRL reward functions and verl compute_score, called exactly as the trainers call them,
scoring exactly what `rfteval grade` scores on the same outputs."""

from __future__ import annotations

import copy
import json
import logging
import math
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from rfteval.errors import InputError
from rfteval.reward import for_trl, for_verl, sample_from_completion

# the ready-made graders' data, their outputs and `rfteval grade`'s scores: shared with the trainer tests
from tests.support.trainer_cases import (
    DATASETS,
    GRADERS,
    LOCAL_CASES,
    grade_cli,
    items,
    outputs,
)

# ------------------------------------------------------------------ the trainers' calling conventions


class TrainerState:
    """Stands in for transformers.TrainerState (TRL passes the trainer's state as `trainer_state`)."""

    global_step = 7


def trl_calculate_rewards(reward_funcs: Sequence[Callable[..., Any]], inputs: list[dict[str, Any]],
                          prompts: list[Any], completions: list[Any],
                          completion_ids_list: list[list[int]]) -> list[list[float]]:
    """GRPOTrainer._calculate_rewards for plain (non-Module, sync) reward functions, as in huggingface/trl
    trl/trainer/grpo_trainer.py (main, commit f2cd577): every column of the batch's examples except "prompt",
    "completion" and "completion_ids" becomes a keyword holding one value per completion; trainer_state, log_extra
    and log_metric are added; each function is called as f(prompts=, completions=, completion_ids=,
    **reward_kwargs); None becomes NaN. Returns rewards_per_func as rows of floats (no torch here)."""
    keys = [key for key in inputs[0] if key not in ["prompt", "completion", "completion_ids"]]
    reward_kwargs: dict[str, Any] = {key: [example[key] for example in inputs] for key in keys}
    reward_kwargs["trainer_state"] = TrainerState()
    reward_kwargs["log_extra"] = lambda *a, **k: None
    reward_kwargs["log_metric"] = lambda *a, **k: None
    rows = [[math.nan] * len(reward_funcs) for _ in prompts]
    for i, reward_func in enumerate(reward_funcs):
        output = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids_list,
                             **reward_kwargs)
        output = [r if r is not None else math.nan for r in output]
        for row, value in zip(rows, output, strict=True):
            row[i] = float(value)
    return rows


def trl_batch(rows: list[dict[str, Any]], texts_per_row: list[list[str]],
              conversational: bool = True) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
    """What GRPOTrainer hands _calculate_rewards for a batch: each dataset row repeated once per generation
    (RepeatSampler), its prompt, and the decoded completions: `[{"role": "assistant", "content": text}]` in the
    conversational format, the text in the standard one (_generate, same file)."""
    inputs, prompts, completions = [], [], []
    for row, texts in zip(rows, texts_per_row, strict=True):
        for text in texts:
            inputs.append(copy.deepcopy(row))
            prompts.append(copy.deepcopy(row["prompt"]))
            completions.append([{"role": "assistant", "content": text}] if conversational else text)
    return inputs, prompts, completions


def verl_naive_call(compute_score: Callable[..., Any], row: dict[str, Any], response_str: str,
                    num_turns: int | None = None) -> float:
    """NaiveRewardManager.__call__'s per-sample part, as in volcengine/verl verl/workers/reward_manager/naive.py
    (commit b178a3c): ground_truth from reward_model.ground_truth, extra_info from the row (mutated in place with
    num_turns and rollout_reward_scores), then compute_score(data_source=, solution_str=, ground_truth=,
    extra_info=); a dict result gives its "score"."""
    ground_truth = row["reward_model"]["ground_truth"]
    data_source = row["data_source"]
    extra_info = row.get("extra_info", {})
    extra_info["num_turns"] = num_turns
    extra_info["rollout_reward_scores"] = {}
    score = compute_score(data_source=data_source, solution_str=response_str, ground_truth=ground_truth,
                          extra_info=extra_info)
    return score["score"] if isinstance(score, dict) else score


# ------------------------------------------------------------------ the ready-made graders' data


def trl_rows(case: str) -> list[dict[str, Any]]:
    """The RFT lines as a TRL dataset: `messages` is the prompt column, every other field a column."""
    return [{"prompt": it["messages"], **{k: v for k, v in it.items() if k != "messages"}} for it in items(case)]


@pytest.fixture(scope="module")
def rewards() -> Iterator[Callable[[str, str], Any]]:
    """One reward per (grader, trainer) for the module: python workers start once."""
    made: dict[tuple[str, str], Any] = {}

    def get(case: str, kind: str) -> Any:
        if (case, kind) not in made:
            path = GRADERS / f"{case}.json"
            made[case, kind] = for_trl(path, python_workers=2) if kind == "trl" else for_verl(path, python_workers=2)
        return made[case, kind]

    yield get
    for reward in made.values():
        reward.close()


@pytest.mark.parametrize("case", [LOCAL_CASES[0], *(pytest.param(c, marks=pytest.mark.slow) for c in LOCAL_CASES[1:])])
def test_trl_scores_equal_rfteval_grade_for_every_local_ready_made_grader(case, tmp_path, rewards):
    outs = outputs(case)
    expected = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), outs)
    rows = {row["id"]: row for row in trl_rows(case)}
    for model in sorted({o["model"] for o in outs}):
        mine = [o for o in outs if o["model"] == model]
        by_item: dict[str, list[dict[str, Any]]] = {}
        for o in mine:
            by_item.setdefault(o["item_id"], []).append(o)
        inputs, prompts, completions = trl_batch([rows[i] for i in by_item],
                                                 [[o["output_text"] for o in group] for group in by_item.values()])
        order = [o for group in by_item.values() for o in group]
        got = trl_calculate_rewards([rewards(case, "trl")], inputs, prompts, completions, [[1, 2]] * len(order))
        assert [row[0] for row in got] == [expected[model, o["item_id"], o["epoch"]] for o in order]
    assert len(set(expected.values())) > 1, "the outputs should not all score the same"


@pytest.mark.parametrize("case", LOCAL_CASES)
@pytest.mark.slow
def test_verl_scores_equal_rfteval_grade_for_every_local_ready_made_grader(case, tmp_path, rewards):
    outs = outputs(case)
    expected = grade_cli(tmp_path, DATASETS / case / "items.jsonl", str(GRADERS / f"{case}.json"), outs)
    by_id = {it["id"]: it for it in items(case)}
    compute_score = rewards(case, "verl")
    for o in outs:
        it = by_id[o["item_id"]]
        row = {"data_source": f"rfteval/{case}", "prompt": it["messages"],
               "reward_model": {"style": "rule", "ground_truth": it["reference_answer"]},
               "extra_info": {k: v for k, v in it.items() if k not in ("messages", "reference_answer")}}
        assert verl_naive_call(compute_score, row, o["output_text"], num_turns=2) == \
            expected[o["model"], o["item_id"], o["epoch"]], o


@pytest.mark.slow
def test_verl_reward_loop_calls_from_an_executor_concurrently(rewards):
    """verl's reward loop (verl/experimental/reward_loop/reward_manager/naive.py) runs a sync compute_score in the
    event loop's default executor: many threads at once, one engine."""
    case = "chipstack"
    compute_score = rewards(case, "verl")
    its = items(case)
    answers = [json.dumps({"predicted": it["reference_answer"]}) for it in its]

    def call(i: int) -> float:
        it = its[i % len(its)]
        return compute_score(data_source="x", solution_str=answers[i % len(its)] if i % 2 else "nothing",
                             ground_truth=it["reference_answer"], extra_info={"id": it["id"], "tools_kwargs": {}})

    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(call, range(4 * len(its))))
    assert scores == [1.0 if i % 2 else 0.0 for i in range(4 * len(its))]


@pytest.mark.slow
def test_verl_ground_truth_as_json_text_and_reference_field(tmp_path):
    grader = {"type": "python", "name": "g", "source": "def grade(sample, item):\n"
              "    return float(sample['output_json'] == item['answer'] and item['level'] == 3)\n"}
    with for_verl(grader, reference_field="answer", ground_truth_json=True) as compute_score:
        assert compute_score("d", '{"x": [1, 2]}', '{"x": [1, 2]}', {"level": 3}) == 1.0
        assert compute_score("d", '{"x": [1, 2]}', '{"x": [1, 2]}', {"level": 2}) == 0.0
    with for_verl(grader, reference_field=None) as compute_score:  # the whole item in extra_info
        assert compute_score("d", '{"x": 1}', "ignored", {"answer": {"x": 1}, "level": 3}) == 1.0


# ------------------------------------------------------------------ conversational completions, tools, columns


TOOL_GRADER = {
    "type": "multi", "name": "tool_call",
    "graders": {
        "name": {"type": "string_check", "name": "n", "input": "{{sample.output_tools[0].function.name}}",
                 "reference": "{{item.tool}}", "operation": "eq"},
        "args": {"type": "string_check", "name": "a", "input": "{{sample.output_tools[0].function.arguments}}",
                 "reference": "{{item.arguments}}", "operation": "eq"},
        "said": {"type": "string_check", "name": "s", "input": "{{sample.output_text}}",
                 "reference": "{{item.reply}}", "operation": "like"},
    },
    "calculate_output": "0.5 * name + 0.25 * args + 0.25 * said",
}


def test_conversational_completion_grades_the_last_assistant_message_and_its_tool_calls(tmp_path):
    """TRL with tools (GRPOTrainer._tool_call_loop) hands a completion of several messages: the assistant's tool
    call, the tool's answer, more assistant messages; parse_response gives arguments as a dict."""
    row = {"prompt": [{"role": "user", "content": "weather in Paris?"}], "id": "w1", "tool": "get_weather",
           "arguments": json.dumps({"city": "Paris"}, ensure_ascii=False), "reply": "sunny"}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    completions = [
        [{"role": "assistant", "content": None, "tool_calls": [call]}],
        [{"role": "assistant", "content": "", "tool_calls": [{**call, "function": {**call["function"],
                                                                                  "name": "other"}}]}],
        [{"role": "assistant", "content": "let me look", "tool_calls": [call]},
         {"role": "tool", "name": "get_weather", "content": "sunny, 21C"},
         {"role": "assistant", "content": [{"type": "text", "text": "It is "}, {"type": "text", "text": "sunny."}]}],
    ]
    inputs = [copy.deepcopy(row) for _ in completions]
    with for_trl(TOOL_GRADER, on_error="zero") as reward:
        got = trl_calculate_rewards([reward], inputs, [row["prompt"]] * 3, completions, [[1]] * 3)
    # the third's last assistant message made no tool call: output_tools[0] is missing, an error, scored 0
    assert [r[0] for r in got] == [0.75, 0.25, 0.0]
    with for_trl(TOOL_GRADER) as reward:  # TRL's default here: None, which TRL turns into NaN
        got = trl_calculate_rewards([reward], inputs, [row["prompt"]] * 3, completions, [[1]] * 3)
    assert [r[0] for r in got][:2] == [0.75, 0.25] and math.isnan(got[2][0])

    # the same outputs through `rfteval grade` (tool calls as OpenAI returns them: arguments as a JSON string)
    ds = tmp_path / "items.jsonl"
    ds.write_text(json.dumps({"messages": row["prompt"], **{k: v for k, v in row.items() if k != "prompt"}}) + "\n")
    grader = tmp_path / "tool.json"
    grader.write_text(json.dumps(TOOL_GRADER))
    outs = [{"item_id": "w1", "epoch": i + 1, "output_text": s["output_text"], "output_tools": s["output_tools"]}
            for i, s in enumerate(sample_from_completion(c) for c in completions)]
    expected = grade_cli(tmp_path, ds, str(grader), outs)
    assert [expected["outputs", "w1", i] for i in (1, 2, 3)] == [0.75, 0.25, 0.0]


@pytest.mark.slow
def test_standard_format_and_extra_columns_reach_the_item():
    grader = {"type": "python", "name": "cols", "source": (
        "def grade(sample, item):\n"
        "    assert 'messages' not in item and 'trainer_state' not in item and 'log_metric' not in item\n"
        "    return item['weight'] * (sample['output_text'] == item['answer']) + len(item['tags']) / 100\n")}
    rows = [{"prompt": "2+2=", "answer": "4", "weight": 0.5, "tags": ["a", "b"]},
            {"prompt": "3+3=", "answer": "6", "weight": 1.0, "tags": []}]
    inputs, prompts, completions = trl_batch(rows, [["4", "5"], ["6", "6"]], conversational=False)
    with for_trl(grader) as reward:
        got = trl_calculate_rewards([reward], inputs, prompts, completions, [[1]] * 4)
    assert [r[0] for r in got] == [0.52, 0.02, 1.0, 1.0]


@pytest.mark.slow
@pytest.mark.parametrize("on_error, bad", [("zero", 0.0), ("none", None)])
def test_a_grading_error_scores_by_on_error_and_is_logged_once_per_type(caplog, on_error, bad):
    grader = {"type": "python", "name": "picky", "source": (
        "def grade(sample, item):\n"
        "    if sample['output_text'] == 'boom':\n"
        "        raise ValueError('no boom')\n"
        "    if sample['output_text'] == 'nan':\n"
        "        return float('nan')\n"
        "    return 1.0\n")}
    caplog.set_level(logging.WARNING, logger="rfteval.reward")
    with for_trl(grader, on_error=on_error) as reward:
        for _ in range(2):
            assert reward(prompts=["p"] * 3, completions=["ok", "boom", "boom"], completion_ids=None) == [1.0, bad, bad]
        assert reward(prompts=["p"], completions=["nan"], completion_ids=None) == [bad]
        assert reward.error_counts == {"python_grader_runtime_error": 5}
    messages = [r.getMessage() for r in caplog.records if r.name == "rfteval.reward"]
    assert len(messages) == 1, messages  # NaN is a python_grader_runtime_error too: same type, not logged again
    assert "python_grader_runtime_error" in messages[0] and "no boom" in messages[0] and "rfteval_picky" in messages[0]
    assert f"scored {'0' if on_error == 'zero' else 'None'}" in messages[0]


def test_a_template_error_is_not_raised():
    grader = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
              "reference": "{{item.missing}}", "operation": "eq"}
    with for_trl(grader) as reward:
        assert reward(prompts=["p"], completions=["x"], completion_ids=None, answer=["x"]) == [None]
    with for_verl(grader) as compute_score:  # verl's default: 0, OpenAI's rule
        assert compute_score("d", "x", "x", {}) == 0.0


def test_grader_in_every_form_load_grader_takes(tmp_path):
    sc = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
          "reference": "{{item.reference_answer}}", "operation": "eq"}
    job = {"model": "o4-mini", "method": {"type": "reinforcement", "reinforcement": {"grader": sc}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    for grader in (sc, {"grader": sc}, job, path, str(path)):
        with for_trl(grader) as reward:
            assert reward(prompts=["p", "p"], completions=["a", "b"], reference_answer=["a", "a"]) == [1.0, 0.0]
            assert reward.__name__ == "rfteval_exact"
    with pytest.raises(InputError, match="operation"):
        for_trl({**sc, "operation": "equals"})
    with pytest.raises(TypeError):
        for_trl(sc, no_such_option=1)


@pytest.mark.slow
def test_trl_extras_are_not_columns_and_odd_keywords_are_ignored(caplog):
    grader = {"type": "python", "name": "keys", "source": "def grade(sample, item):\n    return float(len(item))\n"}
    with for_trl(grader) as reward:
        got = reward(prompts=["p", "p"], completions=["a", "b"], completion_ids=[[1], [2]], trainer_state=object(),
                     log_extra=print, log_metric=print, environments=[object(), object()], answer=["x", "y"],
                     num_generations=2, wrong_length=["only one"], unordered={"x", "y"})
    assert got == [1.0, 1.0]  # the item is {"answer": ...}
    assert any("num_generations" in r.getMessage() for r in caplog.records)
    assert any("'unordered' is not a column" in r.getMessage() for r in caplog.records)  # sized, not indexable


def test_trl_column_may_be_an_array():
    """A column is anything indexable with one value per completion: a list as TRL passes it, or an array."""
    import numpy as np

    grader = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
              "reference": "{{item.answer}}", "operation": "eq"}
    with for_trl(grader) as reward:
        assert reward(prompts=["p", "q"], completions=["a", "c"], answer=np.array(["a", "b"])) == [1.0, 0.0]
        assert reward(prompts=["p", "q"], completions=["a", "c"], answer=("a", "c")) == [1.0, 1.0]


def test_model_grader_needs_a_judge_endpoint(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_ENV", raising=False)
    config = json.loads((GRADERS / "accordance.json").read_text())
    with pytest.raises(InputError) as exc:
        for_trl(config, judge_api_key_env="NO_SUCH_KEY_ENV")
    message = str(exc.value)
    assert "judge_base_url=" in message and "judge_api_key_env=" in message and "NO_SUCH_KEY_ENV" in message
    assert "\n" not in message


def test_model_grader_with_a_local_judge(fake_openai):
    def judge(request):
        answer = request.last_user_text().rsplit("ANSWER:", 1)[1].strip()
        return json.dumps({"result": 1.0 if answer == "42" else 0.25, "steps": []})

    fake_openai.responder = judge
    grader = {"type": "score_model", "name": "judge", "model": "gpt-4.1-mini",
              "input": [{"role": "user", "content": "REF: {{item.reference_answer}} ANSWER: {{sample.output_text}}"}],
              "range": [0, 1]}
    with for_trl(grader, judge_base_url=fake_openai.base_url, judge_model="local-judge") as reward:
        assert reward(prompts=["p", "p"], completions=["42", "41"], reference_answer=["42", "42"]) == [1.0, 0.25]
    assert {r.body["model"] for r in fake_openai.requests} == {"local-judge"}


@pytest.mark.slow
def test_pickles_as_config_and_options_and_closes(tmp_path):
    grader = {"type": "python", "name": "one", "source": "def grade(sample, item):\n    return 1.0\n"}
    reward = for_verl(grader, reference_field="ref", grader_timeout=30)
    copy_ = pickle.loads(pickle.dumps(reward))
    try:
        assert copy_.reference_field == "ref" and copy_.options.grader_timeout == 30
        assert copy_("d", "x", "y", None) == 1.0
    finally:
        copy_.close()
        reward.close()
    reward.close()  # twice is fine
