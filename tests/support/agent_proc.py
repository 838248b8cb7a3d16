"""An agent run in a process of its own, for the kill and Ctrl-C tests (tests/cli/test_run_tools.py).

`python tests/support/agent_proc.py BASE_URL DIR HANG_AT` runs rfteval's run_eval on DIR's items.jsonl and
grader.json (results in DIR/run) with an in-process tool box (tests/support/toolboxes.py) whose one tool, `tick`,
counts its executions in DIR/calls.txt across processes and returns the count. At execution HANG_AT it writes
DIR/hanging and waits, so the test can kill the process in the middle of a tool turn; 0 never waits. Exits with the
run's exit code. A plain script beside fake_openai.py: it talks to the test's FakeOpenAI through the real client.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rfteval.run.runner import RunOptions, run_eval  # noqa: E402
from rfteval.run.spec import build_spec, flag_overrides  # noqa: E402
from tests.support.toolboxes import FunctionTools  # noqa: E402

MAX_TURNS = 10


def counting_tools(workdir: Path, hang_at: int) -> FunctionTools:
    counter = workdir / "calls.txt"

    async def tick(**_: Any) -> int:
        n = (int(counter.read_text()) if counter.exists() else 0) + 1
        counter.write_text(str(n))
        if n == hang_at:
            (workdir / "hanging").write_text("1")
            await asyncio.sleep(600)
        return n

    return FunctionTools({"tick": tick})


def main(argv: list[str]) -> int:
    base_url, workdir, hang_at = argv[0], Path(argv[1]), int(argv[2])
    spec = build_spec(None, flag_overrides(
        models=["base=fake-base"], dataset=str(workdir / "items.jsonl"), grader=str(workdir / "grader.json"),
        out=str(workdir / "run"), base_url=base_url, epochs=1, cwd=workdir,
        tools={"python": str(workdir / "tools.py"), "max_turns": MAX_TURNS}))
    result = run_eval(spec, None, RunOptions(backoff_base_s=0.01, checkpoint_s=0), tools=counting_tools(workdir, hang_at))
    return int(result.exit_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
