"""verl 0.9.1's own reward managers call rfteval's compute_score: the legacy naive and batch managers
(verl/workers/reward_manager/) and the reward loop's naive manager (verl/experimental/reward_loop/), on the parquet
`rfteval export-dataset --target verl` writes, read as verl reads it (datasets' parquet loader, verl's collate_fn),
the function loaded through verl's own get_custom_reward_fn (`reward.custom_reward_function`, path and pkg://).
Only the tokenizer is a stand-in: responses are the recorded texts, one token each."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from rfteval.reward import VERL_ADDED, for_verl
from tests.support.optional import require
from tests.support.trainer_cases import GRADERS, LOCAL_CASES, THINK_TAGS, custom_tag_probes, expected_scores, export

torch = require("torch", "trainers")
verl = require("verl", "trainers")  # it imports ray and tensordict, which its reward managers need
pytestmark = pytest.mark.slow
runner = CliRunner()


class Tokenizer:
    """Decodes token k to the k-th text (0: the empty prompt); verl only decodes in its reward managers."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        return "".join(self.texts[i - 1] for i in ids if i > 0)


def verl_batch(parquet: Path, outs: list[dict[str, Any]], agent_keys: bool = False) -> tuple[Any, Tokenizer]:
    """A DataProto as verl's trainer hands it to a reward manager: the dataset's rows (read by datasets' parquet
    loader, as verl's RLHFDataset reads them), one per response, collated by verl's collate_fn."""
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(parquet), cache_dir=str(parquet.parent / ".hf"))["train"]
    by_id = {row["extra_info"]["id"]: row for row in ds}
    rows = []
    for o in outs:
        row = copy.deepcopy({k: v for k, v in by_id[o["item_id"]].items() if k != "prompt"})
        if agent_keys:  # what verl's agent loop adds to extra_info
            row["extra_info"].update(raw_prompt=[{"role": "user", "content": "x"}], turn_scores=[0.5], tool_rewards=[1])
            row["tool_extra_fields"] = {"tools_kwargs": {}}
        rows.append(row)
    batch = collate_fn(rows)
    n = len(outs)
    tensors = {"prompts": torch.zeros(n, 1, dtype=torch.long),
               "responses": torch.arange(1, n + 1, dtype=torch.long).unsqueeze(1),
               "attention_mask": torch.ones(n, 2, dtype=torch.long)}
    return DataProto.from_dict(tensors=tensors, non_tensors=batch), Tokenizer([o["output_text"] for o in outs])


def f32(values: list[float]) -> list[float]:
    return torch.tensor(values, dtype=torch.float32).tolist()


def last_token_rewards(reward_tensor: Any) -> list[float]:
    return reward_tensor[:, -1].tolist()


CASES = [pytest.param(c, id=c) for c in LOCAL_CASES]


@pytest.mark.parametrize("case", CASES)
def test_legacy_naive_manager(case, tmp_path):
    from verl.workers.reward_manager.naive import NaiveRewardManager

    outs, expected = expected_scores(tmp_path, case)
    data, tok = verl_batch(export(case, "verl", tmp_path / "verl"), outs)
    with for_verl(GRADERS / f"{case}.json") as compute_score:
        got = NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data)
    assert last_token_rewards(got) == f32(expected)


@pytest.mark.parametrize("case", CASES[:1] + CASES[-1:])
def test_legacy_batch_manager_gets_one_score_per_row(case, tmp_path):
    from verl.workers.reward_manager.batch import BatchRewardManager

    outs, expected = expected_scores(tmp_path, case)
    data, tok = verl_batch(export(case, "verl", tmp_path / "verl"), outs)
    fn = for_verl(GRADERS / f"{case}.json", batch=True)
    try:
        got = BatchRewardManager(tok, num_examine=0, compute_score=fn)(data, return_dict=True)
    finally:
        fn.args[0].close()
    assert last_token_rewards(got["reward_tensor"]) == f32(expected)


def test_the_single_form_refuses_the_batch_call(tmp_path):
    """The issue's second finding: BatchRewardManager with the single form got 0.0 for everything, silently."""
    from verl.workers.reward_manager.batch import BatchRewardManager

    outs, _ = expected_scores(tmp_path, "chipstack")
    data, tok = verl_batch(export("chipstack", "verl", tmp_path / "verl"), outs[:4])
    with for_verl(GRADERS / "chipstack.json") as compute_score:
        with pytest.raises(TypeError, match="missing data_source, solution_str, ground_truth.*batch=True"):
            BatchRewardManager(tok, num_examine=0, compute_score=compute_score)(data)
        with pytest.raises(TypeError, match="missing ground_truth"):
            compute_score(data_source="d", solution_str="x")


def _reward_loop(fn: Any, data: Any, tok: Tokenizer) -> list[dict[str, Any]]:
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    async def run() -> list[dict[str, Any]]:
        manager = NaiveRewardManager(OmegaConf.create({}), tok, fn)
        return list(await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data)))))

    return asyncio.run(run())


@pytest.mark.parametrize("form", ["sync", "async"])
def test_reward_loop_naive_manager_with_verl_added_keys(form, tmp_path):
    """The agent loop's keys (raw_prompt, turn_scores, tool_rewards, tool_extra_fields) and the manager's own
    (num_turns, rollout_reward_scores) never reach the item: a grader that scores the item's keys sees the line's."""
    case = "milo"
    outs, expected = expected_scores(tmp_path, case)
    data, tok = verl_batch(export(case, "verl", tmp_path / "verl"), outs, agent_keys=True)
    fn = for_verl(GRADERS / f"{case}.json", asynchronous=form == "async", details=True)
    reward = fn.args[0] if form == "async" else fn
    assert asyncio.iscoroutinefunction(fn) == (form == "async")
    try:
        got = _reward_loop(fn, data, tok)
    finally:
        reward.close()
    assert [g["reward_score"] for g in got] == expected
    assert {g["reward_extra_info"]["error"] for g in got} == {""}


def test_no_verl_key_reaches_the_item(tmp_path):
    keys = {"type": "python", "name": "keys", "source":
            "import json\ndef grade(sample, item):\n    return float(sample['output_text'] == json.dumps(sorted(item)))\n"}
    line = {"id": "a", "messages": [{"role": "user", "content": "q"}], "reference_answer": "r", "extra": 1}
    want = json.dumps(sorted(line))
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps(line) + "\n")
    res = runner.invoke(app, ["export-dataset", str(items), "--target", "verl", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    data, tok = verl_batch(tmp_path / "v" / "train.parquet", [{"item_id": "a", "output_text": want}], agent_keys=True)
    with for_verl(keys) as compute_score:
        assert [g["reward_score"] for g in _reward_loop(compute_score, data, tok)] == [1.0]
        plain = {"x": 1, **{k: 1 for k in VERL_ADDED}}
        assert compute_score("d", json.dumps(["reference_answer", "x"]), "g", plain, reward_router_address="h") == 1.0


@pytest.mark.parametrize("name", ["compute_score", "compute_score_async", "compute_score_batch"])
def test_export_reward_through_verls_own_loader_by_pkg_path(name, tmp_path, monkeypatch):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    module = tmp_path / "chipstack_verl_reward.py"
    res = runner.invoke(app, ["export-reward", str(GRADERS / "chipstack.json"), "--target", "verl", "--out", str(module)])
    assert res.exit_code == 0, res.output
    assert "reward.custom_reward_function.path" in module.read_text()
    monkeypatch.syspath_prepend(str(tmp_path))
    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://chipstack_verl_reward", "name": name, "reward_kwargs": {"unused": 1}}}})
    fn = get_custom_reward_fn(config)
    outs, expected = expected_scores(tmp_path, "chipstack")
    data, tok = verl_batch(export("chipstack", "verl", tmp_path / "verl"), outs)
    try:
        if name == "compute_score_batch":
            from verl.workers.reward_manager.batch import BatchRewardManager

            got = last_token_rewards(BatchRewardManager(tok, num_examine=0, compute_score=fn)(data))
            assert got == f32(expected)
        else:
            assert [g["reward_score"] for g in _reward_loop(fn, data, tok)] == expected
    finally:
        sys.modules["chipstack_verl_reward"].close()


def test_the_recreations_in_the_other_tests_match_verls_own_code(tmp_path):
    """tests/reward/test_adapters.py re-creates the naive manager's call and tests/cli/test_export_reward.py verl's
    module loader, so they run without verl: checked here against verl's."""
    from verl.utils.import_utils import load_extern_object
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from tests.cli.test_export_reward import load_like_verl
    from tests.reward.test_adapters import verl_naive_call

    outs, expected = expected_scores(tmp_path, "chipstack")
    data, tok = verl_batch(export("chipstack", "verl", tmp_path / "verl"), outs[:8])
    with for_verl(GRADERS / "chipstack.json") as compute_score:
        real = last_token_rewards(NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data))
        rows = [{"data_source": data.non_tensor_batch["data_source"][i], "reward_model": data.non_tensor_batch[
            "reward_model"][i], "extra_info": copy.deepcopy(data.non_tensor_batch["extra_info"][i])} for i in range(8)]
        mine = [verl_naive_call(compute_score, row, o["output_text"]) for row, o in zip(rows, outs[:8])]
    assert f32(mine) == real == f32(expected[:8])
    module = tmp_path / "m.py"
    module.write_text("def compute_score(*a, **k):\n    return 0.5\n")
    assert load_like_verl(module).compute_score() == load_extern_object(str(module), "compute_score")() == 0.5


def test_custom_think_tags_score_as_rfteval_grade_does(tmp_path, monkeypatch):
    """for_verl(think_tags=...) strips what `rfteval grade --think-tags` strips, through the legacy naive manager and
    the exported module's options (`export-reward --think-tags`) through verl's own loader; without it, grade's
    scores without the flag."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.naive import NaiveRewardManager

    outs, tagged, plain = custom_tag_probes(tmp_path)
    data, tok = verl_batch(export("milo", "verl", tmp_path / "verl"), outs)
    for options, expected in (({}, plain), ({"think_tags": THINK_TAGS}, tagged)):
        with for_verl(GRADERS / "milo.json", **options) as compute_score:
            got = NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data)
        assert last_token_rewards(got) == f32(expected), options
    module = tmp_path / "milo_tags_reward.py"
    res = runner.invoke(app, ["export-reward", str(GRADERS / "milo.json"), "--target", "verl", "--out", str(module),
                              "--think-tags", THINK_TAGS])
    assert res.exit_code == 0, res.output
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
        "path": "pkg://milo_tags_reward", "name": "compute_score"}}}))
    try:
        got = NaiveRewardManager(tok, num_examine=0, compute_score=fn)(data)
    finally:
        sys.modules["milo_tags_reward"].close()
    assert last_token_rewards(got) == f32(tagged)


def test_items_finds_an_exported_date_like_id(tmp_path):
    """With items=, date-like ids find their lines through the legacy naive manager (parquet keeps them as strings,
    so extra_info holds them as they are; the id is read by core's one rule, as for TRL's JSON text)."""
    from verl.workers.reward_manager.naive import NaiveRewardManager

    lines = [{"id": "2025-03-14", "messages": [{"role": "user", "content": "q"}], "want": "ANSWER"},
             {"id": "2025-03-15", "messages": [{"role": "user", "content": "p"}], "want": "OTHER"}]
    path = tmp_path / "dated.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = runner.invoke(app, ["export-dataset", str(path), "--target", "verl", "--out", str(tmp_path / "verl")])
    assert res.exit_code == 0, res.output
    import pyarrow.parquet as pq

    ids = [row["id"] for row in pq.read_table(tmp_path / "verl" / "train.parquet").column("extra_info").to_pylist()]
    outs = [{"item_id": ids[0], "output_text": "ANSWER"}, {"item_id": ids[1], "output_text": "OTHER"},
            {"item_id": ids[0], "output_text": "OTHER"}]
    data, tok = verl_batch(tmp_path / "verl" / "train.parquet", outs)
    grader = {"type": "string_check", "name": "want", "input": "{{ sample.output_text }}",
              "reference": "{{ item.want }}", "operation": "eq"}
    with for_verl(grader, items=str(path)) as compute_score:
        got = NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data)
    assert last_token_rewards(got) == [1.0, 1.0, 0.0]


def test_on_error_none_is_refused_as_verl_cannot_store_it(tmp_path):
    """verl writes every score into a float tensor: None fails the legacy naive manager's step (the TypeError checked
    here is torch's own), so on_error="none" is refused by for_verl and by `export-reward --target verl`."""
    with pytest.raises(TypeError, match="NoneType"):
        torch.zeros(1, 1)[0, 0] = None  # what NaiveRewardManager does with a None score
    with pytest.raises(ValueError, match="cannot be a verl reward"):
        for_verl(GRADERS / "milo.json", on_error="none")
    res = runner.invoke(app, ["export-reward", str(GRADERS / "milo.json"), "--target", "verl", "--out",
                              str(tmp_path / "r.py"), "--on-error", "none"])
    assert res.exit_code == 2 and "cannot be a verl reward" in res.output and not (tmp_path / "r.py").exists()


def test_readme_verl_block(tmp_path, monkeypatch):
    """The README's verl block as written: its two rfteval commands, then main_ppo's overrides applied to verl's own
    generated trainer config (struct mode: a key verl does not have is refused) and the reward function loaded from
    that config by verl's get_custom_reward_fn, scored by the legacy naive manager: `rfteval grade`'s scores."""
    import shlex
    from pathlib import Path as P

    import verl.trainer.config as verl_config
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from tests.support.trainer_shapes import readme_block

    # a continued line (a trailing backslash) leaves a newline word
    lines = [w for w in shlex.split(readme_block("**verl**", "bash"), comments=True) if w.strip()]
    commands, current = [], []
    for word in lines:  # split the block back into commands (each starts with rfteval or python)
        if word in ("rfteval", "python") and current:
            commands.append(current)
            current = []
        current.append(word)
    commands.append(current)
    assert [c[:2] for c in commands] == [["rfteval", "export-dataset"], ["rfteval", "export-reward"],
                                         ["python", "-m"]] and commands[2][2] == "verl.trainer.main_ppo"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "graders").symlink_to(GRADERS)
    (tmp_path / "datasets").symlink_to(GRADERS.parent / "datasets")
    for command in commands[:2]:
        res = runner.invoke(app, command[1:])
        assert res.exit_code == 0, res.output
    base = OmegaConf.load(P(verl_config.__file__).parent / "_generated_ppo_trainer.yaml")
    OmegaConf.set_struct(base, True)
    config = OmegaConf.merge(base, OmegaConf.from_dotlist(commands[2][3:]))
    assert P(config.data.train_files).exists()
    fn = get_custom_reward_fn(config)
    outs, expected = expected_scores(tmp_path, "milo")
    data, tok = verl_batch(P(config.data.train_files), outs)
    got = NaiveRewardManager(tok, num_examine=0, compute_score=fn)(data)
    assert last_token_rewards(got) == f32(expected) and len(set(expected)) > 1


@pytest.mark.parametrize("case", ["milo", "chipstack", "math"])
def test_every_recorded_completion_in_every_shape_equals_rfteval_grade(case, tmp_path):
    """Every bundled recording of the case in every shape (tests/support/trainer_shapes.py; the thinking in the text, as
    verl decodes solution_str), through the legacy naive manager on the exported parquet: `rfteval grade`'s score
    (float32). verl's solution_str is one response (no two-turn shape)."""
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from tests.support.trainer_shapes import completions

    cases = completions(tmp_path, case)
    outs = [{"item_id": c.item_id, "output_text": c.text} for c in cases]
    data, tok = verl_batch(export(case, "verl", tmp_path / "verl"), outs)
    with for_verl(GRADERS / f"{case}.json") as compute_score:
        got = last_token_rewards(NaiveRewardManager(tok, num_examine=0, compute_score=compute_score)(data))
    wrong = [(c.item_id, c.shape, g, c.expected) for c, g in zip(cases, got) if g != f32([c.expected])[0]]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. {wrong[:3]}"
