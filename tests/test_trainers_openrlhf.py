"""OpenRLHF 0.11.2's own code runs rfteval's reward: its prompts-dataset preprocessing (preprocess_data, with a chat
template) on the JSONL `rfteval export-dataset --target openrlhf` writes, and its SingleTurnAgentExecutor, which
loads `--reward.remote_url FILE.py` (the module `rfteval export-reward --target openrlhf` writes) and calls
reward_func on each query as decoded with its special tokens. OpenRLHF installs here without its dependencies
(deepspeed, vllm): these two modules import without them."""

from __future__ import annotations

import asyncio
import os
import pickle

import pytest
from trainer_cases import GRADERS, LOCAL_CASES, expected_scores, export, hf_json
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.reward import for_openrlhf
from rfteval.reward.openrlhf import response_of

os.environ.setdefault("HF_HUB_OFFLINE", "1")
agent = pytest.importorskip("openrlhf.utils.agent", reason="openrlhf is not installed: `make trainers` installs it "
                                                           "(pip install --no-deps openrlhf==0.11.2)")
torch = pytest.importorskip("torch", reason="torch is not installed: `make trainers` installs the CPU build")
runner = CliRunner()


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
