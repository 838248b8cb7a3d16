"""What the real-server tests share (tests/cli/test_real_server.py: llama.cpp's server; tests/cli/test_real_server_
transformers.py: `transformers serve`; tests/cli/test_real_server_agent.py): small datasets and graders, the records
and errors read back, the requests a server's access log counts, the API key's absence, and the kill-and-resume
check both servers go through."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from examples.rft_on_cpu.serve import ServerProcess
from tests.support.cli_run_files import RFTEVAL


def output_of(res: subprocess.CompletedProcess[str]) -> str:
    return res.stdout + res.stderr


def assert_one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, and the error is one `rfteval: ...` line, the last on stderr, holding every needle
    (notices such as a retry may come before it); returns that line."""
    assert res.returncode == 2, output_of(res)
    assert "Traceback" not in output_of(res), output_of(res)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert lines and lines[-1].startswith("rfteval:"), res.stderr
    for needle in needles:
        assert needle.lower() in lines[-1].lower(), lines[-1]
    return lines[-1]


def write_items(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in items))
    return path


def arithmetic_items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"add-{i}", "messages": [
        {"role": "system", "content": "You are a calculator. Answer with the number only."},
        {"role": "user", "content": f"What is {i + 2} plus {3 * i + 1}?"}], "reference_answer": str(4 * i + 3)}
        for i in range(n)]


def sentence_items(n: int) -> list[dict[str, Any]]:
    animals = ["cat", "dog", "owl", "fox", "whale", "horse", "crow", "bee", "frog", "goat", "lynx", "moth"]
    return [{"id": f"say-{i}", "messages": [{"role": "user", "content": f"Write one sentence about a {animals[i]}."}],
             "reference_answer": animals[i]} for i in range(n)]


def string_check(path: Path, operation: str = "like") -> Path:
    path.write_text(json.dumps({"type": "string_check", "name": "has-reference", "input": "{{ sample.output_text }}",
                                "reference": "{{ item.reference_answer }}", "operation": operation}))
    return path


DIGITS_SOURCE = ("def grade(sample, item) -> float:\n"
                 "    digits = ''.join(c for c in sample['output_text'] if c.isdigit())\n"
                 "    return 1.0 if digits == item['reference_answer'] else 0.0\n")


def digits_grader(path: Path) -> Path:
    """A python grader (run in the sandbox) scoring 1.0 when the output's digits are the reference's."""
    path.write_text(json.dumps({"type": "python", "name": "digits", "source": DIGITS_SOURCE}))
    return path


def digits_score(output_text: str, reference: str) -> float:
    """The digits grader's own rule, applied in this process to a stored answer."""
    return 1.0 if "".join(c for c in output_text if c.isdigit()) == reference else 0.0


def assert_secret_absent(secret: str, out: Path, *outputs: str) -> None:
    """The API key reached neither an output nor any file of the run directory `out`."""
    for text in outputs:
        assert secret not in text
    for f in out.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


def records(out: Path, label: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / f"{label}.jsonl").read_text().splitlines() if x.strip()]


def chat_posts(server: ServerProcess) -> int:
    """POST /v1/chat/completions lines in the server's access log so far (what the server was actually sent)."""
    return server.log.read_text(errors="replace").count("POST /v1/chat/completions")


def kill_mid_run_then_resume(server: ServerProcess, args: list[str], out: Path, label: str, cells: int,
                             secret: str) -> None:
    """`rfteval ARGS` (a run of `cells` cells against `server`, already started); the server SIGKILLed once 6
    answers are stored: the run notices across cells (not after every cell's retries), stops within seconds naming
    the refused connection, exit 3, no traceback; the server restarted on the same port, the same command resumes
    (stored answers not re-sent) and completes."""
    env = {**os.environ, "OPENAI_API_KEY": secret}
    proc = subprocess.Popen([*RFTEVAL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    store = out / "store" / "responses.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if store.exists() and len(store.read_text().splitlines()) >= 6:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before the server was killed"
    server.kill()
    try:
        stdout, stderr = proc.communicate(timeout=120)  # a guard: every cell's retries took about 4 minutes
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the run did not stop within 120 s of the server's death: a hang guard, not a timing check")
    assert proc.returncode == 3, stdout + stderr  # stopped, resumable
    assert "Traceback" not in stdout + stderr
    assert "refused" in (stdout + stderr).lower(), stdout + stderr
    # noticed across cells: a few attempts in a row could not connect, and the run stopped there; no cell spent its
    # retries and failed (a cell that did would be a connection error in the records)
    gone = re.search(r"the endpoint stopped answering: .* \((\d+) attempts in a row over", stderr)
    assert gone is not None and int(gone.group(1)) >= 3, stderr  # retry.DEAD_AFTER
    assert not [r for r in records(out, label) if (r["error"] or {}).get("type") == "connection"]
    answered = len(store.read_text().splitlines())

    server.start()
    posts = chat_posts(server)
    res = subprocess.run([*RFTEVAL, *args], capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, output_of(res)
    recs = records(out, label)
    assert len(recs) == cells and all(r["error"] is None for r in recs)
    resent = chat_posts(server) - posts
    assert resent <= cells - answered + 2, (resent, answered)  # +2: requests in flight at the kill
