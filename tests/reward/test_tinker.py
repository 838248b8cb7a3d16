"""tinker-cookbook scores with rfteval's grader through its own RL code, with no Tinker service: `for_tinker` builds
its RL dataset (ProblemGroupBuilder over RFTEnv, a ProblemEnv), and tinker-cookbook's `do_group_rollout` runs each
group (initial_observation, the renderer's parse_response in ProblemEnv.step, compute_group_rewards,
TrajectoryGroup.get_total_rewards) with a policy that answers with the recorded completions' tokens. Every bundled
milo, chipstack and math completion, in each shape (tests/support/trainer_shapes.py), through two of tinker-cookbook's
renderers: role_colon (the think block stays in the text) and qwen3 (thinking parsed into a content part), gets
`rfteval grade`'s score.

The tokenizer is built here (tokenizers' byte-level model with Qwen's special tokens: every byte one token, so a text
decodes back exactly); tinker-cookbook's renderers take any Hugging Face tokenizer, and none can be downloaded."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.optional import require
from tests.support.trainer_cases import GRADERS
from tests.support.trainer_shapes import CASES, Completion, completions, items

require("tinker_cookbook.rl.problem_env", "trainers")

from tinker_cookbook import renderers  # noqa: E402
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs  # noqa: E402
from tinker_cookbook.rl.rollouts import do_group_rollout  # noqa: E402

from rfteval.reward.tinker import RFTEnv, for_tinker  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", additional_special_tokens=SPECIAL)


def action(renderer: renderers.Renderer, tokenizer: Any, text: str) -> list[int]:
    """The tokens a model samples for `text` under this renderer, ending with its stop sequence."""
    (stop,) = renderer.get_stop_sequences()
    if isinstance(stop, int):
        return list(tokenizer.encode(text, add_special_tokens=False)) + [stop]
    return list(tokenizer.encode(f" {text}{stop}", add_special_tokens=False))  # role_colon: "Assistant: ..."


class Recorded(TokenCompleter):
    """A policy answering with recorded tokens, one sequence per call."""

    def __init__(self, actions: list[list[int]]):
        self.actions = list(actions)
        self.prompts: list[list[int]] = []

    async def __call__(self, model_input: Any, stop: Any, *, max_tokens: int | None = None) -> TokensWithLogprobs:
        self.prompts.append(model_input.to_ints())
        return TokensWithLogprobs(tokens=self.actions.pop(0), maybe_logprobs=None)


def rollout_rewards(dataset: Any, renderer: renderers.Renderer, tokenizer: Any, case: str,
                    cases: list[Completion], text_of: Any) -> list[tuple[float, float, str]]:
    """(reward, expected, what) for every completion, each item's completions one tinker-cookbook group."""
    by_item: dict[str, list[Completion]] = defaultdict(list)
    for c in cases:
        by_item[c.item_id].append(c)
    lines = items(case)
    out = []

    async def run() -> None:
        for item_id, group in by_item.items():
            actions = [action(renderer, tokenizer, text_of(c)) for c in group]
            expected = {tuple(a): c.expected for a, c in zip(actions, group)}
            builder = dataset.builder(lines[item_id])
            builder = type(builder)(env_thunk=builder.env_thunk, num_envs=len(group), dataset_name=case)
            result = await do_group_rollout(builder, Recorded(actions))
            for trajectory, total in zip(result.trajectories_G, result.get_total_rewards()):
                tokens = tuple(trajectory.transitions[0].ac.tokens)
                out.append((total, expected[tokens], f"{item_id}: {tokenizer.decode(list(tokens))[:80]!r}"))

    asyncio.run(run())
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_do_group_rollout_rewards_equal_rfteval_grade(case, tmp_path, tokenizer):
    cases = completions(tmp_path, case)
    role_colon = renderers.get_renderer("role_colon", tokenizer=tokenizer)
    qwen3 = renderers.get_renderer("qwen3", tokenizer=tokenizer)
    items_path = str(Path(GRADERS).parent / "datasets" / case / "items.jsonl")
    for renderer in (role_colon, qwen3):
        dataset = for_tinker(GRADERS / f"{case}.json", renderer, items=items_path, group_size=1)
        # a reasoning field is what the qwen3 renderer makes of a think block: its thinking content part
        got = rollout_rewards(dataset, renderer, tokenizer, case, cases, lambda c: c.text)
        wrong = [(what, reward, want) for reward, want, what in got if reward != want]
        assert not wrong, f"{type(renderer).__name__}: {len(wrong)} of {len(got)} differ, e.g. {wrong[:3]}"
        assert len(got) == len(cases)


@pytest.mark.slow
def test_step_metrics_prompt_and_error(tmp_path, tokenizer):
    """One milo item through RFTEnv's own step: the multi grader's sub-scores and the error flag in the metrics,
    the whole conversation (developer as system) as the prompt, and an erroring grade scored 0 and counted."""
    renderer = renderers.get_renderer("qwen3", tokenizer=tokenizer)
    line = next(iter(items("milo").values()))
    dataset = for_tinker(GRADERS / "milo.json", renderer, items=[line], group_size=2)
    (builder,) = dataset.get_batch(0)
    answer = '{"events": []}'
    policy = Recorded([action(renderer, tokenizer, answer), action(renderer, tokenizer, "<think>\nx\n</think>\n\n"
                                                                    + answer)])
    result = asyncio.run(do_group_rollout(builder, policy))
    prompt = tokenizer.decode(policy.prompts[0])
    assert prompt.startswith("<|im_start|>system\nYou are Milo") and line["messages"][-1]["content"] in prompt
    rewards = result.get_total_rewards()
    assert rewards[0] == rewards[1]
    metrics = result.trajectories_G[0].transitions[0].metrics
    assert metrics["rfteval/grading_error"] == 0.0 and any(k.startswith("rfteval/") and k != "rfteval/grading_error"
                                                           for k in metrics)
    assert metrics["correct"] == rewards[0]  # ProblemEnv's own metric is the grader's score

    broken = {"type": "python", "name": "broken", "source": "def grade(sample, item):\n    raise ValueError('no')\n"}
    env = RFTEnv(for_tinker(broken, renderer, items=[line]).reward, line, renderer)
    step = asyncio.run(env.step(action(renderer, tokenizer, answer)))
    assert step.reward == 0.0 and step.metrics["rfteval/grading_error"] == 1.0
    assert sum(env.reward.error_counts.values()) == 1


def test_on_error_none_is_refused_batches_and_pickling(tokenizer):
    renderer = renderers.get_renderer("role_colon", tokenizer=tokenizer)
    line = next(iter(items("chipstack").values()))
    with pytest.raises(ValueError, match="no meaning in tinker-cookbook"):
        for_tinker(GRADERS / "chipstack.json", renderer, items=[line], on_error="none")
    dataset = for_tinker(GRADERS / "chipstack.json", renderer, items=[line, line, line], batch_size=2)
    assert len(dataset) == 2 and len(dataset.get_batch(1)) == 1
    builder = dataset.get_batch(0)[0]
    envs = asyncio.run(builder.make_envs())
    assert len(envs) == 4 and all(isinstance(e, RFTEnv) for e in envs)
    # tinker-cookbook pickles builders for its rollout workers; the renderer pickles by its tokenizer's hub name (none
    # here), the reward and the item as themselves
    reward, item = pickle.loads(pickle.dumps((dataset.reward, line)))
    assert reward.config == dataset.reward.config and item == line


def test_the_readmes_call_builds_the_dataset(tokenizer, monkeypatch):
    from rfteval.reward.tinker import RFTDataset
    from tests.support.trainer_shapes import readme_block

    monkeypatch.chdir(Path(GRADERS).parent)
    scope: dict[str, Any] = {"renderer": renderers.get_renderer("qwen3", tokenizer=tokenizer), "for_tinker": for_tinker}
    exec(readme_block("**tinker-cookbook**", "python"), scope)
    assert isinstance(scope["dataset"], RFTDataset) and scope["dataset"].group_size == 8
    assert len(scope["dataset"].items) == 30


@pytest.mark.slow
def test_a_tool_call_parsed_by_the_renderer_scores_as_grade(tmp_path, tokenizer):
    """Qwen3's renderer parses `<tool_call>` into tinker's ToolCall model: the grader reads it in OpenAI's shape."""
    from tests.support.trainer_shapes import TOOL_GRADER, TOOL_ITEM, TOOL_TEXT, tool_call_expected

    renderer = renderers.get_renderer("qwen3", tokenizer=tokenizer)
    call = json.dumps({"name": TOOL_ITEM["tool"], "arguments": TOOL_ITEM["args"]})
    env = RFTEnv(for_tinker(TOOL_GRADER, renderer, items=[TOOL_ITEM]).reward, TOOL_ITEM, renderer)
    step = asyncio.run(env.step(action(renderer, tokenizer, f"{TOOL_TEXT}<tool_call>\n{call}\n</tool_call>")))
    assert step.reward == tool_call_expected(tmp_path) == 1.0


def test_exact_match_after_thinking_in_both_renderers(tokenizer):
    """An exact-match grader: the answer after a think block (text in role_colon, a thinking part in qwen3) is
    compared without the thinking and the newlines after it, as `rfteval grade` compares it."""
    grader = {"type": "string_check", "name": "exact", "operation": "eq", "input": "{{ sample.output_text }}",
              "reference": "{{ item.reference_answer }}"}
    line = {"id": "x", "messages": [{"role": "user", "content": "Say yes."}], "reference_answer": "yes"}
    for name in ("role_colon", "qwen3"):
        renderer = renderers.get_renderer(name, tokenizer=tokenizer)
        reward = for_tinker(grader, renderer, items=[line]).reward
        got = [asyncio.run(RFTEnv(reward, line, renderer).step(action(renderer, tokenizer, text))).reward
               for text in ("yes", "<think>\nhm\n</think>\n\nyes", "no", "<think>\nyes")]
        assert got == [1.0, 1.0, 0.0, 0.0], name


def value_judge(request: Any) -> Any:
    """Scores each sample by the number after 'v=' in its text (as tests/graders/test_group_judge.py does)."""
    import re

    shown = re.findall(r'<sample id="([^"]+)">\n(.*?)\n</sample>', request.body["messages"][1]["content"], re.S)
    return json.dumps({"scores": [{"id": sid, "explanation": "v", "score": float(text.split("v=")[1])}
                                  for sid, text in shown]})


@pytest.mark.slow
def test_a_group_judge_ranks_the_group_as_its_group_rewards(tokenizer, fake_openai, monkeypatch):
    """group_judge sees the group's replies in one judge call (compute_group_rewards), never one reply alone."""
    from rfteval.reward.tinker import RFTGroupBuilder

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    fake_openai.responder = value_judge
    renderer = renderers.get_renderer("qwen3", tokenizer=tokenizer)
    line = {"id": "q", "messages": [{"role": "user", "content": "Question?"}]}
    grader = {"type": "group_judge", "name": "rank", "model": "judge-m", "seed": 7}
    dataset = for_tinker(grader, renderer, items=[line], group_size=3, judge_base_url=fake_openai.base_url)
    (builder,) = dataset.get_batch(0)
    assert isinstance(builder, RFTGroupBuilder)
    values = [0.25, 0.75, 0.5]
    policy = Recorded([action(renderer, tokenizer, f"<think>\nhm\n</think>\n\nanswer v={v}") for v in values])
    result = asyncio.run(do_group_rollout(builder, policy))
    got = {tokenizer.decode(t.transitions[0].ac.tokens).split("v=")[1].split("<")[0]: total
           for t, total in zip(result.trajectories_G, result.get_total_rewards())}
    assert got == {str(v): v for v in values}
    assert len(fake_openai.requests) == 1
    assert all(m["rfteval/score"] == r and m["rfteval/grading_error"] == 0.0
               for m, r in zip(result.metrics_G, result.final_rewards_G))
    assert "correct" not in result.trajectories_G[0].transitions[0].metrics


def test_the_dataset_builder_a_recipe_names(tokenizer, monkeypatch):
    """RFTDatasetBuilder (a chz config, as recipes' builders are) builds the train and test datasets; the tokenizer
    lookup is tinker-cookbook's get_tokenizer, given the local tokenizer here (no hub)."""
    import tinker_cookbook.tokenizer_utils as tu

    from rfteval.reward.tinker import RFTDatasetBuilder

    monkeypatch.setattr(tu, "get_tokenizer", lambda name: tokenizer)
    items_path = str(Path(GRADERS).parent / "datasets" / "math" / "items.jsonl")
    builder = RFTDatasetBuilder(grader=str(GRADERS / "math.json"), items=items_path, batch_size=4, group_size=2,
                                model_name_for_tokenizer="local", renderer_name="qwen3", test_items=items_path)
    train, test = asyncio.run(builder())
    assert len(train) == 8 and len(train.get_batch(7)) == 2 and train.group_size == 2
    assert test is not None and test.group_size == 1 and test.reward is train.reward


@pytest.mark.slow
def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path, tokenizer):
    """for_tinker(think_tags=...) strips what `rfteval grade --think-tags` strips, through RFTEnv.step (the
    renderer's parse_response, ProblemEnv's reward code); without it, the rewards are grade's without the flag.
    role_colon leaves every block in the text; qwen3 parses a `<think>` block into a thinking part itself (the
    model's own parser, as a server's reasoning parser would), so its probes are the ones in `<reasoning>` tags."""
    from tests.support.trainer_cases import THINK_TAGS, custom_tag_probes

    outs, tagged, plain = custom_tag_probes(tmp_path)
    lines = items("milo")
    for name in ("role_colon", "qwen3"):
        renderer = renderers.get_renderer(name, tokenizer=tokenizer)
        keep = [i for i, o in enumerate(outs) if name == "role_colon" or "<think>" not in o["output_text"]]
        for options, expected in (({}, plain), ({"think_tags": THINK_TAGS}, tagged)):
            reward = for_tinker(GRADERS / "milo.json", renderer, items=list(lines.values()), **options).reward
            got = [asyncio.run(RFTEnv(reward, lines[outs[i]["item_id"]], renderer).step(
                action(renderer, tokenizer, outs[i]["output_text"]))).reward for i in keep]
            assert got == [expected[i] for i in keep], (name, options)
        assert len(keep) >= 9 and tagged != plain


def test_the_developer_role_is_system_unless_kept(tokenizer):
    """OpenAI's `developer` turn: qwen3's renderer would write `<|im_start|>developer` (a role Qwen never saw), so the
    prompt RFTEnv renders has it as `system`, as export-dataset writes it; developer_role="keep" leaves it (for
    gpt_oss's renderer, whose harmony format has the role). The grader's item keeps it either way."""
    line = {"id": "d", "messages": [{"role": "developer", "content": "Answer in one word."},
                                    {"role": "user", "content": "Say yes."}], "reference_answer": "yes"}
    grader = {"type": "string_check", "name": "exact", "operation": "eq", "input": "{{ sample.output_text }}",
              "reference": "{{ item.messages[0].role }}"}
    renderer = renderers.get_renderer("qwen3", tokenizer=tokenizer)
    prompts = {}
    for role in ("system", "keep"):
        dataset = for_tinker(grader, renderer, items=[line], group_size=1, developer_role=role)
        (builder,) = dataset.get_batch(0)
        (env,) = asyncio.run(builder.make_envs())
        observation, _ = asyncio.run(env.initial_observation())
        prompts[role] = tokenizer.decode(observation.to_ints())
        assert asyncio.run(env.step(action(renderer, tokenizer, "developer"))).reward == 1.0  # the item's own role
    assert "<|im_start|>system\nAnswer in one word." in prompts["system"] and "developer" not in prompts["system"]
    assert "<|im_start|>developer\nAnswer in one word." in prompts["keep"]
    with pytest.raises(ValueError, match="developer_role"):
        for_tinker(grader, renderer, items=[line], developer_role="user")
