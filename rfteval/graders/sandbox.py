"""The python grader sandbox: each grading unit in a fresh process, inside bubblewrap, with limits for the unit.

A grader's source never runs in the rfteval process, nor in the process that frames its results. Each pool slot
starts one supervisor (`_worker.py`) inside bubblewrap: user, PID, mount, network, IPC and UTS namespaces, no
capabilities, no new privileges, a seccomp filter (seccomp.py), a read-only view of the interpreter and its
packages, a private size-limited /tmp, no home, no run directory, no host /proc; and, where rfteval can make one,
a cgroup that caps the memory and the processes of everything in it. The supervisor forks a fresh child for
every grading unit, the samples of one (model, item) (callers declare units with `grading_units`; without a
declaration every sample is its own unit), reads back only that child's results, keeps the time, and kills
everything the unit started before the next one. This process checks and bounds every reply once more.
docs/sandbox.md has the threat model and what each part guards against.

Where bubblewrap, the seccomp filter or the limits cannot be had, the pool refuses to run python graders
(SandboxUnavailable, one line saying why) unless it was made with `unsafe=True` (`--unsafe-python-graders`):
then the same supervisor runs without bubblewrap, with the environment allow-list and per-process limits only.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import marshal
import math
import os
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypeAlias, TypeVar, TypeVarTuple

import msgspec

from rfteval.data.sample import ParsedSample, rebuild_args
from rfteval.graders.base import (
    PYTHON_MEMORY,
    PYTHON_RUNTIME,
    PYTHON_SERVER,
    PYTHON_TIMEOUT,
    GradeError,
    GradeResult,
    Pair,
)

if TYPE_CHECKING:
    from rfteval.data.json_types import JSONObject
    from rfteval.data.sample import Sample
    from rfteval.graders._worker import Sent, WorkerConfig

R = TypeVar("R")
Ts = TypeVarTuple("Ts")
# What plain() makes: the built-in types marshal carries (keys too may be numbers, as in a Python dict)
PlainKey: TypeAlias = "str | int | float | bool | None"
Plain: TypeAlias = "PlainKey | list[Plain] | dict[PlainKey, Plain]"

WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
STDOUT_CAP = 64 * 1024
MESSAGE_CAP = 8000  # characters of an error message, as in _worker.py
STARTUP_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 64 << 20  # one frame from a supervisor: a batch's results, outputs capped
HEADER = struct.Struct("<Q")
RESEND = "rfteval_resend_whole"  # the wire's word for Resend (as in _worker.py)
ERROR_TYPES = frozenset({PYTHON_RUNTIME, PYTHON_TIMEOUT, PYTHON_MEMORY, PYTHON_SERVER})
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")
# What reaches grader code from rfteval's environment: locale, time zone and search path, nothing else.
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED", "PYTHONIOENCODING")
ENV_ALLOWED_PREFIXES = ("LC_",)
SANDBOX_TMP = "/tmp"
SHM_BYTES = 64 << 20
TEMPLATE_BYTES = 512 << 20  # the cgroup's room for the supervisor while it imports a source's packages
TMP_MARGIN = 64 << 20  # under a cgroup, /tmp is this much smaller than --grader-memory less /dev/shm
CHILD_SLACK = 32 << 20  # beyond the template and --grader-memory: a child's page tables and copied template pages
HEARTBEAT_S = 1.0  # the supervisor's beat (as in _worker.py): a frame at least this often, at most twice this apart
SILENCE_S = 6.0  # a few missed beats: a sandbox silent this long was stopped or is stuck, whatever the grader's limit
PREPARE_TIMEOUT_S = 60.0  # a new source's imports, before any grader code runs: nothing there can stop the supervisor
CGROUP_ROOT_ENV = "RFTEVAL_CGROUP_ROOT"  # tests only: where cgroups are mounted (a path that is not writable, say)
HOST_FACTS_ENV = "RFTEVAL_HOST_FACTS_ROOT"  # tests only: what stands for / when a refusal is explained (sysctls)
UNSAFE_HINT = ("or pass --unsafe-python-graders, which gives up the namespaces, seccomp and filesystem isolation "
               "(grader code sees this machine's files and network, and its processes can outlive a unit)")
MAX_ZERO_PROGRESS = 8  # supervisor failures in a row with no result in between before a batch gives up

_Reply = tuple[bool, list[tuple[float, str | None, str | None, str | None]]]
_decode_reply = msgspec.json.Decoder(_Reply).decode
_UNITS: contextvars.ContextVar[list[Hashable] | None] = contextvars.ContextVar("rfteval_grading_units", default=None)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be built as promised here, and unsafe mode was not asked for."""


@dataclass
class Policy:
    """Process-wide choices the command line makes: unsafe mode, and variable names that must never pass even
    if the allow-list would let them (the ones --api-key-env and --judge-api-key-env name)."""

    unsafe: bool = False
    never_pass: set[str] = field(default_factory=set)


POLICY = Policy(unsafe=os.environ.get("RFTEVAL_UNSAFE_PYTHON_GRADERS") == "1")


def configure(unsafe: bool | None = None, never_pass: Iterable[str | None] = ()) -> None:
    """Set the process-wide policy (the CLI calls this once, from its flags)."""
    if unsafe is not None:
        POLICY.unsafe = unsafe
    POLICY.never_pass.update(name for name in never_pass if name)


@contextlib.contextmanager
def grading_units(keys: Sequence[Hashable]) -> Iterator[None]:
    """Declare, for the python graders called inside, which pairs may share a process: pairs whose keys are
    equal (use (model label, item id)). Without it every sample is graded in a process of its own."""
    token = _UNITS.set(list(keys))
    try:
        yield
    finally:
        _UNITS.reset(token)


def call_in_units(keys: Sequence[Hashable], fn: Callable[[*Ts], R], *args: *Ts) -> R:
    """fn(*args) with `keys` declared as grading units (for asyncio.to_thread and other callers of a function)."""
    with grading_units(keys):
        return fn(*args)


def declared_units(n: int) -> list[Hashable] | None:
    keys = _UNITS.get()
    return keys if keys is not None and len(keys) == n else None


def worker_env() -> dict[str, str]:
    """The sandbox's environment: an allow-list (locale, time zone, PATH), never a name the policy forbids,
    one thread per numeric library, and a HOME and TMPDIR inside the unit's /tmp."""
    env = {k: v for k, v in os.environ.items()
           if (k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)) and k not in POLICY.never_pass}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update({name: "1" for name in THREAD_ENV})
    env.update(HOME=SANDBOX_TMP, TMPDIR=SANDBOX_TMP, PYTHONDONTWRITEBYTECODE="1")
    return env


def grace_s(timeout_s: float) -> float:
    """How long past the limit the supervisor waits for the child's own alarm before it kills the child."""
    return 1.0 + 0.05 * timeout_s


def plain(value: object) -> Plain:
    """JSON-like data made of built-in types only (what OpenAI's sandbox gets: JSON); others become str."""
    if value is None or type(value) is str or type(value) is int or type(value) is float or type(value) is bool:
        return value
    if isinstance(value, Mapping):
        return {_plain_key(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, str):  # subclasses (str enums too): their plain content
        return str.__str__(value)
    if isinstance(value, int):  # int subclasses (IntEnum); bool cannot be subclassed, so it was handled above
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return str(value)


def _plain_key(key: object) -> PlainKey:
    key = plain(key)
    return key if isinstance(key, (str, int, float, bool)) or key is None else str(key)


def encode(value: Sample | JSONObject) -> bytes:
    """marshal: fast, and the worker can only get plain data back out of it (a subclass or an object that
    marshal refuses goes as plain JSON-like data instead)."""
    try:
        return marshal.dumps(value)
    except ValueError:
        return marshal.dumps(plain(value))


def encode_whole(sample: Sample) -> bytes:
    """A sample as one marshal blob, decoded in the worker on its own (the collector sees one at a time)."""
    return encode(dict(sample) if type(sample) is ParsedSample else sample)  # a ParsedSample is a plain dict inside


def compact_sample(sample: Sample) -> Sent:
    """What the worker needs to have this sample: its text alone when make_sample would rebuild it from that
    (the worker runs the same make_sample, JSON parsing included: in parallel, and no parsed dict to marshal
    here); (text, tools as marshal, whether output_json is the text's parse) when it has tools or no JSON;
    else the whole sample as a marshal blob (bytes)."""
    args = rebuild_args(sample)
    if args is None:
        return encode_whole(sample)
    text, tools, parse = args
    if tools is None:
        return text if parse else (text, None, False)
    try:
        return text, marshal.dumps(tools), parse  # a blob of its own: samples share nothing in the worker
    except ValueError:
        return encode_whole(sample)


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()




@dataclass(frozen=True)
class Resend:
    """Not a result but a request: the child could not rebuild a sample sent compact (a limit set differently
    there), so the pool sends that sample again whole. It never leaves the pool."""

    reason: str


Outcome = GradeResult | Resend


def decode_reply(data: bytes, start: int, n: int) -> tuple[list[Outcome], bool]:
    """One frame from a supervisor: results for samples start.. and whether the request is done.

    The supervisor shares a sandbox with grader code and is not believed blindly: anything malformed (any
    decode error, nesting included), out of range or too long is a protocol error, never a crash here."""
    try:
        try:
            done, rows = _decode_reply(data)
        except msgspec.DecodeError:  # what msgspec refuses and json takes (a lone surrogate, escaped)
            done, rows = _reply_from_json(data)
        if start + len(rows) > n or (done and start + len(rows) != n):
            raise ValueError("wrong number of results")
        results: list[Outcome] = []
        for score, etype, message, stdout in rows:
            if etype == RESEND:
                results.append(Resend((message or "")[:MESSAGE_CAP]))
                continue
            if etype is not None:
                kind = etype if etype in ERROR_TYPES else PYTHON_RUNTIME
                result = GradeResult.failed(kind, (message or "")[:MESSAGE_CAP])
            elif not math.isfinite(score):
                raise ValueError("bad score")
            else:
                result = GradeResult(score)
            if stdout is not None:
                result.stdout = stdout[: STDOUT_CAP + 100]
            results.append(result)
        return results, done
    except Exception as exc:  # noqa: BLE001  (msgspec's errors, RecursionError, MemoryError, ValueError...)
        raise _Failure(PYTHON_SERVER, f"unreadable reply from the grader sandbox ({type(exc).__name__})") from None


def _reply_from_json(data: bytes) -> _Reply:
    """json's reading of a reply, held to the same shape as msgspec's typed decoder (nesting beyond it fails)."""
    obj = json.loads(data)
    if not (isinstance(obj, list) and len(obj) == 2 and type(obj[0]) is bool and isinstance(obj[1], list)):
        raise ValueError("not a reply")
    rows = []
    for row in obj[1]:
        if not (isinstance(row, list) and len(row) == 4 and type(row[0]) in (int, float)
                and all(v is None or type(v) is str for v in row[1:])):
            raise ValueError("not a result")
        rows.append((float(row[0]), row[1], row[2], row[3]))
    return obj[0], rows


class _Failure(Exception):
    """The supervisor died, stopped answering or garbled its reply: the sample it was on is charged."""

    def __init__(self, type: str, message: str):
        super().__init__(message)
        self.error = GradeError(type, message)


class _StartError(Exception):
    pass


# ---------------------------------------------------------------- what this host offers


class _Cgroup:
    """A cgroup for one sandbox (memory and process limits for everything in it), v1 or v2, or none.

    Its memory limit is the grader memory above what the template holds: set high while the supervisor imports a
    source's packages, then `fit` to the template's own resident memory + --grader-memory + a child's slack, so
    everything a unit's processes hold together (their /tmp and /dev/shm pages too) is held to --grader-memory."""

    def __init__(self, dirs: list[str], version: str = "v2"):
        self.dirs = dirs
        self.version = version

    @property
    def procs(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    @property
    def oom_file(self) -> str | None:
        """The file whose `oom_kill N` line counts the OOM killer's kills here."""
        if not self.dirs:
            return None
        return os.path.join(self.dirs[0], "memory.oom_control" if self.version == "v1" else "memory.events")

    @classmethod
    def make(cls, name: str, memory_bytes: int | None, pids: int) -> _Cgroup | None:
        made: list[str] = []
        parents = _cgroup_parents()
        try:
            for controller, settings in _cgroup_layout(memory_bytes, pids):
                path = os.path.join(controller, name)
                os.mkdir(path)
                made.append(path)
                for file, value in settings.items():
                    if file.startswith("memory.memsw.") and not os.path.exists(os.path.join(path, file)):
                        continue  # swap accounting off (a kernel option): swap is then not the cgroup's to give
                    with open(os.path.join(path, file), "w") as fh:
                        fh.write(value)
        except OSError:
            cls(made).remove()
            return None
        return cls(made, parents[0] if parents else "v2") if made else None

    def _read(self, name: str) -> str:
        return Path(self.dirs[0], name).read_text()

    def resident(self) -> int:
        """What the cgroup's processes hold that the kernel cannot simply drop: its usage without the file
        cache (the packages' files read at import), which reclaim takes back under the limit anyway."""
        v1 = self.version == "v1"
        usage = int(self._read("memory.usage_in_bytes" if v1 else "memory.current"))
        stat = dict(line.split() for line in self._read("memory.stat").splitlines() if line.count(" ") == 1)
        prefix = "total_" if v1 else ""
        cache = sum(int(stat.get(f"{prefix}{k}", 0)) for k in ("active_file", "inactive_file"))
        return max(0, usage - cache)

    def set_memory(self, limit: int) -> None:
        """The memory limit (and no swap beyond it). v1 wants memsw >= limit at every moment: when one order is
        refused, the other is right."""
        if self.version == "v1":
            files = ["memory.limit_in_bytes"]
            if os.path.exists(os.path.join(self.dirs[0], "memory.memsw.limit_in_bytes")):
                files.append("memory.memsw.limit_in_bytes")
        else:
            files = ["memory.max"]
        for order in (files, files[::-1]):
            try:
                for name in order:
                    with open(os.path.join(self.dirs[0], name), "w") as fh:
                        fh.write(str(limit))
                return
            except OSError:
                continue
        raise OSError(f"the sandbox's cgroup refused a memory limit of {limit} bytes")

    def fit(self, memory_bytes: int, room: int) -> int:
        """Set the limit to the template's resident memory + `room`; returns the limit."""
        limit = self.resident() + memory_bytes + room
        self.set_memory(limit)
        return limit

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this cgroup so far (memory.oom_control on v1,
        memory.events on v2; 0 where neither says)."""
        path = self.oom_file
        if path is None:
            return 0
        try:
            text = Path(path).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def remove(self) -> None:
        for path in reversed(self.dirs):
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # its last processes are still being torn down


def cgroup_root() -> str:
    return os.environ.get(CGROUP_ROOT_ENV) or "/sys/fs/cgroup"


@functools.lru_cache(maxsize=1)
def _cgroup_parents() -> tuple[str, str, str] | None:
    """('v1', memory dir, pids dir) or ('v2', dir, '') where this process may create child cgroups."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else ["unified"]:
                own[controller] = parts[2]
    base = cgroup_root()
    if "memory" in own and "pids" in own:
        memory = os.path.join(base, "memory", own["memory"].lstrip("/"))
        pids = os.path.join(base, "pids", own["pids"].lstrip("/"))
        if _writable_dir(memory) and _writable_dir(pids):
            return "v1", memory, pids
    if "unified" in own:
        for unified in (os.path.join(base, own["unified"].lstrip("/")),
                        os.path.join(base, "unified", own["unified"].lstrip("/"))):
            try:
                enabled = Path(unified, "cgroup.subtree_control").read_text().split()
            except OSError:
                continue
            if {"memory", "pids"} <= set(enabled) and _writable_dir(unified):
                return "v2", unified, ""
    return None


def _writable_dir(path: str) -> bool:
    """A cgroup directory this process may create children in: os.access says yes to root on any directory, so
    a read-only mount (Docker's default /sys/fs/cgroup) is checked for too."""
    if not (os.path.isdir(path) and os.access(path, os.W_OK)):
        return False
    try:
        return not os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        return False


def _cgroup_layout(memory_bytes: int | None, pids: int) -> list[tuple[str, dict[str, str]]]:
    parents = _cgroup_parents()
    if parents is None:
        raise OSError("no cgroup")
    version, first, second = parents
    if version == "v1":
        memory = {"memory.limit_in_bytes": str(memory_bytes)} if memory_bytes else {}
        if memory_bytes:
            memory["memory.memsw.limit_in_bytes"] = str(memory_bytes)  # no escape into swap
        return [(first, memory), (second, {"pids.max": str(pids)})]
    settings = {"pids.max": str(pids)}
    if memory_bytes:
        settings.update({"memory.max": str(memory_bytes), "memory.swap.max": "0"})
    return [(first, settings)]


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes:
    from rfteval.graders.seccomp import compile_filter

    return compile_filter()


def _ro_paths() -> list[str]:
    """What the sandbox sees, read-only: the interpreter, its packages and rfteval's own package, nothing of
    the working tree, home or run directory around them."""
    import rfteval

    wanted = [sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              os.path.dirname(os.path.abspath(rfteval.__file__))]
    wanted += [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)]
    out: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted} | {os.path.abspath(p) for p in wanted}):
        if not os.path.isdir(path) or path == "/":
            continue
        if any(path == o or path.startswith(o.rstrip("/") + "/") for o in out):
            continue
        out.append(path)
    return out


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
             "/etc/mime.types")


OOM_FILE = "/.rfteval-oom"  # inside the sandbox: the cgroup's OOM-kill count, bound read-only


def tmp_bytes(settings: _Settings, cgroup: bool) -> int:
    """The size of the sandbox's /tmp: --disk, and under a cgroup (where its pages count against --grader-memory)
    at most --grader-memory less /dev/shm and TMP_MARGIN, so that filling /tmp is a full disk (ENOSPC), not an
    OOM kill of whatever process the kernel picks."""
    size = settings.disk_mb << 20
    if cgroup and settings.memory_mb:
        size = min(size, max(16 << 20, (settings.memory_mb << 20) - SHM_BYTES - TMP_MARGIN))
    return size


def bwrap_args(tmp_bytes: int, seccomp_fd: int, oom_file: str | None = None) -> list[str]:
    """bubblewrap's arguments: every namespace, no capabilities, a read-only root of system directories, the
    interpreter and packages; a size-limited /tmp and /dev/shm; a fresh /proc of the sandbox's own processes;
    the cgroup's OOM-kill count (read-only: the supervisor charges a kill to the unit it happened in)."""
    args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns",
            "--cap-drop", "ALL"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    under_tmp = []  # an interpreter or checkout under /tmp (a CI clone, say): bound after the private /tmp is made
    for path in _ro_paths():
        if any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS if not os.path.islink(d)):
            continue
        if path == SANDBOX_TMP or path.startswith(SANDBOX_TMP.rstrip("/") + "/"):
            under_tmp += ["--ro-bind", path, path]
        else:
            args += ["--ro-bind", path, path]
    if oom_file is not None:
        args += ["--ro-bind", oom_file, OOM_FILE]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--remount-ro", "/dev", "--size", str(tmp_bytes), "--tmpfs", SANDBOX_TMP, *under_tmp,
             "--remount-ro", "/", "--chdir", SANDBOX_TMP, "--seccomp", str(seccomp_fd)]
    return args


@dataclass(frozen=True)
class Host:
    """What this host gives the sandbox: None in `refused` when the whole sandbox can be built."""

    bwrap: str | None
    cgroup: bool
    refused: str | None


_HOST: Host | None = None
_HOST_LOCK = threading.Lock()


def host() -> Host:
    """Checked once per process: bubblewrap runs with every namespace and the seccomp filter, and the unit's
    processes can be limited (a cgroup, or RLIMIT_NPROC, which binds only a user other than root)."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = _probe_host()
        return _HOST


def _probe_host() -> Host:
    """Each step the sandbox needs, in order; the first that fails is the one line's reason, with its remedy."""
    if not sys.platform.startswith("linux"):
        return Host(None, False, f"the python grader sandbox needs Linux (this is {sys.platform})")
    bwrap = shutil.which("bwrap")
    cgroup = _cgroup_parents() is not None
    if bwrap is None:
        return Host(None, cgroup, "bubblewrap (bwrap) is not installed: install it as root with `apt-get install "
                                  "bubblewrap` (or `make sandbox`)")
    try:
        program = _seccomp_program()
    except Exception as exc:  # noqa: BLE001
        return Host(bwrap, cgroup, f"seccomp is unavailable: the filter could not be built ({exc}); install "
                                   "libseccomp2 as root (`apt-get install libseccomp2`)")
    if os.getuid() == 0 and not cgroup:
        return Host(bwrap, cgroup, no_cgroup_reason())
    read_fd, write_fd = os.pipe()
    os.write(write_fd, program)
    os.close(write_fd)
    try:
        proc = subprocess.run([bwrap, *bwrap_args(1 << 20, read_fd), "--", sys.executable, "-I", "-c", "pass"],
                              pass_fds=(read_fd,), env=worker_env(), capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Host(bwrap, cgroup, f"bubblewrap could not start: {exc}")
    finally:
        os.close(read_fd)
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        return Host(bwrap, cgroup, refusal_reason(text[-1] if text else f"exit code {proc.returncode}",
                                                  host_facts()))
    return Host(bwrap, cgroup, None)


@dataclass(frozen=True)
class HostFacts:
    """What decides which remedy a refusal gets: the sysctls that restrict user namespaces, and a container."""

    apparmor_restricts_userns: bool = False  # Ubuntu 23.10+: kernel.apparmor_restrict_unprivileged_userns=1
    userns_clone_off: bool = False  # Debian's older kernels: kernel.unprivileged_userns_clone=0
    no_user_namespaces: bool = False  # user.max_user_namespaces=0 (RHEL-likes' switch)
    container: bool = False  # Docker (/.dockerenv) or podman (/run/.containerenv)


def host_facts() -> HostFacts:
    root = os.environ.get(HOST_FACTS_ENV) or "/"

    def sysctl(name: str) -> str | None:
        try:
            return Path(root, "proc", "sys", *name.split(".")).read_text().strip()
        except OSError:
            return None

    return HostFacts(apparmor_restricts_userns=sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1",
                     userns_clone_off=sysctl("kernel.unprivileged_userns_clone") == "0",
                     no_user_namespaces=sysctl("user.max_user_namespaces") == "0",
                     container=any(os.path.exists(os.path.join(root, p)) for p in (".dockerenv", "run/.containerenv")))


DOCKER_REMEDY = ("run the container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` "
                 "(Docker's default seccomp and AppArmor profiles refuse new namespaces and mounts)")
APPARMOR_REMEDY = ("allow them with `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or load an "
                   "AppArmor profile that lets /usr/bin/bwrap create them (docs/sandbox.md, \"CI hosts\")")


def refusal_reason(message: str, facts: HostFacts) -> str:
    """One line for bubblewrap's refusal (`message`, its last line of stderr): which step failed and the remedy
    for this host. A pure function of the message and the host's facts, so each cause is tested on its own."""
    said = f"(bwrap: {message.removeprefix('bwrap: ').strip()[:300]})"
    low = message.lower()
    if "seccomp" in low:
        return (f"seccomp is unavailable: the kernel refused the sandbox's seccomp filter {said}; run on a kernel "
                "with CONFIG_SECCOMP_FILTER" + (f", and {DOCKER_REMEDY}" if facts.container else ""))
    namespace = any(word in low for word in ("namespace", "uid map", "uid_map", "gid map", "setgroups"))
    if namespace:
        if facts.apparmor_restricts_userns:
            return f"user namespaces are refused by AppArmor (Ubuntu 24.04's default) {said}: {APPARMOR_REMEDY}"
        if facts.userns_clone_off:
            return (f"user namespaces are refused by the kernel {said}: allow them with "
                    "`sudo sysctl -w kernel.unprivileged_userns_clone=1`")
        if facts.no_user_namespaces:
            return (f"user namespaces are refused by the kernel {said}: allow them with "
                    "`sudo sysctl -w user.max_user_namespaces=15000`")
        if facts.container:
            return f"user namespaces are refused in this container {said}: {DOCKER_REMEDY}"
        return (f"user namespaces are refused by the kernel or a security module {said}: allow unprivileged user "
                "namespaces (docs/sandbox.md, \"CI hosts\")")
    if any(word in low for word in ("mount", "pivot_root", "remount", "make / slave")):
        where = "in this container" if facts.container else "on this host"
        remedy = DOCKER_REMEDY if facts.container else "allow mounts in new user namespaces (docs/sandbox.md)"
        return f"bubblewrap cannot mount the sandbox's filesystem {where} {said}: {remedy}"
    return f"bubblewrap refused here {said}"


def no_cgroup_reason() -> str:
    """Root with no cgroup it may create: RLIMIT_NPROC does not bind root, so a unit's processes are unbounded."""
    base = cgroup_root()
    return (f"no writable cgroup under {base} (memory and pids controllers), and as root the unit's process "
            "count cannot be limited otherwise (RLIMIT_NPROC does not bind root): run rfteval as a normal user "
            "(RLIMIT_NPROC binds then; in Docker `--user 1000`), or give root a writable, delegated cgroup "
            "(`systemd-run --scope -p Delegate=yes rfteval ...`)")


def sandbox_problem() -> str | None:
    """None when python graders may run: the sandbox holds here, or the policy is unsafe. Else one line."""
    if POLICY.unsafe:
        return None
    refused = host().refused
    return None if refused is None else f"{refused}; {UNSAFE_HINT}"


_NOTED: set[str] = set()


def note_once(text: str) -> None:
    """One line on stderr, once per process (logging's last resort prints it when no handler is configured)."""
    if text not in _NOTED:
        _NOTED.add(text)
        import logging

        logging.getLogger("rfteval.sandbox").warning(text)


# ---------------------------------------------------------------- one supervisor


@dataclass
class _Settings:
    """What sandboxes need from their pool (not the pool itself, so an unclosed pool can still be collected)."""

    timeout_s: float
    memory_mb: int | None
    unsafe: bool
    disk_mb: int = 1024
    processes: int = 128
    lock: threading.Lock = field(default_factory=threading.Lock)
    isolation: str | None = None


class _Sandbox:
    """One supervisor process (inside bubblewrap unless unsafe) and its cgroup; used by one pool thread at a time."""

    counter = 0

    def __init__(self, settings: _Settings):
        self.settings = settings
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: str | None = None
        self.cgroup: _Cgroup | None = None
        self.pid: int | None = None
        self.sources: set[str] = set()
        self.buffer = bytearray()
        self.oom_seen = 0  # the cgroup's OOM kills already accounted for
        self.memory_limit: int | None = None  # the cgroup's limit once fitted (for tests and diagnostics)

    def start(self) -> None:
        s = self.settings
        found = host()
        sandboxed = found.refused is None
        if not sandboxed and not s.unsafe:
            raise SandboxUnavailable(sandbox_problem() or found.refused)
        self.dir = tempfile.mkdtemp(prefix="rfteval-grader-")
        workdir = SANDBOX_TMP if sandboxed else os.path.join(self.dir, "tmp")
        os.makedirs(workdir, exist_ok=True)
        if found.cgroup:
            _Sandbox.counter += 1
            # room for the template's imports until the first source is prepared, when it is fitted (_prepare)
            memory = (s.memory_mb << 20) + TEMPLATE_BYTES if s.memory_mb else None
            self.cgroup = _Cgroup.make(f"rfteval-{os.getpid()}-{_Sandbox.counter}", memory, s.processes)
            if self.cgroup is None and not s.unsafe:
                self.stop()
                raise SandboxUnavailable(f"could not create the sandbox's cgroup under {cgroup_root()}; "
                                         f"{UNSAFE_HINT}")
        if self.cgroup is None and s.memory_mb:
            note_once(f"rfteval: no cgroup here, so --grader-memory {s.memory_mb} MB is a limit per process "
                      "(RLIMIT_AS): a grader that forks can hold more than that in all")
        oom_host = self.cgroup.oom_file if self.cgroup is not None and s.memory_mb else None
        config: WorkerConfig = {"timeout_s": s.timeout_s, "grace_s": grace_s(s.timeout_s), "memory_mb": s.memory_mb,
                  "stdout_cap": STDOUT_CAP, "workdir": workdir, "pid_namespace": sandboxed,
                  "outdir": "/dev/shm" if sandboxed else workdir,
                  "file_bytes": s.disk_mb << 20, "nproc": None if found.cgroup else s.processes,
                  "oom_file": (OOM_FILE if sandboxed else oom_host) if oom_host else None}
        env = worker_env()
        if not sandboxed:
            env.update(HOME=workdir, TMPDIR=workdir)
        command = [sys.executable, "-I", str(WORKER_SCRIPT), json.dumps(config)]
        pass_fds: tuple[int, ...] = ()
        read_fd = -1
        if sandboxed:
            read_fd, write_fd = os.pipe()
            os.write(write_fd, _seccomp_program())
            os.close(write_fd)
            pass_fds = (read_fd,)
            command = [found.bwrap or "bwrap", *bwrap_args(tmp_bytes(s, self.cgroup is not None), read_fd, oom_host),
                       "--", *command]
        if self.cgroup is not None:  # the shell joins the cgroup, then becomes bwrap: nothing starts outside
            procs = self.cgroup.procs
            script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; '
                      'exec "$@"')
            command = ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *command]
        try:
            with open(os.path.join(self.dir, ".startup"), "wb") as err:
                self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                             bufsize=0, cwd=workdir if not sandboxed else self.dir, env=env,
                                             pass_fds=pass_fds, start_new_session=True)
        finally:
            if read_fd >= 0:
                os.close(read_fd)
        try:
            ready = json.loads(self.receive(STARTUP_TIMEOUT_S)[:4096])
            if not ready.get("ready"):
                raise ValueError("no ready message")
        except (_Failure, ValueError) as exc:
            detail = self.startup_log or str(exc)
            self.stop()
            raise _StartError(f"the grader sandbox did not start: {detail.strip()[-2000:]}") from None
        self.pid = int(ready["pid"])
        self.oom_seen = self.cgroup.oom_kills() if self.cgroup is not None else 0
        text = ("bubblewrap: user, PID, mount, network and IPC namespaces, seccomp, read-only packages, private /tmp"
                + (", cgroup memory and process limits" if self.cgroup else ", RLIMIT_AS and RLIMIT_NPROC limits")
                if sandboxed else f"unsafe: no sandbox ({found.refused})")
        with s.lock:
            s.isolation = text

    @property
    def startup_log(self) -> str | None:
        if not self.dir:
            return None
        try:
            with open(os.path.join(self.dir, ".startup"), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - STDOUT_CAP))
                return fh.read().decode("utf-8", "replace") or None
        except OSError:
            return None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap, hence its PID namespace: everything in the sandbox
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.sources.clear()
        self.pid = None
        self.buffer = bytearray()

    def send(self, payload: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        written = os.writev(fd, [HEADER.pack(len(payload)), payload])
        if written < HEADER.size + len(payload):
            view = memoryview(HEADER.pack(len(payload)) + payload)[written:]
            while view:
                view = view[os.write(fd, view):]

    def receive(self, silence_s: float) -> bytes:
        """One frame; _Failure when the supervisor ends, garbles, or says nothing for `silence_s` (it sends a
        heartbeat every second while a unit runs, so silence means it was stopped or is stuck)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = self.buffer
        last = time.monotonic()
        while True:
            if len(buf) >= HEADER.size:
                need = HEADER.unpack_from(buf)[0]
                if need > MAX_REPLY_BYTES:
                    raise _Failure(PYTHON_SERVER, "the grader sandbox sent an oversized reply")
                if len(buf) >= HEADER.size + need:
                    frame = bytes(buf[HEADER.size:HEADER.size + need])
                    del buf[:HEADER.size + need]
                    return frame
            ready = select.select([fd], [], [], max(0.0, last + silence_s - time.monotonic()))[0]
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    try:
                        code = self.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        code = None
                    raise _Failure(PYTHON_RUNTIME, f"the grader's sandbox ended ({exit_description(code)}) while "
                                                   "grading this sample")
                buf += chunk
                last = time.monotonic()
                continue
            raise _Failure(PYTHON_TIMEOUT, f"the grader's sandbox sent no heartbeat for {silence_s:g} s (its "
                                           "supervisor was stopped or is stuck) while grading this sample; it "
                                           "was killed")

    def memory_killed(self, result: GradeResult) -> GradeResult:
        """The sample a supervisor died on, as a memory error naming the limit when the cgroup's OOM killer has
        killed since the last kill accounted for: the kernel may pick the supervisor itself when /tmp pages and
        many small processes fill the unit's limit. (A child's OOM kill the supervisor charges itself.)"""
        error = result.error
        if error is None or self.cgroup is None or error.type not in (PYTHON_RUNTIME, PYTHON_SERVER):
            return result
        kills = self.cgroup.oom_kills()
        if kills <= self.oom_seen:
            return result
        self.oom_seen = kills
        what = "loading the grader source" if "loading the grader source" in error.message else "grade()"
        limit = f"{self.settings.memory_mb} MB" if self.settings.memory_mb else "the sandbox's memory"
        return GradeResult.failed(PYTHON_MEMORY, f"{what} ran out of memory (limit {limit} for the unit and every "
                                                 "process it started): the kernel's OOM killer ended it",
                                  stdout=result.stdout)

    def prepare(self, key: str, source: str) -> None:
        """Have the supervisor import what a new source imports, then fit the cgroup's memory limit above the
        template it made: --grader-memory is then what a unit's processes may hold together, not the template."""
        memory = (self.settings.memory_mb or 0) << 20
        if self.cgroup is not None and memory:
            try:
                self.cgroup.set_memory(self.cgroup.resident() + memory + TEMPLATE_BYTES)  # room for the imports
            except (OSError, ValueError):
                pass  # the limit from before stays: tighter, never looser
        self.send(marshal.dumps(("prepare", key, source)))
        self.sources.add(key)
        finished = False
        while not finished:
            _, finished = decode_reply(self.receive(PREPARE_TIMEOUT_S), 0, 0)
        if self.cgroup is not None and memory:
            try:
                self.memory_limit = self.cgroup.fit(memory, CHILD_SLACK)
            except (OSError, ValueError) as exc:
                raise _Failure(PYTHON_SERVER, f"the sandbox's memory limit could not be set ({exc})") from None

    def request(self, key: str, source: str, units: list[tuple[bytes, list[Sent]]]) -> bytes:
        sent_source = None if key in self.sources else source
        self.sources.add(key)
        return marshal.dumps(("grade", key, sent_source, units))


def exit_description(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"




def _stop_all(sandboxes: list[_Sandbox], lock: threading.Lock) -> None:
    with lock:
        todo = list(sandboxes)
        sandboxes.clear()
    for box in todo:
        box.stop()


@dataclass(eq=False)
class _Task:
    """One batch of whole units for one pool thread; `units` None is a request to start a sandbox (a probe)."""

    key: str
    source: str
    pairs: list[Pair]
    units: list[list[int]] | None  # indices into pairs, one list per unit
    whole: bool = False
    future: Future[list[Outcome]] = field(default_factory=Future)


def default_workers() -> int:
    """One sandbox more than there are cores: a sandbox's core idles while its supervisor waits for rfteval's next
    batch and between a child's exit and the next fork, and the spare one fills those gaps. Units in different
    sandboxes share nothing (separate namespaces, supervisors and cgroups), so this costs memory, not isolation."""
    return (os.cpu_count() or 1) + 1


def group_units(pairs: Sequence[Pair], keys: Sequence[Hashable] | None) -> list[list[int]]:
    """Indices of `pairs` by grading unit, units in order of first appearance: with no keys every pair is its own
    unit; with keys, pairs of one key and one item object share a unit."""
    if keys is None:
        return [[i] for i in range(len(pairs))]
    groups: dict[tuple[Hashable, int], list[int]] = {}
    for i, ((_, item), key) in enumerate(zip(pairs, keys, strict=True)):
        groups.setdefault((key, id(item)), []).append(i)
    return list(groups.values())


class WorkerPool:
    """Thread-safe: grade() may be called from many threads at once; each call's units spread over sandboxes.

    One pool thread per sandbox feeds it batches of whole units. Sandboxes start lazily and live until close();
    the grader processes inside them live for one unit each.
    """

    def __init__(self, workers: int | None = None, timeout_s: float = 120.0, memory_mb: int = 2048,
                 batch_size: int = 256, *, unsafe: bool | None = None, disk_mb: int = 1024, processes: int = 128):
        self.workers = workers or default_workers()
        if self.workers < 1 or batch_size < 1 or timeout_s <= 0:
            raise ValueError("workers, batch_size and timeout_s must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = memory_mb
        self.batch_size = batch_size
        self.unsafe = POLICY.unsafe if unsafe is None else unsafe
        self._settings = _Settings(self.timeout_s, memory_mb, self.unsafe, disk_mb, processes)
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._all: list[_Sandbox] = []
        self._keys: dict[str, str] = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_all, self._all, self._lock)

    # -- public

    @property
    def isolation(self) -> str:
        """What holds grader code here: "bubblewrap: ..." or "unsafe: ..."; raises SandboxUnavailable when
        neither may run. Starts a sandbox when none has started yet."""
        if self._settings.isolation is None:
            try:
                self._submit(_Task("", "", [], None)).result()
            except _StartError as exc:
                return f"not started: {exc}"
        return self._settings.isolation or "not started"

    def grade(self, source: str, pairs: Sequence[Pair], units: Sequence[Hashable] | None = None) -> list[GradeResult]:
        """One result per (sample, item), in order. Never raises for what the grader does; raises
        SandboxUnavailable when the sandbox cannot be built here and the pool is not unsafe.
        `units`: one key per pair (see grading_units); pairs with equal keys may share a process."""
        pairs = list(pairs)
        if not pairs:
            return []
        if not self.unsafe and host().refused is not None:
            raise SandboxUnavailable(f"{host().refused}; {UNSAFE_HINT}")
        key = self._key(source)
        if units is None:
            units = declared_units(len(pairs))
        results = self._grade(key, source, pairs, group_units(pairs, units), whole=False)
        again = [i for i, r in enumerate(results) if isinstance(r, Resend)]
        if again:
            subset = [pairs[i] for i in again]
            redone = self._grade(key, source, subset, [[i] for i in range(len(subset))], whole=True)
            for i, result in zip(again, redone, strict=True):
                results[i] = result
        return [r if isinstance(r, GradeResult)  # a child asks again only for compact samples: never here
                else GradeResult.failed(PYTHON_SERVER, "the grader process refused the sample, sent whole")
                for r in results]

    def _grade(self, key: str, source: str, pairs: list[Pair], units: list[list[int]],
               whole: bool) -> list[Outcome]:
        size = max(1, min(self.batch_size, -(-len(pairs) // self.workers)))
        tasks: list[_Task] = []
        batch: list[list[int]] = []
        count = 0
        for unit in units:
            if batch and count + len(unit) > size:
                tasks.append(_Task(key, source, pairs, batch, whole))
                batch, count = [], 0
            batch.append(unit)
            count += len(unit)
        if batch:
            tasks.append(_Task(key, source, pairs, batch, whole))
        futures = [self._submit(task) for task in tasks]
        results: list[Outcome] = [None] * len(pairs)  # type: ignore[list-item]
        try:
            for task, future in zip(tasks, futures, strict=True):
                flat = [i for unit in task.units or [] for i in unit]
                for i, result in zip(flat, future.result(), strict=True):
                    results[i] = result
        except CancelledError:
            raise RuntimeError("the python worker pool was closed while grading") from None
        return results

    def close(self) -> None:
        """Finish the batches being graded, cancel the rest, stop every sandbox."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.future.cancel()
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """Host process ids of the running sandboxes (bubblewrap or the supervisor; for diagnostics and tests)."""
        with self._lock:
            return [box.proc.pid for box in self._all if box.proc is not None]

    # -- internals

    def _submit(self, task: _Task) -> Future[list[Outcome]]:
        with self._lock:
            if self._closed:
                raise RuntimeError("the python worker pool is closed")
            if not self._threads:
                for n in range(self.workers):
                    thread = threading.Thread(target=self._serve, name=f"rfteval-python-{n}", daemon=True)
                    self._threads.append(thread)
                    thread.start()
            self._queue.put(task)
        return task.future

    def _key(self, source: str) -> str:
        key = self._keys.get(source)
        if key is None:
            if len(self._keys) > 64:
                self._keys.clear()
            key = self._keys[source] = source_key(source)
        return key

    def _serve(self) -> None:
        """A pool thread: owns one sandbox, grades the batches it takes until told to stop."""
        box = _Sandbox(self._settings)
        with self._lock:
            self._all.append(box)
        while True:
            task = self._queue.get()
            if task is None:
                return
            if not task.future.set_running_or_notify_cancel():
                continue
            try:
                if task.units is None:
                    if box.proc is None:
                        box.start()
                    task.future.set_result([])
                    continue
                task.future.set_result(self._run_task(box, task))
            except BaseException as exc:  # noqa: BLE001  (a bug here must reach the caller, not kill the thread)
                task.future.set_exception(exc)

    def _run_task(self, box: _Sandbox, task: _Task) -> list[Outcome]:
        """Grade one batch of units; a supervisor that dies, hangs or garbles costs only the sample it was on
        (the first without a result), and the rest go to a fresh sandbox. Results in the batch's flat order."""
        assert task.units is not None
        pack = encode_whole if task.whole else compact_sample
        flat = [i for unit in task.units for i in unit]
        encoded_items: dict[int, bytes] = {}
        units: list[tuple[int, bytes, list[Sent]]] = []  # (flat start, item, samples)
        pos = 0
        for unit in task.units:
            item = task.pairs[unit[0]][1]
            blob = encoded_items.get(id(item))
            if blob is None:
                blob = encoded_items[id(item)] = encode(item)
            units.append((pos, blob, [pack(task.pairs[i][0]) for i in unit]))
            pos += len(unit)
        results: list[Outcome] = []
        failures = 0
        while len(results) < len(flat):
            done = len(results)
            remaining = []
            for start, blob, samples in units:
                end = start + len(samples)
                if end > done:
                    remaining.append((blob, samples[max(0, done - start):]))
            try:
                if box.proc is None:
                    box.start()
                elif box.cgroup is not None:  # OOM kills of earlier batches are theirs (a helper's, say)
                    box.oom_seen = box.cgroup.oom_kills()
                if task.key not in box.sources:
                    box.prepare(task.key, task.source)
                box.send(box.request(task.key, task.source, remaining))
                finished = False
                while not finished:
                    part, finished = decode_reply(box.receive(SILENCE_S), len(results), len(flat))
                    results += part
                    if box.cgroup is not None and any(isinstance(r, GradeResult) and r.error is not None
                                                      and r.error.type == PYTHON_MEMORY for r in part):
                        box.oom_seen = box.cgroup.oom_kills()  # the supervisor charged those kills already
                    if part:
                        failures = 0
            except _StartError as exc:
                results += [GradeResult.failed(PYTHON_SERVER, str(exc)) for _ in range(len(flat) - len(results))]
                break
            except _Failure as failure:
                failed = box.memory_killed(GradeResult.failed(failure.error.type, failure.error.message))
                box.stop()
                results.append(failed)
                failures += 1
                if failures >= MAX_ZERO_PROGRESS:
                    results += [GradeResult.failed(failure.error.type, failure.error.message)
                                for _ in range(len(flat) - len(results))]
            except OSError:  # the request pipe broke: the supervisor is gone
                box.stop()
                results.append(GradeResult.failed(PYTHON_RUNTIME,
                                                  "the grader's sandbox ended while grading this sample"))
                failures += 1
        return results
