"""sandbox/_worker.py, the sandbox's worker program (the script and its modules _child.py, _supervisor*.py,
_worker_protocol.py, ...), in this process: its scores and error types agree with rfteval's, it rebuilds samples
sent as text, its supervisor clears a unit's files and charges OOM kills, and the program loads with the standard
library alone."""

from __future__ import annotations

import contextlib
import marshal
import math
import os
from typing import Any

import pytest

from rfteval.data.sample import make_sample
from rfteval.graders.base import (
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    GradeError,
    checked_score,
)
from rfteval.sandbox import RESEND, _child, _supervisor, _supervisor_processes, _worker_protocol
from tests.support.sandbox_samples import TOOLS


@pytest.mark.parametrize("value", [1, 0, -3, 2.5, -0.0, 10 ** 400, math.nan, math.inf, -math.inf, True, False,
                                   "0.5", None, [1.0], 1 + 2j])
def test_worker_scores_agree_with_checked_score(value: object) -> None:
    ours = _child.as_score(value)
    try:
        theirs: float | GradeError | str = checked_score(value)
    except OverflowError:
        theirs = "overflow"
    if isinstance(theirs, float):
        assert ours == theirs
    else:
        assert isinstance(ours, tuple) and ours[0] == PYTHON_RUNTIME


def test_worker_error_types_match_base() -> None:
    assert (_worker_protocol.PYTHON_RUNTIME, _worker_protocol.PYTHON_TIMEOUT, _worker_protocol.PYTHON_MEMORY) == (
        PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY)


@pytest.mark.parametrize("sent, expected", [
    ("[1]", make_sample("[1]")),
    (("x", None, False), make_sample("x")),
    (("[1]", None, False), make_sample("[1]", output_json=None)),
    (("{}", marshal.dumps(TOOLS), True), make_sample("{}", TOOLS)),
])
def test_the_worker_rebuilds_plain_dicts(sent: object, expected: dict) -> None:
    rebuilt = _child.rebuild(sent)
    assert rebuilt == expected and type(rebuilt) is dict
    assert rebuilt["choices"][0]["message"]["content"] is rebuilt["output_text"]
    if rebuilt["output_tools"]:
        assert rebuilt["choices"][0]["message"]["tool_calls"] is rebuilt["output_tools"]


def test_the_worker_refuses_a_text_that_does_not_parse_there() -> None:
    with pytest.raises(ValueError):
        _child.rebuild("{not json")
    assert _child.undecodable(ValueError("x"), whole=False)[0] == RESEND
    assert _child.undecodable(MemoryError(), whole=True)[0] == PYTHON_MEMORY
    assert _worker_protocol.RESEND == RESEND and _worker_protocol.PYTHON_SERVER == PYTHON_SERVER


def supervisor(tmp_path: Any, **extra: Any) -> tuple[_supervisor.Supervisor, int]:
    """A supervisor outside any sandbox, replying on a pipe: (it, the pipe's read end)."""
    read_fd, write_fd = os.pipe()
    config = {"timeout_s": 5.0, "grace_s": 1.0, "stdout_cap": 1024, "workdir": str(tmp_path), **extra}
    return _supervisor.Supervisor(config, write_fd), read_fd


def frames(fd: int) -> list[bytes]:
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    out = []
    while data:
        (n,) = _worker_protocol.HEADER.unpack_from(data)
        out.append(data[8:8 + n])
        data = data[8 + n:]
    return out


def test_clearing_a_units_files_beats_as_it_goes(tmp_path: Any) -> None:
    for k in range(5):
        (tmp_path / f"f{k}").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "g").write_text("x")
    calls: list[int] = []
    _supervisor_processes.clear_directory(str(tmp_path), os.stat(tmp_path).st_dev, lambda: calls.append(1))
    assert not list(tmp_path.iterdir()) and len(calls) >= 7


def test_an_oom_kill_is_charged_to_the_results_read_after_it(tmp_path: Any) -> None:
    counter = tmp_path / "memory.oom_control"
    counter.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    sup, _ = supervisor(tmp_path, oom_file=str(counter))
    rows = [[1.0, None, None, "out"], [0.0, PYTHON_TIMEOUT, "slow", None]]
    assert sup.oom_kills() == 2 and sup.charge_oom([list(r) for r in rows]) == rows  # kills from before: not these
    counter.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    charged = sup.charge_oom([list(r) for r in rows])
    assert [r[1] for r in charged] == [PYTHON_MEMORY, PYTHON_MEMORY] and charged[0][3] == "out"
    assert sup.charge_oom([list(r) for r in rows]) == rows  # counted once
    assert supervisor(tmp_path)[0].charge_oom(rows) == rows  # no cgroup: nothing to charge


# the worker program's modules, which the script imports from its own copy of rfteval (_tool_unit.py only for a
# tools module, rfteval.data's modules only in the supervisor's start-up and a child)
WORKER_MODULES = ("_capture", "_child", "_preload", "_supervisor", "_supervisor_processes", "_supervisor_results",
                  "_supervisor_templates", "_template", "_worker_protocol")


@pytest.mark.slow
def test_the_worker_script_imports_the_standard_library_alone() -> None:
    """The supervisor runs `python -I _worker.py` under the user's interpreter, which may lack rfteval's packages:
    loading the script and its modules (their types exist for the checker only) must import nothing outside the
    standard library but those modules, and nothing of rfteval beyond them."""
    import subprocess
    import sys

    from rfteval.sandbox import WORKER_SCRIPT

    probe = ("import sys, runpy\n"
             "before = set(sys.modules)\n"
             f"runpy.run_path({str(WORKER_SCRIPT)!r}, run_name='rfteval_worker_probe')\n"
             "print(' '.join(sorted(set(sys.modules) - before)))\n")
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = done.stdout.split()
    assert "json" in loaded and "mmap" in loaded  # the probe saw the script's own imports
    ours = {m for m in loaded if m.split(".")[0] == "rfteval"}
    assert ours == {"rfteval", "rfteval.sandbox", *(f"rfteval.sandbox.{m}" for m in WORKER_MODULES)}
    assert [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names and m not in ours] == []
