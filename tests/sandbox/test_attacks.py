"""Issue 11's attacks on the python grader sandbox, as grader code and as a model output the grader runs.

Each attack is bounded in time and memory, touches only loopback and files it made, and kills nothing but what
it started. They need the sandbox (bubblewrap); where the host refuses it they skip, saying why. A subset runs
again as an unprivileged user (setpriv) where this machine allows it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rfteval.graders.base import PYTHON_MEMORY, PYTHON_RUNTIME, PYTHON_SERVER, PYTHON_TIMEOUT
from rfteval.sandbox import CHILD_SLACK, SandboxPolicy, WorkerPool, decode_reply, host, worker_env
from rfteval.sandbox.pool import SILENCE_S
from rfteval.sandbox.turns import ToolPool, TurnOutcome
from tests.support.guard import hang_guard
from tests.support.optional import missing, sandbox_refused
from tests.support.sandbox_samples import python_grader_case

pytestmark = pytest.mark.slow  # each attack runs real processes: seconds
if (REFUSED := host().refused) is not None:
    sandbox_refused(REFUSED, host().bwrap is not None)

TIMEOUT_S = 3.0
SECRET = "sk-test-attack-canary-0123456789"

# A unit-test-style grader: it runs the model's output as code (as code-task graders do), then scores it.
RUNS_OUTPUT = '''
def grade(sample, item):
    scope = {}
    exec(sample["output_text"], scope)
    return float(item["v"])
'''

# stop every process above this one but bubblewrap's init: the supervisor, and the template between (a unit's
# child is forked from a template that loaded the source, and its parent is that template)
STOP_ANCESTORS = ("import os, signal\n"
                  "pid = os.getppid()\n"
                  "while pid > 1:\n"
                  "    parent = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
                  "    os.kill(pid, signal.SIGSTOP)\n"
                  "    pid = parent\n")


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(workers=2, timeout_s=TIMEOUT_S, memory_mb=256) as p:
        yield p


def honest(n: int) -> list[tuple[dict, dict]]:
    return [({"output_text": "x = 1"}, {"id": f"h{k}", "v": (k + 1) / 100}) for k in range(n)]


def attack(pool: WorkerPool, payload: str, n_honest: int = 4) -> tuple[object, list[object]]:
    """The payload as one model output among honest ones; returns its result and the honest results."""
    pairs = honest(n_honest)
    pairs.insert(1, ({"output_text": payload}, {"id": "evil", "v": 0.5}))
    results = pool.grade(RUNS_OUTPUT, pairs)
    evil = results.pop(1)
    assert [r.score for r in results] == [(k + 1) / 100 for k in range(n_honest)], results
    assert all(r.error is None for r in results), results
    return evil, results


# ---------------------------------------------------------------- secrets


def test_api_keys_under_any_name_never_reach_the_grader(monkeypatch: pytest.MonkeyPatch, pool: WorkerPool) -> None:
    for name in ("OPENAI_API_KEY", "MY_PROVIDER_CRED", "DATABASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, SECRET)
    policy = SandboxPolicy(never_pass=frozenset({"MY_PROVIDER_CRED"}))
    payload = (
        "import os, glob\n"
        "seen = [v for v in os.environ.values() if 'canary' in v]\n"
        "for path in glob.glob('/proc/*/environ') + ['/proc/1/environ', f'/proc/{os.getppid()}/environ']:\n"
        "    try:\n"
        "        seen.append(open(path, 'rb').read().decode('latin-1'))\n"
        "    except OSError:\n"
        "        pass\n"
        "for path in glob.glob('/proc/*/mem'):\n"
        "    try:\n"
        "        open(path, 'rb').read(1)\n"
        "        seen.append('mem:' + path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('|'.join(seen))\n"
    )
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S, policy=policy) as fresh:  # started after the variables were set
        (result,) = fresh.grade(RUNS_OUTPUT, [({"output_text": payload}, {"v": 1.0})])
    assert result.error is None
    assert "canary" not in (result.stdout or "") and "mem:" not in (result.stdout or "")
    assert "MY_PROVIDER_CRED" not in worker_env(policy.never_pass)


def test_ptrace_setns_unshare_and_pidfd_getfd_are_refused(pool: WorkerPool) -> None:
    payload = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "out = []\n"
        "for name, call in [('ptrace', lambda: libc.ptrace(16, os.getppid(), 0, 0)),\n"
        "                   ('unshare', lambda: libc.unshare(0x40000000)),\n"
        "                   ('setns', lambda: libc.setns(0, 0)),\n"
        "                   ('pidfd_getfd', lambda: libc.syscall(438, 0, 0, 0)),\n"
        "                   ('process_vm_readv', lambda: libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0)),\n"
        "                   ('keyctl', lambda: libc.syscall(250, 0, 0, 0, 0, 0))]:\n"
        "    out.append(f'{name}={call()}:{ctypes.get_errno()}')\n"
        "print(' '.join(out))\n"
    )
    evil, _ = attack(pool, payload)
    assert evil.error is None
    for part in evil.stdout.split():
        assert part.split("=")[1].startswith("-1:1"), evil.stdout  # EPERM, from the seccomp filter


def test_rfteval_is_invisible_and_cannot_be_signalled(pool: WorkerPool) -> None:
    payload = (
        "import os, signal\n"
        f"target = {os.getpid()}\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "hits = []\n"
        "for pid in [target, os.getppid()] + pids:\n"
        "    if pid == os.getpid():\n"
        "        continue\n"
        "    for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):\n"
        "        try:\n"
        "            os.kill(pid, sig)\n"
        "            hits.append(pid)\n"
        "        except OSError:\n"
        "            pass\n"
        "print(pids, hits)\n"
    )
    evil, _ = attack(pool, payload)
    assert os.getpid() > 3  # it can only have hit processes inside its own sandbox
    assert open(f"/proc/{os.getpid()}/stat").read().split()[2] != "T"  # rfteval is not stopped
    assert evil.score in (0.0, 0.5)


# ---------------------------------------------------------------- other samples' scores


def tree(pid: int) -> set[int]:
    """`pid` and every process below it (a sandbox: bubblewrap, its init, the supervisor, templates, units)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path("/proc", name, "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))  # its parent
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return {p for p in found if Path("/proc", str(p)).exists()}


def settles(check: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether `check()` holds within `seconds` (a bound for processes being reaped, not a timing check)."""
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


# How each attack ends (the error it is, or its own score) and whether it costs its sandbox: a stopped or killed
# supervisor is replaced by a fresh one; every other attack leaves the sandbox as it was.
HOSTILE_OUTCOMES = [
    (PYTHON_RUNTIME, "exited with code 0", False),  # patch-reply-code
    (PYTHON_SERVER, "oversized result", False),  # forge-frames
    (None, "", False),  # getframe-scores: edits only its own frames
    (PYTHON_TIMEOUT, "3 s time limit", False),  # regex-thread: holds the unit past its limit
    (None, "", False),  # survivors: its own score; the survivors are killed with the unit
    (PYTHON_RUNTIME, "sandbox ended", True),  # kill-siblings: the supervisor too
    (PYTHON_TIMEOUT, "no heartbeat", True),  # stop-supervisor
    (PYTHON_TIMEOUT, "3 s time limit", False),  # block-alarm
]


@pytest.mark.parametrize("payload, outcome", zip([
    # patch what frames replies in this process (only this unit's process has it)
    "import sys\nw = sys.modules['rfteval.sandbox._child']\nw.Child.commit = lambda *a, **k: None\n",
    # forge a reply frame on every fd it can find, then exit
    "import os, struct\n"
    "frame = b'[true, [[1.0, null, null, null]]]'\n"
    "for fd in range(0, 64):\n"
    "    try:\n"
    "        os.write(fd, struct.pack('<Q', len(frame)) + frame)\n"
    "    except OSError:\n"
    "        pass\n"
    "os._exit(0)\n",
    # edit the pending results through the frames of the caller
    "import sys\nf = sys._getframe()\n"
    "while f is not None:\n"
    "    for k, v in list(f.f_locals.items()):\n"
    "        if isinstance(v, list):\n"
    "            v[:] = [1.0] * len(v)\n"
    "    f = f.f_back\n",
    # a leftover thread that hogs the CPU with a catastrophic regex, for whoever comes next
    "import re, threading\n"
    "threading.Thread(target=lambda: re.match(r'(a+)+$', 'a' * 40 + 'b'), daemon=True).start()\n",
    # survivors: setsid double fork, a new session, that would rewrite results later
    "import os, subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        import time\n"
    "        time.sleep(30)\n"
    "    os._exit(0)\n",
    # kill whatever else it can see: siblings, the supervisor
    "import os, signal\n"
    "for p in os.listdir('/proc'):\n"
    "    if p.isdigit() and int(p) != os.getpid():\n"
    "        try:\n"
    "            os.kill(int(p), signal.SIGKILL)\n"
    "        except OSError:\n"
    "            pass\n",
    # stop its supervisor: the sandbox is timed from rfteval
    STOP_ANCESTORS,
    # block the alarm and sleep past the limit
    "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(60)\n",
], HOSTILE_OUTCOMES), ids=["patch-reply-code", "forge-frames", "getframe-scores", "regex-thread", "survivors",
                           "kill-siblings", "stop-supervisor", "block-alarm"])
def test_a_hostile_output_costs_at_most_its_own_score(payload: str, outcome: tuple[str | None, str, bool]) -> None:
    """Counted, not timed: the attack ends as its own unit's error (or its own score), the honest units around it
    score theirs (attack()), every process it started is gone, and only an attack on the supervisor costs the
    sandbox, replaced by one of the same shape. One worker, so the unit runs in the sandbox that is watched."""
    etype, words, replaced = outcome
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=256) as one, hang_guard(180, "the attack"):
        one.grade(RUNS_OUTPUT, honest(2))  # started, the source's template made: the sandbox as every unit finds it
        (sandbox,) = one.pids
        before = tree(sandbox)
        evil, _ = attack(one, payload)
        if etype is None:
            assert evil.error is None and evil.score == 0.5, evil
        else:
            assert evil.error is not None and evil.error.type == etype and words in evil.error.message, evil
        (now,) = one.pids
        assert (now != sandbox) is replaced
        # (`before` may hold the last honest unit's process, on its way out: what is left must be among it)
        if replaced:  # the stopped sandbox is gone whole, and its successor is no larger than it was
            assert settles(lambda: not tree(sandbox) and len(tree(now)) <= len(before)), (before, tree(now))
        else:  # what the unit started (threads, survivors, forks) is gone: no process but those there before
            assert settles(lambda: tree(sandbox) <= before), (before, tree(sandbox))


def test_monkeypatching_a_shared_library_does_not_reach_another_sub_grader(pool: WorkerPool) -> None:
    patcher = ("import rapidfuzz.fuzz\nrapidfuzz.fuzz.ratio = lambda *a, **k: 100.0\n"
               "def grade(sample, item):\n    return 0.0\n")
    team = ("from rapidfuzz import fuzz\n"
            "def grade(sample, item):\n    return fuzz.ratio(sample['output_text'], item['ref']) / 100\n")
    pairs = [({"output_text": "abc"}, {"ref": "xyz"})] * 3
    pool.grade(patcher, pairs)
    assert [r.score for r in pool.grade(team, pairs)] == [0.0, 0.0, 0.0]


def test_an_item_changed_by_one_call_is_fresh_for_the_next(pool: WorkerPool) -> None:
    source = ("class Yes(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
              "def grade(sample, item):\n"
              "    ok = float(sample['output_text'] == item['ref'])\n"
              "    item['ref'] = Yes('anything')\n"
              "    return ok\n")
    item = {"ref": "right"}
    results = pool.grade(source, [({"output_text": t}, item) for t in ["wrong", "right", "wrong"]],
                         units=["m"] * 3)  # one unit: the same process, yet every call gets the item as sent
    assert [r.score for r in results] == [0.0, 1.0, 0.0]


def test_base_and_tuned_samples_of_one_item_never_share_a_process(pool: WorkerPool) -> None:
    source = ("import os\nSEEN = []\n"
              "def grade(sample, item):\n"
              "    SEEN.append(sample['output_text'])\n"
              "    return float(len(set(SEEN)) == 1)\n")
    item = {"id": "q1"}
    pairs = [({"output_text": m}, item) for m in ["base", "tuned", "base", "tuned"]]
    results = pool.grade(source, pairs, units=["base", "tuned", "base", "tuned"])
    assert [r.score for r in results] == [1.0] * 4


# ---------------------------------------------------------------- the host, the run directory, the venv


def test_files_outside_the_unit_are_out_of_reach(pool: WorkerPool, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "grades.jsonl").write_text("{}\n")
    venv_site = next(p for p in sys.path if p.endswith("site-packages"))
    payload = (
        "import os\nres = []\n"
        f"for path in [{str(run_dir / 'grades.jsonl')!r}, {os.path.join(venv_site, 'evil.pth')!r},\n"
        "             '/root/.bashrc', '/root/x', '/etc/evil', '/usr/evil', '/evil']:\n"
        "    try:\n"
        "        open(path, 'a').write('import os; os.system(\"echo pwned\")\\n')\n"
        "        res.append('wrote ' + path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/tmp/unit-file', 'w').write('left behind')\n"
        "print(res)\n"
    )
    evil, _ = attack(pool, payload)
    assert evil.stdout == "[]\n"
    assert (run_dir / "grades.jsonl").read_text() == "{}\n"
    assert not os.path.exists(os.path.join(venv_site, "evil.pth"))
    (after,) = pool.grade("import os\ndef grade(s, i):\n    return float(os.path.exists('/tmp/unit-file'))\n",
                          [({}, {})])
    assert after.score == 0.0  # the next unit's /tmp is clean


def test_a_unix_socket_on_the_filesystem_is_unreachable(pool: WorkerPool, tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    try:
        payload = (f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\n")
        evil, _ = attack(pool, payload)
        assert evil.error is not None and ("FileNotFoundError" in evil.error.message
                                           or "ConnectionRefused" in evil.error.message)
    finally:
        server.close()


def test_loopback_tcp_of_the_host_is_unreachable(pool: WorkerPool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        port = listener.getsockname()[1]
        evil, _ = attack(pool, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n")
        # refused: the sandbox's own loopback, where nothing listens (the host's listens on that port)
        assert evil.error is not None and evil.error.type == PYTHON_RUNTIME, evil
        assert "ConnectionRefusedError" in evil.error.message, evil.error.message
    finally:
        listener.close()


# ---------------------------------------------------------------- limits


def test_a_fork_bomb_is_contained(pool: WorkerPool) -> None:
    payload = ("import os\nn = 0\n"
               "try:\n"
               "    for _ in range(5000):\n"
               "        if os.fork() == 0:\n"
               "            import time\n"
               "            time.sleep(30)\n"
               "            os._exit(0)\n"
               "        n += 1\n"
               "except OSError:\n"
               "    pass\n"
               "print(n)\n")
    evil, _ = attack(pool, payload)
    assert evil.stdout is not None and int(evil.stdout.split()[0]) < 200


def test_memory_held_by_children_is_limited(pool: WorkerPool) -> None:
    payload = ("import os, time\n"
               "kids = []\n"
               "for _ in range(16):\n"
               "    pid = os.fork()\n"
               "    if pid == 0:\n"
               "        try:\n"
               "            b = bytearray(200 * 1024 * 1024)\n"
               "            for k in range(0, len(b), 4096):\n"
               "                b[k] = 1\n"
               "        except MemoryError:\n"
               "            os._exit(1)\n"
               "        time.sleep(30)\n"
               "        os._exit(0)\n"
               "    kids.append(pid)\n"
               "time.sleep(3.0)\n"
               "alive = sum(1 for k in kids if os.waitpid(k, os.WNOHANG) == (0, 0))\n"
               "print(alive)\n")
    evil, _ = attack(pool, payload)
    if evil.error is None:  # without a cgroup: each child is held by its own limit (200 MB fits under 256 MB)
        assert int(evil.stdout.split()[0]) < 16, evil.stdout
    else:  # 16 x 200 MB would be 3.2 GB; the cgroup holds all the unit's processes to 256 MB together
        assert evil.error.type == PYTHON_MEMORY and "256 MB" in evil.error.message, evil


FOUR_CHILDREN = """
import os, time

def grade(sample, item):
    if item["id"] != "hog":
        return 0.75
    for _ in range(4):  # each far under its own 256 MB; 480 MB together
        if os.fork() == 0:
            b = bytearray(120 * 1024 * 1024)
            for k in range(0, len(b), 4096):
                b[k] = 1
            time.sleep(30)
            os._exit(0)
    time.sleep(4)
    return 1.0
"""


def test_forked_children_together_are_held_to_the_grader_memory() -> None:
    if not host().cgroup:
        pytest.skip("no cgroup here: memory is limited per process (RLIMIT_AS), as rfteval says at start")
    with WorkerPool(workers=1, timeout_s=20, memory_mb=256) as small:
        hog, honest, after = small.grade(FOUR_CHILDREN, [({}, {"id": "hog"}), ({}, {"id": "a"}), ({}, {"id": "b"})],
                                         units=["m", "m", "m"])
        box = small._all[0]
        assert box.cgroup is not None and box.memory_limit is not None
        template = box.memory_limit - (256 << 20) - CHILD_SLACK
    assert hog.error is not None and hog.error.type == PYTHON_MEMORY, hog
    assert "256 MB" in hog.error.message and "together" in hog.error.message, hog.error.message
    assert (honest.score, after.score) == (0.75, 0.75) and honest.error is None and after.error is None
    assert 0 < template < 256 << 20  # the template's share: what it held when the limit was fitted above it


TWO_CHILDREN_UNDER = """
import os

def grade(sample, item):
    kids = []
    for _ in range(2):  # 2 x 70 MB, and 50 MB here: under 256 MB together
        pid = os.fork()
        if pid == 0:
            b = bytearray(70 * 1024 * 1024)
            for k in range(0, len(b), 4096):
                b[k] = 1
            os._exit(0 if b[0] == 1 else 1)
        kids.append(pid)
    here = bytearray(50 * 1024 * 1024)
    for k in range(0, len(here), 4096):
        here[k] = 1
    return float(all(os.waitpid(pid, 0)[1] == 0 for pid in kids))
"""


def test_a_unit_under_the_grader_memory_in_all_is_not_an_error() -> None:
    with WorkerPool(workers=1, timeout_s=20, memory_mb=256) as small:
        (result,) = small.grade(TWO_CHILDREN_UNDER, [({}, {})])
    assert result.error is None and result.score == 1.0, result


def test_a_stopped_supervisor_costs_seconds_at_the_default_timeout() -> None:
    """At --grader-timeout's default (120 s) a stopped supervisor is given up by the watchdog after SILENCE_S
    without a heartbeat, not after the unit's time limit: the error says which, the stopped sandbox is gone, and a
    fresh one grades the honest samples after it. The guard only bounds a hang."""
    with WorkerPool(workers=1, memory_mb=256) as default, hang_guard(100, "recovering from a stopped supervisor"):
        assert default.timeout_s == 120.0  # --grader-timeout's default: the watchdog must not wait for it
        default.grade(RUNS_OUTPUT, honest(1))  # started
        (stopped,) = default.pids
        evil, honest_after = attack(default, STOP_ANCESTORS)  # attack() checks the honest scores around it
        (fresh,) = default.pids
    assert evil.error is not None and evil.error.type == PYTHON_TIMEOUT, evil
    assert f"sent no heartbeat for {SILENCE_S:g} s" in evil.error.message, evil.error.message  # not the 120 s limit
    assert fresh != stopped and not Path("/proc", str(stopped)).exists()
    assert len(honest_after) == 4


def test_memfd_is_refused(pool: WorkerPool) -> None:
    evil, _ = attack(pool, "import os\nos.memfd_create('x')\n")
    assert evil.error is not None and evil.error.type == PYTHON_RUNTIME and "PermissionError" in evil.error.message


def test_disk_is_limited(pool: WorkerPool) -> None:
    payload = ("import os\nn = 0\nchunk = b'x' * (1 << 20)\n"
               "try:\n"
               "    with open('/tmp/big', 'wb') as fh:\n"
               "        for _ in range(1100):\n"
               "            fh.write(chunk)\n"
               "            n += 1\n"
               "except OSError as exc:\n"
               "    print('stopped', n, type(exc).__name__)\n")
    evil, _ = attack(pool, payload)
    assert evil.stdout is not None and evil.stdout.startswith("stopped"), evil


def test_memory_error_is_this_samples(pool: WorkerPool) -> None:
    evil, _ = attack(pool, "b = bytearray(2 * 1024 ** 3)\n")
    assert evil.error is not None and evil.error.type == PYTHON_MEMORY and "256 MB" in evil.error.message


def test_a_timeout_is_the_samples_own(pool: WorkerPool) -> None:
    evil, _ = attack(pool, "while True:\n    pass\n")
    assert evil.error.type == PYTHON_TIMEOUT


# ---------------------------------------------------------------- what comes back


def test_huge_and_deeply_nested_replies_are_refused_not_crashes() -> None:
    from rfteval.sandbox import Failure

    for data in (b"[" * 200_000, b"[true, [" + b"[" * 200_000, b"\xff" * 1000):
        with pytest.raises(Failure):
            decode_reply(data, 0, 1)


def test_huge_error_text_and_output_are_capped(pool: WorkerPool) -> None:
    evil, _ = attack(pool, "import os\nos.write(1, b'y' * 50_000_000)\nraise ValueError('e' * 50_000_000)\n")
    assert evil.error is not None and evil.error.type == PYTHON_RUNTIME, evil
    assert evil.error.message.startswith("grade() raised ValueError: eee") and len(evil.error.message) <= 8000
    assert evil.stdout is None or len(evil.stdout) <= 64 * 1024 + 100


def test_memory_limit_message_names_the_limit() -> None:
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=200) as small:
        (low,) = small.grade("def grade(s, i):\n    return float(len(bytearray(300 * 1024 * 1024)))\n", [({}, {})])
    assert low.error is not None and low.error.type == PYTHON_MEMORY and "200 MB" in low.error.message


OOM_VICTIM = """
import os, time

def grade(sample, item):
    kids = []
    for _ in range(10):  # each under its own address-space limit; together past the unit's cgroup
        pid = os.fork()
        if pid == 0:
            time.sleep(0.5)  # after the parent has made itself the OOM killer's choice
            b = bytearray(80 * 1024 * 1024)
            for k in range(0, len(b), 4096):
                b[k] = 1
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    with open("/proc/self/oom_score_adj", "w") as fh:  # this process, not a helper, is the one the kernel picks
        fh.write("1000")
    time.sleep(2.5)
    return 1.0
"""


def test_an_oom_kill_is_a_memory_error_naming_the_limit() -> None:
    if not host().cgroup:
        pytest.skip("no cgroup here: memory is limited per process (RLIMIT_AS), which raises MemoryError instead")
    # the cgroup holds 100 MB + a 16 MB /tmp + the template's room: ten helpers of 80 MB are past it
    with WorkerPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=100, disk_mb=16) as small:
        (killed, after) = small.grade(OOM_VICTIM, [({}, {}), ({}, {})], units=["a", "b"])
    assert killed.error is not None and killed.error.type == PYTHON_MEMORY, killed
    assert "100 MB" in killed.error.message and "SIGKILL" not in killed.error.message, killed.error.message


# ---------------------------------------------------------------- the command line


def test_cli_refuses_python_graders_in_one_line_without_the_sandbox(tmp_path: Path) -> None:
    grader, data, env = python_grader_case(tmp_path)
    env["PATH"] = str(tmp_path)  # no bwrap on it
    base = [sys.executable, "-c", "from rfteval.cli.app import main; main()", "validate", "grader", str(grader),
            "--dataset", str(data)]
    refused = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "bubblewrap" in lines[0] and "--unsafe-python-graders" in lines[0]
    allowed = subprocess.run([*base, "--unsafe-python-graders"], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
    assert allowed.returncode == 0, allowed.stderr
    probe = [sys.executable, "-c", "from rfteval.cli.app import main; main()", "probe-grader", str(grader),
             "--dataset", str(data)]
    refused = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2 and "--unsafe-python-graders" in refused.stderr, refused.stderr
    allowed = subprocess.run([*probe, "--unsafe-python-graders"], env=env, capture_output=True, text=True,
                             timeout=120, check=False)
    assert allowed.returncode in (0, 1), allowed.stderr  # graded (1 would be a flagged probe, not a refusal)


# ---------------------------------------------------------------- as an unprivileged user


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# Built by `make nobody` (as root) when this interpreter lives where nobody cannot reach it (pyenv under /root)
NOBODY_VENV = Path("/opt/rfteval-nobody")


def _as_nobody(python: str, code: str, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, python, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          check=False, cwd="/")


def _nobody_interpreter(readable: Path) -> tuple[str, dict[str, str]] | str:
    """(an interpreter, the environment) with which `nobody` imports this rfteval, or why there is none. This
    interpreter when nobody can run it; else the one `make nobody` built, with a copy of rfteval it can read in
    `readable` (a checkout in a mktemp directory, and pytest's tmp_path, are closed to other users)."""
    if shutil.which("setpriv") is None:
        return "setpriv is not installed"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SECRET_TOKEN": "canary"}
    probe = "import rfteval.sandbox as s; print(s.host().refused)"
    candidates: list[tuple[str, dict[str, str]]] = [(sys.executable, env)]
    if (NOBODY_VENV / "bin" / "python").exists():
        shutil.copytree(Path(__file__).resolve().parents[2] / "rfteval", readable / "rfteval",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for path in (readable, *readable.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        candidates.append((str(NOBODY_VENV / "bin" / "python"), {**env, "PYTHONPATH": str(readable)}))
    reasons = []
    for python, candidate_env in candidates:
        found = _as_nobody(python, probe, candidate_env, 60)
        if found.returncode == 0 and found.stdout.strip() == "None":
            return python, candidate_env
        reasons.append(f"{python}: " + (found.stdout.strip() or found.stderr.strip()[-200:]))
    return "no interpreter with which nobody can run the sandbox here (`make nobody` builds one as root): " + \
        "; ".join(reasons)


NOBODY_SCRIPT = r'''
import os, socket, sys
from rfteval.sandbox import WorkerPool
RUNS = "def grade(sample, item):\n    exec(sample['output_text'], {})\n    return float(item['v'])\n"
attacks = {
    "environ": "import glob\nfor p in glob.glob('/proc/*/environ'):\n    assert b'canary' not in open(p,'rb').read()\n",
    "kill": ("import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n"
             "        try:\n            os.kill(int(p), signal.SIGKILL)\n        except OSError:\n            pass\n"),
    "fork": ("import os\nfor _ in range(3000):\n    if os.fork() == 0:\n        import time\n"
             "        time.sleep(20)\n        os._exit(0)\n"),
    "disk": "open('/tmp/big','wb').write(b'x' * (1100 << 20))\n",
}
with WorkerPool(workers=1, timeout_s=3.0, memory_mb=256) as pool:
    for name, payload in attacks.items():
        pairs = [({"output_text": "x = 1"}, {"v": 0.25}), ({"output_text": payload}, {"v": 0.5}),
                 ({"output_text": "x = 1"}, {"v": 0.75})]
        r = pool.grade(RUNS, pairs)
        assert [r[0].score, r[2].score] == [0.25, 0.75] and r[0].error is None and r[2].error is None, (name, r)
    print(pool.isolation)
print("ok")
'''


def test_a_subset_holds_as_an_unprivileged_user() -> None:
    if os.getuid() != 0:
        return  # already unprivileged: the tests above were the non-root run
    with tempfile.TemporaryDirectory(dir="/tmp") as readable:
        found = _nobody_interpreter(Path(readable))
        if isinstance(found, str):
            missing(f"cannot run as an unprivileged user here: {found}", "nobody")
        python, env = found
        proc = _as_nobody(python, NOBODY_SCRIPT, env, 240)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
    assert "RLIMIT" in proc.stdout  # no cgroup for nobody: the per-process limits hold instead


# ---------------------------------------------------------------- the template: the source loaded once (issue 31)
# Each source reports the distinct items it has seen through what its module-level code made (a global, a thread,
# a child process, a socket), plus 0.5 when grade() runs in a process forked from the one that loaded it (the
# template) rather than in the process that loaded it (a unit that loads the source itself). Every unit is one
# item: a count above 1 would be one unit seeing another's data.

TEMPLATE_MARK = "rfteval-template-probe-5b1e"
SEEN_BY_GLOBAL = """
import os
LOADED_IN = os.getpid()
SEEN = set()

def grade(sample, item):
    SEEN.add(item["id"])
    return float(len(SEEN)) + (0.5 if os.getpid() != LOADED_IN else 0.0)
"""
SEEN_BY_THREAD = """
import os, queue, threading, time
LOADED_IN = os.getpid()
INBOX = queue.Queue()
SEEN = set()

def keep():
    while True:
        SEEN.add(INBOX.get())

threading.Thread(target=keep, daemon=True).start()

def grade(sample, item):
    INBOX.put(item["id"])
    deadline = time.monotonic() + 2
    while item["id"] not in SEEN and time.monotonic() < deadline:
        time.sleep(0.001)
    return float(len(SEEN)) + (0.5 if os.getpid() != LOADED_IN else 0.0)
"""
SEEN_BY_CHILD = f"""
import os, subprocess, sys
LOADED_IN = os.getpid()
HELPER = subprocess.Popen(
    [sys.executable, "-c", "import sys  # {TEMPLATE_MARK}\\nseen = set()\\nfor line in sys.stdin:\\n"
     "    seen.add(line)\\n    print(len(seen), flush=True)\\n"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

def grade(sample, item):
    HELPER.stdin.write(str(item["id"]) + "\\n")
    HELPER.stdin.flush()
    return float(HELPER.stdout.readline()) + (0.5 if os.getpid() != LOADED_IN else 0.0)
"""
SEEN_BY_SOCKET = """
import os, socket
LOADED_IN = os.getpid()
A, B = socket.socketpair()
B.setblocking(False)
SEEN = set()

def grade(sample, item):
    A.sendall(str(item["id"]).encode() + b"\\n")
    data = b""
    while not data.endswith(b"\\n"):
        try:
            data += B.recv(65536)
        except BlockingIOError:
            pass
    SEEN.update(data.split())
    return float(len(SEEN)) + (0.5 if os.getpid() != LOADED_IN else 0.0)
"""
FILE_AT_IMPORT = """
import os
LOADED_IN = os.getpid()
with open("/tmp/table.txt", "w") as fh:
    fh.write("0.75")

def grade(sample, item):
    with open("/tmp/table.txt") as fh:
        return float(fh.read()) + (0.125 if os.getpid() != LOADED_IN else 0.0)
"""


def processes_with(mark: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if mark.encode() in Path("/proc", name, "cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


def grade_in_units(source: str, items: int = 4, epochs: int = 3, workers: int = 1) -> tuple[list[object], list[int]]:
    """Epoch-major pairs (as a runner grades), one unit per item; the results and the pool's sandbox pids."""
    pairs = [({"output_text": "x"}, {"id": n}) for _ in range(epochs) for n in range(items)]
    with WorkerPool(workers=workers, timeout_s=10, memory_mb=512) as pool:
        results = pool.grade(source, pairs, units=[item["id"] for _, item in pairs])
        again = pool.grade(source, pairs, units=[item["id"] for _, item in pairs])  # the same sandboxes, later
        pids = pool.pids
    assert all(r.error is None for r in results + again), results + again
    return [r.score for r in results + again], pids


def assert_nothing_outlives(pids: list[int]) -> None:
    deadline = time.monotonic() + 10
    while (any(Path("/proc", str(pid)).exists() for pid in pids) or processes_with(TEMPLATE_MARK)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if Path("/proc", str(pid)).exists()] and not processes_with(TEMPLATE_MARK)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_module_global_written_in_one_unit_is_not_seen_by_the_next(workers: int) -> None:
    scores, pids = grade_in_units(SEEN_BY_GLOBAL, workers=workers)
    assert scores == [1.5] * len(scores)  # loaded once in the template, each unit saw its own item alone
    assert_nothing_outlives(pids)


@pytest.mark.parametrize("source", [SEEN_BY_THREAD, SEEN_BY_CHILD, SEEN_BY_SOCKET],
                         ids=["thread-at-import", "child-at-import", "socket-at-import"])
def test_a_source_that_leaves_a_thread_a_child_or_a_socket_is_loaded_in_each_unit(source: str) -> None:
    """A thread, a process or an fd made at import would be shared by every unit forked from the template (and a
    thread's state half-copied): the template is refused, and each unit loads the source in its own process."""
    scores, pids = grade_in_units(source)
    assert scores == [1.0] * len(scores)  # loaded in each unit (no 0.5), and no unit saw another's item
    assert_nothing_outlives(pids)


def test_files_made_at_import_are_there_for_every_unit() -> None:
    """/tmp is wiped after each unit, so a template that wrote there is refused: every unit loads it again."""
    scores, pids = grade_in_units(FILE_AT_IMPORT)
    assert scores == [0.75] * len(scores)
    assert_nothing_outlives(pids)


def test_a_unit_that_kills_its_template_costs_at_most_its_own_score(pool: WorkerPool) -> None:
    """A model output that kills or stops the template: the units after it load the source themselves."""
    kill_parent = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    for payload in (kill_parent, "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"):
        attack(pool, payload)
        pairs = honest(4)
        assert [r.score for r in pool.grade(RUNS_OUTPUT, pairs)] == [(k + 1) / 100 for k in range(4)]


# ---------------------------------------------------------------- tools: the same sandbox, a turn per unit

# A tools module whose every tool is an attack; each turn is one rollout's, and another rollout's turn follows it.
HOSTILE_TOOLS = '''
import glob, os, signal, socket, time

def dial(port: int):
    socket.create_connection(("127.0.0.1", port), timeout=2)
    return "connected"

def dial_out():
    socket.create_connection(("1.1.1.1", 443), timeout=2)
    return "connected"

def remember(secret: str, *, state=None):
    with open("/tmp/rollout-secret", "w") as fh:
        fh.write(secret)
    os.makedirs("/dev/shm/x", exist_ok=True)
    open("/dev/shm/x/secret", "w").write(secret)
    state["mine"] = secret
    return "kept"

def snoop(*, state=None):
    found = sorted(glob.glob("/tmp/*") + glob.glob("/dev/shm/**", recursive=True))
    return {"files": [f for f in found if "secret" in f], "state": state}

def keys():
    seen = [v for v in os.environ.values() if "canary" in v]
    for path in glob.glob("/proc/*/environ"):
        try:
            seen.append(open(path, "rb").read().decode("latin-1"))
        except OSError:
            pass
    return [s for s in seen if "canary" in s]

def linger():
    if os.fork() == 0:
        os.setsid()
        time.sleep(60)
        os._exit(0)
    return "forked"

def kill_all():
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                os.kill(int(p), signal.SIGKILL)
            except OSError:
                pass
    return "still here"

def fine():
    return "fine"
'''


@pytest.fixture(scope="module")
def tool_pool() -> Iterator[ToolPool]:
    with ToolPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=256) as p:
        yield p


def tool_turn(pool: ToolPool, calls: list[tuple[str, dict]], state: str = "{}") -> TurnOutcome:
    with hang_guard(120, "a hostile tool turn"):
        return pool.turn(HOSTILE_TOOLS, {"id": "q"}, state, calls, 2000).result()


def test_a_tool_reaches_no_network(tool_pool: ToolPool) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        outcome = tool_turn(tool_pool, [("dial", {"port": listener.getsockname()[1]}), ("dial_out", {})])
    finally:
        listener.close()
    # the sandbox's own loopback, where nothing listens; and no route out at all
    assert [c.error for c in outcome.calls] == ["ConnectionRefusedError", "OSError"], outcome


def test_a_rollout_never_sees_another_rollouts_files_or_state(tool_pool: ToolPool) -> None:
    first = tool_turn(tool_pool, [("remember", {"secret": "ann's card"}), ("snoop", {})])
    assert json.loads(first.calls[1].text)["files"]  # (within its own turn: its own)
    other = tool_turn(tool_pool, [("snoop", {})], '{"mine": "bob"}')
    assert json.loads(other.calls[0].text) == {"files": [], "state": {"mine": "bob"}}


def test_a_tool_never_sees_the_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "MY_PROVIDER_CRED", "LANG"):
        monkeypatch.setenv(name, SECRET)  # LANG is on the allow-list: never_pass still keeps it out
    policy = SandboxPolicy(never_pass=frozenset({"MY_PROVIDER_CRED", "LANG"}), timeout_s=TIMEOUT_S)
    with ToolPool(workers=1, policy=policy) as fresh:
        outcome = tool_turn(fresh, [("keys", {})])
    assert outcome.calls[0].error is None and outcome.calls[0].text == "[]", outcome


def test_a_tool_that_forks_or_kills_costs_at_most_its_own_turn(tool_pool: ToolPool) -> None:
    tool_turn(tool_pool, [("fine", {})])
    (sandbox,) = tool_pool.pids
    before = tree(sandbox)
    forked = tool_turn(tool_pool, [("linger", {}), ("fine", {})])
    assert [c.text for c in forked.calls] == ["forked", "fine"]
    tool_turn(tool_pool, [("fine", {})])  # (whose clean-up reaps what the last one killed)
    assert settles(lambda: tree(sandbox) <= before), (before, tree(sandbox))  # the lingering child died with its unit
    killed = tool_turn(tool_pool, [("kill_all", {}), ("fine", {})])
    assert killed.calls[0].error in (None, "ToolCrash"), killed  # its supervisor, maybe
    assert [c.text for c in tool_turn(tool_pool, [("fine", {})]).calls] == ["fine"]
    assert os.getpid() > 3 and open(f"/proc/{os.getpid()}/stat").read().split()[2] != "T"


def test_a_tool_that_stops_its_supervisor_costs_its_turn_and_the_sandbox() -> None:
    """Timed from rfteval: the silent sandbox is killed after SILENCE_S, the turn's call is a ToolTimeout saying so,
    and the next turn runs in a fresh sandbox."""
    source = "def stop():\n" + "".join(f"    {line}\n" for line in STOP_ANCESTORS.splitlines()) + \
             "\ndef fine():\n    return 'fine'\n"
    with ToolPool(workers=1, timeout_s=TIMEOUT_S, memory_mb=256) as fresh, hang_guard(180, "a stopped supervisor"):
        fresh.turn(source, {}, "{}", [("fine", {})], 100).result()
        (sandbox,) = fresh.pids
        outcome = fresh.turn(source, {}, "{}", [("stop", {}), ("fine", {})], 100).result()
        assert [c.error for c in outcome.calls] == ["ToolTimeout", "ToolTimeout"], outcome
        assert "stopped answering" in outcome.calls[0].text and outcome.calls[1].text.startswith("not run")
        assert [c.text for c in fresh.turn(source, {}, "{}", [("fine", {})], 100).result().calls] == ["fine"]
        assert fresh.pids != [sandbox]


def test_a_tools_processes_together_are_held_to_the_tool_memory() -> None:
    if not host().cgroup:
        pytest.skip("no cgroup here: memory is limited per process (RLIMIT_AS), as rfteval says at start")
    source = ("import os, time\n\n"
              "def spread(*, state=None):\n"
              "    state['spread'] = 1\n"
              "    for _ in range(4):  # each far under its own 256 MB; 480 MB together\n"
              "        if os.fork() == 0:\n"
              "            b = bytearray(120 * 1024 * 1024)\n"
              "            for k in range(0, len(b), 4096):\n"
              "                b[k] = 1\n"
              "            time.sleep(30)\n"
              "            os._exit(0)\n"
              "    time.sleep(4)\n\n"
              "def fine(*, state=None):\n"
              "    return state\n")
    with ToolPool(workers=1, timeout_s=20, memory_mb=256) as small, hang_guard(180, "spread memory"):
        outcome = small.turn(source, {}, '{"n": 1}', [("spread", {}), ("fine", {})], 100).result()
        after = small.turn(source, {}, '{"n": 1}', [("fine", {})], 100).result()
    assert [c.error for c in outcome.calls] == ["ToolMemory", "ToolMemory"], outcome
    assert "256 MB" in outcome.calls[0].text and "together" in outcome.calls[0].text
    assert outcome.state is None and after.calls[0].text == '{"n": 1}'  # the next turn is charged nothing
