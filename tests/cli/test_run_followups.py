"""`rfteval run --tools` on items with scripted user turns (`rfteval_followups`), as a user runs it: a real tools.py
in the sandbox, the CLI in a process of its own, SIGKILLed while the answer to the second follow-up is under way,
then the same command again, which goes on from there: no turn before it sent again, no tool turn run again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rfteval.cli.app import app
from tests.support.cli_run_files import RFTEVAL
from tests.support.fake_openai import FakeOpenAI, Reply, Request
from tests.support.guard import hang_guard
from tests.support.optional import require_sandbox
from tests.support.toolboxes import ADD_TOOLS_PY, TOOLS_SCHEMA, adding_each_user_message

FIRST, SECOND = "now add 4 and 5", "and 6 and 7"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_run_killed_after_the_first_follow_up_resumes_there(tmp_path: Path) -> None:
    require_sandbox()
    dataset, grader, tools, out = (tmp_path / n for n in ("items.jsonl", "grader.json", "tools.py", "run"))
    dataset.write_text(json.dumps({"id": "q0", "messages": [{"role": "user", "content": "add 2 and 3"}],
                                   "tools": TOOLS_SCHEMA[:1], "reference_answer": "sum: 13",
                                   "rfteval_followups": [FIRST, {"role": "user", "content": SECOND}]}) + "\n")
    grader.write_text(json.dumps({"type": "string_check", "name": "exact", "input": "{{ sample.output_text }}",
                                  "reference": "{{ item.reference_answer }}", "operation": "eq"}))
    tools.write_text(ADD_TOOLS_PY)
    held, release = threading.Event(), threading.Event()

    def stalls_on_the_second_follow_up(request: Request) -> Reply:
        if SECOND in request.user_texts() and not release.is_set():
            held.set()
            release.wait(30)  # answered to no one: the run is killed meanwhile
        return adding_each_user_message(request)

    args = ["run", "--dataset", str(dataset), "--grader", str(grader), "--tools", str(tools), "--model",
            "base=fake-base", "--epochs", "1", "--out", str(out), "--quiet"]
    with FakeOpenAI(stalls_on_the_second_follow_up) as server, hang_guard(120, "a run with follow-ups"):
        env = {**os.environ, "NO_COLOR": "1", "OPENAI_API_KEY": "sk-fake-0001"}
        proc = subprocess.Popen([*RFTEVAL, *args, "--base-url", server.base_url], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        while not held.wait(0.05):
            assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        release.set()
        time.sleep(0.1)  # the stalled request is answered to no one
        before = [r.body["messages"] for r in server.requests_for("chat")]
        tool_turns = len(lines(out / "store" / "tools.jsonl"))
        assert (len(before), tool_turns) == (5, 2)  # four answered turns, two tool turns; the fifth cut
        server.reset()
        res = CliRunner().invoke(app, [*args, "--base-url", server.base_url], env={"OPENAI_API_KEY": "sk-fake-0001"})
        assert res.exit_code == 0, res.output
        resumed = [r.body["messages"] for r in server.requests_for("chat")]
    # the cut turn sent again (its history ends with the second follow-up), then its tool result's turn: nothing else
    assert [h[-1] for h in resumed] == [{"role": "user", "content": SECOND},
                                        {"role": "tool", "tool_call_id": "c5", "content": "13"}]
    assert resumed[0] == before[-1]  # the same request, the same key: the history holds both follow-ups
    assert len(lines(out / "store" / "tools.jsonl")) == tool_turns + 1  # only the last user turn's tool ran
    (rec,) = lines(out / "base.jsonl")
    assert (rec["score"], rec["turns"], rec["tool_calls"], rec["stop_reason"]) == (1.0, 6, 3, "no_tool_calls")
    users = [m["content"] for m in json.loads(rec["transcript"]) if m["role"] == "user"]
    assert users == [FIRST, SECOND]  # the follow-ups in the transcript, in order
