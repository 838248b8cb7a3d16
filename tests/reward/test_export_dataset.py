"""HF datasets' `load_dataset("json")`, the loader every TRL example uses, on every bundled dataset: what it does
to the items (timestamps, null padding) and that rewards are exact all the same, through items= or a dataset
written by `rfteval export-dataset`. TRL's calling convention is re-created here (no torch needed); the same is
run through TRL's own GRPOTrainer in tests/reward/test_trl.py."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from rfteval.reward import for_trl
from tests.support.optional import require
from tests.support.trainer_cases import DATASETS, GRADERS, LOCAL_CASES, expected_scores, export, hf_json, items

datasets = require("datasets", "setup")  # the dev extra


def trl_call(reward: Any, rows: list[dict[str, Any]], texts: list[str]) -> list[Any]:
    """GRPOTrainer._calculate_rewards' call: every column but prompt, one value per completion."""
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    return reward(prompts=[r["prompt"] for r in rows], completions=[[{"role": "assistant", "content": t}] for t in texts],
                  completion_ids=[[0]] * len(rows), trainer_state=None, **{k: [r[k] for r in rows] for k in keys})


def rewards_through(reward: Any, ds: Any, outs: list[dict[str, Any]], id_of: Any) -> list[Any]:
    by_id = {id_of(row): row for row in ds}
    return trl_call(reward, [by_id[o["item_id"]] for o in outs], [o["output_text"] for o in outs])


CASES = [LOCAL_CASES[0], *(pytest.param(c, marks=pytest.mark.slow) for c in LOCAL_CASES[1:])]


@pytest.mark.parametrize("case", CASES)
def test_export_dataset_then_load_dataset_json_scores_as_grade(case, tmp_path):
    outs, expected = expected_scores(tmp_path, case)
    ds = hf_json(export(case, "trl", tmp_path / "trl"), tmp_path)
    with for_trl(GRADERS / f"{case}.json") as reward:
        got = rewards_through(reward, ds, outs, lambda row: row["id"])
    assert got == expected
    assert len(set(expected)) > 1


@pytest.mark.parametrize("case", CASES)
def test_raw_jsonl_through_load_dataset_json_with_items_scores_as_grade(case, tmp_path):
    outs, expected = expected_scores(tmp_path, case)
    path = DATASETS / case / "items.jsonl"
    ds = hf_json(path, tmp_path).rename_column("messages", "prompt")
    with for_trl(GRADERS / f"{case}.json", items=str(path)) as reward:
        got = rewards_through(reward, ds, outs, lambda row: row["id"])
    assert got == expected


@pytest.mark.slow
def test_milo_without_items_is_warned_about_naming_the_column(tmp_path, caplog):
    """Arrow turns Milo's "today": "2025-03-14" into a timestamp: the loader changed the item, and it says so."""
    path = DATASETS / "milo" / "items.jsonl"
    ds = hf_json(path, tmp_path).rename_column("messages", "prompt")
    import datetime

    assert isinstance(ds[0]["today"], datetime.datetime)  # what the loader does (the first finding)
    caplog.set_level(logging.WARNING, logger="rfteval.reward")
    outs, _ = expected_scores(tmp_path, "milo")
    with for_trl(GRADERS / "milo.json") as reward:
        rewards_through(reward, ds, outs, lambda row: row["id"])
        rewards_through(reward, ds, outs, lambda row: row["id"])
    warned = [r.getMessage() for r in caplog.records if "items=" in r.getMessage()]
    assert any("'today'" in m and "timestamp" in m for m in warned), warned
    assert len([m for m in warned if "'today'" in m and "timestamp" in m]) == 1  # once per column


def test_plain_columns_are_turned_back_exactly():
    """numpy and Arrow scalars (parquet-backed datasets) are exact: no warning, the JSON value."""
    import numpy as np
    import pyarrow as pa

    from rfteval.reward import plain_data

    assert plain_data({"a": np.int64(3), "b": np.array([1.5, 2.0]), "c": pa.scalar("x"), "d": (1, 2)}) == \
        {"a": 3, "b": [1.5, 2.0], "c": "x", "d": [1, 2]}


def test_exported_rows_keep_every_field_exactly(tmp_path):
    """The loader-changed fields are JSON text in the file and the original line comes back from the row."""
    from rfteval.reward import META, decode_exported

    ds = hf_json(export("milo", "trl", tmp_path / "trl"), tmp_path)
    meta = json.loads(ds[0][META])
    assert "today" in meta["json"] and isinstance(ds[0]["today"], str)
    originals = {it["id"]: it for it in items("milo")}
    for row in ds:
        line = decode_exported({k: v for k, v in row.items() if k != "prompt"}, row["prompt"])
        assert line is not None
        assert json.dumps(line) == json.dumps(originals[row["id"]])  # key order too
