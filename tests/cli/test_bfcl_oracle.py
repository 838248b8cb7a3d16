"""A real benchmark written by others as the oracle of `rfteval run --tools` (issue 37): BFCL's multi-turn base set.

Every entry of the set (200, bfcl-eval 2026.3.23), its first user turn, is converted into a dataset line with BFCL's
tools (tests/support/bfcl.py); its tools module runs BFCL's backends and its python grader BFCL's own
state-and-response checker, both in rfteval's sandbox. A scripted server plays BFCL's ground truth as tool calls
under two labels (one call per model turn, and all of them at once), and two perturbed players beside them: the last
call dropped, one argument changed. Then BFCL's checker, run outside rfteval on the transcripts rfteval wrote (the
records' `transcript`, with the entries and ground truth read again from BFCL's files), must agree with rfteval's
score on every record: 1 for the ground truth, 0 for a dropped call, 0 for a changed argument but where BFCL's
checker itself finds the changed call as good (bfcl.CHANGE_ARG_ACCEPTED).

What runs where (tests/README.md says it too): `make test` plays every entry, all 200 x 4 players, 800 rollouts
through one `rfteval run`; `make test-fast` leaves the oracle out (slow). RFTEVAL_BFCL_ITEMS=N plays N entries
spread evenly over the set instead (every player still plays each), for a quicker look while editing; unset or
`all`, every entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.support.optional import require

require("bfcl_eval", "bfcl")

from rfteval.cli.app import app  # noqa: E402
from tests.support import bfcl  # noqa: E402
from tests.support.fake_openai import FakeOpenAI  # noqa: E402

ITEMS = "RFTEVAL_BFCL_ITEMS"  # N: that many entries spread over the set; unset or "all": every entry
PLAYERS = {"base": bfcl.Player("steps"), "parallel": bfcl.Player("parallel"),
           "drop-last": bfcl.Player("steps", "drop_last"), "change-arg": bfcl.Player("steps", "change_arg")}


def records(out: Path, label: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in (out / f"{label}.jsonl").read_text(encoding="utf-8").splitlines()]
    return {record["item_id"]: record for record in lines}


def chosen(lines: list[dict[str, Any]], wanted: str) -> list[dict[str, Any]]:
    """The entries a run plays: all of them, or N spread evenly over the set (its categories of backends follow
    one another in BFCL's order, so a prefix would play few of them)."""
    if wanted.strip().lower() in ("", "all"):
        return lines
    if not wanted.strip().isdigit() or not 1 <= int(wanted) <= len(lines):
        raise pytest.UsageError(f"{ITEMS}={wanted!r}: give a number of entries from 1 to {len(lines)}, or all")
    n = int(wanted)
    return [lines[i * len(lines) // n] for i in range(n)]


def test_a_subset_is_spread_over_the_set() -> None:
    lines = [{"id": str(i)} for i in range(200)]
    assert chosen(lines, "all") is lines and chosen(lines, "") is lines
    assert [x["id"] for x in chosen(lines, "4")] == ["0", "50", "100", "150"]
    assert len(chosen(lines, "200")) == 200 and len({x["id"] for x in chosen(lines, "7")}) == 7
    for bad in ("0", "201", "ten"):
        with pytest.raises(pytest.UsageError, match=f"{ITEMS}='{bad}'"):
            chosen(lines, bad)


@pytest.mark.slow  # 800 rollouts, their tool turns and grades in the sandbox
def test_rfteval_scores_bfcl_as_bfcls_own_checker_does(tmp_path: Path) -> None:
    lines = chosen(bfcl.convert(), os.environ.get(ITEMS, "all"))
    dataset = bfcl.write_dataset(tmp_path / "bfcl.jsonl", lines)
    tools = bfcl.write_tools(tmp_path / "bfcl_tools.py", lines)
    out = tmp_path / "run"
    players = {f"bfcl-{label}": player for label, player in PLAYERS.items()}
    with FakeOpenAI(bfcl.responder(lines, players)).start() as server:
        res = CliRunner().invoke(app, [
            "run", "--dataset", str(dataset), "--grader", str(bfcl.GRADER), "--tools", str(tools),
            *(arg for label in PLAYERS for arg in ("--model", f"{label}=bfcl-{label}")), "--epochs", "1",
            "--base-url", server.base_url, "--out", str(out), "-q"], env={"OPENAI_API_KEY": "sk-bfcl-0001"})
    assert res.exit_code == 0, res.output
    assert check_records(out, lines) == len(lines) * len(PLAYERS)


def check_records(out: Path, lines: list[dict[str, Any]]) -> int:
    """rfteval's scores against BFCL's checker on the transcripts; each rollout's shape against its player's. The
    records on which the two agree (all of them, or an assertion fails first)."""
    every = {line["id"] for line in lines}
    agree = 0
    accepted = {"base": every, "parallel": every, "drop-last": set(), "change-arg": bfcl.CHANGE_ARG_ACCEPTED & every}
    by_id = {line["id"]: line for line in lines}
    for label, player in PLAYERS.items():
        graded = records(out, label)
        assert set(graded) == every, label
        assert all(record["score"] in (0.0, 1.0) and record["error"] is None for record in graded.values()), label
        assert {item for item, record in graded.items() if record["score"] == 1.0} == accepted[label], label
        outside = {item for item, record in graded.items()
                   if bfcl.bfcl_verdict(item, json.loads(record["transcript"]))["valid"]}
        assert outside == accepted[label], label  # BFCL's checker, outside rfteval, agrees on every item
        agree += sum((record["score"] == 1.0) == (item in outside) for item, record in graded.items())
        for item, record in graded.items():
            line = by_id[item]
            calls = player.calls(line)
            turns = 2 if player.grouping == "parallel" else len(calls) + 1
            assert (record["turns"], record["tool_calls"], record["stop_reason"]) == (
                turns, len(calls), "no_tool_calls"), (label, item)
            transcript = json.loads(record["transcript"])
            sent = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for m in transcript for c in m.get("tool_calls") or []]
            assert sent == calls, (label, item)
            if player.perturb is None:  # the tools ran as BFCL's own execution runs the ground truth
                shown = [m["content"] for m in transcript if m["role"] == "tool"]
                assert shown == bfcl.execute_steps(line["ground_truth"][0], line), (label, item)
            unknown = any(bfcl.UNKNOWN_ARGUMENT in arguments for _, arguments in sent)
            assert (record["tool_errors"] or {}) == ({"BadArguments": 1} if unknown else {}), (label, item)
    return agree
