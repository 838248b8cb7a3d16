"""rfteval.compare.agent: two agent runs compared beyond their scores (effort rows paired by item, stop reasons, the
score by how rollouts ended), each figure derived here by hand; and the paired intervals checked by simulation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rfteval.compare.agent import FINISHED, ITEM_COLUMNS, compare_agents, effort_row, item_means, stop_share
from rfteval.compare.comparison import compare_sides
from rfteval.compare.paths import compare_paths
from rfteval.compare.result import CompareOptions
from rfteval.compare.sides import load_side
from rfteval.stats import paired as stats
from tests.support.agent_records import Rollout, agent_record, agent_side, write_agent, write_plain

FAILED = {"stage": "generate", "type": "timeout", "message": "gone"}


N = 10


def _pair(tmp_path: Path, suffix: str = "jsonl") -> tuple[Path, Path]:
    """Ten items; the baseline takes 4 turns (3 calls, one error) where the tuned agent takes 2 (1 call); the
    baseline's item q0 needs 3 epochs, so per-item means and pooled means differ."""
    base = {f"q{i}": [(1.0, Rollout(4, "no_tool_calls", 3, {"ValueError": 1})),
                      (0.0, Rollout(6, "max_turns", 5, {"ToolTimeout": 2}))] for i in range(N)}
    base["q0"] = base["q0"] + [(1.0, Rollout(1, "no_tool_calls", 0))]
    tuned = {f"q{i}": [(1.0, Rollout(2, "no_tool_calls", 1)), (1.0, Rollout(2, "no_tool_calls", 1))]
             for i in range(N)}
    return (write_agent(agent_side("base", base), tmp_path / f"base.{suffix}"),
            write_agent(agent_side("tuned", tuned), tmp_path / f"tuned.{suffix}"))


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_effort_rows_are_per_item_means_paired_by_item(tmp_path: Path, suffix: str) -> None:
    agent = compare_paths(*_pair(tmp_path, suffix)).agent
    assert agent is not None
    assert agent["rollouts"] == {"baseline": 2 * N + 1, "candidate": 2 * N}
    turns = agent["rows"]["turns"]
    # per item first: q0 is (4 + 6 + 1) / 3, the others (4 + 6) / 2; pooled over rollouts it would be 101 / 21
    base_items = [11 / 3] + [5.0] * (N - 1)
    assert turns["baseline"]["mean"] == pytest.approx(np.mean(base_items))
    assert turns["baseline"]["mean"] != pytest.approx(101 / 21)
    assert turns["candidate"]["mean"] == pytest.approx(2.0)
    d = np.array([2.0 - b for b in base_items])
    assert turns["delta"]["mean"] == pytest.approx(d.mean())
    assert turns["delta"]["ci95"] == pytest.approx(list(stats.t_interval(d)[2:]))
    assert turns["items"] == N and turns["verdict"] == "lower"
    calls = agent["rows"]["tool_calls"]
    assert calls["baseline"]["mean"] == pytest.approx(np.mean([8 / 3] + [4.0] * (N - 1)))
    # tool errors over tool calls per item: q0 (1 + 2) / (3 + 5 + 0), the others 3 / 8; the tuned agent had none
    share = agent["rows"]["tool_error_share"]
    assert share["baseline"]["mean"] == pytest.approx(3 / 8) and share["candidate"]["mean"] == 0.0
    # agent_side: 120 tokens and 1 s a turn
    assert agent["rows"]["tokens"]["candidate"]["mean"] == pytest.approx(240.0)
    assert agent["rows"]["latency_s"]["baseline"]["mean"] == pytest.approx(np.mean(base_items))
    assert agent["tool_errors"] == {"baseline": {"ToolTimeout": 2 * N, "ValueError": N}, "candidate": {}}


def test_more_is_never_called_better(tmp_path: Path) -> None:
    """The word is stats.direction's, as higher/lower; and the rows of a table are Holm-adjusted together."""
    agent = compare_paths(*_pair(tmp_path)).agent
    assert agent is not None
    words = {row["verdict"] for row in agent["rows"].values()} | {s["verdict"] for s in agent["stop_reasons"].values()}
    assert words <= {"higher", "lower", "no clear difference", "too few items to tell"}
    ps = [row["delta"]["p_value"] for row in agent["rows"].values()]
    assert [row["delta"]["p_adjusted"] for row in agent["rows"].values()] == pytest.approx(stats.holm(ps).tolist())


def test_stop_reasons_and_the_score_by_how_rollouts_ended(tmp_path: Path) -> None:
    agent = compare_paths(*_pair(tmp_path)).agent
    assert agent is not None
    stops = agent["stop_reasons"]
    assert list(stops) == ["no_tool_calls", "max_turns"]
    assert (stops["max_turns"]["baseline"], stops["max_turns"]["candidate"]) == pytest.approx((N / (2 * N + 1), 0.0))
    assert (stops["max_turns"]["baseline_rollouts"], stops["max_turns"]["candidate_rollouts"]) == (N, 0)
    # per item: q0's share is 1/3, the others 1/2; paired against 0
    assert stops["max_turns"]["delta"]["mean"] == pytest.approx(-np.mean([1 / 3] + [0.5] * (N - 1)))
    assert stop_share(agent, "max_turns") == (0.0, 2 * N)
    assert stop_share(agent, "max_turns", "baseline") == pytest.approx((N / (2 * N + 1), 2 * N + 1))
    assert stop_share(agent, "context") == (0.0, 2 * N)  # a reason no rollout ended with
    split = agent["score_by_stop"]
    assert split["baseline"]["finished"]["mean"] == 1.0 and split["baseline"]["finished"]["rollouts"] == N + 1
    assert split["baseline"]["limited"]["mean"] == 0.0 and split["baseline"]["limited"]["items"] == N
    assert split["candidate"]["limited"]["rollouts"] == 0 and math.isnan(split["candidate"]["limited"]["mean"])


def test_an_agent_that_wins_by_stopping_differently_is_named(tmp_path: Path) -> None:
    """The tuned agent scores higher only because its rollouts hit the turn limit, where a partial answer happens
    to be graded 1: the shares and the split show it, and a note says so."""
    n = 12
    base = {f"q{i}": [(0.0, Rollout(3, "no_tool_calls", 2)), (0.0, Rollout(3, "no_tool_calls", 2))] for i in range(n)}
    tuned = {f"q{i}": [(1.0, Rollout(10, "max_turns", 9)), (0.0, Rollout(3, "no_tool_calls", 2))] for i in range(n)}
    b = write_agent(agent_side("base", base), tmp_path / "b.jsonl")
    t = write_agent(agent_side("tuned", tuned), tmp_path / "t.jsonl")
    r = compare_paths(b, t)
    assert r.agent is not None and r.delta["mean"] == pytest.approx(0.5)
    assert r.agent["stop_reasons"][FINISHED]["verdict"] == "lower"
    assert r.agent["score_by_stop"]["candidate"]["finished"]["mean"] == 0.0
    assert r.agent["score_by_stop"]["candidate"]["limited"]["mean"] == 1.0
    assert any("stopping differently" in note for note in r.agent["notes"])


def test_cost_at_the_runs_prices(tmp_path: Path) -> None:
    b, t = _pair(tmp_path)
    base, cand = load_side(b), load_side(t)
    assert base.pricing is None  # no run directory here
    no_price = compare_sides(base, cand).agent
    assert no_price is not None and "cost_usd" not in no_price["rows"]
    assert any(n.startswith("cost: no price for m-base, m-tuned") for n in no_price["notes"])
    base.pricing = cand.pricing = {"m-base": {"input": 1.0, "output": 4.0}, "m-tuned": {"input": 2.0, "output": 8.0}}
    cost = compare_sides(base, cand).agent
    assert cost is not None
    # agent_side: a turn is 100 input and 20 output tokens; the tuned agent's 2 turns: 200 * 2 + 40 * 8 per million
    assert cost["rows"]["cost_usd"]["candidate"]["mean"] == pytest.approx((200 * 2 + 40 * 8) / 1e6)
    assert cost["rows"]["cost_usd"]["baseline"]["mean"] == pytest.approx(
        np.mean([(1100 / 3 * 1 + 220 / 3 * 4) / 1e6] + [(500 + 100 * 4) / 1e6] * (N - 1)))


def test_a_run_directorys_pricing_is_found(tmp_path: Path) -> None:
    b, t = _pair(tmp_path)
    (tmp_path / "spec.resolved.toml").write_text('[pricing."m-base"]\ninput = 1.0\noutput = 4.0\n\n'
                                                 '[pricing."m-tuned"]\ninput = 2.0\noutput = 8.0\n', encoding="utf-8")
    agent = compare_paths(b, t).agent
    assert agent is not None and "cost_usd" in agent["rows"]


def test_generation_failures_are_no_rollouts(tmp_path: Path) -> None:
    base = agent_side("b", {f"q{i}": [(1.0, Rollout(2))] for i in range(5)})
    base.append(agent_record("b", "q0", 1, None, Rollout(7, "max_turns", 6), error=FAILED))
    tuned = agent_side("t", {f"q{i}": [(1.0, Rollout(2))] for i in range(5)})
    agent = compare_paths(write_agent(base, tmp_path / "b.jsonl"), write_agent(tuned, tmp_path / "t.jsonl")).agent
    assert agent is not None and agent["rollouts"]["baseline"] == 5
    assert agent["rows"]["turns"]["baseline"]["mean"] == 2.0 and list(agent["stop_reasons"]) == [FINISHED]


def test_one_plain_side_gives_no_agent_comparison(tmp_path: Path) -> None:
    b, t = _pair(tmp_path)
    plain = write_plain(agent_side("tuned", {f"q{i}": [(1.0, Rollout(2))] for i in range(N)}), tmp_path / "p.jsonl")
    r = compare_paths(b, plain)
    assert r.agent is None and "agent" not in r.to_json(items=False)
    assert "only base's records are an agent run's (turns, stop_reason): no agent comparison" in r.notes
    assert compare_agents(load_side(plain), load_side(plain), *(pd.DataFrame(),) * 2, ["q0"], CompareOptions()) is None


def test_each_items_figures_are_in_the_per_item_table(tmp_path: Path) -> None:
    """What a viewer sorts and filters the items by: each side's turns and tool calls (means over the item's
    rollouts), its tool errors and its rollouts a limit stopped (counts), and the deltas; the JSON's rows unchanged."""
    r = compare_paths(*_pair(tmp_path))
    assert set(ITEM_COLUMNS) <= set(r.items.columns)
    q0 = r.items.set_index("item_id").loc["q0"]
    assert q0["baseline_turns"] == pytest.approx(11 / 3) and q0["candidate_turns"] == 2.0
    assert q0["delta_turns"] == pytest.approx(2.0 - 11 / 3) and q0["delta_tool_calls"] == pytest.approx(1.0 - 8 / 3)
    assert (q0["baseline_tool_errors"], q0["candidate_tool_errors"]) == (3.0, 0.0)
    assert (q0["baseline_limited"], q0["candidate_limited"]) == (1.0, 0.0)
    assert set(r.items_json()[0]) == {"item_id", "baseline", "candidate", "delta", "delta_ci95", "baseline_epochs",
                                      "candidate_epochs", "baseline_errors", "candidate_errors"}


def test_the_json_carries_it(tmp_path: Path) -> None:
    j = compare_paths(*_pair(tmp_path)).to_json(items=False)
    assert set(j["agent"]) == {"rollouts", "rows", "stop_reasons", "score_by_stop", "tool_errors", "notes"}
    assert set(j["agent"]["rows"]) == {"turns", "tool_calls", "tool_error_share", "tokens", "latency_s"}


# ---------------------------------------------------------------------------------------------- simulation


@pytest.mark.slow
@pytest.mark.parametrize("shift", [0.0, -1.0])
def test_the_turns_interval_covers_the_true_shift_at_its_nominal_rate(shift: float) -> None:
    """Items differ in how many turns they need (λ_i ~ 1 + Gamma(2, 1.5)); each epoch takes 1 + Poisson(λ_i) turns
    on the baseline and 1 + Poisson(λ_i + shift) on the candidate, so every item's true delta, and the mean over
    items, is `shift`. Through the effort row's own steps (each item's mean over its epochs, then the row paired by
    item), over 400 replicates of 60 items x 3 epochs, the 95% interval covers it in 92-98% of them (about 2.7
    standard errors of a 400-replicate rate either side of 95%); with no shift the row says higher or lower in at
    most 6%, with a shift of one turn in at least 90%."""
    rng = np.random.default_rng(37)
    o = CompareOptions()
    covered = claimed = 0
    replicates, n, k = 400, 60, 3
    ids = np.repeat([f"q{i}" for i in range(n)], k)
    for _ in range(replicates):
        lam = 1.0 + rng.gamma(2.0, 1.5, n)
        tb = 1 + rng.poisson(lam[:, None], (n, k))
        tc = 1 + rng.poisson((lam + shift)[:, None], (n, k))
        row = effort_row(item_means(ids, tb.ravel().astype(float)), item_means(ids, tc.ravel().astype(float)), o,
                         (0.0, np.inf))
        assert row is not None and row["items"] == n
        lo, hi = row["delta"]["ci95"]
        covered += lo <= shift <= hi
        claimed += stats.direction(row["delta"]) in ("better", "worse")
    assert 0.92 <= covered / replicates <= 0.98
    if shift == 0.0:
        assert claimed / replicates <= 0.06
    else:
        assert claimed / replicates >= 0.9


def test_the_score_split_is_cut_to_the_scores_range_as_the_score_table_is(tmp_path: Path) -> None:
    """Items near 1 with a few misses: the t interval of the finished rollouts' mean runs past 1 uncut."""
    n = 12
    base = {f"q{i}": [(1.0, Rollout(2, "no_tool_calls", 1))] * 3 for i in range(n)}
    base["q0"] = [(0.0, Rollout(2, "no_tool_calls", 1))] + base["q0"][1:]
    tuned = {f"q{i}": [(1.0, Rollout(2, "no_tool_calls", 1))] * 3 for i in range(n)}
    b = write_agent(agent_side("base", base), tmp_path / "b.jsonl")
    t = write_agent(agent_side("tuned", tuned), tmp_path / "t.jsonl")
    item_means = np.array([2 / 3] + [1.0] * (n - 1))
    uncut = stats.side_summary(item_means)["ci95"]
    assert uncut[1] > 1.0  # what the split printed before: [0.911, 1.033] in make demo
    r = compare_paths(b, t)
    assert r.agent is not None
    finished = r.agent["score_by_stop"]["baseline"]["finished"]
    assert finished["mean"] == pytest.approx(item_means.mean())
    assert finished["ci95"] == pytest.approx([uncut[0], 1.0])
