"""The python worker pool: every way a grader can misbehave costs only its own sample; limits really hold (the wire,
the policy and the worker program in this process: test_wire.py, test_policy.py, test__worker.py)."""

from __future__ import annotations

import json
import marshal
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rfteval.data.sample import make_sample
from rfteval.graders.base import (
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_TIMEOUT,
)
from rfteval.sandbox import (
    STDOUT_CAP,
    UNSAFE_ENV,
    Host,
    SandboxPolicy,
    SandboxUnavailable,
    WorkerPool,
    _preload,
    compact_sample,
    encode,
    encode_whole,
    group_units,
    host,
    host_probe,
    worker_env,
)
from rfteval.sandbox.pool import _Sandbox
from tests.support.optional import sandbox_refused
from tests.support.sandbox_samples import TEXTS, TOOLS, compact_pairs

TIMEOUT_S = 2.0

# One source with a misbehaviour per sample["k"]; a plain sample scores item["v"].
MISBEHAVING = r'''
import math, os, signal, sys

def grade(sample, item):
    k = sample.get("k")
    if k == "loop":
        while True:
            pass
    if k == "swallow":                      # catches the timeout and keeps looping: only the watchdog helps
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
    if k == "blocked":                      # the alarm cannot be delivered at all
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        while True:
            pass
    if k == "memory":
        return float(len(bytearray(10 * 1024 ** 3)))
    if k == "exit":
        sys.exit(3)
    if k == "os_exit":
        os._exit(7)
    if k == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if k == "segfault":
        import ctypes
        ctypes.string_at(0)
    if k == "print_a_lot":
        for i in range(200_000):
            print("line", i)
        return 0.5
    if k == "abc":
        return "abc"
    if k == "nan":
        return math.nan
    if k == "inf":
        return math.inf
    if k == "bool":
        return True
    if k == "raise":
        raise ValueError("bad reference " + item["id"])
    return item["v"]
'''


@pytest.fixture(scope="module")
def pool1() -> Iterator[WorkerPool]:
    """One worker: a whole batch lands on the same process."""
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S) as pool:
        yield pool


@pytest.fixture(scope="module")
def pool2() -> Iterator[WorkerPool]:
    with WorkerPool(workers=2, timeout_s=TIMEOUT_S) as pool:
        yield pool


def batch_around(kind: str) -> list[tuple[dict, dict]]:
    """Good samples before and after the bad one, with distinct expected scores."""
    values = [0.1, 0.2, 0.3, None, 0.4, 0.5, 0.6]
    return [({"k": kind if v is None else "ok"}, {"id": f"i{n}", "v": v if v is not None else 0.9})
            for n, v in enumerate(values)]


BAD_SAMPLES = [
    ("loop", PYTHON_TIMEOUT, "time limit"),
    ("swallow", PYTHON_TIMEOUT, "killed"),
    ("blocked", PYTHON_TIMEOUT, "killed"),
    ("memory", PYTHON_MEMORY, "2048 MB"),
    ("exit", PYTHON_RUNTIME, "sys.exit(3)"),
    ("os_exit", PYTHON_RUNTIME, "exited with code 7"),
    ("segfault", PYTHON_RUNTIME, "SIGSEGV"),
    ("killed", PYTHON_RUNTIME, "killed by SIGKILL"),
    ("abc", PYTHON_RUNTIME, "not a number"),
    ("nan", PYTHON_RUNTIME, "not a finite number"),
    ("inf", PYTHON_RUNTIME, "not a finite number"),
    ("bool", PYTHON_RUNTIME, "not a number"),
    ("raise", PYTHON_RUNTIME, "ValueError: bad reference i3"),
]
ERROR_OF = {kind: etype for kind, etype, _ in BAD_SAMPLES}  # the error each misbehaviour is


@pytest.mark.parametrize("kind, etype, words", BAD_SAMPLES)
@pytest.mark.slow
def test_a_bad_sample_fails_alone(pool1: WorkerPool, kind: str, etype: str, words: str) -> None:
    results = pool1.grade(MISBEHAVING, batch_around(kind))
    bad = results[3]
    assert bad.score == 0.0
    assert bad.error is not None and bad.error.type == etype, bad.error
    assert words in bad.error.message
    good = [r for n, r in enumerate(results) if n != 3]
    assert [r.error for r in good] == [None] * 6
    assert [r.score for r in good] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


@pytest.mark.slow
def test_a_numpy_score_is_checked_in_the_sandbox_as_in_rfteval(pool1: WorkerPool) -> None:
    """A value that is not a plain float goes through data.grades.checked_score, imported inside the sandbox."""
    source = "import numpy\ndef grade(sample, item):\n    return numpy.float32(item['v'])\n"
    results = pool1.grade(source, [({}, {"v": 0.75}), ({}, {"v": float("nan")})])
    assert (results[0].score, results[0].error) == (0.75, None)
    assert results[1].error is not None and "nan, not a finite number" in results[1].error.message


@pytest.mark.slow
def test_printing_a_lot_is_not_an_error_and_costs_no_one_else(pool1: WorkerPool) -> None:
    results = pool1.grade(MISBEHAVING, batch_around("print_a_lot"))
    assert [r.error for r in results] == [None] * 7
    assert [r.score for r in results] == [0.1, 0.2, 0.3, 0.5, 0.4, 0.5, 0.6]
    assert results[3].stdout.endswith("[rfteval: output truncated at 64 KB]")
    assert [r.stdout for n, r in enumerate(results) if n != 3] == [None] * 6


@pytest.mark.slow
def test_crashes_across_many_batches_keep_every_other_result_in_order(pool2: WorkerPool) -> None:
    """Batches are sent ahead while others run: a crash must not lose or shuffle a neighbour's result."""
    kinds = {37: "os_exit", 300: "raise", 301: "segfault", 777: "abc", 1500: "os_exit", 1999: "killed"}
    pairs = [({"k": kinds.get(n, "ok")}, {"id": f"i{n}", "v": n / 2000}) for n in range(2000)]
    results = pool2.grade(MISBEHAVING, pairs)
    assert len(results) == 2000
    for n, result in enumerate(results):
        if n in kinds:
            assert result.error is not None and (result.error.type, result.score) == (ERROR_OF[kinds[n]], 0.0), n
        else:
            assert result.error is None and result.score == n / 2000, n


@pytest.mark.slow
def test_a_batch_after_a_crash_is_graded_by_a_fresh_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[int] = []
    send = _Sandbox.send
    monkeypatch.setattr(_Sandbox, "send", lambda self, payload: (
        sent.append(len(payload)) if marshal.loads(payload)[0] == "grade" else None, send(self, payload))[1])
    kinds = {1: "os_exit", 6: "killed", 9: "raise"}
    pairs = [({"k": kinds.get(n, "ok")}, {"id": f"i{n}", "v": n / 16}) for n in range(16)]
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S, batch_size=4) as pool:
        results = pool.grade(MISBEHAVING, pairs)
    assert [r.error and r.error.type for r in results] == [ERROR_OF.get(kinds.get(n, "")) for n in range(16)]
    assert [r.score for r in results] == [0.0 if n in kinds else n / 16 for n in range(16)]
    assert len(sent) == 4  # a crash costs its child, not the supervisor: no batch is sent twice


def test_traceback_is_trimmed_to_the_graders_frames(pool1: WorkerPool) -> None:
    (result,) = pool1.grade(MISBEHAVING, [({"k": "raise"}, {"id": "x", "v": 0})])
    message = result.error.message
    assert message.startswith("grade() raised ValueError: bad reference x")
    line = next(n for n, text in enumerate(MISBEHAVING.splitlines(), 1) if "raise ValueError" in text)
    assert "Traceback" in message and f"line {line}, in grade" in message
    assert 'raise ValueError("bad reference " + item["id"])' in message  # the source line is shown
    assert "_worker.py" not in message and "_child.py" not in message  # the worker's own frames are not the user's


def test_a_crash_reports_what_the_process_printed(pool1: WorkerPool) -> None:
    (result,) = pool1.grade(MISBEHAVING, [({"k": "segfault"}, {"id": "x", "v": 0})])
    assert "Segmentation fault" in (result.stdout or "")  # faulthandler's dump, from the capture file


@pytest.mark.slow
def test_output_is_captured_per_sample_and_capped(pool1: WorkerPool) -> None:
    source = (
        "import os, sys\n"
        "def grade(sample, item):\n"
        "    if sample['k'] == 'lots':\n"
        "        for i in range(200_000):\n"
        "            print('line', i)\n"
        "    elif sample['k'] == 'some':\n"
        "        print('to stdout')\n"
        "        print('to stderr', file=sys.stderr)\n"
        "        os.write(1, b'from fd 1\\n')\n"
        "    return 1.0\n"
    )
    lots, some, quiet = pool1.grade(source, [({"k": "lots"}, {}), ({"k": "some"}, {}), ({"k": "none"}, {})])
    assert lots.error is None and lots.score == 1.0
    assert lots.stdout.startswith("line 0\nline 1\n")
    assert lots.stdout.endswith("[rfteval: output truncated at 64 KB]")
    assert len(lots.stdout.encode()) <= STDOUT_CAP + 100
    assert some.stdout == "to stdout\nto stderr\nfrom fd 1\n"  # in order, Python and C level alike
    assert quiet.stdout is None


def test_fd_level_output_goes_with_its_own_call_and_is_never_lost(pool1: WorkerPool) -> None:
    source = (
        "import os\n"
        "def grade(sample, item):\n"
        "    if sample['k'] == 'fd':\n"
        "        os.write(2, b'to fd 2\\n')\n"
        "    elif sample['k'] == 'binary':\n"
        "        os.write(1, b'\\xff\\x00binary')  # begins with the byte the per-call look watches for\n"
        "    return 1.0\n"
    )
    kinds = ["none", "fd", "none", "fd", "fd", "none"]
    results = pool1.grade(source, [({"k": k}, {}) for k in kinds])
    assert [r.stdout for r in results] == [None, "to fd 2\n", None, "to fd 2\n", "to fd 2\n", None]
    # binary output goes with its own call too (every call's output is read from the file it went to)
    results = pool1.grade(source, [({"k": k}, {}) for k in ["none", "binary", "none"]])
    assert [r.stdout for r in results] == [None, "\ufffd\x00binary", None]
    (after,) = pool1.grade(source, [({"k": "none"}, {})])
    assert after.stdout is None  # and the file is clean again


def test_fd_level_output_is_capped_and_kept_when_the_call_dies(pool1: WorkerPool) -> None:
    source = (
        "import os\n"
        "def grade(sample, item):\n"
        "    if sample['k'] == 'lots':\n"
        "        os.write(1, b'x' * 200_000)\n"
        "    elif sample['k'] == 'die':\n"
        "        os.write(2, b'last words\\n')\n"
        "        os._exit(3)\n"
        "    return 1.0\n"
    )
    lots, die, after = pool1.grade(source, [({"k": "lots"}, {}), ({"k": "die"}, {}), ({"k": "ok"}, {})])
    assert lots.error is None and lots.stdout.startswith("x" * 1000)
    assert lots.stdout.endswith("[rfteval: output truncated at 64 KB]")
    assert die.error.type == PYTHON_RUNTIME and die.stdout == "last words\n"
    assert after.error is None and after.stdout is None


@pytest.mark.slow
def test_a_reply_msgspec_cannot_write_goes_as_escaped_json(pool1: WorkerPool) -> None:
    source = ("class Odd:\n"
              "    def __repr__(self):\n"
              "        return 'odd\\ud800repr'  # a lone surrogate, which the error message quotes\n"
              "def grade(sample, item):\n"
              "    return 1.0 if sample['k'] == 'ok' else Odd()\n")
    ok, odd = pool1.grade(source, [({"k": "ok"}, {}), ({"k": "odd"}, {})])
    assert ok.error is None and ok.score == 1.0
    assert odd.error.type == PYTHON_RUNTIME and "odd\ud800repr" in odd.error.message


@pytest.mark.slow
def test_what_a_dying_or_stuck_call_printed_is_kept(pool1: WorkerPool) -> None:
    source = (
        "import os, signal\n"
        "def grade(sample, item):\n"
        "    print('reached step', sample['k'])\n"
        "    if sample['k'] == 'die':\n"
        "        os._exit(5)\n"
        "    if sample['k'] == 'hang':\n"
        "        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "        while True:\n"
        "            pass\n"
        "    return 1.0\n"
    )
    die, hang, fine = pool1.grade(source, [({"k": "die"}, {}), ({"k": "hang"}, {}), ({"k": "ok"}, {})])
    assert die.error.type == PYTHON_RUNTIME and die.stdout == "reached step die\n"
    assert hang.error.type == PYTHON_TIMEOUT and hang.stdout == "reached step hang\n"
    assert fine.error is None and fine.stdout == "reached step ok\n"


def test_bytes_and_file_descriptor_writes_are_captured(pool1: WorkerPool) -> None:
    source = (
        "import os, sys\n"
        "def grade(sample, item):\n"
        "    sys.stdout.buffer.write(b'bytes\\n')\n"
        "    os.write(sys.stderr.fileno(), b'fd\\n')\n"
        "    os.system('echo from a child process')\n"
        "    return 1.0\n"
    )
    (result,) = pool1.grade(source, [({}, {})])
    assert result.error is None
    assert result.stdout == "bytes\nfd\nfrom a child process\n"


def test_every_unit_gets_a_fresh_process_and_never_the_rfteval_process(pool2: WorkerPool) -> None:
    source = "import os\ndef grade(sample, item):\n    return float(os.getpid())\n"
    results = pool2.grade(source, [({}, {})] * 20)  # no units declared: every sample is its own unit
    pids = [int(r.score) for r in results]
    assert all(r.error is None for r in results)
    assert os.getpid() not in pids and not set(pids) & set(pool2.pids)  # never rfteval, never the supervisor
    # each sandbox has its own PID namespace, so two sandboxes can hand out the same pid: a token drawn by a
    # process's first call tells processes apart instead (random is reseeded in every forked process)
    token = ("import random\nTOKEN = []\ndef grade(sample, item):\n    if not TOKEN:\n"
             "        TOKEN.append(random.random())\n    return TOKEN[0]\n")
    items = [{"id": n} for n in range(4)]
    declared = pool2.grade(token, [({}, items[k % 4]) for k in range(20)], units=[k % 4 for k in range(20)])
    by_unit = {n: {r.score for k, r in enumerate(declared) if k % 4 == n} for n in range(4)}
    assert all(len(p) == 1 for p in by_unit.values()) and len({p.pop() for p in by_unit.values()}) == 4


def test_module_state_does_not_survive_from_one_unit_to_the_next(pool1: WorkerPool) -> None:
    source = "CALLS = []\ndef grade(sample, item):\n    CALLS.append(1)\n    return float(len(CALLS))\n"
    item = {"id": 1}
    first = [r.score for r in pool1.grade(source, [({}, item)] * 3, units=["a"] * 3)]
    second = [r.score for r in pool1.grade(source, [({}, item)] * 2, units=["a"] * 2)]
    separate = [r.score for r in pool1.grade(source, [({}, item)] * 3)]
    assert first == [1.0, 2.0, 3.0]  # one unit: one process, the source loaded once
    assert second == [1.0, 2.0]  # the next unit starts from the template, not from what the last one left
    assert separate == [1.0, 1.0, 1.0]


def test_network_is_cut(pool2: WorkerPool) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the socket is reachable from here, so a failure in the worker is the namespace's doing
        if (found := host()).refused is not None:
            sandbox_refused(found.refused, found.bwrap is not None)
        assert pool2.isolation.startswith("bubblewrap"), pool2.isolation
        source = (
            "import socket\n"
            "def grade(sample, item):\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
            "    return 1.0\n"
        )
        (result,) = pool2.grade(source, [({}, {})])
        assert result.error is not None and result.error.type == PYTHON_RUNTIME
        assert any(w in result.error.message for w in ("OSError", "unreachable", "Connection refused"))
    finally:
        listener.close()


@pytest.mark.slow
def test_isolation_is_reported() -> None:
    with WorkerPool(workers=1, unsafe=True) as pool:
        text = pool.isolation
    assert text.startswith(("bubblewrap: user, PID, mount, network and IPC namespaces", "unsafe: no sandbox ("))


@pytest.mark.slow
def test_pools_of_different_policies_in_one_process_are_independent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of a policy is set for the process: a variable one pool keeps from its grader reaches the grader
    of the pool beside it, and where the sandbox cannot be built a safe pool refuses while an unsafe one grades."""
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    monkeypatch.setenv("LC_SECRET", "beside")  # on the allow-list by its prefix
    sees = "import os\ndef grade(sample, item):\n    return float(os.environ.get('LC_SECRET') == 'beside')\n"
    with WorkerPool(workers=1, policy=SandboxPolicy(never_pass=frozenset({"LC_SECRET"}))) as keeps, \
            WorkerPool(workers=1) as passes:
        assert [r.score for r in keeps.grade(sees, [({}, {})])] == [0.0]
        assert [r.score for r in passes.grade(sees, [({}, {})])] == [1.0]
        assert [r.score for r in keeps.grade(sees, [({}, {})])] == [0.0]
    monkeypatch.setattr(host_probe, "_HOST", Host(None, False, "no sandbox in this test"))
    half = "def grade(sample, item):\n    return 0.5\n"
    with WorkerPool(workers=1, memory_mb=300, unsafe=True) as unsafe, WorkerPool(workers=1) as safe:
        assert [r.score for r in unsafe.grade(half, [({}, {})])] == [0.5]
        with pytest.raises(SandboxUnavailable, match="no sandbox in this test; or pass --unsafe-python-graders"):
            safe.grade(half, [({}, {})])
        assert [r.score for r in unsafe.grade(half, [({}, {})])] == [0.5]
        assert (unsafe.policy.unsafe, safe.policy.unsafe) == (True, False)


@pytest.mark.slow
def test_calls_from_two_threads_at_once(pool2: WorkerPool) -> None:
    double = "def grade(sample, item):\n    return item['v'] * 2\n"
    square = "def grade(sample, item):\n    return item['v'] ** 2\n"
    values = [i / 100 for i in range(100)]
    out: dict[str, list[float]] = {}

    def run(name: str, source: str) -> None:
        out[name] = [r.score for r in pool2.grade(source, [({}, {"v": v}) for v in values])]

    threads = [threading.Thread(target=run, args=a) for a in (("double", double), ("square", square))] * 1
    threads += [threading.Thread(target=run, args=("double2", double))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out["double"] == out["double2"] == [v * 2 for v in values]
    assert out["square"] == [v ** 2 for v in values]


def test_missing_module_names_it_and_the_extra(pool1: WorkerPool) -> None:
    top = "import rfteval_no_such_module\ndef grade(sample, item):\n    return 1.0\n"
    inner = "def grade(sample, item):\n    import rfteval_no_such_module_2\n    return 1.0\n"
    for source, name in ((top, "rfteval_no_such_module"), (inner, "rfteval_no_such_module_2")):
        results = pool1.grade(source, [({}, {})] * 2)
        for r in results:
            assert r.error.type == PYTHON_RUNTIME
            assert repr(name) in r.error.message and "pip install 'rfteval[graders]'" in r.error.message


@pytest.mark.slow
def test_source_that_hangs_while_loading_fails_every_sample_once() -> None:
    source = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\nwhile True:\n    pass\n"
    with WorkerPool(workers=1, timeout_s=1.0) as pool:
        first = pool.grade(source, [({}, {})] * 3)
        assert [r.error.type for r in first] == [PYTHON_TIMEOUT] * 3
        assert "loading the grader source" in first[0].error.message
        second = pool.grade(source, [({}, {})])  # remembered: no second wait
        assert second[0].error == first[0].error
        ok = pool.grade("def grade(s, i):\n    return 0.25\n", [({}, {})])
        assert ok[0].score == 0.25  # the pool itself is fine


@pytest.mark.slow
def test_secrets_and_threads_in_the_worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("RFTEVAL_HARMLESS", "yes")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    source = (
        "import os\n"
        "def grade(sample, item):\n"
        "    return float(sample['name'] in os.environ and os.environ[sample['name']] == sample['want'])\n"
    )
    cases = [("OPENAI_API_KEY", "sk-test-not-a-real-key", 0.0), ("RFTEVAL_HARMLESS", "yes", 0.0),
             ("LC_ALL", "C.UTF-8", 1.0),
             ("OMP_NUM_THREADS", "1", 1.0), ("OPENBLAS_NUM_THREADS", "1", 1.0), ("MKL_NUM_THREADS", "1", 1.0)]
    with WorkerPool(workers=1) as pool:
        results = pool.grade(source, [({"name": n, "want": w}, {}) for n, w, _ in cases])
    assert [r.score for r in results] == [c[2] for c in cases]
    assert "OPENAI_API_KEY" not in worker_env() and "RFTEVAL_HARMLESS" not in worker_env()  # an allow-list


@pytest.mark.slow
def test_memory_limit_is_configurable() -> None:
    source = "def grade(sample, item):\n    return float(len(bytearray(300 * 1024 * 1024)) > 0)\n"
    with WorkerPool(workers=1, memory_mb=200) as small, WorkerPool(workers=1, memory_mb=1024) as large:
        (low,) = small.grade(source, [({}, {})])
        (high,) = large.grade(source, [({}, {})])
    assert low.error is not None and low.error.type == PYTHON_MEMORY and "200 MB" in low.error.message
    assert high.error is None and high.score == 1.0


@pytest.mark.slow
def test_closed_pool_refuses_work() -> None:
    pool = WorkerPool(workers=1)
    assert pool.grade("def grade(s, i):\n    return 1\n", [({}, {})])[0].score == 1.0
    pids = pool.pids
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.grade("def grade(s, i):\n    return 1\n", [({}, {})])
    for pid in pids:  # the worker process is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_empty_batch_starts_nothing() -> None:
    with WorkerPool(workers=1) as pool:
        assert pool.grade("def grade(s, i):\n    return 1\n", []) == []
        assert pool.pids == []


def test_non_json_data_still_reaches_the_grader(pool1: WorkerPool) -> None:
    class Weird(dict):  # marshal refuses subclasses: sent as plain data
        pass

    source = "def grade(sample, item):\n    return float(sample['t'][1] + item['n'])\n"
    results = pool1.grade(source, [(Weird(t=(1, 2)), {"n": 3}), ({"t": (0, 5)}, Weird(n=1))])
    assert [r.score for r in results] == [5.0, 6.0]


# ---------------------------------------------------------------- a request, no processes


def test_an_item_crosses_once_per_unit() -> None:
    box = _Sandbox.__new__(_Sandbox)
    box.sources = set()
    item_a, item_b = {"reference_answer": "a" * 1000}, {"reference_answer": "b"}
    pairs = [({"n": n}, item_a if n % 2 else item_b) for n in range(10)]
    units = group_units(pairs, ["m"] * 10)
    assert units == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    request = box.request("k", "src", [(encode(pairs[u[0]][1]), [compact_sample(pairs[i][0]) for i in u])
                                       for u in units])
    assert request.count(b"a" * 1000) == 1
    _, _, source, sent = marshal.loads(request)
    assert source == "src" and [len(samples) for _, samples in sent] == [5, 5]
    assert marshal.loads(box.request("k", "src", []))[2] is None  # the source crosses once per sandbox


# ---------------------------------------------------------------- samples sent as their text

# Prints everything a grader can observe of its sample: exact types, key order, values, and which containers
# and strings are one shared object (make_sample shares the text with the message, the tools with tool_calls).
FINGERPRINT = r'''
def shape(x, ids):
    kind = type(x).__name__
    if type(x) in (dict, list, tuple) or (type(x) is str and len(x) > 1):
        new = len(ids)
        if ids.setdefault(id(x), new) != new:
            return f"@{ids[id(x)]}"
    if type(x) is dict:
        return "{" + ", ".join(f"{k!r}: {shape(v, ids)}" for k, v in x.items()) + "}"
    if type(x) in (list, tuple):
        return kind + "[" + ", ".join(shape(v, ids) for v in x) + "]"
    return f"{kind}:{x!r}"

def grade(sample, item):
    print(shape(sample, {}))
    return 1.0
'''


def observed(sample: dict) -> str:
    """What FINGERPRINT prints for a sample sent whole: a marshal round trip, as the pool always did."""
    namespace: dict = {}
    exec(FINGERPRINT, namespace)  # noqa: S102  (our own source)
    return namespace["shape"](marshal.loads(encode_whole(sample)), {}) + "\n"


def test_a_sample_sent_as_text_grades_as_if_sent_whole(pool1: WorkerPool) -> None:
    pairs = compact_pairs()
    results = pool1.grade(FINGERPRINT, pairs)
    assert [r.error for r in results] == [None] * len(pairs)
    assert [r.stdout for r in results] == [observed(s) for s, _ in pairs]
    whole = pool1._grade(pool1._key(FINGERPRINT), FINGERPRINT, pairs, group_units(pairs, None), whole=True)
    assert [r.stdout for r in whole] == [r.stdout for r in results]
    first = results[0].stdout
    assert first.startswith("{'output_text': str:") and "'choices': list[{'index': int:0" in first
    assert "'content': @1}" in first  # the text and the message content are one object, as make_sample built
    tools = results[len(TEXTS)].stdout
    assert "'tool_calls': @" in tools and "'finish_reason': str:'tool_calls'" in tools


def changed_samples() -> list[tuple[str, dict]]:
    """Samples make_sample built, then changed: each must travel whole."""
    def changed(text: str, edit: Any, tools: list | None = None) -> dict:
        sample = make_sample(text, tools)
        edit(sample)
        return sample

    def reorder(s: dict) -> None:
        s["output_json"] = s.pop("output_json")

    def message(s: dict) -> dict:
        return s["choices"][0]["message"]

    return [
        ("output_json replaced", changed('{"a": 1}', lambda s: s.update(output_json={"a": 2}))),
        ("output_json set on plain text", changed("x", lambda s: s.update(output_json={"a": 2}))),
        ("output_text replaced", changed('{"a": 1}', lambda s: s.update(output_text='{"a": 3}'))),
        ("key added", changed('{"a": 1}', lambda s: s.update(extra=1))),
        ("keys reordered", changed('{"a": 1}', reorder)),
        ("content edited", changed("x", lambda s: message(s).update(content="y"))),
        ("content an equal copy", changed("xy", lambda s: message(s).update(content="".join(list("xy"))))),
        ("role edited", changed("x", lambda s: message(s).update(role="user"))),
        ("index a bool", changed("x", lambda s: s["choices"][0].update(index=False))),
        ("finish_reason edited", changed("x", lambda s: s["choices"][0].update(finish_reason="length"))),
        ("second choice", changed("x", lambda s: s["choices"].append(dict(s["choices"][0])))),
        ("tools replaced", changed("x", lambda s: s.update(output_tools=list(TOOLS)), TOOLS)),
        ("tool_calls edited", changed("x", lambda s: message(s).update(tool_calls=[]), TOOLS)),
        ("tools on a tool-less sample", changed("x", lambda s: s.update(output_tools=list(TOOLS)))),
        ("caller's choices", ("", make_sample("x", choices=[{"index": 0, "message": {"content": "x"}}]))[1]),
        ("caller's output_json", make_sample('{"a": 1}', output_json={"a": 1})),
        ("a plain copy of a JSON sample", dict(make_sample('{"a": 1}'))),
    ]


@pytest.mark.parametrize("what, sample", changed_samples(), ids=[w for w, _ in changed_samples()])
def test_a_changed_sample_is_sent_whole_and_graded_as_changed(pool1: WorkerPool, what: str, sample: dict) -> None:
    assert type(compact_sample(sample)) is bytes
    (result,) = pool1.grade(FINGERPRINT, [(sample, {})])
    assert result.error is None and result.stdout == observed(sample)


@pytest.mark.slow
def test_a_sample_the_worker_cannot_rebuild_is_sent_again_whole() -> None:
    source = ("import sys\n"
              "sys.modules['rfteval.sandbox._child'].SAMPLE['parse'] = lambda text: None  # the worker's parse now fails\n"
              "def grade(sample, item):\n"
              "    return float(sum(sample['output_json']['a']))\n")
    pairs = [(make_sample(json.dumps({"a": [n, 1]})), {}) for n in range(5)] + [(make_sample("x"), {})]
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S) as pool:
        results = pool.grade(source, pairs)
    assert [r.score for r in results[:5]] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(r.error is None for r in results[:5])
    assert results[5].error.type == PYTHON_RUNTIME and "TypeError" in results[5].error.message  # None['a']


@pytest.mark.slow
def test_a_number_over_the_workers_digit_limit_is_sent_whole() -> None:
    import sys

    text = '{"n": 1' + "0" * 5000 + "}"  # over Python's default limit for int("...")
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        sample = make_sample(text)
    finally:
        sys.set_int_max_str_digits(old)
    assert sample["output_json"] is not None and compact_sample(sample) == text
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S) as pool:
        (result,) = pool.grade("def grade(sample, item):\n    return float(sample['output_json']['n'].bit_length())\n",
                               [(sample, {})])
    assert result.error is None and result.score == float((10 ** 5000).bit_length())


def test_results_come_back_in_the_callers_order_when_items_interleave(pool1: WorkerPool) -> None:
    source = ("def grade(sample, item):\n"
              "    if sample['k'] == 'bad':\n"
              "        raise ValueError('bad sample')\n"
              "    print(item['v'], sample['k'])\n"
              "    return item['v'] + sample['k'] / 100\n")
    items = [{"v": float(v)} for v in range(5)]
    pairs = [({"k": k if k != 7 else "bad"}, items[k % 5]) for k in range(23)]  # epoch-major, as a runner sends
    results = pool1.grade(source, pairs)
    for k, result in enumerate(results):
        if k == 7:
            assert result.error is not None and "bad sample" in result.error.message
        else:
            assert result.error is None and result.score == (k % 5) + k / 100
            assert result.stdout == f"{float(k % 5)} {k}\n"


@pytest.mark.slow
def test_an_items_samples_of_one_model_share_one_process() -> None:
    source = "import os\ndef grade(sample, item):\n    return float(os.getpid())\n"
    items = [{"id": n} for n in range(4)]
    pairs = [({"k": k}, items[k % 4]) for k in range(40)]  # interleaved: each batch of 10 would hold every item
    with WorkerPool(workers=2, timeout_s=TIMEOUT_S, batch_size=10) as pool:
        results = pool.grade(source, pairs, units=["model"] * 40)
        assert len(pool.pids) == 2
    pids = {n: {r.score for k, r in enumerate(results) if k % 4 == n} for n in range(4)}
    assert all(len(p) == 1 for p in pids.values()), pids


def test_the_template_does_pydantics_first_model_work_and_a_units_models_still_validate(pool1: WorkerPool) -> None:
    _preload.preimport(["pydantic"])
    _preload.warm_up()
    assert "pydantic" in _preload.WARMED
    source = ("from typing import List, Optional\n"
              "from pydantic import BaseModel, Field\n"
              "class Answer(BaseModel):\n"
              "    names: List[str] = Field(description='names')\n"
              "    note: Optional[str] = None\n"
              "def grade(sample, item):\n"
              "    return float(len(Answer(**sample).names))\n")
    good, bad = pool1.grade(source, [({"names": ["a", "b"]}, {}), ({"names": 3}, {})])
    assert good.error is None and good.score == 2.0
    assert bad.error is not None and "ValidationError" in bad.error.message


def test_one_sandbox_more_than_cores_by_default() -> None:
    from rfteval.sandbox import default_workers

    with WorkerPool() as pool:
        assert pool.workers == default_workers() == (os.cpu_count() or 1) + 1


def test_a_source_that_does_not_compile_fails_every_sample_in_every_batch(pool1: WorkerPool) -> None:
    for _ in range(2):  # the second time the source is known to the sandbox: the request comes without it
        results = pool1.grade("def grade(s, i)\n    return 1.0\n", [({}, {}), ({}, {})])
        assert all(r.error is not None and "does not compile" in r.error.message for r in results), results


