"""sandbox/turns.py: tool turns through real sandboxes (a unit per turn, forked from the module's template), and
how the rows that come back become one outcome per call. The calls' own semantics (state, item, errors of a call)
in this process: test__tool_unit.py; the tool box over this: tests/tools/test_python.py; attacks: test_attacks.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rfteval.sandbox import host
from rfteval.sandbox.turns import CallOutcome, ToolPool, TurnOutcome, turn_outcome
from tests.support.guard import hang_guard
from tests.support.optional import sandbox_refused

TIMEOUT_S = 2.0

TOOLS = '''
import os, signal, time

def add(x, *, state=None):
    state["n"] = state.get("n", 0) + x
    return state["n"]

def nap(seconds):
    time.sleep(seconds)
    return "awake"

def stubborn(seconds):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(seconds)

def hog():
    return len(bytearray(1 << 30))

def die():
    os._exit(3)

def tmp_file(name, *, state=None):
    found = os.path.exists(f"/tmp/{name}")
    with open(f"/tmp/{name}", "w") as fh:
        fh.write("left by an earlier unit")
    return found
'''


# ---------------------------------------------------------------- rows to outcomes (no sandbox)


def test_rows_become_one_outcome_per_call_and_the_state() -> None:
    rows = [(None, None, "4"), ("ValueError", "bad", None), (None, None, '{"n":4}')]
    assert turn_outcome(rows, ["add", "check"], 100, None) == TurnOutcome(
        [CallOutcome(None, "4"), CallOutcome("ValueError", "bad")], '{"n":4}')


def test_a_turn_ended_early_gives_the_calls_after_it_not_run_of_its_type() -> None:
    rows = [(None, None, "1"), ("ToolTimeout", "nap ran past the turn's 2 s time limit", None), (None, None, None)]
    outcome = turn_outcome(rows, ["add", "nap", "add", "add"], 100, None)
    assert [c.error for c in outcome.calls] == [None, "ToolTimeout", "ToolTimeout", "ToolTimeout"]
    assert outcome.calls[2].text == "not run: the turn ended with ToolTimeout in an earlier call (nap)"
    assert outcome.state is None


def test_a_sandbox_that_failed_charges_the_call_it_was_on() -> None:
    outcome = turn_outcome([(None, None, "1")], ["add", "nap", "add"], 100, ("ToolCrash", "the tool sandbox ended"))
    assert [(c.error, c.text[:8]) for c in outcome.calls] == [(None, "1"), ("ToolCrash", "the tool"),
                                                             ("ToolCrash", "not run:")]
    assert turn_outcome([], ["add"], 100, ("ToolTimeout", "silent")).calls == [CallOutcome("ToolTimeout", "silent")]


def test_a_module_that_did_not_load_fails_every_call() -> None:
    outcome = turn_outcome([("python_grader_runtime_error", "line 1: ImportError: no", None)], ["a", "b"], 100, None)
    assert outcome.load_error == ("python_grader_runtime_error", "line 1: ImportError: no")
    assert outcome.calls == [CallOutcome("ToolCrash", "the tools module did not load: line 1: ImportError: no")] * 2
    timed_out = turn_outcome([("python_grader_timeout_error", "slow import", None)], ["a"], 100, None)
    assert timed_out.calls[0].error == "ToolTimeout"


def test_rows_that_do_not_fit_the_calls_are_a_crash_not_results() -> None:
    rows = [(None, None, "1"), (None, None, "2"), (None, None, "3"), (None, None, None)]
    outcome = turn_outcome(rows, ["a", "b"], 100, None)
    assert [c.error for c in outcome.calls] == [None, None]  # the first rows stand; the extra is not believed
    assert outcome.state is None
    long = turn_outcome([(None, None, "z" * 1000), (None, None, None)], ["a"], 10, None)
    assert len(long.calls[0].text) <= 10 + 64  # the unit's cut, bounded again here


# ---------------------------------------------------------------- through the sandbox


@pytest.fixture(scope="module")
def pool() -> Iterator[ToolPool]:
    if (refused := host().refused) is not None:
        sandbox_refused(refused, host().bwrap is not None)
    with ToolPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=256) as p:
        yield p


def run(pool: ToolPool, calls: list[tuple[str, dict]], state: str = "{}", source: str = TOOLS) -> TurnOutcome:
    with hang_guard(120, "a tool turn"):
        return pool.turn(source, {"id": "q1"}, state, calls, 1000).result()


@pytest.mark.slow
def test_a_turn_runs_in_a_sandbox_and_its_state_comes_back(pool: ToolPool) -> None:
    first = run(pool, [("add", {"x": 2}), ("add", {"x": 3})])
    assert first.calls == [CallOutcome(None, "2"), CallOutcome(None, "5")] and json.loads(first.state or "") == {"n": 5}
    second = run(pool, [("add", {"x": 1})], first.state or "")
    assert second.calls == [CallOutcome(None, "6")]


@pytest.mark.slow
def test_a_call_past_the_time_limit_ends_the_turn_and_keeps_what_ran(pool: ToolPool) -> None:
    outcome = run(pool, [("add", {"x": 1}), ("nap", {"seconds": 30}), ("add", {"x": 1})])
    assert [c.error for c in outcome.calls] == [None, "ToolTimeout", "ToolTimeout"]
    assert "2 s time limit" in outcome.calls[1].text and outcome.calls[2].text.startswith("not run")
    assert json.loads(outcome.state or "") == {"n": 1}
    assert run(pool, [("add", {"x": 1})]).calls == [CallOutcome(None, "1")]  # the next turn runs as ever


@pytest.mark.slow
def test_a_call_that_blocks_the_alarm_is_killed_by_the_supervisors_clock(pool: ToolPool) -> None:
    outcome = run(pool, [("add", {"x": 1}), ("stubborn", {"seconds": 60})])
    assert [c.error for c in outcome.calls] == [None, "ToolTimeout"] and "did not stop" in outcome.calls[1].text
    assert outcome.state is None  # killed from outside: the turn's state is lost, the next turn gets the one before


@pytest.mark.slow
def test_memory_past_the_limit_is_tool_memory_and_ends_the_turn(pool: ToolPool) -> None:
    outcome = run(pool, [("hog", {}), ("add", {"x": 1})])
    assert [c.error for c in outcome.calls] == ["ToolMemory", "ToolMemory"], outcome
    assert "256 MB" in outcome.calls[0].text and outcome.calls[1].text.startswith("not run")


@pytest.mark.slow
def test_a_unit_that_dies_is_a_crash_of_its_call(pool: ToolPool) -> None:
    outcome = run(pool, [("add", {"x": 1}), ("die", {}), ("add", {"x": 1})])
    assert [c.error for c in outcome.calls] == [None, "ToolCrash", "ToolCrash"]
    assert "exited with code 3" in outcome.calls[1].text


@pytest.mark.slow
def test_nothing_a_unit_leaves_in_tmp_reaches_the_next_unit(pool: ToolPool) -> None:
    assert run(pool, [("tmp_file", {"name": "mark"}), ("tmp_file", {"name": "mark"})]).calls == [
        CallOutcome(None, "false"), CallOutcome(None, "true")]  # within a turn: one process, its own /tmp
    assert run(pool, [("tmp_file", {"name": "mark"})]).calls == [CallOutcome(None, "false")]


@pytest.mark.slow
def test_a_module_that_does_not_load_says_why_and_where(pool: ToolPool) -> None:
    source = "import os\n\nimport a_module_that_is_not_there\n"
    assert pool.load(source) == ("python_grader_runtime_error",
                                 "line 3: ModuleNotFoundError: No module named 'a_module_that_is_not_there'")
    assert pool.load(TOOLS) is None
    outcome = run(pool, [("add", {"x": 1})], source=source)
    assert outcome.calls[0].error == "ToolCrash" and "did not load" in outcome.calls[0].text


@pytest.mark.slow
def test_init_state_runs_in_the_sandbox(pool: ToolPool) -> None:
    source = "def init_state(item):\n    return {'for': item['id'], 'pid': __import__('os').getpid() > 1}\n"
    with hang_guard(120, "init_state"):
        outcome = pool.init_state(source, {"id": "q9"}).result()
    assert outcome.calls == [CallOutcome(None, "")] and json.loads(outcome.state or "") == {"for": "q9", "pid": True}


@pytest.mark.slow
def test_a_tools_module_and_a_grader_of_the_same_text_never_share_a_template(pool: ToolPool) -> None:
    source = "def grade(sample, item):\n    return 0.25\n"
    assert [r.score for r in pool.grade(source, [({"output_text": "x"}, {})])] == [0.25]
    assert run(pool, [("grade", {"sample": {}, "item": {}})], source=source).calls == [CallOutcome(None, "0.25")]
    assert [r.score for r in pool.grade(source, [({"output_text": "x"}, {})])] == [0.25]


@pytest.mark.slow
def test_without_a_template_each_unit_loads_the_module_itself() -> None:
    """Unsafe mode (no PID namespace) forks every unit from the supervisor, which loads the module in the unit."""
    with ToolPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=256, unsafe=True) as unsafe, hang_guard(120, "unsafe"):
        outcome = unsafe.turn(TOOLS, {}, "{}", [("add", {"x": 4}), ("nap", {"seconds": 30})], 100).result()
        assert [c.error for c in outcome.calls] == [None, "ToolTimeout"] and json.loads(outcome.state or "") == {"n": 4}
        assert unsafe.load("raise ValueError('at import')\n") == ("python_grader_runtime_error",
                                                                  "line 1: ValueError: at import")
