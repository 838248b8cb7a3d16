"""Every adapter survives pickle and grades in a fresh process (TRL's AsyncGRPOTrainer ships its rewards to another
process; verl and Ray pickle them to workers); the async forms are coroutine functions to inspect."""

from __future__ import annotations

import asyncio
import inspect
import json
import pickle
import subprocess
import sys
from typing import Any

import pytest

from rfteval.reward import for_openrlhf, for_trl, for_trl_async, for_verifiers, for_verl
from tests.support import REPO

GRADER = {"type": "python", "name": "len_or_ref", "source": (
    "def grade(sample, item):\n"
    "    return float(sample['output_text'] == str(item.get('reference_answer'))) + len(item) / 100\n")}
ITEM = {"id": "a", "messages": [{"role": "user", "content": "q"}], "reference_answer": "yes", "n": 1}

# (name, adapter factory, how it is called); the calls take plain data so the fresh process makes the same ones
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "trl": ("call", {"prompts": [ITEM["messages"]] * 2, "completions": ["yes", "no"],
                     "reference_answer": ["yes", "yes"], "n": [1, 1], "id": ["a", "a"]}),
    "trl_async": ("await", {"prompts": [ITEM["messages"]] * 2, "completions": ["yes", "no"],
                            "reference_answer": ["yes", "yes"], "n": [1, 1], "id": ["a", "a"]}),
    "verl": ("call", {"data_source": "d", "solution_str": "yes", "ground_truth": "yes",
                      "extra_info": {"id": "a", "n": 1}}),
    "verl_batch": ("call", {"data_sources": ["d", "d"], "solution_strs": ["yes", "no"], "ground_truths": ["yes"] * 2,
                            "extra_infos": [{"id": "a"}, {"id": "a"}]}),
    "verl_async": ("await", {"data_source": "d", "solution_str": "no", "ground_truth": "yes", "extra_info": {}}),
    "verifiers": ("await", {"completion": [{"role": "assistant", "content": "yes"}], "answer": "yes",
                            "info": {"id": "a"}, "prompt": ITEM["messages"]}),
    "openrlhf": ("call", {"queries": ["q yes", "q no"], "prompts": ["q ", "q "], "labels": ["yes", "yes"]}),
}


def adapters() -> dict[str, Any]:
    return {"trl": for_trl(GRADER), "trl_async": for_trl_async(GRADER), "verl": for_verl(GRADER),
            "verl_batch": for_verl(GRADER, batch=True), "verl_async": for_verl(GRADER, asynchronous=True),
            "verifiers": for_verifiers(GRADER), "openrlhf": for_openrlhf(GRADER)}


def run_call(fn: Any, how: str, kwargs: dict[str, Any]) -> Any:
    out = asyncio.run(fn(**kwargs)) if how == "await" else fn(**kwargs)
    if isinstance(out, dict):  # OpenRLHF's tensors
        out = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in out.items() if k != "extra_logs"}
    return out


CHILD = """
import asyncio, json, pickle, sys
sys.path.insert(0, sys.argv[2])
from tests.reward.test_adapters_pickle import CALLS, run_call
fns = pickle.loads(open(sys.argv[1], "rb").read())
print(json.dumps({name: run_call(fns[name], *CALLS[name]) for name in CALLS}))
"""


def close_all(fns: dict[str, Any]) -> None:
    for fn in fns.values():
        (fn.args[0] if hasattr(fn, "args") else fn).close()


@pytest.mark.slow
def test_every_adapter_pickles_and_grades_in_a_fresh_process(tmp_path):
    fns = adapters()
    try:
        here = {name: run_call(fns[name], *CALLS[name]) for name in CALLS}
        path = tmp_path / "rewards.pickle"
        path.write_bytes(pickle.dumps(fns))
    finally:
        close_all(fns)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(REPO)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == json.loads(json.dumps(here))
    assert here["trl"] == [1.04, 0.04]  # the item is the line (id, messages, reference_answer, n): 4 keys
    assert here["verl_batch"] == [1.02, 0.02]  # extra_info's id and reference_answer


def test_async_forms_are_coroutine_functions_and_sync_ones_are_not():
    fns = adapters()
    try:
        assert {name for name, fn in fns.items() if inspect.iscoroutinefunction(fn)} == \
            {"trl_async", "verl_async", "verifiers"}
    finally:
        close_all(fns)
