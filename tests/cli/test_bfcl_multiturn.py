"""BFCL's multi-turn base set played WHOLE through `rfteval run --tools`: every user turn, the later ones as the
items' scripted follow-ups (`rfteval_followups`), checked by BFCL's own evaluation on the transcripts rfteval wrote.

Beside tests/cli/test_bfcl_oracle.py (the first user turn only), this plays each entry as BFCL's own inference does:
the first user turn, the model's steps until it answers without a tool call, then the next user turn on the same
backends, to the last (bfcl.convert(whole=True)). The tools module and the python grader are the oracle's: the
grader runs BFCL's multi_turn_checker over every turn in rfteval's sandbox. Four scripted players: BFCL's ground
truth one call per model turn (`base`), all of a user turn's calls at once (`parallel`), and two perturbed ones
changing the last user turn that has calls: its last call dropped, or one argument changed. BFCL's evaluation of a
multi-turn entry (eval_runner's _evaluate_single_multi_turn_entry: force-termination, decoding, then its checker),
run outside rfteval on each record's transcript split at its user messages, must agree with rfteval's score on
every record: 1 for the ground truth on every item; for the perturbed players, whatever BFCL says.

What runs where (tests/README.md says it too): `make test` plays DEFAULT_ITEMS entries spread evenly over the set
(every player plays each), to stay near half a minute on two busy cores; RFTEVAL_BFCL_ITEMS=all plays every entry,
all 200 x 4 players (800 rollouts, 734 user turns per player), and RFTEVAL_BFCL_ITEMS=N plays N, as the oracle's
switch does (there, unset means all); `make test-fast` leaves both out (slow).
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
from tests.cli.test_bfcl_oracle import ITEMS, chosen, records  # noqa: E402
from tests.support import bfcl  # noqa: E402
from tests.support.fake_openai import FakeOpenAI  # noqa: E402

DEFAULT_ITEMS = "40"  # spread over the set: every backend class and every number of user turns but the rarest
PLAYERS = {"base": bfcl.Player("steps"), "parallel": bfcl.Player("parallel"),
           "drop-last": bfcl.Player("steps", "drop_last"), "change-arg": bfcl.Player("steps", "change_arg")}


@pytest.mark.slow  # BFCL's files read and converted
def test_a_whole_line_plays_every_user_turn_of_its_entry() -> None:
    entries = {e["id"]: e for e in bfcl.bfcl_entries()[:3]}
    truth = bfcl.ground_truth()
    for line in bfcl.convert(3, whole=True):
        entry = entries[line["id"]]
        assert [line["messages"], *[[m] for m in line["rfteval_followups"]]] == entry["question"]
        assert line["ground_truth"] == truth[line["id"]] and len(line["ground_truth"]) == len(entry["question"])
    assert all("rfteval_followups" not in line for line in bfcl.convert(3))


@pytest.mark.slow  # DEFAULT_ITEMS x 4 players, every user turn: their tool turns and grades in the sandbox
def test_rfteval_scores_whole_bfcl_conversations_as_bfcls_own_evaluation_does(tmp_path: Path) -> None:
    lines = chosen(bfcl.convert(whole=True), os.environ.get(ITEMS, DEFAULT_ITEMS))
    dataset = bfcl.write_dataset(tmp_path / "bfcl.jsonl", lines)
    tools = bfcl.write_tools(tmp_path / "bfcl_tools.py", lines)
    out = tmp_path / "run"
    players = {f"bfcl-{label}": player for label, player in PLAYERS.items()}
    # the longest conversation's model turns: every call one turn, and each user turn's answer
    max_turns = max(sum(len(turn) + 1 for turn in line["ground_truth"]) for line in lines)
    with FakeOpenAI(bfcl.responder(lines, players)).start() as server:
        res = CliRunner().invoke(app, [
            "run", "--dataset", str(dataset), "--grader", str(bfcl.GRADER), "--tools", str(tools),
            *(arg for label in PLAYERS for arg in ("--model", f"{label}=bfcl-{label}")), "--epochs", "1",
            "--max-turns", str(max_turns), "--base-url", server.base_url, "--out", str(out), "-q"],
            env={"OPENAI_API_KEY": "sk-bfcl-0001"})
    assert res.exit_code == 0, res.output
    agreed, valid = check_records(out, lines)
    assert agreed == len(lines) * len(PLAYERS)
    assert valid["base"] == valid["parallel"] == len(lines)
    # a perturbed player is not the ground truth: BFCL fails most of its conversations (which ones is BFCL's say)
    assert valid["drop-last"] < len(lines) / 4 and valid["change-arg"] < len(lines) / 4, valid
    print(f"\nBFCL multi-turn base, whole, {len(lines)} entries: rfteval and BFCL's evaluation agree on {agreed} of "
          f"{len(lines) * len(PLAYERS)} rollouts; valid per player {valid}")


def check_records(out: Path, lines: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    """rfteval's scores against BFCL's evaluation on the transcripts, and each rollout's shape against its player's:
    the records on which the two agree (all, or an assertion fails first) and the items BFCL finds valid per
    player."""
    every = {line["id"] for line in lines}
    by_id = {line["id"]: line for line in lines}
    agreed, valid = 0, {}
    for label, player in PLAYERS.items():
        graded = records(out, label)
        assert set(graded) == every, label
        assert all(record["score"] in (0.0, 1.0) and record["error"] is None for record in graded.values()), label
        outside = {item for item, record in graded.items()
                   if bfcl.bfcl_verdict(item, json.loads(record["transcript"]), turns=None)["valid"]}
        scored = {item for item, record in graded.items() if record["score"] == 1.0}
        assert scored == outside, (label, sorted(scored ^ outside))  # BFCL's evaluation agrees on every item
        agreed += sum((item in scored) == (item in outside) for item in graded)
        valid[label] = len(outside)
        for item, record in graded.items():
            check_rollout(by_id[item], player, record, label)
    return agreed, valid


def check_rollout(line: dict[str, Any], player: bfcl.Player, record: dict[str, Any], label: str) -> None:
    """One record's rollout as its player played it: every user turn reached, in order, each answered."""
    item = line["id"]
    per_turn = [player.calls(line, user_turn) for user_turn in range(len(line["ground_truth"]))]
    calls = [call for turn in per_turn for call in turn]
    turns = sum((2 if turn else 1) if player.grouping == "parallel" else len(turn) + 1 for turn in per_turn)
    assert (record["turns"], record["tool_calls"], record["stop_reason"]) == (turns, len(calls), "no_tool_calls"), (
        label, item)
    transcript = json.loads(record["transcript"])
    assert [m for m in transcript if m["role"] == "user"] == line["rfteval_followups"], (label, item)
    sent = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in transcript for c in m.get("tool_calls") or []]
    assert sent == calls, (label, item)
    assert transcript[-1] == {"role": "assistant", "content": bfcl.FINAL_ANSWER}, (label, item)
    if player.perturb is None:  # the tools ran as BFCL's own execution runs the ground truth, across the turns
        shown = [m["content"] for m in transcript if m["role"] == "tool"]
        truth = [call for turn in line["ground_truth"] for call in turn]
        assert shown == bfcl.execute_steps(truth, line), (label, item)
    unknown = any(bfcl.UNKNOWN_ARGUMENT in arguments for _, arguments in sent)
    assert (record["tool_errors"] or {}) == ({"BadArguments": 1} if unknown else {}), (label, item)
